"""The xringaus black-hole image model of cuda_mcmc (Benkevitch et al. 2016) and its visibilities.

The image is a "slashed" ring plus an elliptical Gaussian.  In a frame rotated by ``th``
(x' along ``th``): a disk of radius ``Re`` minus a disk of radius ``Rin = rq Re`` centred at
``x' = -d``, ``d = ecc (Re - Rin)``, with brightness rising linearly along x' from ``h0 = fade h``
at ``x' = -Re`` to ``h`` at ``x' = +Re`` (``h`` normalises the ring's flux to 1); plus a Gaussian
of FWHM ``gsx = aq gsy`` along x' and ``gsy = gax Re`` along y', centred at ``x' = Rin - d``
(the inner edge of the ring on its bright side).  ``V = Zsp ((1 - gq) F_ring + gq F_g)``.

Conventions (those of cuda_mcmc's ``model.cuh`` and of ehtim): ``u, v`` in gigalambda, sky
offsets in nanoradians (so ``u x`` is a number of turns), ``x`` conjugate to ``u`` (East),
``y`` to ``v`` (North), ``V(u, v) = sum I(x, y) exp(-2 pi i (u x + v y))``.

The ring is the slashed crescent of :mod:`.crescent` (:func:`.crescent.slashed_ring`), whose
terms are written with the smooth ratios ``J1(z)/z`` and ``J2(z)/z^2`` (:mod:`.bessel`): the
``rho -> 0`` limits ``ReE -> (h + h0) pi Re^2 / 2`` and ``ImE -> -pi^2 (h - h0) Re^3 U / 4`` are
then the values of the same expressions, with finite gradients.

``th`` is an angle from East towards North (x' = (cos th, sin th)); the bright side's position
angle east of north is ``90 deg - th`` (:func:`derived`).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from .base import (
    GAUSS_FT,
    RING_DERIVED_PERIODS,
    RING_DERIVED_UNITS,
    UAS_TO_NRAD,
    Model,
    check_image_args,
    check_params,
    pixel_grid,
    pixel_means,
)
from .crescent import slashed_ring, slashed_ring_image

__all__ = [
    "xringaus",
    "xringaus13",
    "image",
    "image13",
    "PARAM_NAMES",
    "PARAM_NAMES13",
    "LOWER",
    "UPPER",
    "LOWER13",
    "UPPER13",
    "PERIODIC",
    "PERIODIC13",
    "UAS_TO_NRAD",
    "MODELS",
    "derived",
    "derived13",
]

#: The 9 parameters in order, with cuda_mcmc's search box (model_obsfit.py).
PARAM_NAMES = ("Zsp", "Re", "rq", "ecc", "fade", "gax", "aq", "gq", "th")
LOWER = np.array([0.01, 20.0, 0.0, 0.0, 0.0, 0.1, 0.1, 0.0, -np.pi])
UPPER = np.array([5.0, 60.0, 0.99, 1.0, 1.0, 2.0, 1.5, 1.0, np.pi])
PERIODIC = ("th",)
#: Units and meaning, for tables and help texts.
PARAM_UNITS = {
    "Zsp": "Jy, zero-spacing flux",
    "Re": "uas, outer ring radius",
    "rq": "Rin/Re",
    "ecc": "hole offset / (Re - Rin)",
    "fade": "faint-side / bright-side brightness",
    "gax": "Gaussian FWHM along the ring / Re",
    "aq": "Gaussian axis ratio",
    "gq": "Gaussian flux fraction",
    "th": "rad, direction of the bright side",
    "gr": "Gaussian centre distance / Re",
    "alpha": "rad, direction of the Gaussian centre",
    "beta": "rad, Gaussian rotation",
    "eta": "rad, direction of the ring's thick side",
}

#: The 13-parameter form (cuda_mcmc's xringaus2); beta is the rotation of an ellipse, period pi.
PARAM_NAMES13 = ("Zsp", "Re", "rq", "ecc", "fade", "gr", "gax", "aq", "gq", "alpha", "beta", "eta", "th")
LOWER13 = np.array([0.01, 20.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.1, 0.0, -np.pi, 0.0, -np.pi, -np.pi])
UPPER13 = np.array([5.0, 60.0, 0.99, 1.0, 1.0, 1.0, 2.0, 1.0, 1.0, np.pi, np.pi, np.pi, np.pi])
PERIODIC13 = ("alpha", "beta", "eta", "th")


def _rotate(u: jnp.ndarray, v: jnp.ndarray, angle: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    c, s = jnp.cos(angle), jnp.sin(angle)
    return u * c + v * s, -u * s + v * c


def _gauss(gsx: Any, gsy: Any, U: jnp.ndarray, V: jnp.ndarray, phase: jnp.ndarray) -> jnp.ndarray:
    """Elliptical Gaussian of flux 1, FWHM gsx along U's axis and gsy along V's, shifted by ``phase``."""
    amp = jnp.exp(-GAUSS_FT * ((U * gsx) ** 2 + (V * gsy) ** 2))
    return amp * (jnp.cos(phase) - 1j * jnp.sin(phase))


def xringaus(params: Any, u: Any, v: Any) -> jnp.ndarray:
    """Complex visibilities (Jy) of the 9-parameter xringaus model at ``u, v`` (gigalambda, any shape).

    ``params = (Zsp [Jy], Re [uas], rq, ecc, fade, gax, aq, gq, th [rad])`` (:data:`PARAM_NAMES`).
    Pure ``jax.numpy``: jit, vmap and grad apply.  ``V(0, 0) = Zsp``.
    """
    p = check_params(params, PARAM_NAMES, "xringaus")
    u, v = jnp.asarray(u, p.dtype), jnp.asarray(v, p.dtype)
    zsp, re_uas, rq, ecc, fade, gax, aq, gq, th = (p[i] for i in range(9))
    re = re_uas * UAS_TO_NRAD
    rin = rq * re
    d = ecc * (re - rin)
    gsy = gax * re
    gsx = aq * gsy
    U, V = _rotate(u, v, th)
    ring = slashed_ring(re, rin, d, jnp.zeros_like(d), fade, U, V)
    gauss = _gauss(gsx, gsy, U, V, 2 * jnp.pi * (rin - d) * U)
    return zsp * ((1 - gq) * ring + gq * gauss)


def xringaus13(params: Any, u: Any, v: Any) -> jnp.ndarray:
    """Complex visibilities (Jy) of the 13-parameter form (cuda_mcmc's xringaus2).

    ``params = (Zsp, Re, rq, ecc, fade, gr, gax, aq, gq, alpha, beta, eta, th)``
    (:data:`PARAM_NAMES13`): the ring's brightness ramp points along ``th`` as in
    :func:`xringaus`; the hole is offset by ``D = ecc (Re - Rin)`` towards ``eta + pi`` (the
    ring is thickest in direction ``eta``); the Gaussian is centred at ``gr Re`` in direction
    ``alpha`` and its ``gsx`` axis points along ``beta``.  With ``eta = alpha = beta = th`` and
    ``gr = (Rin - d)/Re`` it equals :func:`xringaus`.  (cuda_mcmc's code keeps only the hole
    offset's component along ``th``; here the offset is the full 2-D vector.)
    """
    p = check_params(params, PARAM_NAMES13, "xringaus13")
    u, v = jnp.asarray(u, p.dtype), jnp.asarray(v, p.dtype)
    zsp, re_uas, rq, ecc, fade, gr, gax, aq, gq, alpha, beta, eta, th = (p[i] for i in range(13))
    re = re_uas * UAS_TO_NRAD
    rin = rq * re
    offset = ecc * (re - rin)
    d, d_perp = offset * jnp.cos(eta - th), offset * jnp.sin(eta - th)
    gsy = gax * re
    gsx = aq * gsy
    U, V = _rotate(u, v, th)
    ring = slashed_ring(re, rin, d, d_perp, fade, U, V)
    Ub, Vb = _rotate(u, v, beta)
    shift = 2 * jnp.pi * gr * re * (jnp.cos(alpha) * u + jnp.sin(alpha) * v)
    gauss = _gauss(gsx, gsy, Ub, Vb, shift)
    return zsp * ((1 - gq) * ring + gq * gauss)


# ---------------------------------------------------------------------------- images
def _gauss_image(gsx, gsy, xr, yr):
    k = 4 * np.log(2.0)
    return k / (np.pi * gsx * gsy) * np.exp(-k * ((xr / gsx) ** 2 + (yr / gsy) ** 2))


def image(params: Any, npix: int = 128, fov: float = 160.0, oversample: int = 4) -> np.ndarray:
    """The 9-parameter model's image: ``(npix, npix)`` Jy per pixel, ``image[iy, ix]``.

    Pixel ``ix`` is centred at ``x = (ix - (npix - 1)/2) fov/npix`` uas (x East, conjugate to u;
    plot with East to the left), ``iy`` likewise for y (North).  Each pixel averages
    ``oversample^2`` point samples, which smooths the ring's sharp edges.  Its sum is close to
    ``Zsp`` (exactly, up to the pixelisation of the edges).
    """
    check_image_args(npix, fov, oversample)
    p = np.asarray(params, dtype=np.float64)
    if p.shape != (9,):
        raise ValueError(f"image takes the 9 parameters {PARAM_NAMES}, got shape {p.shape}")
    zsp, re_uas, rq, ecc, fade, gax, aq, gq, th = p
    x, y, pix = pixel_grid(npix, fov, oversample)
    re = re_uas * UAS_TO_NRAD
    rin = rq * re
    d = ecc * (re - rin)
    xr, yr = x * np.cos(th) + y * np.sin(th), -x * np.sin(th) + y * np.cos(th)
    ring = slashed_ring_image(re, rin, d, 0.0, fade, xr, yr)
    gauss = _gauss_image(aq * gax * re, gax * re, xr - (rin - d), yr)
    return pixel_means(zsp * ((1 - gq) * ring + gq * gauss), npix, oversample, pix)


def image13(params: Any, npix: int = 128, fov: float = 160.0, oversample: int = 4) -> np.ndarray:
    """The 13-parameter model's image, laid out as :func:`image`."""
    check_image_args(npix, fov, oversample)
    p = np.asarray(params, dtype=np.float64)
    if p.shape != (13,):
        raise ValueError(f"image13 takes the 13 parameters {PARAM_NAMES13}, got shape {p.shape}")
    zsp, re_uas, rq, ecc, fade, gr, gax, aq, gq, alpha, beta, eta, th = p
    x, y, pix = pixel_grid(npix, fov, oversample)
    re = re_uas * UAS_TO_NRAD
    rin = rq * re
    offset = ecc * (re - rin)
    d, d_perp = offset * np.cos(eta - th), offset * np.sin(eta - th)
    xr, yr = x * np.cos(th) + y * np.sin(th), -x * np.sin(th) + y * np.cos(th)
    ring = slashed_ring_image(re, rin, d, d_perp, fade, xr, yr)
    xg, yg = x - gr * re * np.cos(alpha), y - gr * re * np.sin(alpha)
    xb, yb = xg * np.cos(beta) + yg * np.sin(beta), -xg * np.sin(beta) + yg * np.cos(beta)
    gauss = _gauss_image(aq * gax * re, gax * re, xb, yb)
    return pixel_means(zsp * ((1 - gq) * ring + gq * gauss), npix, oversample, pix)


def _ring_derived(re_uas: np.ndarray, rq: np.ndarray, th: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "diameter": re_uas * (1 + rq),  # R + Rin: the mean of the outer and inner edges' diameters
        "width": re_uas * (1 - rq),  # the mean thickness (the ring is not blurred)
        "pa_bright": np.mod(90.0 - np.degrees(th), 360.0),  # th is counted from East towards North
    }


def derived(params: Any) -> dict[str, np.ndarray]:
    """The ring's diameter ``Re + Rin`` (uas), width ``Re - Rin`` (uas) and bright side's position
    angle ``90 - th`` (deg east of north, [0, 360)), for ``params`` (..., 9); the Gaussian is left out."""
    p = np.asarray(params, np.float64)
    return _ring_derived(p[..., 1], p[..., 2], p[..., 8])


def derived13(params: Any) -> dict[str, np.ndarray]:
    """As :func:`derived`, for the 13-parameter form (..., 13)."""
    p = np.asarray(params, np.float64)
    return _ring_derived(p[..., 1], p[..., 2], p[..., 12])


#: ``MODELS["xringaus"]`` (9 parameters) and ``MODELS["xringaus13"]``; ``multiwalk.models.MODELS``
#: holds these and the other models.
MODELS = {
    "xringaus": Model("xringaus", xringaus, image, PARAM_NAMES, LOWER, UPPER, PERIODIC, PARAM_UNITS, derived,
                      RING_DERIVED_UNITS, RING_DERIVED_PERIODS),
    "xringaus13": Model("xringaus13", xringaus13, image13, PARAM_NAMES13, LOWER13, UPPER13, PERIODIC13, PARAM_UNITS,
                        derived13, RING_DERIVED_UNITS, RING_DERIVED_PERIODS),
}
