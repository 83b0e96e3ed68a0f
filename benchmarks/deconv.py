"""Time per greedy minor-cycle iteration of mw.deconv.CoordinateDescent and mw.deconv.Clean, 256^2 to 4096^2.

For each image size N (a synthetic field of point sources convolved with a PSF with side lobes,
plus noise) it runs, through ``mw.solve`` (compilation excluded):

* CoordinateDescent with the full PSF autocorrelation (PSF N x N, so every update touches the
  whole image), in the XLA form (``kernel="xla"``: subtract, then rescan the touched blocks)
  and in the fused Pallas form (``kernel="pallas"``: one pass updates the map and the block
  maxima; GPU only), and with a 129 x 129 update window (XLA, ``refresh_every=1000``; an
  approximation, its history is checked for finiteness and counted for jumps);
* our Hogbom CLEAN with the full PSF;
* radler's Hogbom CLEAN (WSClean's deconvolution library, CPU threads) on the same dirty image
  and PSF, if ``import radler`` works (fewer iterations at large N; the figure is per iteration).

Before timing, on a GPU: the Pallas form against the XLA form at 512^2 (300 iterations; same
pixels, models and histories up to float32 rounding) and a sweep of the kernel's block shape,
warps and iterations per loop trip at 4096^2.

Floors: the issue's (read the gradient map, the model and the Lipschitz map once per iteration,
12 N^2 bytes) and the kernel's (read + write the map, read the autocorrelation window: 12 N^2
bytes; the model is read only in blocks marked as possibly non-zero; 16 N^2 for the form that
also reads the Lipschitz map, ``cd_kernel_map``, the one before block marks), over the measured
copy bandwidth.  The goal: 10,000 iterations at 4096^2 in under 1 s (the seed's GPU version: 187 s
on a Quadro M1200).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def synthetic(n: int, seed: int = 0) -> tuple[Any, Any]:
    """(dirty, psf): 200 point sources convolved with an N x N PSF (Gaussian lobe, ringing side lobes) + noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    c = n // 2
    y, x = np.mgrid[:n, :n] - c
    r = np.hypot(x, y)
    psf = np.exp(-0.5 * (r / 3.0) ** 2) + 0.05 * np.cos(r / 2.5) * np.exp(-r / (n / 8))
    psf /= psf[c, c]
    truth = np.zeros((n, n))
    idx = rng.integers(n // 8, n - n // 8, size=(200, 2))
    truth[idx[:, 0], idx[:, 1]] = rng.uniform(0.1, 2.0, 200)
    import jax.numpy as jnp

    from multiwalk.deconv import greedy

    size = greedy.fft_size((n, n), n)
    fp = greedy.psf_fft(jnp.asarray(psf, jnp.float32), size)
    dirty = np.asarray(greedy.convolve(jnp.asarray(truth, jnp.float32), fp, size, c))
    dirty = dirty + 0.001 * rng.standard_normal((n, n))
    return dirty.astype(np.float32), psf.astype(np.float32)


def run_ours(mw: Any, problem: Any, solver: Any) -> dict[str, Any]:
    import numpy as np

    r = mw.solve(problem, solver, progress=False)
    r = mw.solve(problem, solver, progress=False)  # second call: compiled loop reused, warm caches
    per = r.stats["run_seconds"] / max(r.iterations, 1)
    ok = True
    extra: dict[str, Any] = {}
    if r.objective is not None:  # the tracked objective never increases (exact 1-D minimisations)
        finite = bool(np.isfinite(r.objective).all())
        ok = finite and bool(np.all(np.diff(r.objective) <= 1e-6 * abs(r.objective[0]) + 1e-6))
        extra = {"finite": finite, "refresh_increases": r.stats.get("refresh_increases"),
                 "min_tracked": float(np.min(r.objective)), "kernel": r.stats.get("kernel")}
    return {"iterations": r.iterations, "seconds": r.stats["run_seconds"], "per_iteration": per, "check": ok,
            "status": r.status.name, "fun": r.fun, "extra": extra}


def run_radler(dirty: Any, psf: Any, iterations: int) -> dict[str, Any] | None:
    try:
        import radler
    except ImportError:
        return None
    import numpy as np

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


def check_kernel(mw: Any, log: Any) -> dict[str, Any]:
    """Pallas form against the XLA form at 512^2, 300 iterations (float32 on the GPU)."""
    import numpy as np

    dirty, psf = synthetic(512, seed=3)
    problem = mw.deconv.Deconvolution(dirty, psf)
    rs = {k: mw.solve(problem, mw.deconv.CoordinateDescent(lam=1e-3, epsilon=1e-12, max_iterations=300, kernel=k,
                                                           block=(32, 128)), progress=False) for k in ("xla", "pallas")}
    a, b = rs["xla"], rs["pallas"]
    out = {
        "kernel": b.stats["kernel"],
        "same_support": bool(np.array_equal(a.model != 0, b.model != 0)),
        "model_rel": float(np.abs(a.model - b.model).max() / np.abs(a.model).max()),
        "history_rel": float(np.abs(a.objective - b.objective).max() / abs(a.objective[0])),
        "first_pixel_difference": int(np.argmax(a.steps != b.steps)) if not np.array_equal(a.steps, b.steps) else -1,
    }
    log(f"check pallas vs xla at 512^2: {out}")
    return out


def torch_bandwidth(log: Any) -> float | None:
    """A second copy-bandwidth figure: torch's device-to-device copy of 256 MiB, CUDA events, median of 20."""
    try:
        import torch
    except ImportError:
        return None
    a = torch.rand(64 << 20, device="cuda")
    bufs = [torch.empty_like(a) for _ in range(2)]
    times = []
    for k in range(25):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        bufs[k % 2].copy_(a)
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) / 1e3)
    t = sorted(times[5:])[len(times[5:]) // 2]
    bw = 2 * a.numel() * 4 / t
    log(f"torch copy bandwidth {bw / 1e9:.0f} GB/s (read + write)")
    del a, bufs
    torch.cuda.empty_cache()
    return bw


def hlo_copies(mw: Any, n: int, unrolls: list[int], log: Any) -> dict[str, int]:
    """Image-size ``copy`` instructions in the compiled kernel-form chunk (each costs a full read + write)."""
    import re

    import jax
    import jax.numpy as jnp

    dirty, psf = synthetic(n)
    problem = mw.deconv.Deconvolution(dirty, psf)
    out = {}
    for u in unrolls:
        solver = _Unrolled.make(mw, u, lam=1e-3, epsilon=1e-12, max_iterations=100, kernel="pallas")
        state = solver.init(problem, jax.random.PRNGKey(0))
        chunk = jax.jit(lambda s, k, solver=solver: solver.run_chunk(problem, s, 0, k))
        text = chunk.lower(state, jnp.asarray(10, jnp.int32)).compile().as_text()
        pattern = rf"f32\[{n},{n}\]\{{[^}}]*\}} copy\("
        out[f"unroll{u}"] = sum(1 for line in text.splitlines() if re.search(pattern, line))
        log(f"HLO: unroll {u}: {out[f'unroll{u}']} copies of f32[{n},{n}]")
    return out


class _Unrolled:
    """CoordinateDescent with another number of iterations per loop trip (a class attribute)."""

    @staticmethod
    def make(mw: Any, unroll: int, marks: bool = True, **kw: Any) -> Any:
        """``marks=False``: the kernel reads the signed Lipschitz map even for one constant L (the
        form before block marks, 16 N^2 bytes per update instead of 12)."""
        attrs = {"unroll": unroll, "constant_lipschitz_kernel": marks}
        cls = type(f"CD_unroll{unroll}{'' if marks else '_map'}", (mw.deconv.CoordinateDescent,), attrs)
        return cls(**kw)


def while_body_ops(mw: Any, n: int, log: Any) -> list[str]:
    """The kernels XLA launches per loop trip of the kernel-form chunk (fusions, custom calls,
    copies in the compiled while body), to see the fixed per-iteration launches."""
    import re

    import jax
    import jax.numpy as jnp

    dirty, psf = synthetic(n)
    problem = mw.deconv.Deconvolution(dirty, psf)
    solver = mw.deconv.CoordinateDescent(lam=1e-3, epsilon=1e-12, max_iterations=100, kernel="pallas")
    state = solver.init(problem, jax.random.PRNGKey(0))
    chunk = jax.jit(lambda s, k: solver.run_chunk(problem, s, 0, k))
    text = chunk.lower(state, jnp.asarray(10, jnp.int32)).compile().as_text()
    Path(os.environ.get("OUT", "."), f"chunk_hlo_{n}.txt").write_text(text)
    ops = []
    for line in text.splitlines():
        m = re.search(r"= \S+ (fusion|custom-call|copy|while|conditional|reduce|sort|dynamic-update-slice)\(", line)
        if m:
            ops.append(line.strip()[:200])
    log(f"compiled chunk at N={n}: {len(ops)} launch-like instructions in all computations")
    for line in ops:
        log("  " + line)
    return ops


def main() -> None:
    p = common.new_parser(__doc__)
    p.add_argument("--sizes", default="256,512,1024,2048,4096")
    p.add_argument("--iterations", type=int, default=10_000)
    p.add_argument("--radler-iterations", default="5000,2000,300,100,50", help="per size")
    p.add_argument("--no-radler", action="store_true")
    p.add_argument("--no-sweep", action="store_true", help="skip the kernel's block/warps/unroll sweep")
    p.add_argument("--cases", default="cd_kernel,cd_full,cd_window129,clean_full",
                   help="which of cd_kernel, cd_kernel_map, cd_full, cd_window129, clean_full to time")
    p.add_argument("--unrolls", default="1", help="kernel form: iterations per loop trip to time (comma list)")
    p.add_argument("--hlo", action="store_true", help="count image-size copies in the compiled kernel-form loop")
    p.add_argument("--body-ops", action="store_true", help="list the kernels of the compiled kernel-form loop (smallest N)")
    common.add_out_option(p, "deconv")
    args = p.parse_args()
    common.select_platform(args.device)
    t_start = time.perf_counter()
    log = common.make_log(t_start)
    import jax

    import multiwalk as mw

    got = common.first_device(args.device)
    if got is None:
        sys.exit(2)
    dev, on_gpu = got
    env = common.environment(dev, on_gpu, mw, False)
    try:
        from jax.experimental.pallas import triton as plgpu

        env["pallas_triton_load"] = hasattr(plgpu, "load")
    except ImportError as err:
        env["pallas_triton_load"] = f"import failed: {err}"
    log(f"jax {jax.__version__}; pallas triton load: {env['pallas_triton_load']}")
    bw = common.measure_bandwidth(1 << 30 if on_gpu else 1 << 27, 20)["bytes_per_s"]
    log(f"device {env['device']}; copy bandwidth {bw / 1e9:.0f} GB/s")
    report: dict[str, Any] = {"environment": env, "bandwidth": bw}
    use_kernel = on_gpu
    if on_gpu:
        try:
            report["check"] = check_kernel(mw, log)
        except Exception as err:  # noqa: BLE001 - report it and time the XLA form alone
            import traceback

            traceback.print_exc()
            report["check"] = f"failed: {type(err).__name__}: {err}"
            use_kernel = False
    sizes = [int(s) for s in args.sizes.split(",")]
    if on_gpu:
        report["torch_copy_bandwidth"] = torch_bandwidth(log)
    if use_kernel and args.hlo:
        report["hlo_copies"] = hlo_copies(mw, sizes[-1], [int(v) for v in args.unrolls.split(",")], log)
    if use_kernel and args.body_ops:
        report["body_ops"] = while_body_ops(mw, sizes[0], log)
    radler_iters = [int(s) for s in args.radler_iterations.split(",")]
    rows = []
    for k, n in enumerate(sizes):
        dirty, psf = synthetic(n)
        problem = mw.deconv.Deconvolution(dirty, psf)
        floor = 3 * 4 * n * n / bw
        # the kernel reads + writes the map and reads the autocorrelation (12 N^2 bytes); the form
        # before block marks also read the Lipschitz map (16 N^2)
        row: dict[str, Any] = {"n": n, "floor_s": floor, "floor_kernel_s": 3 * 4 * n * n / bw,
                               "floor_kernel_map_s": 4 * 4 * n * n / bw}
        wanted = args.cases.split(",")
        cases = {
            "cd_window129": mw.deconv.CoordinateDescent(lam=1e-3, epsilon=1e-12, max_iterations=args.iterations,
                                                        update_window=129, refresh_every=1000, kernel="xla"),
            "cd_full": mw.deconv.CoordinateDescent(lam=1e-3, epsilon=1e-12, max_iterations=args.iterations, kernel="xla"),
            "clean_full": mw.deconv.Clean(gain=0.1, max_iterations=args.iterations),
        }
        cases = {k: v for k, v in cases.items() if k in wanted}
        if use_kernel and "cd_kernel" in wanted:
            for u in (int(v) for v in args.unrolls.split(",")):
                cases[f"cd_kernel_u{u}"] = _Unrolled.make(mw, u, lam=1e-3, epsilon=1e-12, max_iterations=args.iterations,
                                                          kernel="pallas")
        if use_kernel and "cd_kernel_map" in wanted:  # before: the kernel reads the Lipschitz map
            cases["cd_kernel_map"] = _Unrolled.make(mw, 8, marks=False, lam=1e-3, epsilon=1e-12,
                                                    max_iterations=args.iterations, kernel="pallas")
        for name, solver in cases.items():
            row[name] = run_ours(mw, problem, solver)
            log(f"N={n} {name}: {1e6 * row[name]['per_iteration']:.1f} us/iteration, {row[name]['iterations']} iterations, "
                f"check {row[name]['check']} {row[name].get('extra', '')}")
        if not args.no_radler:
            row["radler"] = run_radler(dirty, psf, radler_iters[min(k, len(radler_iters) - 1)])
            if row["radler"] is None:
                log("radler not importable: its column reads '—'")
            else:
                log(f"N={n} radler: {1e6 * row['radler']['per_iteration']:.1f} us/iteration ({row['radler']['iterations']} its)")
        rows.append(row)

    # After the table's rows (a run cut short by a time limit still has them in its log).
    if use_kernel and not args.no_sweep:
        n = sizes[-1]
        dirty, psf = synthetic(n)
        problem = mw.deconv.Deconvolution(dirty, psf)
        sweep = []
        for block, warps, unroll in [((32, 128), 4, 8), ((32, 128), 8, 8), ((16, 128), 4, 8), ((16, 256), 4, 8),
                                     ((32, 128), 4, 32), ((16, 128), 4, 32)]:
            solver = _Unrolled.make(mw, unroll, lam=1e-3, epsilon=1e-12, max_iterations=args.iterations, kernel="pallas",
                                    block=block, kernel_warps=warps)
            r = run_ours(mw, problem, solver)
            sweep.append({"block": block, "warps": warps, "unroll": unroll, **r})
            log(f"sweep N={n} block {block} warps {warps} unroll {unroll}: {1e6 * r['per_iteration']:.1f} us/iteration")
        report["sweep"] = sweep

    def us(v: float) -> str:
        return f"{1e6 * v:.1f}"

    labels = {"cd_kernel_map": "CD full, kernel reading L map (before)",
              "cd_full": "CD full, XLA", "cd_window129": "CD window 129, XLA", "clean_full": "our CLEAN full"}
    keys = [k for k in rows[0] if isinstance(rows[0][k], dict) and k != "radler"] if rows else []
    head = ["N"] + [labels.get(k, k.replace("cd_kernel_u", "CD full, Pallas kernel, unroll ")) + " (us/it)" for k in keys]
    head += ["radler Hogbom (us/it)", "floor: read g, x, L (us)", "floor: kernel's traffic, 12 N^2 B (us)",
             "floor: with the L map, 16 N^2 B (us)"]
    lines = [
        f"Device: {env['device']}, {env.get('date', '')}; jax {jax.__version__}; "
        f"copy bandwidth {bw / 1e9:.0f} GB/s (read + write).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + " --- |" * len(head),
    ]
    for row in rows:
        rad = row.get("radler")
        rad_s = f"{us(rad['per_iteration'])} ({rad['iterations']} its)" if rad else "—"
        cells = [str(row["n"])] + [us(row[k]["per_iteration"]) for k in keys]
        cells += [rad_s, us(row["floor_s"]), us(row["floor_kernel_s"]), us(row["floor_kernel_map_s"])]
        lines.append("| " + " | ".join(cells) + " |")
    if "sweep" in report:
        lines += ["", "| block | warps | iterations per loop trip | us/it |", "| --- | --- | --- | --- |"]
        lines += [f"| {r['block']} | {r['warps']} | {r['unroll']} | {us(r['per_iteration'])} |" for r in report["sweep"]]
    notes = [
        "us/it = run seconds of mw.solve (second call, compilation excluded) over iterations; 10,000 iterations each "
        "unless a status other than MAX_STEPS says it stopped.",
        "radler runs on the host CPU threads; it needs the PSF as large as the image (N x N here, as for ours).",
    ]
    md = common.finish_markdown(lines, notes)
    report["rows"] = rows
    out = Path(args.out)
    common.write_report(out, "deconv", report, md)
    common.print_done(log, out, "deconv", t_start, md)


if __name__ == "__main__":
    main()
