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

Each function also has an analytic ``*_value_and_grad(x) -> (f, g)`` (``TABLE[name].value_and_grad``),
the seed's fused ``eval_fg``: ``Problem(value_and_grad=...)`` takes it instead of ``jax.grad``
(``multiwalk lbfgs`` does, unless ``--gradient autodiff``).  f and g come from one expression
over ``x`` (Rosenbrock: on ``(n,)`` with each coordinate's pair partner read by a shift of one;
the others: over the blocks, the gradient's columns stacked back into coordinate order), so XLA
can fuse them; same values as ``jax.value_and_grad`` up to rounding (tests/test_cute_fused.py).
:func:`extended_rosenbrock_value_and_grad` also carries ``.along``
(:func:`rosenbrock_along`): L-BFGS's line search evaluates f, g
and ``g'd`` at ``x + stp d`` through it, on GPUs in one Pallas kernel (faster than XLA's
form, which takes several kernels; docs/benchmarks.md), elsewhere by XLA.

Extended Rosenbrock and Extended Powell agree with MGH term for term (the seed writes
``(1 - x)^2`` where MGH writes ``(x - 1)^2``, the same thing), as do their starting points.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from . import cute_kernel

__all__ = [
    "extended_rosenbrock",
    "extended_beale",
    "extended_powell",
    "extended_wood",
    "extended_trigonometric",
    "extended_rosenbrock_value_and_grad",
    "extended_beale_value_and_grad",
    "extended_powell_value_and_grad",
    "extended_wood_value_and_grad",
    "extended_trigonometric_value_and_grad",
    "rosenbrock_along",
    "rosenbrock_along_into",
    "extended_rosenbrock_xla",
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


# --------------------------------------------------------------------------------------------------
# analytic value and gradient (the seed's eval_fg): one pass over x, one interleaved write of g
# --------------------------------------------------------------------------------------------------


def _interleave(*columns: jax.Array) -> jax.Array:
    """Per-block gradient columns (each ``(n / size,)``) back into coordinate order, ``(n,)``."""
    return jnp.stack(columns, axis=1).reshape(-1)


def extended_rosenbrock_value_and_grad(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(f, grad f)`` of :func:`extended_rosenbrock`, analytic: with ``t = x_{2i} - x_{2i-1}^2``,
    ``df/dx_{2i-1} = -400 x_{2i-1} t - 2 (1 - x_{2i-1})`` and ``df/dx_{2i} = 200 t``.

    Computed on ``(n,)`` throughout: each coordinate reads its pair partner as ``x`` shifted by one
    (no ``(n/2, 2)`` view, no interleaving; on ``x`` split over devices one value crosses each
    boundary), and f's terms sit on the odd-numbered coordinates: XLA runs this evaluation (with the
    line search's ``x + stp d`` and ``g'd``) faster than the block form or ``jax.value_and_grad``
    (docs/benchmarks.md); its ``.along`` (:func:`rosenbrock_along`) does that in one Pallas kernel on
    GPUs, faster still, and :class:`multiwalk.LBFGS` uses it there.
    """
    n = _dimension(x, "extended_rosenbrock")
    check_n("extended_rosenbrock", n)
    first = jax.lax.iota(jnp.int32, n) % 2 == 0  # x_{2i-1} in 1-based numbering
    # The shifts as one lax.pad each (negative padding drops an end, zero fills the other, an entry
    # never used): on x split along n over devices XLA's partitioner sends one value to the
    # neighbour (collective-permute). concatenate([x[1:], x[-1:]]) made it all-gather x twice per
    # evaluation (n values to every device; issue 8, split L-BFGS 2.3x slower).
    zero = jnp.zeros((), x.dtype)
    after = jax.lax.pad(x, zero, [(-1, 1, 0)])  # x[k + 1] (the last entry, 0, is never used)
    before = jax.lax.pad(x, zero, [(1, -1, 0)])  # x[k - 1] (the first entry, 0, is never used)
    x1 = jnp.where(first, x, before)
    x2 = jnp.where(first, after, x)
    t = x2 - x1 * x1
    u = 1.0 - x1
    g = jnp.where(first, -400.0 * x1 * t - 2.0 * u, 200.0 * t)
    return jnp.sum(jnp.where(first, 100.0 * t * t + u * u, 0.0)), g


def extended_beale_value_and_grad(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(f, grad f)`` of :func:`extended_beale`, analytic (residuals ``r_k = y_k - x1 (1 - x2^k)``)."""
    b = _blocks(x, "extended_beale", 2)
    x1, x2 = b[:, 0], b[:, 1]
    c1, c2, c3 = 1.0 - x2, 1.0 - x2 * x2, 1.0 - x2 * x2 * x2
    r1, r2, r3 = 1.5 - x1 * c1, 2.25 - x1 * c2, 2.625 - x1 * c3
    f = jnp.sum(r1 * r1 + r2 * r2 + r3 * r3)
    g1 = -2.0 * (r1 * c1 + r2 * c2 + r3 * c3)
    g2 = 2.0 * x1 * (r1 + 2.0 * x2 * r2 + 3.0 * x2 * x2 * r3)
    return f, _interleave(g1, g2)


def extended_powell_value_and_grad(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(f, grad f)`` of :func:`extended_powell`, analytic."""
    b = _blocks(x, "extended_powell", 4)
    x1, x2, x3, x4 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    a, c, e, q = x1 + 10.0 * x2, x3 - x4, x2 - 2.0 * x3, x1 - x4
    e3, q3 = e * e * e, q * q * q
    f = jnp.sum(a * a + 5.0 * c * c + e3 * e + 10.0 * q3 * q)
    return f, _interleave(2.0 * a + 40.0 * q3, 20.0 * a + 4.0 * e3, 10.0 * c - 8.0 * e3, -10.0 * c - 40.0 * q3)


def extended_wood_value_and_grad(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(f, grad f)`` of :func:`extended_wood` (MGH's Wood per block), analytic."""
    b = _blocks(x, "extended_wood", 4)
    x1, x2, x3, x4 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    p, q = x1 * x1 - x2, x3 * x3 - x4
    v2, v4 = x2 - 1.0, x4 - 1.0
    f = jnp.sum(
        100.0 * p * p + (x1 - 1.0) ** 2 + 90.0 * q * q + (1.0 - x3) ** 2 + 10.1 * (v2 * v2 + v4 * v4) + 19.8 * v2 * v4
    )
    g1 = 400.0 * x1 * p + 2.0 * (x1 - 1.0)
    g2 = -200.0 * p + 20.2 * v2 + 19.8 * v4
    g3 = 360.0 * x3 * q - 2.0 * (1.0 - x3)
    g4 = -180.0 * q + 20.2 * v4 + 19.8 * v2
    return f, _interleave(g1, g2, g3, g4)


def extended_trigonometric_value_and_grad(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(f, grad f)`` of :func:`extended_trigonometric`, analytic.  With ``r_i`` the residuals and
    ``R = sum_i r_i``: ``df/dx_k = 2 sin x_k R + 2 r_k (k sin x_k - cos x_k)`` (two reductions)."""
    n = _dimension(x, "extended_trigonometric")
    check_n("extended_trigonometric", n)
    one_minus_cos = 2.0 * jnp.sin(0.5 * x) ** 2
    sin = jnp.sin(x)
    i = jnp.arange(1, n + 1, dtype=x.dtype)
    residual = jnp.sum(one_minus_cos) + i * one_minus_cos - sin
    g = 2.0 * sin * jnp.sum(residual) + 2.0 * residual * (i * sin - jnp.cos(x))
    return jnp.sum(residual**2), g


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
    value_and_grad: Callable[[jax.Array], tuple[jax.Array, jax.Array]]  # analytic (f, g), the seed's eval_fg
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
            extended_rosenbrock_value_and_grad,
            _tiled((-1.2, 1.0)), _tiled((-1.2, 1.0)), _tiled((1.0,)),
        ),
        CuteFunction(
            "extended_beale", extended_beale, 2, "n even, n >= 2",
            "(1, 0.8, 1, 0.8, ...)", "(1, 1, ..., 1)", 0.0, "x = (3, 0.5, 3, 0.5, ...)",
            "formula = MGH (5) per block; the seed starts at (1, 0.8) per block, MGH at (1, 1)",
            extended_beale_value_and_grad,
            _tiled((1.0, 0.8)), _tiled((1.0, 1.0)), _tiled((3.0, 0.5)),
        ),
        CuteFunction(
            "extended_powell", extended_powell, 4, "n a multiple of 4, n >= 4",
            "(3, -1, 0, 1, ...)", "(3, -1, 0, 1, ...)", 0.0, "x = (0, ..., 0) (singular Hessian)",
            "seed = MGH (22)",
            extended_powell_value_and_grad,
            _tiled((3.0, -1.0, 0.0, 1.0)), _tiled((3.0, -1.0, 0.0, 1.0)), _tiled((0.0,)),
        ),
        CuteFunction(
            "extended_wood", extended_wood, 4, "n a multiple of 4, n >= 4",
            "(-3, -1, -3, -1, ...)", "(-3, -1, -3, -1, ...)", 0.0, "x = (1, ..., 1)",
            "formula = MGH (14) per block; the seed's printed eq. (6) drops (1 - x_{4i-1})^2 and has "
            "(x_{4i} + 1)^2 for (x_{4i} - 1)^2 (a misprint: it is 40.4 at x = 1); MGH's form is used",
            extended_wood_value_and_grad,
            _tiled((-3.0, -1.0)), _tiled((-3.0, -1.0)), _tiled((1.0,)),
        ),
        CuteFunction(
            "extended_trigonometric", extended_trigonometric, 1, "any n >= 1",
            "(0.2, ..., 0.2)", "(1/n, ..., 1/n)", 0.0,
            "x = (0, ..., 0) (and 2 pi Z^n); local minima with f > 0 also exist",
            "formula = MGH (26); the seed starts at 0.2, MGH at 1/n",
            extended_trigonometric_value_and_grad,
            _tiled((0.2,)), _one_over_n, _tiled((0.0,)),
        ),
    )
}  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Extended Rosenbrock along a line: the fused kernel on GPUs (cute_kernel), this module's form elsewhere
# --------------------------------------------------------------------------------------------------


def rosenbrock_along(x: jax.Array, d: jax.Array, stp: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(f, g, g'd)`` of Extended Rosenbrock at ``x + stp d``, ``x, d`` of shape (n,): the fused
    kernel (:func:`~multiwalk.functions.cute_kernel.rosenbrock_along_kernel`) where
    :func:`~multiwalk.functions.cute_kernel.along_plan` says so (GPUs), else
    :func:`extended_rosenbrock_value_and_grad` (the same values up to rounding)."""
    if cute_kernel.along_plan(x.shape[0], x.dtype).use_pallas:
        return cute_kernel.rosenbrock_along_kernel(x, d, stp)
    f, g = extended_rosenbrock_value_and_grad(x + stp * d)
    return f, g, g @ d


def rosenbrock_along_into(
    x: jax.Array, d: jax.Array, stp: jax.Array, out: jax.Array, row: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """:func:`rosenbrock_along` with g written into row ``row`` of ``out`` (R, n) in place:
    ``(f, out, g'd)``.  LBFGS keeps its gradients in two rows (the iterate's and the trial's) and
    evaluates into the trial's row, so no pass copies g into the loop's buffer (n values per
    iteration).  Off GPUs XLA updates the row in place (a dynamic-update-slice)."""
    if cute_kernel.along_plan(x.shape[0], x.dtype).use_pallas:
        return cute_kernel.rosenbrock_along_kernel(x, d, stp, out=out, row=row)
    f, g = extended_rosenbrock_value_and_grad(x + stp * d)
    return f, jax.lax.dynamic_update_index_in_dim(out, g, row, 0), g @ d


rosenbrock_along.plan = cute_kernel.along_plan  # type: ignore[attr-defined]  # LBFGS reports its reason
rosenbrock_along.into = rosenbrock_along_into  # type: ignore[attr-defined]  # g into a row of LBFGS's buffer


def extended_rosenbrock_xla(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """:func:`extended_rosenbrock_value_and_grad` without ``.along``: LBFGS's line search then
    evaluates ``x + stp d``, f and g, and ``g'd`` by XLA everywhere (the form before the kernel)."""
    return extended_rosenbrock_value_and_grad(x)


# L-BFGS's line search evaluates along x + stp d through this (a Pallas kernel on GPUs, XLA elsewhere) ...
extended_rosenbrock_value_and_grad.along = rosenbrock_along  # type: ignore[attr-defined]
# ... and LBFGS(kernel="onepass") evaluates f and g on each column block inside its one kernel per evaluation
extended_rosenbrock_value_and_grad.block = cute_kernel.rosenbrock_block  # type: ignore[attr-defined]


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
