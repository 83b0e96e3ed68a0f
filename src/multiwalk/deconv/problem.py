"""`Deconvolution(dirty, psf)`: the image problem the minor-cycle solvers run.

The model is the zero-padded convolution of the seed (coordinate-descent deconvolution, P9):

    (x * PSF)[i, j] = sum_kl x[k, l] PSF[i - k + P//2, j - l + P//2],   i, j and k, l in the image,

with the PSF zero outside its P x P support and the convolution cropped to the image, so a
source near an edge spreads only the part of its PSF that falls inside.  Everything is checked
here, before anything is compiled.
"""

from __future__ import annotations

import hashlib
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["Deconvolution"]


def _image(name: str, value: Any, dtype: np.dtype) -> np.ndarray:
    """A finite 2-D float array, or a ValueError/TypeError naming ``name``."""
    try:
        arr = np.asarray(value)
    except Exception as err:  # noqa: BLE001 - anything numpy cannot take is a type error for the user
        raise TypeError(f"{name} must be a 2-D array of numbers, got {type(value).__name__}") from err
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must be a 2-D array of numbers, got an array of dtype {arr.dtype}")
    if np.iscomplexobj(arr):
        raise TypeError(f"{name} must be real (an image), got complex values: pass its real part (Stokes I)")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (rows x columns), got shape {arr.shape}: squeeze or select one plane")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape})")
    bad = ~np.isfinite(arr)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(
            f"{name} has {int(bad.sum())} non-finite values (NaN or inf), the first at [{i}, {j}] = {arr[i, j]}: "
            "replace them (e.g. with 0) before deconvolving"
        )
    return arr.astype(dtype)


class Deconvolution:
    """Deconvolve ``dirty`` (N x M) by ``psf`` (P x P, peak at ``(P//2, P//2)``).

    Parameters
    ----------
    dirty : the dirty image, N x M (Jy/beam).
    psf : the point-spread function (dirty beam), P x P with its maximum at ``(P//2, P//2)``,
        normally 1 there.  P may be up to ``2 * max(N, M)``: a PSF twice the image size lets a
        source anywhere reach every pixel.
    model : a starting model (N x M), for which ``dirty`` is the residual image (the major
        cycle's warm start): the solvers then minimise ``0.5 ||dirty - (x - model) * PSF||^2 + penalty(x)``
        from ``x = model``.  Default: zeros, ``dirty`` the dirty image itself.
    dtype : float32 (default: JAX's default float) or float64 (needs ``jax_enable_x64``).

    Solve with ``mw.solve(Deconvolution(dirty, psf), mw.deconv.CoordinateDescent(lam=..., alpha=...))``
    or ``mw.deconv.Clean(...)``.
    """

    def __init__(self, dirty: Any, psf: Any, *, model: Any = None, dtype: Any = None) -> None:
        default = np.dtype(jnp.result_type(float))
        dt = default if dtype is None else np.dtype(dtype)
        if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValueError(f"dtype must be float32 or float64, got {dt}")
        if dt == np.float64 and default != np.float64:
            raise ValueError("dtype=float64 needs jax.config.update('jax_enable_x64', True) before any array is made")
        self.dirty = _image("dirty", dirty, dt)
        self.psf = _image("psf", psf, dt)
        n, m = self.dirty.shape
        p, q = self.psf.shape
        if p != q:
            raise ValueError(f"psf must be square (P x P), got shape {self.psf.shape}: crop it to P x P around its peak")
        if p > 2 * max(n, m):
            raise ValueError(
                f"psf is {p} x {p}, larger than twice the image ({n} x {m}): only its central "
                f"{2 * max(n, m) - 1} x {2 * max(n, m) - 1} can reach the image, crop it to that around the peak"
            )
        c = p // 2
        peak = np.unravel_index(int(np.argmax(self.psf)), self.psf.shape)
        if self.psf[c, c] <= 0 or self.psf[c, c] < self.psf[peak]:
            raise ValueError(
                f"psf must have its positive maximum at the centre (P//2, P//2) = ({c}, {c}); "
                f"its maximum {float(self.psf[peak]):.6g} is at {tuple(int(v) for v in peak)} and psf[{c}, {c}] = "
                f"{float(self.psf[c, c]):.6g}: shift it (np.roll) so the peak is at the centre"
            )

        if model is None:
            self.model = np.zeros_like(self.dirty)
        else:
            self.model = _image("model", model, dt)
            if self.model.shape != self.dirty.shape:
                raise ValueError(f"model has shape {self.model.shape} but dirty has {self.dirty.shape}: they must match")
        # The images are this problem's own copies (``_image``), read-only so that the copies kept
        # on the device (``device_images``) and the PSF's power stay theirs: new images, a new problem.
        for image in (self.dirty, self.psf, self.model):
            image.flags.writeable = False
        self._device_images: tuple[Any, Any, Any] | None = None
        self._psf_power: float | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("dirty", "psf", "model") and name in self.__dict__:
            raise AttributeError(f"Deconvolution.{name} cannot be replaced: make a new Deconvolution for new images")
        super().__setattr__(name, value)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _device_images=None)  # the device copies are made again where unpickled

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled (or deep-copied) arrays come back writable: read-only again, as the kept PSF power needs.
        self.__dict__.update(state)
        for name in ("dirty", "psf", "model"):
            state[name].flags.writeable = False

    def device_images(self) -> tuple[Any, Any, Any]:
        """``(dirty, psf, model)`` as JAX arrays on the default device, put there on the first call
        and kept: a solver's start and its result's exact residual read them, so a second solve of
        this problem sends no image to the device (3 N^2 values: 0.2 GB at 4096^2 in float32)."""
        if self._device_images is None:
            import jax

            self._device_images = tuple(jax.device_put(image) for image in (self.dirty, self.psf, self.model))
        return self._device_images

    def psf_power(self) -> float:
        """``sum PSF^2``, summed in float64 once (every pixel's Lipschitz constant for a PSF that reaches
        the whole image; what CoordinateDescent uses)."""
        if self._psf_power is None:
            self._psf_power = float(np.sum(np.asarray(self.psf, np.float64) ** 2))
        return self._psf_power

    @property
    def shape(self) -> tuple[int, int]:
        """The image shape (N, M)."""
        return (int(self.dirty.shape[0]), int(self.dirty.shape[1]))

    @property
    def dtype(self) -> np.dtype:
        return self.dirty.dtype

    def fingerprint(self) -> str:
        """What compiled code depends on (for the driver's cache): shapes and dtype only, because
        the solvers take the images as arguments of their initial state, never as constants."""
        return hashlib.blake2b(repr((self.dirty.shape, self.psf.shape, str(self.dtype))).encode(), digest_size=16).hexdigest()

    def __repr__(self) -> str:
        n, m = self.shape
        p = self.psf.shape[0]
        return f"Deconvolution(dirty {n} x {m}, psf {p} x {p}, {self.dtype})"
