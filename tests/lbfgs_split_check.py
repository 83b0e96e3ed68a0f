"""One L-BFGS problem split along n over 1, 2 and 4 CPU devices with the fused Pallas passes
(``LBFGS(kernel="pallas")``, interpret mode), and L-BFGS-B split on 4, for tests/test_lbfgs_split.py.

Run by tests/multidevice_check.py (4 virtual CPU devices, float64); :func:`main` returns one dict
(plain numbers, bools, strings).  Sizes are small: interpret mode runs the kernels' programs one
after another, so the time goes into compiling one loop per device count and into the programs.
"""

from __future__ import annotations

import re
import time

import jax
import numpy as np

import multiwalk as mw
from multiwalk.compile_cache import compiled_loops
from multiwalk.functions import cute

# n = 192 with 32 columns per program: 192 and 96 columns per device are whole programs (the
# kernels' unmasked form), 48 on 4 devices ends in a half-masked program.
N = 192
BLOCK = 32


def coupled(x, weights):
    """A smooth convex objective whose term (x[1:] - x[:-1]) reads across the devices' boundaries."""
    return (weights * (x - 0.5) ** 2).sum() + ((x[1:] - x[:-1]) ** 2).sum() + 0.1 * (x**4).sum()


def problem(n: int) -> mw.Problem:
    weights = np.linspace(1.0, 4.0, n)
    return mw.Problem(objective=lambda x: coupled(x, weights), x0=np.linspace(-1.0, 1.0, n))


def collectives() -> list[str]:
    """The kinds of collective operations in the last compiled loop."""
    text = compiled_loops()[-1].as_text()
    return sorted(set(re.findall(r"\b(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)\b", text)))


def main() -> dict:
    t0 = time.perf_counter()
    big = problem(N)
    # eps = 1e-7: convergence is reached well above the rounding floor of f (at 1e-9 the last line
    # searches of every form, split or not, end on rounding, and their evaluation counts differ)
    solver = mw.LBFGS(m=3, max_iterations=60, eps=1e-7, kernel="pallas", kernel_block=BLOCK)
    runs = {}
    out: dict = {"devices": jax.device_count(), "n": N}
    for k in (1, 2, 4):
        runs[k] = mw.solve(big, solver, progress=False, devices=k)
        out[f"kernel_{k}"] = runs[k].stats["kernel"]
        out[f"reason_{k}"] = runs[k].stats["kernel_reason"]
        out[f"devices_{k}"] = runs[k].stats["devices"]
        out[f"collectives_{k}"] = collectives()
        if k > 1:
            out[f"P_spec_{k}"] = str(compiled_loops()[-1].input_shardings[0][0].starts.P.spec)
    a = runs[1]
    out["status_1"] = int(a.status)
    for k in (2, 4):
        b = runs[k]
        rows = min(a.history_length[0], b.history_length[0])
        out[f"iterations_{k}"] = [a.iterations, b.iterations]
        out[f"nfev_{k}"] = [a.nfev, b.nfev]
        out[f"status_{k}"] = int(b.status)
        f_a, f_b = a.history["f"][:rows, 0], b.history["f"][:rows, 0]
        out[f"f_hist_diff_{k}"] = float(np.max(np.abs(f_b - f_a)) / f_a[0])
        out[f"x_maxdiff_{k}"] = float(np.max(np.abs(b.x - a.x)))
    # n not a multiple of the device count: the driver refuses before compiling (ValueError)
    try:
        mw.solve(problem(N + 2), solver, progress=False, devices=4)
        out["uneven_error"] = ""
    except ValueError as err:
        out["uneven_error"] = str(err)
    # A value_and_grad problem (cute's Extended Rosenbrock: each coordinate reads its pair partner,
    # x shifted by one) on 1 and 4 devices: its evaluation runs on the split x outside the passes'
    # shard_map, where a shift written as concatenate([x[1:], x[-1:]]) made XLA all-gather x twice
    # per evaluation (issue 8: 2.3x slower split on 2 H200s); as lax.pad one value crosses per boundary.
    vg = mw.Problem(value_and_grad=cute.extended_rosenbrock_value_and_grad, x0=cute.start("extended_rosenbrock", N))
    vg_runs = {}
    for k in (1, 4):
        vg_runs[k] = mw.solve(vg, solver, progress=False, devices=k)
        out[f"vg_kernel_{k}"] = vg_runs[k].stats["kernel"]
        out[f"vg_collectives_{k}"] = collectives()
    a, b = vg_runs[1], vg_runs[4]
    rows = min(a.history_length[0], b.history_length[0])
    out["vg_status"] = [int(a.status), int(b.status)]
    out["vg_iterations"] = [a.iterations, b.iterations]
    out["vg_nfev"] = [a.nfev, b.nfev]
    f_a, f_b = a.history["f"][:rows, 0], b.history["f"][:rows, 0]
    out["vg_f_hist_diff"] = float(np.max(np.abs(f_b - f_a)) / f_a[0])
    out["vg_x_maxdiff"] = float(np.max(np.abs(b.x - a.x)))
    out.update(bounded())
    out["seconds"] = time.perf_counter() - t0
    return out


def bounded() -> dict:
    """L-BFGS-B (a box, the XLA form) on one problem split along n over 4 devices and on one."""
    n = 64
    weights = np.linspace(1.0, 4.0, n)
    lo = np.full(n, -1.0)
    hi = np.where(np.arange(n) % 2 == 0, 0.2, 1.0)  # below the unbounded minimum (~0.4): about half active
    boxed = mw.Problem(objective=lambda x: coupled(x, weights), x0=np.clip(np.linspace(-1.0, 1.0, n), lo, hi),
                       lower=lo, upper=hi)
    solver = mw.LBFGS(m=3, max_iterations=60, pgtol=1e-7)
    runs = {k: mw.solve(boxed, solver, progress=False, devices=k) for k in (1, 4)}
    a, b = runs[1], runs[4]
    rows = min(a.history_length[0], b.history_length[0])
    f_a, f_b = a.history["f"][:rows, 0], b.history["f"][:rows, 0]
    return {"box_devices": [a.stats["devices"], b.stats["devices"]], "box_status": [int(a.status), int(b.status)],
            "box_iterations": [a.iterations, b.iterations], "box_nfev": [a.nfev, b.nfev],
            "box_active": int(np.sum((a.x == lo) | (a.x == hi))), "box_inside": bool(np.all((b.x >= lo) & (b.x <= hi))),
            "box_f_hist_diff": float(np.max(np.abs(f_b - f_a)) / f_a[0]), "box_x_maxdiff": float(np.max(np.abs(b.x - a.x)))}

