"""`CoordinateDescent`: greedy serial coordinate descent with the elastic net (seed 004, P9).

Solves, for a :class:`~multiwalk.deconv.Deconvolution` problem,

    min_x  0.5 ||I_dirty - x * PSF||^2 + lam (alpha ||x||_1 + (1 - alpha)/2 ||x||_2^2),  x >= 0,

with the zero-padded convolution, by the seed's efficient serial algorithm:

* the gradient map ``g = A^T (I_dirty - A x)`` by one FFT correlation;
* one step size for every pixel, ``L = sum PSF^2`` (the autocorrelation's centre, see below);
* each iteration, the pixel whose proximal step ``max(g + x L - lam alpha, 0) / (L + (1 - alpha) lam) - x``
  is largest in magnitude is set to its optimum (an exact minimisation along that pixel);
* the gradient map is updated by subtracting the PSF autocorrelation shifted to that pixel.

The shifted autocorrelation is exact only where the PSF does not reach past an image edge (the
seed's approximation).  What the map then follows is a quadratic model of the objective: with
``B`` the full (uncropped) convolution and ``A`` its crop to the image, the map update is a
column of ``K = B^T B`` where the true Hessian is ``H = A^T A``, and ``K - H`` (the energy that
falls outside the image) is positive semi-definite.  Anchored at an exact gradient map, the
model therefore lies above the objective and touches it there: coordinate descent on it lowers
the true objective (majorise-minimise), and a point where the model cannot move is optimal.
The step ``L = K[k, k] = sum PSF^2`` is the model's exact minimisation along pixel k.  The seed's
per-pixel constants ``||A e_k||^2`` (a summed-area table) are smaller where the PSF reaches
past an edge and over-relax the model's steps by ``sum PSF^2 / ||A e_k||^2``, which diverges
where that exceeds 2 (every corner pixel of a PSF twice the image); they are not offered.

The exact gradient map (two FFTs on the compact grid, :mod:`~multiwalk.deconv.greedy`)
re-anchors the model every ``refresh_every`` iterations and whenever the model says
"converged": the run stops with SUCCESS only when, on an exact map,
no pixel can change by more than ``epsilon`` times the image's scale (the brightest pixel of
the starting model or of the first step), and goes on otherwise.  That final step changes
nothing: the model returned is the one verified.  The objective is tracked from the scalars of
each step (between refreshes the model's value, an upper bound) and recomputed exactly at each
refresh and at the end.

``update_window=w`` uses only the central w x w of the autocorrelation: cheaper iterations, but
a different algorithm, not the seed's.  The gradient map then misses every update's effect
beyond the window, so the steps are minimisations of a wrong model, the tracked objective is
only that model's estimate (it can even go negative), and at each refresh the history jumps to
the exact value, which can be higher than at the last refresh: the exact objective is NOT
monotone, and with far PSF side lobes the iteration need not converge (docs/benchmarks.md).
It therefore requires ``refresh_every``; ``result.stats["refresh_increases"]`` counts the jumps.

``kernel`` chooses how an update runs, not what it computes.  ``"xla"``: subtract the shifted
autocorrelation (``dynamic_update_slice``), then rescan the touched blocks - two passes over
the window.  ``"pallas"``: one fused Pallas (Triton) pass that updates the map and recomputes
the block maxima (:mod:`~multiwalk.deconv.coordinate_descent_kernel`), after one small launch
that picks the pixel and computes the step, 50 iterations per loop trip; off GPUs it runs in
interpret mode (tests).  ``"auto"`` (default): the kernel on a GPU, the XLA form elsewhere.
``result.stats["kernel"]`` says which ran and why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import distributed as dist
from ..compile_cache import cached_jit, start_with  # kept across solve() calls of the same problem
from ..kernels import check_kernel_option
from ..result import Status
from ..solvers.base import Phase, Solver, check_int_option, check_number_option
from . import coordinate_descent_kernel as cdk
from . import greedy, patches
from .greedy import objective_change, proximal_step  # proximal_step: public here (mw.deconv)
from .problem import Deconvolution
from .result import DeconvolutionResult, final_model, psf_spectrum

__all__ = ["CoordinateDescent", "proximal_step"]


def check_elastic_net_options(lam: float, alpha: float, epsilon: float, max_iterations: int) -> None:
    """The options every elastic-net deconvolution solver shares: ValueError/TypeError naming the
    option, the value and what is allowed."""
    for name, value in (("lam", lam), ("alpha", alpha), ("epsilon", epsilon)):
        check_number_option(name, value)
    if lam < 0:
        raise ValueError(f"lam must be >= 0 (the regularisation weight), got {lam!r}")
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1] (1: L1 only, 0: L2 only), got {alpha!r}")
    if epsilon <= 0:
        raise ValueError(f"epsilon must be > 0 (the relative pixel change that goes on), got {epsilon!r}")
    check_int_option("max_iterations", max_iterations, 1)


class CDState(NamedTuple):
    x: jax.Array  # (Np, Mp) the model, padded to whole blocks
    gradient: jax.Array  # (Np, Mp) the gradient map A^T (dirty - A x)
    lipschitz: jax.Array  # (Np, Mp) the step's Lipschitz constant at each pixel (1 in the padding), NEGATED where x may be
    # non-zero (pixels the solver changed, or non-zero in the start): the kernel reads x only there
    kernel: jax.Array  # the PSF autocorrelation window, zero-padded (XLA form: greedy.pad_kernel; kernel form: cdk.padded_kernel)
    block_best: jax.Array  # (nb, mb) best |step| per block
    block_pixel: jax.Array  # (nb, mb) int32 flat padded index of that pixel
    block_values: Any  # kernel form: (g, x, |L|) at each block's best pixel, (nb, mb) each; XLA form: None
    block_marks: Any  # kernel form with one L for all pixels: (nb, mb) int32, 1 where a block's x may be
    # non-zero (then the kernel neither reads nor negates ``lipschitz``); otherwise None
    fun: jax.Array  # scalar, the objective of the current x
    fun_trace: jax.Array  # (max_iterations,) objective after each iteration
    steps: jax.Array  # (max_iterations,) |step| of each iteration
    iteration: jax.Array  # int32
    exact: jax.Array  # bool: the last step verified convergence on an exact (FFT) gradient map
    refreshes: jax.Array  # int32: exact gradient maps computed so far
    tolerance: jax.Array  # scalar: epsilon times the image's scale (the stopping rule, Jy/pixel)
    dirty: jax.Array  # (N, M), for refreshes
    start: jax.Array  # (N, M) the starting model, for refreshes
    fp: jax.Array  # the PSF's spectrum on the compact FFT grid (greedy.compact_psf_fft), for refreshes


def _saved_blocks(leaves: list[np.ndarray]) -> str:
    """The blocks a CoordinateDescent checkpoint's leaves hold, for its refusal: its padded model
    (rows, columns) over its block grid.  A checkpoint of another version's default blocks has
    the same ``block=None`` as this run, so the option alone cannot say which to pass."""
    if len(leaves) <= CDState._fields.index("block_best"):
        return ""
    x, best = (np.shape(leaves[CDState._fields.index(name)]) for name in ("x", "block_best"))
    if len(x) != 2 or len(best) != 2 or 0 in best or x[0] % best[0] or x[1] % best[1]:
        return ""
    # the XLA form's state has no block values nor marks: two leaves fewer than its fields
    form = ", kernel='xla'" if len(leaves) == len(CDState._fields) - 2 else ""
    return f"; it holds blocks of {x[0] // best[0]} x {x[1] // best[1]}, block=({x[0] // best[0]}, {x[1] // best[1]}){form}"


@jax.jit
def _max_step(residual: jax.Array, model: jax.Array, psf: jax.Array, fp: jax.Array, lam: jax.Array,
              alpha: jax.Array) -> jax.Array:
    """max |proximal step - model| over the image, on the exact gradient map of ``residual``
    (``fp``: the PSF's spectrum on the compact grid, ``result.psf_spectrum``)."""
    size = greedy.compact_fft_shape(residual.shape, psf.shape[0])
    gradient = greedy.correlate_compact(residual, fp, size)
    return jnp.max(jnp.abs(proximal_step(gradient, model, jnp.sum(psf * psf), lam, alpha) - model))


@dataclasses.dataclass(frozen=True)
class CoordinateDescent(greedy.FusedKernelForm, Solver):
    """Greedy coordinate descent for ``Deconvolution`` problems (elastic net, x >= 0).

    Parameters
    ----------
    lam : regularisation weight lambda >= 0 (units of the dirty image squared per Jy).
    alpha : elastic-net mix in [0, 1]: 1 is pure L1 (point sources), 0 pure L2.
    epsilon : relative stopping tolerance: SUCCESS when, on the exact gradient map, no pixel can
        change by more than ``epsilon * scale``, the scale being the brightest pixel of the starting
        model or of the first step (Jy/pixel).  The default reaches a relative objective gap of
        ~1e-7 on small fields (tests/test_deconv_optimum.py).
    max_iterations : the iteration budget (status ``MAX_STEPS`` when used up).
    refresh_every : recompute the exact gradient map by FFT every this many iterations (None: only
        when the updated map says "converged", to verify it); the map is exact after each.
    lipschitz : ``"autocorrelation"``, the only choice: every step uses sum PSF^2 (module doc).
    update_window : size of the central PSF-autocorrelation window used per update (odd; None: all of
        it).  An approximation that breaks the monotone objective (module doc); needs ``refresh_every``.
    kernel : ``"auto"`` (default), ``"xla"`` or ``"pallas"``: how an update runs (module doc).
    block : blocks whose best pixel is kept, an int (square) or (rows, columns); a tuning knob,
        results do not depend on it (but for ties).  None: 32 x 32 (XLA form), 16 x 128 (kernel).
    kernel_warps : warps per Pallas program (tuning).

    On several devices (``mw.solve(..., devices=k)``) the XLA form splits the image in row
    patches, one per device, with one small all-gather per iteration to pick the pixel
    (:mod:`~multiwalk.deconv.patches`; the same model bit for bit).  The rows of blocks
    (``ceil(N / block rows)``) must split evenly.  The Pallas form stays on one device.
    """

    lam: float
    alpha: float = 1.0
    epsilon: float = 1e-6
    max_iterations: int = 100_000
    refresh_every: int | None = 100
    update_window: int | None = None
    lipschitz: str = "autocorrelation"
    kernel: str = "auto"
    block: int | tuple[int, int] | None = None
    kernel_warps: int | None = None

    problem_type = Deconvolution
    # how, not what: a resume may change them.  A checkpoint of the other form or of other blocks is
    # refused by convert_checkpoint (its arrays' shapes say so), naming the blocks it holds; ``block``
    # is here so that a checkpoint written under another version's default blocks (block=None)
    # resumes with the block= that message names.
    resumable_options = ("kernel", "block", "kernel_warps")
    # The kernel form with one L for every pixel reads no Lipschitz map, only block marks (a quarter
    # fewer bytes per update, same results); False keeps the map (for the benchmark's before/after).
    constant_lipschitz_kernel = True

    def __post_init__(self) -> None:
        check_elastic_net_options(self.lam, self.alpha, self.epsilon, self.max_iterations)
        check_int_option("refresh_every", self.refresh_every, 1, none_ok=True)
        check_int_option("update_window", self.update_window, 1, none_ok=True)
        if self.update_window is not None and self.update_window % 2 == 0:
            raise ValueError(f"update_window must be odd (centred on the pixel), got {self.update_window}")
        if self.update_window is not None and self.refresh_every is None:
            raise ValueError(
                f"update_window={self.update_window} needs refresh_every (e.g. 100): the truncated update leaves "
                "the gradient map wrong beyond the window, and only a refresh repairs it"
            )
        if self.lipschitz != "autocorrelation":
            raise ValueError(
                f"lipschitz must be 'autocorrelation' (sum PSF^2, the step the gradient map's update follows), got "
                f"{self.lipschitz!r}: per-pixel constants over-relax pixels whose PSF reaches past an edge, and the "
                "iteration need not converge"
            )
        check_kernel_option(self.kernel)
        greedy.check_block_option(self.block)
        check_int_option("kernel_warps", self.kernel_warps, 1, none_ok=True)

    # ---------------------------------------------------------------- geometry
    def _kernel_size(self, problem: Deconvolution) -> tuple[int, int]:
        """The autocorrelation window: lags up to N-1 (M-1) reach the image, P-1 are non-zero."""
        p = problem.psf.shape[0]
        full = tuple(min(2 * p - 1, 2 * n - 1) for n in problem.shape)
        if self.update_window is None:
            return full  # type: ignore[return-value]
        return tuple(min(self.update_window, f) for f in full)  # type: ignore[return-value]

    def kernel_plan(self) -> cdk.KernelPlan:
        """Which form (fused Pallas kernel or XLA) runs an update here, and why."""
        return cdk.plan(self.kernel, greedy.block_shape(self.block if self.block is not None else cdk.DEFAULT_BLOCK))

    def _uses_marks(self) -> bool:
        """Whether the kernel takes L as a scalar and block marks (one constant L, kernel form)."""
        return self.kernel_plan().use_pallas and self.constant_lipschitz_kernel

    def _block(self) -> tuple[int, int]:
        if self.block is not None:
            return greedy.block_shape(self.block)
        return cdk.DEFAULT_BLOCK if self.kernel_plan().use_pallas else (32, 32)

    def _geometry(self, problem: Deconvolution) -> greedy.Geometry:
        k = self._kernel_size(problem)
        return greedy.geometry(problem.shape, k, (k[0] // 2, k[1] // 2), self._block())

    def _score_fn(self) -> Callable:
        lam, alpha = float(self.lam), float(self.alpha)

        def score(gradient, x, lipschitz):
            lipschitz = jnp.abs(lipschitz)  # negated where x may be non-zero (CDState.lipschitz)
            return jnp.abs(proximal_step(gradient, x, lipschitz, lam, alpha) - x)

        return score

    # ---------------------------------------------------------------- Solver contract
    def phases(self, problem: Deconvolution) -> list[Phase]:
        return [Phase("coordinate descent", int(self.max_iterations))]

    def init(self, problem: Deconvolution, key: jax.Array) -> CDState:
        return self.initial_state_fn(problem)(key)

    def initial_state_fn(
        self, problem: Deconvolution, shardings: Any = None, plan: Any = None
    ) -> Callable[[jax.Array], CDState]:
        """The images travel as arguments (never compiled in as constants), from the problem's copies
        on the device; L comes from the host.  ``shardings``: the state is made split in row patches
        (several devices, ``batch_axes``)."""
        # AC[0] = sum PSF^2, the map update's own diagonal (module doc), summed in float64
        lipschitz = np.asarray(problem.psf_power(), problem.dtype)
        make = cached_jit(problem, self, "init", lambda d, p, x0, lip: self._initial_state(problem, d, p, x0, lip))
        if shardings is None:
            return start_with(make, *problem.device_images(), lipschitz)
        dirty, psf, start = problem.dirty, problem.psf, problem.model
        # Split: made whole on one device, then placed, so that its objective (a sum over the
        # image) is rounded as on one device and the split run's history is the same bit for bit.
        return lambda key: dist.place(dist.to_host(make(dirty, psf, start, lipschitz)), shardings)

    def batch_axes(self, problem: Deconvolution, state: CDState) -> CDState | None:
        """The XLA form's image-size arrays and block maxima split by rows (patches.py); the
        Pallas form stays on one device (its update is one custom call XLA cannot split)."""
        if self.kernel_plan().use_pallas:
            return None
        return CDState(
            x=0, gradient=0, lipschitz=0, kernel=None, block_best=0, block_pixel=0, block_values=None,
            block_marks=None, fun=None, fun_trace=None, steps=None, iteration=None, exact=None, refreshes=None,
            tolerance=None, dirty=None, start=None, fp=None,
        )

    def batch_option(self, problem: Deconvolution) -> str:
        return f"the number of {self._block()[0]}-row blocks over N = {problem.shape[0]} rows"

    def _autocorrelation(self, problem: Deconvolution, psf: jax.Array) -> jax.Array:
        """The update's kernel (``_kernel_size``, centred): AC[lag] = sum_t PSF[t] PSF[t + lag] at
        lags |lag| < N (those reach the image).  Its support is 2P - 1 wide, so it is computed on
        the full FFT grid (>= N + P - 1, ``greedy.fft_size``), where no lag it keeps aliases: the
        compact grid of the gradient maps is too small for it.  Once per start."""
        size = greedy.fft_size(problem.shape, psf.shape[0])
        auto = jnp.fft.irfft2(jnp.abs(greedy.psf_fft(psf, size)) ** 2, s=size)
        k1, k2 = self._kernel_size(problem)
        return jnp.roll(auto, (k1 // 2, k2 // 2), axis=(0, 1))[:k1, :k2]

    def _initial_state(
        self, problem: Deconvolution, dirty: jax.Array, psf: jax.Array, start: jax.Array, lipschitz: jax.Array
    ) -> CDState:
        """The start from the images; ``lipschitz`` is sum PSF^2 (a scalar), every pixel's constant."""
        geo = self._geometry(problem)
        lipschitz = jnp.full(problem.shape, lipschitz, dirty.dtype)
        fp = greedy.compact_psf_fft(psf, problem.shape)
        gradient = greedy.correlate_compact(dirty, fp, greedy.compact_fft_shape(problem.shape, psf.shape[0]))
        k1, k2 = self._kernel_size(problem)
        auto = self._autocorrelation(problem, psf).astype(dirty.dtype)
        x = greedy.pad_image(start, geo)
        gradient = greedy.pad_image(gradient, geo)
        lipschitz = greedy.pad_image(lipschitz, geo, 1.0)
        lipschitz = jnp.where(x != 0, -lipschitz, lipschitz)
        best, pixel = greedy.all_blocks(self._score_fn(), (gradient, x, lipschitz), geo)
        # The image's scale: the brightest pixel of the start or of the first step (module doc).
        scale = jnp.maximum(jnp.max(best), jnp.max(jnp.abs(start)))
        zero = jnp.zeros((), dirty.dtype)
        if self.kernel_plan().use_pallas:
            kernel = cdk.padded_kernel(auto, cdk.kernel_pad(geo, (k1, k2)))
        else:
            kernel = greedy.pad_kernel(auto, geo)
        values = cdk.block_values(pixel, gradient, x, lipschitz) if self.kernel_plan().use_pallas else None
        marks = cdk.block_marks(x, geo) if self._uses_marks() else None
        return CDState(
            x=x, gradient=gradient, lipschitz=lipschitz, kernel=kernel, block_best=best, block_pixel=pixel,
            block_values=values, block_marks=marks, fun=self._start_objective(dirty, start) + zero,
            fun_trace=jnp.zeros(self.max_iterations, dirty.dtype), steps=jnp.zeros(self.max_iterations, dirty.dtype),
            iteration=jnp.asarray(0, jnp.int32), exact=jnp.asarray(True), refreshes=jnp.asarray(0, jnp.int32),
            tolerance=(self.epsilon * scale).astype(dirty.dtype), dirty=dirty, start=start, fp=fp,
        )

    def _refresh(self, problem: Deconvolution, s: CDState) -> CDState:
        """The exact gradient map, block maxima and objective of the current x (by FFT)."""
        geo = self._geometry(problem)
        mesh = None if s.block_values is not None else patches.row_mesh()
        if mesh is not None:  # split in row patches: every device the whole FFTs, then its own rows
            gradient, best, pixel, objective = patches.refresh(
                mesh, geo, lambda x, *a: self._exact(problem, x, *a), self._score_fn(), s.x, s.lipschitz,
                (s.dirty, s.start, s.fp),
            )
            return s._replace(
                gradient=gradient, block_best=best, block_pixel=pixel, fun=objective, refreshes=s.refreshes + 1
            )
        gradient, objective = self._exact(problem, s.x, s.dirty, s.start, s.fp)
        best, pixel = greedy.all_blocks(self._score_fn(), (gradient, s.x, s.lipschitz), geo)
        values = cdk.block_values(pixel, gradient, s.x, s.lipschitz) if s.block_values is not None else None
        return s._replace(
            gradient=gradient, block_best=best, block_pixel=pixel, block_values=values, fun=objective,
            refreshes=s.refreshes + 1,
        )

    def _refreshed_if(self, problem: Deconvolution, s: CDState, refreshed: jax.Array) -> CDState:
        """``_refresh(s)`` where ``refreshed``, else ``s``: a loop of at most one trip over what a
        refresh changes, the rest of the state read in place.  A ``lax.cond`` whose other branch
        returned the state unchanged made XLA copy the state's image-sized arrays on every
        iteration without a refresh (a branch cannot hand its operand back in place)."""
        changed = ("gradient", "block_best", "block_pixel", "block_values", "fun", "refreshes")

        def once(carry: tuple) -> tuple:
            new = self._refresh(problem, s._replace(**dict(zip(changed, carry[1:]))))
            return (jnp.asarray(False), *(getattr(new, name) for name in changed))

        carry = jax.lax.while_loop(lambda c: c[0], once, (refreshed, *(getattr(s, name) for name in changed)))
        return s._replace(**dict(zip(changed, carry[1:])))

    def _exact(
        self, problem: Deconvolution, x: jax.Array, dirty: jax.Array, start: jax.Array, fp: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """The gradient map (padded like ``x``) and the objective of the padded model ``x``, by FFT."""
        n, m = problem.shape
        size = greedy.compact_fft_shape(problem.shape, problem.psf.shape[0])
        x = x[:n, :m]
        residual = dirty - greedy.convolve_compact(x - start, fp, size)
        gradient = greedy.pad_image(greedy.correlate_compact(residual, fp, size), self._geometry(problem))
        return gradient, 0.5 * jnp.sum(residual * residual) + self._penalty(x)

    def _start_objective(self, dirty: jax.Array, start: jax.Array) -> jax.Array:
        """The objective at the start: ``dirty`` is the start's residual (N x M)."""
        return 0.5 * jnp.sum(dirty * dirty) + self._penalty(start)

    def _penalty(self, x: jax.Array) -> jax.Array:
        return self.lam * (self.alpha * jnp.sum(jnp.abs(x)) + 0.5 * (1.0 - self.alpha) * jnp.sum(x * x))

    def step(self, problem: Deconvolution, state: CDState, phase: int) -> CDState:
        return self._step_where(problem, state, jnp.asarray(True))

    def trip_length(self) -> int:
        """The kernel form's iterations per loop trip: ``trip``, or a divisor of ``refresh_every`` near
        it, so that trips start where refreshes fall (only a trip's first iteration refreshes; a
        refresh due later in a trip leaves its last iterations idle).  ``refresh_every`` <= ``trip``
        is the trip itself (a small one waits for the host every few iterations, as its refreshes
        do anyway); above it, the largest divisor down to ``trip // 5``, where the idle iterations
        of an unaligned trip would cost less than the extra waits; else ``trip``."""
        every = self.refresh_every
        if every is None:
            return self.trip
        if every <= self.trip:
            return every
        return next((b for b in range(self.trip, max(1, self.trip // 5) - 1, -1) if every % b == 0), self.trip)

    def _refresh_due(self, s: CDState) -> jax.Array:
        """Whether this iteration recomputes the exact gradient map first: every ``refresh_every``
        iterations, and when the updated map says "converged" (the run stops only where the exact
        map confirms it, ``verified`` in _step_where)."""
        return cdk.refresh_due(jnp.max(s.block_best), s.iteration, s.tolerance, self.refresh_every)

    def _inner_step(self, problem: Deconvolution, state: CDState, may_run: jax.Array, phase: int) -> tuple[CDState, jax.Array]:
        """A kernel-form trip's later iterations (the Pallas form only): never a refresh (they stop
        where one is due, for the next trip's first iteration), so the trip holds no loop of its own.
        Such an iteration is at least the second of its run, so a refresh is due wherever the run is
        done (the best step <= tolerance): that test covers ``done``."""
        if cdk.pick_in_kernel(self._geometry(problem)):
            return self._kernel_step(problem, state, may_run, jnp.asarray(False), check=True)
        live = may_run & ~self._refresh_due(state)
        return self._step_where(problem, state, live, may_refresh=False), live

    def _update_options(self, problem: Deconvolution) -> dict[str, Any]:
        """The update kernel's static options (:func:`~.coordinate_descent_kernel.launch_update`)."""
        geo, k = self._geometry(problem), self._kernel_size(problem)
        return dict(geo=geo, half=(k[0] // 2, k[1] // 2), pad=cdk.kernel_pad(geo, k), lam=float(self.lam),
                    alpha=float(self.alpha), num_warps=self.kernel_warps or cdk.DEFAULT_WARPS,
                    interpret=self.kernel_plan().interpret)

    def _kernel_step(self, problem: Deconvolution, s: CDState, may_run: jax.Array, verified: jax.Array,
                     check: bool) -> tuple[CDState, jax.Array]:
        """The Pallas form's iteration in two launches, :func:`~.coordinate_descent_kernel.pick_step`
        (the pixel, the step, the objective and its records) and the update: the scalars stay on
        the device between them, with no small XLA operation each.  ``check``: the step also stops
        where a refresh is due.  The Pallas form with its block values only.  Returns (state, whether it ran)."""
        options = self._update_options(problem)
        ints = jnp.stack([may_run, s.iteration, s.exact, verified]).astype(jnp.int32)
        blocks = (s.block_best, s.block_pixel, *s.block_values)
        ints, floats, fun_trace, steps = cdk.pick_step(
            blocks, s.fun_trace, s.steps, ints, jnp.stack([s.tolerance, s.fun]), refresh_every=self.refresh_every,
            check=check, **{name: options[name] for name in ("geo", "lam", "alpha", "interpret")})
        marks = s.block_marks
        gradient, x, marked, best, pixel, *values = cdk.launch_update(
            ints, floats, s.gradient, s.x, marks if marks is not None else s.lipschitz, s.kernel, blocks,
            constant=marks is not None, **options)
        live = ints[4] != 0
        s = s._replace(
            x=x, gradient=gradient, block_best=best, block_pixel=pixel, block_values=tuple(values),
            fun=jnp.where(live, floats[4], s.fun),  # 0 * inf: a step that does not run on a map gone non-finite
            fun_trace=fun_trace, steps=steps, iteration=s.iteration + live.astype(jnp.int32),
            exact=jnp.where(live, verified, s.exact),
        )
        return (s._replace(block_marks=marked) if marks is not None else s._replace(lipschitz=marked)), live

    def _step_where(self, problem: Deconvolution, state: CDState, live: jax.Array, may_refresh: bool = True) -> CDState:
        """One iteration; where ``live`` is False, none (the state is unchanged: the kernel form's
        loop runs a fixed number of these per trip, see run_chunk).  ``may_refresh`` False: the
        caller guarantees no refresh is due where ``live``."""
        geo = self._geometry(problem)
        s = state
        if may_refresh:
            refreshed = live & self._refresh_due(s)
            s = self._refreshed_if(problem, s, refreshed)
            verified = refreshed & (jnp.max(s.block_best) <= s.tolerance)  # that step changes nothing; done()
        else:
            verified = jnp.asarray(False)
        plan = self.kernel_plan()
        if plan.use_pallas and cdk.pick_in_kernel(geo):
            return self._kernel_step(problem, s, live, verified, check=False)[0]
        mesh = None if plan.use_pallas else patches.row_mesh()  # the XLA form split in row patches
        if mesh is not None:  # each patch's best, then one all-gather (patches.py)
            i, j, _, (g, old, signed) = patches.pick(mesh, geo, s.block_best, s.block_pixel, (s.gradient, s.x, s.lipschitz))
            lip = jnp.abs(signed)
        else:
            i, j, _ = greedy.pick(s.block_best, s.block_pixel, geo)
        if plan.use_pallas:  # the kernel left (g, x, |L|) of each block's best pixel: no gather from the maps
            best_block = jnp.argmax(s.block_best)
            g, old, lip = (v.reshape(-1)[best_block] for v in s.block_values)
        elif mesh is None:
            g, old, signed = s.gradient[i, j], s.x[i, j], s.lipschitz[i, j]
            lip = jnp.abs(signed)
        new = jnp.where(live & ~verified, proximal_step(g, old, lip, self.lam, self.alpha), old)
        d = new - old
        change = objective_change(g, old, new, lip, self.lam, self.alpha)
        values = None
        marks = s.block_marks
        lipschitz = s.lipschitz
        if plan.use_pallas:  # x[i, j], its mark (in L or the block marks), the map and the block maxima: one launch
            gradient, x, marked, best, pixel, *values = cdk.update_and_rescan(
                s.gradient, s.x, None if marks is not None else s.lipschitz, s.kernel,
                (s.block_best, s.block_pixel, *s.block_values), d, new, lip, i, j, live, marks=marks,
                **self._update_options(problem),
            )
            if marks is not None:
                marks = marked
            else:
                lipschitz = marked
            values = tuple(values)
        elif mesh is not None:  # each device its patch: the pixel, the shifted autocorrelation, its blocks
            (gradient, x, lipschitz), best, pixel = patches.update(
                mesh, geo, self._score_fn(), (s.gradient, s.x, s.lipschitz), s.kernel, d, i, j, {1: new, 2: -lip},
                s.block_best, s.block_pixel,
            )
        else:
            x = s.x.at[i, j].set(new)
            lipschitz = s.lipschitz.at[i, j].set(-lip)  # x[i, j] may now be non-zero
            gradient, start = greedy.subtract_kernel(s.gradient, s.kernel, d, i, j, geo)
            best, pixel = greedy.rescan(self._score_fn(), (gradient, x, lipschitz), s.block_best, s.block_pixel, start, geo)
        objective = jnp.where(live, s.fun + change, s.fun)  # 0 * inf, a step that does not run on a map gone non-finite
        k = s.iteration
        return s._replace(
            x=x, gradient=gradient, lipschitz=lipschitz, block_best=best, block_pixel=pixel, block_values=values,
            block_marks=marks, fun=objective,
            fun_trace=s.fun_trace.at[k].set(jnp.where(live, objective, s.fun_trace[k])),
            steps=s.steps.at[k].set(jnp.where(live, jnp.abs(d), s.steps[k])), iteration=k + live.astype(jnp.int32),
            exact=jnp.where(live, verified, s.exact),
        )

    def convert_checkpoint(self, fresh_state: CDState, saved_layout: list[str], leaves: list[np.ndarray]) -> list | None:
        """A checkpoint whose update kernel only was laid out by another version: this start's kernel
        (the same, from the same PSF).  Not converted: a checkpoint of other blocks or of the other form (its gradient map and
        block arrays would have to be rebuilt from the model) is refused here, before its arrays
        could be padded into this state's and resume a wrong run.  A PSF spectrum of another
        shape (``fp``, the last leaf; the problem is the same, checked before) was written by
        another version of multiwalk, whose refreshes used another FFT grid."""
        fresh = jax.tree_util.tree_leaves(fresh_state)
        differ = [k for k, (a, b) in enumerate(zip(fresh, leaves)) if np.shape(a) != np.shape(b)]
        at = CDState._fields.index("kernel")  # its leaf too: the fields before it are never None
        if saved_layout == ["CDState"] and len(fresh) == len(leaves) and differ == [at]:
            # Only the update's kernel (a function of the PSF) differs: its rows were laid out by
            # another version (coordinate_descent_kernel.padded_kernel); this start's is the same kernel.
            return [*leaves[:at], np.asarray(fresh[at]), *leaves[at + 1:]]
        saved_fp, fp = np.shape(leaves[-1]), np.shape(fresh_state.fp)
        if saved_layout == ["CDState"] and saved_fp != fp:
            raise ValueError(
                f"this CoordinateDescent checkpoint was written by another version of multiwalk: its PSF spectrum "
                f"is {saved_fp[0]} x {saved_fp[1]} (another FFT grid), this version's {fp[0]} x {fp[1]} (the compact "
                "grid, docs/deconvolution.md); it cannot resume here: start the run anew, or resume it with the "
                "version that wrote it"
            )
        raise ValueError(
            "this CoordinateDescent checkpoint was written with other blocks or by the other form of the update "
            f"(kernel='xla' or the Pallas kernel; now kernel={self.kernel!r}, block={self.block!r}, "
            f"{self.kernel_plan().name}){_saved_blocks(leaves)}: resume with the kernel= and block= it was written "
            "with, on the kind of machine that wrote it (kernel='auto' picks the Pallas kernel on a GPU only)"
        )

    def done(self, problem: Deconvolution, state: CDState, phase: int) -> jax.Array:
        # The max through argmax: the same reduction as the next step's pick, which XLA then shares
        # (split in patches: the max, one scalar all-reduce; the argmax would gather the block maxima).
        if patches.row_mesh() is not None:
            best = jnp.max(state.block_best)
        else:
            best = state.block_best.reshape(-1)[jnp.argmax(state.block_best)]
        # ``exact``: the map is the initial (FFT) one, or a refresh just confirmed the tolerance.
        return (best <= state.tolerance) & state.exact

    def exact_max_step(self, problem: Deconvolution, model: Any, residual: Any, psf: Any = None,
                       fp: Any = None) -> jax.Array:
        """The largest proximal step of any pixel of ``model`` (N x M) on the exact gradient map of
        its ``residual`` (``dirty - (model - start) * PSF``, N x M): one FFT correlation, a 0-d
        array on the device (``psf``: the problem's, on the device, and ``fp`` its spectrum,
        unless given)."""
        psf = problem.device_images()[1] if psf is None else psf
        fp = psf_spectrum(psf, problem.shape) if fp is None else fp
        residual, model, lam, alpha = (jnp.asarray(a, problem.dtype) for a in (residual, model, self.lam, self.alpha))
        return _max_step(residual, model, psf, fp, lam, alpha)

    def summary(self, problem: Deconvolution, state: CDState) -> dict[str, jax.Array]:
        return {"objective": state.fun, "max_step": jnp.max(state.block_best)}

    def _diverged(self, problem: Deconvolution, objective: float) -> str | None:
        """Why the run's model is worse than its start (the exact objective not finite, or above the
        start's ``0.5 ||dirty||^2 + penalty(start)``), or None.  Exact updates never raise the
        objective; ``update_window``'s truncated ones can, and with a PSF whose side lobes reach far
        past the window they overshoot until the model diverges.  Both objectives are sums of N x M
        terms in the images' precision, each rounded by up to ~sqrt(N M) ulps: a run that barely
        moves (a warm start near the optimum) may end a few ulps above its start without having
        diverged, so that much is allowed (a diverging run ends orders of magnitude above)."""
        if self.update_window is None and np.isfinite(objective):
            return None
        dirty, _, start = problem.device_images()
        at_start = float(self._start_objective(dirty, start))
        rounding = 4 * float(np.finfo(problem.dirty.dtype).eps) * np.sqrt(problem.dirty.size) * abs(at_start)
        if np.isfinite(objective) and objective <= at_start + rounding:
            return None
        return (f"diverged: the exact objective at the end, {objective:.4g}, is above the start's {at_start:.4g}"
                + (f"; update_window={self.update_window} is an approximation that overshoots here: use a larger "
                   "update_window, or None (exact updates)" if self.update_window is not None else ""))

    def result(
        self, problem: Deconvolution, state: CDState, done: list[int], status: Status, stats: dict[str, Any]
    ) -> DeconvolutionResult:
        iterations = int(state.iteration)
        model, residual, objective, max_step = final_model(
            problem, state.x, self._penalty, lambda x, r, psf, fp: self.exact_max_step(problem, x, r, psf, fp))
        tolerance, refreshes = float(state.tolerance), int(state.refreshes)
        diverged = self._diverged(problem, objective)
        if diverged is not None and status in (Status.SUCCESS, Status.MAX_STEPS):
            status = Status.FAILED
        message = status.describe({
            Status.FAILED: diverged or "failed",
            Status.SUCCESS: f"converged: on the exact gradient map no pixel can change by more than {tolerance:.3g} "
            f"Jy/pixel (epsilon={self.epsilon:g} of the image's scale; {iterations} iterations, {refreshes} exact maps)",
            Status.MAX_STEPS: f"a pixel can still change by {max_step:.3g} > {tolerance:.3g} Jy/pixel (epsilon="
            f"{self.epsilon:g} of the image's scale) after max_iterations={self.max_iterations}: raise max_iterations",
        })
        plan = self.kernel_plan()
        history = np.asarray(state.fun_trace[:iterations])
        stats = dict(stats, iterations=iterations, kernel=plan.name, kernel_reason=plan.reason, max_step=max_step,
                     tolerance=tolerance, refreshes=refreshes)
        if self.update_window is not None:
            # The truncated update's history is an estimate between refreshes (module doc).
            jumps = np.diff(history) > 0
            stats["refresh_increases"] = int(jumps.sum())
            if jumps.any():
                message += (
                    f"; update_window={self.update_window} is an approximation: at {int(jumps.sum())} refreshes the exact "
                    f"objective was above the tracked estimate (by up to {float(np.diff(history)[jumps].max()):.4g})"
                )
        return DeconvolutionResult(
            x=model, fun=objective, status=status, message=message, stats=stats, model=model, residual=residual,
            iterations=iterations, fun_trace=history, steps=np.asarray(state.steps[:iterations]),
        )
