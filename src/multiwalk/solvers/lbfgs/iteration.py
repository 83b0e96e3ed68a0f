"""One L-BFGS iteration of one problem, as pure functions: the start, then the end of each iteration.

An iteration is a line search along ``d`` (its loops are the execution forms',
:mod:`~multiwalk.solvers.lbfgs.forms`), then the end of the iteration, which every form composes
from the same steps:

1. the products the small matrices need of the new pair (``s = stp d``, ``y = g_new - g``), from
   the pairs as they were: :func:`xla_products`, or pass A of the fused kernels (:func:`pass_a`,
   :func:`pass_a_rows`);
2. the state after the step (:func:`stepped_state`): the new point, the small matrices with the
   pair in its ring slot, the norms and counters;
3. the next direction and the pair written into ``P``: :func:`xla_direction_and_store` (compact
   form or two-loop recursion by the user's ``H0``), or pass B (:func:`pass_b`, :func:`pass_b_rows`);
4. the status and the next line search (:func:`next_search`).

The four ends are :func:`finish_xla` (one problem), :func:`finish_masked` (a batch of problems,
the finished ones left unchanged), :func:`finish_fused` (the Pallas passes, on one device or split
along ``n``) and :func:`finish_fused_rows` (the Pallas passes with both gradients in one buffer).

On most unusual endings MCSRCH evaluates its best step last, so x is the best point found; as in
Nocedal's lbfgs.f, a search cut short by ``maxfev=1`` or by ``stpmin`` can leave x at a point
worse than the start of the iteration (its status says the search failed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ...result import Status
from .. import lbfgs_kernel
from .._common import worst_if_nonfinite
from ..lbfgs_common import _INFO_TO_STATUS, _RUNNING, compact_coefficients, store_in_ring
from ..more_thuente import LineSearchParams, LineSearchState, line_search_init
from .evaluation import Evaluation
from .state import LBFGSState, compact_direction, two_loop_direction

__all__ = ["Config", "finish_fused", "finish_fused_rows", "finish_masked", "finish_xla", "start", "trial_point"]


@dataclass(frozen=True)
class Config:
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
    box: bool = False  # the problem's box is honoured (L-BFGS-B, bounds.py); h0 is then [lower; upper] (2, n)
    # stop when max |proj g| <= pgtol (with a box, always set), max |g| <= pgtol without one (None: off)
    pgtol: float | None = None
    # stop when (f_old - f_new) / max(|f_old|, |f_new|, 1) <= frel_tol (scipy's ftol; None: off)
    frel_tol: float | None = None

    @property
    def compact(self) -> bool:
        """``H0 = gamma I``: the compact representation (else the user's diagonal, two-loop)."""
        return self.diag_fn is None and not self.use_h0

    @property
    def fused(self) -> bool:
        """One problem's iteration ends in the fused Pallas passes (they need ``H0 = gamma I``)."""
        return self.pallas and self.compact

    def pass_a_launch(self) -> dict[str, Any]:
        return {"block": self.a_block or self.block, "num_warps": self.a_warps or self.warps,
                "interpret": self.interpret, "chunks": self.a_chunks, "num_stages": self.a_stages}

    def pass_b_launch(self) -> dict[str, Any]:
        return {"block": self.block, "num_warps": self.warps, "interpret": self.interpret}


# --------------------------------------------------------------------------------------------------
# the start
# --------------------------------------------------------------------------------------------------


def _diag_now(cfg: Config, x: jax.Array, h0: jax.Array) -> jax.Array | None:
    if cfg.diag_fn is not None:
        return jnp.asarray(cfg.diag_fn(x), x.dtype)
    if cfg.use_h0:
        return h0
    return None


def gradient_converged(cfg: Config, g: jax.Array, gnorm: jax.Array, xnorm: jax.Array) -> jax.Array:
    """The gradient test without a box: ``||g|| <= eps max(1, ||x||)``, or ``max |g_i| <= pgtol``
    where ``pgtol`` is set (one more pass over ``g``, only then)."""
    ok = gnorm <= cfg.eps * jnp.maximum(1.0, xnorm)
    return ok if cfg.pgtol is None else ok | (jnp.max(jnp.abs(g)) <= cfg.pgtol)


def small_reduction(cfg: Config, f_old: jax.Array, f_new: jax.Array) -> jax.Array:
    """scipy's ``ftol`` test: ``(f_old - f_new) / max(|f_old|, |f_new|, 1) <= frel_tol`` (False when off)."""
    if cfg.frel_tol is None:
        return jnp.asarray(False)
    return (f_old - f_new) <= cfg.frel_tol * jnp.maximum(jnp.maximum(jnp.abs(f_old), jnp.abs(f_new)), 1.0)


def direction(cfg: Config, st: LBFGSState, h0: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(d, g'd, diag_ok)`` for the current state: compact form, or two-loop with the user's ``H0``."""
    diag = _diag_now(cfg, st.x, h0)
    if diag is None:
        d, gd = compact_direction(st, cfg.m)
        return d, gd, jnp.asarray(True)
    ok = jnp.all(jnp.isfinite(diag) & (diag > 0))
    d, gd = two_loop_direction(st, cfg.m, diag)
    return d, gd, ok


def start(cfg: Config, x: jax.Array, f: jax.Array, g: jax.Array, h0: jax.Array) -> LBFGSState:
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
    d, gd, diag_ok = direction(cfg, st, h0)
    finite = st.nonfinite == 0
    status = jnp.where(~finite, Status.NONFINITE_START, _RUNNING)
    status = jnp.where((status == _RUNNING) & ~diag_ok, Status.DIAG_NOT_POSITIVE, status)
    status = jnp.where((status == _RUNNING) & gradient_converged(cfg, g, gnorm, xnorm), Status.SUCCESS, status)
    # lbfgs.f: STP1 = 1/||g|| for the first iteration (H0 g has unit length when H0 = I).
    stp0 = jnp.where(gnorm > 0, 1.0 / gnorm, 1.0).astype(dt)
    return st._replace(d=d, ls=line_search_init(f, gd, stp0, cfg.params), status=status.astype(jnp.int32))


def trial_point(st: LBFGSState) -> jax.Array:
    """Where the line search asks for the next evaluation."""
    return st.x + st.ls.stp * st.d


# --------------------------------------------------------------------------------------------------
# 1. the products of the new pair
# --------------------------------------------------------------------------------------------------


class PairProducts(NamedTuple):
    """What the small matrices and the norms need of the new pair ``s = stp d``, ``y = g_new - g``."""

    g_prods: jax.Array  # (2m,) S'g_new, Y'g_new, from the pairs before this update
    y_prods: jax.Array  # (2m,) S'y, Y'y
    sy: jax.Array  # () s'y
    yy: jax.Array  # () y'y
    yg: jax.Array  # () y'g_new
    gg: jax.Array  # () g_new'g_new
    xx: jax.Array  # () x_new'x_new
    x: jax.Array  # (n,) the new point x + stp d


def xla_products(st: LBFGSState, s: jax.Array, y: jax.Array, ev: Evaluation) -> PairProducts:
    """As XLA operations (XLA reads P once for both products.  Taking P'y as P'g_new - (a, b)
    would save nothing then, and cancels)."""
    gt = ev.g
    return PairProducts(st.P @ gt, st.P @ y, s @ y, y @ y, y @ gt, gt @ gt, ev.x @ ev.x, ev.x)


def _kernel_products(g_prods: jax.Array, y_prods: jax.Array, dots: jax.Array, x: jax.Array) -> PairProducts:
    sy, yy, yg, gg, xx = (dots[i] for i in range(5))
    return PairProducts(g_prods, y_prods, sy, yy, yg, gg, xx, x)


def pass_a(cfg: Config, st: LBFGSState, ev: Evaluation, stp: jax.Array) -> PairProducts:
    """Pass A of the fused kernels: one sweep over P and the vectors (``ev.x`` None: the kernel
    forms x + stp d itself).  Split along n: on every device's columns, its sums added over devices."""
    if cfg.mesh is not None:
        out = lbfgs_kernel.pair_products_split(
            cfg.mesh, st.P, ev.g, st.g, st.d, ev.x, stp, st.head, st.count, st.x, **cfg.pass_a_launch()
        )
    else:
        out = lbfgs_kernel.pair_products(
            st.P, ev.g, st.g, st.d, ev.x, stp, st.head, st.count, st.x, **cfg.pass_a_launch()
        )
    return _kernel_products(*out)


def pass_a_rows(cfg: Config, st: LBFGSState, ev: Evaluation, stp: jax.Array, new_row: jax.Array) -> PairProducts:
    """Pass A on one device with both gradients in ``ev.g`` (2, n), the new one in row ``new_row``."""
    out = lbfgs_kernel.pair_products(
        st.P, ev.g, ev.g, st.d, ev.x, stp, st.head, st.count, st.x, **cfg.pass_a_launch(), new=new_row
    )
    return _kernel_products(*out)


# --------------------------------------------------------------------------------------------------
# 2. the state after the step
# --------------------------------------------------------------------------------------------------


def stepped_state(
    cfg: Config, st: LBFGSState, ls: LineSearchState, ev: Evaluation, g_new: jax.Array, pp: PairProducts,
    store: jax.Array,
) -> LBFGSState:
    """The state at the new point ``pp.x`` (gradient field ``g_new``), the pair's products stored
    in the small matrices where ``store``; ``d``, ``P``, ``ls`` and ``status`` still the old ones."""
    m, dt, slot, stp = cfg.m, st.x.dtype, st.head, ls.stp
    SY, YY, a, b = store_in_ring(st, m, slot, pp.g_prods, pp.y_prods, pp.sy, pp.yy, pp.yg, stp * ev.gd)
    return st._replace(
        x=pp.x, f=worst_if_nonfinite(ev.f)[0], g=g_new, nonfinite=st.nonfinite + ls.nonfinite,
        SY=jnp.where(store, SY, st.SY), YY=jnp.where(store, YY, st.YY), a=jnp.where(store, a, st.a),
        b=jnp.where(store, b, st.b), gamma=jnp.where(store, pp.sy / pp.yy, st.gamma).astype(dt), gg=pp.gg,
        head=jnp.where(store, (slot + 1) % m, slot).astype(jnp.int32),
        count=jnp.where(store, jnp.minimum(st.count + 1, m), st.count).astype(jnp.int32),
        iteration=st.iteration + 1, nfev=st.nfev + ls.nfev, gnorm=jnp.sqrt(pp.gg), xnorm=jnp.sqrt(pp.xx), stp=stp,
    )


# --------------------------------------------------------------------------------------------------
# 3. the next direction, and the new pair written into P
# --------------------------------------------------------------------------------------------------


def _no_direction_unless_finite(w: jax.Array, gd: jax.Array, gamma: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(w, gamma)`` of the next direction ``d = -gamma g + w @ P``, both zero where ``g'd`` is not
    finite (an overflowing gradient: y'y = inf makes gamma 0 and g'd = 0 * inf): the next search
    then has improper input (info 0) and its one evaluation, at ``x + 0 d``, is ``x`` itself, not
    NaN (a NaN ``d`` made ``x`` NaN).  Scalars and the 2m coefficients only: no pass over n."""
    ok = jnp.isfinite(gd)
    return jnp.where(ok, w, 0.0), jnp.where(ok, gamma, 0.0)


def _store_pair(P: jax.Array, slot: jax.Array, s: jax.Array, y: jax.Array) -> jax.Array:
    """``P`` (2m, n) with ``s`` in row ``slot`` and ``y`` in row ``m + slot``, in place."""
    m, zero = P.shape[0] // 2, jnp.zeros((), jnp.int32)
    P = lax.dynamic_update_slice(P, s[None], (slot, zero))
    return lax.dynamic_update_slice(P, y[None], (m + slot, zero))


def xla_direction_and_store(
    cfg: Config, st: LBFGSState, new: LBFGSState, s: jax.Array, y: jax.Array, h0: jax.Array, index_after_d: bool = False
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """``(d, g'd, P, diag_ok)`` as XLA operations: ``st`` before the step, ``new`` after it, ``s, y``
    the pair to store in slot ``st.head``.

    Compact form: the direction from the pairs as they were plus the new pair's vectors; the
    barrier (and with ``index_after_d``, the write's index, :func:`_slot_after`) make every read of
    P come before the in-place write of the new pair (otherwise XLA may schedule a read after the
    write and copy all of P, 2m n values, to allow it).  With the
    user's ``H0``: the pair stored first, then the two-loop recursion over the new ``P``."""
    m, slot = cfg.m, st.head
    if not cfg.compact:
        P = _store_pair(st.P, slot, s, y)
        d, gd, diag_ok = direction(cfg, new._replace(P=P), h0)
        return jnp.where(jnp.isfinite(gd), d, 0.0), gd, P, diag_ok  # as _no_direction_unless_finite
    w, gd = compact_coefficients(new, m)
    w, gamma_d = _no_direction_unless_finite(w, gd, new.gamma)
    in_p = w.at[slot].set(0.0).at[m + slot].set(0.0)
    d = -gamma_d * new.g + in_p @ st.P + w[slot] * s + w[m + slot] * y
    d, P_old = lax.optimization_barrier((d, st.P))
    return d, gd, _store_pair(P_old, _slot_after(slot, m, d) if index_after_d else slot, s, y), jnp.asarray(True)


def _slot_after(slot: jax.Array, m: int, d: jax.Array) -> jax.Array:
    """``slot`` (< m), computed from ``d``: a write at this index comes after every read that ``d``
    needs, by data dependence.  The barrier above orders them on GPUs; the CPU compiler removes
    barriers before it places copies, and without this dependence it copied all of P (2m n
    values) twice per iteration: 56 n of memory traffic where the iteration needs about 38 n.
    (One problem only: in a batch's vmapped loop it changed the rounding of other values.)"""
    return jnp.minimum(slot, m + jnp.isnan(d[0]).astype(slot.dtype))


def _fused_coefficients(cfg: Config, new: LBFGSState) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(w, gamma, g'd)`` of the next direction for pass B (triangular solves unrolled)."""
    w, gd = compact_coefficients(new, cfg.m, unrolled=True)
    w, gamma_d = _no_direction_unless_finite(w, gd, new.gamma)
    return w, gamma_d, gd


def pass_b(
    cfg: Config, st: LBFGSState, new: LBFGSState, g_new: jax.Array, stp: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """``(d, g'd, P, g)``: pass B of the fused kernels writes the direction, the new pair into P and
    the new gradient into the loop's g buffer in one sweep.  Split along n: columnwise, each
    device its own columns, no communication."""
    w, gamma_d, gd = _fused_coefficients(cfg, new)
    if cfg.mesh is not None:
        d, P, g = lbfgs_kernel.direction_and_store_split(
            cfg.mesh, st.P, w, gamma_d, stp, g_new, st.g, st.d, st.head, st.count, **cfg.pass_b_launch()
        )
    else:
        d, P, g = lbfgs_kernel.direction_and_store(
            st.P, w, gamma_d, stp, g_new, st.g, st.d, st.head, st.count, **cfg.pass_b_launch()
        )
    return d, gd, P, g


def pass_b_rows(
    cfg: Config, st: LBFGSState, new: LBFGSState, grads: jax.Array, stp: jax.Array, new_row: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(d, g'd, P)``: pass B with both gradients in ``grads`` (2, n), the new one in row
    ``new_row``, already in the loop's buffer: pass B only reads it (no copy of n values)."""
    w, gamma_d, gd = _fused_coefficients(cfg, new)
    d, P, _ = lbfgs_kernel.direction_and_store(
        st.P, w, gamma_d, stp, grads, grads, st.d, st.head, st.count, new=new_row, **cfg.pass_b_launch()
    )
    return d, gd, P


# --------------------------------------------------------------------------------------------------
# 4. the status and the next line search
# --------------------------------------------------------------------------------------------------


def next_search(
    cfg: Config, new: LBFGSState, ls: LineSearchState, ft: jax.Array, d: jax.Array, gd: jax.Array,
    diag_ok: jax.Array,
) -> LBFGSState:
    """``new`` with the next direction ``d``, its line search (trial step 1), and the status: the
    line search's ending, else converged by :func:`gradient_converged`, else ``SMALL_REDUCTION``
    by :func:`small_reduction` (f from ``ls.finit``, the search's start), else running."""
    ok = ls.info == 1
    status = jnp.where(ok, _RUNNING, jnp.asarray(_INFO_TO_STATUS)[jnp.clip(ls.info, 0, 6)])
    converged = gradient_converged(cfg, new.g, new.gnorm, new.xnorm)
    status = jnp.where(ok & converged, Status.SUCCESS, status)
    status = jnp.where(ok & ~converged & small_reduction(cfg, ls.finit, new.f), Status.SMALL_REDUCTION, status)
    status = jnp.where((status == _RUNNING) & ~diag_ok, Status.DIAG_NOT_POSITIVE, status)
    return new._replace(d=d, ls=line_search_init(ft, gd, 1.0, cfg.params), status=status.astype(jnp.int32))


# --------------------------------------------------------------------------------------------------
# the four ends of an iteration: the line search ``ls`` is done, ``ev`` its last evaluation
# --------------------------------------------------------------------------------------------------


def _pair(st: LBFGSState, ls: LineSearchState, ev: Evaluation) -> tuple[jax.Array, jax.Array]:
    """lbfgs.f: S = STP * D, Y = G_new - G_old."""
    return ls.stp * st.d, ev.g - st.g


def finish_xla(cfg: Config, st: LBFGSState, ls: LineSearchState, ev: Evaluation, h0: jax.Array) -> LBFGSState:
    """One problem, XLA operations: store the pair, test convergence, set up the next direction."""
    s, y = _pair(st, ls, ev)
    new = stepped_state(cfg, st, ls, ev, ev.g, xla_products(st, s, y, ev), ls.info == 1)
    d, gd, P, diag_ok = xla_direction_and_store(cfg, st, new, s, y, h0, index_after_d=True)
    return next_search(cfg, new._replace(P=P), ls, ev.f, d, gd, diag_ok)


def finish_masked(cfg: Config, st: LBFGSState, ls: LineSearchState, ev: Evaluation, h0: jax.Array) -> LBFGSState:
    """:func:`finish_xla` for one problem of a batch (under vmap): a problem that had already
    finished is left unchanged.  P's written rows are masked themselves: a select over all of P
    would double its traffic."""
    m, slot = cfg.m, st.head
    running = st.status == _RUNNING
    store = (ls.info == 1) & running
    s, y = _pair(st, ls, ev)
    new = stepped_state(cfg, st, ls, ev, ev.g, xla_products(st, s, y, ev), store)
    new_s, new_y = jnp.where(store, s, st.P[slot]), jnp.where(store, y, st.P[m + slot])
    d, gd, P, diag_ok = xla_direction_and_store(cfg, st, new, new_s, new_y, h0)
    new = next_search(cfg, new, ls, ev.f, d, gd, diag_ok)
    kept = jax.tree.map(lambda a_, b_: jnp.where(running, a_, b_), new, st)
    return kept._replace(P=P)


def finish_fused(cfg: Config, st: LBFGSState, ls: LineSearchState, ev: Evaluation) -> LBFGSState:
    """One problem through the fused passes (``H0 = gamma I``): pass A, the small matrices, pass B.
    ``ev.x`` may be None on one device: pass A forms ``x + stp d`` itself."""
    stp = ls.stp
    new = stepped_state(cfg, st, ls, ev, ev.g, pass_a(cfg, st, ev, stp), ls.info == 1)
    d, gd, P, g = pass_b(cfg, st, new, ev.g, stp)
    return next_search(cfg, new._replace(P=P, g=g), ls, ev.f, d, gd, jnp.asarray(True))


def finish_fused_rows(
    cfg: Config, st: LBFGSState, ls: LineSearchState, ev: Evaluation, new_row: jax.Array
) -> LBFGSState:
    """:func:`finish_fused` on one device with ``ev.g`` the (2, n) buffer of both gradients, the new
    one in row ``new_row``, the previous one in the other (``st.g`` is unused); the returned
    state's ``g`` is ``st.g`` and the caller's buffer holds the new gradient, which no pass copies."""
    stp = ls.stp
    new = stepped_state(cfg, st, ls, ev, st.g, pass_a_rows(cfg, st, ev, stp, new_row), ls.info == 1)
    d, gd, P = pass_b_rows(cfg, st, new, ev.g, stp, new_row)
    return next_search(cfg, new._replace(P=P), ls, ev.f, d, gd, jnp.asarray(True))
