"""L-BFGS with ONE memory pass per line-search evaluation (``LBFGS(kernel="onepass")``).

The fused form of :class:`~multiwalk.solvers.lbfgs.LBFGS` (two Pallas passes per iteration,
:mod:`~multiwalk.solvers.lbfgs_kernel`) reads the ``2m`` stored vectors twice per iteration:
pass A for ``[S Y]'g`` and pass B for the direction ``d = -gamma g + w @ [S; Y]``.  But ``d`` is a
linear combination of rows that the products read anyway, so here ONE kernel per evaluation
(:func:`line_pass`), per column block:

* loads ``x``, the ``m`` stored steps ``s_i`` and the ``m + 1`` gradients ``g_{k-m} .. g_k``
  (``y_i = g_{i+1} - g_i`` formed in registers: bit for bit the fused form's stored ``y``);
* forms ``d = -gamma g + sum ws_i s_i + sum wy_i y_i`` (the coefficients of
  :func:`~multiwalk.solvers.lbfgs_common.compact_coefficients`), ``s_t = stp d``, ``x_t = x + s_t``;
* evaluates f and g at ``x_t`` by the problem's BLOCK-LOCAL hook (``value_and_grad.block``, a
  function of a ``(rows, width)`` block of ``x_t``: cute's Extended Rosenbrock has one), ``y_t = g_t - g``;
* writes ``x_t``, ``g_t``, ``s_t`` into SPARE rows of three rings, and per-program partial sums of
  f, ``g_t'd``, ``S'g_t``, ``Y'g_t``, ``S'y_t``, ``Y'y_t`` (the window before this pair: what the
  fused form's pass A gives), ``s_t'y_t``, ``y_t'y_t``, ``y_t'g_t``, ``g_t'g_t``, ``x_t'x_t``.

``d`` is never stored.  The rings (``X`` 2 rows, ``G`` m + 2, ``S`` m + 1) are indexed by the
iteration count ``k``: ``x_k`` is row ``k % 2`` of ``X``, ``g_j`` row ``j % (m + 2)`` of ``G``, pair
``i``'s step row ``i % (m + 1)`` of ``S``.  When the line search accepts (``info == 1``) the spare
rows become the newest by ``k + 1`` alone (no copies), and the small matrices are updated with
the formulas of :func:`~multiwalk.solvers.lbfgs.iteration.finish_fused`; a rejected trial only
evaluates again with the new step.  The loop is ONE while loop over evaluations whose body
always computes the accepting branch and keeps it by selects (no ``cond``), the scalars packed.

Vector traffic per evaluation: ``(2m + 2) n`` read, ``3 n`` written: 19 n at ``m = 7``, against
~39 n per iteration (plus 3 n per extra evaluation) of the two-pass form.  A solve is bound by
that traffic, so reading the pairs once per evaluation is what makes this form faster.

The rings are stored as ``(rows, n / width, width)``: a row of the problem's block hook (``width``
coordinates it evaluates together, 2 for Rosenbrock) never straddles two devices.  One problem
split along ``n`` over the driver's mesh (``mw.solve(..., devices=k)``) splits that middle axis:
:func:`line_pass_split` runs the kernel under :func:`jax.shard_map` on every device's rows (the
rows per device need not fill whole programs: masked as on one device), folds its per-program
sums locally and adds the ``(64,)`` sums over devices by ``lax.psum`` (512 bytes per evaluation
in float64); the line search, the small matrices and the coefficients are computed on every
device alike (replicated).  No ``n``-sized array leaves its device.  The sums are folded per
device, then across devices: the iterates equal the one-device run's up to rounding.

Scope: one start, ``H0 = gamma I``, float32 / float64, a problem whose ``value_and_grad`` carries
``.block`` (:func:`block_hook`); split over ``k`` devices when ``n / width`` is a multiple of ``k``
(else the driver runs it on one device, or refuses an explicit ``devices=k``, saying so).
Anything else runs the fused two-pass form (:func:`plan` says why).  A checkpoint of a onepass
run holds the rings, not ``P``: it resumes with ``kernel="onepass"`` only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ..kernels import backend, compiler_params
from ._common import worst_if_nonfinite
from .lbfgs_common import (
    _INFO_TO_STATUS,
    _RUNNING,
    LBFGSStatus,
    _pack,
    _scalar_layout,
    _solve_upper,
    _unpack,
    compact_coefficients,
    store_in_ring,
)

__all__ = [
    "OnePassState", "OnePassPlan", "plan", "block_hook", "line_pass", "line_pass_split", "to_onepass", "run_chunk",
    "compiler_options",
    "ROWS", "WARPS", "CHUNKS", "SMALL_ORDER", "COMMAND_BUFFERS",
]

# Launch: rows of (rows, width) blocks per program step, warps, steps per program.  Small blocks:
# each thread holds 4m + 7 running sums plus 2m + 2 loaded rows (register pressure: larger blocks
# spill and were slower on a GPU).  One warp: its sums fold by shuffles, no shared memory.
ROWS = 32
WARPS = 1
CHUNKS = 32
_WIDTH = 64  # partial sums per program (4m + 7 <= 64: m <= 14)
# Where the small matrices (SY, YY, a, b) keep the pairs: "chronological" (oldest first, the
# newest pair in the last row and column, unused positions first; the accepting branch shifts
# by one: every index static) or "ring" (the two-pass state's slots, ``head`` the next one: the
# accepting branch gathers and scatters at ``head``).  Read while tracing.  Chronological is the
# default: with every index static the scalar work per evaluation outside the line-search kernel
# is cheaper on a GPU, with the same iterations, evaluations and f.
SMALL_ORDER = "chronological"
# The chunk's XLA command-buffer types on a GPU (``xla_gpu_enable_command_buffer``; None: XLA's
# default, which has no WHILE).  "FUSION,CUSTOM_CALL,WHILE,CONDITIONAL" makes the while loop over
# evaluations one CUDA graph with conditional nodes (no host round trip of its condition, no
# launches per evaluation): the loop alone is faster, but whole solves (the driver's chunks) were
# not clearly faster on a GPU, so it is not the default.  The loop has fusions and one Triton
# custom call only (no cuBLAS / cuDNN).
COMMAND_BUFFERS: str | None = None
_DTYPES = ("float32", "float64")


class OnePassState(NamedTuple):
    """One L-BFGS problem in ring form (see the module docstring); every leaf has a leading axis 1
    in ``LBFGSRun.starts``, as the two-pass state's.  ``w`` (2m,): the current direction's
    coefficients in the small matrices' ring order (``compact_coefficients``)."""

    X: jax.Array  # (2, n / width, width): x_k in row k % 2, the trial point in the other
    G: jax.Array  # (m + 2, n / width, width): g_j in row j % (m + 2)
    S: jax.Array  # (m + 1, n / width, width): pair i's step in row i % (m + 1)
    w: jax.Array  # (2m,)
    f: jax.Array
    SY: jax.Array  # (m, m), YY, a, b: as LBFGSState
    YY: jax.Array
    a: jax.Array
    b: jax.Array
    gamma: jax.Array
    gg: jax.Array
    head: jax.Array
    count: jax.Array
    ls: Any  # LineSearchState
    iteration: jax.Array
    nfev: jax.Array
    gnorm: jax.Array
    xnorm: jax.Array
    stp: jax.Array
    status: jax.Array
    nonfinite: jax.Array  # () int32, as LBFGSState's


class OnePassPlan(NamedTuple):
    use: bool
    interpret: bool
    reason: str


def block_hook(problem: Any) -> Callable | None:
    """The problem's block-local evaluation ``block(xb) -> (f terms (rows,), g (rows, width))`` for a
    ``(rows, width)`` block of consecutive coordinates (``block.width``), usable inside a Pallas
    kernel (``value_and_grad.block``, e.g. cute's Extended Rosenbrock); None without one, or when
    fixed parameters or ``args`` stand between the solver's ``x`` and the user's."""
    block = getattr(problem._user_vg, "block", None)
    if block is None or problem.fixed or problem._takes_args or not isinstance(getattr(block, "width", None), int):
        return None
    return block


def plan(kernel: str, problem: Any, starts: int, diag: bool, devices: int = 1, m: int = 7,
         requested: int | None = None) -> OnePassPlan:
    """Whether ``LBFGS(kernel=kernel)`` runs the one-pass loop on ``problem``, and why (not).

    ``"onepass"`` asks for it (interpret mode off GPUs). ``"auto"`` takes it on GPUs in float64
    only, where it was faster than the two-pass form with the same iterations, evaluations and
    status; in float32 its summation order can cost an iteration near the end (float32 sums over n
    terms cannot resolve the last decreases), so float32 keeps the two-pass form. On a host of
    several devices ``"auto"`` takes it only where the driver's default split over all of them
    applies (``n / width`` a multiple of the device count): split, it moves 19 n per evaluation
    against the split two-pass form's ~39 n per iteration (not yet measured on GPUs). ``devices``:
    how many devices the run is split over (the reason says so); ``requested``: how many it may be
    split over (``solve(devices=k)``'s k, the run plan's ``devices``; None: every device), with
    which ``"auto"`` decides."""
    if kernel not in ("onepass", "auto"):
        return OnePassPlan(False, False, f"kernel={kernel!r}")
    name, on_gpu = backend(("gpu", "cuda"))
    block = block_hook(problem)
    dt = str(jnp.dtype(problem.dtype))
    why = None
    if kernel == "auto" and (not on_gpu or dt != "float64"):
        return OnePassPlan(False, False, "kernel='auto' takes the one-pass loop on GPUs in float64 only")
    if starts > 1:
        why = f"{starts} starts (the one-pass loop serves one problem)"
    elif diag:
        why = "a user diag (the one-pass loop uses H0 = gamma I)"
    elif block is None:
        why = ("the problem's value_and_grad has no block-local hook .block (cute's Extended Rosenbrock has one), "
               "or fixed parameters / args stand before it")
    elif problem.n_free % block.width:
        why = f"n = {problem.n_free} is not a multiple of the hook's block width {block.width}"
    elif dt not in _DTYPES:
        why = f"dtype {dt} (the one-pass kernel is for {' and '.join(_DTYPES)})"
    elif 4 * m + 7 > _WIDTH:
        why = f"m = {m} (its kernel's table holds 4 m + 7 <= {_WIDTH} sums: m <= {(_WIDTH - 7) // 4})"
    elif kernel == "auto" and (k := requested or jax.device_count()) > 1 and (problem.n_free // block.width) % k:
        why = (f"kernel='auto' on {k} devices takes it split over all of them only: n / "
               f"{block.width} = {problem.n_free // block.width} rows of the block hook is not a multiple of "
               f"{k} (the two-pass form splits n itself)")
    if why is not None:
        return OnePassPlan(False, False, f"kernel={kernel!r}: the one-pass loop not used: {why}")
    where = "on the GPU" if on_gpu else f"in interpret mode (backend: {name}; for tests, slow)"
    split = (f"split along n over {devices} devices (the kernel under shard_map on every device's rows, its "
             "sums added by psum)" if devices > 1 else "on one device")
    return OnePassPlan(True, not on_gpu, f"kernel={kernel!r}: one Pallas kernel per line-search evaluation {where}, "
                                         f"{split} (direction, trial point, f and g by value_and_grad.block, "
                                         "every product; d never stored)")


def compiler_options(op: OnePassPlan) -> dict[str, Any]:
    """XLA options for the driver's compiled one-pass chunk: :data:`COMMAND_BUFFERS` on a GPU, else none."""
    if not op.use or op.interpret or COMMAND_BUFFERS is None:
        return {}
    return {"xla_gpu_enable_command_buffer": COMMAND_BUFFERS}


# --------------------------------------------------------------------------------------------------
# the kernel
# --------------------------------------------------------------------------------------------------


def line_pass(
    X: jax.Array, G: jax.Array, S: jax.Array, ints: jax.Array, floats: jax.Array, block_fn: Callable, *,
    rows: int = ROWS, num_warps: int = WARPS, chunks: int = CHUNKS, interpret: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """One evaluation along the current direction: ``(X, G, S, sums)``, the rings with the trial's
    rows written (in place, aliased) and the ``(64,)`` sums.

    ``X`` (2, n), ``G`` (m + 2, n), ``S`` (m + 1, n), or each ``(rows, n / width, width)`` (the
    state's layout; returned in the layout given).  ``ints`` (6 + 2m,) int32: rows of ``x``, of
    the trial point, of ``g``, of the trial gradient, of the trial step, the stored pair count
    ``c``, then the ``S`` rows of the pairs of age 1..m (1 = newest) and the ``G`` rows of
    ``g_{k-1} .. g_{k-m}``.  ``floats`` (2 + 2m,): ``gamma``, ``stp``, then ``ws`` and ``wy`` by age.
    Rows of age above ``c`` are not read (masked loads issue no memory request).

    ``sums``: lanes ``0..m-1`` ``s_a'g_t`` by age, ``m..2m-1`` ``y_a'g_t``, ``2m..3m-1`` ``s_a'y_t``,
    ``3m..4m-1`` ``y_a'y_t``, then ``s_t'y_t, y_t'y_t, y_t'g_t, g_t'g_t, x_t'x_t, f, g_t'd``.
    ``block_fn``: ``(rows, width)`` block of ``x_t`` -> ``(f terms (rows,), g block)``; ``n`` a
    multiple of its ``width``.  Each program sweeps ``chunks`` blocks of ``rows`` rows, adding
    lane by lane, and folds its sums once (a cross-warp reduction per sum)."""
    from jax.experimental import pallas as pl

    width = block_fn.width
    flat = X.ndim == 2  # (rows, n): viewed as (rows, n / width, width) for the kernel
    pairs = X.shape[1] // width if flat else X.shape[1]
    if not flat and X.shape[2] != width:
        raise ValueError(f"line_pass: rings of shape {X.shape} have rows of {X.shape[2]}, not the hook's width {width}")
    m = S.shape[0] - 1
    if 4 * m + 7 > _WIDTH:
        raise ValueError(f"line_pass: m={m} needs {4 * m + 7} sums, above the table's {_WIDTH}")
    dt = X.dtype
    span = rows * chunks
    programs = pl.cdiv(pairs, span)
    body = _line_pass_kernel(block_fn, m, pairs, dt, rows, chunks)

    shapes = [jax.ShapeDtypeStruct((r.shape[0], pairs, width), dt) for r in (X, G, S)]
    X3, G3, S3, partial = pl.pallas_call(
        body, out_shape=(*shapes, jax.ShapeDtypeStruct((programs, _WIDTH), dt)), grid=(programs,),
        interpret=interpret, input_output_aliases={2: 0, 3: 1, 4: 2}, name="lbfgs_onepass",
        **compiler_params(num_warps, interpret),
    )(ints.astype(jnp.int32), floats.astype(dt), *(r.reshape(r.shape[0], pairs, width) for r in (X, G, S)))
    return X3.reshape(X.shape), G3.reshape(G.shape), S3.reshape(S.shape), jnp.sum(partial, axis=0)


def _load(ref: Any, mask: jax.Array | None) -> jax.Array:
    """A Triton load of ``ref``, masked (zeros where ``mask`` is off) unless ``mask`` is None."""
    from jax.experimental.pallas import triton as plgpu

    return plgpu.load(ref) if mask is None else plgpu.load(ref, mask=mask, other=0.0)


def _store(ref: Any, val: jax.Array, mask: jax.Array | None) -> None:
    """A Triton store of ``val`` into ``ref``, masked unless ``mask`` is None."""
    from jax.experimental.pallas import triton as plgpu

    return plgpu.store(ref, val) if mask is None else plgpu.store(ref, val, mask=mask)


def _line_pass_kernel(block_fn: Callable, m: int, pairs: int, dt: Any, rows: int,
                      chunks: int) -> Callable[..., None]:
    """The kernel body of :func:`line_pass`: each program sweeps ``chunks`` blocks of ``rows`` of the
    ``pairs`` rows of ``(pairs, width)`` rings and writes its ``(_WIDTH,)`` partial sums."""
    from jax.experimental import pallas as pl

    width = block_fn.width
    ragged = pairs % (rows * chunks) != 0  # known while tracing: no masks when the programs tile the rows

    def body(ints_ref, f_ref, x_ref, g_ref, s_ref, x_out, g_out, s_out, part_ref):  # noqa: ANN001
        pid = pl.program_id(0)
        xc, xt_row, gc, gt_row, st_row, cnt = (ints_ref[i] for i in range(6))
        s_rows = [ints_ref[6 + a] for a in range(m)]
        g_rows = [ints_ref[6 + m + a] for a in range(m)]
        stored = [jnp.int32(a + 1) <= cnt for a in range(m)]
        gamma, stp = f_ref[0], f_ref[1]
        ws = [f_ref[2 + a] for a in range(m)]
        wy = [f_ref[2 + m + a] for a in range(m)]

        def sweep(k, acc):  # noqa: ANN001, ANN202 - one block of rows; acc: the sums so far, lane by lane
            r0 = (pid * chunks + k) * rows
            blk = (pl.ds(r0, rows), pl.ds(jnp.int32(0), width))  # int32 indices also under jax_enable_x64
            inside = (r0 + lax.broadcasted_iota(jnp.int32, (rows, width), 0) < pairs) if ragged else None

            def keep(flag):  # noqa: ANN001, ANN202 - lanes inside n of a row that holds a stored pair
                full = jnp.broadcast_to(flag, (rows, width))
                return full if inside is None else inside & full

            def at(ref, row):  # noqa: ANN001, ANN202
                return ref.at[(row, *blk)]

            xv = _load(at(x_ref, xc), inside)
            g0 = _load(at(g_ref, gc), inside)
            ss, ys = [], []
            upper = g0  # g_{k-a+1}
            for a in range(m):
                ss.append(_load(at(s_ref, s_rows[a]), keep(stored[a])))
                lower = _load(at(g_ref, g_rows[a]), keep(stored[a]))
                ys.append(jnp.where(stored[a], upper - lower, 0.0))  # y of age a+1: 0 where none is stored
                upper = lower
            d = _direction(g0, ss, ys, gamma, ws, wy)
            s_t = stp * d
            x_t = xv + s_t
            terms_f, g_t = block_fn(x_t)
            if inside is not None:  # lanes past n loaded zeros: their f and g are not zero
                g_t = jnp.where(inside, g_t, 0.0)
                terms_f = jnp.where(r0 + lax.broadcasted_iota(jnp.int32, (rows,), 0) < pairs, terms_f, 0.0)
            y_t = g_t - g0
            _store(at(x_out, xt_row), x_t, inside)
            _store(at(g_out, gt_row), g_t, inside)
            _store(at(s_out, st_row), s_t, inside)
            terms = ([s * g_t for s in ss] + [y * g_t for y in ys] + [s * y_t for s in ss] + [y * y_t for y in ys]
                     + [s_t * y_t, y_t * y_t, y_t * g_t, g_t * g_t, x_t * x_t, terms_f, g_t * d])
            return tuple(terms) if acc is None else tuple(u + v for u, v in zip(acc, terms))

        if chunks == 1:
            acc = sweep(0, None)
        else:
            zero2, zero1 = jnp.zeros((rows, width), dt), jnp.zeros((rows,), dt)
            start = tuple([zero2] * (4 * m + 5) + [zero1, zero2])
            acc = lax.fori_loop(0, chunks, sweep, start)
        lane = lax.broadcasted_iota(jnp.int32, (_WIDTH,), 0)
        out = jnp.zeros((_WIDTH,), dt)
        for i, v in enumerate(acc):
            out = jnp.where(lane == i, jnp.sum(v), out)
        part_ref[pid, :] = out

    return body


def _direction(g: jax.Array, ss: list, ys: list, gamma: jax.Array, ws: list, wy: list) -> jax.Array:
    """``d = -gamma g + sum ws_a s_a + sum wy_a y_a`` on one block (the pairs by age), summed in that order."""
    d = -gamma * g
    for w_a, s_a in zip(ws, ss):
        d = d + w_a * s_a
    for w_a, y_a in zip(wy, ys):
        d = d + w_a * y_a
    return d


def line_pass_split(
    mesh: Any, X: jax.Array, G: jax.Array, S: jax.Array, ints: jax.Array, floats: jax.Array, block_fn: Callable,
    **launch: Any,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """:func:`line_pass` of one problem split along ``n`` over ``mesh`` (1-D): the rings (state layout
    ``(rows, n / width, width)``, their middle axis split over the mesh axis) stay on their
    devices; every device runs the kernel on its rows (``launch``: :func:`line_pass`'s keywords),
    folds its per-program sums, and the ``(64,)`` sums are added over devices (``lax.psum``, the
    only collective).  ``ints`` and ``floats`` are whole on every device."""
    from jax.sharding import PartitionSpec

    from .lbfgs_kernel import _shard_map

    (axis,) = mesh.axis_names
    ring = PartitionSpec(None, axis, None) if X.ndim == 3 else PartitionSpec(None, axis)
    whole = PartitionSpec()

    def local(X, G, S, ints, floats):  # noqa: ANN001, ANN202
        X, G, S, sums = line_pass(X, G, S, ints, floats, block_fn, **launch)
        return X, G, S, lax.psum(sums, axis)

    f = _shard_map(local, mesh, (ring, ring, ring, whole, whole), (ring, ring, ring, whole))
    return f(X, G, S, ints, floats)


def ring_rows(iteration: jax.Array, head: jax.Array, count: jax.Array, w: jax.Array, gamma: jax.Array,
              stp: jax.Array, m: int) -> tuple[jax.Array, jax.Array]:
    """``(ints, floats)`` of :func:`line_pass` for the state at iteration ``k`` (``head = k % m``)."""
    k = iteration.astype(jnp.int32)
    age = jnp.arange(1, m + 1, dtype=jnp.int32)
    ints = jnp.concatenate([
        jnp.stack([k % 2, (k + 1) % 2, k % (m + 2), (k + 1) % (m + 2), k % (m + 1), count.astype(jnp.int32)]),
        (k - age) % (m + 1), (k - age) % (m + 2),
    ])
    slot = (head.astype(jnp.int32) - age) % m  # the small matrices' slot of the pair of each age
    floats = jnp.concatenate([jnp.stack([gamma, stp]).astype(w.dtype), w[slot], w[m + slot]])
    return ints, floats


# --------------------------------------------------------------------------------------------------
# the loop
# --------------------------------------------------------------------------------------------------


class _Small(NamedTuple):
    """What :func:`~multiwalk.solvers.lbfgs_common.compact_coefficients` reads of a state."""

    SY: jax.Array
    YY: jax.Array
    a: jax.Array
    b: jax.Array
    gamma: jax.Array
    gg: jax.Array
    head: jax.Array
    count: jax.Array
    g: jax.Array  # only its dtype is used


def to_onepass(st: Any, m: int, width: int) -> OnePassState:
    """The ring form of a fresh two-pass state (one problem, no leading axis; before any pair):
    ``x`` and ``g`` into row 0 of ``X`` and ``G``, rings ``(rows, n / width, width)`` (``width``:
    the block hook's).  The first direction is ``-g`` (no pairs, gamma 1)."""
    n, dt = st.x.shape[0], st.x.dtype
    pairs = n // width
    return OnePassState(
        X=jnp.zeros((2, pairs, width), dt).at[0].set(st.x.reshape(pairs, width)),
        G=jnp.zeros((m + 2, pairs, width), dt).at[0].set(st.g.reshape(pairs, width)),
        S=jnp.zeros((m + 1, pairs, width), dt), w=jnp.zeros((2 * m,), dt), f=st.f, SY=st.SY, YY=st.YY, a=st.a, b=st.b,
        gamma=st.gamma, gg=st.gg, head=st.head, count=st.count, ls=st.ls, iteration=st.iteration, nfev=st.nfev,
        gnorm=st.gnorm, xnorm=st.xnorm, stp=st.stp, status=st.status, nonfinite=st.nonfinite,
    )


def _coefficients_chronological(small: _Small, m: int) -> tuple[jax.Array, jax.Array]:
    """:func:`~multiwalk.solvers.lbfgs_common.compact_coefficients` for small matrices in chronological
    order (:data:`SMALL_ORDER`): position ``m - 1`` the newest pair, the first ``m - count`` unused.
    The same formulas with the identity as the order: every index static.  ``w`` by position."""

    i = jnp.arange(m)
    valid = i >= m - small.count
    both = valid[:, None] & valid[None, :]
    R = jnp.where(both & (i[:, None] <= i[None, :]), small.SY, 0.0)
    R = R + jnp.diag(jnp.where(valid, 0.0, 1.0)).astype(R.dtype)  # identity on unused positions
    D = jnp.where(valid, jnp.diagonal(small.SY), 0.0)
    YY = jnp.where(both, small.YY, 0.0)
    a = jnp.where(valid, small.a, 0.0)
    b = jnp.where(valid, small.b, 0.0)
    gamma = small.gamma
    u = _solve_upper(R, a, False, True)  # R^-1 S'g
    p = _solve_upper(R, D * u + gamma * (YY @ u) - gamma * b, True, True)
    w = jnp.concatenate([-p, gamma * u])  # d = -gamma g - S p + gamma Y u
    gd = -gamma * small.gg - a @ p + gamma * (b @ u)
    return w, gd


def _shift_in(M: jax.Array, col: jax.Array, row: jax.Array) -> jax.Array:
    """``M`` (m, m) in chronological order after a new pair: the oldest row and column dropped, the
    others moved up and left by one, ``col`` (m,) the new last column, ``row`` (m - 1,) the new
    last row left of the corner (static slices and concatenations only)."""
    top = jnp.concatenate([M[1:, 1:], col[:-1, None]], axis=1)
    return jnp.concatenate([top, jnp.concatenate([row, col[-1:]])[None]], axis=0)


def _stored_in_ring(st: OnePassState, sums: jax.Array, m: int, dots: tuple) -> tuple:
    """``(SY, YY, a, b)`` with the new pair in ring slot ``head`` (:data:`SMALL_ORDER` ``"ring"``): the
    kernel's sums by age (lane ``a - 1``: age ``a``, 1 the newest) put in ring order, then
    :func:`~multiwalk.solvers.lbfgs_common.store_in_ring`, the two-pass form's update."""

    slot = st.head
    age_of_slot = (slot - jnp.arange(m)) % m  # 1 = newest; 0 is the slot the new pair replaces (age m)
    by_slot = jnp.where(age_of_slot == 0, m, age_of_slot) - 1
    g_prods = jnp.concatenate([sums[:m][by_slot], sums[m:2 * m][by_slot]])  # S'g_t, Y'g_t in ring order
    y_prods = jnp.concatenate([sums[2 * m:3 * m][by_slot], sums[3 * m:4 * m][by_slot]])
    return store_in_ring(st, m, slot, g_prods, y_prods, *dots)


def _stored_chronological(st: OnePassState, sums: jax.Array, m: int, dots: tuple) -> tuple:
    """``(SY, YY, a, b)`` with the new pair last (:data:`SMALL_ORDER` ``"chronological"``): the
    kernel's sums by age are the positions reversed; every index static."""
    sy, yy, yg, sdg = dots
    sg, yg_old, sy_old, yy_old = (sums[j * m:(j + 1) * m][::-1] for j in range(4))  # by position, before the shift
    col_sy = jnp.concatenate([sy_old[1:], sy[None]])  # s_j'y_t for the kept pairs, then s_t'y_t
    col_yy = jnp.concatenate([yy_old[1:], yy[None]])
    SY = _shift_in(st.SY, col_sy, jnp.zeros((m - 1,), sy.dtype))  # the newest row: zero left of the diagonal
    YY = _shift_in(st.YY, col_yy, col_yy[:-1])  # symmetric
    return SY, YY, jnp.concatenate([sg[1:], sdg[None]]), jnp.concatenate([yg_old[1:], yg[None]])


def _accept(cfg: Any, st: OnePassState, ls: Any, sums: jax.Array) -> OnePassState:
    """The state after the iteration whose line search ``ls`` is done, its last evaluation's ``sums``:
    :func:`~multiwalk.solvers.lbfgs.iteration.finish_fused`'s formulas, and the next
    direction's coefficients and line search.  The rings move by ``iteration + 1`` alone; the small
    matrices are updated in :data:`SMALL_ORDER`."""
    from .more_thuente import line_search_init

    m, dt = cfg.m, st.f.dtype
    ok = ls.info == 1
    stp = ls.stp
    sy, yy, yg, gg, xx, ft, dgt = (sums[4 * m + i] for i in range(7))
    chronological = SMALL_ORDER == "chronological"
    stored = _stored_chronological if chronological else _stored_in_ring
    SY, YY, a, b = stored(st, sums, m, (sy, yy, yg, stp * dgt))
    xnorm, gnorm = jnp.sqrt(xx), jnp.sqrt(gg)
    small = _Small(
        SY=jnp.where(ok, SY, st.SY), YY=jnp.where(ok, YY, st.YY), a=jnp.where(ok, a, st.a), b=jnp.where(ok, b, st.b),
        gamma=jnp.where(ok, sy / yy, st.gamma).astype(dt), gg=gg,
        head=jnp.where(ok, (st.head + 1) % m, st.head).astype(jnp.int32),
        count=jnp.where(ok, jnp.minimum(st.count + 1, m), st.count).astype(jnp.int32), g=jnp.zeros((0,), dt),
    )
    w, gd = _coefficients_chronological(small, m) if chronological else compact_coefficients(small, m, unrolled=True)
    status = jnp.where(ok, _RUNNING, jnp.asarray(_INFO_TO_STATUS)[jnp.clip(ls.info, 0, 6)])
    status = jnp.where(ok & (gnorm <= cfg.eps * jnp.maximum(1.0, xnorm)), LBFGSStatus.SUCCESS, status)
    return st._replace(
        w=w, f=worst_if_nonfinite(ft)[0], nonfinite=st.nonfinite + ls.nonfinite,
        SY=small.SY, YY=small.YY, a=small.a, b=small.b, gamma=small.gamma, gg=gg, head=small.head,
        count=small.count, ls=line_search_init(ft, gd, 1.0, cfg.params), iteration=st.iteration + 1,
        nfev=st.nfev + ls.nfev, gnorm=gnorm, xnorm=xnorm, stp=stp, status=status.astype(jnp.int32),
    )


def run_chunk(cfg: Any, one: OnePassState, table: jax.Array, n: jax.Array, block_fn: Callable,
              launch: dict[str, Any], mesh: Any = None) -> tuple[OnePassState, jax.Array, jax.Array]:
    """Up to ``n`` iterations of one problem: ``(state, history table, iterations run)``.

    One ``while_loop`` trip per evaluation: :func:`line_pass`, the line search's update, and the
    accepting branch (:func:`_accept`) kept by selects where the search is done.  ``table`` (rows,
    4): f, gnorm, stp, nfev after each iteration (row = iteration).  ``mesh``: the rings are split
    over it along ``n`` (:func:`line_pass_split`; everything else is computed whole on every device)."""
    from .more_thuente import line_search_update

    m, dt = cfg.m, one.X.dtype
    layout = _scalar_layout(one)
    blank = [None] * len(jax.tree.leaves(one))

    def cond(carry):
        i, _, _, ints, _ = carry
        st = _unpack(layout, blank, jnp.zeros(len(layout.float_index), dt), ints)
        return (i < n) & (st.status == _RUNNING)

    def body(carry):
        i, rest, floats, ints, table = carry
        st = _unpack(layout, rest, floats, ints)
        # chronological small matrices: the pair of age a at position m - a, which is ring_rows' slot for head 0
        head = jnp.zeros((), jnp.int32) if SMALL_ORDER == "chronological" else st.head
        ring_ints, ring_floats = ring_rows(st.iteration, head, st.count, st.w, st.gamma, st.ls.stp, m)
        if mesh is None:
            X, G, S, sums = line_pass(st.X, st.G, st.S, ring_ints, ring_floats, block_fn, **launch)
        else:
            X, G, S, sums = line_pass_split(mesh, st.X, st.G, st.S, ring_ints, ring_floats, block_fn, **launch)
        ls, _, _, _ = line_search_update(st.ls, sums[4 * m + 5], sums[4 * m + 6])
        searching = st._replace(X=X, G=G, S=S, ls=ls)
        accepted = _accept(cfg, searching, ls, sums)
        done = ls.done
        # selects over the small leaves only: the rings are the same arrays in both branches
        rings = {"X": None, "G": None, "S": None}
        new = jax.tree.map(lambda u, v: jnp.where(done, u, v), accepted._replace(**rings), searching._replace(**rings))
        new = new._replace(X=X, G=G, S=S)
        row = jnp.stack([new.f, new.gnorm, new.stp, new.nfev.astype(dt)])
        at = jnp.where(done, new.iteration, table.shape[0])  # out of range: dropped
        table = table.at[at].set(row, mode="drop")
        return (i + done.astype(jnp.int32), *_pack(layout, new, dt), table)

    carry = (jnp.zeros((), jnp.int32), *_pack(layout, one, dt), table)
    n_run, rest, floats, ints, table = lax.while_loop(cond, body, carry)
    return _unpack(layout, rest, floats, ints), table, n_run
