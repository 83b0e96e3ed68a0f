"""What a run shows and hears while it goes: a status line while a first call compiles, the progress
summary read after each chunk, the bar that shows it, and Ctrl-C / SIGTERM, which end the run after
the chunk in flight."""

from __future__ import annotations

import hashlib
import signal
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import compile_cache
from .solvers.base import Solver

__all__ = ["CompileStatus", "ProgressBar", "CtrlC", "summary_runner", "start_copies", "fetch"]


# seconds a call's compiling (and start) may take before CompileStatus shows its line: a later call,
# or a first one whose programs load quickly from the persistent cache, stays quiet
COMPILE_STATUS_AFTER = 1.0


class CompileStatus:
    """A context manager around what a call does before its run (making the start, compiling the
    loops): when ``enabled`` and the block lasts more than ``after`` seconds (default
    :data:`COMPILE_STATUS_AFTER`), a one-line tqdm status on standard error, its seconds updated
    about once a second, removed when the block ends (before the run's bar appears).

    The line is written by a daemon thread (the caller's thread is busy compiling); the thread is
    stopped and joined on every way out of the block, and writes only under a lock it shares with
    :meth:`__exit__`, so nothing is written after the block.  ``evaluates_start``: the start runs a
    non-JAX objective (``Problem(backend="python")``), whose evaluation may take long on any call,
    and the line says so instead of naming only the compiling."""

    THREAD_NAME = "multiwalk-compile-status"
    COMPILING = "compiling the run's programs (kept for later calls)"
    EVALUATING = "evaluating the start's points (and compiling, on a first call)"
    JOIN_SECONDS = 1.0  # how long the block's end waits for the thread (it wakes at once when told)
    UPDATE_SECONDS = 1.0  # between updates of the line's seconds

    def __init__(self, enabled: bool, evaluates_start: bool = False, after: float | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.enabled = enabled
        self._clock = clock  # the seconds shown: the block's wall time
        self.text = self.EVALUATING if evaluates_start else self.COMPILING
        self.after = COMPILE_STATUS_AFTER if after is None else after
        self._stopped = threading.Event()
        self._lock = threading.Lock()  # held while the thread writes, and by __exit__ to stop it
        self._thread: threading.Thread | None = None
        self._bar: Any = None
        self._tqdm: Any = None  # tqdm.auto.tqdm, imported when enabled
        self._started = 0.0

    def __enter__(self) -> CompileStatus:
        if self.enabled:
            from tqdm.auto import tqdm  # a widget in a notebook, as ProgressBar's

            self._tqdm = tqdm
            self._started = self._clock()
            self._thread = threading.Thread(target=self._show, name=self.THREAD_NAME, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._thread is None:
            return
        with self._lock:  # the thread writes no more once this is set
            self._stopped.set()
            bar, self._bar = self._bar, None
        try:
            self._thread.join(timeout=self.JOIN_SECONDS)
        finally:  # a second Ctrl-C in the join still clears the line
            self._thread = None
            if bar is not None:
                bar.close()  # leave=False: the line is cleared

    def _line(self) -> str:
        return f"{self.text}: {self._clock() - self._started:.0f} s"

    def _show(self) -> None:
        """The thread: wait out the threshold, then show the line and update it once a second."""
        if self._stopped.wait(self.after):
            return
        with self._lock:
            if self._stopped.is_set():
                return
            self._bar = self._tqdm(total=None, desc=self._line(), bar_format="{desc}", leave=False)
        while not self._stopped.wait(self.UPDATE_SECONDS):
            with self._lock:
                if self._stopped.is_set():
                    return
                self._bar.set_description_str(self._line())  # refreshes the line


class ProgressBar:
    """A tqdm bar over all iterations of all phases; silent when disabled."""

    def __init__(self, enabled: bool, total: int | None, initial: int) -> None:
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="it", dynamic_ncols=True, leave=True)

    @property
    def shown(self) -> bool:
        """Whether the bar is on (its postfix shows the progress summary)."""
        return self.bar is not None

    def update(self, n: int, phase: str, info: dict[str, float]) -> None:
        if self.bar is None:
            return
        self.bar.set_description(phase)
        self.bar.set_postfix({k: f"{v:.4g}" for k, v in info.items()}, refresh=False)
        self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class CtrlC:
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


def summary_runner(problem: Any, solver: Solver, state: Any, out_shardings: Any) -> tuple[Callable, tuple[int, ...]]:
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


def start_copies(tree: Any) -> tuple[Any, float]:
    """Start copying ``tree``'s device arrays to the host, right after the program that makes them;
    returned: the tree for :func:`fetch` to read once that program is waited for, and the seconds
    spent compiling a copy program in this call (0.0 but the first time for a tree's shapes: the
    caller counts them as compiling, not as its run).

    On one GPU, the copies are a program of their own (:func:`_pinned_copy`), queued behind the
    one that makes them, which writes them into pinned host memory: reading them is then only the
    wait for that program.  Each small array read from device memory instead costs a transfer
    and its completion handed to the host: launched and read back, a jitted call of 448 floats
    took 237 us on an H100 host, 75 us with its output in pinned host memory (launched and waited
    for alone: 76 us).  A run split over devices reads what is replicated from its copy on the
    first device (:func:`_one_copy`), so on GPUs through that program too.  Elsewhere (a CPU,
    leaves split over devices) the copies are JAX's own (``copy_to_host_async``), which follow the
    program on the device."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    one = [_one_copy(x) for x in leaves]
    if any(a is not b for a, b in zip(one, leaves)):
        leaves, tree = one, jax.tree_util.tree_unflatten(treedef, one)
    copy, compiling = _pinned_copy(_one_gpu(leaves), treedef, leaves)
    if copy is not None:
        return jax.tree_util.tree_unflatten(treedef, copy(*leaves)), compiling
    for x in leaves:
        x.copy_to_host_async()
    return tree, compiling


def _one_copy(x: Any) -> Any:
    """``x``, or where it is replicated over several devices (a split run's step count, summary and
    report), its copy on the first: read from one GPU, it goes through the pinned copy (on two
    H200s JAX's copies of a split run's few numbers took ~1 ms to read)."""
    sharding = getattr(x, "sharding", None)
    if sharding is None or len(sharding.device_set) == 1 or not x.is_fully_replicated:
        return x
    return x.addressable_shards[0].data


def _one_gpu(leaves: list[Any]) -> Any | None:
    """The one GPU whose device memory holds every leaf, or None (a CPU, several devices, host memory)."""
    devices = set()
    for x in leaves:
        sharding = getattr(x, "sharding", None)
        if sharding is None or len(sharding.device_set) != 1 or getattr(sharding, "memory_kind", None) != "device":
            return None
        devices |= sharding.device_set
    if len(devices) != 1:
        return None
    (device,) = devices
    return device if device.platform == "gpu" else None


# (device, tree, the leaves' types) -> the compiled copy of those leaves into that device's pinned
# host memory
_PINNED_COPIES: dict[tuple, Any] = {}
# devices without pinned host memory, or whose XLA refused the copy: JAX's copies there
_NO_PINNED_COPY: set[Any] = set()
# devices that have pinned host memory
_PINNED_HOST: set[Any] = set()


def _pinned_copy(device: Any | None, treedef: Any, leaves: list[Any]) -> tuple[Any | None, float]:
    """The compiled program ``*leaves -> leaves`` in ``device``'s pinned host memory, compiled now
    the first time for these leaves' types (kept, and in the persistent cache), and the seconds
    that compiling took here (0.0 when kept); None where there is no device, no pinned host
    memory or no such program (then with one warning)."""
    if device is None or not has_pinned_host(device):
        return None, 0.0
    key = (device, treedef, tuple(x.aval for x in leaves))
    copy = _PINNED_COPIES.get(key)
    if copy is not None:
        return copy, 0.0
    t0 = time.perf_counter()
    from jax.sharding import SingleDeviceSharding

    try:
        pinned = SingleDeviceSharding(device, memory_kind="pinned_host")
        copy = jax.jit(lambda *xs: xs, out_shardings=pinned).lower(*leaves).compile()
    except Exception as err:  # noqa: BLE001 - an XLA that cannot put outputs in host memory: JAX's copies
        no_pinned_copy(device, err, stacklevel=4)
        return None, time.perf_counter() - t0
    _PINNED_COPIES[key] = copy
    return copy, time.perf_counter() - t0


def has_pinned_host(device: Any) -> bool:
    """Whether programs may write outputs into ``device``'s pinned host memory: it has some, and
    no program failed to (:func:`no_pinned_copy`)."""
    if device in _NO_PINNED_COPY:
        return False
    if device not in _PINNED_HOST:  # asked once a device: ~us a call, before every read
        if "pinned_host" not in {memory.kind for memory in device.addressable_memories()}:
            _NO_PINNED_COPY.add(device)
            return False
        _PINNED_HOST.add(device)
    return True


def no_pinned_copy(device: Any, err: Exception, stacklevel: int = 3) -> None:
    """XLA refused outputs in ``device``'s pinned host memory (``err``): said once, and results are
    read from there by JAX's own copies from now on."""
    _NO_PINNED_COPY.add(device)
    warnings.warn(f"results are read from {device} without pinned host memory ({type(err).__name__}: "
                  f"{str(err)[:200]}); each read then costs a transfer of its own", stacklevel=stacklevel)


def fetch(tree: Any) -> Any:
    """``tree`` of small device arrays as numpy arrays, in one round trip when :func:`start_copies`
    began their copies (asking JAX again for each would be one more call a leaf).  What
    ``jax.device_get`` does, without its per-leaf checks (on a 2-core CPU, n_run and LBFGS's
    summary: ~40 us less a chunk)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return jax.tree_util.tree_unflatten(treedef, [np.asarray(x) for x in leaves])
