"""UVFITS visibility files (AIPS random groups): :func:`read_uvfits`, :func:`write_uvfits`.

The file: a primary random-groups HDU, one group per baseline and integration, with the
parameters ``UU, VV, WW`` (seconds of light travel once astropy applies their ``PSCAL``),
``BASELINE`` (``256 ant1 + ant2``, the AN table's station numbers) and ``DATE`` (written as
two parameters, the Julian day and its fraction, which astropy sums), and a data array of
axes ``COMPLEX`` (real, imaginary, weight), ``STOKES``, ``FREQ`` and optionally ``IF``
(``RA`` and ``DEC`` of length 1); an ``AIPS AN`` table with the station names (``ANNAME``),
numbers (``NOSTA``) and geocentric positions (``STABXYZ``, metres).

What the reader makes of it (a :class:`~multiwalk.io.uvdata.UVData`):

* **Stokes I.**  From an ``I`` correlation directly, or from ``RR`` and ``LL`` (``XX`` and
  ``YY``) as the inverse-variance weighted mean ``(w_RR RR + w_LL LL) / (w_RR + w_LL)``, which
  is ``(RR + LL) / 2`` for equal weights, with ``sigma = 1 / sqrt(w_RR + w_LL)`` (a weight is
  ``1 / sigma^2`` of the real and of the imaginary part).  Channels and IFs are combined the same
  way.  ``RL`` / ``LR`` are not read (the EHT releases give them weights 0 or inf).
* **Flags.**  A correlation with a weight that is not positive and finite, or a value that is
  not finite, is flagged; a row whose Stokes I has no unflagged channel with both hands is
  dropped, as are autocorrelations.  ``UVData.dropped`` counts them by reason (also logged).
* **Units and times.**  ``u, v, w`` in gigalambda at the reference frequency (the ``FREQ``
  axis' value at its reference pixel): seconds times that frequency.  ``mjd`` = DATE - 2400000.5.
* **The sign of u, v.**  The stored ``UU, VV`` are the projection of station 1 minus station 2
  (ehtim's convention, with ``V = sum I exp(+2 pi i (u x + v y))``).  multiwalk's models use
  ``V = sum I exp(-2 pi i (u x + v y))`` with x East (``models/xringaus.py``) and the baseline
  ``r2 - r1`` (``eht/simulate.py``), so the reader negates ``u, v, w`` and keeps ``V``: the same
  visibility of the same baseline.  Without it a fitted image comes out turned by 180 degrees.
  The writer negates them back.

Options of :func:`read_uvfits` apply, in this order, the edits of :mod:`multiwalk.io.uvprep`:
dropping the co-located baselines, scan averaging, a systematic error budget.

The writer writes what the EHT's Stokes I releases hold: RR = LL = Stokes I, each with weight
``1 / (2 sigma^2)``, RL and LR zero with weight 0, 32-bit floats (a relative precision of
6e-8; times to 3e-8 days), ``UU, VV, WW`` in wavelengths with ``PSCAL = 1 / freq``.
"""

from __future__ import annotations

import datetime
import logging
import os

import numpy as np

from .uvdata import UVData
from .uvprep import add_systematic_error, drop_colocated, scan_average

__all__ = ["read_uvfits", "write_uvfits", "STOKES_CODES"]

log = logging.getLogger("multiwalk.io.uvfits")

#: The FITS codes of the STOKES axis.
STOKES_CODES = {1: "I", 2: "Q", 3: "U", 4: "V", -1: "RR", -2: "LL", -3: "RL", -4: "LR",
                -5: "XX", -6: "YY", -7: "XY", -8: "YX"}
_JD_MJD = 2400000.5
_MJD_EPOCH = datetime.date(1858, 11, 17)


class _Where:
    """The file's name, prefixed to every message about it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def error(self, what: str) -> ValueError:
        return ValueError(f"{self.path}: {what}")


# ---------------------------------------------------------------------------- reading
def read_uvfits(
    path: str | os.PathLike,
    *,
    drop_colocated_km: float | None = None,
    average_scans: bool = False,
    scan_gap_seconds: float | None = None,
    systematic: float = 0.0,
) -> UVData:
    """Read a UVFITS file's Stokes I visibilities (see the module for what is read and how).

    ``drop_colocated_km``: drop baselines between stations closer than this (km; 5 drops the
    EHT's ALMA-APEX and JCMT-SMA), :func:`~multiwalk.io.uvprep.drop_colocated`.
    ``average_scans``: average each baseline's visibilities over a scan (scans are separated by
    gaps longer than ``scan_gap_seconds``, by default twice the usual spacing of the times),
    :func:`~multiwalk.io.uvprep.scan_average`.  ``systematic``: a fraction of ``|V|`` added to
    sigma in quadrature, after the averaging, :func:`~multiwalk.io.uvprep.add_systematic_error`.

    Errors name the file: not UVFITS, no AN table, no Stokes I, every row flagged, unknown stations.
    """
    from astropy.io import fits  # imported here: astropy is needed only for FITS files

    where = _Where(os.fspath(path))
    if not os.path.isfile(where.path):
        raise FileNotFoundError(f"{where.path}: no such file")
    try:
        hdus = fits.open(where.path, memmap=False)
    except OSError as err:
        raise where.error(f"not a FITS file ({err})") from None
    with hdus:
        groups = hdus[0]
        if not isinstance(groups, fits.GroupsHDU):
            raise where.error("the primary HDU is not random groups (GROUPS = T), so this is not a UVFITS visibility file")
        header = groups.header
        stations, station_xyz = _antenna_table(hdus, where)
        vis, sigma, weight, kept, reasons = _stokes_i(groups, where)
        params = _group_parameters(groups, where)
        freq = _reference_frequency(header, where)
    data = _assemble(params, vis, sigma, weight, kept, reasons, stations, station_xyz, header, freq, where)
    if drop_colocated_km is not None:
        data = drop_colocated(data, max_km=drop_colocated_km)
    if average_scans:
        data = scan_average(data, gap_seconds=scan_gap_seconds)
    if systematic:
        data = add_systematic_error(data, systematic)
    return data


def _antenna_table(hdus, where: _Where) -> tuple[dict[int, str], dict[int, np.ndarray]]:
    """Station number -> name and -> position (metres) from the ``AIPS AN`` table."""
    names = [hdu.name for hdu in hdus[1:]]
    if "AIPS AN" not in names:
        raise where.error(f"no AIPS AN table (station names and positions); the file has {names or 'no tables'}. "
                          "Write the file with its antenna table (ehtim, AIPS FITTP and CASA exportuvfits do)")
    table = hdus["AIPS AN"].data
    columns = [c.upper() for c in table.columns.names]
    for needed in ("ANNAME", "NOSTA"):
        if needed not in columns:
            raise where.error(f"the AIPS AN table has no {needed} column (it has {columns})")
    numbers = [int(n) for n in table["NOSTA"]]
    stations = {n: str(name).strip() for n, name in zip(numbers, table["ANNAME"])}
    xyz = {}
    if "STABXYZ" in columns:
        xyz = {n: np.asarray(p, np.float64) for n, p in zip(numbers, table["STABXYZ"])}
    return stations, xyz


def _axes(header, where: _Where) -> dict[str, int]:
    """CTYPE name -> FITS axis number (2..NAXIS) of the data array."""
    axes = {}
    for k in range(2, int(header["NAXIS"]) + 1):
        name = str(header.get(f"CTYPE{k}", "")).strip().upper()
        if not name and int(header[f"NAXIS{k}"]) == 1:
            continue  # an unnamed axis of length 1 (ehtim leaves the IF axis unnamed)
        axes[name] = k
    for needed in ("COMPLEX", "STOKES"):
        if needed not in axes:
            raise where.error(f"the data array has no {needed} axis (CTYPEs: {sorted(axes)})")
    return axes


def _stokes_i(groups, where: _Where):
    """Stokes I per group: ``vis``, ``sigma``, ``weight`` (G,), ``kept`` (G,) bool, and drop reasons."""
    header = groups.header
    axes = _axes(header, where)
    naxis = int(header["NAXIS"])
    cube = np.asarray(groups.data.data, np.float64)  # (G, axis NAXIS, ..., axis 2)
    order = [1 + naxis - axes[name] for name in ("COMPLEX", "STOKES")]
    spectral = [1 + naxis - axes[name] for name in ("IF", "FREQ") if name in axes]
    rest = [a for a in range(1, naxis) if a not in order + spectral]
    if any(cube.shape[a] != 1 for a in rest):
        raise where.error(f"data axes other than COMPLEX, STOKES, FREQ and IF must have length 1, shape {cube.shape[1:]}")
    n_stokes, n_complex = cube.shape[order[1]], cube.shape[order[0]]
    n_channels = int(np.prod([cube.shape[a] for a in spectral]))
    cube = np.moveaxis(cube, [*spectral, order[1], order[0]], range(1, 3 + len(spectral)))
    cube = cube.reshape(cube.shape[0], n_channels, n_stokes, n_complex)  # the other axes have length 1
    if cube.shape[-1] < 3:
        raise where.error(f"the COMPLEX axis has length {cube.shape[-1]}; multiwalk needs (real, imaginary, weight)")
    codes = [int(round(header.get(f"CRVAL{axes['STOKES']}", 1) + (i + 1 - header.get(f"CRPIX{axes['STOKES']}", 1))
                       * header.get(f"CDELT{axes['STOKES']}", 1))) for i in range(cube.shape[2])]
    hands = _stokes_i_correlations(codes, where)
    re, im, w = cube[..., 0], cube[..., 1], cube[..., 2]
    good = np.isfinite(w) & (w > 0) & np.isfinite(re) & np.isfinite(im)
    w = np.where(good, w, 0.0)
    both = np.all(good[:, :, hands], axis=2)  # (G, channels): Stokes I needs every hand
    w_i = np.where(both, w[:, :, hands].sum(axis=2), 0.0)
    num = np.where(both[..., None], w[:, :, hands] * (re[:, :, hands] + 1j * im[:, :, hands]), 0.0).sum(axis=2)
    total = w_i.sum(axis=1)
    kept = total > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        vis = np.where(kept, num.sum(axis=1) / total, 0.0)
        sigma = np.where(kept, 1.0 / np.sqrt(total), 1.0)
    any_data = np.any(good[:, :, hands], axis=(1, 2))
    reasons = {"flagged or zero weight": int(np.sum(~any_data)),
               f"only one of {'/'.join(STOKES_CODES[codes[h]] for h in hands)} unflagged": int(np.sum(any_data & ~kept))}
    return vis, sigma, total, kept, reasons


def _stokes_i_correlations(codes: list[int], where: _Where) -> list[int]:
    """Indices along the STOKES axis of I, or of RR and LL, or of XX and YY."""
    for wanted in ((1,), (-1, -2), (-5, -6)):
        if all(c in codes for c in wanted):
            return [codes.index(c) for c in wanted]
    held = ", ".join(STOKES_CODES.get(c, str(c)) for c in codes)
    raise where.error(f"no Stokes I: the STOKES axis holds {held}; multiwalk reads I, or RR and LL, or XX and YY")


def _group_parameters(groups, where: _Where) -> dict[str, np.ndarray]:
    """u, v, w (seconds), baseline, date (Julian date) of every group, as astropy scales them."""
    data = groups.data
    names = [n.upper() for n in data.parnames]
    out = {}
    for key in ("UU", "VV", "WW"):
        match = [n for n in data.parnames if n.upper().startswith(key)]
        if not match:
            if key == "WW":
                out[key] = np.zeros(len(data))
                continue
            raise where.error(f"no {key} random parameter (the parameters are {names})")
        out[key] = np.asarray(data.par(match[0]), np.float64)
    for key in ("BASELINE", "DATE"):
        if key not in names:
            raise where.error(f"no {key} random parameter (the parameters are {names})")
        out[key] = np.asarray(data.par(data.parnames[names.index(key)]), np.float64)  # astropy sums repeated DATEs
    return out


def _reference_frequency(header, where: _Where) -> float:
    """The FREQ axis' value at its reference pixel (Hz)."""
    for k in range(2, int(header["NAXIS"]) + 1):
        if str(header.get(f"CTYPE{k}", "")).strip().upper() == "FREQ":
            freq = float(header.get(f"CRVAL{k}", 0.0))
            if np.isfinite(freq) and freq > 0:
                return freq
            raise where.error(f"the FREQ axis' CRVAL{k} is {freq}: the reference frequency must be positive (Hz)")
    raise where.error("the data array has no FREQ axis, so u and v cannot be turned into wavelengths")


def _assemble(params, vis, sigma, weight, kept, reasons, stations, station_xyz, header, freq, where) -> UVData:
    """The UVData of the kept, cross-correlation rows; ValueError when none is left."""
    baseline = np.floor(params["BASELINE"] + 1e-6).astype(np.int64)  # a fraction would be a subarray number
    ant1, ant2 = baseline // 256, baseline % 256
    keep = kept & (ant1 != ant2)
    reasons["autocorrelations"] = int(np.sum(kept & (ant1 == ant2)))
    if not np.any(keep):
        raise where.error(f"all {len(vis)} visibilities are flagged, of zero weight or autocorrelations: nothing to fit")
    unknown = sorted((set(ant1[keep]) | set(ant2[keep])) - set(stations))
    if unknown:
        raise where.error(f"baselines use stations {unknown}, which the AIPS AN table (NOSTA {sorted(stations)}) does not list")
    scale = -freq * 1e-9  # seconds -> gigalambda, and the sign (see the module)
    dropped = {reason: n for reason, n in reasons.items() if n}
    for reason, n in dropped.items():
        log.info("%s: dropped %d of %d rows: %s", where.path, n, len(vis), reason)
    ra, dec = header.get("OBSRA"), header.get("OBSDEC")
    return UVData(
        mjd=params["DATE"][keep] - _JD_MJD, u=params["UU"][keep] * scale, v=params["VV"][keep] * scale,
        w=params["WW"][keep] * scale, ant1=ant1[keep], ant2=ant2[keep], vis=vis[keep], sigma=sigma[keep],
        weight=weight[keep], stations=stations, source=str(header.get("OBJECT", "")).strip(), freq_hz=freq,
        ra_deg=None if ra is None else float(ra), dec_deg=None if dec is None else float(dec),
        station_xyz={n: station_xyz[n] for n in stations if n in station_xyz}, origin=where.path, dropped=dropped,
        history=[f"read {int(np.sum(keep))} of {len(vis)} rows (Stokes I) from {where.path}"],
    )


# ---------------------------------------------------------------------------- writing
def write_uvfits(data: UVData, path: str | os.PathLike, *, overwrite: bool = True) -> None:
    """Write ``data`` as a UVFITS file that :func:`read_uvfits`, ehtim and AIPS read (see the module).

    ``data.freq_hz`` must be known (u, v are in its wavelengths); station numbers must lie in
    1..255.  Stations without a position in ``data.station_xyz`` get (0, 0, 0).
    """
    from astropy.io import fits

    if not isinstance(data, UVData):
        raise TypeError(f"data must be a UVData, got {type(data).__name__}")
    if data.freq_hz is None:
        raise ValueError("data.freq_hz is None: the file needs the reference frequency, e.g. "
                         "dataclasses.replace(data, freq_hz=230e9)")
    numbers = sorted(set(data.ant1.tolist()) | set(data.ant2.tolist()) | set(data.stations))
    if numbers and (numbers[0] < 1 or numbers[-1] > 255):
        raise ValueError(f"station numbers must lie in 1..255 for UVFITS's BASELINE = 256 ant1 + ant2, got {numbers}")
    n = len(data)
    cube = np.zeros((n, 1, 1, 1, 1, 4, 3), np.float32)  # DEC, RA, IF, FREQ, STOKES (RR LL RL LR), COMPLEX
    for hand in (0, 1):
        cube[:, 0, 0, 0, 0, hand, 0] = data.vis.real
        cube[:, 0, 0, 0, 0, hand, 1] = data.vis.imag
        cube[:, 0, 0, 0, 0, hand, 2] = 0.5 / data.sigma**2
    jd = data.mjd + _JD_MJD
    day = np.floor(jd - 0.5) + 0.5  # the Julian date of 0h UT
    to_lambda = -1e9  # gigalambda -> wavelengths, and the sign (see the module)
    pardata = [data.u * to_lambda, data.v * to_lambda, data.w * to_lambda,
               (256 * data.ant1 + data.ant2).astype(np.float64), day, jd - day]
    parnames = ["UU---SIN", "VV---SIN", "WW---SIN", "BASELINE", "DATE", "DATE"]
    groups = fits.GroupsHDU(fits.GroupData(cube, parnames=parnames, pardata=pardata, bitpix=-32))
    _primary_header(groups.header, data, day)
    hdus = fits.HDUList([groups, _antenna_hdu(data, numbers, day)])
    hdus.writeto(os.fspath(path), overwrite=overwrite)


def _primary_header(header, data: UVData, day: np.ndarray) -> None:
    """The keywords of the EHT releases' primary header (axes, source, parameter scales)."""
    ra = 0.0 if data.ra_deg is None else data.ra_deg
    dec = 0.0 if data.dec_deg is None else data.dec_deg
    first = float(day.min()) - _JD_MJD if len(day) else 0.0
    header["OBJECT"] = data.source or "UNKNOWN"
    header["OBSRA"], header["OBSDEC"] = ra, dec
    header["MJD"] = first
    header["DATE-OBS"] = (_MJD_EPOCH + datetime.timedelta(days=int(round(first)))).isoformat()
    header["BSCALE"], header["BZERO"], header["BUNIT"] = 1.0, 0.0, "JY"
    header["EQUINOX"] = "J2000"
    axes = (("COMPLEX", 1.0, 1.0), ("STOKES", -1.0, -1.0), ("FREQ", data.freq_hz, 1.0), ("IF", 1.0, 1.0),
            ("RA", ra, 1.0), ("DEC", dec, 1.0))
    for k, (name, value, step) in enumerate(axes, start=2):
        header[f"CTYPE{k}"], header[f"CRVAL{k}"], header[f"CDELT{k}"], header[f"CRPIX{k}"] = name, value, step, 1.0
    for k in (1, 2, 3):  # UU, VV, WW are stored in wavelengths: times PSCAL they are seconds
        header[f"PSCAL{k}"] = 1.0 / data.freq_hz


def _antenna_hdu(data: UVData, numbers: list[int], day: np.ndarray):
    """The ``AIPS AN`` table: ANNAME, STABXYZ, NOSTA, and the frequency and date it refers to."""
    from astropy.io import fits

    xyz = np.array([data.station_xyz.get(k, np.zeros(3)) for k in numbers], np.float64).reshape(-1, 3)
    columns = [
        fits.Column(name="ANNAME", format="8A", array=np.array([data.station_name(k) for k in numbers])),
        fits.Column(name="STABXYZ", format="3D", unit="METERS", array=xyz),
        fits.Column(name="NOSTA", format="1J", array=np.array(numbers, np.int32)),
    ]
    table = fits.BinTableHDU.from_columns(columns, name="AIPS AN")
    table.header["EXTVER"] = 1
    table.header["FREQ"] = data.freq_hz
    first = float(day.min()) - _JD_MJD if len(day) else 0.0
    table.header["RDATE"] = (_MJD_EPOCH + datetime.timedelta(days=int(round(first)))).isoformat()
    table.header["TIMESYS"] = "UTC"
    return table
