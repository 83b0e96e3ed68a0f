"""One coordinate-descent update as ONE Pallas (Triton) pass: gradient map and block maxima together.

After the greedy pixel (i, j) changed by ``d``, the XLA form of
:class:`~multiwalk.deconv.CoordinateDescent` subtracts the shifted PSF autocorrelation from the
gradient map (one read-modify-write of the window) and then rescans the blocks the window
touched for their best proximal step (a second read of the map, plus the model and the
Lipschitz map).  Here each Pallas program owns one block: it reads the block of the map and of
the autocorrelation, writes the updated map, and from the values still in registers computes
the block's best score and its pixel - one pass over memory instead of two.

Traffic per update, for a window of A pixels, with a map of Lipschitz constants (the form kept
for comparison, ``CoordinateDescent.constant_lipschitz_kernel = False``): read + write the map,
read the autocorrelation window and the Lipschitz map (16 A bytes in float32).  The model is
read only where it can be non-zero: the state keeps the Lipschitz constant NEGATED at every
pixel the solver ever changed (``L`` is positive everywhere, so its sign is free), and the
kernel loads the model with a mask ``L < 0``
(``other=0``), which on a GPU issues no memory request for warps with no such pixel.  Greedy
coordinate descent changes few pixels, so that read all but vanishes.

With one Lipschitz constant for every pixel (``sum PSF^2``, what CoordinateDescent uses) the
map of L carries nothing but those marks, so it is not read at all (12 A bytes, a quarter less):
L is a scalar argument, and a (blocks) int32 array marks the blocks where the model may be
non-zero; a program loads its block of the model only if its mark is set.  The arithmetic is the
same (the scalar is the very float32 value the map held), so the results are too.

Before it, :func:`pick_step` (one program) reads the block arrays, picks the best block as
``jnp.argmax`` does, computes the proximal step, the objective after it and its two records, and
leaves the update's scalars on the device: one launch where the XLA form's pick and scalars were
~8 small operations an iteration (docs/benchmarks.md).  It loads the block arrays whole, so it runs
where the block grid is a power of two per axis; elsewhere the pick stays in XLA.

The arithmetic is the XLA form's, in the same order (``g - d * AC``, then the proximal step),
so the maps agree up to the compilers' rounding (fused multiply-adds); the block maxima and
their pixels are those of ``jnp.max``/``jnp.argmax`` (the first pixel, row-major in the block,
on ties).  Off GPUs the kernel runs in Pallas' interpret mode (for tests: correct, not fast).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ..kernels import KERNELS, KernelPlan, backend, compiler_params, is_power_of_two, pallas_plan, xla_plan
from . import greedy

__all__ = [
    "KERNELS", "KernelPlan", "plan", "kernel_pad", "padded_kernel", "ROW_ALIGN", "block_values", "block_marks",
    "update_and_rescan", "launch_update", "pick_in_kernel", "pick_step", "DEFAULT_BLOCK", "DEFAULT_WARPS",
]

#: CoordinateDescent's block rows x columns in the kernel form (powers of two).  At 4096^2, 16 x 128
#: ran 10 000 iterations ~0.04 s faster than 32 x 128 on an H100 and an H200, the best of
#: the blocks tried (docs/benchmarks.md); Clean keeps 32 x 128 (:data:`.clean_kernel.DEFAULT_BLOCK`)
DEFAULT_BLOCK = (16, 128)
DEFAULT_WARPS = 4


def plan(kernel: str, block: tuple[int, int]) -> KernelPlan:
    """How ``CoordinateDescent(kernel=kernel)`` (and ``Clean``'s, :mod:`.clean_kernel`) runs: ``"xla"``;
    ``"auto"``: Pallas on a GPU, else XLA; ``"pallas"``: the kernel (interpret mode off GPUs).
    Blocks must be powers of two (Triton)."""
    name, on_gpu = backend()
    decided = xla_plan(kernel, name, on_gpu)
    if decided is not None:
        return decided
    if not all(is_power_of_two(b) for b in block):
        return KernelPlan(False, False, f"block {block} is not a power of two per axis (Triton needs that); using the XLA form")
    return pallas_plan(kernel, name, on_gpu, "the fused Pallas update")


def kernel_pad(geo: greedy.Geometry, kernel_shape: tuple[int, int]) -> tuple[int, int]:
    """Zeros around a kernel centred at ``k // 2`` (the autocorrelation; Clean's PSF, whose side
    may be even) so every block of the touched region reads inside it (the kernel forms).

    A touched pixel u and the changed pixel p both lie in the touched region (``touched`` blocks)
    and in the padded image, so |u - p| < L = min(touched * block, padded); the index
    u - p + h + pad (h = k // 2) must stay in [0, k + 2 pad): pad >= L - 1 - h and
    pad >= h + L - k (the same for an odd k).  Lags the kernel does not reach read zeros: exactly
    the XLA form, whose window holds every pixel the kernel reaches from p and nothing else."""
    out = []
    for t, b, n, k in zip(geo.touched, geo.block, geo.padded, kernel_shape):
        reach = min(t * b, n)
        out.append(max(0, reach - 1 - k // 2, k // 2 + reach - k))
    return out[0], out[1]


#: the kernel forms' kernel rows start at a multiple of this many elements (128 bytes in float32):
#: with an odd row length each row of a window read starts at another alignment; the update alone
#: took 82 us an iteration instead of 78, no gain through mw.solve (4096^2 on an H100, docs/benchmarks.md)
ROW_ALIGN = 32


def padded_kernel(kernel: jax.Array, pad: tuple[int, int]) -> jax.Array:
    """``kernel`` with ``pad`` zeros on every side (:func:`kernel_pad`) and zero columns on the
    right up to a row length that is a multiple of :data:`ROW_ALIGN`: the kernel forms' layout.
    The columns added are never read (every window stays inside the first ``k + 2 pad``)."""
    a, b = pad
    width = kernel.shape[1] + 2 * b
    return jnp.pad(kernel, ((a, a), (b, b + (-width) % ROW_ALIGN)))


def block_values(block_pixel: jax.Array, gradient: jax.Array, x: jax.Array, signed_lipschitz: jax.Array):
    """(g, x, |L|) at each block's best pixel, (nb, mb) each: what the next step needs of the big maps."""
    g, xv, signed = (greedy.at_block_pixels(block_pixel, a) for a in (gradient, x, signed_lipschitz))
    return g, xv, jnp.abs(signed)


def block_marks(x: jax.Array, geo: greedy.Geometry) -> jax.Array:
    """(nb, mb) int32: 1 where a block of ``x`` (Np, Mp) holds a non-zero pixel (the kernel reads x only there)."""
    (b1, b2), (nb, mb) = geo.block, geo.blocks
    return jnp.any(x.reshape(nb, b1, mb, b2) != 0, axis=(1, 3)).astype(jnp.int32)


def update_and_rescan(
    gradient: jax.Array,
    x: jax.Array,
    signed_lipschitz: jax.Array | None,
    kernel: jax.Array,
    blocks: tuple[jax.Array, ...],
    d: jax.Array,
    new: jax.Array,
    lip: jax.Array,
    i: jax.Array,
    j: jax.Array,
    live: jax.Array,
    *,
    geo: greedy.Geometry,
    half: tuple[int, int],
    pad: tuple[int, int],
    lam: float,
    alpha: float,
    marks: jax.Array | None = None,
    num_warps: int = DEFAULT_WARPS,
    interpret: bool = False,
) -> tuple[jax.Array, ...]:
    """One whole update in one launch: ``x[i, j] = new`` (and ``L[i, j]`` negated, marking it),
    ``gradient[u] -= d * kernel[u - (i, j) + half + pad]`` over the touched blocks, and their
    block maxima, pixels and (g, x, |L|) at those pixels.  ``live`` (bool) False: nothing is read or
    written (a loop trip's no-op steps past the end cost a launch only).

    ``gradient``, ``x``, ``signed_lipschitz`` (Np, Mp) (the last negated where ``x`` may be
    non-zero); ``kernel`` the autocorrelation with ``pad`` zeros per side (:func:`padded_kernel`);
    ``blocks`` = (best, pixel, g, x, |L|) per block, (nb, mb) each.  Every array is aliased to
    its output, so blocks outside the touched region are neither read nor written, and the step
    around this call never gathers from or scatters into an image-sized array (which lets XLA
    keep them in place).  Returns (gradient, x, signed_lipschitz, *blocks).

    ``marks`` (nb, mb) int32, for one Lipschitz constant ``lip`` at every pixel: non-zero where a
    block's model may be non-zero.  Then ``signed_lipschitz`` is neither read nor written (pass
    None), the holding block's mark is set instead, and the call returns (gradient, x, marks, *blocks)."""

    start = greedy.window_start(i, j, geo)
    first = greedy.first_touched(start, geo)
    ints = jnp.stack([i, j, first[0], first[1], live]).astype(jnp.int32)
    floats = jnp.stack([d, new, -lip, lip]).astype(gradient.dtype)
    third = marks if marks is not None else signed_lipschitz
    return launch_update(ints, floats, gradient, x, third, kernel, blocks, geo=geo, half=half, pad=pad, lam=lam,
                         alpha=alpha, constant=marks is not None, num_warps=num_warps, interpret=interpret)


def launch_update(
    ints: jax.Array, floats: jax.Array, gradient: jax.Array, x: jax.Array, third: jax.Array, kernel: jax.Array,
    blocks: tuple[jax.Array, ...], *, geo: greedy.Geometry, half: tuple[int, int], pad: tuple[int, int], lam: float,
    alpha: float, constant: bool, num_warps: int = DEFAULT_WARPS, interpret: bool = False,
) -> tuple[jax.Array, ...]:
    """:func:`update_and_rescan` from its scalars as the kernel reads them: ``ints`` int32 (i, j,
    first touched block row, column, live, ...) and ``floats`` (d, new, -L, L, ...), as
    :func:`pick_step` leaves them; ``third`` the block marks (``constant``) or the signed map."""
    from jax.experimental import pallas as pl

    t1, t2 = geo.touched
    off = (half[0] + pad[0], half[1] + pad[1])
    body = _update_kernel(geo, off, lam, alpha, constant, interpret)
    arrays = (gradient, x, third, *blocks)
    out_shape = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays)
    aliases = {2: 0, 3: 1, 4: 2}
    aliases.update({6 + k: 3 + k for k in range(len(blocks))})
    return pl.pallas_call(
        body, out_shape=out_shape, grid=(t1, t2), interpret=interpret, name="cd_update_and_rescan",
        input_output_aliases=aliases, **compiler_params(num_warps, interpret),
    )(ints, floats, gradient, x, third, kernel, *blocks)


def refresh_due(best: Any, iteration: Any, tolerance: Any, refresh_every: int | None) -> Any:
    """CoordinateDescent's refresh rule, on the best block score ``best``: after the first
    iteration, every ``refresh_every`` iterations and where the updated map says "converged"."""
    due = best <= tolerance
    if refresh_every is not None:
        due = due | (iteration % refresh_every == 0)
    return (iteration > 0) & due


def pick_in_kernel(geo: greedy.Geometry) -> bool:
    """Whether :func:`pick_step` can run here: it loads the block arrays whole, which Triton needs in
    powers of two per axis."""
    return all(is_power_of_two(b) for b in geo.blocks)


def pick_step(
    blocks: tuple[jax.Array, ...], fun_trace: jax.Array, steps: jax.Array, ints: jax.Array, floats: jax.Array, *,
    geo: greedy.Geometry, lam: float, alpha: float, refresh_every: int | None, check: bool, interpret: bool = False,
) -> tuple[jax.Array, ...]:
    """One iteration's choice and scalars in one launch (one program), from the block arrays:
    the best block (the first maximum, row-major, or the first NaN, as ``np.argmax`` and
    ``jnp.argmax`` on a CPU; ``jnp.argmax`` on a GPU may take another NaN, a run gone
    non-finite, which ends FAILED either way), its pixel
    and (g, x, |L|) there, whether the step runs, the proximal step, the objective after it, and
    the records ``fun_trace[k]``, ``steps[k]``.

    ``blocks`` = (best, pixel, g, x, |L|) per block, (nb, mb) each, powers of two (:func:`pick_in_kernel`);
    ``ints`` int32 (may run, iteration k, exact, verified); ``floats`` (tolerance, objective).
    ``check`` (a trip's later iterations, k >= 1): the step also stops where a refresh is due
    (CoordinateDescent's ``_refresh_due``, which holds wherever the run is done); else it runs
    where "may run" and changes nothing where "verified".  Returns ``ints`` (i, j, first touched block row, column,
    live, 0, 0, 0), ``floats`` (d, new, -L, L, objective, 0, 0, 0) (8 long: Triton's arrays are
    powers of two) and the two records (aliased)."""
    from jax.experimental import pallas as pl

    out_shape = (jax.ShapeDtypeStruct((8,), jnp.int32), jax.ShapeDtypeStruct((8,), floats.dtype),
                 jax.ShapeDtypeStruct(fun_trace.shape, fun_trace.dtype), jax.ShapeDtypeStruct(steps.shape, steps.dtype))
    body = _pick_kernel(geo, lam, alpha, refresh_every, check)
    return pl.pallas_call(
        body, out_shape=out_shape, grid=(1,), interpret=interpret, name="cd_pick_step",
        input_output_aliases={7: 2, 8: 3}, **compiler_params(DEFAULT_WARPS, interpret),
    )(ints, floats, *blocks, fun_trace, steps)


def _pick_kernel(geo: greedy.Geometry, lam: float, alpha: float, refresh_every: int | None,
                 check: bool) -> Callable[..., None]:
    """The kernel body of :func:`pick_step`; the arithmetic is ``CoordinateDescent._step_where``'s
    (its own functions, which are plain jax.numpy)."""
    from jax.experimental import pallas as pl

    nb, mb = geo.blocks
    mp = geo.padded[1]

    def body(ints_ref, f_ref, best_ref, pixel_ref, g_ref, x_ref, l_ref, trace_in, steps_in,  # noqa: ANN001, ANN202, ARG001
             ints_out, f_out, trace_out, steps_out):  # noqa: ANN001
        k, tol, fun = ints_ref[1], f_ref[0], f_ref[1]
        best = best_ref[...]
        flat = (jax.lax.broadcasted_iota(jnp.int32, (nb, mb), 0) * mb
                + jax.lax.broadcasted_iota(jnp.int32, (nb, mb), 1))
        first_nan = jnp.min(jnp.where(best != best, flat, nb * mb))
        first_max = jnp.min(jnp.where(best == jnp.max(best), flat, nb * mb))
        at = jnp.where(first_nan < nb * mb, first_nan, first_max)
        # the chosen block's five values by their index: five loads, not five passes over the block arrays
        top, pixel, g, old, lip = (r[at // mb, at % mb] for r in (best_ref, pixel_ref, g_ref, x_ref, l_ref))
        live = ints_ref[0] != 0
        if check:  # a trip's later iteration (k >= 1): it waits where a refresh is due, which covers
            # "done" too (the best step <= tolerance on an exact map)
            live = live & ~refresh_due(top, k, tol, refresh_every)
        new = jnp.where(live & (ints_ref[3] == 0), greedy.proximal_step(g, old, lip, lam, alpha), old)
        d = new - old
        change = greedy.objective_change(g, old, new, lip, lam, alpha)
        i, j = pixel // mp, pixel % mp
        first = greedy.first_touched(greedy.window_start(i, j, geo), geo)
        for n, v in enumerate((i, j, first[0], first[1], live.astype(jnp.int32))):
            ints_out[n] = v
        for n, v in enumerate((d, new, -lip, lip, fun + change)):
            f_out[n] = v.astype(f_out.dtype)
        for n in range(5, 8):
            ints_out[n] = jnp.int32(0)
            f_out[n] = jnp.zeros((), f_out.dtype)

        @pl.when(live)
        def _():
            trace_out[k] = (fun + change).astype(trace_out.dtype)
            steps_out[k] = jnp.abs(d).astype(steps_out.dtype)

    return body


def _triton_load_store() -> tuple[Callable[..., jax.Array], Callable[..., None]] | None:
    """Triton's load and store (masks, cache hints), or None in a JAX without them."""
    try:
        from jax.experimental.pallas import triton as plgpu

        return plgpu.load, plgpu.store
    except (ImportError, AttributeError):
        return None


def _masked_load() -> Callable[..., jax.Array] | None:
    """Triton's masked load (no memory request where the mask is off), or None in a JAX without it
    (then the model is read in full: the same values)."""
    triton = _triton_load_store()
    return triton[0] if triton is not None else None


def _streaming(interpret: bool) -> tuple[Callable[..., jax.Array], Callable[..., None]]:
    """``(load(ref), store(ref, value))`` for the update's three image-sized streams (the map read,
    the autocorrelation window read, the map written), each read or written once an iteration:
    Triton's ``evict_first`` hint on all three.  At 4096^2 on an H200 it ran 10 000 iterations
    ~0.01 s faster (on the loads alone 0.02 s slower, on the store alone no faster); on an H100
    no faster, no slower (docs/benchmarks.md).  Plain indexing in interpret mode (the hint is
    Triton's; there the kernel keeps the XLA form's values bit for bit on a CPU) and in a JAX
    without Triton's load and store."""
    triton = None if interpret else _triton_load_store()
    if triton is None:
        def plain_store(ref: Any, value: jax.Array) -> None:
            ref[...] = value

        return (lambda ref: ref[...]), plain_store
    load, store = triton
    return (lambda ref: load(ref, eviction_policy="evict_first"),
            lambda ref, value: store(ref, value, eviction_policy="evict_first"))


def _update_kernel(geo: greedy.Geometry, off: tuple[int, int], lam: float, alpha: float,
                   constant: bool, interpret: bool = False) -> Callable[..., None]:
    """The kernel body of :func:`update_and_rescan`: one program per touched block, ``off`` the
    autocorrelation's index of lag 0 (``half + pad``); ``constant``: one L, block marks."""
    from jax.experimental import pallas as pl

    b1, b2 = geo.block
    mp = geo.padded[1]
    masked_load = _masked_load()
    stream_load, stream_store = _streaming(interpret)

    def update_block(frame, ints_ref, f_ref, g_ref, x_ref, l_ref, k_ref, *refs):  # noqa: ANN001, ANN202
        # l_ref/l_out: the signed Lipschitz map, or the block marks (constant L)
        best_out, pixel_out, bg_out, bx_out, bl_out = refs[-5:]
        g_out, x_out, l_out = refs[5:8]
        bi, bj, r0, c0, rows, cols, rr, cc, inside = frame
        pi, pj = ints_ref[0], ints_ref[1]
        g = stream_load(g_ref.at[rows, cols])
        if constant:
            lip_t = f_ref[3]
            maybe = jnp.broadcast_to(l_ref[bi, bj] != 0, (b1, b2))  # the block's mark: load x or not at all
        else:
            lraw = l_ref[rows, cols]
            lip_t = jnp.abs(lraw)
            maybe = lraw < 0
        if masked_load is not None:
            xv = masked_load(x_ref.at[rows, cols], mask=maybe, other=0.0)
        else:
            xv = jnp.where(maybe, x_ref[rows, cols], 0.0)
        xv = jnp.where((rr == pi) & (cc == pj), f_ref[1], xv)  # the changed pixel's new value
        ac = stream_load(k_ref.at[pl.ds(r0 - pi + off[0], b1), pl.ds(c0 - pj + off[1], b2)])
        # The XLA form changes only the image's pixels (never the padding up to whole blocks).
        g = jnp.where(inside, g - f_ref[0] * ac, g)
        stream_store(g_out.at[rows, cols], g)
        new = greedy.proximal_step(g, xv, lip_t, lam, alpha)
        score = jnp.where(inside, jnp.abs(new - xv), -1.0)
        best = jnp.max(score)
        flat = (rr - r0) * b2 + (cc - c0)
        local = jnp.min(jnp.where(score == best, flat, b1 * b2))
        at = flat == local
        best_out[bi, bj] = best
        pixel_out[bi, bj] = (r0 + local // b2) * mp + c0 + local % b2
        bg_out[bi, bj] = jnp.sum(jnp.where(at, g, 0.0))
        bx_out[bi, bj] = jnp.sum(jnp.where(at, xv, 0.0))
        bl_out[bi, bj] = lip_t if constant else jnp.sum(jnp.where(at, lip_t, 0.0))

        @pl.when((pi >= r0) & (pi < r0 + b1) & (pj >= c0) & (pj < c0 + b2))
        def _():  # the program that holds (i, j) writes it; no other reads it
            x_out[pi, pj] = f_ref[1]
            if constant:
                l_out[bi, bj] = jnp.int32(1)
            else:
                l_out[pi, pj] = f_ref[2]

    return greedy.live_programs(update_block, geo)
