"""``mw.minimize``: scipy.optimize.minimize's signature and meaning, on multiwalk's solvers.

``minimize(fun, x0, args=(), method="L-BFGS-B", jac=None, bounds=None, tol=None, callback=None,
options=None)`` builds a :class:`~multiwalk.Problem` and a solver from scipy's arguments, runs
:func:`multiwalk.solve`, and returns a ``scipy.optimize.OptimizeResult`` with scipy's fields
(``x, fun, jac, nit, nfev, njev, status, success, message``, ``hess_inv`` for L-BFGS) plus
``result``, multiwalk's own full result.  ``fun`` is written in ``jax.numpy`` (gradients come
from ``jax.grad`` unless ``jac`` gives them); ``x0`` of shape ``(K, n)`` runs K starts in lockstep.

Methods: ``"L-BFGS-B"`` and ``"lbfgs"`` (:class:`~multiwalk.LBFGS`), ``"pattern"``
(:class:`~multiwalk.PatternSearch`, needs ``bounds``), ``"replica-exchange"``
(:class:`~multiwalk.ReplicaExchange`, needs ``bounds``; minimises ``fun`` as a chi2).
``options`` take scipy's names where scipy has the option (``maxiter``, ``maxcor``, ``maxls``,
``gtol``, ``ftol``, ``disp``, ``iprint``) and the solver's own constructor names otherwise;
docs/lbfgs.md has the table.  Nothing given is ignored: an option that does not apply is an
error naming it.  L-BFGS stops as scipy's does: ``max |proj g| <= gtol`` (default 1e-5) is
``SUCCESS``; the relative reduction of f ``<= ftol`` (default scipy's 2.2e-9) ends the run too,
but as ``SMALL_REDUCTION`` (not a success) where the gradient test does not hold there.
``bounds`` may leave a side open (``None`` or +-inf).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .problem import Problem
from .result import Result, Status
from .solve import solve
from .solvers.base import Iterate, Solver, asks_to_stop
from .solvers.lbfgs import LBFGS
from .solvers.pattern_search import PatternSearch
from .solvers.replica_exchange import ReplicaExchange

if TYPE_CHECKING:  # scipy.optimize is imported when a result is made: `import multiwalk` does not need it
    from scipy.optimize import OptimizeResult

__all__ = ["minimize", "METHODS"]

METHODS = {"l-bfgs-b": LBFGS, "lbfgs": LBFGS, "pattern": PatternSearch, "replica-exchange": ReplicaExchange}

# scipy's option name -> the solver's (for L-BFGS); scipy's gtol and ftol are stopping tests (LBFGS's
# pgtol and frel_tol), not the line search's constants that LBFGS's own gtol and ftol are
_LBFGS_NAMES = {"maxcor": "m", "maxiter": "max_iterations", "maxls": "maxfev", "gtol": "pgtol", "ftol": "frel_tol"}
SCIPY_GTOL = 1e-5  # scipy L-BFGS-B's defaults: max |proj g| <= gtol ...
SCIPY_FTOL = 1e7 * float(np.finfo(np.float64).eps)  # ... and (f_k - f_k+1) / max(|f_k|, |f_k+1|, 1) <= ftol (factr 1e7)
# scipy's options that have no meaning with exact (automatic) gradients: accepted with a note, not ignored silently
_FINITE_DIFFERENCE_OPTIONS = ("eps", "finite_diff_rel_step")


def minimize(
    fun: Callable,
    x0: Any,
    args: tuple = (),
    method: str | None = None,
    jac: Callable | bool | None = None,
    hess: Any = None,
    hessp: Any = None,
    bounds: Any = None,
    constraints: Any = (),
    tol: float | None = None,
    callback: Callable | None = None,
    options: dict[str, Any] | None = None,
    *,
    seed: int = 0,
    **solve_options: Any,
) -> OptimizeResult:
    """Minimise ``fun(x, *args)`` from ``x0`` as ``scipy.optimize.minimize`` does (see the module
    docstring).  ``callback(intermediate_result)`` (an OptimizeResult with ``x``, ``fun``, ``nit``)
    or ``callback(xk)`` is called after every iteration; returning True or raising StopIteration
    stops the run (``status`` ``Status.CALLBACK_STOP``).  ``seed`` and ``solve_options``
    (``progress``, ``time_limit``, ``devices``, ...) go to :func:`multiwalk.solve`."""
    name = _method_name(method)
    _refuse_unsupported(hess, hessp, constraints)
    lower, upper = _bounds(bounds, np.shape(x0)[-1] if np.ndim(x0) else 1)
    problem = _problem(fun, x0, args, jac, lower, upper)
    solver, notes = _solver(name, dict(options or {}), tol, problem)
    result = solve(problem, solver, seed=seed, iteration_callback=_iteration_callback(callback), **solve_options)
    return _optimize_result(result, name, notes)


def _method_name(method: str | None) -> str:
    name = "l-bfgs-b" if method is None else str(method).lower()
    if name not in METHODS:
        raise ValueError(f"method={method!r} is not one of multiwalk's: {', '.join(repr(m) for m in METHODS)} "
                         "(case-insensitive; None is 'L-BFGS-B')")
    return name


def _refuse_unsupported(hess: Any, hessp: Any, constraints: Any) -> None:
    for arg, value in (("hess", hess), ("hessp", hessp)):
        if value is not None:
            raise ValueError(f"{arg} is not used by multiwalk's methods (L-BFGS builds its own inverse Hessian): "
                             f"drop {arg}=")
    if constraints not in ((), None, []):
        raise ValueError("constraints are not supported by multiwalk's minimize: use bounds=, or a penalty in fun")


def _bounds(bounds: Any, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """scipy's ``bounds`` (a ``Bounds`` or a sequence of ``(min, max)`` pairs, None for no bound)
    as ``(lower, upper)`` vectors of n, +-inf on the open sides (L-BFGS-B honours them; the box
    solvers refuse them); ``(None, None)`` when no coordinate is bounded."""
    if bounds is None:
        return None, None
    if hasattr(bounds, "lb") and hasattr(bounds, "ub"):  # scipy.optimize.Bounds
        lower, upper = (np.broadcast_to(np.asarray(v, float), (n,)).copy() for v in (bounds.lb, bounds.ub))
    else:
        pairs = list(bounds)
        if len(pairs) != n or any(not isinstance(p, Sequence) or len(p) != 2 for p in pairs):
            raise ValueError(f"bounds must be {n} (min, max) pairs (one per element of x0) or a "
                             f"scipy.optimize.Bounds, got {bounds!r}")
        lower = np.array([-np.inf if lo is None else lo for lo, _ in pairs], float)
        upper = np.array([np.inf if hi is None else hi for _, hi in pairs], float)
    if np.all(np.isneginf(lower)) and np.all(np.isposinf(upper)):
        return None, None
    return lower, upper


@functools.lru_cache(maxsize=64)
def _functions(fun: Callable, jac: Any) -> dict[str, Callable]:
    """The Problem's functions for ``fun(x, *args)`` and scipy's ``jac`` (None: ``jax.grad``;
    True: ``fun`` returns ``(f, g)``; a callable: the gradient).  Kept per ``(fun, jac)``, so a
    second call with the same functions reuses the compiled loop (keyed on them)."""
    if jac is True:
        return {"value_and_grad": lambda x, a: fun(x, *a)}
    if callable(jac):
        return {"objective": lambda x, a: fun(x, *a), "value_and_grad": lambda x, a: (fun(x, *a), jac(x, *a))}
    return {"objective": lambda x, a: fun(x, *a)}


def _problem(fun: Callable, x0: Any, args: tuple, jac: Any, lower: Any, upper: Any) -> Problem:
    if not callable(fun):
        raise TypeError(f"fun must be a function fun(x, *args) -> float written in jax.numpy, got {type(fun).__name__}")
    if jac not in (None, True, False) and not callable(jac):
        raise TypeError(f"jac must be None, True (fun returns (f, g)) or a function jac(x, *args), got {jac!r}")
    args = args if isinstance(args, tuple) else (args,)
    return Problem(**_functions(fun, None if jac is False else jac), x0=x0, args=args, lower=lower, upper=upper)


def _solver(name: str, options: dict[str, Any], tol: float | None, problem: Problem) -> tuple[Solver, list[str]]:
    """The solver for ``name`` from scipy's ``options`` (translated) and ``tol``, and the notes
    on options accepted without effect (finite-difference steps: gradients here are exact)."""
    notes = [f"option {k}={options.pop(k)!r} is not used: gradients are exact (jax.grad or jac)"
             for k in _FINITE_DIFFERENCE_OPTIONS if k in options]
    if METHODS[name] is LBFGS:
        kwargs = _lbfgs_options(options, tol, problem)  # tol sets gtol and ftol, as scipy's
    else:
        if tol is not None:
            raise ValueError(f"tol={tol} has no meaning for method={name!r} (it runs a fixed number of iterations): drop tol")
        if problem.lower is None:
            raise ValueError(f"method={name!r} searches a box: give bounds=[(min, max), ...] for every parameter")
        kwargs = _renamed(options, {"maxiter": "iterations" if name == "pattern" else "niter"}, name)
    try:
        return METHODS[name](**kwargs), notes
    except TypeError as err:
        raise ValueError(f"options for method={name!r}: {err}; scipy's names or {METHODS[name].__name__}'s "
                         "constructor arguments are accepted") from None


def _renamed(options: dict[str, Any], names: dict[str, str], method: str) -> dict[str, Any]:
    out, given = {}, {}
    for key, value in options.items():
        target = names.get(key, key)
        if target in out:
            raise ValueError(f"options for method={method!r}: {given[target]!r} and {key!r} name the same option; give one")
        out[target], given[target] = value, key
    return out


def _lbfgs_options(options: dict[str, Any], tol: float | None, problem: Problem) -> dict[str, Any]:
    """scipy L-BFGS-B's options as :class:`~multiwalk.LBFGS`'s (docs/lbfgs.md has the table)."""
    if tol is not None:  # as scipy: tol sets both tests
        options.setdefault("gtol", tol)
        options.setdefault("ftol", tol)
    disp, iprint = options.pop("disp", None), options.pop("iprint", None)
    kwargs = _renamed(options, _LBFGS_NAMES, "L-BFGS-B")
    if "maxfun" in kwargs:
        raise ValueError(_SCIPY_MEANING["maxfun"])
    # scipy's tests and only those: its defaults, and not LBFGS's ||g|| <= eps max(1, ||x||) (eps is
    # scipy's finite-difference step, taken above).  The ftol test is scipy's default too, so a run
    # stops where scipy's would; it ends SMALL_REDUCTION, not SUCCESS, unless the gtol test holds.
    kwargs.setdefault("pgtol", SCIPY_GTOL)
    kwargs.setdefault("frel_tol", SCIPY_FTOL)
    if problem.lower is None:  # a box has only L-BFGS-B's pgtol test; without one, eps's test is turned off
        kwargs["eps"] = 0.0
    if iprint is not None and int(iprint) > 0:
        kwargs.setdefault("print_every", int(iprint))
    elif disp:
        kwargs.setdefault("print_every", 0)  # the first and the last iteration, as the seed's iprint[1] = 0
    kwargs["keep_pairs"] = True  # for hess_inv
    return kwargs


_SCIPY_MEANING = {
    "maxfun": "option maxfun (scipy: the most evaluations of f in the whole run) is not supported: use maxiter "
              "(iterations) and maxls (evaluations per line search)",
}


def _iteration_callback(callback: Callable | None) -> Callable[[Iterate], bool] | None:
    """scipy's two callback forms as ``solve(iteration_callback=...)``'s: ``callback(xk)``, or
    ``callback(intermediate_result)`` (by that parameter's name, as scipy decides)."""
    if callback is None:
        return None
    if not callable(callback):
        raise TypeError(f"callback must be a function callback(intermediate_result) or callback(xk), got {callback!r}")
    try:
        takes_result = "intermediate_result" in inspect.signature(callback).parameters
    except (TypeError, ValueError):
        takes_result = False

    def call(it: Iterate) -> bool:
        if takes_result:
            from scipy.optimize import OptimizeResult

            return asks_to_stop(callback(OptimizeResult(x=it.x, fun=it.fun, nit=it.iteration)))
        return asks_to_stop(callback(it.x))

    return call


def _optimize_result(result: Result, name: str, notes: list[str]) -> OptimizeResult:
    """scipy's fields from multiwalk's result (``result`` keeps the whole of it)."""
    from scipy.optimize import OptimizeResult

    out = OptimizeResult(x=result.x, fun=result.fun, status=result.status, success=result.status == Status.SUCCESS,
                         message=result.message + "".join(f"; {n}" for n in notes), result=result)
    if METHODS[name] is LBFGS:
        out.update(jac=result.grad, nit=result.iterations, nfev=result.nfev, njev=result.nfev,
                   hess_inv=result.inverse_hessian() if result.pairs is not None else None)
        if result.xs is not None and len(result.xs) > 1:
            out.update(xs=result.xs, funs=result.funs, statuses=result.statuses)
    else:
        iterations = result.stats.get("iterations", {})
        # pattern search counts its evaluations; replica exchange its Metropolis updates (one evaluation each)
        nfev = result.stats.get("evaluations", result.stats.get("updates"))
        out.update(nit=int(sum(iterations.values())), nfev=None if nfev is None else int(nfev))
    return out
