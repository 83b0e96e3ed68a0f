"""Matplotlib figures from results.  Imported lazily, so matplotlib loads only when plotting."""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np


class SampledResult(Protocol):
    """What :func:`plot_replica_exchange` reads of a result: a
    :class:`~multiwalk.solvers.replica_exchange.ReplicaExchangeResult` (whose ``plot`` calls it;
    named here by its parts, so this module, below the solvers, imports none of them)."""

    x: np.ndarray  # (n,) the best point
    fun: float
    names: list[str]
    lower: np.ndarray  # (n,)
    upper: np.ndarray  # (n,)
    free_index: np.ndarray  # indices of the free parameters
    fun_trace: np.ndarray  # (iterations, sequences) chi2 of the coldest chains

    @property
    def flat_samples(self) -> np.ndarray: ...  # (samples, n) of the coldest chains


def plot_replica_exchange(result: SampledResult, path: str | None = None, bins: int = 50):
    """Marginal histogram of every free parameter (coldest chains) and the chi2 trace.

    Returns the matplotlib Figure; writes it to ``path`` when given (format from the suffix).
    """
    import matplotlib

    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    free = list(result.free_index)
    n_panels = len(free) + 1
    ncols = min(n_panels, 3)
    nrows = int(np.ceil(n_panels / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.3 * nrows), squeeze=False)
    axes = axes.ravel()
    flat = result.flat_samples
    for ax, i in zip(axes, free):
        ax.hist(flat[:, i], bins=bins, range=(result.lower[i], result.upper[i]), color="tab:blue")
        ax.axvline(result.x[i], color="tab:red", ls="--", lw=1, label="best")
        ax.set_xlabel(result.names[i])
        ax.set_ylabel("samples")
        ax.grid(alpha=0.3)
    ax = axes[len(free)]
    trace = result.fun_trace
    if trace.size:
        it = np.arange(trace.shape[0])
        ax.plot(it, np.min(trace, axis=1), lw=1, label="min over sequences")
        ax.plot(it, np.median(trace, axis=1), lw=1, label="median")
        if np.all(trace > 0):
            ax.set_yscale("log")
        ax.legend(fontsize=8)
    ax.set_xlabel("sampling iteration")
    ax.set_ylabel("chi2 (coldest chains)")
    ax.grid(alpha=0.3)
    for extra in axes[n_panels:]:
        extra.set_visible(False)
    fig.suptitle(f"ReplicaExchange: best chi2 = {result.fun:.4g}")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return fig


def plot_sky_image(image: np.ndarray, cell: float, path: str | os.PathLike | None = None, title: str = "",
                   unit: str = ""):
    """An image in sky order (``image[row, col]``: north up the rows, east at column 0, the phase
    centre at (N // 2, M // 2), as :mod:`multiwalk.deconv` makes them) on axes of offsets from the
    phase centre in arcsec, east to the left and north up; ``cell`` in radians.

    The offsets are the direction cosines (l, m) of the SIN projection (RA offset times cos Dec,
    Dec offset, near the centre).  Returns the Figure; writes it to ``path`` when given."""
    import matplotlib

    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    n, m = np.shape(image)
    arcsec = np.degrees(cell) * 3600.0
    # outer pixel edges: column j is centred on l = -(j - M // 2) cells, row i on m = (i - N // 2) cells
    left, bottom = m // 2 + 0.5, -(n // 2 + 0.5)
    extent = (left * arcsec, (left - m) * arcsec, bottom * arcsec, (bottom + n) * arcsec)
    fig, ax = plt.subplots(figsize=(6, 5))
    shown = ax.imshow(image, origin="lower", extent=extent, cmap="inferno", interpolation="nearest")
    ax.set_xlabel("RA offset [arcsec] (east left)")
    ax.set_ylabel("Dec offset [arcsec] (north up)")
    ax.set_title(title, fontsize=9)
    fig.colorbar(shown, ax=ax, label=unit)
    if path is not None:
        fig.savefig(path, dpi=100)
        plt.close(fig)
    return fig
