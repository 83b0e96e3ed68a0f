"""Compiled programs kept on disk and found without tracing them again.

JAX's persistent cache (:mod:`multiwalk.persistent_cache`) finds a compiled program by its lowered
form, so a new process still traces and lowers every program before it can load it: ~0.3 s of a
1 s ``multiwalk run`` on two CPU cores.  This store finds a program by what it is made of, which
the driver knows before tracing: its key in :mod:`multiwalk.compile_cache` (the problem's
fingerprint and functions, the solver, the arguments' shapes and dtypes), together with this
installation (the contents of multiwalk's own source files, the versions of Python, JAX, NumPy
and SciPy, the CPU's model and instruction sets), JAX's settings (``jax.config``, e.g.
``enable_x64``), the XLA and JAX environment variables, and the devices.

A program is stored only where every part of that has the same name in every process:

* the library's own functions qualify (ODAT-SE's test functions, the Yao and CUTE suites, the
  models), found by module and name: ``multiwalk.functions.odatse:himmelblau``;
* a function of the user's own does not (its code is not read), nor a subclass of ``Problem``:
  their programs are traced in each process as before, and JAX's persistent cache still spares
  their compilation;
* nor do programs with host callbacks (they hold Python objects of one process), loops split
  over several devices or placed on a chosen one, runs of several processes (``jax.distributed``),
  non-JAX objectives, a zipped package (its sources cannot be read) and a CPU whose model Linux
  does not tell.

The programs live in the folder ``multiwalk-programs`` inside the persistent cache's folder, and
are on and off with it (``MULTIWALK_CACHE_DIR=off``); at most 512 of them and 1 GiB, the least
recently used going first (a remote folder, ``gs://...``, has no store).  A file holds its
contents' checksum: an entry that cannot be read is compiled again and replaced, with one
warning.  The stored program is the one compiled before, so its results are the same bit for bit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import os
import pickle
import platform
import sys
import threading
import time
import types
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from . import persistent_cache

__all__ = ["key", "named", "compilation", "load", "load_later", "compile_and_save", "wait", "load_value", "save_value", "counts",
           "folder"]

FOLDER_NAME = "multiwalk-programs"
MAX_ENTRIES = 512
MAX_BYTES = 1 << 30
_FORMAT = 2  # of the files' contents; part of every key (2: the devices a program runs on, with it)
# environment variables that change how programs are traced or compiled
_VARIABLE_PREFIXES = ("XLA_", "JAX_", "TF_", "CUDA_", "NVIDIA_", "LIBTPU", "MULTIWALK_")
_VERSIONED = ("jax", "jaxlib", "numpy", "scipy", "ml_dtypes", "jax-cuda12-plugin", "jax-cuda12-pjrt",
              "jax-cuda13-plugin", "jax-cuda13-pjrt")

_COUNTS = {"loaded": 0, "stored": 0}
_LOCK = threading.Lock()
_WARNED: set[str] = set()


class _Unnamed(Exception):
    """A part of a key without a name that is the same in every process."""


# ---------------------------------------------------------------------------- keys
def key(kind: str, parts: tuple | None) -> str | None:
    """The file name (a digest) program ``kind`` with driver key ``parts`` is stored under here, or
    None where it is not stored: the store is off, ``parts`` is None (no lasting key), or a part
    has no lasting name (a user's function)."""
    if parts is None or folder() is None or jax.process_count() > 1:  # each process's programs are its own
        return None
    try:
        named = _name(parts)
    except _Unnamed:
        return None
    installation = _installation()
    if installation is None:
        return None
    h = hashlib.blake2b(digest_size=20)
    for text in (installation, _settings(), kind, named):
        h.update(text.encode())
        h.update(b"\0")
    return h.hexdigest()


def _name(value: Any) -> str:
    """``value`` written out the same way in every process, or :class:`_Unnamed`."""
    if isinstance(value, np.generic):  # before float: np.float64 is one
        return f"{_dtype_name(value.dtype)}({value.item()!r})"
    if value is None or type(value) in (bool, int, float, str, bytes):
        return repr(value)
    if type(value) in (tuple, list):
        return f"{type(value).__name__}({','.join(map(_name, value))})"
    if isinstance(value, tuple):  # a NamedTuple: its class too
        return f"{_library_name(type(value))}({','.join(map(_name, value))})"
    if type(value) is dict:
        return "dict(" + ",".join(sorted(f"{_name(k)}:{_name(v)}" for k, v in value.items())) + ")"
    if isinstance(value, np.dtype):
        return _dtype_name(value)
    if isinstance(value, np.ndarray):
        digest = hashlib.blake2b(np.ascontiguousarray(value).tobytes(), digest_size=16).hexdigest()
        return f"ndarray({value.shape},{_dtype_name(value.dtype)},{digest})"
    if isinstance(value, enum.Enum):
        return f"{_library_name(type(value))}.{value.name}"
    if isinstance(value, jax.tree_util.PyTreeDef):
        return f"tree({value})"
    if isinstance(value, jax.ShapeDtypeStruct):
        if value.sharding is not None:
            raise _Unnamed(value)
        try:
            dtype = np.dtype(value.dtype)
        except TypeError:  # JAX's own dtypes (PRNG keys)
            raise _Unnamed(value) from None
        return f"shape({value.shape},{_dtype_name(dtype)},{value.weak_type})"
    if isinstance(value, jax.sharding.SingleDeviceSharding):  # where outputs go (the devices are the installation's)
        (device,) = value.device_set
        return f"SingleDeviceSharding({device.platform}:{device.id},{value.memory_kind})"
    if isinstance(value, functools.partial):
        return f"partial({_name(value.func)},{_name(value.args)},{_name(value.keywords)})"
    if isinstance(value, type) and issubclass(value, np.generic):
        return f"type({np.dtype(value).name})"
    if isinstance(value, (type, types.FunctionType)):
        if isinstance(value, types.FunctionType) and value.__closure__:
            raise _Unnamed(value)  # what it closes over has no name
        return _library_name(value)
    if dataclasses.is_dataclass(value):  # a solver: its class and the fields it is compared by
        fields = ",".join(f"{f.name}={_name(getattr(value, f.name))}" for f in dataclasses.fields(value) if f.compare)
        return f"{_library_name(type(value))}({fields})"
    raise _Unnamed(value)


def _dtype_name(dtype: np.dtype) -> str:
    """A dtype's name, bytes and fields: ``dtype.str`` alone is ``<V1`` for several 8-bit floats."""
    return f"dtype({dtype.name},{dtype.str},{dtype.descr if dtype.fields else ''})"


def _library_name(obj: Any) -> str:
    """``module:qualname`` of a class or function of multiwalk's own modules, defined at their top
    level (what that name finds is ``obj``); :class:`_Unnamed` for anything else."""
    module_name, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not isinstance(module_name, str) or not (module_name == "multiwalk" or module_name.startswith("multiwalk.")):
        raise _Unnamed(obj)
    found: Any = sys.modules.get(module_name)
    for attribute in qualname.split("."):
        found = getattr(found, attribute, None)
    if found is not obj:  # a local function, a replaced attribute
        raise _Unnamed(obj)
    return f"{module_name}:{qualname}"


@functools.lru_cache(maxsize=1)
def _installation() -> str | None:
    """What of this installation programs depend on and a process cannot change: multiwalk's source
    files (their contents), the versions that trace and compile, the CPU and the devices; None
    where the sources or the CPU cannot be told (a zipped package, an unknown CPU): no store."""
    import importlib.metadata

    sources, cpu = _source_stamp(_package_folder()), _cpu_features()
    if sources is None or cpu is None:
        return None
    versions = []
    for name in _VERSIONED:
        try:
            versions.append(f"{name}={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name}=-")
    devices = [(d.platform, d.device_kind, d.id, d.process_index) for d in jax.devices()]
    backend = jax.devices()[0].client
    return repr((_FORMAT, sys.version, platform.machine(), cpu, versions, jax.__version__, devices,
                 backend.platform, backend.platform_version, sources))


def _cpu_features() -> str | None:
    """The CPU's model and instruction sets (Linux's ``/proc/cpuinfo``: x86's model name and flags,
    ARM's implementer, part and features): a program compiled for the CPU uses what this one has,
    and a cache folder may be shared by the nodes of a cluster.  None where they cannot be read."""
    wanted = ("model name", "flags", "CPU implementer", "CPU architecture", "CPU variant", "CPU part", "Features")
    found: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f.read(1 << 16).splitlines():
                name, _, value = line.partition(":")
                if name.strip() in wanted:
                    found.setdefault(name.strip(), value.strip())
    except OSError:
        return None
    return repr(sorted(found.items())) if found else None


def _package_folder() -> Path:
    return Path(__file__).resolve().parent


def _source_stamp(root: Path) -> str | None:
    """A digest of the contents of every file under ``root`` (but ``__pycache__``), ~4 ms for the
    package; None where it holds no Python file (a zipped package)."""
    h = hashlib.blake2b(digest_size=16)
    python_files = 0
    for base, folders, files in os.walk(root):
        folders[:] = sorted(f for f in folders if f != "__pycache__")
        for file in sorted(files):
            path = os.path.join(base, file)
            python_files += file.endswith(".py")
            h.update(f"{os.path.relpath(path, root)}\0".encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest() if python_files else None


def _settings() -> str:
    """What may change within a process: JAX's settings as this thread sees them, the variables."""
    config = sorted((name, value if isinstance(value, (str, int, float, bool, type(None))) else str(value))
                    for name, value in jax.config.values.items())
    variables = sorted((k, v) for k, v in os.environ.items() if k.startswith(_VARIABLE_PREFIXES))
    return repr((config, variables))


# ---------------------------------------------------------------------------- the folder
def folder() -> Path | None:
    """The store's folder (inside the persistent cache's), or None when that cache is off."""
    cache = persistent_cache.cache_dir()
    if cache is None or "://" in str(jax.config.jax_compilation_cache_dir) or not cache.is_absolute():
        return None  # off, or a remote folder (gs://...) JAX writes itself
    return cache / FOLDER_NAME


def counts() -> dict[str, int]:
    """Programs (and facts) this process loaded from the store and stored in it."""
    return dict(_COUNTS)


def _path(digest: str, suffix: str) -> Path | None:
    where = folder()
    return None if where is None else where / f"{digest}{suffix}"


# ---------------------------------------------------------------------------- programs
def named(fun: Any, digest: str | None) -> Any:
    """``fun`` under a name that ends with ``digest`` (the program's name, which JAX's persistent
    cache keys by), or ``fun`` itself for None.  So JAX's cache holds a stored program under a name
    of its own, and finds it only for a process of the same store key, which finds it in the store
    first.  Where the store lost it (an entry evicted, the store's folder deleted alone), the name
    gets the number of such losses (:func:`compile_and_save`): the next process compiles it anew,
    and stores it."""
    if digest is None:
        return fun

    @functools.wraps(fun)
    def program(*args: Any) -> Any:
        return fun(*args)

    losses = _losses(digest)
    program.__name__ = f"{getattr(fun, '__name__', 'program')}_mw{digest[:16]}" + (f"_{losses}" if losses else "")
    return program


def compilation(digest: str | None, lower: Callable[[Callable[[Any], Any]], Any],
                compile_lowered: Callable[[Any], Any], keep: Callable[[Any], Any]) -> Callable[[], Any | None]:
    """The driver's way to a program: returned, the function (run here or on a compile thread) that
    loads the program stored under ``digest``, or compiles it and stores it, and passes it to ``keep``.

    A stored program's file is read now and loaded when that function runs; it returns None where
    the program would not load (the entry is removed, so the caller's next look compiles it).
    Otherwise ``lower(name)`` traces and lowers it now (tracing reads JAX's per-thread settings),
    its function given to ``name`` first (:func:`named`), and ``compile_lowered(lowered)`` compiles it."""
    pending = load_later(digest)
    if pending is not None:
        def load_and_keep() -> Any | None:
            compiled = pending()
            return None if compiled is None else keep(compiled)

        return load_and_keep
    lowered = lower(functools.partial(named, digest=digest))
    return lambda: keep(compile_and_save(digest, lambda: compile_lowered(lowered)))


def _losses(digest: str) -> int:
    blob = _read(digest, ".lost")
    try:
        return int(blob) if blob else 0
    except ValueError:
        return 0


def load(digest: str | None) -> Any | None:
    """The compiled program stored under ``digest`` (a :class:`jax.stages.Compiled`), or None."""
    pending = load_later(digest)
    return None if pending is None else pending()


def load_later(digest: str | None) -> Any | None:
    """The stored program's file read now (None where there is none): returned, the function that
    loads it onto the devices (a GPU's programs take ~0.5 s each, so the driver loads several on
    threads at once), which returns None where it cannot (the entry is then removed, so the
    caller traces and compiles the program on the next look)."""
    blob = _read(digest, ".program")
    if blob is None:
        return None

    def deserialize_and_load() -> Any | None:
        from jax.experimental import serialize_executable

        try:
            payload, in_tree, out_tree, where = pickle.loads(blob)
            # on the devices it was compiled for: JAX's default is all of its default platform's,
            # so on a machine of two, a program of one asked for two shards of each argument
            devices = [{d.id: d for d in jax.devices(platform)}[i] for platform, i in where]
            compiled = serialize_executable.deserialize_and_load(payload, in_tree, out_tree, backend=devices[0].client,
                                                                 execution_devices=devices)
        except Exception as err:  # noqa: BLE001 - a damaged or foreign entry is compiled again
            _unreadable(digest, ".program", err)
            return None
        _count("loaded")
        return compiled

    return deserialize_and_load


def compile_and_save(digest: str | None, compile_program: Any) -> Any:
    """``compile_program()``, the compiled program stored under ``digest`` (unless None) where it was
    compiled here: not where JAX loaded it from its persistent cache, whose executables written out
    again lose code on the CPU (jaxlib 0.10: "Function ... not found" when the copy runs); nor a
    program that holds objects of this process (host callbacks, effects, constants)."""
    if digest is None:
        return compile_program()
    _listen_to_jax()
    _COMPILING.consulted = _COMPILING.loaded = False
    compiled = compile_program()
    # JAX says when it looked in its cache, and when it found the program there: stored only when it
    # looked and compiled (a JAX that says neither leaves the store empty, never holding a copy)
    if not _storable(compiled):
        return compiled
    if _COMPILING.consulted and not _COMPILING.loaded:
        # written beside the run, not before it (a GPU's loop takes ~0.2 s to serialize); the
        # interpreter waits for it at exit (not a daemon), and wait() for tests and benchmarks
        saving = threading.Thread(target=_save, args=(digest, compiled), name="multiwalk-store", daemon=False)
        with _LOCK:
            _SAVING.append(saving)
        saving.start()
    elif _COMPILING.loaded:  # JAX had it, the store not: a new name next time (named), to store it then
        _write(digest, ".lost", str(_losses(digest) + 1).encode())
    return compiled


_COMPILING = threading.local()  # what JAX said of the compilation on this thread
_SAVING: list[threading.Thread] = []  # programs being written


def wait() -> None:
    """Until the programs being written are written (each on a thread of its own)."""
    while True:
        with _LOCK:
            if not _SAVING:
                return
            saving = _SAVING.pop()
        saving.join()
_CONSULTED = "/jax/compilation_cache/compile_requests_use_cache"
_FOUND = "/jax/compilation_cache/cache_hits"


@functools.lru_cache(maxsize=1)
def _listen_to_jax() -> None:
    def listener(event: str, **_: Any) -> None:
        if event == _CONSULTED:
            _COMPILING.consulted = True
        elif event == _FOUND:
            _COMPILING.loaded = True

    jax.monitoring.register_event_listener(listener)


def _save(digest: str, compiled: Any) -> None:
    from jax.experimental import serialize_executable

    try:
        payload, in_tree, out_tree = serialize_executable.serialize(compiled)
        where = [(device.platform, device.id) for device in compiled._executable._unloaded_executable.device_list]
        blob = pickle.dumps((payload, in_tree, out_tree, where), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - not serializable here (JAX says which programs): traced in each process
        return
    if _write(digest, ".program", blob):
        _count("stored")


def _storable(compiled: Any) -> bool:
    """Whether ``compiled`` can be written and loaded elsewhere: not where it holds objects of this
    process, nor where JAX pruned arguments the program does not read (loaded again, such a
    program crashed the process on its first call: jaxlib 0.10.2, L-BFGS's start, whose key is unused)."""
    unloaded = getattr(getattr(compiled, "_executable", None), "_unloaded_executable", None)
    if unloaded is None:
        return False
    if len(getattr(unloaded, "kept_var_idx", ())) != compiled.in_tree.num_leaves:
        return False
    holds_process_objects = (getattr(unloaded, "host_callbacks", ()) or getattr(unloaded, "keepalive", ())
                             or getattr(unloaded, "ordered_effects", ()) or getattr(unloaded, "unordered_effects", ())
                             or getattr(unloaded, "pgle_profiler", None) is not None)
    return not holds_process_objects


# ---------------------------------------------------------------------------- small facts (shapes)
def load_value(digest: str | None) -> Any | None:
    """A small value (shapes of a start) stored under ``digest``, or None."""
    blob = _read(digest, ".value")
    if blob is None:
        return None
    try:
        value = pickle.loads(blob)
    except Exception as err:  # noqa: BLE001
        _unreadable(digest, ".value", err)
        return None
    _count("loaded")
    return value


def save_value(digest: str | None, value: Any) -> None:
    """Store a small picklable ``value`` under ``digest`` (nothing for None, or what cannot be pickled)."""
    if digest is None:
        return
    try:
        blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return
    if _write(digest, ".value", blob):
        _count("stored")


# ---------------------------------------------------------------------------- files
# A file is its contents' digest, then the contents: a damaged file (a disk error, a write cut short
# by a full disk) is told before anything is unpickled or handed to XLA.
_CHECK_BYTES = 16
_STALE_WRITE_SECONDS = 3600  # a ".writing-" file older than this was left by a killed process


def _read(digest: str | None, suffix: str) -> bytes | None:
    path = None if digest is None else _path(digest, suffix)
    if path is None:
        return None
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        _warn_once("read", f"multiwalk could not read its stored program {path} ({err}); compiling it")
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: evicted last (a file of another user's stays readable)
    check, contents = blob[:_CHECK_BYTES], blob[_CHECK_BYTES:]
    if check != hashlib.blake2b(contents, digest_size=_CHECK_BYTES).digest():
        _unreadable(digest, suffix, ValueError("its checksum does not match its contents"))
        return None
    return contents


def _write(digest: str, suffix: str, contents: bytes) -> bool:
    """Write atomically (a file renamed into place: a reader sees all of it or nothing), then
    evict the least recently used entries beyond the limits; whether it was written.  The file's
    permissions are the user's usual ones (the umask), so a group may share a cache folder."""
    path = _path(digest, suffix)
    if path is None:
        return False
    tmp = path.parent / f".writing-{uuid.uuid4().hex}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(tmp, "xb") as f:
                f.write(hashlib.blake2b(contents, digest_size=_CHECK_BYTES).digest() + contents)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _evict(path.parent)
    except OSError as err:
        _warn_once("write", f"multiwalk could not store a compiled program in {path.parent} ({err}); "
                            "later processes will trace it again")
        return False
    return True


def _evict(where: Path) -> None:
    """The least recently used entries removed beyond the limits, and writes that were cut short."""
    entries = []
    stale = time.time() - _STALE_WRITE_SECONDS
    for entry in os.scandir(where):
        with contextlib.suppress(OSError):
            stat = entry.stat()
            if entry.name.endswith((".program", ".value", ".lost")):
                entries.append((stat.st_mtime_ns, stat.st_size, entry.path))
            elif entry.name.startswith(".writing-") and stat.st_mtime < stale:
                os.unlink(entry.path)
    entries.sort()
    total = sum(size for _, size, _ in entries)
    while entries and (len(entries) > MAX_ENTRIES or total > MAX_BYTES):
        _, size, path = entries.pop(0)
        with contextlib.suppress(OSError):
            os.unlink(path)
        total -= size


def _unreadable(digest: str, suffix: str, err: BaseException) -> None:
    path = _path(digest, suffix)
    _warn_once("damaged", f"multiwalk could not load its stored program {path} "
                          f"({type(err).__name__}: {str(err)[:200]}); compiling it again")
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def _warn_once(what: str, message: str) -> None:
    with _LOCK:
        if what in _WARNED:
            return
        _WARNED.add(what)
    warnings.warn(message, stacklevel=3)


def _count(what: str) -> None:
    with _LOCK:
        _COUNTS[what] += 1
