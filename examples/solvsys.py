"""Find ALL roots of a nonlinear system with replica-exchange MCMC (cuda_mcmc's ``solvsys`` example).

    x^2 + y^2      = 1
    -0.25 x + y    = 0.5

The system has two roots, (-0.966012, 0.258497) and (0.730718, 0.682679).  The residuals are
the model, the data are zeros and sigma is small, so chi2 is tiny only near a root; the coldest
chains of the many independent sequences settle at both roots, and ``result.roots(tol)`` polishes
the recorded samples into the distinct roots (Levenberg-Marquardt), each with chi2 <= tol.

The problem is solved twice: with the modern API (``mw.Problem`` + ``mw.ReplicaExchange`` +
``mw.solve``) and with the seed's interface ``multiwalk.compat.imgpu.Mcgpu``.  With the same
seed the two give identical samples.

    python examples/solvsys.py [--out DIR] [--quick] [--seed N]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from example_options import parse_options  # noqa: E402  (examples/example_options.py)

import multiwalk as mw  # noqa: E402
from multiwalk.compat.imgpu import Mcgpu  # noqa: E402

A, B = 0.25, 0.5  # the line y = A x + B
SIGMA = 1e-3  # residual scale: chi2 = |F(x, y)|^2 / SIGMA^2
ROOT_TOL = 1.0  # chi2 under which a polished point counts as a root (residuals below ~1e-3)
LOWER, UPPER = [-2.0, -2.0], [2.0, 2.0]


def exact_roots() -> np.ndarray:
    """The two roots: x^2 + (A x + B)^2 = 1, solved as a quadratic in x."""
    a, b, c = 1.0 + A**2, 2.0 * A * B, B**2 - 1.0
    xs = (-b + np.array([-1.0, 1.0]) * np.sqrt(b * b - 4 * a * c)) / (2 * a)
    return np.stack([xs, A * xs + B], axis=1)


def residuals(p: jnp.ndarray, line: tuple[float, float]) -> jnp.ndarray:
    """F(x, y) for ONE point: both equations' left minus right sides."""
    a, b = line
    x, y = p[0], p[1]
    return jnp.stack([x**2 + y**2 - 1.0, -a * x + y - b])


def model_seed_style(p, coor, icoor, dat, idat, imodel):
    """The same residuals with the seed's model() signature; the line's coefficients come in ``coor``."""
    x, y = p[0], p[1]
    return jnp.stack([x**2 + y**2 - 1.0, -coor[0] * x + y - coor[1]])


def report(label: str, roots: np.ndarray, chi2_of, exact: np.ndarray) -> bool:
    """Print each exact root next to the nearest root found; True when both were found."""
    print(f"\n[{label}] {len(roots)} distinct root(s) with chi2 <= {ROOT_TOL}:")
    found_all = True
    for k, ex in enumerate(exact):
        if len(roots) == 0:
            print(f"  root {k + 1}: exact ({ex[0]: .6f}, {ex[1]: .6f})   NOT FOUND")
            found_all = False
            continue
        d = np.max(np.abs(roots[:, :2] - ex), axis=1)
        j = int(np.argmin(d))
        ok = d[j] < 0.01
        found_all &= bool(ok)
        r = roots[j]
        print(
            f"  root {k + 1}: found ({r[0]: .6f}, {r[1]: .6f})  exact ({ex[0]: .6f}, {ex[1]: .6f})  "
            f"error {d[j]:.1e}  chi2 {float(chi2_of(r)):.3g}{'' if ok else '   NOT FOUND'}"
        )
    return found_all


def plot_curves(path: Path, found: dict[str, np.ndarray], exact: np.ndarray, samples: np.ndarray) -> None:
    """The circle, the line, the recorded samples and the roots found."""
    fig, ax = plt.subplots(figsize=(5.6, 5.2))
    t = np.linspace(0, 2 * np.pi, 400)
    ax.plot(np.cos(t), np.sin(t), color="tab:blue", lw=1.5, label="$x^2+y^2=1$")
    xs = np.linspace(LOWER[0], UPPER[0], 2)
    ax.plot(xs, A * xs + B, color="tab:green", lw=1.5, label=f"$y={A}x+{B}$")
    ax.scatter(samples[:, 0], samples[:, 1], s=2, color="0.6", alpha=0.3, label="samples (coldest chains)")
    ax.scatter(exact[:, 0], exact[:, 1], s=160, facecolors="none", edgecolors="k", lw=1.5, label="exact roots")
    markers = {"modern API": ("x", "tab:red"), "Mcgpu": ("+", "tab:purple")}
    for label, roots in found.items():
        m, c = markers[label]
        ax.scatter(roots[:, 0], roots[:, 1], s=80, marker=m, color=c, lw=2, label=f"roots found ({label})")
    ax.set_xlim(-1.6, 1.6)
    ax.set_ylim(-1.4, 1.6)
    ax.set_aspect("equal")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title("solvsys: both roots by replica-exchange MCMC")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    opts, out = parse_options(__doc__, argv)
    sizes = dict(nbeta=16, nseq=8, nburn=200, niter=300) if opts.quick else dict(nbeta=32, nseq=14, nburn=300, niter=500)
    exact = exact_roots()
    print(f"solvsys: x^2 + y^2 = 1, y = {A} x + {B};  box {LOWER} .. {UPPER};  {sizes}, seed {opts.seed}")

    # --- 1. the modern API ------------------------------------------------------------------
    t0 = time.perf_counter()
    problem = mw.Problem(model=residuals, data=np.zeros(2), sigma=SIGMA, lower=LOWER, upper=UPPER,
                         args=(A, B), names=["x", "y"])
    result = mw.solve(problem, mw.ReplicaExchange(**sizes), seed=opts.seed, progress=False)
    roots = result.roots(ROOT_TOL).x
    print(f"\n[modern API] {result.message} in {time.perf_counter() - t0:.1f} s; best chi2 {result.fun:.3g}")
    ok_modern = report("modern API", roots, lambda r: problem.chi2(r[None])[0], exact)
    result.plot(str(out / "solvsys_marginals.png"))

    # --- 2. the seed's interface, Mcgpu -------------------------------------------------------
    t0 = time.perf_counter()
    mc = Mcgpu(coor=np.array([A, B]), dat=np.zeros(2), std2r=np.full(2, 1.0 / SIGMA**2),
               pdescr=[1, 1], pmint=LOWER, pmaxt=UPPER, seed=opts.seed, model=model_seed_style, **sizes)
    mc.burnin_and_search(progress=False)
    po, c2 = mc.pout, mc.chi2  # the seed's [nprm, nseq*niter] and [nseq*niter]
    print(f"\n[Mcgpu] burnin_and_search() in {time.perf_counter() - t0:.1f} s; pout {po.shape}, chi2 {c2.shape}; "
          f"smallest chi2 {c2.min():.3g} at (x, y) = ({po[0, c2.argmin()]:.6f}, {po[1, c2.argmin()]:.6f})")
    mc_roots = mc.result.roots(ROOT_TOL).x
    ok_mcgpu = report("Mcgpu", mc_roots, lambda r: mc.calcmodchi2(r)[()], exact)
    mc.result.plot(str(out / "solvsys_mcgpu_marginals.png"))
    same = np.array_equal(result.samples, mc.result.samples)
    print(f"\nsame seed -> identical samples in both runs: {same}")

    plot_curves(out / "solvsys_curves.png", {"modern API": roots, "Mcgpu": mc_roots}, exact, result.flat_samples)
    print(f"figures written to {out}/: solvsys_marginals.png, solvsys_mcgpu_marginals.png, solvsys_curves.png")
    if not (ok_modern and ok_mcgpu):
        print("FAILED: not every root was found", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
