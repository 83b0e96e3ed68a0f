"""Both gradients of the fused one-device L-BFGS loop in one (2, n) buffer (``LBFGS.gradient_rows``, opt-in):
the line search's evaluation writes g into the older gradient's row (``cute.rosenbrock_along_into``)
and passes A and B read both rows, so pass B no longer copies the new gradient (n values per
iteration).  Everything runs in Pallas' interpret mode on the CPU, plus the Triton lowering for a
CUDA target.

Tolerances: the same float operations run in the same order (the rows form only changes where g
is stored), but in other compiled programs, which may contract multiply-adds differently
(tests/ulp.py): kernels' results to KERNEL_ULPS, whole solves' decisions (iterations, statuses,
evaluation counts) exactly and their floats to SOLVE_RTOL (at the end of a converged run, to its
own precision); copies and untouched rows exactly.  The solve runs through the
driver's chunks of 1, 2, 4, ... iterations, so odd and even chunk lengths (the last gradient in row
1 or 0) are both crossed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from ulp import assert_close_ulp

import multiwalk as mw
from multiwalk.functions import cute, cute_kernel
from multiwalk.solvers import lbfgs_kernel
from multiwalk.solvers.lbfgs import LBFGS

# One kernel call on standard-normal data (terms ~1): sums of n products in the same order, each
# product possibly fused into its addition in one program and not the other (~1 ulp of the terms
# each, growing as sqrt(n) for random signs): 64 ulp, values below 1 counted in 1's ulp.
KERNEL_ULPS = 64
# The first iterations of a run: such differences in one iteration move the next iterates, and a
# line search's step can amplify them: measured up to 1.7e-11 relative after 10 iterations with
# XLA's older CPU fusion code generator (under 1e-12 with the default): rtol 1e-9.
SOLVE_RTOL = 1e-9

M = 3


class _RowsLBFGS(LBFGS):
    gradient_rows = True  # opt-in until measured on a GPU (the default copies the new gradient in pass B)


def _data(n: int):
    k = jax.random.split(jax.random.PRNGKey(3), 7)
    P = jax.random.normal(k[0], (2 * M, n), jnp.float64)
    gt, g, d, x = (jax.random.normal(k[i], (n,), jnp.float64) for i in range(1, 5))
    w = jax.random.normal(k[5], (2 * M,), jnp.float64)
    return P, gt, g, d, x, w


def test_passes_read_the_gradient_rows():
    """pass A and pass B given both gradients as rows of one buffer equal the two-vector form exactly;
    pass B leaves the buffer as it was (it no longer writes g).  n = 700: ragged programs."""
    with jax.enable_x64(True):
        n = 700
        P, gt, g, d, x, w = _data(n)
        for new in (0, 1):
            _compare_rows(n, P, gt, g, d, x, w, new)


def _compare_rows(n, P, gt, g, d, x, w, new):  # noqa: ANN001, ANN202 - one gradient row order
    grads = jnp.zeros((2, n), jnp.float64).at[new].set(gt).at[1 - new].set(g)
    stp, gamma = jnp.asarray(0.7), jnp.asarray(1.3)
    slot, count = jnp.asarray(1, jnp.int32), jnp.asarray(M, jnp.int32)
    a = dict(block=128, chunks=2, interpret=True)
    plain = lbfgs_kernel.pair_products(P, gt, g, d, None, stp, slot, count, x * 1.0, **a)
    rows = lbfgs_kernel.pair_products(P, grads, grads, d, None, stp, slot, count, x * 1.0, new=jnp.asarray(new), **a)
    for u, v in zip(plain, rows):
        assert_close_ulp(np.asarray(v), np.asarray(u), KERNEL_ULPS, scale=1.0)
    b = dict(block=256, interpret=True)
    d0, P0, g0 = lbfgs_kernel.direction_and_store(P * 1.0, w, gamma, stp, gt, g * 1.0, d * 1.0, slot, count, **b)
    d1, P1, g1 = lbfgs_kernel.direction_and_store(
        P * 1.0, w, gamma, stp, grads, grads, d * 1.0, slot, count, new=jnp.asarray(new), **b
    )
    assert_close_ulp(np.asarray(d1), np.asarray(d0), KERNEL_ULPS, "d", scale=1.0)
    assert_close_ulp(np.asarray(P1), np.asarray(P0), KERNEL_ULPS, "P", scale=1.0)
    np.testing.assert_array_equal(np.asarray(g0), np.asarray(gt))
    np.testing.assert_array_equal(np.asarray(g1), np.asarray(grads))


def test_along_kernel_into_a_row():
    """rosenbrock_along_kernel(out=, row=) writes g into that row only and returns the same f and g'd
    as the plain kernel (the same operations, another program: to KERNEL_ULPS; the other row
    exactly: not written); ragged pairs (n/2 = 500, rows 64)."""
    with jax.enable_x64(True):
        n = 1000
        k = jax.random.split(jax.random.PRNGKey(5), 3)
        x, d = jax.random.normal(k[0], (n,)), jax.random.normal(k[1], (n,))
        out = jax.random.normal(k[2], (2, n))
        f, g, gd = cute_kernel.rosenbrock_along_kernel(x, d, jnp.asarray(0.3), rows=64, interpret=True)
        for row in (0, 1):
            f1, o1, gd1 = cute_kernel.rosenbrock_along_kernel(
                x, d, jnp.asarray(0.3), rows=64, interpret=True, out=out * 1.0, row=jnp.asarray(row)
            )
            assert_close_ulp([float(f1), float(gd1)], [float(f), float(gd)], KERNEL_ULPS, "f, g'd", scale=1.0)
            assert_close_ulp(np.asarray(o1[row]), np.asarray(g), KERNEL_ULPS, "g", scale=1.0)
            np.testing.assert_array_equal(np.asarray(o1[1 - row]), np.asarray(out[1 - row]))


def test_rows_kernels_lower_for_triton():
    """The rows forms' Pallas -> Triton lowering for a CUDA target, on the CPU (raises on a missing rule)."""
    with jax.enable_x64(True):
        n = 4096
        P, gt, _, d, x, w = _data(n)
        grads = jnp.stack([gt, gt])
        one = jnp.asarray(1, jnp.int32)
        jax.jit(lambda x, d, o, r: cute_kernel.rosenbrock_along_kernel(x, d, jnp.asarray(0.3), out=o, row=r)).trace(
            x, d, grads, one).lower(lowering_platforms=("cuda",))
        jax.jit(lambda P, G, d, x, r: lbfgs_kernel.pair_products(P, G, G, d, None, jnp.asarray(0.5), r, r, x, new=r)).trace(
            P, grads, d, x, one).lower(lowering_platforms=("cuda",))
        jax.jit(lambda P, G, d, w, r: lbfgs_kernel.direction_and_store(
            P, w, jnp.asarray(1.0), jnp.asarray(0.5), G, G, d, r, r, new=r)).trace(
            P, grads, d, w, one).lower(lowering_platforms=("cuda",))


def test_solve_with_gradient_rows_equals_the_copying_form(monkeypatch):
    """Whole fused runs (kernel='pallas', interpret mode) of Extended Rosenbrock with cute's one-pass
    evaluation in interpret mode (a GPU backend simulated for along_plan, as in test_cute_fused),
    in chunks of 1, 2, 3, 4 and the rest: the rows form is used (pass B traced with rows) and ends
    in the copying form's state (decisions exactly, floats to SOLVE_RTOL), g included (taken from
    the right row after each chunk), with the same iterations per chunk."""
    monkeypatch.setattr(cute_kernel, "backend", lambda names: ("cuda", True))
    kernel = cute_kernel.rosenbrock_along_kernel
    monkeypatch.setattr(
        cute_kernel, "rosenbrock_along_kernel", lambda x, d, stp, **kw: kernel(x, d, stp, rows=128, interpret=True, **kw)
    )
    traced = []
    store = lbfgs_kernel.direction_and_store

    def spy(*args, **kw):
        traced.append(kw.get("new") is not None)
        return store(*args, **kw)

    monkeypatch.setattr(lbfgs_kernel, "direction_and_store", spy)
    n = 400
    x0 = cute.start("extended_rosenbrock", n)
    with jax.enable_x64(True):
        problem = mw.Problem(value_and_grad=cute.extended_rosenbrock_value_and_grad, x0=x0)
        ends = {}
        for solver in (_RowsLBFGS(kernel="pallas", kernel_block=256), LBFGS(kernel="pallas", kernel_block=256)):
            chunk = jax.jit(lambda state, k, solver=solver: solver.run_chunk(problem, state, 0, k))
            state = solver.init(problem, jax.random.PRNGKey(0))
            runs, states = [], []
            for k in (1, 2, 3, 4, 1000):  # odd and even chunk lengths: the last gradient in row 1 or 0
                state, n_run = chunk(state, jnp.asarray(k, jnp.int32))
                runs.append(int(n_run))
                states.append(jax.tree.map(np.asarray, state.starts))
            ends[type(solver)] = (states, runs)
    assert traced == [True, False]  # each form traced once: the rows form, then the copying form
    (rows, runs), (copying, runs_copy) = ends[_RowsLBFGS], ends[LBFGS]
    assert runs == runs_copy and runs[:4] == [1, 2, 3, 4] and runs[4] > 5
    assert int(rows[-1].status[0]) == 0  # SUCCESS
    # After each of the first four chunks (1 to 10 iterations) floats to SOLVE_RTOL.  At the end of the converged
    # run the decisions exactly, and the floats to the run's own precision, not to ulps: over ~40
    # iterations the line searches amplify the programs' rounding (measured 3e-9 relative in the
    # stored pairs with XLA's older fusion code generator, every decision equal).
    for (ours, theirs), end in zip(zip(rows, copying), [False] * 4 + [True]):
        for name, u, v in zip(ours._fields, ours, theirs):
            if name == "ls":
                continue
            if not np.issubdtype(np.asarray(u).dtype, np.floating):
                np.testing.assert_array_equal(u, v, err_msg=name)  # decisions and counts
            elif end:
                np.testing.assert_allclose(u, v, rtol=1e-7, atol=1e-9, err_msg=name)
            else:
                np.testing.assert_allclose(u, v, rtol=SOLVE_RTOL, atol=1e-12, err_msg=name)
