"""The evidence of a 4-D bimodal target: mw.ReplicaExchange's thermodynamic integration and stepping
stones against dynesty's nested sampling, and both against the exact value.

The target: a likelihood that is a mixture of two Gaussian modes, weights 0.3 and 0.7, in the box
[-5, 5]^4 (uniform prior, volume 1e4); one mode isotropic (sigma 0.3), the other correlated
(sigmas 0.2 .. 0.5, correlation 0.6 between the first two parameters).  Its evidence is exact:
``Z = (0.3 + 0.7) / 1e4`` (the modes lie over 6 sigma inside the box).  Ours: ``result.evidence()``
of one run (nbeta 32, nseq 14); peer: dynesty's static nested sampler (``nlive`` live points,
``dlogz=0.1``, its default bounds and sampling), its NumPy likelihood on the same CPU.

    PYTHONPATH=src python3 benchmarks/evidence_dynesty.py --device cpu            # ~1 min on 2 cores
    PYTHONPATH=src python3 benchmarks/evidence_dynesty.py --device cpu --quick    # seconds
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

BOX = 5.0
WEIGHTS = np.array([0.3, 0.7])
CENTRES = np.array([[-2.0, 1.0, 0.5, -1.0], [1.5, -1.5, 2.0, 1.0]])


def covariances() -> np.ndarray:
    """The two modes' covariance matrices (2, 4, 4)."""
    second = np.diag([0.2, 0.3, 0.4, 0.5]) ** 2
    second[0, 1] = second[1, 0] = 0.6 * 0.2 * 0.3
    return np.stack([np.eye(4) * 0.3**2, second])


def exact_log_z() -> float:
    """Each normalised Gaussian mode integrates to its weight: Z = sum(w) / volume."""
    return float(np.log(WEIGHTS.sum()) - 4 * np.log(2 * BOX))


def log_likelihood_numpy(x: np.ndarray, inverse: np.ndarray, log_norm: np.ndarray) -> float:
    """log of ``sum_k w_k N(x; c_k, C_k)`` (the peer's likelihood)."""
    d = x[None, :] - CENTRES
    q = np.einsum("ki,kij,kj->k", d, inverse, d)
    terms = np.log(WEIGHTS) + log_norm - 0.5 * q
    top = terms.max()
    return float(top + np.log(np.exp(terms - top).sum()))


def run_ours(mw, nburn: int, niter: int, log) -> tuple[common.Row, dict]:
    import jax
    import jax.numpy as jnp

    cov = covariances()
    inverse = jnp.asarray(np.linalg.inv(cov))
    log_norm = jnp.asarray(-0.5 * np.linalg.slogdet(2 * np.pi * cov)[1])

    def chi2(x):  # -2 log L: the likelihood is exp(-chi2 / 2)
        d = x[None, :] - jnp.asarray(CENTRES)
        q = jnp.einsum("ki,kij,kj->k", d, inverse, d)
        return -2 * jax.scipy.special.logsumexp(jnp.log(jnp.asarray(WEIGHTS)) + log_norm - 0.5 * q)

    problem = mw.Problem(objective=chi2, lower=[-BOX] * 4, upper=[BOX] * 4)
    solver = mw.ReplicaExchange(nbeta=32, nseq=14, nburn=nburn, niter=niter, betan=1e-6)
    calls = common.wall_calls(lambda: mw.solve(problem, solver, seed=0),
                              read_back=lambda r: r.evidence(warn=False))
    r = calls.result
    ti, ss = r.evidence(warn=False), r.evidence("stepping-stones", warn=False)
    log(f"ours: TI {ti.log_z:.3f} +- {ti.error:.3f}, SS {ss.log_z:.3f} +- {ss.error:.3f}, warnings {ti.warnings + ss.warnings}")
    evaluations = (nburn + niter) * 32 * 14 * 4
    row = common.Row(f"4-D bimodal evidence, ReplicaExchange nbeta 32, nseq 14, {nburn} + {niter} iterations "
                     f"({evaluations:.3g} likelihood evaluations), log Z by TI and stepping stones",
                     calls.first, calls.second, note="second call: run_seconds "
                     f"{r.stats['run_seconds']:.3g} s")
    return row, {"thermodynamic": (ti.log_z, ti.error), "stepping-stones": (ss.log_z, ss.error),
                 "evaluations": evaluations, "warnings": list(ti.warnings + ss.warnings)}


def run_dynesty(nlive: int, dlogz: float, log) -> dict | None:
    try:
        import dynesty
    except ImportError:
        log("dynesty is not installed: no peer (pip install dynesty)")
        return None
    cov = covariances()
    inverse = np.linalg.inv(cov)
    log_norm = -0.5 * np.linalg.slogdet(2 * np.pi * cov)[1]
    sampler = dynesty.NestedSampler(lambda x: log_likelihood_numpy(x, inverse, log_norm),
                                    lambda u: (2 * u - 1) * BOX, 4, nlive=nlive, rstate=np.random.default_rng(0))
    start = time.perf_counter()
    with warnings.catch_warnings():  # its bounding's notes on a target of two small modes in a large box
        warnings.simplefilter("ignore", UserWarning)
        sampler.run_nested(dlogz=dlogz, print_progress=False)
    seconds = time.perf_counter() - start
    res = sampler.results
    out = {"log_z": float(res.logz[-1]), "error": float(res.logzerr[-1]), "seconds": seconds,
           "evaluations": int(np.sum(res.ncall)), "version": dynesty.__version__}
    log(f"dynesty {out['version']}: {out['log_z']:.3f} +- {out['error']:.3f} in {seconds:.1f} s, {out['evaluations']} calls")
    return out


def main(argv: list[str] | None = None) -> int:
    p = common.new_parser(__doc__, "evidence_dynesty")
    p.add_argument("--nlive", type=int, default=500, help="dynesty's live points")
    args = p.parse_args(argv)
    run = common.begin(args)
    if run is None:
        return 2
    import multiwalk as mw

    # --quick: dynesty stops at dlogz 1 with 50 live points (its default run takes minutes here)
    nburn, niter, nlive, dlogz = (100, 200, 50, 1.0) if args.quick else (1000, 4000, args.nlive, 0.1)
    row, ours = run_ours(mw, nburn, niter, run.log)
    peer = run_dynesty(nlive, dlogz, run.log)
    if peer is not None:
        row.peer, row.peer_name = peer["seconds"], f"dynesty {peer['version']}, nlive {nlive}, dlogz {dlogz}"
    exact = exact_log_z()
    extra = ["| estimate | log Z | error | minus exact | likelihood evaluations |", "|---|---:|---:|---:|---:|",
             f"| exact | {exact:.3f} | - | - | - |"]
    for name in ("thermodynamic", "stepping-stones"):
        z, e = ours[name]
        extra.append(f"| ReplicaExchange, {name} | {z:.3f} | {e:.3f} | {z - exact:+.3f} | {ours['evaluations']:.3g} |")
    if peer is not None:
        extra.append(f"| dynesty, static nested sampling | {peer['log_z']:.3f} | {peer['error']:.3f} | "
                     f"{peer['log_z'] - exact:+.3f} | {peer['evaluations']:.3g} |")
    notes = [f"warnings of our estimate: {ours['warnings'] or 'none'}",
             "the times are wall clock on the same machine; dynesty's likelihood is NumPy, one point per call."]
    heading = [f"Evidence of a 4-D bimodal target: {run.env['device']}, {run.env['date']}, JAX {run.env['jax']}, float32."]
    return common.finish(args, run, "evidence_dynesty", heading, [row], notes,
                         {"ours": ours, "peer": peer, "exact": exact}, extra)


if __name__ == "__main__":
    sys.exit(main())
