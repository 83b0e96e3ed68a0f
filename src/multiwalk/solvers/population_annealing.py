"""Population annealing Monte Carlo as ODAT-SE runs it: ``algorithm.name = "pamc"``.

A population of ``N`` walkers is annealed from the smallest inverse temperature ``beta_0`` to
the largest ``beta_{T-1}``, every walker at once.  Step 0 evaluates the start points; at
temperature ``t`` each walker makes ``numsteps_for_T[t]`` Metropolis moves with weight
``exp(-beta_t f)`` (the same moves as :class:`~multiwalk.solvers.exchange.Exchange`: a Gaussian
step of width ``step_width`` in a box, or a move to a neighbour on a mesh with the Hastings
correction).  At the end of temperature ``t``:

1. the statistics of ``t`` (ODAT-SE's ``fx.txt``): the weighted mean of ``f`` and its error by
   the bias-corrected jackknife, ``log(Z_t / Z_0)``, the acceptance ratio of the moves at ``t``
   and the participation ratio ``(sum w)^2 / sum w^2`` of the weights ``w = exp(logw)``;
2. the weights are carried to the next temperature, ``logw -= (beta_{t+1} - beta_t) f``;
3. every ``resampling_interval`` temperatures the population is resampled: ``N`` walkers drawn
   with replacement with probabilities ``w / sum w`` (multinomial, as ODAT-SE's Walker table
   draws them), then ``logw = 0``.  ``log Z`` is carried over the resampling as ODAT-SE does:
   ``log(Z_{t+1} / Z_0) = log(Z_s / Z_0) + log mean(w)`` with ``s`` the temperature of the last
   resampling.

Each walker keeps its *ancestor*, the start walker it descends from (ODAT-SE's family).

Randomness: step ``s`` draws from ``fold_in(key, s)`` (moves, acceptance and the resampling of
the temperature it ends), so chunked, checkpointed and resumed runs are identical.

The population's size is fixed (ODAT-SE's ``fix_num_replicas = true``, its default): arrays on
a device have a fixed shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..problem import Problem
from ..result import NOT_SAVED, Result, Status
from ..spaces import Mesh
from ._common import (
    INIT_STREAM,
    check_constraint_options,
    check_finite_box,
    check_initial_option,
    check_int_option,
    check_space_options,
    check_starts,
    check_vector_option,
    evaluate_walkers,
    feasible_starts,
    hashable_vector,
    place_initial,
    satisfies_constraints,
    uniform_in_box,
    wrap_periodic,
)
from .base import Phase, RunPlan, Solver, end_status, value_at_point

__all__ = ["PopulationAnnealing", "PopulationAnnealingResult", "PopulationAnnealingState", "annealing_schedule"]


def annealing_schedule(numsteps: int = 0, numsteps_annealing: int = 0, Tnum: int = 0) -> np.ndarray:
    """ODAT-SE's Monte Carlo steps at each temperature, from two of its three keys (the third 0).

    ``numsteps_annealing`` and ``Tnum``: that many steps at each of ``Tnum`` temperatures;
    ``numsteps`` and ``Tnum``: ``numsteps // Tnum`` each, the first ``rem - 1`` temperatures one
    more (``rem = numsteps % Tnum``; ODAT-SE's rule, kept so the same input runs the same steps);
    ``numsteps`` and ``numsteps_annealing``: blocks of ``numsteps_annealing``, the last shorter,
    one temperature each."""
    given = [k for k, v in (("numsteps", numsteps), ("numsteps_annealing", numsteps_annealing), ("Tnum", Tnum)) if v > 0]
    if len(given) != 2:
        raise ValueError(
            "give exactly two of numsteps, numsteps_annealing and Tnum as positive integers, got "
            f"numsteps={numsteps}, numsteps_annealing={numsteps_annealing}, Tnum={Tnum}"
        )
    if numsteps <= 0:
        return np.full(Tnum, numsteps_annealing, dtype=np.int64)
    if numsteps_annealing <= 0:
        steps = np.full(Tnum, numsteps // Tnum, dtype=np.int64)
        rem = numsteps - (numsteps // Tnum) * Tnum
        if rem > 0:
            steps[0 : rem - 1] += 1
        return steps
    full, last = divmod(numsteps, numsteps_annealing)
    return np.array([numsteps_annealing] * full + ([last] if last else []), dtype=np.int64)


class PopulationAnnealingState(NamedTuple):
    """Walkers on the leading axis (N); per-temperature statistics (T,)."""

    key: jax.Array  # (2,) uint32, the run's key; step s folds in s
    step: jax.Array  # () int32, the next step (ODAT-SE's istep); step 0 is the start
    tindex: jax.Array  # () int32, the temperature the next step runs at
    since_reset: jax.Array  # () int32, temperatures finished since the last resampling
    logz: jax.Array  # () log(Z_s / Z_0) at the temperature s of the last resampling
    x: jax.Array  # (N, d) current points
    node: jax.Array  # (N,) int32 mesh nodes (discrete space; zeros otherwise)
    fun: jax.Array  # (N,) f at x (+inf where NaN or +-inf)
    logw: jax.Array  # (N,) log weights since the last resampling
    ancestor: jax.Array  # (N,) int32 the start walker each walker descends from
    n_accepted: jax.Array  # () int32 accepted moves at the current temperature
    n_trials: jax.Array  # () int32 moves tried at the current temperature
    n_nonfinite: jax.Array  # () int32 in-box points whose f was NaN or +-inf (rejected)
    best_fun: jax.Array  # () lowest f of any walker after any step
    best_x: jax.Array  # (d,)
    best_step: jax.Array  # () int32 the (first) step it was reached
    best_walker: jax.Array  # () int32 the walker that reached it
    stat_mean: jax.Array  # (T,) weighted mean of f at each finished temperature (jackknife)
    stat_error: jax.Array  # (T,) its jackknife standard error
    stat_logz: jax.Array  # (T,) log(Z_t / Z_0)
    stat_acceptance: jax.Array  # (T,) accepted / tried moves at t
    stat_pr: jax.Array  # (T,) participation ratio of the weights at t
    rec_values: jax.Array  # (B, N, 3 + 2d) of the last B steps, slot s % B: trial f, result f, logw,
    #   trial x, result x
    rec_ancestor: jax.Array  # (B, N) int32 the walkers' ancestors at those steps


def weighted_statistics(fun: jax.Array, logw: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """``(mean, error, log mean w, participation ratio)`` of ``fun`` (N,) with weights ``exp(logw)``
    (N,): the bias-corrected jackknife mean and error ODAT-SE reports, from the N leave-one-out
    weighted means."""
    n = fun.shape[0]
    top = jnp.max(logw)
    w = jnp.exp(logw - top)  # the largest weight is 1: no overflow
    fun_w = jnp.where(w > 0, fun * w, 0.0)  # a walker of weight 0 counts for nothing, even at f = inf
    fw, ws = jnp.sum(fun_w), jnp.sum(w)
    loo = (fw - fun_w) / (ws - w)  # (N,) the weighted mean without walker i
    mean = n * (fw / ws) - (n - 1) * jnp.mean(loo)
    error = jnp.sqrt((n - 1) * jnp.var(loo))
    log_mean_w = top + jnp.log(ws / n)
    return mean, error, log_mean_w, ws * ws / jnp.sum(w * w)


@dataclass(frozen=True)
class PopulationAnnealing(Solver):
    """ODAT-SE's population annealing Monte Carlo (``pamc``), every walker in parallel.

    Parameters
    ----------
    betas : the inverse temperatures (T,), ascending: annealing goes from ``betas[0]`` to ``betas[-1]``.
    numsteps_for_T : Monte Carlo steps at each temperature (T,), each at least 1 (:func:`annealing_schedule`).
    n_replicas : the population's size N (ODAT-SE: processes x ``nreplica_per_proc``).
    step_width : Gaussian step width of each coordinate (continuous space; needs a box on the problem).
        A periodic parameter of the problem (``Problem(periodic=...)``, ODAT-SE's ``pbc_list``) is
        wrapped into ``[lower, upper)`` after each step instead of leaving the box.
    mesh : a :class:`~multiwalk.spaces.Mesh` for a discrete space (then ``step_width`` is not used).
    resampling_interval : resample every this many temperatures; None: never (ODAT-SE's
        ``resampling_interval < 1``), the weights then carry the whole annealing.
    record : keep the trials and results of the last ``record`` steps in the state for the
        step-file writer (0: none; at least 2 otherwise).
    max_chunk_steps : at most this many steps per driver chunk (a checkpoint may follow each:
        ODAT-SE's ``checkpoint_steps``); None: no limit.  Results never depend on it.
    initial : start points ``(K, d)`` (ODAT-SE's ``initial_list``): walker ``r`` starts at
        ``initial[r % nreplica_per_proc]`` when that row exists (ODAT-SE gives every MPI process
        the same list for its ``nreplica_per_proc`` walkers), the others uniformly in the box.
        Continuous space only; each point inside the box and the constraints.
    nreplica_per_proc : walkers per emulated MPI process, dividing ``n_replicas`` (default: all in one).
    constraint_a, constraint_b : linear inequality constraints ``constraint_a @ x + constraint_b > 0``
        (every row strictly; ODAT-SE's ``[runner.limitation]`` ``co_a`` ``(m, d)`` and ``co_b``
        ``(m,)``): a move to a point violating one is rejected like a move out of the box (its f
        is inf in the trial records), and the random start points are redrawn (up to
        ``START_DRAWS`` times) until they satisfy them.  The constraints must leave enough of the
        box that no walker is expected to be left outside after those draws (checked before
        compiling on uniform points of the box; ODAT-SE gives up after 100 draws); one left
        outside nevertheless starts with f = inf and weight 0 at the next temperature.
        Continuous space only; empty: no constraint.
    """

    betas: tuple[float, ...]
    numsteps_for_T: tuple[int, ...]
    n_replicas: int
    step_width: tuple[float, ...] | None = None
    mesh: Mesh | None = None
    resampling_interval: int | None = 1
    record: int = 0
    max_chunk_steps: int | None = None
    initial: tuple[tuple[float, ...], ...] = ()
    nreplica_per_proc: int | None = None
    constraint_a: tuple[tuple[float, ...], ...] = ()
    constraint_b: tuple[float, ...] = ()

    resumable_options = ("max_chunk_steps",)  # how, not what
    evaluates_once_per_step = True  # one batch of walkers a step: a non-JAX objective runs as a host loop
    wraps_periodic = True  # ODAT-SE's pbc_list: a move across a periodic parameter wraps into [min, max)
    reports_value_at_point = True  # result.fun by value_at_point: its one-point program compiles beside the loop

    def __post_init__(self) -> None:
        b = check_vector_option("betas", self.betas, non_negative=True)
        if b.size > 1 and not np.all(np.diff(b) >= 0):
            raise ValueError(f"betas must be ascending (annealing from high to low temperature), got {self.betas}")
        object.__setattr__(self, "betas", hashable_vector(b) if b.size > 1 else (float(b.reshape(-1)[0]),))
        steps = np.asarray(self.numsteps_for_T).reshape(-1)
        if steps.size != len(self.betas) or not all(float(s) == int(s) and s >= 1 for s in steps):
            raise ValueError(
                f"numsteps_for_T must give a whole number of steps, at least 1, at each of the {len(self.betas)} temperatures, "
                f"got {self.numsteps_for_T!r}: raise numsteps or lower Tnum"
            )
        object.__setattr__(self, "numsteps_for_T", tuple(int(s) for s in steps))
        check_int_option("n_replicas", self.n_replicas, 1)
        check_int_option("resampling_interval", self.resampling_interval, 1, none_ok=True)
        check_int_option("record", self.record, 0)
        check_int_option("max_chunk_steps", self.max_chunk_steps, 1, none_ok=True)
        if self.record == 1:
            raise ValueError("record must be 0 (no per-step records) or at least 2")
        check_space_options(self)
        check_int_option("nreplica_per_proc", self.nreplica_per_proc, 1, none_ok=True)
        if self.n_replicas % self.walkers_per_process:
            raise ValueError(f"nreplica_per_proc={self.nreplica_per_proc} does not divide n_replicas={self.n_replicas}")
        check_initial_option(self, self.walkers_per_process)
        check_constraint_options(self)

    # ----------------------------------------------------------------- set-up
    @property
    def walkers_per_process(self) -> int:
        return self.nreplica_per_proc or self.n_replicas

    def feasible(self, x: Any) -> Any:
        """True where the points ``x`` ``(..., d)`` satisfy every constraint (numpy or jax in, same out)."""
        return satisfies_constraints(self, x)

    @property
    def n_temperatures(self) -> int:
        return len(self.betas)

    def last_steps(self) -> np.ndarray:
        """The step (1-based) that ends each temperature (T,)."""
        return np.cumsum(self.numsteps_for_T)

    def temperature_of_steps(self, steps: np.ndarray) -> np.ndarray:
        """The temperature index each step ran at (step 0, the start, is at temperature 0)."""
        return np.searchsorted(self.last_steps(), np.maximum(np.asarray(steps), 1), side="left")

    def check(self, problem: Problem) -> None:
        if self.mesh is not None:
            if self.mesh.dimension != problem.n:
                raise ValueError(f"the mesh has {self.mesh.dimension} coordinates per point but the problem has {problem.n}")
        else:
            if problem.lower is None:
                raise ValueError("PopulationAnnealing in a continuous space needs a box: pass lower= and upper=")
            check_finite_box(problem, "PopulationAnnealing")
            if len(self.step_width) != problem.n:
                raise ValueError(f"step_width has {len(self.step_width)} entries but the problem has {problem.n} parameters")
        if problem.fixed:
            raise ValueError("PopulationAnnealing moves every coordinate: fixed parameters are not supported")
        if self.mesh is not None and problem.periodic.any():
            raise ValueError("periodic parameters are for a continuous space; a mesh's neighbour list says what is near")
        check_starts(self, problem, n_walkers=self.n_replicas)  # initial and the constraints

    def phases(self, problem: Problem) -> list[Phase]:
        return [Phase("annealing", int(sum(self.numsteps_for_T)))]

    def plan(self, problem: Problem, devices: int, time_limit: float | None) -> RunPlan:
        """Chunks of at most ``record - 1`` steps, so the step files read each step from the ring,
        and at most ``max_chunk_steps``."""
        limits = [n for n in (self.record - 1 if self.record else None, self.max_chunk_steps) if n]
        return RunPlan(devices=devices, max_chunk=min(limits) if limits else None)

    def state_memory(self, problem: Problem) -> tuple[int, str]:
        item, d, N, B, T = np.dtype(problem.dtype).itemsize, problem.n, self.n_replicas, self.record, self.n_temperatures
        per_walker = (d + 2) * item + 8
        per_record = (3 + 2 * d) * item + 4
        need = N * per_walker + B * N * per_record + 5 * T * item + (d + 2) * item + 40  # + logz, best_fun, best_x; ints, key
        return need, f"fewer walkers (n_replicas={N}), or a lower record={B} (each step keeps {per_record} bytes per walker)"

    def options(self) -> dict[str, Any]:
        out = super().options()
        out["betas"] = list(self.betas)
        out["numsteps_for_T"] = list(self.numsteps_for_T)
        out["step_width"] = None if self.step_width is None else list(self.step_width)
        out["mesh"] = None if self.mesh is None else self.mesh.digest()
        out["initial"] = [list(r) for r in self.initial]
        out["constraint_a"] = [list(r) for r in self.constraint_a]
        out["constraint_b"] = list(self.constraint_b)
        return out

    def init(self, problem: Problem, key: jax.Array) -> PopulationAnnealingState:
        dt, N, d, T, B = problem.dtype, self.n_replicas, problem.n, self.n_temperatures, self.record
        k_init = jax.random.fold_in(key, INIT_STREAM)
        if self.mesh is None:
            x = uniform_in_box(k_init, (N, d), problem.lower, problem.upper, dt, width_in_float64=False)
            if self.constraint_a:
                x = feasible_starts(self, problem, k_init, x)
            x = place_initial(self, x, self.walkers_per_process)  # ODAT-SE's initial_list
            node = jnp.zeros(N, jnp.int32)
        else:
            node = jax.random.randint(k_init, (N,), 0, self.mesh.n_nodes, jnp.int32)
            x = jnp.asarray(self.mesh.coordinates, dt)[node]
        fun, bad = evaluate_walkers(problem.chi2_full, x)
        if self.constraint_a:  # a start left outside the constraints (START_DRAWS draws) is not a sample
            fun = jnp.where(self.feasible(x), fun, jnp.inf)
        i32 = jnp.int32
        first = jnp.argmin(fun).astype(i32)
        nan_t = jnp.full(T, jnp.nan, dt)
        state = PopulationAnnealingState(
            key=key, step=jnp.asarray(1, i32), tindex=jnp.asarray(0, i32), since_reset=jnp.asarray(0, i32),
            logz=jnp.asarray(0.0, dt), x=x, node=node, fun=fun, logw=jnp.zeros(N, dt), ancestor=jnp.arange(N, dtype=i32),
            n_accepted=jnp.asarray(0, i32), n_trials=jnp.asarray(0, i32), n_nonfinite=jnp.sum(bad).astype(i32),
            best_fun=fun[first], best_x=x[first], best_step=jnp.asarray(0, i32), best_walker=first,
            stat_mean=nan_t, stat_error=nan_t, stat_logz=nan_t, stat_acceptance=nan_t, stat_pr=nan_t,
            rec_values=jnp.zeros((B, N, 3 + 2 * d), dt), rec_ancestor=jnp.zeros((B, N), i32),
        )
        if B:
            state = self._record(state, 0, x, fun)
        return state

    def _record(self, st: PopulationAnnealingState, s: Any, trial_x: jax.Array, trial_f: jax.Array) -> PopulationAnnealingState:
        """Step ``s``'s trials and results (the state's x and f) into slot ``s % record``."""
        slot = jnp.asarray(s) % self.record
        values = jnp.concatenate([trial_f[:, None], st.fun[:, None], st.logw[:, None], trial_x, st.x], axis=1)
        upd = jax.lax.dynamic_update_index_in_dim
        return st._replace(rec_values=upd(st.rec_values, values, slot, 0),
                           rec_ancestor=upd(st.rec_ancestor, st.ancestor, slot, 0))

    # ----------------------------------------------------------------- one step
    def step(self, problem: Problem, state: PopulationAnnealingState, phase: int) -> PopulationAnnealingState:
        dt = problem.dtype
        k_move, k_accept, k_resample = jax.random.split(jax.random.fold_in(state.key, state.step), 3)
        st, proposal, f_new = self._metropolis(problem, state, k_move, k_accept, jnp.asarray(self.betas, dt)[state.tindex])
        if self.record:
            st = self._record(st, st.step, proposal, f_new)
        ends = st.step == jnp.asarray(self.last_steps(), jnp.int32)[st.tindex]
        st = jax.lax.cond(ends, lambda t: self._end_temperature(problem, t, k_resample), lambda t: t, st)
        return st._replace(step=st.step + 1)

    def _metropolis(
        self, problem: Problem, st: PopulationAnnealingState, k_move: jax.Array, k_accept: jax.Array, beta: jax.Array
    ) -> tuple[PopulationAnnealingState, jax.Array, jax.Array]:
        """One Metropolis move of every walker at ``beta``: ``(state, proposals (N, d), their f (N,))``,
        f = inf for a proposal outside the box or the constraints (rejected, as ODAT-SE does)."""
        dt, N = problem.dtype, self.n_replicas
        if self.mesh is None:
            move = jax.random.normal(k_move, (N, problem.n), dt)
            lo, hi = jnp.asarray(problem.lower, dt), jnp.asarray(problem.upper, dt)
            proposal = wrap_periodic(problem, st.x + move * jnp.asarray(self.step_width, dt), lo, hi)  # pbc_list
            inside = jnp.all((proposal >= lo) & (proposal < hi), axis=1) & self.feasible(proposal)  # [runner.limitation]
            node_new, log_weight = st.node, jnp.zeros(N, dt)
        else:
            counts = jnp.asarray(self.mesh.counts)
            n_old = counts[st.node]
            pick = jnp.floor(jax.random.uniform(k_move, (N,), dt) * n_old).astype(jnp.int32)
            node_new = jnp.asarray(self.mesh.neighbors)[st.node, jnp.minimum(pick, n_old - 1)]
            proposal = jnp.asarray(self.mesh.coordinates, dt)[node_new]
            inside = jnp.ones(N, bool)
            log_weight = jnp.log(n_old.astype(dt)) - jnp.log(counts[node_new].astype(dt))  # Hastings: uneven proposals
        f_new, bad = evaluate_walkers(problem.chi2_full, proposal)
        f_new = jnp.where(inside, f_new, jnp.inf)
        log_u = jnp.log(jax.random.uniform(k_accept, (N,), dt))
        accepted = inside & ~bad & (log_u < -beta * (f_new - st.fun) + log_weight)
        fun = jnp.where(accepted, f_new, st.fun)
        x = jnp.where(accepted[:, None], proposal, st.x)
        i = jnp.argmin(fun).astype(jnp.int32)
        better = fun[i] < st.best_fun  # strictly lower: ties keep the earlier step, as ODAT-SE
        st = st._replace(
            x=x, fun=fun, node=jnp.where(accepted, node_new, st.node),
            n_accepted=st.n_accepted + jnp.sum(accepted, dtype=jnp.int32), n_trials=st.n_trials + N,
            n_nonfinite=st.n_nonfinite + jnp.sum(inside & bad, dtype=jnp.int32),
            best_fun=jnp.where(better, fun[i], st.best_fun), best_x=jnp.where(better, x[i], st.best_x),
            best_step=jnp.where(better, st.step, st.best_step), best_walker=jnp.where(better, i, st.best_walker),
        )
        return st, proposal, f_new

    def _end_temperature(self, problem: Problem, st: PopulationAnnealingState, key: jax.Array) -> PopulationAnnealingState:
        """The statistics of the temperature just finished, then the weights carried to the next
        one and, every ``resampling_interval`` temperatures, the resampling."""
        dt, t, T = problem.dtype, st.tindex, self.n_temperatures
        mean, error, log_mean_w, pr = weighted_statistics(st.fun, st.logw)
        acceptance = st.n_accepted.astype(dt) / jnp.maximum(st.n_trials, 1).astype(dt)
        st = st._replace(
            stat_mean=st.stat_mean.at[t].set(mean), stat_error=st.stat_error.at[t].set(error),
            stat_logz=st.stat_logz.at[t].set(st.logz + log_mean_w), stat_acceptance=st.stat_acceptance.at[t].set(acceptance),
            stat_pr=st.stat_pr.at[t].set(pr), n_accepted=jnp.zeros_like(st.n_accepted), n_trials=jnp.zeros_like(st.n_trials),
        )
        if T == 1:
            return st
        betas = jnp.asarray(self.betas, dt)
        dbeta = betas[jnp.minimum(t + 1, T - 1)] - betas[t]
        # equal neighbouring betas leave the weights as they are: 0 * inf (a walker outside the
        # objective's support, or the limitation) would make them NaN
        logw = st.logw - jnp.where(dbeta == 0, jnp.zeros_like(st.fun), dbeta * st.fun)
        last = t == T - 1  # the end of the run: nothing carried, nothing resampled
        since = st.since_reset + 1
        interval = self.resampling_interval or T + 1
        st = st._replace(logw=jnp.where(last, st.logw, logw), since_reset=jnp.where(last, st.since_reset, since),
                         tindex=jnp.where(last, t, t + 1))
        resample = ~last & (since == interval)
        return jax.lax.cond(resample, lambda s: self._resample(s, key), lambda s: s, st)

    def _resample(self, st: PopulationAnnealingState, key: jax.Array) -> PopulationAnnealingState:
        """N walkers drawn with replacement with probabilities w / sum w; log Z carried over."""
        N = self.n_replicas
        top = jnp.max(st.logw)
        w = jnp.exp(st.logw - top)
        pick = jax.random.choice(key, N, (N,), replace=True, p=w / jnp.sum(w))
        return st._replace(
            x=st.x[pick], node=st.node[pick], fun=st.fun[pick], ancestor=st.ancestor[pick],
            logz=st.logz + top + jnp.log(jnp.mean(w)), logw=jnp.zeros_like(st.logw), since_reset=jnp.zeros_like(st.since_reset),
        )

    # ----------------------------------------------------------------- reporting
    def summary(self, problem: Problem, state: PopulationAnnealingState) -> dict[str, jax.Array]:
        return {"best": state.best_fun, "T index": state.tindex}

    def statistics(self, state: Any) -> dict[str, np.ndarray]:
        """Per temperature (ascending beta): ``beta``, ``mean``, ``error``, ``count`` (walkers),
        ``logz`` (log(Z/Z0)), ``acceptance`` and ``participation`` (NaN where not reached)."""
        T = self.n_temperatures
        return {"beta": np.asarray(self.betas), "mean": np.asarray(state.stat_mean, np.float64),
                "error": np.asarray(state.stat_error, np.float64), "count": np.full(T, self.n_replicas),
                "logz": np.asarray(state.stat_logz, np.float64), "acceptance": np.asarray(state.stat_acceptance, np.float64),
                "participation": np.asarray(state.stat_pr, np.float64)}

    def result(
        self, problem: Problem, state: PopulationAnnealingState, done: list[int], status: Status, stats: dict[str, Any]
    ) -> PopulationAnnealingResult:
        st = jax.tree_util.tree_map(np.asarray, state)
        steps = int(st.step)
        stats = dict(stats)
        stats["nonfinite"] = int(st.n_nonfinite)
        stats["replicas"] = self.n_replicas
        stats["steps"] = steps
        status, message = end_status(
            status, f"annealed {self.n_replicas} walkers over {self.n_temperatures} temperatures in {steps - 1} steps",
            bool(np.isfinite(st.best_fun)), "no walker ever had a finite f: check the function inside the box or the mesh",
        )
        return PopulationAnnealingResult(
            x=st.best_x.copy(), fun=value_at_point(problem, st.best_x, float(st.best_fun)), status=status, message=message,
            stats=stats, best_walker=int(st.best_walker), best_step=int(st.best_step), walker_x=st.x, funs=st.fun,
            logw=st.logw, ancestor=st.ancestor, betas=np.asarray(self.betas), steps=steps,
            statistics=self.statistics(st), state=st,
        )


@dataclass(repr=False, kw_only=True)
class PopulationAnnealingResult(Result):
    """Result of :class:`PopulationAnnealing`.

    ``x``, ``fun``: the best point of any walker after any step (``best_walker``, ``best_step``).
    ``walker_x`` (N, d), ``funs`` (N,), ``logw`` (N,), ``ancestor`` (N,): the last population.
    ``betas`` (T,); ``steps``: the next step number (steps 0 .. steps-1 are done).
    ``statistics``: per temperature, :meth:`PopulationAnnealing.statistics` (``logz``: log(Z/Z0)).
    ``state``: the final solver state (numpy, for writers; not written by :meth:`save`).
    """

    best_walker: int
    best_step: int
    walker_x: np.ndarray
    funs: np.ndarray
    logw: np.ndarray
    ancestor: np.ndarray
    betas: np.ndarray
    steps: int
    statistics: dict[str, np.ndarray]
    state: PopulationAnnealingState = field(repr=False, metadata=NOT_SAVED)
