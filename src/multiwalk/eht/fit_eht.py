"""Fitting an image model to EHT data (UVFITS) on closure quantities and gain-marginalised amplitudes.

>>> fit = fit_uvfits("SR1_M87_2017_095_hi_hops_netcal_StokesI.uvfits", model="mring")
>>> print(fit.table())        # parameters, ring diameter / width / bright side with 68 % and 95 %
>>> fit.plot("out/")          # images, marginals, closures against the model, chi2 trace
>>> fit.save("out/fit.npz")

:func:`fit_uvfits` reads and prepares the file (co-located baselines dropped, scans averaged, a
systematic error added: :mod:`multiwalk.io.uvprep`), then :func:`fit_eht` samples the posterior
of a registered model (:data:`multiwalk.models.MODELS`, uniform prior in its box, angles
periodic) with :class:`~multiwalk.ReplicaExchange` through :func:`multiwalk.solve`; the
likelihood of each data product is that of :mod:`multiwalk.eht.likelihood` (Gaussian, the
station gains of the amplitudes profiled out analytically per scan).  Closure quantities do not
see the total flux, so a fit without ``amp`` holds the model's flux at 1 Jy.  Every fit reports
the ring's diameter, width and the bright side's position angle (east of north) with 68 % and
95 % intervals, from the model's ``derived`` quantities of every sample.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..io.uvdata import UVData
from ..io.uvfits import read_uvfits
from ..models import Model, get_model
from ..problem import Problem
from ..solve import solve
from ..solvers.replica_exchange import ReplicaExchange, ReplicaExchangeResult
from .fit import interval_summary
from .likelihood import GAIN_SIGMA, PRODUCT_LABELS, EHTTerms, eht_terms, product_chi2_function, total_chi2_function

__all__ = ["EHT_SOLVER", "EHTFit", "eht_problem", "fit_eht", "fit_uvfits", "FLUX_NAMES"]

#: The default sampler of :func:`fit_eht`: one day's closure fit in under a minute on 2 CPU cores.
EHT_SOLVER = ReplicaExchange(nbeta=16, nseq=8, nburn=500, niter=500)
#: The names a model's total flux parameter may have (held at 1 Jy in closure-only fits).
FLUX_NAMES = ("flux", "Zsp")
_LEVELS = ("lo68", "hi68", "lo95", "hi95")


def _flux_name(model: Model) -> str:
    for name in FLUX_NAMES:
        if name in model.names:
            return name
    raise ValueError(f"model {model.name!r} has no flux parameter (one of {FLUX_NAMES}) to hold for a closure-only fit")


def derived_quantities(model_name: str, params: Any) -> dict[str, np.ndarray]:
    """The model's ring diameter and width (uas) and bright side's PA (deg east of north) for
    ``params`` (..., n): its ``derived`` function, or ValueError if it has none."""
    model = get_model(model_name)
    if model.derived is None:
        raise ValueError(f"model {model_name!r} does not give a ring's diameter, width and bright side")
    return {k: np.asarray(v, np.float64) for k, v in model.derived(np.asarray(params, np.float64)).items()}


def eht_problem(terms: EHTTerms, model: str = "xringaus", *, fixed: dict[int | str, float] | None = None,
                dtype: Any = None) -> Problem:
    """The :class:`~multiwalk.Problem` whose objective is the chi2 of ``terms`` (summed over products).

    Uniform prior in the model's box, its angles periodic; the flux held at 1 Jy when no product
    sees it (no ``amp``), unless ``fixed`` names it.
    """
    m = get_model(model)
    held = dict(fixed or {})
    if "amp" not in terms.products:
        flux = _flux_name(m)
        if flux not in held and m.names.index(flux) not in held:
            held[flux] = 1.0
    prob_dtype = np.dtype(jnp.result_type(float)) if dtype is None else np.dtype(dtype)
    return Problem(objective=total_chi2_function(m.fn, terms.products), args=terms.args(prob_dtype),
                   lower=m.lower, upper=m.upper, periodic=list(m.periodic), names=list(m.names), fixed=held,
                   dtype=dtype)


@dataclass
class EHTFit:
    """The result of :func:`fit_eht`: the sampler's result, per-parameter and derived summaries.

    ``best`` (n,): the lowest-chi2 point seen; ``median``, ``lo68``/``hi68``, ``lo95``/``hi95``
    (n,): marginal medians and central intervals of the coldest chains' samples (periodic
    parameters unwrapped around their circular mean, :func:`~multiwalk.eht.interval_summary`).
    ``derived``: ``{"diameter" | "width" | "pa_bright": {"best", "median", "lo68", ...}}`` (uas,
    uas, degrees east of north); ``derived_samples``: the same quantities of every sample.
    ``wall_seconds``: the fit's wall time (set-up, compilation and sampling).
    """

    result: ReplicaExchangeResult
    problem: Problem
    terms: EHTTerms
    model: str
    names: list[str]
    best: np.ndarray
    median: np.ndarray
    lo68: np.ndarray
    hi68: np.ndarray
    lo95: np.ndarray
    hi95: np.ndarray
    center: np.ndarray
    derived: dict[str, dict[str, float]]
    derived_samples: dict[str, np.ndarray] = field(repr=False)
    wall_seconds: float = float("nan")

    @property
    def data(self) -> UVData:
        return self.terms.data

    @property
    def products(self) -> tuple[str, ...]:
        return self.terms.products

    @property
    def chi2(self) -> float:
        return float(self.result.fun)

    def chi2_by_product(self, params: Any | None = None) -> dict[str, float]:
        """``{product: chi2}`` at ``params`` (default: the best fit)."""
        p = jnp.asarray(self.best if params is None else params, self.problem.dtype)
        values = product_chi2_function(get_model(self.model).fn, self.products)(p, self.problem.args)
        return dict(zip(self.products, (float(x) for x in np.asarray(values))))

    def visibilities(self, params: Any | None = None, u: Any | None = None, v: Any | None = None) -> np.ndarray:
        """Model visibilities (complex Jy) at ``u, v`` (default: the data's) for ``params`` (default: the best fit)."""
        p = self.best if params is None else params
        u = self.data.u if u is None else u
        v = self.data.v if v is None else v
        return np.asarray(get_model(self.model).fn(jnp.asarray(p, jnp.result_type(float)), u, v))

    def image(self, params: Any | None = None, npix: int = 128, fov: float = 160.0) -> np.ndarray:
        """The model image (Jy per pixel, ``image[iy, ix]``, x East), default the best fit."""
        return get_model(self.model).image(np.asarray(self.best if params is None else params, np.float64), npix, fov)

    def gains(self, params: Any | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(stations, gains (scans, stations))``: the best amplitude gains for ``params`` (fits with ``amp``)."""
        return self.terms.gains(self.visibilities(params))

    def table(self) -> str:
        """The parameters, the ring's derived quantities (68 % and 95 % intervals) and chi2 per product."""
        units = get_model(self.model).units
        head = f"{'parameter':>10} {'best':>9} {'median':>9} {'68% interval':>21} {'95% interval':>21}  unit"
        lines = [head, "-" * len(head)]
        for i, name in enumerate(self.names):
            row = f"{name:>10} {self.best[i]:9.4f} {self.median[i]:9.4f} [{self.lo68[i]:9.4f}, {self.hi68[i]:9.4f}]" \
                  f" [{self.lo95[i]:9.4f}, {self.hi95[i]:9.4f}]"
            note = "(fixed)" if i in self.problem.fixed else units.get(name, "")
            lines.append(f"{row}  {note}")
        derived_units = get_model(self.model).derived_units
        for name, s in self.derived.items():
            lines.append(f"{name:>10} {s['best']:9.2f} {s['median']:9.2f} [{s['lo68']:9.2f}, {s['hi68']:9.2f}]"
                         f" [{s['lo95']:9.2f}, {s['hi95']:9.2f}]  {derived_units.get(name, '')}")
        lines.append("")
        lines += self.chi2_lines()
        return "\n".join(lines)

    def chi2_lines(self) -> list[str]:
        """One line per data product: chi2, the number of data and chi2 per datum; then the total."""
        lines = []
        for name, value in self.chi2_by_product().items():
            n = self.terms.count(name)
            lines.append(f"chi2 {PRODUCT_LABELS[name]:<32} {value:10.2f} / {n:5d} = {value / max(n, 1):6.3f}")
        dof = self.terms.n_data - self.problem.n_free
        lines.append(f"chi2 {'total':<32} {self.chi2:10.2f} / {dof:5d} = {self.chi2 / max(dof, 1):6.3f}"
                     f"  ({self.terms.n_data} data - {self.problem.n_free} free parameters)")
        return lines

    def plot(self, out_dir: str | os.PathLike, npix: int = 128, fov: float = 160.0) -> list[Path]:
        """Write images.png, marginals.png, closures.png, chi2_trace.png (and amplitudes.png with
        ``amp``) into ``out_dir``; their paths."""
        from .fit_eht_plots import plot_eht_fit

        return plot_eht_fit(self, Path(out_dir), npix=npix, fov=fov)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the samples, chi2 trace, summaries and chi2 per product to an ``.npz`` file; the path written."""
        path = Path(path)
        path = path if path.suffix == ".npz" else path.with_name(path.name + ".npz")
        chi2 = self.chi2_by_product()
        summaries = {f"derived_{name}_{key}": np.float64(value) for name, s in self.derived.items()
                     for key, value in s.items()}
        np.savez(
            path, model=np.str_(self.model), names=np.array(self.names), products=np.array(self.products),
            best=self.best, median=self.median, lo68=self.lo68, hi68=self.hi68, lo95=self.lo95, hi95=self.hi95,
            samples=self.result.samples, samples_chi2=self.result.fun_trace, chi2=np.float64(self.chi2),
            chi2_products=np.array([chi2[p] for p in self.products]),
            n_products=np.array([self.terms.count(p) for p in self.products]),
            status=np.str_(self.result.status.name), message=np.str_(self.result.message),
            wall_seconds=np.float64(self.wall_seconds), history=np.array(self.data.history, dtype=str),
            **{f"derived_{k}_samples": v for k, v in self.derived_samples.items()}, **summaries,
        )
        return path


def _summarise(result: ReplicaExchangeResult, problem: Problem, terms: EHTTerms, model: str, wall: float) -> EHTFit:
    flat = result.flat_samples
    if flat.shape[0] == 0:  # stopped before sampling: summaries of the best point only
        flat = np.asarray(result.x)[None, :]
    stats = interval_summary(flat, problem.lower, problem.upper, problem.periodic)
    best = np.asarray(result.x, np.float64)
    samples = derived_quantities(model, flat)
    best_derived = derived_quantities(model, best)
    periods = get_model(model).derived_periods
    derived = {}
    for name, values in samples.items():
        period = periods.get(name)
        lower, upper = (np.zeros(1), np.full(1, period)) if period else (np.full(1, -np.inf), np.full(1, np.inf))
        s = interval_summary(values[:, None], lower, upper, np.array([period is not None]))
        median = float(s["median"][0])
        # an angle's median is wrapped into [0, period); its bounds move with it, so they enclose it
        center = s["center"][0]
        shift = median - (center + np.mod(median - center + period / 2, period) - period / 2) if period else 0.0
        derived[name] = {"best": float(best_derived[name]), "median": median,
                         **{key: float(s[key][0]) + shift for key in _LEVELS}}
    return EHTFit(result=result, problem=problem, terms=terms, model=model, names=list(problem.names), best=best,
                  median=stats["median"], lo68=stats["lo68"], hi68=stats["hi68"], lo95=stats["lo95"],
                  hi95=stats["hi95"], center=stats["center"], derived=derived, derived_samples=samples,
                  wall_seconds=wall)


def fit_eht(
    data: UVData,
    model: str = "xringaus",
    products: str | Iterable[str] = ("cphase", "logcamp"),
    solver: ReplicaExchange | None = None,
    *,
    covariance: bool = False,
    gain_sigma: float = GAIN_SIGMA,
    fixed: dict[int | str, float] | None = None,
    seed: int = 0,
    dtype: Any = None,
    progress: bool | None = None,
    time_limit: float | None = None,
    checkpoint: str | None = None,
) -> EHTFit:
    """Fit ``model`` (a name in :data:`multiwalk.models.MODELS`) to ``data``'s ``products``.

    ``products``: any of "cphase", "logcamp", "amp" (a list or "cphase,logcamp");
    ``covariance``: closure residuals whitened per time; ``gain_sigma``: the log-normal gain
    prior's width (``amp``); ``solver``: a :class:`~multiwalk.ReplicaExchange` (default
    :data:`EHT_SOLVER`).  ``progress``, ``time_limit`` and ``checkpoint`` go to
    :func:`multiwalk.solve`; a run cut short returns the samples it has (``fit.result.status``).
    """
    t0 = time.perf_counter()
    solver = EHT_SOLVER if solver is None else solver
    if not isinstance(solver, ReplicaExchange):
        raise TypeError(f"solver must be a multiwalk.ReplicaExchange, got {type(solver).__name__}")
    get_model(model)
    terms = eht_terms(data, products, covariance=covariance, gain_sigma=gain_sigma)
    problem = eht_problem(terms, model, fixed=fixed, dtype=dtype)
    result = solve(problem, solver, seed=seed, progress=progress, time_limit=time_limit, checkpoint=checkpoint)
    return _summarise(result, problem, terms, model, time.perf_counter() - t0)  # type: ignore[arg-type]


def fit_uvfits(
    path: str | os.PathLike,
    model: str = "xringaus",
    products: str | Iterable[str] = ("cphase", "logcamp"),
    solver: ReplicaExchange | None = None,
    *,
    scan_average: bool = True,
    scan_gap_seconds: float | None = None,
    systematic: float = 0.0,
    drop_colocated: bool = True,
    colocated_km: float = 5.0,
    **fit_options: Any,
) -> EHTFit:
    """Read the UVFITS file ``path``, prepare it and fit it: :func:`~multiwalk.io.read_uvfits` with
    the co-located baselines (closer than ``colocated_km``) dropped, scans averaged (a scan ends at
    a gap over ``scan_gap_seconds``, default twice the median step between times) and a fractional
    ``systematic`` error added as asked, then :func:`fit_eht` with ``fit_options``."""
    data = read_uvfits(path, drop_colocated_km=colocated_km if drop_colocated else None, average_scans=scan_average,
                       scan_gap_seconds=scan_gap_seconds, systematic=systematic)
    return fit_eht(data, model, products, solver, **fit_options)
