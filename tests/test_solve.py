"""Tests of the one driver `mw.solve`: determinism, checkpoint / resume, time limit, Ctrl-C, bad options.

Every `mw.solve` compiles its loop (seconds on a 2-core CPU), so the runs are module-scoped fixtures
shared by the tests.  All runs use the same small replica-exchange sampler on a 3-D sphere in [-5, 5]^3.
Equality of samples between runs is asserted bit for bit: the solver draws its random numbers from
the run's key and the global iteration counter, so chunking, checkpoints and resumes must not change
a single value.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from ulp import assert_close_ulp

import multiwalk as mw
from multiwalk import compile_cache

solve_module = importlib.import_module("multiwalk.solve")  # the package exports the function solve

NSEQ, NBETA, NBURN, NITER = 4, 8, 20, 40

# Runs of another niter are other compiled programs (the record buffers' shapes are part of the
# loop), which may round the same moves differently on another CPU: one may contract x + step * z
# into a fused multiply-add where the other does not (an ulp of |x| <= 5, 4 ulp of 1, a move).
# Bit for bit on this CPU; 512 float32 ulp (6e-5 relative, values below 1 in 1's ulp) covers
# such ulps carried over the <= 60 iterations compared, far below a wrong move (its step, ~1).
NITER_ULPS = 512


def _same_samples(res: mw.ReplicaExchangeResult, ref: mw.ReplicaExchangeResult, k: int) -> None:
    """The first ``k`` sampling iterations of two runs of other niter: samples and chi2 to NITER_ULPS."""
    assert_close_ulp(res.samples[:k], ref.samples[:k], NITER_ULPS, "samples", scale=1.0)
    assert_close_ulp(res.fun_trace[:k], ref.fun_trace[:k], NITER_ULPS, "fun_trace", scale=1.0)


def sphere(x):
    return (x**2).sum()


@dataclasses.dataclass(frozen=True)
class OneIterationATrip(mw.ReplicaExchange):
    """ReplicaExchange whose loop runs one iteration a trip on every machine, as on a CPU: on a GPU
    its chunks are whole blocks of 20 iterations (``loop_block``), two chunks for the sampling
    phase's 40, and the tests of Ctrl-C and callbacks here stop a run after its 3rd sampling chunk
    or its first one-iteration chunk (tests/test_loop_block.py tests the blocks)."""

    def loop_block(self, problem: mw.Problem, platform: str) -> int:
        return 1


def solver(**overrides) -> mw.ReplicaExchange:
    opts = {"nseq": NSEQ, "nbeta": NBETA, "nburn": NBURN, "niter": NITER}
    opts.update(overrides)
    return OneIterationATrip(**opts)


@pytest.fixture(scope="module")
def problem() -> mw.Problem:
    return mw.Problem(objective=sphere, lower=-5.0 * np.ones(3), upper=5.0 * np.ones(3))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("solve")


@pytest.fixture(scope="module")
def full(problem):
    """The reference: an uninterrupted run with seed 0."""
    return mw.solve(problem, solver(), seed=0, progress=False)


@pytest.fixture(scope="module")
def other_seed(problem):
    return mw.solve(problem, solver(), seed=1, progress=False)


@pytest.fixture(scope="module")
def half(problem, workdir):
    """niter=20 with a checkpoint; returns (result, checkpoint path)."""
    ck = workdir / "ck.npz"
    res = mw.solve(problem, solver(niter=NITER // 2), seed=0, progress=False, checkpoint=ck)
    return res, ck


@pytest.fixture(scope="module")
def resumed(problem, half, workdir):
    """The niter=20 checkpoint resumed to niter=40 (from a copy, so `half`'s file stays as written)."""
    _, ck = half
    copy = workdir / "ck_copy.npz"
    copy.write_bytes(ck.read_bytes())
    infos: list[dict] = []
    res = mw.solve(problem, solver(), seed=0, progress=False, resume=copy, checkpoint=copy, callback=infos.append)
    return res, infos


# ------------------------------------------------------------------------------------------- result fields
def test_result_fields(full, problem):
    assert isinstance(full, mw.Result)
    assert full.x.shape == (3,)
    assert isinstance(full.fun, float)
    assert full.success is True
    assert full.status == mw.Status.SUCCESS
    assert isinstance(full.message, str) and full.message
    assert f"{NBURN} burn-in and {NITER} sampling" in full.message
    for key in ("nonfinite", "run_seconds", "compile_seconds"):
        assert key in full.stats, key
    assert full.stats["nonfinite"] == 0  # the sphere is finite everywhere in the box
    assert full.stats["run_seconds"] > 0 and full.stats["compile_seconds"] > 0
    assert full.stats["iterations"] == {"burn-in": NBURN, "sampling": NITER}


def test_result_values_are_consistent(full, problem):
    assert full.samples.shape == (NITER, NSEQ, 3)
    assert full.fun_trace.shape == (NITER, NSEQ)
    assert np.all((full.samples >= -5.0) & (full.samples <= 5.0))
    # Recorded chi2 is the objective at the recorded point.  Tolerance: chi2 <= 75 is a 3-term
    # float32 sum, error a few ulp of 75 (~1e-5); rtol 1e-5 + atol 1e-5 bounds it.
    np.testing.assert_allclose(full.fun_trace, (full.samples.astype(np.float64) ** 2).sum(-1), rtol=1e-5, atol=1e-5)
    # fun is the objective at x (same tolerance) and is the best seen, so no recorded sample beats it (exact).
    np.testing.assert_allclose(full.fun, sphere(full.x.astype(np.float64)), rtol=1e-5, atol=1e-5)
    assert full.fun <= full.fun_trace.min()


# ------------------------------------------------------------------------------------------- determinism
# A second seed-0 run of the same length would cost another compilation (~8 s here); the seed-0 runs
# that exist anyway are independent solve() calls and serve instead: `half` below (niter=20, its own
# compilation: equal to NITER_ULPS), and the runs resumed from a checkpoint of the same loop further
# down, which must equal `full` bit for bit.
def test_same_seed_same_samples(full, half):
    res, _ = half
    assert res.status == mw.Status.SUCCESS
    assert res.samples.shape == (NITER // 2, NSEQ, 3)
    _same_samples(res, full, NITER // 2)


def test_different_seed_different_samples(full, other_seed):
    assert other_seed.status == mw.Status.SUCCESS
    assert full.samples.shape == other_seed.samples.shape
    assert not np.array_equal(full.samples, other_seed.samples)
    assert not np.array_equal(full.fun_trace, other_seed.fun_trace)


# ------------------------------------------------------------------------------------------- checkpoint / resume
def test_checkpoint_file_is_written(half):
    _, ck = half
    assert ck.is_file()
    with np.load(ck, allow_pickle=False) as npz:
        assert "__meta__" in npz.files


def test_resume_equals_uninterrupted_run(full, resumed):
    resumed, infos = resumed
    # It really went on from the checkpoint (a fresh run would give the same values, so check this):
    # the first chunk it ran was in the sampling phase, after the 20 saved sampling iterations.
    assert infos[0]["phase"] == "sampling" and infos[0]["done"][0] == NBURN and infos[0]["done"][1] > NITER // 2
    assert resumed.status == mw.Status.SUCCESS
    assert resumed.stats["iterations"] == {"burn-in": NBURN, "sampling": NITER}
    # its first 20 sampling iterations ran in the niter=20 loop, another program: to NITER_ULPS
    _same_samples(resumed, full, NITER)
    assert_close_ulp(resumed.x, full.x, NITER_ULPS, "x", scale=1.0)
    assert_close_ulp(resumed.fun, full.fun, NITER_ULPS, "fun", scale=1.0)


def test_resume_with_changed_option_names_it(problem, half):
    _, ck = half
    with pytest.raises(ValueError, match=r"was written with nbeta=8 but the solver now has nbeta=16") as err:
        mw.solve(problem, solver(nbeta=16), seed=0, progress=False, resume=ck)
    assert str(ck) in str(err.value)  # the message names the file


def test_resume_shorter_than_checkpoint_is_refused(problem, half):
    _, ck = half
    with pytest.raises(ValueError, match=re.escape(str(ck))) as err:
        mw.solve(problem, solver(niter=10), seed=0, progress=False, resume=ck)
    msg = str(err.value)
    assert "10" in msg and "20" in msg  # what was asked for and what the checkpoint has


def test_resume_with_other_seed_is_refused(problem, half):
    _, ck = half
    with pytest.raises(ValueError, match=r"written with seed=0, not seed=1"):
        mw.solve(problem, solver(), seed=1, progress=False, resume=ck)


def test_resume_for_another_problem_is_refused(half):
    _, ck = half
    other = mw.Problem(objective=sphere, lower=-5.0 * np.ones(2), upper=5.0 * np.ones(2))
    with pytest.raises(ValueError, match=re.escape(str(ck))):
        mw.solve(other, solver(), seed=0, progress=False, resume=ck)


def test_resume_with_other_state_layout_says_what_differs(problem, half, workdir):
    # A checkpoint whose state has another number of arrays (a solver whose state changed between
    # versions): the message names the file, both counts, and what to do.
    _, ck = half
    with np.load(ck, allow_pickle=False) as npz:
        meta = json.loads(str(npz["__meta__"]))
        leaves = [npz[f"leaf_{i:04d}"] for i in range(meta["n_leaves"])]
    meta["n_leaves"] -= 1
    old = workdir / "old_layout.npz"
    np.savez(old, __meta__=np.array(json.dumps(meta)), **{f"leaf_{i:04d}": a for i, a in enumerate(leaves[:-1])})
    with pytest.raises(ValueError, match=re.escape(str(old))) as err:
        mw.solve(problem, solver(), seed=0, progress=False, resume=old)
    msg = str(err.value)
    assert f"holds {len(leaves) - 1} state arrays" in msg and f"now has {len(leaves)}" in msg
    assert "start the run anew" in msg


def test_resume_missing_file(problem, workdir):
    missing = workdir / "nothing_here.npz"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        mw.solve(problem, solver(), seed=0, progress=False, resume=missing)


def test_resume_from_text_file(problem, workdir):
    junk = workdir / "junk.txt"
    junk.write_text("this is not a checkpoint\n")
    with pytest.raises(ValueError, match=re.escape(str(junk)) + r".*is not a multiwalk checkpoint"):
        mw.solve(problem, solver(), seed=0, progress=False, resume=junk)


def test_resume_from_foreign_npz(problem, workdir):
    foreign = workdir / "foreign.npz"
    np.savez(foreign, a=np.arange(3))
    with pytest.raises(ValueError, match=re.escape(str(foreign)) + r".*is not a multiwalk checkpoint"):
        mw.solve(problem, solver(), seed=0, progress=False, resume=foreign)


def shifted_sphere(x):
    return ((x - 1.0) ** 2).sum()


@pytest.mark.parametrize(
    "other, changed",
    [
        (lambda: mw.Problem(objective=shifted_sphere, lower=-5.0 * np.ones(3), upper=5.0 * np.ones(3)),
         "objective: test_solve.sphere then, test_solve.shifted_sphere now"),
        (lambda: mw.Problem(objective=sphere, lower=-5.0 * np.ones(3), upper=np.array([5.0, 4.0, 5.0])),
         "upper: [5.0, 5.0, 5.0] then, [5.0, 4.0, 5.0] now"),
    ],
    ids=["objective", "bounds"],
)
def test_resume_of_another_problem_names_what_changed(half, other, changed, monkeypatch):
    # same n, so the state's shapes fit: only the problem's identity in the checkpoint tells them apart;
    # refused before anything compiles
    _, ck = half
    monkeypatch.setattr(solve_module, "_compiled_chunk_runner", _no_compiling)
    with pytest.raises(ValueError, match=re.escape(f"{ck} was written for another problem: {changed}")):
        mw.solve(other(), solver(), seed=0, progress=False, resume=ck)


def test_problem_identity_tells_functions_apart_by_code_and_closure():
    from multiwalk.identity import changes, problem_identity

    def scaled(c):
        return lambda x: c * (x**2).sum()

    def ident(f):
        return problem_identity(mw.Problem(objective=f, lower=-np.ones(2), upper=np.ones(2)))

    assert changes(ident(scaled(2.0)), ident(scaled(2.0))) == []  # another object, same function
    assert changes(ident(scaled(2.0)), ident(scaled(3.0))) == [
        "objective: test_solve.test_problem_identity_tells_functions_apart_by_code_and_closure.<locals>.scaled"
        ".<locals>.<lambda>, other code or closure than when it was written"]
    assert changes(ident(lambda x: (x**2).sum()), ident(lambda x: (x**3).sum()))  # other code, same name
    # a closure over a module (jax.numpy imported inside a function): digested by its name, not as an
    # array (jnp has attributes shape and dtype)
    import jax.numpy as jnp_local

    assert changes(ident(lambda x: jnp_local.sum(x**2)), ident(lambda x: jnp_local.sum(x**2))) == []
    # and the log_prior, when given, is part of the identity
    with_prior = problem_identity(mw.Problem(objective=scaled(2.0), lower=-np.ones(2), upper=np.ones(2),
                                             log_prior=lambda x: -x.sum()))
    assert [c.split(":")[0] for c in changes(ident(scaled(2.0)), with_prior)] == ["log_prior"]


def _no_compiling(*args, **kwargs):
    raise AssertionError("compiled the loop before refusing the input")


@pytest.mark.parametrize("damage", ["truncated", "bit flipped"])
def test_damaged_checkpoint_is_a_clear_error_naming_it(problem, half, workdir, damage):
    _, ck = half
    raw = ck.read_bytes()
    bad = workdir / f"damaged_{damage.replace(' ', '_')}.npz"
    # a flip in the middle of the file lands in a state array: the zip's CRC-32 catches it
    bad.write_bytes(raw[: len(raw) // 2] if damage == "truncated" else
                    raw[: len(raw) // 2] + bytes([raw[len(raw) // 2] ^ 0x10]) + raw[len(raw) // 2 + 1:])
    with pytest.raises(ValueError, match=re.escape(f"resume={str(bad)!r} is not a multiwalk checkpoint, or it is damaged")):
        mw.solve(problem, solver(), seed=0, progress=False, resume=bad)


@pytest.mark.parametrize(
    "where, message",
    [("under a file", "is a file, not a folder"), ("a folder", "is a folder: give a file name"),
     ("/proc", "a file cannot be written in '/proc'")],
)
def test_bad_checkpoint_path_is_refused_before_compiling(problem, workdir, monkeypatch, where, message):
    if where == "/proc" and not Path("/proc").is_dir():
        pytest.skip("no /proc on this system")
    a_file = workdir / "a_file.txt"
    a_file.write_text("")
    target = {"under a file": a_file / "ck.npz", "a folder": workdir, "/proc": Path("/proc/ck.npz")}[where]
    monkeypatch.setattr(solve_module, "_compiled_chunk_runner", _no_compiling)
    with pytest.raises(ValueError, match=re.escape(f"checkpoint={str(target)!r}") + ".*" + re.escape(message)):
        mw.solve(problem, solver(), progress=False, checkpoint=target)
    assert not target.with_name(target.name + ".tmp").exists()  # no stray file left


# ------------------------------------------------------------------------------------------- time limit
# niter=3*10**5 rather than 10**7: the sample buffer is allocated up front and the driver copies the
# whole state on every chunk (10**7 would be 480 MB; even 10**6 costs ~70 ms a chunk here, which can
# eat the whole 1 s limit during burn-in on a loaded machine).  3*10**5 iterations still take far
# longer than 1 s on a CPU (~100-250 us each here), so only the time limit can end this run.
HUGE = 3 * 10**5
TIME_LIMIT = 1.0


@pytest.fixture(scope="module")
def time_limited(problem):
    t0 = time.perf_counter()
    res = mw.solve(problem, solver(niter=HUGE), seed=0, progress=False, time_limit=TIME_LIMIT)
    return res, time.perf_counter() - t0


def test_time_limit_stops_with_a_partial_result(time_limited, full):
    res, wall = time_limited
    assert res.status == mw.Status.TIME_LIMIT
    assert res.success is False
    assert "time limit" in res.message
    k = res.samples.shape[0]
    assert 0 < k < HUGE
    assert res.stats["iterations"] == {"burn-in": NBURN, "sampling": k}
    # Run time (compilation excluded) stays near the limit: the driver sizes chunks to end by it.
    # Tolerance: 5 s of slack for a loaded 2-core machine; the full run would take minutes.
    assert res.stats["run_seconds"] < TIME_LIMIT + 5.0
    assert wall < res.stats["compile_seconds"] + TIME_LIMIT + 30.0  # same slack, plus set-up and transfers


def test_time_limited_samples_are_a_prefix_of_the_full_run(time_limited, full):
    res, _ = time_limited
    k = min(res.samples.shape[0], NITER)
    _same_samples(res, full, k)  # niter=HUGE: another compiled loop
    # Every returned row was really computed (not the zero-filled buffer): chi2 matches the point.
    # Tolerance as in test_result_values_are_consistent (float32 3-term sum of values <= 25).
    np.testing.assert_allclose(res.fun_trace, (res.samples.astype(np.float64) ** 2).sum(-1), rtol=1e-5, atol=1e-5)
    assert not np.any(np.all(res.samples == 0.0, axis=-1))


def test_run_that_finishes_at_the_time_limit_is_a_success(problem):
    # One sampling iteration and a limit shorter than one step: the single chunk runs (the limit is
    # checked before a chunk starts), completes the run, and then the limit is seen.
    res = mw.solve(problem, solver(nburn=0, niter=1), seed=0, progress=False, time_limit=1e-9)
    assert res.stats["iterations"] == {"burn-in": 0, "sampling": 1}  # all requested work was done
    assert res.status == mw.Status.SUCCESS


# ------------------------------------------------------------------------------------------- interrupt
class InterruptAfter:
    """A callback that presses Ctrl-C on its 3rd call in the sampling phase.

    Counting sampling-phase calls (not all calls) makes sure some samples were recorded: the burn-in
    chunks alone take the first few calls.
    """

    def __init__(self, n: int = 3) -> None:
        self.n = n
        self.infos: list[dict] = []

    def __call__(self, info: dict) -> None:
        self.infos.append(dict(info))
        if sum(i["phase"] == "sampling" for i in self.infos) >= self.n:
            raise KeyboardInterrupt


@pytest.fixture(scope="module")
def interrupted(problem, workdir):
    ck = workdir / "interrupted.npz"
    cb = InterruptAfter(3)
    try:
        res = mw.solve(problem, solver(), seed=0, progress=False, callback=cb, checkpoint=ck)
    except KeyboardInterrupt:  # must not end the test session if solve() lets it through
        pytest.fail("solve() let the KeyboardInterrupt raised by the callback escape")
    return res, cb, ck


def test_interrupt_returns_a_consistent_partial_result(interrupted, full):
    res, cb, _ = interrupted
    assert res.status == mw.Status.INTERRUPTED
    assert res.success is False
    assert sum(i["phase"] == "sampling" for i in cb.infos) == 3  # no chunk ran after the interrupt
    k = res.samples.shape[0]
    assert 0 < k < NITER
    assert cb.infos[-1]["done"] == [NBURN, k]  # what the callback saw last is what was returned
    assert res.stats["iterations"] == {"burn-in": NBURN, "sampling": k}
    assert np.array_equal(res.samples, full.samples[:k])
    assert np.array_equal(res.fun_trace, full.fun_trace[:k])


class TerminateAfter(InterruptAfter):
    """A callback that sends this process SIGTERM (as a batch system does at a job's time limit)
    on its 3rd call in the sampling phase."""

    def __call__(self, info: dict) -> None:
        self.infos.append(dict(info))
        if sum(i["phase"] == "sampling" for i in self.infos) == self.n:
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or sys.platform == "win32", reason="POSIX signals")
def test_sigterm_stops_like_ctrl_c_and_keeps_the_checkpoint(problem, workdir, full):
    # If the driver did not catch SIGTERM, this test's own handler would (instead of the default,
    # which kills the test process) and the first assertion fails.
    escaped: list = []
    def test_handler(*args):
        escaped.append(args)

    previous = signal.signal(signal.SIGTERM, test_handler)
    ck = workdir / "terminated.npz"
    cb = TerminateAfter(3)
    try:
        res = mw.solve(problem, solver(), seed=0, progress=False, callback=cb, checkpoint=ck)
    finally:
        handler_after = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, previous)
    assert not escaped, "SIGTERM reached the handler that was there before solve()"
    assert handler_after is test_handler  # the driver put the handler it found back
    assert res.status == mw.Status.INTERRUPTED
    assert sum(i["phase"] == "sampling" for i in cb.infos) == 3  # no chunk ran after the signal
    k = res.samples.shape[0]
    assert 0 < k < NITER and np.array_equal(res.samples, full.samples[:k])
    assert ck.is_file()  # the state up to the signal is on disk: resumable


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or sys.platform == "win32", reason="POSIX signals")
def test_the_interrupted_message_says_sigterm_too(problem, full):
    """solve() stops on SIGTERM as on Ctrl-C: the message of every solver's INTERRUPTED result
    names both (LBFGS has its own messages; the others share Status.describe).  The replica-exchange
    run is the module's (``full`` compiled its loops)."""
    from multiwalk.functions import cute

    rosenbrock = mw.Problem(objective=cute.extended_rosenbrock, x0=cute.start("extended_rosenbrock", 10))
    runs = ((rosenbrock, mw.LBFGS(max_iterations=500)), (problem, solver()))
    for run_problem, run_solver in runs:
        res = mw.solve(run_problem, run_solver, progress=False, chunk_seconds=1e-9,
                       callback=lambda info: os.kill(os.getpid(), signal.SIGTERM))
        assert res.status.name == "INTERRUPTED" and "Ctrl-C or SIGTERM" in res.message, (type(run_solver).__name__, res.message)


def test_callback_info_has_progress_fields(interrupted):
    _, cb, _ = interrupted
    first = cb.infos[0]
    assert first["phase"] == "burn-in"
    for key in ("done", "elapsed", "best", "accept"):
        assert key in first, key
    done_totals = [sum(i["done"]) for i in cb.infos]
    assert done_totals == sorted(done_totals) and done_totals[0] >= 1  # progress only moves forward


def test_checkpoint_written_on_interrupt_resumes_to_the_full_run(problem, interrupted, full):
    _, _, ck = interrupted
    assert ck.is_file()
    infos: list[dict] = []
    res = mw.solve(problem, solver(), seed=0, progress=False, resume=ck, callback=infos.append)
    # It went on from the interrupted state (k sampling iterations done), not from scratch.
    k = interrupted[0].samples.shape[0]
    assert infos[0]["phase"] == "sampling" and infos[0]["done"][0] == NBURN and infos[0]["done"][1] > k
    assert res.status == mw.Status.SUCCESS
    assert np.array_equal(res.samples, full.samples)
    assert np.array_equal(res.fun_trace, full.fun_trace)
    assert np.array_equal(res.x, full.x) and res.fun == full.fun


# ------------------------------------------------------------------------------------------- the next phase queued
class ChunkOrder:
    """Wraps the driver's launch and read of chunks, recording ``("launch" | "land", phase)`` in
    the order they happen, and for each launch of a later phase's chunk whether the chunk before
    it had ended (``ended_before``); ``press_at_phase_end``: Ctrl-C is pressed as a phase's last
    chunk, with the next phase's first queued behind it, is read."""

    def __init__(self, monkeypatch, press_at_phase_end: bool = False) -> None:
        self.events: list[tuple[str, int]] = []
        self.ended_before: list[bool] = []
        launch, land = solve_module._launch_chunk, solve_module._land_chunk
        last: list = []

        def launch_chunk(run, phase_index, *args, **kwargs):
            if last and last[-1].phase_index < phase_index:
                self.ended_before.append(all(x.is_ready() for x in jax.tree_util.tree_leaves(last[-1].outputs)))
            self.events.append(("launch", phase_index))
            last.append(launch(run, phase_index, *args, **kwargs))
            return last[-1]

        def land_chunk(run, launched, bar, ctrl_c, ended_at=None):
            self.events.append(("land", launched.phase_index))
            if press_at_phase_end and ended_at is not None:
                ctrl_c.pressed = True
            return land(run, launched, bar, ctrl_c, ended_at)

        monkeypatch.setattr(solve_module, "_launch_chunk", launch_chunk)
        monkeypatch.setattr(solve_module, "_land_chunk", land_chunk)

    def queued(self, phase: int = 1) -> bool:
        """Whether phase ``phase``'s first chunk was launched before the last of the phase before was read."""
        last_read = len(self.events) - 1 - self.events[::-1].index(("land", phase - 1))
        return self.events.index(("launch", phase)) < last_read


def test_the_next_phase_is_queued_behind_the_last_chunk_and_changes_nothing(problem, full, monkeypatch):
    # Without writers, checkpoint, callbacks or time limit the sampling's first chunk goes to the
    # device behind the burn-in's last, before that one is read back; the samples are the same
    # bit for bit as with the phases run one after the other (the same programs on the same state).
    order = ChunkOrder(monkeypatch)
    res = mw.solve(problem, solver(), seed=0, progress=False)
    assert order.queued(), order.events
    # the burn-in's last chunk had ended when the sampling's was launched: each is timed alone
    assert order.ended_before == [True]
    assert res.status == mw.Status.SUCCESS and res.stats["iterations"] == {"burn-in": NBURN, "sampling": NITER}
    monkeypatch.setattr(solve_module, "_queues_next_phase", lambda run: False)
    order = ChunkOrder(monkeypatch)
    apart = mw.solve(problem, solver(), seed=0, progress=False)
    assert not order.queued(), order.events
    for a, b in ((res, apart), (res, full)):
        assert np.array_equal(a.samples, b.samples) and np.array_equal(a.fun_trace, b.fun_trace)
        assert np.array_equal(a.x, b.x) and a.fun == b.fun
    assert 0 < res.stats["run_seconds"] <= res.stats["loop_seconds"]


@pytest.mark.parametrize("kwargs", [{"time_limit": 1e4}, {"callback": lambda info: None}, {"checkpoint": "queued.npz"},
                                    {"writer": "writer"}], ids=["time-limit", "callback", "checkpoint", "writer"])
def test_nothing_is_queued_where_the_host_acts_between_chunks(problem, workdir, full, monkeypatch, kwargs):
    # A time limit or a callback may stop the run after the burn-in; a checkpoint or a writer reads
    # its state: the sampling then starts only after the burn-in is read back
    class Recorder:  # a writer (multiwalk.solvers.base.Writer) that keeps what it was asked to write
        def __init__(self):
            self.spans: list[tuple[int, int]] = []

        def write(self, problem, state, first, last):
            self.spans.append((first, last))

        def flush(self):
            pass

    kwargs = dict(kwargs)
    if "checkpoint" in kwargs:
        kwargs["checkpoint"] = workdir / kwargs["checkpoint"]
    if "writer" in kwargs:
        kwargs["writer"] = Recorder()
    order = ChunkOrder(monkeypatch)
    res = mw.solve(problem, solver(), seed=0, progress=False, **kwargs)
    assert not order.queued(), order.events
    assert np.array_equal(res.samples, full.samples)


def test_ctrl_c_in_the_burn_ins_last_chunk_ends_after_the_queued_one(problem, full, monkeypatch):
    # Ctrl-C pressed while the burn-in's last chunk runs, the sampling's first queued behind it:
    # that one runs too (one iteration: chunks of about 1e-9 s), and the result holds it,
    # consistent with the iterations it reports
    order = ChunkOrder(monkeypatch, press_at_phase_end=True)
    res = mw.solve(problem, solver(), seed=0, progress=False, chunk_seconds=1e-9)
    assert order.queued(), order.events
    assert order.events[-3:] == [("launch", 1), ("land", 0), ("land", 1)] and order.events.count(("launch", 1)) == 1
    assert res.status == mw.Status.INTERRUPTED
    k = res.samples.shape[0]
    assert k == 1 and res.stats["iterations"] == {"burn-in": NBURN, "sampling": k}
    assert np.array_equal(res.samples, full.samples[:k]) and np.array_equal(res.fun_trace, full.fun_trace[:k])

# ------------------------------------------------------------------------------------------- bad run options
@pytest.mark.parametrize(
    "kwargs, exc, pattern",
    [
        ({"seed": -1}, ValueError, r"seed must be an integer in \[0, 2\*\*64\), got -1"),
        ({"seed": 1.5}, ValueError, r"seed must be an integer in \[0, 2\*\*64\), got 1\.5"),
        ({"seed": True}, ValueError, r"seed must be an integer in \[0, 2\*\*64\), got True"),
        ({"time_limit": 0}, ValueError, r"time_limit must be a positive number of seconds or None, got 0"),
        ({"time_limit": -2.5}, ValueError, r"time_limit must be a positive number of seconds or None, got -2\.5"),
        ({"chunk_seconds": 0}, ValueError, r"chunk_seconds must be a positive number, got 0"),
        ({"checkpoint_every": -1}, ValueError, r"checkpoint_every must be a non-negative number of seconds, got -1"),
    ],
    ids=["seed-negative", "seed-float", "seed-bool", "time-limit-zero", "time-limit-negative",
         "chunk-seconds-zero", "checkpoint-every-negative"],
)
def test_bad_run_option(problem, kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        mw.solve(problem, solver(), progress=False, **kwargs)


def test_problem_must_be_a_problem():
    with pytest.raises(TypeError, match=r"problem must be a multiwalk\.Problem, got function"):
        mw.solve(sphere, solver(), progress=False)


def test_solver_must_be_a_solver(problem):
    with pytest.raises(TypeError, match=r"solver must be a multiwalk solver .*got dict"):
        mw.solve(problem, {"nbeta": 8}, progress=False)


def test_checkpoint_in_missing_folder(problem, workdir):
    target = workdir / "no_such_folder" / "ck.npz"
    with pytest.raises(FileNotFoundError, match=re.escape(str(target.parent)) + r".*does not exist"):
        mw.solve(problem, solver(), progress=False, checkpoint=target)
    assert not target.parent.exists()


def test_replica_exchange_needs_a_box():
    no_box = mw.Problem(objective=sphere, x0=np.zeros(3))
    with pytest.raises(ValueError, match=r"ReplicaExchange needs a box: pass lower= and upper="):
        mw.solve(no_box, solver(), progress=False)


def test_64_bit_seeds_keep_their_high_half():
    # jax.random.PRNGKey keeps only 32 bits without x64; the driver folds the high half in.
    from multiwalk.solve import run_key

    low = np.asarray(run_key(5))
    assert not np.array_equal(low, np.asarray(run_key(2**32 + 5)))
    assert not np.array_equal(np.asarray(run_key(2**32 + 5)), np.asarray(run_key(2**33 + 5)))
    assert np.array_equal(low, np.asarray(run_key(5)))
    # a 32-bit seed's key, made on the host, is jax.random.PRNGKey's, bit for bit, and its array alike
    for seed in (0, 5, 2**31, 2**32 - 1):
        key, expected = run_key(seed), jax.random.PRNGKey(seed)
        assert np.array_equal(np.asarray(key), np.asarray(expected)), seed
        assert (key.dtype, key.shape, key.weak_type, key.committed) == (expected.dtype, expected.shape, False, False)


def test_a_second_solve_reuses_the_compiled_loop_and_a_changed_problem_does_not():
    # A second solve on the same problem and solver reuses the kept executable (no loop is
    # compiled: the newest kept loop is the same object) and gives the same samples.  args are
    # arguments of the compiled loop: changed in place, they are used at once without compiling.
    # Bounds are compiled in: changed in place, a new loop is compiled.  (Reuse is checked by the
    # kept executables, not by compile time, which XLA's own disk cache can make small anyway.)
    # nburn=0: only the sampling loop is compiled (half the compilation), and it is cached like any.
    problem = mw.Problem(objective=lambda x, a: ((x - a) ** 2).sum(), lower=[-5.0] * 2, upper=[5.0] * 2,
                         args=np.array([1.0, -1.0]))
    solver = mw.ReplicaExchange(nseq=2, nbeta=4, nburn=0, niter=10)
    first = mw.solve(problem, solver, seed=0, progress=False)
    loop = compile_cache.compiled_loops()[-1]
    second = mw.solve(problem, solver, seed=0, progress=False)
    assert compile_cache.compiled_loops()[-1] is loop
    assert np.array_equal(first.samples, second.samples)
    problem.args[:] = [3.0, 3.0]
    moved = mw.solve(problem, solver, seed=0, progress=False)
    assert compile_cache.compiled_loops()[-1] is loop
    assert not np.array_equal(first.samples, moved.samples)
    problem.lower[:] = -4.0
    mw.solve(problem, solver, seed=0, progress=False)
    assert compile_cache.compiled_loops()[-1] is not loop


def test_new_data_for_the_same_model_reuses_the_compiled_loop_and_gives_its_own_answer():
    # Two problems with one model function and data of the same shapes share the compiled loop
    # (data, sigma and args are its arguments); each must give exactly what a fresh compilation
    # gives (the cache is cleared for the reference runs).
    def line(p, t):
        return p[0] + p[1] * t

    t = np.linspace(0.0, 1.0, 8)
    solver = mw.ReplicaExchange(nseq=2, nbeta=4, nburn=0, niter=10)  # nburn=0: one loop to compile, not two

    def problem(slope):
        return mw.Problem(model=line, data=1.0 + slope * t, sigma=0.1, lower=[-5.0, -5.0], upper=[5.0, 5.0], args=t)

    first = mw.solve(problem(2.0), solver, seed=0, progress=False)
    loop = compile_cache.compiled_loops()[-1]
    shared = mw.solve(problem(-1.0), solver, seed=0, progress=False)
    assert compile_cache.compiled_loops()[-1] is loop  # no loop compiled for the new data
    compile_cache.clear_loops()
    fresh = mw.solve(problem(-1.0), solver, seed=0, progress=False)
    assert compile_cache.compiled_loops()[-1] is not loop
    assert np.array_equal(shared.samples, fresh.samples) and np.array_equal(shared.fun_trace, fresh.fun_trace)
    assert not np.array_equal(shared.samples, first.samples)
