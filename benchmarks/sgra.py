#!/usr/bin/env python
"""The Sgr A* xringaus fit (the flagship) through ``mw.solve``: its speed, and with ``--coverage`` its intervals.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python3 benchmarks/sgra.py --device gpu --out "$OUT"                 # about a minute
    PYTHONPATH=src python3 benchmarks/sgra.py --device gpu --coverage 20 --out "$OUT"   # + 20 truths, ~11 min
    PYTHONPATH=src python3 benchmarks/sgra.py --device cpu --quick                      # seconds

Speed: the demo's EHT 2017 observation of an xringaus Sgr A* (345 amplitudes, 217 closure phases)
fitted with the seed's ReplicaExchange configuration (32 temperatures, 16 sequences, 400 burn-in
and 1000 sampling iterations).  Ours: the wall clock of ``mw.solve`` with the result read back,
first call (compiling) and second.  No peer runs here: the seed's code (cuda_mcmc) needs a CUDA
toolchain of its own.  Floor: XLA's operation count of one chi2 evaluation (a transcendental as
20 lane operations) times the evaluations of the run (iterations x chains x free parameters), over
the FP32 lane rate measured in the same run.

Coverage (``--coverage N``): N parameter vectors drawn uniformly in the box, each simulated and
fitted (``--coverage-solver nbeta,nseq,nburn,niter``); per parameter, how many truths lie inside
the 95 % and 68 % marginal intervals (goal: >= 90 % of all pairs inside 95 %).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this script is started
import common  # noqa: E402


def observe(truth: np.ndarray, seed: int, fractional_noise: float = 0.05) -> Any:
    """The demo's EHT 2017 schedule (300 s scans every 1800 s) of xringaus at ``truth``, with noise."""
    from multiwalk.eht import load_array, simulate
    from multiwalk.models import xringaus

    return simulate(load_array("EHT2017"), lambda u, v: np.asarray(xringaus(truth, u, v)), scan_seconds=300.0,
                    cadence_seconds=1800.0, fractional_noise=fractional_noise, seed=seed)


def speed_row(mw: Any, solver: Any, ceilings: dict[str, Any], log: Callable[[str], None]) -> common.Row:
    from multiwalk.commands.demo import DEMO_TRUTH
    from multiwalk.eht import closure_phases, xringaus_problem
    from multiwalk.models import PARAM_NAMES

    truth = np.array([DEMO_TRUTH[n] for n in PARAM_NAMES])
    data = observe(truth, seed=0)
    cp = closure_phases(data)
    problem = xringaus_problem(data, closure=cp)
    calls = common.wall_calls(lambda: mw.solve(problem, solver, seed=0, progress=False))
    cost = common.xla_cost(problem)
    ops = cost["flops"] + common.TRANSCENDENTAL_OPS * cost["transcendentals"]
    chains = solver.nbeta * solver.nseq
    evaluations = (solver.nburn + solver.niter) * chains * problem.n_free + chains
    floor = evaluations * ops / ceilings["lane_ops_per_s"]
    what = (f"{len(data)} amplitudes + {len(cp)} closure phases; ReplicaExchange(nbeta={solver.nbeta}, "
            f"nseq={solver.nseq}, nburn={solver.nburn}, niter={solver.niter})")
    note = (f"best chi2 {float(calls.result.fun):.1f}; compile {calls.first_result.stats['compile_seconds']:.2f} s; "
            f"{evaluations:.3g} chi2 evaluations of {ops:.4g} lane ops")
    log(f"{what}: first {calls.first:.2f} s, second {calls.second:.3f} s; {note}")
    return common.Row(what, calls.first, calls.second, None, "", floor, note)


def coverage(mw: Any, truths: int, solver: Any, seed: int, log: Callable[[str], None]) -> list[str]:
    """Fit ``truths`` random truths; the Markdown table of how often the intervals hold them."""
    from multiwalk.eht import fit_xringaus
    from multiwalk.models import LOWER, PARAM_NAMES, UPPER

    rng = np.random.default_rng(seed)
    in95, in68, times = [], [], []
    for k, truth in enumerate(rng.uniform(LOWER, UPPER, (truths, len(PARAM_NAMES)))):
        t0 = time.perf_counter()
        fit = fit_xringaus(observe(truth, seed + k), solver, seed=seed + k, progress=False)
        times.append(time.perf_counter() - t0)
        in95.append(fit.contains(truth, 0.95))
        in68.append(fit.contains(truth, 0.68))
        log(f"truth {k + 1}/{truths}: chi2 {fit.chi2:.0f} / {fit.n_data} data, {in95[-1].sum()}/9 inside 95 %")
    in95a, in68a = np.array(in95), np.array(in68)
    lines = [f"Coverage: {truths} random truths uniform in the box; ReplicaExchange(nbeta={solver.nbeta}, "
             f"nseq={solver.nseq}, nburn={solver.nburn}, niter={solver.niter}); median {np.median(times):.1f} s a fit "
             "(compilation included).", "", "| parameter | truths in 95 % interval | in 68 % |", "|---|---:|---:|"]
    lines += [f"| {n} | {in95a[:, i].sum()}/{truths} | {in68a[:, i].sum()}/{truths} |" for i, n in enumerate(PARAM_NAMES)]
    lines += ["", f"All parameter-truth pairs inside 95 %: {in95a.mean():.1%} (goal >= 90 %); inside 68 %: "
              f"{in68a.mean():.1%}."]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = common.new_parser(__doc__, "sgra")
    p.add_argument("--coverage", type=int, default=0, help="also fit this many random truths (0: none)")
    p.add_argument("--coverage-solver", default="32,16,400,1000", help="nbeta,nseq,nburn,niter of the coverage fits")
    p.add_argument("--seed", type=int, default=2024, help="seed of the coverage's truths, noise and sampler")
    args = p.parse_args(argv)
    run = common.begin(args)
    if run is None:
        return 2
    import multiwalk as mw

    sizes = (4, 2, 10, 20) if args.quick else (32, 16, 400, 1000)
    solver = mw.ReplicaExchange(nbeta=sizes[0], nseq=sizes[1], nburn=sizes[2], niter=sizes[3])
    ceilings = common.measure_ceilings(run.on_gpu, run.log)
    rows = [speed_row(mw, solver, ceilings, run.log)]
    extra = []
    if args.coverage:
        nbeta, nseq, nburn, niter = (int(v) for v in args.coverage_solver.split(","))
        cov_solver = solver if args.quick else mw.ReplicaExchange(nbeta=nbeta, nseq=nseq, nburn=nburn, niter=niter)
        extra = coverage(mw, args.coverage, cov_solver, args.seed, run.log)
    heading = [f"Sgr A* xringaus fit: {run.env['device']}, {run.env['date']}, JAX {run.env['jax']}, float32. "
               + common.ceilings_line(ceilings)]
    notes = ["goal: under 1 s after compilation on one H100/H200 (the seed's configuration)."]
    return common.finish(args, run, "sgra", heading, rows, notes, {"ceilings": ceilings}, extra)


if __name__ == "__main__":
    sys.exit(main())
