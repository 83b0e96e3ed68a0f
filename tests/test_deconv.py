"""mw.deconv: coordinate descent (elastic net), Hogbom CLEAN, gridder, FITS, bad input (CPU, small images)."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg
from ulp import assert_close_ulp

import multiwalk as mw
from multiwalk.deconv import greedy

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "p9_meerkat_two_points"

N, P = 32, 15


def direct_matrix(psf: np.ndarray, n: int, m: int | None = None) -> np.ndarray:
    """The zero-padded convolution as a dense (n m x n m) matrix for an n x m image (m = n unless
    given), built from the definition."""
    m = n if m is None else m
    p = psf.shape[0]
    c = p // 2
    a = np.zeros((n * m, n * m))
    for k in range(n):
        for l in range(m):
            for i in range(max(0, k - c), min(n, k - c + p)):
                for j in range(max(0, l - c), min(m, l - c + p)):
                    a[i * m + j, k * m + l] = psf[i - k + c, j - l + c]
    return a


@pytest.fixture(scope="module")
def field():
    rng = np.random.default_rng(1)
    y, x = np.mgrid[:P, :P] - P // 2
    psf = np.exp(-(x**2 + y**2) / (2 * 1.5**2)) + 0.1 * np.cos(0.8 * x) * np.exp(-np.hypot(x, y) / 4)
    psf /= psf[P // 2, P // 2]
    truth = np.zeros((N, N))
    truth[10, 12], truth[20, 22], truth[5, 27] = 2.0, 1.0, 0.6
    a = direct_matrix(psf, N)
    dirty = (a @ truth.ravel()).reshape(N, N) + 0.002 * rng.standard_normal((N, N))
    return {"psf": psf, "truth": truth, "a": a, "dirty": dirty}


def test_lipschitz_sat_matches_direct_sums(field):
    # L_k = ||A e_k||^2: the column norms of the dense matrix; float64 both ways, 1e-10 relative
    direct = (field["a"] ** 2).sum(axis=0).reshape(N, N)
    np.testing.assert_allclose(greedy.lipschitz_map(field["psf"], (N, N)), direct, rtol=1e-10)


@pytest.mark.parametrize("shape, p", [
    ((8, 8), 5), ((8, 8), 6),  # P < N, odd and even
    ((7, 7), 7), ((8, 8), 8),  # P = N
    ((7, 7), 13), ((8, 8), 16),  # P = 2N - 1 and 2N (the largest Deconvolution takes)
    ((6, 9), 7), ((9, 6), 18), ((8, 5), 15),  # N != M, P up to 2 max(N, M)
])
def test_compact_fft_operators_match_the_dense_products(shape, p):
    # A x and A^T r on the compact circular grid (N + P/2, not N + P - 1) against the dense matrix
    # of the definition, both float64: 1e-10 of the largest entry (FFT rounding is ~1e-15).  The
    # cases include odd compact lengths (15 for (8, 8) and P = 16; 15 x 9 for (8, 5), P = 15),
    # which cannot be read off the rfft's half-length spectrum.
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(p)
    psf = rng.standard_normal((p, p))
    a = direct_matrix(psf, *shape)
    x, r = rng.standard_normal(shape), rng.standard_normal(shape)
    size = greedy.compact_fft_shape(shape, p)
    assert all(s <= f for s, f in zip(size, greedy.fft_size(shape, p)))  # never above the full grid
    with jax.enable_x64(True):
        fp = greedy.compact_psf_fft(jnp.asarray(psf), shape)
        forward = np.asarray(greedy.convolve_compact(jnp.asarray(x), fp, size))
        adjoint = np.asarray(greedy.correlate_compact(jnp.asarray(r), fp, size))
    want_forward, want_adjoint = (a @ x.ravel()).reshape(shape), (a.T @ r.ravel()).reshape(shape)
    assert forward.dtype == adjoint.dtype == np.float64
    np.testing.assert_allclose(forward, want_forward, rtol=0, atol=1e-10 * np.abs(want_forward).max())
    np.testing.assert_allclose(adjoint, want_adjoint, rtol=0, atol=1e-10 * np.abs(want_adjoint).max())


def test_proximal_operator():
    # the elastic net's prox with x >= 0, eq. (3.6): values worked by hand
    p = mw.deconv.proximal_step
    assert float(p(5.0, 0.0, 2.0, 1.0, 1.0)) == pytest.approx(2.0)  # (5 - 1) / 2
    assert float(p(0.5, 0.0, 2.0, 1.0, 1.0)) == 0.0  # below lam * alpha: stays 0
    assert float(p(5.0, 1.0, 2.0, 2.0, 0.5)) == pytest.approx((5 + 2 - 1) / (2 + 1))
    assert float(p(-3.0, 0.0, 1.0, 0.0, 1.0)) == 0.0  # never negative


def test_one_iteration_by_hand(field):
    # The seed's pseudo-code, one iteration, in numpy with the dense matrix: the pixel, its value
    # and the new gradient map, with the step L = sum PSF^2 (the column norm of pixels whose PSF
    # stays inside the image, as (10, 12)'s with P = 15 does).
    lam, alpha = 0.05, 0.9
    a, dirty = field["a"], field["dirty"]
    g = a.T @ dirty.ravel()
    lip = np.sum(field["psf"] ** 2)
    new = np.maximum(g - lam * alpha, 0) / (lip + (1 - alpha) * lam)
    k = int(np.argmax(np.abs(new)))
    assert (a[:, k] ** 2).sum() == pytest.approx(lip, rel=1e-12)
    r = mw.solve(mw.deconv.Deconvolution(dirty, field["psf"]),
                 mw.deconv.CoordinateDescent(lam=lam, alpha=alpha, max_iterations=1), progress=False)
    assert np.flatnonzero(r.model) == [k]
    assert r.model.ravel()[k] == pytest.approx(new[k], rel=1e-5)  # float32 against float64
    resid = dirty.ravel() - a[:, k] * new[k]
    np.testing.assert_allclose(r.residual.ravel(), resid, atol=1e-5)
    f = 0.5 * resid @ resid + lam * (alpha * new[k] + 0.5 * (1 - alpha) * new[k] ** 2)
    assert r.fun_trace[0] == pytest.approx(f, rel=1e-5)
    assert r.objective is r.fun_trace  # the older name reads the same array


def fista(a: np.ndarray, b: np.ndarray, lam: float, alpha: float, iterations: int) -> np.ndarray:
    """Accelerated proximal gradient (Beck & Teboulle) for the same problem, float64.

    ``a`` is stored sparse (a PSF of P^2 taps per column: ~4 % of the dense matrix's entries), so
    each iteration costs ~1/40 of two dense products; the step is 1 / ||a||_2^2 from the largest
    eigenvalue of a^T a (Lanczos)."""
    sparse_a = scipy.sparse.csr_array(a)
    sparse_at = scipy.sparse.csr_array(a.T)
    largest = scipy.sparse.linalg.eigsh(sparse_at @ sparse_a, k=1, which="LA", return_eigenvectors=False)[0]
    step = 1.0 / largest
    x = z = np.zeros(a.shape[1])
    t = 1.0
    for _ in range(iterations):
        v = z - step * (sparse_at @ (sparse_a @ z - b))
        x_new = np.maximum(v - step * lam * alpha, 0) / (1 + step * lam * (1 - alpha))
        t_new = (1 + np.sqrt(1 + 4 * t * t)) / 2
        z = x_new + (t - 1) / t_new * (x_new - x)
        x, t = x_new, t_new
    return x


@pytest.fixture(scope="module")
def converged(field):
    lam, alpha = 0.05, 0.8
    solver = mw.deconv.CoordinateDescent(lam=lam, alpha=alpha, epsilon=1e-6, max_iterations=4000, refresh_every=100)
    r = mw.solve(mw.deconv.Deconvolution(field["dirty"], field["psf"]), solver, progress=False)
    return r, lam, alpha


def test_objective_never_increases(field):
    # refresh_every=1: every history value is the exact objective; a coordinate minimisation
    # never raises it.  Tolerance: float32 rounding of values ~O(1), 1e-6 relative.
    solver = mw.deconv.CoordinateDescent(lam=0.05, alpha=0.8, epsilon=1e-5, max_iterations=150, refresh_every=1)
    r = mw.solve(mw.deconv.Deconvolution(field["dirty"], field["psf"]), solver, progress=False)
    h = r.fun_trace
    assert h.size > 10 and np.all(np.diff(h) <= 1e-6 * h[0])
    assert h[-1] < 0.5 * h[0]
    assert r.fun == pytest.approx(h[-1], rel=1e-4)  # the final exact objective agrees with the history


def test_optimality_conditions_and_fista(field, converged):
    r, lam, alpha = converged
    assert r.success, r.message
    a, b = field["a"], field["dirty"].ravel()
    x = r.model.ravel().astype(np.float64)
    g = a.T @ (b - a @ x)  # minus the data term's gradient
    lip = (a**2).sum(axis=0)
    # KKT: x > 0: g = lam alpha + lam (1 - alpha) x; x = 0: g <= lam alpha.  Convergence means no
    # pixel step above epsilon=1e-6, i.e. a KKT residual below L_max * 1e-6 (~4e-6), plus float32
    # rounding of the gradient map (~1e-6 of |A^T b| ~ 20): 5e-5 absolute.
    tol = 5e-5
    on = x > 0
    assert np.abs(g[on] - lam * alpha - lam * (1 - alpha) * x[on]).max() < tol
    assert (g[~on] - lam * alpha).max() < tol
    ref = fista(a, b, lam, alpha, 3000)

    def objective(v):
        res = b - a @ v
        return 0.5 * res @ res + lam * (alpha * np.abs(v).sum() + 0.5 * (1 - alpha) * v @ v)

    # same optimum of a strictly convex problem (alpha < 1): objectives within 1e-6 relative,
    # models within 1e-3 of the brightest pixel (2 Jy)
    assert objective(x) == pytest.approx(objective(ref), rel=1e-6)
    assert np.abs(x - ref).max() < 2e-3
    assert lip.min() > 0


def test_point_sources_at_the_right_pixels(field, converged):
    r, lam, _ = converged
    truth = field["truth"]
    for (i, j) in np.argwhere(truth > 0):
        # flux within the 3x3 neighbourhood: L1 shrinks it by ~lam/L (~0.05) and the noise spreads it
        got = r.model[max(i - 1, 0): i + 2, max(j - 1, 0): j + 2].sum()
        assert got == pytest.approx(truth[i, j], abs=0.08)
        assert np.unravel_index(np.argmax(r.model[max(i - 1, 0): i + 2, max(j - 1, 0): j + 2]), (3, 3)) == (1, 1)
    import scipy.ndimage

    near = scipy.ndimage.binary_dilation(truth > 0, np.ones((3, 3)))
    assert r.model[~near].sum() < 0.1  # little flux elsewhere (noise 0.002 per pixel over ~1000 pixels)


def test_clean_on_a_synthetic_field(field):
    r = mw.solve(mw.deconv.Deconvolution(field["dirty"], field["psf"]),
                 mw.deconv.Clean(gain=0.1, threshold=0.01, max_iterations=2000), progress=False)
    assert r.success and np.abs(r.residual).max() < 0.01 + 1e-6  # stopped below the threshold
    for (i, j) in np.argwhere(field["truth"] > 0):
        # CLEAN puts (almost) all of a source's flux on its pixel; 0.05 Jy: threshold + noise
        assert r.model[i - 1: i + 2, j - 1: j + 2].sum() == pytest.approx(field["truth"][i, j], abs=0.05)
    # the residual is the dirty image minus the model convolved with the PSF (dense, float64)
    resid = field["dirty"].ravel() - field["a"] @ r.model.ravel()
    np.testing.assert_allclose(r.residual.ravel(), resid, atol=1e-5)
    # the greedy choice: each peak found is no larger than the one before it, up to gain
    assert r.steps[0] == pytest.approx(np.abs(field["dirty"]).max(), rel=1e-6)


def test_images_are_read_only_and_kept_on_the_device(field):
    # the problem's images are its own copies, read-only: the copies kept on the device stay theirs
    problem = mw.deconv.Deconvolution(field["dirty"], field["psf"])
    with pytest.raises(ValueError, match="read-only"):
        problem.dirty[0, 0] = 1.0
    with pytest.raises(AttributeError, match="make a new Deconvolution"):
        problem.psf = field["psf"]
    field["dirty"][0, 0] += 0.0  # the caller's array is not the problem's (still writable)
    # a pickled or deep-copied problem's images are read-only too (NumPy makes them writable)
    for twin in (pickle.loads(pickle.dumps(problem)), copy.deepcopy(problem)):
        with pytest.raises(ValueError, match="read-only"):
            twin.psf[0, 0] = 1.0
    first = problem.device_images()
    assert problem.device_images() is first  # put on the device once
    for on_device, host in zip(first, (problem.dirty, problem.psf, problem.model)):
        np.testing.assert_array_equal(np.asarray(on_device), host)  # a copy: bit for bit


@pytest.mark.parametrize("solver", [mw.deconv.Clean(gain=0.1, threshold=0.01, max_iterations=300),
                                    mw.deconv.CoordinateDescent(lam=0.01, alpha=0.5, max_iterations=300)],
                         ids=["clean", "coordinate_descent"])
def test_a_second_solve_sends_no_image(field, solver):
    # A second solve of a problem starts from its images on the device and makes the exact residual
    # there.  The host images are then overwritten with NaN behind the problem's back: a solve that
    # sent them again would give NaN; this one gives the first solve's result.  The same programs on
    # the same images, but XLA's FFT on a CPU may round a new array's transform differently from
    # one call to the next (docs/deconvolution.md, "Reproducibility on the CPU"): the decisions
    # exactly, the images and the objective to 64 ulp of the images' largest value (the FFT's
    # rounding is relative to its largest terms; NaN is infinitely many ulps away).
    problem = mw.deconv.Deconvolution(field["dirty"], field["psf"])
    first = mw.solve(problem, solver, progress=False)
    for name in ("dirty", "psf", "model"):
        problem.__dict__[name] = np.full_like(getattr(problem, name), np.nan)
    second = mw.solve(problem, solver, progress=False)
    assert second.status == first.status and second.iterations == first.iterations
    np.testing.assert_array_equal(second.model != 0, first.model != 0)  # the same pixels
    for got, want in ((second.model, first.model), (second.residual, first.residual)):
        assert_close_ulp(got, want, 64, scale=float(np.abs(want).max()))
    assert_close_ulp(second.fun, first.fun, 64)


def test_coordinate_descent_checkpoint_of_other_blocks_or_fft_grid_is_refused(field, tmp_path):
    # Other blocks make other block arrays: padded from the saved ones they would resume a wrong run
    # (stale block maxima); the checkpoint is refused with the file and the options to resume with.
    problem = mw.deconv.Deconvolution(field["dirty"], field["psf"])
    ck = tmp_path / "cd.npz"

    def stop(info):
        raise KeyboardInterrupt

    cd = mw.deconv.CoordinateDescent(lam=0.01, max_iterations=50, kernel="xla", block=16)
    part = mw.solve(problem, cd, progress=False, checkpoint=ck, callback=stop, chunk_seconds=1e-9)
    assert part.status == mw.Status.INTERRUPTED
    other = mw.deconv.CoordinateDescent(lam=0.01, max_iterations=50, kernel="xla", block=8)
    with pytest.raises(ValueError, match=r"cd\.npz: this CoordinateDescent checkpoint was written with other blocks .*"
                       r"it holds blocks of 16 x 16, block=\(16, 16\), kernel='xla': resume with"):
        mw.solve(problem, other, progress=False, resume=ck)
    pallas = mw.deconv.CoordinateDescent(lam=0.01, max_iterations=50, kernel="pallas", block=16)  # the other form
    with pytest.raises(ValueError, match=r"cd\.npz: this CoordinateDescent checkpoint was written .* by the other form"):
        mw.solve(problem, pallas, progress=False, resume=ck)
    # A PSF spectrum on another FFT grid (the full N + P - 1 one, as another version kept): refused,
    # the message says why and what to do, not that the blocks differ.
    from multiwalk.checkpoint import read_checkpoint, write_leaves

    meta, leaves = read_checkpoint(ck)
    full = greedy.fft_size((N, N), P)
    write_leaves(ck, meta, [*leaves[:-1], np.zeros((full[0], full[1] // 2 + 1), leaves[-1].dtype)])
    with pytest.raises(ValueError, match=r"cd\.npz: this CoordinateDescent checkpoint was written by another version "
                       r"of multiwalk: its PSF spectrum is 48 x 25 \(another FFT grid\), this version's 40 x 21"):
        mw.solve(problem, cd, progress=False, resume=ck)


def test_a_checkpoint_of_other_blocks_names_them_and_resumes_with_them(field, tmp_path):
    # A checkpoint of other blocks (such as another version's default, block=None both times) is
    # refused with the blocks it holds named; resumed with that block= it goes on.
    problem = mw.deconv.Deconvolution(field["dirty"], field["psf"])
    ck = tmp_path / "cd.npz"

    def stop(info):
        raise KeyboardInterrupt

    written = mw.deconv.CoordinateDescent(lam=0.01, max_iterations=20, kernel="pallas", block=(8, 16))
    part = mw.solve(problem, written, progress=False, checkpoint=ck, callback=stop, chunk_seconds=1e-9)
    assert part.status == mw.Status.INTERRUPTED and part.iterations < 20
    now = mw.deconv.CoordinateDescent(lam=0.01, max_iterations=20, kernel="pallas", block=(16, 8))
    with pytest.raises(ValueError, match=r"written with other blocks .*it holds blocks of 8 x 16, block=\(8, 16\): "
                       r"resume with"):
        mw.solve(problem, now, progress=False, resume=ck)
    again = mw.deconv.CoordinateDescent(lam=0.01, max_iterations=20, kernel="pallas", block=(8, 16))
    resumed = mw.solve(problem, again, progress=False, resume=ck)
    whole = mw.solve(problem, again, progress=False)
    assert resumed.iterations == whole.iterations == 20
    np.testing.assert_array_equal(resumed.model, whole.model)  # a resume is bit for bit one run


def test_a_diverging_update_window_fails_and_says_so():
    # A PSF with side lobes reaching far past a 5 x 5 update window: the truncated updates overshoot
    # and the model ends worse than the start (exact objective 1.1e5 against 1.0e4 at the start, far
    # from any rounding): FAILED, saying why, not MAX_STEPS with "raise max_iterations".
    import scipy.signal

    n, rng = 128, np.random.default_rng(0)
    c = n // 2
    r = np.hypot(*(np.mgrid[:n, :n] - c))
    psf = np.exp(-0.5 * (r / 3.0) ** 2) + 0.05 * np.cos(r / 2.5) * np.exp(-r / (n / 8))
    truth = np.zeros((n, n))
    idx = rng.integers(n // 8, n - n // 8, size=(200, 2))
    truth[idx[:, 0], idx[:, 1]] = rng.uniform(0.1, 2.0, 200)
    dirty = scipy.signal.fftconvolve(truth, psf, mode="full")[c : c + n, c : c + n]
    problem = mw.deconv.Deconvolution(dirty, psf)
    approx = mw.deconv.CoordinateDescent(lam=1e-3, max_iterations=500, update_window=5, kernel="xla")
    result = mw.solve(problem, approx, progress=False)
    start = 0.5 * float(np.sum(problem.dirty.astype(np.float64) ** 2))  # + lam * penalty(0) = 0
    assert result.status == mw.Status.FAILED and result.fun > 2 * start
    assert "diverged" in result.message and "use a larger update_window" in result.message


def test_an_objective_rounded_above_the_start_has_not_diverged():
    # A warm start near the optimum (model=) whose run barely moves can end one float32 ulp above its
    # start's objective (seen: 0.3165034 -> +3e-8 after 200 iterations with update_window=9, every
    # pixel's change < 2e-4): not a divergence.  Twice the start's objective, or NaN, still is.
    rng = np.random.default_rng(0)
    problem = mw.deconv.Deconvolution(rng.normal(size=(16, 16)), np.ones((5, 5)), model=rng.uniform(0, 1, (16, 16)))
    cd = mw.deconv.CoordinateDescent(lam=1e-2, update_window=3, kernel="xla")
    dirty, _, start = problem.device_images()
    at_start = np.float32(0.5 * jnp.sum(dirty * dirty) + cd._penalty(start))  # as _diverged computes it
    assert cd._diverged(problem, float(np.nextafter(at_start, np.float32(np.inf)))) is None  # one ulp above
    assert "diverged" in cd._diverged(problem, 2.0 * float(at_start))
    assert "diverged" in cd._diverged(problem, float("nan"))


def test_gridder_round_trip_is_adjoint():
    # <dirty2vis(m), v> = <m, vis2dirty(v)> (real part): ducc0 at epsilon 1e-7, so 1e-5 relative
    from multiwalk.deconv import major_cycle as mc

    rng = np.random.default_rng(3)
    uvw = rng.uniform(-300, 300, (200, 3))
    uvw[:, 2] *= 0.1
    freqs = np.array([1.0e9, 1.1e9])
    cell = 2e-5
    vis = rng.standard_normal((200, 2)) + 1j * rng.standard_normal((200, 2))
    model = rng.standard_normal((64, 64))
    lhs = np.vdot(mc.predict(model, uvw, freqs, cell), vis).real
    rhs = np.sum(model * mc.grid(vis, uvw, freqs, np.ones((200, 2)), 64, cell)) * 400  # grid divides by the weight sum
    assert lhs == pytest.approx(rhs, rel=1e-5)


def test_fits_round_trip_with_wcs(tmp_path):
    from multiwalk.io.fits import read_image, write_image

    img = np.random.default_rng(4).standard_normal((64, 48)).astype(np.float32)
    cell = np.deg2rad(0.5 / 3600)
    write_image(tmp_path / "a.fits", img, cell, ra=np.deg2rad(10.0), dec=np.deg2rad(-30.0), beam=(2.0, 1.0, 0.3))
    back, wcs = read_image(tmp_path / "a.fits")
    np.testing.assert_array_equal(back, img)  # float32 stored, exactly
    assert wcs.wcs.ctype[0] == "RA---SIN" and wcs.wcs.cdelt[1] == pytest.approx(0.5 / 3600)
    # the reference pixel (FITS, 1-based) is the phase centre
    ra, dec = wcs.wcs_pix2world([[48 // 2 + 1, 64 // 2 + 1]], 1)[0]
    assert ra == pytest.approx(10.0) and dec == pytest.approx(-30.0)
    with pytest.raises(FileNotFoundError, match="nope.fits"):
        read_image(tmp_path / "nope.fits")


@pytest.mark.parametrize(
    "make, pattern",
    [
        (lambda d, p: mw.deconv.Deconvolution(d, np.roll(p, 1, axis=0)), r"maximum at the centre"),
        (lambda d, p: mw.deconv.Deconvolution(d, p[:, :-1]), r"psf must be square"),
        (lambda d, p: mw.deconv.Deconvolution(d[:4, :4], np.pad(p, 5)), r"larger than twice the image"),
        (lambda d, p: mw.deconv.Deconvolution(np.where(d > 1, np.nan, d), p), r"dirty has .* non-finite"),
        (lambda d, p: mw.deconv.Deconvolution(d[None], p), r"dirty must be 2-D"),
        (lambda d, p: mw.deconv.CoordinateDescent(lam=-1.0), r"lam must be >= 0"),
        (lambda d, p: mw.deconv.CoordinateDescent(lam=1.0, alpha=1.5), r"alpha must be in \[0, 1\]"),
        (lambda d, p: mw.deconv.CoordinateDescent(lam=1.0, update_window=4), r"update_window must be odd"),
        (lambda d, p: mw.deconv.Clean(gain=0.0), r"gain must be in \(0, 1\]"),
        (lambda d, p: mw.solve(mw.Problem(objective=lambda x: x @ x, lower=[0.0], upper=[1.0]),
                               mw.deconv.Clean(), progress=False), r"problem must be a multiwalk.deconv.Deconvolution"),
    ],
)
def test_bad_input(field, make, pattern):
    with pytest.raises((ValueError, TypeError), match=pattern):
        make(field["dirty"], field["psf"])


@pytest.mark.skipif(not DATA.is_dir(), reason="the MeerKAT data (../shared/data) is not beside this checkout")
def test_meerkat_two_sources_found(tmp_path):
    # The seed's worked example at 256 x 256 pixels of 1 arcsec (a few seconds on 2 cores):
    # CLEAN through the major cycle finds the two sources (2.5 and 1.4 Jy, ~35 arcsec apart)
    # and leaves a residual far below the dirty image's.
    from multiwalk.commands.image import read_visibilities

    vis, uvw, freqs = read_visibilities(DATA / "uvw.fits", DATA / "vis.fits", DATA / "freq.fits")
    cell = np.deg2rad(1.0 / 3600)
    r = mw.deconv.image(vis, uvw, freqs, 256, cell, mw.deconv.Clean(gain=0.1, threshold=0.01, max_iterations=1000),
                        major_cycles=2, progress=False)
    import scipy.ndimage

    labels, count = scipy.ndimage.label(r.model > 0.05, structure=np.ones((3, 3)))
    fluxes = sorted(float(r.model[labels == k].sum()) for k in range(1, count + 1))
    assert count == 2, fluxes
    # total flux ~ the amplitude on the shortest baseline (29 m: its fringe, 2.4 arcmin, spans both
    # sources), 3.897 Jy; 3%: 1-arcsec pixels put the sources off pixel centres
    shortest = int(np.argmin(np.hypot(uvw[:, 0], uvw[:, 1])))
    assert sum(fluxes) == pytest.approx(np.abs(vis[shortest]).mean(), rel=0.03)
    assert r.residual_rms[-1] < 0.01 * np.sqrt(np.mean(r.dirty**2))
