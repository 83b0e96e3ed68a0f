"""Replica-exchange Monte Carlo as ODAT-SE (2DMAT) runs it: ``algorithm.name = "exchange"``.

``R`` replicas, one per temperature ``T_t = 1 / beta_t``, all advanced in lockstep.  Step 0
evaluates the start points; each later step ``s = 1 .. numsteps - 1`` does, for every replica
at once:

1. if ``s % numsteps_exchange == 0``: temperature exchange between neighbouring temperatures
   ``(t, t+1)``, the pairs starting at even ``t`` and at odd ``t`` in turn; a pair swaps with
   probability ``min(1, exp((beta_{t+1} - beta_t) (f_{t+1} - f_t)))``;
2. a Metropolis move with weight ``exp(-f / T)``.  Continuous space: every coordinate moves at
   once by a Gaussian step of width ``step``; a point outside ``lower <= x < upper`` gets
   ``f = inf`` (rejected).  Discrete space (a :class:`~multiwalk.spaces.Mesh`): a move to a
   uniformly chosen neighbour, accepted with ``min(1, n_old / n_new * exp(-(f_new - f_old)/T))``
   where ``n`` counts a node's neighbours (the Hastings correction of the uneven proposal).

Every step leaves, per replica, a *trial* (the proposal and its f) and a *result* (the state
after the accept/reject), as in ODAT-SE's ``trial.txt`` and ``result.txt``.  With
``record=B > 0`` the last B steps of these are kept in the state for the writer of those files
(:class:`ReplicaOrderWriter`, handed to :func:`multiwalk.solve`, which calls it after each chunk;
the run plan keeps chunks to at most ``B - 1`` steps).
Per-temperature statistics of the result (ODAT-SE's ``fx.txt``: mean of f, its standard error,
log(Z/Z0) by reweighting, the fraction of steps whose point changed) are accumulated on the
device from step ``numsteps_thermalization`` on, so no file has to be read back.

Layout: the state is kept in TEMPERATURE order.  Row ``t`` of the per-replica arrays (point,
value, counters, best point, step records) belongs to the replica now at temperature ``t``
(``state.replica[t]`` says which); an accepted exchange swaps the rows of the two replicas (their
configurations and bookkeeping move, the temperatures stay), which is the same Markov chain as
ODAT-SE's swap of temperatures.  So the per-temperature statistics sit beside the replica they
sample, and when the rows are split over devices only a pair straddling two devices needs a
neighbour's row: one row per array per device and step crosses (``jnp.roll`` of a split axis, a
collective-permute), not every replica's f and x.  :meth:`Exchange.result` and the step-file
writer (:class:`ReplicaOrderWriter`) get replica order back (:func:`replica_order`).

Randomness: the key of step ``s`` is ``fold_in(key, s)``, so chunking, checkpoints and resumes
give identical runs; a run of N steps continued to 2N (``numsteps`` is resumable) equals a run
of 2N steps.  Step ``s``'s draws are indexed by temperature row (not by replica), so each
device draws only its own rows (jax_threefry_partitionable) and a run is the same on any number
of devices.

Two forms run the same steps (``kernel``): the XLA form, a few XLA kernels per step over all
replicas, and on a GPU the Pallas form (:mod:`~multiwalk.solvers.exchange_kernel`), which runs
the Metropolis steps between two exchanges in one kernel with every replica in registers, from
the same random numbers (several times faster per step; docs/benchmarks.md, ODAT-SE section).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from ..kernels import check_kernel_option, check_launch_options
from ..problem import Problem
from ..result import NOT_SAVED, Result, Status
from ..spaces import Mesh
from . import exchange_kernel
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
    keep_better,
    ladder_values,
    place_initial,
    satisfies_constraints,
    uniform_in_box,
    wrap_periodic,
)
from .base import Phase, RunPlan, Solver, end_status, value_at_point

__all__ = ["Exchange", "ExchangeResult", "ExchangeState", "replica_order", "temperature_ladder"]

_ATOL, _RTOL = 1e-8, 1e-5  # numpy.allclose's defaults: ODAT-SE's test of "the point changed"


def temperature_ladder(
    n: int, Tmin: float | None = None, Tmax: float | None = None, bmin: float | None = None,
    bmax: float | None = None, logspace: bool = True,
) -> np.ndarray:
    """ODAT-SE's inverse temperatures ``beta_t``, t = 0 .. n-1 (``read_Ts``).

    With Tmin/Tmax: ``T`` from Tmin up to Tmax (log- or linearly spaced), ``beta = 1 / T``.
    With bmin/bmax: ``beta`` from bmin up to bmax.  Exactly one of the two pairs is given.
    """
    set_t = Tmin is not None or Tmax is not None
    set_b = bmin is not None or bmax is not None
    if set_t == set_b:
        raise ValueError("give exactly one pair of Tmin/Tmax or bmin/bmax" + (", not both" if set_t else ""))
    lo, hi, names = (Tmin, Tmax, ("Tmin", "Tmax")) if set_t else (bmin, bmax, ("bmin", "bmax"))
    if lo is None or hi is None:
        raise ValueError(f"{names[0]} and {names[1]} go together: give both")
    if set_t and not (lo > 0 and hi > 0):
        raise ValueError(f"Tmin and Tmax must be positive, got Tmin={lo}, Tmax={hi}")
    if set_b and not (lo >= 0 and hi >= 0):
        raise ValueError(f"bmin and bmax must be zero or positive, got bmin={lo}, bmax={hi}")
    if lo > hi:
        raise ValueError(f"{names[0]}={lo} is above {names[1]}={hi}")
    if logspace and lo == 0:
        raise ValueError("bmin must be above 0 when Tlogspace is true (a log-spaced ladder cannot start at 0)")
    values = ladder_values(lo, hi, n, spacing="log10" if logspace else "linear")  # as ODAT-SE spaces them
    return 1.0 / values if set_t else values


class Ladder(NamedTuple):
    """The ladder's per-temperature constants (T,) in the working precision: ``beta``, the gap
    ``beta_{t+1} - beta_t`` of the exchange test (0 past the top) and the reweighting's ``dbeta``
    (:meth:`Exchange.reweighting_dbeta`)."""

    beta: jax.Array
    gap: jax.Array
    dbeta: jax.Array


def _pick(draws: tuple, j: Any) -> tuple:
    """Step ``j`` (an int or a traced index) of a block of draws (leading axis: the steps); None stays None."""
    return tuple(None if d is None else jax.lax.dynamic_index_in_dim(d, j, keepdims=False) for d in draws)


def _behind_barrier(state: Any, extra: Any) -> tuple[Any, Any]:
    """``state`` (an :class:`ExchangeState`) and ``extra`` behind one ``optimization_barrier``, as
    each step's start is: without it XLA simplified and fused the arithmetic of ``unroll`` steps
    (and of draws made in a batch) otherwise than that of one step, and the last bits differed
    (FMA contraction).  The record buffers stay out of it: they are only written."""
    recs = ("rec_values", "rec_ints")
    rest = {k: v for k, v in state._asdict().items() if k not in recs}
    rest, extra = jax.lax.optimization_barrier((rest, extra))
    return state._replace(**rest), extra


class ExchangeState(NamedTuple):
    """Every (T, ...) / (B, T, ...) array is in temperature order: row t is the replica at
    temperature t (``replica[t]``); T = R."""

    key: jax.Array  # (2,) uint32, the run's key; step s folds in s
    step: jax.Array  # () int32, the next step (ODAT-SE's istep); step 0 is the start
    direction: jax.Array  # () bool, True: the next exchange pairs (0,1), (2,3), ...
    x: jax.Array  # (T, d) current point of the replica at each temperature
    node: jax.Array  # (T,) int32 current mesh node (discrete space; zeros otherwise)
    fun: jax.Array  # (T,) objective (f) at x (+inf where NaN or +-inf)
    replica: jax.Array  # (T,) int32 the replica at each temperature (ODAT-SE's T2rep)
    n_accepted: jax.Array  # (T,) int32 accepted moves (of the replica, travelling with it)
    n_nonfinite: jax.Array  # (T,) int32 the start and in-range proposals whose f was NaN or +-inf (rejected)
    n_exchange_tries: jax.Array  # (T,) int32 exchange attempts of pair (t, t+1) (the last row stays 0)
    n_exchanges: jax.Array  # (T,) int32 accepted
    best_fun: jax.Array  # (T,) lowest f of the replica's results so far
    best_step: jax.Array  # (T,) int32 the (first) step it was reached
    best_x: jax.Array  # (T, d)
    stat_n: jax.Array  # (T,) int32 samples at each temperature after thermalisation
    stat_sum: jax.Array  # (T,) sum of f
    stat_sum2: jax.Array  # (T,) sum of f^2
    stat_changed: jax.Array  # (T,) int32 samples whose point differs from the one before (allclose)
    stat_prev: jax.Array  # (T, d) the point at each temperature one step ago
    stat_fbase: jax.Array  # (T,) first sample's f, the reweighting's reference
    stat_lse: jax.Array  # (T,) log sum exp(-dbeta (f - fbase)) over the samples
    rec_values: jax.Array  # (B, T, 1 + d) of the last B steps, slot s % B: trial f (inf outside the box), then
    #   the trial point (continuous; (B, T, 1) in a discrete space)
    rec_ints: jax.Array  # (B, T, 3) int32: the replica, accepted (result = trial, else the result of the
    #   step before), trial node (discrete; 0 otherwise); replica_order() turns column 0 into the temperature


# the rows that travel with a replica when it swaps temperature (the statistics stay: per temperature)
_TRAVELLING = ("x", "node", "fun", "replica", "n_accepted", "n_nonfinite", "best_fun", "best_step", "best_x")


def replica_order(state: ExchangeState, steps: np.ndarray | None = None) -> ExchangeState:
    """The state with its per-replica rows in replica order, on the host (numpy): row r of ``x``,
    ``fun``, ``node``, the counters, best points and of every record slot is replica r; the
    records' column 0 becomes the replica's temperature index at that step (ODAT-SE's files'
    ``T`` column).  ``replica`` and the per-temperature statistics are left as they are.

    ``steps`` (step numbers): only the record slots of these steps (``step % B``) are put in
    replica order; the other slots of the returned records are left UNSET (whatever memory held).
    The step-file writer reads only the chunk's steps: reordering all B slots after every chunk
    cost more than the chunk itself at B = 1024."""
    st = jax.tree_util.tree_map(np.asarray, state)
    t_of_rep = np.argsort(st.replica, kind="stable")  # a permutation: replica r is at temperature t_of_rep[r]
    rows = {name: getattr(st, name)[t_of_rep] for name in _TRAVELLING if name != "replica"}
    B, n = st.rec_ints.shape[:2]
    if not B:
        return st._replace(**rows)
    slots = np.arange(B) if steps is None else np.unique(np.asarray(steps, np.int64) % B)
    m = slots.size
    # flat row gathers ((slot, row) -> slot * n + row): take_along_axis over (B, n, k) was ~4x slower
    reps = st.rec_ints[slots, :, 0].astype(np.intp)  # (m, n) the replica at each temperature
    t_of = np.zeros(m * n, np.intp)  # slots never written hold zeros: any in-range rows
    t_of[(reps + (np.arange(m) * n)[:, None]).reshape(-1)] = np.tile(np.arange(n), m)
    src = (t_of.reshape(m, n) + (slots * n)[:, None]).reshape(-1)  # (slot, temperature row) of each replica
    ints = np.empty_like(st.rec_ints)
    values = np.empty_like(st.rec_values)
    if m and slots[-1] - slots[0] == m - 1:  # consecutive slots (no wrap): gathered straight into place
        a = int(slots[0])
        # mode="clip": the indices are in range; the default ("raise") copies through a buffer
        st.rec_ints.reshape(B * n, -1).take(src, axis=0, out=ints[a:a + m].reshape(m * n, -1), mode="clip")
        st.rec_values.reshape(B * n, -1).take(src, axis=0, out=values[a:a + m].reshape(m * n, -1), mode="clip")
    else:
        ints[slots] = st.rec_ints.reshape(B * n, -1).take(src, axis=0).reshape(m, n, -1)
        values[slots] = st.rec_values.reshape(B * n, -1).take(src, axis=0).reshape(m, n, -1)
    ints[slots, :, 0] = t_of.reshape(m, n)
    return st._replace(**rows, rec_values=values, rec_ints=ints)


class StepFiles(Protocol):
    """What writes ODAT-SE's per-step files (:class:`multiwalk.io.odatse.StepWriter`): it reads
    the records of steps ``first .. last`` of a state in replica order."""

    def on_steps(self, state: ExchangeState, first: int, last: int) -> None: ...

    def flush(self) -> None: ...


class ReplicaOrderWriter:
    """The run's writer (:class:`~multiwalk.solvers.base.Writer`, handed to ``solve(writer=...)``)
    of ODAT-SE's per-step files: after each chunk it puts the records of the chunk's steps in
    replica order (:func:`replica_order`, on the host) and hands them to ``files``; ``flush``
    waits until what ``files`` handed to other threads or processes is written."""

    def __init__(self, files: StepFiles) -> None:
        self.files = files

    def write(self, problem: Problem, state: ExchangeState, first: int, last: int) -> None:
        # only the slots of steps first .. last are reordered (the files are written from first + 1,
        # or from 0 at the start, which is first then)
        self.files.on_steps(replica_order(state, np.arange(first, last + 1)), first, last)

    def flush(self) -> None:
        self.files.flush()


def checkpoint_replica_rows(leaves: list[np.ndarray]) -> dict[str, np.ndarray]:
    """``x``, ``fun`` and ``node`` of each replica, in replica order, from a checkpoint's arrays (the
    leaves of an :class:`ExchangeState`, in field order): where a continued run's step files
    start from."""
    field = {name: np.asarray(leaves[i]) for i, name in enumerate(ExchangeState._fields) if i < len(leaves)}
    t_of_rep = np.argsort(field["replica"], kind="stable")
    return {name: field[name][t_of_rep] for name in ("x", "fun", "node")}


@dataclass(frozen=True)
class Exchange(Solver):
    """ODAT-SE's replica-exchange Monte Carlo, every replica in parallel.

    Parameters
    ----------
    betas : the inverse temperatures, one replica each (:func:`temperature_ladder`).
    numsteps : steps including the start (step 0); ``numsteps - 1`` Monte Carlo steps are run.
    numsteps_exchange : steps between exchange attempts.
    numsteps_thermalization : steps left out of the statistics; default ``int(0.1 * numsteps)``.
    step_width : Gaussian step width of each coordinate (continuous space; needs a box on the problem).
    mesh : a :class:`~multiwalk.spaces.Mesh` for a discrete space (then ``step_width`` is not used).
    initial : start points ``(K, d)``; replica ``r`` starts at ``initial[r % nreplica_per_proc]``
        when that row exists (ODAT-SE gives every MPI process the same ``initial_list``), the
        others uniformly in the box.  Discrete: uniformly random nodes.
    nreplica_per_proc : replicas per emulated MPI process (default: all in one).
    record : keep the trials and results of the last ``record`` steps in the state for the
        step-file writer (:class:`ReplicaOrderWriter`; 0: none, the per-step files are then not written).
    max_chunk_steps : at most this many steps per driver chunk (checkpoints every that many).
    unroll : steps written out per trip of the loops over steps of :meth:`run_chunk`'s interval
        form (off CPUs; None: 8 on a GPU), and about that many per trip of the Pallas form;
        results do not depend on it.
    kernel : ``"auto"`` (default), ``"xla"`` or ``"pallas"``: how the Metropolis steps run (same
        rules).  ``"pallas"``: the steps between two exchanges (at most ``exchange_kernel.MAX_STEPS``)
        in ONE Pallas kernel, each replica in registers (:mod:`~multiwalk.solvers.exchange_kernel`;
        continuous space, no per-step records, ``f`` scalarisable; interpret mode off GPUs);
        ``"auto"``: that on a GPU where it applies, else XLA.  ``result.stats["kernel"]`` says
        which ran and why.
    constraint_a, constraint_b : linear inequality constraints ``constraint_a @ x + constraint_b > 0``
        (every row strictly; ODAT-SE's ``[runner.limitation]`` ``co_a`` ``(m, d)`` and ``co_b``
        ``(m,)``): a move to a point violating one is rejected like a move out of the box, and the
        random start points are redrawn (up to ``START_DRAWS`` times) until they satisfy them.
        Continuous space only; empty: no constraint.

    A periodic parameter of the problem (``Problem(periodic=...)``, ODAT-SE's ``pbc_list``) is
    wrapped into ``[lower, upper)`` after each Gaussian step instead of leaving the box.
    kernel_block, kernel_warps : Pallas launch tuning, replicas per program (a power of two) and
        warps per program.
    """

    betas: tuple[float, ...]
    numsteps: int
    numsteps_exchange: int = 1
    numsteps_thermalization: int | None = None
    step_width: tuple[float, ...] | None = None
    mesh: Mesh | None = None
    initial: tuple[tuple[float, ...], ...] = ()
    nreplica_per_proc: int | None = None
    record: int = 0
    max_chunk_steps: int | None = None
    unroll: int | None = None
    kernel: str = "auto"
    kernel_block: int | None = None
    kernel_warps: int | None = None
    constraint_a: tuple[tuple[float, ...], ...] = ()
    constraint_b: tuple[float, ...] = ()

    # how, not what: a resume may change them
    resumable_options = ("numsteps", "max_chunk_steps", "unroll", "kernel", "kernel_block", "kernel_warps")
    wraps_periodic = True  # ODAT-SE's pbc_list: a move across a periodic parameter wraps into [min, max)
    evaluates_once_per_step = True  # one batch of replicas (points) a step: a non-JAX objective runs as a host loop
    reports_value_at_point = True  # result.fun by value_at_point: its one-point program compiles beside the loop

    def __post_init__(self) -> None:
        b = check_vector_option("betas", self.betas, non_negative=True)
        object.__setattr__(self, "betas", hashable_vector(b))
        check_int_option("numsteps", self.numsteps, 1)
        check_int_option("numsteps_exchange", self.numsteps_exchange, 1)
        check_int_option("numsteps_thermalization", self.numsteps_thermalization, 0, none_ok=True)
        check_int_option("record", self.record, 0)
        check_int_option("max_chunk_steps", self.max_chunk_steps, 1, none_ok=True)
        check_int_option("unroll", self.unroll, 1, none_ok=True)
        check_int_option("nreplica_per_proc", self.nreplica_per_proc, 1, none_ok=True)
        check_kernel_option(self.kernel)
        check_launch_options(self)
        if self.record == 1:
            raise ValueError("record must be 0 (no per-step records) or at least 2")
        per = self.nreplica_per_proc or self.n_replicas
        if self.n_replicas % per:
            raise ValueError(f"nreplica_per_proc={per} does not divide the {self.n_replicas} replicas")
        check_space_options(self)
        check_initial_option(self, per)
        check_constraint_options(self)

    def feasible(self, x: Any) -> Any:
        """True where the points ``x`` ``(..., d)`` satisfy every constraint (numpy or jax in, same out)."""
        return satisfies_constraints(self, x)

    # ----------------------------------------------------------------- set-up
    @property
    def n_replicas(self) -> int:
        return len(self.betas)

    @property
    def thermalization(self) -> int:
        """Steps left out of the statistics (ODAT-SE's default: 10 % of numsteps)."""
        t = self.numsteps_thermalization
        return int(0.1 * self.numsteps) if t is None else t

    def temperatures(self) -> np.ndarray:
        """``1 / beta`` of each temperature index, as ODAT-SE computes it."""
        with np.errstate(divide="ignore"):
            return 1.0 / np.asarray(self.betas)

    def reweighting_dbeta(self) -> np.ndarray:
        """For each temperature, ``beta_lower - beta`` of its colder neighbour (0 for the coldest):
        ``fx.txt``'s log(Z_lower / Z) is estimated from the samples at T by reweighting."""
        b = np.asarray(self.betas)
        if b.size < 2:
            return np.zeros(b.size)
        temps = self.temperatures()
        lower = np.arange(b.size) + (-1 if temps[0] < temps[1] else 1)
        ok = (lower >= 0) & (lower < b.size)
        return np.where(ok, b[np.clip(lower, 0, b.size - 1)] - b, 0.0)

    def check(self, problem: Problem) -> None:
        if self.mesh is not None:
            if self.mesh.dimension != problem.n:
                raise ValueError(
                    f"the mesh has {self.mesh.dimension} coordinates per point but the problem has {problem.n} parameters"
                )
        else:
            if problem.lower is None:
                raise ValueError("Exchange in a continuous space needs a box: pass lower= and upper= (min_list, max_list)")
            check_finite_box(problem, "Exchange", "give finite lower= and upper= (min_list, max_list)")
            if len(self.step_width) != problem.n:
                raise ValueError(f"step_width has {len(self.step_width)} entries but the problem has {problem.n} parameters")
        if problem.fixed:
            raise ValueError("Exchange moves every coordinate: fixed parameters are not supported")
        check_starts(self, problem)  # initial and the constraints
        if self.mesh is not None and problem.periodic.any():
            raise ValueError("periodic parameters are for a continuous space; a mesh's neighbour list says what is near")

    def phases(self, problem: Problem) -> list[Phase]:
        return [Phase("exchange", self.numsteps - 1)]

    def longest_chunk(self, problem: Problem) -> int | None:
        """The most steps one driver chunk may run (the run plan's ``max_chunk``): ``record - 1``
        (the step-file writer reads the chunk's steps from the ring of the last ``record``) and
        ``max_chunk_steps``; None: no limit.  Results never depend on it."""
        limits = [n for n in (self.record - 1 if self.record else None, self.max_chunk_steps) if n]
        return min(limits) if limits else None

    def plan(self, problem: Problem, devices: int, time_limit: float | None) -> RunPlan:
        """The kernel form, the longest chunk (:meth:`longest_chunk`), and the data as constants
        for the Pallas form (its kernel is generated from the objective's jaxpr, whose constants
        must be concrete)."""
        kplan = self.kernel_plan(problem)
        return RunPlan(devices=devices, kernel=kplan, max_chunk=self.longest_chunk(problem),
                       arrays_as_arguments=not kplan.use_pallas)

    def batch_axes(self, problem: Problem, state: ExchangeState) -> ExchangeState | None:
        """Temperatures are split over devices, each with its replica (every (T, ...) array along
        its first axis, the records ``rec_*`` (B, T, ...) along the second): an exchange needs only
        the neighbouring row across each device boundary, and the statistics are updated where
        their samples are.  Only the key, the step and the exchange direction are on every device.
        The Pallas form stays on one device (its kernel is one custom call XLA cannot split);
        ``kernel="xla"`` runs split."""
        if self.kernel_plan(problem).use_pallas:
            return None
        whole = {"key", "step", "direction"}
        return ExchangeState(
            *[None if name in whole else 1 if name.startswith("rec_") else 0 for name in ExchangeState._fields]
        )

    def batch_option(self, problem: Problem) -> str:
        return "the number of replicas (len(betas))"

    def state_memory(self, problem: Problem) -> tuple[int, str]:
        """The state's bytes: per replica 3 points (x, best_x, the statistics' previous point), 6
        values and 9 int32 counters; per recorded step and replica the trial's f, point and 3 int32."""
        item, d, R, B = np.dtype(problem.dtype).itemsize, problem.n, self.n_replicas, self.record
        per_replica = (3 * d + 6) * item + 9 * 4
        per_record = (1 + (d if self.mesh is None else 0)) * item + 3 * 4
        need = R * per_replica + B * R * per_record + 13  # + the key, step and direction
        return need, (f"fewer replicas (len(betas)={R}; each keeps {per_replica} bytes), or a lower record={B} "
                      f"(each recorded step keeps {per_record} bytes per replica)")

    def options(self) -> dict[str, Any]:
        out = super().options()
        out["betas"] = list(self.betas)
        out["step_width"] = None if self.step_width is None else list(self.step_width)
        out["initial"] = [list(r) for r in self.initial]
        out["mesh"] = None if self.mesh is None else self.mesh.digest()
        out["constraint_a"] = [list(r) for r in self.constraint_a]
        out["constraint_b"] = list(self.constraint_b)
        return out

    def init(self, problem: Problem, key: jax.Array) -> ExchangeState:
        dt = problem.dtype
        R, d, B = self.n_replicas, problem.n, self.record
        k_init = jax.random.fold_in(key, INIT_STREAM)
        node = jnp.zeros(R, jnp.int32)
        if self.mesh is None:
            x = uniform_in_box(k_init, (R, d), problem.lower, problem.upper, dt, width_in_float64=False)
            if self.constraint_a:
                x = feasible_starts(self, problem, k_init, x)
            x = place_initial(self, x, self.nreplica_per_proc or R)
        else:
            node = jax.random.randint(k_init, (R,), 0, self.mesh.n_nodes, jnp.int32)
            x = jnp.asarray(self.mesh.coordinates, dt)[node]
        fun, bad = evaluate_walkers(problem.chi2_full, x)  # NaN or -inf: worse than anything
        if self.constraint_a:  # a start left outside the constraints (START_DRAWS) is not a sample
            fun = jnp.where(self.feasible(x), fun, jnp.inf)
        i32 = jnp.int32
        T = R
        first = jnp.asarray(self.thermalization == 0)
        arange = jnp.arange(R, dtype=i32)  # replica r starts at temperature r
        state = ExchangeState(
            key=key,
            step=jnp.asarray(1, i32),
            direction=jnp.asarray(True),
            x=x,
            node=node,
            fun=fun,
            replica=arange,
            n_accepted=jnp.zeros(R, i32),
            n_nonfinite=bad.astype(i32),
            n_exchange_tries=jnp.zeros(T, i32),
            n_exchanges=jnp.zeros(T, i32),
            best_fun=fun,
            best_step=jnp.zeros(R, i32),
            best_x=x,
            stat_n=jnp.where(first, 1, 0) * jnp.ones(T, i32),
            stat_sum=jnp.where(first, fun, 0.0).astype(dt),
            stat_sum2=jnp.where(first, fun * fun, 0.0).astype(dt),
            stat_changed=jnp.zeros(T, i32),
            stat_prev=x,
            stat_fbase=jnp.where(first, fun, 0.0).astype(dt),
            stat_lse=jnp.zeros(T, dt),
            rec_values=jnp.zeros((B, R, 1 + (d if self.mesh is None else 0)), dt),
            rec_ints=jnp.zeros((B, R, 3), i32),
        )
        if B:
            state = self._record(state, 0, x, node, fun, jnp.ones(R, bool))
        return state

    def _record(self, st: ExchangeState, s: Any, x, node, fun, accepted) -> ExchangeState:
        """Step ``s``'s trials into slot ``s % record``: two row updates (one per buffer), as
        each update is a separate operation with its own cost on a CPU."""
        slot = jnp.asarray(s) % self.record
        upd = jax.lax.dynamic_update_index_in_dim
        values = fun[:, None] if self.mesh is not None else jnp.concatenate([fun[:, None], x], axis=1)
        ints = jnp.stack([st.replica, accepted.astype(jnp.int32), node.astype(jnp.int32)], axis=1)
        return st._replace(rec_values=upd(st.rec_values, values, slot, 0), rec_ints=upd(st.rec_ints, ints, slot, 0))

    # ----------------------------------------------------------------- one step
    def _ladder(self, problem: Problem) -> Ladder:
        """The ladder's constants (each (T,)).  :meth:`run_chunk` makes them once, outside its
        loops, which then take them as operands: written into each copy of the step instead (the
        head, the intervals, the tail), they were R-sized literals several times over (134 MB
        each at 2^24 replicas in float64), which compilation copies and folds."""
        dt = problem.dtype
        b = np.asarray(self.betas)
        beta = jnp.asarray(b, dt)
        # beta_{t+1} - beta_t in the working precision, as ODAT-SE's test computes it (0 past the top)
        gap = jnp.asarray(np.append(b[1:], b[-1]), dt) - beta
        return Ladder(beta, gap, jnp.asarray(self.reweighting_dbeta(), dt))

    def _draws(
        self, problem: Problem, key: jax.Array, s: jax.Array, exchange: bool = True, moves: bool = True
    ) -> tuple[jax.Array | None, jax.Array | None, jax.Array | None]:
        """The random numbers of step ``s``, per temperature row: exchange uniforms (T,) (row t
        for the pair (t, t+1); the last is not used), move draws (Gaussian (T, d), or uniform (T,)
        to pick a mesh neighbour) and acceptance uniforms (T,).  ``exchange=False`` leaves out the
        first (None: a step that is no exchange step), ``moves=False`` the other two; what is
        drawn is the same numbers either way (each from its own key)."""
        dt = problem.dtype
        R = self.n_replicas
        k_exchange, k_move, k_accept = jax.random.split(jax.random.fold_in(key, s), 3)
        u_exchange = jax.random.uniform(k_exchange, (R,), dt) if exchange else None
        if not moves:
            return u_exchange, None, None
        if self.mesh is None:
            move = jax.random.normal(k_move, (R, problem.n), dt)
        else:
            move = jax.random.uniform(k_move, (R,), dt)
        return u_exchange, move, jax.random.uniform(k_accept, (R,), dt)

    def step(self, problem: Problem, state: ExchangeState, phase: int) -> ExchangeState:
        return self._advance(problem, state, self._draws(problem, state.key, state.step))

    def run_chunk(
        self, problem: Problem, state: ExchangeState, phase: int, n: jax.Array, plan: RunPlan | None = None
    ) -> tuple[ExchangeState, jax.Array]:
        """``n`` steps.  On a CPU (:meth:`interval_form` False): one step per trip of a loop
        (:meth:`_dynamic_steps`), the exchange under a cond on exchange steps only.  Elsewhere
        (GPUs, TPUs: a cond or a loop test is read back to the host there, and a masked exchange
        every step cost its work and, split over devices, its collectives every step) the
        interval form: the exchange (and on several devices its collective-permutes) runs only
        on exchange steps (``step % numsteps_exchange == 0``), every other step is a Metropolis
        move alone (an exchange step: its exchange, then its move like the others):

        1. groups of whole intervals, one loop trip each (:meth:`_intervals`): each interval's
           exchange, then its ``numsteps_exchange`` moves in loops of a STATIC trip count, whose
           test a GPU does not evaluate (XLA runs a loop of known trip count without reading its
           condition back to the host, ~5-10 us a trip): a GPU reads back once per group, not
           three times per step as before;
        2. the edges of the chunk, where no whole group fits (before the first exchange step:
           a chunk may start inside an interval; after the last group): the moves one per trip
           of a loop of dynamic count (:meth:`_dynamic_steps`), each exchange in a loop of 0 or 1
           trip.  Fewer than ``(interval_group + 1) * numsteps_exchange`` steps per chunk.

        One outer loop runs [moves to the next exchange step, groups, that step's exchange] per
        trip (two trips, plus one per interval of the tail), so each form of the step is
        compiled once.  Random numbers: those of :meth:`draw_steps` steps in one call (vmapped
        :meth:`_draws`: the numbers ``step`` draws).  Results equal ``n`` calls of ``step`` bit
        for bit, for any chunking and ``unroll`` (tests/test_odatse_run.py,
        tests/test_exchange_blocks.py)."""
        kplan = self.kernel_plan(problem)
        if kplan.use_pallas:
            return self._kernel_chunk(problem, kplan, state, n)
        nex = self.numsteps_exchange
        ladder = self._ladder(problem)  # once, outside the loops
        i0 = jnp.asarray(0, jnp.int32)
        if not self.interval_form(problem):
            return self._dynamic_steps(problem, i0, state, n, ladder)[::-1]
        L = self.interval_group(problem) * nex  # steps per trip of the groups' loop
        # no chunk of the driver's holds a whole group (longest_chunk, or the run, shorter): the edges'
        # loops run every step, and the groups' loop (its copies of the step) is not compiled
        groups = L <= min(self.longest_chunk(problem) or self.numsteps, self.numsteps - 1)

        def group(carry: tuple) -> tuple:
            i, st = carry
            return i + L, self._intervals(problem, st, ladder)

        def exchange(carry: tuple) -> tuple:
            i, st, _ = carry
            u_exchange = self._draws(problem, st.key, st.step, moves=False)[0]
            return i, self._exchange_step(problem, st, u_exchange, ladder), jnp.asarray(False)

        def trip(carry: tuple) -> tuple:
            # pending: the current step is an exchange step whose exchange has not run yet
            i, st, pending = carry
            # the moves up to the next exchange step (or n); none while an exchange is pending
            m = jnp.where(pending, 0, jnp.minimum(nex - st.step % nex, n - i))
            i, st = self._dynamic_steps(problem, i, st, i + m, ladder, exchange=False)
            if groups:
                i, st = jax.lax.while_loop(lambda c: n - c[0] >= L, group, (i, st))
            # now at an exchange step (or at n): its exchange; its moves are the next trip's
            return jax.lax.while_loop(lambda c: c[2], exchange, (i, st, i < n))

        first_pending = (state.step % nex) == 0
        i, state, _ = jax.lax.while_loop(lambda c: c[0] < n, trip, (i0, state, first_pending))
        return state, i

    def interval_form(self, problem: Problem) -> bool:
        """Whether :meth:`run_chunk` runs the interval form: off CPUs.  On a CPU the plain loop
        is as fast (its cond costs no read-back there; 256-1M replicas, 2-core machine) and
        compiles in half the time (3.1-3.5 against 6.7-7.5 s at 64 replicas: one form of the
        step against the edges' and the intervals' two, each with its draws)."""
        return jax.default_backend() != "cpu"

    def draw_steps(self, problem: Problem) -> int:
        """Steps whose random numbers are drawn in one call: up to 32, fewer so that they take at
        most ~8 MB (a float64 draw per coordinate and two uniforms per replica; 1 from 262144
        replicas in 2 dimensions)."""
        per_step = self.n_replicas * ((problem.n if self.mesh is None else 1) + 2) * 8
        return int(max(1, min(32, (8 << 20) // per_step)))

    def interval_group(self, problem: Problem) -> int:
        """Intervals (exchange step to exchange step) per trip of :meth:`run_chunk`'s main loop:
        as many whole intervals as :meth:`draw_steps` holds (their numbers drawn in one call), at
        least one; fewer where the driver's chunks are shorter (:meth:`longest_chunk`: ``record - 1``,
        ``max_chunk_steps``): a group must fit in a chunk after the up to ``numsteps_exchange - 1``
        steps before its first exchange step, else no chunk runs one (``record=16``,
        ``numsteps_exchange=5``, small R: 6 intervals, 30 steps, against chunks of 15)."""
        nex = self.numsteps_exchange
        g = max(1, self.draw_steps(problem) // nex)
        cap = self.longest_chunk(problem)
        return g if cap is None else max(1, min(g, (cap - nex + 1) // nex))

    def _intervals(self, problem: Problem, st: ExchangeState, ladder: Ladder) -> ExchangeState:
        """:meth:`interval_group` intervals of ``numsteps_exchange`` steps from an exchange step
        (``st.step``), in loops of static trip counts: each interval's exchange
        (:meth:`_exchange_step`), then its steps' Metropolis moves without any exchange.  The
        moves' numbers are drawn in blocks of ``D = draw_steps`` steps (the group's at once when
        ``G * numsteps_exchange <= D``), the exchange uniforms of the group's exchange steps in
        one more call; ``unroll`` steps are written out per trip of the loop over steps."""
        nex = self.numsteps_exchange
        D = self.draw_steps(problem)
        G = self.interval_group(problem)
        u = self.block_steps(problem)
        u_ex = self._draw_block(problem, st.key, st.step, nex, G, exchange=True, moves=False)[0]  # (G, T)

        def moves(st: ExchangeState, draws: tuple, first: Any, count: int) -> ExchangeState:
            # steps first .. first + count - 1 of the drawn block, no exchange; a static trip count
            def one(j: Any, st: ExchangeState) -> ExchangeState:
                return self._advance(problem, st, _pick(draws, first + j), exchange=False, ladder=ladder)

            return one(0, st) if count == 1 else jax.lax.fori_loop(0, count, one, st, unroll=min(u, count))

        if D >= nex:  # the group's numbers in one call
            draws = self._draw_block(problem, st.key, st.step, 1, G * nex, exchange=False)

            def interval(g: Any, st: ExchangeState) -> ExchangeState:
                st = self._exchange_step(problem, st, u_ex[g], ladder)
                return moves(st, draws, g * nex, nex)

            return interval(0, st) if G == 1 else jax.lax.fori_loop(0, G, interval, st)

        # one interval (G = 1) in blocks of D < numsteps_exchange steps
        st = self._exchange_step(problem, st, u_ex[0], ladder)

        def block(st: ExchangeState, size: int) -> ExchangeState:
            return moves(st, self._draw_block(problem, st.key, st.step, 1, size, exchange=False), 0, size)

        q, r = divmod(nex, D)
        if q == 1:
            st = block(st, D)
        else:  # with D == 1 this is the loop over steps: unrolled there
            st = jax.lax.fori_loop(0, q, lambda _, st: block(st, D), st, unroll=min(u, q) if D == 1 else 1)
        if r:
            st = block(st, r)
        return st

    def _exchange_step(self, problem: Problem, state: ExchangeState, u_exchange: jax.Array, ladder: Ladder) -> ExchangeState:
        """The exchange of an exchange step (``state.step``), before its Metropolis move
        (``_advance(exchange=False)``), behind a barrier of its own as each step's start is (the
        record buffers stay out of it)."""
        state, u_exchange = _behind_barrier(state, u_exchange)
        return self._exchange(problem, state, u_exchange, ladder=ladder)

    def _draw_block(
        self, problem: Problem, key: jax.Array, first: jax.Array, stride: int, size: int, **which: bool
    ) -> tuple:
        """The random numbers of steps ``first + stride * k``, k = 0 .. size - 1, in one vmapped
        call of :meth:`_draws` (``which``: its ``exchange``/``moves``; the same numbers, bit for
        bit), each with a leading axis of ``size``."""
        steps = first + stride * jnp.arange(size, dtype=jnp.int32)
        return jax.vmap(lambda s: self._draws(problem, key, s, **which))(steps)

    def _dynamic_steps(
        self, problem: Problem, i: jax.Array, st: ExchangeState, limit: jax.Array, ladder: Ladder,
        exchange: bool = True,
    ) -> tuple[jax.Array, ExchangeState]:
        """Steps until the count ``i`` reaches ``limit`` (traced), one per trip of a loop;
        ``exchange`` as in :meth:`_advance` (True: the exchange where due; False: none of the
        steps is an exchange step, or its exchange has run).  The numbers of :meth:`draw_steps`
        steps are drawn in one call per outer trip: on a CPU draws made inside each step cost
        several times as much (jax's threefry there is a rolled loop of small kernels, paid per
        step).  With one step per draw and no exchange: a single loop, one step per trip
        drawing its own numbers (a GPU reads one loop test back per step, not three)."""
        D = self.draw_steps(problem)
        if D == 1 and not exchange:
            def single(carry: tuple) -> tuple:
                i, st = carry
                draws = self._draws(problem, st.key, st.step, exchange=False)
                return i + 1, self._advance(problem, st, draws, exchange=False, ladder=ladder)

            return jax.lax.while_loop(lambda c: c[0] < limit, single, (i, st))

        def drawn(carry: tuple) -> tuple:
            i, st = carry
            draws = self._draw_block(problem, st.key, st.step, 1, D, exchange=exchange)
            m = jnp.minimum(D, limit - i)  # the steps past limit drawn in the last block are not used
            return i + m, jax.lax.fori_loop(
                0, m, lambda j, st: self._advance(problem, st, _pick(draws, j), exchange=exchange, ladder=ladder), st
            )

        return jax.lax.while_loop(lambda c: c[0] < limit, drawn, (i, st))

    def kernel_plan(self, problem: Problem) -> exchange_kernel.ExchangePlan:
        """Which form (Pallas kernel or XLA) runs the Metropolis steps on ``problem`` here, and why."""
        return exchange_kernel.plan(problem, self.kernel, discrete=self.mesh is not None, record=self.record,
                                    constrained=bool(self.constraint_a))

    def _kernel_chunk(
        self, problem: Problem, kplan: exchange_kernel.ExchangePlan, state: ExchangeState, n: jax.Array
    ) -> tuple[ExchangeState, jax.Array]:
        """``n`` steps in blocks that end before the next exchange step: per block, the random
        numbers of up to ``K`` steps (vmapped :meth:`_draws`, the numbers ``step`` draws), the
        exchange of its first step (XLA, when due), then ONE kernel for its Metropolis moves and
        statistics (:func:`exchange_kernel.metropolis_steps`).  The same rules as ``step``; only
        the rounding of f may differ where Triton's math differs from XLA's."""
        i32 = jnp.int32
        nex = self.numsteps_exchange
        K = min(nex, exchange_kernel.MAX_STEPS)
        dt = problem.dtype
        betas = jnp.asarray(self.betas, dt)
        dbeta = jnp.asarray(self.reweighting_dbeta(), dt)
        per_trip = self.kernel_blocks_per_trip(problem)

        def block(i: jax.Array, st: ExchangeState) -> tuple:
            s = st.step
            m = jnp.maximum(jnp.minimum(jnp.minimum(K, nex - s % nex), n - i), 0)  # no exchange inside the block
            u_exchange, move, u_accept = jax.vmap(lambda t: self._draws(problem, st.key, t))(s + jnp.arange(K, dtype=i32))
            st = self._exchange(problem, st, u_exchange[0], m > 0)
            # temperature order: row t's replica, its temperature's statistics and beta side by side
            moves = exchange_kernel.Moves(
                x=st.x, fun=st.fun, n_accepted=st.n_accepted, n_nonfinite=st.n_nonfinite, best_fun=st.best_fun,
                best_step=st.best_step, best_x=st.best_x, stat_n=st.stat_n, stat_sum=st.stat_sum,
                stat_sum2=st.stat_sum2, stat_changed=st.stat_changed, stat_fbase=st.stat_fbase,
                stat_lse=st.stat_lse,
            )
            out = exchange_kernel.metropolis_steps(
                kplan.graph, moves, st.stat_prev, betas, dbeta, move, u_accept, s, m,
                step_width=np.asarray(self.step_width), lower=np.asarray(problem.lower), upper=np.asarray(problem.upper),
                thermalization=self.thermalization, atol=_ATOL, rtol=_RTOL,
                block=self.kernel_block or exchange_kernel.DEFAULT_BLOCK,
                num_warps=self.kernel_warps or exchange_kernel.DEFAULT_WARPS, interpret=kplan.interpret,
            )
            st = st._replace(
                x=out.x, fun=out.fun, n_accepted=out.n_accepted, n_nonfinite=out.n_nonfinite, best_fun=out.best_fun,
                best_step=out.best_step, best_x=out.best_x, stat_n=out.stat_n, stat_sum=out.stat_sum,
                stat_sum2=out.stat_sum2, stat_changed=out.stat_changed, stat_fbase=out.stat_fbase,
                stat_lse=out.stat_lse, stat_prev=out.x, step=s + m,
            )
            return i + m, st

        def trip(carry: tuple) -> tuple:
            # several blocks per loop trip: a GPU pays the trip's latency (the loop test read back
            # by the host) once per trip; blocks past ``n`` run no step (m = 0) and change nothing
            i, st = carry
            for _ in range(per_trip):
                i, st = block(i, st)
            return i, st

        i, state = jax.lax.while_loop(lambda c: c[0] < n, trip, (jnp.asarray(0, i32), state))
        return state, i

    def kernel_blocks_per_trip(self, problem: Problem) -> int:
        """Kernel blocks (each up to min(numsteps_exchange, 16) steps) per loop trip of the Pallas
        form: about ``unroll`` steps' worth, or when None about 32 steps (1 to 8)."""
        k = min(self.numsteps_exchange, exchange_kernel.MAX_STEPS)
        return max(1, min(8, round((self.unroll or 32) / k)))

    def block_steps(self, problem: Problem) -> int:
        """Steps written out per trip of :meth:`_intervals`' loops over steps (of static trip
        count): ``unroll``, or when None 8 on a GPU/TPU (fewer loop trips to launch) and 1 on a
        CPU (no gain there, and compilation k times longer)."""
        if self.unroll is not None:
            return self.unroll
        return 1 if jax.default_backend() == "cpu" else 8

    def _advance(
        self, problem: Problem, state: ExchangeState, draws: tuple[jax.Array, jax.Array, jax.Array],
        exchange: bool = True, ladder: Ladder | None = None,
    ) -> ExchangeState:
        """One step with the given random numbers (:meth:`_draws` of ``state.step``).

        ``exchange``: True, any step (the exchange when ``step % numsteps_exchange == 0``: on a
        CPU under a cond, elsewhere computed and masked); False, a step known not to be one, or
        whose exchange has run (:meth:`_exchange_step`): no exchange at all.
        ``ladder``: :meth:`_ladder` (made here when None)."""
        # a barrier at each step's start (_behind_barrier says why): any ``unroll`` gives the same bits
        st, (u_exchange, move, u_accept) = _behind_barrier(state, draws)
        dt = problem.dtype
        R = self.n_replicas
        s = st.step
        ladder = self._ladder(problem) if ladder is None else ladder

        # 1. temperature exchange, alternating even-odd and odd-even pairs (ODAT-SE's order).
        # The interval form runs each exchange by itself (:meth:`_exchange_step`) and calls this
        # with exchange=False.  For a step of unknown kind (``step``, the CPU form): on a CPU under a
        # cond (computed every step and masked, it cost ~25 % of a step there; a GPU would read the
        # cond's predicate back to the host each step)
        if not exchange:
            pass
        elif jax.default_backend() == "cpu" and self.numsteps_exchange > 1:
            light = st._replace(rec_values=None, rec_ints=None)  # the record buffers stay out of the cond
            light = jax.lax.cond(
                (s % self.numsteps_exchange) == 0, lambda t: self._exchange(problem, t, u_exchange, ladder=ladder), lambda t: t,
                light,
            )
            st = light._replace(rec_values=st.rec_values, rec_ints=st.rec_ints)
        else:
            st = self._exchange(problem, st, u_exchange, ladder=ladder)

        # 2. Metropolis move of every replica at its temperature (row t: beta_t)
        beta_r = ladder.beta
        if self.mesh is None:
            lo, hi = jnp.asarray(problem.lower, dt), jnp.asarray(problem.upper, dt)
            proposal = st.x + move * jnp.asarray(self.step_width, dt)
            proposal = wrap_periodic(problem, proposal, lo, hi)  # ODAT-SE's pbc_list
            inside = jnp.all((proposal >= lo) & (proposal < hi), axis=1) & self.feasible(proposal)
            node_new = st.node
            log_weight = jnp.zeros(R, dt)
        else:
            counts = jnp.asarray(self.mesh.counts)
            n_old = counts[st.node]
            pick = jnp.floor(move * n_old).astype(jnp.int32)
            node_new = jnp.asarray(self.mesh.neighbors)[st.node, jnp.minimum(pick, n_old - 1)]
            proposal = jnp.asarray(self.mesh.coordinates, dt)[node_new]
            inside = jnp.ones(R, bool)
            log_weight = (jnp.log(n_old.astype(dt)) - jnp.log(counts[node_new].astype(dt)))
        f_new, bad = evaluate_walkers(problem.chi2_full, proposal)
        f_new = jnp.where(inside, f_new, jnp.inf)
        log_u = jnp.log(u_accept)
        accepted = inside & ~bad & (log_u < -beta_r * (f_new - st.fun) + log_weight)
        x = jnp.where(accepted[:, None], proposal, st.x)
        fun = jnp.where(accepted, f_new, st.fun)
        node = jnp.where(accepted, node_new, st.node)
        best_fun, best_x, better = keep_better(st.best_fun, st.best_x, fun, x)
        st = st._replace(
            x=x, fun=fun, node=node,
            n_accepted=st.n_accepted + accepted,
            n_nonfinite=st.n_nonfinite + (inside & bad),
            best_fun=best_fun,
            best_step=jnp.where(better, s, st.best_step),
            best_x=best_x,
        )
        if self.record:
            st = self._record(st, s, proposal, node_new, f_new, accepted)

        # 3. statistics of the result at each temperature (ODAT-SE's fx.txt)
        st = self._accumulate(st, s, dt, ladder.dbeta)
        return st._replace(step=s + 1)

    def _exchange(
        self, problem: Problem, st: ExchangeState, u_exchange: jax.Array, active: Any = True,
        ladder: Ladder | None = None,
    ) -> ExchangeState:
        """Step ``st.step``'s temperature exchange (when ``step % numsteps_exchange == 0`` and
        ``active``), the pairs ``(t, t+1)`` from even and odd ``t`` in turn, with the uniforms
        ``u_exchange`` (T,) (row t: pair (t, t+1)).  A swap exchanges the two rows of every
        travelling array (:data:`_TRAVELLING`); the rows' neighbours are reached by ``jnp.roll``
        along the temperature axis, which a split axis turns into a collective-permute of one
        row per device boundary (tests/test_collectives.py)."""
        T = self.n_replicas
        if T == 1:
            return st
        s = st.step
        gap = (self._ladder(problem) if ladder is None else ladder).gap
        do = ((s % self.numsteps_exchange) == 0) & active
        t = jnp.arange(T)
        valid = do & (t < T - 1) & ((t % 2) == jnp.where(st.direction, 0, 1))
        # the travelling rows packed into one float and one int array, so that a split run moves
        # them across a device boundary in 4 collective-permutes per step (2 up, 2 down), not 2 per array
        d = st.x.shape[1]
        floats = jnp.concatenate([st.fun[:, None], st.best_fun[:, None], st.x, st.best_x], axis=1)
        ints = jnp.stack([st.node, st.replica, st.n_accepted, st.n_nonfinite, st.best_step], axis=1)
        floats_above, ints_above = jnp.roll(floats, -1, axis=0), jnp.roll(ints, -1, axis=0)  # row t: row t+1's
        logp = gap * (floats_above[:, 0] - st.fun)
        swap = valid & ((logp >= 0) | (u_exchange < jnp.exp(jnp.minimum(logp, 0))))  # NaN logp never swaps
        # row t+1 takes row t's replica where pair (t, t+1) swaps; swap[T-1] is False, so nothing wraps
        ints_below = jnp.roll(jnp.concatenate([ints, swap[:, None].astype(ints.dtype)], axis=1), 1, axis=0)
        floats_below = jnp.roll(floats, 1, axis=0)
        from_below = ints_below[:, -1] == 1
        floats = jnp.where(swap[:, None], floats_above, jnp.where(from_below[:, None], floats_below, floats))
        ints = jnp.where(swap[:, None], ints_above, jnp.where(from_below[:, None], ints_below[:, :-1], ints))
        return st._replace(
            fun=floats[:, 0], best_fun=floats[:, 1], x=floats[:, 2:2 + d], best_x=floats[:, 2 + d:],
            node=ints[:, 0], replica=ints[:, 1], n_accepted=ints[:, 2], n_nonfinite=ints[:, 3], best_step=ints[:, 4],
            direction=jnp.where(do & (T > 2), ~st.direction, st.direction),
            n_exchange_tries=st.n_exchange_tries + valid,
            n_exchanges=st.n_exchanges + swap,
        )

    def _accumulate(self, st: ExchangeState, s: jax.Array, dt: Any, dbeta: jax.Array) -> ExchangeState:
        f_t, x_t = st.fun, st.x  # temperature order: row t is the sample at temperature t
        counted = s >= self.thermalization
        changed = ~jnp.all(jnp.abs(x_t - st.stat_prev) <= _ATOL + _RTOL * jnp.abs(st.stat_prev), axis=1)
        first = counted & (st.stat_n == 0)
        fbase = jnp.where(first, f_t, st.stat_fbase)
        term = -dbeta * (f_t - fbase)
        lse = jnp.where(first, 0.0, jnp.logaddexp(st.stat_lse, term))
        # sum2 + g * g, not sum2 + where(counted, f * f, 0): LLVM contracts the former into an
        # FMA wherever it is compiled, the latter only in some loop forms (sums then depended on
        # ``unroll``)
        g = jnp.where(counted, f_t, 0.0)
        return st._replace(
            stat_n=st.stat_n + counted,
            stat_sum=st.stat_sum + g,
            stat_sum2=st.stat_sum2 + g * g,
            stat_changed=st.stat_changed + (counted & changed),
            stat_prev=x_t,
            stat_fbase=fbase,
            stat_lse=jnp.where(counted, lse, st.stat_lse),
        )

    # ----------------------------------------------------------------- reporting
    def summary(self, problem: Problem, state: ExchangeState) -> dict[str, jax.Array]:
        moves = jnp.maximum(state.step - 1, 1) * self.n_replicas
        return {"best": jnp.min(state.best_fun), "accept": jnp.sum(state.n_accepted) / moves}

    def statistics(self, state: Any) -> dict[str, np.ndarray]:
        """Per temperature index: ``beta``, ``mean``, ``error``, ``count``, ``dlogz`` (log(Z_lower/Z)
        from the samples at T, 0 for the coldest) and ``acceptance``, as ODAT-SE computes them."""
        n = np.asarray(state.stat_n).astype(np.float64)
        total = np.asarray(state.stat_sum, np.float64)
        total2 = np.asarray(state.stat_sum2, np.float64)
        dbeta = self.reweighting_dbeta()
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, total / n, np.nan)
            var = np.maximum(total2 / n - mean**2, 0.0)
            err = np.where(n > 1, np.sqrt(var / (n - 1)), np.nan)
            acc = np.where(n > 0, np.asarray(state.stat_changed) / n, np.nan)
            dlogz = np.where(
                (dbeta != 0) & (n > 0),
                np.asarray(state.stat_lse, np.float64) - np.log(n) - dbeta * np.asarray(state.stat_fbase, np.float64),
                0.0,
            )
        return {"beta": np.asarray(self.betas), "mean": mean, "error": err, "count": n.astype(np.int64),
                "dlogz": dlogz, "acceptance": acc}

    def result(
        self, problem: Problem, state: ExchangeState, done: list[int], status: Status, stats: dict[str, Any]
    ) -> ExchangeResult:
        st = replica_order(state)
        R = self.n_replicas
        per = self.nreplica_per_proc or R
        r = np.arange(R)
        # ODAT-SE's choice among equal values: the lowest process, then the earliest step, then the walker
        order = np.lexsort((r % per, st.best_step, r // per, st.best_fun))
        i_best = int(order[0])
        steps = int(st.step)
        stats = dict(stats)
        stats["nonfinite"] = int(st.n_nonfinite.sum())
        stats["replicas"] = R
        stats["steps"] = steps
        stats["replica_steps"] = int(sum(done)) * R
        kplan = self.kernel_plan(problem)
        stats["kernel"], stats["kernel_reason"] = kplan.name, kplan.reason
        status, message = end_status(
            status,
            f"ran {steps - 1} Monte Carlo steps of {R} replicas after the start (step 0)",
            bool(np.isfinite(st.best_fun[i_best])),
            "no replica ever had a finite f: check the function inside the box or the mesh",
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            exch = np.where(st.n_exchange_tries > 0, st.n_exchanges / np.maximum(st.n_exchange_tries, 1), np.nan)
        return ExchangeResult(
            x=st.best_x[i_best].copy(),
            fun=value_at_point(problem, st.best_x[i_best], float(st.best_fun[i_best])),
            status=status,
            message=message,
            stats=stats,
            best_replica=i_best,
            best_step=int(st.best_step[i_best]),
            replica_x=st.x,
            funs=st.fun,
            replica_node=st.node if self.mesh is not None else None,
            temperature_index=np.argsort(st.replica, kind="stable").astype(np.int32),
            betas=np.asarray(self.betas),
            steps=steps,
            acceptance=st.n_accepted / max(steps - 1, 1),
            exchange_rate=exch[: max(R - 1, 0)],
            statistics=self.statistics(st),
            state=st,
        )


@dataclass(repr=False, kw_only=True)
class ExchangeResult(Result):
    """Result of :class:`Exchange`.

    ``x``, ``fun``: the best result of any replica at any step (``best_replica``, ``best_step``).
    ``replica_x`` (R, d), ``funs`` (R,) (``replica_fx`` is the same array), ``replica_node`` (R,) or
    None: the last state, in replica order;
    ``temperature_index`` (R,): where each replica is on the ladder ``betas`` (T,).
    ``steps``: the next step number (steps 0 .. steps-1 are done).  ``acceptance`` (R,): accepted
    moves per step of each replica; ``exchange_rate`` (T-1,): accepted / attempted swaps of
    pair (t, t+1).  ``statistics``: per temperature, :meth:`Exchange.statistics`.
    ``state``: the final solver state in replica order (:func:`replica_order`; numpy, for writers;
    not written by :meth:`save`).
    """

    best_replica: int
    best_step: int
    replica_x: np.ndarray
    funs: np.ndarray
    replica_node: np.ndarray | None  # None in a continuous space (no mesh, no nodes)
    temperature_index: np.ndarray
    betas: np.ndarray
    steps: int
    acceptance: np.ndarray
    exchange_rate: np.ndarray
    statistics: dict[str, np.ndarray]
    state: ExchangeState = field(repr=False, metadata=NOT_SAVED)

    @property
    def replica_fx(self) -> np.ndarray:
        """The same as ``funs`` (R,): each replica's objective value at its last point (ODAT-SE's ``fx``)."""
        return self.funs
