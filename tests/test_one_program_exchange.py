"""ReplicaExchange's short run as one program (multiwalk.one_program): which runs take it, and that
it is the run the chunks make.  Its split form is checked on 4 CPU devices in tests/devices_check.py.

On a CPU a run stays in chunks (``ONE_PROGRAM_PLATFORMS`` is the GPU's); these tests let the CPU
take the GPU's path.  The one program runs burn-in and sampling as two loops with the phase a
constant, the chunks on a CPU one loop with the phase an argument: two compilations, whose floats
may round differently on another CPU, so they are compared to ULPS steps of their dtype; the
decisions (which temperatures sit where, the counts of trials and acceptances) exactly.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_one_program import Compilations, Counted
from ulp import max_ulps

import multiwalk as mw
from multiwalk import one_program
from multiwalk.result import Status
from multiwalk.solvers import replica_exchange as rex

# a chain's x moves by x + step * r each trial, which one compilation may fuse into a multiply-add
# and the other not (an ulp of the box's width per trial at most; 30 iterations of a sphere)
ULPS = 64


def sphere(x):
    return jnp.sum(x**2)


def plane() -> mw.Problem:
    return mw.Problem(objective=sphere, lower=[-5.0, -5.0], upper=[5.0, 5.0])


SOLVER = mw.ReplicaExchange(nseq=8, nbeta=4, nburn=10, niter=20)
EXACT = ("labels", "n_accepted", "n_trials", "n_swaps")
CLOSE = ("samples", "fun_trace", "steps", "x")


@pytest.fixture
def on_any_platform(monkeypatch):
    monkeypatch.setattr(rex, "ONE_PROGRAM_PLATFORMS", ("cpu", "gpu"))


def same_run(a: Any, b: Any) -> None:
    for name in EXACT:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in CLOSE:
        assert max_ulps(getattr(a, name), getattr(b, name), scale=1.0) <= ULPS, name
    assert max_ulps(a.fun, b.fun, scale=1.0) <= ULPS


def test_a_short_exchange_is_one_program_with_the_chunks_run(on_any_platform):
    if SOLVER.nseq % jax.device_count():
        pytest.skip("devices=None: nseq does not split over this machine's devices (one device, a note, chunks)")
    problem = plane()
    one = mw.solve(problem, SOLVER, seed=3, progress=False)
    chunks = mw.solve(problem, SOLVER, seed=3, progress=False, time_limit=600.0)  # never reached
    assert one.stats["one_program"] and one.stats["chunks"] == 1 and not chunks.stats["one_program"]
    assert one.stats["iterations"] == chunks.stats["iterations"] == {"burn-in": 10, "sampling": 20}
    assert one.status == chunks.status == Status.SUCCESS
    same_run(one, chunks)
    # devices=1 asked for: one program on the default device (on a machine of several devices the
    # call above was split over them: another program, so compared as such)
    asked = mw.solve(problem, SOLVER, seed=3, progress=False, devices=1)
    assert asked.stats["one_program"] and asked.stats["devices"] == 1
    same_run(asked, one)


def test_a_repeated_exchange_runs_its_kept_program(monkeypatch, on_any_platform):
    problem = plane()
    first = mw.solve(problem, SOLVER, seed=2, progress=False, devices=1)
    planned = Counted(monkeypatch, mw.ReplicaExchange, "plan")
    looked_up = Counted(monkeypatch, one_program, "_compiled")
    with Compilations() as compiled:
        again = mw.solve(problem, SOLVER, seed=2, progress=False, devices=1)
    assert (planned.count, looked_up.count, compiled.count) == (0, 0, 0)
    assert np.array_equal(first.samples, again.samples) and first.fun == again.fun
    # another request of devices is another program: planned anew
    mw.solve(problem, SOLVER, seed=2, progress=False)
    assert planned.count == 1


def test_on_a_cpu_or_when_long_an_exchange_stays_in_chunks(on_any_platform, monkeypatch):
    problem = plane()
    plan = SOLVER.plan(problem, 1, None)
    assert SOLVER.one_program(problem, plan)
    # a run of more updates than ONE_PROGRAM_UPDATES, or of a model of many equations
    long_run = mw.ReplicaExchange(nseq=8, nbeta=4, nburn=10, niter=rex.ONE_PROGRAM_UPDATES // 64)
    assert not long_run.one_program(problem, plan)

    def many_equations(x):
        total = jnp.sum(x**2)
        for k in range(rex.ONE_PROGRAM_EQUATIONS):
            total = total + jnp.sin(k * x[0]) * 1e-9
        return total

    model = mw.Problem(objective=many_equations, lower=[-5.0, -5.0], upper=[5.0, 5.0])
    assert not SOLVER.one_program(model, SOLVER.plan(model, 1, None))
    # a platform not listed (the CPU, by default): a run in chunks
    monkeypatch.setattr(rex, "ONE_PROGRAM_PLATFORMS", ())
    assert not SOLVER.one_program(problem, plan)
    assert not mw.solve(problem, SOLVER, seed=0, progress=False).stats["one_program"]
    if jax.default_backend() == "cpu":
        monkeypatch.setattr(rex, "ONE_PROGRAM_PLATFORMS", ("gpu",))
        assert not SOLVER.one_program(problem, plan)


def test_the_objective_s_size_is_traced_once_per_problem(monkeypatch):
    # asked in every call on a GPU (one_program), it must not trace the model each time
    from multiwalk.solvers import _common

    traced = []
    count = _common._count_equations
    monkeypatch.setattr(_common, "_count_equations", lambda problem: traced.append(1) or count(problem))
    def own(x):  # a function of this test's own (the count is kept by functions and fingerprint)
        return jnp.sum(x**2)

    def box_of(function: Any) -> mw.Problem:
        return mw.Problem(objective=function, lower=[-5.0, -5.0], upper=[5.0, 5.0])

    first = _common.objective_equations(box_of(own))
    assert first > 0 and len(traced) == 1
    assert _common.objective_equations(box_of(own)) == first and len(traced) == 1  # the same functions and fingerprint

    def repeated(x, args):  # its size follows a static argument
        total = jnp.sum(x**2)
        for _ in range(args[0]):
            total = jnp.sin(total)
        return total

    looped = mw.Problem(objective=repeated, lower=[-5.0, -5.0], upper=[5.0, 5.0], args=(2,))
    few = _common.objective_equations(looped)
    looped.args = (50,)  # changed in place: traced again
    assert _common.objective_equations(looped) == few + 48 and len(traced) == 3


def test_one_device_asked_for_runs_the_loops_of_the_default_device():
    # in chunks, devices=1 on the default device finds the loops devices=None compiled (a loop is
    # kept per device only for another device: tests/devices_check.py's other_device)
    if jax.device_count() != 1:
        pytest.skip("devices=None may split the run on a machine of several devices")
    from multiwalk import compile_cache

    problem = plane()
    mw.solve(problem, SOLVER, seed=0, progress=False, time_limit=600.0)
    loops = len(compile_cache.compiled_loops())
    asked = mw.solve(problem, SOLVER, seed=0, progress=False, time_limit=600.0, devices=1)
    assert len(compile_cache.compiled_loops()) == loops and not asked.stats["one_program"]
