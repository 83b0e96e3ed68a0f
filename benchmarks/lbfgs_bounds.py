"""L-BFGS-B at scale: bounded Extended Rosenbrock (upper bound 0.5 on every odd variable, so about
half the bounds are active at the optimum), float64, ``mw.solve`` (first call, with compiling, and
second call) against scipy's L-BFGS-B on the host CPU (its n capped by ``--scipy-n``: at 1e7 one
scipy run takes too long for the GPU machine's limit) and optimistix's bounded solver where the
installed optimistix has one (not wired in yet: the table says it was not run).

    python benchmarks/lbfgs_bounds.py --n 10000000 --out lbfgs_bounds_out
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import multiwalk as mw  # noqa: E402
from multiwalk.functions import cute  # noqa: E402


def box(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full(n, -2.0), np.where(np.arange(n) % 2 == 0, 0.5, 2.0)


def ours(n: int, pgtol: float) -> dict:
    lo, hi = box(n)
    x0 = np.clip(cute.start("extended_rosenbrock", n), lo, hi)
    problem = mw.Problem(objective=cute.extended_rosenbrock, x0=x0, lower=lo, upper=hi)
    out = {}
    for call in ("first", "second"):
        t = time.perf_counter()
        r = mw.solve(problem, mw.LBFGS(pgtol=pgtol, max_iterations=2000), progress=False)
        out[f"{call}_s"] = time.perf_counter() - t
    active = int(np.sum((r.x == lo) | (r.x == hi)))
    return out | {"n": n, "iterations": r.iterations, "nfev": r.nfev, "f": r.fun, "status": r.status.name,
                  "active": active}


def scipy_run(n: int, pgtol: float) -> dict:
    from scipy.optimize import minimize

    lo, hi = box(n)
    x0 = np.clip(cute.start("extended_rosenbrock", n), lo, hi)
    vg = jax.jit(jax.value_and_grad(cute.extended_rosenbrock), backend="cpu")
    fun = lambda x: tuple(np.asarray(v, np.float64) for v in vg(x))  # noqa: E731
    fun(x0)  # compile outside the clock
    t = time.perf_counter()
    s = minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=np.stack([lo, hi], 1), options={"gtol": pgtol})
    return {"n": n, "s": time.perf_counter() - t, "iterations": int(s.nit), "nfev": int(s.nfev), "f": float(s.fun),
            "status": s.message}


def optimistix_run(n: int, pgtol: float) -> dict:
    try:
        import optimistix as optx
    except ImportError:
        return {"skipped": "optimistix is not installed"}
    bounded = [name for name in dir(optx) if "bound" in name.lower()]
    return {"skipped": f"not run: optimistix {optx.__version__} is installed but its bounded solver is not wired "
                       f"into this script yet (names with 'bound': {bounded})"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--scipy-n", type=int, default=100_000)
    ap.add_argument("--pgtol", type=float, default=1e-5)
    ap.add_argument("--out", default="lbfgs_bounds_out")
    a = ap.parse_args()
    res = {"device": str(jax.devices()[0]), "date": time.strftime("%Y-%m-%d"), "ours": ours(a.n, a.pgtol),
           "ours_at_scipy_n": ours(min(a.n, a.scipy_n), a.pgtol), "scipy": scipy_run(min(a.n, a.scipy_n), a.pgtol),
           "optimistix": optimistix_run(a.n, a.pgtol)}
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "lbfgs_bounds.json").write_text(json.dumps(res, indent=1, default=str))
    rows = ["| solver | n | first call s | second call s | iterations | nfev | f | status |", "|---|---|---|---|---|---|---|---|"]
    for key in ("ours", "ours_at_scipy_n"):
        o = res[key]
        rows.append(f"| multiwalk LBFGS (box) | {o['n']} | {o['first_s']:.2f} | {o['second_s']:.2f} | {o['iterations']} | "
                    f"{o['nfev']} | {o['f']:.3e} | {o['status']} ({o['active']} bounds active) |")
    s = res["scipy"]
    rows.append(f"| scipy L-BFGS-B (host CPU) | {s['n']} | {s['s']:.2f} | - | {s['iterations']} | {s['nfev']} | "
                f"{s['f']:.3e} | {s['status']} |")
    rows.append(f"| optimistix | {a.n} | {res['optimistix'].get('skipped', '')} |  |  |  |  |  |")
    table = f"device: {res['device']}, {res['date']}\n\n" + "\n".join(rows) + "\n"
    (out / "lbfgs_bounds.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
