"""Defects found in the review of this session's changes (2026-11-22), each pinned by a test."""

from __future__ import annotations

import pytest

import multiwalk as mw
from multiwalk.checkpoint import read_checkpoint


def sphere(x):
    return (x**2).sum()


def test_checkpoint_is_not_written_past_step_files_that_failed_to_flush(tmp_path):
    # A writer's error that surfaces in on_sync (the flush before a checkpoint) means the step
    # files do not reach the chunk just run.  The checkpoint must stay at the last step the files
    # reach: a checkpoint written past them makes `multiwalk run --resume` cut the files back to
    # the checkpoint's step and append from there, leaving the failed chunk's lines out for good.
    flushes = {"n": 0}

    def flush():
        flushes["n"] += 1
        if flushes["n"] == 2:  # the first checkpoint is written; the second flush fails
            raise OSError("disk full (test)")

    problem = mw.Problem(objective=sphere, lower=[-2.0, -2.0], upper=[2.0, 2.0])
    solver = mw.Exchange(betas=(1.0, 0.5), numsteps=40, step_width=(0.3, 0.3), max_chunk_steps=5,
                         on_flush=flush, kernel="xla")
    ckpt = tmp_path / "run.npz"
    with pytest.raises(OSError, match="disk full"):
        mw.solve(problem, solver, checkpoint=ckpt, checkpoint_every=0.0, progress=False)
    meta, _ = read_checkpoint(ckpt)
    # exact: the checkpoint written after the first (successful) flush holds the first chunk, 1 step
    assert meta["done"] == [1], f"checkpoint at {meta['done']} is past the step files (they reach [1])"
