"""The CPU speed paths of ODAT-SE's exchange (issue 5): the random numbers of a block of steps
drawn in one call (``Exchange._dynamic_steps``), the exchange under a ``cond`` on a CPU, the step
files' trial and result pieces formatted in one polars call (``odatse._proc_lines_many``) and
``multiwalk run --write-chunks``.  Each must give what the plain form gives: the sampling paths are
other compiled programs of the same operations (decisions exactly, floats to
test_exchange_blocks.ULPS, see tests/ulp.py), the writers byte for byte.  ~10 s on 2 cores."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import polars as pl
import pytest
from test_exchange_blocks import SCALE, ULPS
from ulp import assert_fields_close_ulp

from multiwalk.cli import main
from multiwalk.functions.odatse import himmelblau
from multiwalk.io import odatse as odatse_io
from multiwalk.problem import Problem
from multiwalk.solvers import exchange as exchange_module
from multiwalk.solvers.base import Solver
from multiwalk.solvers.exchange import Exchange, ExchangeState, temperature_ladder


class _ShortDraws(Exchange):
    """Blocks of 3 drawn steps: chunks of 7 and 5 steps start and end inside blocks."""

    def draw_steps(self, problem: Problem) -> int:
        return 3


def _leaves(solver: Exchange, problem: Problem, run_chunk, chunks: list[int]) -> list[np.ndarray]:
    state = jax.jit(lambda k: solver.init(problem, k))(jax.random.PRNGKey(5))
    f = jax.jit(lambda st, n: run_chunk(problem, st, 0, n))
    for n in chunks:
        state, _ = f(state, jnp.int32(n))
    return [np.asarray(a) for a in jax.tree_util.tree_leaves(state)]


@pytest.fixture(scope="module")
def exchange_case():
    with jax.enable_x64(True):
        problem = Problem(objective=himmelblau, lower=[-6.0, -6.0], upper=[6.0, 6.0])
        betas = tuple(temperature_ladder(6, Tmin=1.0, Tmax=100.0).tolist())
        solver = _ShortDraws(betas=betas, numsteps=100, numsteps_exchange=3, step_width=(0.5, 0.5), record=16)
        # the plain form: one step per loop trip, each drawing its own numbers (Solver.run_chunk)
        plain = _leaves(solver, problem, lambda p, st, ph, n: Solver.run_chunk(solver, p, st, ph, n), [7, 5, 1])
        yield problem, solver, plain


def test_drawn_blocks_equal_per_step_draws(exchange_case):
    # the same threefry bits and the same arithmetic, only drawn in one call (another program)
    problem, solver, plain = exchange_case
    with jax.enable_x64(True):
        drawn = _leaves(solver, problem, solver.run_chunk, [7, 5, 1])
    assert_fields_close_ulp(drawn, plain, ULPS, names=ExchangeState._fields, scale=SCALE)


def test_exchange_under_cond_equals_masked_exchange(exchange_case, monkeypatch):
    # off a CPU the exchange is computed every step and masked; on a CPU it runs under a cond only
    # on exchange steps: the same run (a masked exchange changes nothing on the other steps)
    problem, solver, plain = exchange_case
    monkeypatch.setattr(exchange_module.jax, "default_backend", lambda: "gpu-for-the-test")
    with jax.enable_x64(True):
        masked = _leaves(solver, problem, lambda p, st, ph, n: Solver.run_chunk(solver, p, st, ph, n), [7, 5, 1])
    assert_fields_close_ulp(masked, plain, ULPS, names=ExchangeState._fields, scale=SCALE)


def test_trial_and_result_in_one_call_same_bytes():
    # 2 emulated processes x 5 walkers, line ranges cutting steps, a value polars spells otherwise
    # (3e-05 -> repr's spelling), an empty range: byte-identical to one call per piece
    rng = np.random.default_rng(1)
    m, n, per = 4, 10, 5
    values = np.concatenate([rng.exponential(50, (m, n, 1)), rng.uniform(-6, 6, (m, n, 2))], axis=2)
    values[1, 3, 0] = 3e-5
    ints = np.zeros((m, n, 3), np.int32)
    ints[..., 0] = np.argsort(rng.random((m, n)), axis=1)
    ints[..., 1] = rng.random((m, n)) < 0.5
    ints[0, :, 1] = 1
    steps = np.arange(10, 10 + m)
    t_series = pl.Series([repr(float(t)) for t in np.logspace(0, 2, n)], dtype=pl.String)
    trial, result, _ = odatse_io._chunk_rows(values, ints, None, None)
    parts = [(rows.__getitem__, p) for p in range(2) for rows in (trial, result)]
    for q0, q1 in [(0, m * per), (3, 13), (7, 8), (6, 6)]:
        one = odatse_io._proc_lines_many(steps, ints, parts, per, t_series, q0, q1)
        apart = [odatse_io._proc_lines(steps, ints, rows_of, p, per, t_series, q0, q1) for rows_of, p in parts]
        assert one == apart, (q0, q1)
    assert b" 3e-05 " in b"".join(odatse_io._proc_lines_many(steps, ints, parts, per, t_series, 0, m * per))


def test_write_chunks_must_be_positive():
    # a usage error before anything runs (the input file is not even read)
    assert main(["run", "no-such-input.toml", "--write-chunks", "0"]) == 2
