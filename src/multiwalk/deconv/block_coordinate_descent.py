"""`BlockCoordinateDescent`: the elastic-net deconvolution of `CoordinateDescent`, many pixels per iteration.

Solves the same problem as :class:`~multiwalk.deconv.CoordinateDescent` (seed 004, P9),

    min_x  F(x) = 0.5 ||I_dirty - (x - start) * PSF||^2 + lam (alpha ||x||_1 + (1 - alpha)/2 ||x||_2^2),  x >= 0,

with the zero-padded convolution ``A``, and stops by the same rule: SUCCESS only when, on the
exact gradient map ``g = A^T (I_dirty - A (x - start))``, no pixel's proximal step
``max(g + x L - lam alpha, 0) / (L + (1 - alpha) lam) - x`` (``L = sum PSF^2``) exceeds
``epsilon`` times the image's scale.

Why not one pixel at a time: under a beam tens of pixels wide, neighbouring pixels' PSFs are
nearly the same (0.9997 correlated for the MeerKAT beam), so one-pixel steps trade flux back
and forth between neighbours and converge very slowly.  Why not a gradient method on all
pixels (FISTA): its step is ``1 / ||A||^2``, and the PSF's broad low-level plateau makes
``||A||^2`` tens of thousands of times ``L`` (1.3e8 against 3.5e3 there).

Each iteration here is a parallel coordinate descent step over a block of pixels, solved
exactly (block coordinate descent with a greedy choice of the block, P9's "block coordinate
descent" methods):

1. The block: the pixels the model uses (``x > 0``) and the pixels with the largest proximal
   steps, ``block`` in all; a quarter of the block always goes to the largest steps, so a
   pixel that violates optimality the most is always in it.
2. On the block, the objective is majorised by the quadratic of the exact gradient map and the
   matrix ``K = B^T B``, ``B`` the full (uncropped) convolution: ``K[k, l]`` is the PSF
   autocorrelation at the lag ``k - l`` (computed once), and ``K - A^T A`` (the energy that
   falls outside the image) is positive semi-definite, so the quadratic lies above ``F``
   and touches it at ``x``.  A small ridge ``ridge * L`` is added to keep the block's matrix
   well conditioned in float32 (it is still a majorant).
3. The majorant is minimised over the block, with ``x >= 0``, exactly: an active-set
   (Lawson-Hanson) solve of the block's non-negative quadratic programme, warm started from
   the current model.  Every accepted point lowers the majorant, hence ``F`` (majorise-minimise).
4. The new model's exact gradient map and objective by FFT (two transforms each way).

Every iteration ends on an exact gradient map, so the stopping rule is checked on the exact
map every time; ``result.stats["max_step"]`` is that check at the end.  One device only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.fft

from ..compile_cache import cached_jit, start_with  # kept across solve() calls of the same problem
from ..result import Status
from ..solvers.base import Phase, Solver, check_int_option, check_number_option
from . import greedy
from .coordinate_descent import check_elastic_net_options, proximal_step
from .problem import Deconvolution
from .result import DeconvolutionResult, final_model

__all__ = ["BlockCoordinateDescent", "nonnegative_qp"]


class BCDState(NamedTuple):
    x: jax.Array  # (N, M) the model, Jy/pixel
    gradient: jax.Array  # (N, M) the exact gradient map A^T (dirty - A (x - start))
    fun: jax.Array  # scalar, F(x) (exact)
    max_step: jax.Array  # scalar, the largest |proximal step| on the exact map (the stopping rule's measure)
    fun_trace: jax.Array  # (max_iterations,) F after each iteration
    steps: jax.Array  # (max_iterations,) the largest pixel change of each iteration
    iteration: jax.Array  # int32
    solves: jax.Array  # int32: linear solves of the blocks' programmes so far
    increases: jax.Array  # int32: iterations whose exact objective rose (none in exact arithmetic: rounding)
    tolerance: jax.Array  # scalar: epsilon times the image's scale (Jy/pixel)
    lipschitz: jax.Array  # scalar: sum PSF^2, the stopping rule's step (as CoordinateDescent)
    dirty: jax.Array  # (N, M)
    start: jax.Array  # (N, M) the starting model
    psf_fft: jax.Array  # rfft2 of the PSF laid out circularly on the compact FFT grid (greedy.compact_psf_fft)
    autocorrelation: jax.Array  # (2N - 1, 2M - 1): K's entries, the PSF autocorrelation at lags -(N-1)..N-1


def autocorrelation(problem: Deconvolution) -> np.ndarray:
    """(2N - 1, 2M - 1) float64: ``K[k, l] = sum_t P[t] P[t + k - l]`` at lags ``k - l`` from
    -(N-1) to N-1 (index ``lag + N - 1``), P the PSF cut to the lags that reach the image.

    K = B^T B with B that PSF's full convolution; A (its crop to the image) has A^T A <= K.
    Computed on the host in float64 (once per solve): K's small differences between
    neighbouring lags are what the block programme resolves."""
    crop = greedy.crop_psf(np.asarray(problem.psf, np.float64), problem.shape)
    n, m = problem.shape
    size = tuple(scipy.fft.next_fast_len(k + s - 1, real=True) for k, s in zip((n, m), crop.shape))
    spectrum = scipy.fft.rfft2(crop, s=size)
    ac = scipy.fft.irfft2(np.abs(spectrum) ** 2, s=size)
    return np.roll(ac, (n - 1, m - 1), axis=(0, 1))[: 2 * n - 1, : 2 * m - 1]


# ---------------------------------------------------------------------------- the block programme
def nonnegative_qp(
    q: jax.Array, d: jax.Array, z0: jax.Array, live: jax.Array, tol: jax.Array, max_solves: int
) -> tuple[jax.Array, jax.Array]:
    """``argmin 0.5 z^T q z - d^T z`` over ``z >= 0`` on the ``live`` slots (others stay 0), from
    the feasible ``z0``: Lawson and Hanson's active set in the normal-equations form of Bro and
    de Jong (1997).  Returns ``(z, linear solves used)``.

    The free set starts as ``z0``'s positive slots; each trip solves the free slots' equations
    (LU: ``q`` may be ill conditioned), steps back to the feasible region if a free slot went
    non-positive (dropping it), or else frees the slot whose gradient ``d - q z`` is largest if
    that exceeds ``tol``.  Every accepted point lowers the objective, so stopping after
    ``max_solves`` still returns an improvement on ``z0``."""
    b = d.shape[0]
    diagonal = jnp.max(jnp.diag(q))

    def solve(free: jax.Array) -> jax.Array:
        both = free[:, None] & free[None, :]
        matrix = jnp.where(both, q, 0.0) + jnp.diag(jnp.where(free, 0.0, diagonal))
        return jnp.where(free, jnp.linalg.solve(matrix, jnp.where(free, d, 0.0)), 0.0)

    def body(carry):
        z, free, banned, added, solves, _ = carry
        s = solve(free)
        finite = jnp.all(jnp.isfinite(s))
        bad = free & (s <= 0)
        # Step back: the furthest point towards s that stays >= 0; the slot that reaches 0 leaves.
        ratio = jnp.where(bad, z / jnp.maximum(z - s, jnp.finfo(z.dtype).tiny), jnp.inf)
        k = jnp.argmin(ratio)
        t = ratio[k]
        back = jnp.where(free, jnp.maximum(z + t * (s - z), 0.0), 0.0).at[k].set(0.0)
        # A slot dropped with no step right after it was freed would be freed again: bar it.
        barred = banned | ((t == 0) & (jnp.arange(b) == added))
        # Accept s: free the slot that most wants to grow.
        w = d - q @ s
        candidate = live & ~free & ~banned & (w > tol)
        j = jnp.argmax(jnp.where(candidate, w, -jnp.inf))
        grow = jnp.any(candidate)
        infeasible = jnp.any(bad)
        z_next = jnp.where(infeasible, back, s)
        free_next = jnp.where(infeasible, free & (back > 0), free.at[j].set(free[j] | grow))
        stop = ~finite | (~infeasible & ~grow)
        return (
            jnp.where(finite, z_next, z), jnp.where(finite, free_next, free), jnp.where(infeasible, barred, banned),
            jnp.where(infeasible | ~grow, -1, j), solves + 1, stop,
        )

    def cond(carry):
        return ~carry[5] & (carry[4] < max_solves)

    start = (z0, live & (z0 > 0), jnp.zeros(b, bool), jnp.asarray(-1), jnp.asarray(0, jnp.int32), jnp.asarray(False))
    z, _, _, _, solves, _ = jax.lax.while_loop(cond, body, start)
    return z, solves


# ---------------------------------------------------------------------------- the solver
@dataclasses.dataclass(frozen=True)
class BlockCoordinateDescent(Solver):
    """Greedy block coordinate descent for ``Deconvolution`` problems (elastic net, x >= 0).

    The objective and the stopping rule are ``CoordinateDescent``'s (module doc).

    Parameters
    ----------
    lam : regularisation weight lambda >= 0 (units of the dirty image squared per Jy).
    alpha : elastic-net mix in [0, 1]: 1 is pure L1 (point sources), 0 pure L2.
    epsilon : relative stopping tolerance: SUCCESS when, on the exact gradient map, no pixel can
        change by more than ``epsilon * scale``, the scale being the brightest pixel of the starting
        model or of the first proximal step (Jy/pixel).
    max_iterations : the iteration budget, each iteration one block and one exact gradient map
        (status ``MAX_STEPS`` when used up).
    block : pixels per block (the model's pixels first, at least a quarter the largest steps);
        each block's programme costs ~block^3 per linear solve.
    ridge : the ridge added to the block's matrix, relative to sum PSF^2 (conditioning in
        float32; larger is safer and slower, the optimum is the same).
    max_solves : linear solves per block programme (its active-set trips).
    """

    lam: float
    alpha: float = 1.0
    epsilon: float = 1e-6
    max_iterations: int = 1000
    block: int = 256
    ridge: float = 1e-4
    max_solves: int = 200

    problem_type = Deconvolution

    def __post_init__(self) -> None:
        check_elastic_net_options(self.lam, self.alpha, self.epsilon, self.max_iterations)
        check_number_option("ridge", self.ridge)
        if self.ridge <= 0:
            raise ValueError(f"ridge must be > 0 (relative to sum PSF^2, e.g. 1e-3), got {self.ridge!r}")
        check_int_option("block", self.block, 4)
        check_int_option("max_solves", self.max_solves, 1)

    def _block(self, problem: Deconvolution) -> tuple[int, int]:
        """(pixels per block, of which reserved for the largest steps)."""
        size = min(self.block, problem.shape[0] * problem.shape[1])
        return size, max(1, size // 4)

    def _penalty(self, x: jax.Array) -> jax.Array:
        return self.lam * (self.alpha * jnp.sum(jnp.abs(x)) + 0.5 * (1.0 - self.alpha) * jnp.sum(x * x))

    def _exact(self, problem: Deconvolution, x: jax.Array, s: BCDState) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The exact gradient map, objective and largest |proximal step| of the model ``x`` (FFT)."""
        size = greedy.compact_fft_shape(problem.shape, problem.psf.shape[0])
        residual = s.dirty - greedy.convolve_compact(x - s.start, s.psf_fft, size)
        gradient = greedy.correlate_compact(residual, s.psf_fft, size)
        step = proximal_step(gradient, x, s.lipschitz, self.lam, self.alpha) - x
        return gradient, 0.5 * jnp.sum(residual * residual) + self._penalty(x), jnp.max(jnp.abs(step))

    # ---------------------------------------------------------------- Solver contract
    def phases(self, problem: Deconvolution) -> list[Phase]:
        return [Phase("block coordinate descent", int(self.max_iterations))]

    def init(self, problem: Deconvolution, key: jax.Array) -> BCDState:
        return self.initial_state_fn(problem)(key)

    def initial_state_fn(
        self, problem: Deconvolution, shardings: Any = None, plan: Any = None
    ) -> Callable[[jax.Array], BCDState]:
        """The images and the PSF's autocorrelation (host, float64) travel as arguments, never
        as compiled-in constants: one compiled loop serves every problem of the same shapes."""
        dtype = problem.dtype
        lipschitz = np.asarray(problem.psf_power(), dtype)  # as CoordinateDescent
        ac = autocorrelation(problem).astype(dtype)
        make = cached_jit(problem, self, "init", lambda *a: self._initial_state(problem, *a))
        return start_with(make, *problem.device_images(), lipschitz, ac)

    def _initial_state(
        self, problem: Deconvolution, dirty: jax.Array, psf: jax.Array, start: jax.Array, lipschitz: jax.Array,
        ac: jax.Array,
    ) -> BCDState:
        zero = jnp.zeros((), dirty.dtype)
        s = BCDState(
            x=start, gradient=dirty, fun=zero, max_step=zero, fun_trace=jnp.zeros(self.max_iterations, dirty.dtype),
            steps=jnp.zeros(self.max_iterations, dirty.dtype), iteration=jnp.asarray(0, jnp.int32),
            solves=jnp.asarray(0, jnp.int32), increases=jnp.asarray(0, jnp.int32), tolerance=zero, lipschitz=lipschitz,
            dirty=dirty, start=start, psf_fft=greedy.compact_psf_fft(psf, problem.shape), autocorrelation=ac,
        )
        gradient, objective, max_step = self._exact(problem, start, s)
        # The image's scale: the brightest pixel of the start or of the first proximal step.
        scale = jnp.maximum(max_step, jnp.max(jnp.abs(start)))
        return s._replace(
            gradient=gradient, fun=objective, max_step=max_step, tolerance=(self.epsilon * scale).astype(dirty.dtype)
        )

    def _choose_block(self, problem: Deconvolution, s: BCDState) -> tuple[jax.Array, jax.Array]:
        """(flat pixel indices (block,), live slots (block,)): the model's pixels and the largest
        steps, the top quarter of the steps always in; a slot is live where its pixel is in the
        model or would move."""
        size, reserved = self._block(problem)
        step = jnp.abs(proximal_step(s.gradient, s.x, s.lipschitz, self.lam, self.alpha) - s.x).reshape(-1)
        threshold = jax.lax.top_k(step, reserved)[0][-1]
        in_model = s.x.reshape(-1) > 0
        # groups 3 (largest steps), 2 (in the model), 1 (would move), 0; within a group, by step
        group = jnp.where((step >= threshold) & (step > 0), 3, jnp.where(in_model, 2, jnp.where(step > 0, 1, 0)))
        priority = group + 0.5 * step / jnp.maximum(jnp.max(step), jnp.finfo(step.dtype).tiny)
        key, index = jax.lax.top_k(priority, size)
        return index, key >= 1

    def step(self, problem: Deconvolution, state: BCDState, phase: int) -> BCDState:
        s = state
        n, m = problem.shape
        index, live = self._choose_block(problem, s)
        rows, cols = index // m, index % m
        k = s.autocorrelation[rows[None, :] - rows[:, None] + n - 1, cols[None, :] - cols[:, None] + m - 1]
        x_block = jnp.where(live, s.x.reshape(-1)[index], 0.0)
        g_block = s.gradient.reshape(-1)[index]
        ridge = self.ridge * s.lipschitz
        # The majorant on the block (module doc): 0.5 z^T q z - d^T z + const over z >= 0.
        q = k + (ridge + self.lam * (1.0 - self.alpha)) * jnp.eye(index.shape[0], dtype=k.dtype)
        d = jnp.where(live, g_block + k @ x_block + ridge * x_block - self.lam * self.alpha, 0.0)
        q = jnp.where(live[:, None] & live[None, :], q, 0.0) + jnp.diag(jnp.where(live, 0.0, s.lipschitz))
        # Free a pixel only where it would move by more than half the tolerance.
        grow = 0.5 * s.tolerance * (s.lipschitz + self.lam * (1.0 - self.alpha))
        z, solves = nonnegative_qp(q, d, x_block, live, grow, self.max_solves)
        x = s.x.reshape(-1).at[index].set(jnp.where(live, z, s.x.reshape(-1)[index])).reshape(n, m)
        gradient, objective, max_step = self._exact(problem, x, s)
        i = s.iteration
        return s._replace(
            x=x, gradient=gradient, fun=objective, max_step=max_step, fun_trace=s.fun_trace.at[i].set(objective),
            steps=s.steps.at[i].set(jnp.max(jnp.abs(x - s.x))), iteration=i + 1, solves=s.solves + solves,
            increases=s.increases + (objective > s.fun).astype(jnp.int32),
        )

    def done(self, problem: Deconvolution, state: BCDState, phase: int) -> jax.Array:
        return state.max_step <= state.tolerance  # always measured on an exact gradient map

    def summary(self, problem: Deconvolution, state: BCDState) -> dict[str, jax.Array]:
        return {"objective": state.fun, "max_step": state.max_step}

    def result(
        self, problem: Deconvolution, state: BCDState, done: list[int], status: Status, stats: dict[str, Any]
    ) -> DeconvolutionResult:
        iterations = int(state.iteration)
        model, residual, objective, _ = final_model(problem, state.x, self._penalty)
        tolerance, max_step = float(state.tolerance), float(state.max_step)
        message = status.describe({
            Status.SUCCESS: f"converged: on the exact gradient map no pixel can change by more than {tolerance:.3g} "
            f"Jy/pixel (epsilon={self.epsilon:g} of the image's scale; {iterations} iterations)",
            Status.MAX_STEPS: f"a pixel can still change by {max_step:.3g} > {tolerance:.3g} Jy/pixel (epsilon="
            f"{self.epsilon:g} of the image's scale) after max_iterations={self.max_iterations}: raise max_iterations",
        })
        stats = dict(stats, iterations=iterations, max_step=max_step, tolerance=tolerance, solves=int(state.solves),
                     increases=int(state.increases))
        return DeconvolutionResult(
            x=model, fun=objective, status=status, message=message, stats=stats, model=model, residual=residual,
            iterations=iterations, fun_trace=np.asarray(state.fun_trace[:iterations]),
            steps=np.asarray(state.steps[:iterations]),
        )
