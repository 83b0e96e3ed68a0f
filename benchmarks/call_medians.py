"""Medians of repeated ``mw.solve`` calls (result read back) for three small rows of the latency
table, with a digest of each call's ``x``, ``fun`` and status, as one line of JSON: for an A/B
of two versions of the code, alternate processes on their own cache folders (a diagnostic; the
figures of record are ``benchmarks/user_latency.py``'s)::

    PYTHONPATH=old/src MULTIWALK_CACHE_DIR=/tmp/cA python3 benchmarks/call_medians.py
    PYTHONPATH=src     MULTIWALK_CACHE_DIR=/tmp/cB python3 benchmarks/call_medians.py

Rows: PatternSearch 15360 x 20 on Ackley-20 (200 calls), ReplicaExchange's seed default (60) and
1M chains (40) on the cheap 2-D objective.  ``--quick``: a few calls, for a check on a CPU.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def digest(result: Any) -> str:
    h = hashlib.sha256()
    for a in (result.x, result.fun):
        h.update(np.ascontiguousarray(np.asarray(a)).tobytes())
    h.update(str(result.status).encode())
    return h.hexdigest()[:16]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()

    import pattern_search as bench
    from gpu_timeline import call
    from user_latency import sphere2

    import multiwalk as mw

    def box() -> Any:
        return mw.Problem(objective=sphere2, lower=[-5.0, -5.0], upper=[5.0, 5.0])

    cases = {
        "ps_15360x20": (bench.make_problem(mw, "ackley", 20), mw.PatternSearch(n_walkers=15360, iterations=20), 200),
        "re_default": (box(), mw.ReplicaExchange(), 60),
        "re_1m": (box(), mw.ReplicaExchange(nbeta=32, nseq=32768, nburn=20, niter=100), 40),
    }
    out: dict[str, Any] = {"src": mw.__file__}
    for name, (problem, solver, calls) in cases.items():
        calls = 2 if args.quick else calls
        for _ in range(3):
            call(problem, solver, {})
        walls, runs = [], []
        for _ in range(calls):
            wall, r = call(problem, solver, {})
            walls.append(wall)
            runs.append(r.stats["run_seconds"])
        out[name] = {"median_ms": round(float(np.median(walls)) * 1e3, 3),
                     "run_ms": round(float(np.median(runs)) * 1e3, 3), "chunks": r.stats["chunks"], "digest": digest(r)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
