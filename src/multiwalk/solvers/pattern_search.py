"""Multi-walk parallel pattern search: SIMT-PS (Zhu & Curry), every walker at once.

Each walker is an independent coordinate search in the box (the paper's Fig. 1):

a) start uniform in the box with step ``delta = delta0`` (per coordinate; default
   ``(upper - lower) / 20``);
per iteration, for each coordinate ``j`` in turn:
b) if ``f(x + delta_j e_j) <= f(x)`` and ``<= f(x - delta_j e_j)``, move to ``x + delta_j e_j``;
c) else if ``f(x - delta_j e_j) <= f(x)`` and ``<= f(x + delta_j e_j)``, move to ``x - delta_j e_j``;
d) if no coordinate lowered ``f`` during the iteration, halve ``delta``; when it reaches
   ``delta_tol`` (default ``delta0 / 2^16``) reset it to ``delta0``.
e) the best walker is the answer.

Moves that would leave the box are not taken, and NaN or inf values never win (they count as
+inf).  A *round* is ``iterations`` iterations from fresh points; ``rounds`` rounds are run, or,
with ``solve(..., time_limit=T)`` and ``rounds=None``, as many as fit in T (the paper's Table 5
mode).  The best point over all rounds is returned.

``restart="best"`` (not in the paper) starts rounds after the first from the best point found
so far instead of from uniform points: half of the walkers perturb a few random coordinates of
it at a random scale between the box and ``delta_tol`` and search from there with the step at
that scale, the other half restart uniformly.  It turns the multi-start search into a
multi-scale local refinement that reaches the optimum of functions the plain rounds only
approach.

``kernel`` chooses how iterations run, not what they compute.  ``"xla"``: ``d`` dependent
coordinate sub-steps per iteration, each a few XLA kernels over all walkers (on a GPU ~10 us
each, whatever the walker count).  ``"pallas"``: one Pallas (Triton) kernel runs all the
iterations of a round (``run_chunk``, what ``mw.solve`` calls; ``step`` alone runs one), one
walker per lane kept in registers throughout, the objective evaluated through its scalarised
graph (``multiwalk.scalarise``; a trial point recomputes only what depends on the moved
coordinate) - see ``pattern_search_kernel``; off GPUs it runs in Pallas' interpret mode (for
tests).  A round then costs one launch instead of ``d`` latency-bound sub-steps per iteration,
which is what makes it faster on a GPU.  ``"auto"`` (default): the kernel on a GPU when the
objective can be scalarised (plain ``jax.numpy`` arithmetic, reductions, slicing, constant
indexing; not random numbers, loops or data-dependent indexing), else XLA.  Both forms apply
the same rules in the same order; values of ``f`` may differ by rounding (reduction order,
libdevice vs XLA math).  Which form ran and why is in ``result.stats["kernel"]`` and
``["kernel_reason"]``.  Triton compiles the kernel in ~10-40 s (the sweep is unrolled over the
coordinates), once per problem and walker count; if it cannot compile an objective that
passed the checks, ``kernel="xla"`` is the way out.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import compile_cache
from ..kernels import check_kernel_option, check_launch_options
from ..problem import Problem
from ..result import Deferred, Result, Status, to_host
from . import pattern_search_kernel
from ._common import (
    best_and_counts_bytes,
    check_bool_option,
    check_choice_option,
    check_finite_box,
    check_int_option,
    check_vector_option,
    evaluate_walkers,
    expand_as_now,
    hashable_vector,
    keep_better,
    lowest_row,
    nonfinite_total,
    read_best_and_counts,
    uniform_in_box,
)
from .base import (
    Phase,
    RunPlan,
    Solver,
    end_status,
    point_on_default_device,
    point_value_program,
    reported_value,
    value_at_point,
)

__all__ = ["PatternSearch", "PatternSearchResult"]

_RESTARTS = ("random", "best")
_COORDINATE_UNROLL = 8  # coordinates unrolled per loop trip: fewer GPU loop round-trips, longer compile
# The largest one-round run made one program (PatternSearch.one_program), in coordinate moves
# (walkers x iterations x free parameters) times the problem's array elements (at least 1): Ackley
# in 20-D, 15360 x 20 x 20 (6.1e6), ran in 0.9 s on a 2-core CPU in the XLA form
ONE_PROGRAM_WORK = 1 << 23
# ... and on a GPU, on one device or split over several (one_program_split), where a run in chunks
# waits for the host between its programs (the start, the chunk, the value and its copy): 1M
# walkers x 20 iterations of Rastrigin-30 (6.3e8) ran in ~135 ms on one H200 in the XLA form
ONE_PROGRAM_WORK_GPU = 1 << 31


def _array_elements(problem: Problem) -> int:
    """The elements of the problem's data, sigma and ``args`` arrays (:func:`compile_cache.problem_arrays`):
    what one evaluation may read."""
    return sum(int(np.size(a)) for a in jax.tree_util.tree_leaves(compile_cache.problem_arrays(problem)[0]))


class PatternSearchState(NamedTuple):
    key: jax.Array  # (2,) uint32
    iteration: jax.Array  # () int32, iterations done over all rounds
    x: jax.Array  # (n_walkers, n_free) current points
    fun: jax.Array  # (n_walkers,) objective at x (+inf where NaN/inf)
    scale: jax.Array  # (n_walkers,) step = scale * delta0 (1 after a reset, halved on failure)
    best_x: jax.Array  # (n_free,) best point of all rounds so far
    best_fun: jax.Array  # () objective at best_x
    n_halvings: jax.Array  # (n_walkers,) int32 halvings in the current round
    n_resets: jax.Array  # (n_walkers,) int32 resets to delta0 in the current round
    n_nonfinite: jax.Array  # (n_walkers,) int32 evaluations that gave NaN or +-inf, all rounds


class GroupBests(NamedTuple):
    """The best point each group of walkers found in a chunk, kept apart until the chunk ends so
    that a run split over ``groups`` devices (one group each) needs no collective per iteration.

    :func:`fold_group_bests` merges them into the state's best exactly as the iteration-by-iteration
    update would have (ties go to the earliest iteration, then the first walker)."""

    fun: jax.Array  # (groups,) lowest value the group's walkers reached (+inf: none yet)
    x: jax.Array  # (groups, n_free) the first walker's point at the first iteration that reached it
    iteration: jax.Array  # (groups,) int32, that iteration


def empty_group_bests(groups: int, n_free: int, dtype: Any) -> GroupBests:
    """No best yet for each of ``groups`` groups of walkers."""
    return GroupBests(
        fun=jnp.full((groups,), jnp.inf, dtype),
        x=jnp.zeros((groups, n_free), dtype),
        iteration=jnp.zeros((groups,), jnp.int32),
    )


def update_group_bests(bests: GroupBests, x: jax.Array, fun: jax.Array, iteration: jax.Array,
                       mesh: Any = None) -> GroupBests:
    """``bests`` after an iteration that left the walkers at ``x`` (W, n_free), ``fun`` (W,):
    group ``g`` holds walkers ``g*W/G .. (g+1)*W/G - 1``, a device's share when the run is split
    over ``mesh`` (G devices), so each device reduces its own walkers.  A group's best changes only
    to a strictly lower value (as :func:`keep_better`)."""
    groups = bests.fun.shape[0]
    x3 = x.reshape(groups, -1, x.shape[-1])
    fun2 = fun.reshape(groups, -1)
    if mesh is not None:  # keep the groups on their devices: the reductions below stay local
        from jax.sharding import NamedSharding, PartitionSpec

        from ..distributed import AXIS

        x3 = jax.lax.with_sharding_constraint(x3, NamedSharding(mesh, PartitionSpec(AXIS)))
        fun2 = jax.lax.with_sharding_constraint(fun2, NamedSharding(mesh, PartitionSpec(AXIS)))
    group_x, group_fun = jax.vmap(lowest_row)(x3, fun2)  # each group's first walker with its lowest value
    fun, x, better = keep_better(bests.fun, bests.x, group_fun, group_x)
    return GroupBests(fun=fun, x=x, iteration=jnp.where(better, iteration, bests.iteration))


def fold_group_bests(best_fun: jax.Array, best_x: jax.Array, bests: GroupBests) -> tuple[jax.Array, jax.Array]:
    """The best ``(fun, x)`` after the chunk whose groups found ``bests``, from the best before it
    (``best_fun`` (), ``best_x`` (n_free,)): the lowest value; of groups that reached it, the one
    that reached it first; of those, the first group (its walkers come first).  That is the point
    the iteration-by-iteration update keeps: it changes at each strictly lower minimum over all
    walkers, to the first walker that has it."""
    low = jnp.min(bests.fun)
    reached = bests.fun == low
    first_iteration = jnp.min(jnp.where(reached, bests.iteration, jnp.iinfo(jnp.int32).max))
    g = jnp.argmax(reached & (bests.iteration == first_iteration))
    best_fun, best_x, _ = keep_better(best_fun, best_x, bests.fun[g], bests.x[g])
    return best_fun, best_x


@dataclass(frozen=True)
class PatternSearch(Solver):
    """SIMT-PS: ``n_walkers`` independent coordinate pattern searches in the box, in lockstep.

    Parameters
    ----------
    n_walkers : number of independent searches (the paper's threads; 15360 in its tables).
    iterations : iterations per round (each sweeps every free coordinate once).
    delta0 : initial step, absolute, a scalar or one per parameter; default (upper - lower)/20.
    delta_tol : step at which the search resets to delta0; default delta0 / 2**16.
    reset : reset the step to delta0 at delta_tol (the paper); False keeps halving.
    rounds : rounds from fresh points; ``None`` means one, or as many as fit in
        ``solve(..., time_limit=T)`` when a time limit is given.
    restart : ``"random"`` (the paper: every round from uniform points) or ``"best"`` (rounds
        after the first refine the best point so far at random scales; see the module doc).
    kernel : ``"auto"`` (default), ``"xla"`` or ``"pallas"``: how iterations run (same rules;
        ``"auto"`` = one Pallas kernel per round on a GPU when ``f`` can be scalarised, else
        XLA; see the module doc).  ``result.stats["kernel"]`` says which ran and why.
    kernel_block, kernel_warps : Pallas launch tuning, walkers per program (a power of two)
        and warps per program; None = defaults.  They do not change results.

    The problem's ``x0`` (not in the paper), if given, starts walker ``k`` of the first round at
    ``x0[k]`` (``x0`` of shape ``(n,)``: walker 0; ``(K, n)``: walkers 0 .. K-1, K <= n_walkers);
    the other walkers and later rounds start as above.
    """

    resumable_options = ("kernel", "kernel_block", "kernel_warps")  # how, not what: a resume may change them
    # a short run on a GPU is one program split over devices too (one_program: not on a CPU)
    one_program_split = True

    n_walkers: int = 15360
    iterations: int = 20
    delta0: Any = None
    delta_tol: Any = None
    reset: bool = True
    rounds: int | None = None
    restart: str = "random"
    kernel: str = "auto"
    kernel_block: int | None = None
    kernel_warps: int | None = None

    def __post_init__(self) -> None:
        for name in ("n_walkers", "iterations"):
            check_int_option(name, getattr(self, name), 1)
        check_int_option("rounds", self.rounds, 1, none_ok=True)
        for name in ("delta0", "delta_tol"):  # a scalar or one per parameter, positive
            arr = check_vector_option(name, getattr(self, name), positive=True, scalar_ok=True, none_ok=True)
            object.__setattr__(self, name, hashable_vector(arr))
        check_bool_option("reset", self.reset)
        check_choice_option("restart", self.restart, _RESTARTS)
        check_kernel_option(self.kernel)
        check_launch_options(self)

    # ----------------------------------------------------------------- set-up
    def steps(self, problem: Problem) -> tuple[np.ndarray, float]:
        """``(delta0 per free coordinate, smallest scale before a reset)`` for ``problem``."""
        lo, hi, _ = problem.free_bounds()
        idx = problem.free_index
        d0 = (hi - lo) / 20.0 if self.delta0 is None else np.broadcast_to(np.asarray(self.delta0), (problem.n,))[idx]
        if self.delta_tol is None:
            tol_scale = 2.0**-16
        else:
            tol = np.broadcast_to(np.asarray(self.delta_tol), (problem.n,))[idx]
            tol_scale = float(np.min(tol / d0))
        return np.asarray(d0, dtype=np.float64), tol_scale

    def check(self, problem: Problem) -> None:
        if problem.lower is None:
            raise ValueError(
                "PatternSearch needs a box: pass lower= and upper= to Problem (walkers start uniform in it and never leave)"
            )
        check_finite_box(problem, "PatternSearch")
        if problem.x0 is not None and problem.x0.ndim == 2 and len(problem.x0) > self.n_walkers:
            raise ValueError(
                f"Problem x0 has {len(problem.x0)} starting points but PatternSearch has n_walkers={self.n_walkers}: "
                f"walker k starts at x0[k], so give at most {self.n_walkers} points or raise n_walkers"
            )
        for name in ("delta0", "delta_tol"):
            v = getattr(self, name)
            if isinstance(v, tuple) and len(v) != problem.n:
                raise ValueError(f"{name} has {len(v)} entries but the problem has {problem.n} parameters")
        d0, _ = self.steps(problem)
        if self.delta_tol is not None:
            tol = np.broadcast_to(np.asarray(self.delta_tol), (problem.n,))[problem.free_index]
            bad = np.flatnonzero(tol >= d0)
            if bad.size:
                j = int(problem.free_index[bad[0]])
                raise ValueError(
                    f"delta_tol must be below delta0 in every coordinate: for parameter {j} "
                    f"delta_tol={tol[bad[0]]} >= delta0={d0[bad[0]]}"
                )

    def kernel_plan(self, problem: Problem) -> pattern_search_kernel.KernelPlan:
        """Which form (Pallas kernel or XLA) runs an iteration on ``problem`` here, and why; made
        once per problem (it traces the objective: ~10 ms, asked for several times a solve)."""
        arrays = (problem.data, problem.sigma, problem.args, problem.x0)
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(arrays)):
            return pattern_search_kernel.plan(problem, self.kernel)  # a traced copy, inside compiled code
        key = compile_cache.small_key(problem, self, "kernel plan")
        kplan = compile_cache.kept(key)
        if kplan is None:
            kplan = pattern_search_kernel.plan(problem, self.kernel)
            compile_cache.keep(problem, key, kplan)
        return kplan

    def plan(self, problem: Problem, devices: int, time_limit: float | None) -> RunPlan:
        """The kernel form; the data as constants for the Pallas form (its kernel is generated from
        the objective's jaxpr, whose constants must be concrete); with ``rounds=None`` and a time
        limit, fresh rounds until that limit, which is then the run's normal end."""
        kplan = self.kernel_plan(problem)
        return RunPlan(devices=devices, kernel=kplan, arrays_as_arguments=not kplan.use_pallas,
                       until_time_limit=self.rounds is None and time_limit is not None)

    def phases(self, problem: Problem) -> list[Phase]:
        return [Phase("search", self.iterations * (self.rounds or 1))]

    def batch_axes(self, problem: Problem, state: PatternSearchState) -> PatternSearchState | None:
        """Walkers are split over devices (each device keeps its walkers' best point as a chunk
        runs; the devices' bests are merged once, at the chunk's end: :class:`GroupBests`).  The
        Pallas form stays on one device: its kernel is one custom call XLA cannot split, and on
        one GPU it is already several times faster than the XLA form; ``kernel="xla"`` runs split."""
        if self.kernel_plan(problem).use_pallas:
            return None
        return PatternSearchState(
            key=None, iteration=None, x=0, fun=0, scale=0, best_x=None, best_fun=None, n_halvings=0, n_resets=0,
            n_nonfinite=0,
        )

    def batch_option(self, problem: Problem) -> str:
        return "n_walkers"

    def state_memory(self, problem: Problem) -> tuple[int, str]:
        """The state's bytes: per walker its point (n_free values), value, step scale and three int32 counters."""
        item = np.dtype(problem.dtype).itemsize
        per_walker = (problem.n_free + 2) * item + 3 * 4
        need = self.n_walkers * per_walker + (problem.n_free + 1) * item + 12  # + the best point, key, counter
        return need, f"lower n_walkers={self.n_walkers} (each walker keeps {per_walker} bytes)"

    def _uniform(self, problem: Problem, key: jax.Array) -> jax.Array:
        """``n_walkers`` points uniform in the box, (n_walkers, n_free)."""
        lo, hi, _ = problem.free_bounds()
        return uniform_in_box(key, (self.n_walkers, problem.n_free), lo, hi, problem.dtype, width_in_float64=True)

    def init(self, problem: Problem, key: jax.Array) -> PatternSearchState:
        x = self._uniform(problem, jax.random.fold_in(key, 0))
        if problem.x0 is not None:  # the user's starting points: walkers 0 .. K-1 of the first round
            starts = jnp.atleast_2d(problem.x0)[:, problem.free_index]  # traced: x0 is an argument of the start
            x = x.at[: len(starts)].set(jnp.asarray(starts, problem.dtype))
        fun, bad = evaluate_walkers(problem.chi2_free, x)
        best_x, best_fun = lowest_row(x, fun)
        w, dt = self.n_walkers, problem.dtype
        return PatternSearchState(
            key=key,
            iteration=jnp.asarray(0, jnp.int32),
            x=x,
            fun=fun,
            scale=jnp.ones(w, dt),
            best_x=best_x,
            best_fun=best_fun,
            n_halvings=jnp.zeros(w, jnp.int32),
            n_resets=jnp.zeros(w, jnp.int32),
            n_nonfinite=bad.astype(jnp.int32),
        )

    # ----------------------------------------------------------------- one iteration
    def _new_round(self, problem: Problem, state: PatternSearchState) -> PatternSearchState:
        """Fresh walkers for round number ``iteration // iterations`` (keys never repeat)."""
        round_index = state.iteration // self.iterations
        key = jax.random.fold_in(jax.random.fold_in(state.key, 1), round_index)
        k_uniform, k_which, k_mask, k_scale, k_noise = jax.random.split(key, 5)
        x = self._uniform(problem, k_uniform)
        scale = jnp.ones(self.n_walkers, problem.dtype)
        if self.restart == "best":
            lo, hi, _ = problem.free_bounds()
            dt = problem.dtype
            w, d = self.n_walkers, problem.n_free
            _, tol_scale = self.steps(problem)
            # Scale s log-uniform in [tol, 1] (in units of the box); a few coordinates
            # (each with probability 2/d, at least one) move by up to s times the box width.
            log_s = jax.random.uniform(k_scale, (w,), dt) * float(np.log(tol_scale))  # a Python float: stays in dt
            s = jnp.exp(log_s)
            pick = jax.random.uniform(k_mask, (w, d), dt) < min(1.0, 2.0 / d)
            pick = pick.at[jnp.arange(w), jax.random.randint(k_which, (w,), 0, d)].set(True)
            noise = (2 * jax.random.uniform(k_noise, (w, d), dt) - 1) * jnp.asarray(hi - lo, dt) * s[:, None]
            near = jnp.clip(state.best_x + jnp.where(pick, noise, 0), jnp.asarray(lo, dt), jnp.asarray(hi, dt))
            local = jnp.arange(w) < w // 2  # half refine, half explore
            x = jnp.where(local[:, None], near, x)
            scale = jnp.where(local, jnp.minimum(1.0, 20.0 * s), scale)  # step ~ the perturbation
        fun, bad = evaluate_walkers(problem.chi2_free, x)
        zeros = jnp.zeros(self.n_walkers, jnp.int32)
        return state._replace(
            x=x, fun=fun, scale=scale, n_halvings=zeros, n_resets=zeros, n_nonfinite=state.n_nonfinite + bad
        )

    def step(self, problem: Problem, state: PatternSearchState, phase: int) -> PatternSearchState:
        return self._step_in_round(problem, self._maybe_new_round(problem, state), phase)

    def _step_in_round(self, problem: Problem, state: PatternSearchState, phase: int) -> PatternSearchState:
        """:meth:`step` without starting a new round: the whole step of a run that is one round
        (:meth:`_one_round`), which then holds no conditional (on a GPU XLA reads a conditional's
        predicate back on the host)."""
        lo, hi, _ = problem.free_bounds()
        dt = problem.dtype
        d0, tol_scale = self.steps(problem)
        lo_j, hi_j, d0_j = jnp.asarray(lo, dt), jnp.asarray(hi, dt), jnp.asarray(d0, dt)

        plan = self.kernel_plan(problem)
        if plan.use_pallas:
            return self._kernel_iterations(problem, plan, state, 1, 1)
        x, fun, improved, n_nonfinite = self._sweep_xla(problem, state, lo_j, hi_j, d0_j)
        return self._end_iteration(state, x, fun, improved, n_nonfinite, tol_scale)

    def run_chunk(
        self, problem: Problem, state: PatternSearchState, phase: int, n: jax.Array, plan: RunPlan | None = None
    ) -> tuple[PatternSearchState, jax.Array]:
        """``n`` iterations.  The Pallas form runs up to a round's end (at most
        ``pattern_search_kernel.MAX_ITERATIONS``) in one kernel launch per loop trip; the
        result is that of ``n`` steps (the same iterations, best point and counters)."""
        kplan = self.kernel_plan(problem)
        one_round = self._one_round(plan)
        if not kplan.use_pallas:
            if plan is not None and plan.mesh_size > 1:
                return self._run_chunk_grouped(problem, state, phase, n, plan, one_round, plan.mesh_size, plan.mesh)
            # one device: the state keeps its best each iteration (nothing to wait for; grouped, this
            # program ran ~1 ms slower in 134 ms on an H200, one more kernel an iteration)
            step = self._step_in_round if one_round else self.step
            return self.steps_while(problem, state, phase, n, step, 1 if plan is None else plan.loop_block)
        per_launch = min(self.iterations, pattern_search_kernel.MAX_ITERATIONS)
        if one_round and self.iterations <= per_launch:
            # One round that one launch holds: every chunk is one launch, without a loop.  On a GPU
            # a while_loop's condition is read back on the host at each trip, which makes the
            # chunk's program wait for the device; this one is queued, and the host goes on.
            k = jnp.clip(jnp.minimum(n, self.iterations - state.iteration), 0, per_launch).astype(jnp.int32)
            return self._kernel_iterations(problem, kplan, state, k, per_launch), k

        def body(carry: tuple) -> tuple:
            i, s = carry
            s = s if one_round else self._maybe_new_round(problem, s)
            to_round_end = self.iterations - s.iteration % self.iterations
            k = jnp.minimum(jnp.minimum(n - i, to_round_end), per_launch).astype(jnp.int32)
            return i + k, self._kernel_iterations(problem, kplan, s, k, per_launch)

        n_run, state = jax.lax.while_loop(lambda c: c[0] < n, body, (jnp.asarray(0, jnp.int32), state))
        return state, n_run

    def _run_chunk_grouped(
        self, problem: Problem, state: PatternSearchState, phase: int, n: jax.Array, plan: RunPlan | None,
        one_round: bool, groups: int, mesh: Any = None,
    ) -> tuple[PatternSearchState, jax.Array]:
        """The XLA form's chunk split over ``mesh``'s devices: ``n`` iterations as :meth:`step` runs
        them, with the best point kept per group of walkers (:class:`GroupBests`, ``groups``, one a
        device) and folded into the state's at the chunk's end, and before a new round that starts
        from it (``restart="best"``).  The iterations then need no collective: on two H200s, one
        each iteration (a collective's kernel also waits for the other device) made a call of 1M
        walkers x 20 iterations take 76 ms instead of 74.  The same state as ``n`` calls of :meth:`step`."""
        lo, hi, _ = problem.free_bounds()
        dt = problem.dtype
        d0, tol_scale = self.steps(problem)
        lo_j, hi_j, d0_j = jnp.asarray(lo, dt), jnp.asarray(hi, dt), jnp.asarray(d0, dt)
        restarts = not one_round and self.rounds != 1

        def fold(carry: tuple) -> tuple:
            s, bests = carry
            best_fun, best_x = fold_group_bests(s.best_fun, s.best_x, bests)
            return s._replace(best_fun=best_fun, best_x=best_x), empty_group_bests(groups, problem.n_free, dt)

        def new_round(carry: tuple) -> tuple:
            s, bests = fold(carry) if self.restart == "best" else carry  # a round from the best point needs it
            return self._new_round(problem, s), bests

        def iteration(problem: Problem, carry: tuple, phase: int) -> tuple:
            s, bests = carry
            if restarts:
                s, bests = jax.lax.cond(self._starts_round(s), new_round, lambda c: c, (s, bests))
            x, fun, improved, n_nonfinite = self._sweep_xla(problem, s, lo_j, hi_j, d0_j)
            s = self._end_iteration(s, x, fun, improved, n_nonfinite, tol_scale, keep_best=False)
            return s, update_group_bests(bests, x, fun, s.iteration, mesh)

        carry = (state, empty_group_bests(groups, problem.n_free, dt))
        carry, n_run = self.steps_while(problem, carry, phase, n, iteration, 1 if plan is None else plan.loop_block)
        return fold(carry)[0], n_run

    def _one_round(self, plan: RunPlan | None) -> bool:
        """Whether a run under ``plan`` is one round: ``rounds=1``, or ``rounds=None`` without a time
        limit (with one, the plan's ``until_time_limit``, rounds go on until it); without a plan
        (a direct call), only ``rounds=1``.  A chunk of a one-round run must not ask for iterations
        past the round's end (the driver's never do: a phase is one round)."""
        return self.rounds == 1 or (self.rounds is None and plan is not None and not plan.until_time_limit)

    def _maybe_new_round(self, problem: Problem, state: PatternSearchState) -> PatternSearchState:
        """Fresh walkers when ``state.iteration`` is at the start of a round after the first."""
        if self.rounds == 1:  # never restarts: no conditional in the loop (it costs on GPUs)
            return state
        return jax.lax.cond(self._starts_round(state), lambda s: self._new_round(problem, s), lambda s: s, state)

    def _starts_round(self, state: PatternSearchState) -> jax.Array:
        """Whether ``state.iteration`` is at the start of a round after the first (a traced bool)."""
        return (state.iteration % self.iterations == 0) & (state.iteration > 0)

    def _kernel_iterations(
        self, problem: Problem, plan: pattern_search_kernel.KernelPlan, state: PatternSearchState,
        n: jax.Array | int, max_iter: int,
    ) -> PatternSearchState:
        """``n`` (<= ``max_iter``, within one round) iterations in one Pallas launch, with rule d)
        and the best point kept as ``n`` calls of the XLA form would keep them."""
        assert plan.graph is not None
        lo, hi, _ = problem.free_bounds()
        d0, tol_scale = self.steps(problem)
        r = pattern_search_kernel.sweeps(
            plan.graph, state.x, state.fun, state.scale, state.n_nonfinite, state.n_halvings, state.n_resets, n,
            max_iter=max_iter, d0=d0, lower=lo, upper=hi, tol_scale=tol_scale, reset=self.reset,
            block=self.kernel_block or pattern_search_kernel.DEFAULT_BLOCK,
            num_warps=self.kernel_warps or pattern_search_kernel.DEFAULT_WARPS, interpret=plan.interpret,
        )
        # Step by step, the best point changes at each strictly lower iteration minimum: it ends at the
        # first iteration that reaches the lowest one (argmin takes the first), if that beats the old best.
        t = jnp.argmin(r.best_fun)
        best_fun, best_x, _ = keep_better(state.best_fun, state.best_x, r.best_fun[t], r.best_x[t])
        return state._replace(
            iteration=state.iteration + n,
            x=r.x,
            fun=r.fun,
            scale=r.scale,
            best_x=best_x,
            best_fun=best_fun,
            n_halvings=r.n_halvings,
            n_resets=r.n_resets,
            n_nonfinite=r.n_bad,
        )

    def _sweep_xla(self, problem: Problem, state: PatternSearchState, lo_j: jax.Array, hi_j: jax.Array,
                   d0_j: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        """Rules b) and c) for each coordinate in turn, as XLA operations over all walkers."""
        d = problem.n_free
        cols = jnp.arange(d)

        def coordinate(j: int, carry: tuple) -> tuple:
            x, fun, improved, n_bad = carry
            # Trial points as x + step * one-hot: elementwise expressions XLA fuses into the
            # objective (no scatters, no copies of x); adding 0.0 leaves other coordinates exact.
            on_j = (cols == j).astype(x.dtype)  # (d,)
            delta = state.scale * d0_j[j]  # (W,)
            xj = x[:, j]
            plus, minus = xj + delta, xj - delta
            f_plus, bad_plus = evaluate_walkers(problem.chi2_free, x + delta[:, None] * on_j)
            f_minus, bad_minus = evaluate_walkers(problem.chi2_free, x - delta[:, None] * on_j)
            in_plus, in_minus = plus <= hi_j[j], minus >= lo_j[j]
            n_bad = n_bad + (in_plus & bad_plus) + (in_minus & bad_minus)  # out-of-box values are not used
            # Rules b) and c); a move out of the box is never taken, even from a walker at +inf.
            go_plus = in_plus & (f_plus <= fun) & (f_plus <= jnp.where(in_minus, f_minus, jnp.inf))
            go_minus = ~go_plus & in_minus & (f_minus <= fun) & (f_minus <= jnp.where(in_plus, f_plus, jnp.inf))
            f_new = jnp.where(go_plus, f_plus, jnp.where(go_minus, f_minus, fun))
            improved = improved | (f_new < fun)
            step_j = jnp.where(go_plus, delta, jnp.where(go_minus, -delta, 0.0))
            return x + step_j[:, None] * on_j, f_new, improved, n_bad

        return jax.lax.fori_loop(
            0,
            d,
            coordinate,
            (state.x, state.fun, jnp.zeros(self.n_walkers, bool), state.n_nonfinite),
            unroll=min(d, _COORDINATE_UNROLL),
        )

    def _end_iteration(self, state: PatternSearchState, x: jax.Array, fun: jax.Array, improved: jax.Array,
                       n_nonfinite: jax.Array, tol_scale: float, keep_best: bool = True) -> PatternSearchState:
        """Rule d) (halve the step of walkers that did not improve, reset it at delta_tol) and, with
        ``keep_best``, the best so far (else the caller keeps it: :meth:`_run_chunk_grouped`)."""
        scale = jnp.where(improved, state.scale, state.scale / 2)  # rule d)
        halved = ~improved
        was_reset = jnp.zeros_like(halved)
        if self.reset:
            was_reset = scale <= tol_scale * (1 + 1e-6)
            scale = jnp.where(was_reset, jnp.ones_like(scale), scale)
        best_fun, best_x = state.best_fun, state.best_x
        if keep_best:
            walker_x, walker_fun = lowest_row(x, fun)
            best_fun, best_x, _ = keep_better(best_fun, best_x, walker_fun, walker_x)
        return state._replace(
            iteration=state.iteration + 1,
            x=x,
            fun=fun,
            scale=scale,
            best_x=best_x,
            best_fun=best_fun,
            n_halvings=state.n_halvings + halved,
            n_resets=state.n_resets + was_reset,
            n_nonfinite=n_nonfinite,
        )

    # ----------------------------------------------------------------- reporting
    def iterate(self, problem: Problem, state: PatternSearchState) -> tuple[np.ndarray, float]:
        """The best point of all walkers so far, ``(x (n,), f)``."""
        return np.asarray(problem.expand(state.best_x)), float(state.best_fun)

    def summary(self, problem: Problem, state: PatternSearchState) -> dict[str, jax.Array]:
        return {"best": state.best_fun, "round": (state.iteration - 1) // self.iterations + 1}

    def report(self, problem: Problem, state: PatternSearchState, plan: RunPlan | None = None) -> dict[str, jax.Array]:
        """What :meth:`result` reads of the final state, made in each chunk's program: the best point
        ``x`` (n,) with the fixed values, and ``numbers``: the bytes of its value in the run and of
        the non-finite counts' sum and largest (int32; :meth:`_reported` says when the sum is
        exact), one array (every array read back is a copy of its own: ~7 us each on a CPU)."""
        return {"x": problem.expand(state.best_x), "numbers": best_and_counts_bytes(state.best_fun, state.n_nonfinite)}

    def report_ready(self, problem: Problem, report: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """The report with the value at its point by :func:`value_at_point`'s one-point program,
        queued behind the chunk that ends the run, on one device only (see :meth:`_reported`): a
        run split over devices gives the point on each (replicated), and the copy on the default
        device is used (evaluated after the run, it was a round trip more: ~3.5 ms of a 78 ms call
        on two H200s)."""
        one_point = point_value_program(problem)
        x = point_on_default_device(report["x"])
        if one_point is None or x is None:
            return report
        return {**report, "value": one_point(x)}

    def report_in_program(self, problem: Problem, report: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """:meth:`report_ready`'s value at the point, computed in the program that runs the whole run."""
        return {**report, "value": problem.chi2_full(report["x"])}

    def one_program(self, problem: Problem, plan: RunPlan) -> bool:
        """One round (``rounds=1``, or ``None`` without a time limit), one kernel launch in the Pallas
        form, of at most ``ONE_PROGRAM_WORK`` coordinate moves times the elements of the problem's
        data, sigma and ``args`` arrays (~1 s of a cheap objective on a 2-core CPU), on a machine of
        one CPU device; on a GPU at most ``ONE_PROGRAM_WORK_GPU``, on one device or split over
        several.  An objective whose cost hides elsewhere (a closure over large constants) may take
        longer: ``progress=True`` or a time limit keeps its run in chunks."""
        if not self._one_round(plan):
            return False
        kplan = plan.kernel if plan.kernel is not None else self.kernel_plan(problem)
        if kplan.use_pallas and self.iterations > pattern_search_kernel.MAX_ITERATIONS:
            return False
        if plan.platform == "gpu":
            limit = ONE_PROGRAM_WORK_GPU
        elif plan.mesh is not None or jax.device_count() > 1:  # split CPU runs keep their chunks
            return False
        else:
            limit = ONE_PROGRAM_WORK
        moves = self.n_walkers * self.iterations * problem.n_free
        return moves * max(1, _array_elements(problem)) <= limit

    def result(
        self, problem: Problem, state: PatternSearchState, done: list[int], status: Status, stats: dict[str, Any],
        reported: dict[str, np.ndarray] | None = None,
    ) -> PatternSearchResult:
        # the best point, its value and the count of non-finite values: read back with the chunk
        # that ended the run (``reported``, :meth:`report`), else now, in one read back
        # (_reported); every walker's record (n_walkers rows: 240 MB at 1M walkers in 30-D) when
        # the caller first reads it (lazy_fields)
        st = self._reported(problem, state, reported)
        delta0 = self.steps(problem)[0]  # from the box as it is now (the caller may change it in place)
        iters = int(done[0])
        rounds = max(1, -(-iters // self.iterations)) if iters else 1
        stats = dict(stats)
        stats["rounds"] = rounds
        # Evaluations: one per walker per round start, two per walker per coordinate per iteration.
        stats["evaluations"] = self.n_walkers * (rounds + 2 * problem.n_free * iters)
        stats["walkers"] = self.n_walkers
        stats["nonfinite"] = st.nonfinite
        plan = self.kernel_plan(problem)
        stats["kernel"], stats["kernel_reason"] = plan.name, plan.reason
        status, message = end_status(
            status,
            f"ran {rounds} round(s) of {self.iterations} iterations ({iters} in all)",
            bool(np.isfinite(st.best_fun)),
            f"no finite objective value in {stats['evaluations']} evaluations (all NaN or inf)",
        )
        return PatternSearchResult(
            x=st.x,
            fun=st.fun,
            status=status,
            message=message,
            stats=stats,
            walkers=Deferred(expand_as_now(problem), state.x),  # this run's fixed values, read later
            funs=state.fun,
            steps=Deferred(lambda: to_host(state.scale)[:, None] * delta0[None, :]),
            evaluations=stats["evaluations"],
            halvings=state.n_halvings,
            resets=state.n_resets,
        )

    def _reported(self, problem: Problem, state: PatternSearchState,
                  reported: dict[str, np.ndarray] | None = None) -> SimpleNamespace:
        """What the result reads of the final state, on the host: ``x`` the best point (n,) with the
        fixed values, ``best_fun`` the run's value there, ``fun`` its value by
        :func:`value_at_point`'s one-point program, ``nonfinite`` the count of non-finite values.

        ``reported``: :meth:`report` (with :meth:`report_ready`'s value), read back with the chunk
        that ended the run: nothing runs here.  Else (a run stopped early, resumed with nothing
        left) two programs, the point expanded and the counts summed, then the point's value,
        queued without waiting, and one read back of a few numbers: on a GPU each read between
        two programs is a round trip of its own (the host waits for the device, then the device
        for the host)."""
        if reported is None:
            reported = self._report_now(problem, state)
        st = SimpleNamespace(**{"value": None, **reported})
        st.x = np.asarray(st.x)
        st.best_fun, n_sum, n_max = read_best_and_counts(st.numbers, state.best_fun.dtype)
        found = float(st.best_fun)
        # the one-point value comes from one device only (report_ready): a point split over a mesh
        # would compile it for the mesh, and the reported value must not depend on how the run was split
        st.fun = reported_value(st.value, found) if st.value is not None else value_at_point(problem, st.x, found)
        st.nonfinite = nonfinite_total(n_sum, n_max, state.n_nonfinite)
        return st

    def _report_now(self, problem: Problem, state: PatternSearchState) -> dict[str, np.ndarray]:
        """:meth:`report` and :meth:`report_ready` of ``state`` by programs of their own, read back
        in one transfer."""
        small = compile_cache.cached_jit(problem, self, "result", lambda st: self.report(problem, st))
        return jax.device_get(self.report_ready(problem, small(state)))


@dataclass(repr=False, kw_only=True)
class PatternSearchResult(Result):
    """Result of :class:`PatternSearch`.

    ``x``, ``fun``: best point of all rounds.  ``walkers`` (n_walkers, n): the final points of
    the last round, ``funs`` (n_walkers,) their objective values (``values`` is the same array),
    ``steps`` (n_walkers, n_free) their current steps.  ``evaluations``: objective evaluations in
    all.  ``halvings`` and ``resets`` (n_walkers,): step halvings and resets to delta0 during the
    last round.
    """

    walkers: np.ndarray
    funs: np.ndarray
    steps: np.ndarray
    evaluations: int
    halvings: np.ndarray
    resets: np.ndarray

    # every walker's record stays on the device until first read (Result.lazy_fields)
    lazy_fields = frozenset({"walkers", "funs", "steps", "halvings", "resets"})

    @property
    def values(self) -> np.ndarray:
        """The same as ``funs`` (n_walkers,): the objective value of each walker's final point."""
        return self.funs
