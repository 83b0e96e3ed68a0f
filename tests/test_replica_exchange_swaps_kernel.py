"""ReplicaExchange's swap attempts in one Pallas kernel (interpret mode on the CPU) against the XLA form."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ulp import assert_close_ulp

import multiwalk as mw
from multiwalk.solvers import replica_exchange_swaps_kernel as swaps_kernel


def _bits(a: jax.Array) -> np.ndarray:
    """The bit patterns of a float array: equality of these is equality bit for bit (NaN, -0.0)."""
    a = np.asarray(a)
    return a.view({4: np.int32, 8: np.int64}[a.dtype.itemsize])


@pytest.mark.parametrize("nbeta", [6, 8])
def test_swap_attempts_equal_the_xla_form_bit_for_bit(nbeta):
    nseq = 5
    solver = mw.ReplicaExchange(nbeta=nbeta, nseq=nseq, kernel="xla")
    rng = np.random.default_rng(nbeta)
    with jax.enable_x64(True):
        fun = rng.exponential(3.0, (nseq, nbeta))
        fun[0, 1] = np.nan  # NaN never swaps
        fun[1, 2], fun[1, 3] = np.inf, np.inf  # inf - inf: NaN, never swaps
        fun[2, 0] = -np.inf
        fun[3, 1] = fun[3, 2] = 1.5  # equal neighbours: always swap
        fun[4, :] = -0.0  # all equal, and the sign of zero must survive the kernel's exact reads
        fun = jnp.asarray(fun)
        key_pairs, key_u = jax.random.split(jax.random.key(1))
        pairs = jax.random.randint(key_pairs, (nbeta, nseq), 0, nbeta - 1)
        log_u = jnp.log(jax.random.uniform(key_u, (nbeta, nseq), fun.dtype))
        beta = jnp.asarray(solver.ladder())
        want = solver._swap_attempts(fun, pairs[..., None], log_u[..., None], beta)
        got = swaps_kernel.swap_attempts(fun, pairs, log_u, beta, block=4, interpret=True)  # 2 programs
    # exact on any machine: the values come out as the inputs, moved by the decisions (no arithmetic)
    np.testing.assert_array_equal(_bits(got[0]), _bits(want[0]))
    for name, g, w in zip(("perm", "tries", "swaps"), got[1:], want[1:]):
        assert g.shape == w.shape, name  # (perm: int32 here, the XLA form's default int there)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=name)
    swaps = np.asarray(want[3])
    assert swaps.sum() > 0 and swaps.sum() < np.asarray(want[2]).sum()  # some swapped, some did not
    assert swaps[0, 0] == 0 or swaps[0, 1] == 0  # the NaN at column 1 of row 0 never moved
    assert np.asarray(want[2]).sum() == nseq * nbeta  # every attempt counted once


def _sphere(x):
    return jnp.sum((x - 0.3) ** 2)


@pytest.fixture(scope="module")
def solves():
    problem = mw.Problem(objective=_sphere, lower=[-1.0, -1.0], upper=[1.0, 1.0])
    xla = mw.ReplicaExchange(nbeta=6, nseq=5, nburn=3, niter=3, kernel="xla")
    pallas = dataclasses.replace(xla, kernel="pallas")
    return mw.solve(problem, xla, seed=3, progress=False), mw.solve(problem, pallas, seed=3, progress=False)


_FIELDS = ["x", "fun", "samples", "fun_trace", "fun_trace_all", "acceptance", "exchange_rate", "steps",
           "n_accepted", "n_trials", "n_swaps", "labels", "round_trips", "accept_history"]


def test_a_solve_with_the_kernel_equals_the_xla_form_in_every_field(solves):
    xla, pallas = solves
    assert xla.stats["kernel"] == "xla"
    assert pallas.stats["kernel"] == ("pallas" if jax.default_backend() == "gpu" else "pallas (interpret mode)")
    assert "swap kernel" in pallas.stats["kernel_reason"]
    # two compiled programs (the Metropolis moves fused around another swap step): every decision
    # exactly, the floats to a few ulp (NaN where never tried counts as equal).  Measured 0 ulp on
    # this CPU; 64 float32 ulp (8e-6 relative) covers another CPU contracting a move's x + step * z
    # into a fused multiply-add over these 6 iterations (an ulp of x a move), far below a wrong
    # move's change (the step size, ~0.1).  Values below 1 in 1's ulp: chi2's terms are ~1.
    for name in _FIELDS:
        assert_close_ulp(np.asarray(getattr(pallas, name)), np.asarray(getattr(xla, name)), 64, name, scale=1.0)
    assert np.asarray(xla.n_swaps).sum() > 0  # exchanges happened: the comparison is not vacuous


def test_kernel_option_and_plan():
    with pytest.raises(ValueError, match=r"kernel must be one of \('auto', 'xla', 'pallas'\), got 'triton'"):
        mw.ReplicaExchange(kernel="triton")
    solver = mw.ReplicaExchange(kernel="auto")
    if jax.default_backend() == "cpu":
        assert not solver.kernel_plan().use_pallas and "GPUs only" in solver.kernel_plan().reason
    # split over devices: the kernel on each device's sequences (tests/test_devices.py runs it)
    split = mw.ReplicaExchange(kernel="pallas").kernel_plan(split=True)
    assert split.use_pallas and split.split and "each device's sequences" in split.reason
    assert "kernel" in mw.ReplicaExchange.resumable_options  # how the attempts run, not what they compute


@pytest.mark.parametrize("loops", ["one", "per_phase"])
@pytest.mark.parametrize("stop_in", ["burn-in", "sampling"])
def test_resume_with_the_kernel_in_either_phase_equals_one_run(stop_in, loops, tmp_path):
    # The swap kernel in one compiled loop of both phases (the phase its argument; the CPU's
    # default) and in a loop per phase (a GPU's default for a cheap objective): a run stopped
    # after the first chunk of burn-in or of sampling (a callback's first chunk of a phase is one
    # iteration) and resumed from its checkpoint must equal one run bit for bit.
    problem = mw.Problem(objective=_sphere, lower=[-1.0, -1.0], upper=[1.0, 1.0])
    solver = mw.ReplicaExchange(nbeta=6, nseq=5, nburn=3, niter=3, kernel="pallas", loops=loops)
    whole = mw.solve(problem, solver, seed=3, progress=False)

    def stop(info: dict) -> None:
        if info["phase"] == stop_in:
            raise KeyboardInterrupt

    checkpoint = tmp_path / "run.npz"
    part = mw.solve(problem, solver, seed=3, progress=False, checkpoint=checkpoint, callback=stop)
    assert part.status == mw.Status.INTERRUPTED
    assert part.stats["iterations"] == ({"burn-in": 1, "sampling": 0} if stop_in == "burn-in"
                                        else {"burn-in": 3, "sampling": 1})
    resumed = mw.solve(problem, solver, seed=3, progress=False, resume=checkpoint)
    assert resumed.stats["iterations"] == {"burn-in": 3, "sampling": 3}
    for name in _FIELDS:
        np.testing.assert_array_equal(np.asarray(getattr(resumed, name)), np.asarray(getattr(whole, name)),
                                      err_msg=name)


def test_exchange_unroll_is_never_ignored_by_the_kernel(monkeypatch):
    # exchange_unroll shapes the XLA form only: with kernel='pallas' it is refused before anything
    # compiles; with kernel='auto' on a GPU (the backend faked: only the plan is made) it picks the
    # XLA form, which then honours it, and the reason says so.
    from multiwalk import kernels

    with pytest.raises(ValueError, match=r"exchange_unroll=4 .* kernel='pallas'.* leave exchange_unroll at None"):
        mw.ReplicaExchange(kernel="pallas", exchange_unroll=4)
    monkeypatch.setattr(kernels, "backend", lambda *args: ("cuda", True))
    assert mw.ReplicaExchange(kernel="auto").kernel_plan().use_pallas  # the fake GPU: the kernel by default
    unrolled = mw.ReplicaExchange(kernel="auto", exchange_unroll=4).kernel_plan()
    assert not unrolled.use_pallas and "exchange_unroll=4" in unrolled.reason
