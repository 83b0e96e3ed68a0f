"""The status line shown while a first solve() call compiles (multiwalk.progress.CompileStatus):
shown on standard error when the block outlasts its threshold and progress is on, never otherwise,
and its thread gone when the block ends, however it ends."""

from __future__ import annotations

import contextlib
import io
import threading
import time

import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw
from multiwalk import progress

SOLVER = mw.PatternSearch(n_walkers=4, iterations=3, rounds=1, kernel="xla")  # compiles in well under a second


@pytest.fixture(autouse=True)
def patient_join(monkeypatch):
    """The block's end waits up to 30 s (not 1 s) for the status thread, which returns as soon as the
    thread ends: "no thread left" then holds on a machine too loaded to wake it within a second."""
    monkeypatch.setattr(progress.CompileStatus, "JOIN_SECONDS", 30.0)


def status_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == progress.CompileStatus.THREAD_NAME]


def box_problem(objective) -> mw.Problem:
    return mw.Problem(objective=objective, lower=-np.ones(2), upper=np.ones(2))


# A function of its own per problem: a new function is compiled anew (kept programs are found by the
# functions and shapes), so each call below that needs to compile does.
def sphere(x, args=None):
    return jnp.sum(x**2)


def shifted_sphere(x, args=None):
    return jnp.sum((x - 0.25) ** 2)


class ScriptedClock:
    """A clock whose readings are given (seconds): the first at the block's start, then one per
    line written; it counts its readings so the test can wait for the thread's writes."""

    def __init__(self, readings: list[float]) -> None:
        self.readings, self.calls = readings, 0

    def __call__(self) -> float:
        value = self.readings[min(self.calls, len(self.readings) - 1)]
        self.calls += 1
        return value


def test_a_slow_block_shows_the_line_updates_it_and_stops_its_thread(capsys, monkeypatch):
    # The seconds shown come from the clock, so the text does not depend on how fast this machine
    # wakes the thread; the test waits for the thread's writes (the clock's readings), up to 30 s.
    monkeypatch.setattr(progress.CompileStatus, "UPDATE_SECONDS", 0.01)
    clock = ScriptedClock([100.0, 100.4, 101.3])  # start; shown at 0.4 s ("0 s"); updated at 1.3 s ("1 s")
    with progress.CompileStatus(True, after=0.0, clock=clock):
        deadline = time.perf_counter() + 30.0
        while clock.calls < 3 and time.perf_counter() < deadline:
            time.sleep(0.005)
    err = capsys.readouterr().err
    assert clock.calls >= 3, "the status thread wrote no update within 30 s"
    assert f"{progress.CompileStatus.COMPILING}: 0 s" in err
    assert f"{progress.CompileStatus.COMPILING}: 1 s" in err
    assert status_threads() == []  # joined when the block ended


def test_a_fast_block_or_a_disabled_one_shows_nothing_and_an_exception_stops_the_thread(capsys):
    started = time.perf_counter()
    with progress.CompileStatus(True, after=5.0):  # ends long before its threshold
        pass
    # the thread wakes at once when the block ends: it is not waited out (5 s); up to 4 s for a
    # loaded machine's thread wake-up and join
    assert time.perf_counter() - started < 4.0
    with progress.CompileStatus(False, after=0.0):  # progress off: no thread, no line
        assert status_threads() == []
        time.sleep(0.05)
    assert "compiling" not in capsys.readouterr().err
    with pytest.raises(KeyboardInterrupt), progress.CompileStatus(True, after=0.01):
        time.sleep(0.2)
        raise KeyboardInterrupt
    assert status_threads() == []
    assert "compiling" in capsys.readouterr().err  # it was shown, then removed with its thread


@pytest.fixture(scope="module")
def compiled_once():
    """A first call with progress on and no threshold: its standard error (capsys is per test), and its
    problem, now compiled."""
    problem = box_problem(sphere)
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(err):
        patch.setattr(progress, "COMPILE_STATUS_AFTER", 0.0)
        patch.setattr(progress.CompileStatus, "JOIN_SECONDS", 30.0)  # as patient_join's, module-wide here
        mw.solve(problem, SOLVER, seed=0, progress=True)
    return problem, err.getvalue()


def test_a_first_call_with_progress_shows_the_status(compiled_once):
    _, err = compiled_once
    assert progress.CompileStatus.COMPILING in err
    assert status_threads() == []


def test_a_second_call_stays_quiet(compiled_once, capsys):
    # the default threshold (1 s) against a call that compiles nothing (milliseconds)
    problem, _ = compiled_once
    mw.solve(problem, SOLVER, seed=1, progress=True)
    err = capsys.readouterr().err
    assert "compiling" not in err
    assert "it/s" in err or "it]" in err  # the run's own bar was written: stderr was captured


def test_progress_off_shows_no_status_even_while_compiling(monkeypatch, capsys):
    monkeypatch.setattr(progress, "COMPILE_STATUS_AFTER", 0.0)
    mw.solve(box_problem(shifted_sphere), SOLVER, seed=0, progress=False)  # a new function: compiles
    assert "compiling" not in capsys.readouterr().err


def test_progress_none_without_a_terminal_shows_no_status(monkeypatch, capsys):
    # progress=None shows the bar and the status only when stderr is a terminal; captured, it is not
    monkeypatch.setattr(progress, "COMPILE_STATUS_AFTER", 0.0)
    mw.solve(box_problem(shifted_sphere), SOLVER, seed=2, progress=None)
    assert "compiling" not in capsys.readouterr().err
