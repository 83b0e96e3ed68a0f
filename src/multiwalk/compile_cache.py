"""Compiled code kept across ``solve()`` calls: compiling costs seconds, a notebook re-running a
fit or a benchmark repeating a run should pay it once.

Two stores, both first in first out:

* the loops (:func:`loop`, :func:`keep_loop`): the driver's compiled chunk runners, at most
  32.  Where a problem's data, sigma and ``args`` arrays are arguments of the loop
  (:func:`problem_arrays`), one loop serves every problem with the same functions and
  :func:`fingerprint`: fits to many datasets with one model function compile once.
* the small functions (:func:`cached_jit`): a solver's start, the progress summary, the
  one-point value, at most 64, with a few traced facts beside them (:func:`keep`).  They close
  over the problem, so they are keyed by the problem object's id and its full fingerprint.

Only executables and shapes are kept, never a traced Python function (that closes over the
problem and would keep it alive); the entries of a problem object are forgotten when it is
garbage (its id may be reused).  Below the solvers: they import :func:`cached_jit` from here.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import weakref
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from . import program_store, upload
from .host_objective import compiler_options
from .problem import Problem
from .traced_once import joined_args, split_args

__all__ = [
    "cached_jit", "start_with", "fingerprint", "full_fingerprint", "arguments_fingerprint", "one_fingerprint_per_call",
    "problem_arrays", "with_arrays", "loop", "keep_loop", "step_seconds", "note_step_seconds", "compiled_loops",
    "clear_loops", "small_key", "kept", "keep", "kept_for", "holds", "clear", "user_functions", "lasting_key",
]

_LOOPS: dict[tuple, Any] = {}
_LOOPS_MAX = 32
# loop key -> seconds per iteration of its last chunk: the next solve() sizes its first chunk by it
_STEP_SECONDS: dict[tuple, float] = {}
_SMALL: dict[tuple, Any] = {}
_SMALL_MAX = 64
# While solve() runs: id(problem) -> its full fingerprint, digested once per call, not per use.
_FINGERPRINTS: dict[int, dict[bool, str]] = {}
# held while the kept entries change or are read through: solve() compiles its loops and its
# result's one-point value on threads of their own while it makes the start, which keeps its own
# entries, and a problem's entries are dropped (_forget) on whichever thread collects it.  Re-entrant:
# a collection, and so _forget, may happen while this thread holds it.
_LOCK = threading.RLock()


# ---------------------------------------------------------------------------- what a problem bakes in
def fingerprint(problem: Any, as_arguments: bool = False) -> str:
    """A digest of everything of ``problem`` that is baked into compiled code as constants, so
    a problem changed in place after construction is compiled anew rather than run stale.

    With ``as_arguments`` (data, sigma and args arrays are arguments of the loop) only their
    shapes and dtypes count.  ``x0`` only enters through ``init``, as an argument (its shape
    counts); the user's functions are not digested: the cache key holds them by identity.
    Read-only arrays the problem owns (its ``periodic`` mask) are digested once per object
    (:func:`_bytes_digest`); bounds, and data, sigma and ``args`` compiled in, may be changed in
    place and are read each time.  Problems other than :class:`Problem`
    (``multiwalk.deconv.Deconvolution``) say it themselves with ``fingerprint()``.
    """
    if not isinstance(problem, Problem):
        return str(problem.fingerprint())
    h = hashlib.blake2b(digest_size=16)
    for name, value in sorted(vars(problem).items()):
        h.update(name.encode())
        if callable(value) or name in ("names", "free_index"):
            # names never enter compiled code; free_index follows from n and fixed (both digested),
            # and at n = 1e9 digesting its 8 GB took seconds in every solve()
            continue
        if name == "x0":  # read by the start only, as an argument (whose key has its dtype): the shape
            h.update(repr(None if value is None else np.shape(value)).encode())
        elif as_arguments and name in ("data", "sigma"):
            h.update(repr(None if value is None else (np.shape(value), str(np.asarray(value).dtype))).encode())
        elif name == "args":
            leaves, tree = jax.tree_util.tree_flatten(value)
            h.update(repr(tree).encode())  # (A, None) and (None, A) have the same leaves, not the same tree
            for leaf in leaves:
                if hasattr(leaf, "shape"):
                    h.update(repr((np.shape(leaf), str(leaf.dtype))).encode())
                    if not as_arguments:
                        h.update(_bytes_digest(leaf).encode())
                else:
                    h.update(repr(leaf).encode())
        elif isinstance(value, np.ndarray):
            # dtype.str ('<f4'), not str(dtype): NumPy words the latter in Python, ~3 us, on every call
            h.update(repr((value.shape, value.dtype.str)).encode() + _bytes_digest(value).encode())
        elif isinstance(value, np.dtype):
            h.update(value.str.encode())
        else:
            h.update(repr(sorted(value.items()) if isinstance(value, dict) else value).encode())
    return h.hexdigest()


# a Problem's callables the fingerprint skips and user_functions names: the user's functions, and
# what Problem derives from them (_traced)
_NAMED_CALLABLES = ("_user_fn", "_user_vg", "_log_prior", "_traced")


def user_functions(problem: Any) -> tuple[Any, ...]:
    """The user's functions a compiled program of ``problem`` calls, held by identity in cache keys
    (the fingerprint skips functions): the problem's class (a subclass may compute differently),
    the objective or model, value_and_grad, log_prior, and any other callable set on the object."""
    others = tuple(value for name, value in sorted(vars(problem).items())
                   if callable(value) and name not in _NAMED_CALLABLES)
    return (type(problem), problem._user_fn, problem._user_vg, getattr(problem, "_log_prior", None), *others)


# id(array) -> (weak reference, digest) of read-only arrays that own their memory: they cannot
# change, so their bytes are read once (a periodic mask of n = 1e7 took ~19 ms per digest).
_READ_ONLY_DIGESTS: dict[int, tuple[Any, str]] = {}


def _bytes_digest(value: Any) -> str:
    """A digest of an array's bytes; of a read-only NumPy array that owns its memory, or of a
    (immutable) jax array, computed once per object and kept while the object lives."""
    fixed = isinstance(value, jax.Array) or (
        isinstance(value, np.ndarray) and not value.flags.writeable and value.flags.owndata)
    if fixed:
        kept = _READ_ONLY_DIGESTS.get(id(value))
        if kept is not None and kept[0]() is value:
            return kept[1]
    digest = hashlib.blake2b(np.ascontiguousarray(np.asarray(value)).tobytes(), digest_size=16).hexdigest()
    if fixed:
        key = id(value)
        try:
            ref = weakref.ref(value, lambda _: _READ_ONLY_DIGESTS.pop(key, None))
        except TypeError:  # an object without weak references: digested each time
            return digest
        _READ_ONLY_DIGESTS[key] = (ref, digest)
    return digest


def full_fingerprint(problem: Any) -> str:
    """``fingerprint(problem)``, digested once per solve() call (a large problem's bounds and
    data take a while to digest; see :func:`one_fingerprint_per_call`)."""
    return _once_per_call(problem, False)


def arguments_fingerprint(problem: Any) -> str:
    """``fingerprint(problem, True)`` (data, sigma and ``args`` as arguments), digested once per
    solve() call like :func:`full_fingerprint`: the loop of each phase and each small function
    ask for it."""
    return _once_per_call(problem, True)


def _once_per_call(problem: Any, as_arguments: bool) -> str:
    held = _FINGERPRINTS.get(id(problem))
    digest = None if held is None else held.get(as_arguments)
    if digest is None:
        digest = fingerprint(problem, as_arguments)
        if held is not None:  # inside solve(problem, ...): keep it for the call
            held[as_arguments] = digest
    return digest


def one_fingerprint_per_call(run: Callable[..., Any]) -> Callable[..., Any]:
    """``run(problem, solver, **options)`` with the problem's fingerprints digested once in
    the call (on first use, see :func:`full_fingerprint`), not once for each small function
    (see :func:`cached_jit`) and phase; nested calls on the same problem digest again."""

    @functools.wraps(run)
    def call(problem: Any, solver: Any, **options: Any) -> Any:
        _FINGERPRINTS[id(problem)] = {}
        try:
            return run(problem, solver, **options)
        finally:
            _FINGERPRINTS.pop(id(problem), None)

    return call


def problem_arrays(problem: Any, as_arguments: bool = True) -> tuple[Any, Any]:
    """``(arrays, static)``: what of ``problem`` compiled code takes as arguments, and what of
    ``args`` stays a compiled-in constant.

    ``arrays`` are a :class:`Problem`'s ``data``, ``sigma`` and the array leaves of ``args``, so
    a fit to a new dataset of the same shapes reuses the compiled loop; ``None`` for other
    problems and when they must be constants (``as_arguments`` False: a run plan's
    ``arrays_as_arguments``, for kernels that read the objective's constants).
    ``static`` is ``args``' tree and its other leaves (Python numbers, strings; ``None`` where
    an array goes), part of the cache key.
    """
    if not isinstance(problem, Problem) or not as_arguments:
        return None, None
    array_leaves, static = split_args(problem.args)
    return (problem.data, problem.sigma, array_leaves), static


def with_arrays(problem: Any, arrays: Any, static: Any) -> Any:
    """A shallow copy of ``problem`` holding ``arrays`` (traced, inside compiled code)."""
    if arrays is None:
        return problem
    data, sigma, array_leaves = arrays
    copy = _shallow_copy(problem)
    copy.data, copy.sigma = data, sigma
    copy.args = joined_args(array_leaves, static)
    return copy


# ---------------------------------------------------------------------------- the loops
def loop(key: tuple) -> Any | None:
    """The compiled loop kept under ``key``, or None."""
    return _LOOPS.get(key)


def keep_loop(key: tuple, compiled: Any, owner: Any = None) -> None:
    """Keep ``compiled`` under ``key`` (the oldest loop goes when 32 are kept).  ``owner``: the
    problem object whose id ``key`` starts with, its loops forgotten once it is garbage."""
    with _LOCK:
        if len(_LOOPS) >= _LOOPS_MAX:
            oldest = next(iter(_LOOPS))
            _LOOPS.pop(oldest)
            _STEP_SECONDS.pop(oldest, None)
        _LOOPS[key] = compiled
    if owner is not None:
        _forget_when_collected(owner)


def step_seconds(key: tuple) -> float | None:
    """Seconds per iteration of the last chunk the loop kept under ``key`` ran, or None."""
    return _STEP_SECONDS.get(key)


def note_step_seconds(key: tuple, seconds: float) -> None:
    """Remember the loop's time per iteration (:func:`step_seconds`), while the loop is kept."""
    with _LOCK:
        if key in _LOOPS:
            _STEP_SECONDS[key] = seconds


def compiled_loops() -> list[Any]:
    """The kept loops' executables, oldest first (the last is the most recently compiled); a host
    loop's (:class:`multiwalk.host_loop.HostLoop`) holds two programs, ``as_text`` gives both."""
    with _LOCK:
        return list(_LOOPS.values())


def clear_loops() -> None:
    """Forget the kept loops (not the small functions): the next solve() compiles its loops anew."""
    with _LOCK:
        _LOOPS.clear()
        _STEP_SECONDS.clear()


# ---------------------------------------------------------------------------- the small functions
def small_key(problem: Any, solver: Any, name: str, *parts: Any) -> tuple:
    """The key of a small function ``name`` of ``solver`` for this problem object (its id, its full
    fingerprint and the default device) and ``parts`` (what its arguments look like)."""
    return (id(problem), full_fingerprint(problem), solver, name, str(jax.config.jax_default_device), *parts)


def kept(key: tuple) -> Any | None:
    """What :func:`keep` kept under ``key`` (from :func:`small_key`), or None."""
    return _SMALL.get(key)


def keep(problem: Any, key: tuple, value: Any) -> None:
    """Keep ``value`` (an executable, or a fact traced once: shapes, the leaves a summary reads)
    under ``key`` until ``problem`` is garbage (or 64 newer entries came)."""
    _keep_small(key, value)
    _forget_when_collected(problem)


def _keep_small(key: tuple, value: Any) -> None:
    with _LOCK:
        if len(_SMALL) >= _SMALL_MAX:
            _SMALL.pop(next(iter(_SMALL)))
        _SMALL[key] = value


def _kept_call(fun: Callable, options: dict[str, Any], args: tuple, key_of: Callable[..., tuple],
               owner: Any = None) -> Any:
    """``jax.jit(fun, **options)(*args)`` through the executable kept under ``key_of(tree, the
    arguments' keys, out_shardings' leaves and tree)``, compiled and kept on first use (tied to
    ``owner``'s life when given); traced arguments just trace ``fun``."""
    leaves = jax.tree_util.tree_leaves(args)
    if any(isinstance(x, jax.core.Tracer) for x in leaves):
        return jax.jit(fun, **options)(*args)
    executable = _kept_executable(fun, options, args, key_of, owner)
    return executable(*args if "out_shardings" in options else _large_ones_uploaded(args, leaves))


def _large_ones_uploaded(args: tuple, leaves: list) -> tuple:
    """``args`` (``leaves`` its leaves) with each large NumPy leaf bound for a GPU already there, sent
    in parts (:func:`multiwalk.upload.to_device`: an 80 MB ``x0`` in ~4 ms instead of ~15 ms); the
    others as they are.  Uncommitted like a host argument, it runs the same executable.  Only for a
    function run on the default device (a pinned run's start runs under ``jax.default_device``, so
    its parts go to its device): one placed by ``out_shardings`` (a split run's start) gets its
    arguments as JAX places them, not through the default device."""
    device = default_device()
    if not any(upload.uploads_in_parts(x, device) for x in leaves):
        return args
    return jax.tree_util.tree_map(lambda x: upload.to_device(x) if upload.uploads_in_parts(x, device) else x, args)


def _executable_key(options: dict[str, Any], args: tuple, key_of: Callable[..., tuple]) -> tuple:
    """The key an executable for ``args`` (arrays) is kept under: ``key_of(tree, the arguments'
    keys, out_shardings' leaves and tree)``."""
    tree, arg_keys = arguments_key(args)
    placed = jax.tree_util.tree_flatten(options.get("out_shardings"))
    return key_of(tree, arg_keys, tuple(placed[0]), placed[1])


def _kept_executable(fun: Callable, options: dict[str, Any], args: tuple, key_of: Callable[..., tuple],
                     owner: Any = None) -> Any:
    """The executable :func:`_kept_call` runs for ``args`` (arrays): kept, or compiled and kept now."""
    key = _executable_key(options, args, key_of)
    compiled = _SMALL.get(key)
    if compiled is None:
        compiled = _lowered(fun, options, args, key, owner)()
        if compiled is None:  # a stored program that would not load (removed now: this look compiles it)
            compiled = _lowered(fun, options, args, key, owner)()
    return compiled


def _lowered(fun: Callable, options: dict[str, Any], args: tuple, key: tuple, owner: Any) -> Callable[[], Any]:
    """``fun`` traced and lowered for ``args`` now; returned: its compilation, which keeps the
    executable under ``key`` (tied to ``owner``'s life when given) and returns it.  The compilation
    may run on another thread: the tracing, which reads JAX's per-thread settings
    (``jax.enable_x64``, ``jax.default_device``), is done here.  A program of the program store is
    not traced: returned, its load, None where it would not load
    (:func:`~multiwalk.program_store.compilation`)."""
    def keep_it(compiled: Any) -> Any:
        if owner is None:
            _keep_small(key, compiled)
        else:
            keep(owner, key, compiled)
        return compiled

    # a later process finds it on disk without tracing (a program of the library's own functions)
    stored_as = None if "compiler_options" in options else program_store.key("program", lasting_key(key, owner))
    return program_store.compilation(stored_as, lambda name: jax.jit(name(fun), **options).lower(*args),
                                     lambda lowered: lowered.compile(), keep_it)


def lasting_key(key: tuple, problem: Any) -> tuple | None:
    """``key`` as another process would make it (for :mod:`multiwalk.program_store`): a key of one
    problem object (its id first) holds the problem's functions in place of the id, which stood
    for them beside the fingerprint; a key of any problem with these functions (``"functions"``
    first) is one already.  None for other problems (their ``fingerprint()`` is theirs to say)."""
    if key and key[0] == "functions":
        return key
    if isinstance(problem, Problem) and key and key[0] == id(problem):
        return ("problem", *user_functions(problem), *key[1:])
    return None


def _ahead(fun: Callable, options: dict[str, Any], args: tuple, key_of: Callable[..., tuple],
           owner: Any = None) -> Callable[[], Any] | None:
    """The compilation of the executable for ``args`` (:func:`_lowered`: lowered now, compiled when
    called), or None when it is kept."""
    key = _executable_key(options, args, key_of)
    return None if key in _SMALL else _lowered(fun, options, args, key, owner)


def kept_for(problem: Any) -> list[tuple[str, Any]]:
    """``(name, value)`` of every small entry kept for this problem object, oldest first."""
    with _LOCK:
        return [(key[3], value) for key, value in _SMALL.items() if key[0] == id(problem)]


def kept_shared() -> list[str]:
    """The names of the small functions kept for any problem of the same functions (:func:`shared_jit`),
    oldest first, one per executable."""
    with _LOCK:  # shared_jit's keys: ("functions", name, ...)
        return [key[1] for key in _SMALL if key[0] == "functions"]


def _arg_key(x: Any) -> Any:
    """What of one argument an executable is compiled for: shape, dtype, and where it lies
    (uncommitted arrays go where the executable runs, so their device does not count)."""
    if isinstance(x, jax.Array):
        # the dtype itself (hashable, equal by value), not str(dtype): ~3.6 us a leaf on a CPU,
        # which the progress summary paid for each of a state's ~50 leaves after every chunk.
        # An array committed to the default device (where uncommitted arrays go) runs the same
        # executable as a host array: a run's result on its one device shares the executable
        # compiled ahead for NumPy.
        placed = x.sharding if x.committed and x.sharding != _uncommitted_sharding() else None
        return (x.shape, x.dtype, x.aval.weak_type, placed)
    if isinstance(x, np.ndarray) or np.isscalar(x):
        # the dtype as a jax.Array's key holds it: a host array and a device array of one shape
        # and dtype share the executable
        return (np.shape(x), np.asarray(x).dtype, not isinstance(x, (np.ndarray, np.generic)), None)
    raise TypeError(f"cached_jit: arguments must be arrays, got {type(x).__name__}")


def _uncommitted_sharding() -> Any:
    """Where a host array goes when an executable runs it: the default device (``jax.default_device``
    or JAX's first device), as a sharding."""
    return _sharding_of_default(jax.config.jax_default_device)


@functools.lru_cache(maxsize=8)
def _sharding_of_default(default: Any) -> Any:
    return jax.sharding.SingleDeviceSharding(upload.device_of(default))


default_device = upload.default_device  # where a host array goes when an executable runs it


def _jit_options(problem: Any, out_shardings: Any) -> dict[str, Any]:
    """``jax.jit``'s keywords for a small function of ``problem``: its ``out_shardings``, and the XLA
    options of a non-JAX objective's programs (:func:`multiwalk.host_objective.compiler_options`)."""
    options: dict[str, Any] = {} if out_shardings is None else {"out_shardings": out_shardings}
    cheap = compiler_options(problem)
    if cheap:
        options["compiler_options"] = cheap
    return options


def cached_jit(problem: Any, solver: Any, name: str, fun: Callable, out_shardings: Any = None) -> Callable:
    """``jax.jit(fun, out_shardings=...)`` whose executable is kept across solve() calls.

    For a solver's small functions that close over ``problem`` (the start in
    ``initial_state_fn``, the progress summary): the second solve() of the same problem, with
    arguments of the same shapes, dtypes and placement, runs the kept executable instead of
    tracing and compiling again (~0.5 s on a CPU).  Called under a trace (``jax.eval_shape``,
    an outer ``jit``) it traces ``fun`` as ``jax.jit`` does.  ``name`` tells the functions of
    one solver apart."""
    options = _jit_options(problem, out_shardings)

    def key_of(*parts: Any) -> tuple:
        return small_key(problem, solver, name, *parts)

    def call(*args: Any) -> Any:
        return _kept_call(fun, options, args, key_of, owner=problem)

    # call.compile_for(*args): compile (or find) the executable for arrays like ``args`` without
    # running it, ahead of the call (multiwalk.host_loop's start, while its points are evaluated);
    # call.is_kept(*args): whether it is kept; call.lower_for(*args): see _ahead; call.traced(*args):
    # jax.jit(fun)'s call, which under a trace (jax.eval_shape) traces even for host arrays
    call.compile_for = lambda *args: _kept_executable(fun, options, args, key_of, owner=problem)  # type: ignore[attr-defined]
    call.is_kept = lambda *args: _executable_key(options, args, key_of) in _SMALL  # type: ignore[attr-defined]
    call.lower_for = lambda *args: _ahead(fun, options, args, key_of, owner=problem)  # type: ignore[attr-defined]
    call.traced = lambda *args: jax.jit(fun, **options)(*args)  # type: ignore[attr-defined]
    return call


def start_with(call: Callable, *args: Any) -> Callable[[jax.Array], Any]:
    """``key -> call(*args)``: a solver's start whose arguments (host images, grid points) do not
    depend on the run's key, ``call`` a :func:`cached_jit`.  Its ``is_kept(key)`` says whether the
    executable is kept: a first call (not kept) compiles its loops beside the start
    (``multiwalk.solve``'s ``_compile_ahead``)."""

    def start(key: jax.Array) -> Any:
        if isinstance(key, jax.core.Tracer):  # jax.eval_shape of the start: traced as the key is, not run
            return call.traced(*args)
        return call(*args)

    start.is_kept = lambda key: call.is_kept(*args)  # type: ignore[attr-defined]
    return start


def shared_jit(problem: Any, solver: Any, name: str, of_problem: Callable[[Any], Callable],
               out_shardings: Any = None, reads_x0: bool = True, arrays_as_arguments: bool = True) -> Callable:
    """:func:`cached_jit` of ``of_problem(problem)``, kept for every problem with the same functions,
    fingerprint and shapes, not only for this problem object.

    The problem's data, sigma and ``args`` arrays are arguments of the executable, as in the
    compiled loop (:func:`problem_arrays`), so a new dataset of the same shapes (a fit repeated on
    another day's data, a new ``Problem`` of the same model) runs the kept start and one-point
    value instead of compiling them again; with ``arrays_as_arguments`` False (a run plan's, for
    kernels that read them as constants) they are compiled in, and digested in the key.
    ``of_problem`` must read the problem's arrays through the problem it is given.  ``x0`` is an
    argument too (unless ``reads_x0`` is False): a start reads it, and as a constant it would have
    to be digested, all its bytes, in every call.  Problems without such arrays (other problem
    kinds) use :func:`cached_jit`."""
    if not isinstance(problem, Problem):
        return cached_jit(problem, solver, name, of_problem(problem), out_shardings)
    arrays, static = problem_arrays(problem, arrays_as_arguments)
    options = _jit_options(problem, out_shardings)
    x0 = problem.x0 if reads_x0 else None  # as shared_arguments reads them

    def with_problem_arrays(arrays: Any, x0: Any, *args: Any) -> Any:
        copy = with_arrays(problem, arrays, static) if arrays is not None else _shallow_copy(problem)
        if reads_x0:
            copy.x0 = x0
        return of_problem(copy)(*args)

    def key_of(*parts: Any) -> tuple:
        # the name right after the tag, where kept_shared reads it whatever the functions held
        digest = arguments_fingerprint(problem) if arrays is not None else full_fingerprint(problem)
        return ("functions", name, *user_functions(problem), digest, reads_x0, solver,
                str(jax.config.jax_default_device), *parts)

    def call(*args: Any) -> Any:
        return _kept_call(with_problem_arrays, options, (arrays, x0, *args), key_of)

    # as cached_jit's: whether the executable for ``args`` is kept; its compilation ahead (_ahead);
    # compile_for(*args): ``args -> outputs`` by the executable, compiled now where not kept
    call.is_kept = lambda *args: _executable_key(options, (arrays, x0, *args), key_of) in _SMALL  # type: ignore[attr-defined]
    call.lower_for = lambda *args: _ahead(with_problem_arrays, options, (arrays, x0, *args), key_of)  # type: ignore[attr-defined]
    # executable_for(*args): the executable itself, taking shared_arguments(problem) first
    call.executable_for = lambda *args: _kept_executable(  # type: ignore[attr-defined]
        with_problem_arrays, options, (arrays, x0, *args), key_of)
    call.compile_for = lambda *args: functools.partial(call.executable_for(*args), arrays, x0)  # type: ignore[attr-defined]
    return call


def shared_arguments(problem: Any, arrays_as_arguments: bool = True, reads_x0: bool = True) -> tuple[Any, Any]:
    """``(arrays, x0)``: the arguments a :func:`shared_jit` executable of ``problem`` (a :class:`Problem`)
    takes before its own, read from the problem as it is now (:func:`problem_arrays`; ``x0`` or
    None)."""
    return problem_arrays(problem, arrays_as_arguments)[0], problem.x0 if reads_x0 else None


def arguments_key(args: Any) -> tuple:
    """What of ``args`` (a tree of arrays) an executable is compiled for: the tree, and each leaf's
    shape, dtype and placement."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    return tree, tuple(_arg_key(x) for x in leaves)


def _shallow_copy(problem: Any) -> Any:
    """A shallow copy of ``problem`` (traced arrays are set on it, not on the caller's problem)."""
    copy = object.__new__(type(problem))
    copy.__dict__.update(vars(problem))
    return copy


# ---------------------------------------------------------------------------- forgetting
def holds(problem_id: int) -> bool:
    """Whether anything is kept for the problem object that had this id."""
    with _LOCK:
        return any(key[0] == problem_id for cache in (_LOOPS, _SMALL) for key in cache)


def clear() -> None:
    """Forget every kept executable: the next solve() compiles anew."""
    with _LOCK:
        _LOOPS.clear()
        _STEP_SECONDS.clear()
        _SMALL.clear()


# ids of the objects whose entries are forgotten when they are collected: one finalizer each, not
# one per entry kept (a problem changed in place between many calls keeps entry after entry)
_WATCHED: set[int] = set()


def _forget_when_collected(problem: Any) -> None:
    with _LOCK:
        if id(problem) in _WATCHED:
            return
        _WATCHED.add(id(problem))
    weakref.finalize(problem, _forget, id(problem)).atexit = False  # nothing to free at exit


def _forget(problem_id: int) -> None:
    with _LOCK:
        _WATCHED.discard(problem_id)
        for cache in (_LOOPS, _SMALL, _STEP_SECONDS):
            for key in [k for k in cache if k[0] == problem_id]:
                cache.pop(key, None)
