"""The five "CUTE" test functions of the L-BFGS GPU-CUDA seed (D'Amore et al., CMCC Research Papers
2013, section "Other testing functions", equations (3)-(7)) — Extended Rosenbrock, Extended Beale,
Extended Powell, Extended Wood and Extended Trigonometric — in jax.numpy, each ``f(x) -> scalar``
for ONE point ``x`` of any valid dimension ``n``.

Written from the standard definitions of Moré, Garbow & Hillstrom (1981), "Testing unconstrained
optimization software", ACM TOMS 7(1), 17-41 (MGH): problems (21) Extended Rosenbrock, (5) Beale,
(22) Extended Powell singular, (14) Wood and (26) Trigonometric.  Beale and Wood are fixed-size in
MGH (n = 2 and n = 4); their extended forms repeat the block over ``n / 2`` or ``n / 4``
independent blocks, exactly like Extended Rosenbrock and Extended Powell.

Every function is vectorised: ``x`` is reshaped into its blocks (``(n/2, 2)`` or ``(n/4, 4)``) and
summed, with no Python loop over ``n``, so ``n = 10**7`` costs one pass over memory.  The dimension
is a static shape, so a bad ``n`` raises ``ValueError`` at call (or trace) time, before any
compilation finishes.

Where the seed differs from MGH (all differences are listed in ``TABLE[name].note``):

* Extended Beale: the seed starts from ``(1, 0.8, 1, 0.8, ...)``; MGH's Beale starts from
  ``(1, 1)``.  ``start`` follows the seed; ``start(name, n, source="mgh")`` gives MGH's.
* Extended Trigonometric: the seed starts from ``(0.2, ..., 0.2)``; MGH from ``(1/n, ..., 1/n)``.
  ``start`` follows the seed as above.
* Extended Wood: the formula printed in the seed (eq. 6) omits MGH's ``(1 - x_{4i-1})^2`` term and
  has ``(x_{4i} + 1)^2`` where MGH has ``(x_{4i} - 1)^2``.  That printed form is not the Wood
  function: its value at the seed's own known solution ``x = 1`` is 40.4, not 0, and its minimum
  is negative (about -3.71 per block, near ``(1.475, 2.177, 0, -0.217)``), not the 0 the seed says
  is known.  We read it as a transcription slip and implement MGH's Wood (minimum 0 at 1); the
  seed's starting point ``(-3, -1, -3, -1, ...)`` is MGH's.

Extended Rosenbrock and Extended Powell agree with MGH term for term (the seed writes
``(1 - x)^2`` where MGH writes ``(x - 1)^2``, the same thing), as do their starting points.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "extended_rosenbrock",
    "extended_beale",
    "extended_powell",
    "extended_wood",
    "extended_trigonometric",
    "start",
    "check_n",
    "CuteFunction",
    "TABLE",
]


def _blocks(x: jax.Array, name: str, size: int) -> jax.Array:
    """``x`` (shape ``(n,)``) as ``(n // size, size)``, after checking ``n``."""
    check_n(name, _dimension(x, name))
    return x.reshape(-1, size)


def _dimension(x: jax.Array, name: str) -> int:
    if jnp.ndim(x) != 1:
        raise ValueError(
            f"{name}: x must be ONE point, a 1-D array of shape (n,); got shape {jnp.shape(x)}. "
            "Use jax.vmap to evaluate a batch of points."
        )
    return int(jnp.shape(x)[0])


def extended_rosenbrock(x: jax.Array) -> jax.Array:
    """Extended Rosenbrock, MGH (21), seed eq. (2)/(3).  ``n`` even, ``n >= 2``.

    f(x) = sum_{i=1}^{n/2} 100 (x_{2i} - x_{2i-1}^2)^2 + (1 - x_{2i-1})^2.

    Start ``(-1.2, 1, -1.2, 1, ...)`` (seed = MGH); minimum 0 at ``x = 1``.
    """
    b = _blocks(x, "extended_rosenbrock", 2)
    x1, x2 = b[:, 0], b[:, 1]
    return jnp.sum(100.0 * (x2 - x1**2) ** 2 + (1.0 - x1) ** 2)


def extended_beale(x: jax.Array) -> jax.Array:
    """Extended Beale: MGH (5) repeated over ``n/2`` blocks, seed eq. (4).  ``n`` even, ``n >= 2``.

    f(x) = sum_{i=1}^{n/2} (1.5 - x_{2i-1}(1 - x_{2i}))^2 + (2.25 - x_{2i-1}(1 - x_{2i}^2))^2
                         + (2.625 - x_{2i-1}(1 - x_{2i}^3))^2.

    Start ``(1, 0.8, 1, 0.8, ...)`` as in the seed (MGH's Beale starts from ``(1, 1)``); minimum 0
    at ``(3, 0.5, 3, 0.5, ...)``.
    """
    b = _blocks(x, "extended_beale", 2)
    x1, x2 = b[:, 0], b[:, 1]
    return jnp.sum((1.5 - x1 * (1.0 - x2)) ** 2 + (2.25 - x1 * (1.0 - x2**2)) ** 2 + (2.625 - x1 * (1.0 - x2**3)) ** 2)


def extended_powell(x: jax.Array) -> jax.Array:
    """Extended Powell singular, MGH (22), seed eq. (5).  ``n`` a multiple of 4, ``n >= 4``.

    f(x) = sum_{i=1}^{n/4} (x_{4i-3} + 10 x_{4i-2})^2 + 5 (x_{4i-1} - x_{4i})^2
                         + (x_{4i-2} - 2 x_{4i-1})^4 + 10 (x_{4i-3} - x_{4i})^4.

    Start ``(3, -1, 0, 1, ...)`` (seed = MGH); minimum 0 at ``x = 0``, where the Hessian is singular
    (so convergence there is only linear for Newton-like methods).
    """
    b = _blocks(x, "extended_powell", 4)
    x1, x2, x3, x4 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    return jnp.sum((x1 + 10.0 * x2) ** 2 + 5.0 * (x3 - x4) ** 2 + (x2 - 2.0 * x3) ** 4 + 10.0 * (x1 - x4) ** 4)


def extended_wood(x: jax.Array) -> jax.Array:
    """Extended Wood: MGH (14) repeated over ``n/4`` blocks.  ``n`` a multiple of 4, ``n >= 4``.

    f(x) = sum_{i=1}^{n/4} 100 (x_{4i-3}^2 - x_{4i-2})^2 + (x_{4i-3} - 1)^2 + 90 (x_{4i-1}^2 - x_{4i})^2
                         + (1 - x_{4i-1})^2 + 10.1 [(x_{4i-2} - 1)^2 + (x_{4i} - 1)^2]
                         + 19.8 (x_{4i-2} - 1)(x_{4i} - 1).

    Start ``(-3, -1, -3, -1, ...)`` (seed = MGH); minimum 0 at ``x = 1``.  The seed's eq. (6) prints
    this without the ``(1 - x_{4i-1})^2`` term and with ``(x_{4i} + 1)^2``; see the module docstring
    for why that is taken to be a misprint and MGH's form is used.
    """
    b = _blocks(x, "extended_wood", 4)
    x1, x2, x3, x4 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    return jnp.sum(
        100.0 * (x1**2 - x2) ** 2
        + (x1 - 1.0) ** 2
        + 90.0 * (x3**2 - x4) ** 2
        + (1.0 - x3) ** 2
        + 10.1 * ((x2 - 1.0) ** 2 + (x4 - 1.0) ** 2)
        + 19.8 * (x2 - 1.0) * (x4 - 1.0)
    )


def extended_trigonometric(x: jax.Array) -> jax.Array:
    """Trigonometric, MGH (26), seed eq. (7).  Any ``n >= 1``.

    f(x) = sum_{i=1}^{n} [ (n - sum_{j=1}^{n} cos x_j) + i (1 - cos x_i) - sin x_i ]^2.

    Computed with ``1 - cos t = 2 sin^2(t/2)``, i.e. ``n - sum_j cos x_j = sum_j 2 sin^2(x_j/2)``: the
    same function without the cancellation of ``n - sum cos`` (in float32 at ``n = 10**6`` the
    textbook form loses every digit of that term near the minimum).

    Start ``(0.2, ..., 0.2)`` as in the seed (MGH starts from ``(1/n, ..., 1/n)``).  The global
    minimum is 0, at ``x = 0`` (every residual vanishes there; also at any ``x`` in ``2 pi Z^n``).
    MGH list only "f = 0"; the function also has local minima with ``f > 0``, and a local method
    from either standard start may stop in one (e.g. for n = 4, BFGS from both 0.2 and 1/n ends at
    f = 3.03e-4; for n = 10 at 4.2e-5 from 0.2 and 2.8e-5 from 1/n).
    """
    n = _dimension(x, "extended_trigonometric")
    check_n("extended_trigonometric", n)
    one_minus_cos = 2.0 * jnp.sin(0.5 * x) ** 2
    i = jnp.arange(1, n + 1, dtype=x.dtype)
    residual = jnp.sum(one_minus_cos) + i * one_minus_cos - jnp.sin(x)
    return jnp.sum(residual**2)


def _tiled(block: tuple[float, ...]) -> Callable[[int], np.ndarray]:
    def make(n: int) -> np.ndarray:
        return np.tile(np.asarray(block, dtype=np.float64), n // len(block))

    return make


def _one_over_n(n: int) -> np.ndarray:
    return np.full(n, 1.0 / n)


@dataclass(frozen=True)
class CuteFunction:
    """One of the seed's five test functions: definition, valid ``n``, starting points, minimum."""

    name: str
    fn: Callable[[jax.Array], jax.Array]
    block: int  # n must be a positive multiple of this
    rule: str  # the valid-n rule in words
    seed_start: str  # the seed's starting point, as printed
    mgh_start: str  # MGH's starting point
    f_min: float  # known global minimum value (for every valid n)
    x_min: str  # where it is attained
    note: str  # differences between the seed and MGH, if any
    _seed_start: Callable[[int], np.ndarray]
    _mgh_start: Callable[[int], np.ndarray]
    _x_min: Callable[[int], np.ndarray]

    def valid(self, n: int) -> bool:
        return isinstance(n, int | np.integer) and not isinstance(n, bool) and n >= self.block and n % self.block == 0

    def start(self, n: int, source: str = "seed") -> np.ndarray:
        """Starting point in dimension ``n`` (float64): the seed's (default) or MGH's (``source="mgh"``)."""
        check_n(self.name, n)
        if source == "seed":
            return self._seed_start(int(n))
        if source == "mgh":
            return self._mgh_start(int(n))
        raise ValueError(f"start: source={source!r} is not known; use 'seed' (the default) or 'mgh'")

    def optimum(self, n: int) -> tuple[np.ndarray, float]:
        """(a global minimiser, the minimum value) in dimension ``n``."""
        check_n(self.name, n)
        return self._x_min(int(n)), self.f_min


TABLE: dict[str, CuteFunction] = {
    f.name: f
    for f in (
        CuteFunction(
            "extended_rosenbrock", extended_rosenbrock, 2, "n even, n >= 2",
            "(-1.2, 1, -1.2, 1, ...)", "(-1.2, 1, -1.2, 1, ...)", 0.0, "x = (1, ..., 1)",
            "seed = MGH (21)",
            _tiled((-1.2, 1.0)), _tiled((-1.2, 1.0)), _tiled((1.0,)),
        ),
        CuteFunction(
            "extended_beale", extended_beale, 2, "n even, n >= 2",
            "(1, 0.8, 1, 0.8, ...)", "(1, 1, ..., 1)", 0.0, "x = (3, 0.5, 3, 0.5, ...)",
            "formula = MGH (5) per block; the seed starts at (1, 0.8) per block, MGH at (1, 1)",
            _tiled((1.0, 0.8)), _tiled((1.0, 1.0)), _tiled((3.0, 0.5)),
        ),
        CuteFunction(
            "extended_powell", extended_powell, 4, "n a multiple of 4, n >= 4",
            "(3, -1, 0, 1, ...)", "(3, -1, 0, 1, ...)", 0.0, "x = (0, ..., 0) (singular Hessian)",
            "seed = MGH (22)",
            _tiled((3.0, -1.0, 0.0, 1.0)), _tiled((3.0, -1.0, 0.0, 1.0)), _tiled((0.0,)),
        ),
        CuteFunction(
            "extended_wood", extended_wood, 4, "n a multiple of 4, n >= 4",
            "(-3, -1, -3, -1, ...)", "(-3, -1, -3, -1, ...)", 0.0, "x = (1, ..., 1)",
            "formula = MGH (14) per block; the seed's printed eq. (6) drops (1 - x_{4i-1})^2 and has "
            "(x_{4i} + 1)^2 for (x_{4i} - 1)^2 (a misprint: it is 40.4 at x = 1); MGH's form is used",
            _tiled((-3.0, -1.0)), _tiled((-3.0, -1.0)), _tiled((1.0,)),
        ),
        CuteFunction(
            "extended_trigonometric", extended_trigonometric, 1, "any n >= 1",
            "(0.2, ..., 0.2)", "(1/n, ..., 1/n)", 0.0,
            "x = (0, ..., 0) (and 2 pi Z^n); local minima with f > 0 also exist",
            "formula = MGH (26); the seed starts at 0.2, MGH at 1/n",
            _tiled((0.2,)), _one_over_n, _tiled((0.0,)),
        ),
    )
}  # fmt: skip


def check_n(name: str, n: int) -> None:
    """Raise ``ValueError`` naming the function and its rule if ``n`` is not a valid dimension."""
    if name not in TABLE:
        raise ValueError(f"unknown CUTE function {name!r}; known: {', '.join(TABLE)}")
    entry = TABLE[name]
    if not entry.valid(n):
        raise ValueError(
            f"{name}: n = {n!r} is not a valid dimension; {name} needs {entry.rule} "
            f"(it sums over blocks of {entry.block} coordinates)."
        )


def start(name: str, n: int, source: str = "seed") -> np.ndarray:
    """The standard starting point of ``name`` in dimension ``n``, a float64 NumPy array.

    ``source="seed"`` (default) gives the seed's point, ``"mgh"`` Moré-Garbow-Hillstrom's; they
    differ only for Extended Beale ((1, 0.8) vs (1, 1) per block) and Trigonometric (0.2 vs 1/n).
    """
    check_n(name, n)
    return TABLE[name].start(n, source)
