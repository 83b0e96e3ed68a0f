"""Objectives that are not JAX: a Python/NumPy ``f(x) -> float`` (or a vectorised ``f(X) -> (m,)``),
evaluated outside the compiled solver, its batch spread over an executor (:mod:`multiwalk.executors`).

``Problem(objective=f, backend="python", ...)`` makes a :class:`HostObjective`.  The solvers stay
compiled: the problem's one-point function is :meth:`HostObjective.traceable`, a
``jax.pure_callback`` with ``vmap_method="expand_dims"``, so a solver that ``vmap``s it over its
walkers makes ONE callback per evaluation with the whole batch ``(..., n)``.  On the host the batch
is cut into one contiguous piece per worker; each worker evaluates its rows in order; the values
come back in the batch's order.  The numbers are the same for every executor and worker count.
Solvers whose step evaluates once (Exchange, PopulationAnnealing, Mapper) trace it instead
through a :class:`Tap` and run as a loop on the host between two compiled programs a step
(:mod:`multiwalk.host_loop`), which hold no callback; the same numbers.

Points outside the box (when the problem has one) are not sent out: their value is +inf, what
every solver does with a point outside its prior's support.

Failures: an exception in ``f`` stops the run with :class:`ObjectiveError`, one paragraph naming
the replica (the row of the batch), its ``x`` and the exception; with ``ignore_error=True``
(ODAT-SE's ``[runner] ignore_error``) the point's value is NaN instead, which every solver treats
as a rejected move, and it is counted (``stats["host_objective"]["errors"]``).  A worker process
that dies (killed, out of memory, ``os._exit``) breaks the pool: it is started again and the batch
evaluated again, up to ``MAX_RESTARTS`` times in a row, then :class:`WorkerCrashError`.  Either
error leaves the run's last checkpoint as it was (the driver writes none of a failed chunk).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np

from _multiwalk_worker import describe as _describe
from _multiwalk_worker import evaluate_piece, evaluate_rows

from .executors import Engine

__all__ = ["HostObjective", "Tap", "ObjectiveError", "WorkerCrashError", "MAX_RESTARTS", "plain_error", "add_stats",
           "compiler_options", "CHEAP_CPU_OPTIONS"]

MAX_RESTARTS = 2  # fresh process pools for one batch before a crash is reported

# XLA options for the compiled code around a non-JAX objective on a CPU.  Its arithmetic (proposals,
# Metropolis tests, exchanges of a few hundred replicas) takes microseconds next to the objective's
# milliseconds a point, and a loop holding the callback is never found in JAX's persistent cache
# (the callback is part of it, with an identity of this process), so each process compiles it (the
# host loop's programs are kept there, but a new input compiles them too): compiled fast rather
# than well.  Exchange's loop on a 2-core CPU: 4.9 s -> 0.9 s, its output files the same bit
# for bit.  Not level 0 (0.6 s): there the last bits of the points change (a fused multiply-add
# at one level, two roundings at the other, presumably): a run's numbers would differ from those
# of XLA's default options.
CHEAP_CPU_OPTIONS = {"xla_backend_optimization_level": 1, "xla_cpu_use_fusion_emitters": False}


class ObjectiveError(RuntimeError):
    """The user's (non-JAX) objective raised: the message names the replica, x and the exception."""


class WorkerCrashError(RuntimeError):
    """A worker process died while evaluating a batch, and restarting the pool did not help."""


class _QuietCallbackErrors(logging.Filter):
    """JAX logs a traceback for every exception raised in a callback; ours carry their own
    one-paragraph message, which the driver raises in place of the runtime error."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, (ObjectiveError, WorkerCrashError))


logging.getLogger("jax._src.callback").addFilter(_QuietCallbackErrors())


# ---------------------------------------------------------------------------- in the driver
class HostObjective:
    """A non-JAX objective of one point ``x`` (n,) -> float (or, ``vectorized``, ``X`` (m, n) -> (m,)),
    evaluated in batches on ``engine``'s workers.  ``counts``: batches, points evaluated, errors
    (points that raised, turned into NaN by ``ignore_error``), seconds spent waiting for values."""

    def __init__(self, function: Callable, *, n: int, dtype: Any, args: Any, takes_args: bool,
                 vectorized: bool, ignore_error: bool, engine: Engine,
                 lower: np.ndarray | None, upper: np.ndarray | None) -> None:
        self.function = function
        self.n, self.dtype = n, np.dtype(dtype)
        self.spec = (function, args, takes_args, vectorized, ignore_error)
        self.vectorized, self.ignore_error, self.engine = vectorized, ignore_error, engine
        # the box in the problem's dtype, as the solvers test it (a float32 point at float32(upper)
        # is inside, though above the float64 upper)
        self.lower, self.upper = (None, None) if lower is None else (
            np.asarray(lower, self.dtype).astype(np.float64), np.asarray(upper, self.dtype).astype(np.float64))
        self.counts = {"batches": 0, "points": 0, "errors": 0, "seconds": 0.0}
        self.first_error: str | None = None  # the first point that raised (with ignore_error)
        self.failure: Exception | None = None  # what stopped the last run, raised by the driver
        self._payload: bytes | None = None
        # while a program of a host loop is traced (multiwalk.host_loop): what OnHost does in place
        # of its callback.  Per thread: tracing happens in the thread that calls solve(), and another
        # thread's solve() of the same problem may be tracing its own programs (with the callback,
        # or with a tap of its own) at the same time
        self._traced_by = threading.local()

    @property
    def tap(self) -> Tap | None:
        """The :class:`Tap` this thread's tracing goes through, or None (the callback)."""
        return getattr(self._traced_by, "tap", None)

    @contextlib.contextmanager
    def tapping(self, tap: Tap) -> Iterator[Tap]:
        """While the block traces the solver's code (in this thread), :class:`OnHost` goes through ``tap``."""
        outer, self._traced_by.tap = self.tap, tap
        try:
            yield tap
        finally:
            self._traced_by.tap = outer

    @property
    def name(self) -> str:
        return getattr(self.function, "__qualname__", type(self.function).__name__)

    def payload(self) -> bytes:
        """The function and how to call it, pickled once (cloudpickle: a function of a script, a
        lambda or one read from a file by ``multiwalk run`` travels by value)."""
        if self._payload is None:
            import cloudpickle

            self._payload = cloudpickle.dumps(self.spec)
        return self._payload

    def start(self) -> None:
        """Start the workers in the background (:meth:`multiwalk.executors.Engine.start`)."""
        self.engine.start()

    def traceable(self) -> OnHost:
        """The one-point function the solvers trace (:class:`OnHost`)."""
        return OnHost(self.function, self)

    def evaluate(self, X: Any) -> np.ndarray:
        """The values at the points ``X`` (..., n) -> (...), in the problem's dtype.  Raises
        :class:`ObjectiveError` or :class:`WorkerCrashError` (kept in ``failure`` for the driver)."""
        t0 = time.perf_counter()
        X = np.asarray(X, dtype=np.float64)
        rows = X.reshape(-1, self.n)
        values = np.full(len(rows), math.inf)
        inside = np.ones(len(rows), dtype=bool)
        if self.lower is not None:
            inside = np.all((rows >= self.lower) & (rows <= self.upper), axis=1)
        todo = np.flatnonzero(inside)
        try:
            values[todo], errors = self._evaluate(rows[todo], todo)
        except (ObjectiveError, WorkerCrashError) as err:
            self.failure = err
            raise
        self.counts["batches"] += 1
        self.counts["points"] += len(todo)
        self.counts["errors"] += len(errors)
        self.counts["seconds"] += time.perf_counter() - t0
        if errors and self.first_error is None:
            self.first_error = self._paragraph(errors[0], rows, len(rows))
        if errors and not self.ignore_error:
            self.failure = ObjectiveError(self._paragraph(errors[0], rows, len(rows)) + (
                " To treat such points as rejected moves, set ignore_error=True ([runner] ignore_error = true)."))
            raise self.failure
        return values.reshape(X.shape[:-1]).astype(self.dtype)

    def evaluate_bits(self, words: Any) -> np.ndarray:
        """:meth:`evaluate` of points given as uint32 words (``(..., n, 2)`` for float64, ``(..., n)`` for
        float32), its values returned so (``(..., 2)`` or ``(...)``), for :class:`OnHost`."""
        words = np.ascontiguousarray(words, dtype=np.uint32)
        pair = self.dtype.itemsize == 8
        X = words.view(self.dtype).reshape(words.shape[:-1] if pair else words.shape)
        values = np.ascontiguousarray(self.evaluate(X).reshape(-1)).view(np.uint32)
        return values.reshape(X.shape[:-1] + ((2,) if pair else ()))

    def _paragraph(self, error: tuple[int, str], rows: np.ndarray, m: int) -> str:
        row, what = error
        if self.vectorized:
            return (f"the vectorized objective {self.name}(X) raised {what} on rows {row} .. of the batch of {m} "
                    f"(X[0] = {rows[row].tolist()}).")
        return f"the objective {self.name}(x) raised {what} at replica {row} of {m}, x = {rows[row].tolist()}."

    def _evaluate(self, X: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, list[tuple[int, str]]]:
        """``(values, errors)`` of the rows ``X`` (rows ``index`` of the batch): here when serial,
        else one contiguous piece per worker; the pool is started again when a worker died."""
        if len(X) == 0:
            return np.empty(0), []
        if self.engine.serial:
            values, errors = evaluate_rows(self.spec, X, 0)
            return values, [(int(index[i]), e) for i, e in errors]
        for attempt in range(MAX_RESTARTS + 1):
            try:
                values, errors = self._in_pieces(X)
                return values, [(int(index[i]), e) for i, e in errors]
            except BrokenProcessPool as err:
                if attempt == MAX_RESTARTS or not self.engine.restart():
                    self.engine.shutdown()  # a later run starts a fresh pool
                    raise WorkerCrashError(
                        f"a worker process of the {self.engine.name} executor died while evaluating {self.name} "
                        f"at replicas {int(index[0])} .. {int(index[-1])} ({_describe(err)}); the pool was started "
                        f"again {self.engine.restarts} times. The run stops; its last checkpoint is kept "
                        "(continue with --resume, or solve(resume=...))."
                    ) from None
        raise AssertionError("unreachable")

    def _in_pieces(self, X: np.ndarray) -> tuple[np.ndarray, list[tuple[int, str]]]:
        """One contiguous piece of rows per worker (sizes differing by at most one), submitted to the
        executor; the values put back in order, the errors in order of rows.  Where this process
        evaluates a piece too (``engine.evaluates_here``), it takes the last (a smallest) one, once
        the executor has sent every other."""
        executor = self.engine.executor()
        pieces = np.array_split(np.arange(len(X)), min(self.engine.workers, len(X)))
        here = pieces.pop() if self.engine.evaluates_here and len(pieces) > 1 else None
        payload = self.payload()
        futures = [executor.submit(evaluate_piece, payload, X[p], int(p[0])) for p in pieces]
        values = np.empty(len(X))
        errors: list[tuple[int, str]] = []
        errors_here: list[tuple[int, str]] = []  # of the last rows: listed last
        if here is not None:
            _until_sent(futures, min(len(futures), self.engine.ranks_elsewhere()))
            values[here], errors_here = evaluate_rows(self.spec, X[here], int(here[0]))
        for p, future in zip(pieces, futures):
            v, e = future.result()
            values[p] = v
            errors += e
        return values, errors + errors_here

    def stats(self) -> dict[str, Any]:
        """What ``stats["host_objective"]`` reports of the last run."""
        out: dict[str, Any] = {"executor": self.engine.name, "workers": self.engine.workers, **self.counts,
                               "restarts": self.engine.restarts}
        if self.first_error is not None:
            out["first_error"] = self.first_error
        return out

    def reset(self) -> None:
        """Counters and failure of a new run."""
        self.counts = dict.fromkeys(self.counts, 0)
        self.counts["seconds"] = 0.0
        self.first_error = self.failure = None


def _until_sent(futures: list[Any], at_once: int, seconds: float = 1.0) -> None:
    """Wait (at most ``seconds``) until the executor has handed ``at_once`` of ``futures`` to its
    workers (mpi4py's hands a piece only to an idle rank: with more pieces than ranks, the rest wait
    for the first to end, and this process would wait with them).  mpi4py's executor sends them
    from a thread of its own, which needs the interpreter's lock: an objective in pure Python
    started at once in this thread would hold it, and each send would wait up to a switch interval
    (5 ms)."""
    end = time.perf_counter() + seconds
    while sum(f.running() or f.done() for f in futures) < at_once and time.perf_counter() < end:
        time.sleep(1e-5)


class OnHost:
    """The one-point function of a non-JAX objective as the solvers trace it: a ``pure_callback`` to
    :meth:`HostObjective.evaluate`, in the problem's dtype; under ``vmap`` (``vmap_method=
    "expand_dims"``) it receives the whole batch at once.  A callable object holding the user's
    ``function``, so a checkpoint's identity of the problem is that function's
    (:mod:`multiwalk.identity` digests what a callable object holds; the executor counts for nothing)."""

    def __init__(self, function: Callable, host: HostObjective) -> None:
        self.function = function
        self.host = host

    def __call__(self, x: Any) -> Any:
        import jax

        if self.host.tap is not None:  # a program of a host loop is being traced
            return self.host.tap.evaluate(x.astype(self.host.dtype))
        # The points and the values cross as their bits in uint32 words (float64: two a number):
        # where the thread that runs a callback has 64-bit mode off (jax.enable_x64 is a per-thread
        # setting, and XLA runs callbacks on threads of its own), JAX hands it float32 points and
        # turns its float64 values into float32; integers it leaves alone.
        dtype = self.host.dtype
        words = jax.lax.bitcast_convert_type(x.astype(dtype), np.uint32)
        shape = jax.ShapeDtypeStruct(x.shape[:-1] + words.shape[x.ndim:], np.uint32)
        bits = jax.pure_callback(self.host.evaluate_bits, shape, words, vmap_method="expand_dims")
        return jax.lax.bitcast_convert_type(bits, dtype)


class Tap:
    """What :class:`OnHost` does, in place of its callback, while one of a host loop's two programs
    of a step is traced (:mod:`multiwalk.host_loop`).  Without ``values`` (the capture): it keeps
    the batch of points the step evaluates in ``points`` and returns zeros; with ``values`` (the
    finish: the batch's values, a traced ``(...)`` array, an argument of the program) it returns
    them.  ``calls`` counts the evaluations traced.

    The solvers call the one-point function under ``jax.vmap`` (several, nested).  A
    ``custom_vmap`` rule at each vmap level calls the tap again one level out, on the batch with
    that level's axis in front, as ``pure_callback``'s ``vmap_method="expand_dims"`` does; the
    last call is made at the program's own level, with the whole batch ``(..., n)``, which is what
    ``points`` keeps (a traced array of the program being traced, which the capture returns).  A
    point not under any batched vmap is evaluated as one point (``points`` of shape ``(n,)``)."""

    def __init__(self, values: Any = None) -> None:
        from jax.custom_batching import custom_vmap

        self.values = values
        self.points: Any = None
        self.calls = 0

        @custom_vmap
        def batch(x: Any, values: Any) -> Any:
            import jax.numpy as jnp

            # traced at every vmap level, but used at the program's own level only (where the rules
            # lead): there the values are the batch's; the capture's zeros are not its output
            if values is None or values.shape != x.shape[:-1]:
                return jnp.zeros(x.shape[:-1], x.dtype)
            return values.astype(x.dtype)

        @batch.def_vmap
        def one_level_out(axis_size: int, in_batched: list, x: Any, values: Any) -> tuple[Any, bool]:
            import jax.numpy as jnp

            if not in_batched[0]:  # the same point for every member of this vmap
                x = jnp.broadcast_to(x, (axis_size, *x.shape))
            return self._at_level(x), True

        self._batch = batch

    def evaluate(self, x: Any) -> Any:
        """The step's evaluation of ``x`` (..., n) -> (...)."""
        self.calls += 1
        return self._at_level(x)

    def _at_level(self, x: Any) -> Any:
        self.points = x  # the last call is the program's own level
        return self._batch(x, self.values)


def compiler_options(problem: Any) -> dict[str, Any]:
    """The XLA options of every program compiled for a run of ``problem``: :data:`CHEAP_CPU_OPTIONS`
    for a non-JAX objective on a CPU, none otherwise (a JAX objective's arithmetic is the run)."""
    if getattr(problem, "host_objective", None) is None:
        return {}
    import jax

    return _supported(tuple(CHEAP_CPU_OPTIONS.items())) if jax.default_backend() == "cpu" else {}


@functools.cache
def _supported(options: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """Those of ``options`` this XLA accepts as compile options (an option is dropped by a later
    release: XLA 0.11 has no ``xla_cpu_use_fusion_emitters``), found by compiling a one-operation
    program with all of them (one compile, read from the persistent cache, where XLA takes them
    all), else with each, once per process."""
    import jax

    def accepted(chosen: dict[str, Any]) -> bool:
        try:
            jax.jit(lambda v: v + 1).lower(np.float32(0)).compile(compiler_options=chosen)
        except Exception:  # noqa: BLE001 - XLA's error for an unknown option (INVALID_ARGUMENT)
            return False
        return True

    if accepted(dict(options)):
        return dict(options)
    return {name: value for name, value in options if accepted({name: value})}


def plain_error(problem: Any, err: BaseException) -> BaseException | None:
    """The one-paragraph error of a non-JAX objective that failed inside a compiled run (JAX raises
    a runtime error holding a traceback), or None when ``err`` is something else."""
    host = getattr(problem, "host_objective", None)
    if host is None or host.failure is None:
        return None
    return host.failure


def add_stats(problem: Any, stats: dict[str, Any]) -> None:
    """``stats["host_objective"]`` of a run of a non-JAX objective; nothing for a JAX one."""
    host = getattr(problem, "host_objective", None)
    if host is not None:
        stats["host_objective"] = host.stats()
