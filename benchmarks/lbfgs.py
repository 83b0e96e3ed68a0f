#!/usr/bin/env python
"""L-BFGS (the CUDA L-BFGS of D'Amore et al.) through ``mw.solve``: Extended Rosenbrock against optax and scipy.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python3 benchmarks/lbfgs.py --device gpu --out "$OUT"       # n = 1e6, 1e7, 5e7: minutes
    PYTHONPATH=src python3 benchmarks/lbfgs.py --device cpu --quick            # seconds

The seed's problem: Extended Rosenbrock from x0 = (-1.2, 1, ...), m = 7, eps = 1e-5, the stop rule
``||g|| <= eps * max(1, ||x||)`` for all three codes.

* Ours: the wall clock of ``mw.solve(Problem(objective=..., value_and_grad=..., x0=x0, dtype=...),
  LBFGS(m=7, eps=1e-5, kernel=...))`` with ``result.x`` read back, first call (compiling) and
  second.  f and g come from ``cute.extended_rosenbrock_value_and_grad`` (``--gradients``:
  ``analytic``, ``analytic-xla`` without its GPU line-search kernel, ``autodiff``:
  ``jax.value_and_grad``); ``--kernels auto,xla,pallas,onepass`` times each form of the solver.
* Peers, in the same run: optax.lbfgs(memory_size=7) with its zoom line search in one jitted
  ``lax.while_loop`` on the same device with the same f and g (first and second call, x read
  back); scipy's L-BFGS-B (maxcor=7, the same stop rule by a callback) on the host CPU in float64
  with a NumPy f and g, up to ``--scipy-max-n``.  The table's peer is optax where it is installed,
  else scipy.
* Floor: the fewest bytes over the measured copy bandwidth, the lower of two designs: the
  two-pass one, (4m + 10) n values per iteration and 4 n per extra line-search evaluation; the
  one-pass one, (2m + 5) n values per line-search evaluation.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this script is started
import common  # noqa: E402

M, EPS = 7, 1e-5  # the seed's memory and tolerance


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
    times = []
    for _ in range(2):  # first call compiles; both read x back, as ours
        t0 = time.perf_counter()
        x, state = runner(x0)
        np.asarray(x)
        times.append(time.perf_counter() - t0)
    return {
        "seconds": times[1], "first_call_seconds": times[0],
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


def floor_seconds(n: int, itemsize: int, iterations: int, nfev: int, bytes_per_s: float) -> float:
    """The lower of the two designs' traffic for this run's iterations and evaluations, over the bandwidth."""
    extra = max(nfev - 1 - iterations, 0)
    two_pass = (4 * M + 10) * n * iterations + 4 * n * extra
    one_pass = (2 * M + 5) * n * nfev
    return min(two_pass, one_pass) * itemsize / bytes_per_s


def run_ours(mw, cute, n: int, dtype: str, kernel: str, gradient: str) -> common.Calls:
    vg = {"analytic": cute.extended_rosenbrock_value_and_grad, "autodiff": None,
          "analytic-xla": cute.extended_rosenbrock_xla}[gradient]
    problem = mw.Problem(objective=cute.extended_rosenbrock, value_and_grad=vg,
                         x0=cute.start("extended_rosenbrock", n), dtype=dtype)
    solver = mw.LBFGS(m=M, eps=EPS, kernel=kernel)
    return common.wall_calls(lambda: mw.solve(problem, solver, progress=False))


def main(argv: list[str] | None = None) -> int:
    p = common.new_parser(__doc__, "lbfgs")
    p.add_argument("--sizes", default="1e6,1e7,5e7", help="comma-separated n")
    p.add_argument("--dtypes", default="float64,float32")
    p.add_argument("--float32-sizes", default="1e7", help="float32 only at these n")
    p.add_argument("--kernels", default="auto", help="comma-separated LBFGS(kernel=...) forms: auto, xla, pallas, onepass")
    p.add_argument("--gradients", default="analytic", help="comma-separated: analytic, analytic-xla, autodiff")
    p.add_argument("--scipy-max-n", type=float, default=1e6, help="run scipy up to this n (1e7 takes ~50 s)")
    p.add_argument("--no-optax", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.float32_sizes = "1e4", "1e4"
    run = common.begin(args)
    if run is None:
        return 2
    import jax

    jax.config.update("jax_enable_x64", True)
    import multiwalk as mw
    from multiwalk.functions import cute

    log = run.log
    ceilings = common.measure_ceilings(run.on_gpu, log)
    rows, notes = [], []
    optax_missing = False
    for dtype in args.dtypes.split(","):
        sizes = args.sizes if dtype == "float64" else args.float32_sizes
        for n in (int(v) for v in common.floats(sizes)):
            for kernel in args.kernels.split(","):
                for gradient in args.gradients.split(","):
                    calls = run_ours(mw, cute, n, dtype, kernel, gradient)
                    r = calls.result
                    peer, peer_name, peer_note = None, "", ""
                    if not args.no_optax and not optax_missing:
                        try:
                            o = run_optax(cute, n, dtype, gradient)
                            peer, peer_name = o["seconds"], f"optax {o['version']}, {o['iterations']} it"
                        except ImportError:
                            optax_missing = True
                            notes.append("optax is not installed: the peer is scipy (CPU) where it ran.")
                    if dtype == "float64" and n <= args.scipy_max_n:
                        s = run_scipy(cute, n)
                        peer_note = f"; scipy L-BFGS-B (CPU) {common.seconds(s['seconds'])}, {s['iterations']} it"
                        if peer is None:
                            peer, peer_name = s["seconds"], f"scipy {s['version']} CPU, {s['iterations']} it"
                    note = (f"{r.iterations} it / {r.nfev} evals, f {r.fun:.4g}, {r.status.name}, kernel "
                            f"{r.stats.get('kernel')}; compile {calls.first_result.stats['compile_seconds']:.2f} s"
                            + peer_note)
                    what = f"{dtype}, n = {n:.0e}, kernel={kernel}, {gradient} f and g"
                    log(f"{what}: first {calls.first:.3f} s, second {calls.second:.4f} s; {note}")
                    floor = floor_seconds(n, np.dtype(dtype).itemsize, int(r.iterations), int(r.nfev),
                                          ceilings["bytes_per_s"])
                    rows.append(common.Row(what, calls.first, calls.second, peer, peer_name, floor, note))
    notes.append("the seed's check: at n = 1e6 float64 the seed's code takes 37 iterations, 51 evaluations, "
                 "f = 6.75226e-10.")
    heading = [f"L-BFGS, Extended Rosenbrock, m = {M}, eps = {EPS}: {run.env['device']}, {run.env['date']}, "
               f"JAX {run.env['jax']}. " + common.ceilings_line(ceilings)]
    return common.finish(args, run, "lbfgs", heading, rows, notes, {"ceilings": ceilings})


if __name__ == "__main__":
    sys.exit(main())
