"""What a worker process of a non-JAX objective runs (:mod:`multiwalk.host_objective`), outside the
``multiwalk`` package on purpose: importing anything of the package runs ``multiwalk/__init__``,
which imports JAX and every solver.  A worker runs only what is here (and the user's function),
whatever its fork server imported before forking it (multiwalk.executors says what and why).  Only
the standard library, NumPy and cloudpickle here.
"""

from __future__ import annotations

import hashlib
import math
import os
import signal
from typing import Any

import cloudpickle
import numpy as np

__all__ = ["evaluate_rows", "evaluate_piece", "ignore_ctrl_c", "ready", "start_worker"]

_LOADED: dict[str, tuple[Any, ...]] = {}  # a worker's functions, by the digest of their payload


def _load(payload: bytes) -> tuple[Any, ...]:
    """``(function, args, takes_args, vectorized, ignore_error)`` from its cloudpickle payload,
    unpickled once per worker process."""
    key = hashlib.sha1(payload).hexdigest()
    loaded = _LOADED.get(key)
    if loaded is None:
        loaded = _LOADED[key] = cloudpickle.loads(payload)
    return loaded


def describe(err: BaseException) -> str:
    """``"TypeName: message"`` on one line (the type alone when there is no message)."""
    text = str(err).strip().replace("\n", " ")
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def evaluate_rows(spec: tuple[Any, ...], X: np.ndarray, first: int) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """The objective at each row of ``X`` (m, n) (float64), rows ``first .. first+m-1`` of the batch:
    ``(values (m,), [(row, exception), ...])``.  A row that raised is NaN with ``ignore_error``;
    without, evaluation stops at the first one (the rest NaN, the error listed).  A vectorized
    call that raised lists every row of ``X`` (all are NaN)."""
    fn, args, takes_args, vectorized, ignore_error = spec
    values = np.full(len(X), math.nan)
    errors: list[tuple[int, str]] = []
    if vectorized:
        try:
            out = np.asarray(fn(X, args) if takes_args else fn(X), dtype=np.float64)
            if out.shape != (len(X),):
                raise ValueError(f"a vectorized objective must return shape ({len(X)},) for X of shape {X.shape}, "
                                 f"got shape {out.shape}")
            values[:] = out
        except Exception as err:  # noqa: BLE001 - the user's function: reported with its rows
            what = describe(err)
            errors = [(first + i, what) for i in range(len(X))]  # every row is NaN: each counts as an error
        return values, errors
    for i, x in enumerate(X):
        try:
            out = np.asarray(fn(x, args) if takes_args else fn(x), dtype=np.float64)
            if out.shape not in ((), (1,)):
                raise ValueError(f"the objective must return one number, got an array of shape {out.shape}")
            values[i] = out.reshape(())
        except Exception as err:  # noqa: BLE001 - the user's function: reported with its row
            errors.append((first + i, describe(err)))
            if not ignore_error:
                break
    return values, errors


def evaluate_piece(payload: bytes, X: np.ndarray, first: int) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """A worker's task: :func:`evaluate_rows` with the function unpickled from ``payload``."""
    return evaluate_rows(_load(payload), X, first)


def ignore_ctrl_c() -> None:
    """A worker process's initializer: Ctrl-C reaches the whole process group, but only the driver
    acts on it (it ends the run after the current chunk); a worker killed by it would break the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_worker(paths: tuple[str, ...] = ()) -> None:
    """A worker process's initializer: Ctrl-C ignored (:func:`ignore_ctrl_c`), and ``paths`` put
    first on ``sys.path`` (the input's folder of ``multiwalk run``, where the objective's module may
    import its neighbours)."""
    import sys

    ignore_ctrl_c()
    sys.path[:0] = [p for p in paths if p not in sys.path]


def ready() -> int:
    """A task that does nothing (its process id): sent to start the workers before the first batch."""
    return os.getpid()
