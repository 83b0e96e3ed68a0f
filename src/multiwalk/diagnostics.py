"""Convergence diagnostics of a replica-exchange run across its independent sequences, its
export to ArviZ (an ``InferenceData``, netCDF) and its corner plot.

The ``nseq`` sequences of :class:`~multiwalk.ReplicaExchange` never interact, so they are the
independent chains that ArviZ's diagnostics compare: the posterior has ``chain`` = sequence and
``draw`` = sampling iteration (the coldest chain, beta = 1).  The numbers are ArviZ's own
(``arviz.summary``: rank-normalised split R-hat, bulk and tail ESS, Vehtari et al. 2021); the
integrated autocorrelation time is the draws of all sequences over ArviZ's ESS of the mean
(``arviz.ess(method="mean")``), in sampling iterations.

ArviZ and corner are optional (``pip install "multiwalk[arviz]"``, ``"multiwalk[corner]"``) and
imported only when a function here needs them, so ``import multiwalk`` does not load them.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import warnings
from typing import IO, Any, Protocol

import numpy as np

__all__ = [
    "ConvergenceWarning",
    "RHAT_LIMIT",
    "ESS_LIMIT",
    "import_arviz",
    "convergence_table",
    "warn_unconverged",
    "summary_text",
    "print_summary",
    "to_inference_data",
    "save_netcdf",
    "plot_corner",
]

RHAT_LIMIT = 1.01  # Vehtari et al. (2021): R-hat above this means the sequences disagree
ESS_LIMIT = 100  # bulk or tail ESS below this: the quantiles and their errors are not yet reliable


class ConvergenceWarning(UserWarning):
    """A parameter's R-hat is above :data:`RHAT_LIMIT` or its bulk or tail ESS below :data:`ESS_LIMIT`."""


class SampledRun(Protocol):
    """What this module reads of a result: a
    :class:`~multiwalk.solvers.replica_exchange.ReplicaExchangeResult` (whose methods call it; named
    here by its parts, so this module, below the solvers, imports none of them).  A result may also
    carry ``fun_trace_all`` (niter, nseq, nbeta), ``round_trips`` (nseq,) and ``round_trip_rate``;
    they are used where present."""

    x: np.ndarray  # (n,) the best point
    fun: float
    message: str
    samples: np.ndarray  # (niter, nseq, n) the coldest chain of every sequence
    fun_trace: np.ndarray  # (niter, nseq) their chi2
    acceptance: np.ndarray  # (n_free, nbeta, nseq)
    exchange_rate: np.ndarray  # (nbeta - 1, nseq)
    betas: np.ndarray  # (nbeta,)
    names: list[str]  # (n,)
    free_index: np.ndarray  # (n_free,)
    lower: np.ndarray  # (n,)
    upper: np.ndarray  # (n,)
    options: dict[str, Any]


# ----------------------------------------------------------------------------- optional imports
def _optional_module(module: str, extra: str, purpose: str) -> Any:
    """Import ``module``, or an ImportError naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"{purpose} needs the {module} package, which is not installed: "
            f'pip install "multiwalk[{extra}]" (or pip install {module})'
        ) from error


def import_arviz(purpose: str = "this") -> Any:
    """ArviZ, imported now; its once-a-day notice of a coming refactor (a FutureWarning raised on
    import, about ArviZ itself, not about this use) is silenced, and only it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"\s*ArviZ is undergoing a major refactor", category=FutureWarning)
        return _optional_module("arviz", "arviz", purpose)


# ----------------------------------------------------------------------------- ArviZ export
def _checked_draws(result: SampledRun) -> np.ndarray:
    """The recorded samples (niter, nseq, n), or a ValueError when the run recorded none."""
    if result.samples.shape[0] == 0:
        raise ValueError(
            "the result holds no samples (0 sampling iterations were run): diagnostics and the "
            "ArviZ export need niter >= 1, and R-hat and ESS need at least 4 iterations"
        )
    return np.asarray(result.samples)


def _free_names(result: SampledRun) -> list[str]:
    return [result.names[i] for i in np.asarray(result.free_index)]


def _posterior(result: SampledRun, xr: Any) -> Any:
    """The posterior Dataset: one variable per free parameter, dims (chain, draw)."""
    samples = _checked_draws(result)
    niter, nseq = samples.shape[:2]
    clash = sorted({"chain", "draw"} & set(_free_names(result)))
    if clash:
        raise ValueError(f"a parameter named {clash[0]!r} clashes with ArviZ's dimension {clash[0]!r}: "
                         f"give the Problem other names (names=...)")
    coords = {"chain": np.arange(nseq), "draw": np.arange(niter)}
    data = {result.names[i]: (("chain", "draw"), samples[:, :, i].T) for i in np.asarray(result.free_index)}
    return xr.Dataset(data, coords=coords)


def _sample_stats(result: SampledRun, xr: Any) -> Any:
    """chi2 (chain, draw) of the recorded samples; the chains' acceptance (chain, beta, parameter),
    the exchange rate of each pair of neighbouring temperatures (chain, pair); where the result
    has them, the chi2 of every temperature (chain, draw, beta) and the round trips (chain,)."""
    nseq = result.samples.shape[1]
    coords = {
        "chain": np.arange(nseq),
        "draw": np.arange(result.samples.shape[0]),
        "beta": np.asarray(result.betas),
        "parameter": _free_names(result),
        "pair": np.arange(np.asarray(result.exchange_rate).shape[0]),
    }
    data = {
        "chi2": (("chain", "draw"), np.asarray(result.fun_trace).T),
        "acceptance": (("chain", "beta", "parameter"), np.transpose(result.acceptance, (2, 1, 0))),
        "exchange_rate": (("chain", "pair"), np.asarray(result.exchange_rate).T),
    }
    fun_trace_all = getattr(result, "fun_trace_all", None)
    if fun_trace_all is not None:  # (niter, nseq, nbeta)
        data["chi2_all"] = (("chain", "draw", "beta"), np.transpose(fun_trace_all, (1, 0, 2)))
    round_trips = getattr(result, "round_trips", None)
    if round_trips is not None:
        data["round_trips"] = (("chain",), np.asarray(round_trips))
    return xr.Dataset(data, coords=coords)


def to_inference_data(result: SampledRun) -> Any:
    """An ``arviz.InferenceData`` of the run.

    ``posterior``: one variable per free parameter, dims ``(chain, draw)`` = (sequence, sampling
    iteration), the coldest chain.  ``sample_stats``: ``chi2`` (chain, draw); ``acceptance``
    (chain, beta, parameter) and ``exchange_rate`` (chain, pair), the sampling phase's rates
    (pair k: temperatures k and k+1); ``chi2_all`` (chain, draw, beta), the chi2 of every
    temperature, and ``round_trips`` (chain,) when the result has them.  ``constant_data``: the
    fixed parameters' values.  The attributes hold the options (JSON), the best point and its
    chi2, and the box.
    """
    az = import_arviz("ReplicaExchangeResult.to_arviz()")
    import xarray as xr  # an ArviZ dependency

    groups = {"posterior": _posterior(result, xr), "sample_stats": _sample_stats(result, xr)}
    fixed = [i for i in range(len(result.names)) if i not in set(np.asarray(result.free_index).tolist())]
    if fixed:
        groups["constant_data"] = xr.Dataset({result.names[i]: ((), np.asarray(result.x)[i]) for i in fixed})
    attrs = {
        "inference_library": "multiwalk",
        "solver": "ReplicaExchange",
        "options": json.dumps(result.options, default=str),
        "message": result.message,
        "best_x": np.asarray(result.x),
        "best_fun": float(result.fun),
        "lower": np.asarray(result.lower),
        "upper": np.asarray(result.upper),
    }
    for dataset in groups.values():
        dataset.attrs.update(attrs)
    return az.InferenceData(**groups)


def save_netcdf(result: SampledRun, path: str | os.PathLike) -> None:
    """Write :func:`to_inference_data` to a netCDF file (``arviz.from_netcdf`` reads it back)."""
    to_inference_data(result).to_netcdf(os.fspath(path))


# ----------------------------------------------------------------------------- diagnostics
def convergence_table(result: SampledRun, warn: bool = True) -> Any:
    """ArviZ's summary of the free parameters across the sequences, as a pandas DataFrame:
    mean, sd, hdi_3%, hdi_97%, mcse_mean, mcse_sd, ess_bulk, ess_tail, r_hat (``arviz.summary``),
    and ``tau``, the integrated autocorrelation time in sampling iterations (all draws over
    ``arviz.ess(method="mean")``).  With ``warn``, a :class:`ConvergenceWarning` names each
    parameter whose R-hat is above 1.01 or whose bulk or tail ESS is below 100."""
    az = import_arviz("ReplicaExchangeResult.summary()")
    posterior = _posterior(result, importlib.import_module("xarray"))
    table = az.summary(posterior, round_to="none")  # unrounded: the 1.01 test needs the third decimal
    niter, nseq = result.samples.shape[:2]
    ess_mean = az.ess(posterior, method="mean")
    table["tau"] = [niter * nseq / float(ess_mean[name]) for name in table.index]
    if warn:
        warn_unconverged(table, niter, nseq, stacklevel=2)
    return table


def warn_unconverged(table: Any, niter: int, nseq: int, stacklevel: int = 1) -> None:
    """One ConvergenceWarning listing the parameters that fail R-hat <= 1.01 or ESS >= 100;
    ``stacklevel`` 1 points it at the caller of this function, 2 at that caller's caller, ..."""
    bad = []
    for name, row in table.iterrows():
        if not (row["r_hat"] <= RHAT_LIMIT):  # NaN (too few draws) fails too
            bad.append(f"{name}: r_hat={row['r_hat']:.3f} > {RHAT_LIMIT}")
        if not (row["ess_bulk"] >= ESS_LIMIT and row["ess_tail"] >= ESS_LIMIT):  # a NaN in either fails too
            bad.append(f"{name}: ess_bulk={row['ess_bulk']:.0f}, ess_tail={row['ess_tail']:.0f} (< {ESS_LIMIT})")
    if bad:
        warnings.warn(
            f"the {nseq} sequences x {niter} sampling iterations have not converged: " + "; ".join(bad)
            + ". Run longer (niter, nburn) or more sequences (nseq); the estimates and their errors "
            "are not yet reliable",
            ConvergenceWarning,
            stacklevel=stacklevel + 1,
        )


def _rates_lines(result: SampledRun) -> list[str]:
    """The lines under the table: the chains' acceptance, the exchange rates and the round trips."""
    niter, nseq = result.samples.shape[:2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN rate (never tried) stays NaN
        cold = np.nanmean(np.asarray(result.acceptance)[:, 0, :])
        exch = np.nanmean(np.asarray(result.exchange_rate), axis=1) if np.size(result.exchange_rate) else np.zeros(0)
    lines = [f"acceptance of the coldest chains: {cold:.3f}"]
    if exch.size:
        lines.append("exchange rate per pair of temperatures (coldest first): " + " ".join(f"{r:.2f}" for r in exch))
    round_trips = getattr(result, "round_trips", None)
    if round_trips is not None:
        trips = np.asarray(round_trips)
        lines.append(f"round trips across the ladder per sequence: mean {trips.mean():.1f} (min {trips.min()}, "
                     f"max {trips.max()})")
    rate = getattr(result, "round_trip_rate", None)
    if rate is not None:
        lines.append(f"round-trip rate: {np.mean(rate):.4g}")
    return lines


def summary_text(result: SampledRun, table: Any) -> str:
    """The printed summary: a heading, ``table`` (from :func:`convergence_table`) and the rates."""
    niter, nseq = result.samples.shape[:2]
    nbeta = len(result.betas)
    head = (f"ReplicaExchange: {nseq} sequences x {niter} sampling iterations, {nbeta} temperatures; "
            f"best chi2 {result.fun:.6g}; {result.message}")
    formats = {name: "{:.4g}".format for name in table.columns}
    formats.update({"ess_bulk": "{:.0f}".format, "ess_tail": "{:.0f}".format, "r_hat": "{:.3f}".format,
                    "tau": "{:.2f}".format})
    return "\n".join([head, table.to_string(formatters=formats), *_rates_lines(result)])


def print_summary(result: SampledRun, file: IO[str] | None = None, print_table: bool = True) -> Any:
    """Print :func:`summary_text` to ``file`` (None: standard output) unless ``print_table`` is
    False, then warn as :func:`convergence_table` does, and return the table."""
    table = convergence_table(result, warn=False)
    if print_table:
        print(summary_text(result, table), file=sys.stdout if file is None else file)
    warn_unconverged(table, *result.samples.shape[:2], stacklevel=3)  # at the caller of result.summary()
    return table


# ----------------------------------------------------------------------------- corner plot
def plot_corner(result: SampledRun, path: str | os.PathLike | None = None, **corner_options: Any) -> Any:
    """A corner plot (``corner.corner``) of the free parameters' samples, all sequences together,
    the best point marked; extra keywords go to ``corner.corner``.  Returns the matplotlib Figure;
    writes it to ``path`` when given (format from the suffix)."""
    corner = _optional_module("corner", "corner", "ReplicaExchangeResult.plot_corner()")
    import matplotlib

    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    free = np.asarray(result.free_index)
    flat = _checked_draws(result)[:, :, free].reshape(-1, free.size)
    options = {"labels": _free_names(result), "truths": np.asarray(result.x)[free], "truth_color": "tab:red"}
    options.update(corner_options)
    fig = corner.corner(flat, **options)
    if path is not None:
        fig.savefig(os.fspath(path), dpi=110)
        plt.close(fig)
    return fig
