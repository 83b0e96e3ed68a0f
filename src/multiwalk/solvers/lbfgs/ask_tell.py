"""L-BFGS by reverse communication (:class:`AskTell`): the caller evaluates ``f`` and ``g``
wherever the iteration asks, for objectives that are not JAX.  The same pure functions as
``mw.solve`` compute the iterates (:mod:`~multiwalk.solvers.lbfgs.iteration`, and
:mod:`~multiwalk.solvers.lbfgs.bounds` with a box), one evaluation at a time."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...problem import Problem, _resolve_dtype
from ...result import Status
from .._common import check_state_fits
from ..lbfgs_common import _RUNNING
from ..more_thuente import LineSearchState, line_search_update
from .bounds import finish_box, start_box, trial_point_in_box
from .evaluation import Evaluation
from .iteration import Config, finish_xla, start, trial_point
from .solver import LBFGS
from .state import LBFGSState, state_bytes

__all__ = ["AskTell"]


def _checked_box(n: int, x0: Any, lower: Any, upper: Any) -> np.ndarray | None:
    """``[lower; upper]`` (2, n) float64, or None without a box: Problem's own checks of the box and
    of ``x0`` inside it (its objective a constant: only the box and x0 are read)."""
    if lower is None and upper is None:
        return None
    if np.shape(x0) != (n,):
        raise ValueError(f"x0 must have shape ({n},), got {np.shape(x0)}")
    box = Problem(objective=lambda x: jnp.zeros((), x.dtype), x0=x0, lower=lower, upper=upper)
    return np.stack([box.lower, box.upper])


class AskTell:
    """L-BFGS by reverse communication, for objectives that are not JAX (an external simulator).

    >>> opt = AskTell(n, m=7, x0=x0)
    >>> while opt.status == "evaluate":
    ...     x = opt.ask()                 # numpy array (n,)
    ...     opt.tell(f(x), grad(x))       # value and gradient there
    >>> opt.x, opt.f, opt.status          # 'done', or the name of an error status

    The first ``ask`` returns ``x0``.  The iterates are those of ``mw.solve(Problem(x0=x0), LBFGS(...))``
    (the same functions compute them).  ``lower``, ``upper`` (n,) give a box (L-BFGS-B, as
    ``Problem(lower=, upper=)``; +-inf where a side is unbounded): no point asked is outside it.
    ``status`` is ``'evaluate'`` while an evaluation is wanted,
    ``'done'`` on convergence, else the lower-case name of a :class:`~multiwalk.Status` (for instance
    ``'line_search_maxfev'``, ``'max_steps'``); ``message`` says what to change.
    """

    def __init__(self, n: int, m: int = 7, *, x0: Any, dtype: Any = None, lower: Any = None, upper: Any = None,
                 **options: Any) -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be a positive integer (the number of variables; seed istate=-3), got {n!r}")
        self.solver = LBFGS(m=m, **options)  # validates m and the options (istate=-3 for m)
        self._box = _checked_box(n, x0, lower, upper)
        if self.solver.starts is not None or self.solver.print_every is not None:
            raise ValueError("AskTell runs one problem and prints nothing: starts and print_every do not apply")
        if self.solver.diag is not None and callable(self.solver.diag):
            raise ValueError("AskTell takes diag as an array (n,); a diag(x) function is for mw.solve")
        self.dtype = _resolve_dtype(dtype)
        x0 = np.asarray(x0, dtype=np.float64)
        if x0.shape != (n,):
            raise ValueError(f"x0 must have shape ({n},), got {x0.shape}")
        if not np.all(np.isfinite(x0)):
            raise ValueError(f"x0[{int(np.flatnonzero(~np.isfinite(x0))[0])}] is not finite")
        if isinstance(self.solver.diag, np.ndarray) and self.solver.diag.shape != (n,):
            raise ValueError(f"diag has {self.solver.diag.shape[0]} entries but n={n}")
        self.n = int(n)
        need = state_bytes(self.n, self.solver.m, 1, self.dtype.itemsize, 0, isinstance(self.solver.diag, np.ndarray), False)
        check_state_fits("AskTell", (need, f"lower m={self.solver.m} (the state keeps 2m+3 vectors of n={n} values "
                                           "and two m x m matrices) or n"))
        cfg = self.solver._config(self.dtype, box=self._box is not None)
        if self._box is not None:
            self.solver._check_box_options()
            self._h0 = jnp.asarray(self._box, self.dtype)  # the box [lower; upper] (2, n), as mw.solve's state
        elif isinstance(self.solver.diag, np.ndarray):
            self._h0 = jnp.asarray(self.solver.diag, self.dtype)
        else:
            self._h0 = jnp.zeros((), self.dtype)
        self._jit_pieces(cfg)
        self._x0 = jnp.asarray(x0, self.dtype)
        self._state: LBFGSState | None = None
        self._ls: LineSearchState | None = None
        self._xt: jax.Array | None = None
        self.status = "evaluate"

    def _jit_pieces(self, cfg: Config) -> None:
        """The start, the trial point, the line search's update and the end of an iteration, jitted:
        L-BFGS-B's (:mod:`~multiwalk.solvers.lbfgs.bounds`) with a box, else L-BFGS's."""
        begin, end = (start_box, finish_box) if cfg.box else (start, finish_xla)
        self._start = jax.jit(lambda x, f, g, h0: begin(cfg, x, f, g, h0))
        if cfg.box:
            self._trial = jax.jit(lambda st, box: trial_point_in_box(st.x, st.d, st.ls.stp, box[0], box[1]))
        else:
            self._trial = jax.jit(lambda st, h0: trial_point(st))
        self._update = jax.jit(lambda ls, f, g, d: line_search_update(ls, f, g @ d)[0])
        self._finish = jax.jit(lambda st, ls, xt, ft, gt, h0: end(cfg, st, ls, Evaluation(xt, ft, gt, gt @ st.d), h0))

    @property
    def code(self) -> Status | None:
        """The :class:`~multiwalk.Status` once finished, else None."""
        if self._state is None or int(self._state.status) == _RUNNING:
            return None
        return Status(int(self._state.status))

    def ask(self) -> np.ndarray:
        """The point to evaluate next, ``(n,)``."""
        if self.status != "evaluate":
            raise RuntimeError(f"nothing to evaluate: the run has ended with status {self.status!r}")
        if self._state is None:
            self._xt = self._x0
        else:
            self._xt = self._trial(self._state._replace(ls=self._ls), self._h0)
        return np.asarray(self._xt)

    def tell(self, f: Any, g: Any) -> str:
        """Give ``f`` and the gradient ``g`` at the last asked point; returns the new ``status``."""
        if self._xt is None:
            raise RuntimeError("call ask() before tell()")
        g = np.asarray(g, dtype=np.float64)
        if g.shape != (self.n,):
            raise ValueError(f"g must have shape ({self.n},), got {g.shape}")
        f = jnp.asarray(float(f), self.dtype)
        g = jnp.asarray(g, self.dtype)
        xt, self._xt = self._xt, None
        if self._state is None:
            self._state = self._start(xt, f, g, self._h0)
            self._ls = self._state.ls
        else:
            self._ls = self._update(self._ls, f, g, self._state.d)
            if bool(self._ls.done):
                self._state = self._finish(self._state, self._ls, xt, f, g, self._h0)
                self._ls = self._state.ls
                if int(self._state.status) == _RUNNING and int(self._state.iteration) >= self.solver.max_iterations:
                    self._state = self._state._replace(status=jnp.asarray(int(Status.MAX_STEPS), jnp.int32))
        # A line search that ended before its first trial (improper input: not a descent
        # direction) needs no evaluation: end the iteration at once, as mw.solve does.
        while self.code is None and bool(self._ls.done) and int(self._ls.nfev) == 0:
            st = self._state
            self._state = self._finish(st, self._ls, st.x, st.f, st.g, self._h0)
            self._ls = self._state.ls
        code = self.code
        self.status = "evaluate" if code is None else ("done" if code.success else code.name.lower())
        return self.status

    @property
    def x(self) -> np.ndarray:
        """The current iterate (after a failed line search: its last point, see :mod:`~multiwalk.solvers.lbfgs.iteration`)."""
        return np.asarray(self._x0 if self._state is None else self._state.x)

    @property
    def f(self) -> float:
        return float("nan") if self._state is None else float(self._state.f)

    @property
    def g(self) -> np.ndarray | None:
        return None if self._state is None else np.asarray(self._state.g)

    @property
    def iterations(self) -> int:
        return 0 if self._state is None else int(self._state.iteration)

    @property
    def nfev(self) -> int:
        """Evaluations told so far."""
        if self._state is None:
            return 0
        pending = 0 if self.code is not None else int(self._ls.nfev)
        return int(self._state.nfev) + pending

    @property
    def message(self) -> str:
        code = self.code
        if code is None:
            return "running: evaluate f and g at ask()"
        return self.solver._status_message(code)


