"""The two passes of an L-BFGS iteration over the pair buffer as fused Pallas (Triton) kernels.

An iteration of :class:`~multiwalk.solvers.lbfgs.LBFGS` (compact representation, ``H0 = gamma I``)
is memory-bound for large ``n``: it reads the ``2m`` stored vectors ``P = [S; Y]`` (2m, n) twice.

* pass A (:func:`pair_products`): ``P [gt, y]`` with ``y = gt - g`` formed on the fly, and the
  dot products ``s'y, y'y, y'gt, gt'gt, xt'xt`` (``s = stp d``) in the same sweep - the XLA form
  does these as several reductions, each re-reading its vectors;
* pass B (:func:`direction_and_store`): the new direction ``d = -gamma gt + sum_r w_r P_r +
  w_s s + w_y y`` and the new pair ``s, y`` written into ``P``'s slot (aliased in place).

Both passes skip the rows of the slot the new pair replaces (their products are discarded, their
coefficient is zero) and the rows not yet filled: a masked load issues no memory request.  Per
iteration with one evaluation (docs/benchmarks.md, "Vector traffic per iteration"): pass A reads
the ``2m - 2`` kept rows and ``gt, g, d, x`` and writes the accepted point ``x + stp d`` (17 n at
m = 7), pass B reads the same rows and ``gt, g, d`` and writes ``d``, ``s``, ``y`` and the copy of
``gt`` into ``g`` (19 n); cute's one-pass evaluation reads ``x, d`` and writes ``g`` (3 n, no
trial point): 39 n in all, against the floor's ``(4m + 10) n = 38 n`` that ``benchmarks/lbfgs.py``
divides by the measured bandwidth.  (:mod:`~multiwalk.solvers.lbfgs_onepass` reads the rows once
per evaluation instead.)

Reductions are two-stage: each program (``block`` columns; pass A ``block x chunks``) writes its partial sums, XLA sums
the (programs, 64) table.  So sums are folded in another order than XLA's: iterates agree with
the XLA form up to rounding.  Off GPUs the kernels run in Pallas' interpret mode (tests only).

One problem split along ``n`` over a mesh (``mw.solve(..., devices=k)``): :func:`pair_products_split`
and :func:`direction_and_store_split` run each pass as a :func:`jax.shard_map` over the mesh
axis, the kernel on every device's columns, and a ``lax.psum`` of pass A's ``4m + 5`` sums (a
few hundred bytes); the ``n``-sized arrays never leave their device.  The sums are then folded
per device and across devices: the iterates equal the one-device run's up to rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .. import distributed as dist
from ..kernels import KERNELS, KernelPlan, backend, compiler_params, pallas_plan, xla_plan

__all__ = [
    "KERNELS", "KernelPlan", "plan", "pair_products", "direction_and_store", "pair_products_split",
    "direction_and_store_split", "DEFAULT_BLOCK", "DEFAULT_WARPS", "PASS_A_CHUNKS",
    "PASS_A_BLOCK", "PASS_A_WARPS", "PASS_A_STAGES",
]

# Launches tuned by measurement (docs/benchmarks.md): whole solves faster with these than with
# 1024 x 4 for both passes, at the same iterations, evaluations and status.
DEFAULT_BLOCK = 512  # pass B's columns per program (a power of two): faster per call than 1024
DEFAULT_WARPS = 4
# pass A (pair_products) alone: block, warps, blocks of columns per program, pipeline stages.
# 8 blocks of 256 per program: each program folds its 33 sums across warps once per 2048 columns,
# not once per block (measured faster than one block of 1024: docs/benchmarks.md, L-BFGS)
PASS_A_BLOCK = 256
PASS_A_WARPS = 4
PASS_A_CHUNKS = 8
PASS_A_STAGES = 1
_WIDTH = 64  # partial sums per program in pass A's table: 2 x 2m products + 5 dot products <= 64
_WHAT = "the Pallas kernels"  # two passes, so the plan's reasons speak of kernels
_GPU_BACKENDS = ("gpu", "cuda")  # the passes load and store through Triton's CUDA path (ROCm never tried)


def plan(kernel: str, m: int, starts: int, diag: bool, devices: int = 1) -> KernelPlan:
    """How ``LBFGS(kernel=kernel)`` runs: ``"xla"``; ``"auto"``: the kernels on GPUs for one start
    with ``H0 = gamma I``, else XLA; ``"pallas"``: the kernels (interpret mode off
    GPUs) where they apply.  Several starts and a user ``diag`` run the XLA form.  ``devices``:
    how many devices one problem is split over along ``n``: the kernels then run split
    (:func:`pair_products_split`), under ``"auto"`` too (faster per iteration than the XLA form;
    docs/benchmarks.md, scaling)."""
    if kernel == "xla":
        return KernelPlan(False, False, "kernel='xla' was asked for")
    name, on_gpu = backend(_GPU_BACKENDS)
    if starts > 1:
        return KernelPlan(False, False, f"{starts} starts run in lockstep by the XLA form (the kernels serve one problem)")
    decided = xla_plan(kernel, name, on_gpu, _WHAT)
    if decided is not None:
        return decided
    if diag:
        return KernelPlan(False, False, "a user diag runs the two-loop recursion (XLA form)")
    if 4 * m + 5 > _WIDTH:
        return KernelPlan(False, False, f"m={m} is above the kernels' {(_WIDTH - 5) // 4}; using the XLA form")
    split = (
        f", split along n over {devices} devices (each pass a shard_map of the kernel on every device's columns, "
        "its small sums added by psum)" if devices > 1 else ""
    )
    return pallas_plan(kernel, name, on_gpu, "the fused Pallas passes", detail=split, split=devices > 1)


def _loader(interpret: bool):  # noqa: ANN202
    """``(load, store)`` taking ``mask=None`` for "every lane" (no predicate, so full-width loads)."""
    from jax.experimental.pallas import triton as plgpu

    def load(ref, mask=None, other=0.0):  # noqa: ANN001, ANN202
        return plgpu.load(ref) if mask is None else plgpu.load(ref, mask=mask, other=other)

    def store(ref, val, mask=None):  # noqa: ANN001, ANN202
        return plgpu.store(ref, val) if mask is None else plgpu.store(ref, val, mask=mask)

    return load, store


def _stored_row(r: int, m: int, slot: jax.Array, count: jax.Array) -> jax.Array:
    """Whether row ``r`` of the pair buffer (S rows 0..m-1, Y rows m..2m-1) holds a stored pair:
    its ring age (1 = the newest stored pair, ...; 0 = ``slot``, which the new pair replaces)
    is between 1 and ``count``."""
    age = jax.lax.rem(slot + jnp.int32(m - r % m), jnp.int32(m))
    return (age >= 1) & (age <= count)


def _inside(c0: jax.Array, block: int, n: int) -> jax.Array | None:
    """Lanes of the program starting at column ``c0`` that lie inside ``n``; None when ``block``
    divides ``n`` (known while tracing): then no lane is ever outside and loads need no mask."""
    if n % block == 0:
        return None
    return c0 + jax.lax.broadcasted_iota(jnp.int32, (block,), 0) < n


def _gradient_views(gt_ref, g_ref, new):  # noqa: ANN001, ANN202
    """``(gt_at, g_at)``: column views ``cols -> ref`` of the new and the previous gradient; with
    ``new`` (a row index) both refs are the same (2, n) buffer, gt its row ``new``, g the other."""
    if new is None:
        return (lambda cols: gt_ref.at[cols]), (lambda cols: g_ref.at[cols])
    return (lambda cols: gt_ref.at[new, cols]), (lambda cols: g_ref.at[1 - new, cols])


def _and(inside: jax.Array | None, keep: jax.Array, block: int) -> jax.Array:
    return jnp.broadcast_to(keep, (block,)) if inside is None else inside & keep


def pair_products(
    P: jax.Array, gt: jax.Array, g: jax.Array, d: jax.Array, xt: jax.Array | None, stp: jax.Array,
    slot: jax.Array, count: jax.Array, x: jax.Array, *, block: int = PASS_A_BLOCK, num_warps: int = PASS_A_WARPS,
    interpret: bool = False, chunks: int = PASS_A_CHUNKS, num_stages: int = PASS_A_STAGES, new: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Pass A: ``(P gt, P y, [s'y, y'y, y'gt, gt'gt, xt'xt], x_new)`` with ``y = gt - g``, ``s = stp d``.

    ``x_new`` is ``xt`` written into the buffer of the old iterate ``x`` (aliased): inside the
    solver's loop the new iterate must land in the loop's own buffer, and writing it here (n
    values) replaces the copy XLA would otherwise make (n read + n written).  ``xt=None``: the
    kernel forms ``x_new = x + stp d`` itself from ``x`` and the ``d`` it reads anyway, so the
    line search's evaluations need not write their trial points (n values each).

    ``P`` (2m, n) in ring order; rows of ``slot`` (``slot`` and ``m + slot``) and of unfilled
    slots (ring position ``>= count`` counted back from ``slot``) are not read: their products
    are returned as 0 (the caller overwrites or ignores them).  Shapes (2m,), (2m,), (5,).

    ``chunks``: each program sweeps ``chunks`` consecutive blocks of ``block`` columns, adding
    the products lane by lane, and folds its ``4m + 5`` sums across lanes once at the end (each
    fold is a cross-warp reduction through shared memory and a barrier; with ``chunks = 1`` a
    program folds ``4m + 5`` sums per ``block`` columns).  ``num_stages``: Triton's software
    pipelining of that loop's loads (1: none).

    ``new`` (int scalar): ``gt`` and ``g`` are one (2, n) buffer of gradients, ``gt`` its row
    ``new`` and ``g`` the other (the solver's loop evaluates into the row of the older gradient,
    so the new one is never copied)."""
    from jax.experimental import pallas as pl

    two_m, n = P.shape
    dt = P.dtype
    span = block * chunks  # columns per program
    programs = pl.cdiv(n, span)
    rows = new is not None  # gt, g: rows new and 1 - new of one (2, n) buffer
    ints = jnp.stack([slot, count, new if rows else jnp.zeros((), jnp.int32)]).astype(jnp.int32)
    stp = jnp.reshape(stp, (1,)).astype(dt)
    recompute = xt is None
    body = _pair_products_kernel(two_m, n, dt, block, chunks, recompute, rows, interpret)

    params = _pass_a_params(num_warps, num_stages, interpret)
    partial, x_new = pl.pallas_call(
        body, out_shape=(jax.ShapeDtypeStruct((programs, _WIDTH), dt), jax.ShapeDtypeStruct((n,), dt)),
        grid=(programs,), interpret=interpret, input_output_aliases={6 if recompute else 7: 1},
        name="lbfgs_pair_products", **params,
    )(ints, stp, P, gt, g, d, *([x] if recompute else [xt, x]))
    total = jnp.sum(partial, axis=0)
    return total[:two_m], total[two_m : 2 * two_m], total[2 * two_m : 2 * two_m + 5], x_new


def _pass_a_params(num_warps: int, num_stages: int, interpret: bool) -> dict[str, Any]:
    """``pallas_call`` keywords of pass A: :func:`~multiwalk.kernels.compiler_params`, with
    ``num_stages`` of software pipelining when it is not 1."""
    params = compiler_params(num_warps, interpret)
    if params and num_stages != 1:
        from jax.experimental.pallas import triton as plgpu

        params = {"compiler_params": plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages)}
    return params


def _pair_products_kernel(two_m: int, n: int, dt: Any, block: int, chunks: int, recompute: bool, rows: bool,
                          interpret: bool) -> Callable[..., None]:
    """The kernel body of :func:`pair_products`: each program sweeps ``chunks`` blocks of ``block``
    of the ``n`` columns and writes its ``(_WIDTH,)`` partial sums (``recompute``: the trial point
    is ``x + stp d``; ``rows``: ``gt`` and ``g`` are rows of one buffer)."""
    from jax.experimental import pallas as pl

    m = two_m // 2
    span = block * chunks  # columns per program
    load, store = _loader(interpret)
    products = 2 * two_m + 5  # P gt, P y, then s'y, y'y, y'gt, gt'gt, xt'xt

    def body(ints_ref, stp_ref, p_ref, gt_ref, g_ref, d_ref, *refs):  # noqa: ANN001
        x_ref, out_ref, x_out = (refs[0], refs[1], refs[2]) if recompute else (refs[0], refs[2], refs[3])
        pid = pl.program_id(0)
        sl, cnt = ints_ref[0], ints_ref[1]
        stored = [_stored_row(r, m, sl, cnt) for r in range(two_m)]
        gt_at, g_at = _gradient_views(gt_ref, g_ref, ints_ref[2] if rows else None)

        def sweep(k, acc):  # noqa: ANN001, ANN202 - one block of columns; acc: the products so far
            c0 = (pid * chunks + k) * block
            cols = pl.ds(c0, block)
            inside = _inside(c0, block, n) if chunks == 1 else (
                None if n % span == 0 else c0 + jax.lax.broadcasted_iota(jnp.int32, (block,), 0) < n)
            gtv = load(gt_at(cols), mask=inside, other=0.0)
            y = gtv - load(g_at(cols), mask=inside, other=0.0)
            s = stp_ref[0] * load(d_ref.at[cols], mask=inside, other=0.0)
            xv = load(x_ref.at[cols], mask=inside, other=0.0)
            if recompute:  # the trial point the line search accepted (trial_point's x + stp d)
                xv = xv + s
            store(x_out.at[cols], xv, mask=inside)
            new = []
            for r in range(two_m):
                p = load(p_ref.at[jnp.int32(r), cols], mask=_and(inside, stored[r], block), other=0.0)
                new.append((p * gtv, p * y))
            terms = [a for a, _ in new] + [b for _, b in new] + [s * y, y * y, y * gtv, gtv * gtv, xv * xv]
            return tuple(terms) if acc is None else tuple(a + t for a, t in zip(acc, terms))

        if chunks == 1:
            acc = sweep(0, None)
        else:
            zero = jnp.zeros((block,), dt)
            acc = jax.lax.fori_loop(0, chunks, sweep, (zero,) * products)
        lane = jax.lax.broadcasted_iota(jnp.int32, (_WIDTH,), 0)
        out = jnp.zeros((_WIDTH,), dt)
        for i, v in enumerate(acc):
            out = jnp.where(lane == i, jnp.sum(v), out)
        out_ref[pid, :] = out

    return body


def direction_and_store(
    P: jax.Array, w: jax.Array, gamma: jax.Array, stp: jax.Array, gt: jax.Array, g: jax.Array, d: jax.Array,
    slot: jax.Array, count: jax.Array, *, block: int = DEFAULT_BLOCK, num_warps: int = DEFAULT_WARPS,
    interpret: bool = False, new: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Pass B: ``(d_new, P_new, g_new)``: ``d_new = -gamma gt + sum_{r stored} w_r P_r + w[slot] s + w[m+slot] y``
    with ``s = stp d``, ``y = gt - g``, ``P_new`` = ``P`` with ``s, y`` in rows ``slot, m+slot``,
    and ``g_new = gt``.  ``d_new`` and ``g_new`` are written into the buffers of ``d`` and ``g``
    (aliased), so in the solver's loop they need no copy into the loop's buffers.

    ``w`` (2m,) in ring order, its ``slot`` entries the new pair's coefficients; ``count`` pairs
    were stored before this one (rows of unfilled slots are not read).  ``P`` is updated in place
    (aliased): each program reads its columns of the old rows before writing its new ones.

    ``new`` (int scalar): ``gt`` and ``g`` are one (2, n) buffer of gradients (rows ``new`` and
    ``1 - new``, as in :func:`pair_products`); ``gt`` is then not copied anywhere (n values
    fewer) and that buffer is returned unchanged as ``g_new`` (the caller's next ``g`` is its
    row ``new``)."""
    from jax.experimental import pallas as pl

    two_m, n = P.shape
    m = two_m // 2
    dt = P.dtype
    programs = pl.cdiv(n, block)
    load, store = _loader(interpret)
    rows = new is not None
    ints = jnp.stack([slot, count, new if rows else jnp.zeros((), jnp.int32)]).astype(jnp.int32)
    floats = jnp.stack([gamma, stp]).astype(dt)
    w = w.astype(dt)

    def body(ints_ref, f_ref, w_ref, p_ref, gt_ref, g_ref, d_ref, d_out, p_out, *g_out):  # noqa: ANN001
        pid = pl.program_id(0)
        c0 = pid * block
        cols = pl.ds(c0, block)
        inside = _inside(c0, block, n)
        sl, cnt = ints_ref[0], ints_ref[1]
        gt_at, g_at = _gradient_views(gt_ref, g_ref, ints_ref[2] if rows else None)
        gtv = load(gt_at(cols), mask=inside, other=0.0)
        acc = -f_ref[0] * gtv
        for r in range(two_m):
            p = load(p_ref.at[jnp.int32(r), cols], mask=_and(inside, _stored_row(r, m, sl, cnt), block), other=0.0)
            acc = acc + w_ref[r] * p
        s = f_ref[1] * load(d_ref.at[cols], mask=inside, other=0.0)
        y = gtv - load(g_at(cols), mask=inside, other=0.0)
        acc = acc + w_ref[sl] * s + w_ref[m + sl] * y
        store(d_out.at[cols], acc, mask=inside)
        if not rows:  # the new gradient into the loop's g buffer (with rows it is already there)
            store(g_out[0].at[cols], gtv, mask=inside)
        store(p_out.at[sl, cols], s, mask=inside)
        store(p_out.at[m + sl, cols], y, mask=inside)

    vec = jax.ShapeDtypeStruct((n,), dt)
    if rows:
        d_new, P_new = pl.pallas_call(
            body, out_shape=(vec, jax.ShapeDtypeStruct(P.shape, dt)), grid=(programs,),
            interpret=interpret, input_output_aliases={3: 1, 6: 0}, name="lbfgs_direction_and_store",
            **compiler_params(num_warps, interpret),
        )(ints, floats, w, P, gt, g, d)
        return d_new, P_new, g
    return pl.pallas_call(
        body, out_shape=(vec, jax.ShapeDtypeStruct(P.shape, dt), vec), grid=(programs,),
        interpret=interpret, input_output_aliases={3: 1, 5: 2, 6: 0}, name="lbfgs_direction_and_store",
        **compiler_params(num_warps, interpret),
    )(ints, floats, w, P, gt, g, d)


# --------------------------------------------------------------------------------------------------
# one problem split along n over devices
# --------------------------------------------------------------------------------------------------


# jax.shard_map without the replication check: the outputs declared whole are psums
_shard_map = dist.shard_map_unchecked


def _specs(mesh: Any) -> tuple[Any, Any, Any, str]:
    """``(columns of a vector, columns of P, whole, axis name)`` for the mesh's one axis."""
    from jax.sharding import PartitionSpec

    (axis,) = mesh.axis_names
    return PartitionSpec(axis), PartitionSpec(None, axis), PartitionSpec(), axis


def pair_products_split(
    mesh: Any, P: jax.Array, gt: jax.Array, g: jax.Array, d: jax.Array, xt: jax.Array, stp: jax.Array,
    slot: jax.Array, count: jax.Array, x: jax.Array, *, block: int = PASS_A_BLOCK, num_warps: int = PASS_A_WARPS,
    interpret: bool = False, chunks: int = PASS_A_CHUNKS, num_stages: int = PASS_A_STAGES,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """:func:`pair_products` of one problem split along ``n`` over ``mesh`` (1-D): the kernel on each
    device's columns (``n / devices`` of them; ``P``'s second axis and the vectors split alike),
    its ``4m + 5`` sums added over devices (``lax.psum``); ``x_new`` stays split."""
    vec, mat, whole, axis = _specs(mesh)

    def local(P, gt, g, d, xt, stp, slot, count, x):  # noqa: ANN001, ANN202
        pg, py, dots, x_new = pair_products(
            P, gt, g, d, xt, stp, slot, count, x, block=block, num_warps=num_warps, interpret=interpret,
            chunks=chunks, num_stages=num_stages,
        )
        pg, py, dots = jax.lax.psum((pg, py, dots), axis)
        return pg, py, dots, x_new

    f = _shard_map(
        local, mesh, (mat, vec, vec, vec, vec, whole, whole, whole, vec), (whole, whole, whole, vec)
    )
    return f(P, gt, g, d, xt, stp, slot, count, x)


def direction_and_store_split(
    mesh: Any, P: jax.Array, w: jax.Array, gamma: jax.Array, stp: jax.Array, gt: jax.Array, g: jax.Array,
    d: jax.Array, slot: jax.Array, count: jax.Array, *, block: int = DEFAULT_BLOCK, num_warps: int = DEFAULT_WARPS,
    interpret: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """:func:`direction_and_store` of one problem split along ``n`` over ``mesh``: purely columnwise,
    so each device runs the kernel on its columns with no communication (``w``, ``gamma``,
    ``stp``, ``slot``, ``count`` are whole on every device)."""
    vec, mat, whole, _ = _specs(mesh)

    def local(P, w, gamma, stp, gt, g, d, slot, count):  # noqa: ANN001, ANN202
        return direction_and_store(
            P, w, gamma, stp, gt, g, d, slot, count, block=block, num_warps=num_warps, interpret=interpret
        )

    f = _shard_map(local, mesh, (mat, whole, whole, whole, vec, vec, vec, whole, whole), (vec, mat, vec))
    return f(P, w, gamma, stp, gt, g, d, slot, count)
