"""The blurred m-ring with an m=1 brightness asymmetry (Johnson et al. 2020; EHT 2019 Paper VI).

The image: a ring of zero thickness and diameter ``d`` whose brightness per unit angle, at the
point of position angle ``psi`` (east of north) on the ring, is
``flux / (2 pi) * (1 + beta1 cos(psi - pa))``, convolved with a circular Gaussian of FWHM ``w``
(the ring's width), optionally centred at ``(x0, y0)`` instead of the origin.  ``pa`` is the
bright side's position angle; ``beta1`` in [0, 1] is the brightness contrast
(bright / faint = (1 + beta1) / (1 - beta1)): the image is non-negative exactly for
``beta1 <= 1``.  In Johnson et al.'s notation (brightness ``sum_m beta_m exp(i m psi)``,
``beta_0 = 1``) this is ``beta_1 = (beta1 / 2) exp(-i pa)``: their ``|beta_1|`` is half ours.

Visibilities, with ``rho = sqrt(u^2 + v^2)`` and the baseline's position angle
``phi = atan2(u, v)`` (``exp(-i z cos a) = sum_n (-i)^n J_n(z) exp(i n a)`` integrated over
the ring)::

    V = flux exp(-pi^2 w^2 rho^2 / (4 ln 2)) sum_m beta_m J_m(pi d rho) exp(i m (phi - pi/2))
      = flux exp(-pi^2 w^2 rho^2 / (4 ln 2)) (J0(z) - i beta1 cos(phi - pa) J1(z)),  z = pi d rho

times ``exp(-2 pi i (u x0 + v y0))`` for an offset.  It is evaluated as
``J0(z) - i beta1 pi d (u sin pa + v cos pa) J1(z)/z`` with ``J0 = 2 J1(z)/z - z^2 J2(z)/z^2``,
both ratios smooth functions of ``z^2`` (:func:`.bessel.jinc12_sq`): no square root and no
division, so ``rho -> 0`` has finite values and gradients.  The image is the same ring
convolved analytically: ``flux / (2 pi s^2) exp(-(r - R)^2 / (2 s^2)) (I0e(k) + beta1
cos(phi - pa) I1e(k))``, ``k = r R / s^2``, ``s = w / sqrt(8 ln 2)``, ``R = d/2``.

Parameters (:data:`PARAM_NAMES`): ``flux`` (Jy), ``d`` (uas), ``w`` (uas), ``beta1``, ``pa``
(rad); the 7-parameter form (:data:`PARAM_NAMES_OFFSET`) adds ``x0, y0`` (uas, East and North),
which closure quantities and amplitudes cannot see (a shift only changes visibility phases).
Derived quantities (:func:`derived`): diameter ``d``, width ``w``, bright side ``pa`` in degrees.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from scipy import special

from .base import (
    GAUSS_FT,
    RING_DERIVED_PERIODS,
    RING_DERIVED_UNITS,
    UAS_TO_NRAD,
    Model,
    check_image_args,
    pixel_grid,
    pixel_means,
)
from .bessel import jinc12_sq

__all__ = [
    "visibilities",
    "image",
    "derived",
    "PARAM_NAMES",
    "PARAM_NAMES_OFFSET",
    "LOWER",
    "UPPER",
    "PERIODIC",
    "PARAM_UNITS",
    "MODEL",
]

PARAM_NAMES = ("flux", "d", "w", "beta1", "pa")
PARAM_NAMES_OFFSET = PARAM_NAMES + ("x0", "y0")
#: A box for M87-like data (the 5-parameter form).
LOWER = np.array([0.01, 20.0, 0.0, 0.0, -np.pi])
UPPER = np.array([3.0, 80.0, 40.0, 1.0, np.pi])
PERIODIC = ("pa",)
PARAM_UNITS = {
    "flux": "Jy, total flux",
    "d": "uas, ring diameter",
    "w": "uas, FWHM of the Gaussian blur (ring width)",
    "beta1": "m=1 brightness contrast, 1 + beta1 cos(psi - pa)",
    "pa": "rad east of north, bright side",
    "x0": "uas, centre offset to the East",
    "y0": "uas, centre offset to the North",
}


def _check(params: Any) -> jnp.ndarray:
    """``params`` as a floating vector of 5 or 7 values (ValueError naming both forms otherwise)."""
    p = jnp.asarray(params)
    if p.shape not in ((5,), (7,)):
        raise ValueError(f"mring takes the 5 parameters {PARAM_NAMES} or the 7 {PARAM_NAMES_OFFSET}, "
                         f"got shape {p.shape}")
    if not jnp.issubdtype(p.dtype, jnp.floating):
        p = p.astype(jnp.result_type(float))
    return p


def visibilities(params: Any, u: Any, v: Any) -> jnp.ndarray:
    """Complex visibilities (Jy) of the blurred m-ring at ``u, v`` (gigalambda, any shape).

    ``params = (flux [Jy], d [uas], w [uas], beta1, pa [rad])``, optionally followed by
    ``(x0, y0)`` [uas].  Pure ``jax.numpy``: jit, vmap and grad apply, at ``u = v = 0`` too.
    """
    p = _check(params)
    u, v = jnp.asarray(u, p.dtype), jnp.asarray(v, p.dtype)
    flux, d_uas, w_uas, beta1, pa = (p[i] for i in range(5))
    d, w = d_uas * UAS_TO_NRAD, w_uas * UAS_TO_NRAD
    rho2 = u * u + v * v
    z2 = (jnp.pi * d) ** 2 * rho2
    jinc1, jinc2 = jinc12_sq(z2)  # J1(z)/z, J2(z)/z^2
    j0 = 2 * jinc1 - z2 * jinc2
    along = u * jnp.sin(pa) + v * jnp.cos(pa)  # rho cos(phi - pa)
    ring = j0 - 1j * (beta1 * jnp.pi * d * along * jinc1)
    vis = flux * jnp.exp(-GAUSS_FT * w * w * rho2) * ring
    if p.shape[0] == 7:
        shift = -2 * jnp.pi * (u * p[5] + v * p[6]) * UAS_TO_NRAD
        vis = vis * (jnp.cos(shift) + 1j * jnp.sin(shift))
    return vis


def image(params: Any, npix: int = 128, fov: float = 160.0, oversample: int = 4) -> np.ndarray:
    """The m-ring's image: ``(npix, npix)`` Jy per pixel, laid out as :func:`.base.pixel_grid` says.

    The analytic brightness (module docstring) averaged over ``oversample^2`` points per pixel.
    A blur narrower than one sample (``w = 0`` included) is drawn as one sample wide.
    """
    check_image_args(npix, fov, oversample)
    p = np.asarray(params, dtype=np.float64)
    if p.shape not in ((5,), (7,)):
        raise ValueError(f"mring's image takes the 5 parameters {PARAM_NAMES} or the 7 {PARAM_NAMES_OFFSET}, "
                         f"got shape {p.shape}")
    flux, d_uas, w_uas, beta1, pa = p[:5]
    x0, y0 = (p[5] * UAS_TO_NRAD, p[6] * UAS_TO_NRAD) if p.shape[0] == 7 else (0.0, 0.0)
    x, y, pix = pixel_grid(npix, fov, oversample)
    x, y = x - x0, y - y0
    radius = d_uas * UAS_TO_NRAD / 2
    sigma = max(w_uas * UAS_TO_NRAD / np.sqrt(8 * np.log(2.0)), pix / oversample)
    r = np.hypot(x, y)
    k = r * radius / sigma**2
    with np.errstate(invalid="ignore", divide="ignore"):
        cos_to_bright = np.where(r > 0, (x * np.sin(pa) + y * np.cos(pa)) / r, 0.0)
    radial = np.exp(-0.5 * ((r - radius) / sigma) ** 2) / (2 * np.pi * sigma**2)
    brightness = flux * radial * (special.i0e(k) + beta1 * cos_to_bright * special.i1e(k))
    return pixel_means(brightness, npix, oversample, pix)


def derived(params: Any) -> dict[str, np.ndarray]:
    """Diameter ``d`` (uas), width ``w`` (uas) and bright side's position angle (deg east of north,
    [0, 360)), for ``params`` (..., 5) or (..., 7)."""
    p = np.asarray(params, np.float64)
    return {"diameter": p[..., 1], "width": p[..., 2], "pa_bright": np.mod(np.degrees(p[..., 4]), 360.0)}


#: The registry's entry (``multiwalk.models.MODELS["mring"]``): the 5-parameter form.
MODEL = Model("mring", visibilities, image, PARAM_NAMES, LOWER, UPPER, PERIODIC, PARAM_UNITS, derived,
              RING_DERIVED_UNITS, RING_DERIVED_PERIODS)
