"""Fixtures shared by several test files."""

from __future__ import annotations

import pytest
import subprocess_check


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
