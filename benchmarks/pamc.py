#!/usr/bin/env python
"""Population annealing (``algorithm.name = "pamc"``): ``multiwalk run`` against ODAT-SE's ``odatse``
on the same input.toml, whole processes (Python's start, imports, compilation, step files).

Run from the repository root; ODAT-SE is pure Python (numpy only) and is run when ``odatse`` is
on the PATH or given by ``--odatse``::

    python3 benchmarks/pamc.py --replicas 100,1000 [--odatse /path/to/odatse] [--repeat 2]

The input is ODAT-SE's sample (sample/analytical/pamc): Himmelblau in [-6, 6]^2, T from 100 down
to 1 over Tnum = 21 log-spaced temperatures, 100 steps at each, R walkers in one process.  Both
programs write their step files (trial, result and the per-temperature files).  Printed: the
wall clock of each command (the best of ``--repeat``), the ratio, and each program's log(Z/Z0)
at the coldest temperature (the same quantity, so they must agree within their errors).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INPUT = """[base]
dimension = 2
output_dir = "output"
[solver]
name = "analytical"
function_name = "himmelblau"
[algorithm]
name = "pamc"
seed = 12345
[algorithm.param]
max_list = [6.0, 6.0]
min_list = [-6.0, -6.0]
step_list = [0.1, 0.1]
[algorithm.pamc]
Tmin = 1.0
Tmax = 100.0
Tnum = 21
Tlogspace = true
numsteps_annealing = 100
nreplica_per_proc = {replicas}
"""


def timed(command: list[str], folder: Path) -> float:
    """Seconds of one run of ``command`` in ``folder`` (a fresh output folder each time)."""
    shutil.rmtree(folder / "output", ignore_errors=True)
    t0 = time.perf_counter()
    subprocess.run(command, cwd=folder, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def coldest_logz(folder: Path) -> float:
    last = [line for line in (folder / "output" / "fx.txt").read_text().splitlines() if not line.startswith("#")][-1]
    return float(last.split()[4])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", default="100,1000", help="walkers per run, comma-separated")
    parser.add_argument("--odatse", default=shutil.which("odatse"), help="the odatse command (default: on the PATH)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each command; the best is reported")
    args = parser.parse_args()
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    ours = [sys.executable, "-m", "multiwalk", "run", "input.toml", "--no-progress"]
    print(f"# {time.strftime('%Y-%m-%d')} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"walls in seconds (best of {args.repeat}), whole processes")
    print("walkers  multiwalk  odatse  odatse/multiwalk  logZ(multiwalk)  logZ(odatse)")
    for replicas in (int(r) for r in args.replicas.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "input.toml").write_text(INPUT.format(replicas=replicas))
            os.environ.update(env)
            t_ours = min(timed(ours, folder) for _ in range(args.repeat))
            z_ours = coldest_logz(folder)
            t_peer = z_peer = float("nan")
            if args.odatse:
                t_peer = min(timed([args.odatse, "input.toml"], folder) for _ in range(args.repeat))
                z_peer = coldest_logz(folder)
        print(f"{replicas:7d}  {t_ours:9.2f}  {t_peer:6.2f}  {t_peer / t_ours:16.2f}  {z_ours:15.3f}  {z_peer:12.3f}")


if __name__ == "__main__":
    main()
