"""Where the step-file writer processes' time goes: ``StepWriter.profile()`` (each worker's seconds
by phase, the parent's copying and waits, each chunk's times) and ``multiwalk run``'s JSON of it
under MULTIWALK_PROFILE, which ``benchmarks/odatse.py --profile`` reads.  Synthetic records (no JAX
run) except the last test."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from odatse_inputs import himmelblau_exchange, run_cli
from step_records import chunk_records

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
        for values, ints in chunk_records(n, chunks):
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


def test_warm_up_runs_on_any_ladder_and_is_reported(tmp_path):
    # _warm_up formats a made-up chunk with the run's temperature strings: any number of them
    import importlib.util

    import polars as pl

    from multiwalk.io import step_processes

    where = importlib.util.spec_from_file_location("formats_for_warm_up", Path(odatse_io.__file__))
    formats = importlib.util.module_from_spec(where)
    where.loader.exec_module(formats)
    for n in (1, 3, 300):
        step_processes._warm_up(formats, pl.Series([repr(1.0 + t) for t in range(n)], dtype=pl.String))
    # the writer processes warm up before their first chunk and say how long it took (first answer)
    n = 4
    writer = odatse_io.StepWriter(tmp_path, ["a", "b"], 1.0 / np.logspace(0, 2, n), False, 1, n, processes=2)
    try:
        values, ints = chunk_records(n, [3])[0]
        writer.on_steps(SimpleNamespace(rec_values=values, rec_ints=ints), 0, 2)
    finally:
        writer.close()
    assert all(k["warm_up"] > 0 for k in writer.profile()["workers"])


def test_result_sources_against_a_replica_by_replica_reference():
    # each replica's result at step s: its trial at the last accepted step <= s (row n + s' n + r),
    # else its last result (row r); integers, so exact.  Up to ACCUMULATE_MAX_REPLICAS replicas the
    # running max is one numpy call, beyond a loop over the steps: both forms
    rng = np.random.default_rng(4)
    for m, n in [(1, 1), (5, 3), (40, 7), (4, odatse_io.ACCUMULATE_MAX_REPLICAS + 2)]:
        ints = np.zeros((m, n, 3), np.int32)
        ints[..., 1] = rng.random((m, n)) < 0.3
        expected = np.empty((m, n), np.int64)
        for r in range(n):
            last = r
            for s in range(m):
                if ints[s, r, 1]:
                    last = n + s * n + r
                expected[s, r] = last
        assert np.array_equal(odatse_io._result_sources(ints, True), expected), (m, n)
        with pytest.raises(RuntimeError, match="step 0"):
            ints[0, 0, 1] = 0
            odatse_io._result_sources(ints, False)  # a fresh run's first step must be every replica's result
        ints[0, :, 1] = 1
        assert np.array_equal(odatse_io._result_sources(ints, False)[0], n + np.arange(n))


def test_replica_order_of_consecutive_and_wrapping_slots():
    # replica_order gathers consecutive slots straight into place (one take each) and the others
    # (the steps wrap around the record) as before: both against a slot-by-slot reference
    from multiwalk.solvers.exchange import ExchangeState, replica_order

    B, n, d = 8, 5, 2
    rng = np.random.default_rng(2)
    rec_ints = np.stack([np.argsort(rng.random((B, n)), axis=1), rng.random((B, n)) < 0.5,
                         rng.integers(0, 9, (B, n))], axis=-1).astype(np.int32)
    rec_values = rng.random((B, n, 1 + d))
    fields = {name: np.zeros((n,) if name not in ("x", "best_x", "stat_prev") else (n, d)) for name in ExchangeState._fields}
    fields.update(key=np.zeros(2, np.uint32), step=np.int32(0), direction=np.bool_(True),
                  replica=np.arange(n)[::-1].astype(np.int32), rec_values=rec_values, rec_ints=rec_ints)
    state = ExchangeState(**fields)
    for steps in (np.arange(2, 6), np.arange(6, 11)):  # slots 2..5; 6, 7, 0, 1, 2 (a wrap)
        got = replica_order(state, steps)
        for s in steps % B:
            rep = rec_ints[s, :, 0]  # the replica at each temperature
            t_of = np.argsort(rep)  # the temperature of each replica
            assert np.array_equal(got.rec_values[s], rec_values[s][t_of])
            assert np.array_equal(got.rec_ints[s, :, 1:], rec_ints[s][t_of][:, 1:])
            assert np.array_equal(got.rec_ints[s, :, 0], t_of)
        assert np.array_equal(got.x, state.x[np.argsort(state.replica)])  # the travelling rows too
