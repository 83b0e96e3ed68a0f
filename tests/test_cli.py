"""The ``multiwalk`` command line (``multiwalk lbfgs``, the CUDA L-BFGS seed's driver program).

Tolerances, and why:

* The seed's report (its "PROGRAM RESULTS" for ``./driver_program 1000000 7``) is compared
  digit for digit where the numbers do not depend on rounding (the header at the start point,
  the iteration and evaluation counts) and to a relative tolerance elsewhere.  The table prints
  7 significant digits (a printing error up to 5e-7 on each side), and the reductions sum in
  another order than the CUDA code: rows 1-6 and 32-33 agree to 2e-6.  In the last iterations
  convergence is superlinear, so a relative perturbation of the iterate about doubles per
  iteration: rows 34-37 get ``2e-6 * 2**(i - 33)`` (3.2e-5 at row 37, where two orders of
  summation of ours differ by 6e-6 and the seed's 6.752264e-10 differs from ours by up to 7e-6).
* A saved ``x`` is checked against the printed final FUNC to 1e-6 relative: the print keeps 7
  significant digits (up to 5e-7), and re-evaluating f at ``x`` on another code path moves
  f ~ 1e-15 by far less (its residuals ~ 3e-8 are computed to ~1e-16 absolute, ~1e-8 relative).

The one run at n = 10**6 takes a few seconds on a CPU; every other run uses n <= 100.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from multiwalk import cli
from multiwalk.cli import main
from multiwalk.functions import cute
from multiwalk.solvers.lbfgs import LBFGSResult, LBFGSStatus

ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$")


@pytest.fixture(autouse=True)
def restore_x64():
    """``--dtype float64`` turns on jax_enable_x64 globally: put it back for the other test files."""
    old = jax.config.jax_enable_x64
    yield
    jax.config.update("jax_enable_x64", old)


def table(out: str) -> dict[int, tuple[int, float, float, float]]:
    """The iteration table rows printed after the ``*****`` line: ``{I: (NFN, FUNC, GNORM, STEPLENGTH)}``."""
    lines = out.splitlines()
    start = lines.index("*****") + 2  # the column titles follow the stars
    rows = {}
    for line in lines[start:]:
        m = ROW.match(line)
        if m is None:
            break
        rows[int(m[1])] = (int(m[2]), float(m[3]), float(m[4]), float(m[5]))
    return rows


# The seed's PROGRAM RESULTS ("..." between rows 6 and 32 in the manual).
SEED_ROWS = {
    1: (4, 8.968026e06, 1.338990e05, 1.275337e-04),
    2: (5, 2.223223e06, 1.835022e04, 1.000000e00),
    3: (6, 2.071674e06, 2.874521e03, 1.000000e00),
    4: (7, 2.066929e06, 1.253213e03, 1.000000e00),
    5: (8, 2.064897e06, 1.409016e03, 1.000000e00),
    6: (9, 2.050814e06, 3.691128e03, 1.000000e00),
    32: (46, 3.391364e02, 1.188979e02, 1.000000e00),
    33: (47, 4.085484e01, 2.639775e02, 1.000000e00),
    34: (48, 2.229921e00, 1.018714e01, 1.000000e00),
    35: (49, 1.162750e-02, 1.781043e00, 1.000000e00),
    36: (50, 4.912961e-06, 7.652340e-02, 1.000000e00),
    37: (51, 6.752264e-10, 1.013915e-03, 1.000000e00),
}


def test_reproduces_the_seed_report_rosenbrock_1e6(capsys):
    assert main(["lbfgs", "--n", "1000000", "--m", "7"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    # Header: exact (the start point's f and ||g|| are the same in any summation order to 7 digits).
    assert lines[:7] == [
        "Function to minimize: Rosenbrock",
        "Xtol: 2.220446e-16",
        "Number of variables n = 1000000;",
        "Number of corrections m = 7;",
        "f = 1.210000e+07;",
        "gnorm = 1.646623e+05",
        "*****",
    ]
    rows = table(out)
    assert max(rows) == 37 and len(rows) == 37  # --print-every 1: every row
    for i, (nfev, f, gnorm, stp) in SEED_ROWS.items():
        rtol = 2e-6 * 2.0 ** max(0, i - 33)  # see the module docstring
        got = rows[i]
        assert got[0] == nfev, f"row {i}: NFN {got[0]} != {nfev}"
        np.testing.assert_allclose(got[1:], (f, gnorm, stp), rtol=rtol, err_msg=f"row {i}")
    assert "The minimization terminated without detecting errors." in lines
    assert "Number of function and gradient evaluations for L-BFGS: 51" in lines
    assert "Number of iterations: 37" in lines
    for label in ("Compilation time: ", "Total time for the minimization: ", "Average time per iteration: ", "Device: "):
        assert any(line.startswith(label) for line in lines), label


def test_small_float32_run_prints_the_header(capsys):
    assert main(["lbfgs", "--n", "100", "--function", "powell", "--dtype", "float32"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:4] == [
        "Function to minimize: Powell",
        "Xtol: 1.192093e-07",  # float32's machine epsilon, 2**-23
        "Number of variables n = 100;",
        "Number of corrections m = 7;",
    ]
    assert "The minimization terminated without detecting errors." in out
    assert table(out)  # rows were printed


def test_python_dash_m_multiwalk_and_save(tmp_path):
    """``python -m multiwalk`` works, and ``--save`` writes the printed result (see the module docstring)."""
    path = tmp_path / "out.npz"
    proc = subprocess.run(
        [sys.executable, "-m", "multiwalk", "lbfgs", "--n", "10", "--print-every", "0", "--save", str(path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "The minimization terminated without detecting errors." in proc.stdout
    rows = table(proc.stdout)
    assert len(rows) == 2 and min(rows) == 1  # --print-every 0: the first and the last iteration only
    last = max(rows)
    with np.load(path) as saved:
        x, fun = saved["x"], float(saved["fun"])
        assert int(saved["iterations"]) == last and int(saved["nfev"]) == rows[last][0]
        assert int(saved["status"]) == 0 and float(saved["gnorm"]) == pytest.approx(rows[last][2], rel=1e-6)
    assert x.shape == (10,) and x.dtype == np.float64
    np.testing.assert_allclose(fun, rows[last][1], rtol=1e-6)  # 7 printed digits
    with jax.enable_x64(True):
        again = float(cute.extended_rosenbrock(jax.numpy.asarray(x)))
    np.testing.assert_allclose(again, rows[last][1], rtol=1e-6)  # f at the saved x is the printed f
    np.testing.assert_allclose(x, 1.0, atol=1e-6)  # the minimiser of Extended Rosenbrock (f ~ 1e-15)


def test_console_script_is_installed():
    script = Path(sys.executable).with_name("multiwalk")
    if not script.exists():
        pytest.skip("the multiwalk console script is not installed (pip install -e .)")
    proc = subprocess.run([str(script), "lbfgs", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--function" in proc.stdout


@pytest.mark.parametrize(
    "options, needle",
    [
        (["--n", "7"], "--n 7"),  # rosenbrock needs an even n
        (["--function", "powell", "--n", "-4"], "--n -4"),
        (["--m", "0"], "--m must be"),
        (["--function", "nope"], "--function"),
        (["--dtype", "float16"], "--dtype"),
        (["--eps", "-1"], "--eps must be"),
        (["--ftol", "0.95"], "--ftol=0.95 must be below --gtol=0.9"),
        (["--print-every", "-1"], "--print-every must be"),
        (["--time-limit", "0"], "--time-limit must be"),
    ],
)
def test_bad_options_exit_2_with_one_line(options, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["lbfgs", "--n", "10", *options] if "--n" not in options else ["lbfgs", *options])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing runs, nothing is printed before the check
    message = captured.err.strip().splitlines()[-1]
    assert message.startswith("multiwalk lbfgs: error: ") and needle in message, message


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2


def test_iteration_limit_exits_1(capsys):
    assert main(["lbfgs", "--n", "10", "--max-iterations", "3", "--xtol", "1e-10"]) == 1
    captured = capsys.readouterr()
    assert "Xtol: 1.000000e-10" in captured.out.splitlines()
    assert "MAX_STEPS" in captured.out and "Number of iterations: 3" in captured.out
    assert "max_iterations" in captured.err


def test_interrupt_exits_130_with_the_summary(monkeypatch, capsys):
    """Ctrl-C makes solve() return the partial result with status INTERRUPTED (the driver's
    business); the CLI prints the summary and exits 130.  A stand-in for solve() spares a compilation."""

    def interrupted_solve(problem, solver, **kwargs):
        print("no seed IFLAG (INTERRUPTED): interrupted (Ctrl-C); x is the last iterate")
        return LBFGSResult(
            x=np.zeros(problem.n), fun=1.0, status=LBFGSStatus.INTERRUPTED, message="interrupted (Ctrl-C); x is the last iterate",
            stats={"compile_seconds": 1.0, "run_seconds": 0.5}, gnorm=2.0, iterations=1, nfev=3,
        )

    monkeypatch.setattr(cli, "solve", interrupted_solve)
    assert main(["lbfgs", "--n", "10"]) == 130
    captured = capsys.readouterr()
    assert "Number of iterations: 1" in captured.out and "Average time per iteration: 500.000 ms" in captured.out
    assert "INTERRUPTED" in captured.err
