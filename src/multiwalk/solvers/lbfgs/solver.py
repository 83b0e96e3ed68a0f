"""The L-BFGS solver, :class:`LBFGS`: its options, the checks before compiling, the start, the
choice of execution form for each chunk, and the result.

The algorithm is in :mod:`~multiwalk.solvers.lbfgs` (package docstring); the iteration itself in
:mod:`~multiwalk.solvers.lbfgs.iteration`, its execution forms in
:mod:`~multiwalk.solvers.lbfgs.forms`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import operator
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...compile_cache import cached_jit
from ...kernels import KERNELS, KernelPlan, check_launch_options
from ...problem import Problem
from ...result import Deferred, Status
from .. import lbfgs_kernel, lbfgs_onepass
from .._common import (
    check_choice_option,
    check_finite_box,
    check_int_option,
    check_number_option,
    uniform_in_box,
    worst_if_nonfinite,
)
from ..base import Phase, RunPlan, Solver
from ..lbfgs_common import _RUNNING
from ..more_thuente import LineSearchParams
from . import conversion, forms
from .bounds import start_box
from .evaluation import check_line_hooks, line_evaluation, line_evaluation_into, line_evaluation_reason
from .iteration import Config, start
from .result import LBFGSResult, host_starts, start_host_starts, table_header, table_row
from .state import HISTORY_STARTS, History, LBFGSRun, run_shapes, state_bytes

GTOL_FLOOR = 1e-4  # the seed's restriction on GTOL: at or below it, the default 0.9 is used

__all__ = ["LBFGS", "IterationTable"]

DEFAULT_PGTOL = 1e-5  # scipy's L-BFGS-B default
BOX_REASON = ("a problem with a box runs L-BFGS-B in the XLA form (its Cauchy point and subspace step have no "
              "fused kernel)")
TESTS_REASON = ("pgtol or frel_tol on a problem without a box runs the XLA form (the fused kernels have no pass for "
                "max |g| or the relative reduction of f)")


def _digest(arr: np.ndarray) -> str:
    """A short digest of an array's bytes (a diag option in cache keys and checkpoints)."""
    return hashlib.blake2b(arr.tobytes(), digest_size=16).hexdigest()


class IterationTable:
    """The seed's iteration table (I, NFN, FUNC, GNORM, STEPLENGTH) of the first start, printed
    as the run goes: the :class:`~multiwalk.solvers.base.Writer` an ``LBFGS(print_every=...)``
    brings to every run (:meth:`LBFGS.writer`)."""

    def __init__(self, solver: LBFGS) -> None:
        self.solver = solver

    def write(self, problem: Problem, state: LBFGSRun, first: int, last: int) -> None:
        self.solver.print_rows(problem, state, first, last)

    def flush(self) -> None:
        """Nothing held: every row is printed when written."""


@dataclass(frozen=True, eq=False)
class LBFGS(Solver):
    """Liu & Nocedal's L-BFGS with the Moré-Thuente line search (the seed's ``lbfgs``).

    Parameters
    ----------
    m : number of stored correction pairs (3 <= m <= 7 recommended; memory is ``2 m n`` values).
    eps : stop when ``||g|| < eps * max(1, ||x||)``.
    max_iterations : iteration limit (the seed's ``icall``); reaching it is ``MAX_STEPS``.
    maxfev : evaluations allowed in one line search.
    gtol, ftol : the strong Wolfe constants: ``|phi'(stp)| <= gtol |phi'(0)|``,
        ``phi(stp) <= phi(0) + ftol stp phi'(0)``.  Constraint ``ftol < gtol < 1``.
    xtol : relative width of the line search's interval of uncertainty at which it gives up;
        default the machine epsilon of the problem's dtype.
    stpmin, stpmax : bounds of the step.
    diag : the diagonal ``H0`` instead of ``gamma I``: a positive array ``(n,)`` or a JAX
        function ``diag(x) -> (n,)`` called at each iteration (the seed's ``diagco``).
    print_every : print the seed's table (I, NFN, FUNC, GNORM, STEPLENGTH) of the first start
        every this many iterations (0: first and last only); ``None`` prints nothing.
    starts : draw this many starting points uniformly in the problem's box (needs lower/upper)
        instead of using ``x0``; each runs as an independent problem.
    line_search : ``"mcsrch"`` (Nocedal's, as in the seed) or ``"dcsrch"`` (MINPACK-2, as in
        scipy's L-BFGS-B).
    kernel : ``"auto"`` (default), ``"xla"`` or ``"pallas"``: how the two passes over the stored
        pairs run - as XLA operations, or as two fused Pallas (Triton) kernels
        (:mod:`multiwalk.solvers.lbfgs_kernel`; one start, ``H0 = gamma I``).
        ``"auto"`` uses the kernels on GPUs; one problem split along ``n`` over devices runs them
        on each device's columns (``jax.shard_map``, the small sums added by ``psum``).  Same iterates up to
        rounding; ``result.stats["kernel"]`` and ``["kernel_reason"]`` say which ran and why.
        With the kernels on one device, the line search evaluates through ``value_and_grad.along``
        where the problem's ``value_and_grad`` has one (``along(x, d, stp) -> (f, g, g'd)`` at
        ``x + stp d``; cute's Extended Rosenbrock: one Pallas kernel on GPUs);
        ``["line_evaluation"]`` says how it evaluated.
        ``"onepass"``: ONE Pallas kernel per line-search evaluation (direction, trial point, f and
        g by the problem's block-local ``value_and_grad.block``, and every product the small
        matrices need; :mod:`multiwalk.solvers.lbfgs_onepass`), for one start with ``H0 = gamma I``
        whose ``value_and_grad`` has ``.block`` (cute's Extended Rosenbrock); else the two-pass
        form, ``stats["kernel_reason"]`` saying why.  Split over devices, it runs under
        ``jax.shard_map`` on every device's columns, its sums added by ``psum``.  ``"auto"`` takes
        it where it applies on GPUs in float64 (measured faster on one with the same iterations
        and evaluations; on several only when split over all of them; :func:`lbfgs_onepass.plan`).
    pgtol : stop when ``max_i |proj g_i| <= pgtol``, the projected gradient of scipy's L-BFGS-B.
        With a box (``Problem(lower=, upper=)``) it is the test (default 1e-5, scipy's; ``eps`` is
        not used).  Without a box: ``max_i |g_i| <= pgtol`` (no projection), beside ``eps``'s
        test, the first met stopping the run (None, the default: off; ``eps=0`` leaves pgtol's alone).
    frel_tol : stop when f decreased in one iteration by a relative ``(f_k - f_{k+1}) /
        max(|f_k|, |f_{k+1}|, 1) <= frel_tol`` (scipy L-BFGS-B's ``ftol``; None, the default: off).
        A run it stops ends ``SMALL_REDUCTION``, not ``SUCCESS``, unless the gradient test holds
        at that point too (scipy calls both convergence).
    kernel_block, kernel_warps : Pallas launch tuning: columns per program (a power of two)
        and warps per program (None: the module's defaults).  With ``kernel="onepass"``: the
        columns of one block step of its kernel (``2 x`` rows of Rosenbrock's pairs) and its warps.
    print_vectors : what the table adds (the seed's ``iprint[2]``): 0 nothing; 1 x and g at the
        start; 2 also x at every printed iteration; 3 also g.  Of the first start; for small n
        (2 and 3 run one iteration per chunk, to print every iterate).
    keep_pairs : keep the best start's stored pairs (2 m n values, on the host) in the result, for
        ``result.inverse_hessian()`` (scipy's ``hess_inv``; :func:`multiwalk.minimize` sets it).

    A problem with a box (``Problem(lower=, upper=)``) runs L-BFGS-B (Byrd, Lu, Nocedal and Zhu
    1995, as scipy's): the generalised Cauchy point, subspace minimisation, line searches that
    never leave the box (:mod:`~multiwalk.solvers.lbfgs.bounds`), in the XLA form; ``gnorm`` is then
    ``max |proj g|``.  ``starts`` are drawn in the box.
    """

    m: int = 7
    eps: float = 1e-5
    max_iterations: int = 2000
    maxfev: int = 20
    gtol: float = 0.9
    ftol: float = 1e-4
    xtol: float | None = None
    stpmin: float = 1e-20
    stpmax: float = 1e20
    diag: Any = None
    print_every: int | None = None
    starts: int | None = None
    line_search: str = "mcsrch"
    kernel: str = "auto"
    kernel_block: int | None = None
    kernel_warps: int | None = None
    pgtol: float | None = None
    frel_tol: float | None = None
    keep_pairs: bool = False
    print_vectors: int = 0

    # how, not what: a resume may change them
    resumable_options = ("kernel", "kernel_block", "kernel_warps", "keep_pairs", "print_vectors")
    # True: the fused one-device loop keeps both gradients in one (2, n) buffer when the line
    # search evaluates through value_and_grad.along.into (run_chunk): n values fewer per iteration,
    # 3 n more per chunk.  Opt-in (a subclass) until a GPU measurement shows the gain;
    # False: pass B copies the new gradient into the loop's g buffer.
    gradient_rows: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_choice_option("kernel", self.kernel, (*KERNELS, "onepass"))
        check_launch_options(self, why=" (Triton needs that)")
        check_int_option("m", self.m, 1)
        check_int_option("max_iterations", self.max_iterations, 1)
        check_int_option("maxfev", self.maxfev, 1)
        check_int_option("print_every", self.print_every, 0, none_ok=True)
        check_int_option("starts", self.starts, 1, none_ok=True)
        object.__setattr__(self, "eps", check_number_option("eps", self.eps, 0))
        object.__setattr__(self, "ftol", check_number_option("ftol", self.ftol, 0, low_open=True))
        object.__setattr__(self, "gtol", check_number_option("gtol", self.gtol, 0, low_open=True))
        if self.gtol <= GTOL_FLOOR:  # the seed's rule: reset to the default and go on, with a warning
            warnings.warn(f"LBFGS: gtol={self.gtol} is not above {GTOL_FLOOR} (the line search's curvature "
                          "constant; the seed's restriction GTOL > 1e-4): using the default gtol=0.9",
                          UserWarning, stacklevel=3)
            object.__setattr__(self, "gtol", 0.9)
        check_int_option("print_vectors", self.print_vectors, 0)
        if self.print_vectors > 3:
            raise ValueError(f"print_vectors={self.print_vectors} must be 0, 1, 2 or 3 (the seed's iprint[2])")
        if self.print_vectors and self.print_every is None:
            raise ValueError(f"print_vectors={self.print_vectors} prints with the table: give print_every too "
                             "(the seed's iprint[1]; 0 prints the first and last iteration)")
        object.__setattr__(self, "xtol", check_number_option("xtol", self.xtol, 0, none_ok=True))
        object.__setattr__(self, "pgtol", check_number_option("pgtol", self.pgtol, 0, none_ok=True))
        object.__setattr__(self, "frel_tol", check_number_option("frel_tol", self.frel_tol, 0, none_ok=True))
        object.__setattr__(self, "stpmin", check_number_option("stpmin", self.stpmin, 0))
        object.__setattr__(self, "stpmax", check_number_option("stpmax", self.stpmax, 0, low_open=True))
        if not self.ftol < 1:
            raise ValueError(f"ftol={self.ftol} must be below 1 (sufficient decrease; default 1e-4)")
        if not self.gtol < 1:
            raise ValueError(f"gtol={self.gtol} must be below 1 (curvature condition; default 0.9)")
        if not self.ftol < self.gtol:
            raise ValueError(
                f"ftol={self.ftol} must be below gtol={self.gtol}: the strong Wolfe conditions need 0 < ftol < gtol < 1"
            )
        if not self.stpmin < self.stpmax:
            raise ValueError(f"stpmin={self.stpmin} must be below stpmax={self.stpmax}")
        check_choice_option("line_search", self.line_search, ("mcsrch", "dcsrch"))
        if self.diag is not None and not callable(self.diag):
            arr = np.asarray(self.diag)
            if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.number):
                raise ValueError(f"diag must be a vector (n,) of positive numbers or a function diag(x), got {self.diag!r}")
            bad = np.flatnonzero(~(np.isfinite(arr) & (arr > 0)))
            if bad.size:
                i = int(bad[0])
                raise ValueError(f"diag[{i}]={arr[i]} is not positive: H0 = diag must be positive (seed istate=-2)")
            object.__setattr__(self, "diag", arr)

    # Equality and hashing by option values (a diag array by its digest): compiled loops are
    # cached per solver, and a frozen dataclass cannot hash an array.
    def _key(self) -> tuple:
        out = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray):
                v = (v.shape, str(v.dtype), _digest(v))
            out.append(v)
        return tuple(out)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._key())

    def options(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if isinstance(self.diag, np.ndarray):  # a digest, not 1e7 numbers, in checkpoints
            out["diag"] = "sha:" + _digest(self.diag)
        elif callable(self.diag):
            out["diag"] = getattr(self.diag, "__qualname__", repr(self.diag))
        return out

    # ----------------------------------------------------------------- set-up
    def _config(self, dtype: Any, plan: lbfgs_kernel.KernelPlan | None = None, box: bool = False) -> Config:
        """The iteration's constants, on one device (:meth:`run_chunk` adds the run plan's mesh
        where the fused passes run split); ``box``: the problem's box is honoured (L-BFGS-B)."""
        params = LineSearchParams(
            ftol=self.ftol, gtol=self.gtol, xtol=self.xtol, stpmin=self.stpmin, stpmax=self.stpmax,
            maxfev=self.maxfev, minpack2=self.line_search == "dcsrch",
        )
        return Config(
            m=self.m, eps=self.eps, params=params,
            diag_fn=self.diag if callable(self.diag) else None, use_h0=isinstance(self.diag, np.ndarray),
            pallas=plan is not None and plan.use_pallas, interpret=plan is not None and plan.interpret,
            block=self.kernel_block or lbfgs_kernel.DEFAULT_BLOCK, warps=self.kernel_warps or lbfgs_kernel.DEFAULT_WARPS,
            a_block=self.kernel_block or lbfgs_kernel.PASS_A_BLOCK, a_warps=self.kernel_warps or lbfgs_kernel.PASS_A_WARPS,
            # a user's kernel_block is pass A's columns per program too (its docstring), so one chunk
            a_chunks=lbfgs_kernel.PASS_A_CHUNKS if self.kernel_block is None else 1, a_stages=lbfgs_kernel.PASS_A_STAGES,
            box=box, pgtol=DEFAULT_PGTOL if self.pgtol is None and box else self.pgtol, frel_tol=self.frel_tol,
        )

    @staticmethod
    def bounded(problem: Problem) -> bool:
        """The problem has a box, which L-BFGS honours (L-BFGS-B)."""
        return problem.lower is not None

    def kernel_plan(self, problem: Problem, devices: int = 1) -> lbfgs_kernel.KernelPlan:
        """Which form (fused Pallas passes or XLA) runs the iterations on ``problem`` here, and why.

        ``devices``: how many devices the run is split over (the run plan's mesh).  A single problem
        is split along ``n``, several starts along the starts (the plan then says the XLA form runs
        them anyway)."""
        if self.bounded(problem):
            return KernelPlan(False, False, BOX_REASON)
        if self.pgtol is not None or self.frel_tol is not None:
            return KernelPlan(False, False, TESTS_REASON)
        kernel = "auto" if self.kernel == "onepass" else self.kernel  # the form onepass falls back to
        return lbfgs_kernel.plan(kernel, self.m, self.n_starts(problem), self.diag is not None, devices)

    def onepass_plan(self, problem: Problem, devices: int = 1, requested: int | None = None) -> lbfgs_onepass.OnePassPlan:
        """Whether the run uses the one-pass loop (``kernel="onepass"``; decided at ``init``, the
        state's layout then says so), and why (not); ``devices``: how many devices the run is
        split over (for the reason; the driver splits the rings when it splits the run);
        ``requested``: how many it may be split over (None: every device), for ``kernel="auto"``."""
        if self.bounded(problem):
            return lbfgs_onepass.OnePassPlan(False, False, BOX_REASON)
        if self.pgtol is not None or self.frel_tol is not None:
            return lbfgs_onepass.OnePassPlan(False, False, TESTS_REASON)
        return lbfgs_onepass.plan(self.kernel, problem, self.n_starts(problem), self.diag is not None, devices, self.m,
                                  requested)

    def plan(self, problem: Problem, devices: int, time_limit: float | None) -> RunPlan:
        """The one-pass plan (``kernel``: whether the one-pass loop runs, decided with the devices
        the run may be split over; it sets the state's layout) and its XLA options on a GPU
        (:func:`lbfgs_onepass.compiler_options`).  The two-pass kernels' plan depends on the split
        and is made where the loop is traced, from the plan's mesh (:meth:`kernel_plan`)."""
        onepass = self.onepass_plan(problem, requested=devices)
        options = tuple(lbfgs_onepass.compiler_options(onepass).items())
        # printing x or g at every printed iteration needs the state after each one
        max_chunk = 1 if self.print_vectors >= 2 else None
        return RunPlan(devices=devices, kernel=onepass, compiler_options=options, max_chunk=max_chunk)

    def n_starts(self, problem: Problem) -> int:
        if self.starts is not None:
            return self.starts
        return problem.x0.shape[0] if problem.x0 is not None and problem.x0.ndim == 2 else 1

    def check(self, problem: Problem) -> None:
        """Before compiling: the starts, ``diag``, and the problem's hooks (``value_and_grad.along``,
        ``.block``), each refused with what to change."""
        self._check_starts(problem)
        self._check_box(problem)
        self._check_diag(problem)
        check_line_hooks(problem)
        self._check_block_hook(problem)
        if self.print_vectors and problem.x0 is None:
            raise ValueError(f"print_vectors={self.print_vectors} prints the first start's vectors from its x0: "
                             "give Problem(x0=...) rather than LBFGS(starts=K)")

    def _check_starts(self, problem: Problem) -> None:
        if self.starts is None and problem.x0 is None:
            raise ValueError(
                "LBFGS needs a starting point: give Problem(x0=...) (shape (n,) or (K, n) for K starts), "
                "or LBFGS(starts=K) with lower/upper to draw K starts uniformly"
            )
        if self.starts is not None and problem.lower is None:
            raise ValueError(f"LBFGS(starts={self.starts}) draws starts uniformly in the box: give Problem lower= and upper=")
        if self.starts is not None and problem.x0 is not None:
            raise ValueError(
                f"give the starts either as x0 of shape {problem.x0.shape} or as LBFGS(starts={self.starts}), not both"
            )

    def _check_box(self, problem: Problem) -> None:
        """L-BFGS-B's options against a problem with a box; starts are drawn in a finite box only."""
        if self.bounded(problem):
            self._check_box_options()
        if self.starts is not None and problem.lower is not None:
            check_finite_box(problem, f"LBFGS(starts={self.starts})", "give x0 (n,) or (K, n) instead of starts")

    def _check_box_options(self) -> None:
        """A box takes no ``diag`` (L-BFGS-B's model is ``theta I``) and no ``eps`` other than the
        default (its test is ``pgtol``'s there)."""
        if self.diag is not None:
            raise ValueError("diag (a user H0) is for problems without a box: L-BFGS-B's model uses theta I; "
                             "drop diag=, or drop lower=/upper= from the Problem")
        if self.eps != LBFGS.__dataclass_fields__["eps"].default:
            raise ValueError(f"eps={self.eps} is the test of problems without a box (||g|| < eps * max(1, ||x||)); "
                             "with a box L-BFGS-B stops on max |proj g| <= pgtol: give pgtol= instead of eps=")

    def _check_diag(self, problem: Problem) -> None:
        if isinstance(self.diag, np.ndarray) and self.diag.shape != (problem.n_free,):
            raise ValueError(
                f"diag has {self.diag.shape[0]} entries but the problem has {problem.n_free} free parameters"
            )
        if callable(self.diag):
            probe = jax.ShapeDtypeStruct((problem.n_free,), problem.dtype)
            try:
                out = jax.eval_shape(self.diag, probe)
            except Exception as err:
                raise TypeError(f"calling diag(x) with x of shape ({problem.n_free},) failed: {err}") from err
            if getattr(out, "shape", None) != (problem.n_free,):
                raise ValueError(f"diag(x) must return shape ({problem.n_free},), got {getattr(out, 'shape', None)}")

    def _check_block_hook(self, problem: Problem) -> None:
        """``value_and_grad.block``, a public hook, by shapes where the one-pass loop will run it."""
        block = lbfgs_onepass.block_hook(problem)
        onepass = block is not None and self.onepass_plan(problem).use
        if onepass:  # a public hook: by shapes, before compiling
            rows, width = lbfgs_onepass.ROWS, block.width
            fix = (f"return (f terms, g) for a (rows, width) block of x: shapes (rows,), (rows, width) "
                   f"= ({rows},), ({rows}, {width})")
            try:
                out = jax.eval_shape(block, jax.ShapeDtypeStruct((rows, width), problem.dtype))
            except Exception as err:
                raise TypeError(f"calling value_and_grad.block(xb) with xb of shape ({rows}, {width}) failed: {err}; "
                                f"it must {fix}") from err
            shapes = tuple(getattr(o, "shape", None) for o in out) if isinstance(out, (tuple, list)) else (out,)
            if shapes != ((rows,), (rows, width)):
                raise ValueError(f"value_and_grad.block(xb) returned shapes {shapes} for xb of shape ({rows}, {width}); "
                                 f"it must {fix}")
        if onepass and self.kernel == "onepass" and self.kernel_block is not None and self.kernel_block < block.width:
            raise ValueError(
                f"kernel_block={self.kernel_block} with kernel='onepass' is the columns of one block step of its "
                f"kernel: at least the block hook's width {block.width} (value_and_grad.block.width); give a "
                f"power of two >= {block.width}, or None for the default"
            )

    def convert_checkpoint(self, fresh_state: LBFGSRun, saved_layout: list[str], leaves: list[np.ndarray]) -> list | None:
        """A one-pass checkpoint (rings X, G, S) resumed in the stored-pairs form, or the reverse
        (:func:`~multiwalk.solvers.lbfgs.conversion.convert_checkpoint`): ``kernel`` is a resumable
        option, and ``"auto"`` picks the form by backend, dtype and device count."""
        return conversion.convert_checkpoint(self.m, fresh_state, saved_layout, leaves)

    def phases(self, problem: Problem) -> list[Phase]:
        return [Phase("lbfgs", self.max_iterations)]

    def batch_axes(self, problem: Problem, state: LBFGSRun) -> LBFGSRun:
        """Several starts: split the starts (every leaf of ``starts`` along its first axis).

        One start: split the vectors along ``n`` (``x``, ``g``, ``d`` and the ``2m`` stored
        pairs ``P``), so a problem too large for one device's memory spreads over all of them;
        its dot products become all-reduces that XLA inserts, and the objective runs on split
        ``x`` (elementwise terms and sums split too).  The small matrices stay whole everywhere."""
        if isinstance(state.starts, lbfgs_onepass.OnePassState):  # the rings along n / width (axis 2 of (1, r, n/w, w))
            starts = jax.tree.map(lambda _: None, state.starts)._replace(X=2, G=2, S=2)
            return LBFGSRun(starts=starts, history=jax.tree.map(lambda _: None, state.history), h0=None)
        K = state.starts.x.shape[0]
        if K > 1:
            starts = jax.tree.map(lambda _: 0, state.starts)
            return LBFGSRun(starts=starts, history=jax.tree.map(lambda _: None, state.history), h0=None)
        starts = jax.tree.map(lambda _: None, state.starts)._replace(x=1, g=1, d=1, P=2)
        # the user's diagonal H0, one value per coordinate; or the box [lower; upper] (2, n)
        h0 = {1: 0, 2: 1}.get(state.h0.ndim)
        return LBFGSRun(starts=starts, history=jax.tree.map(lambda _: None, state.history), h0=h0)

    def state_memory(self, problem: Problem) -> tuple[int, str]:
        """The state's bytes (:func:`_state_bytes`) and the options that set them."""
        n, K, m = problem.n_free, self.n_starts(problem), self.m
        need = state_bytes(n, m, K, np.dtype(problem.dtype).itemsize, self.max_iterations,
                            isinstance(self.diag, np.ndarray), self.onepass_plan(problem).use)
        if self.bounded(problem):  # h0 is the box (2, n), not (); the Cauchy point's sort and sums are temporaries
            need += (2 * n - 1) * np.dtype(problem.dtype).itemsize
        starts = f", or fewer starts ({K})" if K > 1 else ""
        return need, (f"lower m={m} (each start keeps 2m+3 vectors of n={n} values and two m x m matrices){starts}, "
                      f"or split the run over more devices (solve(devices=...))")

    def batch_option(self, problem: Problem) -> str:
        if self.n_starts(problem) > 1:
            return "starts"
        if self.onepass_plan(problem).use:  # the rings split by rows of the block hook
            width = lbfgs_onepass.block_hook(problem).width
            return f"n / {width} (rows of the block hook)"
        return "n (free parameters of the one problem)"

    def _x0(self, problem: Problem, key: jax.Array, rows: bool = True) -> jax.Array:
        """The starts' points ``(K, n_free)``; with ``rows=False`` one start's ``(n_free,)`` as it is
        (:meth:`init` adds the axis in its program: on a device array ``x0[None]`` is a program and
        a copy of its own, ~0.5 ms at n = 1e7 on a GPU)."""
        dt = jnp.dtype(problem.dtype)
        if self.starts is not None:
            lo, hi, _ = problem.free_bounds()
            return uniform_in_box(key, (self.starts, problem.n_free), lo, hi, dt, width_in_float64=True)
        x0 = problem.x0 if problem.x0.ndim == 2 or (not rows and not problem.fixed) else problem.x0[None]
        if problem.fixed:  # else every parameter is free: no copy (~0.2 s at n = 1e7)
            x0 = x0[:, problem.free_index]
        if isinstance(x0, jax.Array):  # a device array stays where it is (cast there when needed)
            return x0 if x0.dtype == dt else x0.astype(dt)
        # numpy, not a device array: the driver sends it where the state goes (split for huge n)
        return np.asarray(x0, dtype=dt)

    def initial_state_fn(
        self, problem: Problem, shardings: Any = None, plan: RunPlan | None = None
    ) -> Callable[[jax.Array], LBFGSRun]:
        # x0 and diag go in as arguments: as constants they would be compiled into the program.
        # Split: x0 and h0 arrive split like the state's x and h0 (below), and the state is made split.
        # cached_jit: a repeated solve() of the same problem reuses the compiled start.
        # The plan's one-pass decision sets the state's layout (rings or stored pairs).
        onepass = (self.onepass_plan(problem) if plan is None else plan.kernel).use
        init = cached_jit(problem, self, "init one-pass" if onepass else "init",
                          lambda k, x, h: self.init(problem, k, x, h, onepass), shardings)

        # x0 and h0 made by is_kept (the driver asks it first, outside any trace) serve the start
        # too: x0 without its fixed parameters is a copy, made once per call
        made: list[tuple[Any, Any]] = []

        def arguments(key: jax.Array) -> tuple[Any, Any]:
            """The start's (x0, h0): a device x0 stays where it is, a NumPy one goes where the state goes."""
            if made:
                return made[0]
            # unsplit, one start's x0 goes in as (n,) and no h0 where it is the zero (made in the program)
            x0 = None if self.starts is not None else self._x0(problem, key, rows=shardings is not None)
            h0 = self._h0(problem) if shardings is not None or self._has_h0(problem) else None
            if shardings is not None and x0 is not None:
                from ... import distributed

                if isinstance(shardings.starts, lbfgs_onepass.OnePassState):  # x0 (1, n) split like the rings
                    from jax.sharding import NamedSharding, PartitionSpec

                    x_sharding = NamedSharding(shardings.starts.X.mesh, PartitionSpec(None, distributed.AXIS))
                else:
                    x_sharding = shardings.starts.x
                x0 = distributed.place(x0, x_sharding)
                h0 = distributed.place(h0, shardings.h0)
            return x0, h0

        def initial_state(key: jax.Array) -> LBFGSRun:
            return init(key, *arguments(key))

        def is_kept(key: jax.Array) -> bool:
            """Whether the start's executable for these arguments is kept (else the driver compiles
            the loop beside it: solve._compile_ahead)."""
            if not made:  # outside a trace: x0 (a starts= draw, the key's) is made in the start itself
                made.append(arguments(key))
            return init.is_kept(key, *made[0])

        initial_state.is_kept = is_kept  # type: ignore[attr-defined]
        if not onepass:  # the driver lowers the loops for these shapes without tracing the start
            initial_state.shapes = lambda key: self.state_shapes(problem)  # type: ignore[attr-defined]
        return initial_state

    def state_shapes(self, problem: Problem) -> LBFGSRun:
        """The shapes and dtypes of :meth:`init`'s state in the stored-pairs layout, from the
        options and the problem's size (:func:`~multiwalk.solvers.lbfgs.state.run_shapes`)."""
        n = problem.n_free
        h0_shape = (2, n) if self.bounded(problem) else (n,) if isinstance(self.diag, np.ndarray) else ()
        return run_shapes(n, self.m, self.n_starts(problem), problem.dtype, self.max_iterations, h0_shape,
                          self._config(problem.dtype).params)

    def _has_h0(self, problem: Problem) -> bool:
        """Whether the state's ``h0`` holds data (a box or ``diag``), not the () zero."""
        return self.bounded(problem) or isinstance(self.diag, np.ndarray)

    def _h0(self, problem: Problem) -> np.ndarray:
        """The state's ``h0``: the box ``[lower; upper]`` (2, n) of a bounded problem, the user's
        ``diag`` (n,), or () when neither."""
        dt = jnp.dtype(problem.dtype)
        if self.bounded(problem):
            lo, hi, _ = problem.free_bounds()
            return np.stack([lo, hi]).astype(dt)
        return np.asarray(self.diag, dt) if isinstance(self.diag, np.ndarray) else np.zeros((), dt)

    def init(self, problem: Problem, key: jax.Array, x0: Any = None, h0: Any = None,
             onepass: bool | None = None) -> LBFGSRun:
        """The start; ``onepass``: in the one-pass loop's layout (None: as :meth:`onepass_plan` says
        for every device)."""
        box = self.bounded(problem)
        cfg = self._config(problem.dtype, box=box)
        x0 = self._x0(problem, key) if x0 is None else x0
        x0 = x0[None] if x0.ndim == 1 else x0  # one start's x0 as it was given (initial_state_fn)
        h0 = jnp.asarray(self._h0(problem)) if h0 is None else h0
        f, g = jax.vmap(problem.value_and_grad_free)(x0)
        begin = start_box if box else start
        starts = jax.vmap(lambda x, f, g: begin(cfg, x, f, g, h0))(x0, f, g)
        K = x0.shape[0]
        kh = min(K, HISTORY_STARTS)
        rows = self.max_iterations + 1
        dt = problem.dtype
        hist = History(
            f=jnp.zeros((rows, kh), dt).at[0].set(starts.f[:kh]),
            gnorm=jnp.zeros((rows, kh), dt).at[0].set(starts.gnorm[:kh]),
            stp=jnp.zeros((rows, kh), dt),
            nfev=jnp.zeros((rows, kh), jnp.int32).at[0].set(starts.nfev[:kh]),
        )
        if self.onepass_plan(problem).use if onepass is None else onepass:  # the one-pass loop's rings (no P, d)
            one = jax.tree.map(lambda a: lax.squeeze(a, (0,)), starts)
            width = lbfgs_onepass.block_hook(problem).width
            starts = jax.tree.map(lambda a: lax.expand_dims(a, (0,)), lbfgs_onepass.to_onepass(one, self.m, width))
        return LBFGSRun(starts=starts, history=hist, h0=h0)

    def step(self, problem: Problem, state: LBFGSRun, phase: int) -> LBFGSRun:
        """One iteration of every start in the XLA form (:func:`~multiwalk.solvers.lbfgs.forms.xla_step`)."""
        if isinstance(state.starts, lbfgs_onepass.OnePassState):
            return self.run_chunk(problem, state, phase, jnp.ones((), jnp.int32))[0]
        # the plan of one device: where the driver's loop steps (run_chunk's XLA form: several
        # starts, or no fused passes) the form and its constants do not depend on the split
        cfg = self._config(problem.dtype, self.kernel_plan(problem), box=self.bounded(problem))
        return forms.xla_step(cfg, problem.value_and_grad_free, state)

    def run_chunk(
        self, problem: Problem, state: LBFGSRun, phase: int, n: jax.Array, plan: RunPlan | None = None
    ) -> tuple[LBFGSRun, jax.Array]:
        """Up to ``n`` iterations, in the form the state and the plan call for
        (:mod:`~multiwalk.solvers.lbfgs.forms`): the one-pass loop for a state in its layout; the
        packed fused loop for one start with the Pallas passes; else the driver's loop over
        :meth:`step` (the XLA form).  ``plan``: the run plan, whose mesh (a split run's) the
        kernels run split on."""
        mesh = None if plan is None else plan.mesh
        if isinstance(state.starts, lbfgs_onepass.OnePassState):
            return self._run_onepass(problem, state, n, mesh)
        kplan = self.kernel_plan(problem, devices=1 if mesh is None else mesh.size)
        if state.starts.x.shape[0] != 1 or not kplan.use_pallas:
            return super().run_chunk(problem, state, phase, n, plan)
        cfg = self._config(problem.dtype, kplan)
        if kplan.split:  # the passes under shard_map on the mesh, their small sums added by psum
            cfg = dataclasses.replace(cfg, mesh=mesh)
        # Both gradients in one (2, n) buffer, the evaluations writing into the older one's row:
        # no pass copies the new gradient (n values per iteration); costs 3 n values per chunk.
        into = line_evaluation_into(problem) if cfg.mesh is None and self.gradient_rows else None
        return forms.run_fused_chunk(cfg, problem.value_and_grad_free, state, n, line_evaluation(problem), into)

    def _run_onepass(self, problem: Problem, state: LBFGSRun, n: jax.Array, mesh: Any) -> tuple[LBFGSRun, jax.Array]:
        """The one-pass loop, with its launch from the options (``kernel_block``, ``kernel_warps``
        are its own only under ``kernel="onepass"``; under ``"auto"`` they are the two passes')."""
        block = lbfgs_onepass.block_hook(problem)
        own = self.kernel == "onepass"
        launch = {
            "rows": self.kernel_block // block.width if own and self.kernel_block else lbfgs_onepass.ROWS,
            "num_warps": (own and self.kernel_warps) or lbfgs_onepass.WARPS, "chunks": lbfgs_onepass.CHUNKS,
            "interpret": self.onepass_plan(problem).interpret,
        }
        return forms.run_onepass_chunk(self._config(problem.dtype), state, n, block, launch, mesh)

    def start_result_reads(self, problem: Problem, state: LBFGSRun) -> None:
        """The copies of :meth:`done`'s ``status`` and of what :meth:`result` reads, started together
        (at n = 1e7 on an H200, the test's read, the small fields' and ``x``'s were three waits)."""
        start_host_starts(state, state.history._asdict())

    def done(self, problem: Problem, state: LBFGSRun, phase: int) -> jax.Array | np.bool_:
        status = state.starts.status
        if not isinstance(status, jax.core.Tracer):  # the driver's test of the final state: K values
            return np.all(np.asarray(status) != _RUNNING)  # read here (jnp's two would each compile a program)
        return jnp.all(status != _RUNNING)

    def iterate(self, problem: Problem, state: LBFGSRun) -> tuple[np.ndarray, np.ndarray | float]:
        """The current iterate: ``(x (n,), f)`` for one start, ``(x (K, n), f (K,))`` for K."""
        st, _ = host_starts(state)
        x = np.asarray(problem.expand(st.x))
        return (x[0], float(st.f[0])) if x.shape[0] == 1 else (x, np.asarray(st.f))

    def summary(self, problem: Problem, state: LBFGSRun) -> dict[str, jax.Array]:
        st = state.starts
        out = {"f": jnp.min(worst_if_nonfinite(st.f)[0]), "gnorm": jnp.min(st.gnorm)}
        if st.f.shape[0] > 1:
            out["running"] = jnp.sum(st.status == _RUNNING)
        return out

    # ----------------------------------------------------------------- printing (the seed's table)
    def writer(self, problem: Problem) -> IterationTable | None:
        """With ``print_every``: the seed's table, printed as the run goes."""
        return None if self.print_every is None else IterationTable(self)

    def print_rows(self, problem: Problem, state: LBFGSRun, first: int, last: int) -> None:
        """Print the table rows of iterations ``first+1 .. last`` of the first start (with the
        header when ``first`` is 0)."""
        if self.print_every is None:
            return
        if first == 0:
            h = state.history
            print(f"Number of variables n = {problem.n_free};")
            print(f"Number of corrections m = {self.m};")
            print(f"f = {float(h.f[0, 0]):e};")
            print(f"gnorm = {float(h.gnorm[0, 0]):e}")
            if self.print_vectors >= 1:
                self._print_start_vectors(problem)
            print("*****")
            print(table_header())
        if self.print_every == 0:
            wanted = [1] if first == 0 else []
        else:
            wanted = [i for i in range(first + 1, last + 1) if i % self.print_every == 0 or i == 1]
        own = int(state.starts.iteration[0])
        wanted = [i for i in wanted if i <= own]
        if wanted:
            h = jax.tree.map(lambda a: np.asarray(a[:, 0]), state.history)
            for i in wanted:
                print(table_row(i, h.nfev[i], h.f[i], h.gnorm[i], h.stp[i]))
            if self.print_vectors >= 2 and wanted[-1] == own:
                self._print_vectors(problem, state, both=self.print_vectors >= 3)

    def _print_start_vectors(self, problem: Problem) -> None:
        """The first start's x0 and the gradient there (the seed's iprint[2] >= 1)."""
        x0 = np.atleast_2d(problem.x0)[0]
        _, g = jax.jit(problem.value_and_grad_free)(jnp.asarray(x0[problem.free_index], problem.dtype))
        print(" VECTOR X=", " ".join(f"{v:e}" for v in x0))
        print(" GRADIENT VECTOR G=", " ".join(f"{v:e}" for v in np.asarray(g)))

    def _print_vectors(self, problem: Problem, state: LBFGSRun, both: bool) -> None:
        """The first start's x (and g with ``both``) now, as the seed's iprint[2] prints them."""
        x, _ = self.iterate(problem, state)
        print(" VECTOR X=", " ".join(f"{v:e}" for v in np.atleast_2d(x)[0]))
        if both:
            g = self._best_start_extras(state, 0)[0]
            g = np.asarray(g() if isinstance(g, Deferred) else g)
            print(" GRADIENT VECTOR G=", " ".join(f"{v:e}" for v in g))

    # ----------------------------------------------------------------- the result
    def _status_message(self, status: Status, bounded: bool = False) -> str:
        """One start's message: the status's own, with this solver's ``maxfev``, ``stpmin`` and
        ``stpmax``; L-BFGS words the general endings itself (the seed's success message, the
        convergence test that ``MAX_STEPS`` did not meet, ``x`` being the last iterate)."""
        if bounded:
            test, loosen = f"max|proj g| <= pgtol (pgtol={DEFAULT_PGTOL if self.pgtol is None else self.pgtol})", "pgtol"
        else:
            test, loosen = f"||g|| < eps*max(1,||x||) (eps={self.eps})", "eps"
            if self.pgtol is not None:
                test, loosen = f"{test} or max|g| <= pgtol (pgtol={self.pgtol})", "eps or pgtol"
        own_words = {
            Status.SUCCESS: "The minimization terminated without detecting errors.",
            Status.MAX_STEPS: (f"the iteration limit max_iterations={self.max_iterations} was reached before "
                               f"{test}: raise max_iterations, or loosen {loosen}"),
            Status.TIME_LIMIT: "stopped at the time limit; x is the last iterate",
            Status.INTERRUPTED: "interrupted (Ctrl-C or SIGTERM); x is the last iterate",
        }
        return status.describe(own_words, maxfev=self.maxfev, stpmin=self.stpmin, stpmax=self.stpmax,
                               frel_tol=self.frel_tol)

    def result(
        self, problem: Problem, state: LBFGSRun, done: list[int], status: Status, stats: dict[str, Any]
    ) -> LBFGSResult:
        # only what the result needs comes to the host (not the 2m n stored pairs), the history
        # in the same transfer
        st, hist = host_starts(state, state.history._asdict())
        # A start still running ends as the run did: MAX_STEPS (the driver's, when the iterations
        # ran out before every start stopped), TIME_LIMIT or INTERRUPTED.
        codes = np.where(st.status == _RUNNING, int(status), st.status)
        statuses = [Status(int(c)) for c in codes]
        fun = np.asarray(st.f)  # NaN and -inf are kept as +inf (worst_if_nonfinite): never the best
        best = int(np.argmin(fun))
        messages = [self._status_message(s, self.bounded(problem)) for s in statuses]
        K = len(statuses)
        message = messages[best]
        if K > 1:
            n_ok = sum(s.success for s in statuses)
            message = f"{n_ok} of {K} starts converged; the best (start {best}): {message}"
        kh = state.history.f.shape[1]
        hist_len = np.minimum(st.iteration[:kh], self.max_iterations) + 1
        # with nothing fixed x is already whole: expand would send it to the device and back (at
        # n = 1e7 on an H100, ~130 ms of a 300 ms call)
        xs = np.asarray(problem.expand(st.x)) if problem.fixed else st.x
        stats = dict(stats)
        stats.update(evaluations=int(st.nfev.sum()), starts=K, converged=int(sum(s.success for s in statuses)),
                     nonfinite=int(st.nonfinite.sum()))
        stats.update(self._form_stats(problem, state, int(stats.get("devices", 1))))
        result = LBFGSResult(
            x=xs[best], fun=float(fun[best]), status=statuses[best], message=message, stats=stats,
            gnorm=float(st.gnorm[best]), iterations=int(st.iteration[best]), nfev=int(st.nfev[best]),
            xs=xs, funs=st.f, gnorms=st.gnorm, iterations_per_start=st.iteration, nfev_per_start=st.nfev,
            statuses=statuses, messages=messages, best=best, history=hist, history_length=hist_len,
        )
        result.grad, result.pairs = self._best_start_extras(state, best, int(st.iteration[best]))
        if self.print_every is not None:
            self._print_end(result)
        return result

    def _best_start_extras(self, state: LBFGSRun, best: int, iteration: int | None = None
                           ) -> tuple[Any, dict[str, Any] | None]:
        """The best start's gradient at x (n free values; left on the device, the result reads it
        when asked: ``LBFGSResult.lazy_fields``), and its stored pairs with ``keep_pairs``.
        ``iteration``: the best start's, when already on the host (else read here)."""
        starts = state.starts
        if isinstance(starts, lbfgs_onepass.OnePassState):  # g_k is row k % (m + 2) of the ring G
            k = int(starts.iteration[0]) if iteration is None else iteration
            # taken now, not deferred: a deferred row would keep the whole ring (m + 2 rows of n)
            # on the device for as long as the result lives
            return starts.G[0, k % (self.m + 2)].reshape(-1), None
        pairs = None
        if self.keep_pairs:  # imported only then: scipy.sparse.linalg takes ~0.12 s to import
            from .inverse_hessian import best_start_pairs

            pairs = best_start_pairs(starts, best, self.m)
        if starts.g.shape[0] == 1:
            # one start: its row taken when grad is read (the (1, n) array kept is no more than the row),
            # not now: indexing a device array compiles a program of its own, a new process's first time
            return Deferred(operator.getitem, starts.g, 0), pairs
        return starts.g[best], pairs

    def _form_stats(self, problem: Problem, state: LBFGSRun, devices: int) -> dict[str, str]:
        """``stats["kernel"]``, ``["kernel_reason"]`` and ``["line_evaluation"]``: which form ran and why."""
        plan = self.kernel_plan(problem, devices=devices)  # the driver's mesh is gone here
        out = {"kernel": plan.name, "kernel_reason": plan.reason,
               "line_evaluation": line_evaluation_reason(problem, plan)}
        # one-pass under kernel="auto" ran split over every device it was asked for
        op = self.onepass_plan(problem, devices=devices, requested=devices)
        if isinstance(state.starts, lbfgs_onepass.OnePassState):
            notes = (["interpret mode"] if op.interpret else []) + (["split over devices"] if devices > 1 else [])
            out.update(kernel="onepass" + (f" ({', '.join(notes)})" if notes else ""), kernel_reason=op.reason,
                       line_evaluation="one Pallas kernel per evaluation (the one-pass loop): f and g by "
                                       "value_and_grad.block on each column block")
        elif self.kernel == "onepass":
            out["kernel_reason"] = f"{op.reason}; {plan.reason}"
        return out

    def _print_end(self, result: LBFGSResult) -> None:
        """The seed's last table row of the first start (where not printed yet), then its message."""
        i, h = int(result.iterations_per_start[0]), result.history
        if i > 0 and (self.print_every == 0 or i % self.print_every != 0) and i != 1:
            print(table_row(i, h["nfev"][i, 0], h["f"][i, 0], h["gnorm"][i, 0], h["stp"][i, 0]))
        print()
        first, message = result.statuses[0], result.messages[0]
        print(message if first.success else f"{first.seed_code} ({first.name}): {message}")
