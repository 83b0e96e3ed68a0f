"""`CoordinateDescent`: greedy serial coordinate descent with the elastic net (seed 004, P9).

Solves, for a :class:`~multiwalk.deconv.Deconvolution` problem,

    min_x  0.5 ||I_dirty - x * PSF||^2 + lam (alpha ||x||_1 + (1 - alpha)/2 ||x||_2^2),  x >= 0,

with the zero-padded convolution, by the seed's efficient serial algorithm:

* the gradient map ``g = A^T (I_dirty - A x)`` by one FFT correlation;
* the per-pixel Lipschitz constants ``L = ||A e_k||^2`` from a summed-area table of PSF^2;
* each iteration, the pixel whose proximal step ``max(g + x L - lam alpha, 0) / (L + (1 - alpha) lam) - x``
  is largest in magnitude is set to its optimum (an exact minimisation along that pixel);
* the gradient map is updated by subtracting the PSF autocorrelation shifted to that pixel.

The shifted autocorrelation is exact only where the PSF does not reach past an image edge (the
seed's approximation); ``refresh_every=k`` recomputes the exact gradient map and objective by
FFT every k iterations, so the error never accumulates.  ``update_window=w`` uses only the
central w x w of the autocorrelation (cheaper iterations; combine it with ``refresh_every``).
The objective is tracked exactly from the scalars of each step (it is exact while the
gradient map is), and recomputed exactly at each refresh and at the end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..result import Status
from ..solvers.base import Phase, Solver, check_int_option
from . import greedy
from .problem import Deconvolution
from .result import DeconvolutionResult, final_images

__all__ = ["CoordinateDescent", "proximal_step"]


def proximal_step(gradient: Any, x: Any, lipschitz: Any, lam: float, alpha: float) -> Any:
    """The optimal new value of a pixel, ``max(g + x L - lam alpha, 0) / (L + (1 - alpha) lam)`` (seed eq. 3.6).

    ``gradient`` is ``<residual, A e_k>``; the elastic net's proximal operator with x >= 0."""
    return jnp.maximum(gradient + x * lipschitz - lam * alpha, 0.0) / (lipschitz + (1.0 - alpha) * lam)


class CDState(NamedTuple):
    x: jax.Array  # (Np, Mp) the model, padded to whole blocks
    gradient: jax.Array  # (Np, Mp) the gradient map A^T (dirty - A x)
    lipschitz: jax.Array  # (Np, Mp) per-pixel Lipschitz constants (1 in the padding)
    kernel: jax.Array  # the PSF autocorrelation window, zero-padded (greedy.pad_kernel)
    block_best: jax.Array  # (nb, mb) best |step| per block
    block_pixel: jax.Array  # (nb, mb) int32 flat padded index of that pixel
    objective: jax.Array  # scalar, the objective of the current x
    history: jax.Array  # (max_iterations,) objective after each iteration
    steps: jax.Array  # (max_iterations,) |step| of each iteration
    iteration: jax.Array  # int32
    exact: jax.Array  # bool: the gradient map was recomputed by FFT in the last step (refreshes only)
    dirty: Any  # (N, M) for refreshes, or None
    start: Any  # (N, M) the starting model, for refreshes, or None
    fp: Any  # rfft2 of the PSF for refreshes, or None


@dataclasses.dataclass(frozen=True)
class CoordinateDescent(Solver):
    """Greedy coordinate descent for ``Deconvolution`` problems (elastic net, x >= 0).

    Parameters
    ----------
    lam : regularisation weight lambda >= 0 (units of the dirty image squared per Jy).
    alpha : elastic-net mix in [0, 1]: 1 is pure L1 (point sources), 0 pure L2.
    epsilon : stop when the largest possible pixel change is below this (Jy/pixel).
    max_iterations : the iteration budget (status ``MAX_STEPS`` when used up).
    refresh_every : recompute the exact gradient map by FFT every this many iterations (None: never).
    update_window : size of the central PSF-autocorrelation window used per update (odd; None: all of it).
    block : side of the blocks whose best pixel is kept (a tuning knob; results do not depend on it).
    """

    lam: float
    alpha: float = 1.0
    epsilon: float = 1e-4
    max_iterations: int = 10_000
    refresh_every: int | None = None
    update_window: int | None = None
    block: int = 32

    problem_type = Deconvolution

    def __post_init__(self) -> None:
        for name in ("lam", "alpha", "epsilon"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not np.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v!r}")
        if self.lam < 0:
            raise ValueError(f"lam must be >= 0 (the regularisation weight), got {self.lam!r}")
        if not 0 <= self.alpha <= 1:
            raise ValueError(f"alpha must be in [0, 1] (1: L1 only, 0: L2 only), got {self.alpha!r}")
        if self.epsilon <= 0:
            raise ValueError(f"epsilon must be > 0 (the smallest pixel change that goes on), got {self.epsilon!r}")
        check_int_option("max_iterations", self.max_iterations, 1)
        check_int_option("refresh_every", self.refresh_every, 1, none_ok=True)
        check_int_option("update_window", self.update_window, 1, none_ok=True)
        if self.update_window is not None and self.update_window % 2 == 0:
            raise ValueError(f"update_window must be odd (centred on the pixel), got {self.update_window}")
        check_int_option("block", self.block, 1)

    # ---------------------------------------------------------------- geometry
    def _kernel_size(self, problem: Deconvolution) -> tuple[int, int]:
        """The autocorrelation window: lags up to N-1 (M-1) reach the image, P-1 are non-zero."""
        p = problem.psf.shape[0]
        full = tuple(min(2 * p - 1, 2 * n - 1) for n in problem.shape)
        if self.update_window is None:
            return full  # type: ignore[return-value]
        return tuple(min(self.update_window, f) for f in full)  # type: ignore[return-value]

    def _geometry(self, problem: Deconvolution) -> greedy.Geometry:
        k = self._kernel_size(problem)
        return greedy.geometry(problem.shape, k, (k[0] // 2, k[1] // 2), self.block)

    def _score_fn(self) -> Callable:
        lam, alpha = float(self.lam), float(self.alpha)

        def score(gradient, x, lipschitz):
            return jnp.abs(proximal_step(gradient, x, lipschitz, lam, alpha) - x)

        return score

    # ---------------------------------------------------------------- Solver contract
    def check(self, problem: Deconvolution) -> None:
        if not isinstance(problem, Deconvolution):
            raise TypeError(f"problem must be a multiwalk.deconv.Deconvolution, got {type(problem).__name__}")

    def phases(self, problem: Deconvolution) -> list[Phase]:
        return [Phase("coordinate descent", int(self.max_iterations))]

    def init(self, problem: Deconvolution, key: jax.Array) -> CDState:
        return self.initial_state_fn(problem)(key)

    def initial_state_fn(self, problem: Deconvolution) -> Callable[[jax.Array], CDState]:
        """The images travel as arguments (never compiled in as constants); L comes from the host."""
        dirty, psf, start = problem.dirty, problem.psf, problem.model
        lipschitz = greedy.lipschitz_map(psf, problem.shape).astype(problem.dtype)
        make = jax.jit(lambda d, p, x0, lip: self._initial_state(problem, d, p, x0, lip))
        return lambda key: make(dirty, psf, start, lipschitz)

    def _initial_state(
        self, problem: Deconvolution, dirty: jax.Array, psf: jax.Array, start: jax.Array, lipschitz: jax.Array
    ) -> CDState:
        geo = self._geometry(problem)
        n, m = problem.shape
        p = psf.shape[0]
        c = p // 2
        size = greedy.fft_size(problem.shape, p)
        fp = greedy.psf_fft(psf, size)
        gradient = greedy.correlate(dirty, fp, size, c)
        # Autocorrelation AC[lag] = sum_t PSF[t] PSF[t + lag], lags |lag| < N reach the image.
        auto = jnp.fft.irfft2(jnp.abs(fp) ** 2, s=size)
        k1, k2 = self._kernel_size(problem)
        h1, h2 = k1 // 2, k2 // 2
        auto = jnp.roll(auto, (h1, h2), axis=(0, 1))[:k1, :k2].astype(dirty.dtype)
        x = greedy.pad_image(start, geo)
        gradient = greedy.pad_image(gradient, geo)
        lipschitz = greedy.pad_image(lipschitz, geo, 1.0)
        best, pixel = greedy.all_blocks(self._score_fn(), (gradient, x, lipschitz), geo)
        refresh = self.refresh_every is not None
        zero = jnp.zeros((), dirty.dtype)
        return CDState(
            x=x, gradient=gradient, lipschitz=lipschitz, kernel=greedy.pad_kernel(auto, geo),
            block_best=best, block_pixel=pixel, objective=0.5 * jnp.sum(dirty * dirty) + self._penalty(start) + zero,
            history=jnp.zeros(self.max_iterations, dirty.dtype), steps=jnp.zeros(self.max_iterations, dirty.dtype),
            iteration=jnp.asarray(0, jnp.int32), exact=jnp.asarray(True), dirty=dirty if refresh else None,
            start=start if refresh else None, fp=fp if refresh else None,
        )

    def _refresh(self, problem: Deconvolution, s: CDState) -> CDState:
        """The exact gradient map, block maxima and objective of the current x (by FFT)."""
        geo = self._geometry(problem)
        n, m = problem.shape
        c = problem.psf.shape[0] // 2
        size = greedy.fft_size(problem.shape, problem.psf.shape[0])
        x = s.x[:n, :m]
        residual = s.dirty - greedy.convolve(x - s.start, s.fp, size, c)
        gradient = greedy.pad_image(greedy.correlate(residual, s.fp, size, c), geo)
        best, pixel = greedy.all_blocks(self._score_fn(), (gradient, s.x, s.lipschitz), geo)
        objective = 0.5 * jnp.sum(residual * residual) + self._penalty(x)
        return s._replace(gradient=gradient, block_best=best, block_pixel=pixel, objective=objective)

    def _penalty(self, x: jax.Array) -> jax.Array:
        return self.lam * (self.alpha * jnp.sum(jnp.abs(x)) + 0.5 * (1.0 - self.alpha) * jnp.sum(x * x))

    def step(self, problem: Deconvolution, state: CDState, phase: int) -> CDState:
        geo = self._geometry(problem)
        s = state
        refreshed = jnp.asarray(False)
        if self.refresh_every is not None:
            # Refresh every k iterations, and when the approximate map says "converged", so
            # that the run only stops on the exact gradient map (see done()).
            refreshed = (s.iteration > 0) & (
                (s.iteration % self.refresh_every == 0) | (jnp.max(s.block_best) < self.epsilon)
            )
            s = jax.lax.cond(refreshed, lambda t: self._refresh(problem, t), lambda t: t, s)
        i, j, _ = greedy.pick(s.block_best, s.block_pixel, geo)
        g, old, lip = s.gradient[i, j], s.x[i, j], s.lipschitz[i, j]
        new = proximal_step(g, old, lip, self.lam, self.alpha)
        d = new - old
        # Exact change of the objective along one pixel (given g): the data term moves by
        # -d g + d^2 L / 2, the elastic net by lam (alpha (|new| - |old|) + (1 - alpha)/2 (new^2 - old^2)).
        change = -d * g + 0.5 * d * d * lip + self.lam * (
            self.alpha * (jnp.abs(new) - jnp.abs(old)) + 0.5 * (1.0 - self.alpha) * (new * new - old * old)
        )
        x = s.x.at[i, j].set(new)
        gradient, start = greedy.subtract_kernel(s.gradient, s.kernel, d, i, j, geo)
        best, pixel = greedy.rescan(self._score_fn(), (gradient, x, s.lipschitz), s.block_best, s.block_pixel, start, geo)
        objective = s.objective + change
        k = s.iteration
        return s._replace(
            x=x, gradient=gradient, block_best=best, block_pixel=pixel, objective=objective,
            history=s.history.at[k].set(objective), steps=s.steps.at[k].set(jnp.abs(d)), iteration=k + 1,
            exact=refreshed & (jnp.abs(d) < self.epsilon),
        )

    def done(self, problem: Deconvolution, state: CDState, phase: int) -> jax.Array:
        converged = jnp.max(state.block_best) < self.epsilon
        if self.refresh_every is None:
            return converged
        return converged & (state.exact | (state.iteration == 0))

    def summary(self, problem: Deconvolution, state: CDState) -> dict[str, jax.Array]:
        return {"objective": state.objective, "max_step": jnp.max(state.block_best)}

    def result(
        self, problem: Deconvolution, state: CDState, done: list[int], status: Status, stats: dict[str, Any]
    ) -> DeconvolutionResult:
        n, m = problem.shape
        iterations = int(state.iteration)
        model = np.asarray(state.x[:n, :m])
        residual, objective = final_images(problem, model, self._penalty)
        converged = bool(self.done(problem, state, 0))
        if status == Status.SUCCESS and not converged:
            status = Status.MAX_STEPS
            message = (
                f"the largest pixel change is still {float(jnp.max(state.block_best)):.3g} >= epsilon={self.epsilon:g} "
                f"after max_iterations={self.max_iterations}: raise max_iterations (or epsilon)"
            )
        elif status == Status.SUCCESS:
            message = f"converged: no pixel can change by epsilon={self.epsilon:g} or more ({iterations} iterations)"
        else:
            message = status.describe()
        stats = dict(stats, iterations=iterations)
        return DeconvolutionResult(
            x=model, fun=objective, status=status, message=message, stats=stats, model=model, residual=residual,
            iterations=iterations, objective=np.asarray(state.history[:iterations]), steps=np.asarray(state.steps[:iterations]),
        )
