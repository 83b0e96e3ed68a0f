"""Speed of the seed's Sgr A* fit: xringaus on an EHT 2017 observation with the seed's ReplicaExchange configuration.

The seed's example (cuda_mcmc model_obsfit.py): 32 temperatures, 16 sequences, 400 burn-in and 1000
sampling iterations, about 320 visibility amplitudes and their closure phases.  Goal (issue 6):
under 1 s after compilation on one H100/H200.  Our figure is ``mw.solve``'s ``run_seconds`` of a
second call on the same problem (compiled loops reused), median of ``--reps`` calls.  The floor
is the model's arithmetic: XLA's operation count of one chi2 evaluation (each transcendental
counted as ``common.TRANSCENDENTAL_OPS`` lane operations) times the evaluations the run makes
(one per chain per single-parameter trial), over the FP32 lane rate measured in the same run.

    PYTHONPATH=src python3 benchmarks/sgra_speed.py --out "$OUT"
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def main() -> int:
    p = common.new_parser(__doc__)
    common.add_out_option(p, "sgra_speed")
    p.add_argument("--reps", type=int, default=3, help="timed calls after the compiling one (default: %(default)s)")
    p.add_argument("--cadence-seconds", type=float, default=1800.0)
    p.add_argument("--quick", action="store_true", help="tiny sizes (a CPU smoke run)")
    p.add_argument("--no-ceilings", action="store_true")
    args = p.parse_args()
    common.select_platform(args.device)

    import numpy as np

    import multiwalk as mw
    from multiwalk.commands.demo import DEMO_TRUTH
    from multiwalk.eht import closure_phases, load_array, simulate, xringaus_problem
    from multiwalk.eht.fit import _summarise
    from multiwalk.models import PARAM_NAMES, xringaus

    run = common.start_run(args.device, args.quick)
    if run is None:
        return 2
    on_gpu, t_start, log, env = run.on_gpu, run.t_start, run.log, run.env
    truth = np.array([DEMO_TRUTH[n] for n in PARAM_NAMES])
    data = simulate(load_array("EHT2017"), lambda u, v: np.asarray(xringaus(truth, u, v)), scan_seconds=300.0,
                    cadence_seconds=args.cadence_seconds, fractional_noise=0.05, seed=0)
    cp = closure_phases(data)
    problem = xringaus_problem(data, closure=cp)
    solver = mw.ReplicaExchange(nbeta=32, nseq=16, nburn=400, niter=1000)
    if args.quick:
        solver = mw.ReplicaExchange(nbeta=4, nseq=2, nburn=10, niter=20)
    log(f"{len(data)} visibilities, {len(cp)} closure phases; {solver}")

    t0 = time.perf_counter()
    first = mw.solve(problem, solver, seed=0, progress=False)
    wall_first = time.perf_counter() - t0
    log(f"first call (compiles): wall {wall_first:.2f} s, compile {first.stats.get('compile_seconds'):.2f} s, "
        f"run {first.stats.get('run_seconds'):.3f} s")
    runs, walls = [], []
    for k in range(args.reps):
        t0 = time.perf_counter()
        res = mw.solve(problem, solver, seed=1 + k, progress=False)
        walls.append(time.perf_counter() - t0)
        runs.append(float(res.stats.get("run_seconds")))
        log(f"call {k + 2}: run_seconds {runs[-1]:.3f} s, wall {walls[-1]:.3f} s "
            f"(compile {res.stats.get('compile_seconds'):.3f} s)")
    fit = _summarise(res, problem, data, cp, "xringaus")
    inside = fit.contains(truth)
    log(f"last fit: chi2 {fit.chi2:.1f} / {fit.n_data} data; truth inside 95 % for {inside.sum()}/9 parameters")

    cost = common.xla_cost(problem)
    ops_per_eval = cost["flops"] + common.TRANSCENDENTAL_OPS * cost["transcendentals"]
    evals = (solver.nburn + solver.niter) * solver.nbeta * solver.nseq * problem.n_free + solver.nbeta * solver.nseq
    ceilings = None if args.no_ceilings else common.measure_ceilings(on_gpu, 1 << 26, 1024, log)
    floor = evals * ops_per_eval / ceilings["lane_ops_per_s"] if ceilings else float("nan")
    med = statistics.median(runs)
    lines = [
        f"Sgr A* xringaus fit, seed configuration: {env['device']}, {env['date']}, JAX {env['jax']}, float32; "
        f"{len(data)} amplitudes + {len(cp)} closure phases; ReplicaExchange(nbeta={solver.nbeta}, nseq={solver.nseq}, "
        f"nburn={solver.nburn}, niter={solver.niter}).",
        "",
        "| measurement | value |",
        "|---|---:|",
        f"| ours: mw.solve run_seconds after compilation (median of {len(runs)}) | {med:.3f} s |",
        f"| ours: wall time of those calls (median) | {statistics.median(walls):.3f} s |",
        f"| first call: compile / run / wall | {first.stats.get('compile_seconds'):.2f} / {first.stats.get('run_seconds'):.3f} / "
        f"{wall_first:.2f} s |",
        f"| chi2 evaluations in the run | {evals:.3g} |",
        f"| XLA cost of one chi2 evaluation | {cost['flops']:.4g} flops + {cost['transcendentals']:.4g} transcendentals |",
        f"| lane operations per evaluation (transcendental = {common.TRANSCENDENTAL_OPS}) | {ops_per_eval:.4g} |",
    ]
    if ceilings:
        lines += [
            f"| measured FP32 lane rate | {ceilings['lane_ops_per_s']:.3g} ops/s |",
            f"| floor = evaluations x ops / rate | {floor:.4f} s |",
            f"| ours / floor | {med / floor:.1f}x |",
        ]
    lines += [f"| last fit: best chi2 / data; truth in 95 % interval | {fit.chi2:.1f} / {fit.n_data}; {inside.sum()}/9 |"]
    md = common.finish_markdown(lines, ["goal: under 1 s after compilation on one H100/H200"])
    report = {"environment": env, "runs": runs, "walls": walls, "first": {k: first.stats.get(k) for k in
              ("compile_seconds", "run_seconds")}, "wall_first": wall_first, "cost": cost, "evals": evals,
              "ops_per_eval": ops_per_eval, "ceilings": ceilings, "floor_seconds": floor, "chi2": fit.chi2,
              "n_data": fit.n_data, "inside95": inside.tolist(), "n_vis": len(data), "n_cp": len(cp)}
    common.write_report(Path(args.out), "sgra_speed", report, md)
    common.print_done(log, Path(args.out), "sgra_speed", t_start, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
