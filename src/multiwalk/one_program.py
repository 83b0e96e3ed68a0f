"""A short run as one program: :func:`multiwalk.solve`'s path for a run its solver calls short.

A solve is normally several programs: the start, chunks of iterations (each read back, for the
progress bar, the clock, checkpoints and Ctrl-C), the value at the point found, and a copy of the
small results into host memory.  On a GPU each launch and each read costs the host tens to
hundreds of microseconds, most of a short call: PatternSearch of 15360 walkers x 20 iterations
keeps an H100 busy ~0.27 ms of a 1.2-1.7 ms call made so.

Where the solver says a run is short by its options alone (:meth:`Solver.one_program`) and the
call asks for nothing between chunks (see :func:`applies`), the run is one program instead: the
start, every phase's iterations, what the result reads of the final state (:meth:`Solver.report`
with :meth:`Solver.report_in_program`) and the convergence test, its small outputs written into
the GPU's pinned host memory, so that reading them is only the wait for the program.  It is
compiled once for the problem's functions and shapes (:func:`~multiwalk.compile_cache.shared_jit`,
kept across calls and in the program store); every such call runs it, the first one included, so
two calls with the same seed give the same bits.  Ctrl-C or SIGTERM during it lets the program
finish (it is short by construction) and the result says ``Status.INTERRUPTED``.  A repeated call
of the same problem with equal options finds the program, with what it was made from, in one
lookup (:func:`kept`), and plans anew only where something of that changed.

A solver with :attr:`Solver.one_program_split` (ReplicaExchange, PatternSearch on GPUs) runs it
placed as its chunks would be, ``devices=`` given or not: split over several devices, its start
constrained to the state's shardings so that each device makes its part, its small outputs
replicated (in each GPU's pinned host memory) and read from the first device's copy.  On two H200s
this took a 4.2M-chain ReplicaExchange call from 1.84x to 1.93x the speed of one device: the host
no longer stops the devices between the start, the phases and the value.
"""

from __future__ import annotations

import contextlib
import functools
import time
import warnings
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from . import compile_cache
from . import distributed as dist
from . import progress as prog
from .problem import Problem
from .result import Result, Status
from .solvers.base import Phase, RunPlan, Solver

__all__ = ["Prepared", "applies", "kept", "prepare", "run"]


def applies(problem: Any, solver: Solver, plan: RunPlan, *, between_chunks: bool, devices: Any) -> bool:
    """Whether :func:`run` may run this call, before the placement is known: nothing asked
    ``between_chunks`` (a progress bar asked for, a callback, a checkpoint, a resume, a writer, a
    time limit, a non-JAX objective), one process, no XLA options of the plan's, and either a
    solver whose one program may be split over devices (:attr:`Solver.one_program_split`) or no
    ``devices`` asked for on a machine of one device.  The solver's own word
    (:meth:`Solver.one_program`) is asked once the placement is known (:func:`placed_plan_fits`)."""
    return (not between_chunks and not plan.compiler_options and plan.max_chunk is None
            and type(solver).one_program is not Solver.one_program
            and (solver.one_program_split or (devices is None and jax.device_count() == 1))
            and solver.writer(problem) is None)


def placed_plan_fits(problem: Any, solver: Solver, plan: RunPlan, placement: Any) -> bool:
    """Whether the run, placed (``placement``: :class:`multiwalk.distributed.Placement`; ``plan``
    holds its mesh), is one program: on the default device, or split over several devices by a
    solver that allows it, without a note of a split refused, and the solver calls it short."""
    if placement.sharded:
        where_ok = solver.one_program_split
    else:
        where_ok = placement.devices[0] in (None, compile_cache.default_device()) and not placement.note
    return bool(where_ok and solver.one_program(problem, plan))


@dataclass(frozen=True)
class Prepared:
    """A short run's program for a problem and solver, kept (:func:`kept`) so that a repeated call
    finds it in one lookup: its run plan, the one-program decision and the program's own lookup
    (~0.2 ms of a ~1 ms call on an H200 host) are those of the first such call."""

    phases: tuple[Phase, ...]
    executable: Any  # (shared_arguments(problem)..., key) -> (state, small outputs)
    in_pinned_memory: bool  # the small outputs are written into the GPU's pinned host memory
    arrays_as_arguments: bool  # the plan's: the problem's arrays are the executable's arguments
    placement: Any  # multiwalk.distributed.Placement: the default device, or the devices it is split over

    @property
    def split(self) -> bool:
        """Whether the run is split over several devices (its key replicated over them)."""
        return bool(self.placement.sharded)

    def launch(self, problem: Any, key: jax.Array) -> tuple[Any, Any]:
        """The run from ``key`` (on the default device; replicated over the devices of a split
        run) on the problem's arrays and ``x0`` as they are now."""
        return self.executable(*compile_cache.shared_arguments(problem, self.arrays_as_arguments), key)


def kept(problem: Any, solver: Solver, key: jax.Array, devices: int | None = None) -> Prepared | None:
    """The :class:`Prepared` program of the last short call of ``problem`` and ``solver`` (equal
    options), where nothing it was made from has changed since: the problem's fingerprint (bounds,
    fixed values, data compiled in, shapes), its functions, the shapes and dtypes of its arrays,
    ``x0`` and the run's ``key`` (on the default device), ``devices`` (None or a count: the
    caller's part) and the machine's device count, and JAX's default device, float64 mode and
    random-number implementation; else None.  The caller looks up only calls with nothing between
    chunks; a solver without :attr:`Solver.one_program_split` never has one kept under a count of
    devices (:func:`applies`), so such a lookup finds nothing.  The solver's
    :meth:`~multiwalk.solvers.base.Solver.one_program` says why its decision may be reused."""
    if not isinstance(problem, Problem) or type(solver).one_program is Solver.one_program:
        return None  # (a solver that never runs one program: no fingerprint digested for nothing)
    held = compile_cache.kept(_slot(problem, solver))
    return held[1] if held is not None and held[0] == _made_from(problem, solver, key, devices) else None


def _slot(problem: Any, solver: Solver) -> tuple:
    """Where a problem's last short program for ``solver`` is kept: one slot, overwritten when
    anything it was made from changes (a problem's data changed in place call after call would
    otherwise fill the kept entries with programs never looked up again)."""
    return (id(problem), "one program call", solver)


def _made_from(problem: Any, solver: Solver, key: jax.Array, devices: int | None) -> tuple:
    """What a kept program was made from (:func:`kept`'s list), as a key compared on each lookup."""
    arguments = compile_cache.arguments_key((compile_cache.shared_arguments(problem, True), key))
    return compile_cache.small_key(problem, solver, "one program call", *compile_cache.user_functions(problem),
                                   bool(jax.config.jax_enable_x64), str(jax.config.jax_default_prng_impl), arguments,
                                   devices, jax.device_count())


def prepare(problem: Any, solver: Solver, plan: RunPlan, phases: list[Phase], placement: Any, keys: tuple,
            devices: int | None | bool, show: bool) -> tuple[Prepared, float]:
    """``(the program of the whole run placed as ``placement`` says, seconds spent compiling or
    finding it)``, kept for :func:`kept` (a :class:`Problem`'s) under ``devices`` (the call's: None
    or a count; False for a list of devices, which is never looked up).  ``keys``: the run's key
    on the default device (what :func:`kept` compares) and where the program takes it (replicated
    over a split run's devices).  ``show``: a status line while a first call compiles for over a
    second."""
    t0 = time.perf_counter()
    key, placed_key = keys
    with prog.CompileStatus(True) if show else contextlib.nullcontext():
        program, in_pinned_memory = _compiled(problem, solver, plan, phases, placement, placed_key)
    prepared = Prepared(tuple(phases), program.executable_for(placed_key), in_pinned_memory,
                        plan.arrays_as_arguments, placement)
    if isinstance(problem, Problem):
        compile_cache.keep(problem, _slot(problem, solver), (_made_from(problem, solver, key, devices), prepared))
    return prepared, time.perf_counter() - t0


def run(problem: Any, solver: Solver, prepared: Prepared, key: jax.Array, compile_seconds: float = 0.0) -> Result:
    """The whole run from ``key`` (the run's key where the program takes it: on the default device,
    or replicated over a split run's devices) by ``prepared``'s program; the solver's result, with
    ``stats["one_program"]`` True.  Ctrl-C or SIGTERM during the run ends it as it ends a chunk:
    the program finishes (it is short), and the result says ``Status.INTERRUPTED``.  A split run's
    replicated small outputs are read from their copy on the first device (in its pinned host
    memory on GPUs that have it)."""
    phases = prepared.phases
    t1 = time.perf_counter()
    ctrl_c = prog.CtrlC()
    try:
        state, small = prepared.launch(problem, key)
        if prepared.split and not prepared.in_pinned_memory:
            small, copying = prog.start_copies(small)
            t1 += copying  # a copy program's first compilation (once per process and shapes) is not the run's
            compile_seconds += copying
        elif not prepared.in_pinned_memory:  # in pinned host memory the program's end is the only wait
            for leaf in jax.tree_util.tree_leaves(small):
                leaf.copy_to_host_async()
        n_runs, report, converged = prog.fetch(small)
    finally:
        ctrl_c.restore()
    t_run = time.perf_counter() - t1
    done = [int(n) for n in n_runs]
    stats: dict[str, Any] = {
        "compile_seconds": compile_seconds, "chunks": 1, "devices": len(prepared.placement.devices),
        "one_program": True, "run_seconds": t_run,
        "iterations": {p.name: d for p, d in zip(phases, done)}, "loop_seconds": t_run,
    }
    # never a silent exit at the iteration limit: a solver with a convergence test that did not meet it
    status = Status.INTERRUPTED if ctrl_c.pressed else Status.SUCCESS if bool(converged) else Status.MAX_STEPS
    reported = {} if report is None else {"reported": report}
    return solver.result(problem, state, done, status, stats, **reported)


def _whole_run(problem: Any, solver: Solver, plan: RunPlan, phases: list[Phase], shardings: Any,
               key: jax.Array) -> tuple:
    """``(state, (iterations run of each phase, report, converged))``: the run from ``key``, traced;
    ``shardings`` (a split run's: a tree like the state) split the start over the devices, each
    making its part, as the run's own start does; None on one device."""
    state = solver.init(problem, key)
    if shardings is not None:
        state = jax.lax.with_sharding_constraint(state, shardings)
    n_runs = []
    for i, phase in enumerate(phases):
        if phase.length == 0:
            n_runs.append(jnp.asarray(0, jnp.int32))
            continue
        state, n_run = solver.run_chunk(problem, state, i, jnp.asarray(phase.length, jnp.int32), plan=plan)
        n_runs.append(jnp.asarray(n_run, jnp.int32))
    report = solver.report(problem, state, plan)
    if report is not None:
        report = solver.report_in_program(problem, report)
    last = len(phases) - 1
    converged = solver.done(problem, state, last) if solver.checks_convergence else jnp.asarray(True)
    return state, (jnp.stack(n_runs), report, converged)


def _compiled(problem: Any, solver: Solver, plan: RunPlan, phases: list[Phase], placement: Any,
              key: jax.Array) -> tuple[Any, bool]:
    """``(the program (:func:`~multiwalk.compile_cache.shared_jit`), whether its small outputs are in
    pinned host memory)``, its executable for ``key`` kept or compiled now.  Split over devices
    (``placement``): the state split as the run in chunks splits it, the small outputs replicated,
    in the devices' pinned host memory on GPUs that have it (else in device memory, read through
    :func:`multiwalk.progress.start_copies`).  On one device: the small outputs in pinned host
    memory on a GPU that has it, else where JAX puts them.  Where XLA will not write this program's
    outputs there, it is compiled without, with one warning, and the devices are marked; an error
    of the run itself is raised by that compilation, before any mark or warning."""
    if placement.sharded:
        shardings, devices, refusals = placement.shardings, placement.devices, _NO_PINNED_SPLIT_OUTPUTS
        pinned = _pinned_split_outputs(placement)
        pinned_outputs = None if pinned is None else (shardings, pinned)
        plain_outputs, names = (shardings, placement.replicated), ("split pinned", "split")
        context = dist.mesh_context(placement.mesh)  # as the chunks' loops are compiled (collectives)
    else:
        device = compile_cache.default_device()
        shardings, devices, refusals = None, (device,), _NO_PINNED_OUTPUTS
        pinned_outputs, plain_outputs, names = _pinned_outputs(device), None, ("pinned", "device")
        context = contextlib.nullcontext()
    refused = None
    with context:
        if pinned_outputs is not None:
            try:
                program = _program(problem, solver, plan, phases, shardings, pinned_outputs, names[0])
                program.executable_for(key)
                return program, True
            except Exception as err:  # noqa: BLE001 - see the docstring
                refused = err
        program = _program(problem, solver, plan, phases, shardings, plain_outputs, names[1])
        program.executable_for(key)
    if refused is not None:
        refusals.update(devices)
        warnings.warn(f"a short run's results are read from {devices[0]} without pinned host memory "
                      f"({type(refused).__name__}: {str(refused)[:200]}); each read then costs a transfer "
                      "of its own", stacklevel=6)  # _compiled, prepare, _in_one_program, solve, its wrapper: the caller's line
    return program, False


def _program(problem: Any, solver: Solver, plan: RunPlan, phases: list[Phase], shardings: Any,
             out_shardings: Any, outputs: str) -> Any:
    """The whole run as a :func:`~multiwalk.compile_cache.shared_jit` of ``key``, kept across calls;
    ``outputs`` names where its small outputs go (``"pinned"``, ``"device"``, ``"split"``)."""
    name = f"one program {[tuple(p) for p in phases]} block {plan.loop_block} outputs {outputs}"
    return compile_cache.shared_jit(
        problem, solver, name, lambda p: lambda k: _whole_run(p, solver, plan, phases, shardings, k), out_shardings,
        arrays_as_arguments=plan.arrays_as_arguments)


# devices whose XLA would not write a short run's outputs into pinned host memory: on one device,
# and replicated over a split run's
_NO_PINNED_OUTPUTS: set[Any] = set()
_NO_PINNED_SPLIT_OUTPUTS: set[Any] = set()


def _pinned_outputs(device: Any) -> tuple | None:
    """``out_shardings`` that leave the state in ``device``'s memory and write the small outputs
    into its pinned host memory: a GPU's, where it has some; None elsewhere (a CPU reads in place)."""
    if device.platform != "gpu" or device in _NO_PINNED_OUTPUTS or not prog.has_pinned_host(device):
        return None
    return _shardings(device)


def _pinned_split_outputs(placement: Any) -> Any | None:
    """The sharding of a split run's small outputs in its GPUs' pinned host memory, replicated;
    None where a device is not a GPU with pinned host memory, or refused it before."""
    if not all(d.platform == "gpu" and d not in _NO_PINNED_SPLIT_OUTPUTS and prog.has_pinned_host(d)
               for d in placement.devices):
        return None
    return NamedSharding(placement.mesh, PartitionSpec(), memory_kind="pinned_host")


@functools.lru_cache(maxsize=8)
def _shardings(device: Any) -> tuple:
    """``device``'s memory and its pinned host memory, as shardings (made once: ~10 us a call)."""
    from jax.sharding import SingleDeviceSharding

    return SingleDeviceSharding(device), SingleDeviceSharding(device, memory_kind="pinned_host")
