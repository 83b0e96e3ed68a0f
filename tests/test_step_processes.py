"""Step files written by worker processes (``StepWriter(processes=k)``, ``--write-processes``):
the same bytes as the writer in the caller, every file owned by exactly one worker, a worker's
error raised in the caller.  Synthetic records (no JAX run): the writer only reads them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from multiwalk.io import odatse as odatse_io
from multiwalk.io.step_processes import plan_jobs


def _records(m: int, n: int, d: int, seed: int, first: bool) -> tuple[np.ndarray, np.ndarray]:
    """A chunk's record: trial f and x (m, n, 1 + d), ints (m, n, 3) = temperature index (a
    permutation per step), accepted, node."""
    rng = np.random.default_rng(seed)
    values = np.concatenate([rng.exponential(50, (m, n, 1)), rng.uniform(-6, 6, (m, n, d))], axis=2)
    values[0, 0, 1] = 3e-5  # a number polars spells otherwise (repr's 3e-05): the workers must fix it too
    ints = np.zeros((m, n, 3), np.int32)
    ints[..., 0] = np.argsort(rng.random((m, n)), axis=1)
    ints[..., 1] = rng.random((m, n)) < 0.5
    if first:
        ints[0, :, 1] = 1  # step 0: every replica's start is its result
    return values, ints


def _write(folder: Path, n: int, nprocs: int, chunks: list[int], record: int, **kw) -> dict[str, bytes]:
    betas = 1.0 / np.logspace(0, 2, n)
    writer = odatse_io.StepWriter(folder, ["a", "b"], betas, False, nprocs, n // nprocs, **kw)
    step = 0
    try:
        for k, m in enumerate(chunks):
            values, ints = _records(m, n, 2, k, step == 0)
            slots = np.arange(step, step + m) % record  # the state's ring buffer of the last `record` steps
            rec_values = np.zeros((record, n, 3))
            rec_ints = np.zeros((record, n, 3), np.int32)
            rec_values[slots], rec_ints[slots] = values, ints
            writer.on_steps(SimpleNamespace(rec_values=rec_values, rec_ints=rec_ints), step, step + m - 1)
            step += m
    finally:
        writer.close()
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.txt"))}


def test_processes_write_the_same_bytes(tmp_path):
    # 2 emulated processes x 3 walkers, chunks of uneven lengths (one shorter than the record),
    # 1 and 4 workers (4 > the 4 trial/result files: result_T groups go to their own workers)
    chunks, record = [5, 7, 3, 7], 7
    reference = _write(tmp_path / "caller", 6, 2, chunks, record, threads=0)
    assert len(reference) == 4 + 6  # trial/result of 2 processes, 6 result_T
    assert b" 3e-05 " in reference["0/trial.txt"]
    for workers in (1, 5):
        assert _write(tmp_path / f"p{workers}", 6, 2, chunks, record, processes=workers) == reference, workers


def test_plan_gives_every_file_to_one_worker():
    for workers, nprocs, per in [(1, 1, 8), (4, 1, 256), (16, 1, 1024), (3, 2, 5), (8, 4, 2), (64, 1, 3)]:
        plan = plan_jobs(workers, nprocs, per, True)
        assert 1 <= len(plan) <= workers and all(plan)
        proc_jobs = sorted(j for jobs in plan for j in jobs if j[0] != "T")
        assert proc_jobs == sorted((kind, p) for p in range(nprocs) for kind in ("trial", "result"))
        temps = sorted(t for jobs in plan for j in jobs if j[0] == "T" for t in range(j[1], j[2]))
        assert temps == list(range(nprocs * per))  # each result_T file exactly once


def test_worker_error_reaches_the_caller(tmp_path):
    n = 4
    writer = odatse_io.StepWriter(tmp_path, ["a", "b"], 1.0 / np.logspace(0, 2, n), False, 1, n, processes=2)
    values, ints = _records(3, n, 2, 0, first=False)
    ints[0, 0, 1] = 0  # a fresh run whose first step is not every replica's result: the workers refuse it
    writer.on_steps(SimpleNamespace(rec_values=values, rec_ints=ints), 0, 2)
    with pytest.raises(RuntimeError, match="first step written must be step 0"):
        writer.close()
    with pytest.raises(ValueError, match="processes must be 0"):
        odatse_io.StepWriter(tmp_path, ["a", "b"], np.ones(n), False, 1, n, processes=-1)
