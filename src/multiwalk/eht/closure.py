"""Closure phases and log closure amplitudes: a maximal independent set at each time, chosen by rank.

A closure phase ``arg(V_ab V_bc V_ca)`` (``V_ba = conj(V_ab)``) is a signed sum of baseline
phases that station phase errors cancel from.  At a time with N stations and every baseline
measured, (N-1)(N-2)/2 of them are independent (the cycle space of the complete graph).  They
are chosen greedily by rank: the triangles ``(ref, j, k)``, ``j < k``, of a reference station
first (the station with the most baselines at that time, the lowest number on ties), then the
other triangles in number order; a triangle is kept when its vector of baseline coefficients
(+1, or -1 for a baseline that enters conjugated) is independent of those kept before
(:func:`select_independent`).  With every baseline present this is the reference station's
set (as ehtim's minimal set); with baselines missing (flagged, or co-located ones dropped) it
still has the rank of all the triangles that can be formed.

Log closure amplitudes ``log(|V_ab| |V_cd| / (|V_ac| |V_bd|))`` cancel station amplitude
gains; N(N-3)/2 of them are independent at a time of N stations with every baseline (the
space of baseline log-amplitude combinations that every station's gain cancels from, of
dimension ``E - N`` for E baselines when the baselines join all N stations in a graph with an
odd cycle).  Their quadrangles are chosen the same way: those with the reference station
first (each set of four stations gives three quadrangles, ehtim's (12)(34)/(14)(23) first),
kept when independent of those kept before, so a missing baseline is made up for by another
quadrangle when one exists.

The standard deviation of a closure phase is ``sqrt(sum (sigma_i / |V_i|)^2)`` over its three
baselines: the high-SNR limit, where a visibility's phase error is ``sigma / |V|`` radians (the
seed's formula above SNR 30); that of a log closure amplitude is the same sum over its four
baselines, ``log|V|`` having the error ``sigma / |V|``.  Closure quantities of one time that
share a baseline are correlated: :func:`closure_covariance` gives each time's covariance
matrix in the same limit.  The model side, :func:`model_closure_phases` and
:func:`model_log_closure_amplitudes`, takes model visibilities at the data's rows and the same
index arrays, in ``jax.numpy`` inside a fit.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..io.uvdata import UVData

__all__ = [
    "ClosurePhases",
    "closure_triangles",
    "closure_phases",
    "model_closure_phases",
    "select_independent",
    "closure_sets",
    "closure_covariance",
    "LogClosureAmplitudes",
    "log_closure_amplitudes",
    "model_log_closure_amplitudes",
]


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

    @property
    def signs(self) -> np.ndarray:
        """(M, 3): +1, or -1 where a leg enters conjugated (its phase counts negatively)."""
        return np.where(self.conj, -1.0, 1.0)


def _baseline_rows(ant1: np.ndarray, ant2: np.ndarray, rows: np.ndarray) -> dict[tuple[int, int], tuple[int, bool]]:
    """``(a, b) -> (row, conjugated)`` for both orientations of every baseline among ``rows`` (first row wins)."""
    where: dict[tuple[int, int], tuple[int, bool]] = {}
    for r in rows:
        a, b = int(ant1[r]), int(ant2[r])
        where.setdefault((a, b), (int(r), False))
        where.setdefault((b, a), (int(r), True))
    return where


def select_independent(vectors: np.ndarray, tol: float = 1e-9) -> list[int]:
    """Indices of the rows of ``vectors`` (K, E) that are linearly independent of the rows before them.

    Greedy Gram-Schmidt (the projection removed twice, for stability) in float64: a row is kept
    when what remains of it off the kept rows' span has a norm above ``tol`` times its own.  The
    kept rows span what all rows span (their number is the rank).
    """
    vectors = np.asarray(vectors, np.float64)
    basis = np.zeros((0, vectors.shape[1]))
    kept = []
    for i, vec in enumerate(vectors):
        norm = np.linalg.norm(vec)
        rest = vec - basis.T @ (basis @ vec)
        rest -= basis.T @ (basis @ rest)
        size = np.linalg.norm(rest)
        if norm > 0 and size > tol * norm:
            basis = np.vstack([basis, rest / size])
            kept.append(i)
    return kept


# A closure is a list of (baseline (a, b), coefficient): a closure phase sums the phases of
# V_ab, V_bc, V_ca; a log closure amplitude |V_ab| |V_cd| / (|V_ac| |V_bd|) adds log|V_ab| and
# log|V_cd| and subtracts log|V_ac| and log|V_bd|.
Closure = tuple[tuple[tuple[int, int], float], ...]


def _triangle(a: int, b: int, c: int) -> Closure:
    return (((a, b), 1.0), ((b, c), 1.0), ((c, a), 1.0))


def _quadrangle(a: int, b: int, c: int, d: int) -> Closure:
    return (((a, b), 1.0), ((c, d), 1.0), ((a, c), -1.0), ((b, d), -1.0))


def _candidates(kind: str, ref: int, others: list[int]) -> list[Closure]:
    """Every closure of ``kind`` among the stations, those with the reference station first."""
    if kind == "triangle":
        with_ref = [_triangle(ref, j, k) for j, k in itertools.combinations(others, 2)]
        return with_ref + [_triangle(*tri) for tri in itertools.combinations(others, 3)]
    # a, b, c, d: the three pairings (ab)(cd)/(ad)(bc) [ehtim's (12)(34)/(14)(23)], (ab)(cd)/(ac)(bd), (ac)(bd)/(ad)(bc)
    def pairings(a: int, b: int, c: int, d: int) -> list[Closure]:
        return [_quadrangle(a, b, d, c), _quadrangle(a, b, c, d), _quadrangle(a, c, d, b)]

    with_ref = [q for j, k, m in itertools.combinations(others, 3) for q in pairings(ref, j, k, m)]
    return with_ref + [q for quad in itertools.combinations(others, 4) for q in pairings(*quad)]


def _independent_closures(kind: str, baselines: frozenset[tuple[int, int]]) -> list[Closure]:
    """A maximal independent set of closures of ``kind`` on the (undirected, a < b) ``baselines``.

    The reference station is the one with the most baselines (the lowest number on ties).  The
    coefficient vectors are over the baselines, with a baseline's phase counted negatively
    when a closure phase runs it backwards, and its log amplitude counted either way.
    """
    stations = sorted({s for edge in baselines for s in edge})
    degree = {s: sum(s in edge for edge in baselines) for s in stations}
    ref = max(stations, key=lambda s: (degree[s], -s))
    column = {edge: n for n, edge in enumerate(sorted(baselines))}
    usable = []
    for closure in _candidates(kind, ref, [s for s in stations if s != ref]):
        if all((min(edge), max(edge)) in column for edge, _ in closure):
            usable.append(closure)
    vectors = np.zeros((len(usable), len(column)))
    for m, closure in enumerate(usable):
        for (a, b), coefficient in closure:
            backwards = kind == "triangle" and a > b
            vectors[m, column[(min(a, b), max(a, b))]] += -coefficient if backwards else coefficient
    return [usable[m] for m in select_independent(vectors)]


def closure_sets(
    kind: str, mjd: np.ndarray, ant1: np.ndarray, ant2: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(index, conj, stations, mjd)`` of a maximal independent set of closures at every time.

    ``kind`` is ``"triangle"`` (closure phases, 3 legs) or ``"quadrangle"`` (log closure
    amplitudes, 4 legs).  ``index`` (M, legs): the rows of the legs' visibilities; ``conj``
    (M, legs): whether a leg's row is stored the other way round; ``stations``: a triangle's
    ``(a, b, c)`` (M, 3), a quadrangle's ``(a, b, c, d)`` for ``|V_ab| |V_cd| / (|V_ac| |V_bd|)``
    (M, 4); ``mjd`` (M,).  Times with the same baselines share one selection (made once).
    """
    if kind not in ("triangle", "quadrangle"):
        raise ValueError(f"kind must be 'triangle' or 'quadrangle', got {kind!r}")
    legs = 3 if kind == "triangle" else 4
    mjd, ant1, ant2 = np.asarray(mjd), np.asarray(ant1), np.asarray(ant2)
    index, conj, stations, times = [], [], [], []
    chosen: dict[frozenset[tuple[int, int]], list[Closure]] = {}
    for t in np.unique(mjd):
        rows = np.flatnonzero(mjd == t)
        where = _baseline_rows(ant1, ant2, rows)
        baselines = frozenset((a, b) for a, b in where if a < b)
        if len({s for edge in baselines for s in edge}) < legs:
            continue
        if baselines not in chosen:
            chosen[baselines] = _independent_closures(kind, baselines)
        for closure in chosen[baselines]:
            index.append([where[edge][0] for edge, _ in closure])
            conj.append([where[edge][1] for edge, _ in closure])
            corners = [edge[0] for edge, _ in closure[:3]] if legs == 3 else [*closure[0][0], *closure[1][0]]
            stations.append(corners)
            times.append(t)
    if not index:
        return (np.zeros((0, legs), np.int64), np.zeros((0, legs), bool), np.zeros((0, 3 if legs == 3 else 4), np.int64),
                np.zeros(0))
    return np.array(index, np.int64), np.array(conj, bool), np.array(stations, np.int64), np.array(times)


def closure_triangles(
    mjd: np.ndarray, ant1: np.ndarray, ant2: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(index, conj, stations, mjd)`` of a maximal independent set of triangles at every time (see the module).

    ``index`` (M, 3): the rows of legs ``(a, b), (b, c), (c, a)``; ``conj`` (M, 3): whether a
    leg's row is stored the other way round; ``stations`` (M, 3) ``(a, b, c)``; ``mjd`` (M,).
    """
    return closure_sets("triangle", mjd, ant1, ant2)


def closure_phases(data: UVData) -> ClosurePhases:
    """Closure phases of ``data`` and their sigmas (radians); ValueError when no time has 3 stations."""
    if not isinstance(data, UVData):
        raise TypeError(f"data must be a UVData, got {type(data).__name__}")
    index, conj, stations, times = closure_triangles(data.mjd, data.ant1, data.ant2)
    if not len(index):
        raise _no_closures_error(data, "closure phases", 3)
    value = np.asarray(model_closure_phases(data.vis, index, conj))
    amp = np.abs(data.vis)
    with np.errstate(divide="ignore"):
        inv_snr = data.sigma[index] / amp[index]
    sigma = np.sqrt(np.sum(inv_snr**2, axis=1))
    return ClosurePhases(index=index, conj=conj, stations=stations, mjd=times, value=value, sigma=sigma)


def _no_closures_error(data: UVData, what: str, needed: int) -> ValueError:
    """The ValueError for data without a closure quantity, naming the file and the most stations at one time."""
    most = 0
    for t in np.unique(data.mjd):
        rows = data.mjd == t
        most = max(most, len(set(data.ant1[rows].tolist()) | set(data.ant2[rows].tolist())))
    source = data.origin or "the data"
    return ValueError(f"{source}: no {what} can be formed: they need {needed} stations observing at one time, "
                      f"and the most at any of the {len(np.unique(data.mjd))} times is {most}")


def closure_covariance(closures, data: UVData) -> list[np.ndarray]:
    """The covariance matrix of each time's closure quantities (high-SNR limit), in time order.

    ``closures`` is a :class:`ClosurePhases` or a
    :class:`LogClosureAmplitudes` made from ``data``.  Both
    are signed sums ``sum_k s_k x_{index_k}`` of per-visibility errors ``x`` (a phase, or a log
    amplitude) of variance ``(sigma / |V|)^2``, so ``C = A diag((sigma / |V|)^2) A^T`` with ``A``
    the signs on the time's rows; the diagonal is ``closures.sigma**2``.  Block ``b`` belongs
    to the closures at the ``b``-th distinct time (``np.unique(closures.mjd)``).
    """
    if not isinstance(data, UVData):
        raise TypeError(f"data must be a UVData, got {type(data).__name__}")
    var = (data.sigma / np.abs(data.vis)) ** 2
    blocks = []
    for t in np.unique(closures.mjd):
        members = np.flatnonzero(closures.mjd == t)
        rows, local = np.unique(closures.index[members], return_inverse=True)
        design = np.zeros((len(members), len(rows)))
        np.add.at(design, (np.repeat(np.arange(len(members)), closures.index.shape[1]), local.reshape(-1)),
                  closures.signs[members].reshape(-1))
        blocks.append(design @ (var[rows][:, None] * design.T))
    return blocks


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


# ---------------------------------------------------------------------------- log closure amplitudes
@dataclass
class LogClosureAmplitudes:
    """``index`` (M, 4) rows of ``V_ab, V_cd, V_ac, V_bd``, ``stations`` (M, 4) ``(a, b, c, d)``,
    ``mjd`` (M,), ``value`` = ``log(|V_ab| |V_cd| / (|V_ac| |V_bd|))`` and ``sigma`` (M,)."""

    index: np.ndarray
    stations: np.ndarray
    mjd: np.ndarray
    value: np.ndarray
    sigma: np.ndarray

    def __len__(self) -> int:
        return int(self.index.shape[0])

    @property
    def signs(self) -> np.ndarray:
        """(M, 4): +1 for the numerator's legs, -1 for the denominator's."""
        return np.broadcast_to(np.array([1.0, 1.0, -1.0, -1.0]), self.index.shape)


def log_closure_amplitudes(data: UVData) -> LogClosureAmplitudes:
    """Log closure amplitudes of ``data``, N(N-3)/2 independent ones per time of N stations (see the module).

    Their sigma is ``sqrt(sum (sigma_i / |V_i|)^2)`` over the four baselines: the high-SNR limit,
    where ``log|V|`` has the error ``sigma / |V|``.  Amplitudes are not debiased: at low SNR
    (below about 3) average scans first (:func:`multiwalk.io.uvprep.scan_average`) or drop
    the faint rows, or the log closure amplitudes are biased.  ValueError when no time has 4 stations.
    """
    if not isinstance(data, UVData):
        raise TypeError(f"data must be a UVData, got {type(data).__name__}")
    index, _, stations, times = closure_sets("quadrangle", data.mjd, data.ant1, data.ant2)
    if not len(index):
        raise _no_closures_error(data, "log closure amplitudes", 4)
    amp = np.abs(data.vis)
    if np.any(amp[index] == 0):
        row = int(index[amp[index] == 0][0])
        raise ValueError(f"{data.origin or 'the data'}: row {row} has |V| = 0, whose log closure amplitudes are undefined")
    value = np.asarray(model_log_closure_amplitudes(data.vis, index))
    sigma = np.sqrt(np.sum((data.sigma[index] / amp[index]) ** 2, axis=1))
    return LogClosureAmplitudes(index=index, stations=stations, mjd=times, value=value, sigma=sigma)


def model_log_closure_amplitudes(vis, index):
    """``log(|V_0| |V_1| / (|V_2| |V_3|))`` of the rows ``index`` (M, 4) of ``vis`` (NumPy or JAX arrays).

    ``log|V| = log(re^2 + im^2) / 2`` from 1-D gathers of the real and imaginary parts (as
    :func:`model_closure_phases`); no square root, no complex arithmetic.  Works inside a jitted model.
    """
    xp = jnp if isinstance(vis, jax.Array) else np
    re, im = xp.real(vis), xp.imag(vis)
    logs = []
    for k in range(4):
        a, b = xp.take(re, index[:, k]), xp.take(im, index[:, k])
        logs.append(xp.log(a * a + b * b))
    return 0.5 * ((logs[0] + logs[1]) - (logs[2] + logs[3]))
