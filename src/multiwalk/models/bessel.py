"""Bessel functions J0, J1 and the smooth ratios J1(z)/z, J2(z)/z^2 in ``jax.numpy``.

JAX 0.10 offers only ``jax.scipy.special.bessel_jn`` (a 50-step recurrence per call, slow
inside an MCMC loop); ``j0``/``j1`` are not in every JAX we run on.  So they are computed here
from two Chebyshev expansions whose coefficients are fitted once per process to SciPy's
``scipy.special.jv``/``yv`` (double precision, absolute error below 2e-14 for every z >= 0):

* ``z <= 8``: ``J1(z)/z = 1/2 + z^2 g1(z^2)`` and ``J2(z)/z^2 = 1/8 + z^2 g2(z^2)``, with g1, g2
  Chebyshev series in ``z^2``.  Both ratios are even, entire functions, so no division by z
  happens there: their values at z = 0 are exactly 1/2 and 1/8 and their gradients are finite.
* ``z > 8``: Hankel's form ``J_n(z) = sqrt(2/(pi z)) (P_n cos(chi) - Q_n sin(chi))``,
  ``chi = z - n pi/2 - pi/4``, with P_n and ``z Q_n`` Chebyshev series in ``(8/z)^2``.

Branches are joined with ``jnp.where`` on clamped arguments, so neither branch ever sees a
value outside its range (finite values and finite gradients everywhere).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

__all__ = ["j0", "j1", "jinc1", "jinc2", "SPLIT"]

SPLIT = 8.0  # z where the power-series fit hands over to Hankel's asymptotic form
_SMALL_DEGREE = 14  # Chebyshev degree of g1, g2 on [0, SPLIT]: 1.4e-15 absolute error
_LARGE_DEGREE = 8  # degree of P_n, z Q_n in (SPLIT/z)^2: 1.7e-14 absolute error in J_n
_NODES = 400


def _nodes(n: int) -> np.ndarray:
    """Chebyshev points of the first kind on [-1, 1]."""
    return np.cos(np.pi * (np.arange(n) + 0.5) / n)


@functools.cache
def _coefficients() -> dict[str, np.ndarray]:
    """Fit the four Chebyshev series (float64) to SciPy's Bessel functions."""
    from numpy.polynomial import chebyshev
    from scipy import special

    s = _nodes(_NODES)
    out: dict[str, np.ndarray] = {}
    # Small z: (J_n(z)/z^n - c0) / z^2 in t = z^2 / SPLIT^2 mapped to s = 2t - 1.  Near z = 0
    # the difference cancels, so there the power series sum_k>=1 (-z^2/4)^k / (k! (k+n)!) / 2^n is used.
    z = SPLIT * np.sqrt((s + 1) / 2)
    for n, c0 in ((1, 0.5), (2, 0.125)):
        q = z**2 / 4
        series = np.zeros_like(z)
        term = np.full_like(z, 1.0 / special.factorial(n))
        for k in range(1, 40):
            term = term * (-q) / (k * (k + n))
            series = series + term
        series = series / 2**n / np.where(z > 0, z, 1.0) ** 2
        series = np.where(z > 0, series, -1.0 / (4 * (n + 1)) / 2**n / special.factorial(n))
        with np.errstate(divide="ignore", invalid="ignore"):
            direct = (special.jv(n, z) / z**n - c0) / z**2
        g = np.where(z > 0.5, direct, series)
        out[f"small{n}"] = chebyshev.chebfit(s, g, _SMALL_DEGREE)
    # Large z: P_n and z Q_n / SPLIT in w = (SPLIT / z)^2 mapped to s = 2w - 1; beyond z = 2000
    # the first terms of Hankel's expansion are exact to double precision.
    w = (s + 1) / 2
    z = SPLIT / np.sqrt(w)
    for n in (0, 1):
        mu = 4.0 * n * n
        zc = np.minimum(z, 2000.0)
        chic = zc - n * np.pi / 2 - np.pi / 4
        amp = np.sqrt(np.pi * zc / 2)
        jn, yn = special.jv(n, zc), special.yv(n, zc)
        p = amp * (jn * np.cos(chic) + yn * np.sin(chic))
        q = amp * (-jn * np.sin(chic) + yn * np.cos(chic))
        p_asym = 1 - (mu - 1) * (mu - 9) / (2 * (8 * z) ** 2) + (mu - 1) * (mu - 9) * (mu - 25) * (mu - 49) / (24 * (8 * z) ** 4)
        q_asym = (mu - 1) / (8 * z) - (mu - 1) * (mu - 9) * (mu - 25) / (6 * (8 * z) ** 3)
        far = z > 2000.0
        p = np.where(far, p_asym, p)
        q = np.where(far, q_asym, q)
        out[f"p{n}"] = chebyshev.chebfit(s, p, _LARGE_DEGREE)
        out[f"q{n}"] = chebyshev.chebfit(s, q * z / SPLIT, _LARGE_DEGREE)
    return out


def _clenshaw(coef: np.ndarray, s: jnp.ndarray) -> jnp.ndarray:
    """sum_k coef[k] T_k(s) by Clenshaw's recurrence (stable in float32 too)."""
    c = [jnp.asarray(v, s.dtype) for v in coef]
    b1 = jnp.zeros_like(s)
    b2 = jnp.zeros_like(s)
    two_s = 2 * s
    for ck in c[:0:-1]:
        b1, b2 = two_s * b1 - b2 + ck, b1
    return s * b1 - b2 + c[0]


def _small(z2: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """J1(z)/z and J2(z)/z^2 for z^2 in [0, SPLIT^2] (clamped)."""
    co = _coefficients()
    t = jnp.minimum(z2, SPLIT**2)
    s = 2 * t / SPLIT**2 - 1
    return 0.5 + t * _clenshaw(co["small1"], s), 0.125 + t * _clenshaw(co["small2"], s)


def _large(z2: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """(J0(z), J1(z), z) for z^2 >= SPLIT^2 (clamped)."""
    co = _coefficients()
    z2c = jnp.maximum(z2, SPLIT**2)
    z = jnp.sqrt(z2c)
    s = 2 * SPLIT**2 / z2c - 1
    amp = jnp.sqrt(2 / (jnp.pi * z))
    c, sn = jnp.cos(z - jnp.pi / 4), jnp.sin(z - jnp.pi / 4)
    # chi_1 = chi_0 - pi/2: cos(chi_1) = sin(chi_0), sin(chi_1) = -cos(chi_0) (one sincos for both)
    p0, q0 = _clenshaw(co["p0"], s), _clenshaw(co["q0"], s) * SPLIT / z
    p1, q1 = _clenshaw(co["p1"], s), _clenshaw(co["q1"], s) * SPLIT / z
    return amp * (p0 * c - q0 * sn), amp * (p1 * sn + q1 * c), z


def jinc12_sq(z2: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """``(J1(z)/z, J2(z)/z^2)`` from ``z^2`` (no square root at small z; exact 1/2, 1/8 at 0)."""
    z2 = jnp.asarray(z2)
    a_small, b_small = _small(z2)
    j0_l, j1_l, z = _large(z2)
    a_large = j1_l / z
    b_large = (2 * a_large - j0_l) / (z * z)  # J2 = 2 J1 / z - J0: no cancellation for z > 8
    small = z2 <= SPLIT**2
    return jnp.where(small, a_small, a_large), jnp.where(small, b_small, b_large)


def jinc1(z: jnp.ndarray) -> jnp.ndarray:
    """J1(z)/z (even in z; 1/2 at z = 0)."""
    z = jnp.asarray(z)
    return jinc12_sq(z * z)[0]


def jinc2(z: jnp.ndarray) -> jnp.ndarray:
    """J2(z)/z^2 (even in z; 1/8 at z = 0)."""
    z = jnp.asarray(z)
    return jinc12_sq(z * z)[1]


def j1(z: jnp.ndarray) -> jnp.ndarray:
    """Bessel function of the first kind of order 1 (odd in z)."""
    z = jnp.asarray(z)
    return z * jinc1(z)


def j0(z: jnp.ndarray) -> jnp.ndarray:
    """Bessel function of the first kind of order 0 (even in z): J0 = 2 J1/z - J2 for z <= 8."""
    z = jnp.asarray(z)
    z2 = z * z
    a, b = _small(z2)
    j0_l, _, _ = _large(z2)
    return jnp.where(z2 <= SPLIT**2, 2 * a - z2 * b, j0_l)
