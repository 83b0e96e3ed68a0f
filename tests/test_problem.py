"""Tests of `mw.Problem`: the two forms, fixed / periodic / angular parts, and every validation message.

Numerical comparisons are against NumPy float64 on the *same* inputs rounded to the problem's dtype
(float32 unless ``jax_enable_x64``), so only the library's arithmetic error is measured.
"""

from __future__ import annotations

import re

import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw

N = 3
LO = -5.0 * np.ones(N)
HI = 5.0 * np.ones(N)


def sphere(x):
    return (x**2).sum()


def tolerance(problem: mw.Problem) -> dict[str, float]:
    """rtol/atol for comparing a few-term sum of O(1) float values with float64 NumPy.

    Each term carries a few ulp of rounding (subtraction, division, square, exp/sin), and a sum of
    at most ~10 terms adds ~10 ulp more, so 64 ulp of the problem's dtype leaves a wide margin
    (64 * 1.19e-7 = 7.6e-6 in float32) while still catching any real formula error.
    """
    eps = float(np.finfo(problem.dtype).eps)
    return {"rtol": 64 * eps, "atol": 64 * eps}


def rounded(a, problem: mw.Problem) -> np.ndarray:
    """``a`` rounded to the problem's dtype, then widened to float64/complex128 for the reference."""
    a = np.asarray(a)
    if np.iscomplexobj(a):
        return a.astype(np.result_type(problem.dtype, np.complex64)).astype(np.complex128)
    return a.astype(problem.dtype).astype(np.float64)


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(12345)


# ------------------------------------------------------------------------------------------- the two forms
def test_default_dtype_is_jax_float():
    p = mw.Problem(objective=sphere, lower=LO, upper=HI)
    assert p.dtype == np.dtype(jnp.result_type(float))
    assert p.n == N and p.n_free == N and not p.is_model
    assert p.names == ["x0", "x1", "x2"]


def test_objective_chi2_and_evaluate_match_numpy(rng):
    c = np.array([0.5, -1.0, 2.0])
    w = np.array([1.0, 2.0, 0.5])

    def f(x):
        return jnp.sum(w * (x - c) ** 2)

    p = mw.Problem(objective=f, lower=LO, upper=HI)
    X = rng.uniform(-3, 3, size=(7, N))
    Xr = rounded(X, p)
    expected = np.sum(w * (Xr - c) ** 2, axis=1)
    chi2 = p.chi2(X)
    values = p.evaluate(X)
    assert chi2.shape == (7,) and values.shape == (7,)
    assert chi2.dtype == p.dtype
    np.testing.assert_allclose(chi2, expected, **tolerance(p))
    np.testing.assert_allclose(values, expected, **tolerance(p))
    # A single point (n,) is treated as one row.
    np.testing.assert_allclose(p.chi2(X[0]), expected[:1], **tolerance(p))


def test_objective_with_args_gets_args(rng):
    def f(x, args):
        return jnp.sum(args["w"] * (x - args["c"]) ** 2)

    c = np.array([1.0, 0.0, -1.0])
    w = np.array([3.0, 1.0, 2.0])
    p = mw.Problem(objective=f, lower=LO, upper=HI, args={"c": c, "w": w})
    X = rng.uniform(-2, 2, size=(5, N))
    expected = np.sum(w * (rounded(X, p) - c) ** 2, axis=1)
    np.testing.assert_allclose(p.chi2(X), expected, **tolerance(p))
    # Same function, other args: the value must change accordingly (args really reach f).
    p2 = mw.Problem(objective=f, lower=LO, upper=HI, args={"c": c + 1.0, "w": w})
    expected2 = np.sum(w * (rounded(X, p2) - c - 1.0) ** 2, axis=1)
    np.testing.assert_allclose(p2.chi2(X), expected2, **tolerance(p2))


def _model_setup():
    t = np.linspace(0.0, 2.0, 10).reshape(2, 5)  # 2-D data: evaluate must keep data's shape

    def g(x, args):
        return x[0] * jnp.exp(-args / (1.0 + x[1] ** 2)) + x[2] * jnp.sin(args)

    def g_np(X, t):
        return X[:, 0, None, None] * np.exp(-t / (1.0 + X[:, 1, None, None] ** 2)) + X[:, 2, None, None] * np.sin(t)

    return t, g, g_np


def test_model_evaluate_and_chi2_match_numpy(rng):
    t, g, g_np = _model_setup()
    data = rng.normal(size=(2, 5))
    sigma = rng.uniform(0.5, 2.0, size=(2, 5))
    p = mw.Problem(model=g, data=data, sigma=sigma, lower=LO, upper=HI, args=t)
    X = rng.uniform(-2, 2, size=(6, N))
    Xr = rounded(X, p)
    model = g_np(Xr, rounded(t, p))
    out = p.evaluate(X)
    assert out.shape == (6, 2, 5)
    np.testing.assert_allclose(out, model, **tolerance(p))
    expected = np.sum(((model - rounded(data, p)) / rounded(sigma, p)) ** 2, axis=(1, 2))
    chi2 = p.chi2(X)
    assert chi2.shape == (6,)
    np.testing.assert_allclose(chi2, expected, **tolerance(p))


def test_model_sigma_broadcasts_and_defaults_to_one(rng):
    t, g, g_np = _model_setup()
    data = rng.normal(size=(2, 5))
    X = rng.uniform(-2, 2, size=(4, N))
    sig_row = np.array([0.5, 1.0, 2.0, 4.0, 8.0])  # broadcast over data's first axis
    p_row = mw.Problem(model=g, data=data, sigma=sig_row, lower=LO, upper=HI, args=t)
    p_one = mw.Problem(model=g, data=data, lower=LO, upper=HI, args=t)
    Xr = rounded(X, p_row)
    resid = g_np(Xr, rounded(t, p_row)) - rounded(data, p_row)
    np.testing.assert_allclose(p_row.chi2(X), np.sum((resid / sig_row) ** 2, axis=(1, 2)), **tolerance(p_row))
    np.testing.assert_allclose(p_one.chi2(X), np.sum(resid**2, axis=(1, 2)), **tolerance(p_one))
    assert p_row.sigma.shape == (2, 5)


def test_model_with_one_argument(rng):
    t = np.linspace(-1.0, 1.0, 4)

    def g(x):  # no args parameter: must be called as g(x)
        return x[0] + x[1] * t

    data = np.array([0.1, -0.2, 0.3, 0.0])
    p = mw.Problem(model=g, data=data, sigma=0.5, lower=[-1, -1], upper=[1, 1])
    X = rng.uniform(-1, 1, size=(5, 2))
    Xr = rounded(X, p)
    expected = np.sum(((Xr[:, :1] + Xr[:, 1:] * rounded(t, p) - rounded(data, p)) / 0.5) ** 2, axis=1)
    np.testing.assert_allclose(p.chi2(X), expected, **tolerance(p))


def test_evaluate_rejects_points_of_the_wrong_width():
    p = mw.Problem(objective=sphere, lower=LO, upper=HI)
    with pytest.raises(ValueError, match=r"X must have shape \(m, 3\).*got \(2, 4\)"):
        p.chi2(np.zeros((2, 4)))


def test_scalar_bounds_broadcast_when_n_is_known():
    p = mw.Problem(objective=sphere, lower=-2.0, upper=3.0, x0=np.zeros(4))
    np.testing.assert_array_equal(p.lower, [-2.0] * 4)
    np.testing.assert_array_equal(p.upper, [3.0] * 4)


# ------------------------------------------------------------------------------------------- fixed / expand
def test_fixed_by_index_expand_and_chi2_free():
    p = mw.Problem(objective=sphere, lower=LO, upper=HI, fixed={1: 2.5})
    assert p.fixed == {1: 2.5}
    np.testing.assert_array_equal(p.free_index, [0, 2])
    assert p.n_free == 2
    full = np.asarray(p.expand(jnp.array([1.0, -3.0])))
    np.testing.assert_array_equal(full, [1.0, 2.5, -3.0])
    # chi2 of the free parameters is chi2 of the expanded point; exact: 1 + 6.25 + 9 is exact in any order.
    assert float(p.chi2_free(jnp.array([1.0, -3.0]))) == float(p.chi2(full[None])[0])
    lo, hi, per = p.free_bounds()
    np.testing.assert_array_equal(lo, [-5.0, -5.0])
    np.testing.assert_array_equal(hi, [5.0, 5.0])
    assert per.shape == (2,) and not per.any()


def test_fixed_negative_index_counts_from_the_end():
    p = mw.Problem(objective=sphere, lower=LO, upper=HI, fixed={-1: 1.0})
    assert p.fixed == {2: 1.0}


def test_fixed_by_name_and_batched_expand():
    p = mw.Problem(objective=sphere, lower=LO, upper=HI, names=["a", "b", "c"], fixed={"c": -4.0, "a": 0.5})
    assert p.fixed == {2: -4.0, 0: 0.5}
    np.testing.assert_array_equal(p.free_index, [1])
    theta = np.arange(6.0).reshape(2, 3, 1)  # any leading batch axes
    full = np.asarray(p.expand(theta))
    assert full.shape == (2, 3, 3)
    np.testing.assert_array_equal(full[..., 0], 0.5)
    np.testing.assert_array_equal(full[..., 1], theta[..., 0])
    np.testing.assert_array_equal(full[..., 2], -4.0)


def test_expand_without_fixed_is_the_identity():
    p = mw.Problem(objective=sphere, lower=LO, upper=HI)
    theta = np.array([[1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(np.asarray(p.expand(theta)), theta)


# ------------------------------------------------------------------------------------------- periodic
@pytest.mark.parametrize(
    "periodic",
    [[0, 2], ["a", "c"], np.array([True, False, True]), [True, False, True]],
    ids=["indices", "names", "mask", "list-of-bools"],
)
def test_periodic_by_index_name_or_mask(periodic):
    p = mw.Problem(objective=sphere, lower=LO, upper=HI, names=["a", "b", "c"], periodic=periodic)
    np.testing.assert_array_equal(p.periodic, [True, False, True])


def test_periodic_mask_of_free_parameters_skips_fixed_ones():
    p = mw.Problem(objective=sphere, lower=LO, upper=HI, periodic=[1, 2], fixed={1: 0.0})
    _, _, per = p.free_bounds()
    np.testing.assert_array_equal(per, [False, True])  # free parameters are 0 and 2


# ------------------------------------------------------------------------------------------- angular / complex
def test_angular_data_wraps_residuals():
    data = np.array([3.1, 0.0, 3.1])

    def g(x):
        return jnp.stack([-3.1 + 0.0 * x[0], x[0], -3.1 + 0.0 * x[0]])

    ang = np.array([True, False, False])
    p = mw.Problem(model=g, data=data, angular_data=ang, lower=[-1.0], upper=[1.0])
    x = np.array([[0.25]])
    # Residual of datum 0: -6.2 wrapped to 2*pi - 6.2 = 0.0832; datum 2 is not angular: -6.2.
    expected = (2 * np.pi - 6.2) ** 2 + 0.25**2 + 6.2**2
    # Tolerance: float32 rounding of 3.1 and of the mod near 2*pi is ~1e-6 absolute in the residual,
    # ~1e-5 in chi2 ~ 38; rtol 1e-5 (~80 ulp) bounds that.
    np.testing.assert_allclose(p.chi2(x), [expected], rtol=1e-5)
    p_plain = mw.Problem(model=g, data=data, lower=[-1.0], upper=[1.0])
    np.testing.assert_allclose(p_plain.chi2(x), [2 * 6.2**2 + 0.25**2], rtol=1e-5)  # same float32 bound


@pytest.mark.parametrize("resid", [4 * np.pi + 0.1, -4 * np.pi + 0.1, np.pi - 0.05, -np.pi + 0.05])
def test_angular_residual_lands_in_minus_pi_pi(resid):
    p = mw.Problem(model=lambda x: x, data=[0.0], angular_data=[True], lower=[-20.0], upper=[20.0])
    wrapped = (resid + np.pi) % (2 * np.pi) - np.pi
    assert -np.pi <= wrapped < np.pi
    # Tolerance: float32 mod of a value up to ~13 has absolute error ~ 13 * 1.2e-7 ~ 2e-6 in the
    # residual, so chi2 = r^2 with |r| <= pi is within 2 * pi * 2e-6 ~ 1.3e-5; atol 5e-5 bounds it.
    np.testing.assert_allclose(p.chi2([[resid]]), [wrapped**2], atol=5e-5)


def test_complex_data_and_model(rng):
    t = np.linspace(0.0, 1.0, 6)

    def g(x):
        return x[0] * jnp.exp(1j * x[1] * t)

    data = rng.normal(size=6) + 1j * rng.normal(size=6)
    sigma = rng.uniform(0.5, 1.5, size=6)
    p = mw.Problem(model=g, data=data, sigma=sigma, lower=[-2, -2], upper=[2, 2])
    assert np.iscomplexobj(p.data)
    X = rng.uniform(-2, 2, size=(4, 2))
    Xr = rounded(X, p)
    model = Xr[:, :1] * np.exp(1j * Xr[:, 1:] * rounded(t, p))
    out = p.evaluate(X)
    assert out.shape == (4, 6) and np.iscomplexobj(out)
    np.testing.assert_allclose(out, model, **tolerance(p))
    expected = np.sum(np.abs((model - rounded(data, p)) / rounded(sigma, p)) ** 2, axis=1)
    chi2 = p.chi2(X)
    assert chi2.dtype == p.dtype  # a real chi2 from complex residuals
    np.testing.assert_allclose(chi2, expected, **tolerance(p))


def test_complex_model_with_real_data():
    p = mw.Problem(model=lambda x: x[0] + 1j * x[1] * jnp.ones(2), data=[1.0, 2.0], lower=[-3, -3], upper=[3, 3])
    # |(1 + 2j) - 1|^2 + |(1 + 2j) - 2|^2 = 4 + 5, exact in float32.
    assert float(p.chi2([[1.0, 2.0]])[0]) == 9.0


# ------------------------------------------------------------------------------------------- validation
BOX = {"lower": LO, "upper": HI}
DATA3 = np.array([1.0, 2.0, 3.0])


def model3(x):
    return x[0] + x[1] * jnp.arange(3.0)


def tracer_fails(x):
    return np.sum(np.asarray(x) ** 2)  # NumPy on a tracer: cannot be traced


def tracer_fails_with_args(x, args):
    return np.sum(np.asarray(x) ** 2)


BAD = [
    # id, kwargs, exception, regex the message must match (argument name and bad value)
    ("lower-above-upper", {"objective": sphere, "lower": [0, 2, 0], "upper": [1, 1, 1]},
     ValueError, r"lower\[1\]=2\.0 is not below upper\[1\]=1\.0"),
    ("lower-equals-upper", {"objective": sphere, "lower": [1, 0, 0], "upper": [1, 1, 1]},
     ValueError, r"lower\[0\]=1\.0 is not below upper\[0\]=1\.0"),
    # -inf in lower / +inf in upper is a side without a bound; +inf in lower, -inf in upper, NaN are errors
    ("lower-plus-inf", {"objective": sphere, "lower": [0, np.inf, 0], "upper": [1, np.inf, 1]},
     ValueError, r"bounds of parameter 1 \(x1\) must be numbers, got lower\[1\]=inf, upper\[1\]=inf: -inf in lower"),
    ("upper-nan", {"objective": sphere, "lower": [0, 0, 0], "upper": [1, 1, np.nan]},
     ValueError, r"bounds of parameter 2 \(x2\) must be numbers, got lower\[2\]=0\.0, upper\[2\]=nan"),
    ("only-lower", {"objective": sphere, "lower": LO},
     ValueError, r"lower is given but upper is not"),
    ("only-upper", {"objective": sphere, "upper": HI},
     ValueError, r"upper is given but lower is not"),
    ("lower-wrong-length", {"objective": sphere, "x0": [0, 0, 0], "lower": [0, 0], "upper": [1, 1, 1]},
     ValueError, r"lower has 2 entries but x0 has 3"),
    ("upper-wrong-length", {"objective": sphere, "lower": [0, 0, 0], "upper": [1, 1, 1, 1]},
     ValueError, r"upper has 4 entries but lower has 3"),
    # x0 is read first to find n, so a wrong x0 is reported through the other vectors, naming x0.
    ("x0-wrong-length", {"objective": sphere, "x0": [0, 0], "lower": [0, 0, 0], "upper": [1, 1, 1]},
     ValueError, r"lower has 3 entries but x0 has 2"),
    ("lower-2d", {"objective": sphere, "lower": [[0, 0, 0]], "upper": [[1, 1, 1]], "names": ["a", "b", "c"]},
     ValueError, r"lower must be 1-D .*got shape \(1, 3\)"),
    ("lower-not-numbers", {"objective": sphere, "lower": "abc", "upper": HI},
     TypeError, r"lower must be a number or a sequence of numbers, got 'abc'"),
    ("x0-not-finite", {"objective": sphere, "x0": [0, np.inf, 0]},
     ValueError, r"x0\[1\]=inf is not finite"),
    ("names-wrong-length", {"objective": sphere, **BOX, "names": ["a", "b"]},
     ValueError, r"names has 2 entries but the problem has 3 parameters"),
    ("names-repeated", {"objective": sphere, **BOX, "names": ["a", "b", "a"]},
     ValueError, r"names must be distinct, got \['a', 'b', 'a'\]"),
    ("sigma-zero", {"model": model3, "data": DATA3, "sigma": [1.0, 0.0, 1.0], **BOX},
     ValueError, r"sigma\[.*1.*\]=0\.0 must be positive and finite"),
    ("sigma-negative-scalar", {"model": model3, "data": DATA3, "sigma": -2.0, **BOX},
     ValueError, r"^sigma=-2\.0 must be positive and finite"),
    ("sigma-inf", {"model": model3, "data": DATA3, "sigma": [1.0, 1.0, np.inf], **BOX},
     ValueError, r"sigma\[.*2.*\]=inf must be positive and finite"),
    ("sigma-shape", {"model": model3, "data": DATA3, "sigma": [1.0, 2.0], **BOX},
     ValueError, r"sigma has shape \(2,\) but data has shape \(3,\)"),
    ("fixed-outside-bounds-index", {"objective": sphere, **BOX, "fixed": {1: 7.0}},
     ValueError, r"fixed\[1\]=7\.0 is outside its bounds \[-5\.0, 5\.0\]"),
    ("fixed-outside-bounds-name", {"objective": sphere, **BOX, "names": ["a", "b", "c"], "fixed": {"b": -6.0}},
     ValueError, r"fixed\['b'\]=-6\.0 is outside its bounds \[-5\.0, 5\.0\]"),
    ("fixed-not-finite", {"objective": sphere, **BOX, "fixed": {0: np.nan}},
     ValueError, r"fixed\[0\]=nan is not finite"),
    ("fixed-not-a-number", {"objective": sphere, **BOX, "fixed": {0: "one"}},
     TypeError, r"fixed\[0\] must be a number, got 'one'"),
    ("fixed-unknown-name", {"objective": sphere, **BOX, "names": ["a", "b", "c"], "fixed": {"z": 0.0}},
     ValueError, r"fixed names parameter 'z', which is not in names=\['a', 'b', 'c'\]"),
    ("fixed-index-too-big", {"objective": sphere, **BOX, "fixed": {3: 0.0}},
     ValueError, r"fixed index 3 is out of range for 3 parameters"),
    ("fixed-index-too-negative", {"objective": sphere, **BOX, "fixed": {-4: 0.0}},
     ValueError, r"fixed index -4 is out of range for 3 parameters"),
    ("fixed-key-float", {"objective": sphere, **BOX, "fixed": {1.5: 0.0}},
     TypeError, r"fixed keys must be parameter indices or names, got 1\.5"),
    ("fixed-key-bool", {"objective": sphere, **BOX, "fixed": {True: 0.0}},
     TypeError, r"fixed keys must be parameter indices or names, got True"),
    ("all-fixed", {"objective": sphere, **BOX, "fixed": {0: 0.0, 1: 0.0, 2: 0.0}},
     ValueError, r"every parameter is fixed"),
    ("periodic-without-bounds", {"objective": sphere, "x0": [0, 0, 0], "periodic": [1]},
     ValueError, r"periodic parameters \['x1'\] need lower and upper"),
    ("periodic-mask-shape", {"objective": sphere, **BOX, "periodic": np.array([True, False])},
     ValueError, r"periodic as a mask must have shape \(3,\), got \(2,\)"),
    ("periodic-unknown-name", {"objective": sphere, **BOX, "names": ["a", "b", "c"], "periodic": ["q"]},
     ValueError, r"periodic names parameter 'q'"),
    ("periodic-bad-index", {"objective": sphere, **BOX, "periodic": [7]},
     ValueError, r"periodic index 7 is out of range for 3 parameters"),
    ("angular-wrong-shape", {"model": model3, "data": DATA3, **BOX, "angular_data": [True, False]},
     ValueError, r"angular_data has shape \(2,\) but data has shape \(3,\)"),
    ("angular-not-bool", {"model": model3, "data": DATA3, **BOX, "angular_data": [1, 0, 1]},
     TypeError, r"angular_data must be a boolean mask, got dtype int"),
    ("angular-complex-data", {"model": lambda x: x[0] * jnp.ones(3) + 0j, "data": DATA3 + 1j, **BOX,
                              "angular_data": [True, False, False]},
     ValueError, r"angular_data applies to real phases, not to complex data"),
    ("angular-complex-model", {"model": lambda x: x[0] * jnp.ones(3) + 1j, "data": DATA3, **BOX,
                               "angular_data": [True, False, False]},
     ValueError, r"angular_data applies to real phases, but the model returns complex values"),
    ("objective-returns-vector", {"objective": lambda x: x**2, **BOX},
     ValueError, r"objective returns shape \(3,\), not a scalar"),
    ("objective-returns-tuple", {"objective": lambda x: (x[0], x[1]), **BOX},
     TypeError, r"objective must return an array, got tuple"),
    ("objective-returns-complex", {"objective": lambda x: jnp.sum(x) + 1j, **BOX},
     TypeError, r"objective must return a real scalar, got a complex one"),
    ("model-wrong-length", {"model": lambda x: x[:2], "data": DATA3, **BOX},
     ValueError, r"model returns shape \(2,\) but data has shape \(3,\)"),
    ("objective-int-dtype", {"objective": lambda x: jnp.sum(x).astype(jnp.int32), **BOX},
     TypeError, r"objective must return floating-point values, got dtype int32"),
    ("model-int-dtype", {"model": lambda x: jnp.round(x).astype(jnp.int32), "data": DATA3, **BOX},
     TypeError, r"model must return floating-point values, got dtype int32"),
    ("objective-numpy", {"objective": tracer_fails, **BOX},
     TypeError, r"calling objective\(x\) with x of shape \(3,\) failed: TracerArrayConversionError"),
    ("objective-numpy-args", {"objective": tracer_fails_with_args, **BOX, "args": 1.0},
     TypeError, r"calling objective\(x, args\) with x of shape \(3,\) failed: TracerArrayConversionError"),
    ("objective-python-branch", {"objective": lambda x: x[0] if x[0] > 0 else x[1], **BOX},
     TypeError, r"calling objective\(x\) .* failed: TracerBoolConversionError"),
    ("model-numpy", {"model": lambda x: np.asarray(x) * 2.0, "data": DATA3, **BOX},
     TypeError, r"calling model\(x\) with x of shape \(3,\) failed"),
    ("objective-not-callable", {"objective": 3.0, **BOX},
     TypeError, r"objective must be a function of one point, got 3\.0"),
    ("both-objective-and-model", {"objective": sphere, "model": model3, "data": DATA3, **BOX},
     TypeError, r"exactly one of objective=f .*got objective=set, model=set"),
    ("neither-objective-nor-model", {**BOX},
     TypeError, r"exactly one of objective=f .*got objective=None, model=None"),
    ("data-with-objective", {"objective": sphere, "data": DATA3, **BOX},
     TypeError, r"data is only used with model="),
    ("sigma-with-objective", {"objective": sphere, "sigma": 1.0, **BOX},
     TypeError, r"sigma is only used with model="),
    ("angular-with-objective", {"objective": sphere, "angular_data": [True], **BOX},
     TypeError, r"angular_data is only used with model="),
    ("model-without-data", {"model": model3, **BOX},
     TypeError, r"model=g needs data=y"),
    ("data-nan", {"model": model3, "data": [1.0, np.nan, 3.0], **BOX},
     ValueError, r"data\[.*1.*\] is not finite"),
    ("data-inf-2d", {"model": lambda x: x[0] * jnp.ones((2, 2)), "data": [[1.0, 2.0], [3.0, np.inf]], **BOX},
     ValueError, r"data\[.*1.*1.*\] is not finite"),
    ("data-not-numeric", {"model": model3, "data": ["a", "b", "c"], **BOX},
     TypeError, r"data must be numeric, got dtype <U1"),
    ("data-empty", {"model": lambda x: x[:0], "data": [], **BOX},
     ValueError, r"data is empty"),
    ("unknown-dimension", {"objective": sphere, "lower": -1.0, "upper": 1.0},
     ValueError, r"the number of parameters is unknown: give lower/upper as vectors, x0, or names"),
    ("zero-parameters", {"objective": sphere, "lower": [], "upper": []},
     ValueError, r"at least one parameter, got n=0"),
]


@pytest.mark.parametrize("kwargs, exc, pattern", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_message(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        mw.Problem(**kwargs)


# Indices of a bad datum print as plain integers (not np.int64(1)).
@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"model": model3, "data": [1.0, np.nan, 3.0], **BOX}, r"^data\[1\] is not finite"),
        ({"model": model3, "data": DATA3, "sigma": [1.0, 0.0, 1.0], **BOX}, r"^sigma\[1\]=0\.0 must be positive"),
    ],
    ids=["data", "sigma"],
)
def test_bad_datum_index_is_printed_plainly(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        mw.Problem(**kwargs)


def test_scalar_periodic_is_one_index_and_bad_periodic_names_the_argument():
    assert mw.Problem(objective=sphere, **BOX, periodic=1).periodic.tolist() == [False, True, False]
    with pytest.raises(TypeError, match=r"periodic must be indices, names or a boolean mask, got 3\.5"):
        mw.Problem(objective=sphere, **BOX, periodic=3.5)


def test_non_numeric_sigma_names_the_argument():
    with pytest.raises((TypeError, ValueError), match=r"sigma"):
        mw.Problem(model=model3, data=DATA3, sigma="big", **BOX)


def test_validation_happens_before_any_evaluation():
    calls = []

    def f(x):
        calls.append(1)  # runs only while tracing
        return jnp.sum(x)

    with pytest.raises(ValueError, match=r"lower\[0\]=3\.0 is not below upper\[0\]=1\.0"):
        mw.Problem(objective=f, lower=[3.0, 0.0], upper=[1.0, 1.0])
    assert calls == []  # the bad box is reported before the function is even traced


def test_repr_names_form_and_sizes():
    p = mw.Problem(objective=sphere, lower=LO, upper=HI, fixed={0: 1.0})
    assert re.fullmatch(r"Problem\(objective, n=3, free=2, with box\)", repr(p))


@pytest.mark.parametrize(
    ("solver", "who"),
    [
        (lambda: mw.PatternSearch(n_walkers=8, iterations=2), "PatternSearch"),
        (lambda: mw.ReplicaExchange(nbeta=2, nseq=2, nburn=1, niter=1), "ReplicaExchange"),
        (lambda: mw.Exchange(betas=(1.0, 0.5), numsteps=2, step_width=[0.1] * 3), "Exchange"),
        (lambda: mw.PopulationAnnealing(betas=(0.5, 1.0), numsteps_for_T=(1, 1), n_replicas=4, step_width=(0.1,) * 3),
         "PopulationAnnealing"),
    ],
)
def test_a_box_with_an_open_side_is_refused_where_points_are_drawn_in_it(solver, who):
    """A one-sided box is a Problem (L-BFGS-B takes it); the solvers that draw uniformly in the box refuse
    it before compiling, naming the parameter."""
    problem = mw.Problem(objective=sphere, lower=[0.0, -np.inf, 0.0], upper=[1.0, 1.0, np.inf])
    with pytest.raises(ValueError, match=rf"{who} draws points uniformly in the box, but parameter 1 \(x1\) has "
                                         r"lower\[1\]=-inf, upper\[1\]=1\.0"):
        mw.solve(problem, solver(), progress=False)


def test_periodic_parameters_are_refused_where_they_would_be_plain_bounds():
    # nothing the user gave is ignored: pattern search and L-BFGS do not wrap, so a periodic
    # parameter would silently be an ordinary bound; refused before compiling, naming it
    problem = mw.Problem(objective=lambda x: jnp.sum(x**2), lower=[0.0, -1.0], upper=[6.28, 1.0],
                         periodic=[0], names=["phase", "a"])
    with pytest.raises(ValueError, match=r"periodic parameters \['phase'\] would be plain bounds to PatternSearch"):
        mw.solve(problem, mw.PatternSearch(n_walkers=4, iterations=2))
    with pytest.raises(ValueError, match="its period is upper - lower, so both must be finite"):
        mw.Problem(objective=lambda x: jnp.sum(x**2), lower=[0.0, -1.0], upper=[np.inf, 1.0], periodic=[0])


# ---------------------------------------------------------------------------------------------- matmul precision
PREC = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.25], [0.0, 0.25, 3.0]])


def quadratic_form(x):
    return x @ jnp.asarray(PREC, x.dtype) @ x


def _dot_precisions(problem: mw.Problem, fn=None) -> list[str]:
    """The precision of each dot_general in the jaxpr of ``fn`` (default: the problem's chi2)."""
    import jax

    text = str(jax.make_jaxpr(fn or problem.chi2_free)(jnp.ones(N, problem.dtype)))
    params = [chunk.split("preferred_element_type")[0] for chunk in text.split("dot_general[")[1:]]
    return [m.group(1) if (m := re.search(r"precision=\((Precision\.\w+)", p)) else "None" for p in params]


def test_the_users_matrix_products_run_at_full_precision_by_default():
    # on a GPU JAX's default float32 product is TensorFloat-32 (~1e-3 relative): a chi2 d @ P @ d
    # recorded by a sampler then differed from the chi2 of the recorded point by 0.15 %
    default = mw.Problem(objective=quadratic_form, lower=LO, upper=HI)
    assert default.matmul_precision == "highest"
    assert _dot_precisions(default) == ["Precision.HIGHEST", "Precision.HIGHEST"]
    both = mw.Problem(objective=quadratic_form, lower=LO, upper=HI, log_prior=quadratic_form,
                      value_and_grad=lambda x: (quadratic_form(x), 2 * jnp.asarray(PREC, x.dtype) @ x))
    assert len(_dot_precisions(both, both.log_prior_free)) == 2
    assert set(_dot_precisions(both, both.log_prior_free)) == {"Precision.HIGHEST"}
    assert set(_dot_precisions(both, lambda t: both.value_and_grad_free(t)[1])) == {"Precision.HIGHEST"}
    # None: JAX's own default (no precision on the operation); another value is passed on as given
    assert _dot_precisions(mw.Problem(objective=quadratic_form, lower=LO, upper=HI, matmul_precision=None)) == ["None", "None"]
    tf32 = mw.Problem(objective=quadratic_form, lower=LO, upper=HI, matmul_precision="tensorfloat32")
    assert _dot_precisions(tf32) == ["Precision.HIGH", "Precision.HIGH"]


def test_a_solve_traces_the_objective_at_the_problems_precision():
    # every program a first call makes (the start, the loops, the one-point value) calls the
    # objective at the problem's precision
    import jax

    seen = []

    def recording(x):
        seen.append(jax.config.jax_default_matmul_precision)
        return quadratic_form(x)

    problem = mw.Problem(objective=recording, lower=LO, upper=HI)
    mw.solve(problem, mw.ReplicaExchange(nbeta=2, nseq=2, nburn=2, niter=2), seed=0, progress=False)
    assert seen and set(seen) == {"highest"}


@pytest.mark.parametrize(
    "value, error, match",
    [
        ("fastest", ValueError, r"matmul_precision='fastest' is not one of highest, float32, high, tensorfloat32, "),
        # JAX's algorithm names: TF32 fails to compile on a CPU, F32 on a float64 problem rounds to float32
        ("TF32_TF32_F32", ValueError, r"matmul_precision='TF32_TF32_F32' is not one of highest, "),
        (32, TypeError, r"matmul_precision must be a string such as 'highest', or None, got 32"),
    ],
)
def test_a_bad_matmul_precision_is_refused(value, error, match):
    with pytest.raises(error, match=match):
        mw.Problem(objective=quadratic_form, lower=LO, upper=HI, matmul_precision=value)


def test_the_default_precision_leaves_the_problems_identity_as_before():
    # a checkpoint or a run's files written before the option resume with the default
    from multiwalk.identity import problem_identity

    default = problem_identity(mw.Problem(objective=quadratic_form, lower=LO, upper=HI))
    other = problem_identity(mw.Problem(objective=quadratic_form, lower=LO, upper=HI, matmul_precision=None))
    assert "matmul_precision" not in default and other["matmul_precision"][0] == "None"


def test_the_librarys_own_matrix_products_ask_for_full_precision():
    # the batched products a GPU would run in TensorFloat-32 by default: the linear constraints'
    # check (Exchange, PopulationAnnealing) and the root polish's Gauss-Newton matrix
    import jax

    from multiwalk import polish
    from multiwalk.solvers import _common

    constrained = type("C", (), {"constraint_a": ((1.0, -1.0, 0.0), (0.0, 1.0, 1.0)), "constraint_b": (0.5, 0.5)})()
    text = str(jax.make_jaxpr(lambda x: _common.satisfies_constraints(constrained, x))(jnp.ones((4, N), jnp.float32)))
    assert text.count("dot_general[") == 1 and "precision=(Precision.HIGHEST" in text
    t = np.linspace(0.0, 1.0, 5)
    model = mw.Problem(model=lambda p: p[0] + p[1] * jnp.asarray(t, p.dtype) + p[2] * 0, data=1.0 + t, lower=LO, upper=HI)
    text = str(jax.make_jaxpr(polish._local_model(model))(jnp.ones(N, model.dtype)))
    assert text.count("precision=(Precision.HIGHEST") == 2  # jac' r and jac' jac
