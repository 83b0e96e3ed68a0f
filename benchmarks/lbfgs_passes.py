#!/usr/bin/env python
"""L-BFGS's two passes over the pair buffer, alone: XLA form vs the fused Pallas kernels, and bandwidth.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python3 benchmarks/lbfgs_passes.py --n 1e7            # GPU, < 1 min
    PYTHONPATH=src python3 benchmarks/lbfgs_passes.py --device cpu --n 1e4 --reps 2   # smoke (interpret mode)

What is measured, in one run, at one ``n`` and ``m = 7`` on random data (a full ring of pairs):

* bandwidth of plain kernels: an XLA elementwise ``2 x`` (read + write counted), an XLA sum
  (read), and a Pallas read kernel with per-program partial sums (the form of pass A); the best
  of them is the "best bandwidth a simple kernel achieves";
* pass A (``[S Y]'[gt, y]`` and five dot products) and pass B (the direction and the new pair
  written into P) in the XLA form of ``lbfgs.finish_iteration`` and as the Pallas kernels of
  :mod:`multiwalk.solvers.lbfgs_kernel` for several (block, warps), checked against the XLA
  form (relative error), each timed as the median of ``--reps`` synchronised calls, with its
  floor (values moved x itemsize / best bandwidth).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

M = 7


def timed(fn, *args, reps: int) -> float:
    """Median seconds of ``reps`` synchronised calls of ``fn(*args)`` after one warm-up call."""
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def pallas_read(x, block: int, warps: int, interpret: bool):
    """Sum of ``x`` (n,) by a Pallas kernel: per-program partial sums, then a small XLA sum."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    n = x.shape[0]
    programs = pl.cdiv(n, block)

    def body(x_ref, out_ref):
        pid = pl.program_id(0)
        c0 = pid * block
        inside = c0 + jax.lax.broadcasted_iota(jnp.int32, (block,), 0) < n
        out_ref[pid] = jnp.sum(plgpu.load(x_ref.at[pl.ds(c0, block)], mask=inside, other=0.0))

    extra = {} if interpret else {"compiler_params": plgpu.CompilerParams(num_warps=warps, num_stages=1)}
    part = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((programs,), x.dtype), grid=(programs,),
                          interpret=interpret, **extra)(x)
    return jnp.sum(part)


def main() -> int:
    p = common.new_parser(__doc__)
    p.add_argument("--n", type=float, default=1e7)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--hlo-out", default=None, help="also solve Rosenbrock at n=2^20 and write the loop's optimized HLO here")
    p.add_argument("--configs", default="1024x4,2048x4,2048x8,4096x8,4096x16", help="blockxwarps list")
    args = p.parse_args()
    common.select_platform(args.device)
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np

    from multiwalk.solvers import lbfgs_kernel

    found = common.first_device(args.device)
    if found is None:
        return 2
    dev, on_gpu = found
    interpret = not on_gpu
    n, dt = int(args.n), jnp.dtype(args.dtype)
    item = dt.itemsize
    print(f"device {dev.device_kind}, jax {jax.__version__}, n={n:.0e}, {args.dtype}, m={M}", flush=True)
    key = jax.random.PRNGKey(0)
    k = jax.random.split(key, 8)
    P = jax.random.normal(k[0], (2 * M, n), dt)
    gt, g, d, xt = (jax.random.normal(k[i], (n,), dt) for i in range(1, 5))
    w = jax.random.normal(k[5], (2 * M,), dt)
    stp, gamma = jnp.asarray(0.7, dt), jnp.asarray(1.3, dt)
    slot, count = jnp.asarray(3, jnp.int32), jnp.asarray(M, jnp.int32)
    rows = []

    # ---- bandwidth of simple kernels (bytes read + written)
    big = jax.random.normal(k[6], (max(n * 2 * M, 1 << 20),), dt)
    if on_gpu:  # a fresh machine's GPU idles at low clocks: ~3 s of work first, so the first rows are not slower
        t_end = time.perf_counter() + 3.0
        double = jax.jit(lambda a: 2.0 * a)
        while time.perf_counter() < t_end:
            jax.block_until_ready(double(big))
    t = timed(jax.jit(lambda a: 2.0 * a), big, reps=args.reps)
    rows.append(("XLA 2*x (read+write)", t, 2 * big.nbytes))
    t = timed(jax.jit(jnp.sum), big, reps=args.reps)
    rows.append(("XLA sum (read)", t, big.nbytes))
    for cfg in args.configs.split(","):
        b, wp = (int(v) for v in cfg.split("x"))
        t = timed(jax.jit(lambda a, b=b, wp=wp: pallas_read(a, b, wp, interpret)), big, reps=args.reps)
        rows.append((f"Pallas read {b}x{wp}", t, big.nbytes))
    try:  # a device-to-device copy by PyTorch (cudaMemcpy), where it is installed: another simple kernel
        import torch

        if on_gpu and torch.cuda.is_available():
            src = torch.empty(big.nbytes // 4, dtype=torch.float32, device="cuda").normal_()
            dst = torch.empty_like(src)
            for _ in range(3):
                dst.copy_(src)
            torch.cuda.synchronize()
            times = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                dst.copy_(src)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            rows.append(("torch copy (read+write)", statistics.median(times), 2 * src.numel() * 4))
            times = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                torch.mul(src, 2.0, out=dst)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            rows.append(("torch 2*x (read+write)", statistics.median(times), 2 * src.numel() * 4))
            del src, dst
            torch.cuda.empty_cache()
    except ImportError:
        pass
    best_bw = max(nb / t for _, t, nb in rows)

    # ---- pass A
    def xla_a(P, gt, g, d, xt, stp):
        y = gt - g
        s = stp * d
        return P @ gt, P @ y, jnp.stack([s @ y, y @ y, y @ gt, gt @ gt, xt @ xt])

    ref = jax.jit(xla_a)(P, gt, g, d, xt, stp)
    ref = jax.tree.map(lambda a: np.asarray(a).copy(), ref)
    # the XLA form reads all 2m rows; the kernels skip the slot's two rows
    t = timed(jax.jit(xla_a), P, gt, g, d, xt, stp, reps=args.reps)
    rows.append(("pass A, XLA form", t, (2 * M + 4) * n * item))
    for cfg in args.configs.split(","):
        b, wp = (int(v) for v in cfg.split("x"))
        fa = jax.jit(lambda P, gt, g, d, xt, stp, b=b, wp=wp: lbfgs_kernel.pair_products(
            P, gt, g, d, xt, stp, slot, count, xt * 1.0, block=b, num_warps=wp, interpret=interpret)[:3])
        out = fa(P, gt, g, d, xt, stp)
        sl = int(slot)
        errs = []
        for o, r in zip(out, ref):
            o, r = np.asarray(o).copy(), r.copy()
            if o.shape[0] == 2 * M:  # the slot's products are not computed (discarded by the solver)
                o[[sl, M + sl]] = 0.0
                r[[sl, M + sl]] = 0.0
            errs.append(np.max(np.abs(o - r)) / np.max(np.abs(r)))
        t = timed(fa, P, gt, g, d, xt, stp, reps=args.reps)
        rows.append((f"pass A, Pallas {b}x{wp} (rel err {max(errs):.1e})", t, (2 * M + 3) * n * item))

    # ---- pass B
    def xla_b(P, w, gamma, stp, gt, g, d):
        m = M
        s, y = stp * d, gt - g
        in_p = w.at[slot].set(0.0).at[m + slot].set(0.0)
        dn = -gamma * gt + in_p @ P + w[slot] * s + w[m + slot] * y
        dn, P = jax.lax.optimization_barrier((dn, P))
        z = jnp.zeros((), jnp.int32)
        P = jax.lax.dynamic_update_slice(P, s[None], (slot, z))
        P = jax.lax.dynamic_update_slice(P, y[None], (m + slot, z))
        return dn, P

    fb_x = jax.jit(xla_b, donate_argnums=0)
    dref, Pref = fb_x(P.copy(), w, gamma, stp, gt, g, d)
    dref, Pref = np.asarray(dref), np.asarray(Pref)
    Pw = P.copy()

    def loop_b(fn, reps):
        nonlocal Pw
        Pw = fn(Pw, w, gamma, stp, gt, g, d)[1]  # warm-up
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            Pw = fn(Pw, w, gamma, stp, gt, g, d)[1]
            jax.block_until_ready(Pw)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    t = loop_b(fb_x, args.reps)
    rows.append(("pass B, XLA form", t, (2 * M - 2 + 6) * n * item))
    for cfg in args.configs.split(","):
        b, wp = (int(v) for v in cfg.split("x"))
        fb = jax.jit(lambda P, w, gamma, stp, gt, g, d, b=b, wp=wp: lbfgs_kernel.direction_and_store(
            P, w, gamma, stp, gt, g * 1.0, d * 1.0, slot, count, block=b, num_warps=wp, interpret=interpret)[:2],
            donate_argnums=0)
        dn, Pn = fb(P.copy(), w, gamma, stp, gt, g, d)
        err = max(np.max(np.abs(np.asarray(dn) - dref)) / np.max(np.abs(dref)),
                  np.max(np.abs(np.asarray(Pn) - Pref)) / np.max(np.abs(Pref)))
        t = loop_b(fb, args.reps)
        rows.append((f"pass B, Pallas {b}x{wp} (rel err {err:.1e})", t, (2 * M - 2 + 7) * n * item))

    if args.hlo_out:
        import importlib

        import multiwalk as mw

        solve_module = importlib.import_module("multiwalk.solve")
        from multiwalk.functions import cute

        x0 = cute.start("extended_rosenbrock", 1 << 20)
        r = mw.solve(mw.Problem(objective=cute.extended_rosenbrock, x0=x0, dtype=args.dtype), mw.LBFGS(), progress=False)
        print("solve:", r.iterations, r.nfev, r.stats["kernel"])
        text = [c.as_text() for c in solve_module._COMPILED.values()]
        Path(args.hlo_out).mkdir(parents=True, exist_ok=True)
        Path(args.hlo_out, "lbfgs_chunk_hlo.txt").write_text("\n\n".join(text))
        import re

        for kind in ("fusion", "custom-call", "while", "conditional", "copy", "dynamic-update-slice", "scatter"):
            pattern = re.compile(" " + kind + r"\(")
            print(f"HLO {kind}: {sum(len(pattern.findall(t)) for t in text)}")

    print(f"\nbest bandwidth of a simple kernel: {best_bw / 1e9:.0f} GB/s")
    print(f"{'what':<48} {'ms':>8} {'GB/s':>8} {'floor ms':>9} {'x floor':>8}")
    for name, t, nb in rows:
        print(f"{name:<48} {t * 1e3:8.3f} {nb / t / 1e9:8.0f} {nb / best_bw * 1e3:9.3f} {t / (nb / best_bw):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
