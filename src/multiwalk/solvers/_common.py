"""What the solvers share: non-finite objective values, option validators, the state's memory.

* :func:`worst_if_nonfinite`: every solver treats an objective value that is NaN, +inf or -inf
  as worse than anything (+inf) and counts it (``result.stats["nonfinite"]``).  A -inf is no
  minimum: left as it is, it would win every comparison (an accepted move, a best point, a
  line search's sufficient decrease) while saying nothing about the problem.
* ``check_*_option``: one validator per kind of option, each raising an error that names the
  option, the value given and what is allowed (before anything is compiled).
* :func:`check_state_fits`: the state a solver would make, estimated from its options, the
  problem's size and dtype, against the memory of the devices it may run on.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "worst_if_nonfinite", "check_int_option", "check_number_option", "check_vector_option", "check_choice_option",
    "check_bool_option", "check_callable_option", "device_memory", "check_state_fits",
]


# ---------------------------------------------------------------------------- non-finite values
def worst_if_nonfinite(f: Any) -> tuple[Any, Any]:
    """``(f with every NaN, +inf and -inf replaced by +inf, the mask of those replaced)``.

    Any shape; numpy in, numpy out (result builders), else jax (inside a traced step or a Pallas
    kernel body, where ``f`` is one value per lane)."""
    xp = np if isinstance(f, (np.ndarray, np.generic, float, int)) else jnp
    bad = ~xp.isfinite(f)
    return xp.where(bad, xp.full_like(f, np.inf), f), bad


# ---------------------------------------------------------------------------- option validators
def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _given(value: Any) -> str:
    """The value as the message shows it: its repr, and its type where that is the trouble."""
    if _is_real(value) or value is None:
        return repr(value)
    return f"{value!r} (a {type(value).__name__})"


def check_int_option(name: str, value: Any, minimum: int, none_ok: bool = False) -> int | None:
    """``value`` as an int; ValueError unless it is an integer (not a bool) >= ``minimum``, or None if allowed."""
    if none_ok and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        what = {1: "a positive integer", 0: "a non-negative integer"}.get(minimum, f"an integer >= {minimum}")
        raise ValueError(f"{name} must be {what}{' or None' if none_ok else ''}, got {_given(value)}")
    return int(value)


def _range_words(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is None and high is None:
        return "a finite number"
    if high is None:
        if low == 0:
            return "a positive number" if low_open else "a non-negative number"
        return f"a number {'>' if low_open else '>='} {low}"
    if low is None:
        return f"a number {'<' if high_open else '<='} {high}"
    return f"a number in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"


def check_number_option(
    name: str, value: Any, low: float | None = None, high: float | None = None, *, low_open: bool = False,
    high_open: bool = False, none_ok: bool = False,
) -> float | None:
    """``value`` as a float; ValueError unless it is a finite real number (int or float, not a bool
    or a string) in the range ``low .. high`` (each end closed unless ``*_open``; None: no bound)."""
    if none_ok and value is None:
        return None
    ok = _is_real(value) and np.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        what = _range_words(low, high, low_open, high_open)
        raise ValueError(f"{name} must be {what}{' or None' if none_ok else ''}, got {_given(value)}")
    return float(value)


def check_vector_option(
    name: str, value: Any, *, positive: bool = False, non_negative: bool = False, scalar_ok: bool = False,
    none_ok: bool = False, length: int | None = None,
) -> np.ndarray | None:
    """``value`` as a float64 array (1-D, or 0-D where ``scalar_ok``); ValueError unless it holds
    finite real numbers (positive, or >= 0, if asked; ``length`` of them if given)."""
    if none_ok and value is None:
        return None
    kind = "positive " if positive else "non-negative " if non_negative else "finite "
    what = f"a {kind}number or a list of {kind}numbers" if scalar_ok else f"a list of {kind}numbers"
    if length is not None:
        what += f" ({length} of them)"
    try:
        ok_type = not isinstance(value, (str, bytes)) and not isinstance(value, bool)
        arr = np.asarray(value, dtype=np.float64) if ok_type else None
    except (TypeError, ValueError):
        arr = None
    ok = arr is not None and (arr.ndim == 1 or (scalar_ok and arr.ndim == 0)) and bool(np.all(np.isfinite(arr)))
    if ok and arr.ndim == 1 and arr.size == 0:
        ok = False
    if ok and positive:
        ok = bool(np.all(arr > 0))
    if ok and non_negative:
        ok = bool(np.all(arr >= 0))
    if ok and length is not None and arr.ndim == 1:
        ok = arr.size == length
    if not ok:
        raise ValueError(f"{name} must be {what}{' or None' if none_ok else ''}, got {_given(value)}")
    return arr


def check_choice_option(name: str, value: Any, choices: tuple) -> Any:
    """``value``; ValueError unless it is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {_given(value)}")
    return value


def check_bool_option(name: str, value: Any) -> bool:
    """``value``; TypeError unless it is True or False."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {_given(value)}")
    return bool(value)


def check_callable_option(name: str, value: Any, what: str = "a function", none_ok: bool = True) -> Callable | None:
    """``value``; TypeError unless it is callable (or None if allowed)."""
    if (value is None and none_ok) or callable(value):
        return value
    raise TypeError(f"{name} must be {what}{' or None' if none_ok else ''}, got {_given(value)}")


# ---------------------------------------------------------------------------- memory of the state
def device_memory(device: Any = None) -> tuple[int, str]:
    """``(bytes, what they are)``: the memory one device can hold, from its ``memory_stats()``'s
    ``bytes_limit`` (GPUs), else the host's physical memory (CPUs report none)."""
    device = jax.devices()[0] if device is None else device
    try:
        stats = device.memory_stats()
    except Exception:  # backends without memory statistics
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), f"one {device.platform.upper()} device holds"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this host's physical memory is"


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


def check_state_fits(name: str, estimate: tuple[int, str] | None, n_devices: int = 1) -> None:
    """ValueError, before anything is compiled, when the state of solver ``name`` cannot fit in the
    memory of ``n_devices`` devices; ``estimate``: ``(bytes, what to lower)``
    (:meth:`~multiwalk.solvers.base.Solver.state_memory`), None: nothing to check.  The state is a
    lower bound of what a run needs (the loop's temporaries come on top), so a state that fits
    may still not run."""
    if estimate is None:
        return
    need, advice = estimate
    have, what = device_memory()
    if need <= have * max(1, n_devices):
        return
    where = f"{what} {_gib(have)}" + (f" (x {n_devices} devices)" if n_devices > 1 else "")
    raise ValueError(f"{name}'s state would need {_gib(need)} but {where}: {advice}")
