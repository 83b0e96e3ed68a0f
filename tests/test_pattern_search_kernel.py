"""Tests of the Pallas form of `mw.PatternSearch` (``kernel="pallas"``) and of `multiwalk.scalarise`.

On this CPU the kernel runs in Pallas' interpret mode: the same kernel body (the same graph
evaluation, the same rules b)-d) on [block] vectors) that Triton compiles on a GPU, evaluated by
XLA.  What is checked:

* the scalariser reproduces every Yao function on random points (float64, where only the order
  of a sum can differ: rtol 1e-12), and a trial point's partial re-evaluation equals a full
  evaluation of the graph at that point (the same operations in the same order; to 8 float32 ulp,
  as the two may be fused differently);
* the kernel and the XLA form walk identically: exactly (every state field) on Sphere from
  points on a coarse dyadic grid, where all arithmetic is exact whatever the summation order;
  and on Ackley / Rastrigin from uniform points, where only rounding of f differs;
* NaN values, fixed parameters, rounds, padding of a walker count that is not a multiple of the
  block, and the fallback (with its reason) for objectives the kernel cannot take.
"""

from __future__ import annotations

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest
from ulp import assert_close_ulp, assert_fields_close_ulp

import multiwalk as mw
from multiwalk.functions import yao
from multiwalk.scalarise import Unsupported, scalarise
from multiwalk.solvers import pattern_search_kernel as psk
from multiwalk.solvers.base import RunPlan

ON_GPU = jax.default_backend() == "gpu"
PALLAS = "pallas" if ON_GPU else "pallas (interpret mode)"  # the kernel form's name in stats here


def yao_problem(name: str, n: int, dtype=None) -> mw.Problem:
    lo, hi = yao.TABLE[name].bounds(n)
    kwargs = {} if dtype is None else {"dtype": dtype}
    return mw.Problem(objective=yao.TABLE[name].fn, lower=lo, upper=hi, **kwargs)


def run_loop(problem: mw.Problem, solver: mw.PatternSearch, state, iterations: int):
    """``iterations`` steps of ``solver`` from ``state`` (jitted), as NumPy arrays."""
    loop = jax.jit(lambda s: jax.lax.fori_loop(0, iterations, lambda i, c: solver.step(problem, c, 0), s))
    return jax.tree_util.tree_map(np.asarray, loop(state))


# --------------------------------------------------------------------------- the scalariser
@pytest.mark.parametrize("name", sorted(yao.TABLE))
def test_scalarised_yao_functions_equal_f(name):
    """Graph vs f at 200 random points in the box, float64, n = 7 and n = 1 (empty slices)."""
    rng = np.random.default_rng(1)
    spec = yao.TABLE[name]
    with jax.enable_x64(True):
        for n in (7, 1):
            f = spec.fn
            graph = scalarise(f, n, np.float64)
            x = jnp.asarray(rng.uniform(spec.lower, spec.upper, size=(200, n)))
            got = np.asarray(jax.jit(graph.lanes_function())(x))
            want = np.asarray(jax.vmap(f)(x))
            # Only the order of sums/products differs (pairwise here, XLA's own there): float64
            # rounding, scaled by the size of the terms (Schwefel 2.26's terms cancel).
            scale = np.asarray(jax.vmap(lambda v: jnp.sum(jnp.abs(v)) + 1.0)(x)) * np.maximum(1.0, np.abs(want))
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * scale.max(), err_msg=f"{name}, n={n}")


@pytest.mark.parametrize("name", ["ackley", "rosenbrock", "penalized_1", "schwefel_1_2", "griewank"])
def test_partial_reevaluation_is_exact(name):
    """f(x with x[j] changed) from the cached values at x == the full graph evaluation there: the
    recomputed nodes are the same operations on the same operands, but XLA may fuse (contract a
    multiply-add in) the two subgraphs differently: 8 float32 ulp, values below 1 in 1's ulp."""
    n = 6
    spec = yao.TABLE[name]
    graph = scalarise(spec.fn, n, np.float32)
    rng = np.random.default_rng(2)
    x = rng.uniform(spec.lower, spec.upper, size=(64, n)).astype(np.float32)
    x_new = rng.uniform(spec.lower, spec.upper, size=(64,)).astype(np.float32)

    def const(node):
        return jnp.full((64,), node.value, node.dtype)

    @jax.jit
    def both(x, x_new):
        xs = [x[:, i] for i in range(n)]
        vals = graph.evaluate(xs, const)
        partial, full = [], []
        for j in range(n):
            partial.append(graph.value(graph.reevaluate(vals, j, x_new, const), const, vals))
            moved = list(xs)
            moved[j] = x_new
            full.append(graph.value(graph.evaluate(moved, const), const))
        return jnp.stack(partial), jnp.stack(full)

    partial, full = both(x, x_new)
    assert_close_ulp(np.asarray(partial), np.asarray(full), 8, name, scale=1.0)


def test_scalariser_handles_jnp_idioms():
    """dot, norm, cumsum, reversed and constant indexing, where, clip, argmax, outer products (float64)."""

    def f(x):
        return (jnp.dot(x, x) + jnp.linalg.norm(x) + jnp.max(jnp.cumsum(x[::-1])) + x[2]
                + jnp.sum(jnp.where(x > 0, x, 0.0)) + jnp.argmax(x) + jnp.clip(x, -0.5, 0.5).prod()
                + jnp.mean(jnp.outer(x, x) @ x) + jnp.concatenate([x[:2], x[-2:]]).std())

    with jax.enable_x64(True):
        graph = scalarise(f, 6, np.float64)
        x = jnp.asarray(np.random.default_rng(3).normal(size=(100, 6)))
        got = np.asarray(jax.jit(graph.lanes_function())(x))
        np.testing.assert_allclose(got, np.asarray(jax.vmap(f)(x)), rtol=1e-12)  # float64 reduction order only


def test_scalariser_says_why_it_cannot():
    with pytest.raises(Unsupported, match="key"):  # random numbers inside f (the noisy quartic)
        scalarise(lambda x: yao.quartic(x, jax.random.PRNGKey(0)), 4, np.float32)
    with pytest.raises(Unsupported, match="depends on x"):  # data-dependent indexing
        scalarise(lambda x: x[jnp.argmax(x)], 4, np.float32)
    with pytest.raises(Unsupported, match="while"):  # loops on traced values
        scalarise(lambda x: jax.lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2), (0, x))[1].sum(),
                  4, np.float32)
    with pytest.raises(Unsupported, match="more than"):
        scalarise(lambda x: jnp.sum(jnp.outer(x, x)), 8, np.float32, max_elements=32)


# --------------------------------------------------------------------------- kernel vs XLA form
def dyadic_state(problem, solver, key, step=1.0):
    """``solver.init`` with its walkers moved onto a grid of spacing ``step`` (and f re-evaluated)."""
    state = jax.jit(lambda k: solver.init(problem, k))(key)
    x = jnp.round(state.x / step) * step
    fun = jax.vmap(problem.chi2_free)(x)
    i = jnp.argmin(fun)
    return state._replace(x=x, fun=fun, best_x=x[i], best_fun=fun[i])


def test_sphere_kernel_equals_xla_exactly(walkers=50, block=16):  # 50 walkers: padded to 64 inside the kernel
    """Sphere on [-64, 64]^5 from integer points with delta0 = 8: after 7 iterations every point is a
    multiple of 1/8 below 64 in size, so squares and sums are exact in float32 (< 2^21 units of
    1/64) in any order: both forms must agree in every field, ties between +delta and -delta included."""
    problem = mw.Problem(objective=yao.sphere, lower=-64 * np.ones(5), upper=64 * np.ones(5))
    kw = dict(n_walkers=walkers, iterations=7, rounds=1, delta0=8.0, kernel_block=block)
    xla, pallas = mw.PatternSearch(kernel="xla", **kw), mw.PatternSearch(kernel="pallas", **kw)
    assert pallas.kernel_plan(problem).name == PALLAS
    state = dyadic_state(problem, xla, jax.random.PRNGKey(0))
    a, b = run_loop(problem, xla, state, 7), run_loop(problem, pallas, state, 7)
    for field in a._fields:
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    assert a.n_halvings.sum() > 0 and np.any(a.x != np.asarray(state.x))  # the walk did move and halve


@pytest.mark.parametrize("name", ["ackley", "rastrigin"])
def test_kernel_matches_xla_up_to_rounding(name):
    """Uniform float32 starts, 8 iterations of 64 walkers in 5-D.  Only the rounding of f differs
    (pairwise sums vs XLA's order): a walker takes another path only if a comparison is decided by
    a rounding error, rare on these functions (0 of 64 when written) - at most 4 of 64 may differ.
    Walkers that agree have values within 4 float32 ulps (2.4e-7 relative) of each other."""
    problem = yao_problem(name, 5)
    kw = dict(n_walkers=64, iterations=8, rounds=1, kernel_block=32)
    xla, pallas = mw.PatternSearch(kernel="xla", **kw), mw.PatternSearch(kernel="pallas", **kw)
    state = jax.jit(lambda k: xla.init(problem, k))(jax.random.PRNGKey(3))
    a, b = run_loop(problem, xla, state, 8), run_loop(problem, pallas, state, 8)
    same = np.all(a.x == b.x, axis=1)
    assert same.sum() >= 60
    np.testing.assert_allclose(b.fun[same], a.fun[same], rtol=2.4e-7, atol=1e-30)
    np.testing.assert_array_equal(a.scale[same], b.scale[same])
    assert abs(float(a.best_fun) - float(b.best_fun)) <= 2.4e-7 * abs(float(a.best_fun))


def test_kernel_nan_and_fixed_parameters():
    """An objective that is NaN on part of the box (never taken, counted as in the XLA form) and a
    problem with a fixed parameter (the scatter of Problem.expand, with constant indices)."""

    def f(x):
        return jnp.where(x[0] + x[1] > 3.0, jnp.nan, jnp.sum((x - 0.5) ** 2))

    problem = mw.Problem(objective=f, lower=-4 * np.ones(4), upper=4 * np.ones(4), fixed={2: 0.5})
    kw = dict(n_walkers=32, iterations=6, rounds=1, delta0=1.0)
    xla, pallas = mw.PatternSearch(kernel="xla", **kw), mw.PatternSearch(kernel="pallas", **kw)
    state = dyadic_state(problem, xla, jax.random.PRNGKey(4), step=0.5)
    a, b = run_loop(problem, xla, state, 6), run_loop(problem, pallas, state, 6)
    for field in a._fields:  # exact: multiples of 1/64 squared and summed in float32
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    assert a.n_nonfinite.sum() > 0 and np.all(np.isfinite(a.fun[np.isfinite(np.asarray(state.fun))]))


@pytest.fixture(scope="module")
def step_runs():
    """mw.solve on the Step function (f = sum floor(x + 1/2)^2: integer values, exact in float32 in any
    summation order) with both forms: 3 rounds of 4 iterations, 48 walkers.  mw.solve calls
    PatternSearch.run_chunk, which in the Pallas form runs up to a round's end in one kernel launch."""
    problem = yao_problem("step", 4)
    kw = dict(n_walkers=48, iterations=4, rounds=3, kernel_block=16)
    solvers = {k: mw.PatternSearch(kernel=k, **kw) for k in ("xla", "pallas")}
    return problem, solvers, {k: mw.solve(problem, s, seed=5) for k, s in solvers.items()}


def test_solve_with_kernel_equals_xla_exactly(step_runs):
    """Multi-iteration launches, round restarts and the driver's chunks (1, 2, 4, ... iterations, so
    launches that end mid-round) give exactly the result of the XLA form's step-by-step loop."""
    problem, solvers, res = step_runs
    a, b = res["xla"], res["pallas"]
    assert b.stats["kernel"] == PALLAS and ("interpret" in b.stats["kernel_reason"]) is not ON_GPU
    assert a.stats["kernel"] == "xla" and b.stats["rounds"] == 3 and b.stats["chunks"] > 1
    assert a.fun == b.fun and np.array_equal(a.x, b.x)
    for field in ("walkers", "funs", "steps", "halvings", "resets"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    assert a.evaluations == b.evaluations == 48 * (3 + 2 * 4 * 12)
    assert np.all(b.walkers >= problem.lower) and np.all(b.walkers <= problem.upper)


def test_solve_with_kernel_is_deterministic(step_runs):
    problem, solvers, res = step_runs
    again = mw.solve(problem, solvers["pallas"], seed=5)  # the cached compiled loop, the same seed
    assert again.fun == res["pallas"].fun and np.array_equal(again.walkers, res["pallas"].walkers)


def primitives_outside_kernels(jaxpr) -> set[str]:
    """The primitives of ``jaxpr`` and of the jaxprs it calls, but not inside a ``pallas_call``
    (whose interpret mode on a CPU emulates the kernel's grid with loops)."""
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        if eqn.primitive.name != "pallas_call":
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                names |= primitives_outside_kernels(sub)
    return names


def test_one_round_runs_each_chunk_as_one_launch_exactly():
    """rounds=1 with iterations one launch holds: each chunk is one launch, no loop (on a GPU the
    chunk's program then does not wait for the host at a loop's condition).  The driver's chunks (1,
    2, 4, ... iterations) give exactly the XLA form's step-by-step result on the Step function
    (integer values: exact in any summation order); a chunk asking for more than is left runs what
    is left, and one at the end runs nothing and changes nothing."""
    problem = yao_problem("step", 4)
    kw = dict(n_walkers=48, iterations=7, rounds=1, kernel_block=16)
    xla, pallas = mw.PatternSearch(kernel="xla", **kw), mw.PatternSearch(kernel="pallas", **kw)
    # in chunks (a time limit it never reaches), and as one program (without one)
    a, b = mw.solve(problem, xla, seed=5, time_limit=600.0), mw.solve(problem, pallas, seed=5, time_limit=600.0)
    c = mw.solve(problem, pallas, seed=5)
    assert b.stats["chunks"] > 1 and b.stats["kernel"] == PALLAS and c.stats["one_program"]
    for r in (b, c):
        assert a.fun == r.fun and np.array_equal(a.x, r.x)
        for field in ("walkers", "funs", "steps", "halvings", "resets"):
            np.testing.assert_array_equal(getattr(a, field), getattr(r, field), err_msg=field)
    state = jax.jit(lambda k: pallas.init(problem, k))(jax.random.PRNGKey(5))
    traced = jax.make_jaxpr(lambda s, n: pallas.run_chunk(problem, s, 0, n))(state, jnp.int32(3))
    assert "while" not in primitives_outside_kernels(traced.jaxpr)
    # rounds=None (the default) without a time limit (the plan says which) is one round too
    default = mw.PatternSearch(kernel="pallas", **{**kw, "rounds": None})
    for until_time_limit, loop in ((False, False), (True, True)):
        plan = RunPlan(until_time_limit=until_time_limit)
        traced = jax.make_jaxpr(lambda s, n, plan=plan: default.run_chunk(problem, s, 0, n, plan=plan))(state, jnp.int32(3))
        assert ("while" in primitives_outside_kernels(traced.jaxpr)) is loop
    chunk = jax.jit(lambda s, n: pallas.run_chunk(problem, s, 0, n))
    ended, ran = chunk(state, jnp.int32(10))
    again, ran_again = chunk(ended, jnp.int32(3))
    assert int(ran) == 7 and int(ended.iteration) == 7 and int(ran_again) == 0
    for field in ended._fields:
        np.testing.assert_array_equal(getattr(ended, field), getattr(again, field), err_msg=field)


def test_run_chunk_equals_steps_mid_round():
    """run_chunk of 3 then 4 iterations (a launch ending mid-round, then one crossing into the next
    round's restart) = 7 single-iteration kernel steps on Ackley: the same kernel code in other
    compiled programs, so the decisions (halvings, resets, iteration) exactly and the floats to 8
    float32 ulp at Ackley's scale (20 + e is added and cancelled near its minimum)."""
    problem = yao_problem("ackley", 3)
    solver = mw.PatternSearch(n_walkers=40, iterations=5, rounds=2, kernel="pallas", kernel_block=16)
    state = jax.jit(lambda k: solver.init(problem, k))(jax.random.PRNGKey(7))
    chunk = jax.jit(lambda s, n: solver.run_chunk(problem, s, 0, n))
    a, n1 = chunk(state, jnp.int32(3))
    a, n2 = chunk(a, jnp.int32(4))
    b = run_loop(problem, solver, state, 7)
    assert int(n1) == 3 and int(n2) == 4 and int(a.iteration) == 7
    assert_fields_close_ulp(jax.tree_util.tree_map(np.asarray, a), b, 8, scale=20.0)


def test_fallbacks_and_options(recwarn):
    """auto on a CPU -> XLA (with the reason), on a GPU the kernel; pallas on an objective it cannot
    take -> XLA, a RuntimeWarning and the reason in stats, never an error; bad options are refused up front."""
    problem = yao_problem("sphere", 3)
    plan = mw.PatternSearch(kernel="auto").kernel_plan(problem)
    assert plan.use_pallas is ON_GPU and "GPU" in plan.reason
    noisy = mw.Problem(objective=lambda x, key: yao.quartic(x, key), lower=-np.ones(3), upper=np.ones(3),
                       args=jax.random.PRNGKey(0))
    with pytest.warns(RuntimeWarning, match="cannot be scalarised"):
        plan = mw.PatternSearch(kernel="pallas").kernel_plan(noisy)
    assert plan.name == "xla" and "random_wrap" in plan.reason
    res = mw.solve(noisy, mw.PatternSearch(n_walkers=16, iterations=2, kernel="pallas"), seed=0)
    assert res.stats["kernel"] == "xla" and "scalarised" in res.stats["kernel_reason"]
    with pytest.raises(ValueError, match="kernel must be one of"):
        mw.PatternSearch(kernel="cuda")
    with pytest.raises(ValueError, match="kernel_block must be a power of two"):
        mw.PatternSearch(kernel_block=48)
    with pytest.raises(ValueError, match="kernel_warps must be a positive integer"):
        mw.PatternSearch(kernel_warps=0)
    assert psk.KERNELS == ("auto", "xla", "pallas")
