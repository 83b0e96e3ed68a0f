"""Where a second ``mw.solve`` call of ReplicaExchange's 4.2M-chain row (32 x 131072, 20 + 100,
cheap 2-D) spends its wall time, on 1 and on 2 devices: the spans between ``solve()``'s timeline
marks (options checked, start made, loops ready, run done, result made), the return, and the read
of ``result.x`` and ``result.fun``; medians of nine calls per device count, and the wall ratio.

    PYTHONPATH=src python3 benchmarks/re_call_spans.py            # two GPUs
    PYTHONPATH=src python3 benchmarks/re_call_spans.py --nseq 512 # a check on the CPU
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from user_latency import sphere2  # noqa: E402

import _multiwalk_launch  # noqa: E402
import multiwalk as mw  # noqa: E402

MARKS: list[tuple[str, float]] = []


def one_call(problem: mw.Problem, solver: mw.ReplicaExchange, devices: int) -> tuple[float, float, float, list]:
    """(wall, run_seconds, loop_seconds) in ms and the spans [(label, ms)] of one call."""
    MARKS.clear()
    t0 = time.perf_counter()
    r = mw.solve(problem, solver, progress=False, devices=devices)
    t1 = time.perf_counter()
    np.asarray(r.x), np.asarray(r.fun)
    t2 = time.perf_counter()
    spans, previous = [], t0
    for label, t in MARKS:
        spans.append((label.replace("solve: ", ""), 1e3 * (t - previous)))
        previous = t
    spans += [("return", 1e3 * (t1 - previous)), ("read x, fun", 1e3 * (t2 - t1))]
    return 1e3 * (t2 - t0), 1e3 * r.stats["run_seconds"], 1e3 * r.stats["loop_seconds"], spans


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nseq", type=int, default=131072)
    args = p.parse_args()
    mark = lambda label: MARKS.append((label, time.perf_counter()))  # noqa: E731
    _multiwalk_launch.mark = mark
    importlib.import_module("multiwalk.solve")._multiwalk_launch.mark = mark
    solver = mw.ReplicaExchange(nbeta=32, nseq=args.nseq, nburn=20, niter=100)
    problem = mw.Problem(objective=sphere2, lower=[-5.0, -5.0], upper=[5.0, 5.0])
    calls: dict[int, list] = {1: [], 2: []}
    for k in calls:
        mw.solve(problem, solver, progress=False, devices=k)  # compiles
    for _ in range(3):
        for k in calls:
            calls[k] += [one_call(problem, solver, k) for _ in range(3)]
    for k, rows in calls.items():
        print(f"{k} device(s): wall median {statistics.median(r[0] for r in rows):.2f} ms "
              f"(all {[round(r[0], 1) for r in rows]}); run {statistics.median(r[1] for r in rows):.2f}, "
              f"loop {statistics.median(r[2] for r in rows):.2f}")
        labels = [label for label, _ in rows[0][3]]
        print("   " + "; ".join(f"{label} {statistics.median(r[3][i][1] for r in rows):.2f}"
                                for i, label in enumerate(labels)))
    ratio = statistics.median(r[0] for r in calls[1]) / statistics.median(r[0] for r in calls[2])
    print(f"1 vs 2 devices, wall: {ratio:.3f}x")


if __name__ == "__main__":
    main()
