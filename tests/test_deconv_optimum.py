"""CoordinateDescent with its defaults reaches the optimum, and says SUCCESS only there.

The reference is independent of the library: the explicit zero-padded convolution as a dense
matrix A (built from the definition in deconv/problem.py), and the elastic net with x >= 0
written as a non-negative least-squares problem solved exactly by scipy's active-set NNLS:

    0.5 ||A x - b||^2 + lam (alpha sum x + (1 - alpha)/2 ||x||^2) = 0.5 ||R x - d||^2 + const,  x >= 0,

with R^T R = A^T A + lam (1 - alpha) I (Cholesky; alpha < 1 keeps it positive definite) and
R^T d = A^T b - lam alpha.  PSFs smaller than, as large as and larger than the image: the
larger the PSF, the more of every update falls outside the image, where the gradient map's
shifted-autocorrelation update is not exact.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize

import multiwalk as mw

N = 20
LAM, ALPHA = 0.02, 0.8


def convolution_matrix(psf: np.ndarray, n: int) -> np.ndarray:
    """(n^2 x n^2): column k is the PSF centred on pixel k, cut to the n x n image."""
    p = psf.shape[0]
    c = p // 2
    a = np.zeros((n, n, n, n))
    for k in range(n):
        for m in range(n):
            rows, cols = slice(max(0, k - c), min(n, k - c + p)), slice(max(0, m - c), min(n, m - c + p))
            a[rows, cols, k, m] = psf[rows.start - k + c : rows.stop - k + c, cols.start - m + c : cols.stop - m + c]
    return a.reshape(n * n, n * n)


def objective(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> float:
    r = b - a @ x
    return float(0.5 * r @ r + LAM * (ALPHA * np.abs(x).sum() + 0.5 * (1 - ALPHA) * x @ x))


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The exact minimiser (float64), by NNLS on the Cholesky form (module doc)."""
    r = scipy.linalg.cholesky(a.T @ a + LAM * (1 - ALPHA) * np.eye(a.shape[1]))  # upper: r.T @ r
    d = scipy.linalg.solve_triangular(r, a.T @ b - LAM * ALPHA, trans="T")
    x, _ = scipy.optimize.nnls(r, d, maxiter=50 * a.shape[1])
    return x


@pytest.fixture(scope="module", params=[9, 20, 39], ids=["psf-smaller", "psf-as-large", "psf-larger"])
def case(request) -> dict:
    """Five point sources (two at edges) under a PSF with ringing side lobes, plus noise."""
    p = request.param
    rng = np.random.default_rng(p)
    y, x = np.mgrid[:p, :p] - p // 2
    r = np.hypot(x, y)
    psf = np.exp(-0.5 * (r / 1.5) ** 2) + 0.1 * np.cos(r / 2.0) * np.exp(-r / 6)
    psf /= psf[p // 2, p // 2]
    truth = np.zeros((N, N))
    truth[[3, 10, 15, 0, 19], [4, 9, 16, 11, 0]] = [1.5, 1.0, 0.7, 0.8, 1.2]
    a = convolution_matrix(psf, N)
    b = a @ truth.ravel() + 0.01 * rng.standard_normal(N * N)
    best = reference(a, b)
    return {"psf": psf, "a": a, "b": b, "best": best, "f_best": objective(a, b, best)}


def solve(case: dict, **options) -> mw.deconv.DeconvolutionResult:
    problem = mw.deconv.Deconvolution(case["b"].reshape(N, N), case["psf"])
    return mw.solve(problem, mw.deconv.CoordinateDescent(lam=LAM, alpha=ALPHA, **options), progress=False)


def check_optimal(case: dict, r: mw.deconv.DeconvolutionResult) -> None:
    assert r.success, r.message
    x = r.model.ravel().astype(np.float64)
    # Relative objective gap: the default epsilon (1e-6 of the image's scale) gives ~1e-7
    # (float32 model); 1e-6 is the promise.
    gap = (objective(case["a"], case["b"], x) - case["f_best"]) / case["f_best"]
    assert -1e-9 < gap <= 1e-6, gap
    # The optimality condition on the exact gradient (float64, dense): no pixel's proximal step
    # exceeds the tolerance the run reported, up to float32 rounding of its FFT gradient map
    # (~1e-7 of the map's scale, a tenth of the tolerance): a factor 2.
    lip = float(np.sum(case["psf"] ** 2))
    g = case["a"].T @ (case["b"] - case["a"] @ x)
    step = np.maximum(g + x * lip - LAM * ALPHA, 0) / (lip + LAM * (1 - ALPHA)) - x
    assert np.abs(step).max() <= 2 * r.stats["tolerance"]
    assert r.stats["max_step"] <= 2 * r.stats["tolerance"]


def test_defaults_reach_the_optimum(case):
    check_optimal(case, solve(case))


@pytest.mark.parametrize("case", [39], indirect=True, ids=["psf-larger"])
def test_convergence_is_verified_without_periodic_refreshes(case):
    # refresh_every=None: the updated map alone decides when it looks converged; an exact map
    # must confirm it, and the run goes on where it does not (several times here).
    r = solve(case, refresh_every=None)
    check_optimal(case, r)
    assert r.stats["refreshes"] >= 2


@pytest.mark.parametrize("case", [9], indirect=True, ids=["psf-smaller"])
def test_max_steps_is_not_success(case):
    # Out of iterations far from the optimum: MAX_STEPS, with the exact largest step in the message.
    r = solve(case, max_iterations=20)
    assert r.status == mw.Status.MAX_STEPS
    assert f"{r.stats['max_step']:.3g}" in r.message and r.stats["max_step"] > r.stats["tolerance"]
