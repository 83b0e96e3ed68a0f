#!/usr/bin/env python
"""L-BFGS at one n: which evaluation form and which small-algebra form an iteration should use.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python3 benchmarks/lbfgs_variants.py --n 1e7            # GPU, ~1 min
    PYTHONPATH=src python3 benchmarks/lbfgs_variants.py --device cpu --n 1e4 --trips 5   # smoke run

Run it once per ``XLA_FLAGS`` setting to compare them (e.g. with the loops' control flow in
CUDA graphs: ``--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL``).

What is measured, Extended Rosenbrock from the seed's start, m = 7:

* one line-search evaluation as the solver's loop does it (``xt = x + stp d``, f and g at ``xt``,
  ``g'd``; ``xt`` and ``g`` kept), per call inside ONE jitted ``fori_loop`` (no host round trips),
  for f and g by ``jax.value_and_grad`` ("autodiff"), by ``cute.extended_rosenbrock_value_and_grad``
  ("analytic", f and g on (n,) with shifted pair partners), by the block form (``x.reshape(-1, 2)``,
  g stacked back: "blocks") and by that form with f's terms interleaved like g ("interleaved");
  floor: 4 n values (read x, d; write xt, g) over the PyTorch copy bandwidth of the same run;
* the 7x7 algebra of the direction (``compact_coefficients``) with the triangular solves by
  cuBLAS trsm (``jax.scipy.linalg.solve_triangular``; the XLA form) and unrolled (the fused path), in
  the same kind of loop;
* whole solves (``mw.solve``, second call's ``run_seconds``) for each combination, with their
  iteration and evaluation counts, f, and the optimized HLO's counts of while loops, conditionals,
  custom calls and fusions of the compiled chunk loop.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from lbfgs_common import M, timed, torch_copy_bandwidth  # noqa: E402


def interleaved_value_and_grad(x):
    """Extended Rosenbrock's (f, g) with f's terms laid out like g (both (n,)), so that f and g'd
    are reductions of the same shape (a candidate for one multi-output fusion)."""
    import jax.numpy as jnp

    b = x.reshape(-1, 2)
    x1, x2 = b[:, 0], b[:, 1]
    t = x2 - x1 * x1
    u = 1.0 - x1
    terms = jnp.stack([u * u, 100.0 * t * t], axis=1).reshape(-1)
    g = jnp.stack([-400.0 * x1 * t - 2.0 * u, 200.0 * t], axis=1).reshape(-1)
    return jnp.sum(terms), g


def blocks_value_and_grad(x):
    """Extended Rosenbrock's (f, g) over its (n/2, 2) blocks, g interleaved back by a stack (the
    first analytic form tried; 0.210 ms per evaluation against the shifted form's 0.144 on an H200)."""
    import jax.numpy as jnp

    b = x.reshape(-1, 2)
    x1, x2 = b[:, 0], b[:, 1]
    t = x2 - x1 * x1
    u = 1.0 - x1
    return jnp.sum(100.0 * t * t + u * u), jnp.stack([-400.0 * x1 * t - 2.0 * u, 200.0 * t], axis=1).reshape(-1)


def main() -> int:
    p = common.new_parser(__doc__)
    p.add_argument("--n", type=float, default=1e7)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--trips", type=int, default=50)
    p.add_argument("--skip-parts", action="store_true", help="only the whole solves")
    p.add_argument("--solves", default="autodiff,analytic,blocks",
                   help="whole solves, one per f-and-g form: autodiff (jax.value_and_grad), analytic "
                        "(cute.extended_rosenbrock_value_and_grad, with cute_kernel's one-pass .along on GPUs), "
                        "analytic-xla (the same without .along), blocks, interleaved (earlier analytic forms)")
    p.add_argument("--label", default=os.environ.get("XLA_FLAGS", "") or "default flags")
    args = p.parse_args()
    common.select_platform(args.device)
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import multiwalk as mw
    from multiwalk.functions import cute, cute_kernel
    from multiwalk.solvers import lbfgs

    FORMS = {  # noqa: N806 - f and g of Extended Rosenbrock; None: jax.value_and_grad
        "autodiff": None, "analytic": cute.extended_rosenbrock_value_and_grad,
        "interleaved": interleaved_value_and_grad, "blocks": blocks_value_and_grad,
        "analytic-xla": cute_kernel.extended_rosenbrock_xla,  # the same f, g without the one-pass .along
    }
    found = common.first_device(args.device)
    if found is None:
        return 2
    dev, on_gpu = found
    n, dt = int(args.n), jnp.dtype(args.dtype)
    item = dt.itemsize
    bw = torch_copy_bandwidth(1 << 31) if on_gpu else None
    print(f"[{args.label}] device {dev.device_kind}, jax {jax.__version__}, n={n:.0e} {args.dtype}; "
          f"torch copy {(bw or 0) / 1e9:.0f} GB/s", flush=True)
    rows = []
    if not args.skip_parts:
        k = jax.random.split(jax.random.PRNGKey(0), 3)
        x = jnp.asarray(cute.start("extended_rosenbrock", n), dt) + 0.01 * jax.random.normal(k[0], (n,), dt)
        d = 1e-3 * jax.random.normal(k[1], (n,), dt)
        for name, vg in FORMS.items():
            vg = vg or jax.value_and_grad(cute.extended_rosenbrock)
            for keep in (True, False):
                def body(_, c, vg=vg, keep=keep):
                    xc, _, acc = c
                    xt = xc + (1e-3 + 1e-30 * acc) * d  # depends on the carry: nothing hoisted out of the loop
                    f, gt = vg(xt)
                    return xt if keep else xc, gt, acc + f + gt @ d

                run = jax.jit(lambda c, body=body: jax.lax.fori_loop(0, args.trips, body, c))
                c0 = (x, x, jnp.zeros((), dt))
                text = run.lower(c0).compile().as_text()
                fusions = len(re.findall(" fusion[(]", text))
                t = timed(run, c0) / args.trips
                what = "x + stp d written" if keep else "x + stp d not written"
                rows.append((f"evaluation, {name}, {what} ({fusions} fusions)", t, (4 if keep else 3) * n * item))
        if on_gpu:  # the one-pass kernel along the line (x + stp d never written)
            def along_body(_, c):
                xc, _, acc = c
                f, gt, gd = cute_kernel.rosenbrock_along_kernel(xc, d, 1e-3 + 1e-30 * acc)
                return xc, gt, acc + f + gd

            run = jax.jit(lambda c: jax.lax.fori_loop(0, args.trips, along_body, c))
            c0 = (x, x, jnp.zeros((), dt))
            f1, g1, gd1 = jax.jit(cute_kernel.rosenbrock_along_kernel)(x, d, jnp.asarray(1e-3, dt))
            f0, g0 = cute.extended_rosenbrock_value_and_grad(x + 1e-3 * d)
            err = max(abs(float(f1 - f0)) / abs(float(f0)), abs(float(gd1 - g0 @ d)) / abs(float(g0 @ d)),
                      float(jnp.max(jnp.abs(g1 - g0)) / jnp.max(jnp.abs(g0))))
            rows.append((f"evaluation, along kernel (rel err {err:.1e})", timed(run, c0) / args.trips, 3 * n * item))
        # the 7x7 algebra of one direction (both triangular solve forms)
        rng = jax.random.split(jax.random.PRNGKey(3), 4)
        SY = jnp.triu(jax.random.uniform(rng[0], (M, M), dt)) + 2.0 * jnp.eye(M, dtype=dt)
        YY = jax.random.uniform(rng[1], (M, M), dt) + 2.0 * jnp.eye(M, dtype=dt)
        for form in ("trsm", "unrolled"):
            def scal(_, acc, SY=SY, YY=YY, form=form):
                st = lbfgs.LBFGSState(
                    x=None, f=None, g=jnp.zeros(1, dt), d=None, P=None, SY=SY, YY=YY, a=jnp.ones(M, dt) + acc,
                    b=jnp.ones(M, dt), gamma=jnp.asarray(1.0, dt), gg=jnp.asarray(2.0, dt), head=jnp.asarray(3, jnp.int32),
                    count=jnp.asarray(M, jnp.int32), ls=None, iteration=None, nfev=None, gnorm=None, xnorm=None,
                    stp=None, status=None,
                )
                w, gd = lbfgs.compact_coefficients(st, M, unrolled=form == "unrolled")
                return acc + 1e-12 * (w[0] + gd)

            run = jax.jit(lambda a: jax.lax.fori_loop(0, args.trips, scal, a))
            rows.append((f"7x7 algebra, {form}", timed(run, jnp.zeros((), dt)) / args.trips, 0))

    solve_module = importlib.import_module("multiwalk.solve")
    x0 = cute.start("extended_rosenbrock", n)
    for number, case in enumerate(args.solves.split(",")):
        gradient = case
        if True:
            vg = FORMS[gradient]
            problem = mw.Problem(objective=cute.extended_rosenbrock, value_and_grad=vg, x0=x0, dtype=args.dtype)
            # another solver each: recompiled; on GPUs kernel="pallas": the two-pass form these variants were
            # measured in ("auto" now takes the one-pass loop for cute's analytic form on one GPU in float64)
            solver = mw.LBFGS(m=M, eps=1e-5, max_iterations=2000 + number, kernel="pallas" if on_gpu else "auto")
            before = set(solve_module._COMPILED)
            mw.solve(problem, solver, progress=False)
            new = [c for key, c in solve_module._COMPILED.items() if key not in before]
            counts = ""
            if new:
                text = new[-1].as_text()
                kinds = ("while", "conditional", "custom-call", "fusion")
                counts = ", ".join(f"{kind} {len(re.findall(' ' + kind + '[(]', text))}" for kind in kinds)
                counts += f", 'command_buffer' {text.count('command_buffer')}"
            runs = [mw.solve(problem, solver, progress=False) for _ in range(3)]
            secs = sorted(r.stats["run_seconds"] for r in runs)
            r = runs[0]
            per_it = secs[1] / max(r.iterations, 1)
            floor = (4 * M + 10) * n * item / bw if bw else float("nan")
            print(f"[{args.label}] solve {case:32s}: {secs[1] * 1e3:7.2f} ms (min {secs[0] * 1e3:.2f}), "
                  f"{r.iterations} it / {r.nfev} ev, f {r.fun:.6e}, {r.status.name}, {per_it * 1e3:.3f} ms/it = "
                  f"{per_it / floor:.2f}x floor; HLO: {counts}", flush=True)
    for name, t, nb in rows:
        floor = f"{nb / bw * 1e3:.3f} ms floor, {t / (nb / bw):.2f}x" if (nb and bw) else ""
        print(f"[{args.label}] {name:<40} {t * 1e3:8.4f} ms {floor}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
