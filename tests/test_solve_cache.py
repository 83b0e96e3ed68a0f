"""A repeated `mw.solve` of the same problem reuses the compiled start and progress summary
(`multiwalk.compile_cache.cached_jit`), not only the loop, and keeps no problem alive once it is garbage.

Traces are counted by a side effect in the objective: Python code in it runs only while jax
traces it, so a solve that runs kept executables leaves the count unchanged.  This counts what
the cache exists to avoid (tracing, hence compiling), and does not depend on timings.
"""

from __future__ import annotations

import gc
import importlib
import re
import threading
import time
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw
from multiwalk import compile_cache
from multiwalk.solve import run_key

TRACES = {"n": 0}


def counted_sphere(x):
    TRACES["n"] += 1  # runs at trace time only
    return ((x - 0.5) ** 2).sum()


def make_problem(box: bool = True) -> mw.Problem:
    """Sphere in a box (starts drawn in it), or unbounded from x0 = 0 (for L-BFGS).  Its objective
    is traced by every program that calls it (not once for all, multiwalk.traced_once), so that
    TRACES counts the programs traced."""
    if box:
        problem = mw.Problem(objective=counted_sphere, lower=-5.0 * np.ones(3), upper=5.0 * np.ones(3))
    else:
        problem = mw.Problem(objective=counted_sphere, x0=np.zeros(3))
    problem._traced = None
    return problem


SOLVERS = {
    "ReplicaExchange": mw.ReplicaExchange(nseq=2, nbeta=4, nburn=5, niter=10),
    "LBFGS": mw.LBFGS(max_iterations=20),
}


@pytest.fixture(scope="module")
def problem() -> mw.Problem:
    return make_problem()


@pytest.mark.parametrize("name", list(SOLVERS))
def test_second_solve_traces_nothing_and_gives_the_same_result(problem, name):
    solver = SOLVERS[name]
    if name == "LBFGS":  # L-BFGS is unconstrained: it refuses a box it would ignore
        problem = make_problem(box=False)
    before = TRACES["n"]
    first = mw.solve(problem, solver, seed=3, progress=True)  # progress: the summary runs too
    assert TRACES["n"] > before  # the first call traced the start and the loop
    before = TRACES["n"]
    second = mw.solve(problem, solver, seed=3, progress=True)
    assert TRACES["n"] == before, "the second solve traced the objective again (start, summary or loop)"
    # exact: the same executables on the same inputs
    assert np.array_equal(first.x, second.x) and first.fun == second.fun


def test_a_problem_changed_in_place_gets_a_new_start(problem):
    # The start closes over the bounds (random starting points in the box): after a change in
    # place the kept start must not be used.  The samples all lie in the new box (exact bound).
    p = make_problem()
    solver = SOLVERS["ReplicaExchange"]
    mw.solve(p, solver, seed=0, progress=False)
    p.lower[:] = 1.0
    before = TRACES["n"]
    moved = mw.solve(p, solver, seed=0, progress=False)
    assert TRACES["n"] > before
    assert np.all(moved.samples >= 1.0)


def test_initial_state_fn_works_under_eval_shape(problem):
    # benchmarks/scaling.py and the driver's device choice ask for the start's shapes by tracing it.
    for name, solver in SOLVERS.items():
        problem = make_problem(box=name != "LBFGS")  # L-BFGS starts from x0, unbounded
        shapes = jax.eval_shape(solver.initial_state_fn(problem), run_key(0))
        state = solver.initial_state_fn(problem)(run_key(0))
        same = jax.tree.map(lambda s, a: s.shape == a.shape and s.dtype == a.dtype, shapes, state)
        assert all(jax.tree_util.tree_leaves(same))


def test_a_solved_problem_is_collected_and_its_entries_forgotten():
    # The caches hold executables keyed by id(problem), never the problem itself: once the user
    # drops it (and its result), it is garbage, and the finalizer forgets its entries.
    held = {}
    for name, solver in SOLVERS.items():
        p = make_problem(box=name != "LBFGS")  # L-BFGS refuses a box it would ignore
        pid = id(p)
        result = mw.solve(p, solver, seed=0, progress=True)
        held[name] = compile_cache.holds(pid)
        ref = weakref.ref(p)
        del p, result
        gc.collect()
        assert ref() is None, f"a cache kept the problem alive ({name})"
        assert not compile_cache.holds(pid)
    # ReplicaExchange's programs are all shared by the problem's functions (none by its id); L-BFGS
    # keeps some by the object's id, so the forgetting above is exercised
    assert held == {"ReplicaExchange": False, "LBFGS": True}, held


def test_entries_kept_call_after_call_for_one_problem_have_one_finalizer_and_are_forgotten():
    # a short PatternSearch keeps its program and kernel plan under the problem's id; changed in
    # place between calls it keeps new entries, each with the finalizer that forgets them, once
    problem = mw.Problem(objective=lambda x: jnp.sum((x - 0.25) ** 2), lower=[-2.0] * 2, upper=[2.0] * 2)
    solver = mw.PatternSearch(n_walkers=8, iterations=2)
    pid = id(problem)
    finalizers = []
    real = weakref.finalize

    def counted(obj, *args):
        finalizers.append(id(obj) == pid)
        return real(obj, *args)

    compile_cache.weakref.finalize = counted
    try:
        for upper in (2.0, 1.5, 1.0):
            problem.upper[:] = upper
            mw.solve(problem, solver, seed=0, progress=False)
    finally:
        compile_cache.weakref.finalize = real
    assert finalizers.count(True) == 1 and compile_cache.holds(pid)
    ref = weakref.ref(problem)
    del problem
    gc.collect()
    assert ref() is None and not compile_cache.holds(pid) and pid not in compile_cache._WATCHED


def test_a_new_problem_of_the_same_functions_shares_the_start_even_with_another_x0():
    # A new Problem of the same model and shapes (another dataset) reuses the kept start and
    # one-point value as it reuses the loop: no small function is compiled for it, and its result
    # is what a fresh compilation gives.  x0 is an argument of the start, not a constant: another
    # x0 of the same shape shares the start too, and gets its own samples.
    def line(p, t):
        return p[0] + p[1] * t

    t = np.linspace(0.0, 1.0, 8)
    solver = mw.ReplicaExchange(nseq=2, nbeta=4, nburn=0, niter=5)

    def problem(slope, x0):
        return mw.Problem(model=line, data=1.0 + slope * t, sigma=0.1, lower=[-5.0, -5.0], upper=[5.0, 5.0],
                          args=t, x0=x0)

    compile_cache.clear()
    mw.solve(problem(2.0, [0.5, 0.5]), solver, seed=0, progress=False)
    assert sorted(compile_cache.kept_shared()) == ["init", "value_at_point"]
    shared = mw.solve(problem(-1.0, [0.5, 0.5]), solver, seed=0, progress=False)
    assert sorted(compile_cache.kept_shared()) == ["init", "value_at_point"]
    moved = mw.solve(problem(-1.0, [-0.5, 0.5]), solver, seed=0, progress=False)
    assert sorted(compile_cache.kept_shared()) == ["init", "value_at_point"]
    assert not np.array_equal(moved.samples, shared.samples)
    for result, x0 in ((shared, [0.5, 0.5]), (moved, [-0.5, 0.5])):
        compile_cache.clear()
        fresh = mw.solve(problem(-1.0, x0), solver, seed=0, progress=False)
        assert np.array_equal(result.samples, fresh.samples) and result.fun == fresh.fun


def test_args_of_the_same_leaves_in_another_tree_get_another_fingerprint():
    # (A, None) and (None, A) have the same array leaves; a function may read either slot, so a
    # loop compiled for one must not serve the other (no compilation here: the key only).
    def shifted(x, args):
        a, b = args
        return (((x - a) if b is None else (x - 2.0 * b)) ** 2).sum()

    box = {"lower": -3.0 * np.ones(2), "upper": 3.0 * np.ones(2)}
    first = mw.Problem(objective=shifted, args=(np.ones(2), None), **box)
    second = mw.Problem(objective=shifted, args=(None, np.ones(2)), **box)
    for as_arguments in (True, False):
        assert compile_cache.fingerprint(first, as_arguments) != compile_cache.fingerprint(second, as_arguments)


# ---------------------------------------------------------------------------- a first call's programs at once
SOLVE_MODULE = importlib.import_module("multiwalk.solve")  # the module (mw.solve is the function)
ORIGINAL_COMPILE = jax.stages.Lowered.compile


class CompileRecorder:
    """``jax.stages.Lowered.compile`` recorded: ``(program, thread name)`` of every compilation (a
    load from JAX's persistent cache too).  With ``start_waits_for_loop``, the main thread's first
    compilation of a ``start_program`` (the start: ``with_problem_arrays`` for a start of shared_jit,
    a lambda for L-BFGS's) waits, 10 s at most, until a loop's (``jit_run_chunk...``) compilation
    has begun, and notes whether one had: true only if the loop compiles while the start does."""

    def __init__(self, start_waits_for_loop: bool = False, start_program: str = "jit_with_problem_arrays") -> None:
        self.compiled: list[tuple[str, str]] = []
        self.loop_began = threading.Event()
        self.start_waits_for_loop = start_waits_for_loop
        self.start_program = start_program
        self.loop_compiling_during_start: bool | None = None

    def wrap(self, original):
        def compile(lowered, *args, **kwargs):
            name = re.search(r"module @(\w+)", lowered.as_text()).group(1)
            thread = threading.current_thread().name
            self.compiled.append((name, thread))
            if name.startswith("jit_run_chunk"):
                self.loop_began.set()
            elif (self.start_waits_for_loop and self.loop_compiling_during_start is None
                  and name == self.start_program and thread == "MainThread"):
                self.loop_compiling_during_start = self.loop_began.wait(timeout=10.0)
            return original(lowered, *args, **kwargs)

        return compile


def line_problem() -> mw.Problem:
    t = np.linspace(0.0, 1.0, 8)
    return mw.Problem(model=lambda p, t: p[0] + p[1] * t, data=1.0 + 2.0 * t, sigma=0.1, args=t,
                      lower=[-5.0, -5.0], upper=[5.0, 5.0])


# one loop for both phases on any machine ("auto" takes a loop per phase on a GPU)
FIRST_CALL_SOLVER = mw.ReplicaExchange(nseq=2, nbeta=4, nburn=5, niter=10, loops="one")


def line_from_x0() -> mw.Problem:
    """The line fit from x0 = (0, 0), no box: L-BFGS's kind of problem (its start evaluates f and g)."""
    t = np.linspace(0.0, 1.0, 8)
    return mw.Problem(model=lambda p, t: p[0] + p[1] * t, data=1.0 + 2.0 * t, sigma=0.1, args=t, x0=[0.0, 0.0])


FIRST_CALL_LBFGS = mw.LBFGS(max_iterations=20)
LBFGS_START = "jit__lambda"  # the program name of L-BFGS's start (a lambda through cached_jit)


def first_and_second_calls(problem: mw.Problem, solver: mw.Solver, start_program: str) -> dict:
    """The same first call with the loop compiled after the start (``_COMPILE_AHEAD`` off) and beside
    it (on), then a second call: ``{label: (result, recorder, wall seconds)}``."""
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        for label, ahead in (("sequential", False), ("concurrent", True), ("second", True)):
            if label != "second":
                compile_cache.clear()
            recorder = CompileRecorder(start_waits_for_loop=label == "concurrent", start_program=start_program)
            mp.setattr(SOLVE_MODULE, "_COMPILE_AHEAD", ahead)
            mp.setattr(jax.stages.Lowered, "compile", recorder.wrap(ORIGINAL_COMPILE))
            t0 = time.perf_counter()
            result = mw.solve(problem, solver, seed=1, progress=False)
            out[label] = (result, recorder, time.perf_counter() - t0)
    return out


@pytest.fixture(scope="module")
def first_calls():
    return first_and_second_calls(line_problem(), FIRST_CALL_SOLVER, "jit_with_problem_arrays")


@pytest.fixture(scope="module")
def lbfgs_first_calls():
    return first_and_second_calls(line_from_x0(), FIRST_CALL_LBFGS, LBFGS_START)


def test_a_first_call_compiles_its_loop_while_the_start_compiles(first_calls):
    _, recorder, _ = first_calls["concurrent"]
    assert recorder.loop_compiling_during_start is True  # False: the start waited 10 s for nothing
    assert ("jit_run_chunk_of_phase", "multiwalk-compile") in recorder.compiled
    # the start on the calling thread, the result's one-point value on a compiling thread
    assert recorder.compiled.count(("jit_with_problem_arrays", "MainThread")) == 1
    assert recorder.compiled.count(("jit_with_problem_arrays", "multiwalk-compile")) == 1


def test_each_program_is_compiled_once_and_a_second_call_compiles_nothing(first_calls):
    sequential, concurrent, second = (first_calls[k][1].compiled for k in ("sequential", "concurrent", "second"))
    # the same programs as one after the other (the start, the loop, the one-point value, the
    # progress summary), none twice: the loop the call waits for is the one compiled on the thread
    assert sorted(name for name, _ in concurrent) == sorted(name for name, _ in sequential)
    assert [name for name, _ in concurrent].count("jit_run_chunk_of_phase") == 1  # one loop for both phases
    assert second == []


def test_concurrent_compilation_changes_no_result_and_counts_its_time(first_calls):
    (sequential, _, _), (concurrent, _, wall) = first_calls["sequential"], first_calls["concurrent"]
    # exact: the same programs on the same inputs
    assert np.array_equal(concurrent.samples, sequential.samples)
    assert np.array_equal(concurrent.fun_trace_all, sequential.fun_trace_all)
    assert np.array_equal(concurrent.x, sequential.x) and concurrent.fun == sequential.fun
    # the loop's compilation, from its tracing to its end, inside the call's wall time
    assert 0.0 < concurrent.stats["compile_seconds"] <= wall


def test_an_lbfgs_first_call_compiles_its_loop_while_the_start_compiles(lbfgs_first_calls):
    # L-BFGS's start evaluates f and g at x0 (the objective compiled there): its loop compiles
    # on a thread meanwhile; the start on the calling thread.  L-BFGS reports no one-point value.
    _, recorder, _ = lbfgs_first_calls["concurrent"]
    assert recorder.loop_compiling_during_start is True  # False: the start waited 10 s for nothing
    # in either order: which thread reaches its compile() first is the scheduler's choice (the
    # loop's thread, started first, usually; on a loaded machine not always)
    assert sorted(recorder.compiled) == sorted([("jit_run_chunk", "multiwalk-compile"), (LBFGS_START, "MainThread")])


def test_an_lbfgs_first_call_compiles_each_program_once_and_gives_the_same_result(lbfgs_first_calls):
    (sequential, seq_recorder, _), (concurrent, recorder, wall) = (lbfgs_first_calls[k] for k in ("sequential",
                                                                                                   "concurrent"))
    assert sorted(name for name, _ in recorder.compiled) == sorted(name for name, _ in seq_recorder.compiled)
    assert lbfgs_first_calls["second"][1].compiled == []
    # exact: the same programs on the same inputs
    for result in (concurrent, lbfgs_first_calls["second"][0]):
        assert np.array_equal(result.x, sequential.x) and result.fun == sequential.fun
        assert result.iterations == sequential.iterations and result.nfev == sequential.nfev
        assert all(np.array_equal(result.history[k], sequential.history[k]) for k in sequential.history)
    assert sequential.status == mw.Status.SUCCESS  # a converged fit, not a start left where it was
    assert 0.0 < concurrent.stats["compile_seconds"] <= wall


def small_deconvolution() -> mw.Problem:
    """A 16 x 16 dirty image of noise and a 7 x 7 Gaussian PSF: the image solvers' smallest fit."""
    y, x = np.mgrid[:7, :7] - 3
    return mw.deconv.Deconvolution(np.random.default_rng(1).standard_normal((16, 16)), np.exp(-(x**2 + y**2) / 4.5))


OTHER_STARTS = {  # solvers whose start is start_with(cached_jit, host arrays): (problem, solver)
    "Mapper": (lambda: mw.Problem(objective=lambda x: ((x - 0.3) ** 2).sum(), lower=[-1.0, -1.0], upper=[1.0, 1.0]),
               mw.Mapper(points=np.random.default_rng(0).uniform(-1.0, 1.0, (20, 2)))),
    "CoordinateDescent": (small_deconvolution, mw.deconv.CoordinateDescent(lam=0.05, alpha=0.8, max_iterations=5)),
    "BlockCoordinateDescent": (small_deconvolution,
                               mw.deconv.BlockCoordinateDescent(lam=0.05, alpha=0.8, max_iterations=3)),
    "Clean": (small_deconvolution, mw.deconv.Clean(gain=0.1, threshold=0.01, max_iterations=10)),
}


@pytest.mark.parametrize("which", list(OTHER_STARTS))
def test_mapper_and_image_solvers_compile_their_loop_while_the_start_compiles(which):
    make, solver = OTHER_STARTS[which]
    calls = first_and_second_calls(make(), solver, LBFGS_START)  # their starts are lambdas too
    sequential, recorder = calls["sequential"][0], calls["concurrent"][1]
    assert recorder.loop_compiling_during_start is True
    # the loop, and Mapper's one-point value, on compiling threads; nothing compiled twice
    assert sorted(recorder.compiled) == sorted([(LBFGS_START, "MainThread"), ("jit_run_chunk", "multiwalk-compile")]
                                               + [("jit_with_problem_arrays", "multiwalk-compile")] * (which == "Mapper"))
    assert calls["second"][1].compiled == []
    # exact: the same programs on the same inputs (the image solvers' FFTs can round differently
    # from call to call on the CPU, docs/deconvolution.md, seen on a 512 x 512 transform; these
    # 16 x 16 ones agreed bit for bit in 48 repeats)
    for result, _, _ in (calls["concurrent"], calls["second"]):
        assert np.array_equal(result.x, sequential.x) and result.fun == sequential.fun


@pytest.mark.parametrize("which", ["ReplicaExchange", "LBFGS"])
def test_an_error_in_a_background_compilation_reaches_the_caller(monkeypatch, which):
    # The loop's compilation fails on its thread: the caller gets that exception, its type and
    # message, from the wait for it (not a hang, not another error).
    failed_on = []

    def failing(lowered, options, who):
        failed_on.append(threading.current_thread().name)
        raise RuntimeError("RESOURCE_EXHAUSTED: out of memory while compiling the loop")

    compile_cache.clear()
    monkeypatch.setattr(SOLVE_MODULE, "_compile_lowered", failing)
    with pytest.raises(RuntimeError, match="^RESOURCE_EXHAUSTED: out of memory while compiling the loop$"):
        if which == "LBFGS":
            mw.solve(line_from_x0(), FIRST_CALL_LBFGS, progress=False)
        else:
            mw.solve(line_problem(), FIRST_CALL_SOLVER, seed=1, progress=False)
    assert failed_on == ["multiwalk-compile"]


def test_a_call_interrupted_while_its_loop_compiles_leaves_the_loop_to_the_next_call(monkeypatch):
    # Ctrl-C while the start is made raises KeyboardInterrupt, as it always did; the loop's
    # compilation goes on on its thread (held here until the next call compiles its start, by
    # which time that call has looked for its loop), and the next call waits for it rather than
    # compiling it a second time.
    release = threading.Event()
    loops = []

    def compile(lowered, *args, **kwargs):
        name = re.search(r"module @(\w+)", lowered.as_text()).group(1)
        if name == "jit_run_chunk_of_phase":
            loops.append(threading.current_thread().name)
            release.wait(timeout=10.0)
        elif threading.current_thread().name == "MainThread":
            release.set()
        return ORIGINAL_COMPILE(lowered, *args, **kwargs)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    compile_cache.clear()
    problem = line_problem()
    monkeypatch.setattr(jax.stages.Lowered, "compile", compile)
    with monkeypatch.context() as patch:
        patch.setattr(SOLVE_MODULE, "_first_state", interrupted)
        with pytest.raises(KeyboardInterrupt):
            mw.solve(problem, FIRST_CALL_SOLVER, seed=1, progress=False)
    result = mw.solve(problem, FIRST_CALL_SOLVER, seed=1, progress=False)
    assert loops == ["multiwalk-compile"]  # one compilation of the loop, the interrupted call's
    assert result.status == mw.Status.SUCCESS and result.stats["iterations"] == {"burn-in": 5, "sampling": 10}


def test_a_compile_thread_that_cannot_start_leaves_nothing_to_wait_for(monkeypatch):
    # Ctrl-C (or a process's thread limit) lands as the loop's compile thread starts: the call
    # raises it, and nothing is left waiting for a compilation that never began, so the next call
    # compiles the loop itself and finishes (before the fix it waited forever).
    original_start = threading.Thread.start

    def start(thread):
        if thread.name == "multiwalk-compile":
            monkeypatch.setattr(threading.Thread, "start", original_start)
            raise KeyboardInterrupt
        return original_start(thread)

    compile_cache.clear()
    problem = line_problem()
    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(KeyboardInterrupt):
        mw.solve(problem, FIRST_CALL_SOLVER, seed=1, progress=False)
    assert not SOLVE_MODULE._LOOPS_COMPILING
    result = mw.solve(problem, FIRST_CALL_SOLVER, seed=1, progress=False)
    assert result.status == mw.Status.SUCCESS
