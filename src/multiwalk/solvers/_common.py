"""What the solvers share: walkers' start, values and best point, ladders, option validators, memory.

* :func:`uniform_in_box`: start points drawn uniformly in the box (from the key stream
  :data:`INIT_STREAM` of the run's key, or a round's own key).
* :func:`worst_if_nonfinite`: every solver treats an objective value that is NaN, +inf or -inf
  as worse than anything (+inf) and counts it (``result.stats["nonfinite"]``).  A -inf is no
  minimum: left as it is, it would win every comparison (an accepted move, a best point, a
  line search's sufficient decrease) while saying nothing about the problem.
  :func:`evaluate_walkers` evaluates a batch of points through it.
* :func:`keep_better`: the best-so-far update (a candidate replaces the best only when strictly lower).
* :func:`ladder_values`: the inverse temperatures of the two replica-exchange samplers.
* ``check_*_option``: one validator per kind of option, each raising an error that names the
  option, the value given and what is allowed (before anything is compiled);
  :func:`hashable_vector` stores a checked vector option in a frozen (hashable) solver.
* :func:`check_state_fits`: the state a solver would make, estimated from its options, the
  problem's size and dtype, against the memory of the devices it may run on.
* given start points and linear constraints (ODAT-SE's ``initial_list`` and ``[runner.limitation]``,
  for ``Exchange`` and ``PopulationAnnealing``): :func:`check_initial_option`,
  :func:`check_constraint_options`, :func:`check_starts` (before compiling),
  :func:`satisfies_constraints`, :func:`feasible_starts` (redrawn starts), :func:`place_initial`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import compile_cache
from ..result import to_host
from ..spaces import Mesh

__all__ = [
    "INIT_STREAM", "uniform_in_box", "worst_if_nonfinite", "evaluate_walkers", "keep_better", "ladder_values",
    "hashable_vector", "check_int_option", "check_number_option", "check_vector_option", "check_choice_option",
    "check_bool_option", "check_callable_option", "device_memory", "check_state_fits",
]


# ---------------------------------------------------------------------------- start points
INIT_STREAM = 0x7FFFFFFF
"""The key stream of the start points, ``jax.random.fold_in(key, INIT_STREAM)``: the steps fold in
their iteration counts 0, 1, 2, ..., which never reach it, so the start's draws are never a step's."""


def uniform_in_box(
    key: jax.Array, shape: tuple[int, ...], lower: Any, upper: Any, dtype: Any, *, width_in_float64: bool
) -> jax.Array:
    """Points ``lower + (upper - lower) * u``, ``u`` uniform in [0, 1) of ``shape`` (..., d) and ``dtype``.

    ``lower``, ``upper``: the box (d,) as float64 numpy arrays (``problem.free_bounds()``).
    ``width_in_float64``: True, the width ``upper - lower`` is taken in float64 and rounded once to
    ``dtype`` (PatternSearch, LBFGS); False, ``lower`` and ``upper`` are rounded to ``dtype`` and
    subtracted there (ReplicaExchange, Exchange).  The two are equal in float64; in float32 a width
    may differ in its last bit, so each solver keeps its own to keep its runs as they were."""
    u = jax.random.uniform(key, shape, dtype)
    lo = jnp.asarray(lower, dtype)
    if width_in_float64:
        width = jnp.asarray(np.asarray(upper) - np.asarray(lower), dtype)
    else:
        width = jnp.asarray(upper, dtype) - lo
    return lo + width * u


def check_finite_box(problem: Any, who: str, fix: str = "give finite lower= and upper=") -> None:
    """A ``ValueError`` naming the first parameter whose bound is infinite: ``who`` draws points
    uniformly in the box, which needs both sides of every parameter (``fix``: what to do)."""
    if problem.lower is None:
        return
    idx = problem.free_index
    bad = np.flatnonzero(~(np.isfinite(problem.lower[idx]) & np.isfinite(problem.upper[idx])))
    if bad.size:
        i = int(idx[bad[0]])
        raise ValueError(f"{who} draws points uniformly in the box, but parameter {i} ({problem.names[i]}) has "
                         f"lower[{i}]={problem.lower[i]}, upper[{i}]={problem.upper[i]}: {fix}")


# ---------------------------------------------------------------------------- values and the best point
def worst_if_nonfinite(f: Any) -> tuple[Any, Any]:
    """``(f with every NaN, +inf and -inf replaced by +inf, the mask of those replaced)``.

    Any shape; numpy in, numpy out (result builders), else jax (inside a traced step or a Pallas
    kernel body, where ``f`` is one value per lane)."""
    xp = np if isinstance(f, (np.ndarray, np.generic, float, int)) else jnp
    bad = ~xp.isfinite(f)
    return xp.where(bad, xp.full_like(f, np.inf), f), bad


def evaluate_walkers(f: Callable[[jax.Array], jax.Array], x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``f`` (one point (d,) -> a scalar, e.g. ``problem.chi2_free``) at every point of ``x`` (..., d),
    through :func:`worst_if_nonfinite`: ``(values (...), mask (...) of the NaN and +-inf replaced)``.
    The leading axes are flattened into one ``vmap`` axis."""
    flat = x.reshape(-1, x.shape[-1])
    return worst_if_nonfinite(jax.vmap(f)(flat).reshape(x.shape[:-1]))


def lowest_row(x: jax.Array, fun: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(x[argmin(fun)], min(fun))`` for ``x`` (W, d) and ``fun`` (W,): the first row with the
    lowest value, written as reductions over rows so that on several devices each reduces its own
    rows and only ``d + 2`` numbers per device cross devices: indexing ``x[i]`` with a traced ``i``
    made XLA all-gather every row.  Exact: the other rows are +inf, and min(v, inf) = v.  (The value
    as ``min(fun)``: reducing ``where(row, fun, inf)`` too crashed XLA's CPU backend, JAX 0.10.2, in
    ReplicaExchange's chunk at 4096 sequences.)"""
    row = jnp.arange(fun.shape[0]) == jnp.argmin(fun)
    return jnp.min(jnp.where(row[:, None], x, jnp.inf), axis=0), jnp.min(fun)


def keep_better(
    best_f: jax.Array, best_x: jax.Array, f: jax.Array, x: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The best-so-far update: ``(best_f, best_x, better)`` where ``better = f < best_f`` takes the
    candidate ``f`` (...) and its point ``x`` (..., d).  Strictly lower: a tie keeps the earlier
    point, and a NaN never wins (values pass through :func:`worst_if_nonfinite` first anyway)."""
    better = f < best_f
    return jnp.where(better, f, best_f), jnp.where(better[..., None], x, best_x), better


# ---------------------------------------------------------------------------- the result's few numbers
def best_and_counts_bytes(best_fun: jax.Array, n_nonfinite: jax.Array) -> jax.Array:
    """The bytes of a run's best value ``best_fun`` () and of its non-finite counts' int32 sum and
    largest (``n_nonfinite``, one count per walker or chain), one uint8 array: a report's numbers
    come back as one read (every array read back is a copy of its own).  Read by
    :func:`read_best_and_counts`."""
    counts = jnp.stack([jnp.sum(n_nonfinite, dtype=jnp.int32), jnp.max(n_nonfinite)])
    return jnp.concatenate([jax.lax.bitcast_convert_type(v, jnp.uint8).ravel() for v in (best_fun, counts)])


def read_best_and_counts(numbers: Any, fun_dtype: Any) -> tuple[np.floating, int, int]:
    """``(best value, non-finite sum, largest count)`` from :func:`best_and_counts_bytes`'s bytes,
    the value read in ``fun_dtype``, the dtype it was written in (the state's best value's)."""
    numbers = np.asarray(numbers)
    best_fun = numbers[:-8].view(np.dtype(fun_dtype))
    if best_fun.shape != (1,):
        raise ValueError(f"the report's numbers hold {numbers.size} bytes: not one {np.dtype(fun_dtype)} "
                         "value and two int32 counts")
    n_sum, n_max = numbers[-8:].view(np.int32)
    return best_fun[0], int(n_sum), int(n_max)


def nonfinite_total(n_sum: int, n_max: int, n_nonfinite: Any) -> int:
    """The count of non-finite values: the int32 sum made on the device, exact while no partial sum
    can pass 2**31 (the largest count times the counts below it); else ``n_nonfinite`` (the state's
    counts, one per walker or chain) summed on the host in int64."""
    if n_max * n_nonfinite.size < 2**31:
        return n_sum
    return int(to_host(n_nonfinite).sum(dtype=np.int64))


# ---------------------------------------------------------------------------- temperature ladders
LADDER_SPACINGS = ("power", "log10", "linear")


def ladder_values(first: float, last: float, n: int, spacing: str) -> np.ndarray:
    """``n`` values from ``first`` to ``last`` (float64, shape (n,)), as each sampler's origin computes them.

    ``spacing``: ``"power"``, ``first * (last / first) ** (i / (n - 1))`` and ``[first]`` for n = 1
    (cuda_mcmc; :meth:`ReplicaExchange.ladder`); ``"log10"``, ``numpy.logspace(log10(first),
    log10(last), n)`` (ODAT-SE's ``Tlogspace``; :func:`~multiwalk.solvers.exchange.temperature_ladder`);
    ``"linear"``, ``numpy.linspace(first, last, n)``.  "power" and "log10" are the same geometric
    ladder written two ways, which differ in the last bits: each sampler keeps its own, so that its
    runs stay as they were."""
    if spacing == "power":
        if n == 1:
            return np.array([first])
        i = np.arange(n)
        return first * (last / first) ** (i / (n - 1))
    if spacing == "log10":
        return np.logspace(np.log10(first), np.log10(last), num=n)
    if spacing == "linear":
        return np.linspace(first, last, num=n)
    raise ValueError(f"spacing must be one of {LADDER_SPACINGS}, got {spacing!r}")


# ---------------------------------------------------------------------------- option validators
def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _given(value: Any) -> str:
    """The value as the message shows it: its repr, and its type where that is the trouble."""
    if _is_real(value) or value is None:
        return repr(value)
    return f"{value!r} (a {type(value).__name__})"


def _allowed(what: str, none_ok: bool, hint: str) -> str:
    """What the message says is allowed: ``what``, ``or None``, then the ``hint`` in parentheses."""
    return what + (" or None" if none_ok else "") + (f" ({hint})" if hint else "")


def check_int_option(name: str, value: Any, minimum: int, none_ok: bool = False, *, hint: str = "") -> int | None:
    """``value`` as an int; ValueError unless it is an integer (not a bool) >= ``minimum``, or None if
    allowed.  ``hint``: what the option means, put in the message after what is allowed."""
    if none_ok and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        what = {1: "a positive integer", 0: "a non-negative integer"}.get(minimum, f"an integer >= {minimum}")
        raise ValueError(f"{name} must be {_allowed(what, none_ok, hint)}, got {_given(value)}")
    return int(value)


def _range_words(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is None and high is None:
        return "a finite number"
    if high is None:
        if low == 0:
            return "a positive number" if low_open else "a non-negative number"
        return f"a number {'>' if low_open else '>='} {low}"
    if low is None:
        return f"a number {'<' if high_open else '<='} {high}"
    return f"a number in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"


def check_number_option(
    name: str, value: Any, low: float | None = None, high: float | None = None, *, low_open: bool = False,
    high_open: bool = False, none_ok: bool = False, hint: str = "",
) -> float | None:
    """``value`` as a float; ValueError unless it is a finite real number (int or float, not a bool
    or a string) in the range ``low .. high`` (each end closed unless ``*_open``; None: no bound).
    ``hint``: what the option means, put in the message after what is allowed."""
    if none_ok and value is None:
        return None
    ok = _is_real(value) and np.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        what = _range_words(low, high, low_open, high_open)
        raise ValueError(f"{name} must be {_allowed(what, none_ok, hint)}, got {_given(value)}")
    return float(value)


def check_vector_option(
    name: str, value: Any, *, positive: bool = False, non_negative: bool = False, scalar_ok: bool = False,
    none_ok: bool = False, length: int | None = None,
) -> np.ndarray | None:
    """``value`` as a float64 array (1-D, or 0-D where ``scalar_ok``); ValueError unless it holds
    finite real numbers (positive, or >= 0, if asked; ``length`` of them if given)."""
    if none_ok and value is None:
        return None
    kind = "positive " if positive else "non-negative " if non_negative else "finite "
    what = f"a {kind}number or a list of {kind}numbers" if scalar_ok else f"a list of {kind}numbers"
    if length is not None:
        what += f" ({length} of them)"
    try:
        ok_type = not isinstance(value, (str, bytes)) and not isinstance(value, bool)
        arr = np.asarray(value, dtype=np.float64) if ok_type else None
    except (TypeError, ValueError):
        arr = None
    ok = arr is not None and (arr.ndim == 1 or (scalar_ok and arr.ndim == 0)) and bool(np.all(np.isfinite(arr)))
    if ok and arr.ndim == 1 and arr.size == 0:
        ok = False
    if ok and positive:
        ok = bool(np.all(arr > 0))
    if ok and non_negative:
        ok = bool(np.all(arr >= 0))
    if ok and length is not None and arr.ndim == 1:
        ok = arr.size == length
    if not ok:
        raise ValueError(f"{name} must be {what}{' or None' if none_ok else ''}, got {_given(value)}")
    return arr


def hashable_vector(arr: np.ndarray | None) -> tuple[float, ...] | float | None:
    """A checked vector option (:func:`check_vector_option`) as a frozen solver stores it: a tuple of
    floats (a float for a 0-D array, None for None), hashable, since the solver is part of the
    compiled loop's cache key."""
    if arr is None:
        return None
    return float(arr) if arr.ndim == 0 else tuple(float(v) for v in arr)


def check_choice_option(name: str, value: Any, choices: tuple) -> Any:
    """``value``; ValueError unless it is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {_given(value)}")
    return value


def check_bool_option(name: str, value: Any) -> bool:
    """``value``; TypeError unless it is True or False."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {_given(value)}")
    return bool(value)


def check_callable_option(name: str, value: Any, what: str = "a function", none_ok: bool = True) -> Callable | None:
    """``value``; TypeError unless it is callable (or None if allowed)."""
    if (value is None and none_ok) or callable(value):
        return value
    raise TypeError(f"{name} must be {what}{' or None' if none_ok else ''}, got {_given(value)}")


# ---------------------------------------------------------------------------- memory of the state
def device_memory(device: Any = None) -> tuple[int, str]:
    """``(bytes, what they are)``: the memory one device can hold, from its ``memory_stats()``'s
    ``bytes_limit`` (GPUs), else the host's physical memory (CPUs report none).  Asked once per
    device: the limit holds for the process, and ``memory_stats()`` took up to 4 ms of a call on
    an H100."""
    return _device_memory(jax.devices()[0] if device is None else device)


@functools.cache
def _device_memory(device: Any) -> tuple[int, str]:
    try:
        stats = device.memory_stats()
    except Exception:  # backends without memory statistics
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), f"one {device.platform.upper()} device holds"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this host's physical memory is"


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


def check_state_fits(name: str, estimate: tuple[int, str] | None, n_devices: int = 1) -> None:
    """ValueError, before anything is compiled, when the state of solver ``name`` cannot fit in the
    memory of ``n_devices`` devices; ``estimate``: ``(bytes, what to lower)``
    (:meth:`~multiwalk.solvers.base.Solver.state_memory`), None: nothing to check.  The state is a
    lower bound of what a run needs (the loop's temporaries come on top), so a state that fits
    may still not run."""
    if estimate is None:
        return
    need, advice = estimate
    have, what = device_memory()
    if need <= have * max(1, n_devices):
        return
    where = f"{what} {_gib(have)}" + (f" (x {n_devices} devices)" if n_devices > 1 else "")
    raise ValueError(f"{name}'s state would need {_gib(need)} but {where}: {advice}")


def check_space_options(solver: Any) -> None:
    """ODAT-SE's two spaces, as ``Exchange`` and ``PopulationAnnealing`` take them: ``mesh`` (a
    :class:`~multiwalk.spaces.Mesh`) or ``step_width`` (positive Gaussian steps, stored hashable on
    the frozen ``solver``); one of the two is needed."""
    if solver.mesh is not None and not isinstance(solver.mesh, Mesh):
        raise TypeError(f"mesh must be a multiwalk.spaces.Mesh, got {type(solver.mesh).__name__}")
    if solver.step_width is not None:
        steps = check_vector_option("step_width", solver.step_width, positive=True)
        object.__setattr__(solver, "step_width", hashable_vector(steps))
    if solver.mesh is None and solver.step_width is None:
        raise ValueError("a continuous space needs step_width= (ODAT-SE's step_list); a discrete one mesh=")


def objective_equations(problem: Any) -> int:
    """The size of the problem's objective as a program: the equations of ``chi2_free``'s jaxpr at
    one point, those of nested jaxprs (calls, loops, conditionals) included.  A solver that writes
    several copies of the objective into its loop (unrolling) weighs compile time by it.  Traced
    once per problem object and fingerprint (kept: a trace of the xringaus model takes milliseconds,
    and a solve on a GPU asks for it in every call)."""
    arrays = jax.tree_util.tree_leaves(compile_cache.problem_arrays(problem, True)[0])
    if any(isinstance(x, jax.core.Tracer) for x in arrays):  # a copy traced into a loop: compiling anyway
        return _count_equations(problem)
    # what the jaxpr follows: the functions and the fingerprint with the arrays as arguments (their
    # shapes and dtypes, args' other values, the bounds and fixed values; digested once per solve()
    # call anyway), so a problem changed in place is traced again; not its id: a copy of it finds it
    key = ("objective equations", *compile_cache.user_functions(problem), compile_cache.arguments_fingerprint(problem))
    known = compile_cache.kept(key)
    if known is None:
        known = _count_equations(problem)
        compile_cache.keep(problem, key, known)
    return int(known)


def _count_equations(problem: Any) -> int:
    """:func:`objective_equations`, traced now."""

    def count(jaxpr: Any) -> int:
        n = 0
        for eqn in jaxpr.eqns:
            n += 1
            for value in eqn.params.values():
                for sub in value if isinstance(value, (tuple, list)) else (value,):
                    inner = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr holds its Jaxpr
                    if hasattr(inner, "eqns"):
                        n += count(inner)
        return n

    point = jax.ShapeDtypeStruct((problem.n_free,), problem.dtype)
    return count(jax.make_jaxpr(problem.chi2_free)(point).jaxpr)


def expand_as_now(problem: Any) -> Callable[[jax.Array], jax.Array]:
    """``problem.expand`` (free parameters ``(..., n_free)`` -> full vectors ``(..., n)``) with
    the fixed values the problem has now, for a result field computed when first read
    (:class:`~multiwalk.result.Deferred`): the caller may change ``problem.fixed`` in place for
    a next run before reading the last run's records."""
    frozen = object.__new__(type(problem))
    frozen.__dict__.update(vars(problem))
    frozen.fixed, frozen.free_index = dict(problem.fixed), np.array(problem.free_index)
    return frozen.expand


def wrap_periodic(problem: Any, proposal: jax.Array, lo: jax.Array, hi: jax.Array) -> jax.Array:
    """ODAT-SE's ``pbc_list``: the periodic coordinates of ``proposal`` (..., n) wrapped into
    ``[lo, hi)`` (``lo + mod(x - lo, hi - lo)``); the others unchanged.  Nothing is traced for a
    problem without periodic parameters."""
    if not problem.periodic.any():
        return proposal
    wrapped = lo + jnp.mod(proposal - lo, hi - lo)
    wrapped = jnp.where(wrapped >= hi, lo, wrapped)  # rounding can land on hi
    return jnp.where(jnp.asarray(problem.periodic), wrapped, proposal)


# ---------------------------------------------------------------------------- given starts, linear constraints
START_DRAWS = 1000  # uniform draws of a start point in the box, at most, until it satisfies the constraints
_VOLUME_PROBES = 10_000  # uniform points of the box tried before compiling: does any satisfy the constraints?


def check_initial_option(solver: Any, per: int) -> None:
    """``solver.initial``: start points ``(K, d)`` (one point (d,) is one row), finite, at most
    ``per`` (the walkers of one emulated process), stored as a tuple of tuples."""
    try:
        init = np.asarray(solver.initial, dtype=np.float64) if len(solver.initial) else np.zeros((0, 0))
    except (TypeError, ValueError) as err:
        raise ValueError(f"initial must be points (K, d) of numbers, got {solver.initial!r}") from err
    if init.size and (init.ndim > 2 or not np.all(np.isfinite(init))):
        raise ValueError(f"initial must be points (K, d) of finite numbers, got {solver.initial!r}")
    if init.ndim == 1:
        init = init[None, :]
    if init.size and len(init) > per:
        raise ValueError(f"initial has {len(init)} points but there are only {per} replicas per process")
    object.__setattr__(solver, "initial", tuple(tuple(float(v) for v in row) for row in init))


def check_constraint_options(solver: Any) -> None:
    """``solver.constraint_a`` ``(m, d)`` and ``constraint_b`` ``(m,)`` (``a @ x + b > 0``): both or
    neither, finite, shapes agreeing, continuous space only; stored hashable."""
    a, b = solver.constraint_a, solver.constraint_b
    if not len(a) and not len(b):
        object.__setattr__(solver, "constraint_a", ())
        object.__setattr__(solver, "constraint_b", ())
        return
    try:
        a_arr, b_arr = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"constraint_a must be rows of numbers and constraint_b numbers, got {a!r}, {b!r}") from err
    if a_arr.ndim != 2 or b_arr.shape != (a_arr.shape[0],):
        raise ValueError(
            f"constraint_a must be a matrix (m, d) and constraint_b m numbers, got shapes {a_arr.shape} and "
            f"{b_arr.shape}: give both (constraint_a @ x + constraint_b > 0) or neither"
        )
    if not (np.all(np.isfinite(a_arr)) and np.all(np.isfinite(b_arr))):
        raise ValueError(f"constraint_a and constraint_b must be finite, got {a!r}, {b!r}")
    if solver.mesh is not None:
        raise ValueError("constraint_a/constraint_b are for a continuous space; on a mesh leave out the nodes instead")
    object.__setattr__(solver, "constraint_a", tuple(tuple(float(v) for v in row) for row in a_arr))
    object.__setattr__(solver, "constraint_b", hashable_vector(b_arr))


def satisfies_constraints(solver: Any, x: Any) -> Any:
    """True where the points ``x`` ``(..., d)`` satisfy every row of ``solver.constraint_a @ x +
    constraint_b > 0`` (all True without constraints); numpy or jax in, same out."""
    if not solver.constraint_a:
        return np.ones(np.shape(x)[:-1], bool) if isinstance(x, np.ndarray) else jnp.ones(x.shape[:-1], bool)
    xp = np if isinstance(x, np.ndarray) else jnp
    a = xp.asarray(np.asarray(solver.constraint_a), dtype=x.dtype)
    b = xp.asarray(np.asarray(solver.constraint_b), dtype=x.dtype)
    # HIGHEST: a GPU's default for float32 matrix products is TensorFloat-32, whose decisions near a
    # constraint's edge would differ from NumPy's check of the starts (check_starts)
    product = x @ a.T if xp is np else jnp.matmul(x, a.T, precision=jax.lax.Precision.HIGHEST)
    return xp.all(product + b > 0, axis=-1)


def check_starts(solver: Any, problem: Any, n_walkers: int | None = None) -> None:
    """Before compiling: ``solver.initial`` fits the problem (its size, a continuous space, inside
    the box ``lower <= x < upper``, inside the constraints) and the constraints leave some of the
    box (at least one of ``_VOLUME_PROBES`` uniform points; ODAT-SE gives up drawing a start after
    100 rounds).  With ``n_walkers`` (a solver whose walkers must all start inside), enough of it
    that fewer than 0.01 of them are expected outside after ``START_DRAWS`` draws each."""
    if solver.initial and len(solver.initial[0]) != problem.n:
        raise ValueError(f"initial points have {len(solver.initial[0])} coordinates, the problem {problem.n}")
    if solver.initial and solver.mesh is not None:
        raise ValueError("initial points are for a continuous space: on a mesh the replicas start at random nodes")
    if solver.initial:
        initial = np.asarray(solver.initial)
        inside = (initial >= problem.lower) & (initial < problem.upper)
        if not inside.all():  # a walker started outside would stay there: every move from it is rejected
            k, i = (int(v) for v in np.argwhere(~inside)[0])
            raise ValueError(
                f"initial[{k}] = {initial[k].tolist()} is outside the box: coordinate {i} = {initial[k, i]} is not in "
                f"[lower[{i}], upper[{i}]) = [{problem.lower[i]}, {problem.upper[i]}): start inside the box")
    if not solver.constraint_a:
        return
    if len(solver.constraint_a[0]) != problem.n:
        raise ValueError(f"constraint_a has {len(solver.constraint_a[0])} columns but the problem has {problem.n} parameters")
    if solver.initial:
        bad = np.flatnonzero(~satisfies_constraints(solver, np.asarray(solver.initial)))
        if bad.size:
            raise ValueError(f"initial[{bad[0]}] = {list(solver.initial[bad[0]])} violates constraint_a @ x + constraint_b > 0")
    probes = np.random.default_rng(0).uniform(problem.lower, problem.upper, (_VOLUME_PROBES, problem.n))
    share = float(np.mean(satisfies_constraints(solver, probes)))
    if share == 0.0:
        raise ValueError(
            f"constraint_a @ x + constraint_b > 0 holds at none of {_VOLUME_PROBES} uniform points of the box "
            f"[lower, upper): no start point can be drawn; check the signs of constraint_a and constraint_b")
    left_out = 0.0 if n_walkers is None else n_walkers * (1.0 - share) ** START_DRAWS
    if left_out >= 0.01:
        raise ValueError(
            f"constraint_a @ x + constraint_b > 0 holds in about {share:.3g} of the box [lower, upper): of {n_walkers} "
            f"walkers drawn up to {START_DRAWS} times each, about {left_out:.3g} would start outside; shrink the box "
            "(lower/upper, ODAT-SE's min_list/max_list) around the allowed region")


def feasible_starts(solver: Any, problem: Any, k_init: jax.Array, x: jax.Array) -> jax.Array:
    """The start points ``x`` (N, d), each redrawn uniformly in the box until it satisfies the
    constraints, at most ``START_DRAWS - 1`` times (as ODAT-SE draws them); a walker still outside
    then starts there (the solver gives it f = inf)."""

    def redraw(carry: tuple) -> tuple:
        j, x = carry
        new = uniform_in_box(jax.random.fold_in(k_init, j), x.shape, problem.lower, problem.upper, x.dtype,
                             width_in_float64=False)
        return j + 1, jnp.where(satisfies_constraints(solver, x)[:, None], x, new)

    def more(carry: tuple) -> jax.Array:
        j, x = carry
        return (j < START_DRAWS) & ~jnp.all(satisfies_constraints(solver, x))

    return jax.lax.while_loop(more, redraw, (jnp.asarray(1, jnp.int32), x))[1]


def place_initial(solver: Any, x: jax.Array, per: int) -> jax.Array:
    """``x`` (N, d) with walker ``r`` at ``solver.initial[r % per]`` where that row exists (ODAT-SE
    gives every MPI process of ``per`` walkers the same ``initial_list``)."""
    if not solver.initial:
        return x
    init = np.asarray(solver.initial)
    walker = np.arange(x.shape[0]) % per
    given = walker < len(init)
    rows = np.where(given[:, None], init[np.minimum(walker, len(init) - 1)], 0.0)
    return jnp.where(jnp.asarray(given)[:, None], jnp.asarray(rows, x.dtype), x)
