"""Where a short PatternSearch call's time goes: each part of ``mw.solve`` wrapped and timed (the
mean per call over many calls), a diagnostic for the one-program path::

    PYTHONPATH=src python3 benchmarks/call_parts.py                     # 15360 walkers x 20, Ackley-20
    PYTHONPATH=src python3 benchmarks/call_parts.py --walkers 8 --iterations 1 --dim 2   # a CPU check

Each wrapper adds ~1 us to its part; parts nest (the run holds the launch, the result and the
wait for the outputs).  The figures of record are ``call_medians.py``'s and ``user_latency.py``'s.
"""

from __future__ import annotations

import argparse
import collections
import functools
import importlib
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pattern_search as bench  # noqa: E402

import multiwalk as mw  # noqa: E402
from multiwalk import compile_cache, one_program  # noqa: E402
from multiwalk import progress as prog  # noqa: E402
from multiwalk.solvers import pattern_search  # noqa: E402

solve_module = importlib.import_module("multiwalk.solve")
spent: dict[str, float] = collections.defaultdict(float)


def timed(owner: Any, name: str, label: str) -> None:
    """``owner.name`` replaced by a wrapper that adds its wall time to ``spent[label]``."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - t0

    setattr(owner, name, wrapper)


def wrap_parts() -> None:
    for name in ("_check_run_options", "_run_plan", "_loop_block", "_kept_run_key", "_in_one_program"):
        timed(solve_module, name, name)
    for name in ("applies", "kept", "prepare", "run"):
        timed(one_program, name, f"one_program.{name}")
    timed(one_program.Prepared, "launch", "launch (host)")
    timed(prog, "fetch", "outputs read (the wait)")
    timed(compile_cache, "fingerprint", "fingerprint")
    for name in ("check", "plan", "result", "steps"):
        timed(pattern_search.PatternSearch, name, f"PatternSearch.{name}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--walkers", type=int, default=15360)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--dim", type=int, default=20)
    p.add_argument("--calls", type=int, default=1000)
    args = p.parse_args()
    problem = bench.make_problem(mw, "ackley", args.dim)
    solver = mw.PatternSearch(n_walkers=args.walkers, iterations=args.iterations)

    def call() -> None:
        t0 = time.perf_counter()
        result = mw.solve(problem, solver, progress=False)
        np.asarray(result.x), np.asarray(result.fun)
        spent["the call, x and fun read"] += time.perf_counter() - t0

    wrap_parts()
    for _ in range(30):
        call()
    for _ in range(2):
        spent.clear()
        for _ in range(args.calls):
            call()
        print(f"--- {args.calls} calls: mean per call (us)")
        for label, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
            print(f"  {label:32s} {1e6 * seconds / args.calls:8.1f}")


if __name__ == "__main__":
    main()
