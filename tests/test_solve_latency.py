"""What a solve() call costs on the host besides its loop: it must not grow with the size of x0
or the data (no digest of their bytes, no copy of a device array to the host), and a short run
whose loop was timed before is one chunk.  Behaviour is pinned, never speed."""

from __future__ import annotations

import hashlib
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.array import ArrayImpl

import multiwalk as mw
from multiwalk import compile_cache
from multiwalk.solvers import replica_exchange
from multiwalk.solvers.base import value_at_point


def shifted_sphere(x):
    return jnp.sum((x - 0.5) ** 2)


class CountingBlake2b:
    """hashlib.blake2b that adds up the bytes it is fed (every digest of multiwalk goes through it)."""

    fed = 0

    def __init__(self, data: bytes = b"", **options) -> None:
        self._h = _BLAKE2B(**options)
        self.update(data)

    def update(self, data: bytes) -> None:
        CountingBlake2b.fed += len(data)
        self._h.update(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


_BLAKE2B = hashlib.blake2b


N = 1 << 14  # x0 of 64 KiB (float32 in the run): a digest of it would be seen


def test_the_bytes_a_solve_digests_do_not_grow_with_x0(monkeypatch):
    # The keys of the kept executables hold shapes, not values; the problem's read-only periodic
    # mask is digested once per problem (the first call).  So a second call digests a few hundred
    # bytes of reprs and code digests.  Tolerance: 4096 bytes, a quarter of the smallest array of
    # size n here (the mask, n bytes; x0 is 8 n).
    problem = mw.Problem(objective=shifted_sphere, x0=np.zeros(N))
    solver = mw.LBFGS(m=3, eps=1e-4)
    mw.solve(problem, solver, progress=False)  # compiles, and digests the read-only mask once
    monkeypatch.setattr(hashlib, "blake2b", CountingBlake2b)
    CountingBlake2b.fed = 0
    result = mw.solve(problem, solver, progress=False)
    monkeypatch.setattr(hashlib, "blake2b", _BLAKE2B)
    assert 0 < CountingBlake2b.fed < 4096, CountingBlake2b.fed  # > 0: the counter does see the digests
    assert result.success  # the run itself: x = 0.5 to L-BFGS's tolerance (eps 1e-4 on the gradient)
    np.testing.assert_allclose(result.x, 0.5, atol=1e-3)


def test_a_device_array_x0_is_never_copied_to_the_host(monkeypatch):
    # A counting wrapper on the property every host copy of a jax array reads (np.asarray,
    # tobytes, float(), printing): the solve sends x0 to its start on the device, nothing else.
    x0 = jnp.zeros(N, jnp.float32)
    problem = mw.Problem(objective=shifted_sphere, x0=x0)
    assert problem.x0 is x0  # kept on the device, not converted at construction
    read = []
    value = ArrayImpl._value

    def counting(self):
        if self is x0:
            read.append(1)
        return value.fget(self)

    monkeypatch.setattr(ArrayImpl, "_value", property(counting))
    result = mw.solve(problem, mw.LBFGS(m=3, eps=1e-4), progress=False)
    assert read == []
    np.testing.assert_allclose(result.x, 0.5, atol=1e-3)  # as from the NumPy x0 above


def test_one_start_writes_its_new_pair_into_the_pairs_in_place():
    # L-BFGS's loop for one start keeps its m pairs in P, (1, 2m, n); each iteration writes the new
    # pair over the oldest in place.  A read of P that the compiler could not order before that
    # write made it copy all of P, twice per iteration (2 x 2 x 2m n values moved for nothing).
    mw.solve(mw.Problem(objective=shifted_sphere, x0=np.zeros(N)), mw.LBFGS(m=3, eps=1e-4), progress=False)
    pairs = f"f32[1,6,{N}]"
    [loop] = [text for text in (c.as_text() for c in compile_cache.compiled_loops()) if pairs in text]
    assert re.search(re.escape(pairs) + r"\{[0-9,]*\} copy\(", loop) is None


def test_a_device_array_x0_outside_the_box_or_not_finite_is_refused_by_index():
    with pytest.raises(ValueError, match=r"x0\[1\]=nan is not finite"):
        mw.Problem(objective=shifted_sphere, x0=jnp.array([0.0, jnp.nan, 0.0]))
    with pytest.raises(ValueError, match=r"x0\[2\]=3.0 is outside its bounds \[-1.0, 1.0\]"):
        mw.Problem(objective=shifted_sphere, x0=jnp.array([0.0, 0.0, 3.0]), lower=[-1.0] * 3, upper=[1.0] * 3)


def test_a_short_pattern_search_whose_loop_ran_before_is_one_chunk():
    # The first call times its loop (chunks of 1, 2, 4, ... iterations); the second sizes its first
    # chunk from that timing, and 20 iterations of 64 walkers are far below chunk_seconds: one
    # dispatch, one read-back.  Chunking never changes the result: bit for bit the same.
    # chunk_seconds=30 for the second call: its first chunk is 15 s at the slowest time per
    # iteration the first call measured (~0.1 ms here), so one chunk unless a chunk of the first
    # call stalled 0.75 s per iteration; at the default 1 s a stall of 25 ms per iteration (a
    # loaded machine's descheduled or throttled process) split it.  Not kept: 1, 2, 4, 8, 5.
    # The time limit (never reached) keeps the run in chunks: without one, and nothing else asked
    # between chunks, a run this short is one program (tests/test_one_program.py).
    problem = mw.Problem(objective=shifted_sphere, lower=[-2.0] * 3, upper=[2.0] * 3)
    solver = mw.PatternSearch(n_walkers=64, iterations=20, rounds=1)
    first = mw.solve(problem, solver, seed=1, progress=False, time_limit=600.0)
    second = mw.solve(problem, solver, seed=1, progress=False, chunk_seconds=30.0, time_limit=600.0)
    assert first.stats["chunks"] > 1
    assert second.stats["chunks"] == 1 and second.stats["iterations"] == {"search": 20}
    # with a callback (which may stop the run after any chunk) chunks start at one iteration again
    seen = []
    third = mw.solve(problem, solver, seed=1, progress=False, callback=seen.append)
    assert seen[0]["done"] == [1] and third.stats["chunks"] == len(seen) > 1
    assert all(np.array_equal(first.x, r.x) and first.fun == r.fun for r in (second, third))


def test_a_slow_first_launch_does_not_split_the_next_call():
    # A loop's first chunk ever (one iteration) also pays one-time costs (on a GPU, loading the
    # program's kernels): here a callback sleeping 0.3 s in the loop's first evaluation.  Kept as the loop's time
    # per iteration it made the next call's first chunk 0.5 s / 0.3 s = 1 iteration, so 20
    # iterations took several chunks; the later chunks' timing is kept instead: one chunk.
    # chunk_seconds=10 for the second call: the slow launch kept would still split it (5 s / 0.3 s
    # = 16 < 20 iterations, fewer on a slower machine), while the later chunks' timing makes it one
    # chunk unless one of them stalled 0.25 s per iteration (at the default 1 s: 25 ms, which a
    # loaded machine's chunk of 2 iterations can take).
    calls = []

    def first_call_slow(x: np.ndarray) -> np.ndarray:
        calls.append(1)
        if len(calls) == 2:  # the loop's first evaluation (the first is the start's)
            time.sleep(0.3)
        return np.zeros(x.shape[:-1], np.float32)

    def objective(x):
        extra = jax.pure_callback(first_call_slow, jax.ShapeDtypeStruct((), jnp.float32), x, vmap_method="broadcast_all")
        return shifted_sphere(x) + extra

    problem = mw.Problem(objective=objective, lower=[-2.0] * 3, upper=[2.0] * 3)
    solver = mw.PatternSearch(n_walkers=32, iterations=20, kernel="xla", rounds=1)
    # the time limit (never reached) keeps the run in chunks, not one program
    first = mw.solve(problem, solver, seed=2, progress=False, time_limit=600.0)
    second = mw.solve(problem, solver, seed=2, progress=False, chunk_seconds=10.0, time_limit=600.0)
    assert len(calls) > 2 and first.stats["chunks"] > 1
    assert second.stats["chunks"] == 1


class DeviceWork:
    """Counts, while entered, what a call asks of the device: compiled programs run
    (``jax.stages.Compiled.__call__``, through which every kept executable runs; a GPU's copies of
    a read into pinned host memory apart, in ``pinned_copies``) and primitives
    bound outside any program (``EvalTrace.process_primitive``: ``lax`` operations, ``jnp.asarray``,
    ``PRNGKey``, each dispatched on its own, on a GPU a launch and often a wait; jitted ``jnp``
    functions found in JAX's C++ cache are not seen), with every host->device transfer refused
    (``jax.transfer_guard_host_to_device("disallow_explicit")``: implicit ones too), and the reads
    back: the driver's one read after a chunk (``progress.fetch``), ``jax.device_get``, and any other
    host copy of a device array (``ArrayImpl._value``: ``np.asarray``, ``float()``) outside those."""

    def __init__(self, monkeypatch) -> None:
        from jax._src import core

        from multiwalk import progress

        self.programs = self.ops = self.pinned_copies = 0
        self.reads: list[str] = []
        run, bind = jax.stages.Compiled.__call__, core.EvalTrace.process_primitive
        fetch, device_get, value = progress.fetch, jax.device_get, ArrayImpl._value
        inside = []  # a read counted once, not again for each array it copies

        def counting_read(name, read):
            def counted(*args, **kwargs):
                if not inside:
                    self.reads.append(name)
                inside.append(name)
                try:
                    return read(*args, **kwargs)
                finally:
                    inside.pop()
            return counted

        monkeypatch.setattr(progress, "fetch", counting_read("fetch", fetch))
        monkeypatch.setattr(jax, "device_get", counting_read("device_get", device_get))
        monkeypatch.setattr(ArrayImpl, "_value", property(counting_read("np.asarray", value.fget)))

        def counting_run(compiled, *args, **kwargs):
            # on one GPU a read's copy into pinned host memory is a program of its own
            # (progress.start_copies): counted as a copy, not as the call's work
            if any(compiled is copy for copy in progress._PINNED_COPIES.values()):
                self.pinned_copies += 1
            else:
                self.programs += 1
            return run(compiled, *args, **kwargs)

        def counting_bind(trace, *args, **kwargs):
            self.ops += 1
            return bind(trace, *args, **kwargs)

        monkeypatch.setattr(jax.stages.Compiled, "__call__", counting_run)
        monkeypatch.setattr(core.EvalTrace, "process_primitive", counting_bind)
        self._guard = jax.transfer_guard_host_to_device("disallow_explicit")

    def __enter__(self) -> DeviceWork:
        self._guard.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._guard.__exit__(*exc)


def test_a_second_short_pattern_search_in_chunks_runs_three_programs_and_reads_back_once(monkeypatch):
    # A second call of a one-iteration search (the shortest run there is) kept in chunks (by a
    # time limit it never reaches) pays only what it must: the start, the chunk (its progress
    # summary and the result's point and counts inside), and the point's value (queued behind the
    # chunk): 3 programs, no operation dispatched on its own, no host->device copy (the run's key
    # and the trip count are kept from the first call; the point's value is computed from the point
    # on the device), and ONE read back, after the chunk: the result reads nothing more.
    problem = mw.Problem(objective=shifted_sphere, lower=[-2.0] * 3, upper=[2.0] * 3)
    solver = mw.PatternSearch(n_walkers=64, iterations=1, rounds=1)
    first = mw.solve(problem, solver, seed=1, progress=False, time_limit=600.0)
    on_device = jnp.ones(2)
    work = DeviceWork(monkeypatch)
    with work:
        jax.lax.neg(on_device)  # the counters see an operation outside a program ...
        assert work.ops >= 1
        with pytest.raises(Exception, match="[Dd]isallowed host-to-device transfer"):
            jnp.asarray(np.ones(2))  # ... and the guard refuses a transfer
        work.ops = 0
        second = mw.solve(problem, solver, seed=1, progress=False, time_limit=600.0)
    assert (work.programs, work.ops, work.reads) == (3, 0, ["fetch"])
    # the same run, read the same way: bit for bit the first call's result and counts
    assert np.array_equal(first.x, second.x) and first.fun == second.fun and isinstance(second.fun, float)
    assert second.stats["nonfinite"] == first.stats["nonfinite"] == 0 and second.stats["chunks"] == 1
    np.testing.assert_array_equal(first.walkers, second.walkers)


def test_a_second_short_pattern_search_is_one_program_and_one_read_back(monkeypatch):
    # Without a time limit, progress bar, callback or checkpoint the same search is ONE program
    # (the start, the iterations, the result's point, counts and one-point value), read back once;
    # no operation dispatched on its own, no host->device copy.
    problem = mw.Problem(objective=shifted_sphere, lower=[-2.0] * 3, upper=[2.0] * 3)
    solver = mw.PatternSearch(n_walkers=64, iterations=1)
    first = mw.solve(problem, solver, seed=1, progress=False)
    work = DeviceWork(monkeypatch)
    with work:
        second = mw.solve(problem, solver, seed=1, progress=False)
    assert (work.programs, work.ops, work.reads) == (1, 0, ["fetch"])
    assert second.stats["one_program"] and second.stats["chunks"] == 1
    # the same program run twice: bit for bit the first call's result and counts
    assert np.array_equal(first.x, second.x) and first.fun == second.fun and isinstance(second.fun, float)
    assert second.stats["nonfinite"] == first.stats["nonfinite"] == 0
    np.testing.assert_array_equal(first.walkers, second.walkers)


def test_a_second_replica_exchange_reads_back_once_a_phase_and_its_value_with_the_last(monkeypatch):
    # The result's few numbers (the best point, the bytes of its chi2 and of the non-finite counts,
    # the ladder) and the one-point value at the point, queued behind the last chunk, come back with
    # that chunk's read: one read a phase (burn-in, sampling), none after; 4 programs (the start, a
    # chunk a phase, the value).  The per-sequence records (round_trips among them) stay on the
    # device until read.
    problem = mw.Problem(objective=shifted_sphere, lower=[-2.0] * 2, upper=[2.0] * 2)
    solver = mw.ReplicaExchange(nbeta=3, nseq=4, nburn=6, niter=8)
    first = mw.solve(problem, solver, seed=1, progress=False)
    mw.solve(problem, solver, seed=1, progress=False)  # keeps the trip counts of whole phases (a first call's were shorter)
    work = DeviceWork(monkeypatch)  # no host->device copy either: the key, trip counts and phase index are kept
    evaluated_after = []  # value_at_point: the value's program and read after the run (what is not done)
    monkeypatch.setattr(replica_exchange, "value_at_point", lambda *a: evaluated_after.append(a) or value_at_point(*a))
    with work:
        second = mw.solve(problem, solver, seed=1, progress=False)
    assert (work.programs, work.ops, work.reads, evaluated_after) == (4, 0, ["fetch", "fetch"], [])
    # the same run, read the same way: bit for bit the first call's result and counts
    assert np.array_equal(first.x, second.x) and first.fun == second.fun
    assert second.stats["nonfinite"] == first.stats["nonfinite"] == 0
    np.testing.assert_array_equal(first.round_trips, second.round_trips)
    assert second.round_trips.dtype == np.int64 and second.round_trips.shape == (4,)
    # the value is the one-point program's at x, as value_at_point gives it
    assert second.fun == value_at_point(problem, second.x, 1.0)  # 1.0: any finite value found


def test_the_progress_summary_is_read_only_where_it_is_shown(monkeypatch):
    # Each array read back is a copy and a call into JAX: a call without a bar or a callback reads
    # the steps run and the result's report, not the progress summary; with a callback, the
    # summary is read and handed to it.
    from multiwalk import progress

    problem = mw.Problem(objective=shifted_sphere, lower=[-2.0] * 3, upper=[2.0] * 3)
    solver = mw.PatternSearch(n_walkers=16, iterations=2, rounds=1)
    fetched = []
    fetch = progress.fetch
    monkeypatch.setattr(progress, "fetch", lambda tree, **kw: fetched.append(tree[1]) or fetch(tree, **kw))
    mw.solve(problem, solver, seed=0, progress=False, time_limit=600.0)  # in chunks: a time limit it never reaches
    assert fetched and all(info == {} for info in fetched)
    fetched.clear()
    seen = []
    mw.solve(problem, solver, seed=0, progress=False, callback=seen.append)
    assert fetched and all(set(info) == {"best", "round"} for info in fetched)
    assert seen and all("best" in info for info in seen)


def test_one_start_x0_goes_into_the_start_as_it_was_given():
    # Unsplit, one start's x0 is the start's argument as given, (n,): on a device array x0[None]
    # was a program and a copy of its own; h0, the zero here, is made in the start's program.
    # A device x0 and the same values in NumPy then run the same programs: bit for bit.
    x0 = np.linspace(-1.0, 1.0, N).astype(np.float32)
    on_host = mw.Problem(objective=shifted_sphere, x0=x0)
    on_device = mw.Problem(objective=shifted_sphere, x0=jnp.asarray(x0))
    solver = mw.LBFGS(m=3, eps=1e-4)
    assert solver._x0(on_device, None, rows=False) is on_device.x0
    assert solver._x0(on_device, None).shape == (1, N)  # the (K, n) rows where the layout wants them
    a, b = (mw.solve(p, solver, progress=False) for p in (on_host, on_device))
    assert a.success and np.array_equal(a.x, b.x) and a.fun == b.fun and a.iterations == b.iterations


def test_the_result_reads_of_lbfgs_start_before_its_convergence_test_reads(monkeypatch):
    # The driver's test of the final state (done) reads the starts' status, the result their small
    # fields and x: all their copies start first (start_result_reads), so the reads wait for one
    # transfer, not one each.  The status read by done is among the copies started.
    from multiwalk.solvers.lbfgs import result as lbfgs_result
    from multiwalk.solvers.lbfgs.solver import LBFGS

    events, started = [], set()
    start_reads = lbfgs_result.start_reads

    def starting(tree):
        events.append("start")
        started.update(id(leaf) for leaf in jax.tree_util.tree_leaves(tree))
        start_reads(tree)

    done, result = LBFGS.done, LBFGS.result

    def testing(self, problem, state, phase):
        if not isinstance(state.starts.status, jax.core.Tracer):
            events.append(("done", id(state.starts.status) in started, id(state.starts.x) in started))
        return done(self, problem, state, phase)

    monkeypatch.setattr(lbfgs_result, "start_reads", starting)
    monkeypatch.setattr(LBFGS, "done", testing)
    monkeypatch.setattr(LBFGS, "result", lambda self, *a, **k: events.append("result") or result(self, *a, **k))
    r = mw.solve(mw.Problem(objective=shifted_sphere, x0=np.zeros(N)), mw.LBFGS(m=3, eps=1e-4), progress=False)
    assert r.success and events == ["start", ("done", True, True), "result"]


def test_a_first_chunk_sized_from_a_timing_a_few_percent_off_has_the_same_length(monkeypatch):
    # The first chunk is sized from the last call's time per iteration, which varies by a few
    # percent between calls; rounded down to three leading bits (at most 20 % less), its length
    # repeats, and so its trip count is found kept on the device rather than copied there anew.
    import importlib

    solve_module = importlib.import_module("multiwalk.solve")
    rounded = [solve_module._three_leading_bits(n) for n in (1, 3, 7, 8, 9, 15, 17, 450, 470, 511, 512)]
    assert rounded == [1, 3, 7, 8, 8, 14, 16, 448, 448, 448, 512]
    assert solve_module._three_leading_bits(np.int64(450)) == 448  # a solver's max_chunk may be NumPy's
    assert all(0.8 * n < solve_module._three_leading_bits(n) <= n for n in range(1, 1 << 14))
    problem = mw.Problem(objective=shifted_sphere, x0=np.zeros(N))
    solver = mw.LBFGS(m=3, eps=1e-4)
    mw.solve(problem, solver, progress=False)
    kept = []
    for per_step in (0.5 / 450, 0.5 / 470):  # half the default chunk_seconds: 450 and 470 iterations
        monkeypatch.setattr(compile_cache, "step_seconds", lambda key, s=per_step: s)
        r = mw.solve(problem, solver, progress=False)
        assert r.stats["chunks"] == 1
        kept.append(dict(solve_module._TRIP_COUNTS))
    assert kept[1].keys() == kept[0].keys()
    assert [n for n, _ in kept[1]].count(448) >= 1


def test_a_first_chunk_that_covers_what_is_left_is_not_rounded(monkeypatch):
    # A timing that fits the whole phase (1010 iterations of 1000 left) gives one chunk: rounded
    # down first (to 896), it was two.  The time limit (never reached) keeps the run in chunks.
    problem = mw.Problem(objective=shifted_sphere, lower=[-2.0] * 3, upper=[2.0] * 3)
    solver = mw.PatternSearch(n_walkers=16, iterations=1000, rounds=1)
    mw.solve(problem, solver, seed=1, progress=False, time_limit=600.0)
    monkeypatch.setattr(compile_cache, "step_seconds", lambda key: 0.5 / 1010)
    r = mw.solve(problem, solver, seed=1, progress=False, time_limit=600.0)
    assert r.stats["chunks"] == 1 and r.stats["iterations"] == {"search": 1000}
