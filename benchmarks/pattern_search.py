#!/usr/bin/env python
"""PatternSearch (Zhu & Curry's SIMT-PS) through ``mw.solve``: the paper's Tables 1, 4 and 5.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python3 benchmarks/pattern_search.py --device gpu --out "$OUT"      # Tables 1, 4: a few minutes
    PYTHONPATH=src python3 benchmarks/pattern_search.py --device gpu --tables 5 --out "$OUT"
    PYTHONPATH=src python3 benchmarks/pattern_search.py --device cpu --quick           # seconds

The paper (Zhu & Curry 2009) ran SIMT-PS on a GeForce GTX 280 against the same algorithm on one
core of a 2.5 GHz Core 2 Duo; its figures are printed in the note column.

* Table 1: Ackley, 20 variables, 20 iterations, 2048 ... 15360 walkers.  Table 4: the 12
  functions at 15360 walkers.  Ours: the wall clock of ``mw.solve(problem, PatternSearch(n_walkers=W,
  iterations=20, rounds=1, kernel=...), seed=0)`` with ``result.x`` and ``result.fun`` read back,
  first call (compiling) and second.  Peer, in the same run: ``multiwalk.reference.pattern_search``,
  the same algorithm as a one-core NumPy loop with all walkers' trial points in one call
  (``pattern_search_numpy_batched``) from uniform float32 start points.
* Table 5 (``--tables 5``): the 12 functions in 30 variables, rounds of 20 iterations until a time
  limit T (1 s; the paper 10 s), ``restart="random"`` (the paper) and ``"best"`` (ours): best and
  mean over ``--table5-runs`` seeds of each run's best value, re-evaluated in float64 NumPy.
* Floor: the search's evaluations, walkers * (1 + 2 d iterations), times the objective's lane
  operations (XLA's cost analysis, a transcendental as 20) plus 12 for the trial point and the
  comparisons, over the FP32 lane rate measured in the same run (a search keeping its walkers in
  registers moves few bytes: operations bound it).  It bounds throughput: the iterations x d
  sub-steps are sequential, so small searches are bound by latency instead; and the Pallas form
  evaluates a trial point incrementally (only what depends on the moved coordinate), below this
  count of full evaluations.
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
# Table 5 (15360 walkers, 30 variables, 20 iterations a round, 10 runs of 10 s): (best, mean) of SIMT-PS
PAPER_T5_GPU = {"ackley": (0.0, 0.0), "griewank": (0.004, 0.007), "penalized_1": (0.0, 0.0), "penalized_2": (0.0, 0.0),
                "quartic": (0.0, 0.0), "rastrigin": (18.196, 24.666), "rosenbrock": (1.020, 13.146),
                "schwefel_1_2": (279.46, 539.862), "schwefel_2_22": (0.0, 0.0), "schwefel_2_21": (3.2, 3.51),
                "sphere": (0.0, 0.0), "step": (0.0, 0.0)}
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


def floor_seconds(problem: Any, walkers: int, iterations: int, ceilings: dict[str, Any]) -> float:
    """The operations time of the search's full evaluations (module docstring)."""
    cost = common.xla_cost(problem)
    evaluations = walkers * (1 + 2 * problem.n_free * iterations)
    ops = evaluations * (cost["flops"] + common.TRANSCENDENTAL_OPS * cost["transcendentals"] + ALGO_OPS)
    return ops / ceilings["lane_ops_per_s"]


# ============================================================================ Tables 1 and 4
def speed_row(mw: Any, name: str, d: int, walkers: int, iterations: int, kernel: str, ceilings: dict[str, Any],
              paper: tuple[float, float] | None, log: Callable[[str], None]) -> common.Row:
    """One search of ``walkers`` x ``iterations`` through mw.solve, and the NumPy peer on as many walkers."""
    from multiwalk.reference import pattern_search as ref

    problem = make_problem(mw, name, d)
    solver = mw.PatternSearch(n_walkers=walkers, iterations=iterations, rounds=1, kernel=kernel)
    calls = common.wall_calls(lambda: mw.solve(problem, solver, seed=0, progress=False))
    lo, hi = bounds(name)
    x_init = np.random.default_rng(0).uniform(lo, hi, (walkers, d)).astype(np.float32)
    t0 = time.perf_counter()
    _, values, _ = ref.pattern_search_numpy_batched(numpy_function(name), x_init, lo, hi, iterations)
    peer = time.perf_counter() - t0
    r = calls.result
    note = (f"best {float(r.fun):.4g} (NumPy {float(values.min()):.4g}); kernel {r.stats.get('kernel')}; "
            f"compile {calls.first_result.stats['compile_seconds']:.2f} s")
    if paper:
        note += f"; the paper: GPU {paper[0]:g} ms, CPU {paper[1]:g} ms"
    what = f"{PAPER_NAMES[name]}, {d} variables, {walkers} walkers, {iterations} iterations, kernel={kernel}"
    log(f"{what}: first {calls.first:.3f} s, second {calls.second * 1e3:.2f} ms, NumPy {peer:.2f} s")
    return common.Row(what, calls.first, calls.second, peer, "NumPy, 1 core",
                      floor_seconds(problem, walkers, iterations, ceilings), note)


# ============================================================================ Table 5
def table5(mw: Any, names: list[str], d: int, walkers: int, seconds: float, runs: int,
           log: Callable[[str], None]) -> list[str]:
    """Time-limited runs, restart "random" and "best"; the Markdown table of best and mean values."""
    from multiwalk.reference import pattern_search as ref

    lines = [f"Table 5: {walkers} walkers, {d} variables, 20 iterations a round, time limit {seconds:g} s a run (the "
             f"paper: 10 s), {runs} seeds; each run's best value in float64 at result.x (quartic searched with noise, "
             "reported noise-free).", "",
             "| function | random: best | random: mean | best: best | best: mean | rounds/run (best) | "
             "paper SIMT-PS best | paper mean |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    solved = {"random": 0, "best": 0}
    for name in names:
        problem = make_problem(mw, name, d)
        cells, rounds = [], []
        for restart in ("random", "best"):
            solver = mw.PatternSearch(n_walkers=walkers, iterations=20, rounds=None, restart=restart)
            values = []
            for seed in range(runs):
                res = mw.solve(problem, solver, time_limit=seconds, seed=seed, progress=False)
                values.append(float(ref.FUNCTIONS[name](np.asarray(res.x, np.float64))))
                rounds.append(int(res.stats["rounds"]))
            cells += [f"{min(values):.4g}", f"{np.mean(values):.4g}"]
            solved[restart] += min(values) < SOLVED
        paper = PAPER_T5_GPU[name]
        lines.append(f"| {PAPER_NAMES[name]} | {' | '.join(cells)} | {np.mean(rounds[runs:]):.3g} | "
                     f"{paper[0]:g} | {paper[1]:g} |")
        log(f"table 5 {name}: {cells}")
    lines += ["", f"Solved (best < {SOLVED:g}): restart='random' {solved['random']} of {len(names)}, restart='best' "
              f"{solved['best']} of {len(names)}."]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = common.new_parser(__doc__, "pattern_search")
    p.add_argument("--tables", default="1,4", help="comma-separated: 1, 4, 5")
    p.add_argument("--walkers", default="2048,4096,8192,12288,15360", help="Table 1's walker counts")
    p.add_argument("--functions", default=",".join(PAPER_NAMES), help="Tables 4 and 5")
    p.add_argument("--kernels", default="auto", help="comma-separated PatternSearch(kernel=...): auto, xla, pallas")
    p.add_argument("--table5-seconds", type=float, default=1.0)
    p.add_argument("--table5-runs", type=int, default=10)
    args = p.parse_args(argv)
    walkers_t4, d5 = 15360, 30
    if args.quick:
        args.walkers, walkers_t4, d5, args.table5_seconds, args.table5_runs = "256", 256, 5, 0.2, 1
        args.functions = "sphere" if args.functions == ",".join(PAPER_NAMES) else args.functions
    run = common.begin(args)
    if run is None:
        return 2
    import multiwalk as mw

    log, tables = run.log, args.tables.split(",")
    ceilings = common.measure_ceilings(run.on_gpu, log)
    names = args.functions.split(",")
    rows, extra = [], []
    for kernel in args.kernels.split(","):
        if "1" in tables:
            for w in (int(v) for v in common.floats(args.walkers)):
                rows.append(speed_row(mw, "ackley", 20, w, 20, kernel, ceilings, PAPER_T1.get(w), log))
        if "4" in tables:
            for name in names:
                cpu_ms, gpu_ms = PAPER_T4[name]
                rows.append(speed_row(mw, name, 20, walkers_t4, 20, kernel, ceilings,
                                      (gpu_ms, cpu_ms) if walkers_t4 == 15360 else None, log))
    if "5" in tables:
        extra = table5(mw, names, d5, walkers_t4, args.table5_seconds, args.table5_runs, log)
    heading = [f"PatternSearch: {run.env['device']}, {run.env['date']}, JAX {run.env['jax']}, float32. "
               + common.ceilings_line(ceilings)]
    notes = ["the NumPy peer is the batched reference loop (all walkers' trial points per call), NumPy's best on "
             "one core; the paper's CPU code is the scalar loop, about 60x slower still."]
    return common.finish(args, run, "pattern_search", heading, rows, notes, {"ceilings": ceilings}, extra)


if __name__ == "__main__":
    sys.exit(main())
