#!/usr/bin/env python
"""ReplicaExchange (cuda_mcmc's MCMC-RE) through ``mw.solve``, against ptemcee on the same chi2.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src:$(ls .whl/ptemcee-*.whl) python3 benchmarks/replica_exchange.py --device gpu --out "$OUT"
    PYTHONPATH=src python3 benchmarks/replica_exchange.py --device cpu --quick        # seconds

Cases: A, a cheap 2-D objective (chi2 = Rosenbrock^2 on [-10, 10]^2), nbeta = 32 and nseq =
chains / 32; B, a 9-parameter fit (3 circular Gaussians) to 600 real visibility data; the seed's
default run (nbeta 32, nseq 14, nburn 300, niter 500) on case A.  Ours: the wall clock of
``mw.solve(problem, ReplicaExchange(...), seed=0)`` with ``result.x`` and ``result.fun`` read back,
first call (compiling) and second call.  One *update* is one single-parameter Metropolis trial of
one chain (one chi2 evaluation); a run makes (nburn + niter) * chains * n_free of them.

Peer: ptemcee 1.0.0 (parallel-tempering ensemble sampler, NumPy, float64, one CPU process) on the
same log-likelihood -chi2/2, prior box and 32 inverse temperatures, 64 walkers per temperature (14
for the seed default), timed for ``--peer-seconds``.  A ptemcee walker step moves all n parameters
with one evaluation; it counts as n updates, and its time for our run's updates is extrapolated
from its rate.  Without ptemcee the peer column reads "-".

Floor: per update the fewest bytes a one-pass-per-trial kernel moves (over the copy bandwidth) and
the fewest lane operations (threefry words, the proposal, the objective by XLA's cost analysis, the
exchange's share; over the FP32 lane rate), both measured in the same run; the larger of the two.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this script is started
import common  # noqa: E402

RNG_WORD_OPS = 38  # threefry2x32, 20 rounds: ~75 integer ops per two 32-bit words
NORMAL_OPS = 30  # uniform -> normal (erfinv polynomial)
PTEMCEE_WHEEL_HINT = "PYTHONPATH=src:$(ls .whl/ptemcee-*.whl)"


# ============================================================================ problems
def rosenbrock_chi2(x: Any) -> Any:
    """chi2 = z^2 with z the Rosenbrock function of two variables (minimum 0 at (1, 1)); NumPy or jax.numpy."""
    z = 100.0 * (x[1] - x[0] ** 2) ** 2 + (1.0 - x[0]) ** 2
    return z * z


GAUSS_WIDTHS = (0.15, 0.35, 0.8)  # fixed widths of the three components (same units as positions)
GAUSS_TRUTH = np.array([1.0, 0.0, 0.0, 0.6, 0.8, -0.3, 0.3, -0.7, 0.9])
GAUSS_NAMES = ["f1", "x1", "y1", "f2", "x2", "y2", "f3", "x3", "y3"]
GAUSS_LOWER = np.array([0.0, -2.0, -2.0] * 3)
GAUSS_UPPER = np.array([3.0, 2.0, 2.0] * 3)
GAUSS_NOISE = 0.02


def gauss_visibilities(theta: Any, uv: Any, xp: Any = np) -> Any:
    """Real and imaginary parts (600,) of 3 circular Gaussians at 300 (u, v) points."""
    u, v = uv[0], uv[1]
    q2 = u * u + v * v
    re = 0.0
    im = 0.0
    for k, s in enumerate(GAUSS_WIDTHS):
        amp = theta[3 * k] * xp.exp(-2.0 * np.pi**2 * s * s * q2)
        phase = -2.0 * np.pi * (u * theta[3 * k + 1] + v * theta[3 * k + 2])
        re = re + amp * xp.cos(phase)
        im = im + amp * xp.sin(phase)
    return xp.concatenate([re, im])


def gauss_data(n_uv: int = 300, seed: int = 20240601) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic (u, v) coverage in a disc of radius 1.5 and noisy visibilities."""
    rng = np.random.default_rng(seed)
    r = 1.5 * np.sqrt(rng.uniform(size=n_uv))
    t = rng.uniform(0.0, 2.0 * np.pi, size=n_uv)
    uv = np.stack([r * np.cos(t), r * np.sin(t)])
    y = gauss_visibilities(GAUSS_TRUTH, uv) + GAUSS_NOISE * rng.standard_normal(2 * n_uv)
    return uv, y


@dataclasses.dataclass
class Case:
    key: str
    title: str
    problem: Any  # mw.Problem
    chi2_np: Callable[[np.ndarray], float]  # the same chi2 in float64 NumPy, for the peer
    lower: np.ndarray
    upper: np.ndarray

    @property
    def n_free(self) -> int:
        return int(self.problem.n_free)


def build_cases(mw: Any) -> dict[str, Case]:
    lo2, hi2 = np.full(2, -10.0), np.full(2, 10.0)
    rosen = Case(
        key="A",
        title="Rosenbrock^2, 2 parameters, box [-10, 10]^2",
        problem=mw.Problem(objective=rosenbrock_chi2, lower=lo2, upper=hi2),
        chi2_np=lambda x: float(rosenbrock_chi2(x)),
        lower=lo2,
        upper=hi2,
    )
    uv, y = gauss_data()
    uv32 = uv.astype(np.float32)

    def model(theta, args):
        import jax.numpy as jnp

        return gauss_visibilities(theta, args, jnp)

    def chi2_np(theta: np.ndarray) -> float:
        r = (gauss_visibilities(theta, uv) - y) / GAUSS_NOISE
        return float(np.dot(r, r))

    gauss = Case(
        key="B",
        title="3 Gaussians, 9 parameters, 300 (u,v) points = 600 real data",
        problem=mw.Problem(model=model, data=y, sigma=GAUSS_NOISE, lower=GAUSS_LOWER, upper=GAUSS_UPPER,
                           args=uv32, names=GAUSS_NAMES),
        chi2_np=chi2_np,
        lower=GAUSS_LOWER,
        upper=GAUSS_UPPER,
    )
    return {"A": rosen, "B": gauss}



# ============================================================================ floor
def floor_per_update(n_free: int, nbeta: int, phase: int, chi2_ops: dict[str, float]) -> dict[str, Any]:
    """Fewest bytes and lane operations of one single-parameter update (a one-pass-per-trial kernel).

    Bytes: read the chain's point (n_free floats: the objective needs all of it), the chosen step and
    chi2; write the new coordinate and chi2; read and write the per-parameter counters (sampling:
    trials, acceptances; burn-in: trial count, acceptance sum, one history byte, the new step).
    The replica exchange adds, per chain and iteration, chi2, label and the point moved once
    (read + write), shared by the n_free updates of the iteration.
    Operations: 3 random 32-bit words per trial (parameter, step, acceptance), uniform -> normal,
    a log, the proposal / box / acceptance arithmetic, the objective (XLA's flop count, each
    transcendental counted as TRANSCENDENTAL_OPS), and per chain and iteration one exchange
    attempt (2 random words, a log, a few ops).
    """
    state_b = 4 * n_free + 4 + 4 + 4 + 4
    counters_b = 16 if phase == 1 else 8 + 8 + 2 + 4
    exch_b = (8 + 8 + 8 * n_free) / n_free if nbeta > 1 else 0.0
    rng_ops = 3 * RNG_WORD_OPS + NORMAL_OPS + common.TRANSCENDENTAL_OPS + 5
    metro_ops = 10 + (0 if phase == 1 else 10)
    obj_ops = chi2_ops["flops"] + common.TRANSCENDENTAL_OPS * chi2_ops["transcendentals"]
    exch_ops = (2 * RNG_WORD_OPS + common.TRANSCENDENTAL_OPS + 10) / n_free if nbeta > 1 else 0.0
    return {
        "bytes": state_b + counters_b + exch_b,
        "ops": rng_ops + metro_ops + obj_ops + exch_ops,
        "ops_parts": {"rng": rng_ops, "metropolis": metro_ops, "objective": obj_ops, "exchange": exch_ops},
    }


# ============================================================================ peer
@contextlib.contextmanager
def _numpy_float_alias():
    """ptemcee 1.0.0 uses ``np.float``, removed in NumPy 1.24: lend the alias while it runs."""
    added = "float" not in np.__dict__
    if added:
        np.float = float  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if added:
            del np.float  # type: ignore[attr-defined]


def import_ptemcee() -> tuple[Any, str | None]:
    try:
        with _numpy_float_alias():
            import ptemcee
    except Exception as err:  # ImportError, or a broken install
        return None, (
            f"ptemcee could not be imported ({type(err).__name__}: {err}); the peer columns are left empty. "
            f"Install it (pip install ptemcee) or put its wheel on the path: {PTEMCEE_WHEEL_HINT} python ..."
        )
    return ptemcee, None


def run_peer(ptemcee: Any, case: Case, betas: np.ndarray, nwalkers: int, max_iters: int, budget_s: float,
             seed: int = 0) -> dict[str, Any]:
    """ptemcee on the same log-likelihood (-chi2/2) and uniform prior box; one warm-up iteration."""
    lo, hi, dim = case.lower, case.upper, len(case.lower)
    chi2 = case.chi2_np

    def logl(x):
        return -0.5 * chi2(x)

    def logp(x):
        return 0.0 if np.all((x >= lo) & (x <= hi)) else -np.inf

    rng = np.random.RandomState(seed)
    ntemps = len(betas)
    with _numpy_float_alias():
        sampler = ptemcee.Sampler(nwalkers, dim, logl, logp, betas=np.array(betas, dtype=float), random=rng)
        p0 = lo + (hi - lo) * rng.uniform(size=(ntemps, nwalkers, dim))
        gen = sampler.sample(p0, iterations=max_iters, storechain=False)
        next(gen)  # warm-up: includes evaluating the start points
        n = 0
        t0 = time.perf_counter()
        for _ in gen:
            n += 1
            if time.perf_counter() - t0 >= budget_s:
                break
        t = time.perf_counter() - t0
        gen.close()
    accept = float(sampler.nprop_accepted.sum() / max(sampler.nprop.sum(), 1.0))
    walker_steps = ntemps * nwalkers * n
    return {
        "version": getattr(ptemcee, "__version__", "?"),
        "ntemps": ntemps, "nwalkers": nwalkers, "dim": dim, "iterations": n, "seconds": t,
        "walker_steps_per_s": walker_steps / t,
        "updates_per_s": walker_steps * dim / t,
        "seconds_per_iteration": t / max(n, 1),
        "acceptance": accept,
        "check": bool(n > 0 and 0.0 < accept < 1.0),
    }



# ============================================================================ the run
def floor_seconds(case: Case, solver: Any, chi2_ops: dict[str, float], ceilings: dict[str, Any]) -> float:
    """Least time of the whole run: each phase's updates times the larger of its memory and operations time."""
    chains = solver.nbeta * solver.nseq
    total = 0.0
    for phase, iters in ((0, solver.nburn), (1, solver.niter)):
        per = floor_per_update(case.n_free, solver.nbeta, phase, chi2_ops)
        per_update = max(per["bytes"] / ceilings["bytes_per_s"], per["ops"] / ceilings["lane_ops_per_s"])
        total += iters * chains * case.n_free * per_update
    return total


def measure(mw: Any, case: Case, solver: Any, label: str, peer: dict[str, Any] | None,
            chi2_ops: dict[str, float], ceilings: dict[str, Any], log: Callable[[str], None]) -> common.Row:
    """One row: ``mw.solve`` twice, the peer's time for the same updates, the floor."""
    calls = common.wall_calls(lambda: mw.solve(case.problem, solver, seed=0, progress=False))
    r = calls.result
    chains = solver.nbeta * solver.nseq
    updates = (solver.nburn + solver.niter) * chains * case.n_free
    peer_s = updates / peer["updates_per_s"] if peer else None
    acc = float(np.mean(r.acceptance)) if getattr(r, "acceptance", None) is not None else float("nan")
    compile_s = calls.first_result.stats["compile_seconds"]
    note = f"{updates:.3g} updates, {updates / calls.second:.3g}/s; compile {compile_s:.2f} s; acceptance {acc:.2f}"
    log(f"{label}: first {calls.first:.3f} s, second {calls.second:.3f} s; {note}")
    return common.Row(label, calls.first, calls.second, peer_s, "ptemcee" if peer else "",
                      floor_seconds(case, solver, chi2_ops, ceilings), note)


def parse_args(argv: list[str] | None) -> Any:
    p = common.new_parser(__doc__, "replica_exchange")
    p.add_argument("--chains", default="100000,1000000", help="case A chain counts (nbeta = 32)")
    p.add_argument("--chains-b", default="65536", help="case B chain counts")
    p.add_argument("--nburn", type=int, default=100, help="cases A and B: burn-in iterations")
    p.add_argument("--niter", type=int, default=200, help="cases A and B: sampling iterations")
    p.add_argument("--exchange-unroll", default="",
                   help="also the seed default with each ReplicaExchange(exchange_unroll=...) of this list")
    p.add_argument("--nseq-sweep", default="",
                   help="also case A at each nseq of this list (time per chain and iteration against the batch)")
    p.add_argument("--no-peer", action="store_true")
    p.add_argument("--peer-seconds", type=float, default=3.0, help="how long each ptemcee run is timed")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = common.begin(args)
    if run is None:
        return 2
    import multiwalk as mw

    log, notes = run.log, []
    if args.quick:
        # case B's compilation alone takes ~30 s on a 2-core CPU: --quick leaves it out
        args.chains, args.chains_b, args.nburn, args.niter, args.peer_seconds = "256", "", 10, 20, 0.3
    cases = build_cases(mw)
    ceilings = common.measure_ceilings(run.on_gpu, log)
    ptemcee, why = (None, "--no-peer") if args.no_peer else import_ptemcee()
    if why:
        notes.append(why)
    betas = mw.ReplicaExchange(nbeta=32).ladder()
    peers = {}
    if ptemcee is not None:
        for key, case in cases.items():
            peers[key] = run_peer(ptemcee, case, betas, 64, 10**6, args.peer_seconds)
            log(f"ptemcee case {key}: {peers[key]['updates_per_s']:.3g} update equivalents/s")
    rows = []
    for key, chains_text in (("A", args.chains), ("B", args.chains_b)):
        case = cases[key]
        ops = common.xla_cost(case.problem)
        for chains in (int(float(c)) for c in chains_text.split(",") if c):
            solver = mw.ReplicaExchange(nbeta=32, nseq=max(chains // 32, 1), nburn=args.nburn, niter=args.niter)
            label = f"{key}: {case.title}; {32 * solver.nseq} chains, {args.nburn} + {args.niter} iterations"
            rows.append(measure(mw, case, solver, label, peers.get(key), ops, ceilings, log))
    case = cases["A"]
    ops = common.xla_cost(case.problem)
    nburn, niter = (30, 50) if args.quick else (300, 500)
    peer_seed = None
    if ptemcee is not None:
        peer_seed = run_peer(ptemcee, case, betas, 14, 10**6, args.peer_seconds)
    for unroll in [None, *(int(u) for u in common.floats(args.exchange_unroll))]:
        solver = mw.ReplicaExchange(nbeta=32, nseq=14, nburn=nburn, niter=niter, exchange_unroll=unroll)
        label = f"seed default: A, nbeta 32, nseq 14, nburn {nburn}, niter {niter}" + (
            f", exchange_unroll={unroll}" if unroll else "")
        rows.append(measure(mw, case, solver, label, peer_seed, ops, ceilings, log))
    for nseq in (int(v) for v in common.floats(args.nseq_sweep)):
        solver = mw.ReplicaExchange(nbeta=32, nseq=nseq, nburn=args.nburn, niter=args.niter)
        row = measure(mw, case, solver, f"A, nseq {nseq} (batch sweep)", peers.get("A"), ops, ceilings, log)
        per = row.second / ((args.nburn + args.niter) * 32 * nseq)
        row.note += f"; {per * 1e9:.3g} ns per chain and iteration"
        rows.append(row)
    notes.append("the seed default (448 chains) cannot fill a GPU: its time is set by latency (launches and the "
                 "nbeta sequential exchange attempts), not by the throughput floor.")
    heading = [f"ReplicaExchange: {run.env['device']}, {run.env['date']}, JAX {run.env['jax']}, float32. "
               + common.ceilings_line(ceilings)]
    return common.finish(args, run, "replica_exchange", heading, rows, notes,
                         {"ceilings": ceilings, "peers": {**peers, "seed": peer_seed}})


if __name__ == "__main__":
    sys.exit(main())
