"""The xringaus fit on simulated EHT data, its summaries, and ``multiwalk demo``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import multiwalk as mw
from multiwalk.cli import main
from multiwalk.eht import fit_xringaus, interval_summary, load_array, simulate, xringaus_problem
from multiwalk.io.uvdata import read_uvdata
from multiwalk.models import PARAM_NAMES, xringaus

TRUTH = np.array([2.5, 26.0, 0.6, 0.4, 0.3, 0.6, 0.8, 0.2, 1.0])
FREE = ("Zsp", "Re", "rq", "th")  # a small fit: the others held at their true values


@pytest.fixture(scope="module")
def data():
    return simulate(load_array("EHT2017"), lambda u, v: np.asarray(xringaus(TRUTH, u, v)), cadence_seconds=3600.0,
                    scan_seconds=300.0, fractional_noise=0.05, seed=5)


@pytest.fixture(scope="module")
def small_fit(data):
    fixed = {n: float(TRUTH[i]) for i, n in enumerate(PARAM_NAMES) if n not in FREE}
    return fit_xringaus(data, mw.ReplicaExchange(nbeta=8, nseq=8, nburn=150, niter=150), seed=0, fixed=fixed, progress=False)


def test_small_fit_recovers_the_truth(small_fit) -> None:
    fit = small_fit
    assert fit.result.status == mw.Status.SUCCESS
    free = [PARAM_NAMES.index(n) for n in FREE]
    # the truth lies in the 95 % marginal interval of every free parameter (seeded run: deterministic)
    assert np.all(fit.contains(TRUTH)[free]), fit.table(TRUTH)
    # and the best fit is close: well inside the box (widths 5 Jy, 40 uas, 0.99, 2 pi), within a few sigma of
    # a fit to ~290 data at 5 % errors: 0.1 Jy, 1 uas, 0.05, 0.05 rad
    assert np.all(np.abs(fit.best - TRUTH)[free] < [0.1, 1.0, 0.05, 0.05]), fit.table(TRUTH)
    # the chi2 of the best fit is that of a good fit: chi2 / n_data within 5 sigma of 1 (sigma = sqrt(2/n))
    n = fit.n_data
    assert abs(fit.chi2 / n - 1) < 5 * np.sqrt(2 / n), (fit.chi2, n)
    # fixed parameters stay fixed, in the samples too
    assert np.all(fit.result.flat_samples[:, 3] == np.float32(TRUTH[3]))
    table = fit.table(TRUTH)
    assert "Zsp" in table and "(fixed)" in table and "in 95%" in table


def test_plots(small_fit, tmp_path: Path) -> None:
    paths = small_fit.plot(tmp_path, truth=TRUTH, npix=48)
    assert [p.name for p in paths] == ["images.png", "marginals.png", "amplitudes.png", "closure_phases.png"]
    assert all(p.stat().st_size > 5000 for p in paths)  # a real figure, not an empty canvas


def test_problem_layout(data) -> None:
    problem = xringaus_problem(data)
    n_cp = problem.data.size - len(data)
    assert problem.names == list(PARAM_NAMES) and problem.periodic.tolist() == [False] * 8 + [True]
    assert problem.angular_data.sum() == n_cp and not problem.angular_data[: len(data)].any()
    # at the truth the model reproduces the noiseless amplitudes (float32 rounding: 1e-5 of 2.5 Jy)
    out = problem.evaluate(TRUTH[None])[0]
    assert np.allclose(out[: len(data)], np.abs(xringaus(TRUTH, data.u, data.v)), atol=2e-5)


def test_interval_summary_across_the_seam() -> None:
    rng = np.random.default_rng(0)
    th = np.mod(np.pi + 0.1 * rng.standard_normal(20000) + np.pi, 2 * np.pi) - np.pi  # around +-pi
    s = interval_summary(th[:, None], np.array([-np.pi]), np.array([np.pi]), np.array([True]))
    # the median is pi (or -pi: the same angle) to the sampling error 0.1 * 1.25 / sqrt(20000) ~ 1e-3
    assert abs(np.angle(np.exp(1j * (s["median"][0] - np.pi)))) < 5e-3
    # the 68 % interval is about centre -+ 0.1 in the unwrapped window, not the whole box
    assert s["hi68"][0] - s["lo68"][0] == pytest.approx(0.2, rel=0.05)


def test_bad_input(data) -> None:
    with pytest.raises(ValueError, match="model must be one of"):
        xringaus_problem(data, model="ring")
    with pytest.raises(TypeError, match="UVData"):
        xringaus_problem({"u": 1})
    with pytest.raises(TypeError, match="ReplicaExchange"):
        fit_xringaus(data, mw.PatternSearch(n_walkers=8))


def test_demo_command_tiny(tmp_path: Path, capsys) -> None:
    # --nburn 0: the driver compiles no burn-in loop, which halves the compilation (the slow part here)
    out = tmp_path / "demo"
    code = main(["demo", "--out", str(out), "--nbeta", "2", "--nseq", "2", "--nburn", "0", "--niter", "3",
                 "--cadence-seconds", "7200", "--no-progress"])
    assert code == 0
    text = capsys.readouterr().out
    assert "truth" in text and "median" in text and "68% interval" in text and "Total wall time" in text
    for name in ("sgra_uvdata.txt", "fit.npz", "images.png", "marginals.png", "amplitudes.png", "closure_phases.png"):
        assert (out / name).stat().st_size > 0, name
    back = read_uvdata(out / "sgra_uvdata.txt")
    assert back.stations[1] == "PV" and len(back) > 20


def test_demo_process_reports_whole_and_runs_earlier_exit_handlers(tmp_path: Path) -> None:
    # a real `python -m multiwalk demo`, the tiny run above (its loop comes from the tests' compile cache):
    # the report is whole and the status kept; an exit handler registered before the command's own
    # (here by a sitecustomize, at start-up, as coverage's is) still runs, and then the process ends
    # by os._exit, before its modules are torn down (_multiwalk_launch._register_fast_exit)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import atexit, os\natexit.register(print, 'torn down one by one')\n"
        "class _TornDown:\n    def __del__(self, write=os.write):\n        write(2, b'modules torn down\\n')\n"
        "_marker = _TornDown()\n")
    src = Path(__file__).resolve().parents[1] / "src"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(site)]), JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-m", "multiwalk", "demo", "--out", str(tmp_path / "demo"), "--nbeta", "2",
                           "--nseq", "2", "--nburn", "0", "--niter", "3", "--cadence-seconds", "7200", "--no-progress",
                           "--no-plots"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.rstrip().splitlines()
    assert lines[-1] == "torn down one by one", done.stdout[-2000:]  # the user's handler ran, last
    assert lines[-2].startswith("Total wall time"), done.stdout[-2000:]  # the report, whole, before it
    assert "modules torn down" not in done.stderr  # the fast end, after the handler
    assert (tmp_path / "demo" / "fit.npz").stat().st_size > 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--nbeta", "0"], "--nbeta must be a positive integer"),
        (["--truth", "Re=99"], "outside the fit's box"),
        (["--truth", "R=3"], "must be NAME=VALUE"),
        (["--uvdata", "/nonexistent_uvdata.txt"], "no such file"),
    ],
)
def test_demo_bad_options(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as err:
        main(["demo", *argv])
    assert err.value.code == 2
    assert message in capsys.readouterr().err


def test_demo_help(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = capsys.readouterr().out
    for option in ("--seed", "--out", "--nbeta", "--nseq", "--nburn", "--niter", "--truth", "--uvdata"):
        assert option in text
