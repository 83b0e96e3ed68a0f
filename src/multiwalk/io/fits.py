"""FITS images and arrays with astropy: images carry a celestial WCS header (SIN projection)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["image_wcs", "write_image", "read_image", "read_array", "read_phase_centre"]


def image_wcs(shape: tuple[int, int], cell: float, ra: float, dec: float) -> Any:
    """The astropy WCS of an image in sky order (``image[row, col]``, north up the rows, east at
    column 0, as :mod:`multiwalk.deconv` makes them): SIN projection about (``ra``, ``dec``) at
    pixel (row, col) = (N // 2, M // 2), i.e. FITS CRPIX = (M // 2 + 1, N // 2 + 1); ``cell``,
    ``ra``, ``dec`` in radians.  ``wcs.pixel_to_world(col, row)`` is then the sky position of
    ``image[row, col]``."""
    from astropy.wcs import WCS

    n, m = shape
    w = WCS(naxis=2)
    w.wcs.ctype = ["RA---SIN", "DEC--SIN"]
    w.wcs.cunit = ["deg", "deg"]
    w.wcs.crval = [math.degrees(ra) % 360.0, math.degrees(dec)]
    w.wcs.cdelt = [-math.degrees(cell), math.degrees(cell)]  # RA grows to the east, at column 0
    w.wcs.crpix = [m // 2 + 1, n // 2 + 1]
    return w


def write_image(
    path: str | os.PathLike, image: np.ndarray, cell: float, *, ra: float, dec: float, freq: float | None = None,
    unit: str = "Jy/beam", beam: tuple[float, float, float] | None = None, overwrite: bool = True,
) -> Path:
    """Write a 2-D image in sky order with the WCS of :func:`image_wcs` (``cell``, phase centre
    ``ra``, ``dec`` in radians).  ``beam`` = (sigma_major, sigma_minor [pixels], position angle
    [rad, north through east]), as :func:`multiwalk.deconv.major_cycle.fit_beam` gives it, is
    written as BMAJ/BMIN (FWHM) and BPA, in degrees."""
    from astropy.io import fits

    image = np.asarray(image)
    if image.ndim != 2:
        raise ValueError(f"image must be 2-D, got shape {image.shape}")
    header = image_wcs(image.shape, cell, ra, dec).to_header()
    header["BUNIT"] = unit
    if freq is not None:
        header["RESTFRQ"] = float(freq)
    if beam is not None:
        fwhm = 2.0 * math.sqrt(2.0 * math.log(2.0)) * math.degrees(cell)
        header["BMAJ"], header["BMIN"] = beam[0] * fwhm, beam[1] * fwhm
        header["BPA"] = math.degrees(beam[2])
    path = Path(path)
    fits.PrimaryHDU(data=np.ascontiguousarray(image, np.float32), header=header).writeto(path, overwrite=overwrite)
    return path


def read_image(path: str | os.PathLike) -> tuple[np.ndarray, Any]:
    """(image, astropy WCS) from a FITS image, extra axes of length 1 dropped; the array as FITS
    stores it (``image[row, col]`` is WCS pixel (col, row)), for :func:`write_image`'s images sky order."""
    from astropy.wcs import WCS

    data, header = _read(path)
    data = np.squeeze(data)
    if data.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D image (after dropping axes of length 1), got shape {data.shape}")
    return np.asarray(data, np.float64), WCS(header, naxis=2)


def read_phase_centre(*paths: str | os.PathLike) -> tuple[float, float] | None:
    """The phase centre (RA, Dec in radians) that the primary headers of ``paths`` give in
    OBSRA/OBSDEC (degrees), or None where none does; ValueError where they disagree or give one
    of the two only."""
    from astropy.io import fits

    found: dict[str, tuple[float, float]] = {}
    for path in paths:
        try:
            header = fits.getheader(path)
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no such file") from None
        except OSError as err:
            raise ValueError(f"{path}: not a readable FITS file: {err}") from err
        has = [key in header for key in ("OBSRA", "OBSDEC")]
        if any(has) and not all(has):
            raise ValueError(f"{path}: the header has {'OBSRA' if has[0] else 'OBSDEC'} but not the other; give both or neither")
        if all(has):
            found[os.fspath(path)] = (math.radians(float(header["OBSRA"])), math.radians(float(header["OBSDEC"])))
    centres = list(found.values())
    if any(not np.allclose(c, centres[0], rtol=0, atol=1e-10) for c in centres):
        listed = ", ".join(f"{p}: ({math.degrees(r)} deg, {math.degrees(d)} deg)" for p, (r, d) in found.items())
        raise ValueError(f"the phase centres in the headers disagree: {listed}")
    return centres[0] if centres else None


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
