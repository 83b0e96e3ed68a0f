"""The execution forms of L-BFGS: how the iterations of :mod:`~multiwalk.solvers.lbfgs.iteration`
run, one chunk of the driver's loop at a time.

* **XLA** (:func:`xla_step`): one iteration of every start, ``vmap``-ed and masked for several
  starts (:func:`iterate_masked`), unmasked for one (:func:`iterate`); the driver's default loop
  runs it.  The line search is a ``while_loop`` over evaluations (:func:`line_search`).
* **Packed** (:func:`run_fused_chunk`): one start through the fused Pallas passes, the state's
  scalars carried packed in two vectors and the history as one (rows, 4) table, so the loop
  launches few small kernels per iteration (:func:`iterate_packed`, :func:`packed_line_search`).
  Its **rows** variant keeps both gradients in one (2, n) buffer, the line search's evaluations
  writing into the older one's row (:func:`iterate_rows`): no pass copies the new gradient.
* **One-pass** (:func:`run_onepass_chunk`): one kernel per line-search evaluation, on the rings
  of :mod:`~multiwalk.solvers.lbfgs_onepass` (a checkpoint of it is converted to and from the
  stored pairs by :mod:`~multiwalk.solvers.lbfgs.conversion`).

Every form computes the same iterates (up to the rounding of the kernels' sums).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from .. import lbfgs_onepass
from ..lbfgs_common import _RUNNING, _pack, _scalar_layout, _ScalarLayout, _unpack
from ..more_thuente import LineSearchState, line_search_update
from .bounds import box_evaluator, finish_box
from .evaluation import Evaluation, Evaluator, along_line, at_trial_point, into_rows, without_trial_point
from .iteration import Config, finish_fused, finish_fused_rows, finish_masked, finish_xla
from .state import History, LBFGSRun, LBFGSState

__all__ = ["iterate", "iterate_box", "iterate_masked", "iterate_packed", "iterate_rows", "line_search", "packed_line_search",
           "run_fused_chunk", "run_onepass_chunk", "xla_step"]


# --------------------------------------------------------------------------------------------------
# the line search's loop over evaluations
# --------------------------------------------------------------------------------------------------


def line_search(st: LBFGSState, evaluate: Evaluator) -> tuple[LineSearchState, Evaluation]:
    """Run the line search of ``st`` to its end: ``(ls, last evaluation)``.

    A do-while: the first trial is always evaluated (a search that is already done - bad input -
    re-evaluates x itself, stp = 0, and counts nothing), so the loop's buffers start fresh rather
    than as copies of x and g."""

    # jit(inline=True): traced once for the first trial and the loop's body alike (the same
    # operations inlined in both places: the program is the one two traces made)
    @functools.partial(jax.jit, inline=True)
    def trial(ls: LineSearchState) -> tuple[LineSearchState, Evaluation]:
        ev = evaluate(st, ls.stp, None)
        ls, _, _, _ = line_search_update(ls, ev.f, ev.gd)
        return ls, ev

    return lax.while_loop(lambda c: ~c[0].done, lambda c: trial(c[0]), trial(st.ls))


def packed_line_search(
    st: LBFGSState, evaluate: Evaluator, layout: _ScalarLayout, g_buffer: jax.Array | None = None
) -> tuple[LineSearchState, Evaluation]:
    """:func:`line_search` with the line search's scalars carried packed (:func:`_pack`).
    ``g_buffer``: handed to the first evaluation, then each evaluation's ``g`` to the next (the
    rows form's (2, n) buffer; the others ignore it)."""
    dt = st.x.dtype
    blank = [None] * len(layout.float_index + layout.int_index)

    def evaluate_packed(ls: LineSearchState, g_buffer: jax.Array | None):  # noqa: ANN202
        ev = evaluate(st, ls.stp, g_buffer)
        ls, _, _, _ = line_search_update(ls, ev.f, ev.gd)
        _, lf, li = _pack(layout, ls, dt)
        return lf, li, ev

    def body(carry):  # noqa: ANN001, ANN202
        lf, li, ev = carry
        return evaluate_packed(_unpack(layout, blank, lf, li), ev.g)

    def cond(carry):  # noqa: ANN001, ANN202
        return ~_unpack(layout, blank, carry[0], carry[1]).done

    lf, li, ev = lax.while_loop(cond, body, evaluate_packed(st.ls, g_buffer))
    return _unpack(layout, blank, lf, li), ev


# --------------------------------------------------------------------------------------------------
# one iteration of one problem, in each form
# --------------------------------------------------------------------------------------------------


def _finish_one(cfg: Config, st: LBFGSState, ls: LineSearchState, ev: Evaluation, h0: jax.Array) -> LBFGSState:
    """The end of one unbatched problem's iteration: the fused passes where the config has them."""
    return finish_fused(cfg, st, ls, ev) if cfg.fused else finish_xla(cfg, st, ls, ev, h0)


def iterate(cfg: Config, vg: Callable, st: LBFGSState, h0: jax.Array) -> LBFGSState:
    """One whole iteration of one problem (no batch): the line search, then the update."""
    ls, ev = line_search(st, at_trial_point(vg))
    return _finish_one(cfg, st, ls, ev, h0)


def iterate_masked(cfg: Config, vg: Callable, st: LBFGSState, h0: jax.Array) -> LBFGSState:
    """One whole iteration of one problem of a batch (under vmap): finished problems unchanged."""
    ls, ev = line_search(st, at_trial_point(vg))
    return finish_masked(cfg, st, ls, ev, h0)


def iterate_box(cfg: Config, vg: Callable, st: LBFGSState, box: jax.Array) -> LBFGSState:
    """One whole iteration of one problem in the box ``box = [lower; upper]`` (L-BFGS-B,
    :mod:`~multiwalk.solvers.lbfgs.bounds`); a finished problem is left unchanged."""
    ls, ev = line_search(st, box_evaluator(vg, box[0], box[1]))
    return finish_box(cfg, st, ls, ev, box)


def _packed_evaluator(cfg: Config, vg: Callable, along: Callable | None) -> Evaluator:
    """With the fused passes on one device, pass A forms the accepted trial point x + stp d again
    from x and d (which it reads anyway), so the evaluations do not write theirs (n values each),
    and the problem's one-pass ``along`` serves where it has one."""
    if cfg.pallas and cfg.mesh is None:
        return along_line(along) if along is not None else without_trial_point(at_trial_point(vg))
    return at_trial_point(vg)


def iterate_packed(
    cfg: Config, vg: Callable, st: LBFGSState, h0: jax.Array, along: Callable | None = None
) -> LBFGSState:
    """:func:`iterate` with the line search's state carried packed.  ``along``:
    :func:`~multiwalk.solvers.lbfgs.evaluation.line_evaluation`'s one-pass evaluation."""
    ls, ev = packed_line_search(st, _packed_evaluator(cfg, vg, along), _scalar_layout(st.ls))
    return _finish_one(cfg, st, ls, ev, h0)


def iterate_rows(
    cfg: Config, st: LBFGSState, grads: jax.Array, new_row: jax.Array, into: Callable
) -> tuple[LBFGSState, jax.Array]:
    """:func:`iterate_packed` with both gradients in one (2, n) buffer ``grads``: the previous one in
    row ``1 - new_row`` (``st.g`` unused), the line search's evaluations writing theirs into row
    ``new_row`` (``into``, aliased, in place); passes A and B read both rows, and pass B no longer
    copies the new gradient into the loop's g buffer (n values per iteration).  ``(state, grads)``."""
    ls, ev = packed_line_search(st, into_rows(into, new_row), _scalar_layout(st.ls), grads)
    return finish_fused_rows(cfg, st, ls, ev, new_row), ev.g


# --------------------------------------------------------------------------------------------------
# the chunks
# --------------------------------------------------------------------------------------------------


def _record(history: History, before: LBFGSState, after: LBFGSState) -> History:
    """The history with row ``iteration`` of each recorded start that moved written."""
    kh = history.f.shape[1]
    moved = before.status[:kh] == _RUNNING
    rows = jnp.where(moved, after.iteration[:kh], history.f.shape[0])  # out of range: dropped
    cols = jnp.arange(kh)
    h = history
    return History(
        f=h.f.at[rows, cols].set(after.f[:kh], mode="drop"),
        gnorm=h.gnorm.at[rows, cols].set(after.gnorm[:kh], mode="drop"),
        stp=h.stp.at[rows, cols].set(after.stp[:kh], mode="drop"),
        nfev=h.nfev.at[rows, cols].set(after.nfev[:kh], mode="drop"),
    )


def xla_step(cfg: Config, vg: Callable, state: LBFGSRun) -> LBFGSRun:
    """One iteration of every start (the XLA form): one start unmasked, several vmapped and masked."""
    K = state.starts.x.shape[0]
    before = state.starts
    if cfg.box and K > 1:  # L-BFGS-B (h0 holds the box): finished starts are left unchanged
        after = jax.vmap(lambda s: iterate_box(cfg, vg, s, state.h0))(before)
    elif K == 1 and cfg.box:
        one = jax.tree.map(lambda a: lax.squeeze(a, (0,)), before)
        after = jax.tree.map(lambda a: lax.expand_dims(a, (0,)), iterate_box(cfg, vg, one, state.h0))
    elif K == 1:  # no batch: no masking selects over n-vectors (the loop stops when it is done)
        # squeeze / expand_dims are free reshapes (a[0] and a[None] would make XLA copy P)
        one = jax.tree.map(lambda a: lax.squeeze(a, (0,)), before)
        after = jax.tree.map(lambda a: lax.expand_dims(a, (0,)), iterate(cfg, vg, one, state.h0))
    else:
        after = jax.vmap(lambda s: iterate_masked(cfg, vg, s, state.h0))(before)
    return LBFGSRun(starts=after, history=_record(state.history, before, after), h0=state.h0)


def history_table(h: History, dt: Any) -> jax.Array:
    """The first start's history as one (rows, 4) table of f, gnorm, stp, nfev (the loops' carry)."""
    return jnp.stack([h.f[:, 0], h.gnorm[:, 0], h.stp[:, 0], h.nfev[:, 0].astype(dt)], axis=1)


def history_from_table(table: jax.Array, h: History) -> History:
    """:func:`history_table` back into a (one-start) :class:`History` of ``h``'s dtypes."""
    return History(
        f=table[:, 0:1].astype(h.f.dtype), gnorm=table[:, 1:2].astype(h.gnorm.dtype),
        stp=table[:, 2:3].astype(h.stp.dtype), nfev=table[:, 3:4].astype(h.nfev.dtype),
    )


def run_fused_chunk(
    cfg: Config, vg: Callable, state: LBFGSRun, n: jax.Array, along: Callable | None, into: Callable | None
) -> tuple[LBFGSRun, jax.Array]:
    """Up to ``n`` iterations of one start through the fused passes, the state's scalars packed
    (:func:`iterate_packed`); ``into`` (one device): the rows form (:func:`iterate_rows`), whose
    (2, n) buffer costs 3 n values per chunk (filled from g here, g taken out after the loop)."""
    dt = state.starts.x.dtype
    one = jax.tree.map(lambda a: lax.squeeze(a, (0,)), state.starts)
    g0 = one.g
    if into is not None:
        one = one._replace(g=jnp.zeros((0,), dt))  # unused in the loop: the gradients live in grads
    layout = _scalar_layout(one)

    def cond(carry):  # noqa: ANN001, ANN202
        i, _, _, ints, _, _ = carry
        st = _unpack(layout, [None] * len(jax.tree.leaves(one)), jnp.zeros(len(layout.float_index), dt), ints)
        return (i < n) & (st.status == _RUNNING)

    def body(carry):  # noqa: ANN001, ANN202
        i, rest, floats, ints, table, grads = carry
        st = _unpack(layout, rest, floats, ints)
        if into is None:
            new = iterate_packed(cfg, vg, st, state.h0, along)
        else:  # iteration i of the chunk: the gradient in row i % 2, the new one into the other
            new, grads = iterate_rows(cfg, st, grads, 1 - i % 2, into)
        row = jnp.stack([new.f, new.gnorm, new.stp, new.nfev.astype(dt)])[None]
        table = lax.dynamic_update_slice(table, row, (new.iteration, jnp.zeros((), new.iteration.dtype)))
        return (i + 1, *_pack(layout, new, dt), table, grads)

    grads = jnp.stack([g0, g0]) if into is not None else jnp.zeros((0,), dt)
    carry = (jnp.zeros((), jnp.int32), *_pack(layout, one, dt), history_table(state.history, dt), grads)
    n_run, rest, floats, ints, table, grads = lax.while_loop(cond, body, carry)
    final = _unpack(layout, rest, floats, ints)
    if into is not None:  # the last gradient is in row n_run % 2
        final = final._replace(g=lax.dynamic_index_in_dim(grads, n_run % 2, 0, keepdims=False))
    starts = jax.tree.map(lambda a: lax.expand_dims(a, (0,)), final)
    return LBFGSRun(starts=starts, history=history_from_table(table, state.history), h0=state.h0), n_run


def run_onepass_chunk(
    cfg: Config, state: LBFGSRun, n: jax.Array, block: Callable, launch: dict[str, Any], mesh: Any
) -> tuple[LBFGSRun, jax.Array]:
    """Up to ``n`` iterations of the one-pass loop (:func:`lbfgs_onepass.run_chunk`) on a state in
    its layout; ``mesh``: the run plan's, for a split run (the rings split along n / width): the
    kernel under shard_map, its sums added by psum."""
    dt = state.starts.X.dtype
    one = jax.tree.map(lambda a: lax.squeeze(a, (0,)), state.starts)
    final, table, n_run = lbfgs_onepass.run_chunk(cfg, one, history_table(state.history, dt), n, block, launch,
                                                  mesh=mesh)
    starts = jax.tree.map(lambda a: lax.expand_dims(a, (0,)), final)
    return LBFGSRun(starts=starts, history=history_from_table(table, state.history), h0=state.h0), n_run
