"""Fitting the xringaus model to visibility amplitudes and closure phases with ReplicaExchange.

>>> data = read_uvdata("sgra_uvdata.txt")
>>> fit = fit_xringaus(data, mw.ReplicaExchange(nbeta=32, nseq=16, nburn=400, niter=1000), seed=0)
>>> print(fit.table(truth))          # best fit, marginal median, 68 % interval per parameter
>>> fit.plot("out/", truth)          # images, marginals, amplitudes, closure phases

chi2 = sum ((|V_model| - |V_obs|) / sigma)^2 + sum (wrap(cp_model - cp_obs) / sigma_cp)^2, the
closure phases being angular data (residuals wrapped to [-pi, pi)); the parameters' prior is
uniform in the box of :mod:`multiwalk.models.xringaus` (cuda_mcmc's), ``th`` (and the 13-parameter
form's angles) periodic.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..io.uvdata import UVData
from ..models import get_model
from ..problem import Problem
from ..solve import solve
from ..solvers.replica_exchange import ReplicaExchange, ReplicaExchangeResult
from .closure import ClosurePhases, closure_phases, model_closure_phases

__all__ = ["xringaus_problem", "fit_xringaus", "XringausFit", "interval_summary", "SEED_SOLVER"]

#: The seed's example configuration (model_obsfit.py): 32 temperatures, 16 sequences, 400 + 1000 iterations.
SEED_SOLVER = ReplicaExchange(nbeta=32, nseq=16, nburn=400, niter=1000)


def _model(name: str):
    return get_model(name)  # any model of multiwalk.models.MODELS, or a ValueError naming them


@functools.cache
def _amplitudes_and_closure_phases(model: str) -> Callable[[jax.Array, tuple], jax.Array]:
    """The data model of ``model``: ``f(p, (u, v, index, conj)) -> concat(|V|, closure phases)``,
    one function object per model, so the driver can reuse its compiled loops across datasets.
    A partial of a module-level function: for the library's own models it has a name a later
    process knows (:mod:`multiwalk.program_store` then finds the fit's programs without tracing)."""
    return functools.partial(amplitudes_and_closure_phases, _model(model).fn)


def amplitudes_and_closure_phases(visibilities: Callable, p: jax.Array, args: tuple) -> jax.Array:
    """``concat(|V|, closure phases)`` of the model ``visibilities(p, u, v)`` at ``args = (u, v,
    index, conj)`` (baselines in gigalambda; the closure triangles' visibility indices and conjugations)."""
    u, v, index, conj = args
    vis = visibilities(p, u, v)
    re, im = jnp.real(vis), jnp.imag(vis)
    return jnp.concatenate([jnp.sqrt(re * re + im * im), model_closure_phases(vis, index, conj)]).astype(p.dtype)


def xringaus_problem(
    data: UVData,
    model: str = "xringaus",
    *,
    closure: ClosurePhases | None = None,
    fixed: dict[int | str, float] | None = None,
    dtype: Any = None,
) -> Problem:
    """The :class:`~multiwalk.Problem` of fitting ``model`` to ``data``'s amplitudes and closure phases.

    The model function returns ``concat(|V(u, v)|, closure phases)`` for ONE parameter vector;
    ``data`` and ``sigma`` are the observed ones; the closure phases are marked ``angular_data``.
    """
    if not isinstance(data, UVData):
        raise TypeError(f"data must be a multiwalk.io.uvdata.UVData, got {type(data).__name__}")
    m = _model(model)
    cp = closure_phases(data) if closure is None else closure
    prob_dtype = np.dtype(jnp.result_type(float)) if dtype is None else np.dtype(dtype)
    # (u, v) and the triangles are args, not constants of the function: fits to new data of
    # the same shapes (another truth, another noise draw) reuse the compiled sampler.
    args = (np.asarray(data.u, prob_dtype), np.asarray(data.v, prob_dtype), np.asarray(cp.index), np.asarray(cp.conj))
    observed = np.concatenate([data.amplitude, cp.value])
    sigma = np.concatenate([data.sigma, cp.sigma])
    angular = np.concatenate([np.zeros(len(data), bool), np.ones(len(cp), bool)])
    return Problem(
        model=_amplitudes_and_closure_phases(model), args=args, data=observed, sigma=sigma, angular_data=angular,
        lower=m.lower, upper=m.upper, periodic=list(m.periodic), names=list(m.names), fixed=fixed, dtype=dtype,
    )


def _unwrap(x: Any, center: float, period: float) -> Any:
    """``x`` moved by whole periods into the window one period wide centred on ``center``."""
    return center + np.mod(x - center + period / 2, period) - period / 2


def interval_summary(samples: np.ndarray, lower: np.ndarray, upper: np.ndarray, periodic: np.ndarray,
                     levels: tuple[float, ...] = (0.68, 0.95)) -> dict[str, np.ndarray]:
    """Marginal median and central intervals of ``samples`` (m, n) per parameter.

    A periodic parameter is first unwrapped around its circular mean (into a window one period
    wide centred there), so a posterior straddling the box's seam is not split in two; its
    median is wrapped back into the box, its interval bounds stay in the unwrapped window (so
    ``lo`` may lie below ``lower``).  Returns ``median`` and ``lo<level>``/``hi<level>`` keys
    (``lo68``, ``hi68``, ``lo95``, ``hi95``) and ``center`` (the window centre, NaN if not periodic).
    """
    s = np.asarray(samples, np.float64)
    out: dict[str, np.ndarray] = {"center": np.full(s.shape[1], np.nan)}
    unwrapped = s.copy()
    for i in np.flatnonzero(periodic):
        period = upper[i] - lower[i]
        ang = 2 * np.pi * (s[:, i] - lower[i]) / period
        mean = lower[i] + period * np.mod(np.angle(np.mean(np.exp(1j * ang))), 2 * np.pi) / (2 * np.pi)
        unwrapped[:, i] = _unwrap(s[:, i], mean, period)
        out["center"][i] = mean
    med = np.median(unwrapped, axis=0)
    for i in np.flatnonzero(periodic):
        med[i] = lower[i] + np.mod(med[i] - lower[i], upper[i] - lower[i])
    out["median"] = med
    for level in levels:
        tag = f"{round(100 * level):d}"
        out[f"lo{tag}"] = np.quantile(unwrapped, (1 - level) / 2, axis=0)
        out[f"hi{tag}"] = np.quantile(unwrapped, (1 + level) / 2, axis=0)
    return out


@dataclass
class XringausFit:
    """The result of :func:`fit_xringaus`: the sampler's result plus per-parameter summaries.

    ``best`` (n,): the lowest-chi2 point seen; ``median``, ``lo68``/``hi68``, ``lo95``/``hi95``
    (n,): marginal median and central 68 % / 95 % intervals of the coldest chains' samples
    (see :func:`interval_summary` for periodic parameters).  ``chi2`` is the best chi2 over
    ``n_data`` data (amplitudes + closure phases).
    """

    result: ReplicaExchangeResult
    problem: Problem
    data: UVData
    closure: ClosurePhases
    model: str
    names: list[str]
    best: np.ndarray
    median: np.ndarray
    lo68: np.ndarray
    hi68: np.ndarray
    lo95: np.ndarray
    hi95: np.ndarray
    center: np.ndarray = field(repr=False)  # the periodic parameters' window centres (interval_summary)

    @property
    def chi2(self) -> float:
        return float(self.result.fun)

    @property
    def n_data(self) -> int:
        return len(self.data) + len(self.closure)

    @property
    def periodic(self) -> np.ndarray:
        return np.asarray(self.problem.periodic)

    def visibilities(self, params: Any | None = None, u: Any | None = None, v: Any | None = None) -> np.ndarray:
        """Model visibilities (complex Jy) at ``u, v`` (default: the data's) for ``params`` (default: the best fit)."""
        p = self.best if params is None else params
        u = self.data.u if u is None else u
        v = self.data.v if v is None else v
        return np.asarray(_model(self.model).fn(jnp.asarray(p, jnp.result_type(float)), u, v))

    def image(self, params: Any | None = None, npix: int = 128, fov: float = 160.0) -> np.ndarray:
        """The model image (Jy per pixel, see :func:`multiwalk.models.image`), default the best fit."""
        return _model(self.model).image(self.best if params is None else params, npix, fov)

    def contains(self, truth: Any, level: float = 0.95) -> np.ndarray:
        """Whether each parameter's ``truth`` lies in its central interval at ``level`` (0.68 or 0.95)."""
        tag = {0.68: "68", 0.95: "95"}.get(level)
        if tag is None:
            raise ValueError(f"level must be 0.68 or 0.95, got {level!r}")
        t = np.asarray(truth, np.float64).copy()
        if t.shape != self.best.shape:
            raise ValueError(f"truth must have {self.best.size} values ({self.names}), got shape {t.shape}")
        lo, hi = getattr(self, f"lo{tag}"), getattr(self, f"hi{tag}")
        for i in np.flatnonzero(self.periodic):  # bring the truth into the interval's window
            period = self.problem.upper[i] - self.problem.lower[i]
            t[i] = _unwrap(t[i], self.center[i], period)
        return (t >= lo) & (t <= hi)

    def table(self, truth: Any | None = None) -> str:
        """A text table: parameter, truth (if given), best fit, median, 68 % interval, units."""
        head = f"{'parameter':>9} " + (f"{'truth':>9} " if truth is not None else "") + \
            f"{'best':>9} {'median':>9} {'68% interval':>21}  {'in 95%':>6}  meaning"
        lines = [head, "-" * len(head)]
        inside = self.contains(truth) if truth is not None else None
        for i, name in enumerate(self.names):
            row = f"{name:>9} "
            if truth is not None:
                row += f"{float(np.asarray(truth)[i]):9.4f} "
            row += f"{self.best[i]:9.4f} {self.median[i]:9.4f} [{self.lo68[i]:9.4f}, {self.hi68[i]:9.4f}]"
            row += f"  {('yes' if inside[i] else 'NO') if inside is not None else '':>6}"
            if i in self.problem.fixed:
                row += "  (fixed)"
            row += f"  {_model(self.model).units.get(name, '')}"
            lines.append(row)
        lines.append(f"best chi2 = {self.chi2:.1f} for {self.n_data} data ({len(self.data)} amplitudes, "
                     f"{len(self.closure)} closure phases), {self.problem.n_free} free parameters")
        return "\n".join(lines)

    def plot(self, out_dir: str | Path, truth: Any | None = None, npix: int = 128, fov: float = 160.0) -> list[Path]:
        """Write images.png, marginals.png, amplitudes.png, closure_phases.png into ``out_dir``; their paths."""
        from .plots import plot_fit

        return plot_fit(self, Path(out_dir), truth=truth, npix=npix, fov=fov)


def fit_xringaus(
    data: UVData,
    solver: ReplicaExchange | None = None,
    *,
    model: str = "xringaus",
    seed: int = 0,
    fixed: dict[int | str, float] | None = None,
    dtype: Any = None,
    progress: bool | None = None,
    time_limit: float | None = None,
    checkpoint: str | None = None,
) -> XringausFit:
    """Fit ``model`` (a name in :data:`multiwalk.models.MODELS`: "xringaus", "xringaus13", "mring", ...)
    to ``data`` with ReplicaExchange (default :data:`SEED_SOLVER`).

    ``progress``, ``time_limit`` and ``checkpoint`` go to :func:`multiwalk.solve`; a run cut
    short returns the samples it has (``fit.result.status`` says why).
    """
    if solver is None:
        solver = SEED_SOLVER
    if not isinstance(solver, ReplicaExchange):
        raise TypeError(f"solver must be a multiwalk.ReplicaExchange, got {type(solver).__name__}")
    cp = closure_phases(data) if isinstance(data, UVData) else None
    problem = xringaus_problem(data, model, closure=cp, fixed=fixed, dtype=dtype)
    result = solve(problem, solver, seed=seed, progress=progress, time_limit=time_limit, checkpoint=checkpoint)
    return _summarise(result, problem, data, cp, model)  # type: ignore[arg-type]


def _summarise(result: ReplicaExchangeResult, problem: Problem, data: UVData, cp: ClosurePhases, model: str) -> XringausFit:
    flat = result.flat_samples
    if flat.shape[0] == 0:  # stopped before sampling: summaries of the best point only
        flat = np.asarray(result.x)[None, :]
    stats = interval_summary(flat, problem.lower, problem.upper, problem.periodic)
    return XringausFit(
        result=result, problem=problem, data=data, closure=cp, model=model, names=list(problem.names),
        best=np.asarray(result.x, np.float64), median=stats["median"], lo68=stats["lo68"], hi68=stats["hi68"],
        lo95=stats["lo95"], hi95=stats["hi95"], center=stats["center"],
    )
