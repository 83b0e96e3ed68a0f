"""Extended Rosenbrock evaluated along a line in ONE pass over memory: a Pallas (Triton) kernel.

A line search evaluates ``f`` and ``g`` at ``x + stp d`` and needs the slope ``g'd``.  Written in
jax.numpy (``x + stp d``, :func:`~multiwalk.functions.cute.extended_rosenbrock_value_and_grad`,
``g @ d``), XLA runs that as several kernels.  :func:`rosenbrock_along_kernel` reads ``x`` and
``d`` as their ``(n/2, 2)`` pairs, forms the trial point in registers, and writes ``g`` and
per-program partial sums of ``f`` and ``g'd`` (summed by a small XLA reduction): 3 n values, the
trial point never stored (L-BFGS's pass A forms it again from ``x`` and ``d``, which it reads
anyway).  One kernel reading and writing 3 n values comes close to the memory-bandwidth floor per
evaluation where XLA's several kernels do not, and whole L-BFGS solves are faster with it, at the
same iterations and evaluations (figures: docs/benchmarks.md, LBFGS).

So it is the default: ``cute.extended_rosenbrock_value_and_grad`` (``cute.TABLE["extended_rosenbrock"]
.value_and_grad``, what ``multiwalk lbfgs --function rosenbrock`` uses) carries
:func:`~multiwalk.functions.cute.rosenbrock_along` as its ``.along``, which :class:`multiwalk.LBFGS`
calls in its fused passes on one device: this kernel where :func:`along_plan` says so (on GPUs, for
float32 and float64), elsewhere the same ``(f, g, g'd)`` from the jax.numpy form, the reason in
``LBFGS``'s ``stats["line_evaluation"]``.  This module holds the kernel and the plan only; the
choice between the two forms lives in :mod:`~multiwalk.functions.cute`, beside the jax.numpy form
(:func:`~multiwalk.functions.cute.extended_rosenbrock_xla` is that form without ``.along``).

Sums are folded per program, then across programs: f and ``g'd`` agree with the jax.numpy form up
to rounding (tests/test_cute_fused.py, interpret mode; on the GPU 3e-16 relative).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..kernels import KernelPlan, backend, compiler_params

__all__ = ["along_plan", "rosenbrock_along_kernel", "rosenbrock_block"]

ROWS = 512  # pairs per program (1024 coordinates; a power of two, as Triton needs)
WARPS = 4
_WIDTH = 16  # partial sums per program: lane 0 f, lane 1 g'd (Triton stores a power-of-two row)


def rosenbrock_block(xb: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Extended Rosenbrock on a ``(rows, 2)`` block of pairs ``(x_{2i-1}, x_{2i})``: ``(f terms (rows,),
    g block (rows, 2))``.  Block-local, in operations Triton lowers (no slicing: each column is a
    masked sum), so a Pallas kernel can call it on the block it holds (``rosenbrock_along_kernel``,
    L-BFGS's one-pass loop through ``value_and_grad.block``); ``.width = 2`` coordinates per row."""
    rows = xb.shape[0]
    col = jax.lax.broadcasted_iota(jnp.int32, (rows, 2), 1)
    # the pair (x_{2i-1}, x_{2i}) of each row, by a masked sum over its two columns
    x1 = jnp.sum(jnp.where(col == 0, xb, 0.0), axis=1)
    x2 = jnp.sum(jnp.where(col == 1, xb, 0.0), axis=1)
    t = x2 - x1 * x1
    u = 1.0 - x1
    g1 = -400.0 * x1 * t - 2.0 * u
    g2 = 200.0 * t
    g = jnp.where(col == 0, jnp.broadcast_to(g1[:, None], (rows, 2)), jnp.broadcast_to(g2[:, None], (rows, 2)))
    return 100.0 * t * t + u * u, g


rosenbrock_block.width = 2  # type: ignore[attr-defined]  # coordinates per row of a block


def rosenbrock_along_kernel(
    x: jax.Array, d: jax.Array, stp: jax.Array, *, rows: int = ROWS, num_warps: int = WARPS, interpret: bool = False,
    out: jax.Array | None = None, row: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(f, g, g'd)`` of Extended Rosenbrock at ``x + stp d`` by the fused kernel; ``x, d`` (n,), n even.

    ``out`` (R, n) and ``row`` (int scalar): g is written into ``out[row]`` in place (aliased) and
    ``out`` is returned in g's place, its other rows untouched (L-BFGS keeps the previous gradient
    there, so the new one needs no copy into the loop's buffer)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    n = x.shape[0]
    pairs = n // 2
    dt = x.dtype
    programs = pl.cdiv(pairs, rows)
    stp = jnp.reshape(stp, (1,)).astype(dt)

    def load(ref, mask):  # noqa: ANN001, ANN202
        return plgpu.load(ref) if mask is None else plgpu.load(ref, mask=mask, other=0.0)

    into = out is not None

    def body(stp_ref, *refs):  # noqa: ANN001
        if into:
            row_ref, x_ref, d_ref, _, g_rows, out_ref = refs

            def g_at(blk):  # noqa: ANN001, ANN202 - the gradient's row of out (one indexer for Triton)
                return g_rows.at[(row_ref[0], *blk)]
        else:
            x_ref, d_ref, g_ref, out_ref = refs

            def g_at(blk):  # noqa: ANN001, ANN202
                return g_ref.at[blk]
        pid = pl.program_id(0)
        r0 = pid * rows
        block = (pl.ds(r0, rows), pl.ds(jnp.int32(0), 2))  # int32 indices also under jax_enable_x64
        ragged = pairs % rows != 0  # known while tracing: no masks when the programs tile the pairs
        inside = (r0 + jax.lax.broadcasted_iota(jnp.int32, (rows, 2), 0) < pairs) if ragged else None
        # (a 1-D mask of its own: the Triton lowering has no rule for slicing inside[:, 0])
        inside_rows = (r0 + jax.lax.broadcasted_iota(jnp.int32, (rows,), 0) < pairs) if ragged else None
        dv = load(d_ref.at[block], inside)
        xt = load(x_ref.at[block], inside) + stp_ref[0] * dv
        terms, gv = rosenbrock_block(xt)
        if inside is None:
            plgpu.store(g_at(block), gv)
        else:
            plgpu.store(g_at(block), gv, mask=inside)
        if inside_rows is not None:  # a row past the end loaded zeros: its term would be 1, not 0
            terms = jnp.where(inside_rows, terms, 0.0)
        lane = jax.lax.broadcasted_iota(jnp.int32, (_WIDTH,), 0)
        out = jnp.where(lane == 0, jnp.sum(terms), jnp.zeros((_WIDTH,), dt))
        out = jnp.where(lane == 1, jnp.sum(gv * dv), out)
        out_ref[pid, :] = out

    params = compiler_params(num_warps, interpret)
    table = jax.ShapeDtypeStruct((programs, _WIDTH), dt)
    if into:
        target = jnp.reshape(jnp.asarray(row, jnp.int32), (1,))
        g3d, partial = pl.pallas_call(
            body, out_shape=(jax.ShapeDtypeStruct((out.shape[0], pairs, 2), dt), table), grid=(programs,),
            interpret=interpret, input_output_aliases={4: 0}, name="rosenbrock_along_into", **params,
        )(stp, target, x.reshape(pairs, 2), d.reshape(pairs, 2), out.reshape(out.shape[0], pairs, 2))
        total = jnp.sum(partial, axis=0)
        return total[0], g3d.reshape(out.shape), total[1]
    g2d, partial = pl.pallas_call(
        body, out_shape=(jax.ShapeDtypeStruct((pairs, 2), dt), table),
        grid=(programs,), interpret=interpret, name="rosenbrock_along", **params,
    )(stp, x.reshape(pairs, 2), d.reshape(pairs, 2))
    total = jnp.sum(partial, axis=0)
    return total[0], g2d.reshape(n), total[1]


_DTYPES = ("float32", "float64")  # checked on a GPU (docs/benchmarks.md); others stay with XLA


def along_plan(n: int, dtype: object) -> KernelPlan:
    """Where :func:`rosenbrock_along` evaluates (``n`` coordinates of ``dtype``): the kernel on a GPU
    (``use_pallas``), else the jax.numpy form; ``reason``: one line saying which and why."""
    name, on_gpu = backend(("gpu", "cuda"))
    xla = "x + stp d, f and g (cute's analytic form) and g'd by XLA"
    if not on_gpu:
        return KernelPlan(False, False, f"{xla}: the one-pass Pallas kernel runs on GPUs only (backend: {name})")
    if str(jnp.dtype(dtype)) not in _DTYPES:
        return KernelPlan(False, False, f"{xla}: the one-pass kernel is checked in {' and '.join(_DTYPES)} only, "
                                        f"not {jnp.dtype(dtype)}")
    if n % 2:
        return KernelPlan(False, False, f"{xla}: the one-pass kernel reads pairs, n = {n} is odd")
    return KernelPlan(True, False, "one Pallas kernel per evaluation on the GPU (reads x and d, writes g, f and g'd)")
