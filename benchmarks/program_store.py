#!/usr/bin/env python
"""New processes with a warm cache, one source tree against another: what the program store saves.

Each round runs, for every source tree given (``--src``, default ``src``; give the code before and
after to compare them, alternated), a first process with an empty cache and a second with it warm:

* ``xringaus``: the xringaus fit (32 x 16, 400+1000), the wall clock of the first ``mw.solve`` call
  in each process and its ``compile_seconds``;
* ``run``: ``multiwalk run`` of ODAT-SE's exchange input (16 replicas x 20000 steps, himmelblau,
  step files written), whole processes; with ``--peer``, ODAT-SE on the same input after each
  round (when it imports).

Run from the repository root::

    PYTHONPATH=src python3 benchmarks/program_store.py xringaus --src old/src src --rounds 3
    PYTHONPATH=src python3 benchmarks/program_store.py run --src old/src src --rounds 5 --peer
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

XRINGAUS = r"""
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import multiwalk as mw
import sgra
from multiwalk.commands.demo import DEMO_TRUTH
from multiwalk.eht import closure_phases, xringaus_problem
from multiwalk.models import PARAM_NAMES
data = sgra.observe(np.array([DEMO_TRUTH[n] for n in PARAM_NAMES]), seed=0)
problem = xringaus_problem(data, closure=closure_phases(data))
t = time.perf_counter()
result = mw.solve(problem, mw.ReplicaExchange(nbeta=32, nseq=16, nburn=400, niter=1000), seed=0, progress=False)
np.asarray(result.x)
print("RESULT " + json.dumps({"call": time.perf_counter() - t, "compile": result.stats["compile_seconds"]}))
"""


def _xringaus(src: str, cache: str) -> dict:
    env = dict(os.environ, MULTIWALK_CACHE_DIR=cache, PYTHONPATH=src)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", XRINGAUS, str(HERE)], env=env, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(proc.stderr[-2000:])
    return {**json.loads(lines[0][7:]), "process": time.perf_counter() - t}


def _run(src: str, cache: str, folder: Path) -> dict:
    env = dict(os.environ, MULTIWALK_CACHE_DIR=cache, PYTHONPATH=src)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "multiwalk", "run", "input.toml", "--no-progress"], cwd=folder,
                          env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return {"process": time.perf_counter() - t}


def _odatse(bench, tmp: Path) -> float:
    """ODAT-SE's command on the same input, whole process (as ``user_latency.py`` runs it, any release)."""
    from user_latency import ODATSE

    folder = bench.prepared(tmp / "peer", 16, 20_000, 2_000)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", ODATSE], cwd=folder, capture_output=True, text=True,
                          env=bench.odatse_env())
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["xringaus", "run"])
    p.add_argument("--src", nargs="+", default=["src"], help="source trees to compare (each a PYTHONPATH entry)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--peer", action="store_true", help="run: ODAT-SE on the same input after each round")
    args = p.parse_args()
    sys.path.insert(0, str(HERE))
    import odatse as bench

    with tempfile.TemporaryDirectory(prefix="program-store-") as tmp:
        caches = {src: tempfile.mkdtemp(dir=tmp) for src in args.src}
        folder = bench.prepared(Path(tmp) / "case", 16, 20_000, 2_000)
        for r in range(args.rounds):
            for src in args.src:
                if args.what == "xringaus":
                    cache = tempfile.mkdtemp(dir=tmp)  # each round's first process: an empty cache
                    first, warm = _xringaus(src, cache), _xringaus(src, cache)
                    print(f"round {r} {src}: first call {first['call']:.2f} s (compile {first['compile']:.2f}); "
                          f"new process, warm cache: first call {warm['call']:.2f} s (compile {warm['compile']:.2f}, "
                          f"process {warm['process']:.2f} s)", flush=True)
                else:
                    if r == 0:
                        _run(src, caches[src], folder)  # the cache warmed once
                    print(f"round {r} {src}: whole process {_run(src, caches[src], folder)['process']:.3f} s", flush=True)
            if args.peer and args.what == "run" and bench.odatse_available():
                print(f"round {r} ODAT-SE: whole process {_odatse(bench, Path(tmp)):.3f} s", flush=True)


if __name__ == "__main__":
    main()
