"""The multi-device checks' report (tests/multidevice_check.py), made once per test session.

The checks need ``XLA_FLAGS`` (virtual CPU devices) set before JAX starts, which only a new process
can do, and starting one (JAX's import, then compiling every loop) costs tens of seconds on a
2-core machine: one subprocess runs them all and writes one JSON file.  Under pytest-xdist the
workers share it: the first to ask runs the subprocess under a file lock, the others wait and read
its file.  Used by tests/conftest.py's ``multidevice_report`` fixture.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def run_check_script(out: Path) -> None:
    """Run tests/multidevice_check.py with ``src`` on the path and without the caller's XLA_FLAGS,
    its report written to ``out`` (``{"failed": stderr}`` there if the process failed)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(HERE.parent / "src") + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, str(HERE / "multidevice_check.py"), str(out)],
                          capture_output=True, text=True, timeout=1500, env=env)
    if proc.returncode != 0 or not out.exists():
        out.write_text(json.dumps({"failed": f"exit status {proc.returncode}\n{proc.stderr[-5000:]}"}))


def multidevice_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every section's report, run once for this test session (shared by xdist's workers)."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:  # one pytest process
        path = tmp_path_factory.mktemp("multidevice") / "report.json"
        run_check_script(path)
    else:  # the workers' base temporary folders share a parent
        path = tmp_path_factory.getbasetemp().parent / f"multidevice-{run_id}.json"
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not path.exists():
                run_check_script(path)
    report = json.loads(path.read_text())
    if "failed" in report:
        pytest.fail(f"tests/multidevice_check.py failed: {report['failed']}", pytrace=False)
    return report


def section(report: dict, name: str) -> dict:
    """One section of the report; a test failure with its traceback if that section raised."""
    if "section_error" in report[name]:
        pytest.fail(f"tests/multidevice_check.py, section {name!r}:\n{report[name]['section_error']}", pytrace=False)
    return report[name]
