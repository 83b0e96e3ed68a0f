"""Figures of an xringaus fit (matplotlib, imported only when plotting)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..models import MODELS
from .closure import ClosurePhases, model_closure_phases

if TYPE_CHECKING:
    from ..io.uvdata import UVData
    from ..solvers.replica_exchange import ReplicaExchangeResult


class FitToPlot(Protocol):
    """What the figures read of a fit: :class:`~multiwalk.eht.fit.XringausFit` (whose ``plot``
    calls :func:`plot_fit`; named here by its parts, so this module does not import that one)."""

    result: ReplicaExchangeResult
    data: UVData
    closure: ClosurePhases
    model: str
    best: np.ndarray  # (n,) parameters
    median: np.ndarray
    lo68: np.ndarray
    hi68: np.ndarray

    def visibilities(self, params: Any | None = None, u: Any | None = None, v: Any | None = None) -> np.ndarray: ...


def pyplot_for_files():
    """matplotlib.pyplot with a backend that writes files (no window needed)."""
    import matplotlib

    matplotlib.use("Agg", force=False)  # files only: no window needed (an explicit MPLBACKEND still wins)
    import matplotlib.pyplot as plt

    return plt


def write_figures(plt, figures: list[tuple[str, Any]], out_dir: Path) -> list[Path]:
    """Each ``(file name, make)`` of ``figures``: ``make()``'s figure written as a PNG into
    ``out_dir`` and closed, drawn once; the paths, in order."""
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, make in figures:
        fig = make()
        if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
            # ``fig.tight_layout()`` leaves this placeholder, and ``savefig`` then lays out the whole
            # figure once more (a draw without pixels: every tick label measured again, ~40 % of the
            # time of a figure) though the placeholder moves nothing: without it, the PNG is the same
            fig.set_layout_engine(None)
        path = out_dir / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def sky_panel(ax, image: np.ndarray, title: str, fov: float, ylabel: str = "relative Dec (uas)", vmax: float | None = None):
    """``image`` (npix, npix) on ``ax`` as on the sky: column ix is x = East offset, so East is drawn
    to the left and North up, over ``fov`` microarcseconds; the title gives its total flux (Jy)."""
    half = fov / 2
    ax.imshow(image, origin="lower", extent=(-half, half, -half, half), cmap="afmhot", vmin=0, vmax=vmax)
    ax.invert_xaxis()
    ax.set_title(f"{title}: {image.sum():.2f} Jy")
    ax.set_xlabel("relative RA (uas, East left)")
    ax.set_ylabel(ylabel)


def marginal_panel(ax, values: np.ndarray, name: str, median: float, best: float, interval: tuple[float, float],
                   span: tuple[float, float] | None = None) -> None:
    """One parameter's histogram of ``values`` (over ``span`` when given, else over the values) with
    its 68 % ``interval`` shaded, its median and its best value."""
    ax.hist(values, bins=50, range=span, color="tab:blue", alpha=0.8)
    ax.axvspan(*interval, color="tab:blue", alpha=0.15, label="68 %")
    ax.axvline(median, color="tab:blue", lw=1.5, label="median")
    ax.axvline(best, color="tab:red", ls="--", lw=1.5, label="best")
    ax.set_xlabel(name)
    ax.grid(alpha=0.3)


def _hours(mjd: np.ndarray) -> np.ndarray:
    return (np.asarray(mjd) - np.floor(np.min(mjd))) * 24.0


def plot_fit(fit: FitToPlot, out_dir: Path, truth: Any | None = None, npix: int = 128, fov: float = 160.0) -> list[Path]:
    """The four figures of a fit, written as PNG files into ``out_dir``; returns their paths."""
    plt = pyplot_for_files()
    figures = [(name, lambda fn=fn: fn(plt, fit, truth, npix, fov))
               for name, fn in (("images.png", _images), ("marginals.png", _marginals),
                                ("amplitudes.png", _amplitudes), ("closure_phases.png", _closure_phases))]
    return write_figures(plt, figures, out_dir)


def _images(plt, fit: FitToPlot, truth, npix: int, fov: float):
    image = MODELS[fit.model].image
    panels = ([("truth", truth)] if truth is not None else []) + [("best fit", fit.best), ("marginal median", fit.median)]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 4.2), squeeze=False)
    imgs = [image(np.asarray(p, np.float64), npix, fov) for _, p in panels]
    vmax = max(float(im.max()) for im in imgs)
    for ax, (title, _), im in zip(axes[0], panels, imgs):
        sky_panel(ax, im, title, fov, vmax=vmax)
    fig.suptitle(f"{fit.model}: images (same colour scale)")
    fig.tight_layout()
    return fig


def _marginals(plt, fit: FitToPlot, truth, npix: int, fov: float):
    res = fit.result
    free = list(res.free_index)
    ncols = 3
    nrows = int(np.ceil(len(free) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.0 * nrows), squeeze=False)
    flat = res.flat_samples
    for ax, i in zip(axes.ravel(), free):
        lo, hi = res.lower[i], res.upper[i]
        marginal_panel(ax, flat[:, i], res.names[i], fit.median[i], fit.best[i],
                       (max(fit.lo68[i], lo), min(fit.hi68[i], hi)), span=(lo, hi))
        if truth is not None:
            ax.axvline(float(np.asarray(truth)[i]), color="k", lw=2, label="truth")
    for extra in axes.ravel()[len(free):]:
        extra.set_visible(False)
    axes.ravel()[0].legend(fontsize=7)
    fig.suptitle(f"marginal posteriors ({flat.shape[0]} samples of the coldest chains)")
    fig.tight_layout()
    return fig


def _amplitudes(plt, fit: FitToPlot, truth, npix: int, fov: float):
    d = fit.data
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    ax.errorbar(d.baseline_length, d.amplitude, yerr=d.sigma, fmt=".", color="0.3", ms=4, label="data", zorder=1)
    ax.plot(d.baseline_length, np.abs(fit.visibilities()), "o", mfc="none", color="tab:red", ms=5, label="best fit", zorder=2)
    # the best-fit model along the data's mean position angle, as a guide between the points
    r = np.linspace(0, max(d.baseline_length.max(), 1e-3) * 1.05, 400)
    angles = np.arctan2(d.v, d.u)
    ang = float(np.median(angles))
    curve = np.abs(fit.visibilities(u=r * np.cos(ang), v=r * np.sin(ang)))
    ax.plot(r, curve, "-", color="tab:red", lw=0.8, alpha=0.5, label=f"best fit along PA {np.degrees(ang):.0f} deg")
    ax.set_yscale("log")
    ax.set_xlabel("baseline length (G lambda)")
    ax.set_ylabel("visibility amplitude (Jy)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _closure_phases(plt, fit: FitToPlot, truth, npix: int, fov: float):
    cp = fit.closure
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    if len(cp):
        t = _hours(cp.mjd)
        model = np.asarray(model_closure_phases(fit.visibilities(), cp.index, cp.conj))
        ax.errorbar(t, np.degrees(cp.value), yerr=np.degrees(np.minimum(cp.sigma, np.pi)), fmt=".", color="0.3", ms=4,
                    label="data")
        ax.plot(t, np.degrees(model), "o", mfc="none", color="tab:red", ms=5, label="best fit")
    else:
        ax.text(0.5, 0.5, "no closed triangles", ha="center", transform=ax.transAxes)
    ax.set_xlabel("UTC (hours)")
    ax.set_ylabel("closure phase (deg)")
    ax.set_ylim(-190, 190)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
