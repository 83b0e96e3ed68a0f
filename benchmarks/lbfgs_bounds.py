"""L-BFGS-B at scale: bounded Extended Rosenbrock (upper bound 0.5 on every odd variable, so about
half the bounds are active at the optimum), float64, ``mw.solve`` (first call, with compiling, and
second call) against scipy's L-BFGS-B on the host CPU (its n capped by ``--scipy-n``: at 1e7 one
scipy run takes too long for the GPU machine's limit) and optimistix's bounded L-BFGS
(``optx.BoundedLBFGS``, ``minimise(..., options={"bounds": (lower, upper)})``) where the installed
optimistix has it: it runs in a subprocess stopped after ``--optimistix-timeout`` seconds, and is
skipped with the reason printed where the class is absent.

Also timed: the unbounded run at the same n (what L-BFGS costs without the box) and the
generalised Cauchy point alone (its sort of the n breakpoints, gather and cumulative sums).
Markdown and JSON go to ``--out``.

    python benchmarks/lbfgs_bounds.py --n 10000000 --out lbfgs_bounds_out
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import multiwalk as mw  # noqa: E402
from multiwalk.functions import cute  # noqa: E402
from multiwalk.solvers.lbfgs import bounds  # noqa: E402


def box(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full(n, -2.0), np.where(np.arange(n) % 2 == 0, 0.5, 2.0)


def start(n: int) -> np.ndarray:
    lo, hi = box(n)
    return np.clip(cute.start("extended_rosenbrock", n), lo, hi)


def max_proj_g(x: np.ndarray) -> float:
    """max |proj g| at x (scipy's projgr), from the exact gradient, on the device."""
    lo, hi = (jnp.asarray(v) for v in box(x.shape[0]))
    g = jax.grad(cute.extended_rosenbrock)(jnp.asarray(x))
    return float(jnp.max(jnp.abs(bounds.projected_gradient(jnp.asarray(x), g, lo, hi))))


def ours(n: int, pgtol: float, bounded: bool = True) -> dict:
    lo, hi = box(n)
    problem = (mw.Problem(objective=cute.extended_rosenbrock, x0=start(n), lower=lo, upper=hi) if bounded else
               mw.Problem(objective=cute.extended_rosenbrock, x0=cute.start("extended_rosenbrock", n)))
    solver = mw.LBFGS(pgtol=pgtol, max_iterations=2000) if bounded else mw.LBFGS(eps=1e-5, max_iterations=2000)
    out = {}
    for call in ("first", "second"):
        t = time.perf_counter()
        r = mw.solve(problem, solver, progress=False)
        out[f"{call}_s"] = time.perf_counter() - t
    out["loop_ms_per_iteration"] = 1e3 * r.stats["loop_seconds"] / max(r.iterations, 1)
    active = int(np.sum((r.x == lo) | (r.x == hi))) if bounded else 0
    return out | {"n": n, "iterations": r.iterations, "nfev": r.nfev, "f": r.fun, "status": r.status.name,
                  "active": active, "kernel": r.stats.get("kernel", ""),
                  "max_proj_g": max_proj_g(np.asarray(r.x)) if bounded else float("nan")}


def cauchy_point_cost(n: int, m: int = 7, repeats: int = 10) -> dict:
    """ms per call of the generalised Cauchy point on n values with m pairs, and of its sort alone."""
    rng = np.random.default_rng(0)
    lo, hi = (jnp.asarray(v) for v in box(n))
    x, g, P = jnp.asarray(start(n)), jnp.asarray(rng.normal(size=n)), jnp.asarray(rng.normal(size=(2 * m, n)))
    model = bounds.BoxModel(jnp.asarray(1.0), jnp.ones(2 * m), jnp.eye(2 * m) * 1e-3)
    fns = {"cauchy_point_ms": jax.jit(lambda x, g, P: bounds.cauchy_point(x, g, lo, hi, model, P)[0]),
           "breakpoint_sort_ms": jax.jit(lambda x, g, P: bounds.breakpoint_order(bounds._breakpoints(x, g, lo, hi)[0])),
           "argsort_ms": jax.jit(lambda x, g, P: jnp.argsort(bounds._breakpoints(x, g, lo, hi)[0])),
           "one_pass_over_P_ms": jax.jit(lambda x, g, P: P @ g)}
    out = {}
    for name, fn in fns.items():
        jax.block_until_ready(fn(x, g, P))
        t = time.perf_counter()
        for _ in range(repeats):
            jax.block_until_ready(fn(x, g, P))
        out[name] = 1e3 * (time.perf_counter() - t) / repeats
    return out


def scipy_run(n: int, pgtol: float) -> dict:
    from scipy.optimize import minimize

    lo, hi = box(n)
    cpu = jax.local_devices(backend="cpu")[0]
    vg = jax.jit(jax.value_and_grad(cute.extended_rosenbrock))
    fun = lambda x: tuple(np.asarray(v, np.float64) for v in vg(jax.device_put(x, cpu)))  # noqa: E731
    x0 = start(n)
    fun(x0)  # compile outside the clock
    t = time.perf_counter()
    s = minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=np.stack([lo, hi], 1), options={"gtol": pgtol})
    return {"n": n, "s": time.perf_counter() - t, "iterations": int(s.nit), "nfev": int(s.nfev), "f": float(s.fun),
            "status": s.message}


def optimistix_inside(n: int, pgtol: float) -> dict:
    """optimistix's bounded L-BFGS, first and second call (run in a subprocess by :func:`optimistix_run`)."""
    import optimistix as optx

    version = getattr(optx, "__version__", "?")
    solver_class = getattr(optx, "BoundedLBFGS", None)
    if solver_class is None:
        return {"skipped": f"optimistix {version} has no BoundedLBFGS (the bounded L-BFGS of optimistix#205 is not in "
                           "this release; a dense BoundedBFGS would need n^2 values)", "version": version}
    lo, hi = (jnp.asarray(v) for v in box(n))
    y0 = jnp.asarray(start(n))
    # its stop test is on the change of y and f between steps (Cauchy-like), rtol and atol
    solver = solver_class(rtol=pgtol, atol=pgtol)
    out: dict = {"version": version, "n": n, "solver": f"BoundedLBFGS(rtol={pgtol}, atol={pgtol})"}
    for call in ("first", "second"):
        t = time.perf_counter()
        sol = optx.minimise(lambda y, args: cute.extended_rosenbrock(y), solver, y0, options={"bounds": (lo, hi)},
                            max_steps=2000, throw=False)
        jax.block_until_ready(sol.value)
        out[f"{call}_s"] = time.perf_counter() - t
    x = np.asarray(sol.value)
    return out | {"iterations": int(sol.stats["num_steps"]), "f": float(cute.extended_rosenbrock(jnp.asarray(x))),
                  "status": str(sol.result), "max_proj_g": max_proj_g(x),
                  "inside": bool(np.all((x >= box(n)[0]) & (x <= box(n)[1])))}


def optimistix_run(n: int, pgtol: float, timeout: float) -> dict:
    try:
        import optimistix  # noqa: F401
    except ImportError:
        return {"skipped": "optimistix is not installed"}
    cmd = [sys.executable, __file__, "--optimistix-only", "--n", str(n), "--pgtol", str(pgtol)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"skipped": f"did not finish within {timeout:.0f} s (stopped)"}
    if done.returncode != 0:
        return {"skipped": "failed: " + done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(res: dict, n: int) -> str:
    rows = ["| solver | n | first call s | second call s | ms / iteration | iterations | nfev | f | max proj g | status |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for key, name in (("ours", "multiwalk LBFGS (box)"), ("ours_at_scipy_n", "multiwalk LBFGS (box)"),
                      ("ours_unbounded", "multiwalk LBFGS, no box (reference)")):
        o = res[key]
        active = f", {o['active']} bounds active" if key != "ours_unbounded" else ""
        rows.append(f"| {name} | {o['n']} | {o['first_s']:.2f} | {o['second_s']:.2f} | {o['loop_ms_per_iteration']:.2f} | "
                    f"{o['iterations']} | {o['nfev']} | {o['f']:.6e} | {o['max_proj_g']:.1e} | {o['status']} "
                    f"({o['kernel']}{active}) |")
    s = res["scipy"]
    rows.append(f"| scipy L-BFGS-B (host CPU) | {s['n']} | {s['s']:.2f} | - | {1e3 * s['s'] / max(s['iterations'], 1):.2f} | "
                f"{s['iterations']} | {s['nfev']} | {s['f']:.6e} | - | {s['status']} |")
    o = res["optimistix"]
    if "skipped" in o:
        rows.append(f"| optimistix | {n} | skipped: {o['skipped']} | | | | | | | |")
    else:
        rows.append(f"| optimistix {o['solver']} {o['version']} | {o['n']} | {o['first_s']:.2f} | {o['second_s']:.2f} | "
                    f"{1e3 * o['second_s'] / max(o['iterations'], 1):.2f} | {o['iterations']} | - | {o['f']:.6e} | "
                    f"{o['max_proj_g']:.1e} | {o['status']} (inside the box: {o['inside']}) |")
    c = res["cauchy_point"]
    return (f"device: {res['device']}, {res['date']}\n\n" + "\n".join(rows) + "\n\n"
            f"The generalised Cauchy point alone at n = {n}, m = 7: {c['cauchy_point_ms']:.2f} ms per call, of which "
            f"the sort of the breakpoints {c['breakpoint_sort_ms']:.2f} ms (an argsort: {c['argsort_ms']:.2f} ms); "
            f"one pass over the pairs (P @ g) "
            f"{c['one_pass_over_P_ms']:.2f} ms.\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--scipy-n", type=int, default=100_000)
    ap.add_argument("--pgtol", type=float, default=1e-5)
    ap.add_argument("--optimistix-timeout", type=float, default=290.0)
    ap.add_argument("--optimistix-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="lbfgs_bounds_out")
    a = ap.parse_args()
    if a.optimistix_only:
        print(json.dumps(optimistix_inside(a.n, a.pgtol), default=str))
        return
    res = {"device": str(jax.devices()[0]), "date": time.strftime("%Y-%m-%d")}
    res["optimistix"] = optimistix_run(a.n, a.pgtol, a.optimistix_timeout)  # first: its own process, the GPU free
    res |= {"ours": ours(a.n, a.pgtol), "ours_unbounded": ours(a.n, a.pgtol, bounded=False),
            "ours_at_scipy_n": ours(min(a.n, a.scipy_n), a.pgtol), "scipy": scipy_run(min(a.n, a.scipy_n), a.pgtol),
            "cauchy_point": cauchy_point_cost(a.n)}
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "lbfgs_bounds.json").write_text(json.dumps(res, indent=1, default=str))
    text = table(res, a.n)
    (out / "lbfgs_bounds.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
