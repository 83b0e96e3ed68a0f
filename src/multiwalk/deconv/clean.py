"""`Clean`: Hogbom CLEAN, the baseline radio astronomers compare deconvolution against.

Each iteration finds the residual's peak |r[p]|, adds ``gain * r[p] / PSF[c, c]`` to the model at
p and subtracts that much of the PSF, shifted to p, from the residual (zero-padded: only the part
inside the image).  The structure is the seed's coordinate descent with the residual in place of
the gradient map and the PSF in place of its autocorrelation (seed section 3.7), and it runs on
the same block search (:mod:`multiwalk.deconv.greedy`); the residual update is exact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..compile_cache import cached_jit, start_with  # kept across solve() calls of the same problem
from ..result import Status
from ..solvers.base import Phase, Solver, check_int_option, check_number_option
from . import greedy, patches
from .problem import Deconvolution
from .result import DeconvolutionResult, final_model

__all__ = ["Clean"]


class CleanState(NamedTuple):
    x: jax.Array  # (Np, Mp) the model (CLEAN components), padded to whole blocks
    residual: jax.Array  # (Np, Mp)
    kernel: jax.Array  # the PSF (or its central window), zero-padded
    peak_value: jax.Array  # PSF[c, c]
    block_best: jax.Array  # (nb, mb) max |residual| per block
    block_pixel: jax.Array  # (nb, mb) int32 flat padded index of that pixel
    steps: jax.Array  # (max_iterations,) |residual peak| found by each iteration
    iteration: jax.Array  # int32


@dataclasses.dataclass(frozen=True)
class Clean(Solver):
    """Hogbom CLEAN for ``Deconvolution`` problems.

    Parameters
    ----------
    gain : loop gain in (0, 1]: the fraction of the peak removed per iteration.
    threshold : stop when the residual's peak |r| is below this (units of the dirty image).
    max_iterations : the iteration budget (status ``MAX_STEPS`` when used up above the threshold).
    window : subtract only the central window x window of the PSF (odd; None: all of it; a
        smaller window is Clark's PSF patch: faster, approximate far from the peak).
    block : side of the blocks whose peak is kept (a tuning knob; results do not depend on it).

    On several devices (``mw.solve(..., devices=k)``) the residual is split in row patches, one
    per device (:mod:`~multiwalk.deconv.patches`; the same model bit for bit); the rows of
    blocks (``ceil(N / block)``) must split evenly.
    """

    gain: float = 0.1
    threshold: float = 0.0
    max_iterations: int = 1000
    window: int | None = None
    block: int = 32

    problem_type = Deconvolution

    def __post_init__(self) -> None:
        for name in ("gain", "threshold"):
            check_number_option(name, getattr(self, name))
        if not 0 < self.gain <= 1:
            raise ValueError(f"gain must be in (0, 1] (typically 0.1), got {self.gain!r}")
        if self.threshold < 0:
            raise ValueError(f"threshold must be >= 0, got {self.threshold!r}")
        check_int_option("max_iterations", self.max_iterations, 1)
        check_int_option("window", self.window, 1, none_ok=True)
        if self.window is not None and self.window % 2 == 0:
            raise ValueError(f"window must be odd (centred on the peak), got {self.window}")
        check_int_option("block", self.block, 1)

    def _geometry(self, problem: Deconvolution) -> tuple[greedy.Geometry, int]:
        """The block layout and how much of the PSF is cut from each side (the window)."""
        p = problem.psf.shape[0]
        c = p // 2
        cut = 0 if self.window is None or self.window >= p else c - self.window // 2
        size = p - 2 * cut if cut else p
        return greedy.geometry(problem.shape, (size, size), (c - cut, c - cut), self.block), cut

    @staticmethod
    def _score(residual, x):
        return jnp.abs(residual)

    def phases(self, problem: Deconvolution) -> list[Phase]:
        return [Phase("clean", int(self.max_iterations))]

    def init(self, problem: Deconvolution, key: jax.Array) -> CleanState:
        return self.initial_state_fn(problem)(key)

    def initial_state_fn(
        self, problem: Deconvolution, shardings: Any = None, plan: Any = None
    ) -> Callable[[jax.Array], CleanState]:
        make = cached_jit(problem, self, "init", lambda d, p, x0: self._initial_state(problem, d, p, x0), shardings)
        return start_with(make, *problem.device_images())

    def batch_axes(self, problem: Deconvolution, state: CleanState) -> CleanState:
        """The model, residual and block maxima split by rows (patches.py); the PSF whole."""
        return CleanState(
            x=0, residual=0, kernel=None, peak_value=None, block_best=0, block_pixel=0, steps=None, iteration=None
        )

    def batch_option(self, problem: Deconvolution) -> str:
        return f"the number of {self.block}-row blocks over N = {problem.shape[0]} rows"

    def _initial_state(self, problem: Deconvolution, dirty: jax.Array, psf: jax.Array, start: jax.Array) -> CleanState:
        geo, cut = self._geometry(problem)
        p = psf.shape[0]
        kernel = psf[cut : p - cut, cut : p - cut] if cut else psf
        residual = greedy.pad_image(dirty, geo)
        x = greedy.pad_image(start, geo)
        best, pixel = greedy.all_blocks(self._score, (residual, x), geo)
        return CleanState(
            x=x, residual=residual, kernel=greedy.pad_kernel(kernel, geo), peak_value=psf[p // 2, p // 2],
            block_best=best, block_pixel=pixel, steps=jnp.zeros(self.max_iterations, dirty.dtype),
            iteration=jnp.asarray(0, jnp.int32),
        )

    def step(self, problem: Deconvolution, state: CleanState, phase: int) -> CleanState:
        geo, _ = self._geometry(problem)
        s = state
        mesh = patches.row_mesh()
        if mesh is not None:  # split in row patches over devices: the same arithmetic per pixel (patches.py)
            i, j, peak, (r, old) = patches.pick(mesh, geo, s.block_best, s.block_pixel, (s.residual, s.x))
            component = self.gain * r / s.peak_value
            (residual, x), best, pixel = patches.update(
                mesh, geo, self._score, (s.residual, s.x), s.kernel, component, i, j, {1: old + component},
                s.block_best, s.block_pixel,
            )
        else:
            i, j, peak = greedy.pick(s.block_best, s.block_pixel, geo)
            component = self.gain * s.residual[i, j] / s.peak_value
            x = s.x.at[i, j].add(component)
            residual, start = greedy.subtract_kernel(s.residual, s.kernel, component, i, j, geo)
            # Kept apart from the rescan's reduction: fused with it, the subtraction wrote a new
            # residual that XLA then copied into the loop's own (on a GPU, a whole-image copy per
            # iteration); alone it is done in place.
            residual = jax.lax.optimization_barrier(residual)
            best, pixel = greedy.rescan(self._score, (residual, x), s.block_best, s.block_pixel, start, geo)
        k = s.iteration
        return s._replace(
            x=x, residual=residual, block_best=best, block_pixel=pixel, steps=s.steps.at[k].set(peak), iteration=k + 1
        )

    def done(self, problem: Deconvolution, state: CleanState, phase: int) -> jax.Array:
        # threshold = 0 never stops early unless the residual is exactly zero.
        best = jnp.max(state.block_best)
        return (best < self.threshold) | (best == 0)

    def summary(self, problem: Deconvolution, state: CleanState) -> dict[str, jax.Array]:
        return {"peak": jnp.max(state.block_best)}

    def result(
        self, problem: Deconvolution, state: CleanState, done: list[int], status: Status, stats: dict[str, Any]
    ) -> DeconvolutionResult:
        iterations = int(state.iteration)
        model, residual, fun, _ = final_model(problem, state.x, None)
        peak = float(jnp.max(state.block_best))
        message = status.describe({
            Status.SUCCESS: f"the residual peak {peak:.4g} is below threshold={self.threshold:g} ({iterations} iterations)",
            Status.MAX_STEPS: f"the residual peak {peak:.4g} is still above threshold={self.threshold:g} after "
            f"max_iterations={self.max_iterations}",
        })
        return DeconvolutionResult(
            x=model, fun=fun, status=status, message=message, stats=dict(stats, iterations=iterations), model=model,
            residual=residual, iterations=iterations, fun_trace=None, steps=np.asarray(state.steps[:iterations]),
        )
