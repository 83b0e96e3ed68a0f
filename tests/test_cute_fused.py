"""The analytic value-and-gradient forms of the CUTE functions (``cute.*_value_and_grad``, the seed's
``eval_fg``), their use by ``multiwalk lbfgs`` and the benchmark, and pass A forming the trial point.

Tolerances:
* float64: analytic vs ``jax.value_and_grad`` to 1e-13 relative (f) and 1e-13 (1 + max|g|) (g): both
  are the same sums of a few float64 products, differing only in the order of the roundings
  (a wrong constant or index is an O(1) error).
* float32: 1e-5 relative, a few eps32 over the handful of operations per term.
* the seed's run (n = 1e6, m = 7): the same 37 iterations and 51 evaluations as the printout; f to
  1e-3 relative of the printed 6.75226e-10 (near the minimum f is ~1e-9 of its start value, so
  the summation order of the GPU/CPU reduction moves its last digits; the counts are exact).
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw
from multiwalk import cli
from multiwalk.functions import cute
from multiwalk.solvers import lbfgs_kernel

NAMES = list(cute.TABLE)
SIZES = {"extended_rosenbrock": [2, 10], "extended_beale": [2, 6], "extended_powell": [4, 12],
         "extended_wood": [4, 12], "extended_trigonometric": [1, 7]}


def _points(name: str, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(n)
    return [cute.start(name, n), cute.start(name, n, source="mgh"), rng.uniform(-2.0, 2.0, n)]


@pytest.mark.parametrize("name", NAMES)
def test_analytic_matches_autodiff_float64(name):
    entry = cute.TABLE[name]
    with jax.enable_x64(True):
        auto = jax.jit(jax.value_and_grad(entry.fn))
        fused = jax.jit(entry.value_and_grad)
        for n in SIZES[name]:
            for x in _points(name, n):
                x = jnp.asarray(x, jnp.float64)
                f0, g0 = auto(x)
                f1, g1 = fused(x)
                assert g1.shape == (n,) and g1.dtype == jnp.float64
                assert float(f1) == pytest.approx(float(f0), rel=1e-13, abs=1e-13)
                np.testing.assert_allclose(g1, g0, rtol=0, atol=1e-13 * (1.0 + float(jnp.max(jnp.abs(g0)))))


@pytest.mark.parametrize("name", NAMES)
def test_analytic_float32_and_vmap(name):
    entry = cute.TABLE[name]
    n = SIZES[name][-1]
    batch = jnp.asarray(np.stack(_points(name, n)), jnp.float32)
    f0, g0 = jax.vmap(jax.value_and_grad(entry.fn))(batch)
    f1, g1 = jax.jit(jax.vmap(entry.value_and_grad))(batch)
    assert f1.dtype == jnp.float32 and g1.shape == batch.shape
    np.testing.assert_allclose(f1, f0, rtol=1e-5)
    np.testing.assert_allclose(g1, g0, rtol=0, atol=1e-5 * (1.0 + float(jnp.max(jnp.abs(g0)))))


@pytest.mark.parametrize(("name", "n"), [("extended_rosenbrock", 3), ("extended_powell", 6), ("extended_trigonometric", 0)])
def test_analytic_bad_n(name, n):
    with pytest.raises(ValueError, match=f"{name}: n = {n}"):
        cute.TABLE[name].value_and_grad(jnp.zeros(n))


def test_pass_a_forms_the_trial_point():
    """pair_products(xt=None) writes x + stp d (what the evaluations no longer write) and gives the
    same sums as when handed that point; interpret mode, n not a multiple of the block."""
    with jax.enable_x64(True):
        m, n = 3, 700
        k = jax.random.split(jax.random.PRNGKey(1), 6)
        P = jax.random.normal(k[0], (2 * m, n), jnp.float64)
        gt, g, d, x = (jax.random.normal(k[i], (n,), jnp.float64) for i in range(1, 5))
        stp, slot, count = jnp.asarray(0.3), jnp.asarray(1, jnp.int32), jnp.asarray(2, jnp.int32)
        xt = x + stp * d
        given = lbfgs_kernel.pair_products(P, gt, g, d, xt, stp, slot, count, x * 1.0, block=256, interpret=True)
        formed = lbfgs_kernel.pair_products(P, gt, g, d, None, stp, slot, count, x * 1.0, block=256, interpret=True)
        # the same float64 operations on the same inputs: equal to rounding (1e-14 relative)
        np.testing.assert_allclose(formed[3], xt, rtol=1e-14, atol=1e-14)
        for a, b in zip(formed[:3], given[:3]):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_cli_gradient_option():
    # cli._setup turns on jax_enable_x64 globally for --dtype float64 (the default), as the command
    # does: put it back, or float32 tests in other files of this worker see float64 (it happened)
    old = jax.config.jax_enable_x64
    try:
        args = cli.build_parser().parse_args(["lbfgs", "--function", "wood", "--n", "8"])
        problem, _, _ = cli._setup(args)
        assert args.gradient == "analytic" and problem.has_value_and_grad
        args = cli.build_parser().parse_args(["lbfgs", "--function", "wood", "--n", "8", "--gradient", "autodiff"])
        problem, _, _ = cli._setup(args)
        assert not problem.has_value_and_grad
    finally:
        jax.config.update("jax_enable_x64", old)
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["lbfgs", "--gradient", "numeric"])


def test_benchmark_gives_optax_the_same_gradient():
    """benchmarks/lbfgs.py's with_gradient: jax.value_and_grad of the wrapped f is the analytic pair."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import lbfgs as bench
    finally:
        sys.path.pop(0)
    x = jnp.asarray(cute.start("extended_rosenbrock", 8), jnp.float32) + 0.1
    f, g = jax.value_and_grad(bench.with_gradient(cute.extended_rosenbrock_value_and_grad))(x)
    f0, g0 = cute.extended_rosenbrock_value_and_grad(x)
    assert float(f) == float(f0)  # the custom vjp returns the analytic pair itself: exactly equal
    np.testing.assert_array_equal(g, g0)


def test_seed_run_with_the_analytic_gradient():
    """The seed's printout (n = 1e6, m = 7: 37 iterations, 51 evaluations, f = 6.75226e-10) with f and
    g from the analytic form, as `multiwalk lbfgs` now runs it."""
    n = 10**6
    with jax.enable_x64(True):
        problem = mw.Problem(
            objective=cute.extended_rosenbrock, value_and_grad=cute.extended_rosenbrock_value_and_grad,
            x0=cute.start("extended_rosenbrock", n),
        )
        r = mw.solve(problem, mw.LBFGS(m=7, eps=1e-5), progress=False)
    assert (r.iterations, r.nfev, r.status.name) == (37, 51, "SUCCESS")
    assert r.fun == pytest.approx(6.75226e-10, rel=1e-3)


# --------------------------------------------------------------------------- one pass along a line
@pytest.mark.parametrize(("n", "rows"), [(1000, 128), (1024, 128), (2, 4)])
def test_rosenbrock_along_kernel(n, rows):
    """The Pallas kernel (interpret mode; n/2 a multiple of rows or not) against the jax.numpy form:
    float64 sums folded in another order, so 1e-13 relative (f, g'd) and 1e-13 (1 + max|g|) (g)."""
    from multiwalk.functions import cute_kernel

    with jax.enable_x64(True):
        k = jax.random.split(jax.random.PRNGKey(n), 2)
        x, d = jax.random.normal(k[0], (n,), jnp.float64), jax.random.normal(k[1], (n,), jnp.float64)
        stp = jnp.asarray(0.37)
        f, g, gd = cute_kernel.rosenbrock_along_kernel(x, d, stp, rows=rows, interpret=True)
        f0, g0 = cute.extended_rosenbrock_value_and_grad(x + stp * d)
        assert float(f) == pytest.approx(float(f0), rel=1e-13)
        assert float(gd) == pytest.approx(float(g0 @ d), rel=1e-13)
        np.testing.assert_allclose(g, g0, rtol=0, atol=1e-13 * (1.0 + float(jnp.max(jnp.abs(g0)))))


def test_lbfgs_uses_along_on_the_fused_path():
    """LBFGS(kernel='pallas') (interpret mode here) evaluates through value_and_grad.along when it is
    there, with the iterates of the XLA form: the same iteration and evaluation counts, f to 1e-10
    relative (the fused passes fold sums in another order; test_lbfgs_kernel.py allows the same)."""
    calls = []

    def vg(x):
        return cute.extended_rosenbrock_value_and_grad(x)

    def along(x, d, stp):
        calls.append(x.shape)  # at trace time: the solver's loop was built on along
        return cute.rosenbrock_along(x, d, stp)  # the jax.numpy form off GPUs

    vg.along = along
    n = 600
    with jax.enable_x64(True):
        x0 = cute.start("extended_rosenbrock", n)
        problem, solver = mw.Problem(value_and_grad=vg, x0=x0), mw.LBFGS(kernel="pallas", kernel_block=256)
        fused = mw.solve(problem, solver, progress=False)
        traced = len(calls)
        again = mw.solve(problem, solver, progress=False)  # the hook checked and the loop compiled once
        ref = mw.solve(mw.Problem(objective=cute.extended_rosenbrock, x0=x0), mw.LBFGS(kernel="xla"), progress=False)
    assert calls and calls[0] == (n,)
    assert len(calls) == traced and again.fun == fused.fun  # not traced again; the same program's result
    assert (fused.iterations, fused.nfev, fused.status) == (ref.iterations, ref.nfev, ref.status)
    assert fused.fun == pytest.approx(ref.fun, rel=1e-10, abs=1e-20)


def test_along_plan_and_default_dispatch(monkeypatch):
    """cute's Rosenbrock carries rosenbrock_along as .along; along_plan picks the kernel on GPUs only
    (float32/float64, even n), else the jax.numpy form with a reason.  A GPU backend is simulated
    and the kernel run in interpret mode, so the dispatch itself is checked here; values to 1e-13
    relative (float64 sums folded in another order, as in test_rosenbrock_along_kernel)."""
    from multiwalk.functions import cute_kernel

    assert cute.TABLE["extended_rosenbrock"].value_and_grad.along is cute.rosenbrock_along
    assert not hasattr(cute.extended_rosenbrock_xla, "along")  # the XLA form, to opt out
    off = cute_kernel.along_plan(1000, jnp.float64)
    if jax.default_backend() == "gpu":  # this machine's own plan: the kernel
        assert off.use_pallas and "on the GPU" in off.reason
    else:
        assert not off.use_pallas and f"GPUs only (backend: {jax.default_backend()})" in off.reason

    monkeypatch.setattr(cute_kernel, "backend", lambda names: ("cuda", True))
    assert cute_kernel.along_plan(1000, jnp.float64).use_pallas
    assert cute_kernel.along_plan(1000, jnp.float32).use_pallas
    assert "not float16" in cute_kernel.along_plan(1000, jnp.float16).reason
    assert "n = 999 is odd" in cute_kernel.along_plan(999, jnp.float64).reason

    calls = []
    kernel = cute_kernel.rosenbrock_along_kernel

    def interpreted(x, d, stp):
        calls.append(x.shape)
        return kernel(x, d, stp, rows=128, interpret=True)

    monkeypatch.setattr(cute_kernel, "rosenbrock_along_kernel", interpreted)
    with jax.enable_x64(True):
        k = jax.random.split(jax.random.PRNGKey(7), 2)
        x, d = jax.random.normal(k[0], (600,), jnp.float64), jax.random.normal(k[1], (600,), jnp.float64)
        f, g, gd = cute.extended_rosenbrock_value_and_grad.along(x, d, jnp.asarray(0.2))
        f0, g0 = cute.extended_rosenbrock_value_and_grad(x + 0.2 * d)
        gd0 = g0 @ d
    assert calls == [(600,)]
    assert float(f) == pytest.approx(float(f0), rel=1e-13)
    assert float(gd) == pytest.approx(float(gd0), rel=1e-13)
    np.testing.assert_allclose(g, g0, rtol=0, atol=1e-13 * (1.0 + float(jnp.max(jnp.abs(g0)))))


def test_lbfgs_reports_the_line_evaluation():
    """stats["line_evaluation"] says how the line search evaluated: through cute's .along on the fused
    path (kernel='pallas', interpret mode here; off GPUs along_plan's jax.numpy form, reason given),
    by value_and_grad at x + stp d without .along.  The iterates equal those of the same fused path
    without .along: the same counts and status, f to 1e-10 relative (the same float64 operations,
    but XLA may fuse x + stp d into the evaluation, with other roundings, when the trial point is
    not kept; near f ~ 1e-11 the line search's interpolation amplifies those)."""
    n = 400
    x0 = cute.start("extended_rosenbrock", n)
    solver = mw.LBFGS(kernel="pallas", kernel_block=256)
    with jax.enable_x64(True):
        along = mw.solve(mw.Problem(value_and_grad=cute.extended_rosenbrock_value_and_grad, x0=x0), solver, progress=False)
        plain = mw.solve(mw.Problem(value_and_grad=cute.extended_rosenbrock_xla, x0=x0), solver, progress=False)
    assert along.stats["line_evaluation"].startswith("value_and_grad.along: ")
    assert ("on the GPU" if jax.default_backend() == "gpu" else "GPUs only") in along.stats["line_evaluation"]
    assert plain.stats["line_evaluation"] == "value_and_grad at x + stp d, then g'd"
    assert (along.iterations, along.nfev, along.status) == (plain.iterations, plain.nfev, plain.status)
    # on a GPU the kernel is Triton's, its sums folded in another order: 4.8e-10 relative (1.9e-20
    # absolute) at f ~ 4e-11 on an H200; 1e-18 absolute is 2e-22 of f at the start (4840)
    assert along.fun == pytest.approx(plain.fun, rel=1e-10, abs=1e-18 if jax.default_backend() == "gpu" else 1e-20)


def test_along_kernel_lowers_for_triton():
    """The kernel's Pallas -> Triton lowering, done on the CPU for a CUDA target (no GPU needed): a
    primitive without a Triton rule (as `slice` was, on the first GPU try) fails here, not on a GPU.
    Exact check (it lowers or raises); ragged and whole-block n, both dtypes."""
    from multiwalk.functions import cute_kernel

    with jax.enable_x64(True):
        for dt in (jnp.float64, jnp.float32):
            for n in (2000, 4096):
                x = jax.ShapeDtypeStruct((n,), dt)
                lowered = jax.jit(cute_kernel.rosenbrock_along_kernel).trace(
                    x, x, jax.ShapeDtypeStruct((), dt)).lower(lowering_platforms=("cuda",))
                assert "rosenbrock_along" in lowered.as_text()
