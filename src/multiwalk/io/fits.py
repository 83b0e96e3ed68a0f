"""FITS images and arrays with astropy: images carry a celestial WCS header (SIN projection)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["write_image", "read_image", "read_array"]


def write_image(
    path: str | os.PathLike, image: np.ndarray, cell: float, *, ra: float = 0.0, dec: float = 0.0, freq: float | None = None,
    unit: str = "Jy/beam", beam: tuple[float, float, float] | None = None, overwrite: bool = True,
) -> Path:
    """Write a 2-D image (rows top-down, as displayed) with a WCS header.

    ``cell``, ``ra``, ``dec`` in radians; the phase centre is ducc0's centre pixel, which the
    display orientation of :mod:`multiwalk.deconv.major_cycle` puts at row N/2 - 1, column M/2
    (from 0), i.e. FITS pixel (M/2 + 1, N/2 + 1); ``beam`` = (sigma_major, sigma_minor [pixels], angle [rad]) gives
    BMAJ/BMIN/BPA (FWHM, degrees).  FITS stores rows bottom-up, so the rows are flipped."""
    from astropy.io import fits
    from astropy.wcs import WCS

    image = np.asarray(image)
    if image.ndim != 2:
        raise ValueError(f"image must be 2-D, got shape {image.shape}")
    n, m = image.shape
    w = WCS(naxis=2)
    w.wcs.ctype = ["RA---SIN", "DEC--SIN"]
    w.wcs.cunit = ["deg", "deg"]
    w.wcs.crval = [math.degrees(ra) % 360.0, math.degrees(dec)]
    w.wcs.cdelt = [-math.degrees(cell), math.degrees(cell)]
    # display row r is FITS row n - 1 - r (from 0): the centre row n/2 - 1 is FITS row n/2, 1-based n/2 + 1
    w.wcs.crpix = [m // 2 + 1, n // 2 + 1]
    header = w.to_header()
    header["BUNIT"] = unit
    if freq is not None:
        header["RESTFRQ"] = float(freq)
    if beam is not None:
        fwhm = 2.0 * math.sqrt(2.0 * math.log(2.0)) * math.degrees(cell)
        header["BMAJ"], header["BMIN"] = beam[0] * fwhm, beam[1] * fwhm
        header["BPA"] = math.degrees(beam[2])
    path = Path(path)
    fits.PrimaryHDU(data=np.ascontiguousarray(image[::-1], np.float32), header=header).writeto(path, overwrite=overwrite)
    return path


def read_image(path: str | os.PathLike) -> tuple[np.ndarray, Any]:
    """(image rows top-down, astropy WCS of the FITS layout) from a FITS image; extra axes of length 1 dropped."""
    from astropy.wcs import WCS

    data, header = _read(path)
    data = np.squeeze(data)
    if data.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D image (after dropping axes of length 1), got shape {data.shape}")
    return np.asarray(data[::-1], np.float64), WCS(header, naxis=2)


def read_array(path: str | os.PathLike, shape_hint: str = "") -> np.ndarray:
    """The primary array of a FITS file (native byte order, float64)."""
    data, _ = _read(path, shape_hint)
    return np.asarray(data, dtype=np.float64)


def _read(path: str | os.PathLike, shape_hint: str = "") -> tuple[np.ndarray, Any]:
    from astropy.io import fits

    try:
        with fits.open(path) as hdul:
            hdu = next((h for h in hdul if h.data is not None), None)
            if hdu is None:
                raise ValueError(f"{path}: no data in any HDU{' (expected ' + shape_hint + ')' if shape_hint else ''}")
            return np.array(hdu.data), hdu.header.copy()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except OSError as err:
        raise ValueError(f"{path}: not a readable FITS file: {err}") from err
