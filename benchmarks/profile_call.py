"""Where a user's call spends its wall clock: one workload called twice through ``mw.solve`` (the
first compiles), the second under cProfile, with the time to read ``result.x`` back measured
apart.  A diagnostic, not a result: the figures of record are ``benchmarks/user_latency.py``'s.

    PYTHONPATH=src python3 benchmarks/profile_call.py re_4m --devices 1 2 --top 25
    PYTHONPATH=src python3 benchmarks/profile_call.py ps_1m --devices 1 2

Workloads: ``re_4m`` (ReplicaExchange 32 x 131072, 20+100, cheap 2-D), ``ps_1m`` (PatternSearch
1M walkers x 20, XLA form, Rastrigin-30), ``lbfgs_1e7`` (L-BFGS, Ext. Rosenbrock n = 1e7),
``ps_15k`` (PatternSearch 15360 x 20, Ackley-20), ``re_default`` (32 x 14, 300+500).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))



def workload(name: str) -> tuple[Any, Any, dict[str, Any]]:
    """``(problem, solver, solve options)`` of a named workload."""
    import multiwalk as mw

    if name in ("re_4m", "re_default"):
        nseq, nburn, niter = (131072, 20, 100) if name == "re_4m" else (14, 300, 500)
        from user_latency import sphere2  # the table's cheap 2-D objective

        return (mw.Problem(objective=sphere2, lower=[-5.0, -5.0], upper=[5.0, 5.0]),
                mw.ReplicaExchange(nbeta=32, nseq=nseq, nburn=nburn, niter=niter), {})
    if name in ("ps_1m", "ps_15k"):
        import pattern_search as bench

        if name == "ps_1m":
            return bench.make_problem(mw, "rastrigin", 30), mw.PatternSearch(n_walkers=1 << 20, iterations=20,
                                                                            kernel="xla"), {}
        return bench.make_problem(mw, "ackley", 20), mw.PatternSearch(n_walkers=15360, iterations=20), {}
    if name == "lbfgs_1e7":
        import jax

        jax.config.update("jax_enable_x64", True)
        import lbfgs as bench

        from multiwalk.functions import cute

        n = 10_000_000
        problem = mw.Problem(objective=cute.extended_rosenbrock, x0=cute.start("extended_rosenbrock", n),
                             dtype="float64")
        return problem, mw.LBFGS(m=bench.M, eps=bench.EPS), {}
    raise SystemExit(f"unknown workload {name}")


def timed(problem: Any, solver: Any, options: dict[str, Any], devices: Any) -> tuple[float, float, Any]:
    """(seconds in solve, seconds reading x and fun back, result)."""
    import multiwalk as mw

    t0 = time.perf_counter()
    result = mw.solve(problem, solver, progress=False, devices=devices, **options)
    t1 = time.perf_counter()
    np.asarray(result.x), float(np.asarray(result.fun).ravel()[0])
    return t1 - t0, time.perf_counter() - t1, result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload")
    p.add_argument("--devices", nargs="+", default=["default"])
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--repeat", type=int, default=3, help="calls after the first, timed without the profiler")
    args = p.parse_args()
    problem, solver, options = workload(args.workload)
    for d in args.devices:
        devices = None if d == "default" else int(d)
        first = timed(problem, solver, options, devices)
        plain = [timed(problem, solver, options, devices) for _ in range(args.repeat)]
        stats = plain[-1][2].stats
        print(f"\n=== {args.workload}, devices={d}: first call {first[0]:.3f} s (+{first[1]:.3f} s read), then "
              + ", ".join(f"{a:.3f}+{b:.3f} (run {r.stats.get('run_seconds', float('nan')):.3f})" for a, b, r in plain)
              + f" s; run_seconds {stats.get('run_seconds', float('nan')):.4f}, loop_seconds "
              f"{stats.get('loop_seconds', float('nan')):.4f}, chunks {stats.get('chunks')}, devices {stats.get('devices')}")
        prof = cProfile.Profile()
        prof.enable()
        solve_s, read_s, _ = timed(problem, solver, options, devices)
        prof.disable()
        print(f"profiled call: solve {solve_s:.3f} s, read back {read_s:.3f} s")
        for key in ("cumulative", "tottime"):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(args.top)
            print("\n".join(line for line in buf.getvalue().splitlines() if line.strip())[:12000])


if __name__ == "__main__":
    main()
