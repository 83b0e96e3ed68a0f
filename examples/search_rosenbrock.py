"""Find the minimum of Rosenbrock's banana function (cuda_mcmc's ``search_Rosenbrock`` example).

    z(x, y) = (1 - x)^2 + 100 (y - x^2)^2,      minimum z = 0 at (1, 1)

As in the seed, the model is z itself, compared with one datum equal to zero, so
chi2 = z^2; the search box is [-10, 10]^2, with 400 burn-in and 1000 sampling iterations.
The minimum lies in a long, narrow, curved valley that is hard for gradient methods; the
replica-exchange chains find it from uniform random starts.

The problem is solved twice: with the modern API (``mw.Problem(objective=...)`` +
``mw.ReplicaExchange`` + ``mw.solve``) and with the seed's interface
``multiwalk.compat.imgpu.Mcgpu`` (model + data, as the CUDA original).

    python examples/search_rosenbrock.py [--out DIR] [--quick] [--seed N]
"""

from __future__ import annotations

import sys
import time

import matplotlib

matplotlib.use("Agg")
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from example_options import parse_options  # noqa: E402  (examples/example_options.py)

import multiwalk as mw  # noqa: E402
from multiwalk.compat.imgpu import Mcgpu  # noqa: E402

EXACT = np.array([1.0, 1.0])
LOWER, UPPER = [-10.0, -10.0], [10.0, 10.0]


def rosenbrock(p: jnp.ndarray) -> jnp.ndarray:
    """z(x, y) for ONE point."""
    return (1.0 - p[0]) ** 2 + 100.0 * (p[1] - p[0] ** 2) ** 2


def chi2(p: jnp.ndarray) -> jnp.ndarray:
    """The objective of the modern run: chi2 = z^2 (what the seed's Mcgpu run minimises)."""
    return rosenbrock(p) ** 2


def model_seed_style(p, coor, icoor, dat, idat, imodel):
    """The seed's model(): one model value, z, compared with dat = [0]."""
    return jnp.atleast_1d(rosenbrock(p))


def summary(label: str, x: np.ndarray, fun: float) -> float:
    """Print a point next to the exact minimum; returns the error (max over coordinates)."""
    err = float(np.max(np.abs(x - EXACT)))
    print(f"  {label:<38s} (x, y) = ({x[0]:.6f}, {x[1]:.6f})  chi2 = z^2 = {fun:.3g}  exact (1, 1)  error {err:.1e}")
    return err


def main(argv: list[str] | None = None) -> int:
    opts, out = parse_options(__doc__, argv)
    sizes = dict(nbeta=32, nseq=8, nburn=300, niter=400) if opts.quick else dict(nbeta=32, nseq=14, nburn=400, niter=1000)
    print(f"Rosenbrock: z = (1-x)^2 + 100 (y-x^2)^2, chi2 = z^2;  box {LOWER} .. {UPPER};  {sizes}, seed {opts.seed}")

    # --- 1. the modern API ------------------------------------------------------------------
    t0 = time.perf_counter()
    problem = mw.Problem(objective=chi2, lower=LOWER, upper=UPPER, names=["x", "y"])
    result = mw.solve(problem, mw.ReplicaExchange(**sizes), seed=opts.seed, progress=False)
    print(f"[modern API] {result.message} in {time.perf_counter() - t0:.1f} s")
    err_modern = summary("best point (result.x):", result.x, result.fun)
    result.plot(str(out / "rosenbrock_marginals.png"))

    # --- 2. the seed's interface, Mcgpu -------------------------------------------------------
    t0 = time.perf_counter()
    mc = Mcgpu(pdescr=[1, 1], pmint=LOWER, pmaxt=UPPER, seed=opts.seed, model=model_seed_style, **sizes)
    mc.burnin_and_search(progress=False)
    print(f"[Mcgpu] burnin_and_search() in {time.perf_counter() - t0:.1f} s; pout {mc.pout.shape}, chi2 {mc.chi2.shape}, "
          f"acceptance at beta=1: {mc.n_acpt[:, 0].sum() / max(mc.n_cnt[:, 0].sum(), 1):.2f}")
    err_mcgpu = summary("best point (result.x):", mc.result.x, mc.result.fun)
    i = int(mc.chi2.argmin())  # the seed's way: the best recorded sample is where chi2 is smallest
    summary("best sample (pout[:, chi2.argmin()]):", mc.pout[:, i], float(mc.chi2[i]))
    mc.result.plot(str(out / "rosenbrock_mcgpu_marginals.png"))
    same = np.array_equal(result.samples, mc.result.samples)
    print(f"same seed -> identical samples in both runs: {same} (objective z^2 = chi2 of model z against datum 0)")

    print(f"figures written to {out}/: rosenbrock_marginals.png, rosenbrock_mcgpu_marginals.png")
    tol = 0.05
    if max(err_modern, err_mcgpu) > tol:
        print(f"FAILED: the minimum (1, 1) was not found within {tol}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
