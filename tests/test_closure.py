"""Closure phases and log closure amplitudes: maximal independent sets chosen by rank, gain
invariance, sigmas, covariance, and the jax model side."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from multiwalk.eht import (
    closure_covariance,
    closure_phases,
    log_closure_amplitudes,
    model_closure_phases,
    model_log_closure_amplitudes,
    select_independent,
)
from multiwalk.io import UVData

N_STATIONS, N_TIMES = 6, 3


def observation(missing: tuple[tuple[int, int], ...] = (), seed: int = 0) -> UVData:
    """N_STATIONS stations at N_TIMES times, every baseline but ``missing``, half stored the other way round."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(N_TIMES):
        for a, b in itertools.combinations(range(1, N_STATIONS + 1), 2):
            if (a, b) not in missing:
                rows.append((t, *((b, a) if rng.random() < 0.5 else (a, b))))
    t, a1, a2 = np.array(rows).T
    n = len(t)
    vis = rng.uniform(0.5, 2.0, n) * np.exp(1j * rng.uniform(-np.pi, np.pi, n))
    return UVData(mjd=57848 + t / 1440, u=rng.normal(size=n), v=rng.normal(size=n), w=np.zeros(n), ant1=a1, ant2=a2,
                  vis=vis, sigma=rng.uniform(0.01, 0.05, n), origin="six.uvfits")


def all_closure_vectors(data: UVData, t: float, kind: str) -> np.ndarray:
    """Coefficient vectors over the time's rows of every triangle (phases) or quadrangle pairing (log amplitudes)."""
    rows = np.flatnonzero(data.mjd == t)
    edge = {}
    for n, r in enumerate(rows):
        a, b = int(data.ant1[r]), int(data.ant2[r])
        edge[(a, b)] = (n, 1.0)
        edge[(b, a)] = (n, -1.0 if kind == "triangle" else 1.0)
    stations = sorted({*data.ant1[rows].tolist(), *data.ant2[rows].tolist()})
    vectors = []
    if kind == "triangle":
        for a, b, c in itertools.combinations(stations, 3):
            legs = [(a, b, 1), (b, c, 1), (c, a, 1)]
            if all((x, y) in edge for x, y, _ in legs):
                vec = np.zeros(len(rows))
                for x, y, _ in legs:
                    vec[edge[(x, y)][0]] += edge[(x, y)][1]
                vectors.append(vec)
    else:
        for a, b, c, d in itertools.combinations(stations, 4):
            pairings = [((a, b), (c, d)), ((a, c), (b, d)), ((a, d), (b, c))]
            for num, other in itertools.permutations(pairings, 2):
                if all(e in edge for e in (*num, *other)):
                    vec = np.zeros(len(rows))
                    for e in num:
                        vec[edge[e][0]] += 1
                    for e in other:
                        vec[edge[e][0]] -= 1
                    vectors.append(vec)
    return np.array(vectors)


def chosen_vectors(data: UVData, closures, t: float) -> np.ndarray:
    rows = np.flatnonzero(data.mjd == t)
    column = {r: n for n, r in enumerate(rows)}
    members = np.flatnonzero(closures.mjd == t)
    out = np.zeros((len(members), len(rows)))
    for m, q in enumerate(members):
        for r, s in zip(closures.index[q], closures.signs[q]):
            out[m, column[r]] += s
    return out


@pytest.mark.parametrize("missing", [(), ((1, 2), (3, 4)), ((1, 2), (3, 4), (5, 6)), ((1, 2), (1, 3), (1, 4))])
def test_counts_and_rank(missing) -> None:
    """(N-1)(N-2)/2 closure phases and N(N-3)/2 log closure amplitudes per time with every baseline;
    with baselines missing (co-located pairs dropped; every station missing one, where the
    triangles of one reference station give 4 of the 7; a station missing three), as many as
    the rank of all triangles / quadrangles, and the chosen ones independent."""
    data = observation(missing)
    cp, lca = closure_phases(data), log_closure_amplitudes(data)
    for t in np.unique(data.mjd):
        for closures, kind in ((cp, "triangle"), (lca, "quadrangle")):
            rank_all = np.linalg.matrix_rank(all_closure_vectors(data, t, kind))
            chosen = chosen_vectors(data, closures, t)
            assert np.linalg.matrix_rank(chosen) == len(chosen) == rank_all
        if not missing:
            n = N_STATIONS
            assert np.sum(cp.mjd == t) == (n - 1) * (n - 2) // 2 and np.sum(lca.mjd == t) == n * (n - 3) // 2
    if missing == ((1, 2), (3, 4)):  # 13 baselines of 6 stations: 13 - 6 + 1 closure phases, 13 - 6 log amplitudes
        assert np.sum(cp.mjd == data.mjd[0]) == 8 and np.sum(lca.mjd == data.mjd[0]) == 7


def test_station_gains_cancel() -> None:
    """Complex gains per station and time change no closure quantity (float64 rounding only)."""
    data = observation(((1, 2), (3, 4)))
    cp, lca = closure_phases(data), log_closure_amplitudes(data)
    rng = np.random.default_rng(5)
    gains = rng.uniform(0.3, 3.0, (N_TIMES, N_STATIONS + 1)) * np.exp(1j * rng.uniform(-np.pi, np.pi, (N_TIMES, N_STATIONS + 1)))
    tix = np.searchsorted(np.unique(data.mjd), data.mjd)
    corrupted = data.vis * gains[tix, data.ant1] * np.conj(gains[tix, data.ant2])
    dphase = np.angle(np.exp(1j * (model_closure_phases(corrupted, cp.index, cp.conj) - cp.value)))
    dlog = model_log_closure_amplitudes(corrupted, lca.index) - lca.value
    # a product of 3 (4) complex numbers and gains: a few float64 roundings of numbers of size ~1
    assert np.max(np.abs(dphase)) < 32 * np.finfo(float).eps * np.pi, np.max(np.abs(dphase))
    assert np.max(np.abs(dlog)) < 32 * np.finfo(float).eps * 8, np.max(np.abs(dlog))
    # and the values are what they say: arg(V_ab V_bc V_ca), log(|V_ab||V_cd| / (|V_ac||V_bd|))
    def vis_of(t, a, b):
        r = np.flatnonzero((data.mjd == t) & (data.ant1 == a) & (data.ant2 == b))
        return data.vis[r[0]] if len(r) else np.conj(vis_of(t, b, a))
    a, b, c = cp.stations[4]
    t = cp.mjd[4]
    assert cp.value[4] == pytest.approx(np.angle(vis_of(t, a, b) * vis_of(t, b, c) * vis_of(t, c, a)))
    a, b, c, d = lca.stations[5]
    t = lca.mjd[5]
    ratio = abs(vis_of(t, a, b)) * abs(vis_of(t, c, d)) / (abs(vis_of(t, a, c)) * abs(vis_of(t, b, d)))
    assert lca.value[5] == pytest.approx(np.log(ratio))


def test_sigmas_and_covariance_match_noise() -> None:
    """High-SNR sigmas and the within-time covariance against 4000 noise draws (SNR 50-200)."""
    data = observation()
    cp, lca = closure_phases(data), log_closure_amplitudes(data)
    rng = np.random.default_rng(7)
    draws = 4000
    noise = data.sigma * (rng.standard_normal((draws, len(data))) + 1j * rng.standard_normal((draws, len(data))))
    noisy = data.vis + noise
    for closures, values in (
        (cp, np.stack([np.angle(np.exp(1j * (model_closure_phases(v, cp.index, cp.conj) - cp.value))) for v in noisy])),
        (lca, np.stack([model_log_closure_amplitudes(v, lca.index) - lca.value for v in noisy])),
    ):
        blocks = closure_covariance(closures, data)
        assert len(blocks) == N_TIMES
        block = blocks[0]
        np.testing.assert_allclose(np.diag(block), closures.sigma[closures.mjd == data.mjd[0]] ** 2, rtol=1e-12)
        measured = np.cov(values[:, closures.mjd == data.mjd[0]].T)
        scale = np.sqrt(np.outer(np.diag(block), np.diag(block)))
        # the sample covariance of 4000 draws: correlations to about 3/sqrt(4000) = 0.05
        assert np.max(np.abs(measured - block) / scale) < 0.08
        assert np.max(np.abs(block - np.diag(np.diag(block))) / scale) > 0.2  # shared baselines do correlate


def test_model_side_in_jax() -> None:
    """The model functions under jit on JAX arrays give the data functions' values."""
    data = observation(((2, 5),))
    cp, lca = closure_phases(data), log_closure_amplitudes(data)
    fn = jax.jit(lambda v: (model_closure_phases(v, cp.index, cp.conj), model_log_closure_amplitudes(v, lca.index)))
    phases, logs = fn(jnp.asarray(data.vis))
    # JAX computes in float32 unless x64 is enabled: a few float32 ulps of pi (phases) and of the logs' terms
    tol = 16 * np.finfo(np.float32).eps * np.pi if phases.dtype == jnp.float32 else 1e-12
    np.testing.assert_allclose(np.asarray(phases), cp.value, rtol=0, atol=tol)
    np.testing.assert_allclose(np.asarray(logs), lca.value, rtol=0, atol=tol)


def test_select_independent() -> None:
    vectors = np.array([[1, 1, 0], [2, 2, 0], [0, 0, 0], [0, 1, 1], [1, 2, 1], [0, 0, 5]], float)
    assert select_independent(vectors) == [0, 3, 5]
