"""Fixtures shared by several test files."""

from __future__ import annotations

import pytest
import subprocess_check


@pytest.fixture(scope="session")
def multidevice_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The report of tests/multidevice_check.py (every multi-device check, 4 virtual CPU devices),
    made once per session by one subprocess; see tests/subprocess_check.py."""
    return subprocess_check.multidevice_report(tmp_path_factory)
