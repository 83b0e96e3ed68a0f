"""Review of mw.Exchange's interval form (863342e, 3df3fc3), forced on the CPU as in
tests/test_exchange_blocks.py.  The form must give what one ``step`` per loop trip gives: the same
decisions exactly and floats to test_exchange_blocks.ULPS (another compiled program, tests/ulp.py).

Found and fixed (these tests failed before): whole intervals in loops of static trip count,
which no chunk of the driver's ran when a group of intervals was longer than ``max_chunk``
(``record - 1``, ``max_chunk_steps``), and a groups' loop compiled where no chunk can run it.
Also: float32, two replicas, ``numsteps_exchange`` > ``draw_steps`` with a remainder, the
GPU's default ``unroll`` (8) under mw.solve's doubling chunks, and a checkpoint of the interval form
resumed by the CPU form.  ~50 s on 2 cores (compilation)."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_exchange_blocks import SCALE, ULPS, _Intervals  # the interval form forced on the CPU; its tolerance
from test_exchange_blocks import _leaves as _run  # the state's leaves after the chunks, from step 1
from ulp import assert_fields_close_ulp

import multiwalk as mw
from multiwalk.functions.odatse import himmelblau
from multiwalk.problem import Problem
from multiwalk.solvers.base import Solver
from multiwalk.solvers.exchange import Exchange, ExchangeState, temperature_ladder


def _box() -> Problem:
    return Problem(objective=himmelblau, lower=[-6.0, -6.0], upper=[6.0, 6.0])


def _assert_same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    """Two compiled programs' states: decisions exactly, floats to ULPS."""
    assert_fields_close_ulp(a, b, ULPS, names=ExchangeState._fields, scale=SCALE)


def _plain(solver: Exchange):
    return lambda p, st, ph, n: Solver.run_chunk(solver, p, st, ph, n)


def test_whole_intervals_run_within_the_chunk_limit():
    """Chunks as mw.solve makes them with ``record=16`` (1, 2, 4, 8, then 15 each): at least half
    of the steps must run in whole intervals (the loops of static trip count), and the state must
    equal one step per trip's."""
    group_steps: list[int] = []

    @dataclass(frozen=True)
    class Counted(_Intervals):
        def _intervals(self, problem, st, ladder):
            L = self.interval_group(problem) * self.numsteps_exchange  # steps of one group (static)
            jax.debug.callback(lambda s: group_steps.append(L), st.step)
            return super()._intervals(problem, st, ladder)

    chunks = [1, 2, 4, 8] + [15] * 6  # 105 steps
    with jax.enable_x64(True):
        problem = _box()
        solver = Counted(betas=tuple(temperature_ladder(6, Tmin=1.0, Tmax=100.0).tolist()), numsteps=200,
                         numsteps_exchange=5, step_width=(0.5, 0.5), record=16, unroll=2, kernel="xla")
        assert solver.max_chunk(problem) == 15
        plain = _run(solver, problem, _plain(solver), chunks)
        intervals = _run(solver, problem, solver.run_chunk, chunks)
        jax.effects_barrier()
    _assert_same(intervals, plain)
    assert sum(group_steps) >= sum(chunks) // 2, (sum(group_steps), sum(chunks))


@pytest.mark.parametrize("numsteps,nex,max_chunk_steps", [(400, 1000, None), (400, 20, 15)])
def test_no_groups_loop_where_no_chunk_holds_a_group(numsteps, nex, max_chunk_steps):
    """Tracing only (no compilation): ``_intervals`` must not be traced when a group
    (``interval_group * numsteps_exchange`` steps) is longer than every chunk of the run."""
    traced: list[int] = []

    @dataclass(frozen=True)
    class Traced(_Intervals):
        def _intervals(self, problem, st, ladder):
            traced.append(1)
            return super()._intervals(problem, st, ladder)

    with jax.enable_x64(True):
        problem = _box()
        solver = Traced(betas=tuple(temperature_ladder(4, Tmin=1.0, Tmax=10.0).tolist()), numsteps=numsteps,
                        numsteps_exchange=nex, step_width=(0.5, 0.5), max_chunk_steps=max_chunk_steps, kernel="xla")
        longest = min(solver.max_chunk(problem) or numsteps, numsteps - 1)
        assert solver.interval_group(problem) * nex > longest  # no chunk can hold a group
        state = jax.eval_shape(lambda k: solver.init(problem, k), jax.random.PRNGKey(0))
        jax.jit(lambda st, n: solver.run_chunk(problem, st, 0, n)).trace(state, jnp.int32(5))
    assert traced == []


def test_float32_two_replicas_gpu_default_unroll_doubling_chunks():
    """float32, T = 2 (the direction never flips), an exchange every 7 steps drawn 3 at a time (2
    blocks and a remainder of 1 per interval), the GPU's default ``unroll`` (8: the backend's name
    patched while tracing, as test_exchange_blocks does), mw.solve's doubling chunks; records on."""
    with jax.enable_x64(False), pytest.MonkeyPatch.context() as mp:
        mp.setattr(jax, "default_backend", lambda: "gpu-for-the-test")
        problem = _box()
        solver = _Intervals(betas=(1.0, 0.05), numsteps=200, numsteps_exchange=7, step_width=(0.5, 0.5),
                            record=64, draws=3, kernel="xla")
        assert solver.block_steps(problem) == 8 and problem.dtype == np.float32
        chunks = [1, 2, 4, 8, 16, 32, 37]  # 100 steps
        plain = _run(solver, problem, _plain(solver), chunks)
        intervals = _run(solver, problem, solver.run_chunk, chunks)
    _assert_same(intervals, plain)
    assert int(plain[1]) == 101 and plain[-2].dtype == np.float32  # step 101 next; float32 records


def test_interval_checkpoint_mid_interval_resumes_in_the_cpu_form(tmp_path, monkeypatch):
    """A run in the interval form stopped by Ctrl-C (from the callback) after its third chunk
    (1 + 2 + 4 steps: step 8, inside an interval of 5), resumed in the CPU form: the same state
    as one run in the CPU form (a GPU checkpoint resumed on a CPU)."""
    with jax.enable_x64(True):
        problem = _box()
        kw = dict(betas=tuple(np.geomspace(10.0, 0.1, 6)), numsteps=80, numsteps_exchange=5, step_width=(0.5, 0.5),
                  record=8, kernel="xla")
        whole = mw.solve(problem, mw.Exchange(**kw), seed=2, progress=False)
        calls: list[dict] = []

        def stop_third(info: dict) -> None:
            calls.append(info)
            if len(calls) == 3:
                raise KeyboardInterrupt

        ckpt = tmp_path / "state.npz"
        with monkeypatch.context() as mp:
            mp.setattr(Exchange, "interval_form", lambda self, p: True)
            # max_chunk_steps (resumable) makes this solver differ from ``whole``'s: its own compilation
            part = mw.solve(problem, mw.Exchange(**kw, max_chunk_steps=7), seed=2, progress=False,
                            callback=stop_third, checkpoint=ckpt)
        assert part.status == mw.Status.INTERRUPTED and part.steps == 8
        resumed = mw.solve(problem, mw.Exchange(**kw), seed=2, progress=False, resume=ckpt)
    _assert_same([np.asarray(a) for a in jax.tree_util.tree_leaves(resumed.state)],
                 [np.asarray(a) for a in jax.tree_util.tree_leaves(whole.state)])
