"""The step-file writer processes (:mod:`multiwalk.io.step_processes`) at the operating system's
limits: more files than the soft limit of open files, descriptor numbers past ``FD_SETSIZE``,
length messages longer than a pipe holds, and a worker's start or its links failing.  Each ends
in the files written whole or in an error that says what failed, never in a hang or a worker
left running.  Synthetic records (no JAX run)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from step_records import chunk_records, write_steps

from multiwalk.io import odatse as odatse_io
from multiwalk.io import step_processes

resource = pytest.importorskip("resource")  # the open-file limits are POSIX's


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def low_file_limit():
    """The soft limit of open files set below what 2 writer processes' start asks for (their
    links + 256), restored after the test; its value."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("counts open files in /proc/self/fd (Linux)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = len(_open_fds()) + 64  # room for the test's own files; 2 workers ask for 4 + 256
    if low >= 2 * 2 * 1 + 256 or (hard != resource.RLIM_INFINITY and hard < 2 * 3 * 2 + 256):
        pytest.skip(f"this process has {low - 64} files open, or the hard limit {hard} is too low")
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        yield low
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_raised_limit_of_open_files_is_put_back(tmp_path, low_file_limit):
    """The parent raises its soft limit while it holds the workers' links; the limit is the whole
    process's, so it is put back (here: once the workers have their links), and the files are
    still written whole."""
    n, chunks = 4, [3, 5]
    writer = step_processes.ProcessWriter(2)
    try:
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == low_file_limit
    finally:
        writer.close()
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == low_file_limit
    written = write_steps(tmp_path / "p", n, 1, chunks, 8, processes=2)
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == low_file_limit
    assert written == write_steps(tmp_path / "t", n, 1, chunks, 8, threads=0)


def test_running_out_of_files_for_the_links_closes_them_and_says_what_to_do(monkeypatch, low_file_limit):
    """os.pipe() fails (EMFILE) at the 6th of 3 workers' 6 links: the 5 made are closed, the
    limit raised for them is put back, and the error names the limit and both ways out."""
    real, made = os.pipe, []

    def pipe() -> tuple[int, int]:
        if len(made) == 5:
            raise OSError(errno.EMFILE, "Too many open files")
        made.append(real())
        return made[-1]

    before = _open_fds()
    monkeypatch.setattr(step_processes.os, "pipe", pipe)  # os itself: undone after the test
    with pytest.raises(ValueError, match=r"pipe 6 of the 6.*Too many open files.*limit of open files is \d+.*"
                                         r"--write-processes.*ulimit -n"):
        step_processes.ProcessWriter(3)
    monkeypatch.undo()
    assert len(made) == 5 and not _open_fds() - before  # every end closed
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == low_file_limit


@contextlib.contextmanager
def _soft_nofile(limit: int):
    """The soft limit of open files set to ``limit`` (workers started meanwhile inherit it), then put back."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < limit:
        pytest.skip(f"the hard limit of open files ({hard}) is below {limit}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_worker_owning_more_result_T_files_than_its_open_file_limit_still_writes(tmp_path):
    # One worker owns all 600 result_T files and inherits the parent's soft limit of open files
    # (512 here, 1024 is common): opening them all (plus trial/result) at its start would fail
    # with EMFILE before its first chunk, and a --resume would fail the same way.  Like the
    # threaded writer, it opens them per chunk when they do not fit its limit.
    # Exact bytes: the same formatting as the writer in the caller.
    n, m = 600, 2
    reference = write_steps(tmp_path / "caller", n, 1, [m], m, threads=0)
    probe = os.open(os.devnull, os.O_RDONLY)  # the lowest free descriptor: the test needs it well under 512
    os.close(probe)
    if probe > 300:
        pytest.skip(f"this process already holds ~{probe} descriptors")
    with _soft_nofile(512):  # only while the worker starts: it inherits this limit
        writer = odatse_io.StepWriter(tmp_path / "p1", ["a", "b"], 1.0 / np.logspace(0, 2, n), False, 1, n,
                                      processes=1)
    values, ints = chunk_records(n, [m])[0]
    try:
        writer.on_steps(SimpleNamespace(rec_values=values, rec_ints=ints), 0, m - 1)
    finally:
        writer.close()
    got = {str(p.relative_to(tmp_path / "p1")): p.read_bytes() for p in sorted((tmp_path / "p1").rglob("*.txt"))}
    assert got == reference


def test_workers_whose_links_have_descriptor_numbers_past_1024(tmp_path):
    # The workers' links keep their descriptor numbers (pass_fds); with more than ~22 writer
    # processes (2 W (W - 1) pipe ends: the parent raises its limit for them), or a parent that
    # holds many files, they pass FD_SETSIZE = 1024, where select.select() refuses them
    # ("filedescriptor out of range") and every worker would die at its first wait for lengths.
    # Here the parent holds ~1100 descriptors, so the 2 workers' links are numbered above 1024.
    n, m = 6, 5
    reference = write_steps(tmp_path / "caller", n, 1, [m], m, threads=0)
    held: list[int] = []
    with _soft_nofile(1400):
        try:
            while len(held) < 1100:
                held.append(os.open(os.devnull, os.O_RDONLY))
            assert held[-1] >= 1024
            got = write_steps(tmp_path / "p2", n, 1, [m], m, processes=2)
        finally:
            for fd in held:
                os.close(fd)
    assert got == reference  # exact bytes: the same formatting as the writer in the caller


def test_a_worker_that_cannot_open_its_files_reports_why(tmp_path):
    # A worker that fails at its start (opening its files, raising its open-file limit) does not
    # just die, which would leave the parent only "ended unexpectedly ... continue with --resume":
    # it answers its first chunk with the error itself (here: a result_T file in a folder that
    # does not exist), which the parent raises; no slot files are left.
    n, m = 4, 3
    files = {"trial": [tmp_path / "trial.txt"], "result": [tmp_path / "result.txt"]}
    for paths in files.values():
        paths[0].write_text("# header\n")
    t_files = [tmp_path / "no-such-folder" / f"result_T{t}.txt" for t in range(n)]
    writer = step_processes.ProcessWriter(1)
    values, ints = chunk_records(n, [m])[0]
    try:
        writer.start(1, n, files, t_files, [str(t) for t in range(n)], None, None)
        shm = writer._dir
        writer.submit(np.arange(m), values, ints, np.arange(m))
        with pytest.raises(FileNotFoundError, match="no-such-folder"):
            writer.flush()
    finally:
        writer.close()  # the error was raised once: close() ends the worker quietly
    assert not Path(shm).exists()


def test_length_messages_larger_than_a_pipe_do_not_deadlock(tmp_path, monkeypatch):
    # Each worker sends every other the byte lengths of its pieces: 8 (1 + 2 P) bytes a chunk for
    # P emulated processes.  Past a pipe's capacity (64 KiB: P >= 4096; shrunk to one page here,
    # so P = 300 is enough) two workers that send at the same time must not both block in write()
    # to each other, neither reading: the run would hang for good (and its workers never end).
    fcntl = pytest.importorskip("fcntl")
    import threading

    if not hasattr(fcntl, "F_SETPIPE_SZ"):
        pytest.skip("pipe sizes cannot be set here (Linux only)")
    real_pipe = os.pipe

    def small_pipe() -> tuple[int, int]:
        r, w = real_pipe()
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
        return r, w

    monkeypatch.setattr(step_processes.os, "pipe", small_pipe)  # the links are made with os.pipe
    P, m = 300, 3
    files = {kind: [tmp_path / f"{kind}{p}.txt" for p in range(P)] for kind in ("trial", "result")}
    for paths in files.values():
        for path in paths:
            path.write_text("# header\n")
    writer = step_processes.ProcessWriter(2)
    monkeypatch.setattr(step_processes.os, "pipe", real_pipe)
    values, ints = chunk_records(P, [m])[0]
    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            writer.start(P, 1, files, [], [str(t) for t in range(P)], None, None)
            writer.submit(np.arange(m), values, ints, np.arange(m))
            writer.flush()
            outcome.append(None)
        except BaseException as err:  # noqa: BLE001 - raised below
            outcome.append(err)

    procs = list(writer._procs)
    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    thread.join(20)  # ~1 s when it works; a deadlock never ends
    if thread.is_alive():
        for proc in procs:  # the hung workers (ours) are ended so that the test run goes on
            proc.kill()
        thread.join(10)
        pytest.fail("the writer processes deadlocked on their length messages")
    writer.close()
    assert outcome == [None]
    # every emulated process's trial file: its header and m lines (one walker), in step order
    lines = files["trial"][7].read_text().splitlines()
    assert len(lines) == 1 + m and [int(line.split()[0]) for line in lines[1:]] == list(range(m))


def _popen_recorder(monkeypatch, fail_at: int | None = None) -> list:
    """subprocess.Popen recording the workers it starts; with ``fail_at`` (1-based) that start
    fails with EMFILE instead.  Returns the list of started processes."""
    real = subprocess.Popen
    started: list = []

    def popen(*args, **kwargs):
        if fail_at is not None and len(started) + 1 == fail_at:
            raise OSError(errno.EMFILE, "Too many open files")
        started.append(real(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", popen)  # ProcessWriter imports subprocess as it starts a worker
    return started


def _end(procs: list) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_out_of_files_starting_a_worker_names_that_worker(monkeypatch):
    """The 2nd of 2 workers' start fails with EMFILE: the ValueError says which start failed
    (process 2), as the pipe case says which pipe."""
    started = _popen_recorder(monkeypatch, fail_at=2)
    try:
        with pytest.raises(ValueError, match="Too many open files") as err:
            step_processes.ProcessWriter(2)
    finally:
        monkeypatch.undo()
        _end(started)
    assert len(started) == 1
    assert "starting writer process 2" in str(err.value), str(err.value)


def test_a_worker_whose_links_to_the_parent_fail_is_ended(monkeypatch):
    """Out of open files at the parent's os.dup of the 1st worker's stdin (after its Popen): the
    ValueError comes out and that worker ends (within 8 s; a worker's start is ~1 s), rather
    than waiting on its stdin for as long as the parent holds the Popen object."""
    started = _popen_recorder(monkeypatch)
    real_dup = os.dup

    def dup(fd: int) -> int:
        if started:  # the first dup after a worker's Popen: the parent's own copy of its stdin
            raise OSError(errno.EMFILE, "Too many open files")
        return real_dup(fd)

    monkeypatch.setattr(step_processes.os, "dup", dup)  # os itself: undone below
    try:
        with pytest.raises(ValueError, match="Too many open files"):
            step_processes.ProcessWriter(2)
        monkeypatch.undo()
        assert len(started) == 1
        try:
            code = started[0].wait(timeout=8)
        except subprocess.TimeoutExpired:
            code = None
        assert code is not None, "the worker still runs 8 s after the constructor failed"
    finally:
        monkeypatch.undo()
        _end(started)
