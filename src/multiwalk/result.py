"""The status codes with their messages (:class:`Status`, one enum for every solver) and the
fields every result has (``x, fun, success, status, message, stats``).

A solver's result is a dataclass subclass of :class:`Result` with the solver's own fields;
:meth:`Result.save` writes every field of any of them, so a new field is saved without more code
(a field that holds an object rather than data is marked ``metadata=NOT_SAVED``).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

__all__ = ["Status", "Result", "Deferred", "NOT_SAVED", "to_host"]

NOT_SAVED = {"saved": False}
"""Field metadata, ``field(..., metadata=NOT_SAVED)``: :meth:`Result.save` leaves the field out (an
object, not data: the problem, a solver state, other results)."""


class Status(enum.IntEnum):
    """Why a run (or one L-BFGS start) ended: one code and one message per member.

    ``SUCCESS`` is the only member for which ``result.success`` is True.  The general members
    (0-5) end every solver's runs; the others are L-BFGS's, one per way its line search or its
    start can stop it: ``istate=-1`` with the line search's ``info`` 0, 2-6 are the
    ``LINE_SEARCH_*`` members (code ``10 + info``), ``istate=-2`` is ``DIAG_NOT_POSITIVE``;
    ``istate=-3`` (n or m not positive) is a ``ValueError`` raised before anything runs.

    A member's message may name options in braces (``{maxfev}``); :meth:`describe` writes them
    as ``maxfev=20`` from the values it is given.  As optimistix's ``RESULTS``, the members carry
    their messages, so the meaning of every code is written here once.
    """

    _message: str

    def __new__(cls, code: int, message: str) -> Status:
        member = int.__new__(cls, code)
        member._value_ = code
        member._message = message
        return member

    SUCCESS = 0, "finished"  #: the solver ran to its natural end (all iterations, or converged)
    #: a solver with a convergence test used its whole iteration budget without converging
    MAX_STEPS = 1, "the iteration budget was used up before convergence"
    TIME_LIMIT = 2, "stopped at the time limit; the result holds what was done"  #: the result is partial
    #: stopped by Ctrl-C or SIGTERM (a batch system's time limit); the result is partial
    INTERRUPTED = 3, "interrupted (Ctrl-C or SIGTERM); the result holds what was done"
    FAILED = 4, "failed"  #: the solver could not go on (e.g. no finite objective value anywhere)
    #: ``solve(iteration_callback=...)`` (or ``minimize(callback=...)``) returned True; the result is partial
    CALLBACK_STOP = 5, "stopped by the callback (it returned True); the result holds what was done"
    #: line search info 0: not a descent direction, or f / g'd not finite
    LINE_SEARCH_BAD_INPUT = 10, (
        "line search failed (info=0, improper input): the search direction is not a descent direction or "
        "f / g'd is not finite; check the gradient (value_and_grad), and ftol, gtol, stpmin, stpmax"
    )
    LINE_SEARCH_XTOL = 12, (  #: info 2: the interval of uncertainty is below xtol
        "line search failed (info=2): the interval of uncertainty is below xtol; x is likely as good as this "
        "precision allows - loosen eps, or use float64; an inaccurate gradient also causes this"
    )
    LINE_SEARCH_MAXFEV = 13, (  #: info 3: maxfev evaluations in one line search
        "line search failed (info=3): {maxfev} evaluations in one iteration did not meet the Wolfe conditions; "
        "raise maxfev, or increase eps or m (the seed's advice for extended Powell)"
    )
    LINE_SEARCH_STPMIN = 14, (  #: info 4: the step is at stpmin
        "line search failed (info=4): the step is at {stpmin}; the problem may be badly scaled - "
        "lower stpmin or rescale x"
    )
    LINE_SEARCH_STPMAX = 15, (  #: info 5: the step is at stpmax
        "line search failed (info=5): the step is at {stpmax}; f may be unbounded below, or raise stpmax"
    )
    LINE_SEARCH_ROUNDING = 16, (  #: info 6: rounding errors prevent progress
        "line search failed (info=6): rounding errors prevent further progress; x is likely as good as this "
        "precision allows - loosen eps, or use float64"
    )
    DIAG_NOT_POSITIVE = 20, (  #: the user's diag has an entry <= 0 (seed istate=-2)
        "the diagonal H0 given by diag has an entry <= 0 (or not finite) at the current x; diag must be positive"
    )
    NONFINITE_START = 21, (  #: f or its gradient is NaN or inf at the starting point
        "f or its gradient is NaN or inf at the starting point; start where both are finite"
    )
    #: the relative reduction of f in one iteration fell to {frel_tol} before the gradient test held
    SMALL_REDUCTION = 22, (
        "f decreased by a relative {frel_tol} or less in the last iteration, but the gradient test does not hold "
        "at x: x may not be a minimum; lower frel_tol (minimize: ftol), or loosen pgtol / eps"
    )

    @property
    def success(self) -> bool:
        return self is Status.SUCCESS

    @property
    def seed_code(self) -> str:
        """The L-BFGS seed's error indicator for this ending (its ``dev_istate``/IFLAG and MCSRCH's
        ``info``): ``"IFLAG = -1, INFO = k"`` for a failed line search, ``"IFLAG = -2"`` for a
        diagonal that is not positive, ``"IFLAG = 0"`` for success; the endings the seed has no
        code for say so."""
        if self is Status.SUCCESS:
            return "IFLAG = 0"
        if Status.LINE_SEARCH_BAD_INPUT <= self <= Status.LINE_SEARCH_ROUNDING:
            return f"IFLAG = -1, INFO = {int(self) - 10}"
        if self is Status.DIAG_NOT_POSITIVE:
            return "IFLAG = -2"
        return "no seed IFLAG"

    def describe(self, own_words: Mapping[Status, str] | None = None, **values: Any) -> str:
        """This member's message, each option in braces written ``name=value`` from ``values``
        (an option without a value is named alone).  ``own_words``: a solver's account for the
        members it words itself (what a finished run did, which test did not converge, why it
        failed), taken instead of the message."""
        if own_words is not None and self in own_words:
            return own_words[self]
        return self._message.format_map(_OptionValues({name: f"{name}={value}" for name, value in values.items()}))


class _OptionValues(dict):
    """``str.format_map``'s fields: ``name=value`` where a value is known, else the option's name."""

    def __missing__(self, name: str) -> str:
        return name


#: arrays at least this large come to the host through pinned memory (:func:`to_host`)
PINNED_COPY_BYTES = 1 << 20


def to_host(value: Any) -> np.ndarray:
    """``value`` as a NumPy array.  A large array on a GPU goes through pinned host memory first
    (``memory_kind="pinned_host"``): measured on an H100, 80 MB came back in 2.0 ms that way
    against 58 ms for ``np.asarray`` (a copy into pageable memory, 1.4 GB/s).  Anything else, or
    a backend without pinned host memory, is ``np.asarray(value)``."""
    if not _goes_through_pinned_memory(value):
        return np.asarray(value)
    return through_pinned_memory(value)


def _goes_through_pinned_memory(value: Any) -> bool:
    """Whether :func:`to_host` reads ``value`` through pinned memory: a large array in a GPU's memory."""
    if isinstance(value, np.ndarray) or getattr(value, "nbytes", 0) < PINNED_COPY_BYTES:
        return False
    sharding = getattr(value, "sharding", None)
    return not (sharding is None or getattr(sharding, "memory_kind", None) != "device"
                or next(iter(sharding.device_set)).platform == "cpu")


def start_reads(tree: Any) -> None:
    """Start the copies to the host of ``tree``'s device arrays without waiting for any: a later
    :func:`to_host` or :func:`tree_to_host` of them waits only for what is still in flight.  A large
    array on a GPU starts its copy into pinned memory (kept for :func:`through_pinned_memory`, for
    as long as the array lives), a small one (or any, without pinned memory) ``copy_to_host_async``.  For reads that follow one
    another (a solver's convergence test, then its result): each read of its own is a round trip."""
    import jax

    for leaf in jax.tree_util.tree_leaves(tree):
        if isinstance(leaf, np.ndarray) or not hasattr(leaf, "copy_to_host_async"):
            continue
        if _goes_through_pinned_memory(leaf):
            with _SPARE_LOCK:
                ref, _ = _STARTED.get(id(leaf), (None, None))
            if ref is not None and ref() is leaf:  # its copy is on its way already
                continue
            pinned = _pinned_copy(leaf)
            if pinned is not None:
                with _SPARE_LOCK:
                    _STARTED[id(leaf)] = (weakref.ref(leaf, _forget_started(id(leaf))), pinned)
                continue
        leaf.copy_to_host_async()  # a small array, or no pinned memory on this backend


def _forget_started(key: int) -> Callable[[weakref.ref], None]:
    """The callback that drops ``_STARTED[key]`` when its array is gone (its copy never read).
    Without the lock: a collection may run it in a thread that holds it; one dict operation is atomic."""

    def forget(ref: weakref.ref) -> None:
        entry = _STARTED.get(key)
        if entry is not None and entry[0] is ref:  # not a later array that got the same id
            _STARTED.pop(key, None)

    return forget


def tree_to_host(tree: Any) -> Any:
    """``tree`` with every array leaf as NumPy: the large ones through pinned memory (:func:`to_host`),
    the others by one ``jax.device_get``, which starts all their copies before waiting on any (read
    one by one, each small array is a copy and a wait: ~20 of them took 4-5 ms of an L-BFGS call's
    result on an H100).  The large ones' copies start first, so they run while the small ones are read."""
    import jax

    leaves, treedef = jax.tree_util.tree_flatten(tree)
    large = [getattr(v, "nbytes", 0) >= PINNED_COPY_BYTES and not isinstance(v, np.ndarray) for v in leaves]
    start_reads([v for v, big in zip(leaves, large) if big])
    small = jax.device_get([v for v, big in zip(leaves, large) if not big])
    out, k = [], 0
    for v, big in zip(leaves, large):
        if big:
            out.append(to_host(v))
        else:
            out.append(np.asarray(small[k]))
            k += 1
    return jax.tree_util.tree_unflatten(treedef, out)


#: the largest array for which :func:`through_pinned_memory` reserves a spare pinned buffer, and
#: the most pinned memory its spares may take in a process (page-locked memory is the host's)
SPARE_PINNED_MAX_BYTES = 1 << 30
SPARE_PINNED_TOTAL_BYTES = 4 << 30
_SPARE_BYTES = [0]  # made so far
_SPARE_LOCK = threading.Lock()  # results read on several threads count their spares once each
# (devices, bytes) -> the call (``call_started``'s count) whose reads reserve that size's spares
_SPARE_PINNED: dict[tuple[Any, int], int] = {}
_CALLS = [0]
# id(array) -> (a weak reference to it, its copy into pinned memory): copies start_reads started,
# taken by the array's read (through_pinned_memory); dropped when the array is gone (_forget_started)
_STARTED: dict[int, tuple[weakref.ref, Any]] = {}


def call_started() -> None:
    """``multiwalk.solve`` says a call begins: the spare pinned buffers of a size
    (:func:`through_pinned_memory`) are made by the reads of the first call that reads it."""
    _CALLS[0] += 1


def through_pinned_memory(value: Any) -> np.ndarray:
    """A device array's values copied to pinned host memory by the device, then read as NumPy (a
    view of the pinned buffer); ``np.asarray(value)`` where the backend has no pinned host memory.

    JAX keeps freed pinned buffers for reuse, but a new one costs its allocation: on an H100 host,
    80 MB took 52-74 ms in a process's first two calls and 1.9-2.0 ms from the third on; Clean's
    two 64 MB images, ~140 ms of its second call.  The second call allocates because the first
    result, still held by the caller, keeps its buffers while the second's are read.  So each read
    of the first call that reads a size (up to :data:`SPARE_PINNED_MAX_BYTES`) also makes one more
    buffer of that size and frees it at once, which JAX's pool keeps: the next call reads into
    those while the caller holds the first result, and from then on the two sets alternate.  A
    NumPy copy of its own instead, freeing the buffer at once, took 22-48 ms every call (the fresh
    pages' faults), so the view stays."""
    with _SPARE_LOCK:
        ref, pinned = _STARTED.pop(id(value), (None, None))
    if ref is None or ref() is not value:  # no copy started for this array (start_reads)
        pinned = _pinned_copy(value)
    if pinned is None:  # no pinned memory on this backend
        return np.asarray(value)
    _reserve_spare(value, pinned.sharding)
    return np.asarray(pinned)


def _pinned_copy(value: Any) -> Any:
    """``value`` copied into pinned host memory, the copy started (not waited for); None where the
    backend has no pinned host memory."""
    import jax

    try:
        return jax.device_put(value, value.sharding.with_memory_kind("pinned_host"))
    except (ValueError, TypeError, NotImplementedError, RuntimeError):  # no pinned memory on this backend
        return None


def _reserve_spare(value: Any, pinned_sharding: Any) -> None:
    """The spare pinned buffer of :func:`through_pinned_memory`: made (a copy of ``value``, the one
    way JAX allocates pinned memory) and dropped, on every read of a size by the first call reading it."""
    import jax

    size = (tuple(sorted(d.id for d in value.sharding.device_set)), int(value.nbytes))
    with _SPARE_LOCK:
        if (_SPARE_PINNED.setdefault(size, _CALLS[0]) != _CALLS[0] or value.nbytes > SPARE_PINNED_MAX_BYTES
                or _SPARE_BYTES[0] + value.nbytes > SPARE_PINNED_TOTAL_BYTES):
            return
        _SPARE_BYTES[0] += int(value.nbytes)
    jax.block_until_ready(jax.device_put(value, pinned_sharding))  # allocated, then freed into the pool


class Deferred:
    """A result field computed when first read: ``Deferred(fn, *args)`` holds ``fn(*args)``'s
    recipe (device arrays in ``args`` stay on the device).  A solver puts one in a field of its
    result's :attr:`Result.lazy_fields` for a record that costs a transfer or a pass over every
    walker, which most callers never read."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.fn, self.args = fn, args

    def __call__(self) -> Any:
        return self.fn(*self.args)


@dataclass
class Result:
    """What every solver returns.

    ``x`` : best point found, full vector of shape ``(n,)`` (fixed parameters filled in).
    ``fun`` : objective (chi2) at ``x``.
    ``status`` / ``message`` / ``success`` : why the run ended, in words and as a code.
    ``stats`` : counters (iterations, evaluations, non-finite values, wall time, ...).
    """

    x: np.ndarray
    fun: float
    status: Status
    message: str
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return self.status == Status.SUCCESS

    #: fields a solver may fill with device (JAX) arrays or :class:`Deferred` computations, brought
    #: to the host (NumPy) when first read, once: large records most callers never read stay off
    #: the host's clock
    lazy_fields: ClassVar[frozenset[str]] = frozenset()

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if name in type(self).lazy_fields and value is not None and not isinstance(value, np.ndarray):
            value = to_host(value() if isinstance(value, Deferred) else value)
            object.__setattr__(self, name, value)
        return value

    def __getstate__(self) -> dict[str, Any]:
        """Every field read (a pickled result holds arrays, not device arrays or computations)."""
        return {name: getattr(self, name) for name in self.__dict__}

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in (("x", self.x), ("fun", self.fun)))
        return f"{type(self).__name__}({fields}, status={self.status.name}, message={self.message!r})"

    def save(self, path: str | os.PathLike) -> None:
        """Write every field to an ``.npz`` file (``numpy.load`` reads it; the options used are in it).

        Arrays, numbers and strings are written as they are, ``status`` as its code, lists as
        arrays, dicts (``options``, ``stats``) as JSON text (arrays in them as lists).  Fields that
        are None, and those marked ``metadata=NOT_SAVED``, are left out."""
        np.savez(path, **self.saved_fields())

    def saved_fields(self) -> dict[str, Any]:
        """``{name: what save() writes}`` for every field it writes (see :meth:`save`)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None and f.metadata.get("saved", True):
                out[f.name] = _saved_value(type(self).__name__, f.name, value)
        return out


def _json_default(value: Any) -> Any:
    """What JSON writes for a value it does not know: an array as a list, a numpy number as a
    Python number, anything else as its ``str``."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def _saved_value(owner: str, name: str, value: Any) -> Any:
    """The value of field ``owner.name`` as :meth:`Result.save` writes it into the ``.npz``."""
    if isinstance(value, enum.Enum):
        return int(value)
    if isinstance(value, dict):
        return json.dumps(value, default=_json_default)
    if isinstance(value, (np.ndarray, np.generic, int, float, str)):
        return value
    arr = np.asarray(value) if isinstance(value, (list, tuple)) else None
    if arr is None or arr.dtype == object:
        raise TypeError(
            f"{owner}.{name} holds a {type(value).__name__}, which save() cannot write as an array: "
            f"give the field metadata=NOT_SAVED (multiwalk.result) or a value of arrays, numbers or strings"
        )
    return arr
