"""Synthetic step-file records and their writing through ``StepWriter``, shared by the tests of
the step-file writers (not a test module: pytest collects only test_*.py).  No JAX run: the
writer only reads the records.

Imported as ``from step_records import write_steps``: pytest puts this folder on ``sys.path``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from multiwalk.io import odatse as odatse_io


def chunk_record(m: int, n: int, d: int, seed: int, first: bool, nodes: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A chunk's record: trial f and x (m, n, 1 + d) (only f, (m, n, 1), with ``nodes`` mesh
    nodes), ints (m, n, 3) = temperature index (a permutation per step), accepted, node."""
    rng = np.random.default_rng(seed)
    values = np.concatenate([rng.exponential(50, (m, n, 1)), rng.uniform(-6, 6, (m, n, 0 if nodes else d))], axis=2)
    values[0, 0, 0] = 3e-5  # a number polars spells otherwise (repr's 3e-05): the workers must fix it too
    ints = np.zeros((m, n, 3), np.int32)
    ints[..., 0] = np.argsort(rng.random((m, n)), axis=1)
    ints[..., 1] = rng.random((m, n)) < 0.5
    if nodes:
        ints[..., 2] = rng.integers(0, nodes, (m, n))
    if first:
        ints[0, :, 1] = 1  # step 0: every replica's start is its result
    return values, ints


def chunk_records(n: int, chunks: list[int], nodes: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    out, step = [], 0
    for k, m in enumerate(chunks):
        out.append(chunk_record(m, n, 2, k, step == 0, nodes))
        step += m
    return out


def write_steps(folder: Path, n: int, nprocs: int, chunks: list[int], record: int, nodes: int = 0, start: int = 0,
           **kw) -> dict[str, bytes]:
    """Write the chunks (from ``start`` on: a writer resumed there, every replica's last result
    from the chunks before) through a StepWriter; the files' bytes."""
    betas = 1.0 / np.logspace(0, 2, n)
    coordinates = np.random.default_rng(9).uniform(-1, 1, (nodes, 2)) if nodes else None
    records = chunk_records(n, chunks, nodes)
    state = None
    if start:  # the replicas' results at step start - 1, as a checkpoint would give them
        values = np.concatenate([v for v, _ in records], axis=0)[:start]
        ints = np.concatenate([i for _, i in records], axis=0)[:start]
        _, result, last = odatse_io._chunk_rows(values, ints, coordinates, None)
        state = SimpleNamespace(fun=last[:, 0], x=last[:, 1:], node=ints[-1, :, 2] if nodes else np.zeros(n, int))
        if nodes:  # the node of each replica's result: its last accepted trial's node
            src = odatse_io._result_sources(ints, False)[-1] - n
            state.node = ints.reshape(-1, 3)[src, 2]
    writer = odatse_io.StepWriter(folder, ["a", "b"], betas, False, nprocs, n // nprocs, coordinates=coordinates,
                                  resume_step=start or None, state=state, **kw)
    step = 0
    try:
        for values, ints in records:
            m = values.shape[0]
            if step >= start:
                slots = np.arange(step, step + m) % record  # the state's ring buffer of the last `record` steps
                rec_values = np.zeros((record, n, values.shape[2]))
                rec_ints = np.zeros((record, n, 3), np.int32)
                rec_values[slots], rec_ints[slots] = values, ints
                writer.on_steps(SimpleNamespace(rec_values=rec_values, rec_ints=rec_ints), step, step + m - 1)
            step += m
    finally:
        writer.close()
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.txt"))}
