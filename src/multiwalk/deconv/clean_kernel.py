"""One Hogbom CLEAN iteration's update as ONE Pallas (Triton) pass: residual and block maxima together.

After the peak pixel p = (i, j) was found, the XLA form of :class:`~multiwalk.deconv.Clean`
subtracts ``component * PSF`` shifted to p from the residual (one read-modify-write of the
window: 12 bytes a pixel in float32) and then rescans the blocks the window touched for their
largest |r| (a second read of the residual, 4 bytes a pixel).  Here each Pallas program owns
one touched block: it reads the block of the residual and the PSF window, writes the updated
residual in place, and from the values still in registers computes the block's largest |r|,
its pixel and r there - one pass over memory instead of two.  The program holding p also adds
the component to the model there.

The arithmetic is the XLA form's (``r - component * PSF``, only at the image's pixels, never in
the padding up to whole blocks), so the residuals agree up to the compilers' rounding (fused
multiply-adds); a block's maximum and its pixel are those of ``jnp.argmax`` (the first pixel,
row-major in the block, on ties).  The PSF carries the zeros of
:func:`~multiwalk.deconv.coordinate_descent_kernel.kernel_pad` on every side (``padded_kernel``; not the XLA
form's ``greedy.pad_kernel``): every block of the touched region reads inside it, and lags the
PSF does not reach read zero, so pixels outside the XLA form's window are left as they were.
Off GPUs the kernel runs in Pallas' interpret mode (for tests: correct, not fast).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from ..kernels import compiler_params
from . import greedy

__all__ = ["update_and_rescan", "DEFAULT_BLOCK"]

#: Clean's block rows x columns in the kernel form (powers of two): 16 x 128, CoordinateDescent's,
#: was no faster for Clean at 4096^2 on an H100 (docs/benchmarks.md)
DEFAULT_BLOCK = (32, 128)


def update_and_rescan(
    residual: jax.Array,
    x: jax.Array,
    kernel: jax.Array,
    blocks: tuple[jax.Array, jax.Array, jax.Array],
    component: jax.Array,
    i: jax.Array,
    j: jax.Array,
    live: jax.Array,
    *,
    geo: greedy.Geometry,
    pad: tuple[int, int],
    num_warps: int,
    interpret: bool = False,
) -> tuple[jax.Array, ...]:
    """One CLEAN update in one launch over the ``geo.touched`` blocks: ``x[i, j] += component``,
    ``residual[u] -= component * kernel[u - (i, j) + centre + pad]`` at the image's pixels u of
    those blocks, and their block maxima of |residual|, pixels and residual values.

    ``residual``, ``x`` (Np, Mp); ``kernel`` the PSF (or its central window) with ``pad`` zeros
    per side (``coordinate_descent_kernel.padded_kernel``); ``blocks`` = (best |r|, flat padded
    pixel, r there) per block, (nb, mb) each; ``live`` (bool): False makes the call read and write
    nothing (a loop trip's no-op steps past the end cost a launch only).  Every array is aliased to its output, so
    blocks outside the touched region are neither read nor written.  Returns (residual, x, *blocks).
    """
    from jax.experimental import pallas as pl

    t1, t2 = geo.touched
    start = greedy.window_start(i, j, geo)
    first = greedy.first_touched(start, geo)
    ints = jnp.stack([i, j, first[0], first[1], live]).astype(jnp.int32)
    amount = jnp.reshape(component, (1,)).astype(residual.dtype)
    off = (geo.centre[0] + pad[0], geo.centre[1] + pad[1])
    arrays = (residual, x, *blocks)
    out_shape = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays)
    # inputs: ints 0, amount 1, residual 2, x 3, kernel 4, blocks 5-7
    aliases = {2: 0, 3: 1, 5: 2, 6: 3, 7: 4}
    return pl.pallas_call(
        _update_kernel(geo, off), out_shape=out_shape, grid=(t1, t2), interpret=interpret,
        name="clean_update_and_rescan", input_output_aliases=aliases, **compiler_params(num_warps, interpret),
    )(ints, amount, residual, x, kernel, *blocks)


def _update_kernel(geo: greedy.Geometry, off: tuple[int, int]) -> Callable[..., None]:
    """The kernel body of :func:`update_and_rescan`: one program per touched block; ``off`` is
    the padded kernel's index of lag 0 (``centre + pad``)."""
    from jax.experimental import pallas as pl

    b1, b2 = geo.block
    mp = geo.padded[1]

    def update_block(frame, ints_ref, a_ref, r_ref, x_ref, k_ref, best_in, pixel_in, value_in,  # noqa: ANN001, ANN202, ARG001
                     r_out, x_out, best_out, pixel_out, value_out):  # noqa: ANN001
        # best_in, pixel_in, value_in: aliased to the outputs, never read (untouched blocks keep theirs)
        bi, bj, r0, c0, rows, cols, rr, cc, inside = frame
        pi, pj = ints_ref[0], ints_ref[1]
        r = r_ref[rows, cols]
        psf = k_ref[pl.ds(r0 - pi + off[0], b1), pl.ds(c0 - pj + off[1], b2)]
        # As the XLA form: only the image's pixels change (never the padding up to whole blocks).
        r = jnp.where(inside, r - a_ref[0] * psf, r)
        r_out[rows, cols] = r
        score = jnp.where(inside, jnp.abs(r), -1.0)
        best = jnp.max(score)
        flat = (rr - r0) * b2 + (cc - c0)
        local = jnp.min(jnp.where(score == best, flat, b1 * b2))  # the first best pixel, row-major
        best_out[bi, bj] = best
        pixel_out[bi, bj] = (r0 + local // b2) * mp + c0 + local % b2
        value_out[bi, bj] = jnp.sum(jnp.where(flat == local, r, 0.0))

        @pl.when((pi >= r0) & (pi < r0 + b1) & (pj >= c0) & (pj < c0 + b2))
        def _():  # the program that holds (i, j) adds the component there; no other reads it
            x_out[pi, pj] = x_ref[pi, pj] + a_ref[0]

    return greedy.live_programs(update_block, geo)
