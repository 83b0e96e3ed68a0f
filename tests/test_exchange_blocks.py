"""mw.Exchange's interval form (the XLA form off CPUs, forced here on the CPU): the exchange runs
only on exchange steps, the Metropolis moves between two exchanges in loops of static trip count,
the chunk's edges one step per trip.  It must give what one ``step`` per loop trip gives (the same
operations reorganised, each step behind its own barrier, but another compiled program: decisions
exactly, floats to ULPS, see tests/ulp.py), for every grouping of intervals (``draw_steps`` against ``numsteps_exchange``),
chunking (chunks starting and ending inside intervals and groups, shorter than an interval) and
``unroll``; whole intervals must run within the driver's chunk limit (``record - 1``,
``max_chunk_steps``), no groups' loop is compiled where no chunk can hold a group, and a
checkpoint of the interval form resumes in the CPU form.  ~110 s on 2 cores (compilation)."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ulp import assert_fields_close_ulp

import multiwalk as mw
from multiwalk.functions.odatse import himmelblau
from multiwalk.problem import Problem
from multiwalk.solvers.base import Solver
from multiwalk.solvers.exchange import Exchange, ExchangeState, temperature_ladder
from multiwalk.spaces import Mesh, build_neighbor_list

# Floats of two compilations to 64 ulp, values below 1 counted in 1's ulp: a compilation may
# contract a step's x + step_width * move into a fused multiply-add where the other does not (an
# ulp of x), which Himmelblau's f amplifies by |grad f| (measured 19 ulp of f ~ 1 near a minimum,
# tests/test_exchange_kernel.py); below f = 1 that stays < 48 ulp of 1.
ULPS, SCALE = 64, 1.0

CHUNKS = [5, 9, 40, 2, 13, 1, 30]  # 100 steps from step 1: edges, whole groups, a chunk inside an interval


@dataclass(frozen=True)
class _Intervals(Exchange):
    """The interval form on the CPU, with ``draws`` steps drawn per call (0: the default rule)."""

    draws: int = 0

    def interval_form(self, problem: Problem) -> bool:
        return True

    def draw_steps(self, problem: Problem) -> int:
        return self.draws or super().draw_steps(problem)


def _leaves(solver: Exchange, problem: Problem, run_chunk, chunks: list[int]) -> list[np.ndarray]:
    state = jax.jit(lambda k: solver.init(problem, k))(jax.random.PRNGKey(5))
    f = jax.jit(lambda st, n: run_chunk(problem, st, 0, n))
    for n in chunks:
        state, done = f(state, jnp.int32(n))
        assert int(done) == n
    return [np.asarray(a) for a in jax.tree_util.tree_leaves(state)]


def _mesh_4x4() -> Mesh:
    xs = np.array([(i, j) for i in range(4) for j in range(4)], dtype=float)
    return Mesh(xs, build_neighbor_list(xs, 1.0))


# (numsteps_exchange, draws, unroll, space): G = draws // nex intervals per group (at least 1)
CASES = [
    (4, 0, 1, "continuous"),  # default draws (32 at 6 replicas): 8 intervals per group of 32 steps
    (4, 3, 2, "continuous"),  # draws < nex: one interval per group in blocks of 3 + 1
    (7, 1, 3, "continuous"),  # one step per draw: the loop over steps unrolled by 3
    (1, 3, 1, "continuous"),  # every step an exchange step: 3 intervals per group
    (3, 7, 2, "mesh"),  # 2 intervals per group, a discrete space
]


@pytest.mark.parametrize("nex,draws,unroll,space", CASES)
def test_interval_form_equals_one_step_per_trip(nex, draws, unroll, space):
    with jax.enable_x64(True):
        if space == "mesh":
            problem = Problem(objective=himmelblau, names=["a", "b"])
            kw = dict(mesh=_mesh_4x4())
        else:
            problem = Problem(objective=himmelblau, lower=[-6.0, -6.0], upper=[6.0, 6.0])
            kw = dict(step_width=(0.5, 0.5))
        betas = tuple(temperature_ladder(6, Tmin=1.0, Tmax=100.0).tolist())
        solver = _Intervals(betas=betas, numsteps=200, numsteps_exchange=nex, record=64, unroll=unroll,
                            draws=draws, kernel="xla", **kw)
        plain = _leaves(solver, problem, lambda p, st, ph, n: Solver.run_chunk(solver, p, st, ph, n), CHUNKS)
        blocks = _leaves(solver, problem, solver.run_chunk, CHUNKS)
    assert_fields_close_ulp(blocks, plain, ULPS, names=ExchangeState._fields, scale=SCALE)
    assert plain[-1].shape[0] == 64 and int(plain[1]) == 101  # records kept; step 101 next


def test_exchange_runs_on_exchange_steps_only():
    """The interval form runs the exchange only on exchange steps, also at a chunk's edges, as
    on a GPU (where the plain step computes it masked: a no-op where the step is no exchange
    step).  Chunks of 7, 200 and 3 steps from step 1, an exchange every 5 steps, one draw per
    step (one interval per group): every exchange step's exchange once, no masked no-op.  The
    form before (a masked exchange every step) made 168 no-ops."""
    calls: list[tuple[int, bool]] = []

    def note(step, due):
        calls.append((int(step), bool(due)))

    @dataclass(frozen=True)
    class Counted(_Intervals):
        def _exchange(self, problem, st, u_exchange, active=True, ladder=None):
            jax.debug.callback(note, st.step, ((st.step % self.numsteps_exchange) == 0) & active)
            return super()._exchange(problem, st, u_exchange, active, ladder)

    with jax.enable_x64(True):
        problem = Problem(objective=himmelblau, lower=[-6.0, -6.0], upper=[6.0, 6.0])
        solver = Counted(betas=tuple(temperature_ladder(6, Tmin=1.0, Tmax=100.0).tolist()), numsteps=300,
                         numsteps_exchange=5, step_width=(0.5, 0.5), draws=1, kernel="xla")
        with pytest.MonkeyPatch.context() as mp:  # the edges' exchange masked, as on a GPU
            mp.setattr(jax, "default_backend", lambda: "gpu-for-the-test")
            state = jax.jit(lambda k: solver.init(problem, k))(jax.random.PRNGKey(1))
            run = jax.jit(lambda st, n: solver.run_chunk(problem, st, 0, n))
            for n in (7, 200, 3):
                state, done = run(state, jnp.int32(n))
                assert int(done) == n
            jax.block_until_ready(state)
    assert sorted(s for s, d in calls if d) == list(range(5, 211, 5))  # each exchange step once
    assert [s for s, d in calls if not d] == []  # no masked no-op


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
        assert solver.plan(problem, 1, None).max_chunk == 15
        plain = _leaves(solver, problem, _plain(solver), chunks)
        intervals = _leaves(solver, problem, solver.run_chunk, chunks)
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
        longest = min(solver.plan(problem, 1, None).max_chunk or numsteps, numsteps - 1)
        assert solver.interval_group(problem) * nex > longest  # no chunk can hold a group
        state = jax.eval_shape(lambda k: solver.init(problem, k), jax.random.PRNGKey(0))
        jax.jit(lambda st, n: solver.run_chunk(problem, st, 0, n)).trace(state, jnp.int32(5))
    assert traced == []


def test_float32_two_replicas_gpu_default_unroll_doubling_chunks():
    """float32, T = 2 (the direction never flips), an exchange every 7 steps drawn 3 at a time (2
    blocks and a remainder of 1 per interval), the GPU's default ``unroll`` (8: the backend's name
    patched while tracing, as in test_exchange_runs_on_exchange_steps_only), mw.solve's doubling chunks; records on."""
    with jax.enable_x64(False), pytest.MonkeyPatch.context() as mp:
        mp.setattr(jax, "default_backend", lambda: "gpu-for-the-test")
        problem = _box()
        solver = _Intervals(betas=(1.0, 0.05), numsteps=200, numsteps_exchange=7, step_width=(0.5, 0.5),
                            record=64, draws=3, kernel="xla")
        assert solver.block_steps(problem) == 8 and problem.dtype == np.float32
        chunks = [1, 2, 4, 8, 16, 32, 37]  # 100 steps
        plain = _leaves(solver, problem, _plain(solver), chunks)
        intervals = _leaves(solver, problem, solver.run_chunk, chunks)
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
