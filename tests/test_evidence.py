"""The evidence of a replica-exchange run (multiwalk.evidence), every temperature's record, and priors.

Two compiled loops serve the whole file: a mixture of Gaussian likelihoods whose centres and
weights are ``args`` (so the one-mode and the two-mode targets share one executable), and a
Gaussian likelihood with a Gaussian ``log_prior`` that also records every temperature.  All seeds
are fixed.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw
from multiwalk.evidence import evidence, ladder_overlap

SIGMA = 0.5  # width of each likelihood mode
BOX = 5.0  # the box [-5, 5]^2: its volume 100 normalises the uniform prior
LOG_VOLUME = np.log((2 * BOX) ** 2)
SOLVER = mw.ReplicaExchange(nbeta=16, nseq=16, nburn=500, niter=2000)


def mixture_chi2(x, args):
    """-2 log of ``sum_k w_k exp(-|x - c_k|^2 / (2 SIGMA^2))``: ``args = (centres (2, 2), weights (2,))``."""
    centres, weights = args
    r = jnp.sum((x[None, :] - centres) ** 2, axis=1) / (2 * SIGMA**2)
    return -2 * jax.scipy.special.logsumexp(-r, b=weights)


def mixture_run(centres, weights, seed):
    problem = mw.Problem(objective=mixture_chi2, args=(jnp.asarray(centres), jnp.asarray(weights)),
                         lower=[-BOX, -BOX], upper=[BOX, BOX])
    return mw.solve(problem, SOLVER, seed=seed)


@pytest.fixture(scope="module")
def gaussian():
    """One Gaussian mode at (1, -0.5), both weights on it: Z = 2 pi SIGMA^2 / 100 (the modes lie
    over 7 SIGMA inside the box, so its truncation changes log Z by < 1e-10)."""
    return mixture_run([[1.0, -0.5], [1.0, -0.5]], [0.5, 0.5], seed=3)


@pytest.fixture(scope="module")
def bimodal():
    """Two modes, weights 0.3 and 0.9: Z = 1.2 * 2 pi SIGMA^2 / 100; the cold chain should spend
    0.9 / 1.2 = 75 % of its time in the second mode."""
    return mixture_run([[-2.0, -2.0], [2.5, 1.0]], [0.3, 0.9], seed=4)


PRIOR_TAU = 1.0  # the Gaussian prior's width
MU = np.array([1.0, -0.5])


@pytest.fixture(scope="module")
def with_prior():
    """Likelihood exp(-|x - MU|^2 / (2 SIGMA^2)), prior N(0, PRIOR_TAU^2) per axis (unnormalised: the
    sampler normalises it over the box, which holds all but ~6e-7 of it), every temperature recorded."""
    problem = mw.Problem(objective=lambda x: jnp.sum((x - MU) ** 2) / SIGMA**2, lower=[-BOX, -BOX], upper=[BOX, BOX],
                         log_prior=lambda x: -0.5 * jnp.sum(x**2) / PRIOR_TAU**2)
    solver = mw.ReplicaExchange(nbeta=16, nseq=16, nburn=500, niter=2000, record_temperatures=True)
    return problem, mw.solve(problem, solver, seed=5)


def check_log_z(result, exact):
    """Both estimators within 3 standard errors (their own, from the 16 sequences) and within 0.1 nats.
    Those runs (4 seeds each) missed by -0.03 .. +0.01 nats with errors of 0.01 - 0.02.  Three, not
    two: another machine rounds the chains otherwise, and a seeded run's miss is one draw of the
    estimator's spread (an H200 missed the prior's log Z by 2.08 of its standard errors, 0.018 nats);
    a run outside 3 has a chance of ~0.3 % per estimator."""
    for method in ("thermodynamic", "stepping-stones"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a well-resolved ladder: no warning
            est = result.evidence(method)
        assert est.method == method and est.per_sequence.shape == (16,)
        assert abs(est.log_z - exact) < 0.1, (method, est.log_z, exact)
        assert abs(est.log_z - exact) < 3 * est.error, (method, est.log_z, exact, est.error)


def test_gaussian_likelihood_in_a_box_has_the_analytic_evidence(gaussian):
    check_log_z(gaussian, np.log(2 * np.pi * SIGMA**2) - LOG_VOLUME)
    assert gaussian.log_evidence == gaussian.evidence().log_z


def test_bimodal_target_has_the_known_evidence_and_mode_weights(bimodal):
    check_log_z(bimodal, np.log(1.2 * 2 * np.pi * SIGMA**2) - LOG_VOLUME)
    # 32000 correlated draws: the second mode's share within 0.05 of 0.75 (a few times the
    # spread between sequences seen)
    share = np.mean(bimodal.flat_samples[:, 0] > 0.25)
    assert abs(share - 0.75) < 0.05, share


def test_fun_trace_all_records_every_temperature(gaussian):
    r = gaussian
    assert r.fun_trace_all.shape == (2000, 16, 16)  # (niter, nseq, nbeta)
    np.testing.assert_array_equal(r.fun_trace_all[..., 0], r.fun_trace)  # coldest first
    # hotter temperatures sit at higher chi2 on average: <chi2>_beta = 2 / beta for a 2-D
    # Gaussian until the box bounds it (the hottest six, near the prior's ~71, differ by noise)
    means = r.fun_trace_all.mean(axis=(0, 1))
    assert np.all(np.diff(means[:10]) > 0), means
    np.testing.assert_allclose(means[:4] * r.betas[:4], 2.0, rtol=0.1)  # 10 %: 32000 correlated draws
    assert r.samples_all is None and r.label_trace is None  # record_temperatures is off


def test_log_prior_is_applied_untempered_and_enters_the_evidence(with_prior):
    problem, r = with_prior
    s2, t2 = SIGMA**2, PRIOR_TAU**2
    # the posterior: N(MU t2 / (s2 + t2), s2 t2 / (s2 + t2)); 32000 correlated draws, tolerance
    # 0.05 in the mean (the posterior sd is 0.45) and 10 % in the sd
    np.testing.assert_allclose(r.flat_samples.mean(axis=0), MU * t2 / (s2 + t2), atol=0.05)
    np.testing.assert_allclose(r.flat_samples.std(axis=0), np.sqrt(s2 * t2 / (s2 + t2)), rtol=0.1)
    exact = np.log(s2 / (s2 + t2)) - 0.5 * np.sum(MU**2) / (s2 + t2)  # Z = int L prior, d = 2
    check_log_z(r, exact)


def test_record_temperatures_keeps_every_point_and_label(with_prior):
    problem, r = with_prior
    assert r.samples_all.shape == (2000, 16, 16, 2) and r.label_trace.shape == (2000, 16, 16)
    np.testing.assert_array_equal(r.samples_all[:, :, 0], r.samples)
    np.testing.assert_array_equal(r.label_trace[-1].T, r.labels)
    # each label is a permutation of the replicas
    assert np.all(np.sort(r.label_trace, axis=-1) == np.arange(16))
    # the recorded chi2 is the objective at the recorded point (float32 rounding)
    some = r.samples_all[::97].reshape(-1, 2)
    np.testing.assert_allclose(problem.chi2(some), r.fun_trace_all[::97].reshape(-1), rtol=1e-5, atol=1e-5)


def test_coarse_ladder_warns(gaussian):
    """Every fifth temperature of the same run (beta 1, 0.046, 0.0022, 1e-4): neighbours' chi2
    barely overlap, and the estimate says so."""
    rungs = np.arange(0, 16, 5)
    coarse = gaussian.fun_trace_all[..., rungs]
    assert ladder_overlap(coarse).min() < 0.3
    for method in ("thermodynamic", "stepping-stones"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est = evidence(coarse, gaussian.betas[rungs], method=method)
        assert any("too coarse" in str(w.message) for w in caught)
        assert [str(w.message) for w in caught] == list(est.warnings)
    # thermodynamic integration also says its quadrature is off (~0.36 nats here)
    assert "discretisation error" in " ".join(evidence(coarse, gaussian.betas[rungs], warn=False).warnings)


def test_evidence_refuses_what_it_cannot_integrate(gaussian):
    r = gaussian
    with pytest.raises(ValueError, match="method must be one of"):
        r.evidence("harmonic")
    with pytest.raises(ValueError, match="start at 1"):
        evidence(r.fun_trace_all[..., 1:], r.betas[1:])
    bad = r.fun_trace_all.copy()
    bad[3, 2, 1] = np.inf
    with pytest.raises(ValueError, match="1 non-finite"):
        evidence(bad, r.betas)


def test_model_likelihood_is_eq7_normalised():
    """With model / data / sigma the likelihood is eq. 7's normalised Gaussian: log L = -chi2 / 2 +
    the constant, equal to scipy's normal log density summed over the data."""
    from scipy.stats import norm

    data, sigma = np.array([0.3, -1.2, 2.0]), np.array([0.5, 1.0, 2.0])
    problem = mw.Problem(model=lambda x: x[0] * jnp.ones(3), data=data, sigma=sigma, lower=[-3.0], upper=[3.0])
    x = np.array([[0.7]])
    log_l = -0.5 * problem.chi2(x)[0] + problem.log_likelihood_constant()
    np.testing.assert_allclose(log_l, norm.logpdf(data, 0.7, sigma).sum(), rtol=1e-6)  # float32 chi2
    assert mw.Problem(objective=lambda x: x[0] ** 2, lower=[0.0], upper=[1.0]).log_likelihood_constant() == 0.0


def test_log_prior_is_checked_and_never_ignored():
    box = dict(lower=[-1.0, -1.0], upper=[1.0, 1.0])
    f = lambda x: jnp.sum(x**2)  # noqa: E731
    with pytest.raises(TypeError, match="log_prior must be a function"):
        mw.Problem(objective=f, log_prior=3.0, **box)
    with pytest.raises(ValueError, match="log_prior must return a real floating-point scalar"):
        mw.Problem(objective=f, log_prior=lambda x: -x, **box)
    with pytest.raises(TypeError, match=r"calling log_prior\(x\)"):
        mw.Problem(objective=f, log_prior=lambda x: x[0] @ x[0, 0], **box)
    with pytest.raises(ValueError, match="log_prior needs lower= and upper="):
        mw.Problem(objective=f, x0=[0.0, 0.0], log_prior=lambda x: -jnp.sum(x**2))
    problem = mw.Problem(objective=f, log_prior=lambda x: -jnp.sum(x**2), x0=[0.5, 0.5], **box)
    for solver in (mw.PatternSearch(n_walkers=8, iterations=2), mw.LBFGS()):
        with pytest.raises(ValueError, match=f"log_prior, which {type(solver).__name__} would ignore"):
            mw.solve(problem, solver)
