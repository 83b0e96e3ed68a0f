"""The two-device rows as a user calls them: ReplicaExchange 4.2M chains (32 x 131072, 20 + 100,
cheap 2-D) and PatternSearch 1M walkers x 20 (XLA form, Rastrigin-30), each on 1 and on 2 devices:
nine second calls per device count, alternated, with ``result.x`` and ``result.fun`` read back;
the medians of the wall clock, ``run_seconds`` and ``loop_seconds``, and the ratios.

    PYTHONPATH=src python3 benchmarks/two_devices.py            # a two-GPU machine: both rows
    PYTHONPATH=src python3 benchmarks/two_devices.py ps         # one row
    XLA_FLAGS=--xla_force_host_platform_device_count=2 PYTHONPATH=src python3 benchmarks/two_devices.py --quick --calls 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pattern_search as bench  # noqa: E402
from user_latency import sphere2  # noqa: E402

import multiwalk as mw  # noqa: E402


def rows(quick: bool) -> dict[str, tuple[mw.Problem, mw.Solver]]:
    """The rows' problems and solvers; ``quick``: small sizes (a check of the script on a CPU)."""
    return {
        "re": (mw.Problem(objective=sphere2, lower=[-5.0, -5.0], upper=[5.0, 5.0]),
               mw.ReplicaExchange(nbeta=32, nseq=1024 if quick else 131072, nburn=20, niter=100)),
        "ps": (bench.make_problem(mw, "rastrigin", 30),
               mw.PatternSearch(n_walkers=8192 if quick else 1 << 20, iterations=20, kernel="xla")),
    }


def measure(problem: mw.Problem, solver: mw.Solver, calls: int) -> str:
    """One row: ``calls`` second calls on 1 and on 2 devices, alternated; a line of medians (ms)."""
    wall: dict[int, list[float]] = {1: [], 2: []}
    run: dict[int, list[float]] = {1: [], 2: []}
    loop: dict[int, list[float]] = {1: [], 2: []}
    for k in (1, 2):  # compiles, then a first call with the loop's timing known
        for _ in range(2):
            mw.solve(problem, solver, progress=False, devices=k)
    for _ in range(calls):
        for k in (1, 2):
            t0 = time.perf_counter()
            r = mw.solve(problem, solver, progress=False, devices=k)
            np.asarray(r.x), np.asarray(r.fun)
            wall[k].append(1e3 * (time.perf_counter() - t0))
            run[k].append(1e3 * r.stats["run_seconds"])
            loop[k].append(1e3 * r.stats["loop_seconds"])
    w, rs, ls = ({k: statistics.median(v[k]) for k in v} for v in (wall, run, loop))
    return (f"wall 1 device {w[1]:.2f} ms, 2 devices {w[2]:.2f} ms: {w[1] / w[2]:.3f}x | run_seconds {rs[1]:.2f} / "
            f"{rs[2]:.2f} ms ({rs[1] / rs[2]:.3f}x) | loop_seconds {ls[1]:.2f} / {ls[2]:.2f} ms | fun {float(r.fun):.6g}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows", nargs="*", default=["re", "ps"], help="re, ps (default: both)")
    p.add_argument("--calls", type=int, default=9, help="second calls per device count (default 9)")
    p.add_argument("--quick", action="store_true", help="small sizes: a check of the script on a CPU")
    args = p.parse_args()
    import jax

    if jax.device_count() < 2:
        raise SystemExit(f"needs 2 devices, this machine has {jax.device_count()}")
    table = rows(args.quick)
    for name in args.rows:
        print(f"{name}: {measure(*table[name], args.calls)}", flush=True)


if __name__ == "__main__":
    main()
