"""What the image models share: units, the image grid, parameter checks and the :class:`Model` record.

Conventions of every model (those of cuda_mcmc's ``model.cuh`` and of ehtim): ``u, v`` in
gigalambda, sky offsets in nanoradians inside the formulas (so ``u x`` is a number of turns),
sizes in microarcseconds as parameters; ``x`` East (conjugate to ``u``), ``y`` North
(conjugate to ``v``); ``V(u, v) = sum I(x, y) exp(-2 pi i (u x + v y))``.  A *position angle*
(PA) is measured from North through East: the direction ``(x, y) = (sin PA, cos PA)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = [
    "UAS_TO_NRAD",
    "GAUSS_FT",
    "Model",
    "check_params",
    "check_image_args",
    "pixel_grid",
    "pixel_means",
    "along_pa",
    "RING_DERIVED_UNITS",
    "RING_DERIVED_PERIODS",
]

UAS_TO_NRAD = np.pi / 180.0 / 3600.0 * 1e3  # microarcseconds -> nanoradians
#: The Fourier transform of a unit-flux Gaussian of FWHM ``w`` is ``exp(-GAUSS_FT (w rho)^2)``.
GAUSS_FT = np.pi**2 / (4.0 * np.log(2.0))


@dataclass(frozen=True, eq=False)
class Model:
    """One model form: its name, functions, parameters and default box.

    ``fn(params, u, v)``: complex visibilities (Jy) at ``u, v`` (gigalambda), jax.numpy;
    ``image(params, npix, fov)``: ``(npix, npix)`` Jy per pixel (NumPy), laid out as
    :func:`pixel_grid` says; ``names``, ``lower``, ``upper``: the parameters and their default
    box; ``periodic``: the names of the angles (period ``upper - lower``); ``units``: a short
    "unit, meaning" text per name; ``derived(params)``: the ring's diameter, width and bright
    side's position angle (NumPy arrays over the leading axes of ``params`` (..., n)), with
    their texts in ``derived_units`` and the angles' periods (degrees) in ``derived_periods``.
    """

    name: str
    fn: Callable[..., Any]
    image: Callable[..., np.ndarray]
    names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    periodic: tuple[str, ...]
    units: Mapping[str, str] = field(default_factory=dict)
    derived: Callable[[Any], dict[str, np.ndarray]] | None = None
    derived_units: Mapping[str, str] = field(default_factory=dict)
    derived_periods: Mapping[str, float] = field(default_factory=dict)

    @property
    def visibilities(self) -> Callable[..., Any]:
        """The visibility function (the same object as ``fn``)."""
        return self.fn

    def __repr__(self) -> str:
        return f"<model {self.name!r}: {len(self.names)} parameters>"


#: The derived quantities of a ring, their units and meaning (``Model.derived_units`` of the ring models).
RING_DERIVED_UNITS = {
    "diameter": "uas, ring diameter",
    "width": "uas, ring width (FWHM of the radial profile)",
    "pa_bright": "deg east of north, bright side",
}
RING_DERIVED_PERIODS = {"pa_bright": 360.0}


def check_params(params: Any, names: Sequence[str], model: str) -> jnp.ndarray:
    """``params`` as a floating JAX vector of ``len(names)`` values, or a ValueError naming them."""
    p = jnp.asarray(params)
    if p.shape != (len(names),):
        raise ValueError(f"{model} takes {len(names)} parameters {tuple(names)}, got shape {p.shape}")
    if not jnp.issubdtype(p.dtype, jnp.floating):
        p = p.astype(jnp.result_type(float))
    return p


def check_image_args(npix: Any, fov: Any, oversample: Any) -> None:
    """ValueError unless ``npix`` >= 2, ``fov`` > 0 (uas) and ``oversample`` >= 1."""
    if isinstance(npix, bool) or not isinstance(npix, (int, np.integer)) or npix < 2:
        raise ValueError(f"npix must be an integer >= 2 (pixels per side), got {npix!r}")
    if not (isinstance(fov, (int, float, np.floating)) and np.isfinite(fov) and fov > 0):
        raise ValueError(f"fov must be a positive field of view in microarcseconds, got {fov!r}")
    if isinstance(oversample, bool) or not isinstance(oversample, (int, np.integer)) or oversample < 1:
        raise ValueError(f"oversample must be a positive integer (samples per pixel side), got {oversample!r}")


def pixel_grid(npix: int, fov: float, oversample: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Sub-pixel sample points ``x, y`` (nrad, each ``(npix oversample,)*2``) and the pixel size (nrad).

    The images' layout: ``image[iy, ix]``, pixel ``ix`` centred at ``x = (ix - (npix - 1)/2)
    fov/npix`` (East, conjugate to ``u``: x grows with the column), ``iy`` likewise for ``y``
    (North).  Drawn with ``imshow(image, origin="lower")`` and the x axis inverted (as
    :mod:`multiwalk.eht.plots` does), North is up and East is to the left, as on the sky.
    """
    pix = fov * UAS_TO_NRAD / npix
    sub = (np.arange(npix * oversample) - (npix * oversample - 1) / 2) * pix / oversample
    x, y = np.meshgrid(sub, sub)  # image[iy, ix]: x (East, conjugate to u) along columns
    return x, y, pix


def pixel_means(values: np.ndarray, npix: int, oversample: int, pix: float) -> np.ndarray:
    """Mean over each pixel's sub-samples times the pixel area: Jy per pixel."""
    v = values.reshape(npix, oversample, npix, oversample).mean(axis=(1, 3))
    return v * pix**2


def along_pa(x: Any, y: Any, pa: Any) -> tuple[Any, Any]:
    """``(x', y')``: the components of ``(x, y)`` along position angle ``pa`` (rad, east of north)
    and along ``pa - 90`` degrees, a rotation of the axes (so ``u x + v y = u' x' + v' y'``).

    Works on NumPy and JAX arrays alike (the sky offsets of an image or the ``u, v`` of data)."""
    xp = jnp if any(isinstance(a, jnp.ndarray) for a in (x, y, pa)) else np
    s, c = xp.sin(pa), xp.cos(pa)
    return x * s + y * c, -x * c + y * s
