"""The major cycle: from visibilities to model, residual and restored images.

ducc0's wgridder grids the visibilities to the dirty image (``vis2dirty``, with w-correction)
and predicts visibilities of a model image (``dirty2vis``, its adjoint).  Each major cycle
images the residual visibilities, runs a minor-cycle solver (coordinate descent or CLEAN, warm
started from the current model) on that image with the PSF, and subtracts the new model's
predicted visibilities from the measured ones, which removes the minor cycle's approximations.
The restored image is the model convolved with a Gaussian fitted to the PSF's main lobe (the
clean beam), plus the final residual.  Images are in sky order, the layout of a FITS image (see
the note above ``CONVENTIONS``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.ndimage
import scipy.optimize
import scipy.signal

from ..result import NOT_SAVED, Result, Status
from ..solve import solve
from ..solvers.base import Solver
from .problem import Deconvolution
from .result import DeconvolutionResult

__all__ = ["image", "ImagingResult", "fit_beam", "restore", "grid", "predict"]


def _ducc0():
    try:
        import ducc0.wgridder
    except ImportError as err:  # pragma: no cover - ducc0 is a dependency; a broken install says so
        raise ImportError("multiwalk.deconv.image needs ducc0 (pip install ducc0)") from err
    return ducc0.wgridder


def _threads() -> int:
    """ducc0's threads: the CPUs this process may use."""
    from _multiwalk_launch import default_workers

    return default_workers()


# Image layout ("sky order", the FITS / astropy array order): ``image[row, col]`` with the row the
# declination axis, north increasing with the row, and the column the right-ascension axis, east
# at column 0 (RA decreasing with the column, as in a FITS image with CDELT1 < 0).  The phase
# centre is pixel (npix // 2, npix // 2) (FITS CRPIX = npix // 2 + 1), a 2n x 2n PSF peaks at (n, n).
# Pixel (row, col) is the direction (l, m) = (-(col - npix // 2) * cell, (row - npix // 2) * cell),
# l the direction cosine towards east and m towards north.
#
# ducc0's wgridder images dirty[ix, iy] = sum_k V_k exp(+2 pi i (u_k x + v_k y - w_k (n - 1)))
# at x = (ix - npix / 2) * cell, y = (iy - npix / 2) * cell, with u, v, w negated where flip_u,
# flip_v, flip_w.  Imaging is the adjoint of the measurement equation,
#   "casa":    V = sum I(l, m) exp(+2 pi i (u l + v m + w (n - 1))) (Measurement Sets, as CASA images them),
#   "fourier": V = sum I(l, m) exp(-2 pi i (u l + v m + w (n - 1))) (Thompson, Moran & Swenson),
# so, with x = -l and y = m (east at column 0), the flips (u, v, w) below give sky order after a transpose.
CONVENTIONS = {"casa": (False, True, False), "fourier": (True, False, True)}


def _flips(convention: str) -> dict[str, bool]:
    """ducc0's flip_u/v/w for ``convention``; ValueError naming the argument otherwise."""
    if convention not in CONVENTIONS:
        raise ValueError(
            f"convention must be one of {sorted(CONVENTIONS)} (the sign of the visibilities' phase), got {convention!r}"
        )
    return dict(zip(("flip_u", "flip_v", "flip_w"), CONVENTIONS[convention]))


def grid(vis: np.ndarray, uvw: np.ndarray, freqs: np.ndarray, weights: np.ndarray, npix: int, cell: float,
         epsilon: float = 1e-7, convention: str = "casa") -> np.ndarray:
    """The dirty image (npix x npix, Jy/beam, sky order: see above): ``vis2dirty`` with w-correction,
    divided by the weight sum.  ``convention``: the visibilities' phase sign (see ``CONVENTIONS``).

    A point source of flux S at a pixel centre gives a peak S (the PSF peak is 1)."""
    flips = _flips(convention)
    uvw, freqs, weights = (np.ascontiguousarray(a, np.float64) for a in (uvw, freqs, weights))  # native byte order
    dirty = _ducc0().vis2dirty(
        uvw=uvw, freq=freqs, vis=np.ascontiguousarray(vis, np.complex128), wgt=weights, npix_x=npix, npix_y=npix,
        pixsize_x=cell, pixsize_y=cell, epsilon=epsilon, do_wgridding=True, nthreads=_threads(), **flips,
    )
    return np.asarray(dirty, np.float64).T / float(weights.sum())


def predict(model: np.ndarray, uvw: np.ndarray, freqs: np.ndarray, cell: float, epsilon: float = 1e-7,
            convention: str = "casa") -> np.ndarray:
    """Model visibilities (nrow x nchan) of a model image (Jy/pixel, sky order): ``dirty2vis``, the
    adjoint of :func:`grid`'s gridding, with w-correction."""
    flips = _flips(convention)
    return _ducc0().dirty2vis(
        uvw=np.ascontiguousarray(uvw, np.float64), freq=np.ascontiguousarray(freqs, np.float64),
        dirty=np.ascontiguousarray(np.asarray(model, np.float64).T), pixsize_x=cell, pixsize_y=cell, epsilon=epsilon,
        do_wgridding=True, nthreads=_threads(), **flips,
    )


def fit_beam(psf: np.ndarray) -> tuple[float, float, float]:
    """A Gaussian fitted to the PSF's main lobe (sky order, square pixels): (sigma_major,
    sigma_minor in pixels, position angle of the major axis in radians, north through east, in
    (-pi/2, pi/2]) -- the clean beam; FITS BPA is this angle in degrees.

    The main lobe is the connected region around the peak above half of it; the fit is a least
    squares fit of exp(-q/2) there (q the quadratic form of the ellipse)."""
    c = psf.shape[0] // 2
    peak = psf[c, c]
    labels, _ = scipy.ndimage.label(psf > 0.5 * peak)
    rows, cols = np.nonzero(labels == labels[c, c])
    east, north = -(cols - c), rows - c  # sky order: east at column 0, north up the rows
    values = psf[rows, cols] / peak

    def model(params: np.ndarray) -> np.ndarray:
        a, b, d = params  # inverse covariance [[a, d], [d, b]] in (east, north)
        return np.exp(-0.5 * (a * east * east + b * north * north + 2 * d * east * north)) - values

    r2 = np.maximum(east * east + north * north, 1)
    guess = 2 * np.log(2) / np.median(r2)  # width of a round beam through the lobe's edge
    fit = scipy.optimize.least_squares(model, [guess, guess, 0.0])
    a, b, d = fit.x
    eig, vec = np.linalg.eigh(np.array([[a, d], [d, b]]))
    sig = 1.0 / np.sqrt(np.maximum(eig, 1e-12))  # eigh sorts ascending: largest sigma first
    position_angle = math.atan2(vec[0, 0], vec[1, 0])  # from north (east, north) = (0, 1) towards east
    if position_angle <= -math.pi / 2 or position_angle > math.pi / 2:  # an axis: PA and PA + pi are one
        position_angle -= math.copysign(math.pi, position_angle)
    return float(sig[0]), float(sig[1]), float(position_angle)


def restore(model: np.ndarray, residual: np.ndarray, beam: tuple[float, float, float]) -> np.ndarray:
    """``model * clean beam + residual`` (Jy/beam, sky order): the beam a unit-peak Gaussian (``fit_beam``)."""
    smaj, smin, position_angle = beam
    half = int(math.ceil(5 * smaj))
    north, cols = np.mgrid[-half : half + 1, -half : half + 1]
    east = -cols
    along = east * math.sin(position_angle) + north * math.cos(position_angle)  # the major axis' direction
    across = east * math.cos(position_angle) - north * math.sin(position_angle)
    kernel = np.exp(-0.5 * ((along / smaj) ** 2 + (across / smin) ** 2))
    return scipy.signal.fftconvolve(model, kernel, mode="same") + residual


@dataclass(repr=False)
class ImagingResult(Result):
    """``model`` (Jy/pixel), ``residual`` and ``restored`` (Jy/beam), ``dirty``, ``psf`` (2 npix square),
    all in sky order (north up the rows, east at column 0); ``beam`` = (sigma_major, sigma_minor
    [pixels], position angle [rad, north through east]), ``minor`` (each cycle's result),
    ``residual_rms`` after each major cycle, ``cell`` [rad]."""

    model: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    residual: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    restored: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    dirty: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    psf: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    beam: tuple[float, float, float] = (0.0, 0.0, 0.0)
    minor: list[DeconvolutionResult] = field(default_factory=list, metadata=NOT_SAVED)  # results, not arrays
    residual_rms: list[float] = field(default_factory=list)
    cell: float = 0.0


def _check(vis: Any, uvw: Any, freqs: Any, npix: Any, cell: Any, weights: Any, major_cycles: Any):
    uvw = np.asarray(uvw, np.float64)
    if uvw.ndim != 2 or uvw.shape[1] != 3:
        raise ValueError(f"uvw must have shape (rows, 3) in metres, got {uvw.shape}")
    freqs = np.atleast_1d(np.asarray(freqs, np.float64))
    if freqs.ndim != 1 or not (freqs > 0).all():
        raise ValueError(f"freqs must be positive channel frequencies in Hz, shape (channels,), got {freqs!r}")
    vis = np.asarray(vis)
    if vis.shape != (uvw.shape[0], freqs.size):
        raise ValueError(f"vis must have shape (rows, channels) = {(uvw.shape[0], freqs.size)} (Stokes I), got {vis.shape}")
    vis = vis.astype(np.complex128)
    if not (np.isfinite(vis).all() and np.isfinite(uvw).all()):
        raise ValueError("vis and uvw must be finite: flag (weight 0) and zero the bad visibilities first")
    if isinstance(npix, bool) or not isinstance(npix, (int, np.integer)) or npix < 32 or npix % 2:
        raise ValueError(f"npix must be an even integer >= 32 (ducc0's gridder), got {npix!r}")
    if not (isinstance(cell, (int, float, np.floating)) and 0 < cell < 0.1):
        raise ValueError(f"cell must be the pixel size in radians (0 < cell < 0.1), got {cell!r}")
    w = np.ones(vis.shape) if weights is None else np.asarray(weights, np.float64)
    if w.shape != vis.shape or not (np.isfinite(w).all() and (w >= 0).all() and w.sum() > 0):
        raise ValueError(f"weights must be finite, >= 0, not all zero, of shape {vis.shape}")
    if isinstance(major_cycles, bool) or not isinstance(major_cycles, (int, np.integer)) or major_cycles < 1:
        raise ValueError(f"major_cycles must be a positive integer, got {major_cycles!r}")
    return vis, uvw, freqs, w


def image(
    vis: Any, uvw: Any, freqs: Any, npix: int, cell: float, solver: Solver, *, major_cycles: int = 3,
    weights: Any = None, convention: str = "casa", progress: bool | None = None, time_limit: float | None = None,
) -> ImagingResult:
    """Deconvolve visibilities by major cycles around ``solver`` (``BlockCoordinateDescent``,
    ``CoordinateDescent`` or ``Clean``).

    Parameters
    ----------
    vis : (rows, channels) complex Stokes I visibilities (Jy).
    uvw : (rows, 3) baseline coordinates in metres (u towards east, v towards north).
    freqs : (channels,) frequencies in Hz.
    npix : image side in pixels (even, >= 32); cell : pixel size in radians.
    solver : the minor-cycle solver, run by :func:`multiwalk.solve` once per major cycle.
    major_cycles : number of major cycles (fewer if a minor cycle changes nothing).
    weights : (rows, channels) imaging weights (default 1: natural weighting).
    convention : the visibilities' phase sign, ``"casa"`` (Measurement Sets: V = sum I exp(+2 pi i
        (ul + vm + w(n - 1)))) or ``"fourier"`` (the exponent's sign negative); see ``CONVENTIONS``.

    The images are in sky order (``image[row, col]``: north up the rows, east at column 0, the
    phase centre at (npix // 2, npix // 2)), the layout of a FITS image with CDELT1 < 0.
    time_limit : seconds for each minor cycle (see :func:`multiwalk.solve`).
    """
    from .block_coordinate_descent import BlockCoordinateDescent
    from .clean import Clean
    from .coordinate_descent import CoordinateDescent

    if not isinstance(solver, (BlockCoordinateDescent, CoordinateDescent, Clean)):
        raise TypeError(
            "solver must be mw.deconv.BlockCoordinateDescent(...), mw.deconv.CoordinateDescent(...) or "
            f"mw.deconv.Clean(...), got {type(solver).__name__}"
        )
    vis, uvw, freqs, w = _check(vis, uvw, freqs, npix, cell, weights, major_cycles)
    dirty = grid(vis, uvw, freqs, w, npix, cell, convention=convention)
    psf = grid(np.ones_like(vis), uvw, freqs, w, 2 * npix, cell, convention=convention)  # peak 1 at (npix, npix) = P//2
    model = np.zeros((npix, npix))
    residual = dirty
    minor: list[DeconvolutionResult] = []
    rms: list[float] = []
    status = Status.SUCCESS
    for _ in range(major_cycles):
        r = solve(Deconvolution(residual, psf, model=model), solver, progress=progress, time_limit=time_limit)
        minor.append(r)
        changed = r.iterations > 0
        model = np.asarray(r.model, np.float64)
        residual = grid(vis - predict(model, uvw, freqs, cell, convention=convention), uvw, freqs, w, npix, cell,
                        convention=convention)
        rms.append(float(np.sqrt(np.mean(residual**2))))
        if r.status in (Status.INTERRUPTED, Status.TIME_LIMIT):
            status = r.status
            break
        if not changed:
            break
    beam = fit_beam(psf)
    restored = restore(model, residual, beam)
    last = minor[-1]
    message = (
        f"{len(minor)} major cycles, {sum(m.iterations for m in minor)} minor iterations; "
        f"residual rms {rms[-1]:.4g} (dirty rms {float(np.sqrt(np.mean(dirty**2))):.4g}); last minor cycle: {last.message}"
    )
    if status == Status.SUCCESS and not last.success:
        status = last.status
    return ImagingResult(
        x=model, fun=float(last.fun), status=status, message=message,
        stats={"major_cycles": len(minor), "minor_iterations": [m.iterations for m in minor]},
        model=model, residual=residual, restored=restored, dirty=dirty, psf=psf, beam=beam, minor=minor,
        residual_rms=rms, cell=float(cell),
    )
