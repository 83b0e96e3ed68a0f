"""Fixtures shared by several test files."""

from __future__ import annotations

import jax
import pytest
import subprocess_check
from lbfgs_cases import X100, rosen, solve

import multiwalk as mw


@pytest.fixture(scope="session", autouse=True)
def _start_multidevice_checks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Start the multi-device subprocess with the session's first test, to run beside the other
    tests, if any collected test needs its report; wait for it at the end if this process started it."""
    if any("multidevice_report" in getattr(item, "fixturenames", ()) for item in request.session.items):
        subprocess_check.start(subprocess_check.report_path(tmp_path_factory))
    yield
    subprocess_check.finish()


@pytest.fixture(scope="session")
def multidevice_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The report of tests/multidevice_check.py (every multi-device check, 4 virtual CPU devices),
    made once per session by one subprocess; see tests/subprocess_check.py."""
    return subprocess_check.wait(subprocess_check.report_path(tmp_path_factory))


@pytest.fixture(scope="module")
def float64():
    """float64 for one test module (the seed's precision; a global jax_enable_x64 would leak into the
    other test files); restored at the module's end.  A module asks for it with
    ``pytestmark = pytest.mark.usefixtures("float64")``."""
    with jax.enable_x64(True):
        yield


@pytest.fixture(scope="module")
def rosen100(float64):
    """(problem, result) of the default L-BFGS (m=7, eps=1e-5) on Extended Rosenbrock, n = 100, from
    the seed's start, float64.  Later runs on this same problem object with the same options reuse its
    compiled loop (within one module: the fixture is made once per module)."""
    problem = mw.Problem(objective=rosen, x0=X100)
    return problem, solve(problem, mw.LBFGS())

