"""Figures of a fit to EHT data (:class:`~multiwalk.eht.fit_eht.EHTFit`), matplotlib imported only here.

images.png (best and median images, north up, east left, a 50 uas scale bar), marginals.png
(the free parameters and the ring's derived quantities), closures.png (closure phases and log
closure amplitudes against the best model), chi2_trace.png (the coldest chains' chi2 per
iteration) and, for fits with amplitudes, amplitudes.png (gain-corrected data and the model).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .closure import model_closure_phases, model_log_closure_amplitudes
from .plots import marginal_panel, pyplot_for_files, sky_panel, write_figures

if TYPE_CHECKING:
    from ..io.uvdata import UVData
    from ..problem import Problem
    from ..solvers.replica_exchange import ReplicaExchangeResult
    from .likelihood import EHTTerms

__all__ = ["plot_eht_fit", "SCALE_BAR_UAS"]

#: The length of the images' scale bar (microarcseconds).
SCALE_BAR_UAS = 50.0


class EHTFitToPlot(Protocol):
    """What the figures read of a fit (named by its parts, so this module does not import fit_eht)."""

    result: ReplicaExchangeResult
    problem: Problem
    terms: EHTTerms
    model: str
    names: list[str]
    best: np.ndarray  # (n,)
    median: np.ndarray  # (n,)
    lo68: np.ndarray
    hi68: np.ndarray
    derived: dict[str, dict[str, float]]
    derived_samples: dict[str, np.ndarray]

    @property
    def data(self) -> UVData: ...

    def visibilities(self, params: Any | None = None, u: Any | None = None, v: Any | None = None) -> np.ndarray: ...

    def image(self, params: Any | None = None, npix: int = 128, fov: float = 160.0) -> np.ndarray: ...

    def gains(self, params: Any | None = None) -> tuple[np.ndarray, np.ndarray]: ...


def plot_eht_fit(fit: EHTFitToPlot, out_dir: Path, npix: int = 128, fov: float = 160.0) -> list[Path]:
    """The figures of ``fit`` as PNG files in ``out_dir``; their paths."""
    plt = pyplot_for_files()
    figures = [("images.png", lambda: _images(plt, fit, npix, fov)), ("marginals.png", lambda: _marginals(plt, fit)),
               ("closures.png", lambda: _closures(plt, fit)), ("chi2_trace.png", lambda: _chi2_trace(plt, fit))]
    if "amp" in fit.terms.products:
        figures.append(("amplitudes.png", lambda: _amplitudes(plt, fit)))
    return write_figures(plt, figures, out_dir)


def _images(plt, fit: EHTFitToPlot, npix: int, fov: float):
    panels = [("best fit", fit.best), ("marginal median", fit.median)]
    imgs = [fit.image(p, npix, fov) for _, p in panels]
    vmax = max(float(im.max()) for im in imgs)
    half = fov / 2
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 4.4), squeeze=False)
    for ax, (title, _), im in zip(axes[0], panels, imgs):
        sky_panel(ax, im, title, fov, ylabel="relative Dec (uas, North up)", vmax=vmax)
        x0, y0 = half * 0.9, -half * 0.85  # the bar starts near the lower left (East side) corner
        ax.plot([x0, x0 - SCALE_BAR_UAS], [y0, y0], color="w", lw=3)
        ax.text(x0 - SCALE_BAR_UAS / 2, y0 + 0.04 * fov, f"{SCALE_BAR_UAS:g} uas", color="w", ha="center")
        ax.annotate("N", xy=(-half * 0.8, half * 0.65), xytext=(-half * 0.8, half * 0.9), color="w", ha="center",
                    arrowprops={"arrowstyle": "<-", "color": "w"})
        ax.annotate("E", xy=(-half * 0.8, half * 0.65), xytext=(-half * 0.55, half * 0.65), color="w", va="center",
                    arrowprops={"arrowstyle": "<-", "color": "w"})
    d = fit.derived
    text = ", ".join(f"{k} {s['median']:.1f} [{s['lo68']:.1f}, {s['hi68']:.1f}]" for k, s in d.items())
    fig.suptitle(f"{fit.model} ({', '.join(fit.terms.products)}): {text}", fontsize=9)
    fig.tight_layout()
    return fig


def _marginals(plt, fit: EHTFitToPlot):
    res = fit.result
    flat = res.flat_samples
    # (name, samples, median, best, 68 % interval) per panel; each histogram spans its samples
    panels = [(res.names[i], flat[:, i], fit.median[i], fit.best[i], (fit.lo68[i], fit.hi68[i])) for i in res.free_index]
    for name, s in fit.derived.items():
        panels.append((name, fit.derived_samples[name], s["median"], s["best"], (s["lo68"], s["hi68"])))
    ncols = 3
    nrows = int(np.ceil(len(panels) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 2.8 * nrows), squeeze=False)
    for ax, (name, values, median, best, interval) in zip(axes.ravel(), panels):
        marginal_panel(ax, values, name, median, best, interval)
    for extra in axes.ravel()[len(panels):]:
        extra.set_visible(False)
    axes.ravel()[0].legend(fontsize=7)
    fig.suptitle(f"marginal posteriors ({flat.shape[0]} samples of the coldest chains)")
    fig.tight_layout()
    return fig


def _hours(mjd: np.ndarray, start: float) -> np.ndarray:
    return (np.asarray(mjd) - start) * 24.0


def _closures(plt, fit: EHTFitToPlot):
    terms = fit.terms
    shown = [(name, c) for name, c in (("cphase", terms.cphase), ("logcamp", terms.logcamp)) if c is not None]
    fig, axes = plt.subplots(max(len(shown), 1), 1, figsize=(8.0, 3.6 * max(len(shown), 1)), squeeze=False)
    vis = fit.visibilities()
    start = float(np.floor(fit.data.mjd.min()))
    for ax, (name, c) in zip(axes[:, 0], shown):
        t = _hours(c.mjd, start)
        if name == "cphase":
            model = np.degrees(np.asarray(model_closure_phases(vis, c.index, c.conj)))
            value, sigma, label = np.degrees(c.value), np.degrees(np.minimum(c.sigma, np.pi)), "closure phase (deg)"
            ax.set_ylim(-190, 190)
        else:
            model = np.asarray(model_log_closure_amplitudes(vis, c.index))
            value, sigma, label = c.value, c.sigma, "log closure amplitude"
        ax.errorbar(t, value, yerr=sigma, fmt=".", color="0.3", ms=4, label="data", zorder=1)
        ax.plot(t, model, "o", mfc="none", color="tab:red", ms=5, label="best fit", zorder=2)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if not shown:
        axes[0, 0].text(0.5, 0.5, "no closure quantities fitted", ha="center", transform=axes[0, 0].transAxes)
    axes[-1, 0].set_xlabel(f"UTC (hours from MJD {start:.0f})")
    fig.tight_layout()
    return fig


def _chi2_trace(plt, fit: EHTFitToPlot):
    chi2 = np.asarray(fit.result.fun_trace)  # (niter, nseq): the coldest chain of each sequence
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    if chi2.size:
        ax.plot(chi2, lw=0.7, alpha=0.7)
        ax.axhline(fit.terms.n_data, color="k", ls="--", lw=1, label=f"number of data ({fit.terms.n_data})")
        ax.legend(fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("sampling iteration")
    ax.set_ylabel("chi2 (coldest chain of each sequence)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _amplitudes(plt, fit: EHTFitToPlot):
    d = fit.data
    stations, gains = fit.gains()
    scan = fit.terms.scan_of_rows()
    g1 = gains[scan, np.searchsorted(stations, d.ant1)]
    g2 = gains[scan, np.searchsorted(stations, d.ant2)]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    ax.errorbar(d.baseline_length, d.amplitude / (g1 * g2), yerr=d.sigma / (g1 * g2), fmt=".", color="0.3", ms=4,
                label="data / best gains", zorder=1)
    ax.plot(d.baseline_length, np.abs(fit.visibilities()), "o", mfc="none", color="tab:red", ms=5, label="best fit")
    ax.set_yscale("log")
    ax.set_xlabel("baseline length (G lambda)")
    ax.set_ylabel("visibility amplitude (Jy)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
