"""The one driver: ``solve(problem, solver)`` runs every solver.

It compiles one loop per phase (``lax.while_loop`` over ``solver.step`` with a dynamic trip
count, so chunks of any length reuse the same executable), then calls it in chunks of about
``chunk_seconds`` of work.  Between chunks it updates the progress bar, writes the checkpoint,
and checks the clock; Ctrl-C or the time limit end the run with the last finished chunk's
state, so nothing computed is lost.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import compile_cache
from . import distributed as dist
from .identity import problem_identity, refuse_other_problem
from .problem import Problem
from .result import Result, Status
from .solvers._common import check_callable_option, check_state_fits
from .solvers.base import Phase, Solver

__all__ = ["solve"]

CHECKPOINT_VERSION = 1


def _check_run_options(problem, solver, seed, time_limit, chunk_seconds, checkpoint_every, callback) -> None:
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
    if time_limit is not None and not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise ValueError(f"time_limit must be a positive number of seconds or None, got {time_limit!r}")
    if not (isinstance(chunk_seconds, (int, float)) and chunk_seconds > 0):
        raise ValueError(f"chunk_seconds must be a positive number, got {chunk_seconds!r}")
    if not (isinstance(checkpoint_every, (int, float)) and checkpoint_every >= 0):
        raise ValueError(f"checkpoint_every must be a non-negative number of seconds, got {checkpoint_every!r}")
    check_callable_option("callback", callback, "a function callback(info: dict), called after each chunk")


# ---------------------------------------------------------------------------- checkpoints
def _write_checkpoint(path: Path, state: Any, meta: dict[str, Any]) -> None:
    """Write the state atomically: a crash while writing leaves the previous file intact.

    A state split over devices is gathered whole; under ``jax.distributed`` every process
    takes part in the gather (a collective) and process 0 writes."""
    leaves = jax.tree_util.tree_leaves(dist.to_host(state))
    if not dist.is_writer():
        return
    arrays = {f"leaf_{i:04d}": leaf for i, leaf in enumerate(leaves)}
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, __meta__=np.array(json.dumps(meta)), **arrays)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # no stray half-written file beside the checkpoint
        raise


def _check_checkpoint_path(path: Path, label: str) -> None:
    """Raise before anything compiles unless a checkpoint can be written at ``path`` (``label``
    names the argument in the message): its folder exists and takes a new file, and ``path``
    is not a folder.  The probe file is the write's own ``.tmp``, removed at once."""
    folder = path.parent
    if not folder.exists():
        raise FileNotFoundError(f"{label}: folder {str(folder)!r} does not exist")
    if not folder.is_dir():
        raise ValueError(f"{label}: {str(folder)!r} is a file, not a folder: put the checkpoint in a folder")
    if path.is_dir():
        raise ValueError(f"{label} is a folder: give a file name, such as {str(path / 'checkpoint.npz')!r}")
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb"):
            pass
        tmp.unlink()
    except OSError as err:
        raise ValueError(f"{label}: a file cannot be written in {str(folder)!r} ({err.strerror or err}): "
                         "give a path in a folder you can write to") from None


def _read_checkpoint(path: Path, label: str | None = None) -> tuple[dict[str, Any], list[np.ndarray]]:
    """``(meta, leaves)`` of a checkpoint; a file that is missing, not a checkpoint, cut short or
    altered (the zip's checksums) is a FileNotFoundError / ValueError naming it (``label``:
    how the message names it, default ``resume='path'``)."""
    label = f"resume={str(path)!r}" if label is None else label
    try:
        with np.load(path, allow_pickle=False) as npz:
            meta = json.loads(str(npz["__meta__"]))
            leaves = [npz[f"leaf_{i:04d}"] for i in range(meta["n_leaves"])]
    except FileNotFoundError:
        raise FileNotFoundError(f"{label}: no such checkpoint file") from None
    except Exception as err:  # noqa: BLE001 - zipfile.BadZipFile, EOFError, zlib.error, a bad header...
        raise ValueError(
            f"{label} is not a multiwalk checkpoint, or it is damaged (cut short or altered: {type(err).__name__}: "
            f"{err}): resume from an intact copy, or start the run anew"
        ) from err
    return meta, leaves


def _state_layout(state: Any) -> list[str]:
    """The names of the state's NamedTuple types, outermost first (e.g. ``LBFGSRun``, ``OnePassState``):
    written into checkpoints, so a resume whose solver lays its state out in another form (LBFGS's
    one-pass rings vs its stored pairs) is told so instead of failing on an array's shape."""
    names: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            names.append(type(node).__name__)
        if isinstance(node, (tuple, list)):
            for child in node:
                walk(child)
        elif isinstance(node, dict):
            for key in sorted(node):
                walk(node[key])

    walk(state)
    return names


def _restore(solver: Solver, fresh_state: Any, meta: dict[str, Any], leaves: list[np.ndarray], path: Path) -> Any:
    """Put the checkpoint's arrays into a state shaped for ``solver`` (numpy arrays; the driver
    puts them on the devices, split or not, so a run may resume on another number of devices).

    Buffers that grew because a resumable option grew (``niter``) keep their saved prefix.
    """
    if meta.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"{path}: checkpoint version {meta.get('version')} is not {CHECKPOINT_VERSION}")
    if meta["solver"] != type(solver).__name__:
        raise ValueError(f"{path} holds a {meta['solver']} run, not a {type(solver).__name__} run")
    now = solver.options()
    for name, saved in meta["options"].items():
        if name in solver.resumable_options:
            continue
        if now.get(name) != saved:
            raise ValueError(
                f"{path} was written with {name}={saved!r} but the solver now has {name}={now.get(name)!r}: "
                f"resume with the same options (only {', '.join(solver.resumable_options) or 'none'} may change)"
            )
    saved_layout, layout = meta.get("layout"), _state_layout(fresh_state)
    if saved_layout is not None and saved_layout != layout:
        converted = solver.convert_checkpoint(dist.to_host(fresh_state), saved_layout, leaves)
        if converted is not None:
            leaves, saved_layout = converted, layout
    if saved_layout is not None and saved_layout != layout:
        # e.g. LBFGS: kernel="onepass" (or "auto" on one GPU in float64) keeps rings, the other forms
        # the stored pairs; say which options were saved, as the shapes alone would blame the problem
        changed = {k: (meta["options"].get(k), now.get(k)) for k in solver.resumable_options
                   if meta["options"].get(k) != now.get(k)}
        said = ", ".join(f"{k}={a!r} then, {b!r} now" for k, (a, b) in changed.items())
        raise ValueError(
            f"{path} holds a {type(solver).__name__} run whose state is laid out as {'/'.join(saved_layout)}, but this solver "
            f"makes one laid out as {'/'.join(layout)} here ({said or 'the same options'}): the form was chosen "
            "by an option or by the machine (backend, number of devices); resume with the options and on the "
            "kind of machine that wrote it"
        )
    fresh_leaves, treedef = jax.tree_util.tree_flatten(dist.to_host(fresh_state))
    if len(fresh_leaves) != len(leaves):
        # e.g. a state whose fields changed between multiwalk versions (mw.Exchange's layout
        # changed in 6376614): say what differs and what to do, not only that it differs
        raise ValueError(
            f"{path}: the checkpoint holds {len(leaves)} state arrays but a {type(solver).__name__} state "
            f"now has {len(fresh_leaves)}: it was written by another version of multiwalk or for another "
            "problem; resume it with the version that wrote it, or start the run anew"
        )
    out = []
    for new, old in zip(fresh_leaves, leaves):
        if new.shape == old.shape:
            out.append(np.asarray(old, dtype=new.dtype))
        elif new.shape[1:] == old.shape[1:] and new.shape[0] >= old.shape[0]:
            grown = new.copy()
            grown[: old.shape[0]] = old
            out.append(grown)
        else:
            raise ValueError(
                f"{path}: saved array of shape {old.shape} does not fit the state's {new.shape}; "
                "was it written for another problem, or by another form of the solver (chosen by an option "
                "such as LBFGS's kernel, or by the machine)?"
            )
    return jax.tree_util.tree_unflatten(treedef, out)


# ---------------------------------------------------------------------------- progress
class _Progress:
    """A tqdm bar over all iterations of all phases; silent when disabled."""

    def __init__(self, enabled: bool, total: int | None, initial: int) -> None:
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="it", dynamic_ncols=True, leave=True)

    def update(self, n: int, phase: str, info: dict[str, float]) -> None:
        if self.bar is None:
            return
        self.bar.set_description(phase)
        self.bar.set_postfix({k: f"{v:.4g}" for k, v in info.items()}, refresh=False)
        self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _chunk_runner(problem: Any, solver: Solver, phase: int, static: Any) -> Callable:
    """``(state, n, arrays) -> (state, n_run)``: up to ``n`` steps of ``phase``, fewer if
    ``solver.done`` (``solver.run_chunk``: by default a ``while_loop`` over ``step``).

    The trip count is dynamic, so one executable serves chunks of every length; ``arrays`` are
    the problem's data, sigma and ``args`` arrays (:func:`~multiwalk.compile_cache.problem_arrays`), arguments rather
    than constants, so one executable also serves every dataset of the same shapes.
    """

    def run_chunk(state: Any, n: jax.Array, arrays: Any) -> tuple[Any, jax.Array]:
        return solver.run_chunk(compile_cache.with_arrays(problem, arrays, static), state, phase, n)

    return run_chunk


def _key(seed: int) -> jax.Array:
    """The run's key from a 64-bit seed: both halves count (PRNGKey alone keeps 32 bits)."""
    key = jax.random.PRNGKey(seed & 0xFFFFFFFF)
    return jax.random.fold_in(key, seed >> 32) if seed >> 32 else key


class _CtrlC:
    """While a run is on: the first SIGINT (Ctrl-C) or SIGTERM sets ``pressed``, a second raises
    KeyboardInterrupt.

    SIGTERM counts as a Ctrl-C because it is how batch systems end a job (SLURM sends it at the
    time limit, then SIGKILL after a grace period; ``kill`` sends it by default): the run stops
    after the chunk in flight, writes its checkpoint and returns the partial result instead of
    dying with nothing saved.
    """

    SIGNALS = ("SIGINT", "SIGTERM")

    def __init__(self) -> None:
        self.pressed = False
        self.forced = False
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                signum = getattr(signal, name, None)
                if signum is not None:  # SIGTERM cannot be caught everywhere (Windows has no handler for it)
                    try:
                        self._previous[signum] = signal.signal(signum, self._handle)
                    except (OSError, ValueError):
                        pass

    def _handle(self, signum: int, frame: Any) -> None:
        if self.pressed:
            self.forced = True
            raise KeyboardInterrupt
        self.pressed = True

    def restore(self) -> None:
        for signum, previous in self._previous.items():
            # None: the previous handler was not set from Python; the default is what was there
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        self._previous = {}


def _deleted(state: Any) -> bool:
    """Whether any array of ``state`` was donated away (a run aborted inside a chunk)."""
    return any(getattr(leaf, "is_deleted", lambda: False)() for leaf in jax.tree_util.tree_leaves(state))


def _compiled_chunk_runner(
    problem: Problem, solver: Solver, phase: int, state: Any, placement: dist.Placement | None = None
) -> tuple[Any, Any]:
    """The compiled ``_chunk_runner`` for this problem, solver, phase, state layout and device
    placement (the state's shardings are the loop's input and output shardings, so the state
    stays split from chunk to chunk and is donated in place), and the problem's arrays to pass
    it (:func:`~multiwalk.compile_cache.problem_arrays`; on every device when the state is split)."""
    arrays, static = compile_cache.problem_arrays(problem, solver)
    sharded = placement is not None and placement.sharded
    if sharded and arrays is not None:
        arrays = dist.place(arrays, placement.replicated)
    avals = tuple((tuple(np.shape(x)), str(x.dtype)) for x in jax.tree_util.tree_leaves(state))
    fingerprint = compile_cache.fingerprint(problem, True) if arrays is not None else compile_cache.full_fingerprint(problem)
    options = dict(solver.compiler_options(problem))  # e.g. command buffers for a loop of small GPU kernels
    common = (
        fingerprint, solver, phase, jax.tree_util.tree_structure(state), avals,
        placement.key() if sharded else (), tuple(sorted(options.items())),
    )
    if arrays is None:  # compiled for this very problem object
        key = (id(problem), *common)
    else:  # any problem with these functions and this fingerprint can use it
        key = ("functions", problem._user_fn, problem._user_vg, *common)
    compiled = compile_cache.loop(key)
    if compiled is None:
        if sharded:
            rep = placement.replicated
            runner = jax.jit(
                _chunk_runner(problem, solver, phase, static), donate_argnums=0,
                in_shardings=(placement.shardings, rep, rep), out_shardings=(placement.shardings, rep),
            )
        else:
            runner = jax.jit(_chunk_runner(problem, solver, phase, static), donate_argnums=0)
        with dist.mesh_context(placement.mesh if sharded else None):  # for solvers that place collectives
            lowered = runner.lower(state, jnp.asarray(1, jnp.int32), arrays)
            compiled = None
            if options:
                try:
                    compiled = lowered.compile(compiler_options=options)
                except Exception as e:  # noqa: BLE001 - options are for speed only: an XLA that refuses them still runs
                    warnings.warn(f"{type(solver).__name__}: XLA refused the compiler options {options} "
                                  f"({type(e).__name__}: {str(e)[:300]}); compiling the loop without them", stacklevel=2)
            if compiled is None:
                compiled = lowered.compile()
        # a loop compiled for this very problem object is forgotten once that is garbage
        compile_cache.keep_loop(key, compiled, owner=problem if arrays is None else None)
    return compiled, arrays


def _summary_runner(problem: Any, solver: Solver, state: Any, out_shardings: Any) -> tuple[Callable, tuple[int, ...]]:
    """``(summary, used)``: the compiled progress summary, called as ``summary([leaves[i] for i in used])``
    with the state's ``leaves`` that ``solver.summary`` reads (LBFGS: 2 of 53, 3 with several starts), returning its dict
    of scalars on the device.

    Only those leaves are passed: dispatching an executable costs the host ~2 us per argument
    (~100 us for a state of 51 leaves on a CPU), paid after every chunk.  The others are zeros of
    their shapes inside the trace (a summary may read a leaf's shape, never its values), which XLA
    drops.  Which leaves are read is found by tracing once, kept like the start (:func:`~multiwalk.compile_cache.cached_jit`)."""
    leaves, treedef = jax.tree_util.tree_flatten(state)
    avals = tuple((tuple(np.shape(x)), x.dtype) for x in leaves)
    # the whole layout names the executable: a summary may use an unread leaf's shape as a constant
    layout = hashlib.blake2b(repr((treedef, avals)).encode(), digest_size=16).hexdigest()
    cache_key = compile_cache.small_key(problem, solver, "summary inputs", layout)
    used = compile_cache.kept(cache_key)
    if used is None:
        def of_all(*xs: Any) -> Any:
            return solver.summary(problem, jax.tree_util.tree_unflatten(treedef, xs))

        jaxpr = jax.make_jaxpr(of_all)(*leaves).jaxpr
        read = {id(v) for eqn in jaxpr.eqns for v in eqn.invars} | {id(v) for v in jaxpr.outvars}
        # a leaf of an extended dtype (a typed PRNG key) has no zeros to stand in: pass it
        used = tuple(i for i, v in enumerate(jaxpr.invars) if id(v) in read or not isinstance(avals[i][1], np.dtype))
        compile_cache.keep(problem, cache_key, used)
    kept = set(used)

    def summary_of(used_leaves: list[Any]) -> Any:
        it = iter(used_leaves)
        xs = [next(it) if i in kept else jnp.zeros(shape, dtype) for i, (shape, dtype) in enumerate(avals)]
        return solver.summary(problem, jax.tree_util.tree_unflatten(treedef, xs))

    return compile_cache.cached_jit(problem, solver, f"summary {layout}", summary_of, out_shardings), used


def _fetch(tree: Any) -> Any:
    """``tree`` of small device arrays as numpy arrays, in one round trip: every copy is started
    before the first is waited for.  What ``jax.device_get`` does, without its per-leaf checks
    (on a 2-core CPU, n_run and LBFGS's summary: ~40 us less a chunk)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    for x in leaves:
        x.copy_to_host_async()
    return jax.tree_util.tree_unflatten(treedef, [np.asarray(x) for x in leaves])


def _initial_shapes(problem: Any, solver: Solver, init_fn: Callable, key: jax.Array) -> Any:
    """``jax.eval_shape(init_fn, key)``, kept across solve() calls like the start itself."""
    cache_key = compile_cache.small_key(problem, solver, "initial shapes", key.shape, str(key.dtype))
    shapes = compile_cache.kept(cache_key)
    if shapes is None:
        shapes = jax.eval_shape(init_fn, key)
        compile_cache.keep(problem, cache_key, shapes)
    return shapes


# ---------------------------------------------------------------------------- the driver
def _with_requested_devices(run: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`solve` with its ``devices=`` visible to the solver while it runs
    (:func:`multiwalk.distributed.requested_device_count`): a solver whose state layout depends on
    the split (LBFGS's one-pass rings under ``kernel="auto"``) decides with the count asked for,
    not with every device, before the driver places the state."""

    @functools.wraps(run)
    def with_devices(*args: Any, **kwargs: Any) -> Any:
        with dist.requested_devices_context(kwargs.get("devices")):
            return run(*args, **kwargs)

    return with_devices


@compile_cache.one_fingerprint_per_call
@_with_requested_devices
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
) -> Result:
    """Run ``solver`` on ``problem`` and return its result.

    Parameters
    ----------
    seed : the random seed; the same seed gives the same result.
    progress : show a progress bar (phase, iteration, best value, ...); ``None`` shows one
        when standard error is a terminal.
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
        raising KeyboardInterrupt from it stops the run like Ctrl-C.
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

    Ctrl-C (KeyboardInterrupt) or SIGTERM (a batch system's time limit) stops the run cleanly:
    the result holds everything computed up to the last finished chunk and has
    ``status=Status.INTERRUPTED``.

    Compiled loops are kept and reused by later calls with the same ``problem`` object and
    equal solver options (``stats["compile_seconds"]`` then drops to ~0).  A problem whose
    bounds, data, sigma, fixed values or ``args`` arrays were changed in place is compiled
    anew; as with ``jax.jit``, global arrays read by the function are baked in at compilation.
    """
    if distributed:  # before anything touches a device
        if not isinstance(distributed, (bool, dict)):
            raise TypeError(f"distributed must be True/False or a dict of initialize() keywords, got {distributed!r}")
        dist.initialize(**(distributed if isinstance(distributed, dict) else {}))
    _check_run_options(problem, solver, seed, time_limit, chunk_seconds, checkpoint_every, callback)
    solver.check(problem)
    check_state_fits(type(solver).__name__, solver.state_memory(problem), dist.requested_device_count())
    phases = solver.phases(problem)
    max_chunk = solver.max_chunk(problem)  # None: chunks as long as chunk_seconds allows
    # Solvers that work in rounds (PatternSearch) keep starting rounds until the time limit:
    # their last phase is then unbounded and reaching the limit is their natural end.
    until_time_limit = time_limit is not None and solver.until_time_limit
    if until_time_limit:
        longest = 2**31 - 2 - sum(p.length for p in phases[:-1])  # the iteration counter is int32
        phases[-1] = Phase(phases[-1].name, longest)
    checkpoint_path = Path(checkpoint) if checkpoint is not None else None
    if checkpoint_path is not None and dist.is_writer():
        _check_checkpoint_path(checkpoint_path, f"checkpoint={str(checkpoint)!r}")
    identity = problem_identity(problem)  # written into checkpoints: a resume of another problem is refused
    if resume is not None:  # read and checked before anything compiles
        resume_path = Path(resume)
        meta, leaves = _read_checkpoint(resume_path)
        if meta["seed"] != int(seed):
            raise ValueError(f"{resume_path} was written with seed={meta['seed']}, not seed={seed}")
        refuse_other_problem(resume_path, meta, identity)

    key = _key(int(seed))
    init_fn = solver.initial_state_fn(problem)
    placement = dist.Placement((None,), None, None)
    if devices is not None or jax.device_count() > 1:
        placement = dist.choose_devices(solver, problem, _initial_shapes(problem, solver, init_fn, key), devices)
    if placement.sharded:  # each device creates its part of the state
        state = solver.initial_state_fn(problem, placement.shardings)(key)
    elif devices is not None:  # one device, chosen
        with jax.default_device(placement.devices[0]):
            state = init_fn(key)
        # committed there: uncommitted, the loop (lowered outside this context) and the summary
        # ran on the default device, the state moved there at the first chunk
        state = jax.device_put(state, placement.devices[0])
    else:
        state = init_fn(key)
    done = [0] * len(phases)
    phase_index = 0
    if resume is not None:
        restored = _restore(solver, state, meta, leaves, resume_path)
        if placement.sharded:
            state = dist.place(restored, placement.shardings)
        elif devices is not None:
            state = jax.device_put(restored, placement.devices[0])
        else:
            state = jax.tree_util.tree_map(jnp.asarray, restored)
        done = list(meta["done"]) + [0] * (len(phases) - len(meta["done"]))
        for ph, d in zip(phases, done):
            if d > ph.length:
                raise ValueError(
                    f"{resume_path} has {d} {ph.name} iterations done, more than the {ph.length} asked for now: "
                    "a resumed run may only be longer"
                )
        phase_index = int(meta["phase_index"])
        # A run that finished its last phase and is resumed with a longer one goes on there.
        if phase_index >= len(phases):
            phase_index = len(phases) - 1

    def meta_now() -> dict[str, Any]:
        return {
            "version": CHECKPOINT_VERSION,
            "solver": type(solver).__name__,
            "options": solver.options(),
            "seed": int(seed),
            "done": done,
            "phase_index": phase_index,
            "n_leaves": len(jax.tree_util.tree_leaves(state)),
            "layout": _state_layout(state),  # the state's form, named when a resume makes another
            "problem": identity,
        }

    summary_fn, summary_leaves = _summary_runner(
        problem, solver, state, placement.replicated if placement.sharded else None
    )

    def summary_inputs(state: Any) -> list[Any]:
        leaves = jax.tree_util.tree_leaves(state)
        return [leaves[i] for i in summary_leaves]

    stats: dict[str, Any] = {"compile_seconds": 0.0, "chunks": 0, "devices": len(placement.devices)}
    if placement.note:
        stats["devices_note"] = placement.note
    if dist.multi_process():
        stats["processes"] = jax.process_count()
    # Under jax.distributed, solvers that read the state after each chunk (writers) get it
    # gathered; every process gathers (a collective), whatever the solver then does with it.
    host_on_chunk = dist.multi_process() and type(solver).on_chunk is not Solver.on_chunk
    # Compile every phase still to run before the clock and the progress bar start.
    # From here on Ctrl-C sets a flag that ends the run after the current chunk (or after
    # compiling), returning what was done; a second Ctrl-C aborts at once.
    ctrl_c = _CtrlC()
    t0 = time.perf_counter()
    executables = {}
    try:
        for i in range(phase_index, len(phases)):
            if done[i] < phases[i].length:
                executables[i] = _compiled_chunk_runner(problem, solver, i, state, placement)  # (compiled, arrays)
        if executables:
            summary_fn(summary_inputs(state))  # the progress summary too (compiled on first use): the loop compiles nothing
    except BaseException:
        ctrl_c.restore()
        raise
    stats["compile_seconds"] = time.perf_counter() - t0
    status = Status.INTERRUPTED if ctrl_c.pressed else Status.SUCCESS
    show = sys.stderr.isatty() if progress is None else bool(progress)
    total = None if until_time_limit else sum(p.length for p in phases)
    bar = _Progress(show and status == Status.SUCCESS, total, sum(done))
    t_run = 0.0  # seconds spent running chunks (compilation excluded)
    unaccounted = False  # a chunk ran but is not yet in ``done`` (on_chunk is between them)
    last_checkpoint = time.perf_counter()
    t_loop = last_checkpoint  # the chunk loop's wall time: chunks, on_chunk (writers), checkpoints

    try:
        while status == Status.SUCCESS and phase_index < len(phases):
            phase = phases[phase_index]
            remaining = phase.length - done[phase_index]
            if remaining <= 0:
                phase_index += 1
                continue

            compiled, arrays = executables[phase_index]
            n_next = 1  # the first chunk of a phase is one iteration: it times a step
            converged = False
            while remaining > 0 and not converged:
                if time_limit is not None and t_run >= time_limit:
                    status = Status.TIME_LIMIT
                    break
                n = int(min(n_next, remaining))
                t0 = time.perf_counter()
                # The state is donated (updated in place), so it is replaced in one statement;
                # Ctrl-C only sets a flag (see _CtrlC), so nothing interrupts this.
                unaccounted = True  # the state is ahead of ``done`` until the chunk is counted
                # n as a numpy scalar: the executable copies it in with its call (jnp.asarray first
                # was a dispatch of its own, ~0.1 ms of every chunk's time on a CPU)
                state, n_run = compiled(state, np.int32(n), arrays)
                jax.block_until_ready(state)
                dt = time.perf_counter() - t0
                # One read from the device per chunk: the steps run and the progress summary's scalars.
                n_run, info = _fetch((n_run, summary_fn(summary_inputs(state))))
                n_run = int(n_run)
                info = {k: float(v) for k, v in info.items()}
                # Every decision below derives from dt and the flags: under jax.distributed all
                # processes take process 0's, so they run the same chunks and stop together.
                checkpoint_due = checkpoint_path is not None and time.perf_counter() - last_checkpoint >= checkpoint_every
                dt, pressed, checkpoint_due = dist.broadcast((dt, ctrl_c.pressed, checkpoint_due))
                ctrl_c.pressed = bool(pressed)
                t_run += dt
                solver.on_chunk(
                    problem, dist.to_host(state) if host_on_chunk else state, done[phase_index], done[phase_index] + n_run
                )
                done[phase_index] += n_run
                unaccounted = False
                remaining -= n_run
                stats["chunks"] += 1
                converged = n_run < n
                bar.update(n_run, phase.name, info)
                if checkpoint_due:
                    # what on_chunk handed to threads is written first; if that fails, the files lag
                    # this state and the last checkpoint must stay (the except below writes none)
                    unaccounted = True
                    solver.on_sync(problem)
                    unaccounted = False
                    _write_checkpoint(checkpoint_path, state, meta_now())
                    last_checkpoint = time.perf_counter()
                if callback is not None:
                    callback({"phase": phase.name, "done": list(done), "elapsed": t_run, **info})
                # Next chunk: about chunk_seconds of work, and not past the time limit.
                per_step = max(dt / max(n_run, 1), 1e-9)
                target = chunk_seconds
                if time_limit is not None:
                    target = min(target, max(time_limit - t_run, 0.0))
                n_next = max(1, min(int(target / per_step), 2 * n if n_run == n else n, 1 << 30, max_chunk or 1 << 30))
                if ctrl_c.pressed:
                    status = Status.INTERRUPTED
                    break
                work_left = remaining > 0 or any(done[j] < phases[j].length for j in range(phase_index + 1, len(phases)))
                if work_left and time_limit is not None and t_run + per_step > time_limit:
                    status = Status.TIME_LIMIT
                    break
            if status != Status.SUCCESS:
                break
            phase_index += 1
    except KeyboardInterrupt:  # raised by the callback, or a second Ctrl-C
        if ctrl_c.forced:
            raise
        status = Status.INTERRUPTED
    except BaseException:
        # Any other failure (out of memory, a bug): keep the last finished chunk on disk (not
        # under jax.distributed: the gather is a collective that the other processes may not join).
        # (not when on_chunk failed: what it writes would lag that state; the last checkpoint stays)
        if checkpoint_path is not None and not unaccounted and not _deleted(state) and not dist.multi_process():
            solver.on_sync(problem)  # when it fails, the files lag the state: no checkpoint of it
            _write_checkpoint(checkpoint_path, state, meta_now())
        raise
    finally:
        bar.close()
        ctrl_c.restore()

    if until_time_limit and status == Status.TIME_LIMIT:
        status = Status.SUCCESS
        stats["ended_by_time_limit"] = True
    stats["run_seconds"] = t_run
    stats["iterations"] = {p.name: d for p, d in zip(phases, done)}
    solver.on_sync(problem)
    stats["loop_seconds"] = time.perf_counter() - t_loop  # run_seconds + the host's work between chunks
    if checkpoint_path is not None:
        _write_checkpoint(checkpoint_path, state, meta_now())
    # One gather at the end: the result builders read the state with np.asarray (which gathers
    # a split state); under jax.distributed every process gathers it whole first.
    if dist.multi_process():
        state = dist.to_host(state)
    return solver.result(problem, state, list(done), status, stats)

