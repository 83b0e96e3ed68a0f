"""An elliptical Gaussian: flux, FWHM along its major and minor axes, position angle of the major axis.

``I(x, y) = flux 4 ln2 / (pi a b) exp(-4 ln2 ((x'/a)^2 + (y'/b)^2))`` with ``x'`` along the
position angle ``pa`` (east of north) and ``y'`` across it, ``a = fwhm_maj``, ``b = fwhm_min``;
``V(u, v) = flux exp(-pi^2 ((a u')^2 + (b v')^2) / (4 ln 2))``, ``u', v'`` the components of
``(u, v)`` along and across ``pa``.  A point source (``a = b = 0``) is allowed: ``V = flux``.

The default box does not force ``fwhm_maj >= fwhm_min`` (a box cannot): a sample with the two
the other way round is the same image with its long axis at ``pa + 90`` degrees.
:func:`derived` reports the image's longer and shorter FWHM and the long axis's position angle,
so both labellings of one image give the same derived values.  A Gaussian has no ring: it has
no diameter, width or bright side to report.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from .base import GAUSS_FT, UAS_TO_NRAD, Model, along_pa, check_image_args, check_params, pixel_grid, pixel_means

__all__ = ["visibilities", "image", "derived", "PARAM_NAMES", "LOWER", "UPPER", "PERIODIC", "PARAM_UNITS", "MODEL"]

PARAM_NAMES = ("flux", "fwhm_maj", "fwhm_min", "pa")
#: A box for M87-like data; ``pa`` has period pi (an ellipse turned half a turn is itself).
LOWER = np.array([0.01, 0.0, 0.0, 0.0])
UPPER = np.array([3.0, 100.0, 100.0, np.pi])
PERIODIC = ("pa",)
PARAM_UNITS = {
    "flux": "Jy, total flux",
    "fwhm_maj": "uas, FWHM along pa",
    "fwhm_min": "uas, FWHM across pa",
    "pa": "rad east of north, major axis",
}
DERIVED_UNITS = {
    "fwhm_long": "uas, the longer FWHM",
    "fwhm_short": "uas, the shorter FWHM",
    "pa_long": "deg east of north, long axis",
}


def visibilities(params: Any, u: Any, v: Any) -> jnp.ndarray:
    """Complex visibilities (Jy; real and positive) of the elliptical Gaussian at ``u, v`` (gigalambda, any shape).

    ``params = (flux [Jy], fwhm_maj [uas], fwhm_min [uas], pa [rad])``.  Pure ``jax.numpy``.
    """
    p = check_params(params, PARAM_NAMES, "gaussian")
    u, v = jnp.asarray(u, p.dtype), jnp.asarray(v, p.dtype)
    flux, fwhm_maj, fwhm_min, pa = (p[i] for i in range(4))
    along, across = along_pa(u, v, pa)
    a, b = fwhm_maj * UAS_TO_NRAD, fwhm_min * UAS_TO_NRAD
    amp = flux * jnp.exp(-GAUSS_FT * ((a * along) ** 2 + (b * across) ** 2))
    return amp + 0j


def image(params: Any, npix: int = 128, fov: float = 160.0, oversample: int = 4) -> np.ndarray:
    """The Gaussian's image: ``(npix, npix)`` Jy per pixel, laid out as :func:`.base.pixel_grid` says.

    The analytic brightness averaged over ``oversample^2`` points per pixel; a FWHM narrower
    than one sample (0 included) is drawn as one sample wide.
    """
    check_image_args(npix, fov, oversample)
    p = np.asarray(params, dtype=np.float64)
    if p.shape != (4,):
        raise ValueError(f"gaussian's image takes the 4 parameters {PARAM_NAMES}, got shape {p.shape}")
    flux, fwhm_maj, fwhm_min, pa = p
    x, y, pix = pixel_grid(npix, fov, oversample)
    a = max(fwhm_maj * UAS_TO_NRAD, pix / oversample)
    b = max(fwhm_min * UAS_TO_NRAD, pix / oversample)
    along, across = along_pa(x, y, pa)
    k = 4 * np.log(2.0)
    brightness = flux * k / (np.pi * a * b) * np.exp(-k * ((along / a) ** 2 + (across / b) ** 2))
    return pixel_means(brightness, npix, oversample, pix)


def derived(params: Any) -> dict[str, np.ndarray]:
    """The longer and shorter FWHM (uas) and the long axis's position angle (deg east of north, [0, 180)),
    for ``params`` (..., 4): the same for both labellings of one image (module docstring)."""
    p = np.asarray(params, np.float64)
    swap = p[..., 2] > p[..., 1]
    pa = np.degrees(p[..., 3]) + np.where(swap, 90.0, 0.0)
    return {
        "fwhm_long": np.maximum(p[..., 1], p[..., 2]),
        "fwhm_short": np.minimum(p[..., 1], p[..., 2]),
        "pa_long": np.mod(pa, 180.0),
    }


#: The registry's entry (``multiwalk.models.MODELS["gaussian"]``).
MODEL = Model("gaussian", visibilities, image, PARAM_NAMES, LOWER, UPPER, PERIODIC, PARAM_UNITS, derived,
              DERIVED_UNITS, {"pa_long": 180.0})
