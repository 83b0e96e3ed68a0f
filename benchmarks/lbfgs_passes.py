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
from lbfgs_common import timed  # noqa: E402 - median of synchronised calls

M = 7


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


def breakdown(n, dt, P, gt, g, d, xt, w, gamma, stp, slot, count, interpret, trips):  # noqa: ANN001, ANN201
    """Per-call device time of each part of a fused iteration, from ``trips`` calls inside ONE
    jitted fori_loop (so host round trips and dispatch are excluded), and the cost of one host
    round trip of a while loop (a scalar body): rows (name, seconds per call, bytes moved)."""
    import jax
    import jax.numpy as jnp

    from multiwalk.functions import cute
    from multiwalk.solvers import lbfgs, lbfgs_kernel
    from multiwalk.solvers.more_thuente import LineSearchParams, line_search_init, line_search_update

    item = jnp.dtype(dt).itemsize
    out = []

    def per_call(fn, carry):
        run = jax.jit(lambda c: jax.lax.fori_loop(0, trips, lambda i, c: fn(c), c))
        return timed(run, carry, reps=5) / trips

    def pass_a(c):
        x, acc = c
        pg, py, dots, x = lbfgs_kernel.pair_products(P, gt, g, d, xt, stp, slot, count, x, interpret=interpret)
        return x, acc + pg[0] + py[0] + dots[0]

    out.append(("in-loop pass A (Pallas, default block)", per_call(pass_a, (xt * 1.0, jnp.zeros((), dt))),
                (2 * 7 + 3) * n * item))

    def pass_b(c):
        P_, d_, g_ = c
        d_, P_, g_ = lbfgs_kernel.direction_and_store(P_, w, gamma, stp, gt, g_, d_, slot, count, interpret=interpret)
        return P_, d_, g_

    out.append(("in-loop pass B (Pallas, default block)", per_call(pass_b, (P * 1.0, d * 1.0, g * 1.0)),
                (2 * 7 - 2 + 7) * n * item))
    vg = jax.value_and_grad(cute.extended_rosenbrock)

    def evaluation(c):
        acc, x = c
        trial = x + stp * d
        f, gr = vg(trial)
        return acc + f + gr @ d, trial

    out.append(("in-loop evaluation f, g at x + stp d, g'd", per_call(evaluation, (jnp.zeros((), dt), xt * 1.0)),
                4 * n * item))
    m = 7
    rng = jax.random.split(jax.random.PRNGKey(3), 4)
    SY = jnp.triu(jax.random.uniform(rng[0], (m, m), dt)) + 2.0 * jnp.eye(m, dtype=dt)
    YY = jax.random.uniform(rng[1], (m, m), dt) + 2.0 * jnp.eye(m, dtype=dt)
    params = LineSearchParams()
    ls0 = line_search_init(jnp.asarray(1.0, dt), jnp.asarray(-1.0, dt), jnp.asarray(1.0, dt), params)

    def scalars(c):
        acc, ls = c
        st = lbfgs.LBFGSState(
            x=None, f=None, g=jnp.zeros(1, dt), d=None, P=None, SY=SY, YY=YY, a=jnp.ones(m, dt) + acc, b=jnp.ones(m, dt),
            gamma=jnp.asarray(1.0, dt), gg=jnp.asarray(2.0, dt), head=jnp.asarray(3, jnp.int32),
            count=jnp.asarray(m, jnp.int32), ls=None, iteration=None, nfev=None, gnorm=None, xnorm=None, stp=None,
            status=None,
        )
        wv, gd = lbfgs.compact_coefficients(st, m)
        ls, _, _, _ = line_search_update(ls, 0.9 + 1e-9 * acc, -0.5 + 1e-9 * gd)
        ls = jax.tree.map(lambda a, b: jnp.where(ls.done, a, b), ls0, ls)
        return acc + 1e-12 * wv[0], ls

    out.append(("in-loop 7x7 algebra + one line-search update", per_call(scalars, (jnp.zeros((), dt), ls0)), 0))

    def round_trip(c):
        i, acc = c
        return i + 1, acc + 1.0

    loop = jax.jit(lambda k: jax.lax.while_loop(lambda c: c[0] < k, round_trip, (jnp.int32(0), jnp.zeros((), dt))))
    t1 = timed(loop, jnp.int32(10), reps=5)
    t2 = timed(loop, jnp.int32(10 + trips * 4), reps=5)
    out.append(("one while-loop trip with a scalar body (host round trip)", (t2 - t1) / (trips * 4), 0))
    return out


def main() -> int:
    p = common.new_parser(__doc__)
    p.add_argument("--n", type=float, default=1e7)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--hlo-out", default=None, help="also solve Rosenbrock at n=2^20 and write the loop's optimized HLO here")
    p.add_argument("--breakdown", action="store_true",
                   help="also time each part of an iteration inside one jitted loop (no host round trips)")
    p.add_argument("--breakdown-trips", type=int, default=50)
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

    if args.breakdown:
        rows.extend(breakdown(n, dt, P, gt, g, d, xt, w, gamma, stp, slot, count, interpret, args.breakdown_trips))

    print(f"\nbest bandwidth of a simple kernel: {best_bw / 1e9:.0f} GB/s")
    print(f"{'what':<58} {'ms':>8} {'GB/s':>8} {'floor ms':>9} {'x floor':>8}")
    for name, t, nb in rows:
        if nb == 0:  # no bytes counted: a latency, not a stream
            print(f"{name:<58} {t * 1e3:8.3f}")
            continue
        print(f"{name:<58} {t * 1e3:8.3f} {nb / t / 1e9:8.0f} {nb / best_bw * 1e3:9.3f} {t / (nb / best_bw):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
