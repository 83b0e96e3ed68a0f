"""Defects found in the review of the third session's changes (2026-11-22), each pinned by a test.

The step-file worker processes (:mod:`multiwalk.io.step_processes`): synthetic records, no JAX run.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from multiwalk.io import odatse as odatse_io

resource = pytest.importorskip("resource")  # the open-file limits are POSIX's


def _records(m: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A fresh run's first ``m`` steps: values (m, n, 3) = f, x1, x2; ints (m, n, 3) =
    temperature index (a permutation per step), accepted, node (step 0: every start accepted)."""
    rng = np.random.default_rng(seed)
    values = np.concatenate([rng.exponential(50, (m, n, 1)), rng.uniform(-6, 6, (m, n, 2))], axis=2)
    ints = np.zeros((m, n, 3), np.int32)
    ints[..., 0] = np.argsort(rng.random((m, n)), axis=1)
    ints[..., 1] = rng.random((m, n)) < 0.5
    ints[0, :, 1] = 1
    return values, ints


def _write(folder: Path, n: int, m: int, **kw) -> dict[str, bytes]:
    """One chunk of ``m`` steps of ``n`` replicas (one emulated process) through a StepWriter; the files' bytes."""
    values, ints = _records(m, n, 0)
    writer = odatse_io.StepWriter(folder, ["a", "b"], 1.0 / np.logspace(0, 2, n), False, 1, n, **kw)
    try:
        writer.on_steps(SimpleNamespace(rec_values=values, rec_ints=ints), 0, m - 1)
    finally:
        writer.close()
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.txt"))}


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
    # One worker owns all 600 result_T files and opens them all (plus trial/result) at its start;
    # it inherits the parent's soft limit of open files (512 here, 1024 is common).  It died with
    # EMFILE before its first chunk, and the parent said "ended unexpectedly ... continue with
    # --resume" (which dies the same way); the threaded writer falls back to opening per chunk.
    # Exact bytes: the same formatting as the writer in the caller.
    n, m = 600, 2
    reference = _write(tmp_path / "caller", n, m, threads=0)
    probe = os.open(os.devnull, os.O_RDONLY)  # the lowest free descriptor: the test needs it well under 512
    os.close(probe)
    if probe > 300:
        pytest.skip(f"this process already holds ~{probe} descriptors")
    with _soft_nofile(512):  # only while the worker starts: it inherits this limit
        writer = odatse_io.StepWriter(tmp_path / "p1", ["a", "b"], 1.0 / np.logspace(0, 2, n), False, 1, n,
                                      processes=1)
    values, ints = _records(m, n, 0)
    try:
        writer.on_steps(SimpleNamespace(rec_values=values, rec_ints=ints), 0, m - 1)
    finally:
        writer.close()
    got = {str(p.relative_to(tmp_path / "p1")): p.read_bytes() for p in sorted((tmp_path / "p1").rglob("*.txt"))}
    assert got == reference


def test_workers_whose_links_have_descriptor_numbers_past_1024(tmp_path):
    # The workers' links keep their descriptor numbers (pass_fds); with more than ~22 writer
    # processes (2 W (W - 1) pipe ends: the parent raises its limit for them), or a parent that
    # holds many files, they pass FD_SETSIZE = 1024, and select.select() refuses them
    # ("filedescriptor out of range"): every worker died at its first wait for lengths.  Here the
    # parent holds ~1100 descriptors, so the 2 workers' links are numbered above 1024.
    n, m = 6, 5
    reference = _write(tmp_path / "caller", n, m, threads=0)
    held: list[int] = []
    with _soft_nofile(1400):
        try:
            while len(held) < 1100:
                held.append(os.open(os.devnull, os.O_RDONLY))
            assert held[-1] >= 1024
            got = _write(tmp_path / "p2", n, m, processes=2)
        finally:
            for fd in held:
                os.close(fd)
    assert got == reference  # exact bytes: the same formatting as the writer in the caller


def test_a_worker_that_cannot_open_its_files_reports_why(tmp_path):
    # A worker that failed at its start (opening its files, raising its open-file limit) died
    # there, and the parent could only say "ended unexpectedly ... continue with --resume"; the
    # worker now answers its first chunk with the error itself (here: a result_T file in a
    # folder that does not exist), which the parent raises; no slot files are left.
    from multiwalk.io.step_processes import ProcessWriter

    n, m = 4, 3
    files = {"trial": [tmp_path / "trial.txt"], "result": [tmp_path / "result.txt"]}
    for paths in files.values():
        paths[0].write_text("# header\n")
    t_files = [tmp_path / "no-such-folder" / f"result_T{t}.txt" for t in range(n)]
    writer = ProcessWriter(1)
    values, ints = _records(m, n, 0)
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
    # so P = 300 is enough) two workers that send at the same time both blocked in write() to
    # each other, neither reading: the run hung for good (and the orphaned workers never ended).
    fcntl = pytest.importorskip("fcntl")
    import threading

    from multiwalk.io import step_processes

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
    values, ints = _records(m, P, 0)
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
