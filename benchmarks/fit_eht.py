#!/usr/bin/env python
"""One day's EHT fit on closure quantities (``multiwalk.eht.fit_uvfits``, the defaults of ``multiwalk fit-eht``): its speed.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python3 benchmarks/fit_eht.py --device cpu --out "$OUT"     # about a minute on 2 cores
    PYTHONPATH=src python3 benchmarks/fit_eht.py --device gpu --out "$OUT"
    PYTHONPATH=src python3 benchmarks/fit_eht.py --device cpu --quick           # seconds

The file: the public EHT 2017 M87 April 5 hi-band UVFITS (``--file``; by default
``../shared/data/eht/m87_2017/``, else a simulated m-ring observation written as UVFITS).  The
fit: m-ring on scan-averaged closure phases and log closure amplitudes without the co-located
baselines, with the default sampler (16 temperatures, 8 sequences, 500 burn-in and 500 sampling
iterations).  Ours: the wall clock of ``fit_uvfits`` (reading, preparing, closures, sampling,
summaries), first call (compiling) and second; the note gives ``mw.solve``'s run_seconds.  No
peer runs here: the table gives our figures only.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this script is started
import common  # noqa: E402

M87_095_HI = (Path(__file__).resolve().parents[2] / "shared" / "data" / "eht" / "m87_2017"
              / "SR1_M87_2017_095_hi_hops_netcal_StokesI.uvfits")


def simulated_file(folder: Path) -> Path:
    """A 40 uas m-ring observed by the EHT 2017 array from M87's direction, written as UVFITS."""
    from multiwalk.eht import load_array, simulate
    from multiwalk.io import write_uvfits
    from multiwalk.models import mring

    truth = np.array([0.6, 40.0, 12.0, 0.5, np.radians(160.0)])
    data = simulate(load_array("EHT2017"), lambda u, v: np.asarray(mring.visibilities(truth, u, v)),
                    cadence_seconds=1200.0, scan_seconds=300.0, ra_hours=187.706 / 15, dec_deg=12.391, seed=0)
    path = folder / "mring.uvfits"
    write_uvfits(data, path)
    return path


def speed_row(path: Path, solver: Any, log: Any) -> common.Row:
    from multiwalk.eht import fit_uvfits

    calls = common.wall_calls(lambda: fit_uvfits(path, "mring", solver=solver, progress=False),
                              read_back=lambda fit: fit.derived["diameter"]["median"])
    fit = calls.result
    d, pa = fit.derived["diameter"], fit.derived["pa_bright"]
    counts = ", ".join(f"{fit.terms.count(p)} {p}" for p in fit.products)
    what = (f"{path.name}: {counts}; ReplicaExchange(nbeta={solver.nbeta}, nseq={solver.nseq}, "
            f"nburn={solver.nburn}, niter={solver.niter})")
    note = (f"diameter {d['median']:.2f} [{d['lo68']:.2f}, {d['hi68']:.2f}] uas, bright side {pa['median']:.1f} deg; "
            f"compile {calls.first_result.result.stats['compile_seconds']:.1f} s; "
            f"run_seconds {fit.result.stats['run_seconds']:.2f} s (second call)")
    log(f"{what}: first {calls.first:.2f} s, second {calls.second:.2f} s; {note}")
    return common.Row(what, calls.first, calls.second, None, "", None, note)


def main(argv: list[str] | None = None) -> int:
    p = common.new_parser(__doc__, "fit_eht")
    p.add_argument("--file", type=Path, default=None, help="the UVFITS file (default: M87 2017 April 5 hi, else simulated)")
    args = p.parse_args(argv)
    run = common.begin(args)
    if run is None:
        return 2
    import multiwalk as mw
    from multiwalk.eht import EHT_SOLVER

    solver = mw.ReplicaExchange(nbeta=4, nseq=2, nburn=20, niter=20) if args.quick else EHT_SOLVER
    with tempfile.TemporaryDirectory() as tmp:
        path = args.file or (M87_095_HI if M87_095_HI.is_file() else simulated_file(Path(tmp)))
        rows = [speed_row(path, solver, run.log)]
    heading = [f"EHT fit on closures: {run.env['device']}, {run.env['date']}, JAX {run.env['jax']}, float32."]
    notes = ["goals: one day's closure fit (the defaults) in <= 60 s on a 2-core CPU, <= 2 s after compilation "
             "on an H100/H200."]
    return common.finish(args, run, "fit_eht", heading, rows, notes)


if __name__ == "__main__":
    sys.exit(main())
