"""NaN, +inf and -inf objective values are "worse than anything" in every solver, and counted.

A -inf is no minimum: it must never be accepted, chosen as the best point or end a run in
SUCCESS, and ``result.stats["nonfinite"]`` counts it (with NaN and +inf) in every solver.
Small problems, few iterations; decisions are compared exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw
from multiwalk.solvers._common import worst_if_nonfinite
from multiwalk.solvers.lbfgs import LBFGSStatus
from multiwalk.solvers.more_thuente import LineSearchParams, line_search_init, line_search_update

pytestmark = pytest.mark.usefixtures("float64")  # float64 for this module only


def test_one_rule_for_nan_and_both_infinities():
    f = np.array([1.0, np.nan, np.inf, -np.inf, -2.0])
    clean, bad = worst_if_nonfinite(f)
    assert clean.tolist() == [1.0, np.inf, np.inf, np.inf, -2.0]
    assert bad.tolist() == [False, True, True, True, False]
    clean_j, bad_j = worst_if_nonfinite(jnp.asarray(f))
    assert np.asarray(clean_j).tolist() == clean.tolist() and np.asarray(bad_j).tolist() == bad.tolist()


def test_line_search_never_accepts_minus_inf():
    """phi = -inf with phi' = 0 met both Wolfe tests (-inf <= anything): info 1, the step taken."""
    ls = line_search_init(jnp.asarray(1.0), jnp.asarray(-1.0), jnp.asarray(1.0), LineSearchParams())
    after, _, done, info = jax.jit(line_search_update)(ls, jnp.asarray(-jnp.inf), jnp.asarray(0.0))
    assert not bool(done) and int(info) != 1
    assert float(after.stp) < 1.0  # bisected back towards 0
    assert int(after.nonfinite) == 1


def _minus_inf_beyond(edge: float, centre: float):
    """(x - centre)^2 summed, but -inf where x[0] > edge (its gradient there is 0)."""
    return lambda x: jnp.where(x[0] > edge, -jnp.inf, jnp.sum((x - centre) ** 2))


def test_lbfgs_never_ends_at_or_picks_minus_inf(capsys):
    """f = x'x, but -inf (gradient 0) in the band -1.5 < x[0] < -0.5.  Start 0 is in the band;
    start 1's first trial step (unit length along -g) lands in it at (-0.7, 0); start 2's does not.
    Before: start 1 ended there in SUCCESS with f = -inf, and a -inf start was the best of all.
    Now start 0 is NONFINITE_START with f = +inf, start 1 bisects back and converges like start 2,
    and the -inf evaluations are counted."""
    band = lambda x: jnp.where((x[0] > -1.5) & (x[0] < -0.5), -jnp.inf, jnp.sum(x**2))  # noqa: E731
    x0 = np.array([[-1.0, 0.0], [0.3, 0.0], [0.0, 0.5]])
    r = mw.solve(mw.Problem(objective=band, x0=x0), mw.LBFGS(max_iterations=30, print_every=0), progress=False)
    assert r.statuses == [LBFGSStatus.NONFINITE_START, LBFGSStatus.SUCCESS, LBFGSStatus.SUCCESS]
    assert r.funs[0] == np.inf and np.all(r.funs[1:] < 1e-12)  # x'x at its minimum 0 (gnorm < 1e-5)
    assert r.best != 0 and r.success and r.fun < 1e-12
    assert r.stats["nonfinite"] >= 2  # start 0, and at least start 1's first trial
    # the printout (of start 0) names no seed IFLAG: the seed has none for a non-finite start
    assert "no seed IFLAG (NONFINITE_START)" in capsys.readouterr().out


def test_seed_codes_of_the_statuses():
    """The seed's dev_istate / IFLAG and MCSRCH info of each ending (001_..., error indicators)."""
    codes = {s: s.seed_code for s in LBFGSStatus}
    assert codes[LBFGSStatus.SUCCESS] == "IFLAG = 0"
    assert codes[LBFGSStatus.LINE_SEARCH_BAD_INPUT] == "IFLAG = -1, INFO = 0"
    assert codes[LBFGSStatus.LINE_SEARCH_MAXFEV] == "IFLAG = -1, INFO = 3"
    assert codes[LBFGSStatus.LINE_SEARCH_ROUNDING] == "IFLAG = -1, INFO = 6"
    assert codes[LBFGSStatus.DIAG_NOT_POSITIVE] == "IFLAG = -2"
    for s in (LBFGSStatus.MAX_STEPS, LBFGSStatus.TIME_LIMIT, LBFGSStatus.INTERRUPTED, LBFGSStatus.NONFINITE_START):
        assert codes[s] == "no seed IFLAG"


def test_exchange_rejects_and_counts_minus_inf():
    """Before, a move into the -inf region was accepted (weight exp(+inf)) and reported as the
    best value, with nonfinite = 0."""
    problem = mw.Problem(objective=_minus_inf_beyond(0.5, 0.0), lower=-np.ones(2), upper=np.ones(2))
    r = mw.solve(problem, mw.Exchange(betas=(1.0, 0.5), numsteps=40, step_width=(0.5, 0.5)), progress=False)
    assert np.isfinite(r.fun) and r.x[0] <= 0.5
    assert r.stats["nonfinite"] > 0


def test_replica_exchange_counts_nonfinite_start_points():
    """Start points whose chi2 is -inf (here: all of them) are counted; before, only proposals were."""
    problem = mw.Problem(objective=lambda x: -jnp.inf * (1.0 + jnp.sum(x**2)), lower=-np.ones(2), upper=np.ones(2))
    r = mw.solve(problem, mw.ReplicaExchange(nseq=2, nbeta=2, nburn=0, niter=0), progress=False)
    assert r.stats["nonfinite"] == 4  # 2 sequences x 2 temperatures, all starts
    assert r.status == mw.Status.FAILED and r.fun == np.inf


def test_pattern_search_rejects_and_counts_minus_inf():
    problem = mw.Problem(objective=_minus_inf_beyond(0.5, 0.0), lower=-np.ones(2), upper=np.ones(2))
    r = mw.solve(problem, mw.PatternSearch(n_walkers=8, iterations=5, rounds=1), progress=False)
    assert np.isfinite(r.fun) and r.x[0] <= 0.5
    assert r.stats["nonfinite"] > 0
