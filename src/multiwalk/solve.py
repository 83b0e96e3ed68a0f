"""The one driver: ``solve(problem, solver)`` runs every solver.

The loop, as optimistix's ``_iterate``: checks, then ``solver.plan`` (one :class:`RunPlan` for
the whole solve), then :func:`_start` (the start or the resumed state, placed on the devices),
:func:`_compile` (one loop per phase, or one for all phases where ``solver.traced_phase``:
``solver.run_chunk``, by default a ``lax.while_loop`` over ``solver.step`` with a dynamic trip
count, so chunks of any length reuse the same executable),
:func:`_run_phases` (chunks of about ``chunk_seconds`` of work; between chunks the writers, the
progress bar, the checkpoint and the clock) and :func:`_finish` (``solver.result``).  Ctrl-C or
the time limit end the run with the last finished chunk's state, so nothing computed is lost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import _multiwalk_launch

# the checkpoint format and the progress display under short names: solve()'s keywords are
# called checkpoint and progress
from . import checkpoint as ckpt
from . import compile_cache, host_loop, host_objective, one_program, program_store
from . import distributed as dist
from . import progress as prog
from .identity import problem_identity
from .problem import Problem
from .result import Result, Status, call_started
from .solvers._common import check_callable_option, check_state_fits
from .solvers.base import Iterate, Phase, RunPlan, Solver, Writer, asks_to_stop, point_value_ahead

__all__ = ["solve", "run_key", "place"]


def _check_run_options(problem, solver, seed, time_limit, chunk_seconds, checkpoint_every, callback, writer,
                       iteration_callback=None) -> None:
    if not isinstance(solver, Solver):
        if not isinstance(problem, Problem) and not hasattr(problem, "fingerprint"):
            raise TypeError(f"problem must be a multiwalk.Problem, got {type(problem).__name__}")
        raise TypeError(
            f"solver must be a multiwalk solver such as mw.ReplicaExchange(...), got {type(solver).__name__}"
        )
    kind = solver.problem_type
    if not isinstance(problem, kind):
        name = f"{kind.__module__.rsplit('.', 1)[0]}.{kind.__name__}"  # multiwalk.Problem, multiwalk.deconv.Deconvolution
        raise TypeError(
            f"problem must be a {name}, got {type(problem).__name__}: {type(solver).__name__} solves {name} problems"
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an integer in [0, 2**64), got {seed!r}")
    if getattr(problem, "log_prior", None) is not None and not solver.samples_log_prior:
        raise ValueError(
            f"the problem has a log_prior, which {type(solver).__name__} would ignore: it does not sample a "
            "posterior. Use mw.ReplicaExchange, or fold the prior into the objective (add -2 * log_prior to chi2)"
        )
    periodic = getattr(problem, "periodic", None)
    # periodic.any() first: indexing by free_index costs ~13 ms at n = 1e7, on every call
    if periodic is not None and periodic.any() and periodic[problem.free_index].any() and not solver.wraps_periodic:
        names = [problem.names[i] for i in problem.free_index if periodic[i]]
        raise ValueError(
            f"the problem's periodic parameters {names} would be plain bounds to {type(solver).__name__}, which does "
            "not wrap: use mw.ReplicaExchange or mw.Exchange, or drop periodic= (or fix those parameters)"
        )
    if time_limit is not None and not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise ValueError(f"time_limit must be a positive number of seconds or None, got {time_limit!r}")
    if not (isinstance(chunk_seconds, (int, float)) and chunk_seconds > 0):
        raise ValueError(f"chunk_seconds must be a positive number, got {chunk_seconds!r}")
    if not (isinstance(checkpoint_every, (int, float)) and checkpoint_every >= 0):
        raise ValueError(f"checkpoint_every must be a non-negative number of seconds, got {checkpoint_every!r}")
    check_callable_option("callback", callback, "a function callback(info: dict), called after each chunk")
    check_callable_option("iteration_callback", iteration_callback,
                          "a function f(it: Iterate) called after every iteration; returning True stops the run")
    if iteration_callback is not None and type(solver).iterate is Solver.iterate:
        raise ValueError(f"iteration_callback: {type(solver).__name__} has no current point to show after each "
                         "iteration; use callback= (called after each chunk with the progress summary)")
    if writer is not None and not (callable(getattr(writer, "write", None)) and callable(getattr(writer, "flush", None))):
        raise TypeError(f"writer must be an object with methods write(problem, state, first, last) and flush() "
                        f"(multiwalk.solvers.base.Writer), got {type(writer).__name__}")


def run_key(seed: int) -> jax.Array:
    """The run's key from a 64-bit seed: both halves count (PRNGKey alone keeps 32 bits)."""
    if not seed >> 32 and jax.config.jax_default_prng_impl == "threefry2x32" and not jax.config.jax_enable_custom_prng:
        # threefry's PRNGKey of a 32-bit seed is the pair [0, seed] (jax.random.PRNGKey's bits, which
        # tests/test_solve.py compares): put on the device as it is, where PRNGKey traces and runs two
        # small programs (~15 ms of a new process)
        return jax.device_put(np.array([0, seed], np.uint32))
    key = jax.random.PRNGKey(seed & 0xFFFFFFFF)
    return jax.random.fold_in(key, seed >> 32) if seed >> 32 else key


# (seed, PRNG implementation, 64-bit flag, default device) -> the run's key on the device: making it
# is a transfer of the seed and a program of its own (with fold_in two), paid before the start in
# every call otherwise; the last few seeds are kept
_RUN_KEYS: dict[tuple, jax.Array] = {}
_RUN_KEYS_MAX = 16


def _kept_run_key(seed: int, placement: dist.Placement | None = None) -> jax.Array:
    """:func:`run_key` made once per seed and kept.  The start copies it into the state (a compiled
    program's output never is its input's buffer), so donating the state leaves it alone; a key
    that was deleted anyway is made again.  With a ``placement`` split over devices: the key
    replicated over them, as the split start takes it (else a copy to every device in every call)."""
    cache_key = (seed, str(jax.config.jax_default_prng_impl), bool(jax.config.jax_enable_x64),
                 str(jax.config.jax_default_device))
    key = _kept_device_value(_RUN_KEYS, cache_key, _RUN_KEYS_MAX, lambda: run_key(seed))
    if placement is None or not placement.sharded:
        return key
    return _kept_device_value(_RUN_KEYS, (*cache_key, _kept_where(placement)), _RUN_KEYS_MAX,
                              lambda: dist.place(key, placement.replicated))


_KEPT_LOCK = threading.Lock()  # solve() may run in several threads at once


def _kept_device_value(cache: dict, key: tuple, limit: int, make: Callable[[], jax.Array]) -> jax.Array:
    """``cache[key]``, made by ``make()`` where missing or deleted, the oldest entry dropped
    beyond ``limit`` entries."""
    with _KEPT_LOCK:
        value = cache.get(key)
        if value is None or value.is_deleted():
            if len(cache) >= limit:
                cache.pop(next(iter(cache)))
            value = cache[key] = make()
        return value


def _chunk_runner(problem: Any, solver: Solver, phase: int | None, static: Any, plan: RunPlan | None = None) -> Callable:
    """``(state, n, arrays) -> (state, n_run, summary, report)``: up to ``n`` steps of ``phase``,
    fewer if ``solver.done`` (``solver.run_chunk`` with this solve's ``plan``: by default a
    ``while_loop`` over ``step``), the progress summary of the state it ends with
    (``solver.summary``) and what the result reads of it (``solver.report``, None for most
    solvers), so a chunk is one program, read back once.  ``phase`` None (a ``traced_phase`` solver's one loop
    for all its phases): ``(state, n, arrays, phase) -> ...``, the phase index an int32 argument.

    The trip count is dynamic, so one executable serves chunks of every length; ``arrays`` are
    the problem's data, sigma and ``args`` arrays (:func:`~multiwalk.compile_cache.problem_arrays`), arguments rather
    than constants, so one executable also serves every dataset of the same shapes.
    """

    def run_chunk_of_phase(state: Any, n: jax.Array, arrays: Any, phase: Any) -> tuple[Any, jax.Array, dict, Any]:
        with_arrays = compile_cache.with_arrays(problem, arrays, static)
        state, n_run = solver.run_chunk(with_arrays, state, phase, n, plan=plan)
        return state, n_run, solver.summary(with_arrays, state), solver.report(with_arrays, state, plan)

    def run_chunk(state: Any, n: jax.Array, arrays: Any) -> tuple[Any, jax.Array, dict, Any]:
        return run_chunk_of_phase(state, n, arrays, phase)

    return run_chunk if phase is not None else run_chunk_of_phase


def _compiled_chunk_runner(
    problem: Problem, solver: Solver, phase: int, state: Any, placement: dist.Placement, plan: RunPlan
) -> tuple[Any, Any, tuple]:
    """The compiled ``_chunk_runner`` for this problem, solver, phase, state layout, device
    placement and plan (the state's shardings are the loop's input and output shardings, so the
    state stays split from chunk to chunk and is donated in place), the problem's arrays to pass
    it (:func:`~multiwalk.compile_cache.problem_arrays`; on every device when the state is split),
    and the key it is kept under (its timing from the last call is kept there too).

    A ``traced_phase`` solver's loop is one for all its phases (its key holds no phase index): it
    is compiled at the first phase's call and called with ``phase`` as its last argument, so what
    is returned is that loop with the phase bound (``(state, n, arrays)`` as for other solvers)."""
    loop = _loop_of(problem, solver, phase, state, placement, plan)
    compiled = _kept_loop(loop.key)
    if compiled is None and loop.on_host:
        compiled = host_loop.HostLoop(problem, solver, phase, state, loop.arrays, loop.static,
                                      lambda lowered, who: _compile_lowered(lowered, dict(plan.compiler_options), who))
        compile_cache.keep_loop(loop.key, compiled, owner=problem if loop.arrays is None else None)
    elif compiled is None:
        compiled = _lowered_loop(loop, state)()
        if compiled is None:  # a stored program that would not load (now removed: this second lowering compiles it)
            compiled = _lowered_loop(loop, state)()
    if loop.shared:
        compiled = _with_phase(compiled, phase, placement)
    return compiled, loop.arrays, loop.key


@dataclass(frozen=True)
class _Loop:
    """What one phase's compiled loop is made for, and the key it is kept under."""

    problem: Any
    solver: Solver
    phase: int | None  # None: one loop for every phase, the phase an argument (``shared``)
    placement: dist.Placement
    plan: RunPlan
    arrays: Any  # the problem's arrays, arguments of the loop (compile_cache.problem_arrays)
    static: Any  # what of ``args`` is compiled in
    key: tuple
    shared: bool
    on_host: bool  # a non-JAX objective between compiled steps (host_loop.HostLoop)


def _loop_of(problem: Problem, solver: Solver, phase: int, state: Any, placement: dist.Placement,
             plan: RunPlan) -> _Loop:
    """Phase ``phase``'s loop for a state like ``state`` (arrays or ``jax.ShapeDtypeStruct``)."""
    arrays, static = compile_cache.problem_arrays(problem, plan.arrays_as_arguments)
    sharded = placement.sharded
    if sharded and arrays is not None:
        arrays = dist.place(arrays, placement.replicated)
    # the dtype itself (hashable, equal by value): str(dtype) is ~1.5 us a leaf, on every call
    avals = tuple((tuple(np.shape(x)), x.dtype) for x in jax.tree_util.tree_leaves(state))
    fingerprint = (compile_cache.arguments_fingerprint(problem) if arrays is not None
                   else compile_cache.full_fingerprint(problem))
    on_host = host_loop.applies(problem, solver, placement)  # a non-JAX objective between compiled steps
    shared = not on_host and solver.one_loop(problem, _platform(placement))  # one loop for every phase, the phase an argument
    common = (
        fingerprint, solver, None if shared else phase, jax.tree_util.tree_structure(state), avals,
        placement.key() if sharded else _pinned_device_key(placement), tuple(sorted(plan.compiler_options)), on_host,
        plan.loop_block,
        plan.until_time_limit,  # PatternSearch(rounds=None): one round without a time limit, rounds until it with one
    )
    if arrays is None:  # compiled for this very problem object
        key = (id(problem), *common)
    else:  # any problem with these functions and this fingerprint can use it
        key = ("functions", *compile_cache.user_functions(problem), *common)
    return _Loop(problem, solver, None if shared else phase, placement, plan, arrays, static, key, shared, on_host)


def _pinned_device_key(placement: dist.Placement) -> tuple:
    """The one device a run goes to, as a loop's key holds it: ``()`` for the default device
    (``devices=None`` and ``devices=1`` share their loop), else its platform and id (a loop compiled
    for one device does not take a state on another)."""
    device = placement.devices[0]
    if device is None or device == compile_cache.default_device():
        return ()
    return (device.platform, device.id)


def _lowered_loop(loop: _Loop, state: Any) -> Callable[[], Any]:
    """``loop`` traced and lowered for a state like ``state``; returned: its compilation, which
    keeps the executable (:func:`~multiwalk.compile_cache.keep_loop`) and returns it.  Tracing
    reads JAX's per-thread settings, so it happens here; the compilation may run on another thread.
    A loop of the program store is not traced: returned, its load, None where it would not load
    (:func:`~multiwalk.program_store.compilation`)."""
    placement, plan, problem = loop.placement, loop.plan, loop.problem

    def keep(compiled: Any) -> Any:
        # a loop compiled for this very problem object is forgotten once that is garbage
        compile_cache.keep_loop(loop.key, compiled, owner=problem if loop.arrays is None else None)
        return compiled

    # a later process finds it on disk without tracing (a loop of the library's own functions, on
    # the default device of one process)
    stored = not (loop.on_host or placement.sharded or placement.devices != (None,) or dist.multi_process())
    stored_as = program_store.key("loop", compile_cache.lasting_key(loop.key, problem)) if stored else None

    def lower(name: Callable[[Any], Any]) -> Any:
        runner = name(_chunk_runner(problem, loop.solver, loop.phase, loop.static, plan))
        # the trip count and phase by shape: a concrete jnp.asarray here would compile a program of its own
        scalars = (jax.ShapeDtypeStruct((), jnp.int32),) * (2 if loop.shared else 1)
        if placement.sharded:
            rep = placement.replicated
            in_shardings = (placement.shardings, rep, rep, rep) if loop.shared else (placement.shardings, rep, rep)
            jitted = jax.jit(runner, donate_argnums=0, in_shardings=in_shardings,
                             out_shardings=(placement.shardings, rep, rep, rep))
        else:
            jitted = jax.jit(runner, donate_argnums=0)
        with dist.mesh_context(placement.mesh if placement.sharded else None):  # for the image solvers' collectives
            return jitted.lower(state, scalars[0], loop.arrays, *scalars[1:])

    return program_store.compilation(
        stored_as, lower,
        lambda lowered: _compile_lowered(lowered, dict(plan.compiler_options), type(loop.solver).__name__), keep)


def _with_phase(compiled: Any, phase: int, placement: dist.Placement) -> Callable:
    """A shared loop's ``(state, n, arrays, phase)`` called as ``(state, n, arrays)`` for ``phase``
    (a device scalar kept where the loop runs, as the trip count is: :func:`_kept_int32`)."""
    phase_index = _kept_int32(phase, placement)

    def run(state: Any, n: Any, arrays: Any) -> Any:
        return compiled(state, n, arrays, phase_index)

    return run


def _compile_lowered(lowered: Any, options: dict[str, Any], who: str) -> Any:
    """``lowered`` compiled with the plan's XLA ``options`` (e.g. command buffers for a loop of
    small GPU kernels), or without them, with a warning, when this XLA refuses them: they are
    for speed only."""
    if options:
        try:
            return lowered.compile(compiler_options=options)
        except Exception as e:  # noqa: BLE001 - an XLA that refuses them still runs the loop
            warnings.warn(f"{who}: XLA refused the compiler options {options} "
                          f"({type(e).__name__}: {str(e)[:300]}); compiling the loop without them", stacklevel=3)
    return lowered.compile()


def _initial_shapes(problem: Any, solver: Solver, init_fn: Callable, key: jax.Array) -> Any:
    """``jax.eval_shape(init_fn, key)``, kept across solve() calls like the start itself; or, where
    the start says them itself (``init_fn.shapes(key)``: LBFGS's, from its sizes), without a trace."""
    known = getattr(init_fn, "shapes", None)
    if known is not None:
        return known(key)
    cache_key = compile_cache.small_key(problem, solver, "initial shapes", key.shape, str(key.dtype))
    shapes = compile_cache.kept(cache_key)
    if shapes is None:  # traced, or found on disk (a start of the library's own functions)
        stored_as = program_store.key("initial shapes", compile_cache.lasting_key(cache_key, problem))
        shapes = program_store.load_value(stored_as)
        if shapes is None:
            shapes = jax.eval_shape(init_fn, key)
            program_store.save_value(stored_as, shapes)
        compile_cache.keep(problem, cache_key, shapes)
    return shapes


def _deleted(state: Any) -> bool:
    """Whether any array of ``state`` was donated away (a run aborted inside a chunk)."""
    return any(getattr(leaf, "is_deleted", lambda: False)() for leaf in jax.tree_util.tree_leaves(state))


# ---------------------------------------------------------------------------- before the run
def _start_distributed(distributed: bool | dict[str, Any]) -> None:
    """Start ``jax.distributed`` (``solve(..., distributed=)``), before anything touches a device."""
    if not isinstance(distributed, (bool, dict)):
        raise TypeError(f"distributed must be True/False or a dict of initialize() keywords, got {distributed!r}")
    dist.initialize(**(distributed if isinstance(distributed, dict) else {}))


def _requested_devices(devices: Any) -> int:
    """How many devices ``solve(devices=...)`` asks for: an int, a list's length, or every device
    (None; invalid values too: :func:`multiwalk.distributed.choose_devices` reports them)."""
    try:
        count = None if devices is None else int(devices) if np.ndim(devices) == 0 else len(devices)
    except (TypeError, ValueError):
        count = None
    return jax.device_count() if count is None else count


def _phases(problem: Any, solver: Solver, until_time_limit: bool) -> list[Phase]:
    """The solver's phases; with ``until_time_limit`` (the plan's, and a time limit given: solvers
    that keep starting rounds until then) the last phase is unbounded."""
    phases = solver.phases(problem)
    if until_time_limit:
        longest = 2**31 - 2 - sum(p.length for p in phases[:-1])  # the iteration counter is int32
        phases[-1] = Phase(phases[-1].name, longest)
    return phases


def _checkpoint_path(checkpoint: str | os.PathLike | None) -> Path | None:
    """``checkpoint=`` as a path, checked writable (by the process that writes) before anything compiles."""
    if checkpoint is None:
        return None
    path = Path(checkpoint)
    if dist.is_writer():
        ckpt.check_checkpoint_path(path, f"checkpoint={str(checkpoint)!r}")
    return path


def _placement(problem: Any, solver: Solver, init_fn: Callable, key: jax.Array, devices: Any) -> dist.Placement:
    """Where the run goes (``solve(..., devices=)``): the default device when there is one and no
    ``devices`` were asked for, else :func:`multiwalk.distributed.choose_devices`'s choice."""
    if devices is None and jax.device_count() == 1:
        return dist.Placement((None,), None, None)
    return dist.choose_devices(solver, problem, _initial_shapes(problem, solver, init_fn, key), devices)


def place(state: Any, placement: dist.Placement, pinned: bool) -> Any:
    """``state`` (host or device arrays) where the run keeps it: split over the placement's devices,
    committed to the one device ``devices=`` chose (``pinned``), or on the default device."""
    if placement.sharded:
        return dist.place(state, placement.shardings)
    if pinned:
        # committed there: uncommitted, the loop (lowered outside this context) and the summary
        # ran on the default device, the state moved there at the first chunk
        return jax.device_put(state, placement.devices[0])
    return jax.tree_util.tree_map(jnp.asarray, state)  # device arrays stay as they are


def _first_state(problem: Any, solver: Solver, init_fn: Callable, key: jax.Array, placement: dist.Placement,
                 plan: RunPlan, pinned: bool, saved: tuple[dict[str, Any], list[np.ndarray], Path] | None) -> Any:
    """The state the run starts from, placed (:func:`place`): the solver's start, or the checkpoint
    ``saved`` (``(meta, leaves, path)``) put into the start's form."""
    if placement.sharded:  # each device creates its part of the state
        state = solver.initial_state_fn(problem, placement.shardings, plan)(key)
    else:
        with jax.default_device(placement.devices[0]) if pinned else contextlib.nullcontext():
            state = init_fn(key)
        if pinned:
            state = place(state, placement, pinned)
    if saved is not None:
        meta, leaves, path = saved
        state = place(ckpt.restore(solver, state, meta, leaves, path), placement, pinned)
    return state


def _first_stats(placement: dist.Placement) -> dict[str, Any]:
    stats: dict[str, Any] = {"compile_seconds": 0.0, "chunks": 0, "devices": len(placement.devices), "one_program": False}
    if placement.note:
        stats["devices_note"] = placement.note
    if dist.multi_process():
        stats["processes"] = jax.process_count()
    return stats


def _summary(problem: Any, solver: Solver, state: Any, placement: dist.Placement) -> Callable[[Any], dict]:
    """``state -> the progress summary's scalars`` (on the device), given only the leaves it reads
    (:func:`multiwalk.progress.summary_runner`)."""
    summary, used = prog.summary_runner(problem, solver, state, placement.replicated if placement.sharded else None)

    def of_state(state: Any) -> dict:
        leaves = jax.tree_util.tree_leaves(state)
        return summary([leaves[i] for i in used])

    return of_state


# ---------------------------------------------------------------------------- the run
@dataclass
class _Run:
    """One solve() call between chunks: what it runs and how (fixed), and where it stands (updated
    after each chunk)."""

    problem: Any
    solver: Solver
    plan: RunPlan  # the solver's, with the mesh the loop is compiled for
    placement: dist.Placement
    phases: list[Phase]
    seed: int
    identity: dict[str, Any] | None  # the problem's, written into checkpoints (None: no checkpoint)
    checkpoint_path: Path | None
    checkpoint_every: float
    time_limit: float | None
    chunk_seconds: float
    callback: Callable[[dict[str, Any]], None] | None
    writers: tuple[Writer, ...]  # the solver's own (a printed table), then solve()'s writer= (files)
    # Under jax.distributed the writers get the state gathered; every process gathers (a collective)
    # when process 0 has writers, whatever its own writers then do with it.
    gather_for_writers: bool
    # state -> the progress summary's scalars, for a host loop (a compiled loop returns them itself)
    summary: Callable[[Any], dict] | None
    state: Any
    done: list[int]  # iterations run of each phase
    phase_index: int  # the phase running
    stats: dict[str, Any]
    status: Status = Status.SUCCESS
    t_run: float = 0.0  # seconds spent running chunks (compilation excluded)
    unaccounted: bool = False  # a chunk ran but is not yet in ``done`` (the writers are between them)
    last_checkpoint: float = 0.0  # time.perf_counter() of the last checkpoint written
    # solve(iteration_callback=...): called with the solver's Iterate after every iteration
    iteration_callback: Callable[[Iterate], Any] | None = None
    # the loops (and the result's one-point value) compiling on threads while the start was made
    ahead: _Ahead | None = None
    # solver.report of the final state on the host, read with the chunk that ended the run; None
    # when the run did not end with a chunk asked to end it (the result then reads the state)
    report: Any = None

    @property
    def until_time_limit(self) -> bool:
        """The last phase runs until the time limit, which is then the run's normal end."""
        return self.time_limit is not None and self.plan.until_time_limit

    def write_checkpoint(self) -> None:
        meta = ckpt.checkpoint_meta(self.solver, self.seed, self.done, self.phase_index, self.state, self.identity)
        ckpt.write_checkpoint(self.checkpoint_path, self.state, meta)

    def flush_writers(self) -> None:
        """What the writers hold, written (before a checkpoint and at the end)."""
        for writer in self.writers:
            writer.flush()

    def write(self, first: int, last: int) -> None:
        """Iterations ``first+1 .. last`` of the current phase to the writers."""
        state = dist.to_host(self.state) if self.gather_for_writers else self.state
        for writer in self.writers:
            writer.write(self.problem, state, first, last)


def _start(problem: Any, solver: Solver, plan: RunPlan, seed: int, devices: Any, time_limit: float | None,
           checkpoint: Any, resume: Any, callback: Any, chunk_seconds: float, checkpoint_every: float,
           writer: Writer | None) -> _Run:
    """Everything before compiling: the phases, the checkpoint path, the ``resume`` file (read and
    checked), the start made where the run goes (or the checkpoint put into its form), the writers."""
    phases = _phases(problem, solver, time_limit is not None and plan.until_time_limit)
    checkpoint_path = _checkpoint_path(checkpoint)
    # written into checkpoints (a resume of another problem is refused); only digested when one is
    # written or read: a run without either reads none of the problem's arrays
    identity = problem_identity(problem) if checkpoint_path is not None or resume is not None else None
    saved = None
    if resume is not None:  # read and checked before anything compiles
        saved = (*ckpt.read_resume(Path(resume), seed, identity), Path(resume))
    key = _kept_run_key(seed)
    init_fn = solver.initial_state_fn(problem, None, plan)
    placement = _placement(problem, solver, init_fn, key, devices)
    on_host = host_loop.applies(problem, solver, placement)  # a non-JAX objective between compiled steps
    done, phase_index = ckpt.resumed_position(saved[0], phases, saved[2]) if saved else ([0] * len(phases), 0)
    plan = dataclasses.replace(plan, mesh=placement.mesh,
                               loop_block=_loop_block(problem, solver, plan, phases, done, placement, on_host))
    prepared_seconds = [0.0]
    ahead = None if on_host or saved is not None else _compile_ahead(problem, solver, phases, placement, plan,
                                                                      init_fn, key)
    if on_host:  # the start's evaluation on the host too
        prepare = None
        if saved is None and devices is None:  # the loops for the start's shapes, while its points are evaluated
            prepare = functools.partial(_prepare_loops, problem, solver, phases, placement, plan, prepared_seconds)
        init_fn = host_loop.initial_state_fn(problem, solver, init_fn, prepare)
    start_key = _kept_run_key(seed, placement)  # on the devices the start runs on
    state = _first_state(problem, solver, init_fn, start_key, placement, plan, devices is not None, saved)
    writers = tuple(w for w in (solver.writer(problem), writer) if w is not None)
    gather = dist.multi_process() and bool(dist.broadcast(np.int32(bool(writers))))
    # a compiled loop ends with the progress summary; a host loop's is a program of its own
    summary = _summary(problem, solver, state, placement) if on_host else None
    stats = _first_stats(placement)
    stats["compile_seconds"] = prepared_seconds[0]
    return _Run(problem, solver, plan, placement, phases, seed, identity, checkpoint_path, checkpoint_every,
                time_limit, chunk_seconds, callback, writers, gather, summary, state, done, phase_index, stats,
                ahead=ahead)


def _platform(placement: dist.Placement) -> str:
    """The platform the run's loop runs on (``"cpu"``, ``"gpu"``, ...): its first device's, or JAX's default."""
    device = placement.devices[0]  # None: JAX's default device
    return jax.default_backend() if device is None else device.platform


def _loop_block(problem: Any, solver: Solver, plan: RunPlan, phases: list[Phase], done: list[int],
                placement: dist.Placement, on_host: bool) -> int:
    """The plan's ``loop_block``: the solver's (:meth:`~multiwalk.solvers.base.Solver.loop_block`) where
    the loop runs, cut to its largest divisor that divides every phase's length, the iterations a
    resumed run has done of each and the plan's longest chunk, so that every chunk can be a multiple
    of it; 1 for a solver with ``done`` (a block would run past it) and for a host loop."""
    if on_host or solver.checks_convergence:
        return 1
    block = int(solver.loop_block(problem, _platform(placement)))
    for count in [phase.length for phase in phases] + list(done) + [plan.max_chunk or 0]:
        block = math.gcd(block, int(count))
    return max(block, 1)


def _prepare_loops(problem: Any, solver: Solver, phases: list[Phase], placement: dist.Placement, plan: RunPlan,
                   seconds: list[float], shapes: Any) -> None:
    """The compiled loops of every phase of a fresh run, for a start of ``shapes`` (kept, so that
    :func:`_compile` finds them); their time added to ``seconds[0]``."""
    t0 = time.perf_counter()
    for i, phase in enumerate(phases):
        if phase.length > 0:
            _compiled_chunk_runner(problem, solver, i, shapes, placement, plan)
    seconds[0] += time.perf_counter() - t0


# A first call compiles its loops (and its result's one-point value) on threads of their own while
# it makes the start (_compile_ahead); False: one after the other, as a resumed or split run does
_COMPILE_AHEAD = True


@dataclass
class _Ahead:
    """Programs compiling on threads of their own while the start is made (:func:`_compile_ahead`)."""

    started: float  # time.perf_counter() when their tracing began
    compiling: list[Future]  # each one's result: the time.perf_counter() at which it was compiled

    def wait(self) -> float:
        """The time the last one was compiled, after waiting for them all; a failed one's exception
        is raised here, in the caller's thread."""
        return max([future.result() for future in self.compiling], default=self.started)


def _compile_ahead(problem: Any, solver: Solver, phases: list[Phase], placement: dist.Placement, plan: RunPlan,
                   init_fn: Callable, key: jax.Array) -> _Ahead | None:
    """A first call's loops, and its result's one-point program (``solver.reports_value_at_point``),
    traced here and compiled on threads of their own while this thread compiles and runs the start
    (XLA's compilation releases the GIL): the call waits for its slowest program, not for their
    sum.  The loops need only the start's shapes (``jax.eval_shape``, whose trace the start's
    compilation then reuses); the same programs are compiled, so the results are the same, bit for
    bit.  Only for a fresh run on the default device of one process whose start is not kept (a
    first call for these functions and shapes: a later call would trace the start for its shapes
    alone).  A resumed, split, pinned or ``jax.distributed`` run keeps the order it always had
    (its loops compiled in :func:`_compile`, after the start): their placements and collectives
    are lowered as they were.  So does a non-JAX objective: its programs are compiled with cheap
    options, which ``jax.eval_shape`` of its start refuses (a nested jit's).  None when nothing
    was started."""
    is_kept = getattr(init_fn, "is_kept", None)  # a start of compile_cache's jits (not every override's)
    if (not _COMPILE_AHEAD or placement.devices != (None,) or dist.multi_process() or is_kept is None
            or getattr(problem, "host_objective", None) is not None or is_kept(key)):
        return None
    started = time.perf_counter()
    shapes = _initial_shapes(problem, solver, init_fn, key)
    compiling = []
    loops: dict[tuple, _Loop] = {}  # a traced_phase solver's phases share one loop
    for i, phase in enumerate(phases):
        loop = _loop_of(problem, solver, i, shapes, placement, plan)
        # a loop an earlier call left compiling (it was interrupted) is waited for by _compile; asked
        # before whether it is kept (a compilation keeps its loop, then leaves _LOOPS_COMPILING)
        if phase.length > 0 and loop.key not in loops and loop.key not in _LOOPS_COMPILING \
                and compile_cache.loop(loop.key) is None:
            loops[loop.key] = loop
            compiling.append(_on_thread(_lowered_loop(loop, shapes), loop.key))
    one_point = point_value_ahead(problem) if solver.reports_value_at_point and loops else None
    if one_point is not None:
        compiling.append(_on_thread(one_point))
    return _Ahead(started, compiling)


# loop key -> its compilation on a thread (_compile_ahead), until it is kept: a call whose loop an
# earlier call is still compiling (that call was interrupted meanwhile) waits for it (_kept_loop)
_LOOPS_COMPILING: dict[tuple, Future] = {}


def _on_thread(compile_program: Callable[[], Any], loop_key: tuple | None = None) -> Future:
    """``compile_program()`` on a daemon thread: the future's result is the time.perf_counter() at its
    end, or its exception.  A daemon: neither a failure in the caller's thread nor the
    interpreter's exit waits for it (a thread pool's workers would be joined at exit).  A loop's
    (``loop_key``) is in ``_LOOPS_COMPILING`` until it is kept or has failed."""
    future: Future = Future()

    def run() -> None:
        try:
            compile_program()
            done = time.perf_counter()
            _LOOPS_COMPILING.pop(loop_key, None)
            future.set_result(done)
        except BaseException as err:  # noqa: BLE001 - raised in the caller's thread by _Ahead.wait
            _LOOPS_COMPILING.pop(loop_key, None)
            future.set_exception(err)

    if loop_key is not None:
        _LOOPS_COMPILING[loop_key] = future
    try:
        threading.Thread(target=run, name="multiwalk-compile", daemon=True).start()
    except BaseException as err:  # no thread (a process limit; Ctrl-C): nobody would resolve the future
        _LOOPS_COMPILING.pop(loop_key, None)
        future.set_exception(err)
        raise
    return future


def _kept_loop(key: tuple) -> Any | None:
    """The loop kept under ``key``, once a thread still compiling it (an earlier, interrupted
    call's) is done; None when it is not kept (that compilation failed: the caller compiles it
    again, and a failure is then its own)."""
    compiling = _LOOPS_COMPILING.get(key)
    if compiling is not None:
        with contextlib.suppress(Exception):
            compiling.result()
    return compile_cache.loop(key)


def _compile(run: _Run, ctrl_c: prog.CtrlC, summary_shown: bool) -> dict[int, tuple[Any, Any, tuple]]:
    """``{phase index: (compiled loop, problem arrays, its cache key)}`` of every phase still to run, compiled with
    the progress summary (where it is shown: ``summary_shown``) before the clock and the bar start:
    the chunk loop compiles nothing."""
    t0 = time.perf_counter()
    executables = {}
    try:
        ahead_end = run.ahead.wait() if run.ahead is not None else None  # the loops are then kept
        for i in range(run.phase_index, len(run.phases)):
            if run.done[i] < run.phases[i].length:
                executables[i] = _compiled_chunk_runner(run.problem, run.solver, i, run.state, run.placement, run.plan)
        if executables and run.summary is not None and summary_shown:
            run.summary(run.state)  # a host loop's progress summary too (compiled on first use)
    except BaseException:
        ctrl_c.restore()
        raise
    end = time.perf_counter()
    # after what the start compiled (_prepare_loops); programs compiled beside the start count
    # from their tracing to the last one's end (their span and this function's time, overlaps once)
    if ahead_end is None:
        run.stats["compile_seconds"] += end - t0
    else:
        run.stats["compile_seconds"] += (ahead_end - run.ahead.started) + (end - max(t0, ahead_end))
    return executables


@dataclass
class _Launched:
    """A chunk sent to the devices, the copies of its small outputs to the host started, not yet read."""

    phase_index: int
    n: int  # the iterations asked of it
    outputs: Any  # (iterations run, progress summary, report) on their way to the host (prog.start_copies)
    t0: float  # time.perf_counter() its run is timed from: its launch (a copy program's compiling excluded)


def _launch_chunk(run: _Run, phase_index: int, compiled: Any, arrays: Any, n: int, wants_summary: bool) -> _Launched:
    """Up to ``n`` iterations of phase ``phase_index`` sent to the devices (``run.state`` becomes
    the chunk's output); ``wants_summary``: the progress summary is read with it."""
    # made before the clock: a new trip count is a transfer (the first in a process, a compilation)
    trip_count = _kept_int32(n, run.placement) if run.summary is None else np.int32(n)  # a host loop reads n on the host
    # the last phase's remaining iterations: no chunk follows this one, its state is the final one
    last = phase_index == len(run.phases) - 1
    ends_run = last and n >= run.phases[phase_index].length - run.done[phase_index]
    t0 = time.perf_counter()
    # The state is donated (updated in place), so it is replaced in one statement;
    # Ctrl-C only sets a flag (see CtrlC), so nothing interrupts this.
    run.unaccounted = True  # the state is ahead of ``done`` until the chunk is counted
    report = None
    info: Any = {}
    if run.summary is None:  # the compiled loop returns the progress summary (and the report) with the state
        run.state, n_run, summary, report = compiled(run.state, trip_count, arrays)
        info = summary if wants_summary else {}
        # the result's report is read only at the end, with what the solver queues on it (not
        # counted as the run's time: it is the result's)
        t_ready = time.perf_counter()
        report = run.solver.report_ready(run.problem, report) if ends_run and report is not None else None
        t0 += time.perf_counter() - t_ready
    else:
        run.state, n_run = compiled(run.state, trip_count, arrays)
        if wants_summary:
            info = run.summary(run.state)
    # queued behind the chunk (on one GPU a copy into pinned host memory): read without a round trip more
    copies, compiling = prog.start_copies((n_run, info, report))
    t0 += compiling  # a copy program's first compilation (once per process and shapes) is not the run's
    run.stats["compile_seconds"] += compiling
    return _Launched(phase_index, n, copies, t0)


def _land_chunk(run: _Run, launched: _Launched, bar: prog.ProgressBar, ctrl_c: prog.CtrlC,
                ended_at: float | None = None) -> tuple[int, float]:
    """``launched`` waited for and read back, then what follows it (:func:`_after_chunk`);
    ``ended_at``: the time.perf_counter() it was waited for at already, the next phase's first
    chunk then launched behind it (``run.state`` is that one's).  ``(iterations run, seconds)``."""
    queued = ended_at is not None
    if ended_at is None:
        jax.block_until_ready(run.state)
        ended_at = time.perf_counter()
    dt = ended_at - launched.t0
    # One read from the device per chunk: the steps run and, where shown, the progress summary's
    # scalars (and, after the chunk that ends the run, what the result reads).
    n_run, info, run.report = prog.fetch(launched.outputs)
    info = {k: float(v) for k, v in info.items()}
    # Every decision below derives from dt and the flags: under jax.distributed all
    # processes take process 0's, so they run the same chunks and stop together.
    checkpoint_due = run.checkpoint_path is not None and time.perf_counter() - run.last_checkpoint >= run.checkpoint_every
    dt, pressed, checkpoint_due = dist.broadcast((dt, ctrl_c.pressed, checkpoint_due))
    ctrl_c.pressed = bool(pressed)
    run.t_run += dt
    _after_chunk(run, int(n_run), info, checkpoint_due, bar)
    run.unaccounted = queued  # the chunk behind it is not counted yet
    return int(n_run), dt


def _queues_next_phase(run: _Run) -> bool:
    """Whether a phase's last chunk gets the next phase's first queued behind it before it is read
    back, so the devices do not wait between phases for a round trip to the host (two devices
    idled ~2.6 ms there in a call of ~80 ms).  Only where nothing between the two chunks needs the
    state on the host or may stop the run: no writers, checkpoint, callbacks or time limit, one
    process, a compiled loop.  A Ctrl-C during the phase's last chunk then ends the run after the
    next one (about half ``chunk_seconds`` at most, one block of the loop in its first call)."""
    return (run.summary is None and not run.writers and not run.gather_for_writers and run.checkpoint_path is None
            and run.callback is None and run.iteration_callback is None and run.time_limit is None
            and not dist.multi_process())


def _next_phase_with_work(run: _Run) -> int | None:
    """The index of the first phase after the current one with iterations left, or None."""
    return next((j for j in range(run.phase_index + 1, len(run.phases)) if run.done[j] < run.phases[j].length), None)


def _next_phase_queued(run: _Run, executables: dict[int, tuple[Any, Any, tuple]], j: int,
                       wants_summary: bool) -> _Launched:
    """Phase ``j``'s first chunk, launched now (behind the current phase's last chunk, not yet read)."""
    compiled, arrays, loop_key = executables[j]
    n = _chunk_length(run, j, _first_chunk_length(run, loop_key, j))
    return _launch_chunk(run, j, compiled, arrays, n, wants_summary)


# (n, where: _kept_where) -> n as an int32 device scalar there: the trip counts of recent chunks
# (and shared loops' phase indices), which a second call of the same run repeats
_TRIP_COUNTS: dict[tuple[int, tuple], jax.Array] = {}
_TRIP_COUNTS_MAX = 64


def _kept_int32(n: int, placement: dist.Placement) -> Any:
    """``n`` (a chunk's trip count, a shared loop's phase) as an int32 device scalar where a run's
    loop takes it, kept across chunks and calls: on the default device, on the one device a pinned
    run chose, or replicated over a split run's.  As a NumPy scalar it was a host->device copy
    before every chunk, to every device of a split run; ``jnp.asarray`` each time was a dispatch of
    its own (~0.1 ms on a CPU)."""
    if placement.sharded:
        make = lambda: dist.place(np.int32(n), placement.replicated)  # noqa: E731
    elif placement.devices[0] is not None:
        make = lambda: jax.device_put(np.int32(n), placement.devices[0])  # noqa: E731
    else:  # device_put, not jnp.asarray: the latter compiles a program of its own, a process's first time
        make = lambda: jax.device_put(np.int32(n))  # noqa: E731
    return _kept_device_value(_TRIP_COUNTS, (n, _kept_where(placement)), _TRIP_COUNTS_MAX, make)


def _kept_where(placement: dist.Placement) -> tuple:
    """Where a kept device value lies, as a cache key: the devices themselves (platform and id:
    a CPU and a GPU both have a device 0) and a split run's partition specs, or the default
    device's setting."""
    if placement.sharded:
        return (tuple(placement.devices), placement.key())
    if placement.devices[0] is not None:
        return (placement.devices[0],)
    return ("default", str(jax.config.jax_default_device))


def _after_chunk(run: _Run, n_run: int, info: dict[str, float], checkpoint_due: bool, bar: prog.ProgressBar) -> None:
    """The writers, the count, the bar, the checkpoint when due, the callback."""
    phase_index, phase = run.phase_index, run.phases[run.phase_index]
    first = run.done[phase_index]
    if run.writers or run.gather_for_writers:
        run.write(first, first + n_run)
    run.done[phase_index] += n_run
    run.unaccounted = False
    run.stats["chunks"] += 1
    bar.update(n_run, phase.name, info)
    if checkpoint_due:
        # what the writers handed to threads is written first; if that fails, the files lag
        # this state and the last checkpoint must stay (_run_phases writes none)
        run.unaccounted = True
        run.flush_writers()
        run.unaccounted = False
        run.write_checkpoint()
        run.last_checkpoint = time.perf_counter()
    if run.callback is not None:
        run.callback({"phase": phase.name, "done": list(run.done), "elapsed": run.t_run, **info})
    if run.iteration_callback is not None and n_run > 0 and _iteration_callback_stops(run):
        run.status = Status.CALLBACK_STOP


def _iteration_callback_stops(run: _Run) -> bool:
    """Whether ``solve(iteration_callback=f)``'s ``f`` asks to stop: it returns True (NumPy's too:
    :func:`~multiwalk.solvers.base.asks_to_stop`), or raises StopIteration (scipy's two ways).
    Under ``iteration_callback`` every chunk is one iteration."""
    x, fun = run.solver.iterate(run.problem, run.state)
    info = Iterate(x=x, fun=fun, iteration=run.done[run.phase_index], phase=run.phases[run.phase_index].name)
    try:
        return asks_to_stop(run.iteration_callback(info))
    except StopIteration:
        return True


def _next_chunk_length(run: _Run, n: int, n_run: int, per_step: float) -> int:
    """Iterations of the next chunk: about ``chunk_seconds`` of work (at ``per_step`` seconds an
    iteration), at most twice the last, and not past the time limit or the plan's longest chunk."""
    target = run.chunk_seconds
    if run.time_limit is not None:
        target = min(target, max(run.time_limit - run.t_run, 0.0))
    return max(1, min(int(target / per_step), 2 * n if n_run == n else n, 1 << 30, run.plan.max_chunk or 1 << 30))


def _first_chunk_length(run: _Run, loop_key: tuple, phase_index: int) -> int:
    """Iterations of a phase's first chunk: about half ``chunk_seconds`` of work at the longest
    time per iteration this compiled loop took in an earlier call, or in an earlier phase of this
    one (a ``traced_phase`` solver's loop serves every phase), so a short run is one
    dispatch (half and the longest: the machine's load may have changed since); or one
    iteration, which times a step, when it has not run before.  With a ``callback`` (which may
    stop the run after any chunk) chunks start at one iteration.  :func:`_run_phase` rounds it
    to the plan's ``loop_block``.  Short of what is left of phase ``phase_index``, it is rounded
    down to three leading bits (:func:`_three_leading_bits`)."""
    per_step = compile_cache.step_seconds(loop_key)
    n = 1
    if per_step is not None and run.callback is None:
        target = 0.5 * run.chunk_seconds
        if run.time_limit is not None:
            target = min(target, run.time_limit - run.t_run)
        n = max(1, min(int(max(target, 0.0) / max(per_step, 1e-9)), 1 << 30, run.plan.max_chunk or 1 << 30))
        if n < run.phases[phase_index].length - run.done[phase_index]:  # else it ends the phase: its length repeats
            n = _three_leading_bits(n)
    # under jax.distributed every process runs process 0's chunks (the timings kept may differ)
    return int(dist.broadcast(np.int32(n)))


def _three_leading_bits(n: int) -> int:
    """``n`` rounded down to its three leading bits (4, 5, 6 or 7 times a power of two; at most 20 %
    less): a chunk sized from the last call's timing, which varies by a few percent from call to
    call, then has the same length in most calls, and its trip count is found kept
    (:func:`_kept_int32`) rather than copied to the device anew (~0.2 ms on a GPU)."""
    n = int(n)
    drop = max(n.bit_length() - 3, 0)
    return n >> drop << drop


def _chunk_length(run: _Run, phase_index: int, n_next: int) -> int:
    """The next chunk of phase ``phase_index``: ``n_next`` iterations rounded down to whole blocks of
    the loop (the blocked loop runs whole blocks only), at least one block, at most what is left.
    What is left is a multiple of the block (:func:`_loop_block` divides the phase's length and what
    a resumed run has done of it, and each chunk runs all its n iterations, a solver in blocks having
    no ``done``, or ends the phase).  Checked, as a run past the phase's end would go on unseen."""
    remaining = run.phases[phase_index].length - run.done[phase_index]
    block = run.plan.loop_block
    if remaining % block:
        raise RuntimeError(f"{remaining} iterations left of phase {run.phases[phase_index].name!r}, not a "
                           f"multiple of the loop's block of {block}: the block must divide the phase's length "
                           "and the iterations done")
    return max(block, int(min(n_next, remaining)) // block * block)


def _run_phase(run: _Run, executables: dict[int, tuple[Any, Any, tuple]], bar: prog.ProgressBar,
               ctrl_c: prog.CtrlC, queued: _Launched | None) -> _Launched | None:
    """Chunks of the current phase until it is done or converged (``solver.done``), or until the
    time limit or Ctrl-C (``run.status`` says which).  The first chunk is sized by the loop's
    timing in an earlier call (:func:`_first_chunk_length`), else one iteration: it times a step;
    or it is ``queued``, launched behind the phase before.  Returned: the next phase's first chunk
    when it was launched behind this phase's last (:func:`_queues_next_phase`), else None."""
    compiled, arrays, loop_key = executables[run.phase_index]
    remaining = run.phases[run.phase_index].length - run.done[run.phase_index]
    # A loop's first chunk ever (one iteration) times a step, but on a GPU it also pays the
    # program's first launch (loading its kernels), many times a step: kept as the loop's timing,
    # the next call's first chunk came out a fraction of what fits in its time, so a short run took
    # two chunks.  That chunk counts only when no other follows it.
    untimed = compile_cache.step_seconds(loop_key) is None
    n_next = _first_chunk_length(run, loop_key, run.phase_index) if queued is None else queued.n
    # the progress summary is read only where it is shown: the bar's postfix, the callback's dict
    # (each array read back costs a copy and a call into JAX: ~0.1 ms on some GPU hosts)
    wants_summary = bar.shown or run.callback is not None
    slowest = 0.0  # the longest time per iteration of this call's chunks, kept for the next call
    chunks = 0
    converged = False
    while remaining > 0 and not converged:
        if queued is not None:  # launched behind the phase before's last chunk, once that one had ended
            launched, queued = queued, None
        else:
            if run.time_limit is not None and run.t_run >= run.time_limit:
                run.status = Status.TIME_LIMIT
                return None
            n = _chunk_length(run, run.phase_index, n_next)
            launched = _launch_chunk(run, run.phase_index, compiled, arrays, n, wants_summary)
        n = launched.n
        behind, ended_at = None, None
        j = _next_phase_with_work(run) if n >= remaining and not ctrl_c.pressed else None
        if j is not None and _queues_next_phase(run):
            # Waited for before the next is launched, so each chunk is timed alone: on a GPU a
            # launch returns only as its while loop's last trip ends (the host reads the loop's
            # condition each trip), so the next one's launch ends after that one's run.  What is
            # saved is the read and the host's work between the phases.
            jax.block_until_ready(launched.outputs)
            ended_at = time.perf_counter()
            behind = _next_phase_queued(run, executables, j, wants_summary)
        n_run, dt = _land_chunk(run, launched, bar, ctrl_c, ended_at)
        remaining -= n_run
        if run.status != Status.SUCCESS:  # the iteration callback asked to stop
            return None
        converged = n_run < n
        per_step = max(dt / max(n_run, 1), 1e-9)
        slowest = per_step if untimed and chunks == 1 else max(slowest, per_step)
        chunks += 1
        compile_cache.note_step_seconds(loop_key, slowest)
        if behind is not None:  # Ctrl-C is seen after it
            return behind
        n_next = _next_chunk_length(run, n, n_run, per_step)
        if ctrl_c.pressed:
            run.status = Status.INTERRUPTED
            return None
        work_left = remaining > 0 or _next_phase_with_work(run) is not None
        # the next chunk is at least one block of the loop
        if work_left and run.time_limit is not None and run.t_run + per_step * run.plan.loop_block > run.time_limit:
            run.status = Status.TIME_LIMIT
            return None
    return None


def _run_phases(run: _Run, executables: dict[int, tuple[Any, Any, tuple]], bar: prog.ProgressBar,
                ctrl_c: prog.CtrlC) -> None:
    """The phases from the current one to the last, or until the time limit or Ctrl-C.  A failure
    (out of memory, a bug) keeps the last finished chunk's state on disk, and is raised."""
    try:
        queued = None  # a phase's first chunk, launched behind the phase before
        while run.status == Status.SUCCESS and run.phase_index < len(run.phases):
            if run.done[run.phase_index] < run.phases[run.phase_index].length:
                if queued is not None and queued.phase_index != run.phase_index:
                    raise RuntimeError(f"a chunk of phase {queued.phase_index} was queued, phase "
                                       f"{run.phase_index} runs next")
                queued = _run_phase(run, executables, bar, ctrl_c, queued)
                if run.status != Status.SUCCESS:
                    break
            run.phase_index += 1
    except KeyboardInterrupt:  # raised by the callback, or a second Ctrl-C
        # raised inside a chunk (by a worker's objective: an MPI or Dask worker hit by Ctrl-C) the
        # state went to that chunk and is gone: no partial result to build, the last checkpoint stays
        if ctrl_c.forced or _deleted(run.state):
            raise
        run.status = Status.INTERRUPTED
    except BaseException:
        # Not under jax.distributed: the gather is a collective that the other processes may not
        # join; not when a writer failed: what it writes would lag that state (the last checkpoint stays).
        if run.checkpoint_path is not None and not run.unaccounted and not _deleted(run.state) and not dist.multi_process():
            run.flush_writers()  # when it fails, the files lag the state: no checkpoint of it
            run.write_checkpoint()
        raise
    finally:
        bar.close()
        ctrl_c.restore()


def _finish(run: _Run, t_loop: float) -> Result:
    """The solver's result, after what the writers hold is written and the last checkpoint.  A run
    that ended normally without meeting its solver's convergence test ends as ``MAX_STEPS``."""
    if run.until_time_limit and run.status == Status.TIME_LIMIT:
        run.status = Status.SUCCESS
        run.stats["ended_by_time_limit"] = True
    run.stats["run_seconds"] = run.t_run
    run.stats["iterations"] = {p.name: d for p, d in zip(run.phases, run.done)}
    run.flush_writers()
    run.stats["loop_seconds"] = time.perf_counter() - t_loop  # run_seconds + the host's work between chunks
    if run.checkpoint_path is not None:
        run.write_checkpoint()
    # One gather at the end: the result builders read the state with np.asarray (which gathers
    # a split state); under jax.distributed every process gathers it whole first.
    state = dist.to_host(run.state) if dist.multi_process() else run.state
    run.solver.start_result_reads(run.problem, state)
    if (run.status == Status.SUCCESS and not run.stats.get("ended_by_time_limit")
            and not _converged(run.solver, run.problem, state, len(run.phases) - 1)):
        run.status = Status.MAX_STEPS  # never a silent exit at the iteration limit
    reported = {} if run.report is None else {"reported": run.report}  # solver.report's, read with the last chunk
    return run.solver.result(run.problem, state, list(run.done), run.status, run.stats, **reported)


def _converged(solver: Solver, problem: Any, state: Any, phase: int) -> bool:
    """Whether a run that used all its iterations met its solver's convergence test (``done`` on
    the final state; a solver without one, such as a sampler, always has).  Evaluated on the state
    rather than read from the chunks, so a run that converged on its last iteration, or a resumed
    one, is judged alike."""
    if not solver.checks_convergence:
        return True
    return bool(solver.done(problem, state, phase))


def _in_one_program(problem: Any, solver: Solver, plan: RunPlan, seed: int, show: bool, devices: Any) -> Result | None:
    """A short run as one program (:mod:`multiwalk.one_program`), placed as a run in chunks would
    be (on the default device, or split over the devices asked for), with that run's
    ``loop_block``; None where it is not one program once placed
    (:func:`multiwalk.one_program.placed_plan_fits`).  ``show``: a status line while it compiles."""
    key = _kept_run_key(seed)
    if not solver.one_program_split:  # one_program.applies: no devices asked for, one device
        placement = dist.Placement((None,), None, None)
    elif solver.one_program(problem, plan):  # placed as a run in chunks would be
        placement = _placement(problem, solver, solver.initial_state_fn(problem, None, plan), key, devices)
    else:  # not short on any placement
        return None
    plan = dataclasses.replace(plan, mesh=placement.mesh)
    if not one_program.placed_plan_fits(problem, solver, plan, placement):
        return None
    phases = solver.phases(problem)
    block = _loop_block(problem, solver, plan, phases, [0] * len(phases), placement, False)
    placed_key = _kept_run_key(seed, placement) if placement.sharded else key
    prepared, seconds = one_program.prepare(problem, solver, dataclasses.replace(plan, loop_block=block), phases,
                                            placement, (key, placed_key), _kept_devices(devices), show)
    result = one_program.run(problem, solver, prepared, placed_key, seconds)
    _multiwalk_launch.mark("solve: result made")
    return result


def _kept_devices(devices: Any) -> int | None | bool:
    """``solve(devices=...)`` as a kept short program is looked up under (:func:`multiwalk.one_program.kept`):
    None or a count; False for anything else (a list of devices: never looked up)."""
    if devices is None or (isinstance(devices, (int, np.integer)) and not isinstance(devices, bool)):
        return None if devices is None else int(devices)
    return False


# ---------------------------------------------------------------------------- the driver
def _run_plan(problem: Any, solver: Solver, devices: Any, time_limit: float | None,
              iteration_callback: Callable | None) -> RunPlan:
    """The solver's :class:`RunPlan` with the driver's additions (a non-JAX objective's cheap XLA
    options; one iteration per chunk under ``iteration_callback``), checked against the devices'
    memory before anything compiles."""
    plan = solver.plan(problem, _requested_devices(devices), time_limit)
    cheap = host_objective.compiler_options(problem)  # a non-JAX objective: its programs compiled fast
    if cheap:  # the solver's own options win
        plan = dataclasses.replace(plan, compiler_options=(*cheap.items(), *plan.compiler_options))
    if iteration_callback is not None:  # one iteration per chunk: the callback sees every iterate
        plan = dataclasses.replace(plan, max_chunk=1)
    check_state_fits(type(solver).__name__, solver.state_memory(problem), plan.devices)
    return plan


@compile_cache.one_fingerprint_per_call
def solve(
    problem: Problem,
    solver: Solver,
    *,
    seed: int = 0,
    progress: bool | None = None,
    time_limit: float | None = None,
    checkpoint: str | os.PathLike | None = None,
    resume: str | os.PathLike | None = None,
    callback: Callable[[dict[str, Any]], None] | None = None,
    chunk_seconds: float = 1.0,
    checkpoint_every: float = 0.0,
    devices: Any = None,
    distributed: bool | dict[str, Any] = False,
    writer: Writer | None = None,
    iteration_callback: Callable[[Iterate], Any] | None = None,
) -> Result:
    """Run ``solver`` on ``problem`` and return its result.

    Parameters
    ----------
    seed : the random seed; the same seed gives the same result.
    progress : show a progress bar (phase, iteration, best value, ...); ``None`` shows one
        when standard error is a terminal.  Before it, a call that spends over a second making its
        start and compiling shows a status line saying so (:class:`~multiwalk.progress.CompileStatus`).
    time_limit : seconds of run time (compilation not counted); at the limit the run stops
        after the current chunk with ``status=Status.TIME_LIMIT`` and a partial result.
        Solvers that work in rounds (``PatternSearch(rounds=None)``) instead keep starting
        rounds until the limit, which is then their normal end (``Status.SUCCESS``).
    checkpoint : path of a file the state is written to after each chunk (at most every
        ``checkpoint_every`` seconds) and at the end, interrupted or not.
    resume : path of a checkpoint to continue from.  Options must match those of the saved
        run, except the ones in ``solver.resumable_options`` (e.g. ``niter``), which may grow;
        the problem must be the one it was written for (:mod:`multiwalk.identity`).
    callback : called after each chunk with a dict (phase, iteration, elapsed, summary);
        raising KeyboardInterrupt from it stops the run like Ctrl-C.  With a callback every
        phase starts with a chunk of one iteration (one block where the loop runs several a trip:
        ``RunPlan.loop_block``, ReplicaExchange on GPUs); without one, a phase whose compiled loop ran
        in an earlier call starts with about ``chunk_seconds`` of work (a short run is one chunk).
    chunk_seconds : target wall time of one jitted chunk (progress and clock granularity).
    devices : where the run goes.  ``None`` (default): split the solver's batch axis (sequences,
        walkers, replicas, starts; a single L-BFGS problem's vectors) over all devices when it
        divides evenly, else one device (``stats["devices_note"]`` says why).  An int ``k``: the
        first ``k`` devices; a list of jax devices: those.  ``stats["devices"]`` is the count used.
        The result is the same on any number of devices (random numbers do not depend on the
        split); sums over a split axis (a single L-BFGS problem's dot products) may round differently.
        A checkpoint written on one number of devices resumes on any other.
    distributed : start ``jax.distributed`` first (True, or a dict of
        :func:`multiwalk.distributed.initialize` keywords: ``coordinator_address``,
        ``num_processes``, ``process_id``; otherwise read from the environment, SLURM or Open
        MPI).  Every process runs the same call; the batch is split over all processes'
        devices, process 0 writes the checkpoint, and every process gets the whole result.
    writer : an object that writes as the run goes (a :class:`~multiwalk.solvers.base.Writer`, as
        emcee's backends): ``writer.write(problem, state, first, last)`` after each chunk that ran
        iterations ``first+1 .. last`` of the current phase, ``writer.flush()`` before each
        checkpoint and before returning (``multiwalk run`` writes ODAT-SE's per-step files so:
        :class:`~multiwalk.solvers.exchange.ReplicaOrderWriter`).
    iteration_callback : called after EVERY iteration with an
        :class:`~multiwalk.solvers.base.Iterate` ``(x, fun, iteration, phase)``: the solver's
        current point (L-BFGS: the iterate of every start; the samplers and pattern search: the
        best so far), on the host.  Returning True (or raising StopIteration, as scipy's
        callbacks may) stops the run with ``Status.CALLBACK_STOP`` and the result so far.  Each
        iteration is then its own chunk, with a round trip to the host: for small problems, or
        for watching; ``callback`` is the cheap one.

    Ctrl-C (KeyboardInterrupt) or SIGTERM (a batch system's time limit) stops the run cleanly:
    the result holds everything computed up to the last finished chunk and has
    ``status=Status.INTERRUPTED``.  (Without a checkpoint, writer, callbacks or time limit, a
    phase's last chunk has the next phase's first queued behind it; a Ctrl-C there stops after it.)

    A run its solver calls short (``solver.one_program``: PatternSearch's one round of a cheap
    objective; ReplicaExchange's short run on a GPU, split over devices too), in a call that asks
    for nothing between chunks (no ``progress=True``, callbacks, checkpoint, resume, writer, time
    limit, nor ``devices`` for a solver without ``one_program_split``), is ONE program, read back once
    (:mod:`multiwalk.one_program`; ``stats["one_program"]`` True): no bar (``progress=None`` shows
    none for it), ``chunk_seconds`` unused, and Ctrl-C lets it finish, then says ``INTERRUPTED``.
    Its ``run_seconds`` covers the start and the result's value too.

    ``stats["compile_seconds"]``: the wall time the call spent on its loops' compilation, from the
    first one's tracing to the last one's end.  A first call compiles them on threads of their own
    while it makes the start, so when they end after the start that span holds the start's own
    compilation and run too; otherwise the start is not counted.  Compiled loops are kept and reused by
    later calls with the same ``problem`` object and equal solver options (it then drops to ~0).  A problem whose
    bounds, data, sigma, fixed values or ``args`` arrays were changed in place is compiled
    anew; as with ``jax.jit``, global arrays read by the function are baked in at compilation.
    ``PatternSearch(rounds=None)`` compiles one loop for calls without a time limit (one round)
    and another for calls with one (rounds until it): a warm-up call should match the calls it warms.
    """
    if distributed:  # before anything touches a device
        _start_distributed(distributed)
    _check_run_options(problem, solver, seed, time_limit, chunk_seconds, checkpoint_every, callback, writer,
                       iteration_callback)
    solver.check(problem)
    call_started()  # the result's pinned buffers: spares made by a size's first call (result.through_pinned_memory)
    host = getattr(problem, "host_objective", None)  # a non-JAX objective: its counts are this run's
    show = sys.stderr.isatty() if progress is None else bool(progress)
    # a run short enough to be one program shows a bar only when asked for (progress=True): on a
    # terminal by default it would flash for under a second, and the bits would follow the terminal
    between_chunks = (bool(progress) or time_limit is not None or checkpoint is not None or resume is not None
                      or callback is not None or iteration_callback is not None or writer is not None
                      or host is not None or dist.multi_process())
    asked = _kept_devices(devices)
    if not between_chunks and asked is not False:  # a repeated short call: its program in one lookup
        key = _kept_run_key(int(seed))
        prepared = one_program.kept(problem, solver, key, asked)
        if prepared is not None:
            placed_key = _kept_run_key(int(seed), prepared.placement) if prepared.split else key
            result = one_program.run(problem, solver, prepared, placed_key)
            _multiwalk_launch.mark("solve: result made")
            return result
    plan = _run_plan(problem, solver, devices, time_limit, iteration_callback)
    if host is not None:
        host.reset()
        host.start()  # the worker processes come up while the solver compiles
    if one_program.applies(problem, solver, plan, between_chunks=between_chunks, devices=devices):
        result = _in_one_program(problem, solver, plan, int(seed), show, devices)
        if result is not None:
            return result
    try:
        _multiwalk_launch.mark("solve: options checked")
        # a first call compiles for seconds before the bar can appear: a status line says so meanwhile
        with prog.CompileStatus(show, evaluates_start=host is not None):
            run = _start(problem, solver, plan, int(seed), devices, time_limit, checkpoint, resume, callback,
                         chunk_seconds, checkpoint_every, writer)
            _multiwalk_launch.mark("solve: start made")
            run.iteration_callback = iteration_callback
            # From here on Ctrl-C sets a flag that ends the run after the current chunk (or after
            # compiling), returning what was done; a second Ctrl-C aborts at once.
            ctrl_c = prog.CtrlC()
            executables = _compile(run, ctrl_c, summary_shown=show or callback is not None)
        if ctrl_c.pressed:
            run.status = Status.INTERRUPTED
        total = None if run.until_time_limit else sum(p.length for p in run.phases)
        bar = prog.ProgressBar(show and run.status == Status.SUCCESS, total, sum(run.done))
        run.last_checkpoint = t_loop = time.perf_counter()  # the chunk loop's wall time: chunks, writers, checkpoints
        _multiwalk_launch.mark("solve: loops ready")
        _run_phases(run, executables, bar, ctrl_c)
        _multiwalk_launch.mark("solve: run done")
        result = _finish(run, t_loop)
        _multiwalk_launch.mark("solve: result made")
    except jax.errors.JaxRuntimeError as err:  # a non-JAX objective's failure: its own one-paragraph error
        plain = host_objective.plain_error(problem, err)
        if plain is None:
            raise
        raise plain from None
    host_objective.add_stats(problem, result.stats)
    return result
