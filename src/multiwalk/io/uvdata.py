"""cuda_mcmc's ``*_uvdata.txt`` visibility files: :class:`UVData`, :func:`read_uvdata`, :func:`write_uvdata`.

One row per visibility, whitespace separated (as written by the MAPS simulator the seed used)::

    2009:095:02:20:00.00 -1836605.33 8671798.17 -1429464.08 07-08  00  ( 0.134843, 16.344395)  30000.00 0.03618

that is ``YYYY:DDD:HH:MM:SS.ss U V W ant1-ant2 chan ( amp_Jy, phase_deg ) weight sigma_Jy``
with U, V, W in kilolambda and the antennas as station numbers.  Rows of weight 0 are flagged
and skipped by the reader; blank lines and lines starting with ``#`` are ignored.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
from dataclasses import dataclass, field

import numpy as np

__all__ = ["UVData", "ROW_FIELDS", "read_uvdata", "write_uvdata", "stations_from_comment"]

_MJD_EPOCH = datetime.date(1858, 11, 17)
_ROW = re.compile(
    r"^\s*(?P<time>\S+)\s+(?P<u>\S+)\s+(?P<v>\S+)\s+(?P<w>\S+)\s+(?P<a1>\d+)-(?P<a2>\d+)\s+(?P<chan>\S+)\s+"
    r"\(\s*(?P<amp>[^,\s]+)\s*,\s*(?P<phase>[^)\s]+)\s*\)\s+(?P<weight>\S+)\s+(?P<sigma>\S+)\s*$"
)
_FORMAT = "YYYY:DDD:HH:MM:SS.ss U V W ant1-ant2 chan ( amp_Jy, phase_deg ) weight sigma_Jy"


@dataclass
class UVData:
    """Visibilities of one source, one row per baseline and time.

    Arrays of shape ``(n,)``: ``mjd`` (UTC, days), ``u, v, w`` (gigalambda), ``ant1, ant2``
    (station numbers), ``vis`` (complex Jy), ``sigma`` (Jy, thermal standard deviation of the
    real and of the imaginary part), ``weight``, ``chan``.  ``stations`` maps station numbers
    to names where known (the file format has numbers only).

    What a file or the simulator knows of the observation (empty or None when unknown):
    ``source`` (the target's name), ``freq_hz`` (the reference frequency: u, v, w are in units
    of its wavelength), ``ra_deg``, ``dec_deg`` (J2000), ``station_xyz`` (station number ->
    geocentric position, metres, shape (3,)), ``origin`` (the file the rows were read from),
    ``dropped`` (reason -> number of rows left out by the reader or an edit) and ``history``
    (one line per step that made or changed the rows).
    """

    mjd: np.ndarray
    u: np.ndarray
    v: np.ndarray
    w: np.ndarray
    ant1: np.ndarray
    ant2: np.ndarray
    vis: np.ndarray
    sigma: np.ndarray
    weight: np.ndarray = None  # type: ignore[assignment]
    chan: np.ndarray = None  # type: ignore[assignment]
    stations: dict[int, str] = field(default_factory=dict)
    source: str = ""
    freq_hz: float | None = None
    ra_deg: float | None = None
    dec_deg: float | None = None
    station_xyz: dict[int, np.ndarray] = field(default_factory=dict)
    origin: str = ""
    dropped: dict[str, int] = field(default_factory=dict)
    history: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = np.shape(self.mjd)[0] if np.ndim(self.mjd) == 1 else -1
        if n < 0:
            raise ValueError(f"mjd must be a 1-D array of times, got shape {np.shape(self.mjd)}")
        self.mjd = np.asarray(self.mjd, np.float64)
        for name in ("u", "v", "w", "sigma"):
            setattr(self, name, np.asarray(getattr(self, name), np.float64))
        self.vis = np.asarray(self.vis, np.complex128)
        self.ant1 = np.asarray(self.ant1, np.int64)
        self.ant2 = np.asarray(self.ant2, np.int64)
        self.weight = np.ones(n) if self.weight is None else np.asarray(self.weight, np.float64)
        self.chan = np.zeros(n, np.int64) if self.chan is None else np.asarray(self.chan, np.int64)
        for name in ("u", "v", "w", "ant1", "ant2", "vis", "sigma", "weight", "chan"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"UVData.{name} has shape {getattr(self, name).shape}, but mjd has ({n},): one entry per row")
        if np.any(self.ant1 == self.ant2):
            i = int(np.flatnonzero(self.ant1 == self.ant2)[0])
            raise ValueError(f"row {i} joins station {self.ant1[i]} to itself: a baseline needs two stations")
        if not np.all(np.isfinite(self.sigma) & (self.sigma > 0)):
            i = int(np.flatnonzero(~(np.isfinite(self.sigma) & (self.sigma > 0)))[0])
            raise ValueError(f"row {i} has sigma={self.sigma[i]}: sigmas must be positive and finite")
        if self.freq_hz is not None:
            if not (np.isfinite(self.freq_hz) and self.freq_hz > 0):
                raise ValueError(f"UVData.freq_hz={self.freq_hz!r}: the reference frequency must be positive (Hz), or None")
            self.freq_hz = float(self.freq_hz)
        self.station_xyz = {int(k): np.asarray(xyz, np.float64) for k, xyz in self.station_xyz.items()}
        for k, xyz in self.station_xyz.items():
            if xyz.shape != (3,):
                raise ValueError(f"UVData.station_xyz[{k}] has shape {xyz.shape}: a position is (x, y, z) in metres")

    def __len__(self) -> int:
        return int(self.mjd.shape[0])

    @property
    def amplitude(self) -> np.ndarray:
        """|vis| in Jy."""
        return np.abs(self.vis)

    @property
    def phase(self) -> np.ndarray:
        """arg(vis) in radians."""
        return np.angle(self.vis)

    @property
    def baseline_length(self) -> np.ndarray:
        """sqrt(u^2 + v^2) in gigalambda."""
        return np.hypot(self.u, self.v)

    def station_name(self, number: int) -> str:
        """The station's name, or its number as text."""
        return self.stations.get(int(number), f"{int(number):02d}")

    def select(self, mask: np.ndarray) -> UVData:
        """The rows where ``mask`` is True (a boolean array or row numbers), with this data's description."""
        m = np.asarray(mask)
        return self.with_rows(**{name: getattr(self, name)[m] for name in ROW_FIELDS})

    def with_rows(self, **rows: np.ndarray) -> UVData:
        """A copy with the row arrays given (``mjd=..., vis=...``; see :data:`ROW_FIELDS`) replaced
        and the description (stations, source, frequency, ...) copied."""
        unknown = sorted(set(rows) - set(ROW_FIELDS))
        if unknown:
            raise TypeError(f"with_rows takes the row arrays {ROW_FIELDS}, got {unknown}")
        return dataclasses.replace(
            self, **rows, stations=dict(self.stations), station_xyz=dict(self.station_xyz),
            dropped=dict(self.dropped), history=list(self.history),
        )

    def describe(self) -> str:
        """One paragraph: rows, stations, times, frequency, and what was dropped or changed."""
        names = sorted({self.station_name(s) for s in np.concatenate([self.ant1, self.ant2])})
        freq = f" at {self.freq_hz / 1e9:.3f} GHz" if self.freq_hz else ""
        lines = [f"{len(self)} visibilities of {self.source or 'an unnamed source'}{freq}, "
                 f"{len(np.unique(self.mjd))} times, {len(names)} stations ({' '.join(names)})"
                 + (f", from {self.origin}" if self.origin else "")]
        lines += [f"dropped {n} rows: {reason}" for reason, n in self.dropped.items()]
        lines += list(self.history)
        return "\n".join(lines)


#: The per-row arrays of :class:`UVData`, each of shape ``(n,)``.
ROW_FIELDS = ("mjd", "u", "v", "w", "ant1", "ant2", "vis", "sigma", "weight", "chan")


# ---------------------------------------------------------------------------- times
def _parse_time(text: str) -> float:
    """``YYYY:DDD:HH:MM:SS.ss`` -> MJD (UTC days); ValueError with the reason."""
    parts = text.split(":")
    if len(parts) != 5:
        raise ValueError(f"time {text!r} is not YYYY:DDD:HH:MM:SS.ss")
    try:
        year, doy, hh, mm = (int(p) for p in parts[:4])
        ss = float(parts[4])
    except ValueError:
        raise ValueError(f"time {text!r} is not YYYY:DDD:HH:MM:SS.ss") from None
    days_in_year = 366 if (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)) else 365
    if not (1 <= doy <= days_in_year and 0 <= hh < 24 and 0 <= mm < 60 and 0 <= ss < 61):
        raise ValueError(f"time {text!r} is out of range (day 1..{days_in_year}, hour 0..23, minute 0..59, second 0..60)")
    day = datetime.date(year, 1, 1) + datetime.timedelta(days=doy - 1)
    return (day - _MJD_EPOCH).days + (hh * 3600 + mm * 60 + ss) / 86400.0


def _format_time(mjd: float) -> str:
    """MJD -> ``YYYY:DDD:HH:MM:SS.ss`` (rounded to 0.01 s)."""
    centi = int(round(mjd * 86400 * 100))
    days, rest = divmod(centi, 86400 * 100)
    day = _MJD_EPOCH + datetime.timedelta(days=days)
    doy = day.timetuple().tm_yday
    hh, rest = divmod(rest, 3600 * 100)
    mm, rest = divmod(rest, 60 * 100)
    return f"{day.year:04d}:{doy:03d}:{hh:02d}:{mm:02d}:{rest / 100:05.2f}"


# ---------------------------------------------------------------------------- reader and writer
def read_uvdata(path: str | os.PathLike, stations: dict[int, str] | None = None) -> UVData:
    """Read a ``*_uvdata.txt`` file; rows of weight 0 are skipped.

    U, V, W are converted from kilolambda to gigalambda, phases from degrees.  ``stations``
    (number -> name) is attached to the result; by default it is read from the
    ``# stations:`` comment that :func:`write_uvdata` writes, if present.  A malformed row raises ValueError naming the
    file, the line number and what is wrong; a missing file raises FileNotFoundError.
    """
    path = os.fspath(path)
    cols: dict[str, list] = {k: [] for k in ("mjd", "u", "v", "w", "ant1", "ant2", "chan", "amp", "phase", "weight", "sigma")}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            where = f"{path}, line {lineno}"
            m = _ROW.match(text)
            if m is None:
                raise ValueError(f"{where}: expected '{_FORMAT}', got {text[:120]!r}")
            try:
                mjd = _parse_time(m["time"])
            except ValueError as err:
                raise ValueError(f"{where}: {err}") from None
            values = {}
            for name in ("u", "v", "w", "amp", "phase", "weight", "sigma"):
                try:
                    values[name] = float(m[name])
                except ValueError:
                    raise ValueError(f"{where}: {name} is {m[name]!r}, not a number") from None
                if not np.isfinite(values[name]):
                    raise ValueError(f"{where}: {name} is {m[name]!r}, not a finite number")
            try:
                chan = int(m["chan"])
            except ValueError:
                raise ValueError(f"{where}: chan is {m['chan']!r}, not an integer") from None
            a1, a2 = int(m["a1"]), int(m["a2"])
            if values["weight"] == 0:
                continue  # flagged
            if a1 == a2:
                raise ValueError(f"{where}: baseline {m['a1']}-{m['a2']} joins a station to itself")
            if values["sigma"] <= 0:
                raise ValueError(f"{where}: sigma_Jy is {values['sigma']}; it must be positive for an unflagged row")
            if values["amp"] < 0:
                raise ValueError(f"{where}: amplitude {values['amp']} is negative")
            cols["mjd"].append(mjd)
            cols["ant1"].append(a1)
            cols["ant2"].append(a2)
            cols["chan"].append(chan)
            for name, val in values.items():
                cols[name].append(val)
    if not cols["mjd"]:
        raise ValueError(f"{path}: no unflagged visibility rows (expected lines '{_FORMAT}')")
    amp, phase = np.array(cols["amp"]), np.deg2rad(np.array(cols["phase"]))
    return UVData(
        mjd=np.array(cols["mjd"]), u=np.array(cols["u"]) * 1e-6, v=np.array(cols["v"]) * 1e-6,
        w=np.array(cols["w"]) * 1e-6, ant1=np.array(cols["ant1"]), ant2=np.array(cols["ant2"]),
        vis=amp * np.exp(1j * phase), sigma=np.array(cols["sigma"]), weight=np.array(cols["weight"]),
        chan=np.array(cols["chan"]), stations=dict(stations_from_comment(path) if stations is None else stations),
    )


def write_uvdata(path: str | os.PathLike, data: UVData) -> None:
    """Write ``data`` in the ``*_uvdata.txt`` format (U, V, W in kilolambda to 0.01, sigma to 1e-8 Jy).

    Station numbers must lie in 0..99 (two digits, as the format has them).  Station names are
    not part of the format; a comment line at the top lists them.
    """
    if not isinstance(data, UVData):
        raise TypeError(f"data must be a UVData, got {type(data).__name__}")
    for name in ("ant1", "ant2"):
        arr = getattr(data, name)
        if arr.size and (arr.min() < 0 or arr.max() > 99):
            raise ValueError(f"UVData.{name} holds station numbers outside 0..99, which the format cannot write")
    lines = []
    if data.stations:
        lines.append("# stations: " + " ".join(f"{k:02d}={v}" for k, v in sorted(data.stations.items())))
    amp, phase = np.abs(data.vis), np.rad2deg(np.angle(data.vis))
    for i in range(len(data)):
        lines.append(
            f"{_format_time(data.mjd[i])} {data.u[i] * 1e6:13.2f} {data.v[i] * 1e6:13.2f} {data.w[i] * 1e6:13.2f} "
            f"{data.ant1[i]:02d}-{data.ant2[i]:02d}    {data.chan[i]:02d}    ({amp[i]:13.6f}, {phase[i]:15.6f}) "
            f"{data.weight[i]:9.2f} {data.sigma[i]:.8f}"
        )
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def stations_from_comment(path: str | os.PathLike) -> dict[int, str]:
    """The ``# stations: 01=PV 02=SMT ...`` comment that :func:`write_uvdata` puts at the top, if any."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        first = fh.readline().strip()
    if not first.startswith("# stations:"):
        return {}
    out = {}
    for item in first.split(":", 1)[1].split():
        num, _, name = item.partition("=")
        if num.isdigit() and name:
            out[int(num)] = name
    return out
