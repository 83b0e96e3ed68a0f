"""What the greedy minor-cycle solvers share (coordinate descent and Hogbom CLEAN).

Both keep a map over the image (the gradient map, or the residual), pick the pixel with the
largest score, change it, and subtract a shifted kernel (the PSF autocorrelation, or the PSF)
from the map around it.  Done naively, picking the pixel reads the whole image every
iteration.  Here the image is cut into B x B blocks whose best score and its pixel are kept:
an iteration takes the argmax over the blocks, changes one pixel, subtracts the kernel window
with ``lax.dynamic_update_slice`` and rescans only the blocks the window touched, so its cost
follows the window's area, not the image's.  All of it is jitted device code, no host trips.

Also here: the convolution with the PSF cropped to the image (``A``) and its adjoint ``A^T``, by
FFT on the compact circular grid (N + max(lags) per axis, about N + P/2, not the N + P - 1 of a
zero-padded linear convolution; the comment above ``compact_lags`` derives it), shared by every
solver's exact gradient map and every result's exact residual; the full grid (``fft_size``) only
for the PSF's autocorrelation; and the per-pixel Lipschitz constants from a summed-area table of
PSF^2.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.fft

from ..kernels import blocked_while
from ..solvers._common import check_int_option

__all__ = [
    "FusedKernelForm", "Geometry", "geometry", "at_block_pixels", "check_block_option", "lipschitz_map", "compact_lags",
    "compact_fft_shape", "crop_psf", "compact_psf_fft", "convolve_compact", "correlate_compact", "fft_size", "psf_fft",
]


# ---------------------------------------------------------------------------- FFT operators
# The cropped convolution y[i] = sum_k x[k] PSF[i - k + c], i and k in [0, N), uses the lags
# d = i - k in [-(N - 1), N - 1]; the PSF is non-zero at -c .. P - 1 - c, so only the lags
# -before .. after (those bounds clipped to N - 1) matter.  On a circular grid of L points a lag d
# outside them lands at d -/+ L, which must stay outside them too: L >= N + before (for d up to
# N - 1) and L >= N + after (for d down to -(N - 1)).  So L = N + max(before, after) is exact for
# A and A^T alike: N + P/2 rather than the N + P - 1 of a zero-padded linear convolution (6144
# rather than 8192 points per axis for a 4096 image and PSF: 0.56 times the points).
def compact_lags(image_shape: tuple[int, int], p: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Per axis, the PSF lags (pixels from its centre ``p // 2``) that reach an image of
    ``image_shape`` from inside it: ``-before .. after``; returns ``(before, after)``."""
    c = p // 2
    before = tuple(min(c, n - 1) for n in image_shape)
    after = tuple(min(p - 1 - c, n - 1) for n in image_shape)
    return before, after  # type: ignore[return-value]


def proximal_step(gradient: Any, x: Any, lipschitz: Any, lam: float, alpha: float) -> Any:
    """The optimal new value of a pixel, ``max(g + x L - lam alpha, 0) / (L + (1 - alpha) lam)``
    (seed eq. 3.6): CoordinateDescent's and BlockCoordinateDescent's step, in XLA and in a kernel.

    ``gradient`` is ``<residual, A e_k>``; the elastic net's proximal operator with x >= 0."""
    return jnp.maximum(gradient + x * lipschitz - lam * alpha, 0.0) / (lipschitz + (1.0 - alpha) * lam)


def objective_change(gradient: Any, old: Any, new: Any, lipschitz: Any, lam: float, alpha: float) -> Any:
    """The exact change of the objective when one pixel goes from ``old`` to ``new`` (given its
    ``gradient``): the data term moves by -d g + d^2 L / 2 (d = new - old), the elastic net by
    lam (alpha (|new| - |old|) + (1 - alpha)/2 (new^2 - old^2))."""
    d = new - old
    return -d * gradient + 0.5 * d * d * lipschitz + lam * (
        alpha * (jnp.abs(new) - jnp.abs(old)) + 0.5 * (1.0 - alpha) * (new * new - old * old)
    )


def compact_fft_shape(image_shape: tuple[int, int], p: int) -> tuple[int, int]:
    """The compact circular FFT grid for an image of ``image_shape`` and a P x P PSF:
    ``next_fast_len(N + max(before, after))`` per axis (the section's comment says why it is exact)."""
    before, after = compact_lags(image_shape, p)
    return tuple(  # type: ignore[return-value]
        scipy.fft.next_fast_len(n + max(b, a), real=True) for n, b, a in zip(image_shape, before, after)
    )


def crop_psf(psf: Any, image_shape: tuple[int, int]) -> Any:
    """The PSF (P x P, numpy or JAX) cut to the lags that reach the image (``compact_lags``):
    (before + after + 1) rows and columns, the centre at row ``before[0]``, column ``before[1]``."""
    c = psf.shape[0] // 2
    (b0, b1), (a0, a1) = compact_lags(image_shape, psf.shape[0])
    return psf[c - b0 : c + a0 + 1, c - b1 : c + a1 + 1]


def compact_psf_fft(psf: jax.Array, image_shape: tuple[int, int]) -> jax.Array:
    """rfft2 of the cropped PSF laid out circularly on ``compact_fft_shape``: lag d at index
    d mod L (complex, L0 x L1//2+1)."""
    size = compact_fft_shape(image_shape, psf.shape[0])
    crop = crop_psf(psf, image_shape)
    before, _ = compact_lags(image_shape, psf.shape[0])
    padded = jnp.pad(crop, ((0, size[0] - crop.shape[0]), (0, size[1] - crop.shape[1])))
    return jnp.fft.rfft2(jnp.roll(padded, (-before[0], -before[1]), axis=(0, 1)))


def convolve_compact(x: jax.Array, fp: jax.Array, size: tuple[int, int]) -> jax.Array:
    """``A x``: ``(x * PSF)[i, j] = sum_kl x[k, l] PSF[i - k + c, j - l + c]`` over the image
    (N x M, the forward model); ``fp = compact_psf_fft(psf, x.shape)``, ``size =
    compact_fft_shape(x.shape, P)`` (static: an odd length cannot be read off ``fp``)."""
    n, m = x.shape
    return jnp.fft.irfft2(jnp.fft.rfft2(x, s=size) * fp, s=size)[:n, :m].astype(x.dtype)


def correlate_compact(r: jax.Array, fp: jax.Array, size: tuple[int, int]) -> jax.Array:
    """``A^T r``, the adjoint of :func:`convolve_compact`: ``sum_ij r[i, j] PSF[i - k + c, j - l + c]``
    at each pixel (k, l) (N x M, the gradient map of the residual ``r``)."""
    n, m = r.shape
    return jnp.fft.irfft2(jnp.fft.rfft2(r, s=size) * jnp.conj(fp), s=size)[:n, :m].astype(r.dtype)


def fft_size(image_shape: tuple[int, int], p: int) -> tuple[int, int]:
    """The full FFT size per axis, >= N + P - 1: what the PSF's autocorrelation at every lag
    |lag| < N needs (its support is 2P - 1 wide; the compact grid would alias it)."""
    return tuple(scipy.fft.next_fast_len(n + p - 1, real=True) for n in image_shape)  # type: ignore[return-value]


def psf_fft(psf: jax.Array, size: tuple[int, int]) -> jax.Array:
    """rfft2 of the PSF zero-padded to ``size`` (complex, size[0] x size[1]//2+1; lag d at index d + c)."""
    return jnp.fft.rfft2(psf, s=size)


def lipschitz_map(psf: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Per-pixel Lipschitz constants ``L[k, l] = sum_{ij in image} PSF[i - k + c, j - l + c]^2`` (N x M).

    The seed's summed-area table of PSF^2 (in float64 on the host, so the four-corner
    differences do not cancel in float32): each constant is one rectangle of the table."""
    p = psf.shape[0]
    c = p // 2
    sat = np.zeros((p + 1, p + 1))
    sat[1:, 1:] = np.cumsum(np.cumsum(np.asarray(psf, np.float64) ** 2, axis=0), axis=1)

    def bounds(n: int) -> tuple[np.ndarray, np.ndarray]:
        k = np.arange(n)
        return np.maximum(0, c - k), np.minimum(p - 1, c - k + n - 1) + 1  # [lo, hi) rows of the PSF inside

    r0, r1 = bounds(shape[0])
    c0, c1 = bounds(shape[1])
    return sat[r1][:, c1] - sat[r0][:, c1] - sat[r1][:, c0] + sat[r0][:, c0]


# ---------------------------------------------------------------------------- block search
class Geometry(NamedTuple):
    """Static sizes of the block search and the kernel window (all Python ints)."""

    shape: tuple[int, int]  # image N, M
    padded: tuple[int, int]  # N, M rounded up to whole blocks
    block: tuple[int, int]  # block rows, block columns (B1, B2)
    blocks: tuple[int, int]  # blocks per axis
    window: tuple[int, int]  # S: rows/columns of the map one update touches (kernel clipped to the image)
    centre: tuple[int, int]  # the kernel's centre (index of lag 0)
    kernel_pad: tuple[int, int]  # zeros added before the kernel so every window slice stays inside
    touched: tuple[int, int]  # blocks rescanned after an update, per axis


def block_shape(block: int | tuple[int, int]) -> tuple[int, int]:
    """``block`` as (rows, columns): an int is a square block."""
    if isinstance(block, (tuple, list)):
        return int(block[0]), int(block[1])
    return int(block), int(block)


def check_block_option(block: Any) -> None:
    """A solver's ``block`` option: None, an int >= 1 or (rows, columns) of them; else ValueError/TypeError."""
    if block is None:
        return
    pair = block if isinstance(block, (tuple, list)) else (block, block)
    if len(pair) != 2:
        raise ValueError(f"block must be an int or (rows, columns), got {block!r}")
    for b in pair:
        check_int_option("block", b, 1)


def geometry(
    shape: tuple[int, int], kernel_shape: tuple[int, int], centre: tuple[int, int], block: int | tuple[int, int]
) -> Geometry:
    """The block layout for an image ``shape`` and a kernel of ``kernel_shape`` centred at ``centre``."""
    bs = block_shape(block)
    padded = tuple(math.ceil(n / b) * b for n, b in zip(shape, bs))
    blocks = tuple(n // b for n, b in zip(padded, bs))
    window = tuple(min(k, n) for k, n in zip(kernel_shape, shape))
    # The kernel row used for map row i after a change at p is i - p + c; the window start is
    # clipped into the image, so the lags it reaches run from c + 1 - S to c + S - 1.
    kernel_pad = tuple(max(0, s - 1 - c, c + s - k) for s, c, k in zip(window, centre, kernel_shape))
    touched = tuple(min(math.ceil(s / b) + 1, nb) for s, b, nb in zip(window, bs, blocks))
    return Geometry(tuple(shape), padded, bs, blocks, window, tuple(centre), kernel_pad, touched)  # type: ignore[arg-type]


def pad_kernel(kernel: jax.Array, geo: Geometry) -> jax.Array:
    """The kernel with ``kernel_pad`` zeros on every side (lags it does not reach are zero)."""
    (a, b) = geo.kernel_pad
    return jnp.pad(kernel, ((a, a), (b, b)))


def pad_image(image: jax.Array, geo: Geometry, value: float = 0.0) -> jax.Array:
    """``image`` (N x M) padded at the end to whole blocks."""
    (n, m), (np_, mp) = geo.shape, geo.padded
    return jnp.pad(image, ((0, np_ - n), (0, mp - m)), constant_values=value)


def _block_best(scores: jax.Array, origin: tuple[Any, Any], geo: Geometry) -> tuple[jax.Array, jax.Array]:
    """Per-block maximum score and the flat (padded) index of its pixel, for a region starting at ``origin``."""
    b1, b2 = geo.block
    r, c = scores.shape
    # Pixels outside the image (the padding up to whole blocks) are never picked.
    rows = origin[0] + jnp.arange(r)[:, None]
    cols = origin[1] + jnp.arange(c)[None, :]
    scores = jnp.where((rows < geo.shape[0]) & (cols < geo.shape[1]), scores, -1.0)
    tiles = scores.reshape(r // b1, b1, c // b2, b2).transpose(0, 2, 1, 3).reshape(r // b1, c // b2, b1 * b2)
    local = jnp.argmax(tiles, axis=-1).astype(jnp.int32)  # row-major inside the block: local = row * b2 + col
    bi = jnp.arange(r // b1, dtype=jnp.int32)[:, None]
    bj = jnp.arange(c // b2, dtype=jnp.int32)[None, :]
    row = bi * b1 + local // b2
    col = bj * b2 + local % b2
    # The maximum read at the argmax (the same value as a max over the tiles): one pass over the
    # region instead of two.
    best = scores[row, col]
    return best, (origin[0] + row) * geo.padded[1] + origin[1] + col


def at_block_pixels(block_pixel: jax.Array, image: jax.Array) -> jax.Array:
    """``image``'s value at each block's best pixel (``block_pixel``, flat padded indices), (nb, mb):
    what a kernel form keeps per block so that its next step gathers nothing from the image."""
    return jnp.take(image.reshape(-1), block_pixel.reshape(-1)).reshape(block_pixel.shape)


def all_blocks(score_fn: Any, arrays: tuple[jax.Array, ...], geo: Geometry) -> tuple[jax.Array, jax.Array]:
    """Block maxima and their pixels over the whole image."""
    zero = jnp.asarray(0, jnp.int32)
    return _block_best(score_fn(*arrays), (zero, zero), geo)


def pick(block_best: jax.Array, block_pixel: jax.Array, geo: Geometry) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The best pixel (row, column) and its score: argmax over the blocks."""
    k = jnp.argmax(block_best)
    flat = block_pixel.reshape(-1)[k]
    return flat // geo.padded[1], flat % geo.padded[1], block_best.reshape(-1)[k]


def window_start(i: jax.Array, j: jax.Array, geo: Geometry) -> tuple[jax.Array, jax.Array]:
    """First row and column of the map window an update at (i, j) changes (clipped into the image)."""
    s1, s2 = geo.window
    return jnp.clip(i - geo.centre[0], 0, geo.shape[0] - s1), jnp.clip(j - geo.centre[1], 0, geo.shape[1] - s2)


def first_touched(start: tuple[jax.Array, jax.Array], geo: Geometry) -> tuple[jax.Array, jax.Array]:
    """The first of the ``geo.touched`` blocks (per axis) that hold the window starting at ``start``."""
    (b1, b2), (t1, t2) = geo.block, geo.touched
    return jnp.clip(start[0] // b1, 0, geo.blocks[0] - t1), jnp.clip(start[1] // b2, 0, geo.blocks[1] - t2)


def subtract_kernel(mapping: jax.Array, kernel: jax.Array, amount: jax.Array, i: jax.Array, j: jax.Array, geo: Geometry):
    """``map[u, v] -= amount * kernel[u - i + c, v - j + c]`` over the image; returns (map, window start)."""
    s1, s2 = geo.window
    start = window_start(i, j, geo)
    offset = (start[0] - i + geo.centre[0] + geo.kernel_pad[0], start[1] - j + geo.centre[1] + geo.kernel_pad[1])
    patch = jax.lax.dynamic_slice(kernel, offset, (s1, s2))
    if (s1, s2) == mapping.shape:
        # The window is the whole map (a PSF at least as large as the image; the start is then 0):
        # an elementwise update XLA does in place.  Written as a slice and an update of the whole
        # map it computed a map-sized temporary and copied it back, every iteration.
        return mapping - amount * patch, start
    window = jax.lax.dynamic_slice(mapping, start, (s1, s2))
    return jax.lax.dynamic_update_slice(mapping, window - amount * patch, start), start


def rescan(
    score_fn: Any, arrays: tuple[jax.Array, ...], block_best: jax.Array, block_pixel: jax.Array,
    start: tuple[jax.Array, jax.Array], geo: Geometry,
) -> tuple[jax.Array, jax.Array]:
    """Recompute the block maxima of the blocks that the window at ``start`` touched."""
    b1, b2 = geo.block
    t1, t2 = geo.touched
    first = first_touched(start, geo)
    origin = (first[0] * b1, first[1] * b2)
    region = tuple(jax.lax.dynamic_slice(a, origin, (t1 * b1, t2 * b2)) for a in arrays)
    best, pixel = _block_best(score_fn(*region), origin, geo)
    return (
        jax.lax.dynamic_update_slice(block_best, best, first),
        jax.lax.dynamic_update_slice(block_pixel, pixel, first),
    )


class BlockFrame(NamedTuple):
    """Where one program of a fused Pallas update works: its block (``bi``, ``bj``) of the touched
    region, the block's first row and column, its slices, each pixel's row and column, and which
    of its pixels lie inside the image (the rest is the padding up to whole blocks)."""

    bi: Any
    bj: Any
    r0: Any
    c0: Any
    rows: Any
    cols: Any
    rr: Any
    cc: Any
    inside: Any


def block_frame(first_row_block: Any, first_col_block: Any, geo: Geometry) -> BlockFrame:
    """The :class:`BlockFrame` of this Pallas program (``pl.program_id`` over the touched blocks,
    counted from the first touched block ``first_row_block``, ``first_col_block``), inside a kernel body."""
    from jax.experimental import pallas as pl

    (b1, b2), (n, m) = geo.block, geo.shape
    bi = first_row_block + pl.program_id(0)
    bj = first_col_block + pl.program_id(1)
    r0, c0 = bi * b1, bj * b2
    rr = r0 + jax.lax.broadcasted_iota(jnp.int32, (b1, b2), 0)
    cc = c0 + jax.lax.broadcasted_iota(jnp.int32, (b1, b2), 1)
    return BlockFrame(bi, bj, r0, c0, pl.ds(r0, b1), pl.ds(c0, b2), rr, cc, (rr < n) & (cc < m))


def live_programs(update_block: Any, geo: Geometry) -> Any:
    """A kernel form's update body from ``update_block(frame, ints_ref, *refs)`` (one program's
    block, :func:`block_frame` of the first touched block in ``ints_ref[2]``, ``ints_ref[3]``): it
    runs only where ``ints_ref[4]`` (live) is non-zero, else every output keeps its input (aliased)."""
    from jax.experimental import pallas as pl

    def body(ints_ref: Any, *refs: Any) -> None:
        frame = block_frame(ints_ref[2], ints_ref[3], geo)  # outside the branch (interpret mode's program_id)

        @pl.when(ints_ref[4] != 0)
        def _() -> None:
            update_block(frame, ints_ref, *refs)

    return body


class FusedKernelForm:
    """What CoordinateDescent and Clean share about their fused Pallas form, a mixin before
    ``Solver``: the solver gives ``kernel`` (its option), ``kernel_plan()``, ``done`` and
    ``_step_where(problem, state, live)`` (one iteration, none where ``live`` is False)."""

    #: iterations per trip of the kernel form's loop: one wait of the device for the host a trip
    #: (docs/benchmarks.md); a trip that ends early (convergence, the chunk's end) runs the rest as
    #: no-ops, each a few small launches.
    trip = 50

    def run_chunk(self, problem: Any, state: Any, phase: int, n: jax.Array, plan: Any = None) -> tuple[Any, jax.Array]:
        """The XLA form: the driver's while loop over ``step``.  The kernel form: trips of
        :meth:`trip_length` iterations (:func:`~multiwalk.kernels.blocked_while`; each a no-op once
        ``n`` are done or the run has stopped), so the loop's predicate goes to the host once a
        trip, not every iteration."""
        if not self.kernel_plan().use_pallas:  # type: ignore[attr-defined]
            return super().run_chunk(problem, state, phase, n, plan)  # type: ignore[misc]
        return blocked_while(
            lambda s, live: self._step_where(problem, s, live),  # type: ignore[attr-defined]
            lambda s, may_run: self._inner_step(problem, s, may_run, phase), lambda s: self.done(problem, s, phase),  # type: ignore[attr-defined]
            state, n, self.trip_length(),
        )

    def trip_length(self) -> int:
        """Iterations per trip of the kernel form's loop."""
        return self.trip

    def _inner_step(self, problem: Any, state: Any, may_run: jax.Array, phase: int) -> tuple[Any, jax.Array]:
        """A trip's later iterations (:func:`~multiwalk.kernels.blocked_while`'s ``rest``): the same as
        its first where ``may_run`` and the run is not done.  Returns (state, whether it ran)."""
        live = may_run & ~self.done(problem, state, phase)  # type: ignore[attr-defined]
        return self._step_where(problem, state, live), live  # type: ignore[attr-defined]

    def unsplit_reason(self, problem: Any) -> str | None:
        """The Pallas form's: one launch an iteration, which XLA cannot split; the XLA form splits."""
        plan = self.kernel_plan()  # type: ignore[attr-defined]
        if not plan.use_pallas:
            return None
        return (f"{type(self).__name__}(kernel={self.kernel!r}) runs its Pallas form here ({plan.reason}), one "  # type: ignore[attr-defined]
                "kernel launch an iteration that stays on one device; pass kernel='xla' to split the image over devices")
