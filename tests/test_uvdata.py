"""uvdata files, array files, the EHT simulator (against ehtim when installed) and closure phases."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from multiwalk.eht import closure_phases, closure_triangles, load_array, read_array, simulate, uv_tracks
from multiwalk.eht.closure import model_closure_phases
from multiwalk.io.uvdata import UVData, read_uvdata, write_uvdata
from multiwalk.models import xringaus

TRUTH = np.array([2.5, 26.0, 0.6, 0.4, 0.3, 0.6, 0.8, 0.2, 1.0])


def _model(u, v):
    return np.asarray(xringaus(TRUTH, u, v))


@pytest.fixture(scope="module")
def obs() -> UVData:
    return simulate(load_array("EHT2017"), _model, cadence_seconds=3600.0, scan_seconds=300.0, seed=3)


# ---------------------------------------------------------------------------- uvdata files
def test_round_trip(tmp_path: Path, obs: UVData) -> None:
    path = tmp_path / "x_uvdata.txt"
    write_uvdata(path, obs)
    back = read_uvdata(path)
    assert len(back) == len(obs)
    # the format's precision: times 0.01 s, U V W 0.01 kilolambda (1e-8 G lambda), amplitudes 1e-6 Jy,
    # phases 1e-6 deg, sigmas 1e-8 Jy; the bounds are half a unit of the last digit
    assert np.max(np.abs(back.mjd - obs.mjd)) * 86400 <= 0.005 + 1e-6
    for name in ("u", "v", "w"):
        assert np.max(np.abs(getattr(back, name) - getattr(obs, name))) <= 0.5e-8 + 1e-12
    assert np.max(np.abs(back.amplitude - obs.amplitude)) <= 0.5e-6 + 1e-12
    dphase = np.angle(np.exp(1j * (back.phase - obs.phase)))
    assert np.max(np.abs(dphase)) <= np.deg2rad(0.5e-6) + 1e-12
    assert np.max(np.abs(back.sigma - obs.sigma)) <= 0.5e-8 + 1e-15
    assert np.array_equal(back.ant1, obs.ant1) and np.array_equal(back.ant2, obs.ant2)
    assert back.stations == obs.stations and back.stations[5] == "ALMA"


def _write(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "bad_uvdata.txt"
    path.write_text("\n".join(rows) + "\n")
    return path


GOOD = "2017:097:04:00:00.00   -3353860.25   -5673338.93    -286396.05 05-06    00    (     0.185617,      -49.215158)" \
       "  1.00 0.00656"


def test_reader_parses_the_format_and_skips_flagged_rows(tmp_path: Path) -> None:
    flagged = GOOD.replace("  1.00 0.00656", "  0.00 0.00656")
    path = _write(tmp_path, ["# a comment", GOOD, "", flagged])
    d = read_uvdata(path)
    assert len(d) == 1  # the weight-0 row is skipped
    assert d.u[0] == pytest.approx(-3.35386025) and d.v[0] == pytest.approx(-5.67333893)  # kilolambda -> G lambda
    assert d.ant1[0] == 5 and d.ant2[0] == 6 and d.chan[0] == 0
    assert d.amplitude[0] == pytest.approx(0.185617) and d.phase[0] == pytest.approx(np.deg2rad(-49.215158))
    assert d.sigma[0] == pytest.approx(0.00656)
    assert (d.mjd[0] - 57850) * 24 == pytest.approx(4.0)  # 2017 day 97 = 7 April = MJD 57850


@pytest.mark.parametrize(
    "row, message",
    [
        (GOOD.replace("(", ""), "expected"),
        (GOOD.replace("-3353860.25", "-33538x0.25"), "u is '-33538x0.25', not a number"),
        (GOOD.replace("2017:097", "2017:400"), "out of range"),
        (GOOD.replace("05-06", "05-05"), "joins a station to itself"),
        (GOOD.replace("0.00656", "0"), "sigma_Jy is 0.0"),
        (GOOD.replace("0.185617", "nan"), "not a finite number"),
    ],
)
def test_reader_errors_name_file_and_line(tmp_path: Path, row: str, message: str) -> None:
    path = _write(tmp_path, [GOOD, "# comment", row])
    with pytest.raises(ValueError, match=message) as err:
        read_uvdata(path)
    assert f"{path}, line 3" in str(err.value)


def test_reader_empty_and_missing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no unflagged visibility rows"):
        read_uvdata(_write(tmp_path, ["# nothing"]))
    with pytest.raises(FileNotFoundError):
        read_uvdata(tmp_path / "missing_uvdata.txt")


def test_array_file_errors(tmp_path: Path) -> None:
    arr = load_array("EHT2017")
    assert arr.names[:3] == ("PV", "SMT", "SMA") and len(arr) == 8 and arr.sefd_r[4] == 90.0
    bad = tmp_path / "arr.txt"
    bad.write_text("#NAME X Y Z SEFDR SEFDL\nAA 5088967.9 -301681.6 3825015.8 1400 1400\nBB 1 2 3 oops 5\n")
    with pytest.raises(ValueError, match=f"{bad}, line 3"):
        read_array(bad)
    with pytest.raises(ValueError, match="neither one of"):
        load_array("NOPE")


# ---------------------------------------------------------------------------- simulator
def test_simulated_tracks(obs: UVData) -> None:
    arr = load_array("EHT2017")
    # every baseline length is at most the distance between its stations (in wavelengths at 230 GHz)
    lam = 299_792_458.0 / 230e9
    dist = np.linalg.norm(arr.xyz[obs.ant1 - 1] - arr.xyz[obs.ant2 - 1], axis=1) / lam * 1e-9
    proj = np.sqrt(obs.u**2 + obs.v**2 + obs.w**2)
    assert np.allclose(proj, dist, rtol=1e-12)  # (u, v, w) is the baseline in a rotated frame: same length
    assert np.all(obs.baseline_length <= dist * (1 + 1e-12))
    # SPT (geocentric latitude -90) sees Sgr A* at elevation = -dec = 29 deg all day: it is in every scan
    spt = arr.names.index("SPT") + 1
    assert all(np.any((obs.ant1[obs.mjd == t] == spt) | (obs.ant2[obs.mjd == t] == spt)) for t in np.unique(obs.mjd))
    # noise: normalised residuals of the simulated visibilities are standard normal (2 x n values)
    resid = obs.vis - _model(obs.u, obs.v)
    z = np.concatenate([resid.real, resid.imag]) / np.r_[obs.sigma, obs.sigma]
    # 2n ~ 350 draws: the sample sd has a standard error of 1/sqrt(2 * 350) ~ 0.04; 0.15 is > 3.5 of them
    assert abs(np.std(z) - 1) < 0.15 and abs(np.mean(z)) < 0.2


def test_simulator_bad_input() -> None:
    arr = load_array("EHT2017")
    with pytest.raises(ValueError, match="scan_seconds"):
        simulate(arr, _model, scan_seconds=0)
    with pytest.raises(ValueError, match="elevation_limits"):
        uv_tracks(arr, [57850.0], elevation_limits=(50, 10))
    with pytest.raises(TypeError, match="visibility"):
        simulate(arr, 3.0)


def test_against_ehtim() -> None:
    """Our u, v tracks, sigmas and visibilities of one image against ehtim's (direct FT); skipped without ehtim."""
    eh = pytest.importorskip("ehtim")
    from multiwalk.eht.simulate import SGRA_DEC_DEG, SGRA_RA_HOURS
    from multiwalk.models import image

    arr = load_array("EHT2017")
    npix, fov = 128, 160.0
    img = image(TRUTH, npix, fov, oversample=4)
    psize = fov * 1e-6 / 3600 * np.pi / 180 / npix  # radians
    # ehtim images have East (x > 0) in column 0; ours have it in the last column
    im = eh.image.Image(img[::-1, ::-1], psize, SGRA_RA_HOURS, SGRA_DEC_DEG, rf=230e9, mjd=57850, source="SgrA")
    tarr = eh.array.load_txt(str(Path(__file__).resolve().parents[1] / "src/multiwalk/eht/data/EHT2017.txt"))
    ours = simulate(arr, _model, cadence_seconds=3600.0, scan_seconds=300.0, noise=False)
    theirs = im.observe(tarr, 300.0, 3600.0, 0.0, 24.0, 2e9, mjd=57850, add_th_noise=False, ampcal=True, phasecal=True,
                        ttype="direct", elevmin=10.0, elevmax=85.0, verbose=False)
    t = theirs.data
    name = {i + 1: n for i, n in enumerate(arr.names)}
    key_ours = {(round(m * 86400), name[a], name[b]): i for i, (m, a, b) in enumerate(zip(ours.mjd, ours.ant1, ours.ant2))}
    # ehtim may store a baseline the other way round (t2, t1): then its u, v and vis are negated / conjugated
    key_theirs, flip = {}, np.ones(len(t))
    for k, (tt, a, b) in enumerate(zip(t["time"], t["t1"], t["t2"])):
        sec = round((57850 + tt / 24) * 86400)
        if (sec, str(b), str(a)) in key_ours:
            key_theirs[(sec, str(b), str(a))], flip[k] = k, -1.0
        else:
            key_theirs[(sec, str(a), str(b))] = k
    common = sorted(set(key_ours) & set(key_theirs))
    # the same baselines see the source at the same times, but for the odd one at an elevation
    # limit (the GMST difference below moves elevations by < 0.005 deg)
    assert len(common) >= 0.98 * max(len(key_ours), len(key_theirs))
    i = np.array([key_ours[k] for k in common])
    j = np.array([key_theirs[k] for k in common])
    tu, tv = t["u"][j] * flip[j], t["v"][j] * flip[j]
    tvis = np.where(flip[j] > 0, t["vis"][j], np.conj(t["vis"][j]))
    longest = np.hypot(tu, tv).max()
    du = np.abs(ours.u[i] * 1e9 + tu) / longest  # ehtim's (u, v) = -ours (see multiwalk.eht.simulate)
    dv = np.abs(ours.v[i] * 1e9 + tv) / longest
    # GMST formulas and UT1 - UTC (ours takes UT1 = UTC, ehtim asks astropy's IERS table) differ by
    # < 1 s of Earth rotation: 7e-5 rad, so 1e-4 of the longest baseline
    assert du.max() < 1e-4 and dv.max() < 1e-4, (du.max(), dv.max())
    assert np.allclose(ours.sigma[i], t["sigma"][j], rtol=1e-9)  # the same thermal-noise formula
    # ehtim's direct FT of the pixel image (triangle pulse) vs our analytic model: the image's
    # pixelisation (1.25 uas pixels) and the pulse's taper (1 - (pi u p)^2 / 6 > 0.99) limit the agreement
    dvis = np.abs(ours.vis[i] - tvis)
    print(f"ehtim cross-check: {len(common)} common of {len(key_ours)} ours / {len(key_theirs)} ehtim; max |du|, |dv| "
          f"{du.max():.2e}, {dv.max():.2e} of the longest baseline; max |dV| {dvis.max():.2e} Jy, rms "
          f"{np.sqrt(np.mean(dvis**2)):.2e} Jy; max |d sigma|/sigma {np.max(np.abs(ours.sigma[i] / t['sigma'][j] - 1)):.1e}")
    assert dvis.max() < 0.006 * TRUTH[0], dvis.max()  # measured 7.2e-3 Jy = 0.29 % of Zsp


# ---------------------------------------------------------------------------- closure phases
def test_closure_phase_count_and_gain_invariance(obs: UVData) -> None:
    cp = closure_phases(obs)
    for t in np.unique(obs.mjd):
        rows = obs.mjd == t
        n = len(set(obs.ant1[rows]) | set(obs.ant2[rows]))
        assert np.sum(cp.mjd == t) == (n - 1) * (n - 2) // 2  # all baselines are present at each time
    # station-based phase errors cancel in closure phases
    rng = np.random.default_rng(1)
    gains = np.exp(1j * rng.uniform(-np.pi, np.pi, (len(np.unique(obs.mjd)), 9)))
    tix = np.searchsorted(np.unique(obs.mjd), obs.mjd)
    corrupted = obs.vis * gains[tix, obs.ant1] * np.conj(gains[tix, obs.ant2])
    wrapped = np.angle(np.exp(1j * (model_closure_phases(corrupted, cp.index, cp.conj) - cp.value)))
    assert np.max(np.abs(wrapped)) < 1e-9  # float64 rounding of products of ~3 unit phasors
    # sigma: sqrt(sum (sigma_i / |V_i|)^2)
    i = 0
    snr = obs.amplitude[cp.index[i]] / obs.sigma[cp.index[i]]
    assert cp.sigma[i] == pytest.approx(np.sqrt(np.sum(1 / snr**2)))


def test_closure_triangles_orientation_and_missing_baselines() -> None:
    # 4 stations at one time, baselines stored in mixed orientation; one baseline (2-4) missing
    ant1 = np.array([1, 3, 1, 3, 1])
    ant2 = np.array([2, 2, 3, 4, 4])
    phases = {(1, 2): 0.3, (3, 2): -0.2, (1, 3): 1.1, (3, 4): 0.7, (1, 4): -0.4}
    vis = np.array([np.exp(1j * phases[(a, b)]) for a, b in zip(ant1, ant2)])
    index, conj, stations, _ = closure_triangles(np.zeros(5), ant1, ant2)
    # reference = station 1 (most baselines); (1,2,4) lacks baseline 2-4: two triangles, not three
    assert stations.tolist() == [[1, 2, 3], [1, 3, 4]]
    cp = model_closure_phases(vis, index, conj)
    # (1,2,3): phi12 + phi23 + phi31 = 0.3 + 0.2 - 1.1; (1,3,4): 1.1 + 0.7 + 0.4
    assert np.allclose(cp, [0.3 + 0.2 - 1.1, np.angle(np.exp(1j * (1.1 + 0.7 + 0.4)))])
