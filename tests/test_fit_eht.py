"""Fits to EHT data products: the likelihood's terms against dense formulas, the station gains
profiled per scan, ``multiwalk fit-eht`` on a simulated ring written as UVFITS, bad input, and
the public M87 2017 data (skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw
from multiwalk.cli import main
from multiwalk.eht import closure_covariance, eht_terms, load_array, simulate
from multiwalk.eht.likelihood import parse_products, product_chi2
from multiwalk.io import write_uvfits
from multiwalk.io.uvprep import scan_numbers
from multiwalk.models.xringaus import xringaus

M87_RA_HOURS, M87_DEC_DEG = 187.7059307575226 / 15, 12.39112323919932
M87 = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "eht" / "m87_2017"
RING = np.array([0.6, 22.0, 0.7, 0.0, 0.2, 0.5, 1.0, 0.0, 0.3])  # xringaus: a thin ring, no Gaussian
OTHER = RING * np.array([1.2, 1.1, 0.9, 1.0, 1.5, 1.0, 1.0, 1.0, 1.0]) + np.array([0, 0, 0, 0.1, 0, 0, 0, 0.1, 0.5])


def _observe(seed: int = 3, gains_sigma: float = 0.0, **kw) -> mw.io.UVData:
    """A small simulated observation of RING (EHT 2017 array, scans every 2 h), with random
    station gains per scan of log-width ``gains_sigma`` applied to the visibilities."""
    data = simulate(load_array("EHT2017"), lambda u, v: np.asarray(xringaus(RING, u, v)), cadence_seconds=7200.0,
                    scan_seconds=300.0, ra_hours=M87_RA_HOURS, dec_deg=M87_DEC_DEG, seed=seed, **kw)
    if gains_sigma:
        scan, _ = scan_numbers(data.mjd)
        log_g = np.random.default_rng(seed).normal(0, gains_sigma, (scan.max() + 1, max(data.stations) + 1))
        data = data.with_rows(vis=data.vis * np.exp(log_g[scan, data.ant1] + log_g[scan, data.ant2]))
    return data


def _chi2(terms, params=OTHER) -> dict[str, float]:
    args = terms.args(np.float64)
    values = jax.jit(lambda p, a: product_chi2(xringaus, terms.products, p, a))(jnp.asarray(params), args)
    return dict(zip(terms.products, np.asarray(values).tolist()))


def test_closure_terms_match_the_dense_formulas() -> None:
    data = _observe()
    model = np.asarray(xringaus(OTHER, data.u, data.v))
    plain, whitened = (eht_terms(data, "cphase,logcamp", covariance=c) for c in (False, True))
    got, got_cov = _chi2(plain), _chi2(whitened)
    for name, closures in (("cphase", plain.cphase), ("logcamp", plain.logcamp)):
        if name == "cphase":
            model_values = np.asarray(mw.eht.model_closure_phases(model, closures.index, closures.conj))
            r = np.angle(np.exp(1j * (model_values - closures.value)))
        else:
            r = np.asarray(mw.eht.model_log_closure_amplitudes(model, closures.index)) - closures.value
        assert got[name] == pytest.approx(np.sum((r / closures.sigma) ** 2), rel=1e-5)  # float32 sums
        # with the covariance: r^T C^-1 r per time, C from closure_covariance
        blocks = closure_covariance(closures, data)
        dense = sum(r[closures.mjd == t] @ np.linalg.solve(c, r[closures.mjd == t])
                    for t, c in zip(np.unique(closures.mjd), blocks))
        assert got_cov[name] == pytest.approx(dense, rel=1e-5)  # float32 sums
        assert got_cov[name] != pytest.approx(got[name], rel=1e-3)  # the covariance matters


def test_amplitude_gains_are_profiled_per_scan() -> None:
    """chi2_amp = min over log gains of the log-amplitude chi2 plus the gain prior, which is also
    the marginal chi2 r^T (D^-1 + s^2 A A^T)^-1 r of each scan (the gains integrated out)."""
    data = _observe(gains_sigma=0.1)
    terms = eht_terms(data, "amp", gain_sigma=0.1)
    got = _chi2(terms)["amp"]
    r = np.log(data.amplitude) - np.log(np.abs(np.asarray(xringaus(OTHER, data.u, data.v))))
    var = (data.sigma / data.amplitude) ** 2
    scan, _ = scan_numbers(data.mjd)
    dense = 0.0
    for s in np.unique(scan):
        rows = scan == s
        stations = np.unique(np.concatenate([data.ant1[rows], data.ant2[rows]]))
        design = (data.ant1[rows, None] == stations) + (data.ant2[rows, None] == stations)
        cov = np.diag(var[rows]) + 0.1**2 * design @ design.T
        dense += r[rows] @ np.linalg.solve(cov, r[rows])
    assert got == pytest.approx(dense, rel=1e-5)  # float32 sums


def test_best_gains_recover_the_applied_ones() -> None:
    data = _observe(gains_sigma=0.1, noise=False)
    terms = eht_terms(data, "amp", gain_sigma=10.0)  # a wide prior: the data decide
    # The true model with its best gains: chi2 is r'Dr - b'H^-1 b (module doc of
    # multiwalk.eht.likelihood), two terms of 1.4e5 cancelling to what is left: the misfit and the
    # prior of the best gains x = H^-1 b, about 8e-4 here.  In float32 that is below one ulp of the
    # terms (2^-6), so the sum compares in float64 with the same misfit and prior summed as such
    # (no cancellation): 1e-9 absolute, ~34 float64 ulps of r'Dr (measured 1 ulp with and without
    # fused multiply-adds), ~1e-6 of the value.
    with jax.enable_x64(True):
        got = _chi2(terms, RING)["amp"]
        model = np.asarray(xringaus(jnp.asarray(RING), jnp.asarray(data.u), jnp.asarray(data.v)))
    amp = terms.args(np.float64)["amp"]
    r = amp["log_obs"] - np.log(np.abs(model))
    wr = amp["weight"] * r
    b = np.zeros(amp["h_inv"].shape[:2]).ravel()
    np.add.at(b, amp["slot1"], wr)
    np.add.at(b, amp["slot2"], wr)
    x = np.einsum("sij,sj->si", amp["h_inv"], b.reshape(amp["h_inv"].shape[:2])).ravel()
    misfit = r - x[amp["slot1"]] - x[amp["slot2"]]
    want = np.sum(amp["weight"] * misfit**2) + np.sum(x**2) / 10.0**2
    assert 1e-4 < want < 1e-2 and got == pytest.approx(want, rel=0, abs=1e-9), (got, want)
    truth = eht_terms(_observe(noise=False), "amp")
    stations, gains = terms.gains(np.asarray(xringaus(RING, data.u, data.v)))
    ratio = data.amplitude / truth.data.amplitude  # the applied g_a g_b, per row
    scan = terms.scan_of_rows()
    fitted = gains[scan, np.searchsorted(stations, data.ant1)] * gains[scan, np.searchsorted(stations, data.ant2)]
    np.testing.assert_allclose(fitted, ratio, rtol=1e-6)


def test_products_and_bad_options() -> None:
    assert parse_products("logcamp, cphase") == ("cphase", "logcamp")
    assert parse_products(["amp", "cphase"]) == ("cphase", "amp")
    with pytest.raises(ValueError, match="data products must be a comma-separated choice of cphase, logcamp, amp"):
        parse_products("cphase,vis")
    with pytest.raises(ValueError, match="gain_sigma must be a positive width"):
        eht_terms(_observe(), "amp", gain_sigma=0.0)
    with pytest.raises(ValueError, match="model must be one of"):
        mw.eht.fit_eht(_observe(), model="disk")


def test_fit_eht_command_reports_bad_input_in_one_paragraph(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "missing.uvfits"
    assert main(["fit-eht", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"multiwalk fit-eht: error: {missing}: no such file" and "Traceback" not in err
    # two stations only: no closure phase can be formed, and the message names the file
    pair = _observe()
    pair = pair.select((pair.ant1 == 1) & (pair.ant2 == 2))
    path = tmp_path / "pair.uvfits"
    write_uvfits(pair, path)
    assert main(["fit-eht", str(path), "--model", "xringaus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"multiwalk fit-eht: error: {path}: no closure phases can be formed") and err.count("\n") == 1
    for option, message in ((["--data", "cphase,vis"], "data products must be a comma-separated choice"),
                            (["--model", "disk"], "--model must be one of")):
        assert main(["fit-eht", str(path), "--model", "xringaus", *option]) == 2
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["fit-eht", str(path), "--systematic", "1.5"])
    assert "--systematic must be a fraction of |V| in [0, 1)" in capsys.readouterr().err


# ---------------------------------------------------------------------------- fits of a simulated ring
MRING = np.array([0.6, 40.0, 10.0, 0.6, np.radians(350.0)])  # flux, d, w, beta1, pa: bright side just west of north
TINY = ["--nbeta", "4", "--nseq", "4", "--nburn", "200", "--niter", "100"]


def _mring_file(tmp_path: Path, **kw) -> Path:
    from multiwalk.models import mring

    data = simulate(load_array("EHT2017"), lambda u, v: np.asarray(mring.visibilities(MRING, u, v)),
                    cadence_seconds=1800.0, scan_seconds=300.0, ra_hours=M87_RA_HOURS, dec_deg=M87_DEC_DEG, seed=4, **kw)
    path = tmp_path / "ring.uvfits"
    write_uvfits(data, path)
    return path


def test_fit_eht_command_recovers_a_simulated_ring(tmp_path: Path, capsys) -> None:
    """image -> visibilities -> UVFITS -> ``multiwalk fit-eht`` with a tiny ladder: the diameter
    within 2 uas of 40, the bright side within 10 deg of 350 (its samples straddle 0 = 360 deg,
    which the periodic summary must not split), the table and the files."""
    path = _mring_file(tmp_path)
    out = tmp_path / "out"
    # one integration per scan: nothing to average (the default gap rule, twice the median step
    # between times, would join every scan into one here)
    assert main(["fit-eht", str(path), "--model", "mring", *TINY, "--no-scan-average", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "sampling" in captured.err  # the progress bar, on by default
    assert "co-located baselines (< 5 km): ALMA-APEX, JCMT-SMA" in printed  # dropped by default
    assert "averaged" not in printed
    for line in ("diameter", "width", "pa_bright", "chi2 closure phases", "chi2 log closure amplitudes", "chi2 total"):
        assert line in printed
    saved = np.load(out / "fit.npz")
    assert abs(saved["derived_diameter_median"] - 40.0) < 2.0, printed
    assert abs((saved["derived_pa_bright_median"] - 350.0 + 180) % 360 - 180) < 10.0, printed
    assert saved["derived_pa_bright_lo95"] < saved["derived_pa_bright_median"] < saved["derived_pa_bright_hi95"]
    assert list(saved["products"]) == ["cphase", "logcamp"] and saved["samples"].shape == (100, 4, 5)
    assert np.all(saved["samples"][..., 0] == 1.0)  # closures do not see the flux: held at 1 Jy
    names = sorted(p.name for p in out.iterdir())
    assert names == ["chi2_trace.png", "closures.png", "fit.npz", "images.png", "marginals.png"]


def test_fit_with_amplitudes_and_station_gains(tmp_path: Path) -> None:
    """Amplitudes with 10 % station gains per scan: the gains are marginalised, the flux (which
    closures cannot see) is found, and the chi2 per datum of each product is that of a good fit."""
    from multiwalk.io import read_uvfits

    data = read_uvfits(_mring_file(tmp_path, fractional_noise=0.01))
    scan, _ = scan_numbers(data.mjd)
    log_g = np.random.default_rng(7).normal(0, 0.1, (scan.max() + 1, max(data.stations) + 1))
    data = data.with_rows(vis=data.vis * np.exp(log_g[scan, data.ant1] + log_g[scan, data.ant2]))
    fit = mw.eht.fit_eht(data, "mring", "cphase,logcamp,amp", mw.ReplicaExchange(nbeta=4, nseq=4, nburn=200, niter=100),
                         progress=False)
    assert abs(fit.median[0] - 0.6) < 0.06, fit.table()  # the flux: 10 % gains on ~20 scans average down
    assert abs(fit.derived["diameter"]["median"] - 40.0) < 2.0, fit.table()
    for product, chi2 in fit.chi2_by_product().items():
        n = fit.terms.count(product)
        assert chi2 / n < 1 + 5 * np.sqrt(2 / n), fit.table()
    stations, gains = fit.gains()
    assert gains.shape == (scan.max() + 1, len(stations)) and np.all(np.abs(np.log(gains)) < 0.5)
    assert "amplitudes.png" in [p.name for p in fit.plot(tmp_path / "plots", npix=32)]


# ---------------------------------------------------------------------------- the public M87 2017 data
M87_HI = {day: M87 / f"SR1_M87_2017_{day}_hi_hops_netcal_StokesI.uvfits" for day in ("095", "096")}


@pytest.mark.parametrize("day", ["095", "096"])
def test_m87_2017_ring(day: str) -> None:
    """EHT 2019 Paper I: a ring of 42 +- 3 uas, brighter in the south (Paper VI: PA about 150-200
    deg east of north).  Each hi-band day on its own, m-ring on scan-averaged closure phases and
    log closure amplitudes without the co-located baselines; a short ladder (the posterior is
    narrow: 68 % intervals of 0.1-0.2 uas and 2 deg with the full default run)."""
    path = M87_HI[day]
    if not path.is_file():
        pytest.skip(f"the EHT 2017 M87 data is not beside this checkout ({path})")
    fit = mw.eht.fit_uvfits(path, "mring", solver=mw.ReplicaExchange(nbeta=4, nseq=4, nburn=200, niter=100),
                            progress=False)
    diameter, pa = fit.derived["diameter"]["median"], fit.derived["pa_bright"]["median"]
    assert 39.0 <= diameter <= 45.0, fit.table()
    assert 120.0 <= pa <= 210.0, fit.table()  # south: a mirrored (u, v) sign would give about 330


def test_fit_eht_command_prepares_the_file_as_asked(tmp_path: Path) -> None:
    """--scan-gap, --scan-average, --drop-colocated, --systematic and --data reach the reader and the products."""
    from multiwalk.cli import build_parser
    from multiwalk.commands.fit_eht import prepare

    path = _mring_file(tmp_path)

    def prepared(*options: str):
        return prepare(build_parser().parse_args(["fit-eht", str(path), *options]))

    raw, every_baseline = prepared("--no-scan-average"), prepared("--no-scan-average", "--no-drop-colocated")
    assert len(raw.data) < len(every_baseline.data)  # ALMA-APEX and JCMT-SMA dropped by default
    times = len(np.unique(raw.data.mjd))
    assert len(np.unique(prepared().data.mjd)) < times / 4  # one integration per scan: the default gap joins scans
    separate = prepared("--scan-gap", "600", "--data", "amp,cphase", "--systematic", "0.1")
    assert len(np.unique(separate.data.mjd)) == times and separate.products == ("cphase", "amp")
    assert np.all(separate.data.sigma >= 0.1 * separate.data.amplitude)


def test_the_likelihoods_products_run_at_full_precision() -> None:
    """Every matrix product of the amplitude (gains) and whitened closure chi2 asks for HIGHEST:
    on a GPU, JAX's default for float32 products is TensorFloat-32 (~1e-3 relative), which made the
    gain-marginalised chi2 (a difference of two large terms) wrong by more than the fit's chi2."""
    data = _observe(gains_sigma=0.1)
    terms = eht_terms(data, "cphase,logcamp,amp", covariance=True, gain_sigma=0.1)
    args = terms.args(np.float32)
    text = str(jax.make_jaxpr(lambda p, a: product_chi2(xringaus, terms.products, p, a))(jnp.asarray(OTHER, jnp.float32), args))
    dots = text.count("dot_general[")
    assert dots >= 2 and text.count("precision=(Precision.HIGHEST, Precision.HIGHEST)") == dots, text
