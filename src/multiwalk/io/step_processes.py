"""ODAT-SE's step files formatted and written by worker processes (``StepWriter(processes=k)``).

Why processes: polars' ``write_csv``, which formats the step files, runs on one core per call
and does not run in parallel from several Python threads of one process (two threads took twice
one thread's time), so the threaded writer stops scaling at ~2 threads.

How the work is split (:func:`plan_pieces`): each of the ``W`` workers formats, of every chunk,

* line range ``w`` of ``W`` near-equal ranges of every ``trial.txt`` and ``result.txt`` (the
  lines of a chunk, step by step and walker by walker), written with ``os.pwrite`` at its offset
  in the file.  The offsets are prefix sums of the pieces' byte lengths, which each worker sends
  to every other worker as soon as it has formatted its pieces (a pipe per ordered pair of
  workers, one message a chunk): worker ``w`` writes once it has the lengths of the chunk's
  pieces of workers ``0 .. w-1`` and of every piece of the chunks before, one hop from each
  (offsets passed down a ring, worker ``w`` from worker ``w - 1``, would cost a chain of ``W``
  hand-overs and wake-ups per chunk);
* temperature group ``w`` of ``W`` near-equal groups of the ``result_T<t>.txt`` files, which it
  owns and appends to (a result_T file gets only ``m`` lines a chunk: splitting them by steps
  would cost ``W`` writes per file).

So every worker has about ``2.75 m n / W`` lines a chunk (a result_T line costs ~0.75 of a
trial line: one column fewer), whatever ``W``, ``n`` or the number of emulated processes, and
no worker owns a whole trial.txt (which bounded the first version of this writer: 0.5 µs a line
on one worker).  The bytes are those of the threaded writer: the same formatting functions
(:mod:`multiwalk.io.odatse`), pieces of whole lines in order (tests/test_step_processes.py).

The parent copies each chunk's record into one of three memory-mapped slot files (in /dev/shm
where there is one) and sends each worker the slot's number; a slot is reused once every worker
has said it is done with that chunk.  Workers are fresh interpreters running this file as a
script (no fork of a process running JAX, no import of JAX or of the parent's main module); they
are started first thing (:class:`ProcessWriter` before the files are set up, and ``multiwalk
run`` sets up the writer before the JAX compilation), so their start-up (~0.3-0.5 s: Python,
numpy, polars) overlaps the compilation.  They talk over their stdin/stdout with pickled
messages, run in their own session and ignore Ctrl-C (the parent lets them finish the chunks
handed over, so the files stay complete), and end when the parent closes their pipe or dies.  A
worker's error is sent back and raised by the parent's next ``on_steps``/``flush``; a failed
chunk's lengths go out as "failed", and every piece after it (the workers after it in that chunk,
everyone in later chunks) is skipped, as when a worker ends (its links read EOF) (the files
stop at the last complete chunk, which the last checkpoint does not pass: the driver checkpoints
only after a successful flush, and ``--resume`` cuts the files back to the checkpoint).
"""

from __future__ import annotations

import errno
import os
import selectors
import signal
import time
import warnings
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

# ``--write-processes auto``'s choice (default_write_processes and its thresholds) is in
# multiwalk.io.odatse, beside default_write_threads: a run that writes with threads does not import this
__all__ = ["ProcessWriter", "plan_pieces"]

SLOTS = 3  # chunks in shared memory: two waiting for the workers (as the threaded writer) + the one being copied
DISPATCH_LINES_PER_WORKER = 2048  # short chunks are sent together until each worker gets this many trial lines
# what a worker's answers say of its time (seconds, summed by :class:`ProcessWriter` in ``profile``):
# the chunk's result rows' sources (and opening the slot), its trial/result lines (one polars call),
# sending their lengths, its result_T group formatted and appended, the trial/result pieces
# written, waiting for the lengths before its pieces, waiting for the parent's next chunk (after
# the first), and the warm-up at its start (:func:`_warm_up`, before the first chunk; in the first answer)
PROFILE_PHASES = ("sources", "lines", "publish", "result_T", "result_T_write", "pwrite", "offsets_wait", "idle",
                  "warm_up")



def _enough_descriptors(needed: int, who: str = "writer processes: their links") -> tuple[int, int] | None:
    """Raise the soft limit of open files if ``needed`` more are wanted (the parent: W (W - 1)
    pipes open while the workers start; a worker: its files and links); a ValueError naming
    ``who`` if the hard limit is too low.  Returns ``(previous soft limit, the one set)`` when it
    raised it (for :func:`_restore_descriptors`), else None."""
    try:
        import resource
    except ImportError:  # not POSIX: no limit to raise here
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed + 256  # the pipes + what the process has open besides
    if soft == resource.RLIM_INFINITY or soft >= want:
        return None
    if hard != resource.RLIM_INFINITY and hard < want:
        raise ValueError(f"{who} need ~{want} open files, the limit is {hard}; "
                         "use fewer writer processes (--write-processes) or raise the limit (ulimit -n)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return soft, want


def _restore_descriptors(raised: tuple[int, int] | None) -> None:
    """Put back the soft limit of open files that :func:`_enough_descriptors` raised (the limit is
    the whole process's: a library must not leave it changed), unless someone has changed it since."""
    if raised is None:
        return
    import resource

    previous, ours = raised
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == ours:
        resource.setrlimit(resource.RLIMIT_NOFILE, (previous, hard))


def _descriptor_limit() -> str:
    """The soft and hard limits of open files, for messages."""
    try:
        import resource
    except ImportError:
        return "unknown"
    soft, hard = (("unlimited" if v == resource.RLIM_INFINITY else str(v)) for v in resource.getrlimit(resource.RLIMIT_NOFILE))
    return f"{soft} (hard limit {hard})"


def _out_of_files(err: OSError, workers: int, what: str) -> ValueError:
    """The error for running out of open files (EMFILE, ENFILE) while starting ``workers`` writer
    processes: what failed, the limit, and the two ways out."""
    whose = "this system's" if err.errno == errno.ENFILE else "this process's"
    return ValueError(
        f"{workers} step-file writer processes need {workers * (workers - 1)} pipes between them "
        f"({2 * workers * (workers - 1)} open files while they start); {what} failed: {err.strerror} "
        f"({whose} limit; the limit of open files is {_descriptor_limit()}): use fewer writer processes "
        "(--write-processes) or raise the limit (ulimit -n)")


def _make_links(workers: int, raised: tuple[int, int] | None) -> dict[tuple[int, int], tuple[int, int]]:
    """The pipes between the workers: ``(j, k) -> (read end, write end)`` carries worker j's
    pieces' lengths to worker k.  If one cannot be made, those made are closed, the limit of open
    files ``raised`` by :func:`_enough_descriptors` is put back, and running out of files is the
    ValueError of :func:`_out_of_files`."""
    W = workers
    links: dict[tuple[int, int], tuple[int, int]] = {}
    try:
        for j in range(W):
            for k in range(W):
                if j != k:
                    links[j, k] = os.pipe()
    except OSError as err:
        for r, wr in links.values():  # none of them is any use without the others
            os.close(r)
            os.close(wr)
        _restore_descriptors(raised)
        if err.errno in (errno.EMFILE, errno.ENFILE):
            raise _out_of_files(err, W, f"pipe {len(links) + 1} of the {W * (W - 1)} between them") from err
        raise
    return links


def _split(total: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` near-equal ``[a, b)`` ranges of ``range(total)`` (some empty when total < parts)."""
    edges = [(total * k) // parts for k in range(parts + 1)]
    return list(zip(edges[:-1], edges[1:]))


def plan_pieces(workers: int, lines: int, n: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Each worker's share of a chunk: ``((q0, q1), (a, b))``: lines ``q0 .. q1-1`` of every
    trial.txt and result.txt (``lines`` = the chunk's steps x replicas per emulated process) and
    the result_T files ``a .. b-1`` of the ``n``.  Ranges cover everything once, in order."""
    return list(zip(_split(lines, workers), _split(n, workers)))


def _read_exact(fd: int, size: int) -> bytes:
    """``size`` bytes from a pipe; EOFError when its writer is gone (the tests read links with it)."""
    data = b""
    while len(data) < size:
        more = os.read(fd, size - len(data))
        if not more:
            raise EOFError
        data += more
    return data


def _write_all(fd: int, data: Any) -> None:
    view = memoryview(data)
    while view.nbytes:
        view = view[os.write(fd, view):]


def _pwrite_all(fd: int, data: Any, offset: int) -> None:
    view = memoryview(data)
    while view.nbytes:
        k = os.pwrite(fd, view, offset)
        view, offset = view[k:], offset + k


def _warm_up(formats: Any, t_series: Any) -> None:
    """Format a small made-up chunk (16 steps x 256 replicas) through the same functions as a real one,
    writing nothing: a fresh process's first polars and numpy calls pay one-time costs (polars'
    lazily set-up writer and thread pool, code pages read in), which on the 16-core host made the
    first chunk takes several times as long as each later one (docs/benchmarks.md, ODAT-SE
    section), while the sampling waits for its slot.
    Done while the parent compiles, so the first chunk does not pay them (nor the first large
    buffers' page faults: hence not smaller)."""
    m, n = 16, 256
    rng = np.random.default_rng(0)
    values = rng.uniform(-6, 6, (m, n, 3))
    values[0, 0, 0], values[1, 1, 0] = 3e-5, np.inf  # the spellings fixed by repr (number_column's other path)
    ints = np.zeros((m, n, 3), np.int32)
    ints[..., 0] = np.argsort(rng.random((m, n)), axis=1)  # a permutation of the n temperatures per step
    t_series = t_series.gather(np.arange(n) % len(t_series))  # n of the run's spellings, repeated if fewer
    ints[0, :, 1] = 1
    src = formats._result_sources(ints, False).reshape(-1)

    def trial_of(flat: np.ndarray) -> np.ndarray:
        return formats._gather_rows(values, ints, None, None, flat + n)

    def result_of(flat: np.ndarray) -> np.ndarray:
        return formats._gather_rows(values, ints, None, None, src[flat])

    steps = np.arange(m)
    formats._proc_lines_many(steps, ints, [(trial_of, 0), (result_of, 0)], n, t_series, 0, m * n)
    formats._t_group_bytes(steps, ints, result_of, 0, n, [Path(f"T{t}") for t in range(n)])


def _worker(inbox: Any, outbox: Any) -> None:
    """One writer process: reads its spec, then formats and writes its share of each chunk it is
    sent, in order; answers ``(chunk, error or None, busy seconds, offset-wait seconds, skipped)``
    per chunk; ends on ``None`` or when the pipe closes (:class:`_Worker` does the work)."""
    import importlib.util

    # odatse.py by its path: importing the package would import JAX (~1 s) for nothing
    where = importlib.util.spec_from_file_location("multiwalk_step_file_formats", Path(__file__).with_name("odatse.py"))
    formats = importlib.util.module_from_spec(where)
    where.loader.exec_module(formats)
    try:
        spec = inbox.recv()
    except EOFError:
        return
    _Worker(inbox, outbox, formats, spec).run()


class _Worker:
    """A writer process's side, made from its spec (see :meth:`ProcessWriter.start`).

    A chunk is formatted as soon as it arrives, and its pieces' byte lengths are sent at once to
    every other worker (one message per chunk on each of its links): the lengths do not depend
    on the offsets, so no worker waits for another to have WRITTEN anything.  Its pieces are
    written once the lengths of every piece before them are in: the chunk's pieces of the
    workers before it and every piece of the chunks before (one hop from each worker, not a
    chain through all of them)."""

    def __init__(self, inbox: Any, outbox: Any, formats: Any, spec: dict[str, Any]) -> None:
        import polars as pl

        self.inbox, self.outbox, self.formats, self.spec = inbox, outbox, formats, spec
        self.W, self.w, self.per, self.n = spec["workers"], spec["index"], spec["per"], spec["n"]
        self.links_in: dict[int, int] = dict(spec["links_in"])  # worker j -> the read end of j's link to us
        self.links_out: dict[int, int] = dict(spec["links_out"])  # worker j -> the write end of our link to j
        self.t_series = pl.Series(spec["t_strings"], dtype=pl.String)
        self.coordinates = spec["coordinates"]
        self.F = len(spec["proc_files"])  # [trial of process 0, result of process 0, trial of 1, ...]
        # what the formatting carries from chunk to chunk: each replica's last result (None: step 0);
        # whether a chunk failed here (the later ones' result rows are unknown); the start's error
        self.last_result: np.ndarray | None = spec["last_result"]
        self.failed = False
        self.error: BaseException | None = None
        self.warm_up_error: str | None = None  # said with the first answer
        self.proc_fds: list[int] = []
        self.t_fds: dict[Any, int] = {}
        self._open_files()
        # the pieces' lengths: heard[j][chunk] from worker j (None: its chunk failed), ours in heard[w]
        self.heard: dict[int, dict[int, np.ndarray | None]] = {j: {} for j in range(self.W)}
        self.count = dict.fromkeys(self.links_in, 0)  # messages read from each link (the chunk of the next one)
        self.alive = dict(self.links_in)  # links not at their end (a worker that ended: EOF)
        # the links (data: the worker) and the parent's pipe (data: None) waited on with epoll/poll:
        # select.select() refuses descriptor numbers of 1024 or more, which the links get (pass_fds
        # keeps the parent's numbers) with ~23 or more workers or a parent holding many files
        self.links = selectors.DefaultSelector()
        for j, fd in self.alive.items():
            self.links.register(fd, selectors.EVENT_READ, j)
        self.links.register(inbox.fileno(), selectors.EVENT_READ, None)
        # where chunk ``at`` starts in each proc file (every piece of the chunks before added up);
        # ``broken``: "gone" or "failed" once a piece before ours is lost, so ours are not written
        self.base = np.asarray(spec["base"], np.int64)
        self.at = 0
        self.broken: str | None = None
        # seconds by phase since the last answer (:data:`PROFILE_PHASES`), sent with each answer
        self.spent = dict.fromkeys(PROFILE_PHASES, 0.0)
        self.got_at: dict[int, float] = {}  # when each chunk formatted and not yet answered arrived
        t0 = time.perf_counter()
        try:
            _warm_up(formats, self.t_series)
        except Exception as err:  # noqa: BLE001 - only a head start: said with the first answer, the run goes on
            self.warm_up_error = f"{type(err).__name__}: {err}"
        self.spent["warm_up"] = time.perf_counter() - t0
        # a message's bytes read so far from each link: a link is read only when select says it is
        # ready, one read at a time, so a worker never blocks on a message another is still writing
        self.partial = {j: bytearray() for j in self.links_in}
        for fd in self.links_out.values():  # and never blocks writing (publish): messages can outgrow a pipe
            os.set_blocking(fd, False)

    def _open_files(self) -> None:
        """Open the proc files (positional writes) and our result_T files (appends); a failure is
        kept in ``self.error``, answered with the first chunk (the parent raises it)."""
        spec, flags = self.spec, getattr(os, "O_BINARY", 0)
        try:  # every file stays open: its own limit of open files may need raising (the parent's is inherited)
            _enough_descriptors(self.F + len(spec["t_own"]) + 2 * (self.W - 1),
                                f"step-file writer process {self.w}: its {self.F + len(spec['t_own'])} files and links")
            self.proc_fds.extend(os.open(path, os.O_WRONLY | flags) for path in spec["proc_files"])
            self.t_fds.update((path, os.open(path, os.O_WRONLY | os.O_APPEND | flags)) for path in spec["t_own"])
        except BaseException as err:  # noqa: BLE001 - answered for the first chunk (the parent raises it)
            self.failed, self.error = True, err
            for fd in [*self.proc_fds, *self.t_fds.values()]:  # not written to; closed so that the rest can start
                os.close(fd)
            self.proc_fds.clear()
            self.t_fds.clear()

    # ---------------------------------------------------------------- the other workers' lengths
    def hear(self, j: int) -> None:
        """Read what is there of worker ``j``'s next message (``[ok, F lengths]``), or its end;
        call only when the link is ready (one read)."""
        F, partial = self.F, self.partial
        more = os.read(self.alive[j], 8 * (1 + F) - len(partial[j]))
        if not more:  # worker j ended (a message it had begun is lost with it)
            self.links.unregister(self.alive.pop(j))
            return
        partial[j] += more
        if len(partial[j]) < 8 * (1 + F):
            return
        got = np.frombuffer(bytes(partial[j]), np.int64)
        partial[j].clear()
        self.heard[j][self.count[j]] = got[1:].copy() if got[0] else None
        self.count[j] += 1

    def listen(self, timeout: float | None) -> None:
        """Read every message already there (``timeout`` 0), or wait up to ``timeout`` (None:
        without end) for one or for the parent's next message."""
        for key, _ in self.links.select(timeout):
            if key.data is not None:  # a link; the parent's pipe is read by the loop
                self.hear(key.data)

    def lengths(self, j: int, chunk: int) -> tuple[str, np.ndarray | None]:
        """``("ok", lengths)``, ``("failed", None)``, ``("gone", None)`` (worker j ended before
        sending them) or ``("later", None)`` (not here yet)."""
        if chunk in self.heard[j]:
            got = self.heard[j][chunk]
            return ("ok", got) if got is not None else ("failed", None)
        return ("later", None) if j == self.w or j in self.alive else ("gone", None)

    def offsets_of(self, chunk: int) -> tuple[bool, np.ndarray | None]:
        """``(ready, offsets)`` of our pieces of ``chunk``: ready once every length before them
        is known; offsets None when a piece before ours failed or its worker ended (then
        ``self.broken`` says which)."""
        if self.broken is not None:
            return True, None
        while self.at < chunk:  # every piece of the chunks before: the chunk's start
            got = [self.lengths(j, self.at) for j in range(self.W)]
            if any(state == "later" for state, _ in got):
                return False, None
            if any(state != "ok" for state, _ in got):
                self.broken = "gone" if any(state == "gone" for state, _ in got) else "failed"
                return True, None
            self.base = self.base + np.sum([size for _, size in got], axis=0, dtype=np.int64)
            for j in range(self.W):
                self.heard[j].pop(self.at, None)
            self.at += 1
        got = [self.lengths(j, chunk) for j in range(self.w)]  # the pieces of this chunk before ours
        if any(state == "later" for state, _ in got):
            return False, None
        if any(state != "ok" for state, _ in got):
            self.broken = "gone" if any(state == "gone" for state, _ in got) else "failed"
            return True, None
        before = [size for _, size in got] or [np.zeros(self.F, np.int64)]
        return True, self.base + np.sum(before, axis=0, dtype=np.int64)

    # ---------------------------------------------------------------- one chunk
    def format_chunk(self, msg: Any) -> tuple[int, list[bytes], BaseException | None, float]:
        """Format (and append the result_T group of) one chunk, send its pieces' lengths to every
        other worker: ``(chunk, trial/result pieces, error, busy seconds)``."""
        formats, spent, n, coordinates = self.formats, self.spent, self.n, self.coordinates
        chunk, (vpath, vshape), (ipath, ishape), first = msg
        t0 = time.perf_counter()
        self.got_at[chunk] = t0  # a time stamp (perf_counter is CLOCK_MONOTONIC: the same clock in every process)
        pieces: list[bytes] = []
        error, self.error = self.error, None  # the start's error, answered once
        if not self.failed:  # else a chunk before failed here: this one's result rows are unknown
            try:
                values = np.memmap(vpath, np.float64, "r", shape=vshape)
                ints = np.memmap(ipath, np.int32, "r", shape=ishape)
                m = vshape[0]
                steps = np.arange(first, first + m)
                (q0, q1), (a, b) = plan_pieces(self.W, m * self.per, n)[self.w]
                last_result = self.last_result
                src = formats._result_sources(ints, last_result is not None).reshape(-1)
                t1 = time.perf_counter()
                spent["sources"] += t1 - t0

                def trial_of(flat: np.ndarray, values: Any = values, ints: Any = ints) -> np.ndarray:
                    return formats._gather_rows(values, ints, coordinates, None, flat + n)

                def result_of(flat: np.ndarray, values: Any = values, ints: Any = ints, src: Any = src,
                              last: Any = last_result) -> np.ndarray:
                    return formats._gather_rows(values, ints, coordinates, last, src[flat])

                # every trial and result piece of this worker in one polars call (~0.5 ms each)
                parts = [(rows_of, p) for p in range(self.F // 2) for rows_of in (trial_of, result_of)]
                pieces = formats._proc_lines_many(steps, ints, parts, self.per, self.t_series, q0, q1)
                self.last_result = result_of(np.arange((m - 1) * n, m * n))
                t2 = time.perf_counter()
                spent["lines"] += t2 - t1
                # the lengths go out before the result_T group is written: the others wait for them
                self.publish(chunk, pieces)
                t3 = time.perf_counter()
                spent["publish"] += t3 - t2
                group = formats._t_group_bytes(steps, ints, result_of, a, b, self.spec["t_files"])
                t4 = time.perf_counter()
                spent["result_T"] += t4 - t3
                for path, data in group:
                    _write_all(self.t_fds[path], data)
                spent["result_T_write"] += time.perf_counter() - t4
                del values, ints, trial_of, result_of  # the maps close
            except BaseException as err:  # noqa: BLE001 - every error goes back to the parent
                error = err
                self.failed = True
        # failed before its lengths went out (now or at a chunk before): the pieces after ours are
        # skipped; failed after (the result_T group): our pieces are still written, the error answered
        self.publish(chunk, None)
        return chunk, pieces, error, time.perf_counter() - t0

    def publish(self, chunk: int, pieces: list[bytes] | None) -> None:
        """Our pieces' lengths of ``chunk`` (None: failed) to every other worker."""
        heard, w = self.heard, self.w
        if chunk in heard[w]:
            return
        heard[w][chunk] = None if pieces is None else np.array([len(p) for p in pieces], np.int64)
        ok = pieces is not None
        message = np.concatenate([[int(ok)], heard[w][chunk] if ok else np.zeros(self.F, np.int64)]).astype(np.int64).tobytes()
        # non-blocking writes; while a link is full, the messages coming in are read (a message
        # can be larger than a pipe: two workers writing to each other would otherwise both block)
        unsent = {fd: memoryview(message) for fd in self.links_out.values()}
        while unsent:
            for fd, view in list(unsent.items()):
                try:
                    view = view[os.write(fd, view):]
                except BlockingIOError:
                    continue
                except OSError:  # that worker ended: the parent reports it
                    view = view[:0]
                if view.nbytes:
                    unsent[fd] = view
                else:
                    del unsent[fd]
            if unsent:
                with selectors.DefaultSelector() as either:
                    for fd in unsent:
                        either.register(fd, selectors.EVENT_WRITE, None)
                    for j, fd in self.alive.items():
                        either.register(fd, selectors.EVENT_READ, j)
                    for key, _ in either.select():
                        if key.data is not None:
                            self.hear(key.data)

    def write_chunk(self, chunk: int, pieces: list[bytes], error: BaseException | None, busy: float,
                    offsets: np.ndarray | None, wait: float) -> None:
        """Write a formatted chunk's pieces at ``offsets`` (None: a piece before ours failed or its
        worker ended: skipped), answer the parent.  ``wait``: seconds spent waiting for the
        offsets."""
        t1 = time.perf_counter()
        skipped = False
        try:
            if offsets is None and error is None:
                if self.broken == "gone":
                    error = RuntimeError(f"step-file writer process {self.w}: a writer process before it ended")
                else:
                    skipped = True
                    error = RuntimeError("step-file writer process skipped: a piece before its own failed")
            elif offsets is not None and self.heard[self.w].get(chunk) is not None:
                for fd, piece, offset in zip(self.proc_fds, pieces, offsets.tolist()):
                    if piece:
                        _pwrite_all(fd, piece, offset)
        except BaseException as err:  # noqa: BLE001
            error = error or err
        t2 = time.perf_counter()
        spent = self.spent
        spent["pwrite"] += t2 - t1
        busy += t2 - t1  # formatting and writing; the wait for the offsets apart
        spent["offsets_wait"] += wait
        profile = {**spent, "got": self.got_at.pop(chunk, float("nan")), "done": t2}
        if self.warm_up_error:  # with the first answer, once
            profile["warm_up_error"], self.warm_up_error = self.warm_up_error, None
        spent.update(dict.fromkeys(PROFILE_PHASES, 0.0))
        try:
            self.outbox.send((chunk, error, busy, wait, skipped, profile))
        except Exception:  # noqa: BLE001 - an error that does not pickle goes back as text
            self.outbox.send((chunk, RuntimeError(f"step-file writer process: {error!r}"), busy, wait, skipped, profile))

    # ---------------------------------------------------------------- the loop
    def run(self) -> None:
        """Format each chunk as it comes, write the oldest formatted one once its offsets are
        known; until the parent's pipe ends and every chunk formatted is written."""
        inbox = self.inbox
        waiting: deque[tuple[int, list[bytes], BaseException | None, float]] = deque()  # formatted, not yet written
        waited = 0.0  # seconds spent waiting for the offsets of waiting[0]
        inbox_open = True
        try:
            while inbox_open or waiting:
                self.listen(0)  # the lengths already there
                if waiting:
                    ready, offsets = self.offsets_of(waiting[0][0])
                    if ready:
                        self.write_chunk(*waiting.popleft(), offsets, waited)
                        waited = 0.0
                        continue
                if inbox_open and not waiting and not inbox.poll():
                    # nothing to do until the parent's next chunk: wait for it while reading the links
                    # (a blocking recv here left a worker that was still publishing a message larger
                    # than a pipe to us waiting for us, the parent waiting for it: a deadlock, seen in CI)
                    t1 = time.perf_counter()
                    self.listen(None)
                    if self.at or self.heard[self.w]:  # not before the first chunk (the parent's compilation)
                        self.spent["idle"] += time.perf_counter() - t1
                    continue
                if inbox_open and (not waiting or inbox.poll()):
                    try:
                        msg = inbox.recv()
                    except EOFError:  # the parent is gone: the chunks formatted are still written
                        msg = None
                    if msg is None:
                        inbox_open = False
                        self.links.unregister(inbox.fileno())
                    else:
                        waiting.append(self.format_chunk(msg))
                    continue
                # a chunk waits for lengths and nothing else is there: wait for a link or the parent
                t1 = time.perf_counter()
                self.listen(None)
                waited += time.perf_counter() - t1
        finally:
            self.links.close()
            for fd in [*self.proc_fds, *self.t_fds.values(), *self.links_in.values(), *self.links_out.values()]:
                os.close(fd)


class ProcessWriter:
    """The parent's side: ``workers`` worker processes formatting and writing the step files.

    Created first (it starts the workers, which import numpy and polars meanwhile), then
    :meth:`start` sends them their share: ``proc_files`` ``{"trial": [path per process],
    "result": [...]}`` (their current sizes are where the workers write on), ``t_files``: result_T
    paths, ``t_strings``: each temperature's spelling, ``last_result`` (n, 1 + d) or None (fresh run).
    """

    def __init__(self, workers: int) -> None:
        if int(workers) < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.workers = int(workers)
        W = self.workers
        self._conns: list[tuple[Any, Any]] = []  # (to the worker, from the worker)
        self._procs: list[Any] = []
        self._dir: str | None = None
        self._slots: list[tuple[Path, Path]] = []  # (values file, ints file) per slot, made at the first chunk
        self._maps: list[tuple[np.memmap, np.memmap]] = []
        # the links: pipe (j, k) carries worker j's pieces' lengths to worker k, one message a chunk.
        # The raised limit of open files is needed only while the parent holds them (they are
        # closed here once the workers have them): put back at the end of this constructor.
        raised = _enough_descriptors(2 * W * (W - 1))
        links = _make_links(W, raised)
        self._links = [({j: links[j, k][0] for j in range(W) if j != k},  # (read ends, write ends) of worker k
                        {j: links[k, j][1] for j in range(W) if j != k}) for k in range(W)]
        try:
            # one polars thread per worker (unless POLARS_MAX_THREADS says otherwise): the workers
            # are the parallelism; W workers x one pool of all CPUs each oversubscribed the CPUs
            env = {**os.environ, "POLARS_MAX_THREADS": os.environ.get("POLARS_MAX_THREADS", "1")}
            for k in range(W):
                self._start_worker(k, env)
        except BaseException as err:
            self._stop()  # empties self._procs: the message counts with k
            if isinstance(err, OSError) and err.errno in (errno.EMFILE, errno.ENFILE):
                raise _out_of_files(err, W, f"starting writer process {k + 1} of {W}") from err
            raise
        finally:
            for r, wr in links.values():  # the workers hold them now: a worker's death is EOF for the others
                os.close(r)
                os.close(wr)
            _restore_descriptors(raised)
        self._slot_shape: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self._pending: list[tuple[int, int]] = []  # (chunk, slot) handed over, oldest first
        self._open: tuple[int, int, int] | None = None  # (slot, first step, steps) gathered, not yet sent
        self._acked = [0] * W  # chunks each worker has answered
        self._next_chunk = 0
        self._raised = False  # an error was raised: later "skipped" answers say nothing new
        self.busy = [0.0] * W  # each worker's formatting and writing seconds
        self.ring_wait = [0.0] * W  # each worker's wait for the lengths of the pieces before its own
        # where the time goes (``multiwalk run`` writes it out under MULTIWALK_PROFILE): each worker's
        # seconds by phase (:data:`PROFILE_PHASES`), the parent's copying into the slots and waiting
        # for a free slot, and per chunk sent: when (perf_counter), its steps, each worker's arrival and end
        # (and "warm_up_error": its text, where a worker's warm-up failed)
        self.profile: list[dict[str, Any]] = [dict.fromkeys(PROFILE_PHASES, 0.0) for _ in range(W)]
        self.copy_seconds = 0.0
        self.slot_wait_seconds = 0.0
        self.timeline: list[dict[str, Any]] = []

    def _start_worker(self, k: int, env: dict[str, str]) -> None:
        """Start worker ``k`` (this file as a script) with its links, and keep the two
        connections to it (its stdin and stdout)."""
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        proc = subprocess.Popen(
            [sys.executable, "-u", __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            pass_fds=[*self._links[k][0].values(), *self._links[k][1].values()], env=env,
            start_new_session=True)  # Ctrl-C in the terminal does not reach it
        self._procs.append(proc)  # reaped by _stop() whatever fails next
        to_worker = from_worker = None
        try:
            to_worker = Connection(os.dup(proc.stdin.fileno()), readable=False)
            from_worker = Connection(os.dup(proc.stdout.fileno()), writable=False)
        except BaseException:
            if to_worker is not None:
                to_worker.close()
            raise
        finally:  # without the Connections the worker reads EOF at its first recv() and ends
            proc.stdin.close()
            proc.stdout.close()
        self._conns.append((to_worker, from_worker))

    def start(self, nprocs: int, per: int, proc_files: dict[str, list[Path]], t_files: list[Path],
              t_strings: list[str], coordinates: np.ndarray | None, last_result: np.ndarray | None) -> None:
        """Send every worker its share (:func:`plan_pieces`) and where the files end now."""
        import tempfile

        n = nprocs * per
        ordered = [proc_files[kind][p] for p in range(nprocs) for kind in ("trial", "result")]
        base = [os.path.getsize(path) for path in ordered]
        for k, (to_worker, _) in enumerate(self._conns):
            a, b = plan_pieces(self.workers, 1, n)[k][1]  # the result_T group does not depend on the chunk
            spec = {"workers": self.workers, "index": k, "links_in": self._links[k][0],
                    "links_out": self._links[k][1], "per": per, "n": n,
                    "proc_files": ordered, "base": base, "t_files": t_files, "t_own": t_files[a:b],
                    "t_strings": t_strings, "coordinates": coordinates, "last_result": last_result}
            to_worker.send(spec)
        shm = Path("/dev/shm")
        self._dir = tempfile.mkdtemp(prefix="multiwalk-steps-", dir=shm if shm.is_dir() and os.access(shm, os.W_OK) else None)

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
        """Hand over steps ``steps`` (consecutive) at rows ``slots`` of the records (m, n, ...).

        Short chunks (the driver's first ones: 1, 2, 4, ... steps) are gathered in one slot and
        sent together once they hold :data:`DISPATCH_LINES_PER_WORKER` lines per worker, or at
        :meth:`flush` (before every checkpoint and at the end): each chunk costs every worker a
        few fixed milliseconds (three polars calls, the chunk's result rows)."""
        if self._dir is None:
            raise RuntimeError("ProcessWriter.start() was not called")
        rec_values, rec_ints = np.asarray(rec_values), np.asarray(rec_ints)
        self._blocks(rec_values.shape, rec_ints.shape)
        m = steps.size
        if self._open is not None and (self._open[2] + m > rec_values.shape[0] or int(steps[0]) != self._open[1] + self._open[2]):
            self._dispatch()  # does not fit the slot, or not the next steps
        if self._open is None:
            t0 = time.perf_counter()
            while len(self._pending) >= SLOTS - 1:  # at most two chunks wait: the third slot is free
                self._wait(self._pending[0][0])
            self.slot_wait_seconds += time.perf_counter() - t0
            used = {slot for _, slot in self._pending}
            self._open = (next(k for k in range(SLOTS) if k not in used), int(steps[0]), 0)
        slot, first, k = self._open
        t0 = time.perf_counter()
        vmap, imap = self._maps[slot]
        if m and slots[-1] - slots[0] == m - 1:  # consecutive slots (no wrap): a slice, copied as a block
            a = int(slots[0])
            vmap[k:k + m] = rec_values[a:a + m]
            imap[k:k + m] = rec_ints[a:a + m]
        elif rec_values.dtype == np.float64:
            # straight into the slot; mode="clip" (the slots are in range): "raise" copies through a buffer
            np.take(rec_values, slots, axis=0, out=vmap[k:k + m], mode="clip")
            np.take(rec_ints.astype(np.int32, copy=False), slots, axis=0, out=imap[k:k + m], mode="clip")
        else:
            vmap[k:k + m] = rec_values[slots]
            imap[k:k + m] = rec_ints[slots]
        self._open = (slot, first, k + m)
        self.copy_seconds += time.perf_counter() - t0
        if (k + m) * rec_values.shape[1] >= DISPATCH_LINES_PER_WORKER * self.workers:
            self._dispatch()

    def _dispatch(self) -> None:
        """Send the open slot's steps to every worker."""
        if self._open is None:
            return
        slot, first, m = self._open
        self._open = None
        vmap, imap = self._maps[slot]
        vshape, ishape = (m, *vmap.shape[1:]), (m, *imap.shape[1:])
        chunk = self._next_chunk
        self._next_chunk += 1
        msg = (chunk, (str(self._slots[slot][0]), vshape), (str(self._slots[slot][1]), ishape), first)
        self.timeline.append({"sent": time.perf_counter(), "steps": m, "got": [None] * self.workers,
                              "done": [None] * self.workers})
        for to_worker, _ in self._conns:
            to_worker.send(msg)
        self._pending.append((chunk, slot))

    def _receive(self, k: int) -> tuple[BaseException | None, bool]:
        """One answer of worker ``k``: its chunk counted as done; its error and whether it only
        skipped (a piece before its own failed)."""
        try:
            got, err, busy, wait, skipped, spent = self._conns[k][1].recv()
        except EOFError:
            raise RuntimeError(
                f"a step-file writer process ended unexpectedly (exit code {self._procs[k].poll()}); "
                "the files reach the last checkpoint: continue with --resume") from None
        self._acked[k] = got + 1
        self.busy[k] += busy
        self.ring_wait[k] += wait
        for phase in PROFILE_PHASES:
            self.profile[k][phase] += spent.get(phase, 0.0)
        if "warm_up_error" in spent:  # an optimisation failed: the run goes on, its first chunk slower
            self.profile[k]["warm_up_error"] = spent["warm_up_error"]
            warnings.warn(f"step-file writer process {k}: its warm-up failed ({spent['warm_up_error']}); "
                          "the files are written all the same, its first chunk pays the start-up costs", stacklevel=2)
        if got < len(self.timeline):
            self.timeline[got]["got"][k], self.timeline[got]["done"][k] = spent.get("got"), spent.get("done")
        return err, skipped

    def _raise(self, root: BaseException | None, skipped: BaseException | None) -> None:
        """Raise the first real error; a "skipped" one only if no error was raised before."""
        error = root or (None if self._raised else skipped)
        if error is not None:
            self._raised = True
            raise error

    def _wait(self, chunk: int) -> None:
        """Wait until every worker has answered ``chunk`` (and those before); raise the first error."""
        root = skipped = None
        for k in range(len(self._conns)):
            while self._acked[k] <= chunk:
                err, skip = self._receive(k)  # every answer read, the first error kept
                if err is not None and not skip:
                    root = root or err
                elif err is not None:
                    skipped = skipped or err
        self._pending = [(c, s) for c, s in self._pending if c > chunk]
        self._raise(root, skipped)

    def raise_failed(self) -> None:
        """Raise an error a worker has already reported (reads only the answers already there)."""
        root = skipped = None
        for k, (_, from_worker) in enumerate(self._conns):
            while from_worker.poll():
                err, skip = self._receive(k)
                if err is not None and not skip:
                    root = root or err
                elif err is not None:
                    skipped = skipped or err
        self._pending = [(c, s) for c, s in self._pending if c >= min(self._acked)]
        if root is not None:
            self._raise(root, None)
        # a skip is raised once the failing worker's own answer is read (flush waits for it)

    def flush(self) -> None:
        """Wait until every chunk handed over is in the files; raises a worker's error."""
        self._dispatch()
        while self._pending:
            self._wait(self._pending[-1][0])

    def _free_blocks(self) -> None:
        self._maps = []  # the maps close when their arrays go
        for paths in self._slots:
            for path in paths:
                path.unlink(missing_ok=True)
        self._slots = []

    def _stop(self) -> None:
        """End the workers (after the chunks handed over), remove the slot files.  The workers'
        exit (~0.1 s: an interpreter with polars) is not waited for: a background thread reaps
        them (and ends one that has not ended after 30 s); the files are complete before this
        (every chunk answered) or were given up (an error)."""
        import shutil
        import threading

        for to_worker, _ in self._conns:
            try:
                to_worker.send(None)
            except OSError:
                pass
        procs = self._procs

        def reap() -> None:
            for proc in procs:
                try:
                    proc.wait(timeout=30)
                except Exception:  # noqa: BLE001 - a worker that does not end is ended
                    proc.kill()
                    proc.wait()

        threading.Thread(target=reap, name="multiwalk-reap-writers", daemon=True).start()
        for pair in self._conns:
            for conn in pair:
                conn.close()
        self._conns, self._procs = [], []
        self._free_blocks()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def close(self) -> None:
        """:meth:`flush`, then end the workers and remove the slot files."""
        try:
            self.flush()
        finally:
            self._stop()


if __name__ == "__main__":  # a writer process (ProcessWriter starts this file as a script)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; the chunks handed over are finished
    from multiprocessing.connection import Connection

    _worker(Connection(os.dup(0), writable=False), Connection(os.dup(1), readable=False))
