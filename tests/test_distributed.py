"""``multiwalk run --distributed``: 2 processes on localhost through jax.distributed = one process.

Each process is a subprocess with 2 CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=2``),
so the 8 replicas (2 processes x nreplica_per_proc = 4, ODAT-SE's meaning) are split over 4 devices
of 2 processes.  The reference is one process on one device with ``--nprocs 2`` (the same 8
replicas and output folders).  Every output file must hold the same lines: the replicas'
arithmetic is per replica, the random numbers do not depend on the split, and process 0 alone
writes (the step files from the state gathered after each chunk).  The split loop is another
compiled program, which may contract a multiply-add the other does not (tests/ulp.py), so the
files' words are compared as numbers: integers (steps, walkers, temperature indices, acceptances)
and text exactly, floats to ULPS.  ~15 s on 2 cores.  Also ReplicaExchange through ``mw.solve(...,
distributed=...)``: its swap kernel on each device's sequences and its report gathered across the
processes, against one process (~5 s).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from odatse_inputs import himmelblau_exchange, output_files
from test_exchange_blocks import SCALE, ULPS  # Himmelblau sampled by Exchange: the same reasons
from ulp import assert_close_ulp
from xla_test_flags import flags_text

SRC = Path(__file__).resolve().parents[1] / "src"

INPUT = himmelblau_exchange(numsteps=60, numsteps_exchange=5)


def _env(devices: int) -> dict[str, str]:
    # a clean environment but for the test run's compilation cache and optimisation level (conftest.py)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "MULTIWALK_", "JAX_"))}
    env.update({k: v for k, v in os.environ.items() if k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))})
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices} {flags_text()}"
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("distributed")
    one, two = base / "one", base / "two"
    for folder in (one, two):
        folder.mkdir()
        (folder / "input.toml").write_text(textwrap.dedent(INPUT))
    cmd = [sys.executable, "-m", "multiwalk", "run", "input.toml", "--no-progress"]
    port = _free_port()
    procs = [
        subprocess.Popen(
            cmd + ["--distributed", "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)],
            cwd=two, env=_env(2), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(2)
    ]
    single = subprocess.run(cmd + ["--nprocs", "2"], cwd=one, env=_env(1), capture_output=True, text=True, timeout=300)
    outs = [p.communicate(timeout=300) for p in procs]
    return {"one": one, "two": two, "single": single, "procs": [(p.returncode, *o) for p, o in zip(procs, outs)]}


def test_both_processes_succeed_on_4_devices(runs):
    for code, _out, err in runs["procs"]:
        assert code == 0, err[-3000:]
    assert runs["single"].returncode == 0, runs["single"].stderr[-3000:]
    report = runs["procs"][0][1]
    assert "4 devices, 2 processes" in report  # the replicas really were split over both processes
    # process 1 prints none of the report (process 0 reports); its stdout holds only the gloo
    # library's own connection messages, which its threads may interleave mid-line, so the check
    # is that no line of process 0's report appears there, not that every line starts with [Gloo]
    gloo_words = ("Gloo", "Rank", "connected", "peer ranks")  # words of gloo's messages, left out
    report_lines = [line for line in report.splitlines() if line.strip() and not any(w in line for w in gloo_words)]
    assert report_lines and not [line for line in report_lines if line in runs["procs"][1][1]]


def test_outputs_identical_to_one_process(runs):
    single, split = output_files(runs["one"]), output_files(runs["two"])
    # ODAT-SE's files: folders 0 and 1 (nprocs = 2 processes), fx.txt and best_result.txt
    assert {"0/trial.txt", "1/result.txt", "fx.txt", "best_result.txt"} <= set(single)
    assert set(split) == set(single)
    for name in single:
        _assert_same_numbers(split[name].decode(), single[name].decode(), name)


def _assert_same_numbers(ours: str, reference: str, name: str) -> None:
    """The same lines word for word; a pair of numbers not both integers as floats to ULPS."""
    ours_lines, reference_lines = ours.splitlines(), reference.splitlines()
    assert len(ours_lines) == len(reference_lines), name
    for i, (a, b) in enumerate(zip(ours_lines, reference_lines)):
        words_a, words_b = a.split(), b.split()
        assert len(words_a) == len(words_b), (name, i, a, b)
        floats = []
        for u, v in zip(words_a, words_b):
            if _number(u) and _number(v) and not (_integer(u) and _integer(v)):
                floats.append((float(u), float(v)))
            else:  # integers (steps, walkers, temperature indices, acceptances) and text: exactly
                assert u == v, (name, i, a, b)
        if floats:
            assert_close_ulp(*np.array(floats).T, ULPS, f"{name} line {i + 1}", scale=SCALE)


def _number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _integer(word: str) -> bool:
    return word.lstrip("+-").isdigit()


_REPLICA_EXCHANGE = textwrap.dedent("""
    import json, sys
    import numpy as np, jax, jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    import multiwalk as mw
    process, port = int(sys.argv[1]), sys.argv[2]
    problem = mw.Problem(objective=lambda x: jnp.sum(x ** 2), lower=-5.0 * np.ones(2), upper=5.0 * np.ones(2))
    solver = mw.ReplicaExchange(nseq=8, nbeta=4, nburn=10, niter=20, kernel="pallas")
    where = ({"devices": 1} if process < 0 else
             {"distributed": {"coordinator_address": f"127.0.0.1:{port}", "num_processes": 2, "process_id": process}})
    r = mw.solve(problem, solver, seed=3, progress=False, **where)
    print(json.dumps({"x": np.asarray(r.x).tolist(), "fun": float(np.asarray(r.fun)), "kernel": r.stats["kernel"],
                      "samples": np.asarray(r.samples).tolist(), "devices": r.stats["devices"]}))
""")


def test_replica_exchange_over_two_processes_equals_one_process():
    # 8 sequences over 2 processes x 2 devices: the swap kernel (Pallas, interpret mode) on each
    # device's sequences, the result's report gathered in the chunk's program, against one device
    # (samples and best point to ULPS, for the reasons of the module docstring)
    port = _free_port()
    cmd = [sys.executable, "-c", _REPLICA_EXCHANGE]
    procs = [subprocess.Popen(cmd + [str(i), str(port)], env=_env(2), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in range(2)]
    single = subprocess.run(cmd + ["-1", "0"], env=_env(1), capture_output=True, text=True, timeout=300)
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    assert single.returncode == 0, single.stderr[-3000:]
    reference = json.loads(single.stdout.strip().splitlines()[-1])
    for out, _ in outs:
        split = json.loads(out.strip().splitlines()[-1])
        assert split["devices"] == 4 and "split over devices" in split["kernel"], split["kernel"]
        for field in ("x", "fun", "samples"):
            assert_close_ulp(np.asarray(split[field]), np.asarray(reference[field]), ULPS, field, scale=SCALE)
