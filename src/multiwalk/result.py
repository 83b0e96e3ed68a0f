"""Status codes and the fields every result has (``x, fun, success, status, message, stats``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Status", "Result"]


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
