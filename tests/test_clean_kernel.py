"""Clean's fused Pallas update (interpret mode on the CPU) against its XLA form: the same picks,
the same residual and model; one launch called directly; ties; options.  Tiny images (32 x 40,
blocks of 8 x 16, a ragged last row of blocks), few iterations: interpret mode is slow."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from psfs import ringing_psf
from ulp import assert_close_ulp

import multiwalk as mw
from multiwalk.deconv import clean_kernel, greedy
from multiwalk.deconv import coordinate_descent_kernel as cdk

N, M = 30, 40  # 30 rows: not whole 8-row blocks (the padding must never change or be picked)
BLOCK = (8, 16)  # one block shape for both forms: the picks are then the same, ties included
ON_GPU = jax.default_backend() == "gpu"


def two_sources(p: int, second: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Two point sources, the second of flux ``second`` (PSF copies added by slicing: at 1 the two
    peaks are bit-for-bit equal for this symmetric PSF, an exact tie between blocks at the first pick)."""
    psf = ringing_psf(p, lobe=0.05, period=2.5, decay=8).astype(np.float32)
    c = p // 2
    dirty = np.zeros((N + 2 * p, M + 2 * p), np.float32)  # room around the image for the PSF's slices
    for (i, j), flux in (((20, 30), 1.0), ((6, 9), second)):
        dirty[p + i - c : p + i - c + p, p + j - c : p + j - c + p] += flux * psf
    return dirty[p : p + N, p : p + M], psf


def walk(problem: mw.deconv.Deconvolution, solver: mw.deconv.Clean, steps: int) -> tuple[list[int], object]:
    """``steps`` iterations through the solver's own ``step`` (one compilation): the pixel each
    iteration picks (flat padded index) and the final state."""
    state = solver.init(problem, jax.random.key(0))
    step = jax.jit(lambda s: solver.step(problem, s, 0))
    picks = []
    for _ in range(steps):
        best, pixel = np.asarray(state.block_best), np.asarray(state.block_pixel)
        picks.append(int(pixel.reshape(-1)[np.argmax(best)]))
        state = step(state)
    return picks, state


@pytest.mark.parametrize("p, window", [(15, None), (2 * M, None), (2 * M, 21)])
def test_kernel_form_picks_and_maps_equal_the_xla_form(p, window):
    # PSF 15 x 15: only the touched blocks run; 80 x 80 (even: centre 40) reaches the whole image;
    # window=21: Clark's patch of it.
    dirty, psf = two_sources(p)
    problem = mw.deconv.Deconvolution(dirty, psf)
    forms = [mw.deconv.Clean(gain=0.3, window=window, kernel=k, block=BLOCK) for k in ("xla", "pallas")]
    (picks_a, a), (picks_b, b) = (walk(problem, f, 12) for f in forms)
    # The tie: both peaks are equal, and both forms pick the first block row-major (source (6, 9)).
    mp = a.residual.shape[1]
    assert picks_a[0] == picks_b[0] == 6 * mp + 9
    assert picks_a == picks_b and int(a.iteration) == int(b.iteration) == 12
    # The maps to 2 ulp of their scale (1: the PSF's peak): the two forms are other compiled
    # programs, which may contract r - a * PSF into a fused multiply-add differently (on this
    # CPU they agree bit for bit).  The padding up to whole blocks stays exactly zero.
    n, m = problem.shape
    assert_close_ulp(np.asarray(b.residual)[:n, :m], np.asarray(a.residual)[:n, :m], 2, "residual", scale=1.0)
    assert_close_ulp(np.asarray(b.x), np.asarray(a.x), 2, "model", scale=1.0)
    assert_close_ulp(np.asarray(b.steps), np.asarray(a.steps), 2, "steps", scale=1.0)
    assert not np.asarray(b.residual)[n:].any() and not np.asarray(b.residual)[:, m:].any()
    np.testing.assert_array_equal(np.asarray(b.block_pixel), np.asarray(a.block_pixel))
    # The kernel form's block values are the residual at the block pixels.
    at_pixels = np.asarray(b.residual).reshape(-1)[np.asarray(b.block_pixel)]
    np.testing.assert_array_equal(np.asarray(b.block_values.residual), at_pixels)


@pytest.fixture(scope="module", params=[16, 2 * M])
def update(request):
    """One jitted launch of each form for a 30 x 40 residual and a k x k PSF: 16 (only some blocks
    touched) or 80 (reaching past every edge); even sides, whose padding needs one zero more."""
    k = request.param
    geo = greedy.geometry((N, M), (k, k), (k // 2, k // 2), BLOCK)
    pad = cdk.kernel_pad(geo, (k, k))
    psf = jnp.asarray(ringing_psf(k, lobe=0.05, period=2.5, decay=8), jnp.float32)
    kernel_x, kernel_k = greedy.pad_kernel(psf, geo), jnp.pad(psf, ((pad[0],) * 2, (pad[1],) * 2))

    def score(r, x):
        return jnp.abs(r)

    @jax.jit
    def xla(r, x, best, pixel, a, i, j):
        r, start = greedy.subtract_kernel(r, kernel_x, a, i, j, geo)
        x = x.at[i, j].add(a)
        return (r, x, *greedy.rescan(score, (r, x), best, pixel, start, geo))

    @jax.jit
    def fused(r, x, best, pixel, a, i, j, live):
        blocks = (best, pixel, greedy.at_block_pixels(pixel, r))
        return clean_kernel.update_and_rescan(r, x, kernel_k, blocks, a, i, j, live, geo=geo, pad=pad, num_warps=4,
                                              interpret=True)

    return geo, score, xla, fused


@pytest.mark.parametrize("i, j", [(0, 0), (29, 39), (14, 20), (3, 37)])
def test_one_launch_equals_subtract_and_rescan(update, i, j):
    # Corners and edges: the kernel's zero padding (kernel_pad, for an even side) must keep every
    # block's PSF window inside it; a slice past it would read other lags (interpret mode clamps
    # out-of-range slices, so a wrong padding shows as a wrong residual here).
    geo, score, xla, fused = update
    rng = np.random.default_rng(i * 100 + j)
    r = greedy.pad_image(jnp.asarray(rng.standard_normal((N, M)), jnp.float32), geo)
    x = greedy.pad_image(jnp.asarray(rng.uniform(0, 1, (N, M)) * (rng.uniform(0, 1, (N, M)) < 0.1), jnp.float32), geo)
    r = r.at[1, 2].set(2.5).at[6, 5].set(-2.5)  # a tie in block (0, 0): the first pixel row-major wins
    best, pixel = greedy.all_blocks(score, (r, x), geo)
    a, ii, jj = jnp.float32(0.37), jnp.int32(i), jnp.int32(j)
    want = xla(r, x, best, pixel, a, ii, jj)
    got = fused(r, x, best, pixel, a, ii, jj, jnp.asarray(True))
    for name, g, w in zip(("residual", "x", "best", "pixel"), got, want):
        # 2 ulp at scale 1 (values ~1): another contraction of r - a * PSF into an FMA (see above)
        assert_close_ulp(np.asarray(g), np.asarray(w), 2, name, scale=1.0)
    assert int(got[3][0, 0]) == 1 * geo.padded[1] + 2 or float(got[2][0, 0]) > 2.5  # unless the update raised another
    np.testing.assert_array_equal(np.asarray(got[4]), np.asarray(got[0]).reshape(-1)[np.asarray(got[3])])
    # live=False (a loop trip's steps past the end) changes nothing, bit for bit.
    idle = fused(r, x, best, pixel, a, ii, jj, jnp.asarray(False))
    for name, g, w in zip(("residual", "x", "best", "pixel", "value"), idle,
                          (r, x, best, pixel, greedy.at_block_pixels(pixel, r))):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=name)


def test_kernel_form_stops_inside_a_trip():
    # The kernel form runs `trip` iterations per loop trip; the threshold reached in the middle
    # of one must leave the rest as no-ops: the same count, model and status as the XLA form.
    dirty, psf = two_sources(15)
    problem = mw.deconv.Deconvolution(dirty, psf)
    a, b = (mw.solve(problem, mw.deconv.Clean(gain=0.3, threshold=0.05, max_iterations=200, kernel=k, block=BLOCK),
                     progress=False) for k in ("xla", "pallas"))
    assert a.status == b.status == mw.Status.SUCCESS, (a.message, b.message)
    assert a.iterations == b.iterations < 200
    assert b.stats["kernel"] == ("pallas" if ON_GPU else "pallas (interpret mode)") and a.stats["kernel"] == "xla"
    assert_close_ulp(b.model, a.model, 2, "model", scale=1.0)  # as above
    assert_close_ulp(b.steps, a.steps, 2, "steps", scale=1.0)


@pytest.mark.parametrize("first, then", [("xla", "pallas"), ("pallas", "xla")])
def test_resume_in_the_other_form_continues_the_run(first, then, tmp_path):
    # kernel (and so the default block: 32 x 32 or 32 x 128, other padded shapes) may change on
    # resume: the checkpoint of one form is converted to the other's state (convert_checkpoint).
    # No tie in this field, so the two block shapes pick the same pixels.
    problem = mw.deconv.Deconvolution(*two_sources(15, second=0.8))

    def stop(info: dict) -> None:
        raise KeyboardInterrupt  # after the first chunk (one iteration with a callback)

    solver = mw.deconv.Clean(gain=0.3, max_iterations=12, kernel=first)
    checkpoint = tmp_path / "clean.npz"
    part = mw.solve(problem, solver, progress=False, checkpoint=checkpoint, callback=stop)
    assert part.status == mw.Status.INTERRUPTED and part.iterations == 1
    resumed = mw.solve(problem, mw.deconv.Clean(gain=0.3, max_iterations=12, kernel=then), progress=False,
                       resume=checkpoint)
    whole = mw.solve(problem, mw.deconv.Clean(gain=0.3, max_iterations=12, kernel="xla"), progress=False)
    assert resumed.iterations == whole.iterations == 12 and resumed.stats["kernel"].startswith(then)
    assert_close_ulp(resumed.model, whole.model, 2, "model", scale=1.0)  # as above
    assert_close_ulp(resumed.steps, whole.steps, 2, "steps", scale=1.0)


def test_resume_with_other_blocks_in_the_same_form_continues_the_run(tmp_path):
    # block may change on resume within one form too (the same state layout, other block arrays):
    # they are recomputed from the saved residual, not grown from the saved ones (whose stale
    # maxima made the resumed run pick a spent peak again).  XLA form, no tie in this field.
    problem = mw.deconv.Deconvolution(*two_sources(15, second=0.8))

    def stop(info: dict) -> None:
        raise KeyboardInterrupt  # after the first chunk (one iteration with a callback)

    checkpoint = tmp_path / "clean.npz"
    mw.solve(problem, mw.deconv.Clean(gain=0.3, max_iterations=12, kernel="xla", block=16), progress=False,
             checkpoint=checkpoint, callback=stop)
    resumed = mw.solve(problem, mw.deconv.Clean(gain=0.3, max_iterations=12, kernel="xla", block=(8, 16)),
                       progress=False, resume=checkpoint)
    whole = mw.solve(problem, mw.deconv.Clean(gain=0.3, max_iterations=12, kernel="xla", block=(8, 16)),
                     progress=False)
    assert resumed.iterations == whole.iterations == 12
    # The same picks (the same pixels in the model), exactly; the first iteration ran in the loop of
    # 16 x 16 blocks, another compiled program (other block arrays, another rescan) than the 8 x 16 one, which may
    # contract r - a * PSF into a fused multiply-add differently: model and steps to 2 ulp, as above.
    np.testing.assert_array_equal(resumed.model != 0, whole.model != 0)
    assert_close_ulp(resumed.model, whole.model, 2, "model", scale=1.0)
    assert_close_ulp(resumed.steps, whole.steps, 2, "steps", scale=1.0)


def test_options():
    with pytest.raises(ValueError, match="kernel must be one of"):
        mw.deconv.Clean(kernel="cuda")
    with pytest.raises(ValueError, match="block must be an int or"):
        mw.deconv.Clean(block=(8, 8, 8))
    with pytest.raises(ValueError, match="kernel_warps"):
        mw.deconv.Clean(kernel_warps=0)
    assert {"kernel", "block", "kernel_warps"} <= set(mw.deconv.Clean.resumable_options)
    # auto: the kernel on a GPU (its blocks), the XLA form elsewhere (32 x 32 blocks); blocks that are
    # not powers of two: the XLA form, said why
    auto = mw.deconv.Clean()
    assert auto.kernel_plan().name == ("pallas" if ON_GPU else "xla")
    assert auto._block() == (clean_kernel.DEFAULT_BLOCK if ON_GPU else (32, 32))
    assert mw.deconv.Clean(kernel="pallas")._block() == clean_kernel.DEFAULT_BLOCK
    assert mw.deconv.Clean(block=24)._block() == (24, 24)
    plan = mw.deconv.Clean(kernel="pallas", block=24).kernel_plan()
    assert not plan.use_pallas and "power of two" in plan.reason
