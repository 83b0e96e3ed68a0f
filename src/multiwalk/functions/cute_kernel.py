"""Extended Rosenbrock evaluated along a line in ONE pass over memory: a Pallas (Triton) kernel.

NOT YET CHECKED ON A GPU (2026-11-22): built and tested in Pallas' interpret mode on the CPU
(tests/test_cute_fused.py); its first GPU compile failed on a rule the Triton lowering lacks
(``slice``, since removed) and no GPU run was left to try again.  So it is opt-in:
``Problem(value_and_grad=cute_kernel.extended_rosenbrock_along)`` (the analytic f and g, with
:func:`rosenbrock_along` as its ``.along``); ``cute.extended_rosenbrock_value_and_grad`` carries no
``.along``.  ``benchmarks/lbfgs_variants.py`` checks and times it on a GPU.

A line search evaluates ``f`` and ``g`` at ``x + stp d`` and needs the slope ``g'd``.  Written in
jax.numpy (``x + stp d``, :func:`~multiwalk.functions.cute.extended_rosenbrock_value_and_grad`,
``g @ d``), XLA runs that as several kernels: 0.144 ms at n = 1e7 float64 on an H200, where
reading ``x`` and ``d`` and writing ``g`` once (3 n values) takes 0.057 ms at the card's copy
bandwidth.  :func:`rosenbrock_along` reads ``x`` and ``d`` as their ``(n/2, 2)`` pairs, forms
the trial point in registers, and writes ``g`` and per-program partial sums of ``f`` and
``g'd`` (summed by a small XLA reduction): the trial point itself is never stored (L-BFGS's
pass A forms it again from ``x`` and ``d``, which it reads anyway).

Sums are folded per program, then across programs: f and ``g'd`` agree with the jax.numpy form
up to rounding.  Off GPUs :func:`rosenbrock_along` is the jax.numpy form; the kernel runs in
Pallas' interpret mode only when asked (tests).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..kernels import compiler_params

__all__ = ["rosenbrock_along", "rosenbrock_along_kernel", "extended_rosenbrock_along"]

ROWS = 512  # pairs per program (1024 coordinates; a power of two, as Triton needs)
WARPS = 4
_WIDTH = 16  # partial sums per program: lane 0 f, lane 1 g'd (Triton stores a power-of-two row)


def rosenbrock_along_kernel(
    x: jax.Array, d: jax.Array, stp: jax.Array, *, rows: int = ROWS, num_warps: int = WARPS, interpret: bool = False
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(f, g, g'd)`` of Extended Rosenbrock at ``x + stp d`` by the fused kernel; ``x, d`` (n,), n even."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    n = x.shape[0]
    pairs = n // 2
    dt = x.dtype
    programs = pl.cdiv(pairs, rows)
    stp = jnp.reshape(stp, (1,)).astype(dt)

    def load(ref, mask):  # noqa: ANN001, ANN202
        return plgpu.load(ref) if mask is None else plgpu.load(ref, mask=mask, other=0.0)

    def body(stp_ref, x_ref, d_ref, g_ref, out_ref):  # noqa: ANN001
        pid = pl.program_id(0)
        r0 = pid * rows
        block = (pl.ds(r0, rows), pl.ds(jnp.int32(0), 2))  # int32 indices also under jax_enable_x64
        ragged = pairs % rows != 0  # known while tracing: no masks when the programs tile the pairs
        inside = (r0 + jax.lax.broadcasted_iota(jnp.int32, (rows, 2), 0) < pairs) if ragged else None
        # (a 1-D mask of its own: the Triton lowering has no rule for slicing inside[:, 0])
        inside_rows = (r0 + jax.lax.broadcasted_iota(jnp.int32, (rows,), 0) < pairs) if ragged else None
        col = jax.lax.broadcasted_iota(jnp.int32, (rows, 2), 1)
        dv = load(d_ref.at[block], inside)
        xt = load(x_ref.at[block], inside) + stp_ref[0] * dv
        # the pair (x_{2i-1}, x_{2i}) of each row, by a masked sum over its two columns
        x1 = jnp.sum(jnp.where(col == 0, xt, 0.0), axis=1)
        x2 = jnp.sum(jnp.where(col == 1, xt, 0.0), axis=1)
        t = x2 - x1 * x1
        u = 1.0 - x1
        g1 = -400.0 * x1 * t - 2.0 * u
        g2 = 200.0 * t
        gv = jnp.where(col == 0, jnp.broadcast_to(g1[:, None], (rows, 2)), jnp.broadcast_to(g2[:, None], (rows, 2)))
        if inside is None:
            plgpu.store(g_ref.at[block], gv)
        else:
            plgpu.store(g_ref.at[block], gv, mask=inside)
        terms = 100.0 * t * t + u * u
        if inside_rows is not None:  # a row past the end loaded zeros: its term would be 1, not 0
            terms = jnp.where(inside_rows, terms, 0.0)
        lane = jax.lax.broadcasted_iota(jnp.int32, (_WIDTH,), 0)
        out = jnp.where(lane == 0, jnp.sum(terms), jnp.zeros((_WIDTH,), dt))
        out = jnp.where(lane == 1, jnp.sum(gv * dv), out)
        out_ref[pid, :] = out

    g2d, partial = pl.pallas_call(
        body,
        out_shape=(jax.ShapeDtypeStruct((pairs, 2), dt), jax.ShapeDtypeStruct((programs, _WIDTH), dt)),
        grid=(programs,), interpret=interpret, name="rosenbrock_along", **compiler_params(num_warps, interpret),
    )(stp, x.reshape(pairs, 2), d.reshape(pairs, 2))
    total = jnp.sum(partial, axis=0)
    return total[0], g2d.reshape(n), total[1]


def rosenbrock_along(x: jax.Array, d: jax.Array, stp: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(f, g, g'd)`` of Extended Rosenbrock at ``x + stp d``: the fused kernel on a GPU, else the
    jax.numpy form (the same values up to rounding)."""
    from ..kernels import backend
    from .cute import extended_rosenbrock_value_and_grad

    _, on_gpu = backend(("gpu", "cuda"))
    if on_gpu and x.shape[0] % 2 == 0:
        return rosenbrock_along_kernel(x, d, stp)
    f, g = extended_rosenbrock_value_and_grad(x + stp * d)
    return f, g, g @ d


def extended_rosenbrock_along(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``cute.extended_rosenbrock_value_and_grad`` with :func:`rosenbrock_along` as its ``.along``: give it
    as ``Problem(value_and_grad=...)`` and :class:`multiwalk.LBFGS` evaluates its line search in one pass."""
    from .cute import extended_rosenbrock_value_and_grad

    return extended_rosenbrock_value_and_grad(x)


extended_rosenbrock_along.along = rosenbrock_along  # type: ignore[attr-defined]
