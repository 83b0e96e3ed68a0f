"""Run one of the ``*_check.py`` scripts beside the tests in a fresh Python and return its report.

The scripts set ``XLA_FLAGS`` (virtual CPU devices) before importing JAX, which only a new process
can do; each prints one JSON line last.  Shared by tests/test_devices.py and tests/test_deconv_devices.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_check_script(name: str, *args: str) -> dict:
    """Run ``tests/<name> args...`` with ``src`` on the path and without the caller's XLA_FLAGS; its JSON report."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(HERE.parent / "src") + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, str(HERE / name), *args], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
