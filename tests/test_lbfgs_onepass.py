"""L-BFGS with one kernel per line-search evaluation (``LBFGS(kernel="onepass")``, solvers/lbfgs_onepass.py),
in Pallas' interpret mode on the CPU, plus the Triton lowering for a CUDA target.

The kernel is checked against numpy formulas on rings whose rows wrap; whole runs against the
fused two-pass form (``kernel="pallas"``), which must take the same iterations, evaluations and
line-search steps.  Tolerances say why they are what they are.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw
from multiwalk.functions import cute, cute_kernel
from multiwalk.solvers import lbfgs_onepass


@pytest.fixture(autouse=True, scope="module")
def _float64():
    """float64 for this file only (a global jax_enable_x64 would leak into the other test files)."""
    with jax.enable_x64(True):
        yield


def _rings(m: int, n: int, seed: int, dtype=jnp.float64):
    rng = np.random.default_rng(seed)
    X, G, S = (jnp.asarray(rng.standard_normal((r, n)), dtype) for r in (2, m + 2, m + 1))
    w = jnp.asarray(rng.standard_normal(2 * m), dtype)
    return X, G, S, w


def _reference(X, G, S, w, k, head, count, gamma, stp, m):  # noqa: ANN001, ANN202 - numpy, float64
    X, G, S, w = (np.asarray(a, np.float64) for a in (X, G, S, w))
    x, g = X[k % 2], G[k % (m + 2)]
    ss, ys = [], []
    upper = g
    for a in range(1, m + 1):
        on = a <= count
        lower = G[(k - a) % (m + 2)]
        ss.append(S[(k - a) % (m + 1)] if on else np.zeros_like(g))
        ys.append(upper - lower if on else np.zeros_like(g))
        upper = lower
    slots = [(head - a) % m for a in range(1, m + 1)]
    d = -gamma * g + sum(w[sl] * s for sl, s in zip(slots, ss)) + sum(w[m + sl] * y for sl, y in zip(slots, ys))
    s_t = stp * d
    x_t = x + s_t
    f, g_t = cute.extended_rosenbrock_value_and_grad(jnp.asarray(x_t))
    g_t = np.asarray(g_t)
    y_t = g_t - g
    sums = ([s @ g_t for s in ss] + [y @ g_t for y in ys] + [s @ y_t for s in ss] + [y @ y_t for y in ys]
            + [s_t @ y_t, y_t @ y_t, y_t @ g_t, g_t @ g_t, x_t @ x_t, float(f), g_t @ d])
    return x_t, g_t, s_t, np.asarray(sums)


@pytest.mark.parametrize(("m", "k", "count", "n", "rows", "chunks"), [
    (3, 11, 3, 90, 8, 2),  # full window, rings wrapped (k > m + 2); 45 rows: ragged against 16 per program
    (3, 1, 1, 90, 8, 2),  # one pair stored: the other ages are not read
    (4, 0, 0, 128, 16, 1),  # the first iteration (no pairs, d = -gamma g); whole programs, no masks
])
def test_line_pass_matches_numpy(m, k, count, n, rows, chunks):
    X, G, S, w = _rings(m, n, seed=k + 7 * m)
    head, gamma, stp = k % m, 0.8, 0.37
    ints, floats = lbfgs_onepass.ring_rows(jnp.asarray(k), jnp.asarray(head), jnp.asarray(count), w,
                                           jnp.asarray(gamma), jnp.asarray(stp), m)
    X1, G1, S1, sums = lbfgs_onepass.line_pass(X * 1.0, G * 1.0, S * 1.0, ints, floats, cute_kernel.rosenbrock_block,
                                               rows=rows, chunks=chunks, interpret=True)
    x_t, g_t, s_t, want = _reference(X, G, S, w, k, head, count, gamma, stp, m)
    # Tolerance 1e-12 relative: float64 sums of <= 128 products folded in another order (~1e-15),
    # and d a sum of 2m + 1 terms in the same order as the reference (exact up to FMA contraction).
    np.testing.assert_allclose(np.asarray(X1[(k + 1) % 2]), x_t, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(G1[(k + 1) % (m + 2)]), g_t, rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(np.asarray(S1[k % (m + 1)]), s_t, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(sums[: 4 * m + 7]), want, rtol=1e-12, atol=1e-10)
    assert not np.asarray(sums[4 * m + 7:]).any()  # unused lanes of the table
    # every other row of the rings is untouched (exact: not written)
    for before, after, written in ((X, X1, (k + 1) % 2), (G, G1, (k + 1) % (m + 2)), (S, S1, k % (m + 1))):
        keep = [r for r in range(before.shape[0]) if r != written]
        np.testing.assert_array_equal(np.asarray(after)[keep], np.asarray(before)[keep])


def test_line_pass_lowers_for_triton():
    """The kernel's Pallas -> Triton lowering for a CUDA target, on the CPU (raises on a missing rule),
    float64 and float32, ragged and whole programs, at the default launch."""
    m = 7
    for dt, n in ((jnp.float64, 4096), (jnp.float32, 4100)):
        X, G, S, w = _rings(m, n, 0, dt)
        one = jnp.asarray(3, jnp.int32)
        ints, floats = lbfgs_onepass.ring_rows(one, one, one, w, jnp.asarray(1.0, dt), jnp.asarray(0.5, dt), m)
        jax.jit(lambda X, G, S, i, f: lbfgs_onepass.line_pass(X, G, S, i, f, cute_kernel.rosenbrock_block)).trace(
            X, G, S, ints, floats).lower(lowering_platforms=("cuda",))


@pytest.fixture(scope="module")
def runs():
    """Extended Rosenbrock, n = 2002 (1001 rows of pairs: ragged against the 32 x 16 rows per program
    of kernel_block=64), m = 7 against 36 iterations (the rings wrap), from the seed's start;
    the fused two-pass form and the one-pass form, the latter in chunks of ~10 ms (the
    driver enters and leaves its loop many times)."""
    x0 = cute.start("extended_rosenbrock", 2002)
    problem = mw.Problem(value_and_grad=cute.extended_rosenbrock_value_and_grad, x0=x0)
    fused = mw.solve(problem, mw.LBFGS(kernel="pallas"), progress=False)
    onepass = mw.solve(problem, mw.LBFGS(kernel="onepass", kernel_block=64), progress=False, chunk_seconds=0.01)
    return fused, onepass, problem


def test_onepass_run_is_the_fused_run(runs):
    fused, onepass, _ = runs
    mode = " (interpret mode)" if jax.default_backend() == "cpu" else ""
    assert fused.stats["kernel"] == "pallas" + mode
    assert onepass.stats["kernel"] == "onepass" + mode
    assert "one Pallas kernel per line-search evaluation" in onepass.stats["kernel_reason"]
    assert "value_and_grad.block" in onepass.stats["line_evaluation"]
    assert onepass.status == fused.status == mw.lbfgs.LBFGSStatus.SUCCESS
    assert (onepass.iterations, onepass.nfev) == (fused.iterations, fused.nfev) == (36, 48)
    assert onepass.stats["chunks"] > 3
    rows = fused.iterations + 1
    nfev = onepass.history["nfev"][:rows, 0]
    np.testing.assert_array_equal(nfev, fused.history["nfev"][:rows, 0])
    assert np.diff(nfev).max() > 1  # some line searches rejected their first trial (48 evaluations, 36 iterations)
    assert not onepass.history["f"][rows:].any()  # nothing written past the last iteration
    # Rounding: the products are folded in another order and d is summed in another order than
    # pass B's; over 36 iterations f drifts to ~7e-8 relative (measured), so 1e-5 as in
    # test_lbfgs_kernel; the line search's steps likewise.  f at the end ~3.5e-10.
    np.testing.assert_allclose(onepass.history["f"][1:rows], fused.history["f"][1:rows], rtol=1e-5)
    np.testing.assert_allclose(onepass.history["stp"][1:rows], fused.history["stp"][1:rows], rtol=1e-5)
    np.testing.assert_allclose(onepass.x, fused.x, atol=1e-8)  # both within 1e-6 of the minimum x = 1
    np.testing.assert_allclose(onepass.gnorm, fused.gnorm, rtol=1e-3)  # ~1e-5 near the end: relative drift


def test_onepass_falls_back_where_it_does_not_apply():
    """Several starts, a user diag, no block hook: the 'auto' form runs, kernel_reason says why."""
    x0 = cute.start("extended_rosenbrock", 20)
    plain = mw.Problem(objective=cute.extended_rosenbrock, x0=x0)  # no value_and_grad.block
    r = mw.solve(plain, mw.LBFGS(kernel="onepass", max_iterations=3), progress=False)
    fallback = "xla" if jax.default_backend() == "cpu" else "pallas"  # the two-pass form 'auto' takes there
    assert r.stats["kernel"] == fallback and "one-pass loop not used" in r.stats["kernel_reason"]
    assert "block-local hook" in r.stats["kernel_reason"]
    hooked = mw.Problem(value_and_grad=cute.extended_rosenbrock_value_and_grad, x0=np.stack([x0, x0 + 0.1]))
    plan = mw.LBFGS(kernel="onepass").onepass_plan(hooked)
    assert not plan.use and "2 starts" in plan.reason
    one = mw.Problem(value_and_grad=cute.extended_rosenbrock_value_and_grad, x0=x0)
    assert "diag" in mw.LBFGS(kernel="onepass", diag=np.ones(20)).onepass_plan(one).reason
    assert mw.LBFGS(kernel="onepass").onepass_plan(one).use
    if jax.default_backend() == "cpu":  # 'auto' off GPUs: the XLA form (on one GPU: test_auto_takes_onepass...)
        assert not mw.LBFGS().onepass_plan(one).use
    with pytest.raises(ValueError, match="kernel must be one of .*'onepass'"):
        mw.LBFGS(kernel="one-pass")


def test_auto_takes_onepass_on_one_gpu_in_float64_only(monkeypatch):
    """'auto' on a (simulated) single-GPU host: the one-pass loop for float64, not float32 (measured one
    more iteration there), not for several starts or without the block hook."""
    monkeypatch.setattr(lbfgs_onepass, "backend", lambda names: ("cuda", True))
    x0 = cute.start("extended_rosenbrock", 20)
    vg = cute.extended_rosenbrock_value_and_grad
    auto = mw.LBFGS()
    plan = auto.onepass_plan(mw.Problem(value_and_grad=vg, x0=x0))
    assert plan.use and not plan.interpret and "kernel='auto'" in plan.reason
    assert not auto.onepass_plan(mw.Problem(value_and_grad=vg, x0=x0, dtype="float32")).use
    assert not auto.onepass_plan(mw.Problem(value_and_grad=vg, x0=np.stack([x0, x0]))).use
    assert not auto.onepass_plan(mw.Problem(objective=cute.extended_rosenbrock, x0=x0)).use
    assert not mw.LBFGS(kernel="xla").onepass_plan(mw.Problem(value_and_grad=vg, x0=x0)).use


def test_interrupted_onepass_run_resumes_to_the_same_end(runs, tmp_path):
    """Ctrl-C (a KeyboardInterrupt from the callback) after the 3rd chunk: the ring state is written
    to the checkpoint and the partial result is returned; resuming ends where the uninterrupted run
    ended, bit for bit (chunks end at iteration boundaries and change no arithmetic)."""
    _, whole, problem = runs  # the same problem and solver: the compiled loop is reused
    solver = mw.LBFGS(kernel="onepass", kernel_block=64)
    seen = []

    def stop_after_three(info):  # noqa: ANN001, ANN202
        seen.append(info["done"][0])
        if len(seen) == 3:
            raise KeyboardInterrupt

    path = tmp_path / "onepass.ckpt"
    part = mw.solve(problem, solver, progress=False, chunk_seconds=0.01, checkpoint=path, callback=stop_after_three)
    assert part.status == mw.lbfgs.LBFGSStatus.INTERRUPTED and 0 < part.iterations == seen[-1] < whole.iterations
    rest = mw.solve(problem, solver, progress=False, resume=path)
    assert (rest.status, rest.iterations, rest.nfev) == (whole.status, whole.iterations, whole.nfev)
    np.testing.assert_array_equal(rest.x, whole.x)
    assert rest.fun == whole.fun


def _accepts(order: str, m: int, steps: int, seed: int):
    """The accepting branch (``_accept``) run ``steps`` times on made-up kernel sums, with the small
    matrices in ``order``: each step's direction coefficients by age and g'd."""
    from multiwalk.solvers.lbfgs.iteration import Config
    from multiwalk.solvers.more_thuente import line_search_init

    rng = np.random.default_rng(seed)
    cfg = Config(m=m, eps=1e-12, params=mw.LBFGS(m=m)._config(jnp.float64).params, diag_fn=None, use_h0=False)
    ls0 = line_search_init(jnp.asarray(1.0), jnp.asarray(-1.0), jnp.asarray(1.0), cfg.params)
    st = lbfgs_onepass.OnePassState(
        X=None, G=None, S=None, w=jnp.zeros(2 * m), f=jnp.asarray(1.0), SY=jnp.zeros((m, m)), YY=jnp.zeros((m, m)),
        a=jnp.zeros(m), b=jnp.zeros(m), gamma=jnp.asarray(1.0), gg=jnp.asarray(1.0), head=jnp.asarray(0, jnp.int32),
        count=jnp.asarray(0, jnp.int32), ls=ls0, iteration=jnp.asarray(0, jnp.int32), nfev=jnp.asarray(1, jnp.int32),
        gnorm=jnp.asarray(1.0), xnorm=jnp.asarray(1.0), stp=jnp.asarray(0.0), status=jnp.asarray(0, jnp.int32),
        nonfinite=jnp.asarray(0, jnp.int32))
    out = []
    old, lbfgs_onepass.SMALL_ORDER = lbfgs_onepass.SMALL_ORDER, order
    try:
        for _ in range(steps):
            sums = rng.standard_normal(64)
            c = int(st.count)
            sums[c:m] = sums[m + c:2 * m] = sums[2 * m + c:3 * m] = sums[3 * m + c:4 * m] = 0.0  # ages not stored
            sums[4 * m] = 1.0 + rng.random()  # s_t'y_t > 0 (curvature), y_t'y_t > 0
            sums[4 * m + 1] = 2.0 + rng.random()
            st = lbfgs_onepass._accept(cfg, st, ls0._replace(info=jnp.asarray(1), stp=jnp.asarray(0.7)), jnp.asarray(sums))
            head = 0 if order == "chronological" else int(st.head)
            slot = (head - np.arange(1, m + 1)) % m  # ring_rows' slots of the pairs of age 1..m
            w = np.asarray(st.w)
            out.append((np.concatenate([w[slot], w[m + slot]]), float(st.ls.dginit), int(st.count)))
    finally:
        lbfgs_onepass.SMALL_ORDER = old
    return out


def test_chronological_small_matrices_give_the_ring_form_coefficients():
    """The default chronological order of the small matrices (every index static) and the ring order
    (the two-pass state's slots): the same direction coefficients by age and g'd after each of 11
    accepted steps at m = 4 (the window fills, then wraps).  Tolerance 1e-12 relative: the same
    formulas on the same numbers, only the zero terms of unused positions sit elsewhere in the 4x4
    products' sums (measured equal to ~1e-15)."""
    assert lbfgs_onepass.SMALL_ORDER == "chronological"
    ring, chrono = _accepts("ring", 4, 11, 3), _accepts("chronological", 4, 11, 3)
    for (w1, gd1, c1), (w2, gd2, c2) in zip(ring, chrono):
        assert c1 == c2
        np.testing.assert_allclose(w2, w1, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(gd2, gd1, rtol=1e-12)
    assert ring[-1][2] == 4 and np.abs(ring[-1][0]).min() > 0  # a full window: every coefficient used


def test_command_buffers_on_gpus_only_and_refused_options_fall_back(monkeypatch):
    """lbfgs_onepass.COMMAND_BUFFERS (off by default: not a clear win on an H200) reaches the driver as
    XLA options on a (simulated) GPU only, not in interpret mode nor for the two-pass form; options
    XLA refuses give a warning and the loop compiled without them, the same result."""
    x0 = cute.start("extended_rosenbrock", 20)
    problem = mw.Problem(value_and_grad=cute.extended_rosenbrock_value_and_grad, x0=x0)
    cb = "FUSION,CUSTOM_CALL,WHILE,CONDITIONAL"
    monkeypatch.setattr(lbfgs_onepass, "COMMAND_BUFFERS", cb)
    def options(solver):  # noqa: ANN001, ANN202
        return dict(solver.plan(problem, 1, None).compiler_options)

    on_cpu = jax.default_backend() == "cpu"
    assert options(mw.LBFGS(kernel="onepass")) == ({} if on_cpu else {"xla_gpu_enable_command_buffer": cb})
    monkeypatch.setattr(lbfgs_onepass, "backend", lambda names: ("cuda", True))
    assert options(mw.LBFGS(kernel="onepass")) == {"xla_gpu_enable_command_buffer": cb}
    monkeypatch.setattr(lbfgs_onepass, "COMMAND_BUFFERS", None)
    assert options(mw.LBFGS(kernel="onepass")) == {}  # the default: XLA's own
    assert options(mw.LBFGS(kernel="pallas")) == {}
    monkeypatch.undo()

    class Refused(mw.LBFGS):
        def plan(self, problem, devices, time_limit):  # noqa: ANN001, ANN202
            plan = super().plan(problem, devices, time_limit)  # not an enum value: XLA refuses it
            return dataclasses.replace(plan, compiler_options=(("xla_gpu_enable_command_buffer", "+NO_SUCH_TYPE"),))

    plain = mw.solve(problem, mw.LBFGS(kernel="xla", max_iterations=5), progress=False)
    with pytest.warns(UserWarning, match="XLA refused the compiler options"):
        refused = mw.solve(problem, Refused(kernel="xla", max_iterations=5), progress=False)
    assert (refused.iterations, refused.nfev, refused.status) == (plain.iterations, plain.nfev, plain.status)
    np.testing.assert_array_equal(refused.x, plain.x)  # exact: the same loop, compiled without the options


@pytest.fixture(scope="module")
def rosenbrock20():
    """Extended Rosenbrock, n = 20, float64: 21 iterations in either form."""
    x0 = cute.start("extended_rosenbrock", 20)
    return mw.Problem(value_and_grad=cute.extended_rosenbrock_value_and_grad, x0=x0)


@pytest.fixture(scope="module")
def onepass_checkpoint(rosenbrock20, tmp_path_factory):
    """A one-pass run stopped by Ctrl-C (a KeyboardInterrupt from the callback) after its 2nd chunk,
    its checkpoint, and the uninterrupted run's result."""
    solver = mw.LBFGS(kernel="onepass")
    whole = mw.solve(rosenbrock20, solver, progress=False)
    seen = []

    def stop_after_two(info):  # noqa: ANN001, ANN202
        seen.append(info["done"][0])
        if len(seen) == 2:
            raise KeyboardInterrupt

    path = tmp_path_factory.mktemp("onepass_checkpoint") / "onepass.ckpt"
    part = mw.solve(rosenbrock20, solver, progress=False, checkpoint=path, callback=stop_after_two)
    assert part.status == mw.lbfgs.LBFGSStatus.INTERRUPTED and 0 < part.iterations < whole.iterations
    return path, whole


# ---------------------------------------------------------------- checkpoints of either form
def test_resume_in_another_form_names_the_form_and_the_options(rosenbrock20, onepass_checkpoint, monkeypatch):
    """``kernel`` is a resumable option, but a one-pass checkpoint holds rings (X, G, S), not the
    stored pairs P of the other forms.  A solver that cannot convert it gets an error that names
    each side's form and the options that changed (not "saved array of shape (1, 2, 20) does not
    fit the state's (1, 20); was it written for another problem?": it was not), before the loop is
    compiled (the error comes from solve's restore, right after the start)."""
    path, _ = onepass_checkpoint
    # a solver that cannot convert (LBFGS converts, see the next test: its hook is switched off here)
    monkeypatch.setattr(mw.LBFGS, "convert_checkpoint", lambda self, *args: None, raising=False)
    with pytest.raises(ValueError, match=r"OnePassState.*LBFGSState.*kernel='onepass' then, 'xla' now") as err:
        mw.solve(rosenbrock20, mw.LBFGS(kernel="xla"), progress=False, resume=path)
    assert str(path) in str(err.value) and "machine" in str(err.value)


def test_one_pass_checkpoint_resumes_in_the_two_pass_form(rosenbrock20, onepass_checkpoint):
    """Resumed with kernel='xla' (what kernel='auto' gives on a CPU, in float32, or on a device count
    that does not divide n / 2), the run ends
    where the uninterrupted one-pass run ended: the same iterations and evaluations (both forms take
    the same ones on this problem: n = 20, 21 iterations), x within 1e-8 (both within ~1e-7 of the
    minimum; the forms differ in rounding only)."""
    path, whole = onepass_checkpoint
    rest = mw.solve(rosenbrock20, mw.LBFGS(kernel="xla"), progress=False, resume=path)
    assert (rest.status, rest.iterations, rest.nfev) == (whole.status, whole.iterations, whole.nfev)
    np.testing.assert_allclose(rest.x, whole.x, atol=1e-8)
    # and the reverse: a two-pass checkpoint resumed by the one-pass loop (older gradients rebuilt as g - y)
    seen = []

    def stop_after_two(info):  # noqa: ANN001, ANN202
        seen.append(1)
        if len(seen) == 2:
            raise KeyboardInterrupt

    two = path.with_name("two_pass.ckpt")
    part = mw.solve(rosenbrock20, mw.LBFGS(kernel="xla"), progress=False, checkpoint=two, callback=stop_after_two)
    assert 0 < part.iterations < whole.iterations
    rest = mw.solve(rosenbrock20, mw.LBFGS(kernel="onepass"), progress=False, resume=two)
    assert (rest.status, rest.iterations, rest.nfev) == (whole.status, whole.iterations, whole.nfev)
    np.testing.assert_allclose(rest.x, whole.x, atol=1e-8)


# ---------------------------------------------------------------- where the one-pass plan stops
def test_onepass_plan_falls_back_above_m_14(rosenbrock20, monkeypatch):
    """m = 15 needs 67 sums, the kernel's table has 64 lanes: the plan must say so and fall back (as it
    does for several starts or a diag), under 'onepass' and under 'auto' on a (simulated) GPU."""
    assert lbfgs_onepass.plan("onepass", rosenbrock20, 1, False).use  # m = 7 by default: it applies
    plan = mw.LBFGS(kernel="onepass", m=15).onepass_plan(rosenbrock20)
    assert not plan.use and "m = 15" in plan.reason
    monkeypatch.setattr(lbfgs_onepass, "backend", lambda names: ("cuda", True))
    assert not mw.LBFGS(m=15).onepass_plan(rosenbrock20).use
    monkeypatch.undo()
    # and the run itself falls back, rather than ValueError "line_pass: m=15 needs 67 sums" from inside the trace
    r = mw.solve(rosenbrock20, mw.LBFGS(kernel="onepass", m=15, max_iterations=3), progress=False)
    assert r.iterations == 3 and "one-pass loop not used" in r.stats["kernel_reason"]


def test_onepass_kernel_block_below_the_hooks_width(rosenbrock20):
    """kernel_block=1 (a power of two, so LBFGS accepts it) with kernel='onepass' is 1 // 2 = 0 rows of
    Rosenbrock's pairs per block step: either a ValueError naming kernel_block before compiling, or a
    run (with at least one row), never a ZeroDivisionError (pl.cdiv(pairs, 0)) while tracing."""
    solver = mw.LBFGS(kernel="onepass", kernel_block=1, max_iterations=2)
    try:
        solver.check(rosenbrock20)
        r = mw.solve(rosenbrock20, solver, progress=False)
    except ValueError as err:
        assert "kernel_block" in str(err)
    else:
        assert r.iterations == 2


def test_a_wrong_block_hook_is_named_before_compiling():
    """A user's ``value_and_grad.block`` returning g of shape (rows,) instead of (rows, width): the error
    names the hook, where the traced kernel's own ("Incompatible shapes for broadcasting: shapes=[(32,
    2), (32,), ()]") names neither the hook nor the shapes it must return.  Checked by ``LBFGS.check``
    (no compiling)."""
    from multiwalk.functions import cute_kernel

    def vg(x):  # noqa: ANN001, ANN202
        return cute.extended_rosenbrock_value_and_grad(x)

    def block(xb):  # noqa: ANN001, ANN202
        f, g = cute_kernel.rosenbrock_block(xb)
        return f, g[:, 0]  # wrong: g must be (rows, width)

    block.width = 2
    vg.block = block
    problem = mw.Problem(value_and_grad=vg, x0=cute.start("extended_rosenbrock", 20))
    with pytest.raises((TypeError, ValueError), match=r"value_and_grad\.block"):
        mw.LBFGS(kernel="onepass").check(problem)
