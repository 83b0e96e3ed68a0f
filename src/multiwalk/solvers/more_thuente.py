"""The Moré-Thuente line search as a pure-JAX, jittable, vmappable state machine.

This is the line search of L-BFGS (Nocedal's ``MCSRCH`` / ``MCSTEP`` in ``lbfgs.f``, the routine the
CUDA L-BFGS of the seeds calls) after J. J. Moré and D. J. Thuente, "Line search algorithms with
guaranteed sufficient decrease", ACM TOMS 20(3), 286-307 (1994).  It finds a step ``stp > 0`` along
a descent direction ``d`` that satisfies the strong Wolfe conditions

    phi(stp) <= phi(0) + ftol * stp * phi'(0)        (sufficient decrease)
    |phi'(stp)| <= gtol * |phi'(0)|                   (curvature)

with ``phi(stp) = f(x + stp d)``.  It works by *reverse communication*, so many independent problems
advance in lockstep (one ``vmap``-ed update per evaluation round, the library's one idea)::

    state = line_search_init(f0, g0 @ d, stp0, params)
    while not state.done:                       # a lax.while_loop in practice
        f, g = fun(x + state.stp * d)          # the caller evaluates at the step the state asks for
        state, stp, done, info = line_search_update(state, f, g @ d)

When ``done``, ``state.stp`` is the step of the last evaluation (the caller already holds f and g
there) and ``state.info`` says why the search stopped (the codes of Nocedal's ``MCSRCH``):

====  ===========================================================================================
0     improper input: not a descent direction (phi'(0) >= 0), stp0 <= 0, ftol/gtol/xtol < 0,
      stpmin < 0, stpmax < stpmin, maxfev <= 0, or non-finite phi(0) / phi'(0); no step is taken
      (``stp`` = 0)
1     converged: sufficient decrease and the strong curvature condition hold
2     the relative width of the interval of uncertainty is at most ``xtol``
3     ``maxfev`` evaluations were used
4     the step is at ``stpmin``
5     the step is at ``stpmax``
6     rounding errors prevent progress (the tolerances may be too small)
====  ===========================================================================================

Two flavours share the code (a traced flag, so both can even run in one batch):

* ``minpack2=False`` (default): Nocedal's ``MCSRCH``/``MCSTEP`` (lbfgs.f, 1990), as in the seed.
* ``minpack2=True``: the later MINPACK-2 ``dcsrch``/``dcstep`` (1993), the version of the 1994 paper
  and of ``scipy.optimize._dcsrch.DCSRCH``. It differs in three places: stage 1 ends when
  ``psi(stp) <= 0`` and ``phi'(stp) >= 0`` (not ``phi'(stp) >= min(ftol, gtol) phi'(0)``); while no
  minimiser is bracketed the next trial step lies in ``[stp + 1.1 (stp - stx), stp + 4 (stp - stx)]``
  (not ``[stx, stp + 4 (stp - stx)]``); and the 0.66 safeguard of the step is applied to case 3 only.

Deviations from the Fortran, both only where it would misbehave: a non-finite phi or phi' at a trial
step (NaN, +inf or -inf: phi is taken as +inf, so a -inf never passes the tests of ``info``; counted
in ``nonfinite``) bisects back towards the best step (instead of feeding NaN into the interpolation); and the
"last evaluation goes to the best step" rule of ``maxfev`` is not applied before the first evaluation
(so ``maxfev=1`` evaluates ``stp0`` instead of ``stp = 0``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._common import worst_if_nonfinite

__all__ = [
    "LineSearchParams",
    "LineSearchState",
    "dcstep",
    "line_search_init",
    "line_search_update",
    "mcstep",
    "more_thuente",
]

INFO_MESSAGES = {
    0: "improper input parameters (e.g. the direction is not a descent direction)",
    1: "the sufficient decrease condition and the directional derivative condition hold",
    2: "relative width of the interval of uncertainty is at most xtol",
    3: "number of function evaluations has reached maxfev",
    4: "the step is at the lower bound stpmin",
    5: "the step is at the upper bound stpmax",
    6: "rounding errors prevent further progress; the tolerances may be too small",
}

_P5 = 0.5
_P66 = 0.66
_XTRAPL = 1.1  # MINPACK-2 only: lower extrapolation factor
_XTRAPU = 4.0  # XTRAPF of MCSRCH


class LineSearchParams(NamedTuple):
    """Options of the line search. ``xtol=None`` means the machine epsilon of the working dtype."""

    ftol: Any = 1e-4
    gtol: Any = 0.9
    xtol: Any = None
    stpmin: Any = 1e-20
    stpmax: Any = 1e20
    maxfev: Any = 20
    minpack2: Any = False


class LineSearchState(NamedTuple):
    """Everything the search carries between evaluations (all arrays, so it can be vmapped).

    ``stx, fx, dx``: best step so far with phi and phi' there; ``sty, fy, dy``: the other end of the
    interval of uncertainty; ``stp``: the step to evaluate next (or, once ``done``, the final step).
    """

    stx: jax.Array
    fx: jax.Array
    dx: jax.Array
    sty: jax.Array
    fy: jax.Array
    dy: jax.Array
    stp: jax.Array
    stmin: jax.Array
    stmax: jax.Array
    brackt: jax.Array
    stage1: jax.Array
    infoc: jax.Array
    nfev: jax.Array
    finit: jax.Array
    dginit: jax.Array
    dgtest: jax.Array
    width: jax.Array
    width1: jax.Array
    ftol: jax.Array
    gtol: jax.Array
    xtol: jax.Array
    stpmin: jax.Array
    stpmax: jax.Array
    maxfev: jax.Array
    minpack2: jax.Array
    done: jax.Array
    info: jax.Array
    nonfinite: jax.Array  # int32 evaluations of this search whose phi or phi' was NaN or +-inf


# --------------------------------------------------------------------------------------------------
# the safeguarded step (MCSTEP / dcstep)
# --------------------------------------------------------------------------------------------------


def _cstep(stx, fx, dx, sty, fy, dy, stp, fp, dp, brackt, stpmin, stpmax, minpack2):
    """Both flavours of the safeguarded step; ``minpack2`` may be a Python or a traced bool."""
    stx, fx, dx, sty, fy, dy, stp, fp, dp, stpmin, stpmax = _promote(stx, fx, dx, sty, fy, dy, stp, fp, dp, stpmin, stpmax)
    brackt = jnp.asarray(brackt, bool)
    minpack2 = jnp.asarray(minpack2, bool)

    # MCSTEP's input check: on failure nothing changes and info = 0.
    bad = (
        (brackt & ((stp <= jnp.minimum(stx, sty)) | (stp >= jnp.maximum(stx, sty))))
        | (dx * (stp - stx) >= 0)
        | (stpmax < stpmin)
    )
    sgnd = dp * (dx / jnp.abs(dx))
    c1 = fp > fx  # higher function value: the minimum is bracketed
    c2 = ~c1 & (sgnd < 0)  # lower value, derivatives of opposite sign: bracketed
    c3 = ~c1 & ~c2 & (jnp.abs(dp) < jnp.abs(dx))  # lower value, same sign, |phi'| decreases
    # c4: lower value, same sign, |phi'| does not decrease

    # The cubic through (stx, fx, dx) and (stp, fp, dp): theta, its scale s and discriminant / s^2.
    theta = 3 * (fx - fp) / (stp - stx) + dx + dp
    s = jnp.maximum(jnp.maximum(jnp.abs(theta), jnp.abs(dx)), jnp.abs(dp))
    disc = (theta / s) ** 2 - (dx / s) * (dp / s)
    stpf1 = _case1_step(stx, fx, dx, stp, fp, dp, theta, s, disc)
    stpf2 = _case2_step(stx, dx, stp, dp, theta, s, disc)
    stpf3 = _case3_step(stx, dx, sty, stp, dp, theta, s, disc, brackt, stpmin, stpmax, minpack2)
    stpf4 = _case4_step(stx, sty, fy, dy, stp, fp, dp, brackt, stpmin, stpmax)

    stpf = jnp.where(c1, stpf1, jnp.where(c2, stpf2, jnp.where(c3, stpf3, stpf4)))
    case = jnp.where(c1, 1, jnp.where(c2, 2, jnp.where(c3, 3, 4))).astype(jnp.int32)
    new_brackt = brackt | c1 | c2

    # Update the interval of uncertainty.
    new_sty = jnp.where(c1, stp, jnp.where(c2, stx, sty))
    new_fy = jnp.where(c1, fp, jnp.where(c2, fx, fy))
    new_dy = jnp.where(c1, dp, jnp.where(c2, dx, dy))
    new_stx = jnp.where(c1, stx, stp)
    new_fx = jnp.where(c1, fx, fp)
    new_dx = jnp.where(c1, dx, dp)

    # MCSTEP: clip to [stpmin, stpmax], then the 0.66 safeguard for cases 1 and 3 when bracketed.
    stp_mc = jnp.clip(stpf, stpmin, stpmax)
    guard = new_stx + _P66 * (new_sty - new_stx)
    stp_mc = jnp.where(
        new_brackt & (c1 | c3),
        jnp.where(new_sty > new_stx, jnp.minimum(guard, stp_mc), jnp.maximum(guard, stp_mc)),
        stp_mc,
    )
    new_stp = jnp.where(minpack2, stpf, stp_mc)

    keep = lambda old, new: jnp.where(bad, old, new)  # noqa: E731
    return (
        keep(stx, new_stx),
        keep(fx, new_fx),
        keep(dx, new_dx),
        keep(sty, new_sty),
        keep(fy, new_fy),
        keep(dy, new_dy),
        keep(stp, new_stp),
        keep(brackt, new_brackt),
        jnp.where(bad, 0, case).astype(jnp.int32),
    )


def _case1_step(stx: jax.Array, fx: jax.Array, dx: jax.Array, stp: jax.Array, fp: jax.Array, dp: jax.Array,
                theta: jax.Array, s: jax.Array, disc: jax.Array) -> jax.Array:
    """Case 1 (a higher value at stp): the cubic (stpc) and quadratic (stpq) minimisers; the cubic one
    if it is closer to stx, else halfway between the two."""
    gamma = s * jnp.sqrt(disc)
    gamma = jnp.where(stp < stx, -gamma, gamma)
    p = (gamma - dx) + theta
    q = ((gamma - dx) + gamma) + dp
    stpc = stx + (p / q) * (stp - stx)
    stpq = stx + ((dx / ((fx - fp) / (stp - stx) + dx)) / 2) * (stp - stx)
    return jnp.where(jnp.abs(stpc - stx) < jnp.abs(stpq - stx), stpc, stpc + (stpq - stpc) / 2)


def _case2_step(stx: jax.Array, dx: jax.Array, stp: jax.Array, dp: jax.Array, theta: jax.Array, s: jax.Array,
                disc: jax.Array) -> jax.Array:
    """Case 2 (a lower value, derivatives of opposite sign): the cubic or the secant step, whichever
    is farther from stp."""
    gamma = s * jnp.sqrt(disc)
    gamma = jnp.where(stp > stx, -gamma, gamma)
    p = (gamma - dp) + theta
    q = ((gamma - dp) + gamma) + dx
    stpc = stp + (p / q) * (stx - stp)
    stpq = stp + (dp / (dp - dx)) * (stx - stp)
    return jnp.where(jnp.abs(stpc - stp) > jnp.abs(stpq - stp), stpc, stpq)


def _case3_step(stx: jax.Array, dx: jax.Array, sty: jax.Array, stp: jax.Array, dp: jax.Array, theta: jax.Array,
                s: jax.Array, disc: jax.Array, brackt: jax.Array, stpmin: jax.Array, stpmax: jax.Array,
                minpack2: jax.Array) -> jax.Array:
    """Case 3 (a lower value, the same sign, |phi'| decreases): the cubic or the secant step, the
    closer to stp if bracketed, else the farther; MINPACK-2 applies the 0.66 safeguard here."""
    # The cubic may not have a minimiser beyond stp; gamma = 0 only if it does not tend to
    # infinity in the direction of the step.
    gamma = s * jnp.sqrt(jnp.maximum(0.0, disc))
    gamma = jnp.where(stp > stx, -gamma, gamma)
    p = (gamma - dp) + theta
    q = (gamma + (dx - dp)) + gamma
    r = p / q
    stpc = jnp.where((r < 0) & (gamma != 0), stp + r * (stx - stp), jnp.where(stp > stx, stpmax, stpmin))
    stpq = stp + (dp / (dp - dx)) * (stx - stp)
    closer = jnp.where(jnp.abs(stp - stpc) < jnp.abs(stp - stpq), stpc, stpq)
    farther = jnp.where(jnp.abs(stp - stpc) > jnp.abs(stp - stpq), stpc, stpq)
    stpf3_mc = jnp.where(brackt, closer, farther)
    guard = stp + _P66 * (sty - stp)
    stpf3_dc = jnp.where(
        brackt,
        jnp.where(stp > stx, jnp.minimum(guard, closer), jnp.maximum(guard, closer)),
        jnp.clip(farther, stpmin, stpmax),
    )
    return jnp.where(minpack2, stpf3_dc, stpf3_mc)


def _case4_step(stx: jax.Array, sty: jax.Array, fy: jax.Array, dy: jax.Array, stp: jax.Array, fp: jax.Array,
                dp: jax.Array, brackt: jax.Array, stpmin: jax.Array, stpmax: jax.Array) -> jax.Array:
    """Case 4 (a lower value, the same sign, |phi'| does not decrease): the cubic through stp and
    sty if bracketed, else the bound in the direction of the step."""
    theta = 3 * (fp - fy) / (sty - stp) + dy + dp
    s = jnp.maximum(jnp.maximum(jnp.abs(theta), jnp.abs(dy)), jnp.abs(dp))
    gamma = s * jnp.sqrt((theta / s) ** 2 - (dy / s) * (dp / s))
    gamma = jnp.where(stp > sty, -gamma, gamma)
    p = (gamma - dp) + theta
    q = ((gamma - dp) + gamma) + dy
    stpc = stp + (p / q) * (sty - stp)
    return jnp.where(brackt, stpc, jnp.where(stp > stx, stpmax, stpmin))


def _promote(*xs):
    dtype = jnp.result_type(*xs)
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.result_type(float)
    return [jnp.asarray(x, dtype) for x in xs]


def mcstep(stx, fx, dx, sty, fy, dy, stp, fp, dp, brackt, stpmin, stpmax):
    """Safeguarded step of Nocedal's MCSTEP (Moré & Thuente 1994), elementwise, with ``jnp.where``.

    ``(stx, fx, dx)``: best step so far, phi and phi' there; ``(sty, fy, dy)``: the other endpoint of
    the interval of uncertainty; ``(stp, fp, dp)``: the current step; ``brackt``: whether a minimiser
    is bracketed; the new step is kept in ``[stpmin, stpmax]``.  Returns the updated
    ``(stx, fx, dx, sty, fy, dy, stp, brackt, info)`` where ``info`` is the case used (1..4) or 0 for
    improper input (stp outside the bracket, ``dx * (stp - stx) >= 0``, ``stpmax < stpmin``), in
    which case nothing changes.
    """
    return _cstep(stx, fx, dx, sty, fy, dy, stp, fp, dp, brackt, stpmin, stpmax, False)


def dcstep(stx, fx, dx, sty, fy, dy, stp, fp, dp, brackt, stpmin, stpmax):
    """The MINPACK-2 ``dcstep`` flavour of :func:`mcstep` (same arguments and returns)."""
    return _cstep(stx, fx, dx, sty, fy, dy, stp, fp, dp, brackt, stpmin, stpmax, True)


# --------------------------------------------------------------------------------------------------
# the search (MCSRCH) as a reverse-communication state machine
# --------------------------------------------------------------------------------------------------


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_params(params: LineSearchParams, stp0=None) -> None:
    """Python-side validation of the options that are concrete (before any tracing)."""

    def value(name, v):
        if v is None or not _is_concrete(v):
            return None
        a = np.asarray(v)
        if a.ndim != 0 and a.size != 1:
            return None  # batched options are checked elementwise as traced info 0
        if not np.issubdtype(a.dtype, np.number) and a.dtype != bool:
            raise TypeError(f"{name}={v!r} is not a number")
        return a.item()

    ftol, gtol, xtol = (value(n, getattr(params, n)) for n in ("ftol", "gtol", "xtol"))
    for name, v in (("ftol", ftol), ("gtol", gtol), ("xtol", xtol)):
        if v is not None and not v >= 0:
            raise ValueError(f"{name}={v!r} is negative (or NaN); it must be >= 0, e.g. ftol=1e-4, gtol=0.9")
    stpmin, stpmax = value("stpmin", params.stpmin), value("stpmax", params.stpmax)
    if stpmin is not None and not stpmin >= 0:
        raise ValueError(f"stpmin={stpmin!r} is negative; it must be >= 0 (default 1e-20)")
    if stpmin is not None and stpmax is not None and not stpmax >= stpmin:
        raise ValueError(f"stpmin={stpmin!r} is above stpmax={stpmax!r}; give stpmin <= stpmax")
    maxfev = value("maxfev", params.maxfev)
    if maxfev is not None and (maxfev != int(maxfev) or maxfev <= 0):
        raise ValueError(f"maxfev={maxfev!r} must be a positive integer (default 20)")
    if stp0 is not None:
        s = value("stp0", stp0)
        if s is not None and not s > 0:
            raise ValueError(f"stp0={s!r} must be > 0 (the first trial step, e.g. 1.0)")


def line_search_init(f0, g0_dot_d, stp0, params: LineSearchParams | None = None) -> LineSearchState:
    """Start a search from ``phi(0) = f0``, ``phi'(0) = g0_dot_d`` with first trial step ``stp0``.

    Concrete bad options raise ``ValueError`` here; traced ones (and a direction that is not a
    descent direction) give a state that is already ``done`` with ``info = 0`` and ``stp = 0``.
    The working dtype is that of ``f0`` / ``g0_dot_d`` (floating).
    """
    params = LineSearchParams() if params is None else params
    _check_params(params, stp0)
    f0, g0 = _promote(f0, g0_dot_d)
    dtype = f0.dtype
    xtol = jnp.finfo(dtype).eps if params.xtol is None else params.xtol
    ftol, gtol, xtol, stpmin, stpmax, stp = (
        jnp.asarray(v, dtype) for v in (params.ftol, params.gtol, xtol, params.stpmin, params.stpmax, stp0)
    )
    maxfev = jnp.asarray(params.maxfev, jnp.int32)
    minpack2 = jnp.asarray(params.minpack2, bool)
    f0, g0, ftol, gtol, xtol, stpmin, stpmax, stp, maxfev, minpack2 = jnp.broadcast_arrays(
        f0, g0, ftol, gtol, xtol, stpmin, stpmax, stp, maxfev, minpack2
    )

    improper = (
        (stp <= 0)
        | (ftol < 0)
        | (gtol < 0)
        | (xtol < 0)
        | (stpmin < 0)
        | (stpmax < stpmin)
        | (maxfev <= 0)
        | ~(g0 < 0)
        | ~jnp.isfinite(f0)
    )
    zero = jnp.zeros_like(f0)
    width = stpmax - stpmin
    # First trial: stmin = stx = 0, stmax = stp + 4 stp (both flavours); clip to [stpmin, stpmax].
    stp = jnp.clip(stp, stpmin, stpmax)
    return LineSearchState(
        stx=zero,
        fx=f0,
        dx=g0,
        sty=zero,
        fy=f0,
        dy=g0,
        stp=jnp.where(improper, zero, stp),
        stmin=zero,
        stmax=stp + _XTRAPU * stp,
        brackt=jnp.zeros(f0.shape, bool),
        stage1=jnp.ones(f0.shape, bool),
        infoc=jnp.ones(f0.shape, jnp.int32),
        nfev=jnp.zeros(f0.shape, jnp.int32),
        finit=f0,
        dginit=g0,
        dgtest=ftol * g0,
        width=width,
        width1=width / _P5,
        ftol=ftol,
        gtol=gtol,
        xtol=xtol,
        stpmin=stpmin,
        stpmax=stpmax,
        maxfev=maxfev,
        minpack2=minpack2,
        done=improper,
        info=jnp.where(improper, 0, -1).astype(jnp.int32),
        nonfinite=jnp.zeros(f0.shape, jnp.int32),
    )


def line_search_update(state: LineSearchState, f, g_dot_d):
    """Feed ``phi(state.stp) = f`` and ``phi'(state.stp) = g_dot_d``; returns ``(state, next_stp, done, info)``.

    While not ``done``, evaluate next at ``next_stp`` (= ``state.stp``). Once ``done``, ``next_stp``
    is the final step (the one just evaluated) and ``info`` the MCSRCH code (1..6, or 0); a state
    that is already done is returned unchanged, so a batch can run until all its members are done.
    """
    s = state
    f = jnp.asarray(f, s.fx.dtype)
    g = jnp.asarray(g_dot_d, s.fx.dtype)
    stp = s.stp
    nfev = s.nfev + 1
    ftest1 = s.finit + stp * s.dgtest
    f, bad_f = worst_if_nonfinite(f)  # -inf would pass every test below
    finite = ~bad_f & jnp.isfinite(g)
    nonfinite = s.nonfinite + (~finite).astype(jnp.int32)

    info = _termination_info(s, f, g, nfev, ftest1)
    finished = info != 0
    stage1, (stx, fx, dx, sty, fy, dy, new_stp, brackt, infoc) = _interval_step(s, f, g, ftest1)
    # A non-finite phi or phi' at stp: treat stp as a failed (too long) step and bisect towards stx.
    fx, dx, stx = (jnp.where(finite, a, b) for a, b in ((fx, s.fx), (dx, s.dx), (stx, s.stx)))
    sty = jnp.where(finite, sty, stp)
    fy = jnp.where(finite, fy, jnp.inf)
    dy = jnp.where(finite, dy, 0.0)
    brackt = jnp.where(finite, brackt, True)
    infoc = jnp.where(finite, infoc, 1)
    new_stp = jnp.where(finite, new_stp, s.stx + _P5 * (stp - s.stx))
    new_stp, stmin, stmax, width, width1 = _next_trial(s, new_stp, stx, sty, brackt, infoc, nfev)

    advanced = s._replace(
        stx=stx,
        fx=fx,
        dx=dx,
        sty=sty,
        fy=fy,
        dy=dy,
        stp=new_stp,
        stmin=stmin,
        stmax=stmax,
        brackt=brackt,
        stage1=stage1,
        infoc=infoc,
        nfev=nfev,
        width=width,
        width1=width1,
        nonfinite=nonfinite,
    )
    final = s._replace(nfev=nfev, done=jnp.ones_like(s.done), info=info, nonfinite=nonfinite)
    new = jax.tree.map(lambda a, b: jnp.where(finished, a, b), final, advanced)
    new = jax.tree.map(lambda a, b: jnp.where(s.done, a, b), s, new)
    return new, new.stp, new.done, new.info


def _termination_info(s: LineSearchState, f: jax.Array, g: jax.Array, nfev: jax.Array,
                      ftest1: jax.Array) -> jax.Array:
    """MCSRCH's termination code after the evaluation ``(f, g)`` at ``s.stp`` (0: go on), its tests in
    MCSRCH's order of precedence (later ones win); ``ftest1`` the sufficient-decrease bound."""
    stp = s.stp
    info = jnp.zeros_like(nfev)
    info = jnp.where((s.brackt & ((stp <= s.stmin) | (stp >= s.stmax))) | (s.infoc == 0), 6, info)
    info = jnp.where((stp == s.stpmax) & (f <= ftest1) & (g <= s.dgtest), 5, info)
    info = jnp.where((stp == s.stpmin) & ((f > ftest1) | (g >= s.dgtest)), 4, info)
    info = jnp.where(nfev >= s.maxfev, 3, info)
    info = jnp.where(s.brackt & (s.stmax - s.stmin <= s.xtol * s.stmax), 2, info)
    return jnp.where((f <= ftest1) & (jnp.abs(g) <= s.gtol * (-s.dginit)), 1, info)


def _interval_step(s: LineSearchState, f: jax.Array, g: jax.Array, ftest1: jax.Array) -> tuple:
    """``(stage1, (stx, fx, dx, sty, fy, dy, stp, brackt, infoc))``: the safeguarded step
    (:func:`_cstep`) from the evaluation ``(f, g)`` at ``s.stp``, on the modified function in stage 1."""
    stp = s.stp
    # Stage 1 ends at the first step with psi(stp) <= 0 and a nonnegative (modified) derivative.
    dgthresh = jnp.where(s.minpack2, 0.0, jnp.minimum(s.ftol, s.gtol) * s.dginit)
    stage1 = s.stage1 & ~((f <= ftest1) & (g >= dgthresh))
    # The modified function psi(a) = phi(a) - phi(0) - ftol a phi'(0) (up to a constant) predicts
    # the step in stage 1 if a lower value was found but the decrease is not sufficient.
    shift = jnp.where(stage1 & (f <= s.fx) & (f > ftest1), s.dgtest, 0.0)
    stx, fxm, dxm, sty, fym, dym, new_stp, brackt, infoc = _cstep(
        s.stx,
        s.fx - s.stx * shift,
        s.dx - shift,
        s.sty,
        s.fy - s.sty * shift,
        s.dy - shift,
        stp,
        f - stp * shift,
        g - shift,
        s.brackt,
        s.stmin,
        s.stmax,
        s.minpack2,
    )
    fx = fxm + stx * shift
    fy = fym + sty * shift
    dx = dxm + shift
    dy = dym + shift
    return stage1, (stx, fx, dx, sty, fy, dy, new_stp, brackt, infoc)


def _next_trial(s: LineSearchState, new_stp: jax.Array, stx: jax.Array, sty: jax.Array, brackt: jax.Array,
                infoc: jax.Array, nfev: jax.Array) -> tuple:
    """``(stp, stmin, stmax, width, width1)``: the next trial step, safeguarded (bisection when the
    interval shrinks too slowly or the interpolation overflowed, the best step before an unusual
    end), the interval it must lie in, and the interval widths."""
    stp = s.stp
    # Force a sufficient decrease in the size of the interval of uncertainty (bisection).
    wide = brackt & (jnp.abs(sty - stx) >= _P66 * s.width1)
    new_stp = jnp.where(wide, stx + _P5 * (sty - stx), new_stp)
    width1 = jnp.where(brackt, s.width, s.width1)
    width = jnp.where(brackt, jnp.abs(sty - stx), s.width)
    # An interpolation that overflowed to NaN/inf (it never does on finite data): bisect.
    new_stp = jnp.where(
        jnp.isfinite(new_stp), new_stp, jnp.where(brackt, stx + _P5 * (sty - stx), stp + _XTRAPU * (stp - stx))
    )

    # The interval the next trial step must lie in (top of MCSRCH's loop).
    stmin = jnp.where(
        brackt, jnp.minimum(stx, sty), jnp.where(s.minpack2, new_stp + _XTRAPL * (new_stp - stx), stx)
    )
    stmax = jnp.where(brackt, jnp.maximum(stx, sty), new_stp + _XTRAPU * (new_stp - stx))
    new_stp = jnp.clip(new_stp, s.stpmin, s.stpmax)
    # If an unusual termination is to occur, let the last evaluation be at the best step so far.
    unusual = (
        (brackt & ((new_stp <= stmin) | (new_stp >= stmax)))
        | (nfev >= s.maxfev - 1)
        | (infoc == 0)
        | (brackt & (stmax - stmin <= s.xtol * stmax))
    )
    new_stp = jnp.where(unusual, stx, new_stp)
    return new_stp, stmin, stmax, width, width1


def more_thuente(
    phi_and_dphi: Callable[[jax.Array], tuple[jax.Array, jax.Array]],
    stp0=1.0,
    ftol=1e-4,
    gtol=0.9,
    xtol=None,
    stpmin=1e-20,
    stpmax=1e20,
    maxfev=20,
    *,
    f0=None,
    g0=None,
    minpack2=False,
):
    """Run the search on a scalar function ``phi(stp) -> (phi, phi')`` in a ``lax.while_loop``.

    ``f0, g0``: phi(0) and phi'(0) if known (else ``phi_and_dphi(0)`` is called once, not counted).
    Returns ``(stp, f, g, nfev, info)``: the final step, phi and phi' there, the number of
    evaluations and the MCSRCH code (see the module docstring). Jittable and vmappable: vmap over a
    closure's parameters and ``stp0`` to run many searches in lockstep.
    """
    params = LineSearchParams(ftol, gtol, xtol, stpmin, stpmax, maxfev, minpack2)
    _check_params(params, stp0)
    if f0 is None or g0 is None:
        dtype = jnp.result_type(stp0, float)
        f0, g0 = phi_and_dphi(jnp.zeros((), dtype))
    state = line_search_init(f0, g0, stp0, params)
    f0, g0 = state.finit, state.dginit

    def cond(carry):
        return ~carry[0].done

    def body(carry):
        st, f, g = carry
        fn, gn = phi_and_dphi(st.stp)
        fn = jnp.asarray(fn, f.dtype)
        gn = jnp.asarray(gn, g.dtype)
        f = jnp.where(st.done, f, fn)
        g = jnp.where(st.done, g, gn)
        st, _, _, _ = line_search_update(st, f, g)
        return st, f, g

    state, f, g = lax.while_loop(cond, body, (state, f0, g0))
    return state.stp, f, g, state.nfev, state.info
