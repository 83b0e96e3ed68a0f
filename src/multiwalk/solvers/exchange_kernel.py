"""Up to ``K`` Metropolis steps of every replica of :class:`~multiwalk.Exchange` in ONE Pallas kernel.

The XLA form of a step is about ten dependent XLA kernels over all replicas (random numbers,
proposal and objective, accept, best point, per-temperature statistics), and on a GPU each costs
microseconds of launch latency whatever the replica count, so at moderate replica counts a step
is bound by latency, not by work.  Between two temperature exchanges every replica stays at its
temperature, so the steps of one replica depend only on that replica: here each Pallas program
owns ``block`` replicas, keeps them in registers as ``[block]`` vectors (one per coordinate), and runs the steps
up to the next exchange without leaving the kernel.  The random numbers are drawn beforehand by
``jax.random`` exactly as the XLA form draws them (the kernel only reads them), and the exchange
itself stays in XLA.

Per step and replica, in the XLA form's order and precision: propose ``x + step_width * normal``,
``f = inf`` outside ``lower <= x < upper``, accept when ``log(u) < -beta (f_new - f)`` (NaN and +-inf never),
count accepted / non-finite moves, keep the replica's best point, and add the result to the
statistics of its temperature (``fx.txt``: count, sum of f and f^2, points that changed,
log-sum-exp of the reweighting terms).  The caller keeps its state in temperature order (row t:
the replica at temperature t and that temperature's statistics), so no row is gathered.

The objective is the user's ``jax.numpy`` function of ONE point, evaluated through its
:class:`~multiwalk.scalarise.ScalarGraph` on ``[block]`` vectors (Triton takes power-of-two
shapes only), as in :mod:`~multiwalk.solvers.pattern_search_kernel`; only the rounding of ``f``
itself may differ from the XLA form (sums folded pairwise here; Triton's ``exp``/``log`` are
libdevice's).  On a CPU the kernel runs in Pallas' interpret mode (tests: correct, not fast).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import kernels
from ..kernels import KERNELS, KernelPlan
from ..problem import Problem
from ._common import worst_if_nonfinite

if TYPE_CHECKING:  # a scalarised objective's type; scalarise itself loads where an objective is scalarised
    from ..scalarise import ScalarGraph

__all__ = ["KERNELS", "ExchangePlan", "Moves", "plan", "metropolis_steps", "DEFAULT_BLOCK", "DEFAULT_WARPS",
           "MAX_STEPS"]

DEFAULT_BLOCK = 128  # replicas per Pallas program (a power of two); 128 x 4 warps measured fastest
DEFAULT_WARPS = 4  # warps per program: one replica per thread
MAX_STEPS = 16  # steps one launch may run: their random numbers (K x R x (d + 1)) are drawn at once
MAX_FREE = 64  # more coordinates than this: too many registers per replica
MAX_OPS = 20_000  # graph operations per step (the step loop's body is one evaluation of f)

ExchangePlan = KernelPlan  # which form runs the Metropolis steps, and why (the plan every kernel module makes)


def plan(problem: Problem, kernel: str, *, discrete: bool, record: int, constrained: bool = False) -> KernelPlan:
    """Decide how ``Exchange(kernel=kernel)`` runs ``problem`` (traces ``f``, compiles nothing).

    ``"xla"``: the XLA form.  ``"auto"``: the kernel on a GPU for a continuous space without
    per-step records when ``f`` can be scalarised, in one process (the kernel runs on one device;
    under ``jax.distributed`` the XLA form splits the replicas).  ``"pallas"``: the kernel (in
    interpret mode off GPUs) wherever it applies, else the XLA form with a warning.  Never raises.
    """

    def refusal() -> str | None:
        if jax.process_count() > 1:  # the kernel is one custom call on one device: no replicas over processes
            return "several processes (jax.distributed) split the replicas in the XLA form"
        if discrete:
            return "a discrete (mesh) space runs in the XLA form"
        if record:
            return "the per-step records of the step files (record > 0) are written by the XLA form"
        if constrained or problem.periodic.any():
            return "linear constraints and periodic parameters (limitation, pbc_list) run in the XLA form"
        if problem.n > MAX_FREE:
            return f"{problem.n} coordinates, more than the kernel's {MAX_FREE}"
        return None

    return kernels.objective_plan(kernel, "Exchange", problem.chi2_full, problem.n, problem.dtype, refusal, _too_large)


def _too_large(graph: ScalarGraph) -> str | None:
    """Why the step loop would not take ``graph`` (its body is one evaluation of f), or None."""
    if len(graph.ops) > MAX_OPS:
        return f"the objective has {len(graph.ops)} scalar operations, more than {MAX_OPS}"
    return None


class Moves(NamedTuple):
    """Per replica (R rows, in the caller's temperature order): the state the kernel reads and
    writes.  Statistics are those of each row's temperature; ``prev`` is the point at that
    temperature one step before the first step (``stat_prev``)."""

    x: jax.Array  # (R, d)
    fun: jax.Array  # (R,) objective at x
    n_accepted: jax.Array  # (R,) int32
    n_nonfinite: jax.Array  # (R,) int32
    best_fun: jax.Array  # (R,) objective at best_x
    best_step: jax.Array  # (R,) int32
    best_x: jax.Array  # (R, d)
    stat_n: jax.Array  # (R,) int32
    stat_sum: jax.Array  # (R,)
    stat_sum2: jax.Array  # (R,)
    stat_changed: jax.Array  # (R,) int32
    stat_fbase: jax.Array  # (R,)
    stat_lse: jax.Array  # (R,)


def metropolis_steps(
    graph: ScalarGraph,
    state: Moves,
    prev: jax.Array,
    beta: jax.Array,
    dbeta: jax.Array,
    move: jax.Array,
    u_accept: jax.Array,
    first_step: jax.Array,
    n_steps: jax.Array,
    *,
    step_width: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    thermalization: int,
    atol: float,
    rtol: float,
    block: int = DEFAULT_BLOCK,
    num_warps: int = DEFAULT_WARPS,
    interpret: bool = False,
) -> Moves:
    """Steps ``first_step .. first_step + n_steps - 1`` (``n_steps`` <= K, may be traced) of every
    replica in ONE kernel launch.

    ``beta`` (R,) each replica's inverse temperature, ``dbeta`` (R,) its temperature's
    reweighting difference (``Exchange.reweighting_dbeta``), ``prev`` (R, d); ``move`` (K, R, d)
    standard normal draws and ``u_accept`` (K, R) uniforms of those steps (row k: step
    ``first_step + k``); ``step_width``, ``lower``, ``upper`` (d,).  Returns the new :class:`Moves`.
    """
    from jax.experimental import pallas as pl

    r, d = state.x.shape
    K = move.shape[0]
    dt = state.x.dtype
    b, rp, programs = kernels.row_blocks(r, block)
    ins = kernels.pad_rows(list(state) + [prev, beta, dbeta], rp)  # copies of the last replica: computed, then dropped
    if rp != r:
        move = jnp.pad(move, ((0, 0), (0, rp - r), (0, 0)))
        u_accept = jnp.pad(u_accept, ((0, 0), (0, rp - r)), constant_values=0.5)
    width_c, lo_c, hi_c = (np.asarray(v, dtype=dt) for v in (step_width, lower, upper))
    constants = _StepConstants(width_c, lo_c, hi_c, thermalization, atol, rtol)
    i32 = jnp.int32
    kernel = _steps_kernel(graph, d, K, b, dt, constants)

    out_shape = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in ins[: len(Moves._fields)])
    scalars = jnp.stack([jnp.asarray(first_step, i32), jnp.minimum(jnp.asarray(n_steps, i32), K)])
    out = pl.pallas_call(
        kernel, out_shape=out_shape, grid=(programs,), interpret=interpret, name="exchange_metropolis_steps",
        **kernels.compiler_params(num_warps, interpret),
    )(scalars, *ins, move, u_accept)
    if rp != r:
        out = [a[:r] for a in out]
    return Moves(*out)


class _StepConstants(NamedTuple):
    """What every step of :func:`metropolis_steps` reads besides the replicas: kernel constants."""

    width: np.ndarray  # (d,) step_width, in the replicas' dtype
    lower: np.ndarray  # (d,)
    upper: np.ndarray  # (d,)
    thermalization: int  # steps before this one are not counted in the statistics
    atol: float  # a point "changed" unless every |x - prev| <= atol + rtol |prev|
    rtol: float


class _Replicas(NamedTuple):
    """One program's replicas inside the kernel: [block] vectors, coordinates as tuples of d of them."""

    x: tuple
    fun: jax.Array
    n_accepted: jax.Array  # int32
    n_nonfinite: jax.Array  # int32
    best_fun: jax.Array
    best_step: jax.Array  # int32
    best_x: tuple
    prev: tuple  # the point one step before, for stat_changed
    stat_n: jax.Array  # int32
    stat_sum: jax.Array
    stat_sum2: jax.Array
    stat_changed: jax.Array  # int32
    stat_fbase: jax.Array
    stat_lse: jax.Array


def _steps_kernel(graph: ScalarGraph, d: int, K: int, b: int, dt: Any,
                  c: _StepConstants) -> Callable[..., None]:
    """The kernel body of :func:`metropolis_steps`: ``K`` steps of ``b`` replicas per program."""
    from jax.experimental import pallas as pl

    def kernel(scalars_ref, x_ref, fun_ref, acc_ref, nonfin_ref, bfun_ref, bstep_ref, bx_ref, n_ref, sum_ref,  # noqa: ANN001
               sum2_ref, chg_ref, fbase_ref, lse_ref, prev_ref, beta_ref, dbeta_ref, move_ref, u_ref,
               x_out, fun_out, acc_out, nonfin_out, bfun_out, bstep_out, bx_out, n_out, sum_out, sum2_out, chg_out,
               fbase_out, lse_out):
        pid = pl.program_id(0)
        rows = pl.ds(pid * b, b)
        lanes = kernels.LaneValues(b, dt)

        s0 = scalars_ref[0]
        beta_r = beta_ref[rows]
        dbeta_r = dbeta_ref[rows]

        carry = _Replicas(
            tuple(x_ref[rows, j] for j in range(d)), fun_ref[rows], acc_ref[rows], nonfin_ref[rows], bfun_ref[rows],
            bstep_ref[rows], tuple(bx_ref[rows, j] for j in range(d)), tuple(prev_ref[rows, j] for j in range(d)),
            n_ref[rows], sum_ref[rows], sum2_ref[rows], chg_ref[rows], fbase_ref[rows], lse_ref[rows],
        )
        # the K steps written out one after another (not a loop: every step's random numbers can
        # be loaded ahead of the arithmetic that waits for the step before); steps k >= n_steps
        # keep the values they are given
        n_run = scalars_ref[1]
        for k in range(K):
            s = s0 + k
            moved = _metropolis_move(graph, lanes, c, carry, k, s, beta_r, move_ref, u_ref, rows)
            new = _accumulate(lanes, c, moved, s, dbeta_r)
            active = jnp.full((b,), k < n_run, jnp.bool_)
            carry = jax.tree_util.tree_map(lambda v, old, active=active: jnp.where(active, v, old), new, carry)
        for j in range(d):
            x_out[rows, j] = carry.x[j]
            bx_out[rows, j] = carry.best_x[j]
        fun_out[rows] = carry.fun
        acc_out[rows] = carry.n_accepted
        nonfin_out[rows] = carry.n_nonfinite
        bfun_out[rows] = carry.best_fun
        bstep_out[rows] = carry.best_step
        n_out[rows] = carry.stat_n
        sum_out[rows] = carry.stat_sum
        sum2_out[rows] = carry.stat_sum2
        chg_out[rows] = carry.stat_changed
        fbase_out[rows] = carry.stat_fbase
        lse_out[rows] = carry.stat_lse

    return kernel


def _metropolis_move(graph: ScalarGraph, lanes: kernels.LaneValues, c: _StepConstants, rep: _Replicas, k: int,
                     s: jax.Array, beta_r: jax.Array, move_ref: Any, u_ref: Any, rows: Any) -> _Replicas:
    """Step ``s`` (row ``k`` of the draws) of ``Exchange._advance`` (continuous space): propose, accept or
    reject, count, keep each replica's best point.  The statistics are left to :func:`_accumulate`."""
    const, full = lanes.const, lanes.full
    d = len(rep.x)
    i32 = jnp.int32
    xs = rep.x
    proposal = [xs[j] + move_ref[k, rows, j] * full(c.width[j]) for j in range(d)]
    inside = full(True, jnp.bool_)
    for j in range(d):
        inside = inside & (proposal[j] >= full(c.lower[j])) & (proposal[j] < full(c.upper[j]))
    f_new, bad = worst_if_nonfinite(graph.value(graph.evaluate(proposal, const), const).astype(lanes.dtype))
    f_new = jnp.where(inside, f_new, full(np.inf))
    log_u = jnp.log(u_ref[k, rows])
    accepted = inside & ~bad & (log_u < -beta_r * (f_new - rep.fun) + full(0.0))
    xs = tuple(jnp.where(accepted, proposal[j], xs[j]) for j in range(d))
    f_x = jnp.where(accepted, f_new, rep.fun)
    n_acc = rep.n_accepted + accepted.astype(i32)
    n_nonfin = rep.n_nonfinite + (inside & bad).astype(i32)
    better = f_x < rep.best_fun
    b_f = jnp.where(better, f_x, rep.best_fun)
    b_step = jnp.where(better, jnp.full((lanes.block,), s, i32), rep.best_step)
    b_x = tuple(jnp.where(better, xs[j], rep.best_x[j]) for j in range(d))
    return rep._replace(x=xs, fun=f_x, n_accepted=n_acc, n_nonfinite=n_nonfin, best_fun=b_f, best_step=b_step,
                        best_x=b_x)


def _accumulate(lanes: kernels.LaneValues, c: _StepConstants, rep: _Replicas, s: jax.Array,
                dbeta_r: jax.Array) -> _Replicas:
    """``Exchange._accumulate``: step ``s``'s point into the statistics of each replica's temperature
    (count, sum of f and f^2, points that changed since ``rep.prev``, log-sum-exp of the reweighting
    terms); the new point becomes ``prev``."""
    full = lanes.full
    i32 = jnp.int32
    xs, f_x, prevs = rep.x, rep.fun, rep.prev
    counted = jnp.full((lanes.block,), s >= c.thermalization, jnp.bool_)
    same = full(True, jnp.bool_)
    for j in range(len(xs)):
        same = same & (jnp.abs(xs[j] - prevs[j]) <= full(c.atol) + full(c.rtol) * jnp.abs(prevs[j]))
    first = counted & (rep.stat_n == 0)
    st_fbase = jnp.where(first, f_x, rep.stat_fbase)
    term = -dbeta_r * (f_x - st_fbase)
    # jnp.logaddexp's formula (its primitives, so Triton lowers it)
    st_lse = rep.stat_lse
    amax = jnp.maximum(st_lse, term)
    delta = st_lse - term
    lae = jnp.where(delta != delta, st_lse + term, amax + jnp.log1p(jnp.exp(-jnp.abs(delta))))
    lse = jnp.where(first, full(0.0), lae)
    g = jnp.where(counted, f_x, full(0.0))
    return rep._replace(
        prev=xs, stat_n=rep.stat_n + counted.astype(i32), stat_sum=rep.stat_sum + g, stat_sum2=rep.stat_sum2 + g * g,
        stat_changed=rep.stat_changed + (counted & ~same).astype(i32), stat_fbase=st_fbase,
        stat_lse=jnp.where(counted, lse, st_lse),
    )
