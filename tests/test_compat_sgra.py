"""``multiwalk.compat.imgpu.Mcgpu_Sgra`` and the seed's model_obsfit.py flow on a small simulated file."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

from multiwalk.compat.imgpu import Mcgpu_Sgra
from multiwalk.compat.imgpu_sgra import phase_error_deg
from multiwalk.eht import load_array, simulate
from multiwalk.io.uvdata import write_uvdata
from multiwalk.models.xringaus import LOWER, UPPER, xringaus

ROOT = Path(__file__).resolve().parents[1]
TRUTH = np.array([2.4, 30.0, 0.7, 0.5, 0.3, 1.0, 0.6, 0.2, 0.8])
PDESCR = [1, 1, 1, 1, 1, 1, 1, 1, 2]


@pytest.fixture(scope="module")
def uvfile(tmp_path_factory) -> Path:
    """Four stations, a scan every 3 hours: a few dozen visibilities with noise."""
    data = simulate(load_array("EHT2017").subset(["ALMA", "LMT", "SMA", "SMT"]),
                    lambda u, v: np.asarray(xringaus(TRUTH, u, v)), cadence_seconds=10800.0, seed=3)
    path = tmp_path_factory.mktemp("sgra") / "ring_uvdata.txt"
    write_uvdata(path, data)
    return path


@pytest.fixture(scope="module")
def sgra(uvfile) -> Mcgpu_Sgra:
    return Mcgpu_Sgra(uvfile=str(uvfile), pdescr=PDESCR, pmint=LOWER, pmaxt=UPPER, ecph=0.1, nbeta=4, nseq=2,
                      nburn=10, niter=10)


def test_data_and_weights_as_the_seed_lays_them_out(sgra):
    assert sgra.ncph > 0 and sgra.ndat == sgra.nvis + sgra.ncph
    np.testing.assert_array_equal(sgra.dat[: sgra.nvis], sgra.amp)
    np.testing.assert_array_equal(sgra.std2r[: sgra.nvis], 1.0 / sgra.eamp**2)
    np.testing.assert_allclose(sgra.std2r[sgra.nvis:], 100.0)  # ecph = 0.1 rad for every closure
    assert sgra.cpix.shape == (sgra.ncph, 3) and sgra.cpix.max() < sgra.nvis
    assert sgra.nprm == 9 and sgra.cpExt == 0


def test_calcmodchi2_and_calcmodel_agree_with_the_model_and_the_problem(sgra):
    p3 = np.stack([TRUTH, (LOWER + UPPER) / 2])[:, None, :]  # (nbeta=2, nseq=1, 9)
    chi2c, mvicp, mpha, chi2m, datm = sgra.calcmodchi2(p3)
    assert chi2c.shape == (2, 1) and mvicp.shape == (2, 1, sgra.ndat) and mpha.shape == (2, 1, sgra.nvis)
    assert datm.shape == (2 * (sgra.ndat + sgra.nvis),)
    vis = np.asarray(xringaus(TRUTH, sgra.ulam, sgra.vlam))
    # float32 (JAX's default), jitted here and not there: the Bessel terms differ by a few ulp of
    # the ring's terms (measured 3.6e-6 relative), so rtol 2e-5, and 2e-5 rad on the phases.
    np.testing.assert_allclose(mvicp[0, 0, : sgra.nvis], np.abs(vis), rtol=2e-5)
    np.testing.assert_allclose(mpha[0, 0], np.angle(vis), atol=2e-5)
    # chi2 of residuals near 1 sigma with sigmas ~1e-3 of the amplitudes: the float32 model's
    # few-ulp differences between two programs reach 1e-4 of it (measured 1.3e-4), so rtol 1e-3
    np.testing.assert_allclose(chi2c[:, 0], sgra.problem.chi2(p3[:, 0]), rtol=1e-3)
    np.testing.assert_allclose(chi2c, chi2m.sum(-1), rtol=1e-6)  # float32 sums
    one = sgra.calcmodchi2(TRUTH)
    assert isinstance(one[0], float) and one[1].shape == (sgra.ndat,)
    np.testing.assert_allclose(one[0], chi2c[0, 0], rtol=1e-3)  # as above: another batch, another program
    u = np.linspace(-5, 5, 6).reshape(2, 3)
    mamp, mph = sgra.calcmodel(u, u.T.copy().reshape(2, 3), TRUTH)
    assert mamp.shape == (2, 3) and mph.shape == (2, 3)
    assert sgra.calcmodel(u, u, np.stack([TRUTH, TRUTH]))[0].shape == (2, 2, 3)


def test_external_closure_phases_with_their_uv(sgra):
    # The triangles' legs (u1, v1), (u2, v2), third -(u1 + u2): closure phases of the truth fit exactly.
    rng = np.random.default_rng(0)
    uvcp = rng.uniform(-4, 4, (5, 4))
    v = [xringaus(TRUTH, uvcp[:, 0], uvcp[:, 1]), xringaus(TRUTH, uvcp[:, 2], uvcp[:, 3]),
         xringaus(TRUTH, -uvcp[:, 0] - uvcp[:, 2], -uvcp[:, 1] - uvcp[:, 3])]
    cphs = np.angle(np.asarray(v[0] * v[1] * v[2]))
    vis = np.asarray(xringaus(TRUTH, sgra.ulam, sgra.vlam))
    ext = Mcgpu_Sgra(ulam=sgra.ulam, vlam=sgra.vlam, amp=np.abs(vis), phase=np.angle(vis), eamp=0.05,
                     cphs=cphs, uvcp=uvcp, ecph=[0.1] * 5, pdescr=PDESCR, pmint=LOWER, pmaxt=UPPER, nbeta=4, nseq=2)
    assert ext.cpExt == 1 and ext.ndat == sgra.nvis + 5
    chi2 = ext.calcmodchi2(TRUTH)[0]
    assert chi2 < 1e-6, chi2  # noiseless, the true parameters: zero to float32 rounding (~1e-7 rad per datum)


def test_amplitudes_only_and_bad_arguments(sgra, uvfile):
    amp_only = Mcgpu_Sgra(uvfile=str(uvfile), use_cphs=False, eamp=0.01, pdescr=PDESCR, pmint=LOWER, pmaxt=UPPER)
    assert amp_only.ndat == amp_only.nvis and amp_only.ecph is None
    np.testing.assert_allclose(amp_only.std2r, 1e4)
    common = dict(pdescr=PDESCR, pmint=LOWER, pmaxt=UPPER)
    with pytest.raises(ValueError, match=r"ecph is needed"):
        Mcgpu_Sgra(uvfile=str(uvfile), **common)
    with pytest.raises(ValueError, match=r"eamp\[0\]=0.0 must be positive"):
        Mcgpu_Sgra(uvfile=str(uvfile), eamp=0.0, ecph=1.0, **common)
    with pytest.raises(ValueError, match=r"pdescr has 9 entries but imodel=2 is the 13-parameter model"):
        Mcgpu_Sgra(uvfile=str(uvfile), imodel=2, ecph=1.0, **common)
    with pytest.raises(ValueError, match=r"imodel must be 1 .* or 2"):
        Mcgpu_Sgra(uvfile=str(uvfile), imodel=9, ecph=1.0, **common)
    with pytest.raises(ValueError, match=r"give uvfile= or the arrays, not both: ulam"):
        Mcgpu_Sgra(uvfile=str(uvfile), ulam=sgra.ulam, ecph=1.0, **common)
    with pytest.raises(ValueError, match=r"cphs given from outside need uvcp"):
        Mcgpu_Sgra(uvfile=str(uvfile), cphs=[0.1, 0.2], ecph=1.0, **common)
    with pytest.warns(UserWarning, match=r"cpix is not used: the closure triangles are computed"):
        Mcgpu_Sgra(uvfile=str(uvfile), use_cphs=False, eamp=0.01, cpix=np.zeros((1, 3), int), **common)


def test_phase_error_table():
    # SNR 0: uniform phase, 180/sqrt(3) degrees; high SNR: 1/SNR radians (to 1 % at SNR 30).
    table = phase_error_deg(np.array([0.0, 30.0]))
    np.testing.assert_allclose(table[0], 180 / np.sqrt(3), rtol=1e-6)
    np.testing.assert_allclose(table[1], np.degrees(1 / 30), rtol=0.01)


def test_model_obsfit_flow_runs_end_to_end(uvfile, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the histogram png lands here
    argv = ["model_obsfit.py", "9", str(uvfile), "nburn=20", "niter=20", "nbeta=4", "nseq=2", "seed=1",
            "noplot", "png"]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr("matplotlib.pyplot.show", lambda *a, **k: None)
    sgra = runpy.run_path(str(ROOT / "examples" / "model_obsfit.py"))["main"](argv)
    assert sgra.pout_4d.shape == (9, 4, 2, 20) and sgra.chi2.shape == (40,)  # every temperature, as the seed
    assert np.all(np.isfinite(sgra.chi2))
    # The closure errors the script set after construction were the ones fitted: the recorded chi2
    # of a sample is calcmodchi2's at that sample (float32 sampler vs float64 here: rtol 1e-4).
    best = int(np.argmin(sgra.chi2))
    p = sgra.pout[:, best]
    assert not np.allclose(sgra.std2r[sgra.nvis:], 1.0)
    np.testing.assert_allclose(sgra.calcmodchi2(p)[0], sgra.chi2[best], rtol=1e-4)
    assert sgra.rate_acpt.shape == (9, 4) and sgra.rate_exch.shape == (4,)
    assert list(tmp_path.glob("hist_ring_9prm_burn020_iter00020.png"))
