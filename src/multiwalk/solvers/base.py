"""The contract between a solver and the one driver, :func:`multiwalk.solve`.

A solver is a small immutable object whose fields define the algorithm.  It works on a state
pytree (a NamedTuple of arrays) with pure functions; the driver owns the loop, the clock,
progress, checkpoints and Ctrl-C.  A run is a list of *phases* (burn-in, sampling, ...), each a
bounded number of iterations of ``step``; ``done`` may end a phase early (convergence).

Randomness: ``init`` gets one key; ``step`` derives its keys from that key and the global
iteration counter kept in the state, so the results do not depend on how the driver chunks
the loop, on a checkpoint/resume in between, or on the number of devices.

The contract, in one place (docs/architecture.md has the same table with who calls what):

* required: ``phases``, ``init``, ``step``, ``result`` (abstract here), and ``done``, ``check``,
  ``options``, whose defaults (never converges, accepts every problem, the dataclass fields) a
  solver overrides where they do not fit;
* optional, for devices: ``batch_axes``, ``batch_option``, ``state_memory``;
* optional, for speed: ``plan`` (one :class:`RunPlan` per solve: kernel form, compiler options,
  the longest chunk, data as arguments, running until the time limit), ``run_chunk`` and
  ``initial_state_fn`` (which receive that plan), ``traced_phase`` (one compiled loop for all
  the phases), ``report`` and ``report_ready`` (what ``result`` reads of the final state, made by
  the run's last program and read back with it), ``one_program`` and ``report_in_program`` (a
  short run as one program);
* optional, for the display and files: ``summary`` (progress bar), ``iterate`` (the current point,
  for ``solve(iteration_callback=...)``), ``writer`` (a :class:`Writer`
  the solver brings, such as LBFGS's printed table; files written as the run goes are writers
  handed to :func:`multiwalk.solve`);
* optional, for checkpoints: ``resumable_options``, ``convert_checkpoint``; ``problem_type``.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import numpy as np

from ..compile_cache import default_device, shared_jit
from ..problem import Problem
from ..result import Result, Status
from ._common import check_int_option, check_number_option  # noqa: F401  (the validators' old home)


def end_status(status: Status, success_message: str, found_finite: bool, failed_message: str) -> tuple[Status, str]:
    """A walkers' solver's final status and message: the driver's ``status``, or ``Status.FAILED``
    when no finite objective value was ever found (whatever stopped the run); the message is the
    status's own (:meth:`Status.describe`), or the solver's account of the run for ``SUCCESS``
    (``success_message``: what it ran) and ``FAILED`` (``failed_message``: what it evaluated)."""
    status = status if found_finite else Status.FAILED
    return status, status.describe({Status.SUCCESS: success_message, Status.FAILED: failed_message})


def value_at_point(problem: Problem, x: np.ndarray, found: float | np.floating) -> float | np.floating:
    """The value to report at the point a run found: chi2 of ONE full point ``x`` (n,) by the
    one-point program on the default device (compiled once for the problem's functions and
    shapes: :func:`~multiwalk.compile_cache.shared_jit`), or ``found`` (the run's own value) where that is
    not finite (no finite point was found: ``x`` is only a start).  A non-JAX objective
    (``backend="python"``) is evaluated on the host, one point, as in the run.

    A walker's value comes from the run's batched program, and XLA chooses its kernels by the
    batch each device holds (on the CPU, batches of 1024 points or more take other kernels that
    round differently), so the same ``x`` may get values an ulp apart on 1 and on 4 devices.
    Evaluated here, the reported value depends on ``x`` alone, not on how the run was split.  (A
    run that is one program computes it in that program: :meth:`Solver.report_in_program`.)"""
    if not np.isfinite(found):
        return found
    point = np.asarray(x, dtype=problem.dtype)
    one_point = point_value_program(problem)
    if one_point is None:  # a non-JAX objective: evaluated on the host, as in the run; no program to compile
        value = problem.host_objective.evaluate(point[None])[0]
    else:
        value = np.asarray(one_point(point))
    return reported_value(value, found)


def point_value_program(problem: Problem) -> Callable[[Any], jax.Array] | None:
    """:func:`value_at_point`'s one-point program, ``x (n,) of the problem's dtype -> chi2 ()``, for a
    solver that keeps the point on the device and reads the value back with its other results;
    None for a non-JAX objective (evaluated on the host)."""
    if getattr(problem, "host_objective", None) is not None:
        return None
    return shared_jit(problem, None, "value_at_point", lambda p: p.chi2_full, reads_x0=False)


def point_on_default_device(x: jax.Array) -> jax.Array | None:
    """``x`` (replicated when split over devices) as an array on the default device, where the
    one-point program (:func:`point_value_program`) runs, so the value does not depend on how the
    run was split; None when no copy of it is there.  A run on one device (the default, or the
    one ``solve(devices=[d])`` chose) gives ``x`` as it is: its value is evaluated there."""
    if len(x.sharding.device_set) == 1:
        return x
    if not x.is_fully_replicated:
        return None
    default = default_device()
    return next((shard.data for shard in x.addressable_shards if shard.device == default), None)


def point_value_ahead(problem: Problem) -> Callable[[], Any] | None:
    """The compilation of :func:`value_at_point`'s one-point program for the point it is given (a
    host array (n,) of the problem's dtype), traced and lowered now and compiled when called (the
    driver calls it on a thread of its own while the loop compiles); None where it is kept or
    there is none (a non-JAX objective)."""
    one_point = point_value_program(problem)
    return None if one_point is None else one_point.lower_for(np.zeros(problem.n, problem.dtype))


def reported_value(value: Any, found: float | np.floating) -> float | np.floating:
    """The one-point program's ``value`` as :func:`value_at_point` reports it: ``found`` (the run's
    own value) where that is not finite, else ``value`` in the type of ``found`` (a NumPy scalar of
    the run's dtype, or a Python float)."""
    if not np.isfinite(found):
        return found
    return found.dtype.type(value) if isinstance(found, np.generic) else float(value)


class Phase(NamedTuple):
    """One stretch of iterations with the same ``step`` code: a name and a length."""

    name: str
    length: int


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """How one solve runs a solver here, decided once per :func:`multiwalk.solve` call by
    :meth:`Solver.plan` and handed to the solver where it needs it (``initial_state_fn``,
    ``run_chunk``), so no solver reads devices or kernels from ambient globals.  Results never
    depend on the plan, except through the state's layout a solver may choose from it."""

    #: the devices the run may be split over: ``solve(devices=k)``'s k (every device when not
    #: given); a solver whose state layout depends on the split decides with it before the start
    devices: int = 1
    #: the 1-D ``jax.sharding.Mesh`` the loop is compiled for, set by the driver once the state is
    #: placed; None on one device.  Solvers that place their own collectives run them on it.
    mesh: Any = None
    #: the solver's kernel plan (which form, XLA or Pallas, runs and why), or None
    kernel: Any = None
    #: XLA options for the compiled loop, ``(name, value)`` pairs (part of the loop's cache key)
    compiler_options: tuple[tuple[str, Any], ...] = ()
    #: the most iterations one chunk may run (a ring buffer of recent steps that a writer reads),
    #: or None: as many as ``chunk_seconds`` allows
    max_chunk: int | None = None
    #: whether the problem's data, sigma and ``args`` arrays go to the loop as arguments (a new
    #: dataset of the same shapes reuses it); False for kernels that read them as constants
    arrays_as_arguments: bool = True
    #: with ``solve(time_limit=T)``: the last phase is unbounded and reaching T is success (a
    #: solver's chunk may be traced otherwise: PatternSearch's rounds; part of the loop's cache key)
    until_time_limit: bool = False
    #: iterations per trip of the chunk's ``while_loop``, run by an inner loop of that fixed trip
    #: count (:meth:`Solver.loop_block`); the driver makes every chunk a multiple of it.  1 (default):
    #: one iteration a trip
    loop_block: int = 1

    @property
    def mesh_size(self) -> int:
        """The devices the loop is split over (1 without a mesh)."""
        return 1 if self.mesh is None else int(self.mesh.size)

    @property
    def platform(self) -> str:
        """The platform the run goes to (``"cpu"``, ``"gpu"``, ...): its mesh's devices', else the
        default device's."""
        return (self.mesh.devices.flat[0] if self.mesh is not None else default_device()).platform


class Writer(Protocol):
    """What writes as the run goes (ODAT-SE's per-step files, a printed table), as emcee's backends:
    the driver calls ``write`` after each chunk that ran iterations ``first+1 .. last`` of the
    current phase, and ``flush`` before each checkpoint and before it returns, so what was written
    matches the checkpoint (a writer that hands work to threads waits for them there)."""

    def write(self, problem: Any, state: Any, first: int, last: int) -> None: ...

    def flush(self) -> None: ...


class Iterate(NamedTuple):
    """What ``solve(iteration_callback=f)`` hands ``f`` after every iteration (host arrays)."""

    x: np.ndarray  # (n,) the solver's current point (full vector, fixed parameters included); (K, n) for K starts
    fun: np.ndarray | float  # the objective at x: a float, or (K,) for K starts
    iteration: int  # iterations done in the current phase
    phase: str  # the phase's name ("lbfgs", "search", "burn-in", "sampling", ...)


def asks_to_stop(value: Any) -> bool:
    """Whether an iteration callback's return value asks to stop the run: True, NumPy's True
    (``return it.fun < tol`` gives one) or a 0-d boolean array holding True; anything else
    (None, numbers, other objects) does not."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return isinstance(value, (np.ndarray, jax.Array)) and value.shape == () and value.dtype == bool and bool(value)


class Solver(abc.ABC):
    """Base class: subclasses are frozen dataclasses.  Required: ``phases``, ``init``, ``step``,
    ``result`` (and ``done``, ``check``, ``options`` where their defaults do not fit); the other
    methods are optional hooks with defaults (the module docstring lists them by purpose)."""

    #: option names whose value may differ when resuming a checkpoint: ones that lengthen the
    #: last phase (``niter`` of a sampler; the driver checks no phase gets shorter than what
    #: was done) and ones that do not change results (loop unrolling).
    resumable_options: tuple[str, ...] = ()

    #: the kind of problem the solver runs: :class:`Problem` for the walkers' solvers; image
    #: solvers name theirs (``multiwalk.deconv.Deconvolution``), which the driver checks before
    #: anything else and asks for a ``fingerprint()`` in place of Problem's digest.
    problem_type: type = Problem

    #: whether the solver samples with the problem's ``log_prior`` (the driver refuses a problem
    #: with a prior for a solver that would ignore it)
    samples_log_prior: bool = False

    #: whether the solver honours the problem's periodic parameters (wraps its moves into the box);
    #: the driver refuses a problem with a free periodic parameter for a solver that would treat it
    #: as a plain bound
    wraps_periodic: bool = False

    #: whether ``step`` (and ``init``, if it evaluates at all) evaluates the objective once, on one
    #: batch of static shape, outside any loop or cond: a non-JAX objective then runs as a loop on
    #: the host between two compiled programs a step, neither holding a host callback, which JAX's
    #: persistent cache keeps for the next process (:mod:`multiwalk.host_loop`)
    evaluates_once_per_step: bool = False

    #: whether ``result`` reports ``fun`` by :func:`value_at_point` at a host point: a solve that
    #: compiles its loop compiles that one-point program beside it (:func:`point_value_ahead`)
    reports_value_at_point: bool = False

    #: whether ``step`` (and ``done``) can take ``phase`` as a traced int32 rather than a static
    #: Python int: the driver then compiles ONE loop for all the phases where :meth:`one_loop` says
    #: so, the phase index an argument of it, so the objective is compiled once rather than once per
    #: phase (ReplicaExchange's burn-in and sampling).  Given a traced phase, such a step branches
    #: with ``jnp.where`` / ``lax.cond``, never a Python ``if``; it must still accept a plain int (a
    #: loop per phase, or a step called outside the driver), on which it may branch in Python
    traced_phase: bool = False

    #: whether a run that :meth:`one_program` calls short is one program also when ``devices=`` is
    #: given or the run is split over several devices (its state split as in chunks, its report
    #: with :meth:`report_in_program`'s additions replicated); else one program only on a machine of
    #: one device without ``devices=``
    one_program_split: bool = False

    def one_loop(self, problem: Problem, platform: str) -> bool:
        """Whether this run compiles ONE loop for all the phases (the phase a traced argument) on a
        device of ``platform`` ("cpu", "gpu", ...): where ``traced_phase``, unless a subclass weighs it
        against a loop per phase (ReplicaExchange)."""
        return self.traced_phase

    # ----------------------------------------------------------------- required
    def check(self, problem: Problem) -> None:
        """Raise ValueError/TypeError if this solver cannot run ``problem`` (before compiling)."""

    @abc.abstractmethod
    def phases(self, problem: Problem) -> list[Phase]:
        """The phases of a run, in order."""

    @abc.abstractmethod
    def init(self, problem: Problem, key: jax.Array) -> Any:
        """The initial state pytree."""

    @abc.abstractmethod
    def step(self, problem: Problem, state: Any, phase: int) -> Any:
        """One iteration of phase ``phase`` (a static int; a traced int32 where ``traced_phase``);
        returns the new state."""

    def done(self, problem: Problem, state: Any, phase: int) -> jax.Array:
        """Whether the phase has converged and can stop early (a traced bool)."""
        return jax.numpy.asarray(False)

    @property
    def checks_convergence(self) -> bool:
        """Whether this solver overrides :meth:`done` (a convergence test that may end a phase early);
        without one, every chunk runs all its iterations."""
        return type(self).done is not Solver.done

    @abc.abstractmethod
    def result(
        self, problem: Problem, state: Any, done: list[int], status: Status, stats: dict[str, Any]
    ) -> Result:
        """Build the result from the final state; ``done[i]`` iterations of phase i were run."""

    def start_result_reads(self, problem: Problem, state: Any) -> None:
        """Start the copies to the host of what :meth:`done` (the driver's test of the final state)
        and :meth:`result` read of the final state (:func:`multiwalk.result.start_reads`), before
        either reads: they then wait for one transfer, not one each.  Default: none started."""

    def options(self) -> dict[str, Any]:
        """The fields that define the algorithm, as plain Python values (for saving)."""
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            out[f.name] = v.tolist() if hasattr(v, "tolist") else v
        return out

    # ----------------------------------------------------------------- optional: devices
    def batch_axes(self, problem: Problem, state: Any) -> Any:
        """Which axis of each state leaf indexes walkers, for ``solve(..., devices=...)``.

        A pytree like ``state`` (which may hold only shapes: ``jax.eval_shape``) with, per leaf,
        the axis the driver splits over devices, or None to keep the leaf whole on every device.
        The default, None, declares nothing: the run stays on one device.  Whatever is declared,
        results are those of one device (XLA inserts the collectives), up to the rounding of sums
        over split axes; what it changes is what each device stores and computes."""
        return None

    def batch_option(self, problem: Problem) -> str:
        """The option that sets the length of the batch axes (named in error messages)."""
        return "the batch size"

    def unsplit_reason(self, problem: Problem) -> str | None:
        """Why this solver, as configured, declares no batch axis, and what would let it split over
        devices (named in the error of ``devices=k``); None: the default message."""
        return None

    def state_memory(self, problem: Problem) -> tuple[int, str] | None:
        """``(bytes, what to lower)``: the size of the state ``init`` would make for ``problem``,
        computed from the options, the problem's size and dtype (nothing traced or compiled), and
        the options that set it; the driver raises before compiling when it exceeds the memory of
        the devices (:func:`~multiwalk.solvers._common.check_state_fits`).  None: not estimated."""
        return None

    # ----------------------------------------------------------------- optional: how it runs
    def plan(self, problem: Problem, devices: int, time_limit: float | None) -> RunPlan:
        """The :class:`RunPlan` of a solve of ``problem`` that may use ``devices`` devices, with
        ``solve(time_limit=...)``; the driver calls it once, after ``check``, and adds the mesh
        once the state is placed.  The default: XLA's own compilation, no chunk limit, the data
        as arguments, phases as ``phases`` says."""
        return RunPlan(devices=devices)

    def initial_state_fn(
        self, problem: Problem, shardings: Any = None, plan: RunPlan | None = None
    ) -> Callable[[jax.Array], Any]:
        """``key -> initial state``, jitted (the driver calls this, not ``init``, in every solve()
        call; through :func:`multiwalk.compile_cache.shared_jit`, so a repeated solve() of the same
        problem, or of a new problem of the same functions and shapes, reuses the compiled start;
        an override should jit through it or :func:`~multiwalk.compile_cache.cached_jit` too).

        ``shardings`` (a pytree like the state, from ``batch_axes``; only passed when the run is
        split over devices): the state is created split, each device computing its own part.
        ``plan``: this solve's :meth:`plan` (None: the default plan on one device).  Solvers whose
        start needs large arrays (an ``x0`` of 1e7 values) override it to pass them as arguments
        rather than compile them into the program as constants."""
        return shared_jit(problem, self, "init", lambda p: (lambda k: self.init(p, k)), shardings)

    def run_chunk(
        self, problem: Problem, state: Any, phase: int, n: jax.Array, plan: RunPlan | None = None
    ) -> tuple[Any, jax.Array]:
        """Up to ``n`` (traced int32) iterations of ``phase``, fewer if ``done``: ``(state, iterations run)``.

        The driver jits this once per phase (once for all phases where ``traced_phase``: ``phase``
        is then a traced int32; the trip count is dynamic, so one executable serves chunks of every
        length) with this solve's ``plan`` (the mesh it compiles for).  The default
        is a ``while_loop`` over ``step``; a solver may run several iterations per loop trip
        (PatternSearch's Pallas form: one kernel per round) as long as the result is that of ``n`` steps."""

        return self.steps_while(problem, state, phase, n, self.step, 1 if plan is None else plan.loop_block)

    def loop_block(self, problem: Problem, platform: str) -> int:
        """Iterations one trip of the chunk's loop may run on ``platform``, in an inner loop of that
        fixed trip count (1, the default: one).  On a GPU, XLA reads a ``while_loop``'s condition
        back on the host at every trip, a wait of the device for the host; an inner loop of known
        trip count needs none, so a block of 8 waits once in 8 iterations.  Only for a solver without
        ``done`` (every chunk runs all its iterations); the driver uses the largest divisor of it
        that divides every phase's length (and a resumed run's position), else 1."""
        return 1

    def steps_while(
        self, problem: Problem, state: Any, phase: int, n: jax.Array, step: Callable[[Problem, Any, int], Any],
        block: int = 1,
    ) -> tuple[Any, jax.Array]:
        """:meth:`run_chunk`'s ``while_loop``: up to ``n`` calls of ``step(problem, state, phase)``,
        fewer once ``done``: ``(state, iterations run)`` (for an override that only changes the step).
        ``block`` > 1 (the plan's ``loop_block``; the driver's ``n`` is a multiple of it): trips of an
        inner loop of ``block`` iterations while a whole block fits in ``n``, so never more than ``n``
        (``n`` not a multiple: its largest multiple runs, and is what is returned); only for a
        solver without ``done``, which the inner loop could not test."""
        if block > 1:
            if self.checks_convergence:  # a block would run past the iteration that converged
                raise ValueError(f"{type(self).__name__} has a convergence test (done), so its loop runs one "
                                 f"iteration a trip: block must be 1, got {block}")

            def run_block(carry):
                i, s = carry
                return i + block, jax.lax.fori_loop(0, block, lambda _, s: step(problem, s, phase), s)

            n_run, state = jax.lax.while_loop(lambda carry: carry[0] + block <= n, run_block,
                                              (jax.numpy.asarray(0, jax.numpy.int32), state))
            return state, n_run

        def cond(carry):
            i, s = carry
            return (i < n) & ~self.done(problem, s, phase)

        def body(carry):
            i, s = carry
            return i + 1, step(problem, s, phase)

        n_run, state = jax.lax.while_loop(cond, body, (jax.numpy.asarray(0, jax.numpy.int32), state))
        return state, n_run

    # ----------------------------------------------------------------- optional: display, files, checkpoints
    def summary(self, problem: Problem, state: Any) -> dict[str, jax.Array]:
        """A few scalars for the progress bar (best value, acceptance, ...)."""
        return {}

    def iterate(self, problem: Problem, state: Any) -> tuple[np.ndarray, np.ndarray | float] | None:
        """``(x, fun)`` on the host: the point a per-iteration callback is shown (a local solver's
        current iterate, a global one's best so far); None (the default): the solver has none, and
        ``solve(iteration_callback=...)`` is refused before anything compiles."""
        return None

    def report(self, problem: Problem, state: Any, plan: RunPlan | None = None) -> Any:
        """Small arrays that ``result`` reads of the final state (a best point, counts summed over
        walkers), traced at the end of every chunk's compiled program (``plan``: this solve's, with
        the mesh it runs on), so the program that ends the run makes them and the driver reads them
        back with its progress summary, in one transfer: ``result`` then gets them on the host as
        ``reported=`` (NumPy arrays), and needs neither a program nor a read of its own for them.
        None (the default): none, and ``result`` is called without ``reported``.  A solver that
        gives a report takes ``reported=None`` in ``result`` (None: the run did not end with a
        chunk that was asked to end it, e.g. a time limit, Ctrl-C, a resume with nothing left)."""
        return None

    def report_ready(self, problem: Problem, report: Any) -> Any:
        """The report of the chunk that ends the run (device arrays, its program just queued), with
        what small programs on it add (the one-point value at the best point), queued now, before the
        driver waits for the chunk, and read back with it.  Default: the report as it is."""
        return report

    def report_in_program(self, problem: Problem, report: Any) -> Any:
        """:meth:`report_ready`'s additions made inside the program that ends the run (``problem``
        a copy holding traced arrays), for a run that is one program (:meth:`one_program`).
        Default: the report as it is."""
        return report

    def one_program(self, problem: Problem, plan: RunPlan) -> bool:
        """Whether a run of ``problem`` under ``plan`` is short by its options alone (seconds at
        most for the objectives it expects), so that a call which asks for nothing between chunks
        (no ``progress=True``, callback, iteration callback, checkpoint, resume, writer, time limit
        or non-JAX objective; one process; no XLA options in ``plan``; one device and no
        ``devices`` unless :attr:`one_program_split`) runs it as ONE program: the start, every
        phase, :meth:`report` with :meth:`report_in_program`, and :meth:`done`, its small outputs
        read back once
        (:mod:`multiwalk.one_program`).  Such a run is not interrupted between chunks: Ctrl-C lets
        it finish and its result says ``INTERRUPTED``.  A solver that says True once for a problem
        has its program kept, and a repeated call with equal options finds it without calling
        :meth:`plan`, :meth:`writer` or this again (:func:`multiwalk.one_program.kept`): their answers
        must follow from the options, the problem's fingerprint, functions and shapes, and the
        devices asked for, alone.  Asked once the run is placed: ``plan.mesh`` is a split run's (a
        solver with :attr:`one_program_split` is asked first without it, and must not say False
        there where it would say True placed).
        Default: False."""
        return False

    def writer(self, problem: Problem) -> Writer | None:
        """A :class:`Writer` the solver brings to every run of ``problem`` (LBFGS: the printed
        iteration table), called by the driver like those handed to ``solve(writer=...)``; None
        (the default): none."""
        return None

    def convert_checkpoint(self, fresh_state: Any, saved_layout: list[str], leaves: list[np.ndarray]) -> list | None:
        """A checkpoint's arrays ``leaves``, saved from a state laid out as ``saved_layout`` (its
        NamedTuple type names), converted to the leaves of ``fresh_state``'s layout, when the solver
        keeps the same run in several forms (LBFGS: one-pass rings or stored pairs); None (the
        default): no conversion, the driver says the layouts differ."""
        return None
