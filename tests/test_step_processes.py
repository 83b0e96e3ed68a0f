"""Step files written by worker processes (``StepWriter(processes=k)``, ``--write-processes``):
every trial/result file split over the workers by line ranges (positional writes at offsets
summed from the lengths every worker sends every other), result_T files by groups; the same bytes as the writer in the
caller at odd chunk lengths and with more workers than lines, a worker's error or death raised in
the caller, no slot files left in /dev/shm, Ctrl-C leaving complete files that --resume extends.
Synthetic records (no JAX run) except the last test: the writer only reads them."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from odatse_inputs import ctrl_c_after_chunks, himmelblau_exchange, output_files, run_cli
from step_records import chunk_record, chunk_records, write_steps

from multiwalk.checkpoint import read_checkpoint
from multiwalk.cli import main
from multiwalk.io import odatse as odatse_io
from multiwalk.io import step_processes
from multiwalk.io.odatse import default_write_processes
from multiwalk.io.step_processes import plan_pieces


@pytest.fixture
def slot_dirs(monkeypatch) -> list[str]:
    """The slot folders (``multiwalk-steps-*``) the writers of this test make.  Recorded at their
    creation: a before/after listing of /dev/shm also saw the folders of another process's run
    (another xdist worker, or another run on the machine) and failed at random."""
    made: list[str] = []
    real = tempfile.mkdtemp

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        path = real(*args, **kwargs)
        if str(kwargs.get("prefix", "")).startswith("multiwalk-steps-"):
            made.append(path)
        return path

    monkeypatch.setattr(tempfile, "mkdtemp", recording)  # step_processes imports tempfile where it makes them
    return made


def _all_removed(made: list[str]) -> bool:
    """Some slot folder was made, and none is left."""
    return bool(made) and not any(Path(d).exists() for d in made)


def test_processes_write_the_same_bytes(tmp_path, slot_dirs, monkeypatch):
    # 2 emulated processes x 3 walkers, chunks of odd lengths (15, 21, 9, 3 lines per file: the
    # line ranges cut steps in the middle), 1, 2 and 4 workers, and 8 workers: more than the 6
    # result_T files and than the last chunk's 3 lines (empty pieces); short chunks gathered in
    # one slot until it is full (the default at these sizes) and every chunk sent on its own
    chunks, record = [5, 7, 3, 1], 7
    reference = write_steps(tmp_path / "caller", 6, 2, chunks, record, threads=0)
    assert len(reference) == 4 + 6  # trial/result of 2 processes, 6 result_T
    assert b" 3e-05 " in reference["0/trial.txt"]
    for workers in (1, 2, 4, 8):
        assert write_steps(tmp_path / f"p{workers}", 6, 2, chunks, record, processes=workers) == reference, workers
    monkeypatch.setattr(step_processes, "DISPATCH_LINES_PER_WORKER", 1)
    for workers in (2, 8):
        assert write_steps(tmp_path / f"q{workers}", 6, 2, chunks, record, processes=workers) == reference, workers
    assert _all_removed(slot_dirs)  # the slot files are removed at the end


def test_processes_discrete_space_and_resume(tmp_path):
    # a mesh (coordinates from node indices); a writer resumed at step 6 (inside the records)
    # appends to the files of one stopped there: the same bytes as one writer, 3 workers
    chunks, record = [6, 4, 5], 8
    reference = write_steps(tmp_path / "caller", 4, 1, chunks, record, nodes=5, threads=0)
    assert write_steps(tmp_path / "p3", 4, 1, chunks, record, nodes=5, processes=3) == reference
    write_steps(tmp_path / "r", 4, 1, chunks[:1], record, nodes=5, processes=3)  # steps 0 .. 5
    assert write_steps(tmp_path / "r", 4, 1, chunks, record, nodes=5, start=6, processes=3) == reference


def test_plan_covers_every_line_and_file_once():
    for workers, lines, n in [(1, 8, 8), (4, 1000, 256), (16, 125 * 256, 256), (3, 2, 5), (8, 3, 6), (64, 1, 3)]:
        plan = plan_pieces(workers, lines, n)
        assert len(plan) == workers
        covered = [q for (q0, q1), _ in plan for q in range(q0, q1)]
        temps = [t for _, (a, b) in plan for t in range(a, b)]
        assert covered == list(range(lines)) and temps == list(range(n))  # in order, each once
        sizes = [q1 - q0 for (q0, q1), _ in plan]
        assert max(sizes) - min(sizes) <= 1  # balanced to one line


def test_auto_rule():
    # threads below 8 CPUs or 200,000 replica-steps; else half the CPUs (rounded down), at most 16
    assert default_write_processes(10**7, cpus=2) == 0
    assert default_write_processes(10**5, cpus=16) == 0
    assert default_write_processes(512_000, cpus=16) == 8
    assert default_write_processes(512_000, cpus=9) == 4
    assert default_write_processes(512_000, cpus=64) == 16
    # a usage error before anything runs (the input file is not even read)
    assert main(["run", "no-such-input.toml", "--write-processes", "-3"]) == 2


def test_worker_error_reaches_the_caller(tmp_path, slot_dirs):
    n = 4
    writer = odatse_io.StepWriter(tmp_path, ["a", "b"], 1.0 / np.logspace(0, 2, n), False, 1, n, processes=2)
    values, ints = chunk_record(3, n, 2, 0, first=False)
    ints[0, 0, 1] = 0  # a fresh run whose first step is not every replica's result: the workers refuse it
    writer.on_steps(SimpleNamespace(rec_values=values, rec_ints=ints), 0, 2)
    with pytest.raises(RuntimeError, match="first step written must be step 0"):
        writer.close()
    assert _all_removed(slot_dirs)  # removed on the error path too
    with pytest.raises(ValueError, match="processes must be 0"):
        odatse_io.StepWriter(tmp_path, ["a", "b"], np.ones(n), False, 1, n, processes=-1)


def test_a_dead_worker_is_an_error_not_a_hang(tmp_path, slot_dirs):
    # the middle one of 3 workers is killed after the first chunk: the next chunk's flush raises
    # (the parent sees it end, and the worker after it in the ring reads EOF), close() ends the
    # others and leaves no slot files
    n = 6
    writer = odatse_io.StepWriter(tmp_path, ["a", "b"], 1.0 / np.logspace(0, 2, n), False, 1, n, processes=3)
    records = chunk_records(n, [4, 4])
    try:
        writer.on_steps(SimpleNamespace(rec_values=records[0][0], rec_ints=records[0][1]), 0, 3)
        writer.flush()
        victim = writer._processes._procs[1]
        victim.kill()
        victim.wait()
        with pytest.raises(RuntimeError, match="ended"):  # in on_steps (it sees the end) or at the flush
            writer.on_steps(SimpleNamespace(rec_values=records[1][0], rec_ints=records[1][1]), 4, 7)
            writer.flush()
    finally:
        with contextlib.suppress(RuntimeError):  # the same error again; the other workers are ended
            writer.close()
    assert _all_removed(slot_dirs)
    # the first chunk is complete in every file
    assert len((tmp_path / "0" / "trial.txt").read_text().splitlines()) >= 1 + 4 * n


def test_ctrl_c_leaves_complete_files_that_resume_extends(tmp_path, slot_dirs, monkeypatch):
    """multiwalk run --write-processes 2, Ctrl-C after the third chunk, --resume (also with 2
    processes): the same files as a run written between chunks.  Both runs' chunks are bounded by
    the checkpoint's 16 steps (the writers' own bound, a piece of the run, is never below 16): one
    chunk bound, one compiled loop (it sets Exchange's intervals per trip), so the same bytes."""
    text = himmelblau_exchange(seed=5, numsteps=160, nreplica_per_proc=3, labels=False,
                               algorithm_extra="checkpoint = true\ncheckpoint_steps = 16")

    def cli(folder: Path, *args: str) -> int:
        return run_cli(folder, "input.toml", "--nprocs", "2", *args)

    reference = tmp_path / "reference"
    reference.mkdir()
    (reference / "input.toml").write_text(text)
    assert cli(reference, "--write-threads", "0") == 0
    (tmp_path / "input.toml").write_text(text)
    with ctrl_c_after_chunks(monkeypatch, 3) as calls:
        assert cli(tmp_path, "--write-processes", "2") == 130
    assert 0 < calls[-1] < 159
    # complete files up to the interrupted run's last step: every file ends with a whole line of it
    for name in ("0/trial.txt", "1/result.txt", "result_T5.txt"):
        lines = (tmp_path / "output" / name).read_bytes().split(b"\n")
        assert lines[-1] == b"" and int(lines[-2].split()[0]) == calls[-1], name
    assert _all_removed(slot_dirs)
    assert cli(tmp_path, "--resume", "--write-processes", "2") == 0
    options = [read_checkpoint(folder / "output" / "0" / "checkpoint.npz")[0]["options"] for folder in (tmp_path, reference)]
    assert options[0] == options[1] and options[0]["max_chunk_steps"] == 16  # one compiled loop
    assert output_files(tmp_path) == output_files(reference)


def test_a_worker_gets_its_offsets_from_every_earlier_worker_directly(tmp_path):
    """The worker loop run in a thread as worker 2 of 3, the test plays workers 0 and 1 on their
    links: the worker formats both chunks and sends its pieces' lengths to both before it is
    given any (no chain: lengths do not wait for offsets); it does not write a chunk until the
    lengths of BOTH earlier workers are in (worker 1's alone is not enough), then its pieces land
    at the prefix sum of the lengths before them (the chunk's and every piece of the chunk before)."""
    import threading
    import time
    from multiprocessing import Pipe

    n, chunks, W = 4, [3, 5], 3
    reference = write_steps(tmp_path / "ref", n, 1, chunks, 8, threads=0)
    out = tmp_path / "w"
    (out / "0").mkdir(parents=True)
    names = ("0/trial.txt", "0/result.txt")
    headers = [reference[name].split(b"\n", 1)[0] + b"\n" for name in names]
    for name, header in zip(names, headers):
        (out / name).write_bytes(header)
    t_files = [out / f"result_T{t}.txt" for t in range(n)]
    for t, path in enumerate(t_files):
        path.write_bytes(reference[f"result_T{t}.txt"].split(b"\n", 1)[0] + b"\n")
    parent_in, worker_out = Pipe(duplex=False)
    worker_in, parent_out = Pipe(duplex=False)
    to_worker = {j: os.pipe() for j in (0, 1)}  # the links of workers 0 and 1 (played here) to worker 2
    from_worker = {j: os.pipe() for j in (0, 1)}
    thread = threading.Thread(target=step_processes._worker, args=(worker_in, worker_out), daemon=True)
    thread.start()
    a, b = plan_pieces(W, 1, n)[2][1]  # worker 2's result_T group
    parent_out.send({"workers": W, "index": 2, "per": n, "n": n,
                     "links_in": {j: to_worker[j][0] for j in (0, 1)},
                     "links_out": {j: from_worker[j][1] for j in (0, 1)},
                     "proc_files": [out / name for name in names], "base": [len(h) for h in headers],
                     "t_files": t_files, "t_own": t_files[a:b],
                     "t_strings": [odatse_io.number(1.0 / b) for b in 1.0 / np.logspace(0, 2, n)],
                     "coordinates": None, "last_result": None})
    ref_lines = [[ln + b"\n" for ln in reference[name].split(b"\n")[1:-1]] for name in names]
    first, start = 0, 0
    sizes = []  # sizes[c][j]: worker j's piece lengths (trial, result) of chunk c
    for c, (values, ints) in enumerate(chunk_records(n, chunks)):
        vpath, ipath = tmp_path / f"v{c}", tmp_path / f"i{c}"
        np.memmap(vpath, np.float64, "w+", shape=values.shape)[:] = values
        np.memmap(ipath, np.int32, "w+", shape=ints.shape)[:] = ints
        parent_out.send((c, (str(vpath), values.shape), (str(ipath), ints.shape), first))
        sizes.append([[sum(len(ln) for ln in lines[start + q0:start + q1]) for lines in ref_lines]
                      for (q0, q1), _ in plan_pieces(W, chunks[c] * n, n)])
        first += chunks[c]
        start += chunks[c] * n
    deadline = time.monotonic() + 20  # generous: a loaded CI machine; the formatting takes ~ms
    want_t = [reference[f"result_T{t}.txt"] for t in range(a, b)]
    while [p.read_bytes() for p in t_files[a:b]] != want_t and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [p.read_bytes() for p in t_files[a:b]] == want_t  # both chunks formatted, no length given yet
    for j in (0, 1):  # both chunks' lengths sent to each earlier worker, before any offset is known
        for c in (0, 1):
            got = np.frombuffer(step_processes._read_exact(from_worker[j][0], 24), np.int64)
            assert got.tolist() == [1, *sizes[c][2]], (j, c)
    assert not parent_in.poll()  # neither chunk written: their offsets wait

    def send(j: int, c: int) -> None:
        os.write(to_worker[j][1], np.array([1, *sizes[c][j]], np.int64).tobytes())

    send(1, 0)
    assert not parent_in.poll(0.3)  # worker 1's lengths alone do not place chunk 0 (worker 0's missing)
    send(0, 0)
    assert parent_in.recv()[:2] == (0, None)
    send(1, 1)
    send(0, 1)
    assert parent_in.recv()[:2] == (1, None)
    parent_out.send(None)
    thread.join(10)
    assert not thread.is_alive()
    for i, name in enumerate(names):  # workers 0's and 1's pieces left as holes here
        expect = headers[i]
        for c in (0, 1):
            expect += b"\0" * (sizes[c][0][i] + sizes[c][1][i])
            at = len(expect)  # = the header + every piece before worker 2's of chunk c
            expect += reference[name][at:at + sizes[c][2][i]]
        assert (out / name).read_bytes() == expect, name
    for j in (0, 1):  # the test's ends (the worker closed its own)
        os.close(to_worker[j][1])
        os.close(from_worker[j][0])


def test_a_failed_warm_up_is_reported_and_the_files_still_written(tmp_path, monkeypatch):
    """A worker's warm-up (made to fail here: numpy.random.default_rng, which only the warm-up
    calls, raises in the workers through a sitecustomize on their PYTHONPATH) is a warning and
    the worker's profile's ``warm_up_error``, not a failed run: the files are the threaded writer's."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import numpy.random\n\n\ndef _refused(*args, **kwargs):\n"
        "    raise RuntimeError('default_rng refused by the test')\n\n\nnumpy.random.default_rng = _refused\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])]))
    n = 4
    writer = odatse_io.StepWriter(tmp_path / "p", ["a", "b"], 1.0 / np.logspace(0, 2, n), False, 1, n, processes=2)
    try:
        values, ints = chunk_records(n, [3])[0]
        with pytest.warns(UserWarning, match="warm-up failed .*default_rng refused by the test"):
            writer.on_steps(SimpleNamespace(rec_values=values, rec_ints=ints), 0, 2)
            writer.flush()
    finally:
        writer.close()
    workers = writer.profile()["workers"]
    assert all("RuntimeError: default_rng refused by the test" in k["warm_up_error"] for k in workers)
    assert write_steps(tmp_path / "p2", n, 1, [3], 8, processes=0, threads=0) == {
        str(p.relative_to(tmp_path / "p")): p.read_bytes() for p in sorted((tmp_path / "p").rglob("*.txt"))}
