"""A non-JAX objective run as a loop on the host between compiled programs, none of which holds
a host callback.

Inside a compiled loop, a non-JAX objective is a ``jax.pure_callback``
(:class:`~multiwalk.host_objective.OnHost`), and JAX's persistent compilation cache never keeps
an executable that holds a host callback: every new process compiled the loop again (~0.7 s on a
2-core CPU even with the cheap options, the start ~0.15 s), most of what a short
``multiwalk run`` spends outside its objective.  For a solver whose ``step`` evaluates the
objective once, on one batch of static shape, outside any loop or cond
(``Solver.evaluates_once_per_step``: Exchange, PopulationAnnealing, Mapper), one step becomes

* ``capture(state) -> X``: the step traced with a :class:`~multiwalk.host_objective.Tap` that
  keeps its batch of points and returns zeros; the program's output is the batch ``X`` (XLA drops
  what follows the evaluation);
* on the host: ``f = host.evaluate(X)``, the executor's pieces, as the callback does;
* ``finish(state, f) -> state``: the same step traced with a tap that returns ``f``.

The step's work before the evaluation (draws, proposals) runs twice, microseconds next to the
objective.  Both programs are plain: a second process loads them from the persistent cache and
compiles nothing.  The start (``init``) is split the same way when it evaluates the objective;
while worker processes evaluate the start's points, this thread traces and loads the step's
programs (the driver's ``prepare``), so that a short run does not wait for both one after the other.
The numbers are those of the step's own code: the same seed gives the same run for any executor,
worker count and chunking (each step is its own call).  A run split over several devices or
processes, and solvers that evaluate several times a step (ReplicaExchange's inner Metropolis
loop, PatternSearch's directions), keep the callback inside their compiled loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import jax
import numpy as np

import _multiwalk_launch

from . import compile_cache
from . import distributed as dist
from .host_objective import HostObjective, Tap
from .solvers.base import Solver

__all__ = ["applies", "initial_state_fn", "HostLoop"]


def applies(problem: Any, solver: Solver, placement: dist.Placement) -> bool:
    """Whether a run of ``problem`` by ``solver`` placed so runs as a host loop: a non-JAX objective,
    a solver that evaluates it once a step, one device of one process."""
    return (getattr(problem, "host_objective", None) is not None and solver.evaluates_once_per_step
            and not placement.sharded and not dist.multi_process())


def _captured(host: HostObjective, trace: Callable[[], Any], who: str) -> Any:
    """The batch of points that ``trace()`` (a solver's step or start, being traced) evaluates, as
    an array of the program being traced; None when it evaluates nothing."""
    with host.tapping(Tap()) as tap:
        trace()
    _at_most_one_batch(tap, who)
    return tap.points if tap.calls else None


def _at_most_one_batch(tap: Tap, who: str) -> None:
    if tap.calls > 1:
        raise RuntimeError(f"{who} evaluated the objective {tap.calls} times; a host loop needs one batch a step "
                           "(set evaluates_once_per_step only for a solver whose step evaluates once)")


def _fed(host: HostObjective, values: Any, trace: Callable[[], Any]) -> Any:
    """``trace()``'s result, its evaluation of the objective returning ``values``."""
    with host.tapping(Tap(values)) as tap:
        out = trace()
    if tap.calls != 1 or tap.points.shape[:-1] != values.shape:  # the same code as the capture's
        raise RuntimeError(f"a host loop fed the values of {values.shape} points to a step that evaluated "
                           f"{tap.calls} batches, the last of shape {getattr(tap.points, 'shape', None)}")
    return out


def initial_state_fn(problem: Any, solver: Solver, init_fn: Callable[[jax.Array], Any],
                     prepare: Callable[[Any], None] | None = None) -> Callable[[jax.Array], Any]:
    """``key -> the start``: ``solver.init``'s points (one program), their values on the host,
    then the start (a second program); ``init_fn`` (the solver's own, which then holds no
    callback) when ``init`` evaluates nothing (Mapper).  Both programs are kept across solve()
    calls (:func:`~multiwalk.compile_cache.cached_jit`).

    ``prepare(shapes)`` (the start's shapes, ``jax.ShapeDtypeStruct`` leaves): work for this thread
    while worker processes evaluate the start's points (the driver traces and loads the step's
    programs then), done before the start is made; the start's own second program is loaded in
    that time too.  Only where the points go to an executor (processes, MPI ranks, Dask; rank 0's
    own piece of a plain ``mpiexec`` run is then evaluated on that thread too): a serial objective
    runs in this thread, as does all tracing (JAX's settings such as ``jax.enable_x64`` are per
    thread)."""
    host = problem.host_objective
    who = f"{type(solver).__name__}.init"
    points_of = compile_cache.cached_jit(
        problem, solver, "host loop: start's points",
        lambda key: _captured(host, lambda: solver.init(problem, key), who))
    start_of = compile_cache.cached_jit(
        problem, solver, "host loop: start", lambda key, values: _fed(host, values, lambda: solver.init(problem, key)))

    def start(key: jax.Array) -> Any:
        evaluates, shapes = _start_facts(problem, solver, key)
        if not evaluates:
            return init_fn(key)
        points = np.asarray(points_of(key))
        _multiwalk_launch.mark("solve: the start's points made")
        if prepare is None or host.engine.serial:
            return start_of(key, host.evaluate(points))
        values = _in_background(host.evaluate, points)
        try:
            start_of.compile_for(key, np.zeros(points.shape[:-1], host.dtype))  # host.evaluate's array: same key
            _multiwalk_launch.mark("solve: the start's program ready")
            prepare(shapes)
            _multiwalk_launch.mark("solve: the step's programs ready")
            outcome = values.result()
            _multiwalk_launch.mark("solve: the start's values back")
        except BaseException:
            # The batch ends before the error goes on (a second Ctrl-C does not wait): left
            # running, it would count its points into the next run's statistics.
            values.exception()
            raise
        return start_of(key, outcome)

    return start


def _in_background(fun: Callable[..., Any], *args: Any) -> Future:
    """``fun(*args)`` on a daemon thread: its result or exception in the future returned (a
    KeyboardInterrupt here does not wait for it, as it would for a thread pool's)."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(fun(*args))
        except BaseException as err:  # noqa: BLE001 - handed to the caller by result()
            future.set_exception(err)

    threading.Thread(target=run, name="multiwalk-start-batch", daemon=True).start()
    return future


def _start_facts(problem: Any, solver: Solver, key: jax.Array) -> tuple[bool, Any]:
    """Whether ``solver.init`` evaluates the objective, and the start's shapes (``jax.ShapeDtypeStruct``
    leaves, weak types kept), from one abstract trace kept across solve() calls."""
    cache_key = compile_cache.small_key(problem, solver, "host loop: start's facts", key.shape, str(key.dtype))
    facts = compile_cache.kept(cache_key)
    if facts is None:
        taps = []

        def init(k: jax.Array) -> Any:
            with problem.host_objective.tapping(Tap()) as tap:
                taps.append(tap)
                return solver.init(problem, k)

        shapes = jax.eval_shape(init, key)
        _at_most_one_batch(taps[0], f"{type(solver).__name__}.init")
        facts = (taps[0].calls == 1, shapes)
        compile_cache.keep(problem, cache_key, facts)
    return facts


class HostLoop:
    """The driver's compiled loop for a host loop: ``(state, n, arrays) -> (state, steps run)``,
    the signature of the compiled ``run_chunk``, running ``n`` times ``capture``, the evaluation on
    the host and ``finish`` (which donates the state).  Fewer steps when the solver's ``done``
    says so: ``capture`` also returns ``done`` of the state it is given, read before its points
    are evaluated, so that, as in ``run_chunk``'s ``while_loop``, a state that is done (a phase's
    start, a resumed run) runs no step (solvers without a convergence test skip it)."""

    def __init__(self, problem: Any, solver: Solver, phase: int, state: Any, arrays: Any, static: Any,
                 compile: Callable[[Any, str], Any]) -> None:
        self.host: HostObjective = problem.host_objective
        self.checks_done = solver.checks_convergence
        who = f"{type(solver).__name__}.step"

        def capture(state: Any, arrays: Any) -> tuple[Any, Any]:
            p = compile_cache.with_arrays(problem, arrays, static)
            points = _captured(self.host, lambda: solver.step(p, state, phase), who)
            if points is None:
                raise RuntimeError(f"{who} evaluated nothing: it cannot run as a host loop")
            return points, (solver.done(p, state, phase) if self.checks_done else None)

        def finish(state: Any, values: Any, arrays: Any) -> Any:
            p = compile_cache.with_arrays(problem, arrays, static)
            return _fed(self.host, values, lambda: solver.step(p, state, phase))

        # XLA compiles the two at once (it releases the GIL): where there is a core to spare, the
        # first run of a problem waits for the longer of the two rather than for both; the capture
        # compiles (or loads from the persistent cache) while this thread traces and lowers the finish
        lowered = jax.jit(capture).lower(state, arrays)
        _multiwalk_launch.mark("solve: the step's points traced")
        with ThreadPoolExecutor(1) as other:
            points = other.submit(compile, lowered, f"{who} (its points)")
            values = jax.ShapeDtypeStruct(lowered.out_info[0].shape[:-1], self.host.dtype)
            lowered_finish = jax.jit(finish, donate_argnums=0).lower(state, values, arrays)
            _multiwalk_launch.mark("solve: the step's finish traced")
            self.finish = compile(lowered_finish, who)
            _multiwalk_launch.mark("solve: the step's finish loaded")
            self.capture = points.result()

    def as_text(self) -> str:
        """The two compiled programs' text (capture, then finish), as a compiled loop's ``as_text``."""
        return self.capture.as_text() + "\n" + self.finish.as_text()

    def __call__(self, state: Any, n: Any, arrays: Any) -> tuple[Any, jax.Array]:
        for i in range(int(n)):
            points, done = jax.device_get(self.capture(state, arrays))  # one transfer a step
            if self.checks_done and bool(done):
                return state, jax.device_put(np.int32(i))
            state = self.finish(state, self.host.evaluate(points), arrays)
        return state, jax.device_put(np.int32(n))
