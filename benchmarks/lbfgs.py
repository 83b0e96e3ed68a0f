#!/usr/bin/env python
"""L-BFGS on Extended Rosenbrock at n = 1e6, 1e7, 5e7: ``mw.LBFGS`` vs optax.lbfgs (same GPU) and scipy (CPU).

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python3 benchmarks/lbfgs.py --out "$OUT"                 # GPU, a few minutes
    PYTHONPATH=src python3 benchmarks/lbfgs.py --device cpu --quick         # smoke run

What is measured, in one run (the seed: CUDA L-BFGS, m = 7, eps = 1e-5, x0 = (-1.2, 1, ...)):

* ours: ``mw.solve(Problem(objective=extended_rosenbrock, value_and_grad=..., x0=x0, dtype=...),
  LBFGS(m=7, eps=1e-5))`` with f and g from ``cute.extended_rosenbrock_value_and_grad`` (one fused
  pass, the seed's ``eval_fg``; on GPUs the line search evaluates through its ``.along``, one Pallas
  kernel; ``analytic-xla``: without it; ``--gradients autodiff`` or ``analytic,autodiff``: ``jax.value_and_grad``),
  called twice; the second call reuses the compiled loop and its ``stats["run_seconds"]`` (the
  driver's chunks, device-synchronised, compilation and the host copies of x0 / the result
  excluded) is reported, with the whole call's wall time beside it.
* optax.lbfgs(memory_size=7) with its default zoom line search, in one jitted ``lax.while_loop``
  with the same stop rule ``||g|| <= eps * max(1, ||x||)`` (optax's documented ``run_opt`` loop);
  compiled first, then the median of 3 calls, each synchronised.  optax gets the same f and g:
  its zoom line search calls ``jax.value_and_grad(value_fn)``, so ``value_fn`` carries the analytic
  gradient as a ``jax.custom_vjp`` (:func:`with_gradient`).
* scipy's L-BFGS-B (maxcor=7, the same stop rule by a callback) on the host CPU, float64, with a
  vectorised NumPy objective and gradient; one call (it takes tens of seconds at 1e7).  Skipped
  above ``--scipy-max-n``.
* the floor: bytes an iteration must move over the measured read bandwidth.  Per iteration the
  compact representation reads the 2m stored vectors twice (the products ``[S Y]'[g, y]`` and
  the direction ``[S Y] w``: 4m n values), and moves x, g, d, the new pair and the trial point
  (10 n values): (4m + 10) n values; each extra line-search evaluation moves 4 n more.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from lbfgs_common import EPS, M, timed, torch_copy_bandwidth  # noqa: E402, F401 - torch_copy_bandwidth: lbfgs.torch_copy_bandwidth


def numpy_rosenbrock(x: np.ndarray) -> tuple[float, np.ndarray]:
    """Extended Rosenbrock value and gradient in NumPy (the scipy run's objective)."""
    a, b = x[0::2], x[1::2]
    t = b - a * a
    f = float(np.sum(100.0 * t * t + (1.0 - a) ** 2))
    g = np.empty_like(x)
    g[0::2] = -400.0 * a * t - 2.0 * (1.0 - a)
    g[1::2] = 200.0 * t
    return f, g


def with_gradient(value_and_grad):
    """``f(x)`` whose ``jax.value_and_grad`` is ``value_and_grad(x)`` (one fused pass): how optax, which
    differentiates its ``value_fn`` itself, gets the same evaluation as ours."""
    import jax

    @jax.custom_vjp
    def f(x):
        return value_and_grad(x)[0]

    def forward(x):
        value, grad = value_and_grad(x)
        return value, grad

    def backward(grad, cotangent):
        return (cotangent * grad,)

    f.defvjp(forward, backward)
    return f


def read_bandwidth(nbytes: int, dtype) -> float:
    """Bytes per second of a reduction over a large array (read-only traffic)."""
    import jax
    import jax.numpy as jnp

    x = jax.random.uniform(jax.random.PRNGKey(5), (nbytes // 8,), jnp.float64 if dtype == "float64" else jnp.float32)
    return x.nbytes / timed(jax.jit(jnp.sum), x, reps=10)


def run_ours(mw, cute, n: int, dtype: str, kernel: str = "auto", gradient: str = "analytic") -> dict:
    x0 = cute.start("extended_rosenbrock", n)
    from multiwalk.functions import cute_kernel

    vg = {"analytic": cute.extended_rosenbrock_value_and_grad, "autodiff": None,  # analytic: .along on GPUs
          "analytic-xla": cute_kernel.extended_rosenbrock_xla}[gradient]
    problem = mw.Problem(objective=cute.extended_rosenbrock, value_and_grad=vg, x0=x0, dtype=dtype)
    solver = mw.LBFGS(m=M, eps=EPS, kernel=kernel)
    first = mw.solve(problem, solver, progress=False)
    t0 = time.perf_counter()
    r = mw.solve(problem, solver, progress=False)
    wall = time.perf_counter() - t0
    return {
        "seconds": r.stats["run_seconds"], "wall_seconds": wall, "compile_seconds": first.stats["compile_seconds"],
        "iterations": r.iterations, "nfev": r.nfev, "f": r.fun, "gnorm": r.gnorm, "status": r.status.name,
        "chunks": r.stats["chunks"], "kernel": r.stats["kernel"], "gradient": gradient,
    }


def run_optax(cute, n: int, dtype: str, gradient: str = "analytic") -> dict:
    import jax
    import jax.numpy as jnp
    import optax
    from optax import tree_utils as otu

    analytic = gradient.startswith("analytic")  # optax cannot use .along: it evaluates f and g at points
    f = with_gradient(cute.extended_rosenbrock_value_and_grad) if analytic else cute.extended_rosenbrock
    opt = optax.lbfgs(memory_size=M)
    value_and_grad = optax.value_and_grad_from_state(f)

    def run(x):
        def step(carry):
            params, state = carry
            value, grad = value_and_grad(params, state=state)
            updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=f)
            return optax.apply_updates(params, updates), state

        def cond(carry):
            params, state = carry
            it = otu.tree_get(state, "count")
            g = otu.tree_get(state, "grad")
            gnorm = jnp.sqrt(jnp.sum(g * g))
            return (it == 0) | ((it < 2000) & (gnorm > EPS * jnp.maximum(1.0, jnp.sqrt(jnp.sum(params * params)))))

        return jax.lax.while_loop(cond, step, (x, opt.init(x)))

    runner = jax.jit(run)
    x0 = jnp.asarray(cute.start("extended_rosenbrock", n), dtype)
    t0 = time.perf_counter()
    out = runner(x0)
    jax.block_until_ready(out)
    compile_and_first = time.perf_counter() - t0
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        out = runner(x0)
        jax.block_until_ready(out)
        times.append(time.perf_counter() - t0)
    x, state = out
    return {
        "seconds": statistics.median(times), "first_call_seconds": compile_and_first,
        "iterations": int(otu.tree_get(state, "count")), "f": float(f(x)),
        "gnorm": float(jnp.linalg.norm(otu.tree_get(state, "grad"))), "version": optax.__version__,
        "gradient": gradient,
    }


def run_scipy(cute, n: int) -> dict:
    import scipy
    from scipy.optimize import minimize

    x0 = cute.start("extended_rosenbrock", n).astype(np.float64)
    last = {"g": None, "nfev": 0}

    def fun(x):
        f, g = numpy_rosenbrock(x)
        last["g"], last["nfev"] = g, last["nfev"] + 1
        return f, g

    def callback(intermediate_result):
        # the last evaluation is at the accepted point: the same stop rule as ours
        if np.linalg.norm(last["g"]) <= EPS * max(1.0, np.linalg.norm(intermediate_result.x)):
            raise StopIteration

    t0 = time.perf_counter()
    r = minimize(fun, x0, jac=True, method="L-BFGS-B", callback=callback,
                 options={"maxcor": M, "gtol": 0.0, "ftol": 0.0, "maxiter": 2000, "maxls": 20})
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "iterations": int(r.nit), "nfev": int(r.nfev), "f": float(r.fun),
            "message": str(r.message), "version": scipy.__version__}


def main() -> int:
    p = common.new_parser(__doc__)
    common.add_out_option(p, "lbfgs")
    p.add_argument("--quick", action="store_true", help="n = 1e4 and 1e5 only (a smoke run)")
    p.add_argument("--sizes", default=None, help="comma-separated n (default 1e6,1e7,5e7)")
    p.add_argument("--dtypes", default="float64,float32")
    p.add_argument("--scipy-max-n", type=float, default=1e7, help="run scipy up to this n (default 1e7)")
    p.add_argument("--no-optax", action="store_true")
    p.add_argument("--kernels", default="auto", help="comma-separated LBFGS(kernel=...) forms to time (auto, xla, pallas)")
    p.add_argument("--gradients", default="analytic",
                   help="comma-separated: analytic (cute's fused value_and_grad; our line search evaluates through "
                        "its .along, one Pallas kernel on GPUs), analytic-xla (the same f and g without .along: XLA), "
                        "autodiff (jax.value_and_grad); the first is the table's, the others are logged for ours and optax")
    args = p.parse_args()
    common.select_platform(args.device)
    import jax

    jax.config.update("jax_enable_x64", True)
    import multiwalk as mw
    from multiwalk.functions import cute

    t_start = time.perf_counter()
    log = common.make_log(t_start)
    found = common.first_device(args.device)
    if found is None:
        return 2
    dev, on_gpu = found
    env = common.environment(dev, on_gpu, mw, args.quick)
    log(f"device: {env['device']}")
    sizes = [int(float(s)) for s in (args.sizes or ("1e4,1e5" if args.quick else "1e6,1e7,5e7")).split(",")]
    dtypes = args.dtypes.split(",")
    copy_bw = common.measure_bandwidth((1 << 30) if on_gpu else (1 << 26), reps=10 if on_gpu else 5)["bytes_per_s"]
    read_bw = read_bandwidth((1 << 31) if on_gpu else (1 << 27), "float64")
    torch_bw = torch_copy_bandwidth(1 << 31) if on_gpu else None
    bw = max(copy_bw, read_bw, torch_bw or 0.0)
    log(f"bandwidth: copy {copy_bw / 1e9:.0f} GB/s, read {read_bw / 1e9:.0f} GB/s, torch copy "
        f"{(torch_bw or 0) / 1e9:.0f} GB/s; floor uses {bw / 1e9:.0f} GB/s")

    rows = []
    for dtype in dtypes:
        item = 8 if dtype == "float64" else 4
        for n in sizes:
            row = {"n": n, "dtype": dtype}
            gradients = args.gradients.split(",")
            for kernel in args.kernels.split(",")[1:]:  # other forms, logged for comparison
                o = run_ours(mw, cute, n, dtype, kernel, gradients[0])
                row[f"ours_{kernel}"] = o
                log(f"{dtype} n={n:.0e}: kernel={kernel} [{o['kernel']}] {o['seconds'] * 1e3:.1f} ms "
                    f"({o['iterations']} it, {o['nfev']} ev, f {o['f']:.3e}, {o['status']})")
            for gradient in gradients[1:]:  # other evaluations, logged for ours and optax
                o = run_ours(mw, cute, n, dtype, args.kernels.split(",")[0], gradient)
                row[f"ours_{gradient}"] = o
                log(f"{dtype} n={n:.0e}: gradient={gradient} {o['seconds'] * 1e3:.1f} ms "
                    f"({o['iterations']} it, {o['nfev']} ev, f {o['f']:.3e}, {o['status']})")
                if not args.no_optax:
                    try:
                        row[f"optax_{gradient}"] = q = run_optax(cute, n, dtype, gradient)
                        log(f"   optax gradient={gradient} {q['seconds'] * 1e3:.1f} ms ({q['iterations']} it, f {q['f']:.3e})")
                    except Exception as err:  # noqa: BLE001 - the peer may fail at this size
                        log(f"   optax gradient={gradient} failed: {type(err).__name__}: {str(err)[:200]}")
            ours = run_ours(mw, cute, n, dtype, args.kernels.split(",")[0], gradients[0])
            row["ours"] = ours
            log(f"{dtype} n={n:.0e}: ours {ours['seconds'] * 1e3:.1f} ms ({ours['iterations']} it, {ours['nfev']} ev, "
                f"f {ours['f']:.3e}, {ours['status']}); wall {ours['wall_seconds'] * 1e3:.0f} ms")
            extra = max(ours["nfev"] - 1 - ours["iterations"], 0)
            floor_bytes = ((4 * M + 10) * n * ours["iterations"] + 4 * n * extra) * item
            row["floor_seconds"] = floor_bytes / bw
            row["floor_per_iteration"] = (4 * M + 10) * n * item / bw
            if not args.no_optax:
                try:
                    row["optax"] = run_optax(cute, n, dtype, gradients[0])
                    o = row["optax"]
                    log(f"   optax {o['seconds'] * 1e3:.1f} ms ({o['iterations']} it, f {o['f']:.3e})")
                except Exception as err:  # noqa: BLE001 - the peer may be missing or fail at this size
                    row["optax"] = {"error": f"{type(err).__name__}: {err}"}
                    log(f"   optax failed: {row['optax']['error'][:200]}")
            if dtype == "float64" and n <= args.scipy_max_n:
                row["scipy"] = run_scipy(cute, n)
                s = row["scipy"]
                log(f"   scipy {s['seconds']:.2f} s ({s['iterations']} it, {s['nfev']} ev, f {s['f']:.3e})")
            rows.append(row)

    lines = [
        f"L-BFGS, Extended Rosenbrock, m = {M}, eps = {EPS}, x0 = (-1.2, 1, ...); {env['device']}, {env['date']}, "
        f"JAX {env['jax']}; f and g for ours and optax: {args.gradients.split(',')[0]}.",
        "",
        f"Bandwidth measured in the same run: XLA copy {copy_bw / 1e9:.0f} GB/s (read + write), XLA read-only "
        f"{read_bw / 1e9:.0f} GB/s, PyTorch copy {(torch_bw or 0) / 1e9:.0f} GB/s (read + write); the floor uses the largest.",
        "",
        "| dtype | n | ours ms | it / evals | per it ms | floor per it ms | ours / floor | optax ms (it) | optax / ours |"
        " scipy CPU s (it / evals) | scipy / ours |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        o = row["ours"]
        per_it = o["seconds"] / max(o["iterations"], 1)
        opt = row.get("optax", {})
        opt_txt = f"{opt['seconds'] * 1e3:.1f} ({opt['iterations']})" if "seconds" in opt else opt.get("error", "-")[:40]
        opt_ratio = f"{opt['seconds'] / o['seconds']:.2f}x" if "seconds" in opt else "-"
        sc = row.get("scipy")
        sc_txt = f"{sc['seconds']:.2f} ({sc['iterations']} / {sc['nfev']})" if sc else "-"
        sc_ratio = f"{sc['seconds'] / o['seconds']:.0f}x" if sc else "-"
        lines.append(
            f"| {row['dtype']} | {row['n']:.0e} | {o['seconds'] * 1e3:.1f} | {o['iterations']} / {o['nfev']} | "
            f"{per_it * 1e3:.3f} | "
            f"{row['floor_per_iteration'] * 1e3:.3f} | {o['seconds'] / row['floor_seconds']:.2f} | {opt_txt} | {opt_ratio} | "
            f"{sc_txt} | {sc_ratio} |"
        )
    md = common.finish_markdown(lines, [
        "ours = mw.solve's run_seconds (compiled loop reused; x0 upload and result download excluded); "
        "optax = median of 3 jitted while-loop calls; scipy = one call on the host CPU.",
    ])
    report = {"environment": env, "copy_bandwidth": copy_bw, "read_bandwidth": read_bw, "torch_copy_bandwidth": torch_bw,
              "rows": rows}
    out = Path(args.out)
    common.write_report(out, "lbfgs", report, md)
    common.print_done(log, out, "lbfgs", t_start, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
