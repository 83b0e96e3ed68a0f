"""`Problem`: what to minimise or sample, for ONE point, plus its box, fixed and periodic parts.

Two ways to state a problem:

* ``Problem(objective=f, ...)`` with ``f(x, args) -> scalar`` (or ``f(x)``): the value is
  treated as chi2, so samplers target ``exp(-beta * f / 2)``.
* ``Problem(model=g, data=y, sigma=s, ...)`` with ``g(x, args) -> array like y``:
  ``chi2 = sum(|(g(x) - y) / s|^2)``, residuals marked in ``angular_data`` wrapped to [-pi, pi).

A sampler's prior is uniform in the box unless ``log_prior=p`` is given: ``p(x) -> scalar``,
the log prior density of ONE full point, applied untempered (target ``exp(-beta * chi2 / 2) *
exp(p(x))``) and never folded into chi2.

The user's functions run their matrix products at ``matmul_precision`` (default ``"highest"``:
full float32 or float64 arithmetic).  JAX's own default on NVIDIA GPUs since Ampere multiplies
float32 matrices in TensorFloat-32, ten bits of mantissa: a chi2 written as ``d @ P @ d`` is then
off by ~1e-3 of itself, and a chi2 that cancels large terms (gains marginalised) by far more.

Everything is validated here, at construction, before anything is compiled.  Solvers see the
problem through a few pure functions on the *free* parameters (the ones not in ``fixed``).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .traced_once import TracedOnce

__all__ = ["Problem"]


class DefaultNames(Sequence):
    """The names ``x0, x1, ..., x{n-1}`` of a problem given none, made on demand: a list of them
    took 2 s and ~0.6 GB at n = 1e7 (minutes and tens of GB at the 1e9 of a split L-BFGS run).
    Compares equal to the list of the same names."""

    def __init__(self, n: int) -> None:
        self.n = int(n)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [f"x{j}" for j in range(*i.indices(self.n))]
        if not -self.n <= i < self.n:
            raise IndexError(f"parameter index {i} is out of range for {self.n} parameters")
        return f"x{int(i) % self.n}"

    def index(self, name: Any, start: int = 0, stop: int | None = None) -> int:
        if isinstance(name, str) and name[:1] == "x" and name[1:].isdigit() and str(int(name[1:])) == name[1:]:
            j = int(name[1:])
            if j < self.n and start <= j < (self.n if stop is None else stop):
                return j
        raise ValueError(f"{name!r} is not in names (x0 .. x{self.n - 1})")

    def __contains__(self, name: Any) -> bool:
        try:
            self.index(name)
        except ValueError:
            return False
        return True

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, DefaultNames):
            return other.n == self.n
        return isinstance(other, Sequence) and not isinstance(other, str) and len(other) == self.n and all(
            a == b for a, b in zip(self, other)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable-sequence semantics, like the list it replaces

    def __repr__(self) -> str:
        return f"['x0', ..., 'x{self.n - 1}']" if self.n > 3 else repr(list(self))


def _float_dtype() -> np.dtype:
    """The floating dtype JAX computes in: float64 with ``jax_enable_x64``, else float32."""
    return np.dtype(jnp.result_type(float))


def _as_vector(name: str, value: Any, n: int | None, source: str = "the problem") -> np.ndarray:
    """A 1-D float vector, broadcast from a scalar when ``n`` is known."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a number or a sequence of numbers, got {value!r}") from err
    if arr.ndim == 0:
        if n is None:
            raise ValueError(
                f"{name}={value!r} is a scalar but the number of parameters is unknown: "
                "give it as a vector, or pass x0 or names so the dimension is known"
            )
        arr = np.full(n, float(arr))
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one entry per parameter), got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(
            f"{name} has {arr.shape[0]} entries but {source} has {n}: give one entry per parameter"
        )
    return arr


def _resolve_dtype(dtype: Any) -> np.dtype:
    """The problem's floating dtype: the given one, or JAX's default."""
    if dtype is None:
        return _float_dtype()
    try:
        dt = np.dtype(dtype)
    except TypeError as err:
        raise TypeError(f"dtype must be 'float32' or 'float64', got {dtype!r}") from err
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    if dt == np.float64 and _float_dtype() != np.float64:
        raise ValueError(
            "dtype='float64' needs 64-bit JAX: call jax.config.update('jax_enable_x64', True) "
            "at the start of the program (or set JAX_ENABLE_X64=1), or use dtype='float32'"
        )
    return dt


def _as_starts(value: Any, n: int, source: str) -> np.ndarray:
    """x0 as ``(n,)`` or ``(K, n)`` float64."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"x0 must be a vector (n,) or an array (K, n) of numbers, got {value!r}") from err
    if arr.ndim == 2:
        if arr.shape[1] != n:
            raise ValueError(f"x0 has shape {arr.shape}: each of its rows must have {n} entries")
        return arr
    return _as_vector("x0", arr, n, source)


def _first_output(vg: Callable) -> Callable:
    """The objective of a ``value_and_grad`` function: its first output, same signature."""

    def objective(*a):
        return vg(*a)[0]

    try:
        objective.__signature__ = inspect.signature(vg)  # so _takes_args sees vg's parameters
    except (TypeError, ValueError):
        pass
    return objective


def _where(mask: np.ndarray) -> str:
    """``[i, j]`` of the first True entry of ``mask``, for messages."""
    return "[" + ", ".join(str(int(i)) for i in np.argwhere(mask)[0]) + "]"


def _takes_args(fn: Callable, args_given: bool) -> bool:
    """Whether to call ``fn(x, args)`` rather than ``fn(x)``.

    With ``args`` given, always (``fn`` must accept it).  Without, only when ``fn`` has a
    second positional parameter with no default (``f(x, a=1.0)`` is called as ``f(x)``).
    """
    if args_given:
        return True
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    required = [
        p
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(required) >= 2


# the names of jax.default_matmul_precision's precisions (None: JAX's own default, TensorFloat-32 on
# recent GPUs); not its algorithm names, which may fail to compile on a device, or change the dtype
_MATMUL_PRECISIONS = ("highest", "float32", "high", "tensorfloat32", "default", "bfloat16")


def _checked_matmul_precision(value: Any) -> str | None:
    """``matmul_precision`` as ``jax.default_matmul_precision`` takes it, or None; else a ValueError."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"matmul_precision must be a string such as 'highest', or None, got {value!r}")
    if value not in _MATMUL_PRECISIONS:
        raise ValueError(
            f"matmul_precision={value!r} is not one of {', '.join(_MATMUL_PRECISIONS)} ('highest', the "
            "default, is full float32 / float64 arithmetic), or None for JAX's own default"
        )
    return value


def _user_function(
    objective: Callable | None, model: Callable | None, value_and_grad: Callable | None,
    data: Any, sigma: Any, angular_data: Any,
) -> Callable:
    """The user's function of one point: ``objective``, ``model``, or the first output of
    ``value_and_grad`` given alone; checks that exactly one way of stating the problem is used."""
    if value_and_grad is not None and not callable(value_and_grad):
        raise TypeError(f"value_and_grad must be a function vg(x) -> (f, grad), got {value_and_grad!r}")
    if value_and_grad is not None and model is not None:
        raise TypeError(
            "value_and_grad= goes with objective=f (or alone), not with model=: the gradient of a "
            "model's chi2 comes from jax.grad"
        )
    if objective is None and model is None and value_and_grad is not None:
        objective = _first_output(value_and_grad)
    if (objective is None) == (model is None):
        raise TypeError(
            "Problem needs exactly one of objective=f (f(x, args) -> scalar) or "
            "model=g with data=y (chi2 = sum(((g(x, args) - y) / sigma)^2)); "
            f"got objective={'set' if objective is not None else 'None'}, "
            f"model={'set' if model is not None else 'None'}"
        )
    fn = objective if objective is not None else model
    if not callable(fn):
        which = "objective" if objective is not None else "model"
        raise TypeError(f"{which} must be a function of one point, got {fn!r}")
    if objective is not None:
        for arg_name, val in (("data", data), ("sigma", sigma), ("angular_data", angular_data)):
            if val is not None:
                raise TypeError(
                    f"{arg_name} is only used with model=...; with objective=f the value "
                    f"of f is the chi2 itself. Drop {arg_name}, or pass model= instead"
                )
    if model is not None and data is None:
        raise TypeError("model=g needs data=y: the observations the model is fitted to")
    return fn


def _dimension(x0: Any, lower: Any, upper: Any, names: Sequence[str] | None) -> tuple[int, str]:
    """``(n, source)``: the number of parameters and the argument that gave it (x0, lower,
    upper, then names), for the messages of arguments whose length disagrees."""
    n = None
    n_source = "names"
    for label, source in (("x0", x0), ("lower", lower), ("upper", upper)):
        if label == "x0" and source is not None and np.ndim(source) == 2:
            if np.shape(source)[0] < 1 or np.shape(source)[1] < 1:
                raise ValueError(f"x0 of shape {np.shape(source)} holds no point: give (n,) or (K, n) with K, n >= 1")
            n = np.shape(source)[1]
            n_source = "x0"
            break
        if source is not None and np.ndim(source) > 1:
            raise ValueError(f"{label} must be 1-D (one entry per parameter), got shape {np.shape(source)}")
        if source is not None and np.ndim(source) == 1:
            n = len(source)
            n_source = label
            break
    if n is None and names is not None:
        n = len(names)
    if n is None:
        raise ValueError(
            "the number of parameters is unknown: give lower/upper as vectors, x0, or names"
        )
    if n < 1:
        raise ValueError(f"the problem must have at least one parameter, got n={n}")
    return int(n), n_source


def _checked_names(names: Sequence[str] | None, n: int) -> list[str] | DefaultNames:
    """The ``n`` distinct parameter names, or ``x0 .. x{n-1}`` when none are given."""
    if names is None:
        return DefaultNames(n)
    names = [str(s) for s in names]
    if len(names) != n:
        raise ValueError(f"names has {len(names)} entries but the problem has {n} parameters")
    if len(set(names)) != len(names):
        raise ValueError(f"names must be distinct, got {names}")
    return list(names)


def _checked_sigma(sigma: Any, shape: tuple[int, ...]) -> np.ndarray:
    """sigma (default 1) broadcast to data's ``shape``, float64, each entry positive and finite."""
    try:
        s = np.ones(1) if sigma is None else np.asarray(sigma, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"sigma must be a positive number or an array of them, got {sigma!r}") from err
    try:
        s = np.broadcast_to(s, shape)
    except ValueError as err:
        raise ValueError(
            f"sigma has shape {np.shape(sigma)} but data has shape {shape}: "
            "give one sigma per datum, or a scalar"
        ) from err
    bad_sigma = ~(np.isfinite(s) & (s > 0))
    if bad_sigma.any():
        where = _where(bad_sigma) if np.ndim(sigma) > 0 else ""
        value = s[tuple(np.argwhere(bad_sigma)[0])]
        raise ValueError(
            f"sigma{where}={value} must be positive and finite: sigma is the standard deviation of each datum"
        )
    return s


def _checked_data(
    data: Any, sigma: Any, angular_data: Any, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(data, sigma, angular_data)`` of a ``model=`` problem: data finite and numeric (kept
    complex if complex), sigma of data's shape, both in ``dtype``; angular_data a boolean mask
    of data's shape (or None), for real data only."""
    y = np.asarray(data)
    if not (np.issubdtype(y.dtype, np.floating) or np.issubdtype(y.dtype, np.integer)
            or np.issubdtype(y.dtype, np.complexfloating)):
        raise TypeError(f"data must be numeric, got dtype {y.dtype}")
    if y.size == 0:
        raise ValueError("data is empty: give at least one datum")
    if not np.all(np.isfinite(y)):
        raise ValueError(f"data{_where(~np.isfinite(y))} is not finite: remove or flag that datum")
    s = _checked_sigma(sigma, y.shape)
    complex_data = np.iscomplexobj(y)
    checked = y.astype(np.result_type(dtype, np.complex64) if complex_data else dtype)
    ang = None
    if angular_data is not None:
        ang = np.asarray(angular_data)
        if ang.dtype != bool:
            raise TypeError(f"angular_data must be a boolean mask, got dtype {ang.dtype}")
        if ang.shape != y.shape:
            raise ValueError(
                f"angular_data has shape {ang.shape} but data has shape {y.shape}: "
                "give one True/False per datum"
            )
        if complex_data and ang.any():
            raise ValueError("angular_data applies to real phases, not to complex data")
    return checked, np.array(s, dtype=dtype), ang


def _checked_host_options(backend: Any, vectorized: Any, executor: Any, workers: Any, ignore_error: Any,
                          model: Any, value_and_grad: Any) -> dict[str, Any] | None:
    """The options of a non-JAX objective (``backend="python"``), checked, or None for ``"jax"``."""
    if backend not in ("jax", "python"):
        raise ValueError(f"backend={backend!r}; allowed: 'jax' (a jax.numpy objective, compiled) or 'python' "
                         "(plain Python/NumPy, called outside the compiled solver)")
    for name, value in (("vectorized", vectorized), ("ignore_error", ignore_error)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")
    if backend == "jax":
        given = [name for name, value, default in (("vectorized", vectorized, False), ("executor", executor, None),
                                                  ("workers", workers, None), ("ignore_error", ignore_error, False))
                 if value is not default]
        if given:
            raise ValueError(f"{given[0]}= goes with backend='python' (a non-JAX objective); a jax objective is compiled")
        return None
    if model is not None or value_and_grad is not None:
        raise TypeError("backend='python' takes objective=f only (not model= or value_and_grad=): return chi2 from f")
    from .executors import check_executor

    check_executor(executor, workers)
    return {"vectorized": vectorized, "executor": executor, "workers": workers, "ignore_error": ignore_error}


class Problem:
    """A problem for ONE point ``x`` of ``n`` parameters; solvers batch it over walkers.

    Parameters
    ----------
    objective : ``f(x, args) -> scalar`` (or ``f(x)``), in ``jax.numpy``; treated as chi2.
    model, data, sigma : ``g(x, args) -> array`` of ``data``'s shape; chi2 is
        ``sum(|(g - data) / sigma|^2)``.  ``sigma`` (default 1) is a scalar or an array
        broadcastable to ``data``; complex data and models are allowed.
    lower, upper : the box (the uniform prior of the samplers), shape ``(n,)`` or scalars.
    x0 : a starting point, shape ``(n,)``, or ``K`` of them, shape ``(K, n)`` (local solvers
        such as L-BFGS run one independent problem per row).  A floating jax array stays on
        its device (checked there; a solve never copies it to the host); anything else is
        kept as a float64 NumPy array.
    fixed : ``{index or name: value}`` parameters held constant and not sampled.
    periodic : indices or names (or a boolean mask) of parameters wrapped into
        ``[lower, upper)`` instead of rejected when a step leaves the box (angles).
    angular_data : boolean mask of ``data``'s shape; those residuals are wrapped to
        [-pi, pi) before squaring (phases, closure phases).
    args : any pytree passed to the function as its second argument.
    names : one name per parameter, for results, plots and ``fixed`` / ``periodic`` keys.
    value_and_grad : ``vg(x, args) -> (f, g)`` (or ``vg(x)``), the objective and its gradient
        of shape ``(n,)`` written by hand (the seed's ``eval_fg``); gradient solvers then use
        it instead of ``jax.grad``.  May be given alone (the objective is its first output)
        or together with ``objective``.
    dtype : ``"float32"`` or ``"float64"``; default: float64 when ``jax_enable_x64`` is on,
        else float32.  float64 needs ``jax.config.update("jax_enable_x64", True)``.
    log_prior : ``p(x) -> scalar``, the log prior density of ONE full point ``x`` (n,) in
        ``jax.numpy``, for the samplers (``ReplicaExchange``); default None, the uniform prior on
        the box.  It is applied untempered (at inverse temperature ``beta`` the target is
        ``L(x)**beta * exp(p(x))`` inside the box), need not be normalised (the prior is ``exp(p)``
        restricted to the box and normalised over it), and ``-inf`` marks where it is zero.
        Solvers that do not sample refuse a problem with a prior rather than ignore it.
    backend : ``"jax"`` (default: ``objective`` is traced and compiled into the solver) or
        ``"python"``: ``objective`` is plain Python/NumPy (a simulator, an external program),
        called outside the compiled solver on a batch of points at a time
        (:mod:`multiwalk.host_objective`); gradient solvers (L-BFGS) then do not apply.
    vectorized : with ``backend="python"``: ``objective(X)`` takes ``X`` of shape ``(m, n)`` and
        returns ``(m,)`` (default False: ``objective(x) -> float``, one point a call).
    executor : with ``backend="python"``, where the points are evaluated
        (:mod:`multiwalk.executors`): ``"processes"`` (default; ``"mpi"`` under ``mpiexec``),
        ``"mpi"``, ``"dask"``, ``"serial"``, a ``concurrent.futures.Executor`` or a Dask ``Client``.
    workers : with ``backend="python"``: the processes of ``"processes"`` / ``"dask"`` (default:
        the CPUs).  The same seed gives the same result for every executor and worker count.
    ignore_error : with ``backend="python"``: a point whose evaluation raises is a rejected move
        (its value NaN), counted in ``stats["host_objective"]["errors"]``, instead of stopping
        the run with :class:`~multiwalk.host_objective.ObjectiveError` (ODAT-SE's ``ignore_error``).
    matmul_precision : the precision of the matrix products (``@``, ``jnp.dot``, ``jnp.einsum``)
        in ``objective``, ``model``, ``value_and_grad`` and ``log_prior``, as
        ``jax.default_matmul_precision`` takes it.  Default ``"highest"``: the problem's dtype in
        full, on every device.  ``None`` keeps JAX's own default, which on NVIDIA GPUs since
        Ampere multiplies float32 matrices in TensorFloat-32 (~1e-3 relative error, faster);
        ``"tensorfloat32"`` asks for that explicitly.  No effect on float64 products or on a CPU.
        A precision set for JAX as a whole (``JAX_DEFAULT_MATMUL_PRECISION``) reaches these
        functions only with ``None``.
    """

    def __init__(
        self,
        objective: Callable | None = None,
        *,
        model: Callable | None = None,
        data: Any = None,
        sigma: Any = None,
        lower: Any = None,
        upper: Any = None,
        x0: Any = None,
        fixed: Mapping[int | str, float] | None = None,
        periodic: Sequence[int | str] | np.ndarray | None = None,
        angular_data: Any = None,
        args: Any = None,
        names: Sequence[str] | None = None,
        value_and_grad: Callable | None = None,
        dtype: Any = None,
        log_prior: Callable | None = None,
        backend: str = "jax",
        vectorized: bool = False,
        executor: Any = None,
        workers: int | None = None,
        ignore_error: bool = False,
        matmul_precision: str | None = "highest",
    ) -> None:
        # every argument is checked here, in this order, before the one trace of the function
        fn = _user_function(objective, model, value_and_grad, data, sigma, angular_data)
        host_options = _checked_host_options(backend, vectorized, executor, workers, ignore_error, model, value_and_grad)
        self._user_vg = value_and_grad
        self.dtype = _resolve_dtype(dtype)
        self.args = args
        self._user_fn = fn
        self._takes_args = _takes_args(fn, args is not None)
        self.is_model = model is not None
        self.n, self._n_source = _dimension(x0, lower, upper, names)
        self.names = _checked_names(names, self.n)
        self.lower, self.upper = self._checked_bounds(lower, upper)
        self.x0 = self._checked_x0(x0)
        self.fixed, self.free_index = self._checked_fixed(fixed)
        self.periodic = self._checked_periodic(periodic)
        self.data, self.sigma, self.angular_data = (
            _checked_data(data, sigma, angular_data, self.dtype) if self.is_model else (None, None, None)
        )
        self.matmul_precision = _checked_matmul_precision(matmul_precision)
        self.host_objective = None if host_options is None else self._host_objective(host_options)
        # traced once for every compiled program that calls it (a host objective's is a callback)
        self._traced = None if self.host_objective is not None else TracedOnce(self._user_fn, self._takes_args)
        self._check_function()
        self._log_prior = self._checked_log_prior(log_prior)

    # ------------------------------------------------------------------ validators (before any trace)
    def _checked_bounds(self, lower: Any, upper: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``(lower, upper)`` as ``(n,)`` float64 vectors (or both None): lower < upper, ``-inf`` in
        lower / ``+inf`` in upper where a side has no bound (solvers that draw in the box refuse those)."""
        lower = None if lower is None else _as_vector("lower", lower, self.n, self._n_source)
        upper = None if upper is None else _as_vector("upper", upper, self.n, self._n_source)
        if (lower is None) != (upper is None):
            given = "lower" if lower is not None else "upper"
            missing = "upper" if given == "lower" else "lower"
            raise ValueError(f"{given} is given but {missing} is not: give both bounds or neither")
        if lower is not None:
            bad = ~((lower < upper) & (lower < np.inf) & (upper > -np.inf))  # NaN fails every comparison
            for i in np.flatnonzero(bad)[:1]:  # report the first bad pair (vectorised: n may be 1e7)
                lo, hi = lower[i], upper[i]
                if np.isnan(lo) or np.isnan(hi) or lo == np.inf or hi == -np.inf:
                    raise ValueError(
                        f"bounds of parameter {i} ({self.names[i]}) must be numbers, got lower[{i}]={lo}, "
                        f"upper[{i}]={hi}: -inf in lower or +inf in upper marks a side without a bound"
                    )
                if lo >= hi:
                    raise ValueError(
                        f"lower[{i}]={lo} is not below upper[{i}]={hi} ({self.names[i]}): "
                        "each lower bound must be strictly below its upper bound"
                    )
        return lower, upper

    def _checked_x0(self, x0: Any) -> np.ndarray | None:
        """x0 as ``(n,)`` or ``(K, n)`` float64 (or None): finite, inside the box if there is one.
        Needs ``self.lower`` / ``self.upper``."""
        if x0 is None:
            return None
        if isinstance(x0, jax.Array) and not isinstance(x0, jax.core.Tracer) and x0.ndim in (1, 2) \
                and x0.shape[-1] == self.n and jnp.issubdtype(x0.dtype, jnp.floating) \
                and self._device_x0_is_valid(x0):
            return x0  # on the device it stays: a solve sends it to its start, never to the host
        x0 = _as_starts(x0, self.n, self._n_source)
        if not np.all(np.isfinite(x0)):
            bad = np.argwhere(~np.isfinite(x0))[0]
            raise ValueError(f"x0{list(bad) if x0.ndim == 2 else [int(bad[0])]}={x0[tuple(bad)]} is not finite")
        if self.lower is not None:
            outside = np.argwhere((x0 < self.lower) | (x0 > self.upper))
            if outside.size:
                where = tuple(int(i) for i in outside[0])
                i = where[-1]
                raise ValueError(
                    f"x0{list(where)}={x0[where]} is outside its bounds [{self.lower[i]}, {self.upper[i]}]: "
                    "start inside the box"
                )
        return x0

    def _device_x0_is_valid(self, x0: jax.Array) -> bool:
        """Whether a device-array ``x0`` is finite and inside the box, tested where it lies (one
        boolean read back); when not, the host path below finds and names the first bad entry."""
        ok = jnp.all(jnp.isfinite(x0))
        if self.lower is not None:
            ok = ok & jnp.all((x0 >= self.lower) & (x0 <= self.upper))
        return bool(ok)

    def _checked_fixed(self, fixed: Mapping[int | str, float] | None) -> tuple[dict[int, float], np.ndarray]:
        """``({index: value}, free_index)``: each fixed value finite and inside the box; at least
        one parameter left free.  Needs ``self.names`` and the bounds."""
        values: dict[int, float] = {}
        for key, value in (fixed or {}).items():
            i = self._index("fixed", key)
            try:
                v = float(value)
            except (TypeError, ValueError) as err:
                raise TypeError(f"fixed[{key!r}] must be a number, got {value!r}") from err
            if not np.isfinite(v):
                raise ValueError(f"fixed[{key!r}]={v} is not finite")
            if self.lower is not None and not (self.lower[i] <= v <= self.upper[i]):
                raise ValueError(
                    f"fixed[{key!r}]={v} is outside its bounds [{self.lower[i]}, {self.upper[i]}]: "
                    "move the value inside the box or widen the bounds"
                )
            values[i] = v
        # vectorised: n may be 1e9 (a Python loop over it took ~100 s)
        free = np.ones(self.n, dtype=bool)
        free[list(values)] = False
        free_index = np.flatnonzero(free).astype(np.int64, copy=False)
        if free_index.size == 0:
            raise ValueError("every parameter is fixed: leave at least one free to optimise")
        return values, free_index

    def _checked_periodic(self, periodic: Sequence[int | str] | np.ndarray | None) -> np.ndarray:
        """The ``(n,)`` boolean mask of periodic parameters from indices, names or a mask; they
        need a box (the period is upper - lower)."""
        mask = np.zeros(self.n, dtype=bool)
        if periodic is not None:
            if isinstance(periodic, (str, int, np.integer)):
                periodic = [periodic]
            try:
                per = np.asarray(periodic)
            except ValueError as err:
                raise TypeError(f"periodic must be indices, names or a boolean mask, got {periodic!r}") from err
            if per.ndim != 1:
                raise TypeError(f"periodic must be indices, names or a boolean mask, got {periodic!r}")
            if per.dtype == bool:
                if per.shape != (self.n,):
                    raise ValueError(f"periodic as a mask must have shape ({self.n},), got {per.shape}")
                mask = per.copy()
            else:
                for key in list(periodic):
                    mask[self._index("periodic", key)] = True
        if mask.any() and self.lower is None:
            which = [self.names[i] for i in np.flatnonzero(mask)]
            raise ValueError(f"periodic parameters {which} need lower and upper: the period is upper - lower")
        open_sided = np.flatnonzero(mask & ~(np.isfinite(self.lower) & np.isfinite(self.upper))) if mask.any() else []
        if len(open_sided):
            i = int(open_sided[0])
            raise ValueError(f"periodic parameter {i} ({self.names[i]}) has lower[{i}]={self.lower[i]}, "
                             f"upper[{i}]={self.upper[i]}: its period is upper - lower, so both must be finite")
        mask.setflags(write=False)  # the problem's own copy, read-only: digested once, not in every solve()
        return mask

    def _host_objective(self, options: dict[str, Any]) -> Any:
        """``backend="python"``: the :class:`~multiwalk.host_objective.HostObjective` of the user's
        function, called once here at the probe point (a function that fails or returns no number
        is found before anything compiles); the solvers then trace its ``pure_callback``."""
        from .executors import Engine
        from .host_objective import HostObjective, evaluate_rows

        engine = Engine(options["executor"], options["workers"])
        host = HostObjective(
            self._user_fn, n=self.n, dtype=self.dtype, args=self.args, takes_args=self._takes_args,
            vectorized=options["vectorized"], ignore_error=options["ignore_error"], engine=engine,
            lower=self.lower, upper=self.upper,
        )
        probe = self._probe_point().astype(np.float64)
        _, errors = evaluate_rows(host.spec, probe[None, :], 0)
        if errors and not options["ignore_error"]:
            raise ValueError(
                f"objective (backend='python') at x = {probe.tolist()} (the box's centre, or x0) failed: "
                f"{errors[0][1]}. It must return one number for ONE point x of shape ({self.n},)"
                + (" (vectorized: X of shape (m, n) -> (m,))" if options["vectorized"] else "")
            )
        self._user_fn, self._takes_args = host.traceable(), False  # args travel with the function
        return host

    # ------------------------------------------------------------------ helpers
    def _index(self, what: str, key: int | str) -> int:
        if isinstance(key, str):
            if key not in self.names:
                raise ValueError(f"{what} names parameter {key!r}, which is not in names={self.names}")
            return self.names.index(key)
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if not -self.n <= key < self.n:
                raise ValueError(f"{what} index {key} is out of range for {self.n} parameters")
            return int(key) % self.n
        raise TypeError(f"{what} keys must be parameter indices or names, got {key!r}")

    def _user_precision(self) -> contextlib.AbstractContextManager:
        """The context the user's functions are traced in: their matrix products at ``matmul_precision``."""
        precision = getattr(self, "matmul_precision", "highest")
        return contextlib.nullcontext() if precision is None else jax.default_matmul_precision(precision)

    def _call(self, x: jax.Array) -> jax.Array:
        with self._user_precision():
            traced = getattr(self, "_traced", None)
            if traced is not None:
                return traced(x, self.args)
            return self._user_fn(x, self.args) if self._takes_args else self._user_fn(x)

    def _call_vg(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        with self._user_precision():
            return self._user_vg(x, self.args) if self._takes_args else self._user_vg(x)

    def _probe_point(self) -> np.ndarray:
        if isinstance(self.x0, np.ndarray):  # (a device-array x0 is not read: only the fixed entries count)
            x = (self.x0[0] if self.x0.ndim == 2 else self.x0).copy()
        elif self.lower is not None:  # the box's middle; 0 clipped into it where a side is unbounded
            x = np.where(np.isfinite(self.lower + self.upper), 0.5 * (self.lower + self.upper),
                         np.clip(0.0, self.lower, self.upper))
        else:
            x = np.zeros(self.n)
        for i, v in self.fixed.items():
            x[i] = v
        return x.astype(self.dtype)

    def _check_function(self) -> None:
        """Trace the function once (no compilation) to check what it returns."""
        which = "model" if self.is_model else "objective"
        probe = jax.ShapeDtypeStruct((self.n,), self.dtype)
        try:
            if self._traced is not None:  # the trace every compiled program then replays
                with self._user_precision():  # as _call traces it
                    out = self._traced.eval_shape(probe, self.args)
            else:
                out = jax.eval_shape(self._call, probe)
        except Exception as err:  # the user's function failed to trace: say which and why
            raise TypeError(
                f"calling {which}(x{', args' if self._takes_args else ''}) with x of shape "
                f"({self.n},) failed: {type(err).__name__}: {err}. The function must take ONE "
                "point and be written in jax.numpy (no numpy calls or Python branches on x)"
            ) from err
        if not hasattr(out, "shape"):
            raise TypeError(f"{which} must return an array, got {type(out).__name__}")
        if not (jnp.issubdtype(out.dtype, jnp.floating) or jnp.issubdtype(out.dtype, jnp.complexfloating)):
            raise TypeError(f"{which} must return floating-point values, got dtype {out.dtype}")
        if self.is_model:
            if out.shape != self.data.shape:
                raise ValueError(
                    f"model returns shape {out.shape} but data has shape {self.data.shape}: "
                    "the model must return one value per datum for ONE point"
                )
            if jnp.issubdtype(out.dtype, jnp.complexfloating) and self.angular_data is not None \
                    and self.angular_data.any():
                raise ValueError("angular_data applies to real phases, but the model returns complex values")
        else:
            if out.shape != ():
                raise ValueError(
                    f"objective returns shape {out.shape}, not a scalar: it must return one "
                    "number for ONE point x of shape (n,) (use .sum() or model=/data= for vectors)"
                )
            if jnp.issubdtype(out.dtype, jnp.complexfloating):
                raise TypeError("objective must return a real scalar, got a complex one")
        if self._user_vg is not None:
            self._check_value_and_grad(probe)

    def _checked_log_prior(self, log_prior: Callable | None) -> Callable | None:
        """``log_prior`` after one abstract trace: a function of ONE full point returning a real
        scalar; it needs a box (the prior is restricted to it)."""
        if log_prior is None:
            return None
        if not callable(log_prior):
            raise TypeError(f"log_prior must be a function p(x) -> scalar (the log prior density), got {log_prior!r}")
        if self.lower is None:
            raise ValueError("log_prior needs lower= and upper=: the samplers restrict the prior to the box")
        try:
            with self._user_precision():
                out = jax.eval_shape(log_prior, jax.ShapeDtypeStruct((self.n,), self.dtype))
        except Exception as err:  # the user's function failed to trace: say which and why
            raise TypeError(
                f"calling log_prior(x) with x of shape ({self.n},) failed: {type(err).__name__}: {err}. "
                "It must take ONE full point and be written in jax.numpy"
            ) from err
        if getattr(out, "shape", None) != () or not jnp.issubdtype(out.dtype, jnp.floating):
            raise ValueError(
                f"log_prior must return a real floating-point scalar for ONE point x of shape ({self.n},), "
                f"got {getattr(out, 'shape', type(out).__name__)} of dtype {getattr(out, 'dtype', None)}"
            )
        return log_prior

    def _check_value_and_grad(self, probe: jax.ShapeDtypeStruct) -> None:
        try:
            out = jax.eval_shape(self._call_vg, probe)
        except Exception as err:
            raise TypeError(
                f"calling value_and_grad(x{', args' if self._takes_args else ''}) with x of shape ({self.n},) "
                f"failed: {type(err).__name__}: {err}"
            ) from err
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise TypeError(f"value_and_grad must return a pair (f, grad), got {out!r}")
        f, g = out
        if getattr(f, "shape", None) != ():
            raise ValueError(f"value_and_grad must return a scalar f first, got shape {getattr(f, 'shape', None)}")
        if getattr(g, "shape", None) != (self.n,):
            raise ValueError(
                f"value_and_grad must return the gradient of shape ({self.n},) second, got shape {getattr(g, 'shape', None)}"
            )

    # ------------------------------------------------------------------ pure functions for solvers
    @property
    def n_free(self) -> int:
        """Number of free (not fixed) parameters."""
        return int(self.free_index.size)

    def expand(self, theta: jax.Array) -> jax.Array:
        """Free parameters ``(..., n_free)`` -> full vectors ``(..., n)`` with fixed values filled in."""
        theta = jnp.asarray(theta)
        if not self.fixed:
            return theta
        full = jnp.broadcast_to(jnp.asarray(self._probe_point(), theta.dtype), theta.shape[:-1] + (self.n,))
        return full.at[..., self.free_index].set(theta)

    def chi2_full(self, x: jax.Array) -> jax.Array:
        """chi2 of ONE full point ``x`` of shape ``(n,)``; a real scalar."""
        if not self.is_model:
            return jnp.asarray(self._call(x)).astype(self.dtype)
        r = self.residuals_full(x)
        return jnp.sum(jnp.real(r * jnp.conj(r))).astype(self.dtype)

    def residuals_full(self, x: jax.Array) -> jax.Array:
        """``(model(x) - data) / sigma`` of ONE full point ``x`` (n,), data's shape (complex for
        complex data), the ``angular_data`` entries wrapped to [-pi, pi); chi2 is the sum of
        their squared moduli.  Only for ``model=`` problems."""
        resid = self._call(x) - self.data
        if self.angular_data is not None:
            wrapped = jnp.mod(resid + jnp.pi, 2 * jnp.pi) - jnp.pi
            resid = jnp.where(self.angular_data, wrapped, resid)
        return resid / self.sigma

    def chi2_free(self, theta: jax.Array) -> jax.Array:
        """chi2 of ONE point given by its free parameters ``(n_free,)``."""
        return self.chi2_full(self.expand(theta))

    @property
    def log_prior(self) -> Callable | None:
        """The user's log prior density of one full point, or None (uniform on the box)."""
        return self._log_prior

    def log_prior_free(self, theta: jax.Array) -> jax.Array:
        """The log prior density of ONE point given by its free parameters ``(n_free,)``; 0 for
        the default uniform prior (its constant, -log of the box's volume, cancels in every ratio)."""
        if self._log_prior is None:
            return jnp.zeros((), self.dtype)
        with self._user_precision():
            return jnp.asarray(self._log_prior(self.expand(theta))).astype(self.dtype)

    def log_likelihood_constant(self) -> float:
        """``log L - (-chi2 / 2)``: 0 for ``objective=f`` (the likelihood is ``exp(-f / 2)``);
        for ``model=`` / ``data`` / ``sigma`` the normalisation of the Gaussian likelihood (eq. 7 of
        the cuda_mcmc document), ``-1/2 sum log(2 pi sigma^2)`` over real data and
        ``-sum log(2 pi sigma^2)`` over complex data (a real and an imaginary part, each of sigma)."""
        if not self.is_model:
            return 0.0
        per_datum = np.log(2 * np.pi * np.asarray(self.sigma, np.float64) ** 2)
        return float(-(1.0 if np.iscomplexobj(self.data) else 0.5) * np.sum(per_datum))

    @property
    def has_value_and_grad(self) -> bool:
        """Whether the user gave ``value_and_grad=`` (else gradients come from ``jax.grad``)."""
        return self._user_vg is not None

    def value_and_grad_free(self, theta: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(chi2, gradient)`` of ONE point given by its free parameters ``(n_free,)``.

        Uses the user's ``value_and_grad`` when given (its gradient restricted to the free
        parameters), else ``jax.value_and_grad``; both in the problem's dtype.
        """
        if self.host_objective is not None:
            raise TypeError(
                "this solver needs gradients, which an objective with backend='python' does not have: use "
                "PatternSearch, ReplicaExchange or Exchange, or write the objective in jax.numpy"
            )
        if self._user_vg is None:  # in the context: a custom_vjp's backward rule is traced here, after _call
            with self._user_precision():
                f, g = jax.value_and_grad(self.chi2_free)(theta)
            return f, g
        f, g = self._call_vg(self.expand(theta))
        g = jnp.asarray(g).astype(self.dtype)
        if self.fixed:
            g = g[self.free_index]
        return jnp.asarray(f).astype(self.dtype), g

    def free_bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(lower, upper, periodic)`` of the free parameters; raises if there is no box."""
        if self.lower is None:
            raise ValueError("this solver needs a box: pass lower= and upper= to Problem")
        idx = self.free_index
        return self.lower[idx], self.upper[idx], self.periodic[idx]

    # ------------------------------------------------------------------ batch evaluation
    def _points(self, X: Any) -> jax.Array:
        X = jnp.asarray(X, dtype=self.dtype)
        if X.ndim == 1:
            X = X[None, :]
        if X.ndim != 2 or X.shape[1] != self.n:
            raise ValueError(f"X must have shape (m, {self.n}) (one full parameter set a row), got {X.shape}")
        return X

    def evaluate(self, X: Any) -> np.ndarray:
        """Model outputs (or objective values) for many parameter sets ``X`` of shape ``(m, n)``.

        Returns ``(m, *data.shape)`` for a model, ``(m,)`` for an objective (the seed's calcmodel).
        """
        return np.asarray(jax.jit(jax.vmap(self._call))(self._points(X)))

    def chi2(self, X: Any) -> np.ndarray:
        """chi2 for many full parameter sets ``X`` of shape ``(m, n)`` -> ``(m,)`` (calcmodchi2)."""
        return np.asarray(jax.jit(jax.vmap(self.chi2_full))(self._points(X)))

    def __repr__(self) -> str:
        kind = "model" if self.is_model else "objective"
        box = "" if self.lower is None else ", with box"
        return f"Problem({kind}, n={self.n}, free={self.n_free}{box})"
