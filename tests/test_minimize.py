"""mw.minimize against scipy.optimize.minimize, per-iteration callbacks, and L-BFGS's seed options
(GTOL's floor, iprint[2]).  One objective and one size throughout, so the compiled loop is shared."""

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize as scipy_minimize
from scipy.optimize import rosen, rosen_der

import multiwalk as mw

pytestmark = pytest.mark.usefixtures("float64")  # for this module only (conftest.py)

X0 = np.array([1.3, 0.7, 0.8, 1.9, 1.2])


def rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def rosenbrock_scaled(x, scale):
    return scale * rosenbrock(x)


# scipy's relative-reduction test off (ftol=0): both stop at max |g| <= gtol (1e-5, the default)
GRADIENT_TEST_ONLY = {"maxcor": 10, "ftol": 0.0}


@pytest.fixture(scope="module")
def lbfgsb(float64):
    return mw.minimize(rosenbrock, X0, method="L-BFGS-B", options=GRADIENT_TEST_ONLY)


def test_the_same_optimum_as_scipy(lbfgsb):
    ref = scipy_minimize(rosen, X0, jac=rosen_der, method="L-BFGS-B", options=GRADIENT_TEST_ONLY)
    assert lbfgsb.success and ref.success and "PROJECTED GRADIENT" in ref.message
    assert np.max(np.abs(lbfgsb.jac)) <= 1e-5 and np.max(np.abs(ref.jac)) <= 1e-5  # scipy's gtol test, both
    # float64; both stop with ||g|| ~ 1e-6 at a minimum whose Hessian's smallest eigenvalue is
    # ~0.4, so both x are within ~1e-6 of (1, ..., 1): 1e-5 is the scale both promise
    np.testing.assert_allclose(lbfgsb.x, np.ones(5), atol=1e-5)
    np.testing.assert_allclose(lbfgsb.x, ref.x, atol=1e-5)
    assert lbfgsb.fun < 1e-10 and ref.fun < 1e-10
    # the same algorithm family (L-BFGS, m=10, a More-Thuente line search): iterations comparable
    # (measured 27 and 25)
    assert 0.5 <= lbfgsb.nit / ref.nit <= 2.0
    assert lbfgsb.njev == lbfgsb.nfev >= lbfgsb.nit


def test_result_has_scipys_fields(lbfgsb):
    for name in ("x", "fun", "jac", "nit", "nfev", "njev", "status", "success", "message", "hess_inv"):
        assert name in lbfgsb, name
    # jac is the exact gradient at x (the one the convergence test used)
    np.testing.assert_allclose(lbfgsb.jac, np.asarray(jax.grad(rosenbrock)(lbfgsb.x)), rtol=1e-6, atol=1e-12)
    assert lbfgsb.status == mw.Status.SUCCESS and isinstance(lbfgsb.result, mw.LBFGSResult)


def test_hess_inv_meets_the_secant_condition_of_its_newest_pair(lbfgsb):
    H = lbfgsb.hess_inv
    s, y = lbfgsb.result.pairs["s"][-1], lbfgsb.result.pairs["y"][-1]
    # BFGS's update makes H y = s exactly for the newest pair; the two-loop recursion in float64
    # rounds to ~1e-12 relative of these O(1e-6) vectors
    np.testing.assert_allclose(H @ y, s, rtol=1e-8, atol=1e-14)
    dense = H.todense()
    np.testing.assert_allclose(dense, dense.T, rtol=1e-10, atol=1e-14)  # symmetric
    assert np.all(np.linalg.eigvalsh(dense) > 0)  # positive definite
    # near the optimum it approximates the inverse Hessian (to the accuracy L-BFGS builds it)
    exact = np.linalg.inv(np.asarray(jax.hessian(rosenbrock)(lbfgsb.x)))
    assert np.linalg.norm(dense - exact) / np.linalg.norm(exact) < 0.1


def test_jac_forms_and_args_give_the_same_run(lbfgsb):
    vg = mw.minimize(lambda x: (rosenbrock(x), jax.grad(rosenbrock)(x)), X0, jac=True, options=GRADIENT_TEST_ONLY)
    separate = mw.minimize(rosenbrock, X0, jac=jax.grad(rosenbrock), options=GRADIENT_TEST_ONLY)
    with_args = mw.minimize(rosenbrock_scaled, X0, args=(1.0,), options=GRADIENT_TEST_ONLY)
    for other in (vg, separate, with_args):
        # the same iterates: decisions exact; floats to rtol 1e-9 (differently compiled programs)
        assert other.nit == lbfgsb.nit and other.nfev == lbfgsb.nfev
        np.testing.assert_allclose(other.x, lbfgsb.x, rtol=1e-9)


def test_callback_sees_every_iteration_and_can_stop():
    seen = []

    def callback(intermediate_result):
        seen.append((intermediate_result.nit, float(intermediate_result.fun)))
        return intermediate_result.nit >= 4

    stopped = mw.minimize(rosenbrock, X0, callback=callback, options={"maxcor": 10})
    assert [i for i, _ in seen] == [1, 2, 3, 4]
    assert stopped.status == mw.Status.CALLBACK_STOP and not stopped.success and stopped.nit == 4
    assert all(b <= a for (_, a), (_, b) in zip(seen, seen[1:]))  # L-BFGS decreases f every iteration
    assert stopped.fun == seen[-1][1]

    xs = []

    def legacy(xk):  # scipy's older form: callback(xk); StopIteration also stops
        xs.append(np.array(xk))
        if len(xs) == 2:
            raise StopIteration

    second = mw.minimize(rosenbrock, X0, callback=legacy, options={"maxcor": 10})
    assert len(xs) == 2 and second.nit == 2 and second.status == mw.Status.CALLBACK_STOP
    np.testing.assert_array_equal(xs[-1], second.x)


def test_a_numpy_true_stops_like_true():
    # `return it.fun < tol` returns NumPy's bool: it must stop the run as True does, not be ignored
    from multiwalk.solvers.base import asks_to_stop

    assert asks_to_stop(True) and asks_to_stop(np.float64(1.0) < 2.0) and asks_to_stop(np.array(True))
    assert asks_to_stop(jax.numpy.asarray(True))
    for no in (None, False, np.False_, 1, 1.0, "yes", np.array([True]), np.array(1.0)):
        assert not asks_to_stop(no), no


def test_scipys_default_ftol_stops_where_scipys_does_but_is_no_success():
    """scipy's default ftol (2.2e-9) ends both runs at the same kind of point, where max |g| is still
    above gtol: scipy calls it convergence, multiwalk SMALL_REDUCTION (no gradient test holds)."""
    ours = mw.minimize(rosenbrock, X0, options={"maxcor": 10})
    ref = scipy_minimize(rosen, X0, jac=rosen_der, method="L-BFGS-B", options={"maxcor": 10})
    assert "RELATIVE REDUCTION" in ref.message and ref.success and np.max(np.abs(ref.jac)) > 1e-5
    assert ours.status == mw.Status.SMALL_REDUCTION and not ours.success
    assert "frel_tol=2.22" in ours.message and "lower frel_tol (minimize: ftol)" in ours.message
    assert np.max(np.abs(ours.jac)) > 1e-5
    # both near the minimum (1, ..., 1) to what f ~ 1e-12 allows (measured |x - 1| ~ 2e-6 for both)
    np.testing.assert_allclose(ours.x, ref.x, atol=1e-5)
    assert 0.5 <= ours.nit / ref.nit <= 2.0  # measured 24 and 24


def test_tol_sets_gtol_and_ftol_as_scipy():
    loose = mw.minimize(rosenbrock, X0, tol=1e-3)
    ref = scipy_minimize(rosen, X0, jac=rosen_der, method="L-BFGS-B", tol=1e-3)
    # both stop early on the relative reduction 1e-3, where max |g| (measured 0.17 in both) is above gtol 1e-3
    assert "RELATIVE REDUCTION" in ref.message
    assert loose.status == mw.Status.SMALL_REDUCTION and "frel_tol=0.001" in loose.message
    assert abs(loose.nit - ref.nit) <= 1  # measured 7 and 7
    np.testing.assert_allclose(loose.jac, ref.jac, rtol=1e-6)  # the same point: measured equal to 1e-12


def test_one_sided_bounds_as_scipy():
    """scipy's (0, None): open sides are +-inf, the active bound is held exactly."""
    bounds = [(0, None)] * 4 + [(None, 0.8)]  # caps the minimum at x = 1 of the last coordinate
    opts = {"gtol": 1e-8, "ftol": 0.0}
    ours = mw.minimize(rosenbrock, np.clip(X0, 0, 0.8), bounds=bounds, options=opts)
    ref = scipy_minimize(rosen, np.clip(X0, 0, 0.8), jac=rosen_der, method="L-BFGS-B", bounds=bounds, options=opts)
    assert ours.success and ref.success and "PROJECTED GRADIENT" in ref.message
    assert ours.x[4] == 0.8 and ours.result.stats["nonfinite"] == 0
    # float64: both stop at max |proj g| <= 1e-8 on a problem whose smallest Hessian eigenvalue in
    # the free coordinates is ~0.1: |x - x*| ~ 1e-7 each; 1e-6 is what both promise
    np.testing.assert_allclose(ours.x, ref.x, atol=1e-6)
    assert 0.5 <= ours.nit / ref.nit <= 2.0


def test_pattern_search_with_bounds():
    res = mw.minimize(rosenbrock, X0, method="pattern", bounds=[(-2, 2)] * 5,
                      options={"n_walkers": 64, "maxiter": 200})
    assert res.success and res.nit == 200 and res.nfev > 0
    assert res.fun < 1e-2  # 64 walkers x 200 iterations on Rosenbrock-5 (measured ~4e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "nelder-mead"}, "method='nelder-mead' is not one of"),
        ({"hess": lambda x: x}, "hess is not used"),
        ({"constraints": [{"type": "eq"}]}, "constraints are not supported"),
        ({"options": {"maxfun": 10}}, "maxfun"),
        ({"options": {"gtol": 1e-6, "pgtol": 1e-6}}, "'gtol' and 'pgtol' name the same option"),
        ({"method": "pattern", "bounds": [(0, None)] * 5}, r"PatternSearch draws points uniformly in the box"),
        ({"options": {"no_such_option": 1}}, "no_such_option"),
        ({"method": "pattern"}, "give bounds="),
        ({"bounds": [(0, 1)] * 4}, "bounds must be 5 (min, max) pairs"),
        ({"jac": "2-point"}, "jac must be None, True"),
    ],
)
def test_bad_input_is_an_error_before_compiling(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        mw.minimize(rosenbrock, X0, **kwargs)


def test_solve_iteration_callback_needs_a_solver_with_an_iterate():
    problem = mw.Problem(rosenbrock, lower=[-2.0] * 5, upper=[2.0] * 5)
    with pytest.raises(ValueError, match="iteration_callback: Exchange has no current point"):
        mw.solve(problem, mw.Exchange(betas=(1.0, 0.5), numsteps=10, step_width=[0.1] * 5), iteration_callback=lambda it: None)


def test_gtol_below_the_seed_floor_is_reset_with_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        solver = mw.LBFGS(gtol=1e-5)
    assert solver.gtol == 0.9
    assert any("GTOL > 1e-4" in str(w.message) for w in caught)


def test_print_vectors_prints_x_and_g(capsys):
    mw.solve(mw.Problem(rosenbrock, x0=X0), mw.LBFGS(m=10, print_every=5, print_vectors=3))
    out = capsys.readouterr().out
    lines = out.splitlines()
    # iprint[2] >= 1: x0 and the gradient at x0 before the table
    assert lines[lines.index("*****") - 2].split()[2:] == [f"{v:e}" for v in X0]
    g0 = np.asarray(jax.grad(rosenbrock)(X0))
    np.testing.assert_allclose([float(v) for v in lines[lines.index("*****") - 1].split()[3:]], g0, rtol=1e-6)
    # iprint[2] = 3: x and g after every printed row (iterations 1, 5, 10, ...)
    assert out.count("VECTOR X=") == out.count("GRADIENT VECTOR G=") >= 4
    with pytest.raises(ValueError, match="give print_every too"):
        mw.LBFGS(print_vectors=2)
