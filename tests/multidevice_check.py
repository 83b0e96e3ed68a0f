"""Every multi-device check in one process with 4 virtual CPU devices: the reports that
tests/test_devices.py, test_collectives.py, test_deconv_devices.py, test_lbfgs_split.py and
test_lbfgs_onepass_split.py assert on.

JAX makes its CPU devices when it starts, so ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
is set here before JAX is imported; the pytest process has started JAX already, hence a
subprocess (one for the whole session: tests/conftest.py's ``multidevice_report``).  Usage:
``python multidevice_check.py OUT.json [SECTION ...]`` (all sections by default); a section that
raises reports its traceback under ``"section_error"`` and the others still run.

Compiling is most of the time here, and most of compiling is LLVM optimising the CPU's machine
code: the checks run with XLA's backend at -O0 (``--xla_backend_optimization_level=0``: 98 s of
CPU against 173 s at the default, same sizes) and its older fusion code generator
(``--xla_cpu_use_fusion_emitters=false``: 58 s against 120 s at -O0).  What they check does not depend on it: the HLO
(its collectives and loops) is optimised as always, and a split run is compared with a one-device
run compiled the same way (decisions exactly, floats to stated ulp: the rounding of the machine
code may differ from the default's, as it may from one CPU to another).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

from xla_test_flags import flags_text  # noqa: E402 - this folder is on the path: the script's own

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count=4 {flags_text()}"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import collectives_check  # noqa: E402
import deconv_devices_check  # noqa: E402
import devices_check  # noqa: E402
import lbfgs_onepass_split_check  # noqa: E402
import lbfgs_split_check  # noqa: E402

SECTIONS = {
    "devices": devices_check.main,
    "collectives": lambda: collectives_check.main(2),
    "collectives4": lambda: collectives_check.main(4, exchange_only=True),
    "deconv_devices": deconv_devices_check.main,
    "lbfgs_split": lbfgs_split_check.main,
    "lbfgs_onepass_split": lbfgs_onepass_split_check.main,
}


def run(names: list[str]) -> dict:
    """``{section: its report, or {"section_error": traceback}}``, with each section's seconds."""
    out = {}
    for name in names:
        t0 = time.perf_counter()
        try:
            out[name] = SECTIONS[name]()
        except Exception:  # noqa: BLE001 - reported to the tests of that section, the others still run
            out[name] = {"section_error": traceback.format_exc()}
        out[name]["section_seconds"] = time.perf_counter() - t0
    return out


if __name__ == "__main__":
    report = run(sys.argv[2:] or list(SECTIONS))
    partial = sys.argv[1] + ".partial"
    with open(partial, "w") as f:
        json.dump(report, f)
    os.replace(partial, sys.argv[1])  # readers poll for the file: it appears whole
