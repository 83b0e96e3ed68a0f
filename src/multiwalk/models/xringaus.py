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

The ring terms use the identities ``J1(z)/rho = 2 pi R J1(z)/z`` and
``pi R (J0 - J2)(z)/rho^2 - J1(z)/rho^3 = -8 pi^3 R^3 J2(z)/z^2`` (``z = 2 pi rho R``; from
``J2 = 2 J1/z - J0``), so they are written with the smooth ratios ``J1(z)/z`` and
``J2(z)/z^2`` (:mod:`.bessel`): the ``rho -> 0`` limits ``ReE -> (h + h0) pi Re^2 / 2`` and
``ImE -> -pi^2 (h - h0) Re^3 U / 4`` are then the values of the same expressions, with finite
gradients.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from .bessel import jinc12_sq

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
]

UAS_TO_NRAD = np.pi / 180.0 / 3600.0 * 1e3  # microarcseconds -> nanoradians
_GAUSS = np.pi**2 / (4.0 * np.log(2.0))  # FT of a Gaussian of FWHM w: exp(-_GAUSS (w u)^2)

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


def _ring(re: Any, rin: Any, d: Any, d_perp: Any, fade: Any, U: jnp.ndarray, V: jnp.ndarray) -> jnp.ndarray:
    """Visibility (flux 1) of the slashed ring in the rotated frame; radii in nrad, U, V in Glambda.

    The hole is centred at ``(-d, -d_perp)``; its brightness is the same linear ramp, so only
    ``d`` enters the normalisation.
    """
    h = (2.0 / jnp.pi) / ((re**2 - rin**2 * (1 + d / re)) * fade + (re**2 - rin**2 * (1 - d / re)))
    h0 = fade * h
    rho2 = U * U + V * V
    two_pi_sq = (2 * jnp.pi) ** 2
    a_e, b_e = jinc12_sq(two_pi_sq * rho2 * re**2)  # J1(z)/z, J2(z)/z^2 at z = 2 pi rho Re
    a_i, b_i = jinc12_sq(two_pi_sq * rho2 * rin**2)
    re_e = jnp.pi * (h + h0) * re**2 * a_e
    im_e = -2 * jnp.pi**2 * (h - h0) * re**3 * U * b_e
    re_i = jnp.pi * (h + h0 - d * (h - h0) / re) * rin**2 * a_i
    im_i = -2 * jnp.pi**2 * (h - h0) * (rin**4 / re) * U * b_i
    shift = 2 * jnp.pi * (d * U + d_perp * V)  # the hole at (-d, -d_perp): factor exp(+i shift)
    cs, sn = jnp.cos(shift), jnp.sin(shift)
    real = re_e - (re_i * cs - im_i * sn)
    imag = im_e - (re_i * sn + im_i * cs)
    return real + 1j * imag


def _gauss(gsx: Any, gsy: Any, U: jnp.ndarray, V: jnp.ndarray, phase: jnp.ndarray) -> jnp.ndarray:
    """Elliptical Gaussian of flux 1, FWHM gsx along U's axis and gsy along V's, shifted by ``phase``."""
    amp = jnp.exp(-_GAUSS * ((U * gsx) ** 2 + (V * gsy) ** 2))
    return amp * (jnp.cos(phase) - 1j * jnp.sin(phase))


def _check_params(params: Any, n: int, name: str) -> jnp.ndarray:
    p = jnp.asarray(params)
    if p.shape != (n,):
        raise ValueError(f"{name} takes {n} parameters {PARAM_NAMES if n == 9 else PARAM_NAMES13}, got shape {p.shape}")
    if not jnp.issubdtype(p.dtype, jnp.floating):
        p = p.astype(jnp.result_type(float))
    return p


def xringaus(params: Any, u: Any, v: Any) -> jnp.ndarray:
    """Complex visibilities (Jy) of the 9-parameter xringaus model at ``u, v`` (gigalambda, any shape).

    ``params = (Zsp [Jy], Re [uas], rq, ecc, fade, gax, aq, gq, th [rad])`` (:data:`PARAM_NAMES`).
    Pure ``jax.numpy``: jit, vmap and grad apply.  ``V(0, 0) = Zsp``.
    """
    p = _check_params(params, 9, "xringaus")
    u, v = jnp.asarray(u, p.dtype), jnp.asarray(v, p.dtype)
    zsp, re_uas, rq, ecc, fade, gax, aq, gq, th = (p[i] for i in range(9))
    re = re_uas * UAS_TO_NRAD
    rin = rq * re
    d = ecc * (re - rin)
    gsy = gax * re
    gsx = aq * gsy
    U, V = _rotate(u, v, th)
    ring = _ring(re, rin, d, jnp.zeros_like(d), fade, U, V)
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
    p = _check_params(params, 13, "xringaus13")
    u, v = jnp.asarray(u, p.dtype), jnp.asarray(v, p.dtype)
    zsp, re_uas, rq, ecc, fade, gr, gax, aq, gq, alpha, beta, eta, th = (p[i] for i in range(13))
    re = re_uas * UAS_TO_NRAD
    rin = rq * re
    offset = ecc * (re - rin)
    d, d_perp = offset * jnp.cos(eta - th), offset * jnp.sin(eta - th)
    gsy = gax * re
    gsx = aq * gsy
    U, V = _rotate(u, v, th)
    ring = _ring(re, rin, d, d_perp, fade, U, V)
    Ub, Vb = _rotate(u, v, beta)
    shift = 2 * jnp.pi * gr * re * (jnp.cos(alpha) * u + jnp.sin(alpha) * v)
    gauss = _gauss(gsx, gsy, Ub, Vb, shift)
    return zsp * ((1 - gq) * ring + gq * gauss)


# ---------------------------------------------------------------------------- images
def _grid(npix: int, fov: float, oversample: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Sub-pixel sample points (nrad) of an npix x npix image of ``fov`` uas, and the pixel size (nrad)."""
    pix = fov * UAS_TO_NRAD / npix
    sub = (np.arange(npix * oversample) - (npix * oversample - 1) / 2) * pix / oversample
    x, y = np.meshgrid(sub, sub)  # image[iy, ix]: x (East, conjugate to u) along columns
    return x, y, pix


def _check_image_args(npix: Any, fov: Any, oversample: Any) -> None:
    if isinstance(npix, bool) or not isinstance(npix, (int, np.integer)) or npix < 2:
        raise ValueError(f"npix must be an integer >= 2 (pixels per side), got {npix!r}")
    if not (isinstance(fov, (int, float, np.floating)) and np.isfinite(fov) and fov > 0):
        raise ValueError(f"fov must be a positive field of view in microarcseconds, got {fov!r}")
    if isinstance(oversample, bool) or not isinstance(oversample, (int, np.integer)) or oversample < 1:
        raise ValueError(f"oversample must be a positive integer (samples per pixel side), got {oversample!r}")


def _ring_image(re, rin, d, d_perp, fade, xr, yr):
    h = (2.0 / np.pi) / ((re**2 - rin**2 * (1 + d / re)) * fade + (re**2 - rin**2 * (1 - d / re)))
    h0 = fade * h
    inside = (xr**2 + yr**2 <= re**2) & ((xr + d) ** 2 + (yr + d_perp) ** 2 > rin**2)
    return np.where(inside, (h + h0) / 2 + (h - h0) / (2 * re) * xr, 0.0)


def _gauss_image(gsx, gsy, xr, yr):
    k = 4 * np.log(2.0)
    return k / (np.pi * gsx * gsy) * np.exp(-k * ((xr / gsx) ** 2 + (yr / gsy) ** 2))


def _pixels(values: np.ndarray, npix: int, oversample: int, pix: float) -> np.ndarray:
    """Mean over each pixel's sub-samples times the pixel area: Jy per pixel."""
    v = values.reshape(npix, oversample, npix, oversample).mean(axis=(1, 3))
    return v * pix**2


def image(params: Any, npix: int = 128, fov: float = 160.0, oversample: int = 4) -> np.ndarray:
    """The 9-parameter model's image: ``(npix, npix)`` Jy per pixel, ``image[iy, ix]``.

    Pixel ``ix`` is centred at ``x = (ix - (npix - 1)/2) fov/npix`` uas (x East, conjugate to u;
    plot with East to the left), ``iy`` likewise for y (North).  Each pixel averages
    ``oversample^2`` point samples, which smooths the ring's sharp edges.  Its sum is close to
    ``Zsp`` (exactly, up to the pixelisation of the edges).
    """
    _check_image_args(npix, fov, oversample)
    p = np.asarray(params, dtype=np.float64)
    if p.shape != (9,):
        raise ValueError(f"image takes the 9 parameters {PARAM_NAMES}, got shape {p.shape}")
    zsp, re_uas, rq, ecc, fade, gax, aq, gq, th = p
    x, y, pix = _grid(npix, fov, oversample)
    re = re_uas * UAS_TO_NRAD
    rin = rq * re
    d = ecc * (re - rin)
    xr, yr = x * np.cos(th) + y * np.sin(th), -x * np.sin(th) + y * np.cos(th)
    ring = _ring_image(re, rin, d, 0.0, fade, xr, yr)
    gauss = _gauss_image(aq * gax * re, gax * re, xr - (rin - d), yr)
    return _pixels(zsp * ((1 - gq) * ring + gq * gauss), npix, oversample, pix)


def image13(params: Any, npix: int = 128, fov: float = 160.0, oversample: int = 4) -> np.ndarray:
    """The 13-parameter model's image, laid out as :func:`image`."""
    _check_image_args(npix, fov, oversample)
    p = np.asarray(params, dtype=np.float64)
    if p.shape != (13,):
        raise ValueError(f"image13 takes the 13 parameters {PARAM_NAMES13}, got shape {p.shape}")
    zsp, re_uas, rq, ecc, fade, gr, gax, aq, gq, alpha, beta, eta, th = p
    x, y, pix = _grid(npix, fov, oversample)
    re = re_uas * UAS_TO_NRAD
    rin = rq * re
    offset = ecc * (re - rin)
    d, d_perp = offset * np.cos(eta - th), offset * np.sin(eta - th)
    xr, yr = x * np.cos(th) + y * np.sin(th), -x * np.sin(th) + y * np.cos(th)
    ring = _ring_image(re, rin, d, d_perp, fade, xr, yr)
    xg, yg = x - gr * re * np.cos(alpha), y - gr * re * np.sin(alpha)
    xb, yb = xg * np.cos(beta) + yg * np.sin(beta), -xg * np.sin(beta) + yg * np.cos(beta)
    gauss = _gauss_image(aq * gax * re, gax * re, xb, yb)
    return _pixels(zsp * ((1 - gq) * ring + gq * gauss), npix, oversample, pix)


class _Model:
    """Names, box, periodic parameters, visibility and image functions of one model form."""

    def __init__(self, name: str, fn, image_fn, names: Sequence[str], lower: np.ndarray, upper: np.ndarray,
                 periodic: Sequence[str]) -> None:
        self.name, self.fn, self.image = name, fn, image_fn
        self.names, self.lower, self.upper, self.periodic = tuple(names), lower, upper, tuple(periodic)

    def __repr__(self) -> str:
        return f"<xringaus model {self.name!r}: {len(self.names)} parameters>"


#: ``MODELS["xringaus"]`` (9 parameters) and ``MODELS["xringaus13"]``.
MODELS = {
    "xringaus": _Model("xringaus", xringaus, image, PARAM_NAMES, LOWER, UPPER, PERIODIC),
    "xringaus13": _Model("xringaus13", xringaus13, image13, PARAM_NAMES13, LOWER13, UPPER13, PERIODIC13),
}
