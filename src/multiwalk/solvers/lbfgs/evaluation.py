"""How the line search evaluates ``f`` and ``g`` at a trial point ``x + stp d``.

An *evaluator* ``evaluate(st, stp, g_buffer) -> Evaluation`` is what a line search calls once
per trial step; the execution forms pick one:

* :func:`at_trial_point`: ``value_and_grad`` at ``x + stp d``, then ``g'd`` (every form);
* :func:`without_trial_point`: the same, the trial point not kept (the fused passes on one
  device form the accepted ``x + stp d`` again in pass A, so no evaluation writes it);
* :func:`along_line`: the problem's own one-pass ``value_and_grad.along(x, d, stp)``;
* :func:`into_rows`: ``value_and_grad.along.into``, writing ``g`` into one row of a (2, n)
  buffer that also holds the previous gradient (the fused loop's rows form).

The problem's hooks are found by :func:`line_evaluation` and :func:`line_evaluation_into`, and
checked by shapes before compiling (:func:`check_line_hooks`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ...kernels import KernelPlan
from ...problem import Problem
from .state import LBFGSState

__all__ = ["Evaluation", "along_line", "at_trial_point", "check_line_hooks", "into_rows", "line_evaluation",
           "line_evaluation_into", "line_evaluation_reason", "without_trial_point"]


class Evaluation(NamedTuple):
    """One evaluation of the line search, at ``x + stp d``."""

    x: jax.Array | None  # (n,) the trial point, or None where pass A forms it again
    f: jax.Array  # () f there
    g: jax.Array  # (n,) g there; in the rows form the (2, n) buffer holding it in one row
    gd: jax.Array  # () g'd, the slope along the direction


Evaluator = Callable[[LBFGSState, jax.Array, "jax.Array | None"], Evaluation]


def at_trial_point(vg: Callable) -> Evaluator:
    """``vg(x + stp d)`` (``vg(x) -> (f, g)``), then ``g'd``; the trial point kept."""

    def evaluate(st: LBFGSState, stp: jax.Array, g_buffer: jax.Array | None) -> Evaluation:
        xt = st.x + stp * st.d  # trial_point's formula
        ft, gt = vg(xt)
        return Evaluation(xt, ft, gt, gt @ st.d)

    return evaluate


def without_trial_point(evaluate: Evaluator) -> Evaluator:
    """``evaluate`` with the trial point dropped: pass A forms it again from ``x`` and ``d``."""

    def dropped(st: LBFGSState, stp: jax.Array, g_buffer: jax.Array | None) -> Evaluation:
        return evaluate(st, stp, g_buffer)._replace(x=None)

    return dropped


def along_line(along: Callable) -> Evaluator:
    """The problem's one-pass ``along(x, d, stp) -> (f, g, g'd)`` (:func:`line_evaluation`)."""

    def evaluate(st: LBFGSState, stp: jax.Array, g_buffer: jax.Array | None) -> Evaluation:
        ft, gt, dgt = along(st.x, st.d, stp)
        return Evaluation(None, ft, gt, dgt)

    return evaluate


def into_rows(into: Callable, new_row: jax.Array) -> Evaluator:
    """The problem's ``into(x, d, stp, out, row) -> (f, out, g'd)`` (:func:`line_evaluation_into`):
    ``g`` written in place into row ``new_row`` of the (2, n) buffer ``g_buffer``."""

    def evaluate(st: LBFGSState, stp: jax.Array, g_buffer: jax.Array | None) -> Evaluation:
        ft, grads, dgt = into(st.x, st.d, stp, g_buffer, new_row)
        return Evaluation(None, ft, grads, dgt)

    return evaluate


# --------------------------------------------------------------------------------------------------
# the problem's hooks
# --------------------------------------------------------------------------------------------------


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
        with problem._user_precision():  # the user's hook: its products at the problem's precision
            f, g, gd = along(x, d, stp)
        return jnp.asarray(f).astype(dt), jnp.asarray(g).astype(dt), jnp.asarray(gd).astype(dt)

    return evaluate


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
        with problem._user_precision():
            f, out, gd = into(x, d, stp, out, row)
        return jnp.asarray(f).astype(dt), out, jnp.asarray(gd).astype(dt)

    return evaluate


def line_evaluation_reason(problem: Problem, plan: KernelPlan) -> str:
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


# value_and_grad.along -> the (n, dtype, id of its .into) its shapes were checked for: checked
# once, not in every solve() (tracing them took ~8 ms of each call on a CPU)
_CHECKED_HOOKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def check_line_hooks(problem: Problem) -> None:
    """``value_and_grad.along`` (and its ``.into``), a public hook, by shapes before compiling: a
    wrong shape would otherwise fail deep in the traced loop without naming the hook.  Once per
    hook, size and dtype."""
    along = line_evaluation(problem)
    if along is None:
        return
    n, dt = problem.n_free, problem.dtype
    hook = problem._user_vg.along  # the user's (line_evaluation wraps it anew each call)
    key = (n, jnp.dtype(dt).str, id(getattr(hook, "into", None)))
    try:
        done = _CHECKED_HOOKS.setdefault(hook, set())
    except TypeError:  # a hook that cannot be weakly referenced: checked each time
        done = set()
    if key not in done:
        _check_line_hooks(problem, along, n, dt)
        done.add(key)


def _check_line_hooks(problem: Problem, along: Callable, n: int, dt: jnp.dtype) -> None:
    """:func:`check_line_hooks`' traces: ``along`` and its ``.into`` by ``jax.eval_shape``."""
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
