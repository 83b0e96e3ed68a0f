"""Deconvolution split in row patches over 1, 2 and 4 CPU devices, for tests/test_deconv_devices.py.

Run by tests/multidevice_check.py (4 virtual CPU devices), float32 (x64 off here).  :func:`main`
returns a dict of comparisons (plain numbers, bools, strings): decisions (which pixels are in the
model, iterations, status) exactly, floats as their largest distance in ulp (tests/ulp.py).
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
from scipy.signal import fftconvolve
from ulp import max_ulps

import multiwalk as mw

COLLECTIVE = re.compile(r"= (\w+)\[([\d,]*)\]\S* (all-gather|all-reduce|collective-permute|all-to-all|reduce-scatter)")


def result_ulps(a, b) -> float:
    """How far result ``b`` is from ``a``: the largest ulp distance of the model, the steps and the
    objective history (values below the image's peak counted in the peak's ulp: the model and the
    maps are built by subtractions at that scale), ``inf`` where a decision differs (the pixels in
    the model, the iterations, the status)."""
    if a.iterations != b.iterations or a.status != b.status or not np.array_equal(a.model != 0, b.model != 0):
        return float("inf")
    scale = float(np.max(np.abs(a.model)))
    return max(max_ulps(b.model, a.model, scale), max_ulps(b.steps, a.steps, scale),
               max_ulps(b.fun_trace, a.fun_trace))


def collective_sizes() -> list[int]:
    """Elements of each collective in the last compiled loop (its optimised HLO)."""
    from multiwalk import compile_cache

    text = compile_cache.compiled_loops()[-1].as_text()
    return [int(np.prod([int(d) for d in dims.split(",") if d])) for _, dims, _ in COLLECTIVE.findall(text)]


def largest_collective() -> int:
    """Elements of the largest collective in the last compiled loop."""
    return max(collective_sizes(), default=0)


def main() -> dict:
    with jax.enable_x64(False):  # float32, as a deconvolution usually runs
        return _main()


def _main() -> dict:
    out: dict = {"devices": jax.device_count()}
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    n, m = 128, 96  # 4 rows of 32-row blocks: 1 per device on 4, 2 on 2
    yy, xx = np.mgrid[-24:25, -24:25]
    psf = np.exp(-(xx**2 + yy**2) / 10.0) * (1.0 + 0.3 * np.cos(xx / 3.0))  # side lobes: a wide autocorrelation
    psf /= psf[24, 24]
    truth = np.zeros((n, m))
    at = rng.integers(0, (n, m), (10, 2))
    truth[at[:, 0], at[:, 1]] = rng.uniform(1.0, 3.0, 10)
    dirty = fftconvolve(truth, psf, mode="same") + 0.01 * rng.standard_normal((n, m))
    problem = mw.deconv.Deconvolution(dirty, psf)

    # CoordinateDescent (XLA form): the window (the whole image) spans every patch
    cd = mw.deconv.CoordinateDescent(lam=0.05, alpha=0.8, max_iterations=200, kernel="xla")
    runs = {k: mw.solve(problem, cd, progress=False, devices=k) for k in (1, 2, 4)}
    out["cd_devices"] = [runs[k].stats["devices"] for k in (1, 2, 4)]
    out["cd_ulps_2"], out["cd_ulps_4"] = result_ulps(runs[1], runs[2]), result_ulps(runs[1], runs[4])
    # the 4-device loop; the exact refresh (every refresh_every iterations and to verify
    # convergence) gathers the model (n x m) for its FFTs: counted apart
    sizes = collective_sizes()
    out["cd_refresh_gathers"] = sum(size == n * m for size in sizes)
    out["cd_largest_collective"] = max((size for size in sizes if size != n * m), default=0)
    out["cd_nonzero"] = int(np.count_nonzero(runs[1].model))
    out["cd_default_devices"] = mw.solve(problem, cd, progress=False).stats["devices"]

    # a 7 x 7 window (smaller than a patch) and FFT refreshes
    cdw = mw.deconv.CoordinateDescent(lam=0.05, alpha=0.8, max_iterations=200, kernel="xla", update_window=7, refresh_every=40)
    a, b = (mw.solve(problem, cdw, progress=False, devices=k) for k in (1, 4))
    out["cdw_ulps"] = result_ulps(a, b)
    out["cdw_devices"] = b.stats["devices"]

    # Clean on a rectangular image with two identical sources in different patches: an exact tie
    psf_c = psf[12:37, 12:37]
    psf_c = psf_c / psf_c[12, 12]
    tie = np.zeros((256, 64))
    tie[40, 30] = tie[200, 30] = 2.0  # rows 40 and 200: devices 0 and 3
    tie_dirty = fftconvolve(tie, psf_c, mode="same")
    tie_dirty = np.where(np.abs(tie_dirty) < 1e-9, 0.0, tie_dirty)
    # the two peaks exactly equal: copy the upper source's neighbourhood onto the lower one
    tie_dirty[200 - 20 : 200 + 21, :] = tie_dirty[40 - 20 : 40 + 21, :]
    out["clean_tie"] = bool(tie_dirty[40, 30] == tie_dirty[200, 30] == tie_dirty.max())
    clean = mw.deconv.Clean(gain=0.1, max_iterations=150, block=16)
    tie_problem = mw.deconv.Deconvolution(tie_dirty, psf_c)
    a, b = (mw.solve(tie_problem, clean, progress=False, devices=k) for k in (1, 4))
    out["clean_ulps"] = result_ulps(a, b)
    out["clean_devices"] = b.stats["devices"]
    out["clean_largest_collective"] = largest_collective()
    # which of the tied peaks is taken first: the first in row-major order, as on one device
    first = mw.solve(tie_problem, mw.deconv.Clean(gain=0.1, max_iterations=1, block=16), progress=False, devices=4)
    out["clean_first_pick_upper"] = bool(first.model[40, 30] > 0 and np.count_nonzero(first.model) == 1)

    # a checkpoint written on 4 devices resumes on 1
    with tempfile.TemporaryDirectory() as tmp:
        ck = Path(tmp) / "cd.npz"

        def stop(info):
            raise KeyboardInterrupt

        part = mw.solve(problem, cd, progress=False, devices=4, checkpoint=ck, callback=stop)
        resumed = mw.solve(problem, cd, progress=False, devices=1, resume=ck)
        out["resume_partial"] = part.status == mw.Status.INTERRUPTED and part.iterations < 200
        out["resume_ulps"] = result_ulps(runs[1], resumed)

    # rows that do not split: devices=None falls back with a note, an explicit count errors
    odd = mw.deconv.Deconvolution(dirty[:100], psf)  # 100 rows padded to 128: 4 rows of 32-row blocks, splits
    odd3 = mw.deconv.Deconvolution(dirty[:96], psf)  # 3 rows of blocks
    out["odd_devices"] = mw.solve(odd, cd, progress=False).stats["devices"]  # 4 rows of blocks: splits
    r = mw.solve(odd3, cd, progress=False)
    out["fallback_devices"] = r.stats["devices"]
    out["fallback_note"] = r.stats.get("devices_note", "")
    try:
        mw.solve(odd3, clean, progress=False, devices=4)
        out["error"] = ""
    except ValueError as err:
        out["error"] = str(err)
    try:  # the Pallas form (interpret mode here) stays on one device: the error says how to split
        mw.solve(odd, mw.deconv.Clean(kernel="pallas", max_iterations=1), progress=False, devices=4)
        out["pallas_split_error"] = ""
    except ValueError as err:
        out["pallas_split_error"] = str(err)
    out["seconds"] = time.perf_counter() - t0
    return out

