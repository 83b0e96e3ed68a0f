"""The L-BFGS result (:class:`LBFGSResult`) and the seed's iteration table it prints."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...result import NOT_SAVED, Result, Status, start_reads, to_host, tree_to_host
from .. import lbfgs_onepass
from .state import HISTORY_STARTS, LBFGSRun, LBFGSState

if TYPE_CHECKING:  # scipy.sparse.linalg: imported when asked for (inverse_hessian)
    from .inverse_hessian import InverseHessian

__all__ = ["LBFGSResult", "host_starts", "start_host_starts", "table_header", "table_row"]


def table_header() -> str:
    """The seed's table header: I, NFN, FUNC, GNORM, STEPLENGTH."""
    return f"{'I':>5}  {'NFN':>6}  {'FUNC':>14}  {'GNORM':>14}  {'STEPLENGTH':>14}"


def table_row(i: int, nfev: Any, f: Any, gnorm: Any, stp: Any) -> str:
    """One row of the seed's table: iteration ``i``, evaluations, f, ||g||, step."""
    return f"{i:>5}  {int(nfev):>6}  {float(f):>14e}  {float(gnorm):>14e}  {float(stp):>14e}"


def host_starts(state: LBFGSRun, extra: Any = None) -> tuple[LBFGSState, Any]:
    """What the result needs of every start, as numpy arrays on the host: ``x`` (K, n) and the
    scalars; not the 2m n stored pairs or the one-pass rings (their fields None); with ``extra``
    (a tree of device arrays, the history), read in the same transfer.  In the one-pass layout,
    ``x_k`` is row ``k % 2`` of the ring ``X``, taken once ``k`` is on the host (each read of a
    device scalar is a round trip of its own)."""
    st, extra = tree_to_host(_read_by_result(state, extra))
    if isinstance(state.starts, lbfgs_onepass.OnePassState):
        x = to_host(state.starts.X[0, int(st.iteration[0]) % 2]).reshape(1, -1)  # (n / width, width) -> (1, n)
        return LBFGSState(x=x, g=None, d=None, P=None, ls=None, SY=None, YY=None, a=None, b=None,
                          **{k: getattr(st, k) for k in ("f", "gamma", "gg", "head", "count", "iteration", "nfev",
                                                          "gnorm", "xnorm", "stp", "status", "nonfinite")}), extra
    return st, extra


def start_host_starts(state: LBFGSRun, extra: Any = None) -> None:
    """Start the copies :func:`host_starts` reads (:func:`~multiwalk.result.start_reads`), so that
    reads before it (the driver's convergence test of the final state) and its own wait for one
    transfer, not one each."""
    start_reads(_read_by_result(state, extra))


def _read_by_result(state: LBFGSRun, extra: Any) -> tuple[Any, Any]:
    """The starts' fields :func:`host_starts` reads (the others None) and ``extra``: in the one-pass
    layout not ``x``, a row of the ring chosen by the iteration count."""
    if isinstance(state.starts, lbfgs_onepass.OnePassState):
        return state.starts._replace(X=None, G=None, S=None, w=None, ls=None, SY=None, YY=None, a=None,
                                     b=None), extra
    return state.starts._replace(P=None, d=None, g=None, ls=None, SY=None, YY=None, a=None, b=None), extra


@dataclass(repr=False)
class LBFGSResult(Result):
    """The L-BFGS result: the best start's ``x, fun, gnorm, iterations, nfev, status, message``,
    and every start's (``xs (K, n)``, ``funs``, ``gnorms``, ``iterations_per_start``,
    ``nfev_per_start``, ``statuses``, ``messages``).  ``history`` holds per-iteration ``f``,
    ``gnorm``, ``stp``, ``nfev`` of the first (up to 64) starts, row i after iteration i."""

    lazy_fields = frozenset({"grad"})  # n values on the device until read (Result.lazy_fields)

    gnorm: float = float("nan")
    iterations: int = 0
    nfev: int = 0
    xs: np.ndarray | None = None
    funs: np.ndarray | None = None
    gnorms: np.ndarray | None = None
    iterations_per_start: np.ndarray | None = None
    nfev_per_start: np.ndarray | None = None
    statuses: list[Status] = dataclasses.field(default_factory=list)
    messages: list[str] = dataclasses.field(default_factory=list)
    best: int = 0
    history: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    history_length: np.ndarray | None = None
    #: (n_free,) the gradient at ``x`` (the best start's; the one its convergence test was judged on)
    grad: np.ndarray | None = None
    #: with ``LBFGS(keep_pairs=True)``: the best start's stored pairs, oldest first, for
    #: :meth:`inverse_hessian`: ``{"s": (k, n), "y": (k, n), "gamma": float}`` (k <= m)
    pairs: dict[str, Any] | None = dataclasses.field(default=None, metadata=NOT_SAVED)

    def inverse_hessian(self) -> InverseHessian:
        """The L-BFGS approximation of the inverse Hessian at ``x`` as a scipy ``LinearOperator``
        (``H v`` by the two-loop recursion; ``.todense()`` for small n).  Needs ``LBFGS(keep_pairs=True)``."""
        if self.pairs is None:
            raise ValueError("inverse_hessian() needs the stored pairs: run with mw.LBFGS(keep_pairs=True) "
                             "(mw.minimize does), on the two-pass form (not kernel='onepass')")
        from .inverse_hessian import InverseHessian

        return InverseHessian(self.pairs["s"], self.pairs["y"], self.pairs["gamma"])

    def table(self, start: int = 0, every: int = 1) -> str:
        """The seed's iteration table (I, NFN, FUNC, GNORM, STEPLENGTH) of one start."""
        if self.history_length is None or start >= len(self.history_length):
            raise ValueError(f"no history is kept for start {start} (only the first {HISTORY_STARTS})")
        h = self.history
        lines = [table_header()]
        last = int(self.history_length[start]) - 1
        for i in range(1, last + 1):
            if i % every == 0 or i in (1, last):
                lines.append(table_row(i, h["nfev"][i, start], h["f"][i, start], h["gnorm"][i, start],
                                       h["stp"][i, start]))
        return "\n".join(lines)
