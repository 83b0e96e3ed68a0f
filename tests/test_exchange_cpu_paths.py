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


def _random_chunk(rng: np.random.Generator, m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Records of a chunk in replica order: fx x1 x2 (two values polars spells otherwise) and
    (temperature index, accepted, mesh node)."""
    values = np.concatenate([rng.exponential(50, (m, n, 1)), rng.uniform(-6, 6, (m, n, 2))], axis=2)
    values[1, 3, 0], values[2, 1, 2] = 3e-5, -2e-7
    ints = np.zeros((m, n, 3), np.int32)
    ints[..., 0] = np.argsort(rng.random((m, n)), axis=1)
    ints[..., 1] = rng.random((m, n)) < 0.5
    ints[0, :, 1] = 1
    ints[..., 2] = rng.integers(0, 7, (m, n))
    return values, ints


@pytest.mark.parametrize("pairs_table", [True, False])
def test_all_files_in_one_call_per_piece_same_bytes_as_file_by_file(monkeypatch, pairs_table):
    # the threaded writer's form (_piece_bytes: every file's lines of a piece in one polars call,
    # cut at the files' ends) against the per-file functions the writer processes use: 2 emulated
    # processes x 5 walkers, a first chunk and the next (its results start from the first's last),
    # pieces cutting the steps, a mesh's coordinates; "walker T" from the table of pairs and joined
    # per line (the form for thousands of replicas): byte for byte
    if not pairs_table:
        monkeypatch.setattr(odatse_io, "WALKER_T_TABLE_MAX", 0)
    rng = np.random.default_rng(2)
    m, n, per = 6, 10, 5
    t_strings = [repr(float(t)) for t in np.logspace(0, 2, n)]
    t_series = pl.Series(t_strings, dtype=pl.String)
    walker_t = odatse_io._WalkerTemperature(t_strings, per, n)
    t_files = [f"T{t}" for t in range(n)]
    for coordinates in (None, rng.uniform(-1, 1, (7, 2))):
        last = last_table = None
        for first_step in (0, m):
            values, ints = _random_chunk(rng, m, n)
            if first_step:
                ints[0, :, 1] = rng.random(n) < 0.5
            steps = np.arange(first_step, first_step + m)
            trial, result, last = odatse_io._chunk_rows(values, ints, coordinates, last)
            table, src, last_table = odatse_io._chunk_table(values, ints, coordinates, last_table)
            assert np.array_equal(last, last_table)
            for a, b in [(0, m), (0, 2), (2, 5), (5, 6)]:
                pieces = odatse_io._piece_bytes(steps, ints, table, src, walker_t, per, True, a, b)
                expected = [odatse_io._proc_lines(steps, ints, rows.__getitem__, p, per, t_series, a * per, b * per)
                            for p in range(n // per) for rows in (trial, result)]
                expected += [bytes(lines) for _, lines in
                             odatse_io._t_group_bytes(steps[a:b], ints[a:b], result.reshape(m, n, -1)[a:b].reshape(
                                 (b - a) * n, -1), 0, n, t_files)]
                assert [bytes(piece) for piece in pieces] == expected, (first_step, a, b)
                if coordinates is None and (a, b) == (0, m):  # the two values polars spells otherwise, as repr
                    assert b" 3e-05 " in bytes(pieces[0]) and b" -2e-07\n" in bytes(pieces[0])


def test_several_buffers_are_appended_whole_through_short_writes(tmp_path, monkeypatch):
    # os.writev may write less than asked: the rest follows, in order, every byte once
    real = odatse_io.os.writev
    monkeypatch.setattr(odatse_io.os, "writev", lambda fd, views: real(fd, [bytes(views[0])[:3]]))
    path = tmp_path / "f.txt"
    fd = odatse_io.os.open(path, odatse_io.os.O_WRONLY | odatse_io.os.O_CREAT)
    try:
        odatse_io._write_all(fd, (b"step 1\n", memoryview(b"walker 22\n"), b"", b"end\n"))
    finally:
        odatse_io.os.close(fd)
    assert path.read_bytes() == b"step 1\nwalker 22\nend\n"


def test_a_new_run_replaces_the_files_of_a_longer_one_and_refuses_a_path_it_cannot_write(tmp_path):
    # the threaded writer empties and heads the files on its thread (the run compiles meanwhile);
    # what a longer run left is gone, the header comes first; a file that cannot be opened (a folder
    # in its place) is an error when the writer is made, before anything runs
    from types import SimpleNamespace

    rng = np.random.default_rng(3)
    m, n = 5, 4
    betas = 1.0 / np.logspace(0, 1, n)
    (tmp_path / "0").mkdir()
    for name in ("0/trial.txt", "0/result.txt", "result_T2.txt"):
        (tmp_path / name).write_text("a line of a longer run\n" * 1000)
    values, ints = _random_chunk(rng, m, n)
    ints[..., 2] = 0
    writer = odatse_io.StepWriter(tmp_path, ["x1", "x2"], betas, False, 1, n, threads=1)
    try:
        writer.on_steps(SimpleNamespace(rec_values=values, rec_ints=ints), 0, m - 1)
    finally:
        writer.close()
    trial = (tmp_path / "0" / "trial.txt").read_text().splitlines()
    assert trial[0] == "# step walker T fx x1 x2" and len(trial) == 1 + m * n and trial[1].startswith("0 0 ")
    result_t = (tmp_path / "result_T2.txt").read_text().splitlines()
    assert result_t[0] == f"# T = {float(1.0 / betas[2])!r}" and len(result_t) == 1 + m
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "result.txt").mkdir()
    with pytest.raises(IsADirectoryError, match="result.txt"):
        odatse_io.StepWriter(tmp_path, ["x1", "x2"], betas, False, 2, n // 2, threads=1)


def test_write_chunks_must_be_positive():
    # a usage error before anything runs (the input file is not even read)
    assert main(["run", "no-such-input.toml", "--write-chunks", "0"]) == 2
