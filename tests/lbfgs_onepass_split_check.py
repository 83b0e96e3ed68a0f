"""The one-pass L-BFGS loop (``LBFGS(kernel="onepass")``) with one problem split along n over 1, 2 and
4 CPU devices (interpret mode), for tests/test_lbfgs_onepass_split.py.

Run by tests/multidevice_check.py (4 virtual CPU devices, float64); :func:`main` returns one dict
(plain numbers, bools, strings).  Extended Rosenbrock (its ``value_and_grad.block`` hook, 2
coordinates per row), n = 728: 364 rows, 182 per device on 2 and 91 on 4, none a whole number of
the kernel's programs (16 rows at kernel_block=32): every device's share ends in a masked program;
364 rows split over 4 devices but not over 3, and n = 732 (366 rows) over 2 but not over 4.  The
time goes into compiling one loop per device count (~6-9 s of CPU each), not into n: at n = 80
the identical pairs of Extended Rosenbrock (all rows alike) let the per-device sums' rounding
grow to 4e-12 of f's start, against <= 8e-15 here.
"""

from __future__ import annotations

import os
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
from ulp import max_ulps

import multiwalk as mw
from multiwalk.compile_cache import compiled_loops
from multiwalk.functions import cute, cute_kernel
from multiwalk.solvers import lbfgs_onepass

N = 728
BLOCK = 32  # kernel_block: 16 rows of pairs per block step


def problem(n: int) -> mw.Problem:
    return mw.Problem(value_and_grad=cute.extended_rosenbrock_value_and_grad, x0=cute.start("extended_rosenbrock", n))


def collectives() -> list[list]:
    """``[kind, result shape]`` of every collective in the last compiled loop."""
    text = compiled_loops()[-1].as_text()
    kinds = r"all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter"
    return sorted({(kind, shape) for shape, kind in re.findall(rf"= (\S+) ({kinds})(?:-start)?\(", text)})


def lowers_for_cuda(mesh_size: int) -> bool:
    """:func:`lbfgs_onepass.line_pass_split` (the kernel under shard_map) lowered for a CUDA target:
    Pallas -> Triton on this CPU; raises on a missing lowering rule.  float64 whole programs and
    float32 ragged ones, at the default launch."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.asarray(jax.devices()[:mesh_size]), ("batch",))
    ring = NamedSharding(mesh, PartitionSpec(None, "batch", None))
    m = 7
    ok = True
    for dt, rows in ((jnp.float64, mesh_size * 1024), (jnp.float32, mesh_size * 1025)):
        X, G, S = (jax.ShapeDtypeStruct((r, rows, 2), dt, sharding=ring) for r in (2, m + 2, m + 1))
        ints, floats = jax.ShapeDtypeStruct((6 + 2 * m,), jnp.int32), jax.ShapeDtypeStruct((2 + 2 * m,), dt)
        lowered = jax.jit(
            lambda X, G, S, i, f: lbfgs_onepass.line_pass_split(mesh, X, G, S, i, f, cute_kernel.rosenbrock_block)
        ).trace(X, G, S, ints, floats).lower(lowering_platforms=("cuda",))
        text = lowered.as_text()
        ok = ok and "lbfgs_onepass" in text and "all_gather" not in text
    return ok


def main() -> dict:
    t0 = time.perf_counter()
    big = problem(N)
    solver = mw.LBFGS(kernel="onepass", kernel_block=BLOCK)
    runs = {}
    out: dict = {"devices": jax.device_count(), "rows": N // 2}
    for k in (1, 2, 4):
        runs[k] = mw.solve(big, solver, progress=False, devices=k)
        out[f"kernel_{k}"] = runs[k].stats["kernel"]
        out[f"reason_{k}"] = runs[k].stats["kernel_reason"]
        out[f"devices_{k}"] = runs[k].stats["devices"]
        out[f"collectives_{k}"] = collectives()
        if k > 1:
            out[f"X_spec_{k}"] = str(compiled_loops()[-1].input_shardings[0][0].starts.X.spec)
    a = runs[1]
    out["status_1"] = int(a.status)
    out["iterations_1"], out["nfev_1"] = a.iterations, a.nfev
    for k in (2, 4):
        b = runs[k]
        rows = min(a.history_length[0], b.history_length[0])
        out[f"status_{k}"] = int(b.status)
        out[f"iterations_{k}"], out[f"nfev_{k}"] = b.iterations, b.nfev
        out[f"nfev_hist_equal_{k}"] = bool(np.array_equal(a.history["nfev"][:rows, 0], b.history["nfev"][:rows, 0]))
        f_a, f_b = a.history["f"][:rows, 0], b.history["f"][:rows, 0]
        out[f"f_hist_diff_{k}"] = float(np.max(np.abs(f_b - f_a)) / f_a[0])
        out[f"f_ulps_{k}"] = max_ulps(b.fun, a.fun, scale=1.0)  # f ~ 1e-11 at the end: in 1's ulp
        out[f"x_maxdiff_{k}"] = float(np.max(np.abs(b.x - a.x)))
    # Ctrl-C after 2 chunks of the 4-device run, resumed on ONE device: the same end as the 4-device run
    # (the loops of both are compiled above: a checkpoint holds the whole rings, the driver splits them)
    seen = []

    def stop(info):  # noqa: ANN001, ANN202
        seen.append(info["done"][0])
        if len(seen) == 2:
            raise KeyboardInterrupt

    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"onepass_split_{os.getpid()}.ckpt")
    try:
        part = mw.solve(big, solver, progress=False, devices=4, chunk_seconds=0.005, checkpoint=path, callback=stop)
        rest = mw.solve(big, solver, progress=False, devices=1, resume=path)
    finally:
        if os.path.exists(path):
            os.remove(path)
    out["interrupted"] = [int(part.status), part.iterations]
    out["resumed"] = [int(rest.status), rest.iterations, rest.nfev]
    out["resumed_x_maxdiff"] = float(np.max(np.abs(rest.x - runs[4].x)))
    # n a multiple of 4 but n / 2 = 366 rows of the hook not: an explicit devices=4 is refused before
    # compiling, naming the rows; devices=None takes one device and says why (the driver's fallback)
    odd = problem(N + 4)
    try:
        mw.solve(odd, solver, progress=False, devices=4)
        out["uneven_error"] = ""
    except ValueError as err:
        out["uneven_error"] = str(err)
    short = mw.LBFGS(kernel="onepass", kernel_block=BLOCK, max_iterations=3)
    fallback = mw.solve(odd, short, progress=False)
    out["fallback"] = [fallback.stats["devices"], fallback.stats.get("devices_note", ""), fallback.stats["kernel"]]
    # kernel='auto' on a (simulated) host of 4 GPUs: the one-pass loop where its rows split over all 4
    backend, lbfgs_onepass.backend = lbfgs_onepass.backend, lambda names: ("cuda", True)
    try:
        _auto_plans(big, odd, out)
    finally:
        lbfgs_onepass.backend = backend
    try:
        out["lowers_for_cuda"] = lowers_for_cuda(4)
    except RuntimeError as err:  # a JAX with its CUDA plugin, whose GPUs this process hides (JAX_PLATFORMS=cpu):
        if "No supported GPU devices found" not in str(err):  # Pallas' Triton lowering then asks for one
            raise
        out["lowers_for_cuda"] = None
    out["seconds"] = time.perf_counter() - t0
    return out


def _auto_plans(big: mw.Problem, odd: mw.Problem, out: dict) -> None:
    """kernel='auto''s one-pass plans for ``big`` (rows split over 4, not 3) and ``odd`` (over 2, not 4)."""
    auto = mw.LBFGS()
    out["auto_plan_big"] = list(auto.onepass_plan(big, devices=4)[::2])
    out["auto_plan_odd"] = list(auto.onepass_plan(odd)[::2])
    # solve(devices=k) makes 'auto' decide with k devices, not with all 4 (the run plan's devices)
    out["auto_plan_big_on_3"] = list(auto.plan(big, 3, None).kernel[::2])
    out["auto_plan_odd_on_2"] = list(auto.plan(odd, 2, None).kernel[::2])

