"""Radio image deconvolution: the minor cycle (block or serial coordinate descent, Hogbom CLEAN) and the major cycle.

>>> import multiwalk as mw
>>> r = mw.solve(mw.deconv.Deconvolution(dirty, psf), mw.deconv.BlockCoordinateDescent(lam=0.01, alpha=1.0))
>>> r.model, r.residual, r.iterations, r.fun_trace, r.status

``image(vis, uvw, freqs, npix, cell, solver)`` runs major cycles from visibilities (ducc0's
wgridder), imported lazily so the minor cycle needs neither ducc0 nor astropy.
"""

from __future__ import annotations

from typing import Any

from .block_coordinate_descent import BlockCoordinateDescent
from .clean import Clean
from .coordinate_descent import CoordinateDescent, proximal_step
from .problem import Deconvolution
from .result import DeconvolutionResult

__all__ = [
    "Deconvolution", "CoordinateDescent", "BlockCoordinateDescent", "Clean", "DeconvolutionResult", "image", "proximal_step",
]


def image(*args: Any, **kwargs: Any) -> Any:
    """Major cycles from visibilities; see :func:`multiwalk.deconv.major_cycle.image`."""
    from .major_cycle import image as _image

    return _image(*args, **kwargs)


image.__doc__ = "Major cycles from visibilities; see multiwalk.deconv.major_cycle.image (ducc0 gridding)."
