"""The Bayesian evidence ``Z = integral of L(x) prior(x) dx`` (eq. 9 of the cuda_mcmc document) from
the chi2 that a replica-exchange run records at every temperature.

Plain numpy and scipy on ``fun_trace_all`` (niter, nseq, nbeta) and the ladder; nothing is traced.
The likelihood is ``L = exp(-chi2 / 2 + c)``, ``c`` the likelihood's constant
(:meth:`multiwalk.Problem.log_likelihood_constant`: 0 for an objective, eq. 7's Gaussian
normalisation for model / data / sigma).  The prior is normalised (the sampler's uniform box, or
``exp(log_prior)`` restricted to the box and normalised over it), so ``log Z`` is an absolute log
evidence and two models' difference is the log Bayes factor.

Two estimators, each computed per sequence (the nseq sequences are independent runs, so the
spread of their estimates is the error bar) and on all sequences together:

* ``"thermodynamic"`` (thermodynamic integration, Gelman & Meng 1998; Lartillot & Philippe 2006):
  ``log Z = integral_0^1 <log L>_beta d beta``.  The integral is taken as ``integral beta <log
  L>_beta d(ln beta)`` by the trapezoid rule over the ladder (exact where ``beta <chi2>_beta`` is
  flat, as it is for a Gaussian likelihood: the geometric ladders' natural variable), with
  ``<log L>`` below the hottest temperature taken as that of the hottest (its posterior is close to
  the prior there, which is checked).  Its discretisation error is estimated as ptemcee does: the
  difference from the same integral over every other temperature.
* ``"stepping-stones"`` (Xie et al. 2011): ``log Z = sum_k log <L^(beta_{k+1} - beta_k)>_{beta_k}``
  over the ladder from the hottest temperature up, and the step from ``beta = 0`` to the hottest
  ``beta_h`` as ``-log <L^-beta_h>_{beta_h}`` (the same ratio sampled from its other end).

Both warn (``warnings.warn``, and in ``Evidence.warnings``) when the ladder is too coarse for the
estimate: neighbouring temperatures whose chi2 distributions barely overlap, stepping stones whose
importance weights are carried by a few samples, a discretisation error larger than the statistical
one, or a hottest temperature still far from the prior.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Evidence", "evidence", "ladder_overlap"]

METHODS = ("thermodynamic", "stepping-stones")
# Below this histogram overlap of two neighbouring temperatures' chi2, the pair's ratio is carried by
# the tails: a 2-D Gaussian likelihood has 0.89 between the default ladder's neighbours, a 4-rung
# ladder down to 1e-4 about 0.2 (stepping stones then miss by several nats).
MIN_OVERLAP = 0.3
# Below this fraction of a stone's samples as the effective number of its importance weights
# ((sum w)^2 / sum w^2), the stone's estimate rests on a handful of samples.
MIN_WEIGHT_ESS = 0.05
# The hottest temperature is close enough to the prior when beta_h^2 Var(log L) / 2 (the first-order
# error of taking <log L> on [0, beta_h] as the hottest's: d<log L>/d beta = Var(log L)) stays below
# this, in nats.
MAX_PRIOR_GAP = 0.05


@dataclass(frozen=True)
class Evidence:
    """A log evidence estimate.

    ``log_z``: the natural log of the evidence (nats), from every sequence's samples together;
    ``error``: its standard error, the standard deviation of ``per_sequence`` over sqrt(nseq) (NaN
    for one sequence); ``per_sequence`` (nseq,): each sequence's own estimate; ``method``:
    ``"thermodynamic"`` or ``"stepping-stones"``; ``discretisation``: thermodynamic integration's
    ladder error estimate (nats; NaN for stepping stones); ``overlap`` (nbeta - 1,): the chi2
    histogram overlap of each pair of neighbouring temperatures (1 identical, 0 disjoint);
    ``warnings``: what makes the estimate doubtful, in words (empty when nothing does).
    """

    log_z: float
    error: float
    per_sequence: np.ndarray
    method: str
    discretisation: float = float("nan")
    overlap: np.ndarray = field(default_factory=lambda: np.zeros(0))
    warnings: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = f"log Z = {self.log_z:.4f} +- {self.error:.4f} ({self.method}, {len(self.per_sequence)} sequences)"
        return text + "".join(f"\n  warning: {w}" for w in self.warnings)


def _checked(fun_trace_all: np.ndarray, betas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(chi2 (niter, nseq, nbeta) float64, betas (nseq, nbeta) float64)``, checked; betas
    coldest first with the coldest 1 (the posterior), one ladder or one per sequence."""
    chi2 = np.asarray(fun_trace_all, np.float64)
    if chi2.ndim != 3 or chi2.shape[0] < 2:
        raise ValueError(
            f"the evidence needs the chi2 of every temperature over at least 2 sampling iterations, "
            f"(niter, nseq, nbeta), got shape {chi2.shape}: run with niter >= 2"
        )
    _, nseq, nbeta = chi2.shape
    b = np.asarray(betas, np.float64)
    b = np.broadcast_to(b, (nseq, nbeta)) if b.ndim == 1 else b
    if b.shape != (nseq, nbeta):
        raise ValueError(f"betas has shape {np.shape(betas)}, but the chi2 record has nseq={nseq}, nbeta={nbeta}")
    if nbeta < 2:
        raise ValueError("the evidence needs a ladder of at least 2 temperatures (nbeta >= 2), got nbeta=1")
    if not np.allclose(b[:, 0], 1.0, rtol=0, atol=1e-12) or np.any(np.diff(b, axis=1) >= 0) or np.any(b <= 0):
        raise ValueError(
            f"the evidence integrates over the ladder from the posterior (beta = 1) down: betas must be "
            f"strictly decreasing, positive, and start at 1, got {b[0].tolist()}"
        )
    if not np.all(np.isfinite(chi2)):
        raise ValueError(
            f"the chi2 record holds {int(np.sum(~np.isfinite(chi2)))} non-finite values: the evidence needs a "
            "finite chi2 at every recorded point (see result.stats['nonfinite'])"
        )
    return chi2, b


def _thermodynamic(loglike: np.ndarray, betas: np.ndarray) -> np.ndarray:
    """``integral_0^1 <log L>_beta d beta`` for ``loglike`` (niter, k, nbeta) and ``betas`` (k, nbeta),
    coldest first: the trapezoid rule in ``ln beta`` on ``beta <log L>``, plus ``beta_h <log L>_h``
    for [0, beta_h]; (k,)."""
    mean = loglike.mean(axis=0)  # (k, nbeta)
    y, t = betas * mean, np.log(betas)
    inner = np.sum(0.5 * (y[:, :-1] + y[:, 1:]) * (t[:, :-1] - t[:, 1:]), axis=1)
    return inner + betas[:, -1] * mean[:, -1]


def _stepping_stones(loglike: np.ndarray, betas: np.ndarray) -> np.ndarray:
    """Stepping stones for ``loglike`` (niter, k, nbeta) and ``betas`` (k, nbeta); (k,)."""
    from scipy.special import logsumexp  # here, not at the top: `import multiwalk` does not need scipy

    n = loglike.shape[0]
    gaps = betas[:, :-1] - betas[:, 1:]  # (k, nbeta - 1): beta_{j} - beta_{j+1}, sampled at the hotter j+1
    stones = logsumexp(gaps[None] * loglike[:, :, 1:], axis=0) - np.log(n)
    first = -(logsumexp(-betas[None, :, -1] * loglike[:, :, -1], axis=0) - np.log(n))
    return stones.sum(axis=1) + first


def ladder_overlap(fun_trace_all: np.ndarray, bins: int = 50) -> np.ndarray:
    """The overlap ``sum min(p, q)`` of the chi2 histograms of each pair of neighbouring temperatures,
    all sequences and iterations together: (nbeta - 1,), 1 for identical distributions, 0 for
    disjoint ones.  ``bins`` histogram bins over the pair's common range, in ``log(chi2 - min + 1)``
    (chi2 spans decades between the cold and the hot end)."""
    chi2 = np.asarray(fun_trace_all, np.float64)
    z = np.log1p(chi2 - chi2.min())
    flat = z.reshape(-1, z.shape[-1])
    out = np.empty(flat.shape[1] - 1)
    for k in range(flat.shape[1] - 1):
        edges = np.histogram_bin_edges(flat[:, k:k + 2], bins=bins)
        p = np.histogram(flat[:, k], edges)[0] / flat.shape[0]
        q = np.histogram(flat[:, k + 1], edges)[0] / flat.shape[0]
        out[k] = np.minimum(p, q).sum()
    return out


def _weight_ess_fraction(loglike: np.ndarray, betas: np.ndarray) -> float:
    """The smallest effective sample fraction ``(sum w)^2 / (n sum w^2)`` of a stepping stone's
    importance weights, all sequences together (one ladder)."""
    from scipy.special import logsumexp

    b = betas[0]
    flat = loglike.reshape(-1, loglike.shape[-1])
    logw = np.concatenate([(b[:-1] - b[1:])[None] * flat[:, 1:], -b[-1] * flat[:, -1:]], axis=1)
    ess = np.exp(2 * logsumexp(logw, axis=0) - logsumexp(2 * logw, axis=0)) / flat.shape[0]
    return float(ess.min())


def _ladder_warnings(loglike: np.ndarray, betas: np.ndarray, overlap: np.ndarray, method: str,
                     error: float, discretisation: float) -> list[str]:
    """What makes the estimate doubtful, in words (see the module docstring)."""
    out = []
    if overlap.size and overlap.min() < MIN_OVERLAP:
        k = int(np.argmin(overlap))
        out.append(
            f"the ladder is too coarse: the chi2 distributions of temperatures {k} and {k + 1} (beta "
            f"{betas[0, k]:.3g} and {betas[0, k + 1]:.3g}) overlap by {overlap[k]:.2f} (< {MIN_OVERLAP}); "
            "raise nbeta (or narrow beta1..betan) for a trustworthy evidence"
        )
    if method == "stepping-stones":
        ess = _weight_ess_fraction(loglike, betas)
        if ess < MIN_WEIGHT_ESS:
            out.append(
                f"large stepping-stone variance: a stone's importance weights have an effective sample "
                f"fraction of {ess:.3f} (< {MIN_WEIGHT_ESS}); raise nbeta or niter"
            )
    if np.isfinite(discretisation) and discretisation > max(error, 0.05):
        out.append(
            f"the ladder's discretisation error of thermodynamic integration, ~{discretisation:.3f} nats, "
            f"exceeds the statistical error {error:.3f}: raise nbeta (or use method='stepping-stones')"
        )
    gap = float(np.max(0.5 * betas[:, -1] ** 2 * loglike[:, :, -1].var(axis=0)))
    if gap > MAX_PRIOR_GAP:
        out.append(
            f"the hottest temperature (beta {betas[0, -1]:.3g}) is not close to the prior "
            f"(beta_h^2 Var(log L) / 2 = {gap:.3g} nats): lower betan"
        )
    return out


def evidence(fun_trace_all: np.ndarray, betas: np.ndarray, log_likelihood_constant: float = 0.0,
             method: str = "thermodynamic", warn: bool = True, stacklevel: int = 2) -> Evidence:
    """The log evidence from the chi2 of every temperature, ``fun_trace_all`` (niter, nseq, nbeta),
    over the ladder ``betas`` (nbeta,) or one per sequence (nseq, nbeta), coldest (1) first.

    ``log_likelihood_constant``: ``log L + chi2 / 2``, added once (the prior is normalised).
    ``method``: ``"thermodynamic"`` or ``"stepping-stones"`` (the module docstring).  With ``warn``
    the :class:`Evidence`'s warnings are also issued with ``warnings.warn`` (``stacklevel`` as its).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    chi2, b = _checked(fun_trace_all, betas)
    # log L relative to the best chi2 seen: a constant integrates exactly, and taking it out keeps
    # the quadrature and the exponentials away from large numbers
    ref = float(chi2.min())
    loglike = -0.5 * (chi2 - ref)
    constant = float(log_likelihood_constant) - 0.5 * ref
    estimator = _thermodynamic if method == "thermodynamic" else _stepping_stones
    per_sequence = estimator(loglike, b) + constant
    one_ladder = bool(np.all(b == b[0]))
    pooled = (estimator(loglike.reshape(-1, 1, b.shape[1]), b[:1])[0] + constant) if one_ladder \
        else float(per_sequence.mean())  # pooled samples: one ladder only
    nseq = per_sequence.size
    error = float(per_sequence.std(ddof=1) / np.sqrt(nseq)) if nseq > 1 else float("nan")
    disc = float("nan")
    if method == "thermodynamic" and b.shape[1] >= 3:
        half = np.concatenate([np.arange(0, b.shape[1], 2)[:-1], [b.shape[1] - 1]]) if b.shape[1] % 2 == 0 \
            else np.arange(0, b.shape[1], 2)  # every other temperature, both ends kept
        coarse = _thermodynamic(loglike.reshape(-1, 1, b.shape[1])[..., half], b[:1, half])[0] + constant
        disc = float(abs(pooled - coarse)) if one_ladder else float("nan")
    overlap = ladder_overlap(chi2)
    notes = _ladder_warnings(loglike, b, overlap, method, error if np.isfinite(error) else 0.0, disc)
    if nseq == 1:
        notes.append("one sequence: no error bar (the error comes from the spread of nseq >= 2 sequences)")
    if warn:
        for note in notes:
            warnings.warn(note, stacklevel=stacklevel)
    return Evidence(log_z=float(pooled), error=error, per_sequence=per_sequence, method=method,
                    discretisation=disc, overlap=overlap, warnings=tuple(notes))
