"""Population annealing (ODAT-SE's pamc): statistics against exact sums on a mesh, the output
files of ``multiwalk run`` (weight.txt included), a resumed run, a NumPy objective refused,
ODAT-SE's initial_list and [runner.limitation], the start points and constraints checked before compiling."""

from __future__ import annotations

import dataclasses
import io
import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from odatse_inputs import output_files, run_cli

import multiwalk as mw
from multiwalk.commands import run_pamc
from multiwalk.solvers.population_annealing import annealing_schedule
from multiwalk.spaces import Mesh, build_neighbor_list

N_WALKERS = 2000
BETAS = (0.0, 0.5, 1.0, 2.0, 3.0)


def grid_energy(x):
    return (x[0] - 0.3) ** 2 + 2.0 * (x[1] + 0.2) ** 2


@pytest.fixture(scope="module")
def mesh_run():
    """One annealing of 2000 walkers on a 9 x 9 mesh, and the exact sums over its nodes."""
    axis = np.linspace(-1.0, 1.0, 9)
    coords = np.array(np.meshgrid(axis, axis, indexing="xy")).reshape(2, -1).T
    mesh = Mesh(coords, build_neighbor_list(coords, 0.26))
    with jax.enable_x64(True):
        problem = mw.Problem(objective=grid_energy, names=["x1", "x2"])
        solver = mw.PopulationAnnealing(betas=BETAS, numsteps_for_T=(10,) * len(BETAS), n_replicas=N_WALKERS, mesh=mesh)
        result = mw.solve(problem, solver, seed=3)
        chunked = mw.solve(problem, solver, seed=3, chunk_seconds=1e-9)
    f = np.array([grid_energy(c) for c in coords])
    return result, chunked, f


def test_statistics_agree_with_exact_sums_on_a_mesh(mesh_run):
    result, _, f = mesh_run
    st = result.statistics
    for t, beta in enumerate(BETAS):
        w = np.exp(-beta * (f - f.min()))
        exact_mean = np.sum(f * w) / np.sum(w)
        exact_logz = np.log(np.mean(np.exp(-beta * f)))  # log(Z(beta) / Z(0)): the mesh's nodes weigh alike
        # the mean: within 4 of its own jackknife errors (about 0.01 at 2000 walkers); a failure
        # at a fixed seed is a bias, not chance (p ~ 6e-5 per temperature)
        assert abs(st["mean"][t] - exact_mean) < 4 * st["error"][t], (t, st["mean"][t], exact_mean)
        # log Z adds one reweighting per temperature; each has an error ~ dbeta * sd(f) / sqrt(N)
        # <= 0.5 * 0.6 / 45 ~ 0.007 (resampled walkers are correlated: a factor ~2), so 0.05 at 4 steps
        assert abs(st["logz"][t] - exact_logz) < 0.05, (t, st["logz"][t], exact_logz)
    assert np.all(st["count"] == N_WALKERS) and st["logz"][0] == 0.0
    assert np.all((st["acceptance"] > 0) & (st["acceptance"] <= 1))
    assert result.success and result.fun == pytest.approx(f.min(), abs=0.05)  # the mesh's lowest node (0.29 away at most)


def test_chunks_do_not_change_the_run(mesh_run):
    result, chunked, _ = mesh_run
    assert chunked.stats["chunks"] > result.stats["chunks"]
    np.testing.assert_array_equal(chunked.walker_x, result.walker_x)
    np.testing.assert_array_equal(chunked.statistics["logz"], result.statistics["logz"])


def test_schedule_and_bad_options():
    assert annealing_schedule(Tnum=3, numsteps_annealing=4).tolist() == [4, 4, 4]
    assert annealing_schedule(numsteps=10, numsteps_annealing=4).tolist() == [4, 4, 2]
    assert annealing_schedule(numsteps=11, Tnum=3).tolist() == [4, 3, 3]  # ODAT-SE's: the first rem - 1 get one more
    with pytest.raises(ValueError, match="exactly two of numsteps, numsteps_annealing and Tnum"):
        annealing_schedule(numsteps=10, numsteps_annealing=2, Tnum=3)
    with pytest.raises(ValueError, match="betas must be ascending"):
        mw.PopulationAnnealing(betas=(1.0, 0.5), numsteps_for_T=(1, 1), n_replicas=4, step_width=(0.1,))
    for bad in ((1, 0), (1.5, 2)):  # none at a temperature; a fraction of a step
        with pytest.raises(ValueError, match="at least 1, at each of the 2 temperatures"):
            mw.PopulationAnnealing(betas=(0.5, 1.0), numsteps_for_T=bad, n_replicas=4, step_width=(0.1,))


def test_max_chunk_steps_bounds_the_chunks():
    problem = mw.Problem(objective=lambda x: jnp.sum(x**2), lower=[-1.0], upper=[1.0])
    solver = mw.PopulationAnnealing(betas=(0.5, 1.0), numsteps_for_T=(4, 4), n_replicas=4, step_width=(0.1,),
                                    max_chunk_steps=3)
    assert solver.plan(problem, 1, None).max_chunk == 3
    assert dataclasses.replace(solver, record=3).plan(problem, 1, None).max_chunk == 2  # the ring's bound, lower
    result = mw.solve(problem, solver, seed=0, progress=False)
    assert result.stats["chunks"] >= 3  # 8 steps in chunks of at most 3 (``multiwalk run``'s checkpoint_steps)


PAMC_INPUT = """
[base]
dimension = 2
output_dir = "output"
[solver]
name = "analytical"
function_name = "himmelblau"
[algorithm]
name = "pamc"
seed = 7
checkpoint_steps = 4
[algorithm.param]
min_list = [-6.0, -6.0]
max_list = [6.0, 6.0]
step_list = [0.5, 0.5]
[algorithm.pamc]
Tmin = 1.0
Tmax = 100.0
Tnum = 3
numsteps_annealing = 5
nreplica_per_proc = 4
resampling_interval = 2
"""


def test_pamc_files(tmp_path):
    (tmp_path / "input.toml").write_text(PAMC_INPUT)
    assert run_cli(tmp_path, "input.toml", "--nprocs", "2") == 0
    out = tmp_path / "output"
    fx = np.loadtxt(out / "fx.txt", ndmin=2)
    assert fx.shape == (3, 6)  # beta, mean, error, replicas, log(Z/Z0), acceptance
    np.testing.assert_allclose(fx[:, 0], [0.01, 0.1, 1.0], rtol=1e-12)
    assert fx[:, 3].tolist() == [8, 8, 8] and fx[0, 4] == 0.0
    for p in ("0", "1"):
        lines = (out / p / "result_T2.txt").read_text().splitlines()
        assert lines[0] == "# step walker T fx x1 x2 weight ancestor"
        rows = np.loadtxt(out / p / "result_T2.txt", ndmin=2)
        assert rows[:, 0].min() == 11 and rows[:, 0].max() == 15 and set(rows[:, 1]) == {0, 1, 2, 3}
        assert np.all(rows[:, 2] == 1.0) and np.all(rows[:, 6] == 1.0)  # T = 1/beta; weights 1 after resampling
        assert np.all((rows[:, 7] >= 0) & (rows[:, 7] < 8))  # ancestors: start walkers 0..7
        t0 = np.loadtxt(out / p / "result_T0.txt", ndmin=2)
        assert t0[:, 0].min() == 0 and t0[:, 0].max() == 5  # step 0 (the start) belongs to the first temperature
        assert (out / p / "trial.txt").exists() and (out / p / "trial_T1.txt").exists()
        check_weights(out / p, rows_at_ends=[np.loadtxt(out / p / f"result_T{t}.txt", ndmin=2) for t in range(3)])
    best = dict(line.split(" = ") for line in (out / "best_result.txt").read_text().splitlines())
    assert best["nprocs"] == "2"
    # best_result.txt names a line of result.txt (rank = folder, step, walker in it) and no line of
    # any folder is lower; rel 1e-12: its fx is f evaluated again at x, by another compiled program
    rows = np.loadtxt(out / best["rank"] / "result.txt", ndmin=2)
    line = rows[(rows[:, 0] == int(best["step"])) & (rows[:, 1] == int(best["walker"]))]
    assert line.shape[0] == 1 and float(best["fx"]) == pytest.approx(line[0, 3], rel=1e-12)
    np.testing.assert_allclose([float(best["x1"]), float(best["x2"])], line[0, 4:6], rtol=0, atol=0)
    lowest = min(np.loadtxt(out / p / "result.txt", ndmin=2)[:, 3].min() for p in ("0", "1"))
    assert float(best["fx"]) == pytest.approx(lowest, rel=1e-12)


def test_resume_gives_the_same_files(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    for folder in (whole, cut):
        folder.mkdir()
        (folder / "input.toml").write_text(PAMC_INPUT)
    assert run_cli(whole, "input.toml") == 0
    calls = []
    original = run_pamc.PamcStepFiles.write

    def write(self, problem, state, first, last):  # Ctrl-C after the second chunk (steps 1..5)
        original(self, problem, state, first, last)
        calls.append(last)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)

    run_pamc.PamcStepFiles.write = write
    try:
        assert run_cli(cut, "input.toml") == 130
    finally:
        run_pamc.PamcStepFiles.write = original
    assert calls[-1] < 15
    assert run_cli(cut, "input.toml", "--resume") == 0
    assert output_files(cut) == output_files(whole)


def check_weights(folder, rows_at_ends):
    """weight.txt as ODAT-SE writes it: at the last step of each temperature (5, 10, 15) every
    walker's ``Tindex beta walker idnum fx log_weight x1 x2``, fx and x those of result.txt; the
    log weights carried from the previous temperature (resampling every 2: reset after T1)."""
    assert (folder / "weight.txt").read_text().splitlines()[0] == "# Tindex beta walker idnum fx log_weight x1 x2"
    w = np.loadtxt(folder / "weight.txt", ndmin=2)
    assert w.shape == (12, 8) and w[:, 0].tolist() == [0] * 4 + [1] * 4 + [2] * 4
    np.testing.assert_allclose(w[:, 1], np.repeat([0.01, 0.1, 1.0], 4), rtol=1e-12)  # beta, though the input gave T
    assert w[:, 2].tolist() == [0, 1, 2, 3] * 3 and np.all(w[:, 3] == 0)
    ends = np.concatenate([rows[rows[:, 0] == last] for rows, last in zip(rows_at_ends, (5, 10, 15))])
    np.testing.assert_array_equal(w[:, [4, 6, 7]], ends[:, [3, 4, 5]])  # fx, x1, x2: the same digits
    # log w at T1 = -(beta1 - beta0) * fx at the end of T0 (no resampling between them); 0 elsewhere
    np.testing.assert_allclose(w[4:8, 5], -(0.1 - 0.01) * w[:4, 4], rtol=1e-12)
    assert np.all(w[:4, 5] == 0) and np.all(w[8:, 5] == 0)


NUMPY_OBJECTIVE = """
import numpy as np


def f(x):
    return float(np.sum(np.asarray(x) ** 2))
"""


@pytest.mark.parametrize("algorithm", ["pamc", "mapper"])
def test_numpy_objective_runs_outside_the_loop(tmp_path, capsys, algorithm):
    """A NumPy function is evaluated outside the compiled loop (one batch a step, here on one
    worker): the same numbers as the jax.numpy form of the same function, the same seed."""
    (tmp_path / "obj.py").write_text(NUMPY_OBJECTIVE)
    (tmp_path / "objj.py").write_text("import jax.numpy as jnp\n\n\ndef f(x):\n    return jnp.sum(x ** 2)\n")
    outputs = {}
    for module in ("obj", "objj"):
        text = PAMC_INPUT.replace('name = "analytical"\nfunction_name = "himmelblau"',
                                  f'name = "python"\nfunction = "{module}.py:f"').replace('"output"', f'"out_{module}"')
        if algorithm == "mapper":
            text = text.replace('"pamc"', '"mapper"').replace("step_list = [0.5, 0.5]", "num_list = [3, 3]")
            text = text[: text.index("[algorithm.pamc]")]
        (tmp_path / f"{module}.toml").write_text(text)
        extra = ("--executor", "serial") if module == "obj" else ()
        assert run_cli(tmp_path, f"{module}.toml", *extra) == 0
        name = "ColorMap.txt" if algorithm == "mapper" else "fx.txt"
        outputs[module] = (tmp_path / f"out_{module}" / name).read_text()
    assert "not a jax.numpy function" in capsys.readouterr().out  # the note that says how it runs
    # The objective's values agree exactly (sums of two squares in float64), but the sampler around a
    # Python objective is compiled with cheaper XLA options than the jax.numpy run's, so its own
    # arithmetic (weights, means) may round its last bits differently: the same rows and columns,
    # the numbers to 1e-12 relative
    ours, reference = (np.loadtxt(io.StringIO(outputs[m])) for m in ("obj", "objj"))
    assert ours.shape == reference.shape
    np.testing.assert_allclose(ours, reference, rtol=1e-12, atol=1e-300)


def test_truncate_weights_keeps_the_finished_temperatures(tmp_path):
    path = tmp_path / "weight.txt"
    whole = ("# Tindex beta walker idnum fx log_weight x1\n"
             "0 0.01 0 0 1.5 0.0 2.0\n0 0.01 1 0 2.5 0.0 3.0\n1 0.1 0 0 1.0 -0.1 2.0\n")
    path.write_text(whole + "2 1.0 0 0 1.0 0.0 2.")  # a line cut short by a crash
    run_pamc.truncate_weights(path, 5)
    assert path.read_text() == whole
    run_pamc.truncate_weights(path, 1)
    assert path.read_text() == "".join(whole.splitlines(keepends=True)[:3])


def test_pbc_list_wraps_the_moves(tmp_path):
    # ODAT-SE's pbc_list in pamc: x1 wraps into [min, max) (lo + mod(x - lo, max - min)), so no trial
    # leaves its range; x2 is not periodic, and with steps of 4 in a box of 12 some trials leave it
    # (their fx is inf: rejected).  Exact bounds: the wrap is computed in the run's float64.
    text = PAMC_INPUT.replace("step_list = [0.5, 0.5]", "step_list = [4.0, 4.0]\npbc_list = [true, false]")
    (tmp_path / "input.toml").write_text(text)
    assert run_cli(tmp_path, "input.toml") == 0
    trial = np.loadtxt(tmp_path / "output" / "0" / "trial.txt", ndmin=2)  # step walker T fx x1 x2 ...
    assert np.all((trial[:, 4] >= -6.0) & (trial[:, 4] < 6.0))
    left = (trial[:, 5] < -6.0) | (trial[:, 5] >= 6.0)
    assert left.any() and np.all(np.isinf(trial[left, 3]))


def test_initial_list_and_limitation(tmp_path, capsys):
    # ODAT-SE's initial_list starts the first walkers of every process; [runner.limitation]
    # (x1 + x2 + 1 > 0, half the box; steps of 2 to reach its edge) holds for every start and every result, and the trials that
    # break it are rejected (fx = inf in trial.txt).  Exact comparisons: the points are written as read.
    text = PAMC_INPUT.replace("step_list = [0.5, 0.5]", "step_list = [2.0, 2.0]\ninitial_list = [[1.0, 1.0], [-2.5, 3.0]]")
    text = text.replace("[algorithm.pamc]", "[runner.limitation]\nco_a = [[1.0, 1.0]]\nco_b = [[1.0]]\n[algorithm.pamc]")
    (tmp_path / "input.toml").write_text(text)
    assert run_cli(tmp_path, "input.toml", "--nprocs", "2") == 0
    for p in ("0", "1"):
        result = np.loadtxt(tmp_path / "output" / p / "result.txt", ndmin=2)  # step walker T fx x1 x2 weight ancestor
        start = result[result[:, 0] == 0]
        np.testing.assert_array_equal(start[:2, 4:6], [[1.0, 1.0], [-2.5, 3.0]])
        assert np.all(result[:, 4] + result[:, 5] + 1.0 > 0)
        trial = np.loadtxt(tmp_path / "output" / p / "trial.txt", ndmin=2)
        broken = (trial[:, 4] + trial[:, 5] + 1.0 <= 0)
        assert broken.any() and np.all(np.isinf(trial[broken, 3]))
    # a start point breaking the limitation: refused before the run, naming the file
    bad = text.replace("[-2.5, 3.0]]", "[-2.5, 1.0]]")
    (tmp_path / "bad.toml").write_text(bad)
    assert run_cli(tmp_path, "bad.toml") == 2
    assert "bad.toml: [algorithm.param] initial_list[1] = [-2.5, 1.0] violates [runner.limitation]" in capsys.readouterr().err


def test_initial_and_constraints_checked_before_compiling():
    problem = mw.Problem(objective=grid_energy, lower=[-1.0, -1.0], upper=[1.0, 1.0])
    base = dict(betas=(0.5, 1.0), numsteps_for_T=(2, 2), n_replicas=4, step_width=(0.1, 0.1))
    with pytest.raises(ValueError, match="initial has 3 points but there are only 2 replicas per process"):
        mw.PopulationAnnealing(**base, nreplica_per_proc=2, initial=((0.0, 0.0),) * 3)
    with pytest.raises(ValueError, match="nreplica_per_proc=3 does not divide n_replicas=4"):
        mw.PopulationAnnealing(**base, nreplica_per_proc=3)
    with pytest.raises(ValueError, match=r"constraint_a must be a matrix \(m, d\) and constraint_b m numbers"):
        mw.PopulationAnnealing(**base, constraint_a=((1.0, 1.0),), constraint_b=(0.0, 1.0))
    cases = [  # (options, message): each refused by solve() before anything compiles
        (dict(initial=((0.5, 0.5),), constraint_a=((1.0, 0.0),), constraint_b=(-0.6,)), r"initial\[0\] = \[0.5, 0.5\] violates"),
        (dict(initial=((0.5, 1.0),)), r"initial\[0\] = \[0.5, 1.0\] is outside the box"),
        (dict(constraint_a=((1.0, 0.0),), constraint_b=(-2.0,)), "holds at none of 10000 uniform points"),
        (dict(constraint_a=((1.0, 0.0),), constraint_b=(-0.999,)), r"about [0-9.]+ would start outside; shrink the box"),
    ]
    for options, message in cases:
        with pytest.raises(ValueError, match=message):
            mw.solve(problem, mw.PopulationAnnealing(**base, **options), seed=0, progress=False)


def test_equal_betas_keep_the_weights_of_walkers_outside_the_support():
    # betas may repeat (ascending, not strictly); a walker with f = inf (here: started where the
    # objective is +inf) must not turn its weight into 0 * inf = NaN between two equal betas, which
    # made every statistic of the population NaN
    def half(x):
        return jnp.where(x[0] > 0.5, jnp.inf, x[0] ** 2 + x[1] ** 2)

    problem = mw.Problem(objective=half, lower=[-1.0, -1.0], upper=[1.0, 1.0])
    solver = mw.PopulationAnnealing(betas=(0.0, 1.0, 1.0, 2.0), numsteps_for_T=(1, 1, 1, 1), n_replicas=64,
                                    step_width=(0.1, 0.1), resampling_interval=None)
    result = mw.solve(problem, solver, seed=0, progress=False)
    # at beta = 0 those walkers weigh as much as any (the mean there is not finite); from beta = 1 on
    # they weigh nothing, through the repeated beta too
    assert np.all(np.isfinite(result.statistics["mean"][1:])), result.statistics
    assert not np.any(np.isnan(result.logw))
