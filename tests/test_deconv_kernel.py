"""CoordinateDescent's fused Pallas update (interpret mode on the CPU) against its XLA form; the
Lipschitz choice on a PSF twice the image; options.  Small images: a few seconds each."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from psfs import ringing_psf
from ulp import assert_close_ulp

import multiwalk as mw

N = 40
ON_GPU = jax.default_backend() == "gpu"
PALLAS = "pallas" if ON_GPU else "pallas (interpret mode)"  # the kernel form's name in stats here


def field(n: int, p: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Point sources convolved (zero-padded) with a P x P PSF with ringing side lobes, plus noise."""
    import scipy.signal

    rng = np.random.default_rng(seed)
    psf = ringing_psf(p, lobe=0.05, period=2.5, decay=8)
    truth = np.zeros((n, n))
    idx = rng.integers(2, n - 2, (8, 2))
    truth[idx[:, 0], idx[:, 1]] = rng.uniform(0.5, 2.0, 8)
    dirty = scipy.signal.fftconvolve(truth, psf, mode="same") + 0.01 * rng.standard_normal((n, n))
    return dirty, psf


class SignedMapCD(mw.deconv.CoordinateDescent):
    """The kernel form that reads the signed Lipschitz map instead of block marks (same results)."""

    constant_lipschitz_kernel = False


class UnalignedTripCD(mw.deconv.CoordinateDescent):
    """Trips of 4 iterations with a refresh every 9: a refresh falls inside a trip, whose later
    iterations then wait for the next trip's first (the no-op steps between)."""

    def trip_length(self) -> int:
        return 4


def both(problem: mw.deconv.Deconvolution, solver: type = mw.deconv.CoordinateDescent, **options) -> tuple:
    """The same solver in the XLA form and as the Pallas kernel (interpret mode here)."""
    return tuple(mw.solve(problem, solver(kernel=k, **options), progress=False) for k in ("xla", "pallas"))


@pytest.mark.parametrize(
    "n, p, options, warm",
    [
        # N x N in blocks of 8 x 16: 5 x 3 blocks (the pick in XLA: not powers of two)
        (N, 2 * N, {}, True),  # PSF twice the image (the major cycle's): every update touches the whole map
        # small PSF: only the touched blocks run, refreshes in between; the kernel reads the signed
        # Lipschitz map (the other cases: one L as a scalar, block marks)
        (N, 15, {"refresh_every": 9, "solver": SignedMapCD}, False),
        (N, 15, {"refresh_every": 9, "solver": UnalignedTripCD}, False),  # refreshes inside the kernel form's trips
        (N, 2 * N, {"update_window": 9, "refresh_every": 7}, False),  # truncated window
        # 32 x 32: 4 x 2 blocks, the pick in its own kernel (pick_step) in the Pallas form
        (32, 64, {}, True),
        (32, 15, {"refresh_every": 9, "solver": SignedMapCD}, False),
        (32, 15, {"refresh_every": 9, "solver": UnalignedTripCD}, False),
    ],
)
def test_kernel_equals_xla_form(n, p, options, warm):
    dirty, psf = field(n, p, seed=p)
    # A warm start makes the model non-zero before the first step: the kernel must read it there
    # (its masked load of x follows the negated Lipschitz constants).
    start = np.where(dirty > 0.8 * dirty.max(), 0.3, 0.0) if warm else None
    problem = mw.deconv.Deconvolution(dirty, psf, model=start)
    a, b = both(problem, lam=0.01, alpha=0.9, epsilon=1e-5, max_iterations=45, block=(8, 16), **options)
    assert b.stats["kernel"] == PALLAS and a.stats["kernel"] == "xla"
    # The same pixels in the same order, and the same values up to float32 rounding of the two
    # compilations (fused multiply-adds may differ): 1e-5 relative.  On the CPU both are XLA code
    # and agree bit for bit; on an H200 too (benchmarks/deconv.py checks 512^2).
    assert a.iterations == b.iterations == 45 and a.stats["refreshes"] == b.stats["refreshes"]
    np.testing.assert_array_equal(a.model != 0, b.model != 0)
    np.testing.assert_allclose(b.model, a.model, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.fun_trace, a.fun_trace, rtol=1e-5)
    np.testing.assert_allclose(b.steps, a.steps, rtol=1e-5, atol=1e-7)


def test_block_marks_update_equals_lipschitz_map_update():
    # One fused update (interpret mode), called directly: with one L for every pixel, the form that
    # takes L as a scalar and block marks must return what the form that reads the signed L map
    # returns, set the mark of the block holding (i, j), and read x only in marked blocks.
    import jax.numpy as jnp

    from multiwalk.deconv import coordinate_descent_kernel as cdk
    from multiwalk.deconv import greedy

    rng = np.random.default_rng(7)
    n, k = 30, 21  # 30 x 30 image in (8, 16) blocks, padded to 32 x 32: a ragged edge; 21 x 21 kernel
    geo = greedy.geometry((n, n), (k, k), (k // 2, k // 2), (8, 16))
    pad = cdk.kernel_pad(geo, (k, k))
    kernel = jnp.pad(jnp.asarray(rng.standard_normal((k, k)), jnp.float32), ((pad[0],) * 2, (pad[1],) * 2))
    g = greedy.pad_image(jnp.asarray(rng.standard_normal((n, n)), jnp.float32), geo)
    x = np.zeros(geo.padded, np.float32)
    x[3, 20] = 0.7  # a non-zero pixel in block (0, 1)
    x[25, 5] = 0.4  # and one in block (3, 0), which the marks below leave unmarked: the marks form must ignore it
    lip = np.float32(2.5)
    signed = np.full(geo.padded, lip, np.float32)
    signed[3, 20] = -lip
    marks = np.zeros(geo.blocks, np.int32)
    marks[0, 1] = 1
    x_seen = x.copy()
    x_seen[25, 5] = 0.0  # what the marks say x is
    best, pixel = greedy.all_blocks(lambda *a: jnp.abs(a[0]), (g,), geo)
    blocks = (best, pixel, *cdk.block_values(pixel, g, jnp.asarray(x), jnp.asarray(signed)))
    i, j = jnp.int32(12), jnp.int32(9)  # block (1, 0), unmarked before this update
    common = dict(geo=geo, half=(k // 2, k // 2), pad=pad, lam=0.3, alpha=0.8, interpret=True)
    d, new, lip_j = jnp.float32(0.25), jnp.float32(0.25), jnp.asarray(lip)
    live = jnp.asarray(True)
    by_map = cdk.update_and_rescan(g, jnp.asarray(x_seen), jnp.asarray(signed), kernel, blocks, d, new, lip_j, i, j, live,
                                   **common)
    by_marks = cdk.update_and_rescan(g, jnp.asarray(x), None, kernel, blocks, d, new, lip_j, i, j, live,
                                     marks=jnp.asarray(marks), **common)
    for name, a, b in zip(("gradient", "best", "pixel", "g", "x", "L"), by_map[:1] + by_map[3:], by_marks[:1] + by_marks[3:]):
        # The same pixels exactly; the maps and scores to 2 ulp (values below 1 in 1's ulp): the two
        # forms are other compiled programs, which may contract the update g - d * kernel into a
        # fused multiply-add differently, and interpret mode runs the kernel as XLA CPU code, which
        # may turn the division of a score by the scalar L + lb into a multiplication by its
        # reciprocal (1 ulp off); Triton divides each element (the GPU check in benchmarks/deconv.py
        # compares the two forms there).
        assert_close_ulp(np.asarray(b), np.asarray(a), 2, name, scale=1.0)
    assert float(by_marks[1][12, 9]) == 0.25 and float(by_map[1][12, 9]) == 0.25  # x[i, j] written
    expected = marks.copy()
    expected[1, 0] = 1
    np.testing.assert_array_equal(np.asarray(by_marks[2]), expected)
    assert float(by_map[2][12, 9]) == -2.5  # the map form marks the pixel itself
    np.testing.assert_array_equal(cdk.block_marks(jnp.asarray(x), geo), (np.add.reduceat(np.add.reduceat(
        x != 0, np.arange(0, 32, 8), axis=0), np.arange(0, 32, 16), axis=1) > 0).astype(np.int32))
    # live=False (a loop trip's steps past the end) reads and writes nothing: every output is its
    # input, bit for bit, in both forms.
    for kwargs, third in ((dict(), jnp.asarray(signed)), (dict(marks=jnp.asarray(marks)), jnp.asarray(marks))):
        inputs = (g, jnp.asarray(x), third, *blocks)
        idle = cdk.update_and_rescan(g, jnp.asarray(x), None if kwargs else third, kernel, blocks, d, new, lip_j, i, j,
                                     jnp.asarray(False), **kwargs, **common)
        for k_out, (got, was) in enumerate(zip(idle, inputs)):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(was), err_msg=f"output {k_out}")


@pytest.mark.parametrize("n", [N, 32])  # the pick in XLA (5 x 3 blocks), in pick_step (4 x 2)
def test_kernel_stops_inside_a_trip(n):
    # The kernel form runs `trip_length()` iterations per loop trip; the model saying "converged"
    # inside one must hold the rest of the trip for the refresh that verifies it (the next trip's
    # first iteration), and the run must stop there: the same count, refreshes, model and status as
    # the XLA form.
    dirty, psf = field(n, 15, seed=5)
    problem = mw.deconv.Deconvolution(dirty, psf)
    a, b = both(problem, lam=0.05, alpha=1.0, epsilon=1e-3, max_iterations=2000, block=(8, 16))
    assert a.success and b.success, (a.message, b.message)
    assert a.iterations == b.iterations < 2000 and a.stats["refreshes"] == b.stats["refreshes"]
    np.testing.assert_allclose(b.model, a.model, rtol=1e-5, atol=1e-6)  # float32 rounding, as above


def test_autocorrelation_lipschitz_descends_where_exact_fails():
    # PSF twice the image: the map update's diagonal AC[0] = sum PSF^2 exceeds the corner pixel's
    # exact L[k] more than twice (2.13x here), so the seed's per-pixel step would over-relax there
    # (it did: its tracked objective went negative and the true one never moved), and it is not
    # offered.  A source in the corner: the steps with AC[0] converge.
    n, p = 24, 48
    psf = ringing_psf(p, lobe=0.05, period=2.5, decay=8)
    truth = np.zeros((n, n))
    truth[0, 0] = truth[12, 12] = 1.0
    import scipy.signal

    dirty = scipy.signal.fftconvolve(truth, psf, mode="same")
    problem = mw.deconv.Deconvolution(dirty, psf)
    start = 0.5 * float(np.sum(dirty**2))  # the objective at x = 0

    solver = mw.deconv.CoordinateDescent(lam=0.01, epsilon=1e-6, max_iterations=300, refresh_every=30, kernel="xla")
    ok = mw.solve(problem, solver, progress=False)
    assert np.isfinite(ok.fun_trace).all() and ok.fun < 0.01 * start
    exact = ok.fun_trace[29::30]  # the exact objective at each refresh never increases: 1e-6 relative (float32)
    assert np.all(np.diff(exact) <= 1e-6 * start)
    # both sources back (fftconvolve's "same" centres an even PSF half a pixel off ours: 3 x 3 sums;
    # 0.1 Jy: the L1 shrinkage lam / L plus a flux split between neighbours)
    assert ok.model[:3, :3].sum() == pytest.approx(1.0, abs=0.1) and ok.model[11:14, 11:14].sum() == pytest.approx(1.0, abs=0.1)
    with pytest.raises(ValueError, match="lipschitz must be 'autocorrelation'.*over-relax"):
        mw.deconv.CoordinateDescent(lam=0.01, lipschitz="exact")


def test_options():
    with pytest.raises(ValueError, match="update_window=9 needs refresh_every"):
        mw.deconv.CoordinateDescent(lam=1.0, update_window=9, refresh_every=None)
    with pytest.raises(ValueError, match="kernel must be one of"):
        mw.deconv.CoordinateDescent(lam=1.0, kernel="cuda")
    with pytest.raises(ValueError, match="lipschitz must be"):
        mw.deconv.CoordinateDescent(lam=1.0, lipschitz="max")
    with pytest.raises(ValueError, match="block must be an int or"):
        mw.deconv.CoordinateDescent(lam=1.0, block=(8, 8, 8))
    # auto: the kernel on a GPU, the XLA form elsewhere; blocks that are not powers of two: the XLA form, said why
    assert mw.deconv.CoordinateDescent(lam=1.0).kernel_plan().name == ("pallas" if ON_GPU else "xla")
    plan = mw.deconv.CoordinateDescent(lam=1.0, kernel="pallas", block=24).kernel_plan()
    assert not plan.use_pallas and "power of two" in plan.reason


@pytest.mark.parametrize(
    "case",
    ["ties", "nan", "done", "converged_inexact", "refresh_due", "verified", "not_allowed", "runs_with_check"],
)
def test_pick_step_equals_the_xla_step(case):
    # The Pallas form's pick in one launch (interpret mode), against the XLA arithmetic it replaces:
    # the block jnp.argmax takes (the first maximum; the first NaN), its pixel and window, whether
    # the step runs, the proximal step, the objective and the two records.
    import jax.numpy as jnp

    from multiwalk.deconv import coordinate_descent_kernel as cdk
    from multiwalk.deconv import greedy
    from multiwalk.deconv.coordinate_descent import proximal_step

    rng = np.random.default_rng(3)
    geo = greedy.geometry((30, 30), (41, 41), (20, 20), (8, 16))  # 4 x 2 blocks of a 32 x 32 padded map
    best = rng.uniform(0.1, 0.4, geo.blocks).astype(np.float32)
    best[1, 1] = best[2, 0] = 0.9  # a tie: the first row-major wins
    if case == "nan":
        best[3, 0] = best[2, 1] = np.nan  # the first NaN wins
    pixel = rng.integers(0, 32 * 32, geo.blocks).astype(np.int32)
    g, x, lip = (rng.uniform(0.2, 1.5, geo.blocks).astype(np.float32) for _ in range(3))
    k, tol, fun, lam, alpha, every = 7, 0.05, 3.0, 0.3, 0.8, 10
    may_run, exact, verified = 1, 0, 0
    check = case in ("done", "converged_inexact", "refresh_due", "runs_with_check")
    if case in ("done", "converged_inexact"):
        best[:] = 0.01  # below the tolerance: on an exact map (done) or on the updated one (a refresh due)
        exact = int(case == "done")
    if case == "refresh_due":
        k = 20
    if case == "verified":
        verified = 1
    if case == "not_allowed":
        may_run = 0
    trace = np.arange(40, dtype=np.float32)
    steps = -np.arange(40, dtype=np.float32)
    ints, floats, new_trace, new_steps = cdk.pick_step(
        tuple(jnp.asarray(a) for a in (best, pixel, g, x, lip)), jnp.asarray(trace), jnp.asarray(steps),
        jnp.asarray([may_run, k, exact, verified], jnp.int32), jnp.asarray([tol, fun], jnp.float32), geo=geo,
        lam=lam, alpha=alpha, refresh_every=every, check=check, interpret=True)
    at = int(np.argmax(best))  # NumPy's: the first NaN (jnp.argmax on a GPU may take another)
    live = bool(may_run) and not (check and (best.reshape(-1)[at] <= tol or k % every == 0))  # _refresh_due, k >= 1
    assert live == (case in ("ties", "nan", "verified", "runs_with_check"))
    gv, old, lv = (jnp.asarray(a).reshape(-1)[at] for a in (g, x, lip))
    new = jnp.where(live and not verified, proximal_step(gv, old, lv, lam, alpha), old)
    d = new - old
    change = -d * gv + 0.5 * d * d * lv + lam * (alpha * (jnp.abs(new) - jnp.abs(old)) + 0.5 * (1.0 - alpha) * (
        new * new - old * old))
    i, j = divmod(int(pixel.reshape(-1)[at]), geo.padded[1])
    first = greedy.first_touched(greedy.window_start(jnp.int32(i), jnp.int32(j), geo), geo)
    # the decisions exactly
    assert ints.tolist() == [i, j, int(first[0]), int(first[1]), int(live), 0, 0, 0]
    # the floats to 2 ulp at their scale (~1): interpret mode and XLA may contract a product and a
    # sum into a fused multiply-add differently
    want = np.array([d, new, -lv, lv, fun + change], np.float32)
    assert_close_ulp(np.asarray(floats[:5]), want, 2, "d, new, -L, L, objective", scale=4.0)
    expect_trace, expect_steps = trace.copy(), steps.copy()
    if live:
        expect_trace[k], expect_steps[k] = want[4], abs(want[0])
    assert_close_ulp(np.asarray(new_trace), expect_trace, 2, "fun_trace", scale=40.0)
    assert_close_ulp(np.asarray(new_steps), expect_steps, 2, "steps", scale=40.0)


def test_kernel_rows_are_aligned_and_an_older_layout_resumes(tmp_path):
    # The kernel forms lay the update's kernel out in rows of a multiple of ROW_ALIGN elements, so
    # that every row of a window read starts at the same alignment: the autocorrelation of a 40 x 40
    # image is 79 wide (plus its pad), so zero columns are added, which no window reaches (the
    # results equal the XLA form's, test_kernel_equals_xla_form).  Clean's PSF the same.
    from multiwalk.checkpoint import read_checkpoint, write_leaves
    from multiwalk.deconv import coordinate_descent_kernel as cdk

    dirty, psf = field(N, 2 * N, seed=3)
    problem = mw.deconv.Deconvolution(dirty, psf)
    cd = mw.deconv.CoordinateDescent(lam=0.05, max_iterations=30, kernel="pallas", block=(8, 16))
    key = jax.random.key(0)
    kernel = cd.init(problem, key).kernel
    pad, k = cd._update_options(problem)["pad"], cd._kernel_size(problem)
    older = k[1] + 2 * pad[1]  # the row length before the alignment
    assert older % cdk.ROW_ALIGN != 0 and kernel.shape[1] % cdk.ROW_ALIGN == 0 and kernel.shape[1] > older
    np.testing.assert_array_equal(np.asarray(kernel)[:, older:], 0)
    clean = mw.deconv.Clean(gain=0.3, max_iterations=12, kernel="pallas", block=(8, 16))
    assert clean.init(problem, key).kernel.shape[1] % cdk.ROW_ALIGN == 0

    # A checkpoint written with the rows unaligned (as before) resumes with this start's kernel (the
    # same values) and ends as one uninterrupted run, bit for bit: the same programs on this machine.
    # (block is a tuple here, a list in the file: the resume compares the options as the file holds them.)
    def stop(info: dict) -> None:
        raise KeyboardInterrupt

    ck = tmp_path / "cd.npz"
    part = mw.solve(problem, cd, progress=False, checkpoint=ck, callback=stop, chunk_seconds=1e-9)
    assert part.status == mw.Status.INTERRUPTED and 0 < part.iterations < 30
    meta, leaves = read_checkpoint(ck)
    write_leaves(ck, meta, [*leaves[:3], leaves[3][:, :older], *leaves[4:]])
    resumed = mw.solve(problem, cd, progress=False, resume=ck)
    whole = mw.solve(problem, cd, progress=False)
    assert resumed.iterations == whole.iterations == 30
    np.testing.assert_array_equal(resumed.model, whole.model)
    np.testing.assert_array_equal(resumed.fun_trace, whole.fun_trace)
