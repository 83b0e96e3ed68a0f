"""Limited-memory BFGS (Liu & Nocedal 1989) with the Moré-Thuente line search, for huge n.

This is the algorithm of Nocedal's ``lbfgs.f`` (Harwell VA15), the routine the CUDA L-BFGS of
the seeds ports, step for step:

* the first direction is ``d = -H0 g`` with ``H0 = I`` (or the user's ``diag``) and the first
  trial step ``1 / ||g||``; later trial steps are 1;
* ``H0 = gamma I`` with ``gamma = s'y / y'y`` of the newest pair (or the user's diagonal);
* the step satisfies the strong Wolfe conditions (``ftol``, ``gtol``), found by ``MCSRCH`` /
  ``MCSTEP`` (:mod:`multiwalk.solvers.more_thuente`) with at most ``maxfev`` evaluations;
* the run stops when ``||g|| < eps * max(1, ||x||)`` (Euclidean norms), after
  ``max_iterations`` iterations, or when the line search fails (a named status).

What differs is how ``-H g`` is computed.  With the default ``H0 = gamma I`` it uses the compact
representation of Byrd, Nocedal and Schnabel (1994)::

    H = gamma I + [S  gamma Y] [[R^-T (D + gamma Y'Y) R^-1, -R^-T], [-R^-1, 0]] [S'; gamma Y']

where ``S``, ``Y`` hold the last ``m`` pairs, ``R`` is the upper triangle of ``S'Y`` and ``D`` its
diagonal.  Per iteration the ``2m`` stored vectors are read in two passes of one matrix product
each (``[S Y]' [g, y]`` for the small matrices, ``[S Y] w`` for the direction) instead of the
``4m`` dot products and ``2m`` updates of the two-loop recursion, which also re-reads and rewrites
its work vector ``2m`` times: the iteration is memory-bound for large n, and this is about 2.4x
less memory traffic.  The small ``m x m`` matrices are updated from those products (no other pass
over the pairs).  With a user ``diag`` (the seed's ``diagco``) the two-loop recursion is used.
On a GPU the two passes of one problem run as two fused Pallas kernels (``kernel="auto"``,
:mod:`multiwalk.solvers.lbfgs_kernel`), and its loop carries the state's scalars packed
(:meth:`LBFGS.run_chunk`); ``kernel="xla"`` keeps the XLA form (same iterates up to rounding).
Where the problem's ``value_and_grad`` has a block-local ``.block`` (cute's Extended Rosenbrock),
``kernel="onepass"`` (and ``"auto"`` on GPUs in float64) runs ONE kernel per line-search
evaluation instead, the pairs read once per evaluation (:mod:`multiwalk.solvers.lbfgs_onepass`).
One problem split along ``n`` over GPUs (``mw.solve(..., devices=k)``) runs the passes per device
under ``jax.shard_map`` (:func:`~multiwalk.solvers.lbfgs_kernel.pair_products_split`): the
objective still sees the global ``x``; the one-pass loop splits its rings likewise
(:func:`~multiwalk.solvers.lbfgs_onepass.line_pass_split`, the kernel's sums added by ``psum``).

Many independent problems (``x0`` of shape ``(K, n)``, or ``starts=K``) run in lockstep, each with
its own line search and status; the driver stops when all have finished.  The same pure functions
drive :class:`AskTell`, the reverse-communication interface for objectives that are not JAX.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..compile_cache import cached_jit
from ..kernels import KERNELS, check_launch_options
from ..problem import Problem, _resolve_dtype
from ..result import Result, Status
from . import lbfgs_kernel, lbfgs_onepass
from ._common import (
    check_choice_option,
    check_int_option,
    check_number_option,
    check_state_fits,
    uniform_in_box,
    worst_if_nonfinite,
)
from .base import Phase, RunPlan, Solver
from .lbfgs_common import (
    _INFO_TO_STATUS,
    _RUNNING,
    LBFGSStatus,
    _chronological,
    _pack,
    _scalar_layout,
    _ScalarLayout,
    _unpack,
    compact_coefficients,
    store_in_ring,
)
from .more_thuente import LineSearchParams, LineSearchState, line_search_init, line_search_update

__all__ = ["LBFGS", "LBFGSResult", "LBFGSStatus", "AskTell"]

_HISTORY_STARTS = 64  # per-iteration history is kept for the first this-many starts


# --------------------------------------------------------------------------------------------------
# state of one problem (the solver vmaps it over K starts)
# --------------------------------------------------------------------------------------------------


class LBFGSState(NamedTuple):
    """One L-BFGS problem.  ``n``: free parameters, ``m``: stored pairs.

    ``P`` holds the pairs in a ring: rows ``0..m-1`` the steps ``s``, rows ``m..2m-1`` the gradient
    changes ``y``; ``head`` is the slot the next pair goes to, ``count`` the number stored.
    ``SY[i, j] = s_i'y_j`` (kept for slot i not newer than slot j), ``YY[i, j] = y_i'y_j``;
    ``a = S'g``, ``b = Y'g`` for the current gradient.
    """

    x: jax.Array  # (n,)
    f: jax.Array  # ()
    g: jax.Array  # (n,)
    d: jax.Array  # (n,) search direction of the current iteration
    P: jax.Array  # (2m, n)
    SY: jax.Array  # (m, m)
    YY: jax.Array  # (m, m)
    a: jax.Array  # (m,)
    b: jax.Array  # (m,)
    gamma: jax.Array  # () scale of H0
    gg: jax.Array  # () g'g
    head: jax.Array  # () int32
    count: jax.Array  # () int32
    ls: LineSearchState  # the line search of the current iteration
    iteration: jax.Array  # () int32, completed iterations
    nfev: jax.Array  # () int32, evaluations of f and g (the first one included)
    gnorm: jax.Array  # () ||g||
    xnorm: jax.Array  # () ||x||
    stp: jax.Array  # () step of the last iteration
    status: jax.Array  # () int32: _RUNNING or a Status value
    nonfinite: jax.Array  # () int32 evaluations whose f or g'd was NaN or +-inf (f taken as +inf)


class History(NamedTuple):
    """Per-iteration record of the first starts: row i is after iteration i (row 0: the start)."""

    f: jax.Array  # (max_iterations + 1, k)
    gnorm: jax.Array
    stp: jax.Array
    nfev: jax.Array  # int32


class LBFGSRun(NamedTuple):
    starts: LBFGSState  # every leaf has a leading axis K
    history: History
    h0: jax.Array  # (n,) the user's constant diag, or () when unused


# --------------------------------------------------------------------------------------------------
# the direction -H g
# --------------------------------------------------------------------------------------------------


def compact_direction(st: LBFGSState, m: int) -> tuple[jax.Array, jax.Array]:
    """``(d, g'd)`` with ``d = -H g`` by the compact representation (H0 = gamma I)."""
    w, gd = compact_coefficients(st, m)
    return -st.gamma * st.g + w @ st.P, gd


def two_loop_direction(st: LBFGSState, m: int, h0: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(d, g'd)`` with ``d = -H g`` by Nocedal's two-loop recursion, ``H0 = h0`` (vector or scalar)."""
    order, valid = _chronological(st.head, st.count, m)
    rho = jnp.where(valid, 1.0 / jnp.where(valid, jnp.diagonal(st.SY)[order], 1.0), 0.0)
    S, Y = st.P[:m], st.P[m:]

    def newest_first(q, k):  # k = m-1 .. 0 over chronological positions
        slot = order[k]
        alpha = rho[k] * (S[slot] @ q)
        return q - alpha * Y[slot], alpha

    q, alphas = lax.scan(newest_first, st.g, jnp.arange(m - 1, -1, -1))
    alphas = alphas[::-1]
    r = h0 * q

    def oldest_first(r, k):
        slot = order[k]
        beta = rho[k] * (Y[slot] @ r)
        return r + (alphas[k] - beta) * S[slot], None

    r, _ = lax.scan(oldest_first, r, jnp.arange(m))
    d = -r
    return d, st.g @ d


# --------------------------------------------------------------------------------------------------
# the pieces of one problem's run (pure; shared by the solver and AskTell)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Config:
    """What the pure functions need of the options (hashable, static under jit)."""

    m: int
    eps: float
    params: LineSearchParams
    diag_fn: Callable | None  # diag(x) -> (n,) each iteration, or None
    use_h0: bool  # a constant user diagonal is passed as h0
    pallas: bool = False  # the two passes over P as fused Pallas kernels (lbfgs_kernel)
    interpret: bool = False  # ... in Pallas' interpret mode (off GPUs: tests)
    block: int = lbfgs_kernel.DEFAULT_BLOCK
    warps: int = lbfgs_kernel.DEFAULT_WARPS
    mesh: Any = None  # the driver's mesh when one problem is split along n: the passes under shard_map
    # pass A's own launch (lbfgs_kernel.pair_products): None = block / warps above; chunks of
    # block columns per program and Triton's pipeline stages of that loop
    a_block: int | None = None
    a_warps: int | None = None
    a_chunks: int = lbfgs_kernel.PASS_A_CHUNKS
    a_stages: int = lbfgs_kernel.PASS_A_STAGES


def _diag_now(cfg: _Config, x: jax.Array, h0: jax.Array) -> jax.Array | None:
    if cfg.diag_fn is not None:
        return jnp.asarray(cfg.diag_fn(x), x.dtype)
    if cfg.use_h0:
        return h0
    return None


def _direction(cfg: _Config, st: LBFGSState, h0: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(d, g'd, diag_ok)`` for the current state."""
    diag = _diag_now(cfg, st.x, h0)
    if diag is None:
        d, gd = compact_direction(st, cfg.m)
        return d, gd, jnp.asarray(True)
    ok = jnp.all(jnp.isfinite(diag) & (diag > 0))
    d, gd = two_loop_direction(st, cfg.m, diag)
    return d, gd, ok


def start(cfg: _Config, x: jax.Array, f: jax.Array, g: jax.Array, h0: jax.Array) -> LBFGSState:
    """The state after the first evaluation ``f, g`` at ``x``: first direction and line search."""
    n, m, dt = x.shape[0], cfg.m, x.dtype
    f, bad_f = worst_if_nonfinite(jnp.asarray(f, dt))  # a -inf start is no minimum: NONFINITE_START
    g = jnp.asarray(g, dt)
    gg = g @ g
    gnorm, xnorm = jnp.sqrt(gg), jnp.sqrt(x @ x)
    st = LBFGSState(
        x=x, f=f, g=g, d=jnp.zeros_like(x), P=jnp.zeros((2 * m, n), dt),
        SY=jnp.zeros((m, m), dt), YY=jnp.zeros((m, m), dt), a=jnp.zeros(m, dt), b=jnp.zeros(m, dt),
        gamma=jnp.ones((), dt), gg=gg, head=jnp.zeros((), jnp.int32), count=jnp.zeros((), jnp.int32),
        ls=line_search_init(f, -1.0, 1.0, cfg.params), iteration=jnp.zeros((), jnp.int32),
        nfev=jnp.ones((), jnp.int32), gnorm=gnorm, xnorm=xnorm, stp=jnp.zeros((), dt),
        status=jnp.full((), _RUNNING, jnp.int32), nonfinite=(bad_f | ~jnp.isfinite(gg)).astype(jnp.int32),
    )
    d, gd, diag_ok = _direction(cfg, st, h0)
    finite = st.nonfinite == 0
    status = jnp.where(~finite, Status.NONFINITE_START, _RUNNING)
    status = jnp.where((status == _RUNNING) & ~diag_ok, Status.DIAG_NOT_POSITIVE, status)
    status = jnp.where((status == _RUNNING) & (gnorm <= cfg.eps * jnp.maximum(1.0, xnorm)), Status.SUCCESS, status)
    # lbfgs.f: STP1 = 1/||g|| for the first iteration (H0 g has unit length when H0 = I).
    stp0 = jnp.where(gnorm > 0, 1.0 / gnorm, 1.0).astype(dt)
    return st._replace(d=d, ls=line_search_init(f, gd, stp0, cfg.params), status=status.astype(jnp.int32))


def trial_point(st: LBFGSState) -> jax.Array:
    """Where the line search asks for the next evaluation."""
    return st.x + st.ls.stp * st.d


def finish_iteration(
    cfg: _Config, st: LBFGSState, ls: LineSearchState, xt: jax.Array, ft: jax.Array, gt: jax.Array,
    dgt: jax.Array, h0: jax.Array, masked: bool, new_row: jax.Array | None = None,
) -> LBFGSState:
    """End the iteration whose line search ``ls`` is done; ``xt, ft, gt`` is its last evaluation
    (``xt`` None on the one-device fused path: pass A forms ``x + stp d`` itself).

    ``new_row`` (one-device fused path, :meth:`LBFGS.run_chunk`): ``gt`` is the (2, n) buffer of
    both gradients, the new one in row ``new_row``, the previous one in the other (``st.g`` is
    then unused); the returned state's ``g`` is ``st.g`` and the caller's buffer holds the new
    gradient, which no pass copies.

    On most unusual endings MCSRCH evaluates its best step last, so x is the best point found;
    as in Nocedal's lbfgs.f, a search cut short by ``maxfev=1`` or by ``stpmin`` can leave x at a
    point worse than the start of the iteration (its status says the search failed).

    Stores the pair, tests convergence, and sets up the next direction and line search.
    ``masked``: leave finished problems unchanged (several problems in one batch).
    """
    m, dt = cfg.m, st.x.dtype
    running = st.status == _RUNNING
    ok = ls.info == 1
    stp = ls.stp
    s = stp * st.d  # lbfgs.f: S = STP * D, Y = G_new - G_old
    rows = new_row is not None  # gt: both gradients in one (2, n) buffer (the fused one-device loop)
    y = None if rows else gt - st.g
    slot = st.head
    fused = cfg.pallas and not masked and cfg.diag_fn is None and not cfg.use_h0
    if rows and not (fused and cfg.mesh is None):
        raise ValueError("finish_iteration: new_row is for the fused passes on one device only")
    rows_a = {"new": new_row} if rows else {}
    tuning = {"block": cfg.block, "num_warps": cfg.warps, "interpret": cfg.interpret}
    tuning_a = {
        "block": cfg.a_block or cfg.block, "num_warps": cfg.a_warps or cfg.warps, "interpret": cfg.interpret,
        "chunks": cfg.a_chunks, "num_stages": cfg.a_stages,
    }
    if fused and cfg.mesh is not None:  # pass A on every device's columns, its sums added over devices
        g_prods, y_prods, dots, xt = lbfgs_kernel.pair_products_split(
            cfg.mesh, st.P, gt, st.g, st.d, xt, stp, slot, st.count, st.x, **tuning_a
        )
        sy, yy, yg, gg, xx = (dots[i] for i in range(5))
    elif fused:  # pass A: one sweep over P and the vectors (lbfgs_kernel); xt None: formed in the kernel
        g_prods, y_prods, dots, xt = lbfgs_kernel.pair_products(
            st.P, gt, gt if rows else st.g, st.d, xt, stp, slot, st.count, st.x, **tuning_a, **rows_a
        )
        sy, yy, yg, gg, xx = (dots[i] for i in range(5))
    else:
        # Every product the small matrices need, from the pairs as they are before this update.
        # (XLA reads P once for both.  Taking P'y as P'gt - (a, b) would save nothing then, and cancels.)
        g_prods = st.P @ gt  # (2m,): S'gt, Y'gt
        y_prods = st.P @ y  # S'y, Y'y
        sy, yy, yg = s @ y, y @ y, y @ gt
        gg, xx = gt @ gt, xt @ xt
    store = ok & running if masked else ok
    new_s = jnp.where(store, s, st.P[slot]) if masked else s
    new_y = jnp.where(store, y, st.P[m + slot]) if masked else y
    SY, YY, a, b = store_in_ring(st, m, slot, g_prods, y_prods, sy, yy, yg, stp * dgt)
    xnorm = jnp.sqrt(xx)
    new = st._replace(
        x=xt, f=worst_if_nonfinite(ft)[0], g=st.g if rows else gt, nonfinite=st.nonfinite + ls.nonfinite,
        SY=jnp.where(store, SY, st.SY), YY=jnp.where(store, YY, st.YY), a=jnp.where(store, a, st.a),
        b=jnp.where(store, b, st.b), gamma=jnp.where(store, sy / yy, st.gamma).astype(dt), gg=gg,
        head=jnp.where(store, (slot + 1) % m, slot).astype(jnp.int32),
        count=jnp.where(store, jnp.minimum(st.count + 1, m), st.count).astype(jnp.int32),
        iteration=st.iteration + 1, nfev=st.nfev + ls.nfev, gnorm=jnp.sqrt(gg), xnorm=xnorm, stp=stp,
    )
    zero = jnp.zeros((), jnp.int32)
    if fused:  # pass B: the direction and the new pair written into P in one sweep
        w, gd = compact_coefficients(new, m, unrolled=True)
        w, gamma_d = _no_direction_unless_finite(w, gd, new.gamma)
        if cfg.mesh is not None:  # columnwise: each device its own columns, no communication
            d, P, gt = lbfgs_kernel.direction_and_store_split(
                cfg.mesh, st.P, w, gamma_d, stp, gt, st.g, st.d, slot, st.count, **tuning
            )
        elif rows:  # the new gradient is already in the loop's buffer: pass B only reads it
            d, P, _ = lbfgs_kernel.direction_and_store(
                st.P, w, gamma_d, stp, gt, gt, st.d, slot, st.count, new=new_row, **tuning
            )
            gt = st.g
        else:
            d, P, gt = lbfgs_kernel.direction_and_store(st.P, w, gamma_d, stp, gt, st.g, st.d, slot, st.count, **tuning)
        new = new._replace(g=gt)
        diag_ok = jnp.asarray(True)
    elif cfg.diag_fn is None and not cfg.use_h0:
        # The direction from the pairs as they were plus the new pair's vectors; the barrier
        # makes every read of P come before the in-place write of the new pair (otherwise XLA
        # may schedule a read after the write and copy all of P, 2m n values, to allow it).
        w, gd = compact_coefficients(new, m)
        w, gamma_d = _no_direction_unless_finite(w, gd, new.gamma)
        in_p = w.at[slot].set(0.0).at[m + slot].set(0.0)
        d = -gamma_d * gt + in_p @ st.P + w[slot] * new_s + w[m + slot] * new_y
        d, P_old = lax.optimization_barrier((d, st.P))
        P = lax.dynamic_update_slice(P_old, new_s[None], (slot, zero))
        P = lax.dynamic_update_slice(P, new_y[None], (m + slot, zero))
        diag_ok = jnp.asarray(True)
    else:
        P = lax.dynamic_update_slice(st.P, new_s[None], (slot, zero))
        P = lax.dynamic_update_slice(P, new_y[None], (m + slot, zero))
        d, gd, diag_ok = _direction(cfg, new._replace(P=P), h0)
        d = jnp.where(jnp.isfinite(gd), d, 0.0)  # as _no_direction_unless_finite
    new = new._replace(P=P)
    status = jnp.where(ok, _RUNNING, jnp.asarray(_INFO_TO_STATUS)[jnp.clip(ls.info, 0, 6)])
    status = jnp.where(ok & (new.gnorm <= cfg.eps * jnp.maximum(1.0, xnorm)), Status.SUCCESS, status)
    status = jnp.where((status == _RUNNING) & ~diag_ok, Status.DIAG_NOT_POSITIVE, status)
    new = new._replace(d=d, ls=line_search_init(ft, gd, 1.0, cfg.params), status=status.astype(jnp.int32))
    if not masked:
        return new
    # P's written rows are already masked: a select over all of P would double its traffic.
    kept = jax.tree.map(lambda a_, b_: jnp.where(running, a_, b_), new._replace(P=st.P), st)
    return kept._replace(P=P)


def _no_direction_unless_finite(w: jax.Array, gd: jax.Array, gamma: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(w, gamma)`` of the next direction ``d = -gamma g + w @ P``, both zero where ``g'd`` is not
    finite (an overflowing gradient: y'y = inf makes gamma 0 and g'd = 0 * inf): the next search
    then has improper input (info 0) and its one evaluation, at ``x + 0 d``, is ``x`` itself, not
    NaN (a NaN ``d`` made ``x`` NaN).  Scalars and the 2m coefficients only: no pass over n."""
    ok = jnp.isfinite(gd)
    return jnp.where(ok, w, 0.0), jnp.where(ok, gamma, 0.0)


def iterate(cfg: _Config, vg: Callable, st: LBFGSState, h0: jax.Array, masked: bool) -> LBFGSState:
    """One whole iteration of one problem: the line search (an inner loop), then the update."""

    def evaluate(carry):
        ls, _, _, _, _ = carry
        xt = trial_point(st._replace(ls=ls))
        ft, gt = vg(xt)
        dgt = gt @ st.d
        ls, _, _, _ = line_search_update(ls, ft, dgt)
        return ls, xt, ft, gt, dgt

    # do-while: the first trial is always evaluated (a search that is already done - bad input -
    # re-evaluates x itself, stp = 0, and counts nothing), so the loop's buffers start fresh
    # rather than as copies of x and g.
    carry = evaluate((st.ls, None, None, None, None))
    ls, xt, ft, gt, dgt = lax.while_loop(lambda c: ~c[0].done, evaluate, carry)
    return finish_iteration(cfg, st, ls, xt, ft, gt, dgt, h0, masked)


def line_evaluation(problem: Problem) -> Callable | None:
    """The user's one-pass evaluation along a line, ``along(x, d, stp) -> (f, g, g'd)`` at ``x + stp d``
    (an ``along`` attribute of ``Problem(value_and_grad=...)``, e.g. cute's Extended Rosenbrock),
    in the problem's dtype; None without one, or when fixed parameters or ``args`` stand between
    the solver's ``x`` and the user's."""
    along = getattr(problem._user_vg, "along", None)
    if along is None or problem.fixed or problem._takes_args:
        return None
    dt = problem.dtype

    def evaluate(x: jax.Array, d: jax.Array, stp: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        f, g, gd = along(x, d, stp)
        return jnp.asarray(f).astype(dt), jnp.asarray(g).astype(dt), jnp.asarray(gd).astype(dt)

    return evaluate


def line_evaluation_reason(problem: Problem, plan: lbfgs_kernel.KernelPlan) -> str:
    """How the line search evaluated, for ``stats["line_evaluation"]``: through the problem's
    ``value_and_grad.along`` (with its ``.plan(n, dtype)``'s reason where it has one), or by
    ``value_and_grad`` at ``x + stp d``, and why."""
    along = line_evaluation(problem)
    plain = "value_and_grad at x + stp d, then g'd"
    if along is None:
        return plain
    if not plan.use_pallas or plan.split:
        return f"{plain} (value_and_grad.along serves the fused passes on one device only; {plan.reason})"
    explain = getattr(problem._user_vg.along, "plan", None)
    return f"value_and_grad.along: {explain(problem.n_free, problem.dtype).reason if explain else 'one pass along x + stp d'}"


def iterate_packed(
    cfg: _Config, vg: Callable, st: LBFGSState, h0: jax.Array, along: Callable | None = None,
    grads: jax.Array | None = None, new_row: jax.Array | None = None, into: Callable | None = None,
) -> LBFGSState | tuple[LBFGSState, jax.Array]:
    """:func:`iterate` (one problem, unmasked) with the line search's state carried packed.
    ``along``: :func:`line_evaluation`'s one-pass evaluation, used where the trial point need not
    be kept (one device, fused passes).

    ``grads`` (2, n), ``new_row``, ``into`` (:func:`line_evaluation_into`; one device, fused
    passes): the previous gradient is row ``1 - new_row`` of ``grads`` (``st.g`` unused), the
    evaluations write theirs into row ``new_row`` in place; returns ``(state, grads)``."""
    layout = _scalar_layout(st.ls)
    dt = st.x.dtype
    if grads is not None:
        return _iterate_rows(cfg, st, h0, grads, new_row, into, layout)

    # With the fused passes on one device, pass A forms the accepted trial point x + stp d again
    # from x and d (which it reads anyway), so the evaluations do not write theirs (n values each).
    keep_trial = not (cfg.pallas and cfg.mesh is None)

    def evaluate(ls):
        if along is not None and not keep_trial:
            xt = None
            ft, gt, dgt = along(st.x, st.d, ls.stp)
        else:
            xt = trial_point(st._replace(ls=ls))
            ft, gt = vg(xt)
            dgt = gt @ st.d
        ls, _, _, _ = line_search_update(ls, ft, dgt)
        _, lf, li = _pack(layout, ls, dt)
        return lf, li, xt if keep_trial else None, ft, gt, dgt

    def body(carry):
        lf, li = carry[:2]
        return evaluate(_unpack(layout, [None] * len(layout.float_index + layout.int_index), lf, li))

    def cond(carry):
        return ~_unpack(layout, [None] * len(layout.float_index + layout.int_index), carry[0], carry[1]).done

    lf, li, xt, ft, gt, dgt = lax.while_loop(cond, body, evaluate(st.ls))
    ls = _unpack(layout, [None] * len(layout.float_index + layout.int_index), lf, li)
    return finish_iteration(cfg, st, ls, xt, ft, gt, dgt, h0, False)


def _iterate_rows(
    cfg: _Config, st: LBFGSState, h0: jax.Array, grads: jax.Array, new_row: jax.Array, into: Callable,
    layout: _ScalarLayout,
) -> tuple[LBFGSState, jax.Array]:
    """:func:`iterate_packed` with both gradients in one (2, n) buffer: the line search's
    evaluations write g into row ``new_row`` (aliased, in place), passes A and B read both rows,
    and pass B no longer copies the new gradient into the loop's g buffer (n values per iteration)."""
    dt = st.x.dtype
    blank = [None] * len(layout.float_index + layout.int_index)

    def evaluate(ls, grads):
        ft, grads, dgt = into(st.x, st.d, ls.stp, grads, new_row)
        ls, _, _, _ = line_search_update(ls, ft, dgt)
        _, lf, li = _pack(layout, ls, dt)
        return lf, li, ft, grads, dgt

    def body(carry):
        lf, li, _, grads, _ = carry
        return evaluate(_unpack(layout, blank, lf, li), grads)

    def cond(carry):
        return ~_unpack(layout, blank, carry[0], carry[1]).done

    lf, li, ft, grads, dgt = lax.while_loop(cond, body, evaluate(st.ls, grads))
    ls = _unpack(layout, blank, lf, li)
    return finish_iteration(cfg, st, ls, None, ft, grads, dgt, h0, False, new_row=new_row), grads


def line_evaluation_into(problem: Problem) -> Callable | None:
    """The user's one-pass evaluation writing g into a row of a buffer, ``into(x, d, stp, out, row)
    -> (f, out, g'd)`` (an ``into`` attribute of ``value_and_grad.along``, e.g. cute's
    :func:`~multiwalk.functions.cute.rosenbrock_along_into`); None where
    :func:`line_evaluation` is None or the hook is missing."""
    if line_evaluation(problem) is None:
        return None
    into = getattr(problem._user_vg.along, "into", None)
    if into is None:
        return None
    dt = problem.dtype

    def evaluate(x: jax.Array, d: jax.Array, stp: jax.Array, out: jax.Array, row: jax.Array):  # noqa: ANN202
        f, out, gd = into(x, d, stp, out, row)
        return jnp.asarray(f).astype(dt), out, jnp.asarray(gd).astype(dt)

    return evaluate


# --------------------------------------------------------------------------------------------------
# the solver
# --------------------------------------------------------------------------------------------------


def _digest(arr: np.ndarray) -> str:
    """A short digest of an array's bytes (a diag option in cache keys and checkpoints)."""
    return hashlib.blake2b(arr.tobytes(), digest_size=16).hexdigest()


class IterationTable:
    """The seed's iteration table (I, NFN, FUNC, GNORM, STEPLENGTH) of the first start, printed
    as the run goes: the :class:`~multiwalk.solvers.base.Writer` an ``LBFGS(print_every=...)``
    brings to every run (:meth:`LBFGS.writer`)."""

    def __init__(self, solver: LBFGS) -> None:
        self.solver = solver

    def write(self, problem: Problem, state: LBFGSRun, first: int, last: int) -> None:
        self.solver.print_rows(problem, state, first, last)

    def flush(self) -> None:
        """Nothing held: every row is printed when written."""


@dataclass(frozen=True, eq=False)
class LBFGS(Solver):
    """Liu & Nocedal's L-BFGS with the Moré-Thuente line search (the seed's ``lbfgs``).

    Parameters
    ----------
    m : number of stored correction pairs (3 <= m <= 7 recommended; memory is ``2 m n`` values).
    eps : stop when ``||g|| < eps * max(1, ||x||)``.
    max_iterations : iteration limit (the seed's ``icall``); reaching it is ``MAX_STEPS``.
    maxfev : evaluations allowed in one line search.
    gtol, ftol : the strong Wolfe constants: ``|phi'(stp)| <= gtol |phi'(0)|``,
        ``phi(stp) <= phi(0) + ftol stp phi'(0)``.  Constraint ``ftol < gtol < 1``.
    xtol : relative width of the line search's interval of uncertainty at which it gives up;
        default the machine epsilon of the problem's dtype.
    stpmin, stpmax : bounds of the step.
    diag : the diagonal ``H0`` instead of ``gamma I``: a positive array ``(n,)`` or a JAX
        function ``diag(x) -> (n,)`` called at each iteration (the seed's ``diagco``).
    print_every : print the seed's table (I, NFN, FUNC, GNORM, STEPLENGTH) of the first start
        every this many iterations (0: first and last only); ``None`` prints nothing.
    starts : draw this many starting points uniformly in the problem's box (needs lower/upper)
        instead of using ``x0``; each runs as an independent problem.
    line_search : ``"mcsrch"`` (Nocedal's, as in the seed) or ``"dcsrch"`` (MINPACK-2, as in
        scipy's L-BFGS-B).
    kernel : ``"auto"`` (default), ``"xla"`` or ``"pallas"``: how the two passes over the stored
        pairs run - as XLA operations, or as two fused Pallas (Triton) kernels
        (:mod:`multiwalk.solvers.lbfgs_kernel`; one start, ``H0 = gamma I``).
        ``"auto"`` uses the kernels on GPUs; one problem split along ``n`` over devices runs them
        on each device's columns (``jax.shard_map``, the small sums added by ``psum``).  Same iterates up to
        rounding; ``result.stats["kernel"]`` and ``["kernel_reason"]`` say which ran and why.
        With the kernels on one device, the line search evaluates through ``value_and_grad.along``
        where the problem's ``value_and_grad`` has one (``along(x, d, stp) -> (f, g, g'd)`` at
        ``x + stp d``; cute's Extended Rosenbrock: one Pallas kernel on GPUs);
        ``["line_evaluation"]`` says how it evaluated.
        ``"onepass"``: ONE Pallas kernel per line-search evaluation (direction, trial point, f and
        g by the problem's block-local ``value_and_grad.block``, and every product the small
        matrices need; :mod:`multiwalk.solvers.lbfgs_onepass`), for one start with ``H0 = gamma I``
        whose ``value_and_grad`` has ``.block`` (cute's Extended Rosenbrock); else the two-pass
        form, ``stats["kernel_reason"]`` saying why.  Split over devices, it runs under
        ``jax.shard_map`` on every device's columns, its sums added by ``psum``.  ``"auto"`` takes
        it where it applies on GPUs in float64 (measured faster on one with the same iterations
        and evaluations; on several only when split over all of them; :func:`lbfgs_onepass.plan`).
    kernel_block, kernel_warps : Pallas launch tuning: columns per program (a power of two)
        and warps per program (None: the module's defaults).  With ``kernel="onepass"``: the
        columns of one block step of its kernel (``2 x`` rows of Rosenbrock's pairs) and its warps.

    L-BFGS is unconstrained: the problem's ``lower``/``upper`` only draw ``starts`` (the runs may
    leave the box); a bounded problem with ``x0`` is refused (:meth:`check` says what to do).
    """

    m: int = 7
    eps: float = 1e-5
    max_iterations: int = 2000
    maxfev: int = 20
    gtol: float = 0.9
    ftol: float = 1e-4
    xtol: float | None = None
    stpmin: float = 1e-20
    stpmax: float = 1e20
    diag: Any = None
    print_every: int | None = None
    starts: int | None = None
    line_search: str = "mcsrch"
    kernel: str = "auto"
    kernel_block: int | None = None
    kernel_warps: int | None = None

    resumable_options = ("kernel", "kernel_block", "kernel_warps")  # how, not what: a resume may change them
    # True: the fused one-device loop keeps both gradients in one (2, n) buffer when the line
    # search evaluates through value_and_grad.along.into (run_chunk): n values fewer per iteration,
    # 3 n more per chunk.  Opt-in (a subclass) until a GPU measurement shows the gain;
    # False: pass B copies the new gradient into the loop's g buffer.
    gradient_rows: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_choice_option("kernel", self.kernel, (*KERNELS, "onepass"))
        check_launch_options(self, why=" (Triton needs that)")
        check_int_option("m", self.m, 1)
        check_int_option("max_iterations", self.max_iterations, 1)
        check_int_option("maxfev", self.maxfev, 1)
        check_int_option("print_every", self.print_every, 0, none_ok=True)
        check_int_option("starts", self.starts, 1, none_ok=True)
        object.__setattr__(self, "eps", check_number_option("eps", self.eps, 0))
        object.__setattr__(self, "ftol", check_number_option("ftol", self.ftol, 0, low_open=True))
        object.__setattr__(self, "gtol", check_number_option("gtol", self.gtol, 0, low_open=True))
        object.__setattr__(self, "xtol", check_number_option("xtol", self.xtol, 0, none_ok=True))
        object.__setattr__(self, "stpmin", check_number_option("stpmin", self.stpmin, 0))
        object.__setattr__(self, "stpmax", check_number_option("stpmax", self.stpmax, 0, low_open=True))
        if not self.ftol < 1:
            raise ValueError(f"ftol={self.ftol} must be below 1 (sufficient decrease; default 1e-4)")
        if not self.gtol < 1:
            raise ValueError(f"gtol={self.gtol} must be below 1 (curvature condition; default 0.9)")
        if not self.ftol < self.gtol:
            raise ValueError(
                f"ftol={self.ftol} must be below gtol={self.gtol}: the strong Wolfe conditions need 0 < ftol < gtol < 1"
            )
        if not self.stpmin < self.stpmax:
            raise ValueError(f"stpmin={self.stpmin} must be below stpmax={self.stpmax}")
        check_choice_option("line_search", self.line_search, ("mcsrch", "dcsrch"))
        if self.diag is not None and not callable(self.diag):
            arr = np.asarray(self.diag)
            if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.number):
                raise ValueError(f"diag must be a vector (n,) of positive numbers or a function diag(x), got {self.diag!r}")
            bad = np.flatnonzero(~(np.isfinite(arr) & (arr > 0)))
            if bad.size:
                i = int(bad[0])
                raise ValueError(f"diag[{i}]={arr[i]} is not positive: H0 = diag must be positive (seed istate=-2)")
            object.__setattr__(self, "diag", arr)

    # Equality and hashing by option values (a diag array by its digest): compiled loops are
    # cached per solver, and a frozen dataclass cannot hash an array.
    def _key(self) -> tuple:
        out = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray):
                v = (v.shape, str(v.dtype), _digest(v))
            out.append(v)
        return tuple(out)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._key())

    def options(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if isinstance(self.diag, np.ndarray):  # a digest, not 1e7 numbers, in checkpoints
            out["diag"] = "sha:" + _digest(self.diag)
        elif callable(self.diag):
            out["diag"] = getattr(self.diag, "__qualname__", repr(self.diag))
        return out

    # ----------------------------------------------------------------- set-up
    def _config(self, dtype: Any, plan: lbfgs_kernel.KernelPlan | None = None) -> _Config:
        """The iteration's constants, on one device (:meth:`run_chunk` adds the run plan's mesh
        where the fused passes run split)."""
        params = LineSearchParams(
            ftol=self.ftol, gtol=self.gtol, xtol=self.xtol, stpmin=self.stpmin, stpmax=self.stpmax,
            maxfev=self.maxfev, minpack2=self.line_search == "dcsrch",
        )
        return _Config(
            m=self.m, eps=self.eps, params=params,
            diag_fn=self.diag if callable(self.diag) else None, use_h0=isinstance(self.diag, np.ndarray),
            pallas=plan is not None and plan.use_pallas, interpret=plan is not None and plan.interpret,
            block=self.kernel_block or lbfgs_kernel.DEFAULT_BLOCK, warps=self.kernel_warps or lbfgs_kernel.DEFAULT_WARPS,
            a_block=self.kernel_block or lbfgs_kernel.PASS_A_BLOCK, a_warps=self.kernel_warps or lbfgs_kernel.PASS_A_WARPS,
            # a user's kernel_block is pass A's columns per program too (its docstring), so one chunk
            a_chunks=lbfgs_kernel.PASS_A_CHUNKS if self.kernel_block is None else 1, a_stages=lbfgs_kernel.PASS_A_STAGES,
        )

    def kernel_plan(self, problem: Problem, devices: int = 1) -> lbfgs_kernel.KernelPlan:
        """Which form (fused Pallas passes or XLA) runs the iterations on ``problem`` here, and why.

        ``devices``: how many devices the run is split over (the run plan's mesh).  A single problem
        is split along ``n``, several starts along the starts (the plan then says the XLA form runs
        them anyway)."""
        kernel = "auto" if self.kernel == "onepass" else self.kernel  # the form onepass falls back to
        return lbfgs_kernel.plan(kernel, self.m, self.n_starts(problem), self.diag is not None, devices)

    def onepass_plan(self, problem: Problem, devices: int = 1, requested: int | None = None) -> lbfgs_onepass.OnePassPlan:
        """Whether the run uses the one-pass loop (``kernel="onepass"``; decided at ``init``, the
        state's layout then says so), and why (not); ``devices``: how many devices the run is
        split over (for the reason; the driver splits the rings when it splits the run);
        ``requested``: how many it may be split over (None: every device), for ``kernel="auto"``."""
        return lbfgs_onepass.plan(self.kernel, problem, self.n_starts(problem), self.diag is not None, devices, self.m,
                                  requested)

    def plan(self, problem: Problem, devices: int, time_limit: float | None) -> RunPlan:
        """The one-pass plan (``kernel``: whether the one-pass loop runs, decided with the devices
        the run may be split over; it sets the state's layout) and its XLA options on a GPU
        (:func:`lbfgs_onepass.compiler_options`).  The two-pass kernels' plan depends on the split
        and is made where the loop is traced, from the plan's mesh (:meth:`kernel_plan`)."""
        onepass = self.onepass_plan(problem, requested=devices)
        options = tuple(lbfgs_onepass.compiler_options(onepass).items())
        return RunPlan(devices=devices, kernel=onepass, compiler_options=options)

    def n_starts(self, problem: Problem) -> int:
        if self.starts is not None:
            return self.starts
        return problem.x0.shape[0] if problem.x0 is not None and problem.x0.ndim == 2 else 1

    def check(self, problem: Problem) -> None:
        if self.starts is None and problem.x0 is None:
            raise ValueError(
                "LBFGS needs a starting point: give Problem(x0=...) (shape (n,) or (K, n) for K starts), "
                "or LBFGS(starts=K) with lower/upper to draw K starts uniformly"
            )
        if self.starts is not None and problem.lower is None:
            raise ValueError(f"LBFGS(starts={self.starts}) draws starts uniformly in the box: give Problem lower= and upper=")
        if self.starts is not None and problem.x0 is not None:
            raise ValueError(
                f"give the starts either as x0 of shape {problem.x0.shape} or as LBFGS(starts={self.starts}), not both"
            )
        if problem.lower is not None and self.starts is None:
            raise ValueError(
                "LBFGS is unconstrained: it would ignore the Problem's lower/upper (they only draw the starting "
                "points of LBFGS(starts=K), when no x0 is given), and x could end outside the box. Drop lower= "
                "and upper= from the Problem to minimise without bounds, give LBFGS(starts=K) and no x0 to draw "
                "K starts in the box, or use a box solver (mw.PatternSearch, mw.ReplicaExchange)"
            )
        if isinstance(self.diag, np.ndarray) and self.diag.shape != (problem.n_free,):
            raise ValueError(
                f"diag has {self.diag.shape[0]} entries but the problem has {problem.n_free} free parameters"
            )
        if callable(self.diag):
            probe = jax.ShapeDtypeStruct((problem.n_free,), problem.dtype)
            try:
                out = jax.eval_shape(self.diag, probe)
            except Exception as err:
                raise TypeError(f"calling diag(x) with x of shape ({problem.n_free},) failed: {err}") from err
            if getattr(out, "shape", None) != (problem.n_free,):
                raise ValueError(f"diag(x) must return shape ({problem.n_free},), got {getattr(out, 'shape', None)}")
        self._check_along(problem)
        block = lbfgs_onepass.block_hook(problem)
        onepass = block is not None and self.onepass_plan(problem).use
        if onepass:  # a public hook: by shapes, before compiling
            rows, width = lbfgs_onepass.ROWS, block.width
            fix = (f"return (f terms, g) for a (rows, width) block of x: shapes (rows,), (rows, width) "
                   f"= ({rows},), ({rows}, {width})")
            try:
                out = jax.eval_shape(block, jax.ShapeDtypeStruct((rows, width), problem.dtype))
            except Exception as err:
                raise TypeError(f"calling value_and_grad.block(xb) with xb of shape ({rows}, {width}) failed: {err}; "
                                f"it must {fix}") from err
            shapes = tuple(getattr(o, "shape", None) for o in out) if isinstance(out, (tuple, list)) else (out,)
            if shapes != ((rows,), (rows, width)):
                raise ValueError(f"value_and_grad.block(xb) returned shapes {shapes} for xb of shape ({rows}, {width}); "
                                 f"it must {fix}")
        if onepass and self.kernel == "onepass" and self.kernel_block is not None and self.kernel_block < block.width:
            raise ValueError(
                f"kernel_block={self.kernel_block} with kernel='onepass' is the columns of one block step of its "
                f"kernel: at least the block hook's width {block.width} (value_and_grad.block.width); give a "
                f"power of two >= {block.width}, or None for the default"
            )

    def convert_checkpoint(self, fresh_state: LBFGSRun, saved_layout: list[str], leaves: list[np.ndarray]) -> list | None:
        """A one-pass checkpoint (rings X, G, S) resumed in the stored-pairs form, or the reverse: ``kernel``
        is a resumable option, and ``"auto"`` picks the form by backend, dtype and device count.  The
        pairs of age ``a = 1..count`` (slot ``(head - a) % m`` of P, position ``m - a`` of the one-pass
        small matrices), ``y_a = g_{k-a+1} - g_{k-a}``; the direction from ``w`` (or ``w`` from the
        small matrices).  Equal up to rounding (older gradients rebuilt as g - y)."""
        one_now = isinstance(fresh_state.starts, lbfgs_onepass.OnePassState)
        if ("OnePassState" in saved_layout) == one_now or fresh_state.starts.f.shape[0] != 1:
            return None
        m = self.m
        other = lbfgs_onepass.OnePassState if not one_now else LBFGSState
        template = other(**{f: 0 for f in other._fields if f != "ls"}, ls=fresh_state.starts.ls)
        saved_run = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(fresh_state._replace(starts=template)),
                                                 leaves)
        st = jax.tree_util.tree_map(lambda v: np.asarray(v)[0], saved_run.starts)  # one problem
        k, c, head = int(st.iteration), int(st.count), int(st.head)
        ages = np.arange(1, m + 1)
        ring, chrono = (head - ages) % m, m - ages  # where the pair of each age sits in either form
        small = {}
        for name in ("SY", "YY", "a", "b"):
            v = np.asarray(getattr(st, name))
            out = np.zeros_like(v)
            src, dst = (chrono, ring) if not one_now else (ring, chrono)
            if v.ndim == 2:
                out[np.ix_(dst, dst)] = v[np.ix_(src, src)]
            else:
                out[dst] = v[src]
            small[name] = out
        keep = {f: getattr(st, f) for f in ("f", "gamma", "gg", "head", "count", "ls", "iteration", "nfev",
                                            "gnorm", "xnorm", "stp", "status", "nonfinite")}
        if not one_now:  # rings -> stored pairs
            n = st.X[0].size
            X, G, S = (np.asarray(r).reshape(r.shape[0], n) for r in (st.X, st.G, st.S))
            x, g = X[k % 2], G[k % (m + 2)]
            P = np.zeros((2 * m, n), x.dtype)
            d = -st.gamma * g
            for a in range(1, c + 1):
                sl, s_a = (head - a) % m, S[(k - a) % (m + 1)]
                y_a = G[(k - a + 1) % (m + 2)] - G[(k - a) % (m + 2)]
                P[sl], P[m + sl] = s_a, y_a
                d = d + st.w[m - a] * s_a + st.w[2 * m - a] * y_a
            new = LBFGSState(x=x, g=g, d=d, P=P, **small, **keep)
        else:  # stored pairs -> rings
            shape = fresh_state.starts.X.shape[2:]  # (n / width, width)
            n, dt = st.x.size, st.x.dtype
            X, G, S = np.zeros((2, n), dt), np.zeros((m + 2, n), dt), np.zeros((m + 1, n), dt)
            X[k % 2], G[k % (m + 2)] = st.x, st.g
            for a in range(1, c + 1):
                sl = (head - a) % m
                S[(k - a) % (m + 1)] = st.P[sl]
                G[(k - a) % (m + 2)] = G[(k - a + 1) % (m + 2)] - st.P[m + sl]
            coef = lbfgs_onepass._Small(**{f: jnp.asarray(small[f]) for f in ("SY", "YY", "a", "b")},
                                        gamma=st.gamma, gg=st.gg, head=st.head, count=st.count, g=jnp.zeros((0,), dt))
            w, _ = lbfgs_onepass._coefficients_chronological(coef, m)
            new = lbfgs_onepass.OnePassState(X=X.reshape(2, *shape), G=G.reshape(m + 2, *shape),
                                             S=S.reshape(m + 1, *shape), w=np.asarray(w), **small, **keep)
        starts = jax.tree_util.tree_map(lambda v: np.asarray(v)[None], new)
        return jax.tree_util.tree_leaves(saved_run._replace(starts=starts))  # the history and h0 as saved

    @staticmethod
    def _check_along(problem: Problem) -> None:
        """``value_and_grad.along`` (and its ``.into``), a public hook, by shapes before compiling: a
        wrong shape would otherwise fail deep in the traced loop without naming the hook."""
        along = line_evaluation(problem)
        if along is None:
            return
        n, dt = problem.n_free, problem.dtype
        vec, scalar = jax.ShapeDtypeStruct((n,), dt), jax.ShapeDtypeStruct((), dt)
        fix = "return (f, g, g'd) at x + stp d: shapes (), (n,), ()"
        try:
            out = jax.eval_shape(along, vec, vec, scalar)
        except Exception as err:
            raise TypeError(f"calling value_and_grad.along(x, d, stp) with x, d of shape ({n},) failed: {err}; "
                            f"it must {fix}") from err
        shapes = tuple(getattr(o, "shape", None) for o in out)
        if shapes != ((), (n,), ()):
            raise ValueError(f"value_and_grad.along(x, d, stp) returned shapes {shapes} for x, d of shape ({n},); "
                             f"it must {fix} = (), ({n},), ()")
        into = line_evaluation_into(problem)
        if into is None:
            return
        buffer, row = jax.ShapeDtypeStruct((2, n), dt), jax.ShapeDtypeStruct((), jnp.int32)
        fix = "return (f, out, g'd) with g written into out[row]: shapes (), (2, n), ()"
        try:
            out = jax.eval_shape(into, vec, vec, scalar, buffer, row)
        except Exception as err:
            raise TypeError(f"calling value_and_grad.along.into(x, d, stp, out, row) with x, d of shape ({n},) and "
                            f"out of shape (2, {n}) failed: {err}; it must {fix}") from err
        shapes = tuple(getattr(o, "shape", None) for o in out)
        if shapes != ((), (2, n), ()):
            raise ValueError(f"value_and_grad.along.into returned shapes {shapes} for x, d of shape ({n},) and out "
                             f"of shape (2, {n}); it must {fix} = (), (2, {n}), ()")

    def phases(self, problem: Problem) -> list[Phase]:
        return [Phase("lbfgs", self.max_iterations)]

    def batch_axes(self, problem: Problem, state: LBFGSRun) -> LBFGSRun:
        """Several starts: split the starts (every leaf of ``starts`` along its first axis).

        One start: split the vectors along ``n`` (``x``, ``g``, ``d`` and the ``2m`` stored
        pairs ``P``), so a problem too large for one device's memory spreads over all of them;
        its dot products become all-reduces that XLA inserts, and the objective runs on split
        ``x`` (elementwise terms and sums split too).  The small matrices stay whole everywhere."""
        if isinstance(state.starts, lbfgs_onepass.OnePassState):  # the rings along n / width (axis 2 of (1, r, n/w, w))
            starts = jax.tree.map(lambda _: None, state.starts)._replace(X=2, G=2, S=2)
            return LBFGSRun(starts=starts, history=jax.tree.map(lambda _: None, state.history), h0=None)
        K = state.starts.x.shape[0]
        if K > 1:
            starts = jax.tree.map(lambda _: 0, state.starts)
            return LBFGSRun(starts=starts, history=jax.tree.map(lambda _: None, state.history), h0=None)
        starts = jax.tree.map(lambda _: None, state.starts)._replace(x=1, g=1, d=1, P=2)
        h0 = 0 if state.h0.ndim == 1 else None  # the user's diagonal H0, one value per coordinate
        return LBFGSRun(starts=starts, history=jax.tree.map(lambda _: None, state.history), h0=h0)

    def state_memory(self, problem: Problem) -> tuple[int, str]:
        """The state's bytes (:func:`_state_bytes`) and the options that set them."""
        n, K, m = problem.n_free, self.n_starts(problem), self.m
        need = _state_bytes(n, m, K, np.dtype(problem.dtype).itemsize, self.max_iterations,
                            isinstance(self.diag, np.ndarray), self.onepass_plan(problem).use)
        starts = f", or fewer starts ({K})" if K > 1 else ""
        return need, (f"lower m={m} (each start keeps 2m+3 vectors of n={n} values and two m x m matrices){starts}, "
                      f"or split the run over more devices (solve(devices=...))")

    def batch_option(self, problem: Problem) -> str:
        if self.n_starts(problem) > 1:
            return "starts"
        if self.onepass_plan(problem).use:  # the rings split by rows of the block hook
            width = lbfgs_onepass.block_hook(problem).width
            return f"n / {width} (rows of the block hook)"
        return "n (free parameters of the one problem)"

    def _x0(self, problem: Problem, key: jax.Array) -> jax.Array:
        dt = problem.dtype
        if self.starts is not None:
            lo, hi, _ = problem.free_bounds()
            return uniform_in_box(key, (self.starts, problem.n_free), lo, hi, dt, width_in_float64=True)
        x0 = problem.x0 if problem.x0.ndim == 2 else problem.x0[None]
        # numpy, not a device array: the driver sends it where the state goes (split for huge n)
        return np.asarray(x0[:, problem.free_index], dtype=jnp.dtype(dt))

    def initial_state_fn(
        self, problem: Problem, shardings: Any = None, plan: RunPlan | None = None
    ) -> Callable[[jax.Array], LBFGSRun]:
        # x0 and diag go in as arguments: as constants they would be compiled into the program.
        # Split: x0 and h0 arrive split like the state's x and h0 (below), and the state is made split.
        # cached_jit: a repeated solve() of the same problem reuses the compiled start.
        # The plan's one-pass decision sets the state's layout (rings or stored pairs).
        onepass = (self.onepass_plan(problem) if plan is None else plan.kernel).use
        init = cached_jit(problem, self, "init one-pass" if onepass else "init",
                          lambda k, x, h: self.init(problem, k, x, h, onepass), shardings)

        def initial_state(key: jax.Array) -> LBFGSRun:
            x0 = None if self.starts is not None else self._x0(problem, key)
            dt = jnp.dtype(problem.dtype)
            h0 = np.asarray(self.diag, dt) if isinstance(self.diag, np.ndarray) else np.zeros((), dt)
            if shardings is not None and x0 is not None:
                from .. import distributed

                if isinstance(shardings.starts, lbfgs_onepass.OnePassState):  # x0 (1, n) split like the rings
                    from jax.sharding import NamedSharding, PartitionSpec

                    x_sharding = NamedSharding(shardings.starts.X.mesh, PartitionSpec(None, distributed.AXIS))
                else:
                    x_sharding = shardings.starts.x
                x0 = distributed.place(x0, x_sharding)
                h0 = distributed.place(h0, shardings.h0)
            return init(key, x0, h0)

        return initial_state

    def init(self, problem: Problem, key: jax.Array, x0: Any = None, h0: Any = None,
             onepass: bool | None = None) -> LBFGSRun:
        """The start; ``onepass``: in the one-pass loop's layout (None: as :meth:`onepass_plan` says
        for every device)."""
        cfg = self._config(problem.dtype)
        x0 = self._x0(problem, key) if x0 is None else x0
        h0 = jnp.zeros((), problem.dtype) if h0 is None else h0
        f, g = jax.vmap(problem.value_and_grad_free)(x0)
        starts = jax.vmap(lambda x, f, g: start(cfg, x, f, g, h0))(x0, f, g)
        K = x0.shape[0]
        kh = min(K, _HISTORY_STARTS)
        rows = self.max_iterations + 1
        dt = problem.dtype
        hist = History(
            f=jnp.zeros((rows, kh), dt).at[0].set(starts.f[:kh]),
            gnorm=jnp.zeros((rows, kh), dt).at[0].set(starts.gnorm[:kh]),
            stp=jnp.zeros((rows, kh), dt),
            nfev=jnp.zeros((rows, kh), jnp.int32).at[0].set(starts.nfev[:kh]),
        )
        if self.onepass_plan(problem).use if onepass is None else onepass:  # the one-pass loop's rings (no P, d)
            one = jax.tree.map(lambda a: lax.squeeze(a, (0,)), starts)
            width = lbfgs_onepass.block_hook(problem).width
            starts = jax.tree.map(lambda a: lax.expand_dims(a, (0,)), lbfgs_onepass.to_onepass(one, self.m, width))
        return LBFGSRun(starts=starts, history=hist, h0=h0)

    def step(self, problem: Problem, state: LBFGSRun, phase: int) -> LBFGSRun:
        if isinstance(state.starts, lbfgs_onepass.OnePassState):
            return self.run_chunk(problem, state, phase, jnp.ones((), jnp.int32))[0]
        # the plan of one device: where the driver's loop steps (run_chunk's XLA form: several
        # starts, or no fused passes) the form and its constants do not depend on the split
        cfg = self._config(problem.dtype, self.kernel_plan(problem))
        vg = problem.value_and_grad_free
        K = state.starts.x.shape[0]
        before = state.starts
        if K == 1:  # no batch: no masking selects over n-vectors (the loop stops when it is done)
            # squeeze / expand_dims are free reshapes (a[0] and a[None] would make XLA copy P)
            one = jax.tree.map(lambda a: lax.squeeze(a, (0,)), before)
            after = jax.tree.map(lambda a: lax.expand_dims(a, (0,)), iterate(cfg, vg, one, state.h0, masked=False))
        else:
            after = jax.vmap(lambda s: iterate(cfg, vg, s, state.h0, masked=True))(before)
        kh = state.history.f.shape[1]
        moved = before.status[:kh] == _RUNNING
        rows = jnp.where(moved, after.iteration[:kh], state.history.f.shape[0])  # out of range: dropped
        cols = jnp.arange(kh)
        h = state.history
        hist = History(
            f=h.f.at[rows, cols].set(after.f[:kh], mode="drop"),
            gnorm=h.gnorm.at[rows, cols].set(after.gnorm[:kh], mode="drop"),
            stp=h.stp.at[rows, cols].set(after.stp[:kh], mode="drop"),
            nfev=h.nfev.at[rows, cols].set(after.nfev[:kh], mode="drop"),
        )
        return LBFGSRun(starts=after, history=hist, h0=state.h0)

    def run_chunk(
        self, problem: Problem, state: LBFGSRun, phase: int, n: jax.Array, plan: RunPlan | None = None
    ) -> tuple[LBFGSRun, jax.Array]:
        """Up to ``n`` iterations.  The fused form (one start, Pallas passes) carries the state's
        scalars packed in two vectors and the history as one (rows, 4) table (:func:`_pack`),
        so the loop launches few small kernels per iteration; same arithmetic as ``step``.
        The one-pass form (a state made by ``kernel="onepass"``): :func:`lbfgs_onepass.run_chunk`.
        ``plan``: the run plan, whose mesh (a split run's) the kernels run split on."""
        mesh = None if plan is None else plan.mesh
        if isinstance(state.starts, lbfgs_onepass.OnePassState):
            return self._run_onepass(problem, state, n, mesh)
        kplan = self.kernel_plan(problem, devices=1 if mesh is None else mesh.size)
        if state.starts.x.shape[0] != 1 or not kplan.use_pallas:
            return super().run_chunk(problem, state, phase, n, plan)
        cfg = self._config(problem.dtype, kplan)
        if kplan.split:  # the passes under shard_map on the mesh, their small sums added by psum
            cfg = dataclasses.replace(cfg, mesh=mesh)
        vg = problem.value_and_grad_free
        along = line_evaluation(problem)
        # Both gradients in one (2, n) buffer, the evaluations writing into the older one's row:
        # no pass copies the new gradient (n values per iteration); costs 3 n values per chunk
        # (the buffer filled from g here, g taken out after the loop).
        into = line_evaluation_into(problem) if cfg.mesh is None and self.gradient_rows else None
        dt = state.starts.x.dtype
        one = jax.tree.map(lambda a: lax.squeeze(a, (0,)), state.starts)
        g0 = one.g
        if into is not None:
            one = one._replace(g=jnp.zeros((0,), dt))  # unused in the loop: the gradients live in grads
        layout = _scalar_layout(one)
        h = state.history
        table = jnp.stack([h.f[:, 0], h.gnorm[:, 0], h.stp[:, 0], h.nfev[:, 0].astype(dt)], axis=1)  # (rows, 4)

        def cond(carry):
            i, _, _, ints, _, _ = carry
            st = _unpack(layout, [None] * len(jax.tree.leaves(one)), jnp.zeros(len(layout.float_index), dt), ints)
            return (i < n) & (st.status == _RUNNING)

        def body(carry):
            i, rest, floats, ints, table, grads = carry
            st = _unpack(layout, rest, floats, ints)
            if into is None:
                new = iterate_packed(cfg, vg, st, state.h0, along)
            else:  # iteration i of the chunk: the gradient in row i % 2, the new one into the other
                new, grads = iterate_packed(cfg, vg, st, state.h0, grads=grads, new_row=1 - i % 2, into=into)
            row = jnp.stack([new.f, new.gnorm, new.stp, new.nfev.astype(dt)])[None]
            table = lax.dynamic_update_slice(table, row, (new.iteration, jnp.zeros((), new.iteration.dtype)))
            return (i + 1, *_pack(layout, new, dt), table, grads)

        grads = jnp.stack([g0, g0]) if into is not None else jnp.zeros((0,), dt)
        carry = (jnp.zeros((), jnp.int32), *_pack(layout, one, dt), table, grads)
        n_run, rest, floats, ints, table, grads = lax.while_loop(cond, body, carry)
        final = _unpack(layout, rest, floats, ints)
        if into is not None:  # the last gradient is in row n_run % 2
            final = final._replace(g=lax.dynamic_index_in_dim(grads, n_run % 2, 0, keepdims=False))
        starts = jax.tree.map(lambda a: lax.expand_dims(a, (0,)), final)
        hist = History(
            f=table[:, 0:1].astype(h.f.dtype), gnorm=table[:, 1:2].astype(h.gnorm.dtype),
            stp=table[:, 2:3].astype(h.stp.dtype), nfev=table[:, 3:4].astype(h.nfev.dtype),
        )
        return LBFGSRun(starts=starts, history=hist, h0=state.h0), n_run

    def _run_onepass(self, problem: Problem, state: LBFGSRun, n: jax.Array, mesh: Any) -> tuple[LBFGSRun, jax.Array]:
        op = self.onepass_plan(problem)
        block = lbfgs_onepass.block_hook(problem)
        cfg = self._config(problem.dtype)
        own = self.kernel == "onepass"  # under "auto", kernel_block / kernel_warps are the two passes' launch
        launch = {
            "rows": self.kernel_block // block.width if own and self.kernel_block else lbfgs_onepass.ROWS,
            "num_warps": (own and self.kernel_warps) or lbfgs_onepass.WARPS, "chunks": lbfgs_onepass.CHUNKS,
            "interpret": op.interpret,
        }
        dt = problem.dtype
        h = state.history
        table = jnp.stack([h.f[:, 0], h.gnorm[:, 0], h.stp[:, 0], h.nfev[:, 0].astype(dt)], axis=1)  # (rows, 4)
        one = jax.tree.map(lambda a: lax.squeeze(a, (0,)), state.starts)
        # the run plan's mesh, for a split run (the rings split along n / width): the kernel under
        # shard_map, its sums added by psum
        final, table, n_run = lbfgs_onepass.run_chunk(cfg, one, table, n, block, launch, mesh=mesh)
        hist = History(
            f=table[:, 0:1].astype(h.f.dtype), gnorm=table[:, 1:2].astype(h.gnorm.dtype),
            stp=table[:, 2:3].astype(h.stp.dtype), nfev=table[:, 3:4].astype(h.nfev.dtype),
        )
        starts = jax.tree.map(lambda a: lax.expand_dims(a, (0,)), final)
        return LBFGSRun(starts=starts, history=hist, h0=state.h0), n_run

    def done(self, problem: Problem, state: LBFGSRun, phase: int) -> jax.Array:
        return jnp.all(state.starts.status != _RUNNING)

    def summary(self, problem: Problem, state: LBFGSRun) -> dict[str, jax.Array]:
        st = state.starts
        out = {"f": jnp.min(worst_if_nonfinite(st.f)[0]), "gnorm": jnp.min(st.gnorm)}
        if st.f.shape[0] > 1:
            out["running"] = jnp.sum(st.status == _RUNNING)
        return out

    # ----------------------------------------------------------------- printing (the seed's table)
    def writer(self, problem: Problem) -> IterationTable | None:
        """With ``print_every``: the seed's table, printed as the run goes."""
        return None if self.print_every is None else IterationTable(self)

    def print_rows(self, problem: Problem, state: LBFGSRun, first: int, last: int) -> None:
        """Print the table rows of iterations ``first+1 .. last`` of the first start (with the
        header when ``first`` is 0)."""
        if self.print_every is None:
            return
        if first == 0:
            h = state.history
            print(f"Number of variables n = {problem.n_free};")
            print(f"Number of corrections m = {self.m};")
            print(f"f = {float(h.f[0, 0]):e};")
            print(f"gnorm = {float(h.gnorm[0, 0]):e}")
            print("*****")
            print(f"{'I':>5}  {'NFN':>6}  {'FUNC':>14}  {'GNORM':>14}  {'STEPLENGTH':>14}")
        if self.print_every == 0:
            wanted = [1] if first == 0 else []
        else:
            wanted = [i for i in range(first + 1, last + 1) if i % self.print_every == 0 or i == 1]
        own = int(state.starts.iteration[0])
        wanted = [i for i in wanted if i <= own]
        if wanted:
            h = jax.tree.map(lambda a: np.asarray(a[:, 0]), state.history)
            for i in wanted:
                print(_row(i, h.nfev[i], h.f[i], h.gnorm[i], h.stp[i]))

    # ----------------------------------------------------------------- the result
    def _status_message(self, status: Status) -> str:
        """One start's message: the status's own, with this solver's ``maxfev``, ``stpmin`` and
        ``stpmax``; L-BFGS words the general endings itself (the seed's success message, the
        convergence test that ``MAX_STEPS`` did not meet, ``x`` being the last iterate)."""
        own_words = {
            Status.SUCCESS: "The minimization terminated without detecting errors.",
            Status.MAX_STEPS: (
                f"the iteration limit max_iterations={self.max_iterations} was reached before "
                f"||g|| < eps*max(1,||x||) (eps={self.eps}): raise max_iterations, or loosen eps"
            ),
            Status.TIME_LIMIT: "stopped at the time limit; x is the last iterate",
            Status.INTERRUPTED: "interrupted (Ctrl-C or SIGTERM); x is the last iterate",
        }
        return status.describe(own_words, maxfev=self.maxfev, stpmin=self.stpmin, stpmax=self.stpmax)

    def result(
        self, problem: Problem, state: LBFGSRun, done: list[int], status: Status, stats: dict[str, Any]
    ) -> LBFGSResult:
        # only what the result needs comes to the host (not the 2m n stored pairs)
        onepass = isinstance(state.starts, lbfgs_onepass.OnePassState)
        if onepass:  # x_k is row k % 2 of the ring X
            one = state.starts
            x = one.X[0, int(one.iteration[0]) % 2].reshape(1, -1)  # (n / width, width) -> (1, n)
            st = one._replace(X=None, G=None, S=None, w=None, ls=None, SY=None, YY=None, a=None, b=None)
            st = jax.tree.map(np.asarray, st)
            st = LBFGSState(x=np.asarray(x), g=None, d=None, P=None, ls=None, SY=None, YY=None, a=None, b=None,
                            **{k: getattr(st, k) for k in ("f", "gamma", "gg", "head", "count", "iteration", "nfev",
                                                            "gnorm", "xnorm", "stp", "status", "nonfinite")})
        else:
            st = state.starts._replace(P=None, d=None, g=None, ls=None, SY=None, YY=None, a=None, b=None)
            st = jax.tree.map(np.asarray, st)
        # A start still running ends as the run did: MAX_STEPS (the driver's, when the iterations
        # ran out before every start stopped), TIME_LIMIT or INTERRUPTED.
        codes = np.where(st.status == _RUNNING, int(status), st.status)
        statuses = [Status(int(c)) for c in codes]
        fun = np.asarray(st.f)  # NaN and -inf are kept as +inf (worst_if_nonfinite): never the best
        best = int(np.argmin(fun))
        messages = [self._status_message(s) for s in statuses]
        K = len(statuses)
        message = messages[best]
        if K > 1:
            n_ok = sum(s.success for s in statuses)
            message = f"{n_ok} of {K} starts converged; the best (start {best}): {message}"
        kh = state.history.f.shape[1]
        hist = {k: np.asarray(v) for k, v in state.history._asdict().items()}
        hist_len = np.minimum(st.iteration[:kh], self.max_iterations) + 1
        xs = np.asarray(problem.expand(st.x))
        stats = dict(stats)
        plan = self.kernel_plan(problem, devices=int(stats.get("devices", 1)))  # the driver's mesh is gone here
        stats.update(
            evaluations=int(st.nfev.sum()), starts=K, converged=int(sum(s.success for s in statuses)),
            nonfinite=int(st.nonfinite.sum()),
            kernel=plan.name, kernel_reason=plan.reason, line_evaluation=line_evaluation_reason(problem, plan),
        )
        # one-pass under kernel="auto" ran split over every device it was asked for
        op = self.onepass_plan(problem, devices=int(stats.get("devices", 1)), requested=int(stats.get("devices", 1)))
        if onepass:
            notes = (["interpret mode"] if op.interpret else []) + (["split over devices"] if stats.get("devices", 1) > 1 else [])
            stats.update(kernel="onepass" + (f" ({', '.join(notes)})" if notes else ""), kernel_reason=op.reason,
                         line_evaluation="one Pallas kernel per evaluation (the one-pass loop): f and g by "
                                         "value_and_grad.block on each column block")
        elif self.kernel == "onepass":
            stats["kernel_reason"] = f"{op.reason}; {plan.reason}"
        result = LBFGSResult(
            x=xs[best], fun=float(fun[best]), status=statuses[best], message=message, stats=stats,
            gnorm=float(st.gnorm[best]), iterations=int(st.iteration[best]), nfev=int(st.nfev[best]),
            xs=xs, funs=st.f, gnorms=st.gnorm, iterations_per_start=st.iteration, nfev_per_start=st.nfev,
            statuses=statuses, messages=messages, best=best, history=hist, history_length=hist_len,
        )
        if self.print_every is not None:
            i = int(st.iteration[0])
            if i > 0 and (self.print_every == 0 or i % self.print_every != 0) and i != 1:
                print(_row(i, hist["nfev"][i, 0], hist["f"][i, 0], hist["gnorm"][i, 0], hist["stp"][i, 0]))
            print()
            print(messages[0] if statuses[0].success else f"{statuses[0].seed_code} ({statuses[0].name}): {messages[0]}")
        return result


def _state_bytes(n: int, m: int, starts: int, item: int, max_iterations: int, diag_vector: bool, onepass: bool) -> int:
    """Bytes of an :class:`LBFGSRun` (``init``'s state; floats of ``item`` bytes, int32, bool): per start
    x, g, d and the 2m pairs (the one-pass rings: 2m + 5 vectors), the m x m matrices SY and YY, and
    the scalars of the state and its line search; the history of the first starts; H0."""
    vectors = (2 * m + 5) * n + 2 * m if onepass else (2 * m + 3) * n  # rings X, G, S and w; or x, g, d, P
    per_start = (vectors + 2 * m * m + 2 * m + 6 + 19) * item + (6 + 5) * 4 + 4  # + a, b; scalars; 4 bools
    history = (max_iterations + 1) * min(starts, _HISTORY_STARTS) * (3 * item + 4)
    return starts * per_start + history + (n if diag_vector else 1) * item


def _row(i: int, nfev: Any, f: Any, gnorm: Any, stp: Any) -> str:
    return f"{i:>5}  {int(nfev):>6}  {float(f):>14e}  {float(gnorm):>14e}  {float(stp):>14e}"


@dataclass(repr=False)
class LBFGSResult(Result):
    """The L-BFGS result: the best start's ``x, fun, gnorm, iterations, nfev, status, message``,
    and every start's (``xs (K, n)``, ``funs``, ``gnorms``, ``iterations_per_start``,
    ``nfev_per_start``, ``statuses``, ``messages``).  ``history`` holds per-iteration ``f``,
    ``gnorm``, ``stp``, ``nfev`` of the first (up to 64) starts, row i after iteration i."""

    gnorm: float = float("nan")
    iterations: int = 0
    nfev: int = 0
    xs: np.ndarray | None = None
    funs: np.ndarray | None = None
    gnorms: np.ndarray | None = None
    iterations_per_start: np.ndarray | None = None
    nfev_per_start: np.ndarray | None = None
    statuses: list[Status] = dataclasses.field(default_factory=list)
    messages: list[str] = dataclasses.field(default_factory=list)
    best: int = 0
    history: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    history_length: np.ndarray | None = None

    def table(self, start: int = 0, every: int = 1) -> str:
        """The seed's iteration table (I, NFN, FUNC, GNORM, STEPLENGTH) of one start."""
        if self.history_length is None or start >= len(self.history_length):
            raise ValueError(f"no history is kept for start {start} (only the first {_HISTORY_STARTS})")
        h = self.history
        lines = [f"{'I':>5}  {'NFN':>6}  {'FUNC':>14}  {'GNORM':>14}  {'STEPLENGTH':>14}"]
        last = int(self.history_length[start]) - 1
        for i in range(1, last + 1):
            if i % every == 0 or i in (1, last):
                lines.append(_row(i, h["nfev"][i, start], h["f"][i, start], h["gnorm"][i, start], h["stp"][i, start]))
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# reverse communication
# --------------------------------------------------------------------------------------------------


class AskTell:
    """L-BFGS by reverse communication, for objectives that are not JAX (an external simulator).

    >>> opt = AskTell(n, m=7, x0=x0)
    >>> while opt.status == "evaluate":
    ...     x = opt.ask()                 # numpy array (n,)
    ...     opt.tell(f(x), grad(x))       # value and gradient there
    >>> opt.x, opt.f, opt.status          # 'done', or the name of an error status

    The first ``ask`` returns ``x0``.  The iterates are those of ``mw.solve(Problem(x0=x0), LBFGS(...))``
    (the same functions compute them).  ``status`` is ``'evaluate'`` while an evaluation is wanted,
    ``'done'`` on convergence, else the lower-case name of a :class:`~multiwalk.Status` (for instance
    ``'line_search_maxfev'``, ``'max_steps'``); ``message`` says what to change.
    """

    def __init__(self, n: int, m: int = 7, *, x0: Any, dtype: Any = None, **options: Any) -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be a positive integer (the number of variables; seed istate=-3), got {n!r}")
        self.solver = LBFGS(m=m, **options)  # validates m and the options (istate=-3 for m)
        if self.solver.starts is not None or self.solver.print_every is not None:
            raise ValueError("AskTell runs one problem and prints nothing: starts and print_every do not apply")
        if self.solver.diag is not None and callable(self.solver.diag):
            raise ValueError("AskTell takes diag as an array (n,); a diag(x) function is for mw.solve")
        self.dtype = _resolve_dtype(dtype)
        x0 = np.asarray(x0, dtype=np.float64)
        if x0.shape != (n,):
            raise ValueError(f"x0 must have shape ({n},), got {x0.shape}")
        if not np.all(np.isfinite(x0)):
            raise ValueError(f"x0[{int(np.flatnonzero(~np.isfinite(x0))[0])}] is not finite")
        if isinstance(self.solver.diag, np.ndarray) and self.solver.diag.shape != (n,):
            raise ValueError(f"diag has {self.solver.diag.shape[0]} entries but n={n}")
        self.n = int(n)
        need = _state_bytes(self.n, self.solver.m, 1, self.dtype.itemsize, 0, isinstance(self.solver.diag, np.ndarray), False)
        check_state_fits("AskTell", (need, f"lower m={self.solver.m} (the state keeps 2m+3 vectors of n={n} values "
                                           "and two m x m matrices) or n"))
        cfg = self.solver._config(self.dtype)
        self._h0 = (
            jnp.asarray(self.solver.diag, self.dtype) if isinstance(self.solver.diag, np.ndarray) else jnp.zeros((), self.dtype)
        )
        self._start = jax.jit(lambda x, f, g, h0: start(cfg, x, f, g, h0))
        self._trial = jax.jit(trial_point)
        self._update = jax.jit(lambda ls, f, g, d: line_search_update(ls, f, g @ d)[0])
        self._finish = jax.jit(lambda st, ls, xt, ft, gt, h0: finish_iteration(cfg, st, ls, xt, ft, gt, gt @ st.d, h0, False))
        self._x0 = jnp.asarray(x0, self.dtype)
        self._state: LBFGSState | None = None
        self._ls: LineSearchState | None = None
        self._xt: jax.Array | None = None
        self.status = "evaluate"

    @property
    def code(self) -> Status | None:
        """The :class:`~multiwalk.Status` once finished, else None."""
        if self._state is None or int(self._state.status) == _RUNNING:
            return None
        return Status(int(self._state.status))

    def ask(self) -> np.ndarray:
        """The point to evaluate next, ``(n,)``."""
        if self.status != "evaluate":
            raise RuntimeError(f"nothing to evaluate: the run has ended with status {self.status!r}")
        if self._state is None:
            self._xt = self._x0
        else:
            self._xt = self._trial(self._state._replace(ls=self._ls))
        return np.asarray(self._xt)

    def tell(self, f: Any, g: Any) -> str:
        """Give ``f`` and the gradient ``g`` at the last asked point; returns the new ``status``."""
        if self._xt is None:
            raise RuntimeError("call ask() before tell()")
        g = np.asarray(g, dtype=np.float64)
        if g.shape != (self.n,):
            raise ValueError(f"g must have shape ({self.n},), got {g.shape}")
        f = jnp.asarray(float(f), self.dtype)
        g = jnp.asarray(g, self.dtype)
        xt, self._xt = self._xt, None
        if self._state is None:
            self._state = self._start(xt, f, g, self._h0)
            self._ls = self._state.ls
        else:
            self._ls = self._update(self._ls, f, g, self._state.d)
            if bool(self._ls.done):
                self._state = self._finish(self._state, self._ls, xt, f, g, self._h0)
                self._ls = self._state.ls
                if int(self._state.status) == _RUNNING and int(self._state.iteration) >= self.solver.max_iterations:
                    self._state = self._state._replace(status=jnp.asarray(int(Status.MAX_STEPS), jnp.int32))
        # A line search that ended before its first trial (improper input: not a descent
        # direction) needs no evaluation: end the iteration at once, as mw.solve does.
        while self.code is None and bool(self._ls.done) and int(self._ls.nfev) == 0:
            st = self._state
            self._state = self._finish(st, self._ls, st.x, st.f, st.g, self._h0)
            self._ls = self._state.ls
        code = self.code
        self.status = "evaluate" if code is None else ("done" if code.success else code.name.lower())
        return self.status

    @property
    def x(self) -> np.ndarray:
        """The current iterate (after a failed line search: its last point, see finish_iteration)."""
        return np.asarray(self._x0 if self._state is None else self._state.x)

    @property
    def f(self) -> float:
        return float("nan") if self._state is None else float(self._state.f)

    @property
    def g(self) -> np.ndarray | None:
        return None if self._state is None else np.asarray(self._state.g)

    @property
    def iterations(self) -> int:
        return 0 if self._state is None else int(self._state.iteration)

    @property
    def nfev(self) -> int:
        """Evaluations told so far."""
        if self._state is None:
            return 0
        pending = 0 if self.code is not None else int(self._ls.nfev)
        return int(self._state.nfev) + pending

    @property
    def message(self) -> str:
        code = self.code
        if code is None:
            return "running: evaluate f and g at ask()"
        return self.solver._status_message(code)

