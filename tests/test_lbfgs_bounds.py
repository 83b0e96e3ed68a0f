"""L-BFGS-B: ``mw.LBFGS`` on a problem with a box, against scipy's L-BFGS-B.

Both run with scipy's line-search constants (``dcsrch``, ftol=1e-3, gtol=0.9, xtol=0.1) and the
projected-gradient test alone (scipy's ``ftol=0`` switches its relative-reduction test off), so
both stop for the same reason: ``max |proj g| <= pgtol``.  Every objective here is NaN outside its
box, so one evaluation outside it would show in ``stats["nonfinite"]``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import multiwalk as mw
from multiwalk.functions import cute

pytestmark = pytest.mark.usefixtures("float64")  # for this module only (conftest.py)

# Well above where f stops decreasing at its rounding: near a minimum a step lowers f by about
# pg^2 / (2 x curvature), ~5e-13 at pg 1e-6 on these problems (hundreds of ulps of f), ~5e-17 at
# 1e-8 (below one ulp: whether a line search still finds a decrease there depends on rounding, so on
# the CPU; at 1e-8 a one-start run of the quadratic below ended line_search_maxfev on one CPU).
PGTOL = 1e-6
SCIPY_LIKE = dict(line_search="dcsrch", ftol=1e-3, xtol=0.1, stpmin=0.0, pgtol=PGTOL, max_iterations=500)


def nan_outside(f, lo, hi):
    lo, hi = jnp.asarray(lo), jnp.asarray(hi)
    return lambda x: jnp.where(jnp.all((x >= lo) & (x <= hi)), f(x), jnp.nan)


def scipy_lbfgsb(f, x0, lo, hi):
    vg = jax.jit(jax.value_and_grad(f))
    fun = lambda x: tuple(np.asarray(v, np.float64) for v in vg(x))  # noqa: E731
    return scipy.optimize.minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=list(zip(lo, hi)),
                                   options=dict(gtol=PGTOL, ftol=0.0, maxiter=500))


def quadratic(n: int, seed: int):
    """``0.5 x'Hx - b'x`` in [-1, 1]^n whose minimiser ``x*`` has a third of its coordinates at each
    bound: ``b = H x* - g*`` with ``g*`` zero on the free ones, pushing out of the box on the others."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, n))
    H = A @ A.T / n + np.eye(n)
    x_star = rng.uniform(-0.9, 0.9, n)
    which = rng.permutation(n)
    x_star[which[: n // 3]], x_star[which[n // 3: 2 * n // 3]] = -1.0, 1.0
    g_star = np.zeros(n)
    g_star[which[: n // 3]] = rng.uniform(0.5, 2, n // 3)  # at lower: g > 0
    g_star[which[n // 3: 2 * n // 3]] = -rng.uniform(0.5, 2, n // 3)  # at upper: g < 0
    b = H @ x_star - g_star
    Hj, bj = jnp.asarray(H), jnp.asarray(b)
    return (lambda x: 0.5 * x @ (Hj @ x) - bj @ x), x_star


@pytest.fixture(scope="module")
def quad(float64):
    n, K = 12, 4
    f, x_star = quadratic(n, seed=0)
    lo, hi = -np.ones(n), np.ones(n)
    x0 = np.random.default_rng(1).uniform(-1, 1, (K, n))
    r = mw.solve(mw.Problem(objective=nan_outside(f, lo, hi), x0=x0, lower=lo, upper=hi), mw.LBFGS(**SCIPY_LIKE),
                 progress=False)
    return r, f, x0, x_star, lo, hi


def test_quadratic_known_optimum_every_start(quad):
    r, f, x0, x_star, lo, hi = quad
    assert r.statuses == [mw.Status.SUCCESS] * len(x0) and r.stats["nonfinite"] == 0
    assert np.all(r.gnorms <= PGTOL)
    # max |proj g| <= pgtol on a Hessian whose eigenvalues are >= 1 bounds |x - x*| on the free
    # coordinates by |g| <= sqrt(12) pgtol: 4e-6 (measured 1.4e-7); the active ones sit exactly
    # on their bounds.
    np.testing.assert_allclose(r.xs, np.broadcast_to(x_star, r.xs.shape), rtol=0, atol=4 * PGTOL)
    at_bound = (x_star == lo) | (x_star == hi)
    assert np.array_equal(r.xs[:, at_bound], np.broadcast_to(x_star[at_bound], r.xs[:, at_bound].shape))


def test_quadratic_against_scipy(quad):
    r, f, x0, x_star, lo, hi = quad
    for k in range(len(x0)):
        s = scipy_lbfgsb(f, x0[k], lo, hi)
        assert s.status == 0 and "PROJECTED GRADIENT" in s.message  # the same reason as ours
        np.testing.assert_allclose(r.xs[k], s.x, rtol=0, atol=8 * PGTOL)  # both within 4 pgtol of x*
        # comparable work: iterations measured equal on every start (ours / scipy's: 9/9, 10/10,
        # 10/10, 10/10; x86-64 CPU, scipy 1.17); the iterates agree to ~1e-12 at first and drift by
        # rounding after, so a CPU that rounds otherwise may differ by an iteration or two
        assert 0.8 <= r.iterations_per_start[k] / s.nit <= 1.25


def test_asktell_in_the_box_equals_solve(quad):
    """Reverse communication with a box: the same iterates as mw.solve, every point asked inside it."""
    r, f, x0, x_star, lo, hi = quad
    vg = jax.jit(jax.value_and_grad(nan_outside(f, lo, hi)))
    opt = mw.lbfgs.AskTell(len(lo), x0=x0[0], lower=lo, upper=hi, **SCIPY_LIKE)
    asked = []
    while opt.status == "evaluate":
        asked.append(opt.ask())
        value, grad = vg(asked[-1])
        opt.tell(float(value), np.asarray(grad))
    asked = np.array(asked)
    assert np.all((asked >= lo) & (asked <= hi))  # never outside (f is NaN there)
    assert np.any((asked == lo) | (asked == hi))  # and the trial points do reach the bounds
    assert opt.status == "done" and opt.code == r.statuses[0]
    # decisions exact: the same iterations and evaluations
    assert (opt.iterations, opt.nfev, len(asked)) == (r.iterations_per_start[0], r.nfev_per_start[0], r.nfev_per_start[0])
    # the same functions compiled separately (per piece here, one loop in mw.solve): measured equal
    # bit for bit; 1e-12 absolute on x in [-1, 1] allows a few ulps of reassociation
    np.testing.assert_allclose(opt.x, r.xs[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(opt.f, r.funs[0], rtol=1e-12)


@pytest.mark.parametrize("name", ["extended_rosenbrock", "extended_wood"])
def test_cute_with_active_bounds_against_scipy(name):
    n = 8
    f = getattr(cute, name)
    x_start = cute.start(name, n)
    lo = np.full(n, -2.0)
    hi = np.where(np.arange(n) % 2 == 0, 0.5, 2.0)  # cuts off the minimum at x = 1 of both
    x0 = np.clip(x_start, lo, hi)
    r = mw.solve(mw.Problem(objective=nan_outside(f, lo, hi), x0=x0, lower=lo, upper=hi), mw.LBFGS(**SCIPY_LIKE),
                 progress=False)
    s = scipy_lbfgsb(f, x0, lo, hi)
    assert r.status == mw.Status.SUCCESS and r.stats["nonfinite"] == 0
    assert s.status == 0 and "PROJECTED GRADIENT" in s.message
    assert np.any((r.x == lo) | (r.x == hi))  # bounds are active at the optimum
    # both stop at max |proj g| <= pgtol where the free coordinates' curvature is >= 188 (both
    # problems, measured): each within sqrt(8) pgtol / 188 = 1.5e-8 of the optimum (measured equal)
    np.testing.assert_allclose(r.x, s.x, rtol=0, atol=4e-8)
    # iterations measured equal: Extended Rosenbrock 20/20, Extended Wood 6/6 (ours / scipy's)
    assert 0.8 <= r.iterations / s.nit <= 1.25


def test_box_options_refused_where_they_do_not_apply():
    boxed = mw.Problem(objective=lambda x: jnp.sum(x**2), x0=np.ones(2), lower=[-2, -2], upper=[2, 2])
    with pytest.raises(ValueError, match=r"diag \(a user H0\) is for problems without a box"):
        mw.solve(boxed, mw.LBFGS(diag=np.ones(2)))
    with pytest.raises(ValueError, match=r"eps=1e-08 is the test of problems without a box .* give pgtol= instead"):
        mw.solve(boxed, mw.LBFGS(eps=1e-8))
    with pytest.raises(ValueError, match=r"diag \(a user H0\) is for problems without a box"):
        mw.lbfgs.AskTell(2, x0=np.ones(2), lower=[-2, -2], upper=[2, 2], diag=np.ones(2))
    with pytest.raises(ValueError, match=r"x0\[1\]=3.0 is outside its bounds \[-2.0, 2.0\]"):
        mw.lbfgs.AskTell(2, x0=[1.0, 3.0], lower=[-2, -2], upper=[2, 2])
    one_sided = mw.Problem(objective=lambda x: jnp.sum(x**2), lower=[0.0, -np.inf], upper=[np.inf, 1.0])
    with pytest.raises(ValueError, match=r"LBFGS\(starts=4\) draws points uniformly in the box, but parameter 0 "
                                         r"\(x0\) has lower\[0\]=0.0, upper\[0\]=inf: give x0"):
        mw.solve(one_sided, mw.LBFGS(starts=4))
