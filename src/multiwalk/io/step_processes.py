"""ODAT-SE's step files formatted and written by worker processes (``StepWriter(processes=k)``).

Why processes: polars' ``write_csv``, which formats the step files, runs on one core per call
and does not run in parallel from several Python threads of one process (two threads took twice
one thread's time), so the threaded writer stopped scaling at ~2 threads.  Here each worker
process owns a fixed set of files (``trial.txt`` / ``result.txt`` of an emulated process, or a
group of ``result_T<t>.txt``), formats its files' lines of each chunk with the same functions as
the threaded writer (same bytes) and appends them itself, in chunk order: no ordering between
workers is needed, and the parent does no formatting and no writing.

The parent copies each chunk's record into one of three memory-mapped slot files (in /dev/shm
where there is one: the copy it made anyway) and sends each worker the slot's number; a slot is
reused once every worker has said it is done with that chunk.  Workers are fresh interpreters
running this file as a script (no fork of a process running JAX, and no import of JAX or of the
parent's main module: they start in ~0.3 s, under the JAX compilation), talking over their
stdin/stdout with pickled messages; they run in their own session and ignore Ctrl-C (the parent
lets them finish the chunks handed over, so the files stay complete), and end when the parent
closes their pipe or dies.  A worker's error is sent back
and raised by the parent's next ``on_steps``/``flush``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ProcessWriter", "plan_jobs"]

SLOTS = 3  # chunks in shared memory: two waiting for the workers (as the threaded writer) + the one being copied


def plan_jobs(workers: int, nprocs: int, per: int, separate_T: bool) -> list[list[tuple]]:
    """Files of each worker: ``("trial", p)``, ``("result", p)`` (process p's files) and
    ``("T", a, b)`` (result_T a .. b-1), balanced by their cost (lines, a result_T line
    counted 0.75 of a trial line: one column fewer, measured ~130 vs ~180 ns per line).
    Every worker gets at least one job when there are enough files."""
    n = nprocs * per
    jobs: list[tuple[float, tuple]] = [(float(per), (kind, p)) for p in range(nprocs) for kind in ("trial", "result")]
    if separate_T:
        groups = max(1, min(n, workers - len(jobs))) if workers > len(jobs) else max(1, min(n, workers))
        edges = np.linspace(0, n, groups + 1).round().astype(int).tolist()
        jobs += [(0.75 * (b - a), ("T", a, b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    plan: list[list[tuple]] = [[] for _ in range(max(1, min(workers, len(jobs))))]
    load = [0.0] * len(plan)
    for cost, job in sorted(jobs, key=lambda j: -j[0]):  # longest first onto the least loaded worker
        k = int(np.argmin(load))
        plan[k].append(job)
        load[k] += cost
    return plan


def _worker(inbox: Any, outbox: Any) -> None:
    """One writer process: reads its spec, then appends its jobs' lines of each chunk it is sent,
    in order; answers ``(chunk, error or None, busy seconds)`` per chunk; ends on ``None`` or
    when the pipe closes."""
    import importlib.util

    import polars as pl

    # odatse.py by its path: importing the package would import JAX (~1 s) for nothing
    where = importlib.util.spec_from_file_location("multiwalk_step_file_formats", Path(__file__).with_name("odatse.py"))
    formats = importlib.util.module_from_spec(where)
    where.loader.exec_module(formats)
    try:
        spec = inbox.recv()
    except EOFError:
        return
    t_series = pl.Series(spec["t_strings"], dtype=pl.String)
    fds = {path: os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_BINARY", 0)) for path in spec["files"]}
    last_result = spec["last_result"]
    need_result = any(job[0] != "trial" for job in spec["jobs"])
    try:
        while True:
            try:
                msg = inbox.recv()
            except EOFError:  # the parent is gone
                return
            if msg is None:
                return
            chunk, (vpath, vshape), (ipath, ishape), first = msg
            t0 = time.perf_counter()
            try:
                values = np.memmap(vpath, np.float64, "r", shape=vshape)
                ints = np.memmap(ipath, np.int32, "r", shape=ishape)
                steps = np.arange(first, first + vshape[0])
                trial, result, new_last = formats._chunk_rows(values, ints, spec["coordinates"], last_result, need_result)
                for job in spec["jobs"]:
                    if job[0] == "T":
                        for path, data in formats._t_group_bytes(steps, ints, result, job[1], job[2], spec["t_files"]):
                            _write_all(fds[path], data)
                    else:
                        rows = trial if job[0] == "trial" else result
                        data = formats._proc_bytes(steps, ints, rows, job[1], spec["per"], t_series)
                        _write_all(fds[spec["proc_files"][job[0]][job[1]]], data)
                del values, ints
                last_result = new_last
                error = None
            except BaseException as err:  # noqa: BLE001 - every error goes back to the parent
                error = err
            busy = time.perf_counter() - t0
            try:
                outbox.send((chunk, error, busy))
            except Exception:  # noqa: BLE001 - an error that does not pickle goes back as text
                outbox.send((chunk, RuntimeError(f"step-file writer process: {error!r}"), busy))
    finally:
        for fd in fds.values():
            os.close(fd)


def _write_all(fd: int, data: Any) -> None:
    view = memoryview(data)
    while view.nbytes:
        view = view[os.write(fd, view):]


class ProcessWriter:
    """The parent's side: ``workers`` worker processes writing the files of :func:`plan_jobs`.

    ``proc_files``: ``{"trial": [path per process], "result": [...]}``; ``t_files``: result_T
    paths; ``t_strings``: each temperature's spelling; ``last_result`` (n, 1 + d) or None (fresh run).
    """

    def __init__(self, workers: int, nprocs: int, per: int, proc_files: dict[str, list[Path]], t_files: list[Path],
                 t_strings: list[str], coordinates: np.ndarray | None, last_result: np.ndarray | None) -> None:
        import subprocess
        import sys
        import tempfile
        from multiprocessing.connection import Connection

        n = nprocs * per
        plan = plan_jobs(workers, nprocs, per, bool(t_files))
        self._conns: list[tuple[Any, Any]] = []  # (to the worker, from the worker)
        self._procs: list[Any] = []
        for jobs in plan:
            files = [proc_files[j[0]][j[1]] for j in jobs if j[0] != "T"]
            files += [f for j in jobs if j[0] == "T" for f in t_files[j[1]:j[2]]]
            spec = {"jobs": jobs, "files": files, "proc_files": proc_files, "t_files": t_files, "t_strings": t_strings,
                    "per": per, "n": n, "coordinates": coordinates, "last_result": last_result}
            proc = subprocess.Popen([sys.executable, "-u", __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    start_new_session=True)  # Ctrl-C in the terminal does not reach it
            to_worker = Connection(os.dup(proc.stdin.fileno()), readable=False)
            from_worker = Connection(os.dup(proc.stdout.fileno()), writable=False)
            proc.stdin.close()
            proc.stdout.close()
            to_worker.send(spec)
            self._conns.append((to_worker, from_worker))
            self._procs.append(proc)
        shm = Path("/dev/shm")
        self._dir = tempfile.mkdtemp(prefix="multiwalk-steps-", dir=shm if shm.is_dir() and os.access(shm, os.W_OK) else None)
        self._slots: list[tuple[Path, Path]] = []  # (values file, ints file) per slot, made at the first chunk
        self._maps: list[tuple[np.memmap, np.memmap]] = []
        self._slot_shape: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self._pending: list[tuple[int, int]] = []  # (chunk, slot) handed over, oldest first
        self._acked = [0] * len(self._conns)  # chunks each worker has answered
        self._next_chunk = 0
        self.busy = [0.0] * len(self._conns)  # each worker's formatting and writing seconds
        self.workers = len(self._conns)
    def _blocks(self, vshape: tuple[int, ...], ishape: tuple[int, ...]) -> None:
        """Slot files big enough for the record (made once; the record's size is fixed)."""
        if self._slot_shape == (vshape, ishape):
            return
        self.flush()
        self._free_blocks()
        self._slot_shape = (vshape, ishape)
        for k in range(SLOTS):
            paths = (Path(self._dir) / f"values{k}", Path(self._dir) / f"ints{k}")
            self._slots.append(paths)
            self._maps.append((np.memmap(paths[0], np.float64, "w+", shape=vshape),
                               np.memmap(paths[1], np.int32, "w+", shape=ishape)))

    def submit(self, steps: np.ndarray, rec_values: Any, rec_ints: Any, slots: np.ndarray) -> None:
        """Hand over steps ``steps`` (consecutive) at rows ``slots`` of the records (m, n, ...)."""
        rec_values, rec_ints = np.asarray(rec_values), np.asarray(rec_ints)
        self._blocks(rec_values.shape, rec_ints.shape)
        while len(self._pending) >= SLOTS - 1:  # at most two chunks wait: the third slot is free
            self._wait(self._pending[0][0])
        used = {slot for _, slot in self._pending}
        slot = next(k for k in range(SLOTS) if k not in used)
        m = steps.size
        vshape, ishape = (m, *rec_values.shape[1:]), (m, *rec_ints.shape[1:])
        vmap, imap = self._maps[slot]
        if rec_values.dtype == np.float64:
            np.take(rec_values, slots, axis=0, out=vmap[:m])  # straight into the slot, no temporary
        else:
            vmap[:m] = rec_values[slots]
        np.take(rec_ints.astype(np.int32, copy=False), slots, axis=0, out=imap[:m])
        chunk = self._next_chunk
        self._next_chunk += 1
        msg = (chunk, (str(self._slots[slot][0]), vshape), (str(self._slots[slot][1]), ishape), int(steps[0]))
        for to_worker, _ in self._conns:
            to_worker.send(msg)
        self._pending.append((chunk, slot))

    def _receive(self, k: int) -> BaseException | None:
        """One answer of worker ``k``: its chunk counted as done, its error returned."""
        try:
            got, err, busy = self._conns[k][1].recv()
        except EOFError:
            raise RuntimeError(
                f"a step-file writer process ended unexpectedly (exit code {self._procs[k].poll()}); "
                "the files reach the last checkpoint: continue with --resume") from None
        self._acked[k] = got + 1
        self.busy[k] += busy
        return err

    def _wait(self, chunk: int) -> None:
        """Wait until every worker has answered ``chunk`` (and those before); raise the first error."""
        error = None
        for k in range(len(self._conns)):
            while self._acked[k] <= chunk:
                err = self._receive(k)  # every answer read, the first error kept
                error = error or err
        self._pending = [(c, s) for c, s in self._pending if c > chunk]
        if error is not None:
            raise error

    def raise_failed(self) -> None:
        """Raise an error a worker has already reported (reads only the answers already there)."""
        for k, (_, from_worker) in enumerate(self._conns):
            while from_worker.poll():
                error = self._receive(k)
                if error is not None:
                    self._pending = [(c, s) for c, s in self._pending if c >= min(self._acked)]
                    raise error
        self._pending = [(c, s) for c, s in self._pending if c >= min(self._acked)]

    def flush(self) -> None:
        """Wait until every chunk handed over is in the files; raises a worker's error."""
        while self._pending:
            self._wait(self._pending[-1][0])

    def _free_blocks(self) -> None:
        self._maps = []  # the maps close when their arrays go
        for paths in self._slots:
            for path in paths:
                path.unlink(missing_ok=True)
        self._slots = []

    def close(self) -> None:
        """:meth:`flush`, then end the workers and remove the slot files."""
        import shutil

        try:
            self.flush()
        finally:
            for to_worker, _ in self._conns:
                try:
                    to_worker.send(None)
                except OSError:
                    pass
            for proc in self._procs:
                try:
                    proc.wait(timeout=30)
                except Exception:  # noqa: BLE001 - a worker that does not end is ended
                    proc.kill()
            for pair in self._conns:
                for conn in pair:
                    conn.close()
            self._conns = []
            self._free_blocks()
            shutil.rmtree(self._dir, ignore_errors=True)


if __name__ == "__main__":  # a writer process (ProcessWriter starts this file as a script)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; the chunks handed over are finished
    from multiprocessing.connection import Connection

    _worker(Connection(os.dup(0), writable=False), Connection(os.dup(1), readable=False))
