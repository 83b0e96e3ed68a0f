"""Where the step-file writer processes' time goes: ``StepWriter.profile()`` (each worker's seconds
by phase, the parent's copying and waits, each chunk's times) and ``multiwalk run``'s JSON of it
under MULTIWALK_PROFILE, which ``benchmarks/odatse.py --profile`` reads.  Synthetic records (no JAX
run) except the last test."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from odatse_inputs import himmelblau_exchange, run_cli
from test_step_processes import _chunks

from multiwalk.io import odatse as odatse_io
from multiwalk.io.step_processes import PROFILE_PHASES


def _benchmark_module():
    """benchmarks/odatse.py by its path (the name ``odatse`` is also ODAT-SE's package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "multiwalk_odatse_benchmark", Path(__file__).resolve().parents[1] / "benchmarks" / "odatse.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_profile_accounts_for_every_chunk_and_worker(tmp_path):
    n, workers, chunks = 6, 2, [4, 5, 3]
    writer = odatse_io.StepWriter(tmp_path, ["a", "b"], 1.0 / np.logspace(0, 2, n), False, 1, n, processes=workers)
    step = 0
    try:
        for values, ints in _chunks(n, chunks):
            m = values.shape[0]
            writer.on_steps(SimpleNamespace(rec_values=values, rec_ints=ints), step, step + m - 1)
            writer.flush()  # each chunk sent on its own (a flush dispatches the open slot)
            step += m
    finally:
        writer.close()
    prof = writer.profile()
    assert prof["processes"] == workers and len(prof["workers"]) == workers
    assert len(prof["timeline"]) == len(chunks)  # one entry per chunk sent, in order
    assert [c["steps"] for c in prof["timeline"]] == chunks
    for c in prof["timeline"]:
        # every worker answered every chunk: it arrived after it was sent and was done after it arrived
        # (perf_counter is one clock in every process on Linux/macOS/Windows: CLOCK_MONOTONIC, mach, QPC)
        assert all(c["sent"] <= got <= done for got, done in zip(c["got"], c["done"]))
    for k in range(workers):
        phases = prof["workers"][k]
        assert set(phases) == set(PROFILE_PHASES) and all(v >= 0 for v in phases.values())
        # the timed phases of formatting and writing lie inside the worker's busy time (a worker's
        # sums of the same perf_counter intervals: 1e-6 s of float rounding allowed)
        inside = sum(phases[p] for p in ("sources", "lines", "publish", "result_T", "result_T_write", "pwrite"))
        assert 0 < inside <= prof["busy"][k] + 1e-6
    assert prof["copy_seconds"] > 0 and prof["flush_seconds"] <= prof["seconds"]


def test_multiwalk_run_writes_the_profile_and_the_benchmark_reads_it(tmp_path, monkeypatch):
    bench = _benchmark_module()
    (tmp_path / "input.toml").write_text(himmelblau_exchange(seed=3, numsteps=40, nreplica_per_proc=4))
    monkeypatch.setenv("MULTIWALK_PROFILE", str(tmp_path / "profile.json"))
    assert run_cli(tmp_path, "input.toml", "--write-processes", "2") == 0
    data = json.loads((tmp_path / "profile.json").read_text())
    assert data["stats"]["run_seconds"] <= data["stats"]["loop_seconds"]
    summary = bench.profile_summary(tmp_path / "profile.json")
    assert summary is not None and summary["chunks_sent"] >= 1
    # the parent's parts of run+files are times, none negative (the rest is what is not timed apart)
    assert all(summary[k] >= 0 for k in ("sample", "copy", "slot_wait", "flush_wait"))
    assert summary["host_other"] > -1e-6  # loop + post - sampling - the writer's share: a remainder
