"""The example solver of docs/architecture.md (examples/minimal_solver.py) runs through mw.solve."""

import importlib.util
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "minimal_solver.py"


@pytest.fixture(scope="module")
def example():
    """The example file as a module (registered first: its dataclass looks its module up by name)."""
    spec = importlib.util.spec_from_file_location("minimal_solver", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_minimal_solver_finds_the_minimum_and_counts_nonfinite_values(example):
    centre = np.array([0.3, -0.2])

    def f(x):  # minimum 0 at centre; NaN on the strip x0 > 0.9, -inf on x0 < -0.9 (5 % of the box each)
        value = jnp.where(x[0] > 0.9, jnp.nan, jnp.sum((x - centre) ** 2))
        return jnp.where(x[0] < -0.9, -jnp.inf, value)

    problem = mw.Problem(objective=f, lower=[-1.0, -1.0], upper=[1.0, 1.0])
    solver = example.RandomSearch(n_walkers=64, iterations=100)
    result = mw.solve(problem, solver, seed=0)
    assert result.success and result.stats["iterations"] == {"search": 100}
    # 64 * 101 = 6464 uniform draws in a box of area 4: none lands within 0.05 of the centre
    # (area pi * 0.05^2) with probability (1 - 0.00196)^6464 ~ 3e-6, so f < 0.05^2 for any seed.
    assert result.fun < 0.05**2
    assert np.max(np.abs(result.x - centre)) < 0.05
    # a -inf is no minimum: the best point is never taken from the -inf strip (checked above)
    # the two strips get ~10 % of the draws: 646 expected, sd ~24; 450..850 is 8 sd either side
    assert 450 < result.stats["nonfinite"] < 850


def test_minimal_solver_rejects_bad_options_before_compiling(example):
    with pytest.raises(ValueError, match="n_walkers must be a positive integer, got 0"):
        example.RandomSearch(n_walkers=0)
    with pytest.raises(ValueError, match="RandomSearch needs a box"):
        mw.solve(mw.Problem(objective=lambda x: jnp.sum(x**2), x0=[1.0]), example.RandomSearch())


def test_ctrl_c_stops_queuing_phases_with_three_of_them(example, monkeypatch):
    # Ctrl-C pressed as phase a's last chunk is read, phase b's first (and last: b is one
    # iteration) queued behind it: b's runs, and c's is not queued behind b's; the run stops there
    import dataclasses
    import importlib

    solve_module = importlib.import_module("multiwalk.solve")

    @dataclasses.dataclass(frozen=True)
    class ThreePhases(example.RandomSearch):
        def phases(self, problem):
            return [mw.Phase("a", 3), mw.Phase("b", 1), mw.Phase("c", 4)]

    launched, land = [], solve_module._land_chunk
    launch = solve_module._launch_chunk

    def launch_chunk(run, phase_index, *args, **kwargs):
        launched.append(phase_index)
        return launch(run, phase_index, *args, **kwargs)

    def land_chunk(run, chunk, bar, ctrl_c, ended_at=None):
        if ended_at is not None and chunk.phase_index == 0:
            ctrl_c.pressed = True
        return land(run, chunk, bar, ctrl_c, ended_at)

    monkeypatch.setattr(solve_module, "_launch_chunk", launch_chunk)
    monkeypatch.setattr(solve_module, "_land_chunk", land_chunk)
    problem = mw.Problem(objective=lambda x: jnp.sum(x**2), lower=[-1.0, -1.0], upper=[1.0, 1.0])
    result = mw.solve(problem, ThreePhases(n_walkers=8), seed=0, progress=False)
    assert result.status == mw.Status.INTERRUPTED
    assert result.stats["iterations"] == {"a": 3, "b": 1, "c": 0} and 2 not in launched, launched
