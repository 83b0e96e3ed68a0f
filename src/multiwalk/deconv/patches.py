"""The greedy minor cycle split in row patches over devices (seed 004, section 3.6, "MPI").

The seed distributes coordinate descent by splitting the image and the gradient map into
patches: each process updates its own patch, and an all-reduce picks the pixel.  Here the
patches are row bands of a 1-D device mesh (``mw.solve(..., devices=k)``): the image-size state
arrays of :class:`~multiwalk.deconv.CoordinateDescent` (model, gradient map, Lipschitz map,
block maxima) and of :class:`~multiwalk.deconv.Clean` (model, residual, block maxima) are split
along their rows, ``rows / k`` rows per device, a whole number of blocks each.  One iteration,
inside :func:`jax.shard_map`:

1. :func:`pick`: each device takes the best of its own blocks (``argmax``, the first on ties)
   and the map values at that pixel; ONE ``all_gather`` of these few numbers, and every device
   takes the first device holding the largest.  Devices hold consecutive rows, so that is the
   pixel the one-device ``argmax`` over all blocks (row-major) picks, ties and NaN included.
2. every device computes the same pixel change from the gathered values (no communication);
3. :func:`update`: the owner of the pixel sets it; every device subtracts the part of the
   shifted kernel (PSF autocorrelation, or PSF) that overlaps its patch, and rescans its blocks
   in the touched range.  No map leaves its device.

Each pixel gets the one-device arithmetic (``map - amount * kernel`` elementwise, the same
block maxima), so the model is bit for bit the one-device model (tested on 4 CPU devices).
The kernel (the autocorrelation window, up to (2N - 1) x (2M - 1)) is held whole by every
device.  A device's work per iteration is its share of the window's rows, so a PSF reaching
across the image is divided over the devices; a small window is not (its rows lie on one or
two devices, and every device does the same fixed-size step).  Exact FFT refreshes
(``refresh_every``) stay global: XLA gathers the model for the FFTs, once per refresh.

The driver tells the solver the mesh while it compiles (:func:`multiwalk.distributed.current_mesh`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from .. import distributed as dist
from . import greedy

__all__ = ["row_mesh", "pick", "update", "refresh", "split_problem"]


_shard_map = dist.shard_map_unchecked  # the replication check off: see there


def row_mesh() -> Any:
    """The 1-D mesh the driver is compiling for, when it has more than one device; else None
    (the one-device code path)."""
    mesh = dist.current_mesh()
    if mesh is None or mesh.size == 1:
        return None
    return mesh


def split_problem(geo: greedy.Geometry, devices: int) -> bool:
    """Whether the image's rows of blocks split evenly over ``devices`` (each patch whole blocks)."""
    return geo.blocks[0] % devices == 0


_ROWS = P(dist.AXIS, None)  # an image-size array (or the block maxima): row bands, one per device
_WHOLE = P()


def pick(
    mesh: Any, geo: greedy.Geometry, block_best: jax.Array, block_pixel: jax.Array, maps: tuple[jax.Array, ...]
) -> tuple[jax.Array, jax.Array, jax.Array, tuple[jax.Array, ...]]:
    """The best pixel over all patches: ``(row, column, its score, (map[row, column] for each map))``,
    the same on every device.  Equal to :func:`greedy.pick` on the whole arrays, ties included."""
    mp = geo.padded[1]

    def local(best, pixel, *local_maps):
        r0 = jax.lax.axis_index(dist.AXIS) * local_maps[0].shape[0]
        k = jnp.argmax(best)  # the first best block of this patch (row-major)
        score, flat = best.reshape(-1)[k], pixel.reshape(-1)[k]  # flat: global padded index
        i, j = flat // mp - r0, flat % mp
        values = tuple(m[i, j] for m in local_maps)
        # One collective per iteration: every patch's candidate, in device (= row) order.
        scores, flats, values = jax.lax.all_gather((score, flat, values), dist.AXIS)
        d = jnp.argmax(scores)  # the first patch with the largest score (NaN: the first NaN)
        flat = flats[d]
        return flat // mp, flat % mp, scores[d], tuple(v[d] for v in values)

    specs = (_ROWS, _ROWS, *(_ROWS for _ in maps))
    f = _shard_map(local, mesh, specs, (_WHOLE, _WHOLE, _WHOLE, tuple(_WHOLE for _ in maps)))
    return f(block_best, block_pixel, *maps)


def _kernel_rows(kernel: jax.Array, rows: jax.Array, column: jax.Array, width: int) -> jax.Array:
    """``kernel[rows[t], column : column + width]`` for each t (rows clipped into the kernel: the
    rows outside it are never used, see :func:`update`)."""
    rows = jnp.clip(rows, 0, kernel.shape[0] - 1)
    starts = jnp.stack([rows, jnp.broadcast_to(column, rows.shape)], axis=1).astype(jnp.int32)
    dims = jax.lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0, 1))
    return jax.lax.gather(
        kernel, starts, dims, slice_sizes=(1, width), mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS
    )


def update(
    mesh: Any,
    geo: greedy.Geometry,
    score_fn: Callable[..., jax.Array],
    maps: tuple[jax.Array, ...],
    kernel: jax.Array,
    amount: jax.Array,
    i: jax.Array,
    j: jax.Array,
    sets: dict[int, jax.Array],
    block_best: jax.Array,
    block_pixel: jax.Array,
) -> tuple[tuple[jax.Array, ...], jax.Array, jax.Array]:
    """One greedy update on the patches: ``maps[k][i, j] = sets[k]``, ``maps[0] -= amount *
    kernel`` shifted to (i, j) (:func:`greedy.subtract_kernel`), and the block maxima of
    ``score_fn(*maps)`` rescanned over the touched blocks.  Returns ``(maps, block_best, block_pixel)``."""
    s1, s2 = geo.window
    order = sorted(sets)

    def local(best, pixel, kern, amount, i, j, set_values, *local_maps):
        rows, nbl = local_maps[0].shape[0], best.shape[0]
        idx = jax.lax.axis_index(dist.AXIS)
        r0, bl0 = idx * rows, idx * nbl
        out = list(local_maps)
        # The pixel itself, on its owner only.
        li = i - r0
        owner = (li >= 0) & (li < rows)
        li = jnp.clip(li, 0, rows - 1)
        for k, value in zip(order, set_values):
            out[k] = out[k].at[li, j].set(jnp.where(owner, value, out[k][li, j]))
        # The global window starts at (s0, t0) (greedy.subtract_kernel); this patch updates the
        # h of its rows nearest to it, masked to the window's rows.
        s0, t0 = greedy.window_start(i, j, geo)
        h = min(s1, rows)
        ls = jnp.clip(s0 - r0, 0, rows - h)
        u = r0 + ls + jnp.arange(h)  # global rows
        inside = (u >= s0) & (u < s0 + s1)
        # kernel row of map row u: u - i + c + pad (in the kernel wherever u is in the window)
        patch = _kernel_rows(
            kern, u - i + geo.centre[0] + geo.kernel_pad[0], t0 - j + geo.centre[1] + geo.kernel_pad[1], s2
        )
        window = jax.lax.dynamic_slice(out[0], (ls, t0), (h, s2))
        window = jnp.where(inside[:, None], window - amount * patch, window)  # the one-device arithmetic
        out[0] = jax.lax.dynamic_update_slice(out[0], window, (ls, t0))
        # Rescan this patch's blocks in the touched range (a superset of them is harmless: a
        # block's maximum is a function of its pixels, so rescanning an unchanged one changes nothing).
        (b1, b2), (t1, t2) = geo.block, geo.touched
        f0, f1 = greedy.first_touched((s0, t0), geo)
        tl = min(t1, nbl)
        lf = jnp.clip(f0 - bl0, 0, nbl - tl)
        region = tuple(jax.lax.dynamic_slice(m, (lf * b1, f1 * b2), (tl * b1, t2 * b2)) for m in out)
        new_best, new_pixel = greedy._block_best(score_fn(*region), (r0 + lf * b1, f1 * b2), geo)
        best = jax.lax.dynamic_update_slice(best, new_best, (lf, f1))
        pixel = jax.lax.dynamic_update_slice(pixel, new_pixel, (lf, f1))
        return tuple(out), best, pixel

    specs = (_ROWS, _ROWS, _WHOLE, _WHOLE, _WHOLE, _WHOLE, tuple(_WHOLE for _ in order), *(_ROWS for _ in maps))
    f = _shard_map(local, mesh, specs, (tuple(_ROWS for _ in maps), _ROWS, _ROWS))
    return f(block_best, block_pixel, kernel, amount, i, j, tuple(sets[k] for k in order), *maps)


def refresh(
    mesh: Any,
    geo: greedy.Geometry,
    exact_fn: Callable[..., tuple[jax.Array, jax.Array]],
    score_fn: Callable[..., jax.Array],
    x: jax.Array,
    lipschitz: jax.Array,
    whole: tuple[jax.Array, ...],
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The exact gradient map on the patches: ``exact_fn(x, *whole) -> (map, objective)`` on the
    whole model, gathered on every device (the FFTs do not split by rows; each device computes
    what one device would, so the rounding is the same), then each device keeps its rows and
    scans its blocks with ``score_fn(map, x, lipschitz)``.  Returns ``(map, block_best,
    block_pixel, objective)``; once per refresh, not per iteration."""

    def local(x_l, lip_l, *whole_l):
        rows = x_l.shape[0]
        r0 = jax.lax.axis_index(dist.AXIS) * rows
        mapping, objective = exact_fn(jax.lax.all_gather(x_l, dist.AXIS, tiled=True), *whole_l)
        mapping = jax.lax.dynamic_slice_in_dim(mapping, r0, rows, axis=0)
        best, pixel = greedy._block_best(score_fn(mapping, x_l, lip_l), (r0, jnp.asarray(0, jnp.int32)), geo)
        return mapping, best, pixel, objective

    f = _shard_map(local, mesh, (_ROWS, _ROWS, *(_WHOLE for _ in whole)), (_ROWS, _ROWS, _ROWS, _WHOLE))
    return f(x, lipschitz, *whole)
