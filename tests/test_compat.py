"""``multiwalk.compat.imgpu.Mcgpu`` against the modern API, and the two seed examples."""

from __future__ import annotations

import runpy
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from ulp import assert_close_ulp

import multiwalk as mw
from multiwalk.compat import imgpu
from multiwalk.compat.imgpu import Mcgpu

ROOT = Path(__file__).resolve().parents[1]
SIZES = dict(nbeta=4, nseq=3, nburn=200, niter=100)
SEED = 7
# parameters: x, y (normal), c (fixed at 0.5; its pmint == pmaxt == 0 do not hold it), phi (angular)
PDESCR = [1, 1, 0, 2]
PTOTAL = [9.0, 9.0, 0.5, 9.0]  # only ptotal[2] is used
PMINT = [-2.0, -2.0, 0.0, -np.pi]
PMAXT = [2.0, 2.0, 0.0, np.pi]
DAT = np.array([0.0, 0.0, 3.0])
STD2R = np.array([1e4, 1e4, 1.0 / 0.3**2])
ANGULAR = np.array([False, False, True])


def seed_model(p, coor, icoor, dat, idat, imodel):
    """Circle, line y = coor[0] x + c, and the angle phi compared with dat[2]."""
    x, y, c, phi = p[0], p[1], p[2], p[3]
    return jnp.stack([x**2 + y**2 - 1.0, y - coor[0] * x - c, phi])


def make_mcgpu(**kw) -> Mcgpu:
    opts = dict(coor=[0.25], dat=DAT, std2r=STD2R, pdescr=PDESCR, ptotal=PTOTAL, pmint=PMINT, pmaxt=PMAXT,
                seed=SEED, model=seed_model, angular_data=ANGULAR, **SIZES)
    opts.update(kw)
    return Mcgpu(**opts)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One Mcgpu run and the same problem stated with the modern API, same seed and options."""
    checkpoint = tmp_path_factory.mktemp("compat") / "mcgpu.npz"
    mc = make_mcgpu()
    mc.burnin_and_search(progress=False, checkpoint=checkpoint)

    def model(p, line):
        return jnp.stack([p[0] ** 2 + p[1] ** 2 - 1.0, p[1] - line * p[0] - p[2], p[3]])

    problem = mw.Problem(model=model, data=DAT, sigma=1.0 / np.sqrt(STD2R), args=0.25,
                         lower=[-2, -2, 0, -np.pi], upper=[2, 2, 1, np.pi],  # c's bounds are unused
                         fixed={2: 0.5}, periodic=[3], angular_data=ANGULAR)
    modern = mw.solve(problem, mw.ReplicaExchange(**SIZES), seed=SEED, progress=False)
    return mc, modern, checkpoint


def test_same_samples_as_modern_api(runs):
    mc, modern, _ = runs
    free = [0, 1, 3]
    # The two runs are two compiled programs (the seed-style model and this one): every decision
    # (acceptances, labels, swaps) exactly; the samples and steps to 1024 float32 ulp of 1, as one
    # program may contract a move's x + step * z into a fused multiply-add where the other does not
    # (an ulp of |x| <= 2 on each of the 300 iterations' moves: 600 ulp of 1 at worst; bit for bit
    # on this CPU), far below a wrong move (the step, ~0.1)
    assert_close_ulp(mc.result.samples, modern.samples, 1024, "samples", scale=1.0)
    # pout_4d[:, 0] is samples (niter, nseq, nptot) -> (nprm, nseq, niter), free parameters only
    expected = np.transpose(mc.result.samples[:, :, free], (2, 1, 0))
    np.testing.assert_array_equal(mc.pout_4d[:, 0], expected)
    # the other temperatures: samples_all of the run, free parameters, (nprm, nbeta, nseq, niter)
    np.testing.assert_array_equal(mc.pout_4d, np.transpose(mc.result.samples_all[..., free], (3, 2, 1, 0)))
    # the seed's flattening: sequence-major, then iteration
    np.testing.assert_array_equal(mc.pout, mc.pout_4d[:, 0, :, :].reshape(mc.nprm, mc.nseq * mc.niter))
    np.testing.assert_array_equal(mc.pout[:, 1 * mc.niter + 4], mc.result.samples[4, 1, free])
    # chi2 comes from two programs (the seed-style model and this one, compiled apart), float32:
    # a residual's terms (~1) may round an ulp apart, and chi2 = sum r^2 / sigma^2 with 1/sigma^2
    # = 1e4 moves by 2 |r| 1e4 ulp(1) per residual (|r| up to ~0.02 at chi2 ~ 3: ~5e-5; measured
    # 3.6e-5 with XLA's older fusion code generator, bit for bit with the default): atol 5e-4
    np.testing.assert_allclose(mc.chi2_2d, modern.chi2.T, rtol=0, atol=5e-4, err_msg="chi2")
    np.testing.assert_array_equal(mc.chi2, mc.chi2_2d.flatten())
    np.testing.assert_array_equal(mc.n_acpt, modern.n_accepted)
    assert_close_ulp(mc.pstp, modern.steps, 1024, "steps", scale=1.0)  # as the samples
    np.testing.assert_array_equal(mc.tcur, modern.labels)
    np.testing.assert_array_equal(mc.n_exch[:-1], modern.n_swaps)
    np.testing.assert_allclose(mc.result.fun, modern.fun, rtol=0, atol=5e-4, err_msg="fun")  # as chi2


def test_attribute_shapes(runs):
    mc, _, checkpoint = runs
    nprm, nb, ns, ni = 3, SIZES["nbeta"], SIZES["nseq"], SIZES["niter"]
    assert (mc.nptot, mc.nprm, mc.ndat) == (4, nprm, 3)
    assert mc.pout.shape == (nprm, ns * ni)
    assert mc.chi2.shape == (ns * ni,)
    assert mc.pout_4d.shape == (nprm, nb, ns, ni)  # every temperature, as the seed's
    assert mc.tout.shape == (nb, ns, ni) and mc.n_hist.shape == (SIZES.get("nadj", 100), nprm, nb, ns)
    np.testing.assert_array_equal(mc.tout[:, :, -1], mc.tcur)  # tcur after the last iteration
    assert np.all(np.sort(mc.tout, axis=0) == np.arange(nb)[:, None, None])
    assert set(np.unique(mc.n_hist)) <= {0, 1}
    assert mc.chi2_2d.shape == (ns, ni)
    for name in ("n_acpt", "n_cnt", "pstp"):
        assert getattr(mc, name).shape == (nprm, nb, ns), name
    assert mc.n_exch.shape == (nb, ns) and np.all(mc.n_exch[-1] == 0)
    assert mc.tcur.shape == (nb, ns)
    assert np.all(np.sort(mc.tcur, axis=0) == np.arange(nb)[:, None])  # a permutation per sequence
    assert mc.beta.shape == (nb,) and mc.beta[0] == 1.0 and np.isclose(mc.beta[-1], 1e-4)
    assert np.all(mc.n_acpt <= mc.n_cnt) and mc.n_cnt.sum() == ni * ns * nb * nprm
    np.testing.assert_array_equal(mc.ivar, [0, 1, 3])
    np.testing.assert_array_equal(mc.invar, [0, 1, -1, 2])
    assert isinstance(mc.result, mw.ReplicaExchangeResult)
    assert checkpoint.exists()  # solve() keywords are passed through


def test_fixed_parameter(runs):
    mc, _, _ = runs
    assert mc.problem.fixed == {2: 0.5}
    assert np.all(mc.result.samples[:, :, 2] == 0.5)
    # the model sees ptotal's value: the line is y = 0.25 x + 0.5
    datm = mc.calcmodel([[0.0, 0.5, 0.5, 1.0], [0.0, 0.5, 0.0, 1.0]])
    np.testing.assert_allclose(datm, [[-0.75, 0.0, 1.0], [-0.75, 0.5, 1.0]], atol=1e-6)
    assert mc.calcmodel(np.zeros((2, 5, 4))).shape == (2, 5, 3)


def test_angular_parameter_is_periodic(runs):
    mc, _, _ = runs
    np.testing.assert_array_equal(mc.problem.periodic, [False, False, False, True])
    phi = mc.pout[2]
    assert np.all((phi >= -np.pi - 1e-6) & (phi <= np.pi + 1e-6))  # float32 rounding at the ends
    # phi ~ 3.0 +- 0.3 with angular residuals: the chains sit on both sides of the +-pi seam
    assert np.mean(np.abs(phi) > 2.4) > 0.75
    assert np.mean(phi < -2.4) > 0.05 and np.mean(phi > 2.4) > 0.05


def test_std2r_is_inverse_variance(runs):
    mc, _, _ = runs
    np.testing.assert_allclose(mc.problem.sigma, 1.0 / np.sqrt(STD2R), rtol=1e-6)
    p = np.array([[0.3, 0.2, 0.5, -3.0], [0.0, 1.0, 0.5, 3.0]])
    datm = mc.calcmodel(p)
    resid = datm - DAT
    resid[:, 2] = np.mod(resid[:, 2] + np.pi, 2 * np.pi) - np.pi  # the angular datum is wrapped
    np.testing.assert_allclose(mc.calcmodchi2(p), np.sum(resid**2 * STD2R, axis=1), rtol=1e-5)
    assert mc.calcmodchi2(p[0]).shape == ()


def test_defaults_and_options():
    mc = Mcgpu(pdescr=[1, 1], pmint=[-1, -1], pmaxt=[1, 1], model=lambda p, *_: p[0] + p[1], npass=3)
    assert mc.dat.shape == (1,) and mc.dat[0] == 0 and mc.std2r[0] == 1
    assert mc.coor.shape == mc.icoor.shape == mc.idat.shape == (1,)
    assert isinstance(mc.seed, int) and 0 <= mc.seed < 2**32 and mc.solve_seed == mc.seed
    assert mc.npass == 3 and (mc.nbeta, mc.nseq, mc.nburn, mc.niter, mc.nadj) == (32, 14, 300, 500, 100)
    assert mc.calcmodel([[0.25, 0.5]]).shape == (1, 1)  # a scalar model output is reshaped to dat's shape
    mc.reset_gpu()
    big = Mcgpu(pdescr=[1], pmint=[0], pmaxt=[1], model=lambda p, *_: p, seed=np.uint64(2**63 + 5))
    assert big.seed == 2**63 + 5 and 0 <= big.solve_seed < 2**32
    b = Mcgpu(pdescr=[1], pmint=[0], pmaxt=[1], model=lambda p, *_: p, beta=[1.0, 0.1, 0.01])
    assert b.nbeta == 3 and b.solver.betas == (1.0, 0.1, 0.01)
    np.testing.assert_allclose(b.beta, [1.0, 0.1, 0.01])
    g = Mcgpu(pdescr=[1], pmint=[0], pmaxt=[1], model=lambda p, *_: p, nbeta=5, beta1=0.5, betan=0.005)
    np.testing.assert_allclose(g.beta, 0.5 * 0.01 ** (np.arange(5) / 4))


def test_burnin_and_search_passes_solve_options(monkeypatch):
    seen = {}

    def fake_solve(problem, solver, **kw):
        seen.update(kw, problem=problem, solver=solver)
        raise RuntimeError("stop")

    monkeypatch.setattr(imgpu, "solve", fake_solve)
    mc = make_mcgpu(seed=2**40 + 3)
    with pytest.raises(RuntimeError, match="stop"):
        mc.burnin_and_search(progress=True, time_limit=5.0, checkpoint="ck.npz")
    assert seen["progress"] is True and seen["time_limit"] == 5.0 and seen["checkpoint"] == "ck.npz"
    assert seen["problem"] is mc.problem and seen["solver"] is mc.solver
    assert seen["seed"] == mc.solve_seed == 3 ^ 2**8  # low half xor high half


def _model(p, *_):
    return p[:1]


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (dict(pdescr=None), TypeError, "needs pdescr"),
        (dict(pdescr=[1, 3]), ValueError, r"pdescr\[1\]=3"),
        (dict(pdescr=[1.5, 1]), TypeError, "pdescr must hold the integers"),
        (dict(pdescr=[0, 0]), ValueError, "every parameter is fixed"),
        (dict(pmint=None), TypeError, "needs pmint"),
        (dict(pmaxt=None), TypeError, "needs pmaxt"),
        (dict(pmint=[0.0]), ValueError, "pmint has shape"),
        (dict(pmaxt=[1.0, 1.0, 1.0]), ValueError, "pmaxt has shape"),
        (dict(pmint=[0.0, 2.0]), ValueError, r"pmint\[1\]=2.0 is not below pmaxt\[1\]=1.0"),
        (dict(ptotal=[0.0]), ValueError, "ptotal has shape"),
        (dict(model=None), TypeError, "needs model="),
        (dict(model=3), TypeError, "model must be a function"),
        (dict(model=_model), ValueError, "model returns shape"),
        (dict(std2r=[1.0, 0.0]), ValueError, r"std2r\[1\]=0.0 must be positive"),
        (dict(std2r=[1.0, 1.0, 1.0]), ValueError, "std2r has shape"),
        (dict(npass=0), ValueError, "npass must be a positive integer"),
        (dict(beta=[0.1, 1.0]), ValueError, "beta must be strictly decreasing"),
        (dict(beta=[1.0, 0.0]), ValueError, r"beta values must lie in \(0, 1\]"),
        (dict(seed=-1), ValueError, "seed must be an integer"),
        (dict(seed=1.5), ValueError, "seed must be an integer"),
        (dict(nseq=0), ValueError, "nseq must be a positive integer"),
        (dict(angular_data=[True]), ValueError, "angular_data has shape"),
        (dict(idat=[0.5]), TypeError, "idat must hold integers"),
    ],
)
def test_bad_input(kwargs, exc, match):
    opts = dict(dat=[0.0, 0.0], pdescr=[1, 1], pmint=[0.0, 0.0], pmaxt=[1.0, 1.0],
                model=lambda p, *_: jnp.stack([p[0], p[1]]))
    opts.update(kwargs)
    with pytest.raises(exc, match=match):
        Mcgpu(**opts)


def test_examples_run(tmp_path, monkeypatch, capsys):
    """Both example scripts with --quick, run in this process (their main(), as ``python
    examples/<name>.py`` calls it): return 0, print their answers, write PNGs."""
    scripts = {"solvsys": ["solvsys_marginals.png", "solvsys_mcgpu_marginals.png", "solvsys_curves.png"],
               "search_rosenbrock": ["rosenbrock_marginals.png", "rosenbrock_mcgpu_marginals.png"]}
    monkeypatch.syspath_prepend(str(ROOT / "examples"))  # where the scripts import example_options from
    monkeypatch.chdir(tmp_path)
    printed = {}
    for name in scripts:
        main = runpy.run_path(str(ROOT / "examples" / f"{name}.py"), run_name=f"example_{name}")["main"]
        code = main(["--quick", "--out", str(tmp_path / name)])
        stdout, stderr = capsys.readouterr()
        assert code == 0, f"{name} failed:\n{stdout}\n{stderr}"
        assert "identical samples in both runs: True" in stdout, stdout
        for png in scripts[name]:
            path = tmp_path / name / png
            assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        printed[name] = stdout
    assert printed["solvsys"].count("root 2: found") == 2 and "NOT FOUND" not in printed["solvsys"]
    assert "exact (1, 1)" in printed["search_rosenbrock"]
