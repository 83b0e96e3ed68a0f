"""Closure phases: all independent triangles at each time, with a reference station.

At a time with N stations whose baselines are all measured, the triangles
``(ref, j, k)``, ``j < k``, of one reference station with every pair of the others are
(N-1)(N-2)/2 independent closure phases (every other triangle's closure phase is a sum of
theirs).  The reference is the station with the most baselines at that time (the first in
number order on ties); a triangle is used only when its three baselines were measured.
A closure phase is ``arg(V_rj V_jk V_kr)`` with ``V_ba = conj(V_ab)``; its standard deviation
is ``sqrt(sum (sigma_i / |V_i|)^2)`` (the high-SNR limit, the seed's formula above SNR 30).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..io.uvdata import UVData

__all__ = ["ClosurePhases", "closure_triangles", "closure_phases", "model_closure_phases"]


@dataclass
class ClosurePhases:
    """``index`` (M, 3) rows of the visibilities of each triangle, ``conj`` (M, 3) whether a row
    enters conjugated, ``stations`` (M, 3) station numbers (ref, j, k), ``mjd`` (M,), ``value``
    and ``sigma`` (M,) in radians."""

    index: np.ndarray
    conj: np.ndarray
    stations: np.ndarray
    mjd: np.ndarray
    value: np.ndarray
    sigma: np.ndarray

    def __len__(self) -> int:
        return int(self.index.shape[0])


def closure_triangles(
    mjd: np.ndarray, ant1: np.ndarray, ant2: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(index, conj, stations, mjd)`` of the independent triangles of every time (see the module)."""
    mjd, ant1, ant2 = np.asarray(mjd), np.asarray(ant1), np.asarray(ant2)
    index, conj, stations, times = [], [], [], []
    for t in np.unique(mjd):
        rows = np.flatnonzero(mjd == t)
        where: dict[tuple[int, int], tuple[int, bool]] = {}
        for r in rows:
            a, b = int(ant1[r]), int(ant2[r])
            where.setdefault((a, b), (int(r), False))
            where.setdefault((b, a), (int(r), True))
        present = sorted({int(a) for a in ant1[rows]} | {int(b) for b in ant2[rows]})
        if len(present) < 3:
            continue
        degree = {s: sum((s, o) in where for o in present if o != s) for s in present}
        ref = max(present, key=lambda s: (degree[s], -s))
        others = [s for s in present if s != ref]
        for ij, j in enumerate(others):
            for k in others[ij + 1:]:
                legs = ((ref, j), (j, k), (k, ref))
                if all(leg in where for leg in legs):
                    index.append([where[leg][0] for leg in legs])
                    conj.append([where[leg][1] for leg in legs])
                    stations.append([ref, j, k])
                    times.append(t)
    if not index:
        return np.zeros((0, 3), np.int64), np.zeros((0, 3), bool), np.zeros((0, 3), np.int64), np.zeros(0)
    return np.array(index, np.int64), np.array(conj, bool), np.array(stations, np.int64), np.array(times)


def closure_phases(data: UVData) -> ClosurePhases:
    """Closure phases of ``data`` and their sigmas (radians)."""
    if not isinstance(data, UVData):
        raise TypeError(f"data must be a UVData, got {type(data).__name__}")
    index, conj, stations, times = closure_triangles(data.mjd, data.ant1, data.ant2)
    value = np.asarray(model_closure_phases(data.vis, index, conj)) if len(index) else np.zeros(0)
    amp = np.abs(data.vis)
    with np.errstate(divide="ignore"):
        inv_snr = data.sigma[index] / amp[index]
    sigma = np.sqrt(np.sum(inv_snr**2, axis=1)) if len(index) else np.zeros(0)
    return ClosurePhases(index=index, conj=conj, stations=stations, mjd=times, value=value, sigma=sigma)


def model_closure_phases(vis, index, conj):
    """Closure phases (radians, in (-pi, pi]) of complex visibilities ``vis`` (NumPy or JAX arrays).

    One ``take`` per leg on the real and imaginary parts (1-D gathers: on XLA's CPU backend a
    2-D complex gather was 3x slower), the triple product in real arithmetic, one ``arctan2``
    per triangle.  Works inside a jitted model.
    """
    xp = jnp if isinstance(vis, jax.Array) else np
    re, im = xp.real(vis), xp.imag(vis)
    sign = 1 - 2 * xp.asarray(conj, re.dtype)  # -1 on conjugated legs; index and conj may be traced
    legs = []
    for k in range(3):
        legs.append((xp.take(re, index[:, k]), xp.take(im, index[:, k]) * sign[:, k]))
    (a, b), (c, d), (e, f) = legs
    pr, pi_ = a * c - b * d, a * d + b * c  # first two legs
    return xp.arctan2(pr * f + pi_ * e, pr * e - pi_ * f)
