"""A non-JAX objective run as a host loop between compiled steps (multiwalk.host_loop): the runs are
those of the callback inside the compiled loop (other compiled programs of the same step: every
decision exactly, the floats to a few ulp, tests/ulp.py); a solver's convergence test ends a chunk
early; a second process with the same persistent cache compiles nothing and gets the same numbers,
bit for bit."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ulp import assert_close_ulp

import multiwalk as mw
from multiwalk import compile_cache, host_loop

HERE = Path(__file__).parent
BOX = {"lower": [-2.0, -2.0], "upper": [2.0, 2.0]}

# The host loop and the callback form are two compiled programs of one step: one may contract a
# move's x + step * z into a fused multiply-add where the other does not (an ulp of x, |x| <= 2),
# and the walker carries it on; bumpy's gradient (< 6) turns that into ulps of f, summed into
# PAMC's weights.  Measured 0 ulp on this CPU; 256 (6e-14 relative in float64) covers an ulp
# lost on each of the runs' <= 13 moves, far below what a wrong move or value changes (its step,
# ~0.1).  Values below 1 in 1's ulp (scale): f's terms are ~1.
ULPS, SCALE = 256, 1.0


def bumpy(x: np.ndarray) -> float:
    """NumPy only (float() of the point's values): jax cannot trace it."""
    return float(np.sum((np.asarray(x) - 0.5) ** 2)) + 0.1 * float(np.cos(3.0 * x[0]))


def _numbers(result: mw.Result) -> dict[str, np.ndarray]:
    """Every numeric array field of a result, and its objective counts."""
    out = {k: v for k, v in vars(result).items() if isinstance(v, np.ndarray) and v.dtype.kind in "fiub"}
    out["fun"] = np.asarray(result.fun)
    out["points"] = np.asarray(result.stats["host_objective"]["points"])
    return out


def _both_forms(monkeypatch: pytest.MonkeyPatch, solver: mw.Solver, **solve_options) -> tuple[mw.Result, mw.Result]:
    """The run as a host loop, then with the objective a callback inside the compiled loop."""
    problem = mw.Problem(objective=bumpy, backend="python", executor="serial", **BOX)
    loop = mw.solve(problem, solver, seed=7, progress=False, **solve_options)
    with monkeypatch.context() as patch:
        patch.setattr(host_loop, "applies", lambda *args: False)
        callback = mw.solve(problem, solver, seed=7, progress=False, **solve_options)
    return loop, callback


@pytest.mark.parametrize("solver", [
    mw.Exchange(betas=(4.0, 1.5, 0.5, 0.2), numsteps=13, numsteps_exchange=3, step_width=(0.6, 0.6), record=5),
    mw.PopulationAnnealing(betas=(0.2, 1.0, 4.0), numsteps_for_T=(3, 3, 3), n_replicas=6, step_width=(0.5, 0.5)),
], ids=["exchange", "pamc"])
def test_the_host_loop_is_the_compiled_loop(monkeypatch, solver):
    with jax.enable_x64(True):
        loop, callback = _both_forms(monkeypatch, solver, chunk_seconds=1e-4)  # chunks of a few steps
    # the same step code, only the objective's values come in another way: every decision (temperature
    # indices, ancestors, objective counts) exactly, the floats to ULPS
    a, b = _numbers(loop), _numbers(callback)
    assert a.keys() == b.keys()
    for name in a:
        assert_close_ulp(a[name], b[name], ULPS, name, scale=SCALE)


def _random_search_until(threshold: float) -> mw.Solver:
    """examples/minimal_solver.py's RandomSearch, run as a host loop, done once a walker is below ``threshold``."""
    spec = importlib.util.spec_from_file_location("minimal_solver", HERE.parent / "examples" / "minimal_solver.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # registered first: its dataclass looks its module up by name
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)

    @dataclass(frozen=True)
    class UntilBelow(module.RandomSearch):
        evaluates_once_per_step = True

        def done(self, problem, state, phase):
            return jnp.min(state.best_fun) < threshold

    return UntilBelow(n_walkers=4, iterations=200)


def test_a_convergence_test_ends_the_host_loop_where_the_compiled_loop_ends(monkeypatch):
    loop, callback = _both_forms(monkeypatch, _random_search_until(0.05))
    ran = loop.stats["iterations"]["search"]
    assert 0 < ran < 200  # converged early (200 iterations would be the limit)
    assert callback.stats["iterations"]["search"] == ran
    assert loop.status == mw.Status.SUCCESS and loop.fun < 0.05
    assert_close_ulp(loop.x, callback.x, ULPS, "x", scale=SCALE)  # the same draws, other programs


def test_a_start_that_is_already_done_runs_no_step_in_either_form(monkeypatch):
    # the compiled loop tests `done` before every step, the first included: a run whose start meets
    # it (every value is below 1e9) runs no step, as a host loop too
    loop, callback = _both_forms(monkeypatch, _random_search_until(1e9))
    assert callback.stats["iterations"]["search"] == 0
    assert loop.stats["iterations"]["search"] == 0
    assert_close_ulp(loop.x, callback.x, ULPS, "x", scale=SCALE)  # the same start, other programs


# one process: solve a small Exchange of a NumPy objective; print the persistent cache's events
# during the solve and the run's numbers
PROGRAM = textwrap.dedent("""
    import json, sys
    import jax
    import numpy as np
    events = []
    jax.monitoring.register_event_listener(lambda event, **kw: events.append(event))
    jax.config.update("jax_enable_x64", True)
    import multiwalk as mw
    def f(x):
        return float(np.sum((np.asarray(x) - 0.5) ** 2))
    problem = mw.Problem(objective=f, lower=[-2.0, -2.0], upper=[2.0, 2.0], backend="python", executor="serial")
    solver = mw.Exchange(betas=(3.0, 1.0, 0.3), numsteps=6, numsteps_exchange=2, step_width=(0.5, 0.5))
    del events[:]
    result = mw.solve(problem, solver, seed=1, progress=False)
    count = lambda name: events.count("/jax/compilation_cache/" + name)
    print(json.dumps({"requests": count("compile_requests_use_cache"), "hits": count("cache_hits"),
                      "writes": count("cache_misses"), "replica_fx": result.replica_fx.tolist(),
                      "x": result.x.tolist()}))
""")


def test_a_second_process_compiles_nothing_and_gets_the_same_numbers(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE", "MULTIWALK_CACHE"))}
    env.update(MULTIWALK_CACHE_DIR=str(tmp_path / "cache"), JAX_PLATFORMS="cpu",
               PYTHONPATH=str(HERE.parent / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def one_process() -> dict:
        done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first, second = one_process(), one_process()
    # every program the first process compiled was kept, however fast it compiled, and the second
    # loaded each of them and compiled none.  (JAX 0.10 counts 7 requests, 7 writes, then 7 hits;
    # JAX 0.11 7 requests, 5 writes, then 5 hits: two of its requests are neither a hit nor a write.)
    if tuple(int(part) for part in jax.__version__.split(".")[:2]) < (0, 11):
        assert first["writes"] == first["requests"] > 0
    assert second["requests"] == first["requests"] >= first["writes"] > 0
    assert second["hits"] == first["writes"] and second["writes"] == 0
    assert second["replica_fx"] == first["replica_fx"] and second["x"] == first["x"]


def test_a_tap_is_seen_only_by_the_thread_that_traces():
    # another thread's solve() of the same problem traces its own programs meanwhile: through the
    # callback (or its own tap), never through this thread's tap (whose zeros would be its values)
    from multiwalk.host_objective import Tap

    host = mw.Problem(objective=bumpy, backend="python", executor="serial", **BOX).host_objective
    seen = []
    with host.tapping(Tap()) as tap:
        other = threading.Thread(target=lambda: seen.append(host.tap))
        other.start()
        other.join()
        assert host.tap is tap
    assert seen == [None] and host.tap is None


def test_a_kept_host_loop_reads_as_text_like_a_compiled_loop():
    # compile_cache.compiled_loops() lists host loops beside compiled loops: callers read any of
    # them with as_text() (e.g. to look for copies in a loop), so a host loop gives both programs
    problem = mw.Problem(objective=bumpy, backend="python", executor="serial", **BOX)
    mw.solve(problem, mw.Exchange(betas=(2.0, 0.5), numsteps=3, numsteps_exchange=2, step_width=(0.6, 0.6)),
             seed=0, progress=False)
    loops = [c for c in compile_cache.compiled_loops() if isinstance(c, host_loop.HostLoop)]
    assert loops and all(c.as_text().count("HloModule") == 2 for c in loops)


def test_a_keyboard_interrupt_from_inside_a_chunk_is_raised_and_the_last_checkpoint_kept(tmp_path):
    # An MPI or Dask worker stopped by Ctrl-C hands back a KeyboardInterrupt, which arrives inside a
    # chunk: the state went to that chunk's first step (donated) and is gone.  solve() raises it (no
    # partial result to build) rather than failing on the deleted state, and the checkpoint of the
    # chunk before stays.  The callback makes the first chunk one step; the others are record=5 steps
    # (chunk_seconds=60 asks for more): the interrupt comes at step 9, the third of a chunk.
    from multiwalk.checkpoint import read_checkpoint

    calls = [0]

    def stops_at_call_40(x: np.ndarray) -> float:
        calls[0] += 1
        if calls[0] == 40:  # the start's 4 points, then 4 a step: step 9
            raise KeyboardInterrupt
        return bumpy(x)

    problem = mw.Problem(objective=stops_at_call_40, backend="python", executor="serial", **BOX)
    solver = mw.Exchange(betas=(4.0, 1.5, 0.5, 0.2), numsteps=13, numsteps_exchange=3, step_width=(0.6, 0.6), record=5)
    path = tmp_path / "run.npz"
    with jax.enable_x64(True), pytest.raises(KeyboardInterrupt):
        mw.solve(problem, solver, seed=7, progress=False, chunk_seconds=60.0, checkpoint=path, checkpoint_every=0.0,
                 callback=lambda info: None)
    meta, _ = read_checkpoint(path)
    assert int(meta["done"][0]) < 9  # written after a chunk before the interrupted one
