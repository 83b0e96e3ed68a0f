"""Review of the driver's one read per chunk (7fabb88, 88ef135) and ProcessWriter's open-file
fixes (73f5fd2): the three defects found (fixed in the commit that made these tests pass: a
chosen single device now holds the committed state; the out-of-files message names the worker;
a worker whose pipes to the parent fail is ended), and one guard on what the review checked and
found right (the summary's zero stand-ins are not allocated).

CPU only; ~15 s on 2 cores (one 4-virtual-device subprocess, three writer-process starts).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import pytest

import multiwalk as mw
from multiwalk import compile_cache
from multiwalk.functions import cute
from multiwalk.io import step_processes
from multiwalk.progress import summary_runner
from multiwalk.solve import run_key

SRC = Path(__file__).resolve().parents[1] / "src"


# ---------------------------------------------------------------------------- guard (passes)
def test_the_summary_allocates_nothing_of_the_unread_leaves_size():
    """The unread leaves stand in as zeros inside the compiled summary; XLA must drop them, or an
    L-BFGS state at n = 1e9 would allocate GBs after every chunk.  LBFGS at n = 1e5 (float32:
    53 leaves, ~4.4 MB): the compiled summary's temporaries and outputs stay below one n-sized
    vector (4e5 bytes), where keeping the zeros would need at least that much (measured: 0 B
    temporaries, 8 B out)."""
    n = 100_000
    problem = mw.Problem(objective=cute.extended_rosenbrock, x0=cute.start("extended_rosenbrock", n))
    solver = mw.LBFGS(max_iterations=3, kernel="xla")
    state = solver.initial_state_fn(problem)(run_key(0))
    leaves = jax.tree_util.tree_leaves(state)
    summary, used = summary_runner(problem, solver, state, None)
    assert len(used) < len(leaves)
    summary([leaves[i] for i in used])  # compiles and keeps it
    kept = [v for name, v in compile_cache.kept_for(problem) if name.startswith("summary ") and name != "summary inputs"]
    assert len(kept) == 1
    memory = kept[0].memory_analysis()
    assert memory.temp_size_in_bytes + memory.output_size_in_bytes < 4 * n, memory


# ---------------------------------------------------------------------------- solve(devices=[d])
_ONE_CHOSEN_DEVICE = textwrap.dedent("""
    import json
    import jax, numpy as np
    import multiwalk as mw
    from multiwalk import compile_cache, progress
    box = mw.Problem(objective=lambda x: ((x - 0.5) ** 2).sum(), lower=-5 * np.ones(3), upper=5 * np.ones(3))
    fetched = set()
    fetch = progress.fetch
    def spy(tree):
        fetched.update(d.id for x in jax.tree_util.tree_leaves(tree) for d in x.devices())
        return fetch(tree)
    progress.fetch = spy
    r = mw.solve(box, mw.ReplicaExchange(nseq=3, nbeta=2, nburn=3, niter=6), progress=False,
                 chunk_seconds=1e-9, devices=[jax.devices()[2]])
    loop = compile_cache.compiled_loops()[-1]
    print(json.dumps({"devices": r.stats["devices"], "fetched": sorted(fetched),
                      "loop": sorted({d.id for s in jax.tree_util.tree_leaves(loop.input_shardings)
                                      for d in s.device_set})}))
""")


def test_one_chosen_device_runs_the_loop_and_the_summary_there():
    """``solve(..., devices=[jax.devices()[2]])`` (the docstring: "a list of jax devices: those") on
    4 virtual CPU devices: the compiled loop's inputs and the per-chunk read are on device 2.
    Today both are on device 0 (a user giving each of two runs its own GPU gets GPU 0 twice)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAX_"))}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4",
               PYTHONPATH=os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]))
    out = subprocess.run([sys.executable, "-c", _ONE_CHOSEN_DEVICE], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["devices"] == 1
    assert report == {"devices": 1, "fetched": [2], "loop": [2]}, report


# ---------------------------------------------------------------------------- ProcessWriter
def _popen_recorder(monkeypatch, fail_at: int | None = None) -> list:
    """subprocess.Popen recording the workers it starts; with ``fail_at`` (1-based) that start
    fails with EMFILE instead.  Returns the list of started processes."""
    real = subprocess.Popen
    started: list = []

    def popen(*args, **kwargs):
        if fail_at is not None and len(started) + 1 == fail_at:
            raise OSError(errno.EMFILE, "Too many open files")
        started.append(real(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", popen)  # ProcessWriter imports subprocess in its constructor
    return started


def _end(procs: list) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_out_of_files_starting_a_worker_names_that_worker(monkeypatch):
    """The 2nd of 2 workers' start fails with EMFILE: the ValueError says which start failed
    (process 2), as the pipe case says which pipe."""
    started = _popen_recorder(monkeypatch, fail_at=2)
    try:
        with pytest.raises(ValueError, match="Too many open files") as err:
            step_processes.ProcessWriter(2)
    finally:
        monkeypatch.undo()
        _end(started)
    assert len(started) == 1
    assert "starting writer process 2" in str(err.value), str(err.value)


def test_a_worker_whose_links_to_the_parent_fail_is_ended(monkeypatch):
    """Out of open files at the parent's os.dup of the 1st worker's stdin (after its Popen): the
    ValueError comes out and that worker ends (within 8 s; a worker's start is ~1 s), rather
    than waiting on its stdin for as long as the parent holds the Popen object."""
    started = _popen_recorder(monkeypatch)
    real_dup = os.dup

    def dup(fd: int) -> int:
        if started:  # the first dup after a worker's Popen: the parent's own copy of its stdin
            raise OSError(errno.EMFILE, "Too many open files")
        return real_dup(fd)

    monkeypatch.setattr(step_processes.os, "dup", dup)  # os itself: undone below
    try:
        with pytest.raises(ValueError, match="Too many open files"):
            step_processes.ProcessWriter(2)
        monkeypatch.undo()
        assert len(started) == 1
        try:
            code = started[0].wait(timeout=8)
        except subprocess.TimeoutExpired:
            code = None
        assert code is not None, "the worker still runs 8 s after the constructor failed"
    finally:
        monkeypatch.undo()
        _end(started)
