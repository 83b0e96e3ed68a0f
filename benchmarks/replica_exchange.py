#!/usr/bin/env python
"""Single-parameter Metropolis updates per second of ``mw.ReplicaExchange``, against ptemcee.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python benchmarks/replica_exchange.py --device gpu --out "$OUT"
    PYTHONPATH=src python benchmarks/replica_exchange.py --device cpu --quick      # smoke run

What is measured, in one run on one device:

* Case A, "cheap 2-D objective": chi2 = (Rosenbrock)^2 on the box [-10, 10]^2, nbeta=32 and
  nseq chosen so that nbeta*nseq = each of ``--chains``.  Case B, "9-parameter chi2 fit":
  a toy visibility model (3 circular Gaussians, flux and position each) at 300 (u, v) points,
  600 real data.  For both, a jitted ``lax.fori_loop`` of K ``solver.step`` calls is compiled
  (compile time reported apart), warmed up, then called repeatedly; the median call time gives
  updates/s for the burn-in phase (with step adaptation) and the sampling phase.  The whole
  ``mw.solve`` is also timed end to end.
* The seed's default configuration (nbeta=32, nseq=14, nburn=300, niter=500) on Rosenbrock:
  the time of the whole run after compilation (burn-in loop + sampling loop, compiled once).
* The peer, ptemcee (parallel-tempering ensemble MCMC, NumPy, CPU, one process), on the same
  log-likelihood -chi2/2, the same uniform prior box and the same temperature ladder.
* The hardware floor: the device's measured copy bandwidth and FP32 rate, and the fewest bytes
  and operations one update needs.

Counting.  Ours: one update = one single-parameter Metropolis trial of one chain (one chi2
evaluation); an iteration is chains * n_free updates.  ptemcee: one walker step moves all
n parameters at once with one likelihood evaluation; it is counted both as n single-parameter
update equivalents (the "updates/s" columns) and raw (walker-steps/s = likelihood evaluations/s).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import sys
import time
import warnings
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


# ============================================================================ timing helpers
def _solver(mw: Any, nbeta: int, nseq: int, nburn: int = 0, niter: int = 500, cls: Any = None) -> Any:
    cls = cls or mw.ReplicaExchange
    return cls(nbeta=nbeta, nseq=nseq, nburn=nburn, niter=niter)


def _interleaved(items: list[list[Any]], min_reps: int, min_seconds: float, max_reps: int = 200) -> list[list[float]]:
    """Like :func:`common.median_calls` for several ``[fn, state]`` pairs called in turn, so drifts hit all alike."""
    import jax

    times: list[list[float]] = [[] for _ in items]
    t_start = time.perf_counter()
    while len(times[0]) < max_reps and (len(times[0]) < min_reps or time.perf_counter() - t_start < min_seconds):
        for item, ts in zip(items, times):
            t0 = time.perf_counter()
            item[1] = item[0](item[1])
            jax.block_until_ready(item[1])
            ts.append(time.perf_counter() - t0)
    return times


def prepare_loop(solver: Any, problem: Any, phase: int, iters: int, seed: int = 0) -> tuple[Any, Any, float]:
    """Compile fori_loop(K x solver.step) (state donated), run it once to warm up: (compiled, state, compile s)."""
    import jax

    st = jax.jit(lambda k: solver.init(problem, k))(jax.random.PRNGKey(seed))
    jax.block_until_ready(st)

    def run(s):
        return jax.lax.fori_loop(0, iters, lambda i, c: solver.step(problem, c, phase), s)

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Dd]onat.*")
        t0 = time.perf_counter()
        compiled = jax.jit(run, donate_argnums=0).lower(st).compile()
        t_compile = time.perf_counter() - t0
        st = compiled(st)  # warm-up
        jax.block_until_ready(st)
    return compiled, st, t_compile


def time_loop(solver: Any, problem: Any, phase: int, iters: int, min_reps: int, min_seconds: float,
              seed: int = 0, keep: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compile fori_loop(K x solver.step) once, warm up, time repeated calls (median).

    With ``keep`` (a dict), the compiled loop and its latest state are left there for later use.
    """
    compiled, st, t_compile = prepare_loop(solver, problem, phase, iters, seed)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Dd]onat.*")
        st, times = common.median_calls(compiled, st, min_reps, min_seconds)
    chains = solver.nbeta * solver.nseq
    updates = iters * chains * problem.n_free
    t = statistics.median(times)
    chi2 = np.asarray(st.chi2)
    if phase == 1:
        trials = int(np.asarray(st.n_trials).sum())
        accept = int(np.asarray(st.n_accepted).sum()) / max(trials, 1)
    else:
        n_count = np.asarray(st.n_count)
        trials = int(n_count.sum())
        accept = float(np.asarray(st.history_sum).sum()) / max(int(np.minimum(n_count, solver.nadj).sum()), 1)
    expected = (len(times) + 1) * updates
    check = bool(np.all(np.isfinite(chi2)) and trials == expected and 0.0 < accept < 1.0)
    if keep is not None:
        keep["loop"] = [compiled, st]
    return {
        "iters_per_call": iters,
        "chains": chains,
        "updates_per_call": updates,
        "compile_seconds": t_compile,
        "call_seconds_median": t,
        "call_seconds_all": times,
        "spread": (max(times) - min(times)) / t if times else None,
        "updates_per_s": updates / t,
        "seconds_per_iteration": t / iters,
        "acceptance": accept,
        "check": check,
    }


def time_solve(mw: Any, problem: Any, solver: Any, seed: int = 0) -> dict[str, Any]:
    """mw.solve end to end (progress off): wall time, its compile_seconds and run_seconds."""
    t0 = time.perf_counter()
    res = mw.solve(problem, solver, seed=seed, progress=False)
    wall = time.perf_counter() - t0
    st = res.stats
    run = float(st["run_seconds"])
    return {
        "nburn": solver.nburn,
        "niter": solver.niter,
        "wall_seconds": wall,
        "compile_seconds": float(st["compile_seconds"]),
        "run_seconds": run,
        "chunks": int(st["chunks"]),
        "updates": int(st["updates"]),
        "updates_per_s_run": st["updates"] / run if run > 0 else None,
        "updates_per_s_wall": st["updates"] / wall,
        "best_chi2": float(res.fun),
        "status": str(res.status),
    }


def time_default_run(mw: Any, problem: Any, nbeta: int, nseq: int, nburn: int, niter: int, reps: int,
                     seed: int = 0, exchange_unroll: int | None = None, with_solve: bool = True) -> dict[str, Any]:
    """The whole run after compilation: compiled burn-in loop + compiled sampling loop, from init."""
    import jax

    solver = mw.ReplicaExchange(nbeta=nbeta, nseq=nseq, nburn=nburn, niter=niter, exchange_unroll=exchange_unroll)
    st0 = jax.jit(lambda k: solver.init(problem, k))(jax.random.PRNGKey(seed))
    jax.block_until_ready(st0)

    def loop(phase: int, n: int):
        return lambda s: jax.lax.fori_loop(0, n, lambda i, c: solver.step(problem, c, phase), s)

    t0 = time.perf_counter()
    burn = jax.jit(loop(0, nburn)).lower(st0).compile()
    samp = jax.jit(loop(1, niter)).lower(st0).compile()
    t_compile = time.perf_counter() - t0
    jax.block_until_ready(samp(burn(st0)))  # warm-up
    st, times = common.median_calls(lambda s: samp(burn(st0)), None, reps, 0.0, reps)
    updates = (nburn + niter) * nbeta * nseq * problem.n_free
    t = statistics.median(times)
    samples = np.asarray(st.samples)
    check = bool(np.all(np.isfinite(samples)) and int(st.iteration) == nburn + niter
                 and np.any(samples[-1] != samples[0]))
    sol = time_solve(mw, problem, solver, seed) if with_solve else None
    return {
        "nbeta": nbeta, "nseq": nseq, "nburn": nburn, "niter": niter, "exchange_unroll": exchange_unroll,
        "compile_seconds": t_compile,
        "run_seconds_median": t,
        "run_seconds_all": times,
        "updates": updates,
        "updates_per_s": updates / t,
        "check": check,
        "solve": sol,
    }


def breakdown(mw: Any, problem: Any, nbeta: int, nseq: int, iters: int, min_reps: int, min_seconds: float,
              full: list[Any] | None = None) -> dict[str, Any]:
    """Sampling-step time split: full step, step without replica exchange, objective evaluations alone.

    The three loops are called in turn (interleaved).  ``full`` may be ``[compiled, state]`` of the
    same sampling loop with K = ``iters``, kept from :func:`time_loop` (saves a compile).
    """
    import jax
    import jax.numpy as jnp

    class _NoExchange(mw.ReplicaExchange):
        def _exchange(self, state, key, beta, record):  # the exchange switched off
            return state

    t_compile = {}
    if full is None:
        compiled, st, t_compile["full"] = prepare_loop(_solver(mw, nbeta, nseq), problem, 1, iters)
        full = [compiled, st]
    compiled, st, t_compile["without_exchange"] = prepare_loop(_solver(mw, nbeta, nseq, cls=_NoExchange), problem, 1, iters)
    no_ex = [compiled, st]
    nf, chains = problem.n_free, nbeta * nseq
    lo, hi, _ = problem.free_bounds()
    x = jnp.asarray(lo + (hi - lo) * np.random.default_rng(5).uniform(size=(chains, nf)), problem.dtype)
    chi2 = jax.vmap(problem.chi2_free)

    def obj_loop(x):
        def body(i, x):
            return x.at[:, 0].add(1e-30 * chi2(x))  # a dependency keeps the evaluations in the loop

        return jax.lax.fori_loop(0, iters * nf, body, x)

    f = jax.jit(obj_loop)
    x = f(x)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Dd]onat.*")
        times = _interleaved([full, no_ex, [f, x]], min_reps, min_seconds)
    t_full, t_noex, t_obj = (statistics.median(ts) / iters for ts in times)
    return {
        "chains": chains,
        "iters_per_call": iters,
        "calls": len(times[0]),
        "seconds_per_iteration": {"full_step": t_full, "without_exchange": t_noex, "exchange": t_full - t_noex,
                                  "objective_only": t_obj, "rest (rng, proposal, bookkeeping)": t_noex - t_obj},
        "share": {"exchange": (t_full - t_noex) / t_full, "objective": t_obj / t_full,
                  "rest": (t_noex - t_obj) / t_full},
        "compile_seconds": t_compile,
    }


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


def floor_rate(per_update: dict[str, Any], bw: float, lane_ops_per_s: float) -> dict[str, float]:
    t_mem = per_update["bytes"] / bw
    t_ops = per_update["ops"] / lane_ops_per_s
    return {"seconds_memory": t_mem, "seconds_ops": t_ops, "updates_per_s": 1.0 / max(t_mem, t_ops),
            "bound": "memory" if t_mem >= t_ops else "operations"}


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


# ============================================================================ output
def _fmt(v: Any, kind: str = "rate") -> str:
    if v is None:
        return "—"
    if kind == "rate":
        return f"{v:.3g}"
    if kind == "ratio":
        return f"{v:.3g}×"
    if kind == "s":
        return f"{v:.3g} s"
    if kind == "pct":
        return f"{100 * v:.2g} %"
    return str(v)


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    fl = report["floor"]
    st = report["settings"]
    lines = [
        f"### mw.ReplicaExchange — {env['device']} — {env['date']}",
        "",
        f"Ours: multiwalk {env['multiwalk']}, JAX {env['jax']}, {env['device']} ({env['platform']}), float32. "
        f"Peer: ptemcee {env.get('ptemcee') or '(not available)'}, NumPy {env['numpy']}, one process on "
        f"{env['cpu']}, float64.",
        f"Measured ceilings: copy bandwidth {fl['bandwidth']['bytes_per_s'] / 1e9:.3g} GB/s (read + write); "
        f"FP32 FMA chain {fl['fp32']['flops_per_s'] / 1e12:.3g} TFLOP/s "
        f"(= {fl['lane_ops_per_s'] / 1e12:.3g} T lane-ops/s); "
        f"f32 matmul (HIGHEST) {fl['matmul']['flops_per_s'] / 1e12:.3g} TFLOP/s.",
        "",
        "Updates/s: ours = single-parameter Metropolis trials per second (one chi2 evaluation each); "
        "peer = ptemcee walker steps/s × n_params (single-parameter equivalents); "
        "peer evals/s = raw walker steps/s (one likelihood evaluation each). "
        "Ratio = ours / peer updates/s; ratio/eval = ours / peer evals/s. "
        "Floor = updates/s no code can exceed on this device (fewest bytes / bandwidth vs fewest ops / FP32 rate).",
        "",
        f"Loops: K={st['iters_per_call']} iterations per compiled call, median of at least {st['min_reps']} calls and "
        f"{st['min_seconds']:g} s, after one warm-up call; compile = compilation of that loop (seconds).",
        "",
        "| case | chains | phase | ours updates/s | peer updates/s | ratio | peer evals/s | ratio/eval "
        "| floor updates/s | ours/floor | compile |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['case']} | {r['chains']} | {r['phase']} | {_fmt(r['ours'])} | {_fmt(r.get('peer'))} | "
            f"{_fmt(r.get('ratio'), 'ratio')} | {_fmt(r.get('peer_evals'))} | {_fmt(r.get('ratio_eval'), 'ratio')} | "
            f"{_fmt(r.get('floor'))} | {_fmt(r.get('of_floor'), 'pct')} | {_fmt(r.get('compile'), 's')} |"
        )
    d = report.get("default_run")
    if d:
        lines += [
            "",
            f"Seed default run on Rosenbrock^2: nbeta={d['nbeta']}, nseq={d['nseq']}, nburn={d['nburn']}, "
            f"niter={d['niter']} ({d['updates']:.3g} updates); goal < 0.3 s on an H100.",
            "",
            "| measurement | seconds | updates/s |",
            "|---|---:|---:|",
            f"| ours, compiled burn-in + sampling loops (median of {len(d['run_seconds_all'])}; "
            f"compile {d['compile_seconds']:.3g} s) | {d['run_seconds_median']:.4g} | {_fmt(d['updates_per_s'])} |",
        ]
        for v in d.get("unroll_variants", []):
            lines.append(f"| ours, the same with exchange_unroll={v['exchange_unroll']} (compile {v['compile_seconds']:.3g} s) "
                         f"| {v['run_seconds_median']:.4g} | {_fmt(v['updates_per_s'])} |")
        sol = d.get("solve")
        if sol:
            lines += [
                f"| ours, mw.solve stats['run_seconds'] ({sol['chunks']} chunks) | "
                f"{sol['run_seconds']:.4g} | {_fmt(sol['updates_per_s_run'])} |",
                f"| ours, mw.solve wall (compile {sol['compile_seconds']:.3g} s included) | "
                f"{sol['wall_seconds']:.4g} | {_fmt(sol['updates_per_s_wall'])} |",
            ]
        if d.get("peer"):
            p = d["peer"]
            lines.append(
                f"| peer ptemcee ntemps={p['ntemps']} nwalkers={p['nwalkers']}, same iterations "
                f"(extrapolated from {p['iterations']}) | {p['run_seconds_equivalent']:.4g} | {_fmt(p['updates_per_s'])} |"
            )
            speedup = p["run_seconds_equivalent"] / d["run_seconds_median"]
            lines.append(f"| ratio peer time / ours (compiled loops) | {speedup:.3g}× | |")
        if d.get("floor_seconds"):
            lines.append(f"| floor (throughput; 448 chains cannot fill a GPU, so latency-bound in practice) | "
                         f"{d['floor_seconds']:.3g} | |")
    lines += ["", "Floor per update (fewest bytes over the measured bandwidth, fewest lane operations over the measured "
              "FP32 rate; the larger time bounds the rate):", "",
              "| case | phase | bytes/update | memory time | ops/update | ops time | floor updates/s | bound |",
              "|---|---|---:|---:|---:|---:|---:|---|"]
    for name, f in fl["per_update"].items():
        case, phase = name.split("/")
        lines.append(f"| {case} | {phase} | {f['bytes']:.0f} | {f['seconds_memory'] * 1e12:.3g} ps | {f['ops']:.0f} | "
                     f"{f['seconds_ops'] * 1e12:.3g} ps | {_fmt(f['updates_per_s'])} | {f['bound']} |")
    bd = report.get("breakdown") or {}
    if bd:
        lines += ["", "Sampling-step breakdown (seconds per iteration; exchange = full − without exchange):", "",
                  "| case | chains | full step | exchange | objective only | rest (rng, proposal, bookkeeping) |",
                  "|---|---:|---:|---:|---:|---:|"]
        for name, b in bd.items():
            s = b["seconds_per_iteration"]
            lines.append(
                f"| {name} | {b['chains']} | {s['full_step']:.3g} | {s['exchange']:.3g} ({b['share']['exchange']:.0%}) | "
                f"{s['objective_only']:.3g} ({b['share']['objective']:.0%}) | "
                f"{s['rest (rng, proposal, bookkeeping)']:.3g} ({b['share']['rest']:.0%}) |"
            )
    return common.finish_markdown(lines, report.get("notes", []))


# ============================================================================ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = common.new_parser(__doc__)
    p.add_argument("--chains", default=None,
                   help="case A chain counts, comma-separated (default 100000,1000000 on a GPU; 10240,102400 on a CPU)")
    p.add_argument("--chains-b", type=int, default=None, help="case B chains (default 65536 on a GPU, 512 on a CPU)")
    p.add_argument("--nbeta", type=int, default=32, help="temperatures per sequence (nseq = chains / nbeta)")
    p.add_argument("--iters", type=int, default=None, help="iterations K per compiled call (default 20; 5 with --quick)")
    p.add_argument("--min-seconds", type=float, default=None, help="time each measurement at least this long (default 1)")
    p.add_argument("--quick", action="store_true", help="tiny sizes, for a CPU smoke run (about a minute)")
    common.add_out_option(p, "replica_exchange")
    p.add_argument("--no-peer", action="store_true", help="skip ptemcee")
    p.add_argument("--peer-seconds", type=float, default=None, help="timed seconds of each ptemcee run (default 3)")
    p.add_argument("--no-solve", action="store_true", help="skip the end-to-end mw.solve timings of cases A and B")
    p.add_argument("--no-breakdown", action="store_true", help="skip the sampling-step breakdown")
    p.add_argument("--default-unroll", type=lambda t: [int(v) for v in t.split(",") if v.strip()], default=[],
                   help="also time the seed default run with these exchange_unroll values, e.g. 4,8 "
                        "(beware: 32 compiled for 70 s on a 2-core CPU)")
    p.add_argument("--budget", type=float, default=270.0,
                   help="seconds after which the optional parts (mw.solve of A/B, breakdown) are skipped (default 270)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common.select_platform(args.device)

    import jax

    import multiwalk as mw

    found = common.first_device(args.device)
    if found is None:
        return 2
    dev, on_gpu = found

    quick = args.quick
    if args.chains:
        chains_a = [int(float(c)) for c in args.chains.split(",") if c.strip()]
    else:
        chains_a = [1024] if quick else ([100_000, 1_000_000] if on_gpu else [10_240, 102_400])
    chains_b = args.chains_b or (64 if quick else (65_536 if on_gpu else 512))
    nbeta = args.nbeta
    iters = args.iters or (5 if quick else 20)
    min_reps = 3 if quick else 5
    min_seconds = args.min_seconds if args.min_seconds is not None else (0.2 if quick else 1.0)
    peer_seconds = args.peer_seconds if args.peer_seconds is not None else (1.0 if quick else 3.0)
    solve_iters = (10, 20) if quick else (100, 200)
    for c in chains_a + [chains_b]:
        if c % nbeta:
            print(f"error: chains={c} is not a multiple of nbeta={nbeta}", file=sys.stderr)
            return 2

    env = common.environment(dev, on_gpu, mw, quick)
    device_name = env["device"]
    notes: list[str] = []
    t_all = time.perf_counter()
    log = common.make_log(t_all)
    log(f"device {device_name} ({dev.platform}), JAX {jax.__version__}; case A chains {chains_a}, "
        f"case B chains {chains_b}, K={iters}")

    # ---------------------------------------------------------------- ceilings
    ceilings = common.measure_ceilings(on_gpu, 64 << 20 if quick else 256 << 20, 512 if quick else 2048, log)
    bw, lane_ops = ceilings["bandwidth"], ceilings["lane_ops_per_s"]

    cases = build_cases(mw)
    costs = {k: common.xla_cost(c.problem) for k, c in cases.items()}

    # ---------------------------------------------------------------- peer
    ptemcee, why = (None, "--no-peer given") if args.no_peer else import_ptemcee()
    if why and not args.no_peer:
        print(f"WARNING: {why}", file=sys.stderr)
        notes.append(why)
    env["ptemcee"] = getattr(ptemcee, "__version__", "?") if ptemcee else None
    ladder = mw.ReplicaExchange(nbeta=nbeta).ladder()
    peers: dict[str, Any] = {}
    if ptemcee is not None:
        for k, c in cases.items():
            nwalkers = max(64, 2 * c.n_free)  # ptemcee needs an even number >= 2 * dim
            peers[k] = run_peer(ptemcee, c, ladder, nwalkers, max_iters=20 if quick else 300, budget_s=peer_seconds)
            log(f"peer ptemcee case {k}: {peers[k]['iterations']} iterations in {peers[k]['seconds']:.2f} s, "
                f"{peers[k]['walker_steps_per_s']:.3g} walker-steps/s, {peers[k]['updates_per_s']:.3g} updates/s")

    # ---------------------------------------------------------------- cases A and B
    rows: list[dict[str, Any]] = []
    raw: dict[str, Any] = {}
    floors: dict[str, Any] = {}
    kept: dict[str, Any] = {}  # compiled sampling loops reused by the breakdown

    def over_budget(what: str) -> bool:
        if time.perf_counter() - t_all > args.budget:
            notes.append(f"skipped {what}: the run passed --budget {args.budget:g} s")
            log(f"skipping {what} (over --budget)")
            return True
        return False

    for k, chain_list in (("A", chains_a), ("B", [chains_b])):
        c = cases[k]
        for phase, pname in ((0, "burn-in"), (1, "sampling")):
            per = floor_per_update(c.n_free, nbeta, phase, costs[k])
            floors[f"{k}/{pname}"] = {**per, **floor_rate(per, bw["bytes_per_s"], lane_ops)}
        for chains in chain_list:
            nseq = chains // nbeta
            for phase, pname in ((0, "burn-in"), (1, "sampling")):
                keep = kept.setdefault(f"{k}/{chains}", {}) if phase == 1 and chains == chain_list[-1] else None
                m = time_loop(_solver(mw, nbeta, nseq), c.problem, phase, iters, min_reps, min_seconds, keep=keep)
                raw[f"{k}/{chains}/{pname}"] = m
                if not m["check"]:
                    notes.append(f"case {k} {chains} chains {pname}: sanity check failed (counts/acceptance/finite chi2)")
                fr = floors[f"{k}/{pname}"]["updates_per_s"]
                rows.append(_row(k, chains, pname, m["updates_per_s"], peers.get(k), fr, m["compile_seconds"]))
                log(f"case {k} {chains} chains {pname}: {m['updates_per_s']:.3g} updates/s "
                    f"({m['seconds_per_iteration'] * 1e3:.3g} ms/iteration, compile {m['compile_seconds']:.2f} s, "
                    f"acceptance {m['acceptance']:.2f}, spread {m['spread']:.0%})")

    # ---------------------------------------------------------------- seed default run
    nseq_d, nburn_d, niter_d = 14, 300, 500
    d = time_default_run(mw, cases["A"].problem, nbeta, nseq_d, nburn_d, niter_d, reps=3 if quick else 5)
    if not d["check"]:
        notes.append("seed default run: sanity check failed")
    fr = floors["A/sampling"]["updates_per_s"]
    d["floor_seconds"] = d["updates"] / fr
    if ptemcee is not None:
        p = run_peer(ptemcee, cases["A"], ladder, nseq_d, max_iters=50 if quick else 400, budget_s=peer_seconds)
        p["run_seconds_equivalent"] = p["seconds_per_iteration"] * (nburn_d + niter_d)
        d["peer"] = p
    log(f"seed default run: {d['run_seconds_median']:.4g} s after compilation (compile {d['compile_seconds']:.2f} s); "
        f"mw.solve run_seconds {d['solve']['run_seconds']:.4g} s, wall {d['solve']['wall_seconds']:.3g} s")

    d["unroll_variants"] = []
    for u in args.default_unroll:
        if over_budget(f"seed default run with exchange_unroll={u}"):
            break
        v = time_default_run(mw, cases["A"].problem, nbeta, nseq_d, nburn_d, niter_d, reps=3 if quick else 5,
                             exchange_unroll=u, with_solve=False)
        d["unroll_variants"].append(v)
        log(f"seed default run, exchange_unroll={u}: {v['run_seconds_median']:.4g} s (compile {v['compile_seconds']:.2f} s)")

    # ---------------------------------------------------------------- mw.solve end to end (largest size of each case)
    solve_cases = [] if args.no_solve else ([("A", chains_a[-1])] if quick else [("A", chains_a[-1]), ("B", chains_b)])
    for k, chains in solve_cases:
        if over_budget(f"mw.solve of case {k}"):
            break
        s = time_solve(mw, cases[k].problem, _solver(mw, nbeta, chains // nbeta, *solve_iters))
        raw[f"{k}/{chains}/solve"] = s
        label = f"mw.solve {solve_iters[0]}+{solve_iters[1]} it, run_seconds (wall {s['wall_seconds']:.3g} s)"
        rows.append(_row(k, chains, label, s["updates_per_s_run"], peers.get(k), floors[f"{k}/sampling"]["updates_per_s"],
                         s["compile_seconds"]))
        log(f"case {k} {chains} chains mw.solve: wall {s['wall_seconds']:.2f} s, run {s['run_seconds']:.3f} s, "
            f"compile {s['compile_seconds']:.2f} s, {s['chunks']} chunks")

    # ---------------------------------------------------------------- breakdown
    bd: dict[str, Any] = {}
    if not args.no_breakdown:
        todo = [("seed default (A)", "A", nseq_d, 50, None)]
        if not quick:
            todo += [(f"A {chains_a[-1]}", "A", chains_a[-1] // nbeta, iters, kept[f"A/{chains_a[-1]}"]["loop"]),
                     (f"B {chains_b}", "B", chains_b // nbeta, iters, kept[f"B/{chains_b}"]["loop"])]
        for name, case_key, ns, k_it, full in todo:
            if over_budget(f"breakdown {name}"):
                break
            bd[name] = breakdown(mw, cases[case_key].problem, nbeta, ns, k_it, min_reps, min_seconds, full)
            sh = bd[name]["share"]
            log(f"breakdown {name}: exchange {sh['exchange']:.0%}, objective {sh['objective']:.0%}, rest {sh['rest']:.0%}")

    report = {
        "environment": env,
        "settings": {"nbeta": nbeta, "chains_a": chains_a, "chains_b": chains_b, "iters_per_call": iters,
                     "min_reps": min_reps, "min_seconds": min_seconds, "solve_iters": solve_iters,
                     "peer_seconds": peer_seconds, "argv": sys.argv[1:]},
        "cases": {k: {"title": c.title, "n_free": c.n_free, "chi2_cost": costs[k]} for k, c in cases.items()},
        "floor": {**ceilings, "per_update": floors,
                  "assumptions": {"transcendental_ops": common.TRANSCENDENTAL_OPS, "rng_word_ops": RNG_WORD_OPS,
                                  "normal_ops": NORMAL_OPS, "model": floor_per_update.__doc__}},
        "rows": rows,
        "measurements": raw,
        "peer": peers,
        "default_run": d,
        "breakdown": bd,
        "notes": notes,
        "total_seconds": time.perf_counter() - t_all,
    }
    md = markdown(report)
    out = Path(args.out)
    common.write_report(out, "replica_exchange", report, md)
    for k in ("A", "B"):
        for pname in ("burn-in", "sampling"):
            f = floors[f"{k}/{pname}"]
            log(f"floor {k} {pname}: {f['bytes']:.0f} B/update -> {f['seconds_memory'] * 1e12:.3g} ps; "
                f"{f['ops']:.0f} ops/update -> {f['seconds_ops'] * 1e12:.3g} ps; "
                f"floor {f['updates_per_s']:.3g} updates/s ({f['bound']}-bound)")
    common.print_done(log, out, "replica_exchange", t_all, md)
    return 0


def _row(case: str, chains: int, phase: str, ours: float | None, peer: dict[str, Any] | None, floor: float,
         compile_s: float | None) -> dict[str, Any]:
    r: dict[str, Any] = {"case": case, "chains": chains, "phase": phase, "ours": ours, "floor": floor,
                         "compile": compile_s}
    if ours is not None:
        r["of_floor"] = ours / floor
    if peer is not None and ours is not None:
        r["peer"] = peer["updates_per_s"]
        r["peer_evals"] = peer["walker_steps_per_s"]
        r["ratio"] = ours / peer["updates_per_s"]
        r["ratio_eval"] = ours / peer["walker_steps_per_s"]
    return r


if __name__ == "__main__":
    sys.exit(main())
