"""L-BFGS-B: the box ``lower <= x <= upper`` of Byrd, Lu, Nocedal and Zhu (1995), as scipy's
L-BFGS-B (version 3.0) takes it, on the state of :mod:`~multiwalk.solvers.lbfgs.state`.

Each iteration, from ``x`` with gradient ``g``:

1. the **generalised Cauchy point** ``xc``: the first local minimiser of the quadratic model
   ``m(z) = g'z + z'Bz/2`` along the projected steepest-descent path ``P[x - t g]``, with the
   compact ``B = theta I - W M W'`` of the last ``m`` pairs (``W = [theta S, Y]``).  scipy walks the
   path's breakpoints one by one; here every segment's slope and curvature come from
   sums over the breakpoints sorted (:func:`cauchy_point`: one sort, then cumulative sums over
   chunks of the sorted breakpoints until the chunk holding the Cauchy point), so many starts and huge ``n`` run in lockstep;
2. **subspace minimisation** of the model over the variables free at ``xc`` (the direct primal
   method, by Sherman-Morrison-Woodbury with ``2m x 2m`` algebra), projected into the box; where
   that projection makes the step an ascent direction, the step is backtracked to the box
   instead (:func:`subspace_point`, scipy's ``subsm``);
3. the line search along ``d = xbar - x``, its steps capped at the largest step that stays in
   the box (1 on the first iteration), so no evaluation is ever outside the box
   (:func:`trial_point_in_box` snaps the coordinates that reach a bound onto it).

The run stops when ``max_i |proj g_i| <= pgtol`` at the accepted point (scipy's ``projgr``,
from the exact gradient there), ``SUCCESS``; else, with ``frel_tol`` set, when the relative
reduction of f in the iteration is at most ``frel_tol`` (scipy's ``ftol`` test), ``SMALL_REDUCTION``.
As in scipy, a line search that fails, or a direction that is
not a descent direction, drops the stored pairs and tries again from the same point; with no
pairs to drop, the run ends with the line search's status.  A pair is stored only where
``s'y > eps_machine * (-g's)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ...result import Status
from .._common import worst_if_nonfinite
from ..lbfgs_common import _INFO_TO_STATUS, _RUNNING, _chronological
from ..more_thuente import LineSearchState, line_search_init
from .evaluation import Evaluation, Evaluator
from .iteration import Config, _store_pair, small_reduction, start
from .state import LBFGSState

__all__ = ["BoxModel", "box_evaluator", "cauchy_point", "finish_box", "max_step_in_box", "projected_gradient",
           "start_box", "subspace_point", "trial_point_in_box"]


def projected_gradient(x: jax.Array, g: jax.Array, lo: jax.Array, hi: jax.Array) -> jax.Array:
    """scipy's ``projgr``: ``P[x - g] - x`` written per sign of ``g`` (n,); its max-norm is the test."""
    return jnp.where(g < 0, jnp.maximum(x - hi, g), jnp.minimum(x - lo, g))


def max_step_in_box(x: jax.Array, d: jax.Array, lo: jax.Array, hi: jax.Array, cap: jax.Array) -> jax.Array:
    """The largest ``t <= cap`` with ``lo <= x + t d <= hi`` (scipy's ``stpmx`` in ``lnsrlb``)."""
    safe = jnp.where(d == 0, 1.0, d)
    room = jnp.where(d < 0, (lo - x) / safe, jnp.where(d > 0, (hi - x) / safe, jnp.inf))
    return jnp.minimum(cap, jnp.min(jnp.maximum(room, 0.0)))


def trial_point_in_box(x: jax.Array, d: jax.Array, stp: jax.Array, lo: jax.Array, hi: jax.Array) -> jax.Array:
    """``x + stp d``, a coordinate whose step reaches its bound put exactly on it: never outside."""
    step = stp * d
    return jnp.clip(jnp.where(step <= lo - x, lo, jnp.where(step >= hi - x, hi, x + step)), lo, hi)


def box_evaluator(vg: Callable, lo: jax.Array, hi: jax.Array) -> Evaluator:
    """``vg`` at :func:`trial_point_in_box`, then ``g'd``."""

    def evaluate(st: LBFGSState, stp: jax.Array, g_buffer: jax.Array | None) -> Evaluation:
        xt = trial_point_in_box(st.x, st.d, stp, lo, hi)
        ft, gt = vg(xt)
        return Evaluation(xt, ft, gt, gt @ st.d)

    return evaluate


# --------------------------------------------------------------------------------------------------
# the compact model B = theta I - W M W'
# --------------------------------------------------------------------------------------------------


class BoxModel(NamedTuple):
    """``B = theta I - W M W'`` with ``W' = scale * P`` (rows ``theta s`` then ``y`` in ring order,
    unused slots scaled by 0), so ``W'v = scale * (P v)`` and ``W c = P' (scale * c)``: no copy of P."""

    theta: jax.Array  # () B0 = theta I, theta = y'y / s'y of the newest pair (1 without pairs)
    scale: jax.Array  # (2m,)
    M: jax.Array  # (2m, 2m) the inverse of [[theta S'S, L], [L', -D]] (identity on unused slots)


def compact_model(st: LBFGSState, m: int) -> BoxModel:
    """The model of ``st``'s pairs: ``S'S``, ``S'Y`` from one Gram product of ``P`` (2m, n)."""
    order, valid = _chronological(st.head, st.count, m)
    used = jnp.zeros(m, bool).at[order].set(valid)
    rank = jnp.zeros(m, jnp.int32).at[order].set(jnp.arange(m, dtype=jnp.int32))
    theta = jnp.where(st.count > 0, 1.0 / st.gamma, 1.0).astype(st.x.dtype)
    gram = jnp.matmul(st.P, st.P.T, precision=lax.Precision.HIGHEST)  # not a GPU's TensorFloat-32 in float32
    SS, SY = gram[:m, :m], gram[:m, m:]  # SY[i, j] = s_i'y_j
    both = used[:, None] & used[None, :]
    L = jnp.where(both & (rank[:, None] > rank[None, :]), SY, 0.0)  # s_i'y_j, pair i newer than j
    D = jnp.where(used, jnp.diagonal(SY), 0.0)
    unused = jnp.diag(jnp.where(used, 0.0, 1.0))
    K = jnp.block([[theta * jnp.where(both, SS, 0.0) + unused, L], [L.T, -jnp.diag(D) + unused]])
    scale = jnp.concatenate([jnp.where(used, theta, 0.0), jnp.where(used, 1.0, 0.0)]).astype(st.x.dtype)
    return BoxModel(theta, scale, jnp.linalg.inv(K))


def _W_times(model: BoxModel, P: jax.Array, c: jax.Array) -> jax.Array:
    """``W c`` (n,) for ``c`` (2m,)."""
    return (model.scale * c) @ P


def _Wt_times(model: BoxModel, P: jax.Array, v: jax.Array) -> jax.Array:
    """``W'v`` (2m,) for ``v`` (n,)."""
    return model.scale * (P @ v)


# --------------------------------------------------------------------------------------------------
# the generalised Cauchy point and the subspace minimisation
# --------------------------------------------------------------------------------------------------


def _breakpoints(x: jax.Array, g: jax.Array, lo: jax.Array, hi: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(t, d)``: where each coordinate of ``P[x - t g]`` reaches its bound (0 for one at a bound
    that ``-g`` pushes out of the box or does not move, inf for ``g = 0`` inside), and the path's
    first direction ``d = -g`` (0 where ``t = 0``)."""
    safe = jnp.where(g == 0, 1.0, g)
    t = jnp.where(g > 0, (x - lo) / safe, jnp.where(g < 0, (x - hi) / safe, jnp.inf))
    t = jnp.where(((x <= lo) & (g >= 0)) | ((x >= hi) & (g <= 0)), 0.0, jnp.maximum(t, 0.0))
    return t, jnp.where(t > 0, -g, 0.0)


def breakpoint_order(t: jax.Array) -> jax.Array:
    """The permutation that sorts the breakpoints ``t`` (n,) (all >= 0 or inf), by ONE sort of 64-bit
    keys: the bits of ``t`` (ordered as integers for t >= 0) with the lowest ``bits(n)`` replaced by
    the index.  A sort of keys alone is ~10x faster than argsort's sort of (key, index) pairs on GPUs
    (measured on an H100 at n = 1e7: 1.4 against 13.6 ms); breakpoints that agree in all but their
    last ``bits(n)`` bits (relative 2^(bits(n) - 52): 4e-9 at n = 1e7, 1e-15 at n = 12) keep index
    order, so segments that short may be taken in another order, as scipy's heap takes ties.
    Without ``jax_enable_x64``: ``argsort``."""
    n = t.shape[0]
    bits = max(1, (n - 1).bit_length())
    if not jax.config.jax_enable_x64:  # no 64-bit integers: the pairs' sort
        return jnp.argsort(t)
    keys = lax.bitcast_convert_type(t.astype(jnp.float64), jnp.uint64)
    mask = jnp.uint64((1 << bits) - 1)
    packed = (keys & ~mask) | lax.iota(jnp.uint64, n)
    return (lax.sort(packed) & mask).astype(jnp.int32)


CAUCHY_CHUNKS = 32  # the sorted breakpoints are walked in at most this many chunks


class _Walk(NamedTuple):
    """The walk along the sorted breakpoints, one chunk at a time: the sums over the breakpoints passed."""

    chunk: jax.Array  # () the next chunk
    passed_Wd: jax.Array  # (2m,) sum of W_k d_k over the breakpoints passed
    passed_tWd: jax.Array  # (2m,) sum of t_k W_k d_k over them
    passed_d2: jax.Array  # () sum of d_k^2 over them
    found: jax.Array  # () the Cauchy point's segment was found
    tstar: jax.Array  # () the step to the Cauchy point along the path


def _chunk_segments(walk: _Walk, ts: jax.Array, order: jax.Array, d: jax.Array, model: BoxModel, P: jax.Array,
                    totals: tuple[jax.Array, jax.Array, jax.Array], size: int) -> _Walk:
    """The segments of one chunk (``size`` of the n + 1, starting after breakpoint ``chunk * size - 1``):
    their slopes ``f1`` and curvatures ``f2`` from the sums passed so far, and the first that stops."""
    A_all, D2_all, f2_floor = totals
    first = walk.chunk * size
    idx = lax.dynamic_slice(order, (first,), (size,))
    ends = lax.dynamic_slice(ts, (first,), (size,))  # segment j ends at breakpoint j
    starts = jnp.concatenate([jnp.where(first > 0, ts[jnp.maximum(first - 1, 0)], 0.0)[None], ends[:-1]])
    dk = jnp.where(jnp.isfinite(ends), d[idx], 0.0)  # padding and breakpoints at inf move nothing
    Wd = P[:, idx] * (model.scale[:, None] * dk[None, :])  # (2m, size)
    tWd = Wd * jnp.where(jnp.isfinite(ends), ends, 0.0)[None, :]
    # sums over the breakpoints before each segment (exclusive), continuing the walk's
    before_Wd = walk.passed_Wd[:, None] + jnp.cumsum(Wd, axis=1) - Wd
    before_tWd = walk.passed_tWd[:, None] + jnp.cumsum(tWd, axis=1) - tWd
    before_d2 = walk.passed_d2 + jnp.cumsum(dk * dk) - dk * dk
    A, C, D2 = A_all[:, None] - before_Wd, before_tWd, D2_all - before_d2  # still moving / passed
    reachable = jnp.isfinite(starts)
    T0 = jnp.where(reachable, starts, 0.0)
    MA = model.M @ A
    f1 = -D2 + model.theta * T0 * D2 - jnp.sum((C + T0[None, :] * A) * MA, axis=0)
    f2 = jnp.maximum(model.theta * D2 - jnp.sum(A * MA, axis=0), f2_floor)
    dtm = jnp.where(f1 >= 0, 0.0, -f1 / jnp.where(f2 > 0, f2, 1.0))
    stop = reachable & ((f1 >= 0) | (dtm < ends - T0))
    j = jnp.argmax(stop)
    here = jnp.any(stop)
    return _Walk(walk.chunk + 1, walk.passed_Wd + jnp.sum(Wd, axis=1), walk.passed_tWd + jnp.sum(tWd, axis=1),
                 walk.passed_d2 + jnp.sum(dk * dk), here,
                 jnp.where(here, T0[j] + dtm[j], walk.tstar).astype(walk.tstar.dtype))


def cauchy_point(x: jax.Array, g: jax.Array, lo: jax.Array, hi: jax.Array, model: BoxModel,
                 P: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(xc, fixed)``: the generalised Cauchy point (n,) and the coordinates at a bound there.

    Segment ``j`` of the path runs from the ``j``-th smallest breakpoint ``T_j`` (0 for j = 0) to
    the next; the coordinates whose breakpoints come later still move along ``d``.  With the
    sums ``D2_j = sum d_k^2`` and ``A_j = sum W_k d_k`` over them and ``C_j = sum t_k W_k d_k``
    over the others, ``W'z = C_j + T_j A_j`` at the segment's start and the model's slope and
    curvature along it are ``f1 = -D2 + theta T D2 - (W'z)' M A`` and ``f2 = theta D2 - A' M A``
    (BLNZ eqs. 4.9-4.10; ``f2`` floored at ``eps f2_0`` as scipy 3.0 does).  The Cauchy point is
    in the first segment with ``f1 >= 0`` or ``-f1/f2`` shorter than the segment.

    As scipy, ``A_j`` and ``D2_j`` are the sums over all moving coordinates less those passed.
    The breakpoints are sorted once; then the walk takes them a chunk (1/32 of n) at a time,
    every segment of a chunk at once (cumulative sums over the chunk), and stops at the chunk
    where the Cauchy point is: a path that stops early (the common case) costs a sort and a few
    passes over n, not cumulative sums over all n breakpoints."""
    t, d = _breakpoints(x, g, lo, hi)
    n = t.shape[0]
    size = max(1, -(-(n + 1) // CAUCHY_CHUNKS))
    chunks = -(-(n + 1) // size)
    order = breakpoint_order(t)
    pad = chunks * size - n
    ts = jnp.concatenate([t[order], jnp.full(pad, jnp.inf, t.dtype)])  # the last segment ends at inf
    order = jnp.concatenate([order, jnp.zeros(pad, order.dtype)])
    A_all, D2_all = _Wt_times(model, P, d), d @ d
    f2_floor = jnp.finfo(x.dtype).eps * (model.theta * D2_all - A_all @ (model.M @ A_all))
    zero = jnp.zeros_like(A_all)
    walk = _Walk(jnp.zeros((), jnp.int32), zero, zero, jnp.zeros((), x.dtype), jnp.asarray(False),
                 jnp.zeros((), x.dtype))
    walk = lax.while_loop(
        lambda w: ~w.found & (w.chunk < chunks),
        lambda w: _chunk_segments(w, ts, order, d, model, P, (A_all, D2_all, f2_floor), size), walk)
    tstar = walk.tstar
    fixed = t <= tstar
    xc = jnp.where(fixed & (d != 0), jnp.where(d < 0, lo, hi), jnp.clip(x + tstar * d, lo, hi))
    return xc, fixed


def subspace_point(x: jax.Array, g: jax.Array, lo: jax.Array, hi: jax.Array, xc: jax.Array, fixed: jax.Array,
                   model: BoxModel, P: jax.Array) -> jax.Array:
    """``xbar``: the model minimised over the coordinates free at ``xc``, then projected into the box;
    where projecting clipped the step and made ``(xbar - x)'g > 0``, the step is backtracked from
    ``xc`` to the box instead (scipy 3.0's ``subsm``).

    ``B_F^-1 = I/theta + W_F (I - M W_F'W_F / theta)^-1 M W_F' / theta^2`` (Sherman-Morrison-Woodbury),
    ``W_F`` the rows of ``W`` of the free coordinates."""
    free = ~fixed
    theta = model.theta
    c = _Wt_times(model, P, xc - x)
    r = jnp.where(free, -(g + theta * (xc - x) - _W_times(model, P, model.M @ c)), 0.0)
    WFW = model.scale[:, None] * jnp.matmul(P * free, P.T, precision=lax.Precision.HIGHEST) * model.scale[None, :]
    N = jnp.eye(WFW.shape[0], dtype=WFW.dtype) - model.M @ WFW / theta
    v = jnp.linalg.solve(N, model.M @ _Wt_times(model, P, r))
    du = jnp.where(free, r / theta + _W_times(model, P, v) / theta**2, 0.0)
    newton = xc + du
    projected = jnp.clip(newton, lo, hi)
    clipped = jnp.any(free & ((newton <= lo) | (newton >= hi)))
    uphill = (projected - x) @ g > 0
    alpha = max_step_in_box(xc, du, lo, hi, jnp.ones((), x.dtype))
    backtracked = trial_point_in_box(xc, du, alpha, lo, hi)
    return jnp.where(clipped & uphill, backtracked, projected)


def box_point(cfg: Config, st: LBFGSState, lo: jax.Array, hi: jax.Array) -> jax.Array:
    """``xbar`` of the state's pairs: the Cauchy point alone without pairs (scipy skips ``subsm``)."""
    model = compact_model(st, cfg.m)
    xc, fixed = cauchy_point(st.x, st.g, lo, hi, model, st.P)
    return lax.cond(st.count > 0, lambda: subspace_point(st.x, st.g, lo, hi, xc, fixed, model, st.P), lambda: xc)


# --------------------------------------------------------------------------------------------------
# the start and the end of an iteration
# --------------------------------------------------------------------------------------------------


def _next_search(cfg: Config, st: LBFGSState, lo: jax.Array, hi: jax.Array, first: bool) -> LBFGSState:
    """``st`` with the next direction ``d = xbar - x`` and its line search: steps up to the box's
    edge (1 on the first iteration, as scipy), first trial 1.  A direction that is not downhill
    with pairs stored is made again without them (scipy's restart on ``info = -4``)."""
    def direction(s: LBFGSState) -> tuple[jax.Array, jax.Array]:
        d = box_point(cfg, s, lo, hi) - s.x
        return d, s.g @ d

    d, gd = direction(st)
    restart = (gd >= 0) & (st.count > 0)
    emptied = st._replace(count=jnp.where(restart, 0, st.count).astype(jnp.int32),
                          gamma=jnp.where(restart, 1.0, st.gamma).astype(st.gamma.dtype))
    # Without pairs the model is I/2 (theta = 1): its Cauchy point is the projected step P[x - g]
    # itself, so the restart's direction needs no second sort (under vmap, where a cond computes
    # both branches, that doubled the cost of an iteration).
    d_plain = jnp.clip(st.x - st.g, lo, hi) - st.x
    d, gd = jnp.where(restart, d_plain, d), jnp.where(restart, st.g @ d_plain, gd)
    cap = jnp.ones((), st.x.dtype) if first else max_step_in_box(st.x, d, lo, hi, jnp.asarray(cfg.params.stpmax, st.x.dtype))
    params = cfg.params._replace(stpmax=cap, stpmin=jnp.minimum(cfg.params.stpmin, cap))
    return emptied._replace(d=d, ls=line_search_init(st.f, gd, 1.0, params))


def start_box(cfg: Config, x: jax.Array, f: jax.Array, g: jax.Array, box: jax.Array) -> LBFGSState:
    """:func:`~multiwalk.solvers.lbfgs.iteration.start` in the box ``box = [lower; upper]`` (2, n):
    ``gnorm`` is ``max |proj g|``, the test is ``pgtol``'s, the first direction ``P[x - g] - x``."""
    lo, hi = box[0], box[1]
    st = start(cfg, x, f, g, jnp.zeros((), x.dtype))
    pgnorm = jnp.max(jnp.abs(projected_gradient(x, st.g, lo, hi)))
    st = _next_search(cfg, st._replace(gnorm=pgnorm), lo, hi, first=True)
    status = jnp.where(st.nonfinite > 0, Status.NONFINITE_START, _RUNNING)
    status = jnp.where((status == _RUNNING) & (pgnorm <= cfg.pgtol), Status.SUCCESS, status)
    return st._replace(status=status.astype(jnp.int32))


def _accepted(ls: LineSearchState, st: LBFGSState, f_new: jax.Array) -> jax.Array:
    """scipy takes the line search's end as the step unless it ran out of evaluations (maxfev) or
    had improper input; its warnings (xtol, stpmin, stpmax, rounding) end it too.  A warning's
    point is taken only where f did not rise."""
    return ((ls.info == 1) | ((ls.info != 0) & (ls.info != 3) & (f_new <= st.f))) & jnp.isfinite(f_new)


def finish_box(cfg: Config, st: LBFGSState, ls: LineSearchState, ev: Evaluation, box: jax.Array) -> LBFGSState:
    """The end of one iteration in the box (one problem; a finished one is left unchanged, so the
    same function serves a batch under vmap)."""
    lo, hi, m = box[0], box[1], cfg.m
    f_new = worst_if_nonfinite(ev.f)[0]
    ok = _accepted(ls, st, f_new)
    x, f, g = (jnp.where(ok, a, b) for a, b in ((ev.x, st.x), (f_new, st.f), (ev.g, st.g)))
    s, y = x - st.x, g - st.g
    sy, yy = s @ y, y @ y
    store = ok & (sy > jnp.finfo(x.dtype).eps * -(s @ st.g))
    slot = st.head
    P = lax.cond(store, lambda: _store_pair(st.P, slot, s, y), lambda: st.P)
    failed = ~ok
    count = jnp.where(store, jnp.minimum(st.count + 1, m), jnp.where(failed, 0, st.count))
    pgnorm = jnp.max(jnp.abs(projected_gradient(x, g, lo, hi)))
    new = st._replace(
        x=x, f=f, g=g, P=P, head=jnp.where(store, (slot + 1) % m, slot).astype(jnp.int32), count=count.astype(jnp.int32),
        gamma=jnp.where(store, sy / yy, jnp.where(failed, 1.0, st.gamma)).astype(st.gamma.dtype),
        gg=g @ g, gnorm=pgnorm, xnorm=jnp.sqrt(x @ x), iteration=st.iteration + 1, nfev=st.nfev + ls.nfev,
        stp=jnp.where(ok, ls.stp, 0.0).astype(x.dtype), nonfinite=st.nonfinite + ls.nonfinite,
    )
    new = _next_search(cfg, new, lo, hi, first=False)
    status = jnp.where(failed & (st.count == 0), jnp.asarray(_INFO_TO_STATUS)[jnp.clip(ls.info, 0, 6)], _RUNNING)
    status = jnp.where(ok & (pgnorm <= cfg.pgtol), Status.SUCCESS, status)
    status = jnp.where(ok & (pgnorm > cfg.pgtol) & small_reduction(cfg, st.f, f), Status.SMALL_REDUCTION, status)
    new = new._replace(status=status.astype(jnp.int32))
    return jax.tree.map(lambda a, b: jnp.where(st.status == _RUNNING, a, b), new, st)
