"""Synthetic PSFs for the deconvolution tests."""

from __future__ import annotations

import numpy as np


def ringing_psf(p: int, lobe: float, period: float, decay: float) -> np.ndarray:
    """A p x p PSF, peak 1 at (p//2, p//2): a Gaussian core (sigma 1.5 pixels) plus ringing side
    lobes ``lobe * cos(r / period) * exp(-r / decay)``, as a sparse array's PSF has."""
    y, x = np.mgrid[:p, :p] - p // 2
    r = np.hypot(x, y)
    psf = np.exp(-0.5 * (r / 1.5) ** 2) + lobe * np.cos(r / period) * np.exp(-r / decay)
    return psf / psf[p // 2, p // 2]
