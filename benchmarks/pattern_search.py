#!/usr/bin/env python
"""Zhu & Curry's SIMT-PS tables (1, 4 and 5) with ``mw.PatternSearch``, against the CPU code run the same day.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python3 benchmarks/pattern_search.py --out "$OUT"          # GPU, about 7 minutes
    PYTHONPATH=src python3 benchmarks/pattern_search.py --device cpu --quick  # smoke run, under 2 minutes

What is measured, in one run on one device (the paper: GTX 280 GPU and one core of a Core 2 Duo, 2008):

* Table 1: Ackley, 20 variables, 20 iterations, 2048 ... 15360 walkers.  Ours: ``solver.init``
  then a jitted ``lax.fori_loop`` of 20 ``solver.step`` calls (phase 0), compiled once (compile
  time reported apart), called on several initial states in turn, ``jax.block_until_ready``
  after each call, median over the calls, with ``kernel="xla"`` (d dependent XLA sub-steps
  per iteration).  With ``kernel="pallas"``: a jitted ``solver.run_chunk(problem, state, 0, 20)``
  (what mw.solve runs: one kernel launch for the round's 20 iterations) and the loop of steps
  (one launch per iteration); the same start states, with the number of walkers whose final
  point is bit-identical to the XLA form's.  At the largest size, a sweep of the kernel's
  launch shapes (walkers per program x warps, ``--kernel-variants``).  Also: the same search including ``init`` (uniform
  start points and their first evaluation) from a key, and ``mw.solve``'s
  ``stats["run_seconds"]`` (the driver's chunks, compilation excluded).  The CPU code:
  ``multiwalk.reference.pattern_search`` on the same start points (float32 like ours, one core):
  the scalar Python loop (one point per call, the paper's CPU code) on a subset of walkers,
  scaled linearly to all walkers, and the NumPy loop batched over walkers, timed in full.
* Table 4: the twelve functions, 20 variables, 15360 walkers, 20 iterations: the same timings,
  XLA and Pallas (a function the kernel cannot take - the noisy quartic draws random numbers -
  runs the XLA form under ``kernel="pallas"``, and the table says so).
* Table 5: 30 variables, 15360 walkers, 20 iterations a round, ``mw.solve(problem,
  PatternSearch(rounds=None, restart=...), time_limit=T, seed=k)`` for k = 0 .. runs-1, with the
  paper's rounds from uniform points (``restart="random"``) and our ``restart="best"``; best and
  mean over runs of each run's best value, re-evaluated in float64 NumPy at ``result.x``.
  Quartic is searched on the noisy function (noise drawn from a fixed key and the point) and
  reported noise-free.  The paper allowed 10 s a run; we allow T (default 1 s).
* The hardware floor: copy bandwidth and FP32 rate measured in the same run; the fewest lane
  operations (objective from XLA's cost analysis plus the comparisons) and bytes of a
  kernel-per-coordinate search; and for the Pallas form, which evaluates a trial point
  incrementally, the lane operations of that incremental evaluation (its scalar graph).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this script is started
import common  # noqa: E402

ALGO_OPS = 12  # per trial point: x +- delta, box test, NaN test, two comparisons, selects, improvement flag

# ---------------------------------------------------------------------------- the paper's figures
PAPER_NAMES = {
    "ackley": "Ackley", "griewank": "Griewank", "penalized_1": "Penalty1", "penalized_2": "Penalty2",
    "quartic": "Quartic", "rastrigin": "Rastrigin", "rosenbrock": "Rosenbrock", "schwefel_1_2": "Schwefel 1.2",
    "schwefel_2_22": "Schwefel 2.22", "schwefel_2_21": "Schwefel 2.21", "sphere": "Sphere", "step": "Step",
}
# Table 1 (Ackley, 20 variables, 20 iterations, mean of 10 runs): walkers -> (GPU ms, CPU ms)
PAPER_T1 = {2048: (21.9, 1267.1), 4096: (29.7, 2543.7), 8192: (51.6, 5098.4), 12288: (64.1, 7629.6),
            15360: (76.6, 9535.9)}
# Table 4 (15360 walkers, 20 variables, 20 iterations): function -> (CPU ms, GPU ms)
PAPER_T4 = {"ackley": (9523.4, 78.2), "griewank": (9675.0, 92.2), "penalized_1": (63537.5, 484.3),
            "penalized_2": (61865.6, 509.4), "quartic": (2375.0, 51.6), "rastrigin": (9465.6, 70.3),
            "rosenbrock": (6421.9, 70.3), "schwefel_1_2": (15353.1, 117.2), "schwefel_2_22": (1890.7, 50.0),
            "schwefel_2_21": (2120.3, 46.9), "sphere": (1393.7, 45.3), "step": (6943.8, 50.0)}
# Table 5 (15360 walkers, 30 variables, 20 iterations a round, 10 runs of 10 s): (best, mean) of SIMT-PS and CPU PS
PAPER_T5_GPU = {"ackley": (0.0, 0.0), "griewank": (0.004, 0.007), "penalized_1": (0.0, 0.0), "penalized_2": (0.0, 0.0),
                "quartic": (0.0, 0.0), "rastrigin": (18.196, 24.666), "rosenbrock": (1.020, 13.146),
                "schwefel_1_2": (279.46, 539.862), "schwefel_2_22": (0.0, 0.0), "schwefel_2_21": (3.2, 3.51),
                "sphere": (0.0, 0.0), "step": (0.0, 0.0)}
PAPER_T5_CPU = {"ackley": (0.0, 0.0), "griewank": (0.064, 0.126), "penalized_1": (0.0, 0.001),
                "penalized_2": (0.008, 0.021), "quartic": (0.0, 0.0), "rastrigin": (54.588, 73.593),
                "rosenbrock": (22.340, 25.946), "schwefel_1_2": (4417.34, 5036.064), "schwefel_2_22": (0.0, 0.0),
                "schwefel_2_21": (12.9, 17.66), "sphere": (0.0, 0.0), "step": (0.0, 0.0)}
# The paper's appendix gives Ackley on [-30, 30] (Yao et al. and multiwalk.functions.yao use [-32, 32]).
BOX_OVERRIDE = {"ackley": (-30.0, 30.0)}
SOLVED = 1e-6  # Table 5: a best value below this counts as solved
QUARTIC_NOISE_KEY = 20090101


# ============================================================================ problems
def bounds(name: str) -> tuple[float, float]:
    from multiwalk.functions import yao

    spec = yao.TABLE[name]
    return BOX_OVERRIDE.get(name, (spec.lower, spec.upper))


def make_problem(mw: Any, name: str, d: int) -> Any:
    """The paper's function ``name`` in ``d`` variables; quartic with its noise (a fixed key through args)."""
    import jax

    from multiwalk.functions import yao

    lo, hi = bounds(name)
    if name == "quartic":
        return mw.Problem(objective=lambda x, key: yao.quartic(x, key), lower=np.full(d, lo), upper=np.full(d, hi),
                          args=jax.random.PRNGKey(QUARTIC_NOISE_KEY))
    return mw.Problem(objective=yao.TABLE[name].fn, lower=np.full(d, lo), upper=np.full(d, hi))


def numpy_function(name: str, noisy: bool = True) -> Callable[[np.ndarray], np.ndarray]:
    from multiwalk.reference import pattern_search as ref

    if name == "quartic" and noisy:
        return ref.noisy_quartic(QUARTIC_NOISE_KEY)
    return ref.FUNCTIONS[name]


def ackley_ops_by_hand(d: int) -> int:
    """Lane operations of one Ackley evaluation in multiwalk's form, counted by hand.

    Per coordinate: x^2, +=, pi*x, sin, ^2, += (5 arithmetic + 1 transcendental).  Then /n, *-0.2,
    sqrt, expm1, *-20, *-2/n, expm1, *e, - (6 arithmetic + 3 transcendentals).
    """
    return d * (5 + common.TRANSCENDENTAL_OPS) + 6 + 3 * common.TRANSCENDENTAL_OPS


# ============================================================================ our search
def _interleaved_inputs(fn: Callable[[Any], Any], inputs: list[Any], min_reps: int, min_seconds: float,
                        max_reps: int = 200) -> list[float]:
    """Time ``fn(inputs[i % len(inputs)])`` (host clock after block_until_ready) until min_reps and min_seconds."""
    import jax

    times: list[float] = []
    t_start = time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() - t_start < min_seconds):
        x = inputs[len(times) % len(inputs)]
        t0 = time.perf_counter()
        out = fn(x)
        jax.block_until_ready(out)
        times.append(time.perf_counter() - t0)
    return times


def prepare_loop(mw: Any, problem: Any, walkers: int, iterations: int, n_starts: int, kernel: str = "xla",
                 block: int | None = None, warps: int | None = None, mode: str = "steps") -> dict[str, Any]:
    """``n_starts`` initial states and the compiled search of ``iterations`` iterations (thread-safe):
    ``mode="steps"``, a ``fori_loop`` of ``solver.step`` calls; ``"chunk"``, ``solver.run_chunk``
    (what mw.solve runs: the Pallas form launches one kernel for all the iterations of a round).

    The start states come from the same keys whatever ``kernel``, so two forms start alike."""
    import jax
    import jax.numpy as jnp

    solver = mw.PatternSearch(n_walkers=walkers, iterations=iterations, rounds=1, kernel=kernel,
                              kernel_block=block, kernel_warps=warps)
    init = jax.jit(lambda k: solver.init(problem, k))
    starts = [init(jax.random.PRNGKey(s)) for s in range(n_starts)]
    jax.block_until_ready(starts)

    def loop(s):
        if mode == "chunk":
            return solver.run_chunk(problem, s, 0, jnp.asarray(iterations, jnp.int32))[0]
        return jax.lax.fori_loop(0, iterations, lambda i, c: solver.step(problem, c, 0), s)

    t0 = time.perf_counter()
    compiled = jax.jit(loop).lower(starts[0]).compile()
    return {"init": init, "starts": starts, "compiled": compiled, "compile_seconds": time.perf_counter() - t0,
            "cost": common.xla_cost(problem), "form": solver.kernel_plan(problem).name,
            "form_reason": solver.kernel_plan(problem).reason}


def kernel_ops(problem: Any) -> dict[str, float] | None:
    """Lane operations of one iteration of one walker as the Pallas kernel computes it: the objective's
    scalar graph once at x, then for each coordinate two trial points that recompute only the nodes
    depending on it (transcendentals counted as TRANSCENDENTAL_OPS), plus ALGO_OPS per trial point."""
    from multiwalk.scalarise import Unsupported, scalarise

    try:
        g = scalarise(problem.chi2_free, problem.n_free, problem.dtype)
    except Unsupported:
        return None
    heavy = {"sin", "cos", "tan", "exp", "exp2", "expm1", "log", "log1p", "sqrt", "rsqrt", "cbrt", "pow", "tanh",
             "logistic", "atan", "atan2", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erf_inv"}

    def cost(nodes: list[Any]) -> int:
        return sum(common.TRANSCENDENTAL_OPS if op.prim.name in heavy else 1 for op in nodes)

    full = cost(g.ops)
    trials = sum(2 * (cost(dep) + ALGO_OPS) for dep in g.dependents)
    return {"graph_ops": len(g.ops), "full_evaluation_ops": full, "per_iteration_ops": full + trials,
            "mean_recomputed_nodes": float(np.mean([len(dep) for dep in g.dependents]))}


def time_ours(prep: dict[str, Any], iterations: int, min_reps: int, min_seconds: float, with_init: bool,
              back_to_back: bool = False) -> dict[str, Any]:
    """Median time of the compiled loop over the start states in turn (and of init + loop from fresh keys)."""
    import jax

    compiled, starts, init = prep["compiled"], prep["starts"], prep["init"]
    finals = [compiled(s) for s in starts]  # warm-up, and the results checked below
    jax.block_until_ready(finals)
    times = _interleaved_inputs(compiled, starts, min_reps, min_seconds)
    walkers = int(starts[0].x.shape[0])
    out: dict[str, Any] = {
        "walkers": walkers, "iterations": iterations, "compile_seconds": prep["compile_seconds"],
        "loop_seconds_median": statistics.median(times), "loop_seconds_min": min(times), "loop_seconds_all": times,
        "spread": (max(times) - min(times)) / statistics.median(times),
    }
    if with_init:  # init (uniform points + first evaluation) and the loop, dispatched back to back, one sync
        keys = [jax.random.PRNGKey(1000 + s) for s in range(len(starts))]
        jax.block_until_ready([compiled(init(k)) for k in keys])
        times_full = _interleaved_inputs(lambda k: compiled(init(k)), keys, min_reps, min_seconds)
        out["with_init_seconds_median"] = statistics.median(times_full)
        out["with_init_seconds_all"] = times_full
    if back_to_back:  # calls dispatched back to back, one wait at the end: device time, host latency hidden
        per_call = []
        for _ in range(5):
            t0 = time.perf_counter()
            jax.block_until_ready([compiled(starts[i % len(starts)]) for i in range(40)])
            per_call.append((time.perf_counter() - t0) / 40)
        out["back_to_back_seconds"] = statistics.median(per_call)
    st0, fin0 = jax.tree_util.tree_map(np.asarray, starts[0]), jax.tree_util.tree_map(np.asarray, finals[0])
    out["x_init"] = st0.x  # float32 start points of the first state (for the CPU code), dropped from the JSON
    out["final_x"] = fin0.x
    out["final_f"] = fin0.fx
    out["best_f"] = float(fin0.best_f)
    out["check"] = bool(np.all(np.isfinite(fin0.fx)) and int(fin0.iteration) == iterations
                        and np.all(fin0.fx <= st0.fx) and float(fin0.best_f) == float(fin0.fx.min()))
    return out


def prepare_objective_only(problem: Any, walkers: int, iterations: int) -> dict[str, Any]:
    """The objective alone: iterations * d evaluations of 2*walkers points in a loop of the same structure."""
    import jax
    import jax.numpy as jnp

    d = problem.n_free
    lo, hi, _ = problem.free_bounds()
    x = jnp.asarray(lo + (hi - lo) * np.random.default_rng(5).uniform(size=(2 * walkers, d)), problem.dtype)
    f = jax.vmap(problem.chi2_free)

    def run(x):
        def body(i, x):  # a dependency keeps every evaluation in the loop
            return x.at[:, i % d].add(1e-30 * f(x))

        return jax.lax.fori_loop(0, iterations * d, body, x)

    return {"compiled": jax.jit(run).lower(x).compile(), "x": x, "evaluations": 2 * walkers * iterations * d}


def time_objective_only(prep: dict[str, Any], min_reps: int, min_seconds: float) -> dict[str, Any]:
    import jax

    jax.block_until_ready(prep["compiled"](prep["x"]))
    times = _interleaved_inputs(prep["compiled"], [prep["x"]], min_reps, min_seconds)
    return {"seconds_median": statistics.median(times), "evaluations": prep["evaluations"]}


def prewarm_solve(problem: Any, solver: Any) -> float:
    """Compile what ``mw.solve`` compiles (init, the chunk loop, the summary) so that its lookups in the
    persistent compilation cache hit: the same functions of the same objects lower to the same programs."""
    import jax
    import jax.numpy as jnp

    from multiwalk.solve import _chunk_runner, _key

    t0 = time.perf_counter()
    state = jax.jit(lambda k: solver.init(problem, k))(_key(0))
    jax.jit(lambda s: solver.summary(problem, s))(state)
    jax.jit(_chunk_runner(problem, solver, 0), donate_argnums=0).lower(state, jnp.asarray(1, jnp.int32)).compile()
    return time.perf_counter() - t0


def time_solve(mw: Any, problem: Any, walkers: int, iterations: int, kernel: str = "auto") -> dict[str, Any]:
    """mw.solve end to end, one round (progress off): its run_seconds, compile_seconds and wall time."""
    solver = mw.PatternSearch(n_walkers=walkers, iterations=iterations, rounds=1, kernel=kernel)
    t0 = time.perf_counter()
    res = mw.solve(problem, solver, seed=0, progress=False)
    wall = time.perf_counter() - t0
    return {"run_seconds": float(res.stats["run_seconds"]), "compile_seconds": float(res.stats["compile_seconds"]),
            "wall_seconds": wall, "chunks": int(res.stats["chunks"]), "best_f": float(res.fun),
            "evaluations": int(res.stats["evaluations"]), "kernel": kernel, "form": res.stats.get("kernel")}


# ============================================================================ the CPU code
def time_cpu(name: str, x_init: np.ndarray, iterations: int, scalar_walkers: int, batched: bool) -> dict[str, Any]:
    """The reference on the same float32 start points: scalar loop on a subset (scaled), batched loop in full."""
    from multiwalk.reference import pattern_search as ref

    lo, hi = bounds(name)
    w = x_init.shape[0]
    k = min(scalar_walkers, w)
    out: dict[str, Any] = {"walkers": w, "scalar_walkers": k}
    t0 = time.perf_counter()
    xs, fs, ss = ref.pattern_search_numpy(numpy_function(name), x_init[:k], lo, hi, iterations)
    t = time.perf_counter() - t0
    out.update({"scalar_seconds_subset": t, "scalar_seconds_scaled": t * w / k, "scalar_best_f_subset": float(fs.min())})
    if batched:
        t0 = time.perf_counter()
        xb, fb, sb = ref.pattern_search_numpy_batched(numpy_function(name), x_init, lo, hi, iterations)
        out["batched_seconds"] = time.perf_counter() - t0
        out["batched_best_f"] = float(fb.min())
        out["final_x"] = xb
        out["final_f"] = fb
        if name != "quartic":  # the noise draws differ between the two drivers
            out["scalar_equals_batched"] = bool(np.array_equal(xs, xb[:k]) and np.array_equal(fs, fb[:k]))
    return out


def compare(ours: dict[str, Any], cpu: dict[str, Any]) -> dict[str, Any]:
    """How many walkers end at the same point in our float32 search and the float32 NumPy one (same starts)."""
    if "final_x" not in cpu:
        return {}
    same = np.all(ours["final_x"] == cpu["final_x"], axis=1)
    return {"walkers_identical": int(same.sum()), "walkers": int(same.size)}


# ============================================================================ floor
def floor(problem: Any, walkers: int, iterations: int, cost: dict[str, float], bw: float, lane_ops: float,
          ops_per_eval: float | None = None) -> dict[str, Any]:
    """Fewest lane operations and bytes of the search, and the time they take at the measured ceilings.

    Evaluations: walkers * (1 + 2 d iterations).  Operations per evaluation: the objective (XLA's
    flop count, each transcendental counted as TRANSCENDENTAL_OPS; or a hand count) plus
    ALGO_OPS for the trial point and the comparisons.  Bytes: a kernel per coordinate sub-step
    reads each walker's point, value and step scale and writes the new coordinate, value and
    improvement flag: walkers * (4 d + 17) per sub-step, d * iterations sub-steps.  (A kernel
    keeping every walker in registers for the whole search moves only the start and end points:
    the operations alone bound it.)
    """
    d = problem.n_free
    evals = walkers * (1 + 2 * d * iterations)
    per_eval = (ops_per_eval if ops_per_eval is not None
                else cost["flops"] + common.TRANSCENDENTAL_OPS * cost["transcendentals"])
    ops = evals * (per_eval + ALGO_OPS)
    nbytes = walkers * (4 * d + 17) * d * iterations
    t_ops, t_mem = ops / lane_ops, nbytes / bw
    out = {"evaluations": evals, "ops_per_evaluation": per_eval + ALGO_OPS, "ops": ops, "bytes": nbytes,
           "seconds_ops": t_ops, "seconds_memory": t_mem, "seconds": max(t_ops, t_mem),
           "bound": "operations" if t_ops >= t_mem else "memory"}
    inc = kernel_ops(problem)
    if inc is not None:
        # The Pallas form: incremental trial evaluations; its bytes (points in and out once per
        # iteration, 4 d + 12 bytes a walker each way) are negligible, so operations bound it.
        k_ops = walkers * iterations * inc["per_iteration_ops"]
        k_bytes = walkers * iterations * 2 * (4 * d + 12)
        out["incremental"] = {**inc, "ops": k_ops, "bytes": k_bytes,
                              "seconds": max(k_ops / lane_ops, k_bytes / bw)}
    return out


# ============================================================================ table 5
def table5(mw: Any, problems: dict[str, Any], solvers: dict[str, Any], seconds: float, runs: int, deadline: float,
           t_all: float, log: Callable[[str], None], notes: list[str], save: Callable[[], None],
           results: dict[str, Any]) -> None:
    """Time-limited runs, seed-major: every (function, restart) gets seed k before any gets seed k + 1,
    so a run stopped by ``deadline`` has the same number of runs for every function."""
    from multiwalk.reference import pattern_search as ref

    for name in problems:
        for mode in solvers:
            results.setdefault(name, {})[mode] = {"runs": []}
    estimate = None  # seconds the next pass of seeds should take
    for seed in range(runs):
        left = deadline - (time.perf_counter() - t_all)
        if estimate is not None and estimate > left:
            msg = (f"Table 5 stopped after {seed} of {runs} runs per function and restart: the next pass of "
                   f"{len(problems) * len(solvers)} runs (~{estimate:.0f} s) would end past --deadline {deadline:g} s "
                   f"({left:.0f} s left)")
            notes.append(msg)
            log(msg)
            break
        t_pass = time.perf_counter()
        compile_time = 0.0
        for name, problem in problems.items():
            for mode, solver in solvers.items():
                t0 = time.perf_counter()
                res = mw.solve(problem, solver, time_limit=seconds, seed=seed, progress=False)
                wall = time.perf_counter() - t0
                x = np.asarray(res.x, np.float64)
                value = float(ref.FUNCTIONS[name](x))  # float64, noise-free for quartic
                compile_time += float(res.stats["compile_seconds"])
                results[name][mode]["runs"].append({
                    "seed": seed, "value_f64": value, "fun": float(res.fun), "rounds": int(res.stats["rounds"]),
                    "run_seconds": float(res.stats["run_seconds"]), "compile_seconds": float(res.stats["compile_seconds"]),
                    "wall_seconds": wall, "evaluations": int(res.stats["evaluations"]), "status": str(res.status),
                })
                if seed == 0:
                    log(f"table 5 {name:13s} {mode:6s} seed 0: best {value:.4g} in {res.stats['rounds']} rounds, "
                        f"compile {res.stats['compile_seconds']:.2f} s, wall {wall:.2f} s")
        elapsed = time.perf_counter() - t_pass
        # The next pass: this one, with its compilations replaced by cache hits (~0.5 s each) after the first.
        n = len(problems) * len(solvers)
        estimate = elapsed if seed > 0 else elapsed - compile_time + n * min(0.5, compile_time / n)
        log(f"table 5 pass {seed + 1}/{runs} done in {elapsed:.1f} s (compilation {compile_time:.1f} s)")
        for name in problems:
            for mode in solvers:
                r = results[name][mode]
                vals = [run["value_f64"] for run in r["runs"]]
                r.update({"best": min(vals), "mean": float(np.mean(vals)), "n_runs": len(vals),
                          "rounds_mean": float(np.mean([run["rounds"] for run in r["runs"]])),
                          "compile_first": r["runs"][0]["compile_seconds"],
                          "compile_later": float(np.mean([run["compile_seconds"] for run in r["runs"][1:]]))
                          if len(r["runs"]) > 1 else None})
        save()


# ============================================================================ output
def _ms(v: float | None, digits: int = 3) -> str:
    return "—" if v is None else f"{v * 1e3:.{digits}g}"


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.3g}×"


def _v(v: float | None) -> str:
    if v is None:
        return "—"
    return "0" if v == 0 else f"{v:.4g}"


def markdown(report: dict[str, Any]) -> str:
    env, st, fl = report["environment"], report["settings"], report["ceilings"]
    lines = [
        f"### mw.PatternSearch (SIMT-PS, Zhu & Curry) — {env['device']} — {env['date']}",
        "",
        f"Ours: multiwalk {env['multiwalk']}, JAX {env['jax']}, {env['device']} ({env['platform']}), float32. "
        f"CPU code: `multiwalk.reference.pattern_search`, NumPy {env['numpy']}, float32, one core of {env['cpu']}. "
        "Paper: GeForce GTX 280 and one core of a 2.5 GHz Core 2 Duo (2008); its GPU time includes initialisation.",
        f"Measured ceilings: copy bandwidth {fl['bandwidth']['bytes_per_s'] / 1e9:.3g} GB/s (read + write); "
        f"FP32 FMA chain {fl['fp32']['flops_per_s'] / 1e12:.3g} TFLOP/s; f32 matmul (HIGHEST) "
        f"{fl['matmul']['flops_per_s'] / 1e12:.3g} TFLOP/s; lane rate for the floor = the faster / 2 = "
        f"{fl['lane_ops_per_s'] / 1e12:.3g} T lane-ops/s.",
        "",
        f"Ours (loop): `solver.init`, then a jitted `fori_loop` of {st['iterations']} `solver.step` calls, compiled once, "
        f"median of at least {st['min_reps']} calls and {st['min_seconds']:g} s over {st['n_starts']} start states in turn "
        "(host clock after `block_until_ready`). With init: the same from a key, uniform start points and their "
        "evaluation included. mw.solve: `stats['run_seconds']` of one round (chunks of 1, 2, 4, ... iterations, "
        "compilation excluded). CPU scalar: the paper's CPU code (Python loop over walkers, iterations and "
        f"coordinates, `f` on one point) timed on {st['scalar_walkers']} walkers and scaled linearly to all walkers. "
        "CPU batched: the same loop over iterations and coordinates, all walkers per NumPy call, timed in full. "
        "Speedup = CPU scalar (scaled) / the faster of our two forms. XLA = `PatternSearch(kernel='xla')` (d dependent "
        "XLA sub-steps per iteration), timed as the loop above; Pallas = `kernel='pallas'` (one walker per lane, "
        "the walkers in registers for the whole sweep), timed as a jitted `solver.run_chunk(problem, state, 0, "
        f"{st['iterations']})` (what mw.solve runs: one kernel launch for the {st['iterations']} iterations of the "
        "round, plus the best-point bookkeeping), and in Table 1 also as the loop of `solver.step` calls (one "
        "launch per iteration). Back to back: 40 calls dispatched without waiting, one wait, time / 40 (median of "
        "5): the device's time per call with the host's dispatch and synchronisation latency hidden. "
        "Same start points for all; identical = walkers whose final point is bit-identical in the two "
        "codes compared (float32 rounding of sums and of sin/exp may differ, and a walker whose comparison flips "
        "on one rounding takes another path).",
    ]
    t1 = report.get("table1")
    if t1:
        lines += ["", f"Table 1 — Ackley, {st['d_table1']} variables, {st['iterations']} iterations (ms)", "",
                  "| walkers | ours XLA loop | ours Pallas (run_chunk) | XLA / Pallas | Pallas back to back "
                  "| Pallas, a launch per step "
                  "| ours with init (XLA) | mw.solve run "
                  "| CPU batched | CPU scalar (scaled) | speedup | paper GPU | paper CPU | paper speedup | floor XLA form "
                  "| floor Pallas form | Pallas floor/ours | identical XLA = CPU | identical Pallas = XLA "
                  "| compile s XLA / Pallas |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in t1:
            o, c, p = r["ours"], r["cpu"], PAPER_T1.get(r["walkers"])
            k = r.get("pallas") or {}
            fastest = min(o["loop_seconds_median"], k.get("loop_seconds_median", np.inf))
            sol = r.get("solve") or {}
            cmp_, cmpk = r.get("compare") or {}, r.get("compare_pallas") or {}
            inc = r["floor"].get("incremental") or {}
            k_ms = k.get("loop_seconds_median")
            ratio = _x(o["loop_seconds_median"] / k_ms) if k_ms else "—"
            k_floor = f"{100 * inc['seconds'] / k_ms:.2g} %" if k_ms and inc else "—"
            k_compile = f"{k['compile_seconds']:.2f}" if k else "—"
            lines.append(
                f"| {r['walkers']} | {_ms(o['loop_seconds_median'])} | {_ms(k_ms)} | {ratio} | "
                f"{_ms(k.get('back_to_back_seconds'))} | {_ms((r.get('pallas_steps') or {}).get('loop_seconds_median'))} | "
                f"{_ms(o.get('with_init_seconds_median'))} | "
                f"{_ms(sol.get('run_seconds'))} | {_ms(c.get('batched_seconds'), 4)} | {_ms(c['scalar_seconds_scaled'], 4)} | "
                f"{_x(c['scalar_seconds_scaled'] / fastest)} | "
                f"{p[0] if p else '—'} | {p[1] if p else '—'} | {_x(p[1] / p[0]) if p else '—'} | "
                f"{_ms(r['floor']['seconds'])} | {_ms(inc.get('seconds'))} | {k_floor} | "
                f"{cmp_.get('walkers_identical', '—')}/{cmp_.get('walkers', '—')} | "
                f"{cmpk.get('walkers_identical', '—')}/{cmpk.get('walkers', '—')} | "
                f"{o['compile_seconds']:.2f} / {k_compile} |")
        big = t1[-1]
        f_ = big["floor"]
        lines += ["", f"Floor at {big['walkers']} walkers: {f_['evaluations']:.4g} evaluations × "
                  f"{f_['ops_per_evaluation']:.0f} lane ops (Ackley {report['ackley_ops_by_hand']} by hand, XLA "
                  f"{big['cost']['flops']:.0f} flops + {big['cost']['transcendentals']:.0f} transcendentals × "
                  f"{common.TRANSCENDENTAL_OPS}; + {ALGO_OPS} for the trial and comparisons) = {f_['ops']:.3g} ops → "
                  f"{_ms(f_['seconds_ops'])} ms; {f_['bytes'] / 1e6:.4g} MB for a kernel per coordinate sub-step → "
                  f"{_ms(f_['seconds_memory'])} ms; {f_['bound']}-bound."]
        small = t1[0]
        per_sub = big["ours"]["loop_seconds_median"] / (st["iterations"] * st["d_table1"])
        growth = "" if small is big else (
            f"; from {small['walkers']} to {big['walkers']} walkers ({big['walkers'] / small['walkers']:.3g}× the work) "
            f"the time grows {big['ours']['loop_seconds_median'] / small['ours']['loop_seconds_median']:.3g}×")
        lines.append(f"Ours per coordinate sub-step at {big['walkers']} walkers: {per_sub * 1e6:.3g} µs "
                     f"({st['iterations']} × {st['d_table1']} sequential sub-steps){growth}.")
        if big.get("objective_only"):
            oo = big["objective_only"]
            lines.append(f"Objective alone (the {oo['evaluations']:.4g} trial evaluations in the same loop structure, "
                         f"no search logic): {_ms(oo['seconds_median'])} ms.")
        if big.get("solve"):
            s = big["solve"]
            lines.append(f"mw.solve (kernel='{s.get('kernel', 'auto')}', ran {s.get('form', '?')}) at {big['walkers']} "
                         f"walkers: run {_ms(s['run_seconds'])} ms in {s['chunks']} chunks, "
                         f"compile {s['compile_seconds']:.2f} s, wall {s['wall_seconds']:.2f} s.")
        inc = big["floor"].get("incremental")
        if inc:
            lines.append(f"Floor of the Pallas form at {big['walkers']} walkers: per walker and iteration the objective's "
                         f"scalar graph once ({inc['graph_ops']} nodes, {inc['full_evaluation_ops']} lane ops) and "
                         f"2 × {st['d_table1']} trial points recomputing {inc['mean_recomputed_nodes']:.3g} nodes on "
                         f"average (+ {ALGO_OPS} ops each): {inc['per_iteration_ops']} lane ops → {inc['ops']:.3g} ops → "
                         f"{_ms(inc['seconds'])} ms (its {inc['bytes'] / 1e6:.3g} MB of points in and out are negligible).")
        if big.get("pallas"):
            k_ms = big["pallas"]["loop_seconds_median"]
            b2b = big["pallas"].get("back_to_back_seconds")
            lines.append(f"Goal (Table 1's largest case in < 1 ms after compilation): Pallas {_ms(k_ms)} ms at "
                         f"{big['walkers']} walkers (median of single synchronised calls; "
                         f"{_ms(b2b)} ms a call back to back) — {'met' if k_ms < 1e-3 else 'NOT met'} (XLA form "
                         f"{_ms(big['ours']['loop_seconds_median'])} ms; the paper's GPU "
                         f"{PAPER_T1.get(big['walkers'], ('—',))[0]} ms).")
    variants = report.get("kernel_variants")
    if variants:
        lines += ["", f"Pallas launch shapes — Ackley, {st['d_table1']} variables, {variants[0]['walkers']} walkers, "
                  f"{st['iterations']} iterations (run_chunk, as in Table 1)", "",
                  "| walkers per program | warps | walkers per thread | loop ms | per iteration µs "
                  "| final points identical to the first shape's | compile s |", "|---:|---:|---:|---:|---:|---:|---:|"]
        for v in variants:
            if "error" in v:
                lines.append(f"| {v['block']} | {v['warps']} | — | failed: {v['error'][:120]} | — | — | — |")
                continue
            lines.append(f"| {v['block']} | {v['warps']} | {v['block'] / (32 * v['warps']):.3g} | "
                         f"{_ms(v['loop_seconds_median'])} | {v['loop_seconds_median'] / st['iterations'] * 1e6:.3g} | "
                         f"{v.get('same_as_first_variant', '—')}/{v['walkers']} | {v['compile_seconds']:.2f} |")
    t4 = report.get("table4")
    if t4:
        lines += ["", f"Table 4 — {st['walkers_table4']} walkers, {st['d_table4']} variables, {st['iterations']} "
                  "iterations (ms; quartic with its noise)", "",
                  "| function | ours XLA | ours Pallas | XLA / Pallas | CPU batched | CPU scalar (scaled) | speedup "
                  "| paper CPU | paper GPU | paper speedup | floor XLA form | floor Pallas form | Pallas floor/ours "
                  "| best XLA | best Pallas | best CPU batched | identical XLA = CPU | identical Pallas = XLA "
                  "| compile s XLA / Pallas |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, r in t4.items():
            o, c, p = r["ours"], r["cpu"], PAPER_T4[name]
            k = r.get("pallas") or {}
            cmp_, cmpk = r.get("compare") or {}, r.get("compare_pallas") or {}
            inc = r["floor"].get("incremental") or {}
            k_ms = k.get("loop_seconds_median")
            ran = r.get("pallas_form", "")
            label = _ms(k_ms) + ("" if not k or ran.startswith("pallas") else " (XLA: not scalarisable)")
            fastest = min(o["loop_seconds_median"], k_ms or np.inf)
            k_floor = f"{100 * inc['seconds'] / k_ms:.2g} %" if k_ms and inc else "—"
            k_compile = f"{k['compile_seconds']:.2f}" if k else "—"
            lines.append(
                f"| {PAPER_NAMES[name]} | {_ms(o['loop_seconds_median'])} | {label} | "
                f"{_x(o['loop_seconds_median'] / k_ms) if k_ms else '—'} | {_ms(c.get('batched_seconds'), 4)} | "
                f"{_ms(c['scalar_seconds_scaled'], 4)} | {_x(c['scalar_seconds_scaled'] / fastest)} | "
                f"{p[0]} | {p[1]} | {_x(p[0] / p[1])} | {_ms(r['floor']['seconds'])} | {_ms(inc.get('seconds'))} | "
                f"{k_floor} | {o['best_f']:.4g} | {_v(k.get('best_f'))} | "
                f"{_v(c.get('batched_best_f'))} | {cmp_.get('walkers_identical', '—')}/{cmp_.get('walkers', '—')} | "
                f"{cmpk.get('walkers_identical', '—')}/{cmpk.get('walkers', '—')} | "
                f"{o['compile_seconds']:.2f} / {k_compile} |")
    t5 = report.get("table5")
    if t5:
        lines += ["", f"Table 5 — {st['walkers_table5']} walkers, {st['d_table5']} variables, {st['iterations']} "
                  f"iterations a round, time limit {st['table5_seconds']:g} s a run (the paper: 10 s), best and mean over "
                  "runs of each run's best value (float64 at result.x; quartic searched with noise, reported "
                  "noise-free)", "",
                  "| function | runs | random: best | random: mean | random: rounds/run | best: best | best: mean "
                  "| best: rounds/run | paper SIMT-PS best | paper SIMT-PS mean | compile s (first / later) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        counts = {"random": 0, "best": 0}
        for name, modes in t5.items():
            rr, rb = modes["random"], modes["best"]
            if not rr.get("n_runs"):
                continue
            for m in counts:
                counts[m] += int(modes[m]["best"] < SOLVED)
            pg = PAPER_T5_GPU[name]
            later = rr.get("compile_later")
            lines.append(
                f"| {PAPER_NAMES[name]} | {rr['n_runs']} | {_v(rr['best'])} | {_v(rr['mean'])} | {rr['rounds_mean']:.3g} | "
                f"{_v(rb['best'])} | {_v(rb['mean'])} | {rb['rounds_mean']:.3g} | {_v(pg[0])} | {_v(pg[1])} | "
                f"{rr['compile_first']:.2f} / {'—' if later is None else f'{later:.2f}'} |")
        n = sum(1 for m in t5.values() if m["random"].get("n_runs"))
        lines += ["", f"Solved (best < {SOLVED:g}): restart='random' {counts['random']} of {n}, restart='best' "
                  f"{counts['best']} of {n}; the paper's SIMT-PS (10 s): "
                  f"{sum(1 for k in t5 if PAPER_T5_GPU[k][0] < SOLVED)} of {n} (values printed to 3 decimals)."]
    return common.finish_markdown(lines, report.get("notes", []))


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items() if k not in ("x_init", "final_x", "final_f")}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return obj


# ============================================================================ main
def _ints(text: str) -> list[int]:
    return [int(float(v)) for v in text.split(",") if v.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = common.new_parser(__doc__)
    p.add_argument("--quick", action="store_true", help="tiny sizes, for a CPU smoke run (under 2 minutes)")
    p.add_argument("--tables", default="1,4,5", help="which tables to run, e.g. 1,4 (default 1,4,5)")
    p.add_argument("--walkers", type=_ints, default=None,
                   help="Table 1 walker counts (default 2048,4096,8192,12288,15360; 512 with --quick)")
    p.add_argument("--table4-walkers", type=int, default=None, help="Table 4 walkers (default 15360; 512 with --quick)")
    p.add_argument("--table5-walkers", type=int, default=None, help="Table 5 walkers (default 15360; 512 with --quick)")
    p.add_argument("--table5-seconds", type=float, default=None,
                   help="time limit of each Table 5 run (default 1; 0.2 with --quick)")
    p.add_argument("--table5-runs", type=int, default=None,
                   help="Table 5 runs (seeds 0..runs-1) per function and restart (default 10; 2 with --quick)")
    p.add_argument("--functions", default=None,
                   help="comma-separated functions for Tables 4 and 5 (default the paper's 12; "
                        "ackley,penalized_1,quartic,step with --quick)")
    p.add_argument("--iterations", type=int, default=20, help="pattern-search iterations (a round in Table 5), default 20")
    p.add_argument("--scalar-walkers", type=int, default=None,
                   help="walkers the scalar CPU loop is timed on, scaled to all (default 64; 4 with --quick)")
    p.add_argument("--no-batched-cpu", action="store_true", help="skip the batched NumPy CPU code")
    p.add_argument("--no-solve", action="store_true", help="skip the mw.solve timings of Table 1")
    p.add_argument("--no-kernel", action="store_true", help="skip the Pallas form (kernel='pallas') in Tables 1 and 4")
    p.add_argument("--kernel-block", type=int, default=None,
                   help="Pallas walkers per program for the tables (default: the solver's)")
    p.add_argument("--kernel-warps", type=int, default=None,
                   help="Pallas warps per program for the tables (default: the solver's)")
    p.add_argument("--kernel-variants", default=None,
                   help="Pallas launch shapes BLOCKxWARPS timed at Table 1's largest size, e.g. 64x2,128x4 "
                        "(default 32x1,64x1,64x2,128x2,128x4,256x4,256x8 on a GPU, none on a CPU; 'none' to skip)")
    p.add_argument("--min-seconds", type=float, default=None, help="time each of our loops at least this long (default 0.5)")
    p.add_argument("--deadline", type=float, default=460.0,
                   help="seconds after the start past which no new Table 5 pass of seeds begins (default 460)")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="do not use a temporary JAX persistent compilation cache (it lets Table 5's repeated mw.solve "
                        "calls of one function reuse the first compilation)")
    common.add_out_option(p, "pattern_search")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common.select_platform(args.device)

    import jax

    import multiwalk as mw
    from multiwalk.functions import yao

    t_all = time.perf_counter()
    found = common.first_device(args.device)
    if found is None:
        return 2
    dev, on_gpu = found

    cache_dir = None
    if not args.no_compile_cache:
        cache_dir = tempfile.mkdtemp(prefix="mw_jax_cache_")
        try:
            jax.config.update("jax_compilation_cache_dir", cache_dir)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        except (AttributeError, KeyError, ValueError) as err:  # an option this JAX does not know
            print(f"WARNING: no persistent compilation cache ({err}); Table 5 recompiles every run", file=sys.stderr)
            shutil.rmtree(cache_dir, ignore_errors=True)
            cache_dir = None

    quick = args.quick
    tables = {int(t) for t in args.tables.split(",") if t.strip()}
    if not tables <= {1, 4, 5}:
        print(f"error: --tables takes 1, 4 and 5, got {args.tables!r}", file=sys.stderr)
        return 2
    iterations = args.iterations
    walkers_t1 = args.walkers or ([512] if quick else [2048, 4096, 8192, 12288, 15360])
    walkers_t4 = args.table4_walkers or (512 if quick else 15360)
    walkers_t5 = args.table5_walkers or (512 if quick else 15360)
    t5_seconds = args.table5_seconds if args.table5_seconds is not None else (0.2 if quick else 1.0)
    t5_runs = args.table5_runs if args.table5_runs is not None else (2 if quick else 10)
    if args.functions:
        functions = [f.strip() for f in args.functions.split(",") if f.strip()]
    else:
        functions = ["ackley", "penalized_1", "quartic", "step"] if quick else list(yao.PAPER_FUNCTIONS)
    for f in functions:
        if f not in PAPER_T4:
            print(f"error: unknown function {f!r}; choose from {', '.join(PAPER_T4)}", file=sys.stderr)
            return 2
    functions_t5 = functions
    scalar_walkers = args.scalar_walkers or (4 if quick else 64)
    min_seconds = args.min_seconds if args.min_seconds is not None else (0.1 if quick else 0.5)
    min_reps = 3 if quick else 10
    n_starts = 4
    d_t1 = d_t4 = 20
    d_t5 = 30

    env = common.environment(dev, on_gpu, mw, quick)
    device_name = env["device"]
    notes: list[str] = [
        "Ackley on [-30, 30] as in the paper's appendix (Yao et al. and multiwalk.functions.yao use [-32, 32]); "
        "delta0 = (upper - lower)/20, delta_tol = delta0/2^16 as in the paper.",
    ]
    if cache_dir:
        notes.append("A temporary JAX persistent compilation cache was on, so repeated mw.solve calls of one "
                     "(function, restart) in Table 5 reuse the first compilation (their compile_seconds is tracing "
                     "and cache loading).")

    log = common.make_log(t_all)

    # The plan, before anything long starts.
    n5 = len(functions_t5) * 2 * t5_runs
    plan5 = n5 * (t5_seconds + 0.5)  # + ~0.5 s a run: tracing, cache hits, init, the driver's chunks
    log(f"device {device_name} ({dev.platform}), JAX {jax.__version__}; tables {sorted(tables)}")
    if 5 in tables:
        log(f"plan: Table 5 = {len(functions_t5)} functions x 2 restarts x {t5_runs} runs x {t5_seconds:g} s "
            f"= {n5 * t5_seconds:.0f} s of search, ~{plan5:.0f} s with overheads after compilation "
            f"(no new pass of seeds starts after --deadline {args.deadline:g} s; --table5-runs 3 shortens it)")

    report: dict[str, Any] = {
        "environment": env,
        "settings": {"iterations": iterations, "walkers_table1": walkers_t1, "walkers_table4": walkers_t4,
                     "walkers_table5": walkers_t5, "d_table1": d_t1, "d_table4": d_t4, "d_table5": d_t5,
                     "table5_seconds": t5_seconds, "table5_runs": t5_runs, "functions": functions,
                     "functions_table5": functions_t5, "scalar_walkers": scalar_walkers, "min_reps": min_reps,
                     "min_seconds": min_seconds, "n_starts": n_starts, "deadline": args.deadline,
                     "compile_cache": bool(cache_dir), "argv": sys.argv[1:]},
        "paper": {"table1": PAPER_T1, "table4": PAPER_T4, "table5_simt_ps": PAPER_T5_GPU, "table5_cpu_ps": PAPER_T5_CPU},
        "ackley_ops_by_hand": ackley_ops_by_hand(d_t1),
        "notes": notes,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        report["total_seconds"] = time.perf_counter() - t_all
        common.write_report(out, "pattern_search", _jsonable(report), markdown(report))

    # ---------------------------------------------------------------- ceilings
    ceilings = common.measure_ceilings(on_gpu, 64 << 20, 512, log)
    bw, lane_ops = ceilings["bandwidth"], ceilings["lane_ops_per_s"]
    report["ceilings"] = {**ceilings, "assumptions": {"transcendental_ops": common.TRANSCENDENTAL_OPS, "algo_ops": ALGO_OPS,
                                                      "model": floor.__doc__}}

    # ---------------------------------------------------------------- compile everything first, in parallel
    # XLA compiles with the GIL released, so a thread pool compiles several programs at once.  Nothing is timed
    # while compiling.  Table 5's (function, restart) programs are compiled the way mw.solve compiles them, into
    # the persistent cache, so mw.solve's own compilations there are cache hits.
    size_rows: list[tuple[str, int]] = []
    if 1 in tables:
        size_rows += [("ackley", w) for w in walkers_t1]
    if 4 in tables:
        size_rows += [(name, walkers_t4) for name in functions if (name, walkers_t4) not in size_rows]
    problems14 = {name: make_problem(mw, name, d_t1) for name in {n for n, _ in size_rows}}
    problems5 = {name: make_problem(mw, name, d_t5) for name in functions_t5} if 5 in tables else {}
    solvers5 = {mode: mw.PatternSearch(n_walkers=walkers_t5, iterations=iterations, rounds=None, restart=mode)
                for mode in ("random", "best")}
    w_big = walkers_t1[-1] if 1 in tables else None
    tasks: dict[Any, Callable[[], Any]] = {}
    def guarded(fn: Callable[[], Any]) -> Callable[[], Any]:
        """A Pallas compilation that fails is reported in the tables, not fatal to the run."""
        def run() -> Any:
            try:
                return fn()
            except Exception as err:  # noqa: BLE001
                log(f"FAILED: {type(err).__name__}: {err}")
                return {"error": f"{type(err).__name__}: {err}"}
        return run

    kb, kw = args.kernel_block, args.kernel_warps
    for name, w in size_rows:
        tasks[("loop", name, w)] = lambda name=name, w=w: prepare_loop(mw, problems14[name], w, iterations, n_starts)
        if not args.no_kernel:
            tasks[("kloop", name, w)] = guarded(lambda name=name, w=w: prepare_loop(
                mw, problems14[name], w, iterations, n_starts, "pallas", kb, kw, "chunk"))
            if name == "ackley" and 1 in tables:
                tasks[("ksteps", name, w)] = guarded(lambda name=name, w=w: prepare_loop(
                    mw, problems14[name], w, iterations, n_starts, "pallas", kb, kw, "steps"))
    variants: list[tuple[int, int]] = []
    if w_big is not None and not args.no_kernel:
        spec = args.kernel_variants or ("32x1,64x1,64x2,128x2,128x4,256x4,256x8" if on_gpu else "none")
        if spec != "none":
            variants = [(int(v.split("x")[0]), int(v.split("x")[1])) for v in spec.split(",") if v.strip()]
        for b_, w_ in variants:
            tasks[("variant", b_, w_)] = guarded(lambda b_=b_, w_=w_: prepare_loop(
                mw, problems14["ackley"], w_big, iterations, n_starts, "pallas", b_, w_, "chunk"))
    if w_big is not None:
        tasks[("objective", w_big)] = lambda: prepare_objective_only(problems14["ackley"], w_big, iterations)
        if cache_dir and not args.no_solve:
            solver1 = mw.PatternSearch(n_walkers=w_big, iterations=iterations, rounds=1)
            tasks[("solve", w_big)] = guarded(lambda: prewarm_solve(problems14["ackley"], solver1))
    if cache_dir:
        for name, problem in problems5.items():
            for mode, solver in solvers5.items():
                tasks[("table5", name, mode)] = lambda p=problem, s=solver: prewarm_solve(p, s)
    workers = max(1, min(8, os.cpu_count() or 1))
    log(f"compiling {len(tasks)} programs on {workers} threads ...")
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        futures = {k: pool.submit(fn) for k, fn in tasks.items()}
        prepared = {k: f.result() for k, f in futures.items()}
    report["compile_phase"] = {"programs": len(tasks), "threads": workers, "wall_seconds": time.perf_counter() - t0}
    log(f"compiled {len(tasks)} programs in {time.perf_counter() - t0:.1f} s")
    notes.append(f"All {len(tasks)} programs were compiled first, {workers} at a time in threads "
                 f"({report['compile_phase']['wall_seconds']:.0f} s wall): the compile times listed are each "
                 "program's own wall time while sharing the CPU.")

    rows: dict[tuple[str, int], dict[str, Any]] = {}  # (function, walkers) -> row, shared by Tables 1 and 4

    def row(name: str, walkers: int, with_init: bool, solve: bool, objective_only: bool = False) -> dict[str, Any]:
        key = (name, walkers)
        if key in rows:
            return rows[key]
        problem = problems14[name]
        prep = prepared[("loop", name, walkers)]
        o = time_ours(prep, iterations, min_reps, min_seconds, with_init)
        c = time_cpu(name, o["x_init"], iterations, scalar_walkers, batched=not args.no_batched_cpu)
        r = {"function": name, "walkers": walkers, "ours": o, "cpu": c, "compare": compare(o, c), "cost": prep["cost"],
             "floor": floor(problem, walkers, iterations, prep["cost"], bw["bytes_per_s"], lane_ops)}
        if not o["check"]:
            notes.append(f"{name} at {walkers} walkers: sanity check of our final state failed")
        if c.get("scalar_equals_batched") is False:
            notes.append(f"{name} at {walkers} walkers: the scalar and batched CPU codes disagree on the subset")
        if solve:
            r["solve"] = time_solve(mw, problem, walkers, iterations)
        if objective_only:
            r["objective_only"] = time_objective_only(prepared[("objective", walkers)], min_reps, min_seconds)
        prep_k = prepared.get(("kloop", name, walkers))
        if prep_k is not None and "error" in prep_k:
            notes.append(f"{name} at {walkers} walkers: the Pallas form failed to compile: {prep_k['error'][:300]}")
        elif prep_k is not None:
            # The same start states as the XLA form (the same init, so the same points).
            k = time_ours({**prep_k, "starts": prep["starts"]}, iterations, min_reps, min_seconds, with_init=False,
                          back_to_back=name == "ackley")
            same = np.all(k["final_x"] == o["final_x"], axis=1)
            r["pallas"], r["pallas_form"], r["pallas_form_reason"] = k, prep_k["form"], prep_k["form_reason"]
            r["compare_pallas"] = {"walkers_identical": int(same.sum()), "walkers": int(same.size),
                                   "max_abs_value_difference": float(np.max(np.abs(k["final_f"] - o["final_f"])))}
            if not k["check"]:
                notes.append(f"{name} at {walkers} walkers: sanity check of the Pallas form's final state failed")
            if not prep_k["form"].startswith("pallas"):
                notes.append(f"{name}: kernel='pallas' ran the XLA form: {prep_k['form_reason']}")
            log(f"{name:13s} {walkers:6d} walkers: Pallas {k['loop_seconds_median'] * 1e3:.3g} ms ({prep_k['form']}), "
                f"best {k['best_f']:.4g}, identical to XLA {same.sum()}/{same.size}")
        prep_s = prepared.get(("ksteps", name, walkers))
        if prep_s is not None and "error" not in prep_s:
            ks = time_ours({**prep_s, "starts": prep["starts"]}, iterations, min_reps, min_seconds, with_init=False)
            r["pallas_steps"] = {k_: v_ for k_, v_ in ks.items() if k_ not in ("x_init", "final_x", "final_f")}
            r["pallas_steps"]["same_as_chunk"] = bool("pallas" in r and np.array_equal(ks["final_x"], k["final_x"]))
            log(f"{name:13s} {walkers:6d} walkers: Pallas, one launch per step: {ks['loop_seconds_median'] * 1e3:.3g} ms")
        rows[key] = r
        cm = r["compare"]
        log(f"{name:13s} {walkers:6d} walkers: ours {o['loop_seconds_median'] * 1e3:.3g} ms "
            f"(with init {_ms(o.get('with_init_seconds_median'))} ms); "
            f"CPU batched {_ms(c.get('batched_seconds'), 4)} ms, scalar {c['scalar_seconds_scaled'] * 1e3:.4g} ms "
            f"(scaled from {c['scalar_walkers']}); floor {r['floor']['seconds'] * 1e3:.3g} ms; "
            f"best {o['best_f']:.4g} vs CPU {_v(c.get('batched_best_f'))}; identical {cm.get('walkers_identical', '—')}"
            f"/{cm.get('walkers', '—')}" + (f"; mw.solve run {r['solve']['run_seconds'] * 1e3:.3g} ms "
                                            f"(compile {r['solve']['compile_seconds']:.2f} s)" if solve else ""))
        return r

    try:
        if variants:
            report["kernel_variants"] = []
            ref_x = None
            for b_, w_ in variants:
                prep_v = prepared[("variant", b_, w_)]
                v: dict[str, Any] = {"block": b_, "warps": w_, "walkers": w_big}
                if "error" in prep_v:
                    v["error"] = prep_v["error"]
                else:
                    starts = prepared[("loop", "ackley", w_big)]["starts"]  # the XLA form's, as in Table 1
                    tv = time_ours({**prep_v, "starts": starts}, iterations, min_reps, min_seconds, with_init=False)
                    ref_x = tv["final_x"] if ref_x is None else ref_x
                    v.update({"loop_seconds_median": tv["loop_seconds_median"], "compile_seconds": tv["compile_seconds"],
                              "spread": tv["spread"], "best_f": tv["best_f"],
                              "same_as_first_variant": int(np.all(tv["final_x"] == ref_x, axis=1).sum())})
                    log(f"Pallas {b_}x{w_}: {tv['loop_seconds_median'] * 1e3:.3g} ms")
                report["kernel_variants"].append(v)
            save()
        if 1 in tables:
            report["table1"] = []
            for w in walkers_t1:
                big = w == w_big
                report["table1"].append(row("ackley", w, with_init=True, solve=big and not args.no_solve,
                                            objective_only=big))
            save()
        if 4 in tables:
            report["table4"] = {}
            for name in functions:
                report["table4"][name] = row(name, walkers_t4, with_init=False, solve=False)
            save()
        if 5 in tables:
            report["table5"] = {}
            table5(mw, problems5, solvers5, t5_seconds, t5_runs, args.deadline, t_all, log, notes, save,
                   report["table5"])
    finally:
        save()
        if cache_dir:
            shutil.rmtree(cache_dir, ignore_errors=True)
    common.print_done(log, out, "pattern_search", t_all, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
