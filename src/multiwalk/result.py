"""Status codes and the fields every result has (``x, fun, success, status, message, stats``).

A solver's result is a dataclass subclass of :class:`Result` with the solver's own fields;
:meth:`Result.save` writes every field of any of them, so a new field is saved without more code
(a field that holds an object rather than data is marked ``metadata=NOT_SAVED``).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Status", "Result", "NOT_SAVED"]

NOT_SAVED = {"saved": False}
"""Field metadata, ``field(..., metadata=NOT_SAVED)``: :meth:`Result.save` leaves the field out (an
object, not data: the problem, a solver state, other results)."""


class Status(enum.IntEnum):
    """Why a run ended.  ``SUCCESS`` is the only one for which ``result.success`` is True."""

    SUCCESS = 0  #: the solver ran to its natural end (all iterations, or converged)
    MAX_STEPS = 1  #: a convergence solver used its whole iteration budget without converging
    TIME_LIMIT = 2  #: stopped at solve(..., time_limit=...); the result is partial
    INTERRUPTED = 3  #: stopped by Ctrl-C or SIGTERM (a batch system's time limit); the result is partial
    FAILED = 4  #: the solver could not go on (e.g. no finite objective value anywhere)

    def describe(self) -> str:
        return {
            Status.SUCCESS: "finished",
            Status.MAX_STEPS: "the iteration budget was used up before convergence",
            Status.TIME_LIMIT: "stopped at the time limit; the result holds what was done",
            Status.INTERRUPTED: "interrupted (Ctrl-C or SIGTERM); the result holds what was done",
            Status.FAILED: "failed",
        }[self]


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
