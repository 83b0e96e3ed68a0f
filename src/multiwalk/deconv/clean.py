"""`Clean`: Hogbom CLEAN, the baseline radio astronomers compare deconvolution against.

Each iteration finds the residual's peak |r[p]|, adds ``gain * r[p] / PSF[c, c]`` to the model at
p and subtracts that much of the PSF, shifted to p, from the residual (zero-padded: only the part
inside the image).  The structure is the seed's coordinate descent with the residual in place of
the gradient map and the PSF in place of its autocorrelation (seed section 3.7), and it runs on
the same block search (:mod:`multiwalk.deconv.greedy`); the residual update is exact.

``kernel`` chooses how an iteration runs, not what it computes.  ``"xla"``: subtract the shifted
PSF (``dynamic_update_slice``), then rescan the touched blocks - two passes over the window.
``"pallas"``: one fused Pallas (Triton) pass that updates the residual in place and recomputes
the block maxima (:mod:`~multiwalk.deconv.clean_kernel`), with several iterations per loop
trip; off GPUs it runs in interpret mode (tests).  ``"auto"`` (default): the kernel on a GPU,
the XLA form elsewhere.  ``result.stats["kernel"]`` says which ran and why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..compile_cache import cached_jit, start_with  # kept across solve() calls of the same problem
from ..kernels import KernelPlan, check_kernel_option
from ..result import Status
from ..solvers.base import Phase, Solver, check_int_option, check_number_option
from . import clean_kernel, greedy, patches
from . import coordinate_descent_kernel as cdk  # the kernel plan and padding both kernel forms share
from .problem import Deconvolution
from .result import DeconvolutionResult, final_model

__all__ = ["Clean"]


class KernelBlocks(NamedTuple):
    """What the kernel form keeps per block beside its maximum (its own type: a checkpoint of one
    form is told from the other's by its layout, and converted, see ``Clean.convert_checkpoint``)."""

    residual: jax.Array  # (nb, mb) the residual at each block's best pixel (no gather from the residual)


class CleanState(NamedTuple):
    x: jax.Array  # (Np, Mp) the model (CLEAN components), padded to whole blocks
    residual: jax.Array  # (Np, Mp)
    kernel: jax.Array  # the PSF (or its central window), zero-padded (XLA form: greedy.pad_kernel; kernel form:
    # coordinate_descent_kernel.padded_kernel)
    peak_value: jax.Array  # PSF[c, c]
    block_best: jax.Array  # (nb, mb) max |residual| per block
    block_pixel: jax.Array  # (nb, mb) int32 flat padded index of that pixel
    block_values: KernelBlocks | None  # kernel form: the residual at that pixel; XLA form: None
    steps: jax.Array  # (max_iterations,) |residual peak| found by each iteration
    iteration: jax.Array  # int32


@dataclasses.dataclass(frozen=True)
class Clean(greedy.FusedKernelForm, Solver):
    """Hogbom CLEAN for ``Deconvolution`` problems.

    Parameters
    ----------
    gain : loop gain in (0, 1]: the fraction of the peak removed per iteration.
    threshold : stop when the residual's peak |r| is below this (units of the dirty image).
    max_iterations : the iteration budget (status ``MAX_STEPS`` when used up above the threshold).
    window : subtract only the central window x window of the PSF (odd; None: all of it; a
        smaller window is Clark's PSF patch: faster, approximate far from the peak).
    kernel : ``"auto"`` (default), ``"xla"`` or ``"pallas"``: how an iteration runs (module doc).
    block : blocks whose peak is kept, an int (square) or (rows, columns); a tuning knob, results
        do not depend on it (but for exact ties between pixels of different blocks).  None: 32 x 32
        (XLA form), 32 x 128 (kernel form, which needs powers of two per axis: other blocks run
        the XLA form, said in ``stats["kernel_reason"]``).
    kernel_warps : warps per Pallas program (tuning).

    On several devices (``mw.solve(..., devices=k)``) the XLA form splits the residual in row
    patches, one per device (:mod:`~multiwalk.deconv.patches`; the same model bit for bit); the
    rows of blocks (``ceil(N / block rows)``) must split evenly.  The Pallas form stays on one
    device.
    """

    gain: float = 0.1
    threshold: float = 0.0
    max_iterations: int = 1000
    window: int | None = None
    kernel: str = "auto"
    block: int | tuple[int, int] | None = None
    kernel_warps: int | None = None

    problem_type = Deconvolution
    resumable_options = ("kernel", "block", "kernel_warps")  # how, not what: a resume may change them

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
        check_kernel_option(self.kernel)
        greedy.check_block_option(self.block)
        check_int_option("kernel_warps", self.kernel_warps, 1, none_ok=True)

    def kernel_plan(self) -> KernelPlan:
        """Which form (fused Pallas kernel or XLA) runs an iteration here, and why."""
        return cdk.plan(self.kernel, greedy.block_shape(self.block if self.block is not None else clean_kernel.DEFAULT_BLOCK))

    def _block(self) -> tuple[int, int]:
        if self.block is not None:
            return greedy.block_shape(self.block)
        return clean_kernel.DEFAULT_BLOCK if self.kernel_plan().use_pallas else (32, 32)

    def _geometry(self, problem: Deconvolution) -> tuple[greedy.Geometry, int]:
        """The block layout and how much of the PSF is cut from each side (the window)."""
        p = problem.psf.shape[0]
        c = p // 2
        cut = 0 if self.window is None or self.window >= p else c - self.window // 2
        size = p - 2 * cut if cut else p
        return greedy.geometry(problem.shape, (size, size), (c - cut, c - cut), self._block()), cut

    def _kernel_pad(self, problem: Deconvolution, geo: greedy.Geometry) -> tuple[int, int]:
        """The kernel form's zeros around the PSF window (every touched block reads inside it)."""
        size = problem.psf.shape[0] - 2 * self._geometry(problem)[1]
        return cdk.kernel_pad(geo, (size, size))

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

    def batch_axes(self, problem: Deconvolution, state: CleanState) -> CleanState | None:
        """The XLA form's model, residual and block maxima split by rows (patches.py); the PSF
        whole.  The Pallas form stays on one device (its update is one custom call XLA cannot split)."""
        if self.kernel_plan().use_pallas:
            return None
        return CleanState(
            x=0, residual=0, kernel=None, peak_value=None, block_best=0, block_pixel=0, block_values=None, steps=None,
            iteration=None,
        )

    def batch_option(self, problem: Deconvolution) -> str:
        return f"the number of {self._block()[0]}-row blocks over N = {problem.shape[0]} rows"

    def _initial_state(self, problem: Deconvolution, dirty: jax.Array, psf: jax.Array, start: jax.Array) -> CleanState:
        geo, cut = self._geometry(problem)
        p = psf.shape[0]
        kernel = psf[cut : p - cut, cut : p - cut] if cut else psf
        residual = greedy.pad_image(dirty, geo)
        x = greedy.pad_image(start, geo)
        best, pixel = greedy.all_blocks(self._score, (residual, x), geo)
        values = None
        if self.kernel_plan().use_pallas:
            kernel = cdk.padded_kernel(kernel, self._kernel_pad(problem, geo))
            values = KernelBlocks(greedy.at_block_pixels(pixel, residual))
        else:
            kernel = greedy.pad_kernel(kernel, geo)
        return CleanState(
            x=x, residual=residual, kernel=kernel, peak_value=psf[p // 2, p // 2], block_best=best, block_pixel=pixel,
            block_values=values, steps=jnp.zeros(self.max_iterations, dirty.dtype), iteration=jnp.asarray(0, jnp.int32),
        )

    def step(self, problem: Deconvolution, state: CleanState, phase: int) -> CleanState:
        if self.kernel_plan().use_pallas:
            return self._step_where(problem, state, jnp.asarray(True))
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

    def _step_where(self, problem: Deconvolution, s: CleanState, live: jax.Array) -> CleanState:
        """One iteration of the kernel form: the peak and its residual from the block arrays (no
        gather from the residual), then one fused launch; where ``live`` is False, none (every
        change is zero: the kernel form's loop runs a fixed number of these per trip, see run_chunk)."""
        geo, _ = self._geometry(problem)
        plan = self.kernel_plan()
        i, j, peak = greedy.pick(s.block_best, s.block_pixel, geo)
        r = s.block_values.residual.reshape(-1)[jnp.argmax(s.block_best)]  # the argmax pick took: XLA computes it once
        component = self.gain * r / s.peak_value
        residual, x, best, pixel, values = clean_kernel.update_and_rescan(
            s.residual, s.x, s.kernel, (s.block_best, s.block_pixel, s.block_values.residual), component, i, j, live, geo=geo,
            pad=self._kernel_pad(problem, geo),
            num_warps=self.kernel_warps or cdk.DEFAULT_WARPS, interpret=plan.interpret,
        )
        k = s.iteration
        return s._replace(
            x=x, residual=residual, block_best=best, block_pixel=pixel, block_values=KernelBlocks(values),
            steps=s.steps.at[k].set(jnp.where(live, peak, s.steps[k])), iteration=k + live.astype(jnp.int32),
        )

    def convert_checkpoint(self, fresh_state: CleanState, saved_layout: list[str], leaves: list[np.ndarray]) -> list | None:
        """A checkpoint of the other form (``kernel`` changed on resume, or "auto" on another
        machine) as this form's leaves: its model, residual, steps and iteration, the block arrays
        recomputed from the residual, the padded PSF of this form's start."""
        if saved_layout not in (["CleanState"], ["CleanState", "KernelBlocks"]):
            return None
        x, residual, steps, iteration = leaves[0], leaves[1], leaves[-2], leaves[-1]
        shape = fresh_state.x.shape

        def fit(a: np.ndarray) -> np.ndarray:  # zero past the image in both layouts: crop or pad with zeros
            a = a[: shape[0], : shape[1]]
            return np.pad(a, [(0, s - n) for s, n in zip(shape, a.shape)])

        x, residual = fit(x), fit(residual)
        best, pixel, value = _block_maxima(residual, fresh_state.block_best.shape)
        values = [] if fresh_state.block_values is None else [value]
        s = fresh_state
        return [x, residual, s.kernel, s.peak_value, best, pixel, *values, steps, iteration]

    def done(self, problem: Deconvolution, state: CleanState, phase: int) -> jax.Array:
        # threshold = 0 never stops early unless the residual is exactly zero.  The max through argmax:
        # the next step's pick makes the same reduction, which XLA then shares inside the kernel
        # form's trip (split in patches: the max, one scalar all-reduce).
        if patches.row_mesh() is not None:
            best = jnp.max(state.block_best)
        else:
            best = state.block_best.reshape(-1)[jnp.argmax(state.block_best)]
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
        plan = self.kernel_plan()
        stats = dict(stats, iterations=iterations, kernel=plan.name, kernel_reason=plan.reason)
        return DeconvolutionResult(
            x=model, fun=fun, status=status, message=message, stats=stats, model=model,
            residual=residual, iterations=iterations, fun_trace=None, steps=np.asarray(state.steps[:iterations]),
        )


def _block_maxima(residual: np.ndarray, blocks: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each block's largest |residual|, its flat padded pixel and the residual there, on the host:
    ``greedy.all_blocks``' answer (the first pixel row-major on ties).  The padding up to whole
    blocks is not masked: it holds zeros, which never beat an image pixel of the same block (a
    positive maximum is an image pixel's; a zero one is the block's first pixel, in the image)."""
    (n, m), (nb, mb) = residual.shape, blocks
    b1, b2 = n // nb, m // mb
    tiles = np.abs(residual).reshape(nb, b1, mb, b2).transpose(0, 2, 1, 3).reshape(nb, mb, b1 * b2)
    local = np.argmax(tiles, axis=-1)
    rows = np.arange(nb)[:, None] * b1 + local // b2
    cols = np.arange(mb)[None, :] * b2 + local % b2
    return np.abs(residual[rows, cols]), (rows * m + cols).astype(np.int32), residual[rows, cols]
