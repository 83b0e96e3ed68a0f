"""What identifies a problem, written into checkpoints so that a resume of another problem is refused.

:func:`problem_identity` gives, for each part of a problem (its function, the bounds, the data,
the dtype, ...), a short description for messages and a digest; :func:`changes` lists the parts
that differ between two identities.  It is computed once per ``solve()`` call and must stay
cheap at any size (``n`` of 10^9):

* a function is known by its module and qualified name and a digest of its code object: bytecode,
  constants, the global names it reads, and what its closure holds (numbers and strings by value,
  arrays as below, functions recursively).  Functions it calls by global name count by name only;
  digests from another Python version are not compared (their bytecode differs), only names.
* an array of up to 2^20 bytes by all its bytes; a larger one by its shape, dtype and a strided
  sample of 4097 values (a change that misses the sample is not seen);
* starting points (``x0``, a deconvolution's starting ``model``) by their shape only: the
  checkpoint holds where the run is, so a resume may be given other starts.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
import types
from typing import Any

import numpy as np

__all__ = ["problem_identity", "changes", "refuse_other_problem"]

FULL_DIGEST_BYTES = 1 << 20  # arrays up to this size are digested whole (~1 ms)
SAMPLE_VALUES = 4096  # else this many values at a stride, plus the last one
# labels, or follow from others (a Deconvolution's device copies of its images and its PSF's power, made on first use)
_NOT_DIGESTED = ("names", "free_index", "_n_source", "_takes_args", "is_model", "_traced", "_device_images", "_psf_power")
_STARTS = ("x0", "model")  # where a run starts, not what it solves (see the module docstring)
MAX_DEPTH = 6  # how deep closures, containers and callable objects are followed


def _digest(*parts: bytes) -> str:
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()


def _array(value: Any) -> tuple[str, str]:
    """``(description, digest)`` of an array: whole up to FULL_DIGEST_BYTES, else a strided sample."""
    shape, dtype = tuple(np.shape(value)), np.dtype(value.dtype) if hasattr(value, "dtype") else None
    if dtype is None or not isinstance(dtype, np.dtype) or dtype.kind not in "biufcU":  # a typed PRNG key, objects
        return f"{type(value).__name__} {shape}", _digest(repr(shape).encode(), type(value).__name__.encode())
    size = int(np.prod(shape, dtype=np.int64))
    if size * dtype.itemsize <= FULL_DIGEST_BYTES:
        values = np.ascontiguousarray(np.asarray(value))
        how = b"all"
    else:  # the sample is taken where the array lies (a large jax array is not copied whole to the host)
        flat = value.reshape(-1)
        stride = size // SAMPLE_VALUES
        values = np.concatenate([np.asarray(flat[::stride][:SAMPLE_VALUES]), np.asarray(flat[-1:])])
        how = f"sample {stride}".encode()
    shown = f"{values.tolist()}" if size <= 6 else f"array {shape} {dtype}"
    return shown, _digest(repr(shape).encode(), str(dtype).encode(), how, values.tobytes())


def _code(code: types.CodeType) -> bytes:
    """The parts of a code object that define what it computes (not its line numbers)."""
    consts = []
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            consts.append(_code(c))
        elif isinstance(c, frozenset):  # its repr's order depends on the process's string hashing
            consts.append(repr(sorted(map(repr, c))).encode())
        else:
            consts.append(repr(c).encode())
    return _digest(code.co_code, *consts, repr(code.co_names).encode()).encode()


def _function(fn: Any, depth: int) -> tuple[str, str]:
    """``(module.qualname, digest)`` of a callable (see the module docstring)."""
    if isinstance(fn, functools.partial):
        name, inner = _function(fn.func, depth + 1)
        bound = _value((fn.args, fn.keywords), depth + 1)[1]
        return f"partial({name})", _digest(inner.encode(), bound.encode())
    fn = inspect.unwrap(fn) if hasattr(fn, "__wrapped__") else fn  # jax.jit, functools.wraps
    if isinstance(fn, types.MethodType):
        name, inner = _function(fn.__func__, depth + 1)
        return name, _digest(inner.encode(), type(fn.__self__).__qualname__.encode())
    target = fn if isinstance(fn, types.FunctionType) else getattr(type(fn), "__call__", None)  # noqa: B004
    owner = fn if isinstance(fn, types.FunctionType) else type(fn)
    name = f"{getattr(owner, '__module__', '?')}.{getattr(owner, '__qualname__', type(owner).__name__)}"
    if not isinstance(target, types.FunctionType):  # a builtin or a ufunc: its name is all there is
        return name, _digest(name.encode())
    parts = [name.encode(), _code(target.__code__)]
    for cell in target.__closure__ or ():  # what a closure holds (a model function, a shape, data arrays)
        try:
            parts.append(_value(cell.cell_contents, depth + 1)[1].encode())
        except ValueError:  # an empty cell
            parts.append(b"empty")
    if owner is not fn and hasattr(fn, "__dict__"):  # a callable object: what it holds
        parts.append(_value(vars(fn), depth + 1)[1].encode())
    return name, _digest(*parts)


def _value(value: Any, depth: int = 0) -> tuple[str, str]:
    """``(description, digest)`` of any part of a problem (``depth``: how far inside the part;
    beyond MAX_DEPTH only an object's kind counts, so self-referring closures and lists end)."""
    if depth > MAX_DEPTH:
        return type(value).__qualname__, _digest(type(value).__qualname__.encode())
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, np.dtype)):
        text = repr(value)
        return (text if len(text) <= 80 else text[:77] + "..."), _digest(text.encode())
    if isinstance(value, types.ModuleType):  # a closure over jax.numpy: jnp.shape and jnp.dtype are no array's
        return f"module {value.__name__}", _digest(b"module", value.__name__.encode())
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return _array(value)
    if callable(value):
        return _function(value, depth)
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: repr(kv[0]))
        parts = [_value(k, depth + 1)[1] + _value(v, depth + 1)[1] for k, v in items]
        shown = repr(value) if len(items) <= 6 and all(np.isscalar(v) for v in value.values()) else f"dict of {len(items)}"
        return shown, _digest(b"dict", *(p.encode() for p in parts))
    if isinstance(value, (tuple, list)):
        if len(value) > 256:  # a long list of numbers: as an array (one digest, not one per entry)
            try:
                return _array(np.asarray(value, dtype=np.float64))
            except (TypeError, ValueError):
                pass
        described = [_value(v, depth + 1) for v in value]
        shown = f"({', '.join(d for d, _ in described)})" if len(value) <= 4 else f"{type(value).__name__} of {len(value)}"
        return shown, _digest(type(value).__name__.encode(), *(h.encode() for _, h in described))
    return type(value).__qualname__, _digest(type(value).__qualname__.encode())  # an object: its kind only


def problem_identity(problem: Any) -> dict[str, Any]:
    """``{part: [description, digest]}`` of ``problem`` (a :class:`multiwalk.Problem` or another
    problem kind, e.g. ``multiwalk.deconv.Deconvolution``), and ``"python"``: the version whose
    bytecode the function digests are of."""
    out: dict[str, Any] = {"python": f"{sys.version_info[0]}.{sys.version_info[1]}"}
    is_model = bool(getattr(problem, "is_model", False))
    for name, value in sorted(vars(problem).items()):
        if name in _NOT_DIGESTED or (name == "_log_prior" and value is None):  # no prior: as before priors
            continue
        if name == "matmul_precision" and value == "highest":  # the default: as before the option
            continue
        label = {"_user_fn": "model" if is_model else "objective", "_user_vg": "value_and_grad",
                 "_log_prior": "log_prior"}.get(name, name)
        if label in _STARTS and hasattr(value, "shape"):
            shape = tuple(np.shape(value))
            out[label] = [f"shape {shape}", _digest(b"start", repr(shape).encode())]
        else:
            out[label] = list(_value(value))
    return out


def changes(saved: dict[str, Any], now: dict[str, Any], names: dict[str, str] | None = None) -> list[str]:
    """What differs between two identities, one phrase per part (``"lower: [0, 0] then, [1, 0] now"``);
    ``names`` gives the caller's name of a part (``{"lower": "min_list"}``: ``"lower (min_list): ..."``)."""
    same_python = saved.get("python") == now.get("python")
    out = []
    for key in sorted((set(saved) | set(now)) - {"python"}):
        part = f"{key} ({names[key]})" if names and key in names else key
        was, is_ = saved.get(key), now.get(key)
        if was is None or is_ is None:
            out.append(f"{part}: {'absent' if was is None else was[0]} then, {'absent' if is_ is None else is_[0]} now")
            continue
        function = key in ("objective", "model", "value_and_grad")
        if was[1] == is_[1] or (function and not same_python and was[0] == is_[0]):
            continue
        if was[0] == is_[0]:
            kind = "code or closure" if function else "values"
            out.append(f"{part}: {is_[0]}, other {kind} than when it was written")
        else:
            out.append(f"{part}: {was[0]} then, {is_[0]} now")
    return out


def refuse_other_problem(path: Any, meta: dict[str, Any], identity: dict[str, Any],
                         names: dict[str, str] | None = None) -> None:
    """Raise ValueError naming what changed if the checkpoint ``path`` (its ``meta``) was written
    for another problem than the one of ``identity`` (``names``: see :func:`changes`).  Checkpoints
    written before identities were saved are not checked."""
    saved = meta.get("problem")
    if saved is None:
        return
    changed = changes(saved, identity, names)
    if changed:
        raise ValueError(
            f"{path} was written for another problem: {'; '.join(changed)}: resume it with the problem that "
            "wrote it, or start the run anew (without resume)"
        )
