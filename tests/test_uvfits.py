"""UVFITS files: round trip, Stokes I and flags, the sign of u and v through image -> file -> fit,
scan averaging, systematic errors, co-located baselines, bad files, and the public M87 data."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from astropy.io import fits

from multiwalk.eht import closure_phases, load_array, log_closure_amplitudes, model_closure_phases, simulate, uv_tracks
from multiwalk.eht.array import StationArray
from multiwalk.io import (
    UVData,
    add_systematic_error,
    drop_colocated,
    read_uvfits,
    scan_average,
    write_uvfits,
)
from multiwalk.models.xringaus import UAS_TO_NRAD, image, xringaus

M87_RA_DEG, M87_DEC_DEG = 187.7059307575226, 12.39112323919932
FREQ = 229.0707e9
M87 = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "eht" / "m87_2017"
M87_HI_095 = M87 / "SR1_M87_2017_095_hi_hops_netcal_StokesI.uvfits"


def raw_uvfits(path: Path, *, uu_s, vv_s, baseline, jd, cube, stokes=(-1, -2, -3, -4), stations=("AA", "BB", "CC"),
               xyz=None, antenna_table=True, pscal=1.0) -> None:
    """A UVFITS file written with astropy alone, laid out as the EHT releases are.

    ``uu_s, vv_s``: seconds, as stored after scaling (``pscal`` is the stored scale); ``cube``
    (G, stokes, 3) real, imaginary, weight; ``stokes`` the STOKES axis' codes (equally spaced).
    """
    n = len(jd)
    cube = np.asarray(cube, np.float32)
    channels = cube.shape[1] if cube.ndim == 4 else 1  # (G, channels, stokes, 3) for several channels
    data = cube.reshape(n, 1, 1, 1, channels, len(stokes), 3)
    day = np.floor(np.asarray(jd) - 0.5) + 0.5
    pardata = [np.asarray(uu_s) / pscal, np.asarray(vv_s) / pscal, np.zeros(n), np.asarray(baseline, float), day,
               np.asarray(jd) - day]
    hdu = fits.GroupsHDU(fits.GroupData(data, parnames=["UU---SIN", "VV---SIN", "WW---SIN", "BASELINE", "DATE", "DATE"],
                                        pardata=pardata, bitpix=-32))
    h = hdu.header
    h["OBJECT"], h["OBSRA"], h["OBSDEC"] = "M87", M87_RA_DEG, M87_DEC_DEG
    step = stokes[1] - stokes[0] if len(stokes) > 1 else 1
    for k, (name, value, delta) in enumerate((("COMPLEX", 1.0, 1.0), ("STOKES", stokes[0], step), ("FREQ", FREQ, 2e9),
                                              ("", 1.0, 1.0), ("RA", M87_RA_DEG, 1.0), ("DEC", M87_DEC_DEG, 1.0)), 2):
        if name:
            h[f"CTYPE{k}"], h[f"CRVAL{k}"], h[f"CDELT{k}"], h[f"CRPIX{k}"] = name, value, delta, 1.0
    for k in (1, 2):
        h[f"PSCAL{k}"] = pscal
    hdus = [hdu]
    if antenna_table:
        positions = np.zeros((len(stations), 3)) if xyz is None else np.asarray(xyz, float)
        hdus.append(fits.BinTableHDU.from_columns([
            fits.Column(name="ANNAME", format="8A", array=np.array(stations)),
            fits.Column(name="STABXYZ", format="3D", array=positions),
            fits.Column(name="NOSTA", format="1J", array=np.arange(1, len(stations) + 1, dtype=np.int32))],
            name="AIPS AN"))
    fits.HDUList(hdus).writeto(path)


def _one_time_cube(vis_rr, vis_ll, w_rr, w_ll):
    """(G, 4, 3): RR, LL, RL (0, weight 0), LR (0, weight inf, as in the EHT releases)."""
    n = len(vis_rr)
    cube = np.zeros((n, 4, 3))
    cube[:, 0] = np.stack([np.real(vis_rr), np.imag(vis_rr), w_rr], axis=1)
    cube[:, 1] = np.stack([np.real(vis_ll), np.imag(vis_ll), w_ll], axis=1)
    cube[:, 3, 2] = np.inf
    return cube


# ---------------------------------------------------------------------------- reading and writing
def test_stokes_i_weights_flags_and_units(tmp_path: Path, caplog) -> None:
    """I = (w_RR RR + w_LL LL) / (w_RR + w_LL), sigma = 1/sqrt(w_RR + w_LL); flagged rows counted;
    u, v = -(stored seconds) x the reference frequency, in gigalambda; DATE = the sum of the two."""
    rr = np.array([1 + 1j, 2.0, 3.0, 4.0, 5.0])
    ll = np.array([3 + 1j, 2.0, 3.0, 4.0, 5.0])
    w_rr = np.array([1.0, 4.0, 0.0, -1.0, 2.0])  # row 2 flagged (weight 0), row 3 flagged (negative), row 4: LL flagged
    w_ll = np.array([3.0, 4.0, 0.0, -1.0, 0.0])
    path = tmp_path / "small.uvfits"
    uu = np.array([1e-5, 2e-5, 3e-5, 4e-5, 5e-5])
    raw_uvfits(path, uu_s=uu, vv_s=-2 * uu, baseline=[258, 259, 515, 258, 259], jd=np.full(5, 2457848.53200231),
               cube=_one_time_cube(rr, ll, w_rr, w_ll), pscal=1 / FREQ)
    with caplog.at_level(logging.INFO, logger="multiwalk.io.uvfits"):
        data = read_uvfits(path)
    assert len(data) == 2
    assert data.vis[0] == pytest.approx((1 * (1 + 1j) + 3 * (3 + 1j)) / 4, rel=1e-7)  # float32 file
    assert data.sigma.tolist() == pytest.approx([1 / np.sqrt(4), 1 / np.sqrt(8)])
    assert data.u.tolist() == pytest.approx((-uu[:2] * FREQ * 1e-9).tolist(), rel=1e-6)
    assert data.v.tolist() == pytest.approx((2 * uu[:2] * FREQ * 1e-9).tolist(), rel=1e-6)
    assert data.mjd[0] == pytest.approx(2457848.53200231 - 2400000.5, abs=1e-7)
    assert data.dropped == {"flagged or zero weight": 2, "only one of RR/LL unflagged": 1}
    assert "dropped 2 of 5 rows: flagged or zero weight" in caplog.text
    assert (data.source, data.freq_hz, data.stations) == ("M87", FREQ, {1: "AA", 2: "BB", 3: "CC"})
    assert data.origin == str(path)


def test_stokes_i_file(tmp_path: Path) -> None:
    """A file with a Stokes I correlation only: I and its sigma as stored."""
    path = tmp_path / "i.uvfits"
    cube = np.array([[[0.5, -0.25, 16.0]], [[1.5, 0.0, 4.0]]])
    raw_uvfits(path, uu_s=[1e-5, 2e-5], vv_s=[0, 0], baseline=[258, 259], jd=[2457848.5, 2457848.5], cube=cube,
               stokes=(1,))
    data = read_uvfits(path)
    assert data.vis.tolist() == [0.5 - 0.25j, 1.5]
    assert data.sigma.tolist() == [0.25, 0.5]


def test_channels_are_combined_by_weight(tmp_path: Path) -> None:
    """Two frequency channels: I is their inverse-variance weighted mean, a flagged channel is left out."""
    cube = np.zeros((2, 2, 2, 3))  # (rows, channels, RR LL, complex)
    cube[0, 0] = [[1.0, 0.0, 1.0], [1.0, 0.0, 1.0]]
    cube[0, 1] = [[4.0, 2.0, 3.0], [4.0, 2.0, 3.0]]
    cube[1, 0] = [[1.0, 0.0, 1.0], [1.0, 0.0, 1.0]]
    cube[1, 1] = [[np.nan, 0.0, 3.0], [4.0, 2.0, 3.0]]  # RR of channel 1 is not finite: the channel is flagged
    path = tmp_path / "channels.uvfits"
    raw_uvfits(path, uu_s=[1e-5, 2e-5], vv_s=[0, 0], baseline=[258, 259], jd=[2457848.5] * 2, cube=cube,
               stokes=(-1, -2))
    data = read_uvfits(path)
    assert data.vis.tolist() == pytest.approx([(2 * 1 + 6 * (4 + 2j)) / 8, 1.0])
    assert data.sigma.tolist() == pytest.approx([1 / np.sqrt(8), 1 / np.sqrt(2)])


def test_description_follows_the_rows(tmp_path: Path) -> None:
    data = _rows([0, 0, 0], [1, 1, 2], [2, 3, 3], np.array([3.0, 4j, 1.0]), np.array([0.1, 0.1, 0.1]))
    data = UVData(**{**data.__dict__, "source": "M87", "freq_hz": FREQ, "origin": "x.uvfits",
                     "dropped": {"flagged or zero weight": 4}, "history": ["read 3 of 7 rows"]})
    part = data.select(data.ant1 == 1)
    assert (part.source, part.freq_hz, part.origin, part.stations) == ("M87", FREQ, "x.uvfits", data.stations)
    assert part.dropped == data.dropped and part.dropped is not data.dropped
    np.testing.assert_array_equal(part.station_xyz[2], data.station_xyz[2])
    assert part.describe() == ("2 visibilities of M87 at 229.071 GHz, 1 times, 3 stations (AA AP SM), from x.uvfits\n"
                               "dropped 4 rows: flagged or zero weight\nread 3 of 7 rows")
    with pytest.raises(TypeError, match="with_rows takes the row arrays"):
        data.with_rows(flux=np.ones(3))
    with pytest.raises(ValueError, match="UVData.freq_hz=-1.0: the reference frequency must be positive"):
        UVData(**{**data.__dict__, "freq_hz": -1.0})
    with pytest.raises(ValueError, match=r"UVData.station_xyz\[1\] has shape \(2,\)"):
        UVData(**{**data.__dict__, "station_xyz": {1: [0.0, 1.0]}})


def test_round_trip(tmp_path: Path) -> None:
    """simulate -> write_uvfits -> read_uvfits: the same rows to float32 precision, and the description."""
    obs = simulate(load_array("EHT2017"), lambda u, v: np.asarray(xringaus(TRUTH, u, v)), cadence_seconds=7200.0,
                   scan_seconds=300.0, ra_hours=M87_RA_DEG / 15, dec_deg=M87_DEC_DEG, seed=2)
    path = tmp_path / "obs.uvfits"
    write_uvfits(obs, path)
    back = read_uvfits(path)
    assert len(back) == len(obs) and back.dropped == {}
    np.testing.assert_array_equal(back.ant1, obs.ant1)
    np.testing.assert_array_equal(back.ant2, obs.ant2)
    # 32-bit floats: 2^-24 = 6e-8 relative; the day's fraction to 2^-24 days (5 ms)
    np.testing.assert_allclose(back.mjd, obs.mjd, rtol=0, atol=2**-24)
    longest = obs.baseline_length.max()
    for name in ("u", "v", "w"):
        np.testing.assert_allclose(getattr(back, name), getattr(obs, name), rtol=0, atol=2**-23 * longest)
    np.testing.assert_allclose(back.vis, obs.vis, rtol=0, atol=2**-23 * np.abs(obs.vis).max())
    np.testing.assert_allclose(back.sigma, obs.sigma, rtol=2**-22)
    assert back.stations == obs.stations and back.freq_hz == obs.freq_hz
    assert (back.ra_deg, back.dec_deg) == (pytest.approx(M87_RA_DEG), pytest.approx(M87_DEC_DEG))
    for k, xyz in obs.station_xyz.items():
        np.testing.assert_array_equal(back.station_xyz[k], xyz)
    # and the same closure phases, time by time
    assert closure_phases(back).value == pytest.approx(closure_phases(obs).value, abs=1e-5)


TRUTH = np.array([1.0, 22.0, 0.6, 0.3, 0.2, 0.6, 0.8, 0.1, 0.0])  # th is set per test


def _closure_phase_chi2(data: UVData, params: np.ndarray) -> float:
    cp = closure_phases(data)
    model = model_closure_phases(np.asarray(xringaus(params, data.u, data.v)), cp.index, cp.conj)
    return float(np.sum((np.angle(np.exp(1j * (model - cp.value))) / cp.sigma) ** 2))


@pytest.mark.parametrize("pa_deg", [90.0, 180.0, 240.0])
def test_bright_side_survives_image_to_file_to_fit(tmp_path: Path, pa_deg: float) -> None:
    """A ring whose bright side lies at ``pa_deg`` east of north, observed in ehtim's convention
    (stored UU, VV: station 1 minus station 2, V = sum I exp(+2 pi i (u x + v y)), x East) and
    written by astropy alone, read back: the model at that position angle fits its closure phases,
    the one turned by 180 degrees does not.  The same through write_uvfits."""
    th = np.pi / 2 - np.deg2rad(pa_deg)  # xringaus's th is counted from East towards North
    params = TRUTH.copy()
    params[-1] = th
    npix, fov = 48, 96.0
    img = image(params, npix=npix, fov=fov)
    x = (np.arange(npix) - (npix - 1) / 2) * fov / npix * UAS_TO_NRAD * 1e-9  # radians, East along columns
    xx, yy = np.meshgrid(x, x)
    centroid_pa = np.rad2deg(np.arctan2(np.sum(img * xx), np.sum(img * yy))) % 360  # east of north
    assert abs((centroid_pa - pa_deg + 180) % 360 - 180) < 1.0  # the image's bright side is where we say

    array = load_array("EHT2017").subset(["ALMA", "LMT", "PV", "SMA", "SMT"])
    tracks = uv_tracks(array, 57848 + np.array([0.1, 0.2, 0.25, 0.3]), ra_hours=M87_RA_DEG / 15, dec_deg=M87_DEC_DEG,
                       freq_hz=FREQ)
    # uv_tracks gives station 2 minus station 1 (gigalambda); the file stores station 1 minus station 2 (seconds)
    uu_s, vv_s = -tracks["u"] * 1e9 / FREQ, -tracks["v"] * 1e9 / FREQ
    ul, vl = uu_s * FREQ, vv_s * FREQ  # wavelengths
    vis = np.exp(2j * np.pi * (ul[:, None] * xx.ravel() + vl[:, None] * yy.ravel())) @ img.ravel()
    sigma = 0.01
    path = tmp_path / "ring.uvfits"
    raw_uvfits(path, uu_s=uu_s, vv_s=vv_s, baseline=256 * (tracks["i1"] + 1) + tracks["i2"] + 1,
               jd=tracks["mjd"] + 2400000.5, cube=_one_time_cube(vis, vis, np.full(len(vis), 0.5 / sigma**2),
                                                                  np.full(len(vis), 0.5 / sigma**2)),
               stations=array.names, xyz=array.xyz)
    data = read_uvfits(path)
    flipped = params.copy()
    flipped[-1] = th + np.pi
    n_cp = len(closure_phases(data))
    right, wrong = _closure_phase_chi2(data, params), _closure_phase_chi2(data, flipped)
    # the pixel image's transform differs from the analytic model by < 0.5 % of the flux (pixels of 2 uas)
    print(f"PA {pa_deg}: {n_cp} closure phases, chi2 {right:.3g} at the true PA, {wrong:.3g} turned by 180 deg")
    assert right < 0.5 * n_cp and wrong > 50 * n_cp, (right, wrong, n_cp)

    # the same data through the writer and back
    write_uvfits(data, tmp_path / "again.uvfits")
    again = read_uvfits(tmp_path / "again.uvfits")
    assert _closure_phase_chi2(again, params) == pytest.approx(right, rel=1e-3)
    assert _closure_phase_chi2(again, flipped) == pytest.approx(wrong, rel=1e-3)


# ---------------------------------------------------------------------------- scans, errors, co-located stations
def _rows(mjd_s, ant1, ant2, vis, sigma, u=None) -> UVData:
    n = len(mjd_s)
    u = np.arange(1.0, n + 1) if u is None else np.asarray(u)
    return UVData(mjd=57848 + np.asarray(mjd_s) / 86400, u=u, v=2 * u, w=0 * u, ant1=ant1, ant2=ant2, vis=vis,
                  sigma=sigma, stations={1: "AA", 2: "AP", 3: "SM"},
                  station_xyz={1: [0, 0, 0], 2: [2000.0, 1000.0, 0], 3: [6e6, 0, 0]})


def test_scan_average_weights_and_orientation() -> None:
    # scan 1: times 0, 10, 20 s (one row stored as 2-1); scan 2 after a 70 s gap
    data = _rows([0, 10, 20, 20, 90, 100], [1, 2, 1, 1, 1, 1], [2, 1, 2, 3, 2, 2],
                 np.array([1 + 1j, 2 - 1j, 3.0, 5j, 1.0, 2.0]), np.array([1.0, 2.0, 2.0, 1.0, 1.0, 1.0]))
    avg = scan_average(data)
    assert len(avg) == 3
    assert avg.ant1.tolist() == [1, 1, 1] and avg.ant2.tolist() == [2, 3, 2]
    w = np.array([1.0, 0.25, 0.25])
    expected = (w[0] * (1 + 1j) + w[1] * (2 + 1j) + w[2] * 3.0) / w.sum()  # the 2-1 row enters conjugated
    assert avg.vis[0] == pytest.approx(expected)
    assert avg.sigma[0] == pytest.approx(1 / np.sqrt(w.sum()))  # the error of the weighted mean
    assert avg.u[0] == pytest.approx((w[0] * 1 - w[1] * 2 + w[2] * 3) / w.sum())  # the 2-1 row's u negated
    assert avg.mjd[0] == avg.mjd[1] == pytest.approx(57848 + 10 / 86400)  # one time per scan
    assert avg.vis[2] == pytest.approx(1.5) and avg.sigma[2] == pytest.approx(np.sqrt(0.5))
    assert "averaged 6 rows into 3 over 2 scans (gaps > 20 s" in avg.history[-1]
    assert len(scan_average(data, gap_seconds=100.0)) == 2  # one scan


def test_systematic_error_and_colocated_baselines() -> None:
    data = _rows([0, 0, 0], [1, 1, 2], [2, 3, 3], np.array([3.0, 4j, 1.0]), np.array([0.1, 0.1, 0.1]))
    more = add_systematic_error(data, 0.05)
    assert more.sigma.tolist() == pytest.approx(np.sqrt(0.01 + (0.05 * np.array([3.0, 4.0, 1.0])) ** 2).tolist())
    assert data.sigma.tolist() == [0.1, 0.1, 0.1]  # a new UVData; the input is unchanged
    kept = drop_colocated(data, max_km=5.0)  # AA-AP are 2.2 km apart
    assert kept.ant1.tolist() == [1, 2] and kept.ant2.tolist() == [3, 3]
    assert kept.dropped == {"co-located baselines (stations < 5 km apart: AA-AP)": 1}
    with pytest.raises(ValueError, match="fraction must be a fraction of"):
        add_systematic_error(data, 1.5)
    with pytest.raises(ValueError, match=r"data.station_xyz has none for 3 \(SM\)"):
        drop_colocated(UVData(**{**data.__dict__, "station_xyz": {1: [0, 0, 0], 2: [1, 0, 0]}}))


# ---------------------------------------------------------------------------- bad files
def _three_station_file(path: Path, **kw) -> None:
    defaults = dict(uu_s=[1e-5, 2e-5, 3e-5], vv_s=[0, 0, 0], baseline=[258, 259, 515], jd=np.full(3, 2457848.5),
                    cube=_one_time_cube(np.ones(3), np.ones(3), np.ones(3), np.ones(3)))
    raw_uvfits(path, **{**defaults, **kw})


def test_bad_files_name_the_file_and_the_fault(tmp_path: Path) -> None:
    no_an = tmp_path / "no_an.uvfits"
    _three_station_file(no_an, antenna_table=False)
    with pytest.raises(ValueError, match=r"no_an\.uvfits: no AIPS AN table"):
        read_uvfits(no_an)

    zero = tmp_path / "zero.uvfits"
    _three_station_file(zero, cube=_one_time_cube(np.ones(3), np.ones(3), np.zeros(3), np.zeros(3)))
    with pytest.raises(ValueError, match=r"zero\.uvfits: all 3 visibilities are flagged"):
        read_uvfits(zero)

    polar = tmp_path / "polar.uvfits"  # RL and LR only
    _three_station_file(polar, stokes=(-3, -4), cube=np.ones((3, 2, 3)))
    with pytest.raises(ValueError, match=r"polar\.uvfits: no Stokes I: the STOKES axis holds RL, LR"):
        read_uvfits(polar)
    qu = tmp_path / "qu.uvfits"
    _three_station_file(qu, stokes=(2, 3), cube=np.ones((3, 2, 3)))
    with pytest.raises(ValueError, match=r"qu\.uvfits: no Stokes I: the STOKES axis holds Q, U"):
        read_uvfits(qu)

    pairs = tmp_path / "pairs.uvfits"  # two stations at each time: no closures
    _three_station_file(pairs, jd=2457848.5 + np.array([0.0, 0.1, 0.2]))
    data = read_uvfits(pairs)
    with pytest.raises(ValueError, match=r"pairs\.uvfits: no closure phases can be formed: they need 3 stations"
                                         r" observing at one time, and the most at any of the 3 times is 2"):
        closure_phases(data)
    with pytest.raises(ValueError, match=r"pairs\.uvfits: no log closure amplitudes"):
        log_closure_amplitudes(data)

    with pytest.raises(FileNotFoundError, match="missing.uvfits: no such file"):
        read_uvfits(tmp_path / "missing.uvfits")
    text = tmp_path / "text.uvfits"
    text.write_text("not fits")
    with pytest.raises(ValueError, match=r"text\.uvfits: not a FITS file"):
        read_uvfits(text)
    with pytest.raises(ValueError, match="data.freq_hz is None"):
        write_uvfits(UVData(**{**data.__dict__, "freq_hz": None}), tmp_path / "out.uvfits")


# ---------------------------------------------------------------------------- the public M87 data
@pytest.mark.skipif(not M87_HI_095.is_file(), reason=f"the EHT 2017 M87 data is not beside this checkout ({M87})")
def test_m87_2017_hi_band_april_5() -> None:
    data = read_uvfits(M87_HI_095)
    assert data.source == "M87" and data.freq_hz == pytest.approx(229.0707e9, rel=1e-6)
    assert sorted(data.stations.values()) == ["AA", "AP", "AZ", "JC", "LM", "PV", "SM", "SR"]  # SR: in the table only
    used = sorted({data.station_name(s) for s in np.concatenate([data.ant1, data.ant2])})
    assert used == ["AA", "AP", "AZ", "JC", "LM", "PV", "SM"]
    assert len(data) == 6458 and data.dropped == {}
    assert data.baseline_length.max() == pytest.approx(8.33, abs=0.01)  # Glambda
    # the sign: u, v as read equal station 2 minus station 1 projected from the AN table's
    # positions (eht.uv_tracks), to the Earth rotation of UT1 - UTC and the GMST formula
    numbers = sorted(data.station_xyz)
    array = StationArray(tuple(str(n) for n in numbers), np.array([data.station_xyz[n] for n in numbers]),
                         np.ones(len(numbers)), np.ones(len(numbers)))
    sample = np.arange(0, len(data), 97)
    for row in sample:
        tr = uv_tracks(array, data.mjd[row:row + 1], ra_hours=data.ra_deg / 15, dec_deg=data.dec_deg,
                       freq_hz=data.freq_hz, elevation_limits=(-90, 90))
        k = np.flatnonzero((tr["i1"] == numbers.index(data.ant1[row])) & (tr["i2"] == numbers.index(data.ant2[row])))
        assert abs(tr["u"][k[0]] - data.u[row]) < 1e-4 * 8.33 and abs(tr["v"][k[0]] - data.v[row]) < 1e-4 * 8.33

    averaged = read_uvfits(M87_HI_095, average_scans=True)
    assert len(averaged) == 168 and len(np.unique(averaged.mjd)) == 18
    assert len(closure_phases(averaged)) == 100 and len(log_closure_amplitudes(averaged)) == 82
    compact = read_uvfits(M87_HI_095, average_scans=True, drop_colocated_km=5.0)
    assert compact.dropped == {"co-located baselines (stations < 5 km apart: AA-AP, JC-SM)": 593}
    assert len(compact) == 152
    assert len(closure_phases(compact)) == 84 and len(log_closure_amplitudes(compact)) == 66
