"""`mw.LBFGS`'s statuses and `mw.lbfgs.AskTell` (reverse communication): every status the solver
can end in, each reached by a small problem made for it, and AskTell taking the same iterations,
evaluations and statuses as `mw.solve`.

Everything runs in float64 (``float64`` fixture, tests/conftest.py).  Situations that need different
objectives but the same options run as the starts of one multi-start problem (one compilation).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from lbfgs_cases import N100, X100, numpy_vg, rosen, solve

import multiwalk as mw
from multiwalk.lbfgs import LBFGSStatus

pytestmark = pytest.mark.usefixtures("float64")


# ==================================================================================================
# 6. every status
# ==================================================================================================
# Each status needs its own situation, and every new problem or option set costs a compilation, so
# the statuses come from two multi-start runs whose starts each live in their own regime: the point
# is x = (a, b, r), f depends on (a, b) through the regime numbered r, and its gradient in r is 0,
# so r never changes (no pair ever has a component in it).  Starts of one run are independent
# problems that only share the options (test_lbfgs.py's test_starts_run_independently checks this against separate runs).
_rosen_vg = jax.value_and_grad(rosen)


def _wrong_sign(z):
    """Rosenbrock with the gradient's sign flipped: the line search sees a descent direction, but f
    rises along it, so no step decreases f enough.  (Not "not a descent direction": the search
    trusts the same wrong gradient, its curvature condition keeps s'y > 0 and H positive definite.)"""
    f, g = _rosen_vg(z)
    return f, -g


def _nan(z):
    return jnp.nan, jnp.zeros(2)


def _overflow_ahead(z):
    """f = -a; its gradient (-1, 0) for a < 1 and (0, 1e200) beyond, orthogonal to the first
    direction (1, 0): the line search accepts the step to a = 1 (f = -1, slope 0), where g'g and
    y'y overflow to inf (float64), so gamma = s'y / y'y = 0 and the next g'd is 0 * inf = NaN: the
    next search has improper input.  (Improper input is otherwise out of reach: as above, every
    direction of a stored pair is a descent direction; a step to f = -inf, the way here before, is
    now a failed step.)"""
    beyond = z[0] >= 1.0
    return -z[0], jnp.where(beyond, jnp.array([0.0, 1e200]), jnp.array([-1.0, 0.0]))


# |a - 0.3|: phi' jumps from -1 to +1, so no step meets the curvature condition and the line search
# bisects towards the kink until its interval is narrower than xtol (or, with xtol=0, until the next
# step rounds onto an end of the interval).
_kink = jax.value_and_grad(lambda z: jnp.abs(z[0] - 0.3))
_linear = jax.value_and_grad(lambda z: -jnp.sum(z))  # unbounded below
_steep = jax.value_and_grad(lambda z: 1e3 * jnp.sum(z**2))  # needs steps of 5e-4 along -g
_quadratic = jax.value_and_grad(lambda z: (z[0] - 1.0) ** 2 + 10.0 * (z[1] - 1.0) ** 2)


class Regime(NamedTuple):
    status: LBFGSStatus
    vg: Callable
    start: tuple[float, float]
    hint: str  # what the message must say (the option to change, where there is one)


# Options LBFGS(max_iterations=3, xtol=1e-3, stpmax=10.0).
ZOO_A = [
    Regime(LBFGSStatus.SUCCESS, _rosen_vg, (1.0, 1.0), "terminated without detecting errors"),  # g = 0 at x0
    Regime(LBFGSStatus.MAX_STEPS, _rosen_vg, (-1.2, 1.0), "max_iterations=3"),
    Regime(LBFGSStatus.NONFINITE_START, _nan, (0.0, 0.0), "starting point"),
    Regime(LBFGSStatus.LINE_SEARCH_MAXFEV, _wrong_sign, (-1.2, 1.0), "maxfev=20"),
    Regime(LBFGSStatus.LINE_SEARCH_BAD_INPUT, _overflow_ahead, (0.0, 0.0), "value_and_grad"),
    Regime(LBFGSStatus.LINE_SEARCH_XTOL, _kink, (1.0, 0.0), "xtol"),
    Regime(LBFGSStatus.LINE_SEARCH_STPMAX, _linear, (0.0, 0.0), "stpmax=10.0"),
]
# Options LBFGS(stpmin=0.1, xtol=0.0, maxfev=200, diag=...): diag is 1 except in the last regime,
# where it turns negative once a >= -1 (a = -2 at the start).
ZOO_B = [
    Regime(LBFGSStatus.LINE_SEARCH_STPMIN, _steep, (1.0, 1.0), "stpmin=0.1"),
    Regime(LBFGSStatus.LINE_SEARCH_ROUNDING, _kink, (1.0, 0.0), "rounding errors"),
    Regime(LBFGSStatus.DIAG_NOT_POSITIVE, _quadratic, (-2.0, 0.0), "diag must be positive"),
]


def _zoo(regimes):
    """(value_and_grad, x0 of shape (K, 3)): start k in regime k."""

    def vg(x):
        outs = [reg.vg(x[:2]) for reg in regimes]
        which = [x[2] == i for i in range(len(regimes))]
        f = jnp.select(which, [jnp.asarray(o[0], x.dtype) for o in outs])
        g = jnp.select(which, [o[1] for o in outs])
        return f, jnp.append(g, 0.0)

    x0 = np.array([[*reg.start, float(i)] for i, reg in enumerate(regimes)])
    return vg, x0


def _diag_zoo_b(x):
    return jnp.where((x[2] == len(ZOO_B) - 1) & (x[0] >= -1.0), -1.0, 1.0) * jnp.ones_like(x)


@pytest.fixture(scope="module")
def zoo_a():
    vg, x0 = _zoo(ZOO_A)
    return x0, solve(mw.Problem(value_and_grad=vg, x0=x0), mw.LBFGS(max_iterations=3, xtol=1e-3, stpmax=10.0))


@pytest.fixture(scope="module")
def zoo_b():
    vg, x0 = _zoo(ZOO_B)
    return x0, solve(mw.Problem(value_and_grad=vg, x0=x0), mw.LBFGS(stpmin=0.1, xtol=0.0, maxfev=200, diag=_diag_zoo_b))


STATUS_CASES = [("zoo_a", k, reg) for k, reg in enumerate(ZOO_A)] + [("zoo_b", k, reg) for k, reg in enumerate(ZOO_B)]


@pytest.mark.parametrize("zoo, k, regime", STATUS_CASES, ids=[reg.status.name for _, _, reg in STATUS_CASES])
def test_status(request, zoo, k, regime):
    x0, r = request.getfixturevalue(zoo)
    status, x, f = r.statuses[k], r.xs[k], r.funs[k]
    it, nfev = int(r.iterations_per_start[k]), int(r.nfev_per_start[k])
    assert status == regime.status, r.messages[k]
    assert status.success is (status == LBFGSStatus.SUCCESS)
    assert regime.hint in r.messages[k], r.messages[k]
    assert x[2] == k  # the regime coordinate never moved
    if status in (LBFGSStatus.SUCCESS, LBFGSStatus.NONFINITE_START):
        # Decided at the start: no iteration, x untouched (and f = 0 at Rosenbrock's minimum; the
        # NaN start's f is kept as +inf, worse than anything).
        assert (it, nfev) == (0, 1) and np.array_equal(x, x0[k])
        assert f == (0.0 if status == LBFGSStatus.SUCCESS else np.inf)
    elif status == LBFGSStatus.MAX_STEPS:
        assert it == 3 and f < r.history["f"][0, k]
    elif status == LBFGSStatus.LINE_SEARCH_MAXFEV:
        # All 20 trial steps raised f: the last evaluation goes back to the best step, 0 (x0 exactly).
        assert (it, nfev) == (1, 1 + 20) and np.array_equal(x, x0[k]) and f == r.history["f"][0, k]
    elif status == LBFGSStatus.LINE_SEARCH_BAD_INPUT:
        # Iteration 1 accepted the step to f = -1; iteration 2's search had improper input and counted nothing.
        assert (it, nfev) == (2, 2) and f == -1.0
    elif status == LBFGSStatus.LINE_SEARCH_STPMAX:
        # d = -g = (1, 1), the step clipped at stpmax = 10 exactly.
        assert it == 1 and np.array_equal(x[:2], [10.0, 10.0]) and f == -20.0
    elif status == LBFGSStatus.LINE_SEARCH_STPMIN:
        # The first trial 1/||g|| = 3.5e-4 is raised to stpmin = 0.1 and f rises there: done at once.
        assert (it, nfev) == (1, 2)
    elif status == LBFGSStatus.LINE_SEARCH_XTOL:
        # Bisection towards the kink at 0.3 until the interval is below 1e-3 relative (about 0.7e-3
        # wide at the step 0.7): |a - 0.3| <= 7e-4 (measured 4.8e-5 after 11 evaluations).
        assert it == 1 and f <= 7e-4
    elif status == LBFGSStatus.LINE_SEARCH_ROUNDING:
        # Bisection until rounding: measured f = 5.6e-17 (0.3's float64 spacing) after 35 evaluations.
        assert it == 1 and f < 1e-12
    elif status == LBFGSStatus.DIAG_NOT_POSITIVE:
        # diag(x) is called at every iteration, not only at the start (where it is positive).
        assert it >= 1 and x[0] >= -1.0


def test_status_of_a_batch_is_that_of_its_best_start(zoo_a):
    _, r = zoo_a
    # The best start has the lowest f: the one stopped at stpmax (f = -20).
    best = [reg.status for reg in ZOO_A].index(LBFGSStatus.LINE_SEARCH_STPMAX)
    assert r.best == best and r.status == r.statuses[best] and r.success is False
    assert np.array_equal(r.x, r.xs[best]) and r.fun == -20.0
    assert r.message == f"1 of {len(ZOO_A)} starts converged; the best (start {best}): {r.messages[best]}"
    assert r.stats["converged"] == 1 and r.stats["starts"] == len(ZOO_A)
    assert r.stats["evaluations"] == int(r.nfev_per_start.sum())


def test_one_status_enum_describes_every_lbfgs_ending(zoo_a, zoo_b):
    """An L-BFGS result's statuses are members of the one `mw.Status` (`LBFGSStatus` is that enum),
    and each describes itself, as a status of any other solver does; no two members share a code."""
    assert LBFGSStatus is mw.Status
    statuses = [s for _, r in (zoo_a, zoo_b) for s in (r.status, *r.statuses)]
    assert {s.name for s in statuses} == {reg.status.name for reg in ZOO_A + ZOO_B}
    for status in statuses:
        assert type(status) is mw.Status and status.describe() and status.seed_code
    for status in mw.Status:  # the options a message names, unknown here, are named alone
        assert "{" not in status.describe(), status.name
    assert len({int(s) for s in mw.Status}) == len(mw.Status.__members__)  # a shared value would be an alias
    assert mw.Status.LINE_SEARCH_MAXFEV.describe(maxfev=20).startswith("line search failed (info=3): maxfev=20 ")


# ==================================================================================================
# 9. AskTell: reverse communication
# ==================================================================================================
def drive(opt, vg, limit=10_000):
    """Run an AskTell to its end; returns the statuses tell() returned and the points asked."""
    statuses, asked = [], []
    while opt.status == "evaluate" and len(asked) < limit:
        x = opt.ask()
        asked.append(x)
        statuses.append(opt.tell(*vg(x)))
    return statuses, asked


@pytest.fixture(scope="module")
def asktell100():
    opt = mw.lbfgs.AskTell(N100, m=7, x0=X100)
    assert opt.status == "evaluate" and opt.code is None and math.isnan(opt.f)
    statuses, asked = drive(opt, numpy_vg(rosen))
    return opt, statuses, asked


def test_asktell_equals_solve(asktell100, rosen100):
    opt, statuses, asked = asktell100
    _, r = rosen100
    assert statuses == ["evaluate"] * (len(statuses) - 1) + ["done"]
    assert opt.status == "done" and opt.code == LBFGSStatus.SUCCESS
    assert opt.message == r.message
    assert np.array_equal(asked[0], X100)  # the first point asked is x0
    # Same iterations and evaluations exactly; the same iterates up to rounding (the trial point and
    # f, g are computed by separately compiled pieces here: measured 1 ulp in x, 6e-8 relative in f
    # at f = 6e-16, i.e. 4e-23 absolute).
    assert (opt.iterations, opt.nfev, len(asked)) == (r.iterations, r.nfev, r.nfev)
    np.testing.assert_allclose(opt.x, r.x, rtol=1e-12)
    np.testing.assert_allclose(opt.f, r.fun, rtol=1e-6, atol=1e-20)
    # |g| at the last iterate (~4e-7) is a sum of terms ~1e2 (Rosenbrock's 200 (x_2 - x_1^2)) that
    # cancel: its rounding is absolute, ~n eps 1e2 = 2e-12 (measured 1.7e-12 between compilations)
    np.testing.assert_allclose(np.linalg.norm(opt.g), r.gnorm, rtol=1e-6, atol=1e-11)


def test_asktell_usage_errors(asktell100):
    opt, _, _ = asktell100
    with pytest.raises(RuntimeError, match="nothing to evaluate: the run has ended with status 'done'"):
        opt.ask()
    fresh = mw.lbfgs.AskTell(3, x0=np.zeros(3))
    with pytest.raises(RuntimeError, match=r"call ask\(\) before tell\(\)"):
        fresh.tell(0.0, np.zeros(3))
    fresh.ask()
    with pytest.raises(ValueError, match=r"g must have shape \(3,\), got \(2,\)"):
        fresh.tell(0.0, np.zeros(2))


def test_asktell_max_steps(rosen100):
    _, r = rosen100
    opt = mw.lbfgs.AskTell(N100, x0=X100, max_iterations=3)
    statuses, asked = drive(opt, numpy_vg(rosen))
    assert statuses[-1] == opt.status == "max_steps" and opt.code == LBFGSStatus.MAX_STEPS
    assert "max_iterations=3" in opt.message
    # The first three iterations of the full run: f there (about 200) to rtol 1e-12 (measured equal).
    assert opt.iterations == 3 and opt.nfev == len(asked) == r.history["nfev"][3, 0]
    np.testing.assert_allclose(opt.f, r.history["f"][3, 0], rtol=1e-12)


@pytest.fixture(scope="module")
def asktell_bad_input():
    opt = mw.lbfgs.AskTell(2, x0=np.zeros(2))

    def vg(x):
        f, g = _overflow_ahead(jnp.asarray(x))
        return float(f), np.asarray(g)

    statuses, asked = drive(opt, vg)
    return opt, statuses, asked


def test_asktell_error_status(asktell_bad_input):
    opt, statuses, _ = asktell_bad_input
    assert statuses[-1] == opt.status == "line_search_bad_input"
    assert opt.code == LBFGSStatus.LINE_SEARCH_BAD_INPUT
    assert "value_and_grad" in opt.message and opt.f == -1.0 and opt.iterations == 2


def test_asktell_asks_only_what_solve_evaluates(asktell_bad_input, zoo_a):
    """After the step to the overflowing gradient the next line search ends before its first trial (improper input).
    AskTell must end there, as mw.solve does, rather than ask for f at x once more (an evaluation
    nfev would not count)."""
    opt, statuses, asked = asktell_bad_input
    _, r = zoo_a
    k = [reg.status for reg in ZOO_A].index(LBFGSStatus.LINE_SEARCH_BAD_INPUT)
    assert r.nfev_per_start[k] == 2  # the same problem in mw.solve: x0, then the step to a = 1
    assert len(asked) == len(statuses) == opt.nfev == 2
