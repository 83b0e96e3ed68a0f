"""Coverage of the xringaus fit: for random truths, how often the 95 % marginal interval holds the truth.

For each of ``--truths`` random parameter vectors drawn uniformly in the fit's box (seeded), an
EHT 2017 observation of Sgr A* is simulated (the demo's schedule and noise: 300 s scans every
1800 s, 2 GHz, thermal noise from the SEFDs plus 5 % fractional noise) and fitted with
ReplicaExchange; the table lists, per parameter, how many truths fall inside their 95 % (and
68 %) marginal intervals, and the median interval widths.  Goal (issue 6): at least 90 % of all
parameter-truth pairs inside the 95 % intervals.  Results are written after every fit, so a run
cut short keeps what it finished.

    PYTHONPATH=src python benchmarks/sgra_coverage.py --device cpu --out benchmarks/results
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def main() -> int:
    p = common.new_parser(__doc__)
    common.add_out_option(p, "sgra_coverage")
    p.add_argument("--truths", type=int, default=20, help="number of random truths (default: %(default)s)")
    p.add_argument("--seed", type=int, default=2024, help="seed of the truths, the noise and the sampler (default: %(default)s)")
    p.add_argument("--nbeta", type=int, default=16)
    p.add_argument("--nseq", type=int, default=8)
    p.add_argument("--nburn", type=int, default=300)
    p.add_argument("--niter", type=int, default=300)
    p.add_argument("--fractional-noise", type=float, default=0.05)
    args = p.parse_args()
    common.select_platform(args.device)

    import numpy as np

    import multiwalk as mw
    from multiwalk.eht import fit_xringaus, load_array, simulate
    from multiwalk.models import LOWER, PARAM_NAMES, UPPER, xringaus

    run = common.start_run(args.device, quick=False)
    if run is None:
        return 2
    t_start, log, env = run.t_start, run.log, run.env
    rng = np.random.default_rng(args.seed)
    array = load_array("EHT2017")
    solver = mw.ReplicaExchange(nbeta=args.nbeta, nseq=args.nseq, nburn=args.nburn, niter=args.niter)
    out = Path(args.out)
    rows = []
    truths = rng.uniform(LOWER, UPPER, (args.truths, len(PARAM_NAMES)))
    for k, truth in enumerate(truths):
        data = simulate(array, lambda u, v, t=truth: np.asarray(xringaus(t, u, v)), scan_seconds=300.0, cadence_seconds=1800.0,
                        fractional_noise=args.fractional_noise, seed=args.seed + k)
        t0 = time.perf_counter()
        fit = fit_xringaus(data, solver, seed=args.seed + k, progress=False)
        rows.append({
            "truth": truth.tolist(), "best": fit.best.tolist(), "median": fit.median.tolist(),
            "lo68": fit.lo68.tolist(), "hi68": fit.hi68.tolist(), "lo95": fit.lo95.tolist(), "hi95": fit.hi95.tolist(),
            "in68": fit.contains(truth, 0.68).tolist(), "in95": fit.contains(truth, 0.95).tolist(),
            "chi2_best": fit.chi2, "n_data": fit.n_data, "seconds": time.perf_counter() - t0,
            "compile_seconds": fit.result.stats.get("compile_seconds"),
        })
        in95 = np.array(rows[-1]["in95"])
        log(f"truth {k + 1}/{len(truths)}: chi2 {fit.chi2:.0f} / {fit.n_data} data, {in95.sum()}/9 inside 95 %, "
            f"{rows[-1]['seconds']:.1f} s")
        md = _markdown(rows, PARAM_NAMES, LOWER, UPPER, env, args)
        common.write_report(out, "sgra_coverage", {"environment": env, "options": vars(args), "rows": rows}, md)
    common.print_done(log, out, "sgra_coverage", t_start, md)
    return 0


def _markdown(rows, names, lower, upper, env, args) -> str:
    import numpy as np

    in95 = np.array([r["in95"] for r in rows])
    in68 = np.array([r["in68"] for r in rows])
    w95 = np.array([np.array(r["hi95"]) - np.array(r["lo95"]) for r in rows])
    lines = [
        f"{len(rows)} random truths uniform in the box; {env['device']}, {env['date']}, JAX {env['jax']}; "
        f"ReplicaExchange(nbeta={args.nbeta}, nseq={args.nseq}, nburn={args.nburn}, niter={args.niter}); "
        f"EHT 2017, 300 s scans every 1800 s, thermal + {args.fractional_noise:g} fractional noise.",
        "",
        "| parameter | box | truths in 95 % interval | in 68 % | median 95 % width | median width / box |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for i, n in enumerate(names):
        box = upper[i] - lower[i]
        lines.append(f"| {n} | [{lower[i]:.3g}, {upper[i]:.3g}] | {in95[:, i].sum()}/{len(rows)} | "
                     f"{in68[:, i].sum()}/{len(rows)} | {np.median(w95[:, i]):.3g} | {np.median(w95[:, i]) / box:.2%} |")
    total = in95.size
    lines += ["", f"All parameter-truth pairs inside the 95 % interval: {in95.sum()}/{total} = {in95.mean():.1%} "
              f"(goal >= 90 %); inside 68 %: {in68.mean():.1%}.",
              f"Fits whose best chi2 exceeds n_data + 5 sqrt(2 n_data) (not converged): "
              f"{sum(r['chi2_best'] > r['n_data'] + 5 * np.sqrt(2 * r['n_data']) for r in rows)}/{len(rows)}; "
              f"median time per fit {np.median([r['seconds'] for r in rows]):.1f} s (compile included)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
