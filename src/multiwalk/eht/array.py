"""Telescope arrays in ehtim's text format: names, geocentric positions and SEFDs.

A header line starting with ``#``, then one line per station::

    #NAME X Y Z SEFDR SEFDL FR_PAR_ANGLE FR_ELEV_ANGLE FR_OFFSET[d] DR_RE DR_IM DL_RE DL_IM
    PV    5088967.9000 -301681.6000   3825015.8000  1400  1400  1  -1  0  0  0  0  0

X, Y, Z in metres (Earth-centred, Earth-fixed; X towards Greenwich, Z towards the North pole),
SEFDs (system equivalent flux densities) of the right- and left-hand receivers in Jy.  Columns
after SEFDL (field rotation and leakage) are not used here.  The EHT 2017 array ships with the
package: ``load_array("EHT2017")``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources

import numpy as np

__all__ = ["StationArray", "read_array", "load_array", "ARRAYS"]

#: Arrays shipped with multiwalk (``multiwalk/eht/data/<name>.txt``).
ARRAYS = ("EHT2017",)


@dataclass(frozen=True)
class StationArray:
    """``names`` (N,), ``xyz`` (N, 3) metres, ``sefd_r``, ``sefd_l`` (N,) Jy."""

    names: tuple[str, ...]
    xyz: np.ndarray
    sefd_r: np.ndarray
    sefd_l: np.ndarray

    def __len__(self) -> int:
        return len(self.names)

    def subset(self, names: list[str] | tuple[str, ...]) -> StationArray:
        """The stations named, in the array's order; ValueError for an unknown name."""
        unknown = [n for n in names if n not in self.names]
        if unknown:
            raise ValueError(f"stations {unknown} are not in the array {list(self.names)}")
        keep = [i for i, n in enumerate(self.names) if n in names]
        return StationArray(tuple(self.names[i] for i in keep), self.xyz[keep], self.sefd_r[keep], self.sefd_l[keep])


def read_array(path: str | os.PathLike) -> StationArray:
    """Read an array file; ValueError naming the file and line for a malformed line."""
    path = os.fspath(path)
    names: list[str] = []
    rows: list[list[float]] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            parts = text.split()
            where = f"{path}, line {lineno}"
            if len(parts) < 6:
                raise ValueError(f"{where}: expected 'NAME X Y Z SEFDR SEFDL ...' (at least 6 columns), got {len(parts)}")
            try:
                vals = [float(p) for p in parts[1:6]]
            except ValueError:
                raise ValueError(f"{where}: X Y Z SEFDR SEFDL must be numbers, got {parts[1:6]}") from None
            if not all(np.isfinite(vals)):
                raise ValueError(f"{where}: X Y Z SEFDR SEFDL must be finite, got {parts[1:6]}")
            if vals[3] <= 0 or vals[4] <= 0:
                raise ValueError(f"{where}: SEFDs must be positive (Jy), got SEFDR={vals[3]}, SEFDL={vals[4]}")
            if np.linalg.norm(vals[:3]) < 1e6:
                raise ValueError(f"{where}: station {parts[0]} is {np.linalg.norm(vals[:3]):.0f} m from the Earth's centre; "
                                 "X Y Z must be geocentric metres (ground stations only)")
            if parts[0] in names:
                raise ValueError(f"{where}: station {parts[0]} appears twice")
            names.append(parts[0])
            rows.append(vals)
    if len(names) < 2:
        raise ValueError(f"{path}: an array needs at least 2 stations, found {len(names)}")
    arr = np.array(rows)
    return StationArray(tuple(names), arr[:, :3], arr[:, 3], arr[:, 4])


def load_array(name: str = "EHT2017") -> StationArray:
    """An array shipped with multiwalk (:data:`ARRAYS`), or a file path."""
    if name in ARRAYS:
        with resources.as_file(resources.files("multiwalk.eht") / "data" / f"{name}.txt") as p:
            return read_array(p)
    if os.path.exists(name):
        return read_array(name)
    raise ValueError(f"array {name!r} is neither one of {list(ARRAYS)} nor an existing file")
