"""A short run as one program (multiwalk.one_program): which calls take it, and that it is the run
the chunks make."""

from __future__ import annotations

import dataclasses
import sys
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw
from multiwalk import compile_cache, one_program
from multiwalk.result import Result, Status
from multiwalk.solvers.base import Phase, Solver

# The calls here leave devices=None: on a machine of several devices that splits the run over them
# (or runs it on one, with a note), another path than the one-device program these tests are of; the
# split one program is checked on 4 CPU devices (tests/devices_check.py) and on GPUs by
# tests/test_one_program_exchange.py.
pytestmark = pytest.mark.skipif(jax.device_count() > 1, reason="tests of the one-device path: a machine of one device")


def shifted_sphere(x):
    return jnp.sum((x - 0.25) ** 2)


def box(n: int = 3, **kw: Any) -> mw.Problem:
    return mw.Problem(objective=shifted_sphere, lower=[-2.0] * n, upper=[2.0] * n, **kw)


def steps_apart(a: Any, b: Any, scale: float) -> float:
    """The largest difference of ``a`` and ``b`` in steps of their dtype at ``scale`` (the box's
    width for points, the value's size for values): absolute, so values near 0 are not magnified."""
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a.astype(np.float64) - b)) / np.spacing(a.dtype.type(scale)))


def test_a_short_pattern_search_is_one_program_with_the_chunks_result():
    # The start, the iterations and the one-point value compiled together are another program than
    # the three a run in chunks uses: its floats may round differently on another machine, so they
    # are compared to 4 steps of their dtype (at the box's width for points: 4.0); the decisions
    # (which walkers halved or reset, the counts) exactly.
    problem = box()
    solver = mw.PatternSearch(n_walkers=64, iterations=12, rounds=1)
    one = mw.solve(problem, solver, seed=3, progress=False)
    chunks = mw.solve(problem, solver, seed=3, progress=False, time_limit=600.0)  # never reached
    assert one.stats["one_program"] and one.stats["chunks"] == 1 and not chunks.stats["one_program"]
    assert one.stats["iterations"] == chunks.stats["iterations"] == {"search": 12}
    assert one.status == chunks.status == Status.SUCCESS
    assert steps_apart(one.x, chunks.x, 4.0) <= 4 and steps_apart(one.fun, chunks.fun, max(abs(one.fun), 1e-3)) <= 4
    for field in ("halvings", "resets"):
        np.testing.assert_array_equal(getattr(one, field), getattr(chunks, field), err_msg=field)
    assert one.stats["evaluations"] == chunks.stats["evaluations"] and one.stats["nonfinite"] == 0
    assert steps_apart(one.walkers, chunks.walkers, 4.0) <= 4
    # the same program twice (kept: nothing traced or compiled): the same bits
    with Compilations() as compiled:
        again = mw.solve(problem, solver, seed=3, progress=False)
    assert compiled.count == 0 and np.array_equal(one.x, again.x) and one.fun == again.fun


class Compilations:
    """Counts the programs traced and compiled (or loaded) while entered."""

    def __enter__(self) -> Compilations:
        self.count = 0
        self.lowered = compile_cache._lowered

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return self.lowered(*args, **kwargs)

        compile_cache._lowered = counting
        return self

    def __exit__(self, *exc: Any) -> None:
        compile_cache._lowered = self.lowered


class Recorder:
    """A writer that records what it is asked to write."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def write(self, problem: Any, state: Any, first: int, last: int) -> None:
        self.calls.append((first, last))

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("asked", [None, "progress", "callback", "iteration_callback", "checkpoint", "time_limit",
                                   "writer"])
def test_anything_asked_between_chunks_keeps_the_run_in_chunks(asked, tmp_path, capsys):
    problem = box()
    solver = mw.PatternSearch(n_walkers=16, iterations=3, rounds=1)
    options = {
        None: {},
        "progress": {"progress": True},
        "callback": {"callback": lambda info: None},
        "iteration_callback": {"iteration_callback": lambda it: None},
        "checkpoint": {"checkpoint": tmp_path / "run.ckpt"},
        "time_limit": {"time_limit": 600.0},
        "writer": {"writer": Recorder()},
    }[asked]
    r = mw.solve(problem, solver, seed=0, **({"progress": False} | options))
    assert r.stats["one_program"] is (asked is None) and r.stats["iterations"] == {"search": 3}
    if asked == "writer":
        assert options["writer"].calls and options["writer"].calls[-1][1] == 3


def test_one_device_asked_for_on_a_machine_of_one_is_the_same_program():
    # devices=1 where the default device is the only one: the run of devices=None, bit for bit
    problem = box()
    solver = mw.PatternSearch(n_walkers=16, iterations=3, rounds=1)
    plain = mw.solve(problem, solver, seed=0, progress=False)
    asked = mw.solve(problem, solver, seed=0, progress=False, devices=1)
    assert plain.stats["one_program"] and asked.stats["one_program"] and asked.stats["devices"] == 1
    assert np.array_equal(plain.x, asked.x) and plain.fun == asked.fun


def progress_module() -> Any:
    from multiwalk import progress

    return progress


def test_on_a_terminal_a_short_run_is_one_program_without_a_bar(monkeypatch, capsys):
    # progress=None shows a bar on a terminal; a run short enough to be one program shows none
    # (it would flash for under a second), so its bits do not depend on where stderr goes
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    r = mw.solve(box(), mw.PatternSearch(n_walkers=16, iterations=3), seed=0)
    assert r.stats["one_program"] and "search" not in capsys.readouterr().err


def test_rounds_until_a_time_limit_or_a_long_search_are_not_one_program():
    problem = box()
    # rounds=None with a time limit: fresh rounds until it
    timed = mw.solve(problem, mw.PatternSearch(n_walkers=16, iterations=3), seed=0, progress=False, time_limit=0.2)
    assert not timed.stats["one_program"]
    # two rounds, or more coordinate moves than the XLA form's cap: not short by its options
    solver = mw.PatternSearch(n_walkers=16, iterations=3, rounds=2)
    assert not solver.one_program(problem, solver.plan(problem, 1, None))
    from multiwalk.solvers.pattern_search import ONE_PROGRAM_WORK, ONE_PROGRAM_WORK_GPU

    limit = ONE_PROGRAM_WORK_GPU if jax.default_backend() == "gpu" else ONE_PROGRAM_WORK  # this platform's
    big = mw.PatternSearch(n_walkers=limit // 3 + 1, iterations=1, kernel="xla")
    assert not big.one_program(problem, big.plan(problem, 1, None))
    small = mw.PatternSearch(n_walkers=limit // 3, iterations=1, kernel="xla")
    assert small.one_program(problem, small.plan(problem, 1, None))
    # each evaluation of a model of 20 000 data reads them all: the same search is then long
    fit = mw.Problem(model=lambda x: jnp.full(20_000, x.sum()), data=np.zeros(20_000), lower=[-2.0] * 3,
                     upper=[2.0] * 3)
    searched = mw.PatternSearch(n_walkers=2048, iterations=20, kernel="xla")
    assert searched.one_program(problem, searched.plan(problem, 1, None))
    assert not searched.one_program(fit, searched.plan(fit, 1, None))


def test_x0_changed_in_place_is_read_by_the_next_call():
    # x0 is an argument of the program, not a constant compiled in: an x0 changed in place gives
    # the run of a new problem holding that x0, bit for bit (the same program)
    solver = mw.PatternSearch(n_walkers=8, iterations=1)
    problem = box(x0=[0.25, 0.25, 0.25])
    at_optimum = mw.solve(problem, solver, seed=0, progress=False)
    assert at_optimum.stats["one_program"] and at_optimum.fun == 0.0
    problem.x0[:] = [1.5, -1.5, 1.5]
    moved = mw.solve(problem, solver, seed=0, progress=False)
    fresh = mw.solve(box(x0=[1.5, -1.5, 1.5]), solver, seed=0, progress=False)
    assert moved.fun > 0.0 and np.array_equal(moved.x, fresh.x) and moved.fun == fresh.fun


def test_a_new_dataset_of_the_same_shapes_runs_the_same_program_on_its_own_data():
    # the data are arguments of the program: one compilation serves both datasets, each run on its own
    # (the XLA form: the Pallas form, GPUs' default, takes the data as constants of its kernel)
    def model(x):
        return x

    solver = mw.PatternSearch(n_walkers=32, iterations=8, kernel="xla")
    runs, counts = [], []
    for target in (0.5, -0.5):
        problem = mw.Problem(model=model, data=np.full(2, target), lower=[-2.0] * 2, upper=[2.0] * 2)
        with Compilations() as compiled:
            runs.append(mw.solve(problem, solver, seed=1, progress=False))
        counts.append(compiled.count)
    assert all(r.stats["one_program"] for r in runs) and counts == [1, 0]
    # each on its own data: the best point near that data's optimum (here within 0.009; the datasets' optima are 1.4 apart)
    assert np.all(np.abs(runs[0].x - 0.5) < 0.1) and np.all(np.abs(runs[1].x + 0.5) < 0.1)


def test_outputs_that_xla_will_not_put_in_pinned_memory_fall_back_with_one_warning(monkeypatch):
    from multiwalk import progress

    device = compile_cache.default_device()
    refused = []

    def pinned_until_refused(device):
        return None if device in one_program._NO_PINNED_OUTPUTS else ("not", "shardings")

    monkeypatch.setattr(one_program, "_pinned_outputs", pinned_until_refused)
    problem = box()
    solver = mw.PatternSearch(n_walkers=16, iterations=2)
    try:
        with pytest.warns(UserWarning, match="without pinned host memory") as caught:
            r = mw.solve(problem, solver, seed=0, progress=False)
        assert r.stats["one_program"] and device in one_program._NO_PINNED_OUTPUTS
        ours = [w for w in caught if "without pinned host memory" in str(w.message)]  # (a GPU's Pallas warns too)
        assert len(ours) == 1 and ours[0].filename == __file__  # said once, at the caller's line
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # said once
            refused.append(mw.solve(problem, solver, seed=0, progress=False))
        # the chunks' copy program is not given up for it
        assert device not in progress._NO_PINNED_COPY and np.array_equal(refused[0].x, r.x)
    finally:
        one_program._NO_PINNED_OUTPUTS.discard(device)


def test_an_error_of_the_run_itself_is_raised_not_taken_for_pinned_memory(monkeypatch):
    # a program that fails to compile for a reason of its own is compiled once more without pinned
    # outputs, which raises that reason; no pinned-memory warning, the device keeps its pinned memory
    device = compile_cache.default_device()
    monkeypatch.setattr(one_program, "_pinned_outputs", lambda device: ("not", "shardings"))

    def fails_to_trace(self, problem, report):
        raise ValueError("a failure of the run's own")

    monkeypatch.setattr(mw.PatternSearch, "report_in_program", fails_to_trace)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with pytest.raises(ValueError, match="a failure of the run's own"):
            mw.solve(box(), mw.PatternSearch(n_walkers=8, iterations=2), seed=0, progress=False)
    assert device not in one_program._NO_PINNED_OUTPUTS


def test_on_a_gpu_the_small_outputs_come_from_pinned_memory(monkeypatch):
    if jax.default_backend() != "gpu" or not progress_module().has_pinned_host(jax.devices()[0]):
        pytest.skip("needs a GPU with pinned host memory")
    from multiwalk import progress

    kinds = []
    fetch = progress.fetch
    monkeypatch.setattr(progress, "fetch", lambda tree: kinds.append(
        {leaf.sharding.memory_kind for leaf in jax.tree_util.tree_leaves(tree)}) or fetch(tree))
    r = mw.solve(box(), mw.PatternSearch(n_walkers=64, iterations=4), seed=0, progress=False)
    assert r.stats["one_program"] and kinds == [{"pinned_host"}]


@dataclasses.dataclass(frozen=True)
class CountTo(Solver):
    """A toy solver with a convergence test: counts up by one an iteration, done at ``stop``."""

    length: int = 5
    stop: int = 3

    def phases(self, problem: Any) -> list[Phase]:
        return [Phase("count", self.length)]

    def init(self, problem: Any, key: jax.Array) -> jax.Array:
        return jnp.zeros((), jnp.int32)

    def step(self, problem: Any, state: jax.Array, phase: int) -> jax.Array:
        return state + 1

    def done(self, problem: Any, state: jax.Array, phase: int) -> jax.Array:
        return state >= self.stop

    def one_program(self, problem: Any, plan: Any) -> bool:
        return True

    def result(self, problem: Any, state: Any, done: list[int], status: Status, stats: dict[str, Any]) -> Result:
        count = int(state)
        return Result(x=np.full(problem.n, float(count)), fun=float(count), status=status, message="", stats=stats)


def test_a_convergence_test_ends_the_program_early_or_the_status_says_it_did_not():
    problem = box(2)
    met = mw.solve(problem, CountTo(length=5, stop=3), progress=False)
    assert met.stats["one_program"] and met.status == Status.SUCCESS
    assert met.fun == 3.0 and met.stats["iterations"] == {"count": 3}
    # the iteration limit before the test is met: MAX_STEPS, as in chunks
    unmet = mw.solve(problem, CountTo(length=2, stop=3), progress=False)
    chunked = mw.solve(problem, CountTo(length=2, stop=3), progress=False, time_limit=600.0)
    assert unmet.stats["one_program"] and unmet.status == chunked.status == Status.MAX_STEPS
    assert unmet.fun == chunked.fun == 2.0


def test_no_warning_of_ours_on_a_quiet_call():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # (JAX's own deprecations are not ours)
        r = mw.solve(box(), mw.PatternSearch(n_walkers=8, iterations=2), seed=0, progress=False)
    assert r.stats["one_program"]


class Counted:
    """Counts the calls of ``owner.name`` while entered (the function still runs)."""

    def __init__(self, monkeypatch: Any, owner: Any, name: str) -> None:
        self.count = 0
        original = getattr(owner, name)

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counting)


def test_a_repeated_short_call_runs_its_kept_program_without_planning_again(monkeypatch):
    # the second call of the same problem and equal options finds the program in one lookup: no
    # run plan, no lookup of the program by its own key; the same bits as the first call, and the
    # seed still counts (a new key, the same program)
    problem = box()
    first = mw.solve(problem, mw.PatternSearch(n_walkers=16, iterations=3), seed=2, progress=False)
    planned = Counted(monkeypatch, mw.PatternSearch, "plan")
    looked_up = Counted(monkeypatch, one_program, "_compiled")
    with Compilations() as compiled:
        again = mw.solve(problem, mw.PatternSearch(n_walkers=16, iterations=3), seed=2, progress=False)
        other_seed = mw.solve(problem, mw.PatternSearch(n_walkers=16, iterations=3), seed=5, progress=False)
    assert (planned.count, looked_up.count, compiled.count) == (0, 0, 0)
    assert again.stats["one_program"] and again.stats["compile_seconds"] == 0.0
    assert np.array_equal(first.x, again.x) and first.fun == again.fun and first.status == again.status
    fresh = mw.solve(box(), mw.PatternSearch(n_walkers=16, iterations=3), seed=5, progress=False)
    assert np.array_equal(other_seed.x, fresh.x) and other_seed.fun == fresh.fun
    # other options: planned anew
    mw.solve(problem, mw.PatternSearch(n_walkers=16, iterations=4), seed=2, progress=False)
    assert planned.count >= 1


def test_a_repeated_short_call_sees_what_changed_since(monkeypatch):
    # bounds changed in place (compiled in: planned anew), x0 given anew (an argument of the same
    # shape: the kept program, on the new x0) and data changed in place (the problem's fingerprint
    # holds them: planned anew, the XLA form's program found, with the data as its arguments): each
    # call gives what a fresh problem holding the change gives, bit for bit
    solver = mw.PatternSearch(n_walkers=16, iterations=3, kernel="xla")
    planned = Counted(monkeypatch, mw.PatternSearch, "plan")

    def search(problem: mw.Problem, seed: int = 0) -> Result:
        return mw.solve(problem, solver, seed=seed, progress=False)

    problem = box(x0=[0.5, 0.5, 0.5])
    search(problem)
    problem.lower[:] = [0.5, -2.0, -2.0]
    before = planned.count
    narrowed = search(problem)
    assert planned.count == before + 1
    fresh = search(mw.Problem(objective=shifted_sphere, lower=[0.5, -2.0, -2.0], upper=[2.0] * 3, x0=[0.5] * 3))
    assert narrowed.x[0] >= 0.5 and np.array_equal(narrowed.x, fresh.x) and narrowed.fun == fresh.fun
    problem.x0 = np.array([1.5, 1.5, 1.5])
    before = planned.count
    moved = search(problem)
    assert planned.count == before
    fresh = search(mw.Problem(objective=shifted_sphere, lower=[0.5, -2.0, -2.0], upper=[2.0] * 3, x0=[1.5] * 3))
    assert np.array_equal(moved.x, fresh.x) and moved.fun == fresh.fun and not np.array_equal(moved.x, narrowed.x)

    def model(x):
        return x

    fit = mw.Problem(model=model, data=np.full(2, 0.5), lower=[-2.0] * 2, upper=[2.0] * 2)
    near_half = search(fit, seed=1)
    fit.data[:] = -0.5
    before = planned.count
    with Compilations() as compiled:
        near_minus_half = search(fit, seed=1)
    assert (planned.count, compiled.count) == (before + 1, 0)  # planned anew; the same program, found
    fresh = search(mw.Problem(model=model, data=np.full(2, -0.5), lower=[-2.0] * 2, upper=[2.0] * 2), seed=1)
    assert np.all(np.abs(near_half.x - 0.5) < 0.1) and np.all(np.abs(near_minus_half.x + 0.5) < 0.1)
    assert np.array_equal(near_minus_half.x, fresh.x) and near_minus_half.fun == fresh.fun


def test_a_repeated_short_call_follows_the_random_number_implementation_and_a_cleared_cache(monkeypatch):
    # another implementation makes another key (uint32[4] for "rbg"): planned and compiled for it,
    # the run a fresh problem gets; after compile_cache.clear() the plan is made again
    solver = mw.PatternSearch(n_walkers=16, iterations=3)
    problem = box()
    mw.solve(problem, solver, seed=1, progress=False)
    planned = Counted(monkeypatch, mw.PatternSearch, "plan")
    old = jax.config.jax_default_prng_impl
    jax.config.update("jax_default_prng_impl", "rbg")
    try:
        again = mw.solve(problem, solver, seed=1, progress=False)
        fresh = mw.solve(box(), solver, seed=1, progress=False)
    finally:
        jax.config.update("jax_default_prng_impl", old)
    assert planned.count == 2 and np.array_equal(again.x, fresh.x) and again.fun == fresh.fun
    mw.solve(problem, solver, seed=1, progress=False)  # the default implementation's: planned anew
    kept = planned.count
    mw.solve(problem, solver, seed=1, progress=False)
    compile_cache.clear()
    mw.solve(problem, solver, seed=1, progress=False)
    assert (kept, planned.count) == (3, 4)
