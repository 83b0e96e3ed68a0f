"""The result of a minor-cycle solver: model, residual, iteration history."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from ..result import Result, to_host
from . import greedy
from .problem import Deconvolution

__all__ = ["DeconvolutionResult", "final_model", "psf_spectrum"]


@dataclass(repr=False)
class DeconvolutionResult(Result):
    """``x`` and ``model`` : the model image (N x M, Jy/pixel); ``fun`` : the objective at it.

    ``residual`` : ``dirty - model * PSF`` (N x M), computed exactly by FFT at the end.
    ``iterations`` : minor iterations run.
    ``fun_trace`` : (iterations,) the solver's objective after each iteration (coordinate
    descent: the elastic-net objective; CLEAN: ``None``, it minimises none); ``objective`` is
    the same array.
    ``steps`` : (iterations,) size of each iteration's change: |pixel change| (coordinate
    descent) or |residual peak| (CLEAN).
    """

    model: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    residual: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    iterations: int = 0
    fun_trace: np.ndarray | None = None
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def objective(self) -> np.ndarray | None:
        """The same as ``fun_trace`` (iterations,): the objective after each iteration (None for CLEAN)."""
        return self.fun_trace


@functools.partial(jax.jit, static_argnums=1)
def psf_spectrum(psf: jax.Array, image_shape: tuple[int, int]) -> jax.Array:
    """The PSF's spectrum on the compact grid of an image of ``image_shape`` (``greedy.compact_psf_fft``),
    made once for a result's exact maps."""
    return greedy.compact_psf_fft(psf, image_shape)


@jax.jit
def _residual(dirty: jax.Array, psf: jax.Array, fp: jax.Array, change: jax.Array) -> jax.Array:
    """``dirty - change * PSF`` (N x M), by FFT on the compact grid (``greedy.compact_fft_shape``;
    ``fp``: :func:`psf_spectrum`, ``psf`` for its side)."""
    size = greedy.compact_fft_shape(dirty.shape, psf.shape[0])
    return dirty - greedy.convolve_compact(change, fp, size)


def final_model(
    problem: Deconvolution, x: jax.Array, penalty: Callable[[jax.Array], jax.Array] | None,
    exact_step: Callable[[jax.Array, jax.Array, jax.Array, jax.Array], jax.Array] | None = None,
) -> tuple[np.ndarray, np.ndarray, float, float | None]:
    """``(model, residual, objective, step)`` at a run's end: the solver's image ``x`` (padded to at
    least N x M) cut to the problem's N x M; the exact residual ``dirty - (model - start) * PSF``
    by FFT; the objective ``0.5 ||residual||^2 + penalty(model)``; and ``exact_step(model,
    residual, psf, fp)`` (a solver's test on the exact maps, ``fp`` the PSF's :func:`psf_spectrum`
    made once for both; None without it).  All of it is computed
    on the device from the problem's copies there (:meth:`Deconvolution.device_images`: no image
    is sent again), and the two images come back through pinned memory
    (:func:`~multiwalk.result.to_host`: on a GPU, tens of times faster than a copy into pageable
    memory for these images of tens of MB)."""
    n, m = problem.shape
    dirty, psf, start = problem.device_images()
    model = x[:n, :m]
    fp = psf_spectrum(psf, (n, m))
    residual = _residual(dirty, psf, fp, model - start)
    value = 0.5 * jnp.sum(residual * residual)
    if penalty is not None:
        value = value + penalty(model)
    step = None if exact_step is None else exact_step(model, residual, psf, fp)
    scalars = jax.device_get((value, step))  # one wait for both numbers
    return to_host(model), to_host(residual), float(scalars[0]), None if step is None else float(scalars[1])
