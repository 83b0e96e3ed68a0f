"""Metropolis-Hastings MCMC with replica exchange: the cuda_mcmc algorithm (Benkevitch & Akiyama).

``nseq`` independent sequences, each of ``nbeta`` chains at inverse temperatures
``beta_i = beta1 * (betan / beta1) ** (i / (nbeta - 1))``, all advanced in lockstep.  One
iteration, for every chain at once:

1. ``n_free`` times: pick a free parameter uniformly at random, add a Gaussian step of that
   parameter's current width, wrap it if periodic, reject it if it leaves the box, else accept
   it with probability ``min(1, exp(-beta/2 * (chi2_new - chi2_old)) * prior_new / prior_old)``
   (the problem's ``log_prior``, untempered; 1 for the default uniform prior).  A NaN or inf chi2 is
   a rejection (and is counted).  During burn-in each trial updates that parameter's step:
   divided by 1.01 when the acceptance over its last ``nadj`` trials is below 30 %, else
   multiplied by 1.01 (the rule of cuda_mcmc's code).
2. ``nbeta`` exchange attempts per sequence between random adjacent temperatures ``k, k+1``,
   accepted with probability ``min(1, exp(-1/2 (beta_{k+1} - beta_k)(chi2_k - chi2_{k+1})))``.
   The prior cancels in an exchange: both points stay, only their temperatures swap.
3. In the sampling phase, the coldest chain of each sequence is recorded, the chi2 of every
   temperature, and (``record_temperatures``) every temperature's point and replica label.

Arrays in the state are laid out ``(nseq, nbeta, ...)``; results use the seed's layouts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import IO, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import diagnostics
from .. import distributed as dist
from ..evidence import Evidence
from ..evidence import evidence as _evidence
from ..kernels import KernelPlan, check_kernel_option
from ..polish import Roots, polish
from ..polish import default_root_tol as _default_root_tol
from ..problem import Problem
from ..result import NOT_SAVED, Deferred, Result, Status, to_host
from . import replica_exchange_swaps_kernel as swaps_kernel
from ._common import (
    INIT_STREAM,
    best_and_counts_bytes,
    check_bool_option,
    check_finite_box,
    check_int_option,
    check_number_option,
    check_vector_option,
    evaluate_walkers,
    expand_as_now,
    hashable_vector,
    keep_better,
    ladder_values,
    lowest_row,
    nonfinite_total,
    objective_equations,
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
from .ladder_adaptation import adapt_ladder, track_round_trips

__all__ = ["ReplicaExchange", "ReplicaExchangeResult", "Roots"]

_ADAPT_TARGET = 0.30  # acceptance below which a step shrinks (cuda_mcmc's adjust_steps)
_ADAPT_FACTOR = 1.01


# equations of unrolled objective copies one trip of the parameter loop may hold (unrolled_updates):
# a cheap function (tens of equations) is unrolled 8 times, a model of 512 or more not at all
UNROLL_EQUATIONS = 512

# A run is one program (one_program) on these platforms only: on a GPU a run in chunks waits for
# the host between its programs (two H200s: ~1.5 ms at the switch from burn-in to sampling, ~1 ms
# before the first chunk and after the last); on a CPU that costs little, and a long run there keeps
# its progress bar and Ctrl-C between chunks
ONE_PROGRAM_PLATFORMS = ("gpu",)
# ... when it makes at most this many parameter updates (chains x iterations x free parameters:
# ~0.3 s of a cheap objective on an H200) of an objective of at most ONE_PROGRAM_EQUATIONS equations
# (those unrolled 8 times: the xringaus model's hundreds are not, its compilation is long enough already)
ONE_PROGRAM_UPDATES = 1 << 31
ONE_PROGRAM_EQUATIONS = UNROLL_EQUATIONS // 8


class ReplicaExchangeState(NamedTuple):
    key: jax.Array  # (2,) uint32, the run's key; each iteration folds in `iteration`
    iteration: jax.Array  # () int32, iterations done, burn-in included
    x: jax.Array  # (nseq, nbeta, n_free) current points
    fun: jax.Array  # (nseq, nbeta) objective (chi2) at x
    step: jax.Array  # (nseq, nbeta, n_free) proposal widths, stay with the temperature
    label: jax.Array  # (nseq, nbeta) int32 replica that sits at each temperature (seed's tcur)
    n_count: jax.Array  # (nseq, nbeta, n_free) int32 burn-in trials per parameter
    history: jax.Array  # (nseq, nbeta, n_free, nadj) int8 accept (1) / reject (0), ring buffer
    history_sum: jax.Array  # (nseq, nbeta, n_free) int32 sum of `history` over its last axis
    n_trials: jax.Array  # (nseq, nbeta, n_free) int32 sampling-phase trials per parameter
    n_accepted: jax.Array  # (nseq, nbeta, n_free) int32 sampling-phase acceptances
    n_swap_tries: jax.Array  # (nseq, max(nbeta-1,1)) int32 sampling-phase exchange attempts per pair
    n_swaps: jax.Array  # (nseq, max(nbeta-1,1)) int32 accepted exchanges per pair
    n_nonfinite: jax.Array  # (nseq, nbeta) int32 start points and in-box proposals whose chi2 was NaN or +-inf
    best_x: jax.Array  # (nseq, n_free) best point seen in each sequence (any temperature)
    best_fun: jax.Array  # (nseq,) objective at best_x
    samples: jax.Array  # (niter, nseq, n_free) coldest chain after each sampling iteration
    fun_trace: jax.Array  # (niter, nseq) objective at each recorded sample
    betas: jax.Array  # (nbeta,) the ladder, coldest first; moves during burn-in with adapt_ladder
    trip_phase: jax.Array  # (nseq, nbeta) int8 per replica: where it is in a round trip (ladder_adaptation.py)
    round_trips: jax.Array  # (nseq,) int32 sampling-phase round trips coldest -> hottest -> coldest
    fun_trace_all: jax.Array  # (niter, nseq, nbeta) objective of every temperature after each sampling iteration
    samples_all: jax.Array  # (niter, nseq, nbeta, n_free) every temperature's point; (0, ...) unless record_temperatures
    label_trace: jax.Array  # (niter, nseq, nbeta) int32 `label` after each iteration; (0, ...) unless record_temperatures
    log_prior: jax.Array  # (nseq, nbeta) log prior density at x (0 without a log_prior)


def _branch_on_phase() -> bool:
    """Whether the step branches on its traced phase with ``lax.cond`` (on the CPU) rather than
    computing both phases' bookkeeping and selecting (elsewhere): :meth:`ReplicaExchange._after_trial`."""
    return jax.default_backend() == "cpu"


def _take(a: jax.Array, idx: jax.Array) -> jax.Array:
    """``a[s, b, idx[s, b]]`` for ``a`` of shape (nseq, nbeta, m) and ``idx`` (nseq, nbeta)."""
    return jnp.take_along_axis(a, idx[..., None], axis=-1)[..., 0]


@dataclass(frozen=True)
class ReplicaExchange(Solver):
    """Replica-exchange Metropolis-Hastings MCMC (cuda_mcmc's MCMC-RE), all chains in parallel.

    Parameters
    ----------
    nbeta : temperatures per sequence (the seed's threads per block).
    nseq : independent sequences (the seed's blocks); chains = nbeta * nseq.
    nburn : burn-in iterations, during which the steps adapt; nothing is recorded.
    niter : sampling iterations; each records the coldest chain of every sequence and the chi2 of
        every temperature (``fun_trace_all``: niter x nseq x nbeta values of the problem's dtype,
        4 or 8 bytes each: 1.8 MB for niter=500, nseq=14, nbeta=32 in float64).
    beta1, betan : the coldest and the hottest inverse temperature (geometric ladder).
    betas : an explicit ladder of nbeta decreasing values in (0, 1] instead of beta1..betan.
    nadj : number of latest trials of a parameter whose acceptance rate steers its step.
    step0 : initial step width as a fraction of (upper - lower); the seed uses 1/50.
    exchange_unroll : how many of the nbeta sequential exchange attempts are unrolled in the
        compiled loop; results do not depend on it.  ``None``: 8 on GPUs (fewer loop
        round-trips, which dominate small runs) and 1 on CPUs (where unrolling only lengthens
        compilation).  It shapes the XLA form of the attempts only: given, ``kernel="auto"``
        runs that form, and ``kernel="pallas"`` is refused.
    metropolis_unroll : how many of the n_free sequential parameter updates of an iteration are
        unrolled in the compiled loop; results do not depend on it.  Each unrolled update is a
        copy of the objective in the program: more copies save loop round-trips on a GPU and
        cost compile time in proportion (the xringaus fit on an H100: 39 s of compiling and
        0.344 s of run at 8, 11 s and 0.387 s at 1).  ``None``: from the objective's size
        (:meth:`unrolled_updates`): 8 for a cheap function, 1 for a large model.
    kernel : ``"auto"`` (default), ``"xla"`` or ``"pallas"``: how the exchange's ``nbeta``
        sequential swap attempts run; results do not depend on it (bit for bit).  ``"xla"``: a
        loop of a few XLA kernels per attempt.  ``"pallas"``: all attempts in ONE Pallas (Triton)
        kernel (:mod:`.replica_exchange_swaps_kernel`; Pallas' interpret mode off GPUs, slow, for
        tests).  ``"auto"``: the kernel on a GPU, XLA elsewhere.  A run split over several devices
        runs it under ``shard_map`` on each device's sequences (:meth:`_swap_kernel`).
        ``result.stats["kernel"]`` and ``["kernel_reason"]`` say which ran and why.
    loops : ``"auto"`` (default), ``"one"`` or ``"per_phase"``: whether burn-in and sampling are one
        compiled loop (the phase an argument: the objective compiled once) or a loop each (each
        phase's program holds only its own bookkeeping: fewer kernels an iteration on a GPU);
        the same chains (bit for bit on the CPU, tested; on an H100 the samples' sums and best
        chi2 agreed in every comparison made).  ``"auto"``: one loop on a CPU (where the phase
        is a branch, as fast as two loops, and the objective compiles once), a loop per phase on
        GPUs, where a first call compiles the two at the same time.  Measured on an H100: 32 x 14
        chains of a cheap objective 49.5 -> 42.2 ms a call, 1M chains 73 -> 46 ms (one loop runs
        burn-in's step adaptation, a scatter over every chain, in sampling too, selected away); the
        xringaus fit's run 404 -> 322 ms, its first call 5.2 -> 6.2 s.
    adapt_ladder : move the inner temperatures during burn-in so that every adjacent pair
        swaps equally often (Vousden, Farr & Mandel 2016; :mod:`.ladder_adaptation`); the
        coldest and hottest stay, and the ladder is frozen for sampling (``result.betas``).
    adaptation_lag, adaptation_time : the rule's ``t0`` and ``nu`` (iterations): each burn-in
        iteration ``t`` moves the log temperature spacings by ``t0 / (t + t0) / nu`` times the
        difference of neighbouring swap rates (ptemcee's defaults, 10000 and 100).
    record_temperatures : also record every temperature's point (``samples_all``, niter x nseq x
        nbeta x n_free values: 18 MB for the defaults, n_free=10, float64) and replica label
        (``label_trace``, int32) after each sampling iteration; the seed's ``pout`` and ``tout``.
        Off by default: most uses (the posterior, the evidence) need only the coldest chain's
        points and every temperature's chi2.

    The problem's ``x0`` (not in the seed), if given, starts every temperature of sequence ``k`` at
    ``x0[k]`` (``x0`` of shape ``(n,)``: sequence 0; ``(K, n)``: sequences 0 .. K-1, K <= nseq); the
    other sequences start uniformly in the box, as the seed's do.
    """

    nbeta: int = 32
    nseq: int = 14
    nburn: int = 300
    niter: int = 500
    beta1: float = 1.0
    betan: float = 1e-4
    betas: tuple[float, ...] | None = None
    nadj: int = 100
    step0: float = field(default=1.0 / 50.0)
    exchange_unroll: int | None = None
    metropolis_unroll: int | None = None
    kernel: str = "auto"
    loops: str = "auto"
    adapt_ladder: bool = False
    adaptation_lag: int = 10000
    adaptation_time: float = 100.0
    record_temperatures: bool = False

    samples_log_prior = True  # the problem's log_prior enters the Metropolis ratio, untempered
    wraps_periodic = True  # a step that leaves the box across a periodic parameter wraps into it
    reports_value_at_point = True  # a run in chunks: result.fun by value_at_point, its program compiled beside the loop
    resumable_options = ("niter", "exchange_unroll", "metropolis_unroll", "kernel", "loops")  # how, not what
    # Burn-in and sampling can be one compiled loop, the phase a traced int: the objective (the
    # xringaus model: most of the compile time) is compiled once, not once per phase (one_loop).
    traced_phase = True
    # A short run on a GPU is one program on every placement: split over devices too (one_program)
    one_program_split = True

    def __post_init__(self) -> None:
        for name in ("nbeta", "nseq", "nadj"):
            check_int_option(name, getattr(self, name), 1)
        for name in ("nburn", "niter"):
            check_int_option(name, getattr(self, name), 0)
        if self.betas is not None:
            b = check_vector_option("betas", self.betas, positive=True)
            if b.size != self.nbeta:
                raise ValueError(f"betas must have nbeta={self.nbeta} values, got {b.size}")
            if not np.all(b <= 1):
                raise ValueError(f"betas must lie in (0, 1], got {b.tolist()}")
            if np.any(np.diff(b) >= 0):
                raise ValueError(f"betas must be strictly decreasing (coldest first), got {b.tolist()}")
            object.__setattr__(self, "betas", hashable_vector(b))
        else:
            beta1 = check_number_option("beta1", self.beta1, 0, 1, low_open=True)
            check_number_option("betan", self.betan, 0, beta1, low_open=True)
        check_int_option("exchange_unroll", self.exchange_unroll, 1, none_ok=True)
        check_int_option("metropolis_unroll", self.metropolis_unroll, 1, none_ok=True)
        check_kernel_option(self.kernel)
        if self.loops not in ("auto", "one", "per_phase"):
            raise ValueError(f"loops must be 'auto', 'one' or 'per_phase', got {self.loops!r}")
        if self.kernel == "pallas" and self.exchange_unroll is not None:
            raise ValueError(f"exchange_unroll={self.exchange_unroll} unrolls the XLA form's swap attempts, but "
                             "kernel='pallas' runs them in one kernel: leave exchange_unroll at None, or "
                             "use kernel='xla' (or 'auto')")
        check_number_option("step0", self.step0, 0, 1, low_open=True)
        check_bool_option("record_temperatures", self.record_temperatures)
        self._check_adaptation()

    def _check_adaptation(self) -> None:
        """The ladder-adaptation options; adapt_ladder=True with nothing to adapt is an error."""
        check_bool_option("adapt_ladder", self.adapt_ladder)
        check_int_option("adaptation_lag", self.adaptation_lag, 1, hint="iterations, the rule's t0")
        check_number_option("adaptation_time", self.adaptation_time, 0, low_open=True, hint="iterations, the rule's nu")
        if self.adapt_ladder and self.nbeta < 3:
            raise ValueError(
                f"adapt_ladder=True needs nbeta >= 3, got nbeta={self.nbeta}: the coldest and hottest "
                "temperatures stay fixed, so only the ones between them move"
            )
        if self.adapt_ladder and self.nburn == 0:
            raise ValueError("adapt_ladder=True adapts during burn-in, but nburn=0: give nburn > 0 or adapt_ladder=False")

    # ----------------------------------------------------------------- set-up
    def ladder(self) -> np.ndarray:
        """The inverse temperatures, coldest first, shape (nbeta,)."""
        if self.betas is not None:
            return np.asarray(self.betas)
        return ladder_values(self.beta1, self.betan, self.nbeta, spacing="power")  # cuda_mcmc's formula

    def check(self, problem: Problem) -> None:
        if problem.lower is None:
            raise ValueError(
                "ReplicaExchange needs a box: pass lower= and upper= to Problem "
                "(they are the uniform prior the chains start in and never leave)"
            )
        check_finite_box(problem, "ReplicaExchange", "give finite lower= and upper= (the uniform prior)")
        if problem.x0 is not None and problem.x0.ndim == 2 and len(problem.x0) > self.nseq:
            raise ValueError(
                f"Problem x0 has {len(problem.x0)} starting points but ReplicaExchange has nseq={self.nseq}: "
                f"sequence k starts at x0[k], so give at most {self.nseq} points or raise nseq"
            )

    def phases(self, problem: Problem) -> list[Phase]:
        return [Phase("burn-in", self.nburn), Phase("sampling", self.niter)]

    def init(self, problem: Problem, key: jax.Array) -> ReplicaExchangeState:
        lo, hi, _ = problem.free_bounds()
        dt = problem.dtype
        nf, ns, nb = problem.n_free, self.nseq, self.nbeta
        x = uniform_in_box(jax.random.fold_in(key, INIT_STREAM), (ns, nb, nf), lo, hi, dt, width_in_float64=False)
        if problem.x0 is not None:  # the user's starting points: every temperature of sequences 0 .. K-1
            starts = jnp.asarray(jnp.atleast_2d(problem.x0)[:, problem.free_index], dt)  # x0: an argument of the start
            x = x.at[: len(starts)].set(jnp.broadcast_to(starts[:, None, :], (len(starts), nb, nf)))
        fun, bad = evaluate_walkers(problem.chi2_free, x)
        i32 = jnp.int32
        best = jnp.argmin(fun, axis=1)
        n_all = self.niter if self.record_temperatures else 0
        return ReplicaExchangeState(
            key=key,
            iteration=jnp.asarray(0, i32),
            x=x,
            fun=fun,
            step=jnp.broadcast_to(jnp.asarray((hi - lo) * self.step0, dt), (ns, nb, nf)),
            label=jnp.broadcast_to(jnp.arange(nb, dtype=i32), (ns, nb)),
            n_count=jnp.zeros((ns, nb, nf), i32),
            history=jnp.zeros((ns, nb, nf, self.nadj), jnp.int8),
            history_sum=jnp.zeros((ns, nb, nf), i32),
            n_trials=jnp.zeros((ns, nb, nf), i32),
            n_accepted=jnp.zeros((ns, nb, nf), i32),
            n_swap_tries=jnp.zeros((ns, max(nb - 1, 1)), i32),
            n_swaps=jnp.zeros((ns, max(nb - 1, 1)), i32),
            n_nonfinite=bad.astype(i32),
            best_x=jnp.take_along_axis(x, best[:, None, None], axis=1)[:, 0],
            best_fun=jnp.min(fun, axis=1),
            samples=jnp.zeros((self.niter, ns, nf), dt),
            fun_trace=jnp.zeros((self.niter, ns), dt),
            betas=jnp.asarray(self.ladder(), dt),
            trip_phase=jnp.zeros((ns, nb), jnp.int8),
            round_trips=jnp.zeros((ns,), i32),
            fun_trace_all=jnp.zeros((self.niter, ns, nb), dt),
            samples_all=jnp.zeros((n_all, ns, nb, nf), dt),
            label_trace=jnp.zeros((n_all, ns, nb), i32),
            log_prior=self._log_prior(problem, x),
        )

    def _with_prior(self, problem: Problem, st: ReplicaExchangeState, x_new: jax.Array, log_ratio: jax.Array,
                    inside: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The Metropolis log ratio with the prior's, untempered: ``(log_ratio, inside, lp_new)``, each
        (nseq, nbeta).  A proposal where the prior density is zero (-inf) or NaN is a rejection (not
        counted as non-finite: the prior says so, not the objective); a chain that started where it is
        zero accepts any proposal where it is not."""
        lp_new = self._log_prior(problem, x_new)
        log_ratio = log_ratio + jnp.where(jnp.isfinite(st.log_prior), lp_new - st.log_prior, jnp.inf)
        return log_ratio, inside & jnp.isfinite(lp_new), lp_new

    @staticmethod
    def _log_prior(problem: Problem, x: jax.Array) -> jax.Array:
        """The log prior density of points ``x`` (..., n_free): ``(...)``, zeros without a log_prior."""
        if problem.log_prior is None:
            return jnp.zeros(x.shape[:-1], problem.dtype)
        flat = x.reshape(-1, x.shape[-1])
        return jax.vmap(problem.log_prior_free)(flat).reshape(x.shape[:-1])

    def batch_axes(self, problem: Problem, state: ReplicaExchangeState) -> ReplicaExchangeState:
        """Sequences are independent: every ``(nseq, ...)`` array is split along ``nseq`` (axis 1
        of the recorded samples); exchanges stay within a sequence, so on one device."""
        axes = ReplicaExchangeState(*([0] * len(ReplicaExchangeState._fields)))
        return axes._replace(key=None, iteration=None, samples=1, fun_trace=1, fun_trace_all=1, samples_all=1,
                             label_trace=1, betas=None)

    def batch_option(self, problem: Problem) -> str:
        return "nseq"

    def state_memory(self, problem: Problem) -> tuple[int, str]:
        """The state's bytes: per chain (nseq x nbeta) ``n_free`` values of x and step, four int32
        counters per parameter and ``nadj`` int8 outcomes per parameter, its chi2 and log prior, two
        int32 and the int8 round-trip phase; the samples (niter, nseq, n_free), every temperature's
        chi2 (niter, nseq, nbeta), with ``record_temperatures`` every temperature's point and label
        (niter, nseq, nbeta, n_free + 1); the ladder (nbeta,) and the round trips (nseq,)."""
        item = np.dtype(problem.dtype).itemsize
        chains, nf = self.nseq * self.nbeta, problem.n_free
        per_chain = nf * (2 * item + 4 * 4 + self.nadj) + 2 * item + 2 * 4 + 1
        samples = self.niter * self.nseq * (nf + 1 + self.nbeta) * item
        if self.record_temperatures:
            samples += self.niter * self.nseq * self.nbeta * (nf * item + 4)
        pairs = self.nseq * max(self.nbeta - 1, 1) * 2 * 4
        best = self.nseq * (nf + 1) * item
        ladder = self.nbeta * item + self.nseq * 4
        need = chains * per_chain + samples + pairs + best + ladder + 12  # + the key and the counter
        return need, (f"lower nseq={self.nseq}, nbeta={self.nbeta} or nadj={self.nadj} (each chain keeps "
                      f"{nf} x (nadj + ~{2 * item + 16}) bytes), or niter={self.niter} (the samples are "
                      f"niter x nseq x n_free values, the chi2 record niter x nseq x nbeta"
                      f"{', record_temperatures keeps niter x nseq x nbeta x n_free' if self.record_temperatures else ''})")

    def unrolled_updates(self, problem: Problem) -> int:
        """How many parameter updates one trip of the iteration's loop holds: ``metropolis_unroll``
        when given, else as many copies of the objective as :data:`UNROLL_EQUATIONS` equations
        allow, from 1 (a large model: the xringaus fit's 736 equations) to 8."""
        nf = problem.n_free
        if self.metropolis_unroll is not None:
            return min(nf, self.metropolis_unroll)
        return min(nf, 8, max(1, UNROLL_EQUATIONS // max(1, objective_equations(problem))))

    def one_loop(self, problem: Problem, platform: str) -> bool:
        """Whether burn-in and sampling run as one compiled loop (``loops``; ``"auto"``: on a CPU)."""
        if self.loops != "auto":
            return self.loops == "one"
        return platform == "cpu"

    def one_program(self, problem: Problem, plan: RunPlan) -> bool:
        """On a GPU (:data:`ONE_PROGRAM_PLATFORMS`), at most :data:`ONE_PROGRAM_UPDATES` parameter
        updates (``nseq x nbeta x (nburn + niter) x n_free``) of an objective of at most
        :data:`ONE_PROGRAM_EQUATIONS` equations: the run is one program (the start, burn-in,
        sampling and the report), on one device or split over several (``one_program_split``).  A
        slow objective whose cost its equations hide (a long ``lax.scan``) may take longer:
        ``progress=True`` or a time limit keeps its run in chunks."""
        if plan.platform not in ONE_PROGRAM_PLATFORMS:
            return False
        updates = self.nseq * self.nbeta * (self.nburn + self.niter) * problem.n_free
        return updates <= ONE_PROGRAM_UPDATES and objective_equations(problem) <= ONE_PROGRAM_EQUATIONS

    def report_in_program(self, problem: Problem, report: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """:meth:`report_ready`'s value at the best point, computed in the program that runs the whole
        run (on one device, or replicated on each of a split run's)."""
        return {**report, "value": problem.chi2_full(report["best_x"])}

    # ----------------------------------------------------------------- one iteration
    def kernel_plan(self, split: bool = False) -> KernelPlan:
        """Which form runs the exchange's swap attempts, and why; ``split``: the state is split
        over several devices (the kernel then runs on each device's sequences: :meth:`_swap_kernel`)."""
        return swaps_kernel.plan(self.kernel, split, self.exchange_unroll)

    def run_chunk(
        self, problem: Problem, state: ReplicaExchangeState, phase: int | jax.Array, n: jax.Array,
        plan: RunPlan | None = None,
    ) -> tuple[ReplicaExchangeState, jax.Array]:
        """Up to ``n`` iterations, fewer if ``done`` (the base class's ``while_loop`` over :meth:`step`),
        the swap attempts in the form :meth:`kernel_plan` chooses for the plan's devices."""
        mesh = plan.mesh if plan is not None and plan.mesh_size > 1 else None
        kplan = self.kernel_plan(split=mesh is not None)
        return self.steps_while(problem, state, phase, n, lambda p, s, ph: self._iteration(p, s, ph, kplan, mesh),
                                1 if plan is None else plan.loop_block)

    def loop_block(self, problem: Problem, platform: str) -> int:
        """20 iterations a trip of the chunk's loop on GPUs (``Solver.loop_block``; the driver cuts it to
        a divisor of the phases' lengths: 20 for the seed default's 300 + 500 and the xringaus fit's
        400 + 1000).  Against 8 (4 for 300 + 500), one H100: the seed default's run 28.2-28.8 ms
        instead of 32.7-33.5 ms, 1M chains' 38.0-38.5 ms instead of 39.6-39.8 ms (docs/benchmarks.md).
        Not more: every chunk is a whole number of blocks, so a slow objective's first chunk, its
        progress and its Ctrl-C wait for 20 iterations.  Elsewhere one (a CPU reads no condition back)."""
        return 20 if platform == "gpu" else 1

    def step(self, problem: Problem, state: ReplicaExchangeState, phase: int | jax.Array) -> ReplicaExchangeState:
        """One iteration of every chain (the module docstring's steps 1-3); ``phase`` 0 is burn-in, 1
        sampling: an int or a traced int32 (``traced_phase``: the two phases are one compiled loop,
        so what differs between them is selected, never a Python ``if``)."""
        return self._iteration(problem, state, phase, self.kernel_plan())

    def _iteration(
        self, problem: Problem, state: ReplicaExchangeState, phase: int | jax.Array, kplan: KernelPlan,
        mesh: Any = None,
    ) -> ReplicaExchangeState:
        """:meth:`step` with the swap attempts run as ``kplan`` says (on ``mesh``'s devices' sequences
        when the run is split over them: the plan's mesh)."""
        burn = jnp.asarray(phase) == 0  # () bool
        # A loop per phase (``phase`` a Python int): each program leaves out the other phase's
        # bookkeeping, which would otherwise run as a no-op (burn-in's scatter over every chain).
        static_burn = bool(phase == 0) if isinstance(phase, (int, np.integer)) else None
        lo, hi, per = problem.free_bounds()
        dt = problem.dtype
        nf, nb = problem.n_free, self.nbeta
        lo_j, hi_j = jnp.asarray(lo, dt), jnp.asarray(hi, dt)
        width = hi_j - lo_j
        beta = state.betas
        key = jax.random.fold_in(state.key, state.iteration)
        params = jnp.arange(nf)
        choices, normals, log_us, k_exchange = self._trial_draws(problem, key)

        def metropolis(s: int, st: ReplicaExchangeState) -> ReplicaExchangeState:
            j = choices[s]
            onehot = params == j[..., None]  # (ns, nb, nf)
            proposal, lo_s, hi_s = self._proposal(st, j, normals, s, lo_j, hi_j, width, per)
            inside = (proposal >= lo_s) & (proposal <= hi_s)
            x_new = jnp.where(onehot, proposal[..., None], st.x)
            fun_new, bad = evaluate_walkers(problem.chi2_free, x_new)
            log_ratio = -0.5 * beta * (fun_new - st.fun)
            if problem.log_prior is not None:
                log_ratio, inside, lp_new = self._with_prior(problem, st, x_new, log_ratio, inside)
            accept = inside & ~bad & (log_us[s] <= log_ratio)
            acc_i = accept.astype(jnp.int32)
            if problem.log_prior is not None:
                st = st._replace(log_prior=jnp.where(accept, lp_new, st.log_prior))
            st = st._replace(
                x=jnp.where(accept[..., None], x_new, st.x),
                fun=jnp.where(accept, fun_new, st.fun),
                n_nonfinite=st.n_nonfinite + (inside & bad),
            )
            return self._after_trial(st, j, onehot, burn, accept, acc_i, dt, static_burn)

        state = jax.lax.fori_loop(0, nf, metropolis, state, unroll=self.unrolled_updates(problem))
        if nb > 1:
            state = self._exchange(state, k_exchange, beta, record=~burn, kplan=kplan, mesh=mesh)
            trip_phase, round_trips = track_round_trips(state.trip_phase, state.label, state.round_trips, ~burn)
            state = state._replace(trip_phase=trip_phase, round_trips=round_trips)
        if self.adapt_ladder:  # during burn-in; frozen from the first sampling iteration on
            state = state._replace(betas=jnp.where(burn, adapt_ladder(
                state.betas, state.fun, state.iteration, self.adaptation_lag, self.adaptation_time), state.betas))
        state = self._keep_best(state)
        if static_burn is not True:  # burn-in records nothing
            state = self._record_sample(state, ~burn)
        return state._replace(iteration=state.iteration + 1)

    def _trial_draws(self, problem: Problem, key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        """The random numbers of one iteration's ``n_free`` trials, drawn at once (fewer, larger draws):
        ``(choices, normals, log_us, k_exchange)``: the parameter each trial changes (int), its
        standard normal step and the log of its acceptance uniform, each (n_free, nseq, nbeta),
        and the key of the exchanges."""
        nf, ns, nb, dt = problem.n_free, self.nseq, self.nbeta, problem.dtype
        k_choice, k_step, k_accept, k_exchange = jax.random.split(key, 4)
        choices = jax.random.randint(k_choice, (nf, ns, nb), 0, nf)
        normals = jax.random.normal(k_step, (nf, ns, nb), dt)
        log_us = jnp.log(jax.random.uniform(k_accept, (nf, ns, nb), dt))
        # The normals are stored once (80 bytes per chain-iteration), made in one kernel: left
        # free, XLA fused their threefry + erf_inv into trials' kernels, several trials' at a time
        # in one multi-output kernel, at places that change with nseq, where a normal costs several
        # times what a stored one does.  Stored, the time per chain-iteration stays flat as the
        # chains grow (docs/benchmarks.md); the same chains bit for bit, on CPUs and GPUs.
        # Not the choices and uniforms too: with those barred, XLA fused the trial points (x via
        # the earlier trials' selects) into the chi2 reductions, about twice as slow.
        normals = jax.lax.optimization_barrier(normals)
        return choices, normals, log_us, k_exchange

    def _after_trial(self, st: ReplicaExchangeState, j: jax.Array, onehot: jax.Array, burn: jax.Array,
                     accept: jax.Array, acc_i: jax.Array, dt: Any, static_burn: bool | None = None
                     ) -> ReplicaExchangeState:
        """A trial's bookkeeping: in burn-in (``burn``, a () bool) the chosen parameter's step adapts
        (:meth:`_adapt_step`), in sampling the trial and its acceptance are counted.  A loop per
        phase (``static_burn``, the phase as a Python bool) does only its own.  One loop for both:
        on the CPU a ``lax.cond``, a branch taken on the host (ReplicaExchange() on a cheap 2-D
        objective ran in 0.12 s so, 0.16 s with both computed and selected, 0.14 s as two loops);
        elsewhere both, selected: on a GPU a cond in the loop of trials may cost a round trip to
        the host per trial."""

        def counted(st: ReplicaExchangeState, mask: jax.Array) -> ReplicaExchangeState:
            return st._replace(n_trials=st.n_trials + mask, n_accepted=st.n_accepted + mask * acc_i[..., None])

        if static_burn is not None:
            return self._adapt_step(st, j, onehot, burn, accept, acc_i, dt) if static_burn else counted(st, onehot)
        if _branch_on_phase():
            return jax.lax.cond(burn, lambda st: self._adapt_step(st, j, onehot, jnp.asarray(True), accept, acc_i, dt),
                                lambda st: counted(st, onehot), st)
        return counted(self._adapt_step(st, j, onehot, burn, accept, acc_i, dt), onehot & ~burn)

    def _adapt_reads(self, st: ReplicaExchangeState, j: jax.Array, accept: jax.Array, acc_i: jax.Array
                     ) -> tuple[jax.Array, ...]:
        """What a burn-in trial's step adaptation reads of the state, with its outcome: ``(count,
        flat_idx, old, window_sum, accept, acc_i)``, each (nseq, nbeta): the chosen parameter's count
        of trials, the slot of its ring buffer, that slot's old entry, the buffer's old sum of
        acceptances, the outcome (bool and int32).

        Made at once, in one small kernel (an optimization barrier), before any of the state is
        written in place: the adaptation's scatter reads the old count and writes the history, the
        counts' update reads the old history entry and writes the counts; left to XLA, that cycle
        made it copy two state arrays every burn-in trial (on a GPU, a kernel each), and a third
        where the new rate was read back from the updated sums (hence ``window_sum``)."""
        ns, nb, nf = st.x.shape
        count = _take(st.n_count, j)
        flat_idx = j * self.nadj + count % self.nadj
        old = _take(st.history.reshape(ns, nb, nf * self.nadj), flat_idx)
        window_sum = _take(st.history_sum, j)
        return jax.lax.optimization_barrier((count, flat_idx, old, window_sum, accept, acc_i))

    def _adapt_step(self, st: ReplicaExchangeState, j: jax.Array, onehot: jax.Array, burn: jax.Array,
                    accept: jax.Array, acc_i: jax.Array, dt: Any) -> ReplicaExchangeState:
        """Burn-in: the trial's outcome ``accept`` (nseq, nbeta) into the ring buffer of the chosen
        parameter ``j``'s last ``nadj`` outcomes (``acc_i``: as int32), and that parameter's step width
        adapted to it; ``onehot`` (nseq, nbeta, n_free) marks ``j``.  Where ``burn`` (a () bool) is False
        (sampling: one compiled loop runs both phases) the state comes back unchanged."""
        count, flat_idx, old, window_sum, accept, acc_i = self._adapt_reads(st, j, accept, acc_i)
        adapting = onehot & burn
        ns, nb, nf = st.x.shape
        hist = st.history.reshape(ns, nb, nf * self.nadj)
        entry = jnp.where(burn, accept.astype(jnp.int8), old)  # sampling: the old entry again
        # One entry per chain, written by a scatter vmapped over (nseq, nbeta): its batch
        # dimensions are the sequences, so on several devices each writes its own rows
        # (jnp.put_along_axis builds whole-batch indices, which XLA all-gathered per trial).
        hist = jax.vmap(jax.vmap(lambda h, i, a: h.at[i].set(a)))(hist, flat_idx, entry)
        change = acc_i - old.astype(jnp.int32)  # the chosen parameter's sum of its last nadj outcomes moves by it
        hsum = st.history_sum + adapting * change[..., None]
        rate = (window_sum + jnp.where(burn, change, 0)) / jnp.minimum(self.nadj, count + 1)  # _take(hsum, j) / ...
        factor = jnp.where(rate < _ADAPT_TARGET, 1.0 / _ADAPT_FACTOR, _ADAPT_FACTOR).astype(dt)
        return st._replace(
            step=jnp.where(adapting, st.step * factor[..., None], st.step),
            n_count=st.n_count + adapting,
            history=hist.reshape(ns, nb, nf, self.nadj),
            history_sum=hsum,
        )

    def _record_sample(self, state: ReplicaExchangeState, sampling: jax.Array) -> ReplicaExchangeState:
        """Sampling phase (``sampling``, a () bool): the coldest chain of each sequence into this
        iteration's row of ``samples``, every temperature's chi2 into ``fun_trace_all`` (and points and
        labels, ``record_temperatures``).  In burn-in row 0 is written with what it holds: a masked
        write of one row (a ``lax.cond`` holding the records was slower on the CPU too)."""
        samples = state.samples.shape[0]  # niter: buffers of 0 rows (niter=0) have nothing to write
        if samples == 0:
            return state
        row = jnp.clip(state.iteration - self.nburn, 0, samples - 1)

        def put(buffer: jax.Array, value: jax.Array) -> jax.Array:
            kept = jax.lax.dynamic_index_in_dim(buffer, row, 0, keepdims=False)
            return jax.lax.dynamic_update_index_in_dim(buffer, jnp.where(sampling, value, kept), row, 0)

        state = state._replace(
            samples=put(state.samples, state.x[:, 0, :]),
            fun_trace=put(state.fun_trace, state.fun[:, 0]),
            fun_trace_all=put(state.fun_trace_all, state.fun),
        )
        if self.record_temperatures:
            state = state._replace(samples_all=put(state.samples_all, state.x),
                                   label_trace=put(state.label_trace, state.label))
        return state

    @staticmethod
    def _proposal(st: ReplicaExchangeState, j: jax.Array, normals: jax.Array, s: int, lo: jax.Array, hi: jax.Array,
                  width: jax.Array, periodic: np.ndarray) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Trial ``s``'s proposal ``x_j + step_j * normals[s]`` for the chosen parameter ``j`` (nseq, nbeta)
        of every chain, wrapped into the box where ``j`` is periodic: ``(proposal, lower_j, upper_j)``,
        each (nseq, nbeta); ``lo``, ``hi``, ``width`` (n_free,) the box."""
        proposal = _take(st.x, j) + _take(st.step, j) * normals[s]
        lo_s, hi_s = lo[j], hi[j]
        if periodic.any():
            wrapped = lo_s + jnp.mod(proposal - lo_s, width[j])
            wrapped = jnp.where(wrapped >= hi_s, lo_s, wrapped)  # rounding can land on upper
            proposal = jnp.where(jnp.asarray(periodic)[j], wrapped, proposal)
        # Stored once per chain (a barrier XLA cannot fuse through): otherwise XLA fuses the
        # proposal (the gather of x_j through the chain of this iteration's earlier selects,
        # + step_j * normal) into the trial's chi2 reduction, which broadcasts it over n_free,
        # so every chain gathers it n_free times.  It did so in some trials, at places that
        # change with nseq (its cost model), several times slower per chain and trial.
        # Same chains: bit for bit on CPUs; on GPUs the same points, chi2 differing in
        # rounding where XLA emits the reduction differently.
        return jax.lax.optimization_barrier(proposal), lo_s, hi_s

    @staticmethod
    def _keep_best(state: ReplicaExchangeState) -> ReplicaExchangeState:
        """The best point seen so far in each sequence (any temperature), after an iteration."""
        ib = jnp.argmin(state.fun, axis=1)
        cand_x = jnp.take_along_axis(state.x, ib[:, None, None], axis=1)[:, 0]
        best_fun, best_x, _ = keep_better(state.best_fun, state.best_x, jnp.min(state.fun, axis=1), cand_x)
        return state._replace(best_x=best_x, best_fun=best_fun)

    def _exchange(
        self, state: ReplicaExchangeState, key: jax.Array, beta: jax.Array, record: jax.Array,
        kplan: KernelPlan | None = None, mesh: Any = None,
    ) -> ReplicaExchangeState:
        """nbeta sequential swap attempts per sequence, on a permutation; the points move once.
        The attempts run in the XLA form (:meth:`_swap_attempts`) or, as ``kplan`` says, in one
        Pallas kernel (:func:`.replica_exchange_swaps_kernel.swap_attempts`), alike bit for bit;
        they and the swaps are counted where ``record`` (a () bool: the sampling phase)."""
        ns, nb = self.nseq, self.nbeta
        k_pair, k_u = jax.random.split(key)
        pairs = jax.random.randint(k_pair, (nb, ns, 1), 0, nb - 1)
        log_u = jnp.log(jax.random.uniform(k_u, (nb, ns, 1), state.fun.dtype))
        if kplan is not None and kplan.use_pallas:
            fun, perm, tries, swaps = self._swap_kernel(state.fun, pairs[..., 0], log_u[..., 0], beta, kplan, mesh)
        else:
            fun, perm, tries, swaps = self._swap_attempts(state.fun, pairs, log_u, beta)
        state = state._replace(
            x=jnp.take_along_axis(state.x, perm[..., None], axis=1),
            fun=fun,
            label=jnp.take_along_axis(state.label, perm, axis=1),
            log_prior=jnp.take_along_axis(state.log_prior, perm, axis=1),
        )
        return state._replace(n_swap_tries=state.n_swap_tries + jnp.where(record, tries, 0),
                              n_swaps=state.n_swaps + jnp.where(record, swaps, 0))

    @staticmethod
    def _swap_kernel(fun: jax.Array, pairs: jax.Array, log_u: jax.Array, beta: jax.Array, kplan: KernelPlan,
                     mesh: Any = None) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        """:func:`.replica_exchange_swaps_kernel.swap_attempts`; where the run is split over devices
        (``mesh``, the plan's, as ``kplan.split`` says), under ``shard_map`` on each device's own
        sequences: a sequence's attempts read only its own row, and XLA cannot split the kernel's
        custom call itself (it ran the XLA form there, ~2x the kernels an iteration)."""
        from jax.sharding import PartitionSpec

        def run(fun: jax.Array, pairs: jax.Array, log_u: jax.Array, beta: jax.Array) -> tuple[jax.Array, ...]:
            return swaps_kernel.swap_attempts(fun, pairs, log_u, beta, interpret=kplan.interpret)

        if kplan.split != (mesh is not None):
            raise ValueError(f"the swap kernel's plan (split={kplan.split}) and its mesh ({mesh}) disagree")
        if mesh is None:
            return run(fun, pairs, log_u, beta)
        rows, columns = PartitionSpec(dist.AXIS, None), PartitionSpec(None, dist.AXIS)  # (nseq, .), (., nseq)
        split = dist.shard_map_unchecked(run, mesh, (rows, columns, columns, PartitionSpec()), (rows,) * 4)
        return split(fun, pairs, log_u, beta)

    def _swap_attempts(
        self, fun: jax.Array, pairs: jax.Array, log_u: jax.Array, beta: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        """The XLA form of the swap attempts: ``pairs`` (nbeta, nseq, 1) int and ``log_u`` (nbeta,
        nseq, 1) -> ``(fun, perm, tries, swaps)`` (nseq x nbeta; the counters nseq x (nbeta - 1))."""
        ns, nb = self.nseq, self.nbeta
        cols = jnp.arange(nb)
        pair_cols = jnp.arange(nb - 1)

        def attempt(a: int, carry: tuple) -> tuple:
            # Each attempt depends on the previous one, so they run in a loop, vectorised
            # over sequences; only the chi2 values and a permutation move here.
            fun, perm, tries, swaps = carry
            k = pairs[a]
            c_k = jnp.take_along_axis(fun, k, axis=1)
            c_k1 = jnp.take_along_axis(fun, k + 1, axis=1)
            swap = log_u[a] <= -0.5 * (beta[k + 1] - beta[k]) * (c_k - c_k1)  # NaN never swaps
            at_k = (cols == k) & swap
            at_k1 = (cols == k + 1) & swap
            fun = jnp.where(at_k, c_k1, jnp.where(at_k1, c_k, fun))
            p_k = jnp.take_along_axis(perm, k, axis=1)
            p_k1 = jnp.take_along_axis(perm, k + 1, axis=1)
            perm = jnp.where(at_k, p_k1, jnp.where(at_k1, p_k, perm))
            hit = pair_cols == k
            return fun, perm, tries + hit, swaps + (hit & swap)

        init = (
            fun,
            jnp.broadcast_to(cols, (ns, nb)),
            jnp.zeros((ns, nb - 1), jnp.int32),
            jnp.zeros((ns, nb - 1), jnp.int32),
        )
        unroll = self.exchange_unroll or (1 if jax.default_backend() == "cpu" else 8)
        return jax.lax.fori_loop(0, nb, attempt, init, unroll=min(unroll, nb))

    # ----------------------------------------------------------------- reporting
    def iterate(self, problem: Problem, state: ReplicaExchangeState) -> tuple[np.ndarray, float]:
        """The best point any chain has visited so far, ``(x (n,), chi2)``."""
        best_fun = np.asarray(state.best_fun)
        i = int(np.argmin(best_fun))
        return np.asarray(problem.expand(state.best_x[i])), float(best_fun[i])

    def _records(self, problem: Problem, state: ReplicaExchangeState, n_rec: int) -> dict[str, Any]:
        """The result's records of the ``n_rec`` sampling iterations as device arrays (the result
        brings each to the host when first read): ``samples`` (full vectors), ``fun_trace``,
        ``fun_trace_all``, with ``record_temperatures`` ``samples_all`` and ``label_trace`` (else
        None), and ``accept_history`` (the seed's n_hist layout)."""
        expand = expand_as_now(problem)  # read later: with the fixed values of this run

        def full(points: jax.Array) -> jax.Array:  # free parameters -> full vectors, on the device
            return expand(points) if n_rec else jnp.zeros(points.shape[:-1] + (problem.n,), problem.dtype)

        def history() -> jax.Array:  # (nseq, nbeta, n_free, nadj) -> the seed's (nadj, n_free, nbeta, nseq)
            return jnp.roll(jnp.transpose(jnp.asarray(state.history), (3, 2, 1, 0)), 1, axis=0)

        keep_all = self.record_temperatures
        return {
            "samples": Deferred(lambda: full(state.samples[:n_rec])),
            "fun_trace": Deferred(lambda: state.fun_trace[:n_rec]),
            "fun_trace_all": Deferred(lambda: state.fun_trace_all[:n_rec]),
            "samples_all": Deferred(lambda: full(state.samples_all[:n_rec])) if keep_all else None,
            "label_trace": Deferred(lambda: state.label_trace[:n_rec]) if keep_all else None,
            "accept_history": Deferred(history),
        }

    def summary(self, problem: Problem, state: ReplicaExchangeState) -> dict[str, jax.Array]:
        trials = jnp.sum(state.n_trials)
        sampling_rate = jnp.sum(state.n_accepted) / jnp.maximum(trials, 1)
        # During burn-in: the acceptance over the adaptation window of every parameter.
        window = jnp.sum(jnp.minimum(state.n_count, self.nadj))
        burn_rate = jnp.sum(state.history_sum) / jnp.maximum(window, 1)
        return {"best": jnp.min(state.best_fun), "accept": jnp.where(trials > 0, sampling_rate, burn_rate)}

    def _chain_counters(self, state: ReplicaExchangeState) -> dict[str, Deferred]:
        """Each chain's counters, widths and labels in the result's layouts, computed on the host
        when first read (:class:`~multiwalk.result.Deferred`): ``acceptance``, ``exchange_rate``,
        ``steps``, ``n_accepted``, ``n_trials``, ``n_swaps``, ``labels``."""
        nb, ns = self.nbeta, self.nseq

        # each read comes to the host through to_host (pinned memory on a GPU), then NumPy computes
        def chains_last(a: jax.Array) -> np.ndarray:  # (nseq, nbeta, n_free) -> (n_free, nbeta, nseq)
            return np.transpose(to_host(a), (2, 1, 0))

        def rate(hits: jax.Array, tries: jax.Array) -> np.ndarray:  # NaN where never tried
            hits, tries = to_host(hits), to_host(tries)
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(tries > 0, hits / np.maximum(tries, 1), np.nan)

        def exchange_rate() -> np.ndarray:
            return rate(state.n_swaps, state.n_swap_tries).T if nb > 1 else np.zeros((0, ns))

        def swaps() -> np.ndarray:
            return to_host(state.n_swaps).T if nb > 1 else np.zeros((0, ns), np.int32)

        return {
            "acceptance": Deferred(lambda: chains_last(rate(state.n_accepted, state.n_trials))),
            "exchange_rate": Deferred(exchange_rate),
            "steps": Deferred(chains_last, state.step),
            "n_accepted": Deferred(chains_last, state.n_accepted),
            "n_trials": Deferred(chains_last, state.n_trials),
            "n_swaps": Deferred(swaps),
            "labels": Deferred(lambda: to_host(state.label).T),
        }

    def report(self, problem: Problem, state: ReplicaExchangeState, plan: RunPlan | None = None
               ) -> dict[str, jax.Array]:
        """What :meth:`result` reads at once (:func:`_summary_of`: the best point with its fixed
        values, the bytes of its chi2 and of the non-finite counts, the ladder), made at the end of
        each chunk's program and read back with the chunk that ends the run; split over devices too
        (each chunk's program gathers these few values, replicated, instead of a program of the
        result's own after the run).  The value at the point is queued behind it (:meth:`report_ready`)."""
        summary = _summary_of(state)
        summary["best_x"] = problem.expand(summary["best_x"])
        return summary

    def report_ready(self, problem: Problem, report: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """The report with the value at its point by :func:`value_at_point`'s one-point program,
        queued behind the chunk that ends the run (read back with it: no round trip of its own).
        A run split over devices gives the point on each (replicated): the copy on the default
        device is used, so the value does not depend on how the run in chunks was split (a run that
        is one program computes it in that program: :meth:`report_in_program`)."""
        one_point = point_value_program(problem)
        x = point_on_default_device(report["best_x"])
        if one_point is None or x is None:
            return report
        return {**report, "value": one_point(x)}

    def result(
        self, problem: Problem, state: ReplicaExchangeState, done: list[int], status: Status, stats: dict[str, Any],
        reported: dict[str, np.ndarray] | None = None,
    ) -> ReplicaExchangeResult:
        # The few leaves the call itself needs: read back with the chunk that ended the run
        # (``reported``), else now in one program and one transfer.  Every per-chain record (the
        # samples, every temperature's chi2, the burn-in outcomes, the counters and widths of each
        # chain) stays on the device until the result's user reads it (lazy_fields): at a million
        # chains they are hundreds of MB that most callers never look at.
        # The value at the best point: the one-point program's, queued behind that chunk
        # (report_ready) and read with it; else (no report, or no copy of the point on the default
        # device) value_at_point's on the host point, a program and a read back of its own.
        if reported is None:
            st = SimpleNamespace(value=None, **jax.device_get(_host_summary(state)))
            x_best = np.asarray(problem.expand(st.best_x))
        else:
            st = SimpleNamespace(**{"value": None, **reported})
            x_best = np.asarray(st.best_x)
        best_fun, n_sum, n_max = read_best_and_counts(st.numbers, state.best_fun.dtype)
        fun = (reported_value(st.value, float(best_fun)) if st.value is not None
               else value_at_point(problem, x_best, float(best_fun)))
        n_rec = done[1]
        stats = dict(stats)
        stats["nonfinite"] = nonfinite_total(n_sum, n_max, state.n_nonfinite)
        stats["chains"] = self.nseq * self.nbeta
        if self.nbeta > 1:  # one temperature: no exchange, no kernel
            kplan = self.kernel_plan(split=stats.get("devices", 1) > 1)  # as run_chunk decided from the mesh
            stats["kernel"], stats["kernel_reason"] = kplan.name, kplan.reason
        stats["updates"] = int(sum(done)) * self.nseq * self.nbeta * problem.n_free
        status, message = end_status(
            status,
            f"ran {done[0]} burn-in and {done[1]} sampling iterations",
            bool(np.isfinite(best_fun)),
            "no chain ever had a finite chi2 (all NaN or inf): check the objective inside the box",
        )
        return ReplicaExchangeResult(
            x=x_best,
            fun=fun,
            status=status,
            message=message,
            stats=stats,
            **self._records(problem, state, n_rec),
            **self._chain_counters(state),
            log_likelihood_constant=problem.log_likelihood_constant(),
            betas=np.asarray(st.betas, np.float64) if self.adapt_ladder else self.ladder(),
            round_trips=Deferred(lambda: to_host(state.round_trips).astype(np.int64)),
            names=list(problem.names),
            free_index=problem.free_index.copy(),
            lower=problem.lower.copy(),
            upper=problem.upper.copy(),
            options=self.options(),
            problem=problem,
        )


@jax.jit
def _host_summary(state: ReplicaExchangeState) -> dict[str, jax.Array]:
    """What the result reads on the host at once, in one program (a split state: one gather), when
    no chunk's report brought it (:meth:`ReplicaExchange.report`)."""
    return _summary_of(state)


def _summary_of(state: ReplicaExchangeState) -> dict[str, jax.Array]:
    """The best chain's point (n_free,); ``numbers``: the bytes of its chi2 and of the non-finite
    counts' sum and largest (int32; :meth:`ReplicaExchange.result` says when the sum is exact), one
    array (every array read back is a copy of its own); the ladder.  The records and per-sequence
    counters stay on the device (``_records``, ``_chain_counters``, ``round_trips``)."""
    # the first of equal minima, as np.argmin; by reductions: indexing with the traced argmin made a
    # split run all-gather every sequence's best point at each chunk's end
    best_x, best_fun = lowest_row(state.best_x, state.best_fun)
    return {"best_x": best_x, "numbers": best_and_counts_bytes(best_fun, state.n_nonfinite), "betas": state.betas}


@dataclass(repr=False, kw_only=True)
class ReplicaExchangeResult(Result):
    """Result of :class:`ReplicaExchange`; every field is saved by :meth:`save` but ``problem``.

    The sampling phase's record (niter rows, fewer when the run stopped early):
    ``samples`` (niter, nseq, n): the coldest chain of every sequence after each iteration
    (the seed's pout, full parameter vectors).  ``fun_trace`` (niter, nseq): their objective
    values (chi2); ``chi2`` is the same array, the seed's name.
    ``fun_trace_all`` (niter, nseq, nbeta): the chi2 of every temperature, coldest first (its
    column 0 is ``fun_trace``), always recorded: niter x nseq x nbeta values of the dtype (1.8 MB
    for niter=500, nseq=14, nbeta=32, float64); :meth:`evidence` integrates it over the ladder.
    ``samples_all`` (niter, nseq, nbeta, n) every temperature's point and ``label_trace`` (niter,
    nseq, nbeta) which replica sat at each temperature (the seed's tout), both only with
    ``ReplicaExchange(record_temperatures=True)`` (niter x nseq x nbeta x (n_free values + 4
    bytes)), else None.
    ``accept_history`` (nadj, n_free, nbeta, nseq) int8: the last ``nadj`` burn-in outcomes of
    each parameter (1 accepted), slot ``n_cnt % nadj`` as in the seed's ``n_hist``.
    ``log_likelihood_constant``: ``log L + chi2 / 2`` (0 for an objective; eq. 7's Gaussian
    normalisation for model / data / sigma), which :meth:`evidence` adds.
    The chains (nseq x nbeta, per free parameter):
    ``acceptance`` (n_free, nbeta, nseq): sampling-phase acceptance per parameter (NaN: never tried),
    from ``n_accepted`` / ``n_trials`` (n_free, nbeta, nseq).
    ``exchange_rate`` (nbeta - 1, nseq): accepted / attempted swaps of pair (k, k+1), from
    ``n_swaps`` (nbeta - 1, nseq) (both (0, nseq) for one temperature).
    ``steps`` (n_free, nbeta, nseq): the adapted proposal widths.
    ``betas`` (nbeta,): the ladder the sampling phase used, one for every sequence (with
    ``adapt_ladder``, the one the burn-in adapted, in the problem's dtype).
    ``round_trips`` (nseq,): replicas that went from the coldest temperature to the hottest and
    back during the sampling phase (a trip begun in burn-in counts when it ends in sampling);
    ``round_trip_rate`` is that per sampling iteration.
    ``labels`` (nbeta, nseq): which replica sits at each temperature (the seed's tcur).
    The problem's parameters: ``names`` (n), ``free_index`` (n_free,), the box ``lower``, ``upper`` (n,).
    ``options``: the solver's options.
    """

    samples: np.ndarray
    fun_trace: np.ndarray
    fun_trace_all: np.ndarray
    samples_all: np.ndarray | None  # None unless ReplicaExchange(record_temperatures=True)
    label_trace: np.ndarray | None  # None unless ReplicaExchange(record_temperatures=True)
    accept_history: np.ndarray
    log_likelihood_constant: float
    acceptance: np.ndarray
    exchange_rate: np.ndarray
    steps: np.ndarray
    betas: np.ndarray
    n_accepted: np.ndarray
    n_trials: np.ndarray
    n_swaps: np.ndarray
    labels: np.ndarray
    round_trips: np.ndarray
    names: list[str]
    free_index: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    options: dict[str, Any]
    # the function roots() polishes with; None in a result built without it (roots() then explains)
    problem: Problem | None = field(default=None, repr=False, metadata=NOT_SAVED)

    # the records are built on the device and come to the host when first read (Result.lazy_fields)
    lazy_fields = frozenset({"samples", "fun_trace", "fun_trace_all", "samples_all", "label_trace", "accept_history",
                             "acceptance", "exchange_rate", "steps", "n_accepted", "n_trials", "n_swaps", "labels",
                             "round_trips"})

    @property
    def chi2(self) -> np.ndarray:
        """The same as ``fun_trace`` (niter, nseq): the chi2 of each recorded sample, the seed's name."""
        return self.fun_trace

    @property
    def round_trip_rate(self) -> np.ndarray:
        """Round trips per sampling iteration, one per sequence (nseq,): ``round_trips`` over
        the iterations recorded (NaN when none were).  All replicas of a sequence travel at
        once, so it is the sequence's rate, not one replica's (nbeta replicas share it)."""
        n = self.fun_trace.shape[0]
        return self.round_trips / n if n else np.full(self.round_trips.shape, np.nan)

    @property
    def flat_samples(self) -> np.ndarray:
        """All recorded samples as ``(niter * nseq, n)``."""
        return self.samples.reshape(-1, self.samples.shape[-1])

    def roots(self, tol: float | None = None, radius: float = 1e-3, max_candidates: int = 2048) -> Roots:
        """Every distinct root the sampling found, polished to the precision of the dtype.

        The sampler finds the basins; the roots in them come from Levenberg-Marquardt
        (:mod:`multiwalk.polish`) started at candidates taken from the recorded samples and
        ``x``: the lowest-chi2 sample in each cell of a 64-per-axis grid over the box, at most
        ``max_candidates`` of them (the lowest chi2 first).  A polished point is a root if its
        chi2 is at most ``tol`` and it lies in the box (periodic parameters wrapped into it);
        roots closer than ``radius`` of the box width in every coordinate are one root.

        ``tol`` (chi2) defaults to that of residuals of ``sqrt(eps) * max(1, max|data|)`` in
        every datum (data units; ``eps`` of the problem's dtype), ``eps`` for an objective.
        Simple roots are found to a few rounding errors of the residual; a multiple root
        (singular Jacobian) to ``sqrt(eps)`` relative in ``x`` (see :mod:`multiwalk.polish`).
        Returns :class:`Roots` ``(x (k, n), residual (k,))``, the lowest residual first.
        """
        if self.problem is None:
            raise ValueError(
                "roots() polishes with the problem's function, which this result does not hold "
                "(a result read back from a file): run mw.solve again to get a result with it"
            )
        check_number_option("tol", tol, 0, none_ok=True, hint="a chi2 value; None: the dtype's default")
        check_number_option("radius", radius, 0, low_open=True, hint="a fraction of the box width")
        max_candidates = check_int_option("max_candidates", max_candidates, 1)
        problem = self.problem
        x, chi2 = polish(problem, self._root_candidates(max_candidates))
        span = self.upper - self.lower
        periodic = problem.periodic
        x = np.where(periodic, self.lower + np.mod(x - self.lower, span), x).astype(problem.dtype)
        slack = 4 * np.finfo(problem.dtype).eps * span  # a root on a bound may land an ulp outside
        inside = np.all((x >= self.lower - slack) & (x <= self.upper + slack), axis=1)
        keep = np.flatnonzero(inside & (chi2 <= (_default_root_tol(problem) if tol is None else tol)))
        keep = keep[np.argsort(chi2[keep], kind="stable")]
        distinct: list[int] = []
        while keep.size:  # the best remaining point, and every point within radius of it is the same root
            distinct.append(int(keep[0]))
            far = np.max(np.abs(x[keep] - x[keep[0]]) / span, axis=1) > radius
            keep = keep[far]
        return Roots(x=x[distinct].reshape(-1, problem.n), residual=np.sqrt(chi2[distinct]))

    def _root_candidates(self, max_candidates: int) -> np.ndarray:
        """Starting points for the polish (k, n): ``x`` and the lowest-chi2 sample of each
        occupied cell of a 64-per-axis grid over the box, the lowest chi2 first."""
        pts = np.concatenate([self.x[None, :], self.flat_samples])
        c2 = np.concatenate([[self.fun], self.fun_trace.reshape(-1)])
        ok = np.isfinite(c2)
        pts, c2 = pts[ok], c2[ok]
        order = np.argsort(c2, kind="stable")
        pts = pts[order]
        cells = np.floor((pts - self.lower) / (self.upper - self.lower) * 64).astype(np.int64)
        _, first = np.unique(cells, axis=0, return_index=True)  # first = the lowest chi2 of each cell
        return pts[np.sort(first)[:max_candidates]]

    def evidence(self, method: str = "thermodynamic", warn: bool = True) -> Evidence:
        """The log evidence ``log Z`` (eq. 9 of the cuda_mcmc document) from ``fun_trace_all`` over the
        ladder ``betas``: ``method="thermodynamic"`` (thermodynamic integration) or
        ``"stepping-stones"``, with an error bar from the nseq independent sequences (see
        :mod:`multiwalk.evidence`).  The likelihood is ``exp(-chi2 / 2)`` for an objective and eq. 7's
        normalised Gaussian for model / data / sigma; the prior is normalised over the box, so two
        models' ``log_z`` difference is the log Bayes factor.  Warns (``warn``) when the ladder is
        too coarse for the estimate."""
        return _evidence(self.fun_trace_all, self.betas, self.log_likelihood_constant, method=method, warn=warn,
                         stacklevel=3)

    @property
    def log_evidence(self) -> float:
        """``evidence().log_z``: the thermodynamic-integration log evidence (nats)."""
        return self.evidence().log_z

    def marginals(self, bins: int = 50) -> list[tuple[np.ndarray, np.ndarray]]:
        """Histogram ``(counts, edges)`` of every free parameter's samples, over its bounds."""
        out = []
        flat = self.flat_samples
        for i in self.free_index:
            out.append(np.histogram(flat[:, i], bins=bins, range=(self.lower[i], self.upper[i])))
        return out

    def plot(self, path: str | None = None, bins: int = 50):
        """Marginal histograms of the free parameters and the chi2 trace; saved if ``path``."""
        from ..plotting import plot_replica_exchange

        return plot_replica_exchange(self, path=path, bins=bins)

    def summary(self, file: IO[str] | None = None, print_table: bool = True):
        """Print the convergence table across the sequences (ArviZ's R-hat, bulk and tail ESS, and the
        autocorrelation time tau; :mod:`multiwalk.diagnostics`) with the acceptance and exchange
        rates to ``file`` (None: standard output; ``print_table=False``: not printed), warn
        (``ConvergenceWarning``) where R-hat > 1.01 or ESS < 100; return the table (pandas)."""
        return diagnostics.print_summary(self, file=file, print_table=print_table)

    def to_arviz(self):
        """An ``arviz.InferenceData``: posterior (chain = sequence, draw = iteration) and sample_stats."""
        return diagnostics.to_inference_data(self)

    def plot_corner(self, path: str | os.PathLike | None = None, **corner_options: Any):
        """A corner plot of the free parameters' samples (``corner.corner``); saved if ``path``."""
        return diagnostics.plot_corner(self, path=path, **corner_options)

    def save(self, path: str | os.PathLike) -> None:
        """Write a ``.nc`` path as netCDF (:meth:`to_arviz`'s InferenceData), any other as ``.npz``
        (:meth:`Result.save`)."""
        if os.fspath(path).lower().endswith(".nc"):
            diagnostics.save_netcdf(self, path)
        else:
            super().save(path)
