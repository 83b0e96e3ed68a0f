"""SIMT-PS iterations (sweeps over every coordinate, with rule d)) as ONE Pallas kernel, one walker per lane.

The XLA form of :class:`~multiwalk.solvers.pattern_search.PatternSearch` runs the ``d``
coordinate sub-steps of an iteration as dependent XLA kernels over all walkers, and on a GPU
each costs ~10 us of launches and loop round-trips whatever the walker count.  Here each Pallas
program owns ``block`` walkers, keeps them in registers as ``[block]`` vectors (one per
coordinate), and runs up to ``max_iter`` whole iterations without leaving the kernel - the
paper's thread-per-walker design.  After each iteration every program writes its best walker,
so the caller keeps the best point exactly as iteration-by-iteration code would.

The objective is the user's ``jax.numpy`` function of ONE point, so the kernel evaluates it
through its :class:`~multiwalk.scalarise.ScalarGraph`: every value inside ``f`` is one
``[block]`` vector (Triton accepts only power-of-two shapes), and a trial point
``x +- delta e_j`` recomputes only the graph nodes that depend on ``x[j]``, reusing the others'
values at ``x`` (the same floating-point values, so the same result as a full evaluation);
those values are carried from one iteration to the next, following each move.

The rules are those of the XLA form, in the same order and precision (rule b) before c),
moves out of the box never taken, NaN/inf values count as +inf and are counted); only the
rounding of ``f`` itself may differ (sums folded pairwise here, in XLA's order there; Triton's
``sin``/``exp`` are libdevice's).  On a CPU the kernel runs in Pallas' interpret mode (for
tests: correct, not fast).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import kernels
from ..kernels import KERNELS, KernelPlan
from ..problem import Problem
from ..scalarise import ScalarGraph
from ._common import worst_if_nonfinite

__all__ = ["KERNELS", "KernelPlan", "Sweeps", "plan", "sweeps", "DEFAULT_BLOCK", "DEFAULT_WARPS", "MAX_ITERATIONS"]

DEFAULT_BLOCK = 32  # walkers per Pallas program (a power of two); 32 x 1 warp measured fastest
DEFAULT_WARPS = 1  # warps per program: block / (32 * warps) walkers per thread
MAX_ITERATIONS = 64  # iterations one launch may run (its per-iteration best rows: max_iter x programs x d)
MAX_FREE = 256  # more free parameters than this: the unrolled sweep would be too long to compile
MAX_EMITTED = 60_000  # graph operations emitted per iteration (full evaluation + 2 partial per coordinate)


def plan(problem: Problem, kernel: str) -> KernelPlan:
    """Decide how ``PatternSearch(kernel=kernel)`` runs ``problem`` (traces ``f``, compiles nothing).

    ``"xla"``: the XLA form.  ``"auto"``: the Pallas kernel on a GPU when ``f`` can be
    scalarised, else the XLA form.  ``"pallas"``: the kernel (in interpret mode off GPUs), or
    the XLA form with a warning when ``f`` cannot be scalarised.  Never raises.
    """

    def refusal() -> str | None:
        if problem.n_free > MAX_FREE:
            return f"{problem.n_free} free parameters, more than the kernel's {MAX_FREE}"
        return None

    return kernels.objective_plan(
        kernel, "PatternSearch", problem.chi2_free, problem.n_free, problem.dtype, refusal, _too_large
    )


def _too_large(graph: ScalarGraph) -> str | None:
    """Why the unrolled sweep would not take ``graph`` (full evaluation + 2 partial per coordinate), or None."""
    emitted = len(graph.ops) + 2 * sum(len(dep) for dep in graph.dependents)
    if emitted > MAX_EMITTED:
        return f"the sweep would emit {emitted} scalar operations, more than {MAX_EMITTED}"
    return None


class Sweeps(NamedTuple):
    """What :func:`sweeps` returns: the walkers after the iterations, and each iteration's best walker."""

    x: jax.Array  # (W, d)
    fun: jax.Array  # (W,) objective at x (+inf where NaN/inf)
    scale: jax.Array  # (W,)
    n_bad: jax.Array  # (W,) int32
    n_halvings: jax.Array  # (W,) int32
    n_resets: jax.Array  # (W,) int32
    best_fun: jax.Array  # (max_iter,) min over walkers after iteration t (unused rows: +inf)
    best_x: jax.Array  # (max_iter, d) the point of the first walker with that value


def sweeps(
    graph: ScalarGraph,
    x: jax.Array,
    fun: jax.Array,
    scale: jax.Array,
    n_bad: jax.Array,
    n_halvings: jax.Array,
    n_resets: jax.Array,
    n_iter: jax.Array | int,
    *,
    max_iter: int,
    d0: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    tol_scale: float,
    reset: bool,
    block: int = DEFAULT_BLOCK,
    num_warps: int = DEFAULT_WARPS,
    interpret: bool = False,
) -> Sweeps:
    """``n_iter`` (<= ``max_iter``, may be traced) iterations of every walker in ONE kernel launch.

    Per iteration: rules b) and c) for each coordinate in turn, then rule d) (halve the step
    scale of walkers that did not improve; with ``reset``, back to 1 at ``tol_scale``).
    ``x`` (W, d) points, ``fun`` (W,) their values (+inf where NaN/inf), ``scale`` (W,) step
    scales (step = scale * d0), ``n_bad``, ``n_halvings``, ``n_resets`` (W,) int32 counters;
    ``d0``, ``lower``, ``upper`` (d,) per coordinate.  Each program also writes, after each
    iteration, its best walker (first of the lowest value); the first best program of each
    iteration is picked here, so ``best_fun[t]``/``best_x[t]`` are ``argmin`` over all walkers.
    """
    from jax.experimental import pallas as pl

    w, d = x.shape
    dt = x.dtype
    b, wp, programs = kernels.row_blocks(w, block)
    # pad with copies of the last walker: computed, then dropped (never the first best)
    x, fun, scale, n_bad, n_halvings, n_resets = kernels.pad_rows((x, fun, scale, n_bad, n_halvings, n_resets), wp)
    box = _Box(*(np.asarray(v, dtype=dt) for v in (d0, lower, upper)))
    tol_c = np.asarray(tol_scale * (1 + 1e-6), dtype=dt)  # as the XLA form rounds it
    kernel = _sweeps_kernel(graph, d, b, dt, box, tol_c, reset)

    i32 = jnp.int32
    out_shape = (
        jax.ShapeDtypeStruct((wp, d), dt),
        jax.ShapeDtypeStruct((wp,), dt),
        jax.ShapeDtypeStruct((wp,), dt),
        jax.ShapeDtypeStruct((wp,), i32),
        jax.ShapeDtypeStruct((wp,), i32),
        jax.ShapeDtypeStruct((wp,), i32),
        jax.ShapeDtypeStruct((max_iter, programs), dt),
        jax.ShapeDtypeStruct((max_iter, programs, d), dt),
    )
    n_arr = jnp.reshape(jnp.asarray(n_iter, i32), (1,))
    out = pl.pallas_call(
        kernel, out_shape=out_shape, grid=(programs,), interpret=interpret, name="pattern_search_sweeps",
        **kernels.compiler_params(num_warps, interpret),
    )(n_arr, x, fun, scale, n_bad.astype(i32), n_halvings.astype(i32), n_resets.astype(i32))
    x, fun, scale, n_bad, n_halvings, n_resets, block_fun, block_x = out
    if wp != w:
        x, fun, scale, n_bad, n_halvings, n_resets = (a[:w] for a in (x, fun, scale, n_bad, n_halvings, n_resets))
    best_fun, best_x = _best_of_programs(block_fun, block_x, n_iter, max_iter)
    return Sweeps(x, fun, scale, n_bad, n_halvings, n_resets, best_fun, best_x)


class _Box(NamedTuple):
    """Per coordinate, (d,) NumPy arrays of the walkers' dtype: constants of the kernel."""

    d0: np.ndarray  # the initial step (step = scale * d0)
    lower: np.ndarray
    upper: np.ndarray


def _sweeps_kernel(graph: ScalarGraph, d: int, b: int, dt: Any, box: _Box, tol_c: np.ndarray,
                   reset: bool) -> Callable[..., None]:
    """The kernel body of :func:`sweeps`: ``b`` walkers of ``d`` coordinates per program."""
    from jax.experimental import pallas as pl

    def kernel(n_ref, x_ref, fun_ref, scale_ref, bad_ref, halv_ref, reset_ref,  # noqa: ANN001
               x_out, fun_out, scale_out, bad_out, halv_out, reset_out, best_fun_out, best_x_out):
        pid = pl.program_id(0)
        rows = pl.ds(pid * b, b)
        lanes = kernels.LaneValues(b, dt)
        const, full = lanes.const, lanes.full

        lane = jax.lax.iota(jnp.int32, b)

        def iteration(t: jax.Array, carry: tuple) -> tuple:
            xs, kept, f_x, s, bad, halv, resets = carry
            xs = list(xs)
            lanes.clear()  # values made in this loop body stay in it
            # The graph's values at x that trial points reuse, carried from the last iteration
            # (kept up to date as the walker moves, so equal to a fresh evaluation at x).
            vals: list[Any] = [None] * (d + len(graph.ops))
            vals[:d] = xs
            for node_id, v in zip(graph.cached, kept):
                vals[node_id] = v
            inf = full(np.inf)
            improved = full(False, jnp.bool_)
            for j in range(d):
                f_x, bad, improved = _coordinate_move(graph, lanes, box, j, xs, vals, f_x, s, bad, improved, inf)
            s, halv, resets = _halve_or_reset(s, improved, halv, resets, reset, tol_c, full)
            # This program's best walker after iteration t: the first of the lowest value.
            low = jnp.min(f_x)
            first = jnp.min(jnp.where(f_x == low, lane, b))
            best_fun_out[t, pid] = low
            for j in range(d):
                best_x_out[t, pid, j] = jnp.max(jnp.where(lane == first, xs[j], full(-np.inf)))
            return tuple(xs), tuple(vals[i] for i in graph.cached), f_x, s, bad, halv, resets

        xs0 = [x_ref[rows, j] for j in range(d)]
        vals0 = graph.evaluate(xs0, const)  # once per launch: every node at the starting points
        lanes.clear()
        carry = (tuple(xs0), tuple(vals0[i] for i in graph.cached), fun_ref[rows], scale_ref[rows], bad_ref[rows],
                 halv_ref[rows], reset_ref[rows])
        xs, _, f_x, s, bad, halv, resets = jax.lax.fori_loop(0, n_ref[0], iteration, carry)
        for j in range(d):
            x_out[rows, j] = xs[j]
        fun_out[rows] = f_x
        scale_out[rows] = s
        bad_out[rows] = bad
        halv_out[rows] = halv
        reset_out[rows] = resets

    return kernel


def _coordinate_move(graph: ScalarGraph, lanes: kernels.LaneValues, box: _Box, j: int, xs: list, vals: list,
                     f_x: jax.Array, s: jax.Array, bad: jax.Array, improved: jax.Array,
                     inf: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Rules b) and c) for coordinate ``j`` of every lane's walker: try ``x +- s d0[j]``, move to the
    better in-box trial that is no worse than ``f_x``.  Updates ``xs[j]`` and the cached graph
    values ``vals`` in place; returns ``(f_x, bad, improved)`` after the move ([block] each)."""
    const, full = lanes.const, lanes.full
    delta = s * full(box.d0[j])
    plus, minus = xs[j] + delta, xs[j] - delta
    at_plus = graph.reevaluate(vals, j, plus, const)
    at_minus = graph.reevaluate(vals, j, minus, const)
    f_plus = graph.value(at_plus, const, vals)
    f_minus = graph.value(at_minus, const, vals)
    (f_plus, bad_plus), (f_minus, bad_minus) = worst_if_nonfinite(f_plus), worst_if_nonfinite(f_minus)
    in_plus, in_minus = plus <= full(box.upper[j]), minus >= full(box.lower[j])
    # Out-of-box values are not used, so not counted (as in the XLA form).
    bad = bad + (in_plus & bad_plus).astype(jnp.int32) + (in_minus & bad_minus).astype(jnp.int32)
    go_plus = in_plus & (f_plus <= f_x) & (f_plus <= jnp.where(in_minus, f_minus, inf))
    go_minus = ~go_plus & in_minus & (f_minus <= f_x) & (f_minus <= jnp.where(in_plus, f_plus, inf))
    f_new = jnp.where(go_plus, f_plus, jnp.where(go_minus, f_minus, f_x))
    improved = improved | (f_new < f_x)
    xs[j] = xs[j] + jnp.where(go_plus, delta, jnp.where(go_minus, -delta, full(0.0)))
    # The cached values follow the walker: x[j]'s dependents take the values at the new point.
    for node_id, v_plus in at_plus.items():
        if node_id == j:
            vals[j] = xs[j]
        elif vals[node_id] is not None:  # a value some trial reuses (graph.cached)
            vals[node_id] = jnp.where(go_plus, v_plus, jnp.where(go_minus, at_minus[node_id], vals[node_id]))
    return f_new, bad, improved


def _halve_or_reset(s: jax.Array, improved: jax.Array, halv: jax.Array, resets: jax.Array, reset: bool,
                    tol_c: np.ndarray, full: Callable[..., jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Rule d), as ``PatternSearch._end_iteration`` does it: ``(scale, n_halvings, n_resets)``."""
    s = jnp.where(improved, s, s / full(2.0))
    halv = halv + (~improved).astype(jnp.int32)
    if reset:
        was_reset = s <= full(tol_c)
        s = jnp.where(was_reset, full(1.0), s)
        resets = resets + was_reset.astype(jnp.int32)
    return s, halv, resets


def _best_of_programs(block_fun: jax.Array, block_x: jax.Array, n_iter: jax.Array | int,
                      max_iter: int) -> tuple[jax.Array, jax.Array]:
    """Each iteration's best walker over all programs: ``block_fun`` (max_iter, programs) and
    ``block_x`` (max_iter, programs, d) -> ``(best_fun (max_iter,), best_x (max_iter, d))``."""
    # Iterations not run leave their rows unwritten: mask them.
    ran = jnp.arange(max_iter) < n_iter
    block_fun = jnp.where(ran[:, None], block_fun, jnp.inf)
    first = jnp.argmin(block_fun, axis=1)  # the first program holding the lowest value: argmin over all walkers
    best_fun = jnp.take_along_axis(block_fun, first[:, None], axis=1)[:, 0]
    best_x = jnp.take_along_axis(block_x, first[:, None, None], axis=1)[:, 0, :]
    return best_fun, best_x
