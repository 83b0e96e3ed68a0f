"""ODAT-SE's output files for the replica-exchange run, in ODAT-SE's layout (4.0.1).

``<output_dir>/<rank>/trial.txt`` and ``result.txt``
    ``# step walker T fx x1 x2 ...`` (``beta`` in place of ``T`` when the ladder was given as
    bmin/bmax), then one line per step and walker of that process: the proposal (trial) or
    the state after the Metropolis test (result).
``<output_dir>/result_T<t>.txt``
    ``# T = value`` then ``step walker fx x1 ...`` of whichever replica sat at temperature t
    (``walker`` is the replica's global index, ``rank * nreplica_per_proc + walker``).
``<output_dir>/best_result.txt``
    ``key = value`` lines: nprocs, rank, step, walker, fx, then each coordinate by its label.
``<output_dir>/fx.txt``
    six commented header lines, then per temperature (hottest first): 1/T, mean f, its
    standard error, the number of temperatures, log(Z/Z0), acceptance.
``<output_dir>/<rank>/combined.txt``
    ``export_combined_files``: trial.txt's and result.txt's lines in one file, each tagged with
    its file's name (:func:`combine_step_files`).
``<output_dir>/0/SimplexData.txt``, ``History_FunctionCall.txt``, ``res.txt``
    minsearch (Nelder-Mead): :func:`write_minsearch_files`.

Numbers are spelled as Python's ``repr`` spells them (the shortest string that reads back to
the same double), which is what ODAT-SE's ``str(numpy.float64)`` gives, byte for byte.  The
small files are written with ``repr`` itself; the step files, which hold three lines per replica
and step, column-wise by polars' CSV writer (:func:`number_column`: polars' shortest digits, with
``repr`` for the few values polars spells differently): ~1 µs per replica-step for the three
files, where one ``repr`` per number and one Python string per line took ~7 µs; the threaded
writer formats every file's lines of a piece of steps in one polars call (:func:`_piece_bytes`),
the writer processes file by file (:mod:`multiwalk.io.step_processes`).  They are written as the run goes
(:meth:`StepWriter.on_steps`, called by the driver after each chunk); a resumed run first cuts them
back to its checkpoint (a crash leaves them past it) and refuses one that ends before it.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from _multiwalk_launch import default_workers  # the CPUs this process may use

if TYPE_CHECKING:  # polars is imported where used: runs without step files never need it
    import polars as pl

__all__ = [
    "StepWriter", "default_write_threads", "default_write_processes", "AUTO_MIN_CORES", "AUTO_MIN_REPLICA_STEPS",
    "DEFAULT_WRITE_CHUNKS", "number_column", "number_strings", "write_best_result", "write_fx", "truncate_from_step",
    "truncate_before",
    "read_result_T", "number", "combine_step_files", "write_minsearch_files", "write_res",
]


def number(v: float) -> str:
    """A float as ODAT-SE writes it (``str(numpy.float64(v))`` == ``repr(float(v))``)."""
    return repr(float(v))


def truncate_from_step(path: Path, step: int) -> tuple[int, int] | None:
    """Cut ``path`` (a step file, in step order) just before its first line of step >= ``step``,
    or before its first line that is not a whole line (no step number, or no line end): a crash
    of the writer processes may leave the chunk in flight with holes (zero bytes) or cut short.

    Returns the step and walker (the first two numbers) of the last line kept, None if no data
    line is kept; FileNotFoundError if there is no such file."""
    return truncate_before(path, step, integers=2)  # type: ignore[return-value]


def truncate_before(path: Path, limit: int, integers: int = 1) -> tuple[int, ...] | None:
    """Cut ``path`` (a file ordered by its first column) just before its first data line whose
    first number is >= ``limit``, or before the first line that is not whole (no line end, or fewer
    than ``integers`` leading integers); ``#`` lines are kept.  Returns the leading ``integers``
    numbers of the last data line kept (None if none is), what a resumed run continues after."""
    last = None
    with open(path, "rb+") as fh:
        offset = 0
        for line in fh:
            words = line.split(None, integers)
            if not line.endswith(b"\n"):
                break
            if words and not words[0].startswith(b"#"):
                try:
                    numbers = tuple(int(w) for w in words[:integers])
                except ValueError:
                    break
                if len(numbers) < integers or numbers[0] >= limit:
                    break
                last = numbers
            offset += len(line)
        fh.truncate(offset)
    return last


def read_result_T(path: str | os.PathLike) -> tuple[str, np.ndarray]:
    """``(header, rows)`` of a ``result_T<t>.txt`` file: rows ``(n, 3 + d)`` = step, walker, fx, x."""
    with open(path) as fh:
        header = fh.readline().rstrip("\n")
    return header, np.loadtxt(path, comments="#", ndmin=2)


def _odd(v: np.ndarray) -> np.ndarray:
    """Where polars spells a double differently from repr: NaN (``NaN``) and 1e-10 <= \\|v\\| < 1e-4
    (``0.00002``, ``2e-6`` for repr's ``2e-05``, ``2e-06``)."""
    a = np.abs(v)
    return ((a < 1e-4) & (a >= 1e-10)) | np.isnan(v)


def number_column(values: np.ndarray) -> pl.Series:
    """A column of doubles that polars writes as ``repr(float(v))`` would.

    polars writes the shortest digits that read back to the same double, as repr does, and
    spells them as repr does except for NaN and 1e-10 <= \\|v\\| < 1e-4 (:func:`_odd`): when
    there are such values the column becomes strings, those few spelled by repr.
    tests/test_odatse_run.py checks the spelling against repr on random and edge values.
    """
    import polars as pl

    v = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    odd = np.flatnonzero(_odd(v))
    if not odd.size:
        return pl.Series(v)
    return pl.Series(v).cast(pl.String).scatter(odd, [repr(x) for x in v[odd].tolist()])


def number_strings(values: np.ndarray) -> list[str]:
    """``repr(float(v))`` of each value, as the step files spell them (for tests and small files)."""
    import polars as pl

    column = number_column(values)
    if column.dtype != pl.String:
        column = column.cast(pl.String)
    return column.to_list()


def _csv_bytes(columns: dict[str, Any]) -> bytes:
    """One line per row: the columns' values separated by single spaces, unquoted."""
    import polars as pl

    buf = io.BytesIO()
    pl.DataFrame(columns).write_csv(buf, separator=" ", include_header=False, quote_style="never")
    return buf.getvalue()


def _numbers(values: np.ndarray) -> dict[str, pl.Series]:
    """Columns ``v0, v1, ...`` of ``values`` (rows, k), spelled as repr (:func:`number_column`)."""
    return {f"v{k}": number_column(values[:, k]) for k in range(values.shape[1])}


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    """``[a, b)`` ranges cutting ``range(n)`` into ``parts`` near-equal pieces (none empty)."""
    edges = np.linspace(0, n, max(1, min(parts, n)) + 1).round().astype(int).tolist()
    return list(zip(edges[:-1], edges[1:]))


def _value_rows(fx: np.ndarray, x: np.ndarray | None, node: np.ndarray | None,
                coordinates: np.ndarray | None) -> np.ndarray:
    """``(m, 1 + d)`` rows ``fx x1 x2 ...`` from ``fx`` (m,) and ``x`` (m, d) or mesh ``node`` (m,)."""
    fx = np.asarray(fx, dtype=np.float64).reshape(-1, 1)
    if coordinates is not None:
        x = coordinates[np.asarray(node).reshape(-1)]
    return np.concatenate([fx, np.asarray(x, dtype=np.float64).reshape(fx.size, -1)], axis=1)


ACCUMULATE_MAX_REPLICAS = 128  # replicas up to which _result_sources's running max is one numpy call


def _result_sources(ints: np.ndarray, has_last: bool) -> np.ndarray:
    """``(m, n)``: where each replica's result at each step of a chunk comes from, as a row of
    ``[last results (n rows); trial rows (m n rows, numbered step * n + replica)]``: its trial at
    the last step <= s that was accepted, or (none in this chunk) its result from before the
    chunk (``has_last``: there is one, i.e. the chunk does not start at step 0)."""
    m, n = ints.shape[:2]
    dtype = np.int32 if (m + 1) * n < 2**31 else np.int64  # half the memory traffic of int64
    # accepted: its own trial row (n + s n + r); not: replica r's last result (row r < n, below
    # every trial row), so a running max down the steps keeps the last accepted trial, or r
    src = np.where(ints[..., 1] != 0, np.arange(n, (m + 1) * n, dtype=dtype).reshape(m, n), np.arange(n, dtype=dtype))
    if not has_last and not np.all(src[0] >= n):
        raise RuntimeError("the first step written must be step 0 (every replica's start is its result)")
    # running max down the steps.  np.maximum.accumulate(axis=0) walks the (m, n) array with a
    # strided inner loop: for few replicas ~20x faster than a loop over the steps (16 replicas,
    # 1023 steps: 0.03 against 0.6 ms), for many (1024) tens of times slower (every writer process
    # computes this for every chunk)
    if n <= ACCUMULATE_MAX_REPLICAS:
        np.maximum.accumulate(src, axis=0, out=src)
    else:
        for s in range(1, m):
            np.maximum(src[s - 1], src[s], out=src[s])
    return src


def _gather_rows(values: np.ndarray, ints: np.ndarray, coordinates: np.ndarray | None,
                 last_result: np.ndarray | None, idx: np.ndarray) -> np.ndarray:
    """Rows ``fx x1 x2 ...`` (k, 1 + d) at ``idx`` (k,) of ``[last_result; trial rows]`` (as
    :func:`_result_sources` numbers them), gathered from the records without building every
    trial row of the chunk."""
    m, n = ints.shape[:2]
    trial = np.maximum(idx - n, 0)
    flat = values.reshape(m * n, -1)
    if coordinates is None:
        rows = flat.take(trial, axis=0).astype(np.float64, copy=False)
    else:
        rows = np.concatenate([flat[trial, :1].astype(np.float64), coordinates[ints[..., 2].reshape(-1)[trial]]], axis=1)
    if last_result is not None:
        old = np.flatnonzero(idx < n)
        if old.size:
            rows[old] = last_result[idx[old]]
    return rows


def _chunk_rows(values: np.ndarray, ints: np.ndarray, coordinates: np.ndarray | None,
                last_result: np.ndarray | None, need_result: bool = True,
                ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``(trial, result, last)`` of a chunk of ``m`` steps x ``n`` replicas from the records
    ``values`` (m, n, 1 + d) and ``ints`` (m, n, 3): the trial and result rows (m n, 1 + d),
    numbered ``step * n + replica``, and the chunk's last results (n, 1 + d) for the next chunk
    (``last_result``: those of the chunk before, None at step 0).  Without ``need_result``
    only the trial rows."""
    m, n = values.shape[:2]
    fx = values[..., 0]
    x, node = (values[..., 1:], None) if coordinates is None else (None, ints[..., 2])
    trial = _value_rows(fx, x, node, coordinates)
    if not need_result:
        return trial, None, None
    src = _result_sources(ints, last_result is not None).reshape(-1)
    result = trial[src - n] if last_result is None else np.concatenate([last_result, trial])[src]
    return trial, result, result[(m - 1) * n:]


def _proc_lines(steps: np.ndarray, ints: np.ndarray, rows_of: Any, p: int, per: int, t_series: pl.Series,
                q0: int, q1: int) -> bytes:
    """Lines ``q0 .. q1-1`` (``step walker T fx x...``) of emulated process ``p``'s ``m * per``
    lines of the chunk (line q: relative step q // per, walker q % per); ``rows_of(flat)`` gives
    the rows (k, 1 + d) of trial rows ``flat`` (step * n + replica): trial or result."""
    if q1 <= q0:
        return b""
    n = ints.shape[1]
    q = np.arange(q0, q1)
    s, walker = np.divmod(q, per)
    flat = s * n + p * per + walker
    head = {"step": steps.astype(np.int64)[s], "walker": walker, "T": t_series.gather(ints[..., 0].reshape(-1)[flat])}
    return _csv_bytes({**head, **_numbers(rows_of(flat))})


def _proc_lines_many(steps: np.ndarray, ints: np.ndarray, parts: list[tuple[Any, int]], per: int,
                     t_series: pl.Series, q0: int, q1: int) -> list[bytes]:
    """:func:`_proc_lines` of each ``(rows_of, p)`` of ``parts`` (lines ``q0 .. q1-1``), formatted
    in ONE polars call and cut at the line ends: each ``write_csv`` call costs ~0.5 ms whatever
    its size (one worker's trial and result of a chunk were two calls).  The same bytes: every
    value is spelled by itself (:func:`number_column`)."""
    if q1 <= q0 or not parts:
        return [b"" for _ in parts]
    n = ints.shape[1]
    q = np.arange(q0, q1)
    s, walker = np.divmod(q, per)
    flats = [s * n + p * per + walker for _, p in parts]
    flat = np.concatenate(flats)
    head = {"step": np.tile(steps.astype(np.int64)[s], len(parts)), "walker": np.tile(walker, len(parts)),
            "T": t_series.gather(ints[..., 0].reshape(-1)[flat])}
    rows = np.concatenate([rows_of(f) for (rows_of, _), f in zip(parts, flats)])
    data = _csv_bytes({**head, **_numbers(rows)})
    if len(parts) == 1:
        return [data]
    k = q1 - q0
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)[k - 1::k] + 1
    view = memoryview(data)
    return [bytes(view[lo:hi]) for lo, hi in zip([0, *ends[:-1].tolist()], ends.tolist())]


def _t_group_bytes(steps: np.ndarray, ints: np.ndarray, result: Any, a: int, b: int,
                   t_files: list[Path]) -> list[tuple[Path, memoryview]]:
    """``(path, lines)`` of result_T ``a .. b-1`` for the chunk: ``step walker fx x...`` of the
    replica at temperature t at each step, from the result rows (m n, 1 + d), or ``result(flat)``
    giving the result rows at trial rows ``flat`` (step * n + replica)."""
    m, n = ints.shape[:2]
    if b <= a:
        return []
    # row of the replica at temperature t at each step (every step holds each t once)
    at_t = np.empty(m * n, np.int64)
    at_t[(ints[..., 0].astype(np.int64) + (np.arange(m) * n)[:, None]).reshape(-1)] = np.arange(m * n)
    rows_t = at_t.reshape(m, n)[:, a:b].T.reshape(-1)  # (t, step)
    values = result[rows_t] if isinstance(result, np.ndarray) else result(rows_t)
    # one CSV write for the group (one write_csv per file costs ~0.2 ms each: 256 files and
    # short chunks made that the bottleneck), cut at every m-th line end
    data = memoryview(_csv_bytes({"step": np.tile(steps.astype(np.int64), b - a), "walker": rows_t % n,
                                  **_numbers(values)}))
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)[m - 1::m] + 1
    return [(path, data[lo:hi]) for path, lo, hi in zip(t_files[a:b], [0, *ends[:-1].tolist()], ends.tolist())]


def _chunk_table(values: np.ndarray, ints: np.ndarray, coordinates: np.ndarray | None,
                 last_result: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(table, src, last)`` of a chunk of ``m`` steps x ``n`` replicas (records ``values``
    (m, n, 1 + d) and ``ints`` (m, n, 3), in replica order): ``table`` (1 + d, n + m n) float64,
    column-wise ``fx x1 x2 ...`` of the replicas' last results before the chunk (columns ``0 .. n-1``;
    zeros at step 0, when ``last_result`` is None) and of every trial (column ``n + step * n +
    replica``); ``src`` (m, n) the column holding each replica's result at each step
    (:func:`_result_sources`); ``last`` (n, 1 + d) the chunk's last results, for the next chunk.
    Column-wise, so that a gather of any lines' numbers gives each number column contiguous."""
    m, n = values.shape[:2]
    x = values[..., 1:].reshape(m * n, -1) if coordinates is None else coordinates[ints[..., 2].reshape(-1)]
    table = np.empty((1 + x.shape[1], n + m * n), np.float64)
    table[:, :n] = 0.0 if last_result is None else last_result.T
    table[0, n:] = values[..., 0].reshape(-1)
    table[1:, n:] = x.T
    src = _result_sources(ints, last_result is not None)
    return table, src, np.ascontiguousarray(table[:, src[-1]].T)


def _piece_bytes(steps: np.ndarray, ints: np.ndarray, table: np.ndarray, src: np.ndarray, walker_t: _WalkerTemperature,
                 per: int, separate_T: bool, a: int, b: int) -> list[memoryview]:
    """Every step file's lines of the chunk's steps ``a .. b-1`` (relative), formatted in ONE polars
    call and cut where one file's lines end: per emulated process its trial.txt lines, then its
    result.txt lines; then (``separate_T``) result_T0.txt's, result_T1.txt's, ... (views of one buffer).

    Each polars call costs ~0.3 ms whatever its size, and each number is formatted where it is
    written (:func:`number_column`), so one call for all the files of a piece costs less than one
    per file.  A line is ``step``, then its ``walker_t`` string, then its numbers from ``table``
    (:func:`_chunk_table`).  ``ints[..., 0]`` is each replica's temperature index at each step
    (replica order), ``src`` the column of its result."""
    m, n = src.shape
    k = b - a
    rel = np.arange(a, b)
    replicas = np.arange(n)
    trial = n + (rel * n)[:, None] + replicas  # (k, n) trial columns, step-major
    temperature = ints[a:b, :, 0].astype(np.intp)  # (k, n) each replica's temperature index
    walker_of = (replicas % per) * n + temperature  # (k, n) its "walker T" string
    columns, labels, step_rows = [], [], []
    for p in range(n // per):
        mine = slice(p * per, (p + 1) * per)
        columns += [trial[:, mine].reshape(-1), src[a:b, mine].reshape(-1)]
        labels += [walker_of[:, mine].reshape(-1)] * 2
        step_rows += [np.repeat(rel, per)] * 2
    if separate_T:
        at_t = np.empty((k, n), np.intp)  # the replica at each temperature (every step holds each t once)
        np.put_along_axis(at_t, temperature, replicas[None, :], axis=1)
        columns.append(np.take_along_axis(src[a:b], at_t, axis=1).T.reshape(-1))  # (t, step)
        labels.append(per * n + at_t.T.reshape(-1))
        step_rows.append(np.tile(rel, n))
    counts = np.cumsum([c.size for c in columns[:2 * (n // per)]] + ([k] * n if separate_T else []))  # lines per file
    numbers = table[:, np.concatenate(columns)]  # (1 + d, lines): each number column contiguous
    data = memoryview(_csv_bytes({
        "step": steps.astype(np.int64)[np.concatenate(step_rows)], "walker_t": walker_t.column(np.concatenate(labels)),
        **{f"v{j}": number_column(numbers[j]) for j in range(numbers.shape[0])},
    }))
    ends = (np.flatnonzero(np.frombuffer(data, np.uint8) == 10)[counts - 1] + 1).tolist()
    return [data[lo:hi] for lo, hi in zip([0, *ends[:-1]], ends)]


WALKER_T_TABLE_MAX = 1 << 16  # walker x temperature pairs up to which their strings are made once


class _WalkerTemperature:
    """The second column of the step files' lines, by one key per line: ``"walker T"`` of trial
    and result lines (key ``walker * n + temperature index``), the replica's global number of
    result_T lines (key ``per * n + replica``).  Up to :data:`WALKER_T_TABLE_MAX` pairs their
    strings are made once and gathered; beyond (thousands of replicas in one process) each
    line's two strings are joined, the same bytes."""

    def __init__(self, t_strings: list[str], per: int, n: int) -> None:
        import polars as pl

        self.per, self.n = per, n
        self.temperatures = pl.Series(t_strings, dtype=pl.String)
        self.numbers = pl.Series(np.arange(max(per, n))).cast(pl.String)
        self.table = None
        if per * n <= WALKER_T_TABLE_MAX:
            pairs = (self.numbers.gather(np.repeat(np.arange(per), n)) + " "
                     + self.temperatures.gather(np.tile(np.arange(n), per)))
            self.table = pairs.append(self.numbers.head(n))

    def column(self, keys: np.ndarray) -> pl.Series:
        """The strings of ``keys`` (lines,)."""
        import polars as pl

        if self.table is not None:
            return self.table.gather(keys)
        pair = keys < self.per * self.n
        first = self.numbers.gather(np.where(pair, keys // self.n, keys - self.per * self.n))
        second = self.temperatures.gather(np.where(pair, keys % self.n, 0))
        return pl.select(pl.when(pl.lit(pair)).then(first + " " + second).otherwise(first)).to_series()


WRITEV_MAX = 16  # buffers per os.writev call (POSIX allows at least 16)
ROWS_PER_PIECE = 8192  # lines one thread formats at a time: fewer, and each polars call's ~0.3 ms shows


def _write_all(fd: int, buffers: tuple[Any, ...]) -> None:
    """Write the bytes-like ``buffers`` to ``fd``, in order: gathered by ``os.writev`` (one system
    call, no copy into one buffer), or joined first where there is none (Windows); a short write
    is continued."""
    gather = hasattr(os, "writev")
    views = [memoryview(buffer).cast("B") for buffer in (buffers if gather else (b"".join(buffers),))]
    while views:
        written = os.writev(fd, views[:WRITEV_MAX]) if gather else os.write(fd, views[0])
        while views and written >= views[0].nbytes:
            written -= views.pop(0).nbytes
        if views and written:
            views[0] = views[0][written:]


def _write_headers(headers: dict[Path, str]) -> None:
    """Each file of ``headers`` replaced by its header line (its text)."""
    for path, text in headers.items():
        path.write_text(text)


def default_write_threads() -> int:
    """Threads that format the step files: the CPUs this process may use, at most 4 (polars
    spreads each write over its own threads too; 16 of ours on 16 cores were slower than 1)."""
    return max(1, min(4, default_workers()))


# ``--write-processes auto`` (:func:`default_write_processes`): worker processes only where they
# pay: enough cores for the workers beside the sampling, and a run long enough to cover their
# start-up and per-chunk overheads (docs/benchmarks.md, ODAT-SE section, has the measurements)
AUTO_MIN_CORES = 8
AUTO_MIN_REPLICA_STEPS = 200_000
# the step files in about this many pieces of the run when worker processes write them (``multiwalk
# run --write-chunks``' default with processes; 16 with threads): each piece costs every worker a
# few fixed ms; 8 was faster than 16 at both sizes measured (same run as the processes' count)
DEFAULT_WRITE_CHUNKS = 8


def default_write_processes(replica_steps: int, cpus: int | None = None) -> int:
    """Worker processes for ``--write-processes auto``: 0 (the threaded writer) below
    :data:`AUTO_MIN_CORES` usable CPUs or :data:`AUTO_MIN_REPLICA_STEPS` replica-steps of step
    files, or off POSIX systems (the workers' links are pipes passed with ``pass_fds``), else half
    the CPUs, at most 16: the rest for the sampling (XLA's threads) and the parent's copying.
    Chosen by measurement on a 16-core host, where half the CPUs were the fastest count at both
    sizes measured (docs/benchmarks.md, ODAT-SE section); other core counts were not measured."""
    cpus = default_workers() if cpus is None else int(cpus)
    if os.name != "posix" or cpus < AUTO_MIN_CORES or replica_steps < AUTO_MIN_REPLICA_STEPS:
        return 0
    return min(16, cpus // 2)


class StepWriter:
    """Writes trial.txt, result.txt (per emulated process) and result_T<t>.txt as the run goes.

    ``labels``: coordinate names; ``betas`` (T,); ``as_beta``: the ladder was given as
    bmin/bmax; ``nprocs`` x ``per`` replicas; ``coordinates``: the mesh's node coordinates
    (discrete space) or None; ``separate_T``: write result_T files.  ``resume_step``: None for
    a fresh run, else the next step of the checkpoint: files are cut back to it and appended.
    ``state`` (the state at ``resume_step``) gives each replica's last result.

    Each chunk's lines are written column-wise by polars' CSV writer (the numbers by
    :func:`number_column`, step and walker as integers, the temperature as a cached string),
    never one Python string per number.

    ``threads`` (default :func:`default_write_threads`): with ``threads >= 1`` a chunk is written
    in the background while the next one is sampled (one writer thread, chunks in order; at most
    two chunks wait, so memory stays bounded), and its lines are formatted in up to ``threads``
    pieces at once (row ranges, formatted independently and written in order: the same bytes).
    ``flush()`` waits for everything handed over (the driver calls it before each checkpoint,
    so the files always reach the checkpoint's step) and raises a write error here.
    ``threads = 0``: every chunk is written in ``on_steps`` itself, one piece at a time.

    ``processes >= 1`` (``threads`` then unused): that many worker processes format and
    write the files, each a range of every trial/result file's lines and a group of result_T
    files (:mod:`multiwalk.io.step_processes`; polars' writer does not run in parallel in
    threads of one process); same bytes, same flush semantics.
    """

    def __init__(
        self, output_dir: Path, labels: list[str], betas: np.ndarray, as_beta: bool, nprocs: int, per: int,
        coordinates: np.ndarray | None = None, separate_T: bool = True, resume_step: int | None = None,
        state: Any = None, threads: int | None = None, processes: int = 0,
    ) -> None:
        self.threads = default_write_threads() if threads is None else int(threads)
        if self.threads < 0:
            raise ValueError(f"threads must be 0 (write in the caller) or a positive number of threads, got {threads}")
        if int(processes) < 0:
            raise ValueError(f"processes must be 0 (no writer processes) or a positive number, got {processes}")
        self.processes = int(processes)
        self._processes = None
        self._closed_processes = None
        self.flush_seconds = 0.0  # of ``seconds``: the waits in flush (before checkpoints, at the end)
        if self.processes:
            self.threads = 0  # the processes do all the formatting and writing
            from .step_processes import ProcessWriter

            # started first: they import numpy and polars while the files are set up here (and
            # multiwalk run sets up the writer before the JAX compilation)
            self._processes = ProcessWriter(self.processes)
        try:
            self._set_up(output_dir, labels, betas, as_beta, nprocs, per, coordinates, separate_T, resume_step, state)
        except BaseException:
            if self._processes is not None:
                self._processes.close()
            raise

    def _set_up(self, output_dir: Path, labels: list[str], betas: np.ndarray, as_beta: bool, nprocs: int, per: int,
                coordinates: np.ndarray | None, separate_T: bool, resume_step: int | None, state: Any) -> None:
        """The files (headers, or cut back to ``resume_step``), their descriptors, the writer threads."""
        self.output_dir = Path(output_dir)
        self.nprocs, self.per = nprocs, per
        self.n = nprocs * per
        self.separate_T = separate_T
        self.coordinates = None if coordinates is None else np.asarray(coordinates, dtype=np.float64)
        values = np.asarray(betas) if as_beta else 1.0 / np.asarray(betas)
        self.t_strings = [number(v) for v in values]
        # polars (~0.1 s to import) is imported on the writer thread (_walker_temperature), its first
        # task after the headers, while the run compiles: not in this thread, not by the first chunk
        self._walker_t: _WalkerTemperature | None = None
        self.proc_dirs = [self.output_dir / str(p) for p in range(nprocs)]
        for d in self.proc_dirs:
            d.mkdir(parents=True, exist_ok=True)
        header = "# " + " ".join(["step", "walker", "beta" if as_beta else "T", "fx", *labels]) + "\n"
        files = [d / name for d in self.proc_dirs for name in ("trial.txt", "result.txt")]
        self.t_files = [self.output_dir / f"result_T{t}.txt" for t in range(self.n)] if separate_T else []
        label = "beta" if as_beta else "T"
        headers = {**{f: header for f in files}, **{f: f"# {label} = {v}\n" for f, v in zip(self.t_files, self.t_strings)}}
        if resume_step is None:
            self.next_step = 0
            self.last_result: np.ndarray | None = None  # (n, 1 + d): fx and x of each replica's result
        else:
            for f in files + self.t_files:
                self._cut_back(f, resume_step, last_walker=self.per - 1 if f in files else None)
            self.next_step = resume_step
            self.last_result = self._values(np.asarray(state.fun), np.asarray(state.x), np.asarray(state.node))
        self._all_files = files + self.t_files
        headed_later = self._open_files(headers if resume_step is None else {})
        self.seconds = 0.0  # the caller's time in on_steps and flush (copying the records, waiting)
        self.busy_seconds = 0.0  # time spent preparing, formatting and writing (in whichever thread)
        self.ring_wait_seconds = 0.0  # writer processes: the longest wait for the offsets of the pieces
        self._pending: list[Any] = []  # futures of chunks handed to the writer thread, oldest first
        self._writer = self._formatters = None
        if self._processes is not None:
            self._processes.start(
                nprocs, per, {"trial": [d / "trial.txt" for d in self.proc_dirs],
                              "result": [d / "result.txt" for d in self.proc_dirs]},
                self.t_files, self.t_strings, self.coordinates, self.last_result)
        if self.threads:
            from concurrent.futures import ThreadPoolExecutor

            self._writer = ThreadPoolExecutor(1, thread_name_prefix="multiwalk-step-files")
            if self.threads > 1:
                self._formatters = ThreadPoolExecutor(self.threads, thread_name_prefix="multiwalk-format")
        self._headers = None
        if self._writer is not None:
            # the writer thread's first task: polars, imported while the run compiles (the caller,
            # tracing, holds the interpreter most of that time, not while XLA loads the programs):
            # imported by the first chunk, it was ~0.1 s more for the writer, which paces a run on 2
            # cores (docs/benchmarks.md)
            self._pending.append(self._writer.submit(self._walker_temperature))
        if headed_later:
            # the headers on a thread of their own meanwhile: emptying the files a run wrote seconds
            # before waits for the kernel to finish writing them out (0.1-0.2 s after a 16 x 20000 run);
            # then the writer thread waits for them, before any chunk's lines
            from concurrent.futures import ThreadPoolExecutor

            self._headers = ThreadPoolExecutor(1, thread_name_prefix="multiwalk-step-headers")
            self._pending.append(self._writer.submit(self._headers.submit(_write_headers, headed_later).result))

    def _open_files(self, headers: dict[Path, str]) -> dict[Path, str]:
        """Open the step files for appends (``self._fds``: no open and close per chunk, ~20 us a file;
        1024 result_T files per chunk made that ~25 % of the writing) when the process may hold that
        many, else each chunk opens them; write the ``headers`` of a new run (each file emptied of
        what a run before left there).  Returned: the headers left to a thread, when the writer
        thread will write the files kept open: here they are only created (a path that cannot be
        written is an error now); emptying a run's ~70 MB of files is 10-200 ms of waiting on the
        kernel, which that thread spends while the run compiles."""
        self._fds: dict[Path, int] = {}
        try:
            import resource

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            keep_open = soft == resource.RLIM_INFINITY or len(self._all_files) + 256 <= soft
        except (ImportError, OSError, ValueError):  # not on a POSIX system
            keep_open = False
        keep_open = keep_open and not self.processes  # writer processes open their own files
        later = headers if keep_open and self.threads else {}
        _write_headers({} if later else headers)
        if keep_open:
            flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_BINARY", 0) | (os.O_CREAT if later else 0)
            self._fds = {f: os.open(f, flags, 0o666) for f in self._all_files}
        return later

    @staticmethod
    def _cut_back(path: Path, resume_step: int, last_walker: int | None) -> None:
        """Cut ``path`` back to the checkpoint's ``resume_step``; ValueError naming the file if it
        then does not end with that step's last line (``last_walker``: the walker of that line,
        None for a result_T file): a file shorter than the checkpoint (lost, cut, replaced) would
        leave a gap in the steps."""
        try:
            last = truncate_from_step(path, resume_step)
        except FileNotFoundError:
            raise ValueError(f"{path}: no such step file, but the checkpoint has steps 0..{resume_step - 1} of it: "
                             "restore the file, or start the run anew (without --resume/--cont)") from None
        if last is None or last[0] != resume_step - 1 or (last_walker is not None and last[1] != last_walker):
            ends = "holds no step" if last is None else f"ends with step {last[0]}, walker {last[1]}"
            raise ValueError(
                f"{path} {ends}, but the checkpoint continues from step {resume_step} (the file should end with step "
                f"{resume_step - 1}{'' if last_walker is None else f', walker {last_walker}'}): resuming would leave "
                "a gap; restore the file, or start the run anew (without --resume/--cont)"
            )

    def _values(self, fx: np.ndarray, x: np.ndarray | None, node: np.ndarray | None) -> np.ndarray:
        """``(m, 1 + d)`` rows ``fx x1 x2 ...`` from ``fx`` (m,) and ``x`` (m, d) or mesh ``node`` (m,)."""
        return _value_rows(fx, x, node, self.coordinates)

    def on_steps(self, state: Any, first: int, last: int) -> None:
        """Write steps ``next_step .. last`` from the state's record of the last steps."""
        steps = np.arange(self.next_step, last + 1)
        if steps.size == 0:
            return
        t0 = time.perf_counter()
        record = int(state.rec_values.shape[0])
        if steps.size > record:
            raise RuntimeError(f"steps {steps[0]}..{steps[-1]} do not fit the record of {record} steps")
        slots = steps % record
        if int(steps[0]) < first:
            raise RuntimeError(f"step {steps[0]} is before the chunk's steps {first}..{last} (the record slots given)")
        if self._processes is not None:  # the processes read the records from shared memory
            self._processes.raise_failed()
            self._processes.submit(steps, state.rec_values, state.rec_ints, slots)
            self.next_step = int(steps[-1]) + 1
            self.seconds += time.perf_counter() - t0
            return
        # whole buffers to the host, then numpy indexing (indexing the device arrays would
        # compile a gather for every new chunk length); the indexing copies, so the state may
        # be donated to the next chunk while these are written
        values = np.asarray(state.rec_values)[slots]
        ints = np.asarray(state.rec_ints)[slots]
        self.next_step = int(steps[-1]) + 1
        if self._writer is None:
            self._write(steps, values, ints)
        else:
            self._raise_failed()
            while len(self._pending) >= 2:  # at most two chunks wait: memory stays bounded
                self._pending.pop(0).result()
            self._pending.append(self._writer.submit(self._write, steps, values, ints))
        self.seconds += time.perf_counter() - t0

    def _walker_temperature(self) -> _WalkerTemperature:
        """The lines' second column (:class:`_WalkerTemperature`; made, and polars imported, on first use)."""
        if self._walker_t is None:
            self._walker_t = _WalkerTemperature(self.t_strings, self.per, self.n)
        return self._walker_t

    def _raise_failed(self) -> None:
        """Raise the error of a chunk the writer thread failed to write (and forget it)."""
        while self._pending and self._pending[0].done():
            self._pending.pop(0).result()

    def flush(self) -> None:
        """Wait until every chunk handed over is written; raises the writer thread's error."""
        t0 = time.perf_counter()
        try:
            if self._processes is not None:
                self._processes.flush()
                self.busy_seconds = max(self._processes.busy)  # the busiest writer process
                self.ring_wait_seconds = max(self._processes.ring_wait)
            while self._pending:
                self._pending.pop(0).result()
        finally:
            self.seconds += time.perf_counter() - t0
            self.flush_seconds += time.perf_counter() - t0

    def profile(self) -> dict[str, Any]:
        """Where the writing's time went (seconds; ``multiwalk run`` writes it out when the
        environment variable MULTIWALK_PROFILE names a file): the caller's time in ``on_steps`` and
        ``flush`` (``seconds``), of it the waits in ``flush``; with writer processes also the
        copying into the shared slots, the waits for a free slot, each worker's time by phase
        (:data:`multiwalk.io.step_processes.PROFILE_PHASES`) and each chunk's times (perf_counter:
        sent, each worker's arrival and end).  Read it after :meth:`close` or :meth:`flush`."""
        out: dict[str, Any] = {"seconds": self.seconds, "flush_seconds": self.flush_seconds,
                               "busy_seconds": self.busy_seconds, "processes": self.processes, "threads": self.threads}
        source = self._processes if self._processes is not None else self._closed_processes
        if source is not None:
            out.update(copy_seconds=source.copy_seconds, slot_wait_seconds=source.slot_wait_seconds,
                       workers=source.profile, busy=source.busy, timeline=source.timeline)
        return out

    def close(self) -> None:
        """:meth:`flush`, then end the threads and close the files."""
        try:
            self.flush()
        finally:
            if self._processes is not None:
                self._closed_processes = self._processes  # its figures stay for profile()
                self._processes.close()
                self._processes = None
            for pool in (self._writer, self._formatters, self._headers):
                if pool is not None:
                    pool.shutdown(wait=True)
            self._writer = self._formatters = self._headers = None
            fds, self._fds = self._fds, {}
            for fd in fds.values():
                os.close(fd)

    def _append(self, path: Path, *data: Any) -> None:
        """Append the buffers ``data`` (bytes-like) to ``path``, in order: gathered by ``os.writev`` on
        its open descriptor (no copy into one buffer), or open, write, close when the files are not
        kept open."""
        fd = self._fds.get(path)
        if fd is None:
            with open(path, "ab") as fh:
                for buffer in data:
                    fh.write(buffer)
            return
        _write_all(fd, data)

    def _map(self, fn: Any, items: list[Any]) -> list[Any]:
        """``[fn(item) for item in items]``, on the formatting threads when there are several."""
        if self._formatters is None or len(items) < 2:
            return [fn(item) for item in items]
        return list(self._formatters.map(fn, items))

    def _write(self, steps: np.ndarray, values: np.ndarray, ints: np.ndarray) -> None:
        """``m`` steps x ``n`` replicas from the records ``values`` (m, n, 1 + d) and ``ints``
        (m, n, 3): in pieces of whole steps, each piece's lines of every file formatted in one
        polars call (:func:`_piece_bytes`) on its own thread, then appended file by file in order."""
        t0 = time.perf_counter()
        m = steps.size
        table, src, self.last_result = _chunk_table(values, ints, self.coordinates, self.last_result)
        walker_t = self._walker_temperature()  # before the formatting threads share it
        lines = 2 * m * self.n + (m * self.n if self.separate_T else 0)
        pieces = self._map(
            lambda ab: _piece_bytes(steps, ints, table, src, walker_t, self.per, self.separate_T, *ab),
            _split(m, min(max(1, self.threads), -(-lines // ROWS_PER_PIECE))))
        for k, path in enumerate(self._all_files):  # _piece_bytes's order
            self._append(path, *(piece[k] for piece in pieces))
        self.busy_seconds += time.perf_counter() - t0


def write_best_result(path: Path, nprocs_total: int, per: int, replica: int, step: int, fx: float, x: np.ndarray,
                      labels: list[str]) -> None:
    """ODAT-SE's best_result.txt (``nprocs`` is the number of replicas, as ODAT-SE writes it)."""
    rank, walker = divmod(int(replica), per)
    lines = [f"nprocs = {nprocs_total}", f"rank = {rank}", f"step = {step}", f"walker = {walker}", f"fx = {number(fx)}"]
    lines += [f"{label} = {number(v)}" for label, v in zip(labels, np.asarray(x).tolist())]
    Path(path).write_text("\n".join(lines) + "\n")


def write_fx(path: Path, statistics: dict[str, np.ndarray]) -> None:
    """ODAT-SE's fx.txt from :meth:`multiwalk.Exchange.statistics` (hottest temperature first,
    log(Z/Z0) summed from the hottest, Z0 being its partition function)."""
    beta = statistics["beta"]
    temps = 1.0 / beta
    order = np.argsort(beta, kind="stable")  # hottest first
    rows = [
        "# $1: 1/T", "# $2: mean of f(x)", "# $3: standard error of f(x)",
        "# $4: number of replicas [Not used for exchange MC]", "# $5: log(Z/Z0)", "# $6: acceptance ratio",
    ]
    acc_logz = 0.0
    previous = None
    for t in order.tolist():
        if previous is not None:
            acc_logz += float(statistics["dlogz"][previous])  # log(Z_t / Z_previous) from the samples at previous
        previous = t
        rows.append(
            f"{number(1.0 / temps[t])} {number(statistics['mean'][t])} {number(statistics['error'][t])} "
            f"{beta.size} {number(acc_logz)} {number(statistics['acceptance'][t])}"
        )
    Path(path).write_text("\n".join(rows) + "\n")


def combine_step_files(proc_dir: Path, per: int) -> Path:
    """ODAT-SE's ``export_combined_files``: ``proc_dir/trial.txt`` and ``result.txt`` merged into
    ``proc_dir/combined.txt`` in the order ODAT-SE writes them (both headers, then per step the
    ``per`` trial lines and the ``per`` result lines), each line tagged ``<trial.txt> `` or
    ``<result.txt> ``; the two files are removed.  Streams: memory holds one step's lines."""
    from itertools import islice

    proc_dir = Path(proc_dir)
    names = ("trial.txt", "result.txt")
    combined = proc_dir / "combined.txt"
    partial = proc_dir / "combined.txt.partial"  # renamed when whole: a crash leaves no half file under the name
    with open(proc_dir / names[0], "rb") as trial, open(proc_dir / names[1], "rb") as result, open(partial, "wb") as out:
        sources = ((b"<trial.txt> ", trial), (b"<result.txt> ", result))
        for tag, fh in sources:
            out.write(tag + fh.readline())
        while True:
            blocks = [list(islice(fh, per)) for _, fh in sources]
            if not blocks[0] and not blocks[1]:
                break
            if len(blocks[0]) != len(blocks[1]):
                raise ValueError(f"{proc_dir}: trial.txt and result.txt end at different steps; not combined")
            for (tag, _), lines in zip(sources, blocks):
                out.write(b"".join(tag + line for line in lines))
    os.replace(partial, combined)
    for name in names:
        (proc_dir / name).unlink()
    return combined


def _plain(v: Any) -> str:
    """``str(v)`` of a number as ODAT-SE's minsearch writes it (``str`` of a numpy float64 or int)."""
    return str(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else number(v)


def write_minsearch_files(proc_dir: Path, labels: list[str], simplex: list[list[float]],
                          calls: list[list[float]], fx: float, x: np.ndarray, iterations: int, evaluations: int) -> None:
    """ODAT-SE's minsearch files in ``proc_dir`` (``<output_dir>/0``):

    ``SimplexData.txt``: ``#step <labels> R-factor``, then per Nelder-Mead iteration (0: the start)
    its index, the best vertex and its f; ``History_FunctionCall.txt``: ``#No <labels>``, then per
    evaluation inside the box its number, the point evaluated and f; ``res.txt``: ``fx = ...``,
    ``<label> = ...``, ``iterations = ...``, ``function_evaluations = ...``."""
    proc_dir = Path(proc_dir)
    proc_dir.mkdir(parents=True, exist_ok=True)
    rows = [f"#step {' '.join(labels)} R-factor"] + [
        f"{i} " + " ".join(map(_plain, v)) for i, v in enumerate(simplex)]
    (proc_dir / "SimplexData.txt").write_text("\n".join(rows) + "\n")
    rows = [f"#No {' '.join(labels)}"] + [" ".join(map(_plain, v)) for v in calls]
    (proc_dir / "History_FunctionCall.txt").write_text("\n".join(rows) + "\n")
    write_res(proc_dir / "res.txt", fx, x, labels, {"iterations": iterations, "function_evaluations": evaluations})


def write_res(path: Path, fx: float, x: np.ndarray, labels: list[str], extra: dict[str, Any] | None = None) -> list[str]:
    """ODAT-SE's ``res.txt``: ``fx = ...``, ``<label> = ...`` per coordinate, then ``extra``'s
    ``key = value`` lines; returns the lines."""
    lines = [f"fx = {number(fx)}"] + [f"{k} = {number(v)}" for k, v in zip(labels, np.asarray(x).tolist())]
    lines += [f"{k} = {v}" for k, v in (extra or {}).items()]
    Path(path).write_text("\n".join(lines) + "\n")
    return lines
