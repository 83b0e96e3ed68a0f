"""The fused Pallas passes of L-BFGS (``LBFGS(kernel="pallas")``, lbfgs_kernel.py), in interpret mode on the CPU.

What runs on a GPU is the same kernel code lowered by Triton (checked there by
benchmarks/lbfgs_passes.py); here: the passes against the XLA formulas, and whole runs of
the fused form against the XLA form.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw
from multiwalk.functions import cute
from multiwalk.solvers import lbfgs_kernel


@pytest.fixture(autouse=True, scope="module")
def _float64():
    """float64 for this file only (a global jax_enable_x64 would leak into the other test files)."""
    with jax.enable_x64(True):
        yield


M = 4
N = 1000  # not a multiple of the block: the last program is masked
BLOCK = 256


def _data(seed: int, n: int = N):
    rng = np.random.default_rng(seed)
    P = jnp.asarray(rng.standard_normal((2 * M, n)))
    gt, g, d, xt, x = (jnp.asarray(rng.standard_normal(n)) for _ in range(5))
    return P, gt, g, d, xt, x


def _stored(slot: int, count: int) -> np.ndarray:
    """Ring slots holding a stored pair before the update (slot: where the new one goes)."""
    return np.array([1 <= (slot - k) % M <= count for k in range(M)])


@pytest.mark.parametrize(("slot", "count", "n"), [(0, 0, N), (2, 2, N), (1, M, N), (1, M, 4 * BLOCK)])
def test_pass_a_matches_xla(slot, count, n):
    # n = 4 BLOCK: whole blocks, the kernels' unmasked form
    P, gt, g, d, xt, x = _data(slot + 10 * count, n)
    stp = jnp.asarray(0.37)
    pg, py, dots, x_new = lbfgs_kernel.pair_products(
        P, gt, g, d, xt, stp, jnp.int32(slot), jnp.int32(count), x, block=BLOCK, interpret=True
    )
    y, s = gt - g, stp * d
    keep = np.tile(_stored(slot, count), 2)
    # Only the stored rows are read; the others come back as 0 (the solver never uses them).
    # Tolerance 1e-12 relative: float64 sums of 1000 terms folded in another order (~1e-15).
    np.testing.assert_allclose(pg, np.where(keep, P @ gt, 0.0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(py, np.where(keep, P @ y, 0.0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dots, [s @ y, y @ y, y @ gt, gt @ gt, xt @ xt], rtol=1e-12)
    np.testing.assert_array_equal(x_new, xt)  # a copy: exact


@pytest.mark.parametrize(("slot", "count", "n"), [(0, 0, N), (3, M, N), (3, M, 4 * BLOCK)])
def test_pass_b_matches_xla(slot, count, n):
    P, gt, g, d, _, _ = _data(100 + slot, n)
    w = jnp.asarray(np.random.default_rng(7).standard_normal(2 * M))
    gamma, stp = jnp.asarray(0.8), jnp.asarray(1.7)
    d_new, P_new, g_new = lbfgs_kernel.direction_and_store(
        P * 1.0, w, gamma, stp, gt, g * 1.0, d * 1.0, jnp.int32(slot), jnp.int32(count), block=BLOCK, interpret=True
    )
    s, y = stp * d, gt - g
    coef = np.where(np.tile(_stored(slot, count), 2), w, 0.0)
    want = -gamma * gt + coef @ P + w[slot] * s + w[M + slot] * y
    # Tolerance 1e-13 relative: a sum of 2m + 3 products per element, in another order.
    np.testing.assert_allclose(d_new, want, rtol=1e-13, atol=1e-13)
    expect_P = np.asarray(P).copy()
    expect_P[slot], expect_P[M + slot] = s, y
    np.testing.assert_allclose(P_new, expect_P, rtol=1e-15)  # s = stp d: one multiply, exact up to FMA
    np.testing.assert_array_equal(g_new, gt)


@pytest.fixture(scope="module")
def rosenbrock_runs():
    x0 = cute.start("extended_rosenbrock", 2000)
    problem = mw.Problem(objective=cute.extended_rosenbrock, x0=x0)
    xla = mw.solve(problem, mw.LBFGS(kernel="xla"), progress=False)
    # small chunks: the fused loop is entered and left many times (packed carry, history table)
    fused = mw.solve(problem, mw.LBFGS(kernel="pallas", kernel_block=512), progress=False, chunk_seconds=0.01)
    return xla, fused


def test_fused_run_is_the_xla_run(rosenbrock_runs):
    xla, fused = rosenbrock_runs
    assert fused.stats["kernel"] == ("pallas" if jax.default_backend() == "gpu" else "pallas (interpret mode)")
    assert xla.stats["kernel"] == "xla"
    assert fused.status == xla.status == mw.lbfgs.LBFGSStatus.SUCCESS
    assert (fused.iterations, fused.nfev) == (xla.iterations, xla.nfev) == (36, 46)
    rows = xla.iterations + 1
    np.testing.assert_array_equal(fused.history["nfev"][:rows], xla.history["nfev"][:rows])
    assert not fused.history["f"][rows:].any()  # nothing written past the last iteration
    # Rounding: the kernels sum in another order, and the difference in f grows along the path
    # (measured up to 1.7e-6 relative, at iteration 33), so 1e-5 relative while f >= 1e-10.  At
    # the last iteration f (~4e-12) is quadratic in the distance from the minimum x = 1 (~4e-9 there), so
    # its relative difference is twice the distance's: x 3e-14 to 6e-14 apart (measured with two
    # sets of XLA CPU options) made 4e-6 to 1e-5.  So 1e-4 relative there, and x to 1e-10.
    f_fused, f_xla = fused.history["f"][1:rows], xla.history["f"][1:rows]
    far = f_xla >= 1e-10
    np.testing.assert_allclose(f_fused[far], f_xla[far], rtol=1e-5)
    np.testing.assert_allclose(f_fused[~far], f_xla[~far], rtol=1e-4)
    np.testing.assert_allclose(fused.x, xla.x, rtol=0, atol=1e-10)


def test_plan_and_options():
    assert lbfgs_kernel.plan("auto", 7, 1, False).use_pallas is (jax.default_backend() in ("gpu", "cuda"))
    assert not lbfgs_kernel.plan("pallas", 7, 4, False).use_pallas  # several starts: XLA form
    assert "diag" in lbfgs_kernel.plan("pallas", 7, 1, True).reason
    assert not lbfgs_kernel.plan("pallas", 20, 1, False).use_pallas  # too many pairs for the table
    with pytest.raises(ValueError, match="kernel must be one of"):
        mw.LBFGS(kernel="cuda")
    with pytest.raises(ValueError, match="kernel_block must be a power of two"):
        mw.LBFGS(kernel_block=1000)


def test_a_wrong_along_hook_is_named_before_running():
    """A ``value_and_grad.along`` whose gradient is two entries short: the error names the hook and
    the shape it must return, before the loop runs."""
    n = 40

    def vg(x):
        return cute.extended_rosenbrock_value_and_grad(x)

    def along(x, d, stp):
        f, g = vg(x + stp * d)
        return f, g[:-2], g[:-2] @ d[:-2]  # the gradient two entries short

    vg.along = along
    problem = mw.Problem(value_and_grad=vg, x0=cute.start("extended_rosenbrock", n), dtype="float32")
    with pytest.raises(ValueError, match=r"value_and_grad\.along.*\(40,\)"):
        mw.solve(problem, mw.LBFGS(kernel="pallas"), progress=False)


def test_kernel_block_is_pass_a_columns_per_program():
    """``kernel_block`` is the columns per program of both passes (as documented)."""
    cfg = mw.LBFGS(kernel_block=1024)._config(np.float64)
    assert cfg.block == 1024  # pass B: as documented
    assert cfg.a_block * cfg.a_chunks == 1024  # pass A: kernel_block columns per program
