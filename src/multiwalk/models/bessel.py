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

The series are fitted in the Chebyshev basis (well conditioned) and evaluated as ordinary
polynomials in the same variable by Horner's rule.  Their monomial coefficients are as small as
the Chebyshev ones (the sum of their magnitudes is at most 1.002), so Horner's rule is as accurate
as Clenshaw's recurrence here; in float32 the series are cut where their dropped terms fall below
float32's precision (:func:`_coefficients`).  The largest absolute error of J1(z)/z for z in
[0, 200]: float64 1.6e-15 (Clenshaw's 1.2e-15); float32 1.7e-7 (Clenshaw's, all terms, 1.5e-7).
The reason is the compiler: each Horner step's value has one use, where a Clenshaw step's has
two, and XLA's GPU fusion pass took ~0.5 s to fuse one evaluation's six interleaved recurrences;
the xringaus fit's first call on an H100 went from 5.8-6.1 s to 4.4-4.8 s with both changes.
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
def _coefficients(dtype: np.dtype) -> dict[str, tuple[float, ...]]:
    """The six series for arithmetic in ``dtype``: each Chebyshev fit cut to the lowest degree whose
    dropped terms sum, times the largest factor the result scales them by (``t <= SPLIT^2`` for the
    small-z series, 1 for the large-z ones), to at most an eighth of ``dtype``'s epsilon (float64 keeps
    every nonzero term; float32 degrees 9 and 8 of 14 and 13, and 3 of 8), then written as monomial
    coefficients in ``s`` (lowest power first) for Horner's rule.  The bound holds for the two ratios;
    ``j0 = 2 J1/z - J2`` multiplies J2(z)/z^2's error by z^2, so float32's ``j0`` and ``j1`` are
    off by up to 1.3e-6 and 1e-6 at z = 8 (4e-7 and 1e-7 with every term; over [0, 8] their largest
    errors, 2.3e-6 and 1.4e-6, did not change)."""
    from numpy.polynomial import chebyshev

    budget = float(jnp.finfo(dtype).eps) / 8  # jnp's finfo: bfloat16 too
    out = {}
    for name, coef in _chebyshev_fits().items():
        scale = SPLIT**2 if name.startswith("small") else 1.0
        tails = np.cumsum(np.abs(coef)[::-1])[::-1] * scale  # tails[k]: the sum of |coef[k:]|, scaled
        degree = next((k - 1 for k in range(1, len(coef)) if tails[k] <= budget), len(coef) - 1)
        out[name] = tuple(float(v) for v in chebyshev.cheb2poly(coef[: degree + 1]))
    return out


@functools.cache
def _chebyshev_fits() -> dict[str, np.ndarray]:
    """The six Chebyshev series fitted (float64) to SciPy's Bessel functions."""
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


def _horner(coef: tuple[float, ...], s: jnp.ndarray) -> jnp.ndarray:
    """sum_k coef[k] s^k by Horner's rule (lowest power first)."""
    c = [jnp.asarray(v, s.dtype) for v in coef]
    total = jnp.full_like(s, c[-1])
    for ck in c[-2::-1]:
        total = total * s + ck
    return total


def _small(z2: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """J1(z)/z and J2(z)/z^2 for z^2 in [0, SPLIT^2] (clamped)."""
    # a select, not jnp.minimum: at z^2 = SPLIT^2 (this branch's) minimum's gradient would be halved
    t = jnp.where(z2 <= SPLIT**2, z2, SPLIT**2)
    co = _coefficients(np.dtype(t.dtype))
    s = 2 * t / SPLIT**2 - 1
    return 0.5 + t * _horner(co["small1"], s), 0.125 + t * _horner(co["small2"], s)


def _large(z2: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """(J0(z), J1(z), z) for z^2 >= SPLIT^2 (clamped)."""
    z2c = jnp.maximum(z2, SPLIT**2)
    co = _coefficients(np.dtype(z2c.dtype))
    z = jnp.sqrt(z2c)
    s = 2 * SPLIT**2 / z2c - 1
    amp = jnp.sqrt(2 / (jnp.pi * z))
    c, sn = jnp.cos(z - jnp.pi / 4), jnp.sin(z - jnp.pi / 4)
    # chi_1 = chi_0 - pi/2: cos(chi_1) = sin(chi_0), sin(chi_1) = -cos(chi_0) (one sincos for both)
    p0, q0 = _horner(co["p0"], s), _horner(co["q0"], s) * SPLIT / z
    p1, q1 = _horner(co["p1"], s), _horner(co["q1"], s) * SPLIT / z
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
