"""The chunk's loop in blocks of a fixed trip count (``RunPlan.loop_block``, ``Solver.loop_block``).

On GPUs ReplicaExchange runs 20 iterations a trip of the chunk's ``while_loop`` (XLA reads a
``while_loop``'s condition back on the host at every trip); here, on the CPU, the block is forced
through the solver's ``loop_block``.
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw
from multiwalk.distributed import Placement
from multiwalk.solvers.base import Phase, RunPlan
from multiwalk.solvers.replica_exchange import ReplicaExchange

driver = importlib.import_module("multiwalk.solve")  # the module (``multiwalk.solve`` is also the function)


def sphere2(x):
    return jnp.sum(x**2)


@pytest.fixture
def problem():
    return mw.Problem(objective=sphere2, lower=[-5.0, -5.0], upper=[5.0, 5.0])


def _run(problem, nburn=36, niter=60, **options):
    # 36 and 60: the forced block of 8 runs as 4, the largest divisor of 8 dividing both
    chunks = []
    result = mw.solve(problem, mw.ReplicaExchange(nbeta=8, nseq=4, nburn=nburn, niter=niter), seed=3,
                      progress=False, callback=lambda info: chunks.append(tuple(info["done"])), **options)
    return result, chunks


def test_blocks_give_the_run_of_one_iteration_a_trip(problem, monkeypatch):
    # The same iterations in the same order, one loop body: the same chains.  The two programs
    # differ (a loop in a loop), so the decisions are compared exactly (acceptances, swaps) and the
    # floats to 4 ulp (float32: XLA may fuse the body otherwise inside the inner loop).
    monkeypatch.setattr(ReplicaExchange, "loop_block", lambda self, problem, platform: 1)  # a CPU's, on a GPU too
    one, one_chunks = _run(problem)
    monkeypatch.setattr(ReplicaExchange, "loop_block", lambda self, problem, platform: 8)
    # chunks after the first as the clock might size them, 7 iterations (no multiple of the block)
    monkeypatch.setattr(driver, "_next_chunk_length", lambda run, n, n_run, per_step: 7)
    blocked, chunks = _run(problem)
    for decisions in ("n_accepted", "n_trials", "n_swaps", "label_trace"):
        assert np.array_equal(np.asarray(getattr(one, decisions)), np.asarray(getattr(blocked, decisions))), decisions
    eps = 4 * np.finfo(np.float32).eps
    np.testing.assert_allclose(np.asarray(blocked.samples), np.asarray(one.samples), rtol=eps, atol=eps)
    np.testing.assert_allclose(np.asarray(blocked.fun), np.asarray(one.fun), rtol=eps, atol=eps)
    # every chunk a multiple of 4 iterations (the first, which times a step, too); one per trip before;
    # no phase run past its end
    assert all(done % 4 == 0 for chunk in chunks for done in chunk), chunks
    assert chunks[:2] == [(4, 0), (8, 0)] and one_chunks[0] == (1, 0)
    assert blocked.stats["iterations"] == one.stats["iterations"] == {"burn-in": 36, "sampling": 60}


def test_the_block_divides_every_phase_and_the_resumed_position(problem, monkeypatch):
    monkeypatch.setattr(ReplicaExchange, "loop_block", lambda self, problem, platform: 8)
    solver = mw.ReplicaExchange(nbeta=8, nseq=4)
    placement = type("P", (), {"devices": (None,)})()

    def block(lengths, done, plan=None):
        phases = [Phase(f"phase {i}", n) for i, n in enumerate(lengths)]
        return driver._loop_block(problem, solver, plan or RunPlan(), phases, done, placement, on_host=False)

    assert block([400, 1000], [0, 0]) == 8
    assert block([300, 500], [0, 0]) == 4  # the seed's default: 4 divides both
    assert block([301, 500], [0, 0]) == 1
    assert block([400, 1000], [400, 12]) == 4  # a run resumed after 12 sampling iterations
    assert block([400, 1000], [0, 0], RunPlan(max_chunk=2)) == 2  # a writer's ring of 2 steps
    assert driver._loop_block(problem, solver, RunPlan(), [Phase("p", 400)], [0], placement, on_host=True) == 1


def test_replica_exchange_s_block_on_a_gpu_for_the_documented_phases(problem, monkeypatch):
    # The default (not forced) block where the loop runs on a GPU: 20 for the seed default's
    # 300 + 500, the xringaus fit's 400 + 1000 and 20 + 100; 1 where no divisor of 20 fits.
    monkeypatch.setattr(driver, "_platform", lambda placement: "gpu")
    solver = mw.ReplicaExchange(nbeta=8, nseq=4)
    placement = type("P", (), {"devices": (None,)})()

    def block(*lengths):
        phases = [Phase(f"phase {i}", n) for i, n in enumerate(lengths)]
        return driver._loop_block(problem, solver, RunPlan(), phases, [0] * len(lengths), placement, on_host=False)

    assert (block(300, 500), block(400, 1000), block(20, 100), block(36, 60), block(301, 500)) == (20, 20, 20, 4, 1)
    monkeypatch.setattr(driver, "_platform", lambda placement: "cpu")
    assert block(300, 500) == 1


def test_a_solver_that_can_stop_early_runs_one_iteration_a_trip(problem, monkeypatch):
    # A block would run past ``done`` (a converged L-BFGS would go on iterating): such solvers get 1.
    lbfgs = mw.LBFGS()
    monkeypatch.setattr(type(lbfgs), "loop_block", lambda self, problem, platform: 8, raising=False)
    placement = type("P", (), {"devices": (None,)})()
    assert driver._loop_block(problem, lbfgs, RunPlan(), [Phase("p", 400)], [0], placement, on_host=False) == 1


def test_a_resumed_run_in_blocks_equals_one_run(problem, monkeypatch, tmp_path):
    # Interrupted after two chunks, resumed: the chunks of both calls are multiples of the block, and
    # the end is the single run's (the same program: bit for bit).  Resumed where the block is 1
    # (a CPU), the checkpoint written in blocks gives the same run: decisions exactly, floats to 4 ulp
    # (float32; two programs, as in the first test).
    monkeypatch.setattr(ReplicaExchange, "loop_block", lambda self, problem, platform: 1)  # a CPU's, on a GPU too
    one, _ = _run(problem)
    monkeypatch.setattr(ReplicaExchange, "loop_block", lambda self, problem, platform: 8)
    whole, _ = _run(problem)
    path = tmp_path / "ckpt.npz"
    stop_after_two = []

    def two_chunks(info):
        stop_after_two.append(1)
        if len(stop_after_two) == 2:
            raise KeyboardInterrupt

    solver = mw.ReplicaExchange(nbeta=8, nseq=4, nburn=36, niter=60)
    part = mw.solve(problem, solver, seed=3, progress=False, checkpoint=path, callback=two_chunks)
    assert part.status == mw.Status.INTERRUPTED
    rest, chunks = _run(problem, resume=path)
    assert all(done % 4 == 0 for chunk in chunks for done in chunk), chunks
    assert np.array_equal(np.asarray(rest.samples), np.asarray(whole.samples))
    monkeypatch.setattr(ReplicaExchange, "loop_block", lambda self, problem, platform: 1)  # a CPU's block
    on_cpu, chunks = _run(problem, resume=path)
    assert chunks[0][0] == 12 + 1, chunks  # burn-in went on one iteration a trip from the checkpoint's 12
    assert np.array_equal(np.asarray(on_cpu.n_accepted), np.asarray(one.n_accepted))
    eps = 4 * np.finfo(np.float32).eps
    np.testing.assert_allclose(np.asarray(on_cpu.samples), np.asarray(one.samples), rtol=eps, atol=eps)


def test_the_inner_loop_runs_whole_blocks_never_past_n(problem):
    # A counter as the step: the iterations run are the state.  n a multiple: all of them; n not
    # one (no driver asks it, but run_chunk is public): the largest multiple, never more than n.
    solver = mw.ReplicaExchange(nbeta=8, nseq=4)
    chunk = jax.jit(lambda n: solver.steps_while(problem, jnp.int32(0), 0, n, lambda p, s, ph: s + 1, 4))
    for n, expected in ((12, 12), (10, 8), (3, 0)):
        state, n_run = chunk(jnp.int32(n))
        assert int(state) == int(n_run) == expected, (n, int(state), int(n_run))
    # A solver with a convergence test cannot be run in blocks: the inner loop would not test it.
    with pytest.raises(ValueError, match="block must be 1, got 4"):
        mw.LBFGS().steps_while(problem, jnp.int32(0), 0, jnp.int32(8), lambda p, s, ph: s + 1, 4)


def test_replica_exchange_runs_the_plans_block_in_an_inner_loop_of_fixed_trip_count(problem):
    # What the block is for: inside the chunk's while_loop, a loop of static trip count (a scan of
    # the block's length in the jaxpr, 16 here, which no loop of the step has), whose condition a
    # GPU does not read back; the step's own loops (scans of 2 and 8) then lie inside it.
    solver = mw.ReplicaExchange(nbeta=8, nseq=4, nburn=8, niter=8)
    assert solver.loop_block(problem, "gpu") == 20 and solver.loop_block(problem, "cpu") == 1
    state = jax.eval_shape(lambda key: solver.init(problem, key), jax.random.key(0))

    def inner_lengths(plan):
        jaxpr = jax.make_jaxpr(lambda s, n: solver.run_chunk(problem, s, 1, n, plan))(state, jnp.int32(16))
        return [eqn.params["length"] for loop in jaxpr.jaxpr.eqns if loop.primitive.name == "while"
                for eqn in loop.params["body_jaxpr"].jaxpr.eqns if eqn.primitive.name == "scan"]

    assert inner_lengths(RunPlan(loop_block=16)) == [16]
    assert 16 not in inner_lengths(RunPlan())
    # so a loop kept for one block never serves a call in another
    placement = Placement((None,), None, None)
    keys = {driver._loop_of(problem, solver, 0, state, placement, RunPlan(loop_block=b)).key for b in (1, 16)}
    assert len(keys) == 2
