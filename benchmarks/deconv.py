#!/usr/bin/env python
"""Deconvolution minor cycle (seed 004) through ``mw.solve``: CoordinateDescent and Clean against radler.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python3 benchmarks/deconv.py --device gpu --out "$OUT"      # 256^2 ... 4096^2: minutes
    PYTHONPATH=src python3 benchmarks/deconv.py --device cpu --quick           # seconds

For each image size N: a synthetic field (200 point sources convolved with an N x N PSF with side
lobes, plus noise).  Ours: the wall clock of ``mw.solve(Deconvolution(dirty, psf), solver)`` with
the model read back, first call (compiling) and second, for ``CoordinateDescent`` with the full PSF
(``kernel`` of ``--kernels``: auto runs the fused Pallas form on a GPU; Clean too), with a 129 x 129 update
window (an approximation), and our Hogbom ``Clean``; ``--iterations`` iterations each.  Peer, in the
same run: radler's Hogbom CLEAN (WSClean's deconvolution library, CPU threads) on the same dirty
image and PSF, if ``import radler`` works; at large N it runs fewer iterations
(``--radler-iterations``) and its time is scaled to ours.  ``--check-kernel`` (GPU): the Pallas
form against the XLA form at 512^2 (same pixels, models and histories up to float32 rounding).

Floor: per iteration the kernel reads and writes the gradient map and reads the autocorrelation
window, 12 N^2 bytes, over the copy bandwidth measured in the same run.  The goal: 10,000
iterations at 4096^2 in under 1 s (the seed's GPU version: 187 s on a Quadro M1200).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this script is started
import common  # noqa: E402


def synthetic(n: int, seed: int = 0) -> tuple[Any, Any]:
    """(dirty, psf): 200 point sources convolved with an N x N PSF (Gaussian lobe, ringing side lobes) + noise."""
    rng = np.random.default_rng(seed)
    c = n // 2
    y, x = np.mgrid[:n, :n] - c
    r = np.hypot(x, y)
    psf = np.exp(-0.5 * (r / 3.0) ** 2) + 0.05 * np.cos(r / 2.5) * np.exp(-r / (n / 8))
    psf /= psf[c, c]
    truth = np.zeros((n, n))
    idx = rng.integers(n // 8, n - n // 8, size=(200, 2))
    truth[idx[:, 0], idx[:, 1]] = rng.uniform(0.1, 2.0, 200)
    # The model's convolution, made here with SciPy (float64, on the host) rather than by the code
    # under test, so that an A/B of two versions runs both on the same image: the full linear
    # convolution on a 2N - 1 grid, cut to the image (y[i] = sum_k x[k] PSF[i - k + c]).
    import scipy.fft

    size = [scipy.fft.next_fast_len(2 * n - 1, real=True)] * 2
    full = scipy.fft.irfft2(scipy.fft.rfft2(truth, s=size, workers=-1) * scipy.fft.rfft2(psf, s=size, workers=-1),
                            s=size, workers=-1)
    dirty = full[c : c + n, c : c + n] + 0.001 * rng.standard_normal((n, n))
    return dirty.astype(np.float32), psf.astype(np.float32)


def run_radler(dirty: Any, psf: Any, iterations: int) -> dict[str, Any] | None:
    try:
        import radler
    except ImportError:
        return None
    n = dirty.shape[0]
    s = radler.Settings()
    s.algorithm_type = radler.AlgorithmType.generic_clean
    s.trimmed_image_width = s.trimmed_image_height = n
    s.pixel_scale.x = s.pixel_scale.y = 1e-5
    s.minor_iteration_count = iterations
    s.minor_loop_gain = 0.1
    s.major_loop_gain = 1.0  # do not stop the minor loop early (we time a fixed iteration count)
    s.absolute_threshold = 0.0
    s.divergence_limit = 0.0  # radler stops a diverging clean; 0 turns the check off (we time a fixed count)
    s.thread_count = os.cpu_count() or 1
    residual = np.array(dirty, np.float32)
    model = np.zeros_like(residual)
    obj = radler.Radler(s, np.array(psf, np.float32), residual, model, 0.0)
    t0 = time.perf_counter()
    obj.perform(0)
    dt = time.perf_counter() - t0
    done = int(obj.iteration_number)
    return {"iterations": done, "seconds": dt, "per_iteration": dt / max(done, 1), "threads": s.thread_count,
            "model_flux": float(model.sum())}


def check_kernel(mw: Any, log: Callable[[str], None]) -> str:
    """The Pallas form against the XLA form at 512^2, 300 iterations (float32 on the GPU)."""
    dirty, psf = synthetic(512, seed=3)
    problem = mw.deconv.Deconvolution(dirty, psf)
    rs = {k: mw.solve(problem, mw.deconv.CoordinateDescent(lam=1e-3, epsilon=1e-12, max_iterations=300, kernel=k),
                      progress=False) for k in ("xla", "pallas")}
    a, b = rs["xla"], rs["pallas"]
    text = (f"Pallas against XLA at 512^2, 300 iterations: same support {np.array_equal(a.model != 0, b.model != 0)}, "
            f"model within {np.abs(a.model - b.model).max() / np.abs(a.model).max():.2g} relative, history within "
            f"{np.abs(a.fun_trace - b.fun_trace).max() / abs(a.fun_trace[0]):.2g}")
    cl = {k: mw.solve(problem, mw.deconv.Clean(gain=0.1, max_iterations=300, kernel=k, block=(32, 128)), progress=False)
          for k in ("xla", "pallas")}
    a, b = cl["xla"], cl["pallas"]
    clean = (f"Clean, Pallas against XLA at 512^2, 300 iterations, (32, 128) blocks: same support "
             f"{np.array_equal(a.model != 0, b.model != 0)}, model within "
             f"{np.abs(a.model - b.model).max() / np.abs(a.model).max():.2g} relative, peaks within "
             f"{np.abs(a.steps - b.steps).max() / a.steps[0]:.2g} of the first")
    log(clean)
    return f"{text}; {clean}"


def solvers(mw: Any, iterations: int, kernels: list[str]) -> dict[str, Any]:
    """The timed solvers by label."""
    out = {f"CoordinateDescent, full PSF, kernel={k}": mw.deconv.CoordinateDescent(
        lam=1e-3, epsilon=1e-12, max_iterations=iterations, kernel=k) for k in kernels}
    out["CoordinateDescent, 129 x 129 window, XLA"] = mw.deconv.CoordinateDescent(
        lam=1e-3, epsilon=1e-12, max_iterations=iterations, update_window=129, refresh_every=1000, kernel="xla")
    out.update({f"Clean (Hogbom), full PSF, kernel={k}": mw.deconv.Clean(gain=0.1, max_iterations=iterations, kernel=k)
                for k in kernels})
    return out


def main(argv: list[str] | None = None) -> int:
    p = common.new_parser(__doc__, "deconv")
    p.add_argument("--sizes", default="256,512,1024,2048,4096")
    p.add_argument("--iterations", type=int, default=10_000)
    p.add_argument("--kernels", default="auto", help="comma-separated kernel= of CoordinateDescent and Clean: auto, xla, pallas")
    p.add_argument("--radler-iterations", default="5000,2000,300,100,50", help="per size")
    p.add_argument("--check-kernel", action="store_true", help="GPU: the Pallas form against the XLA form first")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.iterations, args.radler_iterations = "64", 200, "200"
    run = common.begin(args)
    if run is None:
        return 2
    import multiwalk as mw

    log, notes = run.log, []
    ceilings = common.measure_ceilings(run.on_gpu, log)
    if args.check_kernel and run.on_gpu:
        notes.append(check_kernel(mw, log))
    radler_iters = [int(v) for v in args.radler_iterations.split(",")]
    rows = []
    for k, n in enumerate(int(v) for v in common.floats(args.sizes)):
        dirty, psf = synthetic(n)
        problem = mw.deconv.Deconvolution(dirty, psf)
        peer = run_radler(dirty, psf, radler_iters[min(k, len(radler_iters) - 1)])
        if peer is None and not notes:
            notes.append("radler is not importable here: the peer column reads '-'.")
        for label, solver in solvers(mw, args.iterations, args.kernels.split(",")).items():
            calls = common.wall_calls(lambda p=problem, s=solver: mw.solve(p, s, progress=False),
                                      lambda r: np.asarray(r.model))
            r = calls.result
            its = max(int(r.iterations), 1)
            peer_s = peer["per_iteration"] * its if peer else None
            note = (f"{its} iterations, {r.status.name}, kernel {r.stats.get('kernel', '-')}; compile "
                    f"{calls.first_result.stats['compile_seconds']:.2f} s"
                    + (f"; radler ran {peer['iterations']} iterations on {peer['threads']} threads" if peer else ""))
            what = f"{n}^2, {label}"
            log(f"{what}: first {calls.first:.2f} s, second {calls.second:.3f} s; {note}")
            rows.append(common.Row(what, calls.first, calls.second, peer_s, "radler" if peer else "",
                                   12.0 * n * n * its / ceilings["bytes_per_s"], note))
    heading = [f"Deconvolution minor cycle: {run.env['device']}, {run.env['date']}, JAX {run.env['jax']}, float32. "
               + common.ceilings_line(ceilings)]
    notes.append("goal: 10,000 iterations at 4096^2 in under 1 s (the seed's GPU code: 187 s on a Quadro M1200).")
    return common.finish(args, run, "deconv", heading, rows, notes, {"ceilings": ceilings})


if __name__ == "__main__":
    sys.exit(main())
