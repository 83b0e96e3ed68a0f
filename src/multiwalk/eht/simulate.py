"""Earth-rotation synthesis: u, v tracks of an array and simulated visibilities with thermal noise.

The geometry is ehtim's (``make_uvpoints``), so that its observations can be compared with
ours: the Earth-fixed station positions are rotated by the Greenwich hour angle of the source
``GMST - RA``; ``u`` points East and ``v`` North on the sky at the source; the baseline of
stations ``i < j`` (array order) is ``(x_j - x_i) / lambda`` (Thompson, Moran & Swenson's
``b = r2 - r1``), which goes with the model's ``V = sum I exp(-2 pi i (u x + v y))``.  ehtim
writes the same visibility with ``u, v`` of the opposite sign (``x_i - x_j`` and ``exp(+2 pi i
...)``), so its tracks are ours mirrored through the origin.  A station observes while the source's
geocentric elevation lies strictly between the limits; the thermal noise of Stokes I on a
baseline is ``0.5 sqrt(s_rr^2 + s_ll^2)`` with ``s = sqrt(SEFD_1 SEFD_2 / (2 bandwidth t)) / 0.88``
(2-bit quantisation), drawn independently for the real and the imaginary part.

GMST comes from the IAU 2006 expression through the Earth rotation angle, taking UT1 = UTC
(UT1 - UTC stays below 0.9 s: a rotation below 7e-5 rad).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..io.uvdata import UVData
from .array import StationArray

__all__ = ["SGRA_RA_HOURS", "SGRA_DEC_DEG", "gmst_hours", "uv_tracks", "simulate", "thermal_sigma", "C_LIGHT"]

C_LIGHT = 299_792_458.0  # m/s
SGRA_RA_HOURS = 17 + 45 / 60 + 40.04 / 3600  # 17h45m40.04s
SGRA_DEC_DEG = -(29 + 0 / 60 + 28.2 / 3600)  # -29d00m28.2s
_QUANTISATION = 0.88  # 2-bit sampling efficiency


def gmst_hours(mjd_utc: np.ndarray) -> np.ndarray:
    """Greenwich mean sidereal time in hours at UTC ``mjd_utc`` (days), UT1 taken as UTC."""
    mjd = np.asarray(mjd_utc, np.float64)
    du = mjd - 51544.5  # days from J2000.0
    frac = np.mod(du, 1.0)
    era = 2 * np.pi * np.mod(frac + 0.7790572732640 + 0.00273781191135448 * du, 1.0)  # Earth rotation angle
    t = du / 36525.0
    arcsec = 0.014506 + 4612.156534 * t + 1.3915817 * t**2 - 0.00000044 * t**3
    gmst = era + np.deg2rad(arcsec / 3600.0)
    return np.mod(gmst, 2 * np.pi) * 12 / np.pi


def thermal_sigma(sefd_r1, sefd_l1, sefd_r2, sefd_l2, bandwidth_hz: float, seconds: float) -> np.ndarray:
    """Standard deviation (Jy) of the real (and of the imaginary) part of a Stokes I visibility."""
    s_rr = np.sqrt(np.asarray(sefd_r1) * sefd_r2 / (2 * bandwidth_hz * seconds)) / _QUANTISATION
    s_ll = np.sqrt(np.asarray(sefd_l1) * sefd_l2 / (2 * bandwidth_hz * seconds)) / _QUANTISATION
    return 0.5 * np.sqrt(s_rr**2 + s_ll**2)


def _check(name: str, value: float, low: float = 0.0) -> float:
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not number or not np.isfinite(value) or value <= low:
        raise ValueError(f"{name} must be a number above {low}, got {value!r}")
    return float(value)


def uv_tracks(
    array: StationArray,
    mjd: np.ndarray,
    *,
    ra_hours: float = SGRA_RA_HOURS,
    dec_deg: float = SGRA_DEC_DEG,
    freq_hz: float = 230e9,
    elevation_limits: tuple[float, float] = (10.0, 85.0),
) -> dict[str, np.ndarray]:
    """Baselines that see the source at each time: dict of ``mjd, i1, i2, u, v, w`` (gigalambda), ``elev1, elev2`` (deg).

    Rows are ordered by time, then by baseline ``(i1, i2)``, ``i1 < i2`` in array order.
    """
    mjd = np.atleast_1d(np.asarray(mjd, np.float64))
    lam = C_LIGHT / _check("freq_hz", freq_hz)
    ra, dec = np.deg2rad(15.0 * ra_hours), np.deg2rad(dec_deg)
    lo, hi = elevation_limits
    if not (-90 <= lo < hi <= 90):
        raise ValueError(f"elevation_limits must be (low, high) degrees with -90 <= low < high <= 90, got {elevation_limits!r}")
    theta = np.mod(gmst_hours(mjd) * np.pi / 12 - ra, 2 * np.pi)  # Greenwich hour angle of the source
    c, s = np.cos(theta), np.sin(theta)
    x, y, z = array.xyz.T  # (N,)
    # Positions rotated with the Earth (about z by theta): shape (T, N)
    xr = c[:, None] * x[None, :] - s[:, None] * y[None, :]
    yr = s[:, None] * x[None, :] + c[:, None] * y[None, :]
    zr = np.broadcast_to(z, xr.shape)
    src = np.array([np.cos(dec), 0.0, np.sin(dec)])
    proj_u = np.array([0.0, 1.0, 0.0])  # z x src, normalised
    proj_v = -np.cross(proj_u, src)
    pos = np.stack([xr, yr, zr], axis=-1)  # (T, N, 3)
    elev = 90.0 - np.rad2deg(np.arccos(np.clip(pos @ src / np.linalg.norm(array.xyz, axis=1)[None, :], -1, 1)))
    up = (elev > lo) & (elev < hi)
    i1, i2 = np.triu_indices(len(array), k=1)
    b = (pos[:, i2, :] - pos[:, i1, :]) / lam  # (T, B, 3) wavelengths, r2 - r1
    seen = up[:, i1] & up[:, i2]
    t_idx, b_idx = np.nonzero(seen)
    bb = b[t_idx, b_idx]
    return {
        "mjd": mjd[t_idx], "i1": i1[b_idx], "i2": i2[b_idx],
        "u": bb @ proj_u * 1e-9, "v": bb @ proj_v * 1e-9, "w": bb @ src * 1e-9,
        "elev1": elev[t_idx, i1[b_idx]], "elev2": elev[t_idx, i2[b_idx]],
    }


def simulate(
    array: StationArray,
    visibility: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    mjd: float = 57850.0,
    tstart_hours: float = 0.0,
    tstop_hours: float = 24.0,
    scan_seconds: float = 600.0,
    cadence_seconds: float = 3600.0,
    bandwidth_hz: float = 2e9,
    freq_hz: float = 230e9,
    ra_hours: float = SGRA_RA_HOURS,
    dec_deg: float = SGRA_DEC_DEG,
    elevation_limits: tuple[float, float] = (10.0, 85.0),
    fractional_noise: float = 0.0,
    noise: bool = True,
    seed: int = 0,
) -> UVData:
    """Observe a source whose visibilities are ``visibility(u, v)`` (gigalambda -> complex Jy).

    Scans of ``scan_seconds`` start every ``cadence_seconds`` from ``tstart_hours`` to before
    ``tstop_hours`` (UTC hours of day ``mjd``); each scan gives one visibility per baseline, at
    the u, v of its start time (as ehtim's ``observe`` does).  The thermal sigma follows from
    the SEFDs, ``bandwidth_hz`` and ``scan_seconds``; ``fractional_noise`` f adds a second,
    independent error of ``f |V|`` in quadrature (non-closing systematics), which is drawn and
    included in ``sigma`` too.  ``noise=False`` returns the exact visibilities with their sigmas.
    Stations are numbered 1..N in array order (``UVData.stations`` holds the names,
    ``station_xyz`` the positions; ``freq_hz``, ``ra_deg``, ``dec_deg`` are set, so the
    observation can be written as UVFITS).
    """
    _check("scan_seconds", scan_seconds)
    _check("cadence_seconds", cadence_seconds)
    _check("bandwidth_hz", bandwidth_hz)
    if not callable(visibility):
        raise TypeError(f"visibility must be a function (u, v) -> complex Jy, got {visibility!r}")
    if not (np.isfinite(fractional_noise) and fractional_noise >= 0):
        raise ValueError(f"fractional_noise must be a non-negative fraction, got {fractional_noise!r}")
    if not tstop_hours > tstart_hours:
        raise ValueError(f"tstop_hours={tstop_hours} must be after tstart_hours={tstart_hours}")
    times_h = np.arange(tstart_hours, tstop_hours, cadence_seconds / 3600.0)
    tr = uv_tracks(array, np.floor(mjd) + times_h / 24.0, ra_hours=ra_hours, dec_deg=dec_deg, freq_hz=freq_hz,
                   elevation_limits=elevation_limits)
    n = tr["u"].size
    if n == 0:
        raise ValueError("no baseline sees the source in this schedule: widen the hours or the elevation limits")
    i1, i2 = tr["i1"], tr["i2"]
    sigma = thermal_sigma(array.sefd_r[i1], array.sefd_l[i1], array.sefd_r[i2], array.sefd_l[i2], bandwidth_hz, scan_seconds)
    vis = np.asarray(visibility(tr["u"], tr["v"])).astype(np.complex128)
    if vis.shape != (n,):
        raise ValueError(f"visibility(u, v) returned shape {vis.shape} for {n} points: return one complex value per (u, v)")
    sigma = np.sqrt(sigma**2 + (fractional_noise * np.abs(vis)) ** 2)
    if noise:
        rng = np.random.default_rng(seed)
        vis = vis + sigma * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    return UVData(
        mjd=tr["mjd"], u=tr["u"], v=tr["v"], w=tr["w"], ant1=i1 + 1, ant2=i2 + 1, vis=vis, sigma=sigma,
        weight=np.ones(n), chan=np.zeros(n, np.int64), stations={i + 1: name for i, name in enumerate(array.names)},
        freq_hz=freq_hz, ra_deg=15.0 * ra_hours, dec_deg=dec_deg,
        station_xyz={i + 1: xyz for i, xyz in enumerate(array.xyz)},
        history=[f"simulated: {len(array)} stations, {len(times_h)} scans of {scan_seconds:g} s at {freq_hz / 1e9:g} GHz"],
    )
