"""Statistical and behavioural tests of ``mw.ReplicaExchange`` (cuda_mcmc's replica-exchange Metropolis).

Conventions used below: an objective value is chi2, so the target density at inverse temperature
beta is ``exp(-beta * f / 2)``; ``result.samples`` (niter, nseq, n) holds the coldest chain
(beta = 1) of every sequence.

How Monte-Carlo errors are estimated: samples within one chain are autocorrelated, so the
iid formula ``sd / sqrt(N)`` would be far too optimistic.  The ``nseq`` sequences, however,
are statistically independent (they never interact), so every statistic is computed once per
sequence and its standard error is the spread of those per-sequence values over
``sqrt(nseq)`` (batch means with one batch per sequence).  Assertions allow 5 standard errors
(a false alarm has probability ~6e-7 for a normal estimate) plus an absolute sanity bound, so
a test fails both when the sampler is biased and when its own error bar explodes.

Every run uses a fixed seed, so the file is deterministic; sizes are chosen so that each
``mw.solve`` is dominated by its compilation (~2-5 s on a 2-core CPU).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special
from ulp import assert_close_ulp

import multiwalk as mw
from multiwalk.result import Deferred

N_SIGMA = 5.0  # allowed deviation in standard errors for every statistical assertion

# Two differently compiled forms of one run (tests/ulp.py) may round a move differently (one
# contracts x + step * z into a fused multiply-add, the other not: an ulp of x), and a walker
# carries that ulp into its later moves and chi2.  Measured: 2 float32 ulp (metropolis_unroll,
# 50 iterations, XLA at -O0), 0 elsewhere on this CPU; 512 ulp (6e-5 relative) leaves room for
# another CPU's contractions and sums over the <= 50 iterations compared, far below what a wrong
# move or value changes (the step size, ~0.1).  Values below 1 in 1's ulp: chi2's terms are ~1.
CROSS_FORM_ULPS, CROSS_FORM_SCALE = 512, 1.0


def _run(problem: mw.Problem, seed: int = 0, **options) -> mw.ReplicaExchangeResult:
    result = mw.solve(problem, mw.ReplicaExchange(**options), seed=seed, progress=False)
    assert result.success, result.message
    return result


def _mean_and_se(per_sequence: np.ndarray) -> tuple[float, float]:
    """Mean of per-sequence estimates and its standard error (sequences are independent)."""
    v = np.asarray(per_sequence, dtype=np.float64)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(v.size))


# ----------------------------------------------------------------------------- 1. correlated Gaussian
GAUSS_MU = np.array([1.0, -2.0])
GAUSS_SD = np.array([1.0, 2.0])
GAUSS_RHO = 0.7
GAUSS_COV = np.array(
    [
        [GAUSS_SD[0] ** 2, GAUSS_RHO * GAUSS_SD[0] * GAUSS_SD[1]],
        [GAUSS_RHO * GAUSS_SD[0] * GAUSS_SD[1], GAUSS_SD[1] ** 2],
    ]
)
GAUSS_PREC = np.linalg.inv(GAUSS_COV)
GAUSS_OPTS = dict(nbeta=8, nseq=48, nburn=500, niter=2000, betan=1e-2)


def _gauss_chi2(x):
    d = x - jnp.asarray(GAUSS_MU, x.dtype)
    return d @ jnp.asarray(GAUSS_PREC, x.dtype) @ d  # chi2 of N(mu, C): the target is exactly N(mu, C)


@pytest.fixture(scope="module")
def gauss_result() -> mw.ReplicaExchangeResult:
    # Box mu +- 10 sd: the truncation removes a negligible (~1e-23) part of the mass.
    problem = mw.Problem(objective=_gauss_chi2, lower=GAUSS_MU - 10 * GAUSS_SD, upper=GAUSS_MU + 10 * GAUSS_SD)
    return _run(problem, seed=1, **GAUSS_OPTS)


def test_gaussian_moments_match_truth(gauss_result):
    r = gauss_result
    nseq, niter = GAUSS_OPTS["nseq"], GAUSS_OPTS["niter"]
    assert r.samples.shape == (niter, nseq, 2)
    assert r.fun_trace.shape == (niter, nseq)
    assert r.chi2 is r.fun_trace  # the seed's name reads the same array
    s = r.samples.astype(np.float64)
    # The recorded chi2 is the objective at the recorded point.
    d = s - GAUSS_MU
    chi2_direct = np.einsum("tsi,ij,tsj->ts", d, GAUSS_PREC, d)
    np.testing.assert_allclose(r.fun_trace, chi2_direct, rtol=1e-4, atol=1e-4)  # float32 round-off only

    # Means: per-sequence sample mean; SE from the spread over the 48 independent sequences.
    for i in range(2):
        m, se = _mean_and_se(s[:, :, i].mean(axis=0))
        assert abs(m - GAUSS_MU[i]) < N_SIGMA * se, (i, m, se)
        assert abs(m - GAUSS_MU[i]) < 0.1 * GAUSS_SD[i], (i, m)  # sanity: the error bar itself is small
        assert se < 0.03 * GAUSS_SD[i], (i, se)

    # Second moments about the TRUE mean (unbiased for every chain length; the variance about
    # a chain's own mean is biased low by ~1/N_eff, a few % here).
    cov = np.einsum("tsi,tsj->sij", d, d) / niter  # (nseq, 2, 2)
    for i, j in ((0, 0), (1, 1), (0, 1)):
        c, se = _mean_and_se(cov[:, i, j])
        assert abs(c - GAUSS_COV[i, j]) < N_SIGMA * se, ((i, j), c, se)
        assert abs(c - GAUSS_COV[i, j]) < 0.1 * np.sqrt(GAUSS_COV[i, i] * GAUSS_COV[j, j]), ((i, j), c)

    # Correlation from the pooled covariance; SE by the jackknife over sequences.
    def corr(c):
        return c[0, 1] / np.sqrt(c[0, 0] * c[1, 1])

    rho = corr(cov.mean(axis=0))
    jack = np.array([corr(np.delete(cov, k, axis=0).mean(axis=0)) for k in range(nseq)])
    se_rho = np.sqrt((nseq - 1) / nseq * np.sum((jack - jack.mean()) ** 2))
    assert abs(rho - GAUSS_RHO) < N_SIGMA * se_rho, (rho, se_rho)
    assert abs(rho - GAUSS_RHO) < 0.03, rho  # sanity bound (observed se ~0.003)


# ----------------------------------------------------------------------------- 3. acceptance / exchange
def test_exchange_and_acceptance_rates(gauss_result):
    r = gauss_result
    nbeta, nseq = GAUSS_OPTS["nbeta"], GAUSS_OPTS["nseq"]
    assert r.exchange_rate.shape == (nbeta - 1, nseq)
    assert r.acceptance.shape == (2, nbeta, nseq)  # (n_free, nbeta, nseq)
    np.testing.assert_allclose(r.betas, np.geomspace(1.0, 1e-2, nbeta), rtol=1e-12)
    # ~2300 swap attempts per pair and sequence: a rate of exactly 0 or 1 would mean swaps
    # are never or always accepted, i.e. a broken exchange step (observed 0.64-0.87).
    assert np.all(np.isfinite(r.exchange_rate))
    assert np.all((r.exchange_rate > 0) & (r.exchange_rate < 1)), r.exchange_rate
    assert np.all(np.isfinite(r.acceptance))
    assert np.all((r.acceptance >= 0) & (r.acceptance <= 1))

    # cuda_mcmc's rule steers each step towards 30 % acceptance during burn-in (shrink by 1.01
    # when the rate over the last 100 trials is below 30 %, else grow).  The rate over 100
    # trials has a binomial noise of sqrt(0.3*0.7/100) ~ 0.05 and the step keeps oscillating
    # around its set point, so a single chain's final step gives anything from ~15 % to ~55 %
    # (observed sd 0.09); the mean over 2 x 48 chains is stable to ~0.01.  Tolerances:
    # mean within 0.05 of 0.30 (observed 0.276-0.292 over three seeds), each chain in [0.05, 0.7].
    acc1 = r.acceptance[:, 0, :]
    assert abs(acc1.mean() - 0.30) < 0.05, acc1.mean()
    assert np.all((acc1 > 0.05) & (acc1 < 0.7)), acc1


# ----------------------------------------------------------------------------- 2. bimodal mixture
# 0.3 N(-5, 0.2^2) + 0.7 N(5, 0.2^2).  The modes are 50 sd apart on purpose: the 30 % acceptance
# rule makes a 1-D step about 4 sd wide, so with modes only 16 sd apart (N(+-4, 0.5^2)) a lone
# chain at beta=1 hops between them now and then by a single long step, and the "no exchange"
# control would not be stuck.  50 sd apart, such a hop needs a >10 sigma proposal.
BIMODAL_W = 0.7
BIMODAL_SD = 0.2


def _bimodal_chi2(x):
    left = jnp.log(1.0 - BIMODAL_W) - (x[0] + 5.0) ** 2 / (2 * BIMODAL_SD**2)
    right = jnp.log(BIMODAL_W) - (x[0] - 5.0) ** 2 / (2 * BIMODAL_SD**2)
    return -2.0 * jnp.logaddexp(left, right)  # chi2 = -2 log(density), so exp(-chi2/2) is the mixture


@pytest.fixture(scope="module")
def bimodal_problem() -> mw.Problem:
    return mw.Problem(objective=_bimodal_chi2, lower=[-10.0], upper=[10.0])


def test_bimodal_weights_with_exchange(bimodal_problem):
    # The barrier at x=0 is chi2 ~ 1250 above the modes; the hottest chain (beta=1e-3) sees
    # it as ~0.6, so it crosses freely and the exchanges carry the crossings down to beta=1.
    nseq = 32
    r = _run(bimodal_problem, seed=2, nbeta=16, betan=1e-3, nseq=nseq, nburn=300, niter=2000)
    frac = (r.samples[..., 0] > 0).mean(axis=0)  # per sequence fraction in the right (weight 0.7) mode
    m, se = _mean_and_se(frac)
    # Observed: 0.697 with se 0.008 (per-sequence sd 0.044, i.e. ~20 samples per independent draw).
    assert abs(m - BIMODAL_W) < N_SIGMA * se, (m, se)
    assert abs(m - BIMODAL_W) < 0.05, m
    # Every single sequence sees both modes in about the right proportion: 0.25 is > 5 times
    # the observed per-sequence sd.
    assert np.all(np.abs(frac - BIMODAL_W) < 0.25), frac
    assert np.all(np.abs(np.abs(r.samples[..., 0]) - 5.0) < 10 * BIMODAL_SD)  # always in a mode


def test_bimodal_without_exchange_is_stuck(bimodal_problem):
    # Control: one temperature, no exchange.  Each chain falls into the mode on its side of 0
    # and never leaves it, so a sequence's fraction is 0 or 1, never 0.7: the test above can
    # tell a sampler that mixes between modes from one that does not.
    nseq = 32
    r = _run(bimodal_problem, seed=2, nbeta=1, nseq=nseq, nburn=300, niter=2000)
    assert r.exchange_rate.shape == (0, nseq)
    assert r.acceptance.shape == (1, 1, nseq)
    frac = (r.samples[..., 0] > 0).mean(axis=0)
    assert np.all((frac < 0.01) | (frac > 0.99)), frac
    assert np.all(np.abs(frac - BIMODAL_W) > 0.25), frac  # the criterion the exchange test passes
    assert 0 < np.mean(frac > 0.5) < 1  # uniform starts put sequences on both sides


# ----------------------------------------------------------------------------- 4. roots of a system
def test_roots_of_equation_system():
    # x^2 + y^2 = 1, -0.25 x + y = 0.5 (cuda_mcmc's solvsys example): x = (-4 +- sqrt(832)) / 34.
    xr = (-4.0 + np.array([-1.0, 1.0]) * np.sqrt(832.0)) / 34.0
    exact = np.stack([xr, np.sqrt(1.0 - xr**2)], axis=1)
    np.testing.assert_allclose(exact, [[-0.966012, 0.258497], [0.730718, 0.682679]], atol=1e-6)

    # sigma = 1e-3 sharpens exp(-chi2/2) to a ~1e-3-wide peak at each root; both roots have the
    # same |det J| = 1.80, so the posterior gives them equal mass.  The ladder has to reach
    # beta ~ 1e-7 for the hot chains to roam a box whose chi2 reaches ~1e9.
    sigma, tol = 1e-3, 1.0
    problem = mw.Problem(
        model=lambda p: jnp.array([p[0] ** 2 + p[1] ** 2, -0.25 * p[0] + p[1]]),
        data=[1.0, 0.5],
        sigma=sigma,
        lower=[-5.0, -5.0],
        upper=[5.0, 5.0],
    )
    r = _run(problem, seed=3, nbeta=16, nseq=16, nburn=300, niter=300, betan=1e-7)
    roots = r.roots(tol).x
    # Two roots ~1.7 apart, grouping radius 0.01 of the box (0.1): exactly two groups.
    assert roots.shape == (2, 2), roots
    # Error bound: chi2 <= tol means |residual| <= sqrt(tol) * sigma, so to first order the point
    # is within ||J^-1||_2 * sqrt(tol) * sigma of the root (~0.8e-3 here); x1.5 for the
    # curvature and float32 round-off.  Observed errors ~1e-4.
    for root in exact:
        jac = np.array([[2 * root[0], 2 * root[1]], [-0.25, 1.0]])
        bound = 1.5 * np.linalg.norm(np.linalg.inv(jac), 2) * np.sqrt(tol) * sigma
        dist = np.max(np.abs(roots - root), axis=1)
        assert dist.min() < bound, (root, roots, bound)
    assert r.fun <= tol
    assert np.min(np.max(np.abs(exact - r.x), axis=1)) < 2e-3


# ----------------------------------------------------------------------------- 5. periodic parameters
VM_KAPPA = 8.0


def _von_mises_chi2(x):
    return -2.0 * VM_KAPPA * jnp.cos(x[0] - jnp.pi)  # density exp(kappa cos(x - pi)): a peak at +-pi


def _vm_problem(periodic) -> mw.Problem:
    return mw.Problem(objective=_von_mises_chi2, lower=[-np.pi], upper=[np.pi], periodic=periodic)


def test_periodic_parameter_wraps_across_the_boundary():
    nseq = 32
    r = _run(_vm_problem([0]), seed=4, nbeta=1, nseq=nseq, nburn=300, niter=1000)
    s = r.samples[..., 0]
    lo, hi = np.asarray(r.lower[0], s.dtype), np.asarray(r.upper[0], s.dtype)  # the bounds as the sampler sees them
    assert np.all(s >= lo) and np.all(s < hi), (s.min(), s.max())
    # Every sequence sits on both sides of the +-pi seam (by symmetry half the mass is on each
    # side; observed per-sequence fractions 0.42-0.58, so 0.2 is a loose floor).
    assert np.all((s > np.pi / 2).mean(axis=0) > 0.2)
    assert np.all((s < -np.pi / 2).mean(axis=0) > 0.2)
    # Circular moments of the von Mises distribution around pi:
    # E[cos x] = -I1(kappa)/I0(kappa) = -0.9352, E[sin x] = 0.  5 standard errors over sequences.
    cos_m, cos_se = _mean_and_se(np.cos(s).mean(axis=0))
    sin_m, sin_se = _mean_and_se(np.sin(s).mean(axis=0))
    truth = -special.i1e(VM_KAPPA) / special.i0e(VM_KAPPA)
    assert abs(cos_m - truth) < N_SIGMA * cos_se and abs(cos_m - truth) < 0.02, (cos_m, cos_se, truth)
    assert abs(sin_m) < N_SIGMA * sin_se and abs(sin_m) < 0.05, (sin_m, sin_se)
    direction = np.angle(np.mean(np.exp(1j * s)))
    assert abs(np.angle(np.exp(1j * (direction - np.pi)))) < 0.05, direction  # circular mean at pi


def test_non_periodic_parameter_cannot_wrap():
    # Same target without periodic=: a chain must cross the low-density middle (density ratio
    # exp(-16)) or jump ~5 rad in one step to reach the other side, so sequences stay on the side
    # they started on.  Crossings are rare, not impossible: the adapted step can reach ~1.9 rad,
    # making a 5 rad jump a ~3 sigma event (seen once in 32 sequences x 1000 iterations), so we
    # ask that at least 28 of 32 sequences never cross, where the periodic run has none that stay.
    nseq = 32
    r = _run(_vm_problem(None), seed=4, nbeta=1, nseq=nseq, nburn=300, niter=1000)
    s = r.samples[..., 0]
    assert np.all(s >= r.lower[0]) and np.all(s <= r.upper[0])
    frac = (s > 0).mean(axis=0)
    assert np.sum((frac < 0.01) | (frac > 0.99)) >= 28, frac
    assert 0 < np.mean(frac > 0.5) < 1


def test_periodic_wrap_never_returns_upper():
    # Stress the seam: a target a few hundredths of an ulp(1) wide at 0 on the circle [0, 1).
    # The steps adapt down to that scale, so proposals land just below 0 all the time; a
    # correct wrap maps them below 1, never onto 1.
    scale = float(np.finfo(mw.Problem(objective=lambda x: x[0], lower=[0.0], upper=[1.0]).dtype).eps) * 1e-2

    def chi2(x):
        d = jnp.minimum(x[0], 1.0 - x[0])  # distance to 0 on the circle
        return (d / scale) ** 2

    problem = mw.Problem(objective=chi2, lower=[0.0], upper=[1.0], periodic=[0])
    r = _run(problem, seed=0, nbeta=1, nseq=16, nburn=4000, niter=500)
    s = r.samples[..., 0]
    assert np.all(s >= 0.0)
    assert np.all(s < 1.0), f"{np.sum(s >= 1.0)} of {s.size} samples equal upper=1.0"


# ----------------------------------------------------------------------------- 6. fixed parameters
FIXED_VALUE = 0.3


def _fixed_chi2(x):
    # x0 ~ N(x1, 0.5^2), x2 ~ N(-x1, 0.5^2): with x1 fixed at 0.3 the free means are +-0.3,
    # which also checks that the objective receives the fixed value.
    return ((x[0] - x[1]) / 0.5) ** 2 + ((x[2] + x[1]) / 0.5) ** 2


@pytest.fixture(scope="module")
def fixed_result() -> mw.ReplicaExchangeResult:
    problem = mw.Problem(objective=_fixed_chi2, lower=[-3.0] * 3, upper=[3.0] * 3, fixed={1: FIXED_VALUE}, names=["a", "b", "c"])
    # One temperature: exchange plays no part here, and it halves the compile time.
    return _run(problem, seed=5, nbeta=1, nseq=16, nburn=300, niter=500)


def test_fixed_parameter_stays_fixed(fixed_result):
    r = fixed_result
    s = r.samples
    assert s.shape == (500, 16, 3)
    fixed_in_dtype = np.asarray(FIXED_VALUE, dtype=s.dtype)  # exact in the problem's float type
    assert np.all(s[..., 1] == fixed_in_dtype)
    assert r.x[1] == fixed_in_dtype
    assert r.acceptance.shape == (2, 1, 16) and r.steps.shape == (2, 1, 16)  # free parameters only
    np.testing.assert_array_equal(r.free_index, [0, 2])
    for i, mean in ((0, FIXED_VALUE), (2, -FIXED_VALUE)):
        per_seq = s[:, :, i].mean(axis=0)
        assert np.all(s[:, :, i].std(axis=0) > 0.2)  # moves in every sequence (target sd 0.5)
        m, se = _mean_and_se(per_seq)
        assert abs(m - mean) < N_SIGMA * se and abs(m - mean) < 0.1, (i, m, se)
        sd = s[:, :, i].std()
        assert abs(sd - 0.5) < 0.05, (i, sd)  # pooled sd, 8000 samples: ~0.01 error


def test_records_stay_on_the_device_until_read(fixed_result):
    # the result brings its large records to the host when first read, once (the fixture's
    # samples were read above or are read here: either way the field then holds NumPy)
    r = fixed_result
    stored = object.__getattribute__(r, "accept_history")
    assert isinstance(stored, (Deferred, np.ndarray))  # a computation on the device arrays until read
    counters = object.__getattribute__(r, "n_trials")
    assert isinstance(counters, (Deferred, np.ndarray))
    first = r.accept_history
    assert isinstance(first, np.ndarray) and r.accept_history is first
    assert first.shape == (100, 2, 1, 16) and first.dtype == np.int8  # (nadj, n_free, nbeta, nseq)
    assert isinstance(r.fun_trace_all, np.ndarray) and r.fun_trace_all.shape == (500, 16, 1)
    np.testing.assert_array_equal(r.fun_trace_all[..., 0], r.fun_trace)


# ----------------------------------------------------------------------------- 7/8. non-finite objective
NAN_HALF, INF_REGION = 0, 1
NONFINITE_OPTS = dict(nbeta=16, nseq=8, nburn=200, niter=300, betan=1e-2)


def _nonfinite_chi2(x, case):
    """``case`` NAN_HALF: NaN where x0 > 0, else |x|^2.  INF_REGION: +inf (x1 > 0) or -inf (x1 <= 0)
    where x0 > -1, else |x - (-3, 0)|^2.  One function with the case as an argument (args are
    arguments of the compiled loop), so the two tests below share one compilation."""
    nan_half = jnp.where(x[0] > 0, jnp.nan, x[0] ** 2 + x[1] ** 2)
    inf_region = jnp.where(x[0] > -1.0, jnp.where(x[1] > 0, jnp.inf, -jnp.inf), (x[0] + 3.0) ** 2 + x[1] ** 2)
    return jnp.where(case == NAN_HALF, nan_half, inf_region)


def _nonfinite_problem(case: int) -> mw.Problem:
    return mw.Problem(objective=_nonfinite_chi2, lower=[-5.0, -5.0], upper=[5.0, 5.0], args=np.asarray(case))


def test_nan_objective_is_rejected_and_counted():
    problem = _nonfinite_problem(NAN_HALF)
    # Half the chains start where the objective is NaN (chi2 set to inf at the start).  A chain
    # there accepts any finite proposal, and an exchange always moves an inf chi2 to the hotter
    # temperature, so the coldest chain is finite unless all 16 chains of a sequence started in
    # the NaN half (probability 2^-16 per sequence).
    r = _run(problem, seed=6, **NONFINITE_OPTS)
    assert np.all(np.isfinite(r.fun_trace))
    assert np.all(r.samples[..., 0] <= 0.0)
    assert r.stats["nonfinite"] > 0  # chains near x0=0 propose into the NaN half all the time
    assert np.isfinite(r.fun) and r.x[0] <= 0.0
    assert np.std(r.samples[..., 0]) > 0.1  # they still sample the finite half


def test_non_finite_start_points_recover():
    # +inf and -inf on 60 % of the box: -inf must count as "worse than anything", not as a
    # chi2 below every finite value (which would trap the chains there).
    problem = _nonfinite_problem(INF_REGION)
    solver = mw.ReplicaExchange(**NONFINITE_OPTS)
    start = solver.init(problem, jax.random.PRNGKey(7))
    frac_bad = float(np.mean(~np.isfinite(np.asarray(start.fun))))
    assert 0.4 < frac_bad < 0.8, frac_bad  # the test really starts many chains on non-finite values
    r = mw.solve(problem, solver, seed=7, progress=False)
    assert r.success, r.message
    # All 16 chains of a sequence start in the bad region with probability 0.6^16 = 3e-4.
    assert np.all(np.isfinite(r.fun_trace))
    assert np.all(r.samples[..., 0] <= -1.0)
    assert np.isfinite(r.fun) and r.x[0] <= -1.0
    assert r.stats["nonfinite"] > 0
    # The coldest chains sample N((-3, 0), I) truncated at x0 <= -1 (2 sd away): mean of x1 is 0.
    m, se = _mean_and_se(r.samples[:, :, 1].mean(axis=0))
    assert abs(m) < N_SIGMA * se and abs(m) < 0.3, (m, se)


# ----------------------------------------------------------------------------- 9. result helpers
def test_marginals(fixed_result):
    r = fixed_result
    out = r.marginals(bins=20)
    assert len(out) == 2  # one per FREE parameter (the fixed one has none)
    n_samples = r.samples.shape[0] * r.samples.shape[1]
    for (counts, edges), i in zip(out, (0, 2)):
        assert counts.shape == (20,) and edges.shape == (21,)
        assert counts.sum() == n_samples
        assert edges[0] == r.lower[i] and edges[-1] == r.upper[i]
        np.testing.assert_array_equal(counts, np.histogram(r.samples[:, :, i], bins=20, range=(-3.0, 3.0))[0])


def test_plot_writes_png(fixed_result, tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = tmp_path / "re.png"
    fixed_result.plot(str(path), bins=20)
    assert path.stat().st_size > 1000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plt.close("all")


def test_save_roundtrip(fixed_result, tmp_path):
    r = fixed_result
    path = tmp_path / "re.npz"
    r.save(str(path))
    with np.load(path, allow_pickle=False) as npz:
        # every field but the problem and those that are None (samples_all, label_trace without
        # record_temperatures), written by Result.save from the dataclass fields
        assert set(npz.files) == {f.name for f in dataclasses.fields(r) if getattr(r, f.name) is not None} - {"problem"}
        arrays = ("x", "samples", "fun_trace", "fun_trace_all", "accept_history",
                  "acceptance", "exchange_rate", "steps", "betas", "n_accepted", "n_trials",
                  "n_swaps", "labels", "free_index", "lower", "upper")
        for name in arrays:
            np.testing.assert_array_equal(npz[name], getattr(r, name), err_msg=name)
            assert npz[name].dtype == np.asarray(getattr(r, name)).dtype, name
        assert float(npz["fun"]) == r.fun
        assert int(npz["status"]) == int(r.status)
        assert str(npz["message"]) == r.message
        assert list(npz["names"]) == r.names == ["a", "b", "c"]
        assert json.loads(str(npz["options"])) == r.options
        assert json.loads(str(npz["stats"]))["nonfinite"] == r.stats["nonfinite"]


# ----------------------------------------------------------------------------- 10. bad options
@pytest.mark.parametrize(
    "options, match",
    [
        (dict(nbeta=0), r"nbeta must be a positive integer, got 0"),
        (dict(nseq=-1), r"nseq must be a positive integer, got -1"),
        (dict(niter=-1), r"niter must be a non-negative integer, got -1"),
        (dict(beta1=0.5, betan=0.9), r"betan must be a number in \(0, 0\.5\], got 0\.9"),
        (dict(nbeta=3, betas=(1.0, 0.5, 0.7)), r"betas must be strictly decreasing"),
        (dict(nbeta=3, betas=(1.0, 0.5)), r"betas must have nbeta=3 values"),
    ],
)
def test_bad_options_raise(options, match):
    with pytest.raises(ValueError, match=match):
        mw.ReplicaExchange(**options)


def test_missing_bounds_raise_before_compiling():
    problem = mw.Problem(objective=lambda x: jnp.sum(x**2), x0=[0.0, 0.0])
    with pytest.raises(ValueError, match=r"lower.*upper"):
        mw.solve(problem, mw.ReplicaExchange(), progress=False)


def test_x0_starts_the_first_sequences_and_too_many_rows_are_refused():
    # Problem(x0=...) was ignored: every chain started uniformly in the box
    box = dict(lower=[-2.0, -2.0], upper=[2.0, 2.0])
    starts = np.array([[0.5, -0.25], [1.0, 1.5]])
    problem = mw.Problem(objective=lambda x: jnp.sum(x**2), x0=starts, **box)
    solver = mw.ReplicaExchange(nbeta=3, nseq=4, nburn=0, niter=1)
    x = np.asarray(solver.init(problem, jax.random.key(0)).x)  # (nseq, nbeta, n)
    np.testing.assert_array_equal(x[:2], np.broadcast_to(starts[:, None, :], (2, 3, 2)))  # every temperature
    assert not np.any(np.all(x[2:] == starts[0], axis=-1))  # the others drawn in the box
    with pytest.raises(ValueError, match=r"x0 has 5 starting points but ReplicaExchange has nseq=4"):
        mw.solve(mw.Problem(objective=lambda x: jnp.sum(x**2), x0=np.zeros((5, 2)), **box), solver)


def test_metropolis_unroll_changes_no_decision():
    # unrolled or not, the parameter updates are the same operations in the same order, but in
    # two differently compiled programs: every acceptance decision and exchange must agree
    # exactly, the samples, chi2 values and step widths to CROSS_FORM_ULPS (see its comment)
    problem = mw.Problem(objective=lambda x: jnp.sum((x - 0.5) ** 2 * jnp.arange(1.0, 4.0)),
                         lower=[-2.0] * 3, upper=[2.0] * 3)
    opts = dict(nbeta=4, nseq=3, nburn=20, niter=30)
    one, three = (_run(problem, metropolis_unroll=u, **opts) for u in (1, 3))
    for name in ("n_accepted", "n_trials", "n_swaps", "labels", "accept_history",
                 "samples", "fun_trace_all", "steps"):
        assert_close_ulp(getattr(three, name), getattr(one, name), CROSS_FORM_ULPS, name, scale=CROSS_FORM_SCALE)


@pytest.mark.parametrize("branch", [True, False], ids=["cond", "selects"])
def test_burn_in_and_sampling_are_one_compiled_loop(branch, monkeypatch, tmp_path):
    # loops="one": one loop serves both phases (the phase is its argument), so the objective is
    # compiled once; the run must be the one of a loop per phase (loops="per_phase", each program
    # doing only its phase's bookkeeping: the phase's cond or selects only pick what the static
    # branches compute).  Both forms of the one loop's bookkeeping: lax.cond (the CPU's) and
    # selects (GPUs').  Other compiled programs of the same operations: every decision exactly,
    # the floats to CROSS_FORM_ULPS (see its comment).
    from multiwalk import compile_cache
    from multiwalk.solvers import replica_exchange

    monkeypatch.setattr(replica_exchange, "_branch_on_phase", lambda: branch)
    # a new function per form: the compiled loops are kept by the problem's functions
    problem = mw.Problem(objective=lambda x: jnp.sum((x - 0.25) ** 2), lower=[-2.0] * 2, upper=[2.0] * 2)
    opts = dict(nbeta=4, nseq=2, nburn=6, niter=5, record_temperatures=True)
    kept = {id(loop) for loop in compile_cache.compiled_loops()}
    one = _run(problem, loops="one", **opts)
    assert len([loop for loop in compile_cache.compiled_loops() if id(loop) not in kept]) == 1
    kept = {id(loop) for loop in compile_cache.compiled_loops()}
    per_phase = _run(problem, loops="per_phase", **opts)
    assert len([loop for loop in compile_cache.compiled_loops() if id(loop) not in kept]) == 2
    assert one.stats["iterations"] == per_phase.stats["iterations"] == {"burn-in": 6, "sampling": 5}
    for name in ("samples", "fun_trace_all", "samples_all", "label_trace", "accept_history", "steps",
                 "n_accepted", "n_trials", "n_swaps", "labels", "round_trips"):
        assert_close_ulp(getattr(per_phase, name), getattr(one, name), CROSS_FORM_ULPS, name, scale=CROSS_FORM_SCALE)
    # a run of the one loop stopped in burn-in and resumed with a loop per phase (the option may
    # change on a resume; both loops are the ones kept above): the one loop's run, to the same ulps
    def stop(info: dict) -> None:
        raise KeyboardInterrupt

    checkpoint = tmp_path / "one.npz"
    part = mw.solve(problem, mw.ReplicaExchange(loops="one", **opts), seed=0, progress=False,
                    checkpoint=checkpoint, callback=stop)
    assert part.stats["iterations"] == {"burn-in": 1, "sampling": 0}
    resumed = mw.solve(problem, mw.ReplicaExchange(loops="per_phase", **opts), seed=0, progress=False,
                       resume=checkpoint)
    assert resumed.success and resumed.stats["iterations"] == {"burn-in": 6, "sampling": 5}
    for name in ("samples", "fun_trace_all", "samples_all", "label_trace", "steps", "n_accepted", "n_swaps", "labels"):
        assert_close_ulp(getattr(resumed, name), getattr(one, name), CROSS_FORM_ULPS, name, scale=CROSS_FORM_SCALE)


def test_loops_auto_is_one_loop_on_the_cpu_only():
    # loops="auto": one loop on a CPU (the phase a branch there, the objective compiled once); a
    # loop per phase on GPUs, for a cheap objective and a large model alike.  No compile: only the
    # choice is asked.
    problem = mw.Problem(objective=lambda x: jnp.sum(x**2), lower=[-1.0] * 2, upper=[1.0] * 2)
    assert mw.ReplicaExchange().one_loop(problem, "cpu")
    assert not mw.ReplicaExchange().one_loop(problem, "gpu")
    assert mw.ReplicaExchange(loops="one").one_loop(problem, "gpu")
    assert not mw.ReplicaExchange(loops="per_phase").one_loop(problem, "cpu")
    with pytest.raises(ValueError, match=r"loops must be 'auto', 'one' or 'per_phase', got 'two'"):
        mw.ReplicaExchange(loops="two")


@dataclasses.dataclass(frozen=True)
class _StopsAfterTwo(mw.ReplicaExchange):
    """A sampler whose phases converge after their second iteration (``done``), as a subclass may say
    (the iteration counter goes on from burn-in's 2 into sampling)."""

    def done(self, problem, state, phase):
        return state.iteration >= jnp.where(jnp.asarray(phase) == 0, 2, 4)


def test_a_subclass_done_ends_each_phase_of_the_one_loop():
    # ReplicaExchange's own run_chunk (the swap kernel's form) keeps the driver's contract: up to
    # n iterations, fewer when done says the phase has converged.  Exact counts: done is exact.
    problem = mw.Problem(objective=lambda x: jnp.sum(x**2), lower=[-1.0] * 2, upper=[1.0] * 2)
    result = mw.solve(problem, _StopsAfterTwo(nbeta=2, nseq=2, nburn=5, niter=5), progress=False)
    assert result.stats["iterations"] == {"burn-in": 2, "sampling": 2}


def test_the_result_read_with_the_last_chunk_is_the_result_read_from_the_state(tmp_path, monkeypatch):
    # The chunk that ends a run also makes what the result reads (the best point with its fixed
    # value, its chi2, the non-finite counts, the ladder, the round trips) and queues the point's
    # one-point value; a run resumed with nothing left has no such chunk and reads them from the
    # state by a program of its own.  Same state, same arithmetic (argmin, copies, integer sums; the
    # value is the same one-point program): equal bit for bit.
    from multiwalk.solvers import replica_exchange as re_module

    problem = mw.Problem(objective=lambda x: (x[0] - 1.0) ** 2 + (x[1] + 0.5) ** 2 + x[2] ** 2,
                         lower=[-5.0] * 3, upper=[5.0] * 3, fixed={2: 0.25})
    solver = mw.ReplicaExchange(nbeta=4, nseq=2, nburn=3, niter=5)
    from_state = []
    summary = re_module._host_summary
    monkeypatch.setattr(re_module, "_host_summary", lambda state: from_state.append(1) or summary(state))
    ended = mw.solve(problem, solver, seed=0, progress=False, checkpoint=tmp_path / "re.npz")
    assert from_state == []  # read with the last chunk
    again = mw.solve(problem, solver, seed=0, progress=False, resume=tmp_path / "re.npz")
    assert from_state == [1]
    assert np.array_equal(ended.x, again.x) and ended.x[2] == 0.25
    assert type(ended.fun) is type(again.fun) and ended.fun == again.fun
    assert np.array_equal(ended.betas, again.betas) and np.array_equal(ended.round_trips, again.round_trips)
    assert ended.stats["nonfinite"] == again.stats["nonfinite"]
    assert (ended.status, ended.message) == (again.status, again.message)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_report_s_numbers_are_read_in_the_dtype_of_the_best_chi2(dtype):
    # The report packs the best chi2's bytes and two int32 counts into one byte array; the result
    # reads the chi2 back in the dtype it was written in (the state's best_fun), exactly: a bit
    # copy, no rounding.  Read as the other float width, the bytes are refused, not misread.
    from types import SimpleNamespace

    from multiwalk.solvers import replica_exchange as rex
    from multiwalk.solvers._common import read_best_and_counts

    with jax.enable_x64(True):
        state = SimpleNamespace(best_fun=jnp.asarray([2.5, 0.1, 0.1], dtype), best_x=jnp.zeros((3, 2), dtype),
                                n_nonfinite=jnp.asarray([[3, 0], [5, 7], [0, 0]], jnp.int32), betas=jnp.ones(2))
        numbers = np.asarray(rex._summary_of(state)["numbers"])
    best, n_sum, n_max = read_best_and_counts(numbers, state.best_fun.dtype)
    assert best.dtype == np.dtype(dtype) and best == np.asarray(0.1, dtype) and (n_sum, n_max) == (15, 7)
    other = "float64" if dtype == "float32" else "float32"
    with pytest.raises(ValueError, match="bytes"):
        read_best_and_counts(numbers, other)


def test_a_chunk_of_4096_sequences_runs_in_a_process_of_its_own():
    # The report's best point by reductions (_common.lowest_row): a form that also reduced
    # where(row, fun, inf) for the value crashed XLA's CPU backend (JAX 0.10.2, a segmentation fault)
    # in the chunk's program at 4096 sequences, not at 512.  Run apart, so a crash fails this test
    # and not the session.
    code = ("import multiwalk as mw, numpy as np\n"
            "p = mw.Problem(objective=lambda x: (x**2).sum(), lower=[-5.0, -5.0], upper=[5.0, 5.0])\n"
            "r = mw.solve(p, mw.ReplicaExchange(nbeta=32, nseq=4096, nburn=2, niter=4), progress=False)\n"
            "print(float(r.fun), np.asarray(r.x).tolist())\n")
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src, "MULTIWALK_CACHE_DIR": "off", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    fun, x = done.stdout.split(" ", 1)
    assert 0 <= float(fun) < 1e-2  # sphere's minimum 0 at the origin, 131072 chains x 6 iterations
