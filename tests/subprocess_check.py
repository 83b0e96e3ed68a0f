"""The multi-device checks' report (tests/multidevice_check.py), made once per test session.

The checks need ``XLA_FLAGS`` (virtual CPU devices) set before JAX starts, which only a new process
can do, and they spend minutes of CPU compiling: one subprocess runs them all and writes one JSON
file.  It starts as soon as the session's collection holds a test that needs it (tests/conftest.py)
and runs beside the other tests; the ``multidevice_report`` fixture waits for its file.  Under
pytest-xdist the workers share it: the first to create the start marker launches it, the others
read its file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 1500  # the whole report; ~3 min of CPU on 2 cores
_launched: dict[Path, subprocess.Popen] = {}


def report_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where this pytest run's report goes: shared by xdist's workers (their base folders share a parent)."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:  # one pytest process
        return tmp_path_factory.getbasetemp() / "multidevice-report.json"
    return tmp_path_factory.getbasetemp().parent / f"multidevice-{run_id}.json"


def start(path: Path) -> None:
    """Launch tests/multidevice_check.py writing ``path``, unless a process of this pytest run did."""
    try:
        marker = os.open(path.with_suffix(".started"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(HERE.parent / "src") + os.pathsep + env.get("PYTHONPATH", "")
    log = open(path.with_suffix(".log"), "w")  # the child's output; this handle closes when the session ends
    _launched[path] = subprocess.Popen([sys.executable, str(HERE / "multidevice_check.py"), str(path)],
                                       stdout=log, stderr=subprocess.STDOUT, env=env)
    os.write(marker, str(_launched[path].pid).encode())
    os.close(marker)


def wait(path: Path) -> dict:
    """The report at ``path``, once written; a test failure (with the log's tail) if it never is."""
    start(path)  # no-op if started at collection
    deadline = time.monotonic() + TIMEOUT_S
    while not path.exists():
        proc = _launched.get(path)
        ended = proc.poll() is not None if proc else not _alive(path)
        if ended and not path.exists():
            log = path.with_suffix(".log")
            tail = log.read_text()[-5000:] if log.exists() else ""
            pytest.fail(f"tests/multidevice_check.py ended without a report:\n{tail}", pytrace=False)
        if time.monotonic() > deadline:
            pytest.fail(f"tests/multidevice_check.py gave no report in {TIMEOUT_S} s", pytrace=False)
        time.sleep(0.5)
    return json.loads(path.read_text())


def _alive(path: Path) -> bool:
    """Whether the process another worker launched (its pid in the start marker) still runs."""
    pid = path.with_suffix(".started").read_text()
    if not pid:
        return True  # just launched: its pid is being written
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status  # ended, not yet reaped by its parent


def finish() -> None:
    """At the session's end: wait for a report this process launched (its readers may be elsewhere)."""
    for proc in _launched.values():
        try:
            proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()


def section(report: dict, name: str) -> dict:
    """One section of the report; a test failure with its traceback if that section raised."""
    if "section_error" in report[name]:
        pytest.fail(f"tests/multidevice_check.py, section {name!r}:\n{report[name]['section_error']}", pytrace=False)
    return report[name]
