"""The slashed crescent (Kamruddin & Dexter 2013; Benkevitch et al. 2016), blurred by a circular Gaussian.

The image, in a frame whose x' axis points to the bright side (position angle ``pa``, east of
north): a uniform disk of radius ``R = d_out/2`` minus a disk of radius ``Rin = rq R`` centred at
``x' = -D``, ``D = ecc (R - Rin)`` (so the ring is thickest on the bright side), with the
brightness rising linearly along x' from ``fade h`` at ``x' = -R`` to ``h`` at ``x' = +R``
(Benkevitch's "slash"; ``h`` normalises the flux to ``flux``); the whole convolved with a
circular Gaussian of FWHM ``w``.  It is the ring of :mod:`.xringaus`, which adds a Gaussian
component instead of the blur.

Parameters (:data:`PARAM_NAMES`): ``flux`` (Jy), ``d_out`` (uas, outer diameter), ``rq``
(Rin/R), ``ecc`` (hole offset / (R - Rin), 0 concentric, 1 touching the outer edge), ``fade``
(faint-side / bright-side brightness), ``w`` (uas, FWHM of the blur), ``pa`` (rad, bright
side, east of north).

The visibility of the unblurred crescent is the difference of two disks' (with their linear
ramps), written with the smooth ratios ``J1(z)/z`` and ``J2(z)/z^2`` (:mod:`.bessel`) so that
the ``rho -> 0`` limit is the value of the same expression, with finite gradients
(:func:`slashed_ring`); the blur multiplies it by ``exp(-pi^2 w^2 rho^2 / (4 ln 2))``.

Derived quantities (:func:`derived`): the diameter ``R + Rin`` (the mean of the outer and
inner edges' diameters: the centre line's mean diameter), the width (FWHM of the radial profile
of a ring of thickness ``R - Rin`` blurred by ``w``, the ring's curvature neglected) and the
bright side's position angle ``pa`` in degrees.
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
    along_pa,
    check_image_args,
    check_params,
    pixel_grid,
    pixel_means,
)
from .bessel import jinc12_sq

__all__ = [
    "visibilities",
    "image",
    "derived",
    "slashed_ring",
    "slashed_ring_image",
    "PARAM_NAMES",
    "LOWER",
    "UPPER",
    "PERIODIC",
    "PARAM_UNITS",
    "MODEL",
]

PARAM_NAMES = ("flux", "d_out", "rq", "ecc", "fade", "w", "pa")
#: A box for M87-like data: ring diameters R + Rin of about 20-80 uas, blur up to 40 uas.
LOWER = np.array([0.01, 20.0, 0.0, 0.0, 0.0, 0.0, -np.pi])
UPPER = np.array([3.0, 100.0, 0.99, 1.0, 1.0, 40.0, np.pi])
PERIODIC = ("pa",)
PARAM_UNITS = {
    "flux": "Jy, total flux",
    "d_out": "uas, outer diameter",
    "rq": "inner / outer radius",
    "ecc": "hole offset / (R - Rin)",
    "fade": "faint-side / bright-side brightness",
    "w": "uas, FWHM of the Gaussian blur",
    "pa": "rad east of north, bright side",
}


def slashed_ring(re: Any, rin: Any, d: Any, d_perp: Any, fade: Any, U: jnp.ndarray, V: jnp.ndarray) -> jnp.ndarray:
    """Visibility (flux 1) of the unblurred slashed ring in its own frame; radii in nrad, U, V in Glambda.

    The bright side is +U's direction; the hole is centred at ``(-d, -d_perp)``; its brightness
    is the same linear ramp, so only ``d`` enters the normalisation.  The ring terms use
    ``J1(z)/rho = 2 pi R J1(z)/z`` and ``pi R (J0 - J2)(z)/rho^2 - J1(z)/rho^3 = -8 pi^3 R^3
    J2(z)/z^2`` (``z = 2 pi rho R``; from ``J2 = 2 J1/z - J0``).
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


def slashed_ring_image(re: Any, rin: Any, d: Any, d_perp: Any, fade: Any, xr: np.ndarray, yr: np.ndarray) -> np.ndarray:
    """Brightness (flux 1, per nrad^2) of :func:`slashed_ring` at the points ``xr, yr`` (nrad, its frame)."""
    h = (2.0 / np.pi) / ((re**2 - rin**2 * (1 + d / re)) * fade + (re**2 - rin**2 * (1 - d / re)))
    h0 = fade * h
    inside = (xr**2 + yr**2 <= re**2) & ((xr + d) ** 2 + (yr + d_perp) ** 2 > rin**2)
    return np.where(inside, (h + h0) / 2 + (h - h0) / (2 * re) * xr, 0.0)


def visibilities(params: Any, u: Any, v: Any) -> jnp.ndarray:
    """Complex visibilities (Jy) of the blurred slashed crescent at ``u, v`` (gigalambda, any shape).

    ``params = (flux [Jy], d_out [uas], rq, ecc, fade, w [uas], pa [rad])`` (:data:`PARAM_NAMES`).
    Pure ``jax.numpy``: jit, vmap and grad apply, at ``u = v = 0`` too.  ``V(0, 0) = flux``.
    """
    p = check_params(params, PARAM_NAMES, "crescent")
    u, v = jnp.asarray(u, p.dtype), jnp.asarray(v, p.dtype)
    flux, d_out, rq, ecc, fade, w, pa = (p[i] for i in range(7))
    re = 0.5 * d_out * UAS_TO_NRAD
    rin = rq * re
    U, V = along_pa(u, v, pa)
    ring = slashed_ring(re, rin, ecc * (re - rin), jnp.zeros_like(re), fade, U, V)
    blur = jnp.exp(-GAUSS_FT * (w * UAS_TO_NRAD) ** 2 * (u * u + v * v))
    return flux * blur * ring


def _blurred(values: np.ndarray, fwhm: float, step: float) -> np.ndarray:
    """``values`` (a square grid of spacing ``step``) convolved with a unit-sum Gaussian of FWHM ``fwhm``."""
    sigma = fwhm / (2 * np.sqrt(2 * np.log(2.0)))
    if sigma < 0.25 * step:  # narrower than a quarter sample: its samples are one point
        return values
    half = min(int(np.ceil(5 * sigma / step)), values.shape[0])
    t = np.arange(-half, half + 1) * step
    g = np.exp(-0.5 * (t / sigma) ** 2)
    kernel = np.outer(g, g) / np.sum(g) ** 2
    from scipy import signal  # here, not at import: scipy.signal takes ~0.4 s, and only images need it

    return signal.fftconvolve(values, kernel, mode="same")


def image(params: Any, npix: int = 128, fov: float = 160.0, oversample: int = 4) -> np.ndarray:
    """The crescent's image: ``(npix, npix)`` Jy per pixel, laid out as :func:`.base.pixel_grid` says.

    The unblurred crescent is sampled at ``oversample^2`` points per pixel, convolved with the
    blur's Gaussian sampled on the same points, and averaged per pixel.  Its sum is close to
    ``flux`` (up to the pixelisation of the edges and what the blur spreads beyond ``fov``).
    """
    check_image_args(npix, fov, oversample)
    p = np.asarray(params, dtype=np.float64)
    if p.shape != (7,):
        raise ValueError(f"crescent's image takes the 7 parameters {PARAM_NAMES}, got shape {p.shape}")
    flux, d_out, rq, ecc, fade, w, pa = p
    x, y, pix = pixel_grid(npix, fov, oversample)
    re = 0.5 * d_out * UAS_TO_NRAD
    rin = rq * re
    xr, yr = along_pa(x, y, pa)
    sharp = flux * slashed_ring_image(re, rin, ecc * (re - rin), 0.0, fade, xr, yr)
    return pixel_means(_blurred(sharp, w * UAS_TO_NRAD, pix / oversample), npix, oversample, pix)


def _blurred_top_hat_fwhm(thickness: np.ndarray, blur: np.ndarray) -> np.ndarray:
    """FWHM of a 1-D top hat of width ``thickness`` convolved with a Gaussian of FWHM ``blur`` (same units).

    The profile ``erf((s + t/2)/(sqrt2 sigma)) - erf((s - t/2)/(sqrt2 sigma))`` falls from its
    peak at ``s = 0``; its half-maximum point is found by bisection (60 halvings: exact in float64).
    """
    t, b = np.broadcast_arrays(np.asarray(thickness, np.float64), np.asarray(blur, np.float64))
    sigma = np.maximum(b, 1e-300) / (2 * np.sqrt(2 * np.log(2.0)))
    from scipy import special  # here, not at import (~0.1 s), as scipy.signal above

    def profile(s):
        k = 1 / (np.sqrt(2.0) * sigma)
        return special.erf((s + t / 2) * k) - special.erf((s - t / 2) * k)

    half = profile(np.zeros_like(t)) / 2
    lo, hi = np.zeros_like(t), t / 2 + 2 * b + 1e-300  # profile(hi) < half: 2 FWHM past the edge
    for _ in range(60):
        mid = (lo + hi) / 2
        above = profile(mid) > half
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    # a blur far wider than the ring (or no blur): the other one's FWHM (exact to 1e-8 relative)
    return np.where(t <= 1e-4 * b, b, np.where(b > 0, lo + hi, t))


def derived(params: Any) -> dict[str, np.ndarray]:
    """Diameter (uas), width (uas) and bright side's position angle (deg east of north, [0, 360)).

    ``params`` (..., 7); see the module docstring for the definitions.
    """
    p = np.asarray(params, np.float64)
    r_out = p[..., 1] / 2
    r_in = p[..., 2] * r_out
    return {
        "diameter": r_out + r_in,
        "width": _blurred_top_hat_fwhm(r_out - r_in, p[..., 5]),
        "pa_bright": np.mod(np.degrees(p[..., 6]), 360.0),
    }


#: The registry's entry (``multiwalk.models.MODELS["crescent"]``).
MODEL = Model("crescent", visibilities, image, PARAM_NAMES, LOWER, UPPER, PERIODIC, PARAM_UNITS, derived,
              RING_DERIVED_UNITS, RING_DERIVED_PERIODS)
