"""``algorithm.name = "minsearch"`` of ``multiwalk run``: ODAT-SE's Nelder-Mead (scipy's), with its files.

The search is ODAT-SE's ``min_search.py`` step for step: the start is ``initial_list`` or, as
ODAT-SE draws it, ``min + (max - min) * numpy.random.RandomState(seed).rand(1, d)`` (redrawn
while it breaks ``[runner.limitation]``); scipy's Nelder-Mead from the simplex ``x0, x0 +
diag(initial_scale_list)``; a point outside ``min < x < max`` (strictly) or the limitation is
``f = inf`` without an evaluation; the function is evaluated at ``x / unit_list``.  The files
(:func:`multiwalk.io.odatse.write_minsearch_files`): ``<output_dir>/0/SimplexData.txt``,
``History_FunctionCall.txt`` and ``res.txt``, and ``<output_dir>/res.txt`` (the best point).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

START_DRAWS = 100  # ODAT-SE's limit on the draws of a start that satisfies [runner.limitation]
MINIMIZE_DEFAULTS = {"xatol": 1e-4, "fatol": 1e-4, "maxiter": 10000, "maxfev": 100000}  # ODAT-SE's


def _allowed(constraint: tuple[np.ndarray, np.ndarray] | None, x: np.ndarray) -> bool:
    """ODAT-SE's limitation test: every row of ``co_a x + co_b`` > 0 (True without a limitation)."""
    if constraint is None:
        return True
    a, b = constraint
    return bool(np.all(a @ x + b > 0))


def start_point(setup: Any) -> np.ndarray:
    """``initial_list``'s first point, else ODAT-SE's draw in the box from ``RandomState(seed)``,
    redrawn while it breaks the limitation (ValueError after START_DRAWS draws)."""
    if setup.initial is not None:
        return np.asarray(setup.initial[0], dtype=np.float64)
    rng = np.random.RandomState(setup.seed)  # ODAT-SE's generator: the same seed draws the same start
    lo, hi = setup.lower, setup.upper
    for _ in range(START_DRAWS):
        x0 = lo + (hi - lo) * rng.rand(1, setup.dimension)[0]
        if _allowed(setup.constraint, x0):
            return x0
    raise ValueError(f"{setup.input_path}: no start point satisfying [runner.limitation] in {START_DRAWS} uniform "
                     "draws in the box: give initial_list, or check co_a and co_b")


def minimize_options(setup: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """``(initial_scale_list, scipy options)`` from [algorithm.minimize] with ODAT-SE's defaults."""
    opts = dict(setup.tables["minimize"])
    method = opts.pop("method", "Nelder-Mead")
    if method != "Nelder-Mead":
        raise ValueError(f"{setup.input_path}: [algorithm.minimize] method = {method!r}; multiwalk runs Nelder-Mead")
    scale = np.asarray(opts.pop("initial_scale_list", [0.25] * setup.dimension), dtype=np.float64)
    if scale.shape != (setup.dimension,):
        raise ValueError(f"{setup.input_path}: [algorithm.minimize] initial_scale_list needs {setup.dimension} numbers")
    return scale, {**MINIMIZE_DEFAULTS, **opts}


def _python_objective(setup: Any, ignored: list[str]) -> Callable[[np.ndarray], float]:
    """A Python objective as minsearch calls it: one point at a time, in this process (a
    ``vectorized`` one with a batch of one row).  A point where it raises is ``f = inf`` (a point
    Nelder-Mead rejects, as one outside the box) with ``[runner] ignore_error``, else the run
    stops with :class:`~multiwalk.host_objective.ObjectiveError` naming the point; ``ignored``
    gets one line per point that raised."""
    from _multiwalk_worker import evaluate_rows

    from ..host_objective import ObjectiveError

    vectorized, ignore_error = setup.host["vectorized"], setup.host["ignore_error"]
    spec = (setup.function, None, False, vectorized, ignore_error)

    def f(x: np.ndarray) -> float:
        values, errors = evaluate_rows(spec, np.asarray(x, np.float64)[None], 0)
        if not errors:
            return float(values[0])
        if not ignore_error:
            raise ObjectiveError(f"the objective {setup.function_label} raised {errors[0][1]} at x = "
                                 f"{np.asarray(x).tolist()}. To treat such points as rejected, set [runner] "
                                 "ignore_error = true.")
        ignored.append(f"x = {np.asarray(x).tolist()}: {errors[0][1]}")
        return math.inf

    return f


def run_minsearch(setup: Any, dtype: str) -> int:
    """Run ODAT-SE's minsearch on ``setup`` (``multiwalk.commands.run.RunSetup``) and write its
    files; ``dtype``: "float64" or "float32" for the function.  Exit status 0 when scipy says
    the search converged, else 1."""
    import jax
    import scipy.optimize

    from .. import distributed as dist
    from ..io.odatse import write_minsearch_files, write_res

    scale, options = minimize_options(setup)
    x0 = start_point(setup)
    lo, hi = setup.lower, setup.upper
    unit = np.ones(setup.dimension) if setup.unit_list is None else setup.unit_list
    simplex_rows: list[list[float]] = []
    calls: list[list[float]] = []
    ignored: list[str] = []  # a Python objective's points that raised, with [runner] ignore_error
    with jax.enable_x64(dtype == "float64"):
        f = _python_objective(setup, ignored) if setup.host else jax.jit(setup.function)

        def submit(x: np.ndarray) -> float:  # ODAT-SE's runner: inf outside the limitation, else f
            return float(f(np.asarray(x))) if _allowed(setup.constraint, x) else math.inf

        def f_calc(x: np.ndarray) -> float:  # ODAT-SE's _f_calc: the box (strict), the limitation, x / unit_list
            if not (np.all((lo < x) & (x < hi)) and _allowed(setup.constraint, x)):
                return math.inf
            x = x / unit
            y = submit(x)
            calls.append([len(calls) + 1, *x.tolist(), y])
            return y

        def iteration(intermediate_result: Any) -> None:
            simplex_rows.append([*np.asarray(intermediate_result.x).tolist(), float(intermediate_result.fun)])

        simplex_rows.append([*x0.tolist(), submit(x0)])  # step 0: the start, as ODAT-SE evaluates it
        res = scipy.optimize.minimize(f_calc, x0, method="Nelder-Mead", callback=iteration,
                                      options={"initial_simplex": np.vstack([x0, x0 + np.diag(scale)]), **options})
    if dist.is_writer():
        write_minsearch_files(setup.output_dir / "0", setup.labels, simplex_rows, calls, res.fun, res.x,
                              res.nit, res.nfev)
        print("\n".join(write_res(setup.output_dir / "res.txt", res.fun, res.x, setup.labels)))
        print(f"iterations = {res.nit}\nfunction_evaluations = {res.nfev}\n{res.message}")
        if ignored:
            print(f"ignore_error: {len(ignored)} evaluations raised and were f = inf; the first: {ignored[0]}")
    return 0 if res.success else 1
