"""Pass A of the fused L-BFGS iteration with several blocks of columns per program
(``lbfgs_kernel.pair_products(chunks=...)``, the launch ``benchmarks/lbfgs_tune.py`` times), in
Pallas' interpret mode on the CPU, and its Triton lowering for a CUDA target (no GPU needed)."""

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
BLOCK = 128


def _stored(slot: int, count: int) -> np.ndarray:
    """Ring slots holding a stored pair before the update (slot: where the new one goes)."""
    return np.array([1 <= (slot - k) % M <= count for k in range(M)])


@pytest.mark.parametrize(("slot", "count", "n", "chunks"), [
    (1, M, 1000, 3),  # 1000 columns, 384 per program: the last program's last chunk lies past n
    (2, 2, 1000, 8),  # one program holds every column; two slots unfilled
    (0, M, 4 * BLOCK, 2),  # whole spans: the unmasked form
])
def test_chunked_pass_a_matches_xla(slot, count, n, chunks):
    rng = np.random.default_rng(slot + 10 * count + chunks)
    P = jnp.asarray(rng.standard_normal((2 * M, n)))
    gt, g, d, x = (jnp.asarray(rng.standard_normal(n)) for _ in range(4))
    stp = jnp.asarray(0.37)
    pg, py, dots, x_new = lbfgs_kernel.pair_products(
        P, gt, g, d, None, stp, jnp.int32(slot), jnp.int32(count), x * 1.0, block=BLOCK, chunks=chunks,
        interpret=True,
    )
    y, s = gt - g, stp * d
    xt = x + s
    keep = np.tile(_stored(slot, count), 2)
    # Tolerance 1e-12 relative: float64 sums of <= 1000 terms folded lane by lane, then across
    # lanes (another order than numpy's: ~1e-15); skipped rows come back exactly 0.
    np.testing.assert_allclose(pg, np.where(keep, P @ gt, 0.0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(py, np.where(keep, P @ y, 0.0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dots, [s @ y, y @ y, y @ gt, gt @ gt, xt @ xt], rtol=1e-12)
    # x + stp d: one rounding apart at most (XLA may fuse the multiply-add, numpy does not)
    np.testing.assert_allclose(x_new, xt, rtol=1e-15, atol=1e-15)


def test_chunked_pass_a_lowers_for_cuda():
    """The Pallas -> Triton lowering of the chunked loop (a fori_loop inside the kernel) and of the
    pipeline-stage option, done on the CPU for a CUDA target: a primitive without a Triton rule
    fails here, not on a GPU.  Exact check (it lowers or raises)."""
    S = jax.ShapeDtypeStruct
    for n in (10_000, 8192):
        vec = S((n,), jnp.float64)
        for chunks, stages in ((4, 1), (4, 3)):
            def pass_a(P, gt, g, d, stp, slot, count, x, chunks=chunks, stages=stages):
                return lbfgs_kernel.pair_products(P, gt, g, d, None, stp, slot, count, x, block=256, num_warps=4,
                                                  chunks=chunks, num_stages=stages)

            lowered = jax.jit(pass_a).trace(
                S((14, n), jnp.float64), vec, vec, vec, S((), jnp.float64), S((), jnp.int32), S((), jnp.int32), vec,
            ).lower(lowering_platforms=("cuda",))
            assert "lbfgs_pair_products" in lowered.as_text()


def test_solver_runs_chunked_pass_a():
    """A whole fused run with pass A chunked (the fields of solvers.lbfgs.iteration.Config that benchmarks/lbfgs_tune.py sets)
    takes the same path as the default launch: same iterations and evaluations, f to rounding."""
    import dataclasses

    x0 = cute.start("extended_rosenbrock", 2000)
    problem = mw.Problem(objective=cute.extended_rosenbrock, value_and_grad=cute.extended_rosenbrock_value_and_grad,
                         x0=x0)

    class Chunked(mw.LBFGS):
        def _config(self, dtype, plan=None, box=False):  # noqa: ANN001, ANN202
            return dataclasses.replace(super()._config(dtype, plan, box), a_block=256, a_chunks=3)

    base = mw.solve(problem, mw.LBFGS(kernel="pallas"), progress=False)
    chunked = mw.solve(problem, Chunked(kernel="pallas"), progress=False)
    on_cpu = jax.default_backend() == "cpu"  # the kernels run in Pallas' interpret mode there
    assert base.stats["kernel"] == chunked.stats["kernel"] == ("pallas (interpret mode)" if on_cpu else "pallas")
    assert (chunked.iterations, chunked.nfev, chunked.status) == (base.iterations, base.nfev, base.status)
    # f ~3.6e-12 at the end (f(x0) ~2.4e4), reached through differences of f values interpolated
    # by the line search: sums folded in another order move its last bits (4e-6 relative, 1.5e-17
    # absolute, between 8 x 256 and 3 x 256 blocks per program here; lbfgs_along.py saw 2e-8 at
    # 1e7).  The equal counts above show the same path; 1e-4 relative still catches a wrong sum.
    np.testing.assert_allclose(chunked.fun, base.fun, rtol=1e-4)
