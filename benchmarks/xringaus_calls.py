#!/usr/bin/env python
"""The xringaus fit's calls as a user waits for them, one process: a first call, or a new process's.

``--mode fresh``: the first call (compiling, when ``MULTIWALK_CACHE_DIR`` names an empty folder),
then four more calls in the same process (the median of three of them, and the run of the last);
``--mode warm``: only the first call, for a new process on a cache an earlier one filled.  The
problem is built and the device started before the clock (``benchmarks/gpu_timeline.py``'s
xringaus workload: 32 x 16 chains, 400 + 1000 iterations, 345 visibilities + 217 closure phases).
One line is printed.  To compare two versions of the code, alternate processes on their own cache
folders, e.g.::

    A=$(mktemp -d); B=$(mktemp -d)
    PYTHONPATH=old/src MULTIWALK_CACHE_DIR=$A python3 benchmarks/xringaus_calls.py --mode fresh
    PYTHONPATH=src     MULTIWALK_CACHE_DIR=$B python3 benchmarks/xringaus_calls.py --mode fresh
    PYTHONPATH=old/src MULTIWALK_CACHE_DIR=$A python3 benchmarks/xringaus_calls.py --mode warm
    PYTHONPATH=src     MULTIWALK_CACHE_DIR=$B python3 benchmarks/xringaus_calls.py --mode warm

``--traced-per-program``: the model traced by every program that calls it, as before
``multiwalk.traced_once`` (for its A/B in one version of the code; give it a cache folder of its
own: its programs carry other source locations, and JAX's persistent cache keys differ).
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["fresh", "warm"], required=True)
    p.add_argument("--kernel", default="auto", help="ReplicaExchange(kernel=...)")
    p.add_argument("--metropolis-unroll", type=int, default=None, help="ReplicaExchange(metropolis_unroll=...)")
    p.add_argument("--traced-per-program", action="store_true", help="trace the model in every program")
    p.add_argument("--quick", action="store_true", help="4 + 10 iterations: a check of the script on a CPU")
    args = p.parse_args()

    import jax
    from gpu_timeline import workload

    import multiwalk as mw

    problem, _, options = workload("xringaus")
    if args.traced_per_program:
        problem._traced = None
    nburn, niter = (4, 10) if args.quick else (400, 1000)
    solver = mw.ReplicaExchange(nbeta=32, nseq=16, nburn=nburn, niter=niter, kernel=args.kernel,
                                metropolis_unroll=args.metropolis_unroll)
    jax.numpy.zeros(1).block_until_ready()  # the device started before the clock

    def call() -> tuple[float, object]:
        t0 = time.perf_counter()
        result = mw.solve(problem, solver, progress=False, **options)
        np.asarray(result.x), np.asarray(result.fun)
        return time.perf_counter() - t0, result

    first, r1 = call()
    line = (f"{args.mode}: first call {first:.2f} s (compile_seconds {r1.stats['compile_seconds']:.2f}, "
            f"run {r1.stats['run_seconds'] * 1e3:.0f} ms)")
    if args.mode == "fresh":
        walls = [call()[0] for _ in range(3)]
        _, r = call()
        line += (f"; second calls: median {1e3 * statistics.median(walls):.0f} ms, run "
                 f"{1e3 * r.stats['run_seconds']:.0f} ms; best chi2 {float(np.min(r.fun)):.7g}")
    print(f"{line}; device {jax.devices()[0].device_kind}; process {time.perf_counter() - T0:.2f} s", flush=True)


if __name__ == "__main__":
    main()
