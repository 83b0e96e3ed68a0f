"""Preparing visibilities for a fit: co-located baselines, scan averaging, a systematic error budget.

Each function takes a :class:`~multiwalk.io.uvdata.UVData` and returns a new one, noting what
it did in ``UVData.history`` (and what it dropped in ``UVData.dropped``).

* :func:`drop_colocated`: baselines between stations closer than ``max_km`` (from the
  stations' geocentric positions) see structure larger than a compact source model, e.g. the
  EHT's ALMA-APEX (2.6 km) and JCMT-SMA (0.16 km) see M87's jet; closure quantities formed
  without them are chosen by rank (:mod:`multiwalk.eht.closure`).
* :func:`scan_average`: a scan is a run of times with no gap longer than ``gap_seconds``
  (default: twice the median step between successive times).  Each baseline's rows in a scan
  become one row: the coherent mean ``V = sum(w V) / sum(w)`` with ``w = 1 / sigma^2`` and
  ``sigma = 1 / sqrt(sum w)`` (the error of that mean); ``u, v, w`` are weighted the same way,
  and every row of the scan gets the scan's time (the mean of its distinct times), so the
  closure quantities of a scan are formed together.  Rows stored as (ant2, ant1) are turned
  round first (``V -> conj(V)``, ``u, v, w -> -u, -v, -w``).
* :func:`add_systematic_error`: ``sigma -> sqrt(sigma^2 + (f |V|)^2)``, the usual budget for
  errors that do not close (EHT 2019 Paper VI uses a few per cent).
"""

from __future__ import annotations

import logging

import numpy as np

from .uvdata import UVData

__all__ = ["drop_colocated", "scan_average", "scan_numbers", "add_systematic_error"]

log = logging.getLogger("multiwalk.io.uvprep")


def drop_colocated(data: UVData, max_km: float = 5.0) -> UVData:
    """``data`` without the baselines whose stations lie closer than ``max_km`` (station_xyz)."""
    if not isinstance(data, UVData):
        raise TypeError(f"data must be a UVData, got {type(data).__name__}")
    if isinstance(max_km, bool) or not (isinstance(max_km, (int, float, np.number)) and np.isfinite(max_km) and max_km > 0):
        raise ValueError(f"max_km must be a positive distance in km, got {max_km!r}")
    pairs = sorted(set(zip(data.ant1.tolist(), data.ant2.tolist())))
    missing = sorted({s for pair in pairs for s in pair} - set(data.station_xyz))
    if missing:
        names = ", ".join(f"{s} ({data.station_name(s)})" for s in missing)
        raise ValueError(f"drop_colocated needs the stations' positions: data.station_xyz has none for {names}")
    close = [(a, b) for a, b in pairs if np.linalg.norm(data.station_xyz[a] - data.station_xyz[b]) < max_km * 1e3]
    drop = np.zeros(len(data), bool)
    for a, b in close:
        drop |= (data.ant1 == a) & (data.ant2 == b)
    out = data.select(~drop)
    labels = sorted({"-".join(sorted((data.station_name(a), data.station_name(b)))) for a, b in close})
    if drop.any():
        out.dropped[f"co-located baselines (stations < {max_km:g} km apart: {', '.join(labels)})"] = int(drop.sum())
    note = f"dropped {int(drop.sum())} rows of co-located baselines (< {max_km:g} km): {', '.join(labels) or 'none'}"
    out.history.append(note)
    log.info("%s", note)
    return out


def scan_numbers(mjd: np.ndarray, gap_seconds: float | None = None) -> tuple[np.ndarray, float]:
    """The scan number (0, 1, ...) of each time in ``mjd`` (days), and the gap used (seconds).

    A new scan starts after a gap longer than ``gap_seconds`` between successive distinct times;
    by default twice the median such step (10-s integrations: gaps over 20 s).
    """
    mjd = np.asarray(mjd, np.float64)
    times = np.unique(mjd)
    steps = np.diff(times) * 86400.0
    if gap_seconds is None:
        gap_seconds = 2.0 * float(np.median(steps)) if steps.size else 0.0
    elif isinstance(gap_seconds, bool) or not (np.isfinite(gap_seconds) and gap_seconds > 0):
        raise ValueError(f"gap_seconds must be a positive number of seconds, got {gap_seconds!r}")
    scan_of_time = np.concatenate([[0], np.cumsum(steps > gap_seconds)])
    return scan_of_time[np.searchsorted(times, mjd)], float(gap_seconds)


def scan_average(data: UVData, gap_seconds: float | None = None) -> UVData:
    """Each baseline's coherent, inverse-variance weighted mean over each scan (see the module)."""
    if not isinstance(data, UVData):
        raise TypeError(f"data must be a UVData, got {type(data).__name__}")
    scan, gap = scan_numbers(data.mjd, gap_seconds)
    flip = data.ant1 > data.ant2
    sign = np.where(flip, -1.0, 1.0)
    vis = np.where(flip, np.conj(data.vis), data.vis)
    a, b = np.minimum(data.ant1, data.ant2), np.maximum(data.ant1, data.ant2)
    keys, group = np.unique(np.stack([scan, a, b], axis=1), axis=0, return_inverse=True)
    group = group.reshape(-1)
    weight = 1.0 / data.sigma**2
    total = np.bincount(group, weight)

    def mean(values: np.ndarray) -> np.ndarray:
        return np.bincount(group, weight * values) / total

    scan_times = np.array([np.unique(data.mjd[scan == s]).mean() for s in range(int(scan.max()) + 1)])
    out = data.with_rows(
        mjd=scan_times[keys[:, 0]], u=mean(sign * data.u), v=mean(sign * data.v), w=mean(sign * data.w),
        ant1=keys[:, 1], ant2=keys[:, 2], vis=mean(vis.real) + 1j * mean(vis.imag), sigma=1.0 / np.sqrt(total),
        weight=np.bincount(group, data.weight), chan=np.zeros(len(keys), np.int64),
    )
    note = (f"averaged {len(data)} rows into {len(out)} over {len(scan_times)} scans "
            f"(gaps > {gap:.3g} s; coherent, weights 1/sigma^2)")
    out.history.append(note)
    log.info("%s", note)
    return out


def add_systematic_error(data: UVData, fraction: float) -> UVData:
    """``data`` with ``sigma`` replaced by ``sqrt(sigma^2 + (fraction |V|)^2)``."""
    if not isinstance(data, UVData):
        raise TypeError(f"data must be a UVData, got {type(data).__name__}")
    if isinstance(fraction, bool) or not (isinstance(fraction, (int, float, np.number)) and np.isfinite(fraction)
                                          and 0 <= fraction < 1):
        raise ValueError(f"fraction must be a fraction of |V| in [0, 1) (0.02 for 2 %), got {fraction!r}")
    out = data.with_rows(sigma=np.sqrt(data.sigma**2 + (fraction * np.abs(data.vis)) ** 2))
    out.history.append(f"added {fraction:g} |V| to sigma in quadrature (systematic error budget)")
    return out
