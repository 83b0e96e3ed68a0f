"""CoordinateDescent and BlockCoordinateDescent with their defaults reach the optimum, and say
SUCCESS only there.

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

from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
from psfs import ringing_psf

import multiwalk as mw

N = 20
LAM, ALPHA = 0.02, 0.8
_SHARED = Path("shared") / "data" / "p9_meerkat_two_points"
# beside the checkout (../shared) or beside the folder of worktrees (../../shared)
MEERKAT = next((p / _SHARED for p in Path(__file__).resolve().parents[1:4] if (p / _SHARED).is_dir()), None)


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
    psf = ringing_psf(p, lobe=0.1, period=2.0, decay=6)
    truth = np.zeros((N, N))
    truth[[3, 10, 15, 0, 19], [4, 9, 16, 11, 0]] = [1.5, 1.0, 0.7, 0.8, 1.2]
    a = convolution_matrix(psf, N)
    b = a @ truth.ravel() + 0.01 * rng.standard_normal(N * N)
    best = reference(a, b)
    return {"psf": psf, "a": a, "b": b, "best": best, "f_best": objective(a, b, best)}


def solve(case: dict, kind: type = mw.deconv.CoordinateDescent, **options) -> mw.deconv.DeconvolutionResult:
    problem = mw.deconv.Deconvolution(case["b"].reshape(N, N), case["psf"])
    return mw.solve(problem, kind(lam=LAM, alpha=ALPHA, **options), progress=False)


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


@pytest.mark.parametrize("case", [9, 11, 39], indirect=True, ids=["psf-smaller", "psf-smaller-odd-grid", "psf-larger"])
def test_block_defaults_reach_the_optimum(case):
    # Many pixels per iteration, the same objective and stopping rule: the same promise.  With
    # the PSF larger than the image every block's majorant is above the objective at the edges.
    # P = 11: the compact FFT grid is 25 x 25, an odd length (greedy.compact_fft_shape).
    check_optimal(case, solve(case, mw.deconv.BlockCoordinateDescent))


@pytest.mark.parametrize("case", [39], indirect=True, ids=["psf-larger"])
def test_convergence_is_verified_without_periodic_refreshes(case):
    # refresh_every=None: the updated map alone decides when it looks converged; an exact map
    # must confirm it, and the run goes on where it does not (several times here).
    r = solve(case, refresh_every=None)
    check_optimal(case, r)
    assert r.stats["refreshes"] >= 2


@pytest.mark.parametrize("case", [9], indirect=True, ids=["psf-smaller"])
@pytest.mark.parametrize(("kind", "budget"), [(mw.deconv.CoordinateDescent, 20), (mw.deconv.BlockCoordinateDescent, 2)],
                         ids=["serial", "block"])
def test_max_steps_is_not_success(case, kind, budget):
    # Out of iterations far from the optimum: MAX_STEPS, with the exact largest step in the message.
    r = solve(case, kind, max_iterations=budget)
    assert r.status == mw.Status.MAX_STEPS
    assert f"{r.stats['max_step']:.3g}" in r.message and r.stats["max_step"] > r.stats["tolerance"]


def test_block_programme_matches_nnls():
    # The block's non-negative quadratic programme, cold and warm started, against scipy's NNLS on
    # its Cholesky form (float64).  q: the Gram matrix of a Gaussian beam (sigma 6 pixels: its
    # autocorrelation exp(-r^2 / (4 sigma^2))) at 24 pixels 1 apart (neighbours 0.993 correlated,
    # as under a wide beam) and 5 far ones, plus a ridge of 1e-4 of its diagonal; 3 slots not live.
    # Tolerance 1e-5 of the optimal value: float32 solves of a matrix of condition ~1e5 put ~1e-2
    # relative errors in z along its weak directions, which cost their square times 1e-5 in value.
    from multiwalk.deconv.block_coordinate_descent import nonnegative_qp

    rng = np.random.default_rng(3)
    points = np.concatenate([np.stack(np.divmod(np.arange(24), 6), axis=1), rng.uniform(20, 60, (5, 2))])
    q = np.exp(-np.sum((points[:, None] - points[None]) ** 2, axis=-1) / (4 * 6.0**2)) + 1e-4 * np.eye(len(points))
    truth = np.where(rng.random(len(points)) < 0.3, rng.uniform(0.5, 2, len(points)), 0.0)
    d = q @ truth + 0.05 * rng.standard_normal(len(points))
    live = np.ones(len(points), bool)
    live[[2, 11, 26]] = False
    r = scipy.linalg.cholesky(q[np.ix_(live, live)])
    best = np.zeros(len(points))
    best[live], _ = scipy.optimize.nnls(r, scipy.linalg.solve_triangular(r, d[live], trans="T"))

    def value(z):
        return 0.5 * z @ q @ z - d @ z

    warm = np.where(live & (rng.random(len(points)) < 0.5), rng.uniform(0, 1, len(points)), 0.0)
    for start in (np.zeros(len(points)), warm):
        z, solves = nonnegative_qp(*(np.asarray(a, np.float32) for a in (q, d, start)), live, np.float32(1e-6), 200)
        z = np.asarray(z, np.float64)
        assert (z >= 0).all() and (z[~live] == 0).all()
        assert int(solves) < 200  # it stopped by its own rule
        assert value(z) <= value(start)
        assert value(z) - value(best) <= 1e-5 * abs(value(best)), (value(z), value(best))


@pytest.mark.skipif(MEERKAT is None, reason="the MeerKAT data (shared/data/p9_meerkat_two_points) is not beside this checkout")
def test_command_cd_defaults_image_meerkat(tmp_path):
    # `multiwalk image --solver cd` with its defaults (BlockCoordinateDescent, lam 0.5) on the seed's
    # two point sources at the seed's 0.5 arcsec cells (the beam ~40 pixels wide, neighbouring
    # pixels 0.9997 correlated), 256 pixels, two major cycles: every minor cycle meets the stopping
    # rule (exit status 0, not MAX_STEPS).  The model: 2.5 and 1.4 Jy within one pixel of the
    # sources (CASA's pixels (219, 255) and (286, 228) of 512, here 128 less; 2%: the L1 term's bias
    # is lam / sum PSF^2 = 1.4e-4 Jy per model pixel), at least 90% of its flux there.  The
    # residual rms (2.8e-4 measured) below 1e-3 Jy/beam: CLEAN's is 1.6e-3 here (threshold 0.01).
    from multiwalk.cli import main
    from multiwalk.io.fits import read_image

    files = [f"--{name}={MEERKAT / f'{name}.fits'}" for name in ("uvw", "vis", "freq")]
    flags = ["--npix=256", "--cell=0.5arcsec", "--ra=0deg", "--dec=-30deg", "--major-cycles=2", f"--out={tmp_path}"]
    assert main(["image", *files, *flags]) == 0
    model, _ = read_image(tmp_path / "model.fits")
    residual, _ = read_image(tmp_path / "residual.fits")
    near = [model[r - 1 : r + 2, c - 1 : c + 2].sum() for r, c in ((219 - 128, 255 - 128), (286 - 128, 228 - 128))]
    assert near == pytest.approx([2.5, 1.4], rel=0.02)
    assert sum(near) >= 0.9 * model.sum()
    assert np.sqrt(np.mean(residual**2)) < 1e-3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lam": -1.0}, r"lam must be >= 0"),
        ({"lam": 1.0, "epsilon": 0.0}, r"epsilon must be > 0"),
        ({"lam": 1.0, "ridge": 0.0}, r"ridge must be > 0 \(relative to sum PSF\^2"),
        ({"lam": 1.0, "block": 2}, r"block must be an integer >= 4, got 2"),
        ({"lam": 1.0, "max_solves": 0}, r"max_solves must be a positive integer"),
    ],
)
def test_block_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        mw.deconv.BlockCoordinateDescent(**options)


def test_command_refuses_refresh_every_for_block_cd(tmp_path, capsys):
    # --refresh-every belongs to the serial solver: with --solver cd it is refused, not ignored,
    # before any file is read.
    from multiwalk.cli import main

    files = [f"--{name}={tmp_path / f'{name}.fits'}" for name in ("uvw", "vis", "freq")]
    with pytest.raises(SystemExit):
        main(["image", *files, "--solver=cd", "--refresh-every=10", f"--out={tmp_path}"])
    assert "--refresh-every 10 applies to --solver cd-serial only" in capsys.readouterr().err
