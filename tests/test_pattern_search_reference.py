"""`mw.PatternSearch` against the plain NumPy "CPU code" of `multiwalk.reference.pattern_search`.

The JAX solver runs in float32; the reference runs in the dtype of the walkers it is given (float32
here, as the solver's).  Agreement is asserted **bit for bit** on functions where float32 rounding
cannot flip a comparison: the trial points ``x +- scale * delta0`` are correctly rounded float32
sums in both codes (IEEE addition is the same everywhere), and the objective values are exact:

* a shifted L1 norm ``sum |x_i - c_i|`` on [-8, 8]^3 with ``delta0 = 1``: uniform float32 starts
  are multiples of 2^-19 there, steps are powers of two >= 2^-16, so every trial point and every
  value (< 32) is exactly representable in float32 and in float64;
* Yao's step function (integer values) on its own box with the paper's default ``delta0``.

The sphere (rounded values: float32 in JAX, float64 in NumPy at the same float32 points) is
compared with a stated tolerance on the values; the walkers still agree exactly because no two
compared values of this fixed case lie within float32 rounding of each other.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw
from multiwalk.functions import yao
from multiwalk.reference import pattern_search as ref
from multiwalk.solve import run_key

W, ITERS, D = 16, 10, 3
C = np.array([1.0, -2.0, 3.0])


def l1(x):
    return jnp.sum(jnp.abs(x - C))


def l1_np(x):
    return np.sum(np.abs(x - C), axis=-1)


def sphere(x):
    return jnp.sum((x - C) ** 2)


def sphere_np(x):
    return np.sum((x - C) ** 2, axis=-1)


def l1_nan_band(x):
    """The L1 norm, NaN for 1.5 < x_0 < 2.5: trial points step into the band (seed 0 starts no walker there)."""
    return jnp.where((x[0] > 1.5) & (x[0] < 2.5), jnp.nan, l1(x))


def l1_nan_band_np(x):
    return np.where((x[..., 0] > 1.5) & (x[..., 0] < 2.5), np.nan, l1_np(x))


CASES = {
    # name: (jax f, numpy f, lower, upper, delta0, exact values)
    "l1": (l1, l1_np, -8.0, 8.0, 1.0, True),
    "step": (yao.step, ref.step, -100.0, 100.0, None, True),
    "l1_nan_band": (l1_nan_band, l1_nan_band_np, -8.0, 8.0, 1.0, True),
    "sphere": (sphere, sphere_np, -100.0, 100.0, None, False),
}


def jax_search(name: str, seed: int, iterations: int = ITERS):
    """Initial walkers as mw.solve draws them, then ``iterations`` jitted steps: (x0, final state)."""
    f, _, lo, hi, delta0, _ = CASES[name]
    problem = mw.Problem(objective=f, lower=np.full(D, lo), upper=np.full(D, hi))
    solver = mw.PatternSearch(n_walkers=W, iterations=iterations, delta0=delta0, rounds=1)

    def run(key):  # one compilation for init and the loop
        state = solver.init(problem, key)
        return state.x, jax.lax.fori_loop(0, iterations, lambda i, c: solver.step(problem, c, 0), state)

    x0, final = jax.jit(run)(run_key(seed))
    return np.asarray(x0), jax.tree_util.tree_map(np.asarray, final)


@pytest.mark.parametrize("name", list(CASES))
def test_jax_solver_matches_numpy_reference(name):
    _, f_np, lo, hi, delta0, exact = CASES[name]
    x0, st = jax_search(name, seed=0)
    assert x0.dtype == np.float32
    n_nan = [0]
    if name == "l1_nan_band":
        assert np.all(np.isfinite(l1_nan_band_np(x0)))  # the precondition: every walker starts where f is finite

        def f_np(x, f=f_np):
            v = f(x)
            n_nan[0] += int(np.isnan(v))
            return v

    x, fx, scale = ref.pattern_search_numpy(f_np, x0, lo, hi, ITERS, delta0=delta0)
    if name == "l1_nan_band":
        assert n_nan[0] > 10  # NaN trial values were met, counted as +inf and never taken
        assert np.all(np.isfinite(fx))
    np.testing.assert_array_equal(st.x, x)
    np.testing.assert_array_equal(st.scale, scale)
    assert np.all((x >= lo) & (x <= hi))
    if exact:
        np.testing.assert_array_equal(st.fun.astype(np.float64), fx)
    else:  # float32 values of the same points against float64 ones
        np.testing.assert_allclose(st.fun, fx, rtol=2e-6, atol=1e-6)
    assert st.best_fun == st.fun.min()  # one round: values never increase, the best is the last minimum
    # the search did something: some walkers moved and some steps were halved
    assert np.any(x != x0) and np.any(scale < 1)


def test_batched_reference_matches_scalar_reference():
    for name in CASES:
        _, f_np, lo, hi, delta0, _ = CASES[name]
        x0 = np.random.default_rng(1).uniform(lo, hi, size=(W, D)).astype(np.float32)
        a = ref.pattern_search_numpy(f_np, x0, lo, hi, ITERS, delta0=delta0)
        b = ref.pattern_search_numpy_batched(f_np, x0, lo, hi, ITERS, delta0=delta0)
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("name", sorted(ref.FUNCTIONS))
def test_batched_reference_matches_scalar_on_paper_functions(name):
    f = ref.FUNCTIONS[name]
    spec = yao.TABLE[name]
    d = 5
    x0 = np.random.default_rng(2).uniform(spec.lower, spec.upper, size=(8, d))  # float64
    a = ref.pattern_search_numpy(f, x0, spec.lower, spec.upper, 6)
    b = ref.pattern_search_numpy_batched(f, x0, spec.lower, spec.upper, 6)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    assert np.all(a[1] <= f(x0))


@pytest.mark.parametrize("name", sorted(ref.FUNCTIONS))
def test_numpy_functions_match_yao(name):
    spec = yao.TABLE[name]
    x = np.random.default_rng(3).uniform(spec.lower, spec.upper, size=(6, 7))
    ours = np.asarray(jax.jit(jax.vmap(spec.fn))(jnp.asarray(x, jnp.float32)), np.float64)
    theirs = ref.FUNCTIONS[name](x.astype(np.float32).astype(np.float64))
    np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=1e-5 * (1.0 + np.abs(theirs).max()))
    x_opt, f_opt = spec.optimum(7)
    assert abs(ref.FUNCTIONS[name](x_opt) - f_opt) < 1e-12


def test_noisy_quartic_adds_uniform_noise():
    f = ref.noisy_quartic(0)
    x = np.zeros((1000, 4))
    v = f(x)
    assert v.shape == (1000,) and 0.0 <= v.min() and v.max() < 1.0 and 0.4 < v.mean() < 0.6


def test_mw_solve_matches_reference():
    """The whole driver (chunks of a while_loop) ends where the reference ends."""
    _, f_np, lo, hi, delta0, _ = CASES["l1"]
    problem = mw.Problem(objective=l1, lower=np.full(D, lo), upper=np.full(D, hi))
    solver = mw.PatternSearch(n_walkers=W, iterations=ITERS, delta0=delta0, rounds=1)
    seed = 7
    # the start as the driver makes it, by its own compiled start (a separately compiled init might
    # contract lower + width * u into a multiply-add where the driver's does not): the reference
    # then walks from the very points the solve walked from
    x0 = np.asarray(solver.initial_state_fn(problem)(run_key(seed)).x)
    res = mw.solve(problem, solver, seed=seed, progress=False)
    x, fx, scale = ref.pattern_search_numpy(f_np, x0, lo, hi, ITERS, delta0=delta0)
    np.testing.assert_array_equal(res.walkers, x)
    np.testing.assert_array_equal(res.funs.astype(np.float64), fx)
    np.testing.assert_array_equal(res.steps, scale[:, None] * np.full((1, D), delta0))
    assert res.fun == fx.min()
    np.testing.assert_array_equal(res.x, x[np.argmin(fx)])


def test_reference_rejects_bad_input():
    with pytest.raises(ValueError, match="shape"):
        ref.pattern_search_numpy_batched(ref.sphere, np.zeros(3), -1.0, 1.0, 2)
    with pytest.raises(ValueError, match="outside"):
        ref.pattern_search_numpy(ref.sphere, np.full((2, 3), 2.0), -1.0, 1.0, 2)


def test_walker_with_nan_value_stays_in_box():
    def f(x):
        return jnp.where(x[0] > 4.0, jnp.nan, jnp.sum(jnp.abs(x)))

    problem = mw.Problem(objective=f, lower=np.full(2, -8.0), upper=np.full(2, 8.0))
    solver = mw.PatternSearch(n_walkers=64, iterations=5, delta0=1.0, rounds=1)

    def run(key):
        state = solver.init(problem, key)
        return state.x, jax.lax.fori_loop(0, 5, lambda i, c: solver.step(problem, c, 0), state).x

    x0, x = (np.asarray(a) for a in jax.jit(run)(run_key(0)))
    assert np.any(x0[:, 0] > 7.0)  # some walkers start in the NaN region near the edge
    assert np.all((x >= -8.0) & (x <= 8.0))
