"""The mapper (ODAT-SE's grid search): every mesh point's value from Python (``mw.Mapper``) and
from ``multiwalk run`` (ColorMap.txt, byte for byte as ODAT-SE formats it), chunks, Ctrl-C and
resume, bad input."""

from __future__ import annotations

import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from odatse_inputs import run_cli

import multiwalk as mw

N_POINTS, BATCH = 51, 16  # 4 batches, the last padded with 13 copies of the last point


def himmelblau_cut(x):
    """Himmelblau's function, NaN where x1 > 5 (a region where the simulation fails)."""
    f = (x[0] ** 2 + x[1] - 11) ** 2 + (x[0] + x[1] ** 2 - 7) ** 2
    return jnp.where(x[0] > 5.0, jnp.nan, f)


def numpy_himmelblau(p):
    return (p[:, 0] ** 2 + p[:, 1] - 11) ** 2 + (p[:, 0] + p[:, 1] ** 2 - 7) ** 2


@pytest.fixture(scope="module")
def mesh_run(tmp_path_factory):
    """A mesh file of 51 random points in [-6, 6]^2, mapped in batches of 16, whole and in chunks."""
    folder = tmp_path_factory.mktemp("mesh")
    points = np.random.default_rng(5).uniform(-6.0, 6.0, (N_POINTS, 2))
    lines = ["# index x1 x2"] + [f"{i} {a!r} {b!r}" for i, (a, b) in enumerate(points.tolist())]
    (folder / "mesh.txt").write_text("\n".join(lines) + "\n")
    with jax.enable_x64(True):
        problem = mw.Problem(objective=himmelblau_cut, names=["x1", "x2"])
        mapper = mw.Mapper.from_mesh_file(folder / "mesh.txt", batch_size=BATCH)
        whole = mw.solve(problem, mapper)
        chunked = mw.solve(problem, mapper, chunk_seconds=1e-9)
    return problem, mapper, points, whole, chunked, folder


def test_every_point_and_the_best(mesh_run):
    _, _, points, result, _, _ = mesh_run
    expected = np.where(points[:, 0] > 5.0, np.nan, numpy_himmelblau(points))
    assert result.success and result.n_evaluated == N_POINTS and result.funs.shape == (N_POINTS,)
    np.testing.assert_array_equal(result.points, points)
    # the same float64 arithmetic, maybe in another order: a few ulps of values up to ~1e3
    np.testing.assert_allclose(result.funs, expected, rtol=1e-13, atol=1e-12)
    n_nan = int(np.sum(np.isnan(expected)))
    assert n_nan > 0 and result.stats["nonfinite"] == n_nan  # the padding's copies are not counted
    best = int(np.nanargmin(expected))
    assert result.best_index == best and np.array_equal(result.x, points[best])
    assert result.fun == pytest.approx(expected[best], rel=1e-13)


def test_chunks_do_not_change_the_map(mesh_run):
    _, _, _, whole, chunked, _ = mesh_run
    assert chunked.stats["chunks"] > whole.stats["chunks"]
    np.testing.assert_array_equal(chunked.funs, whole.funs)
    assert chunked.best_index == whole.best_index


def test_ctrl_c_keeps_the_points_done_and_resume_finishes(mesh_run):
    problem, mapper, _, whole, _, folder = mesh_run

    class CtrlCAfterFirstChunk:
        def write(self, problem, state, first, last):  # noqa: ANN001, ANN202
            os.kill(os.getpid(), signal.SIGINT)

        def flush(self):  # noqa: ANN202
            pass

    ckpt = folder / "map.npz"
    with jax.enable_x64(True):
        cut = mw.solve(problem, mapper, chunk_seconds=1e-9, checkpoint=ckpt, writer=CtrlCAfterFirstChunk())
        assert cut.status == mw.Status.INTERRUPTED and 0 < cut.n_evaluated < N_POINTS
        assert f"{cut.n_evaluated} of {N_POINTS} points evaluated" in cut.message
        np.testing.assert_array_equal(cut.funs[: cut.n_evaluated], whole.funs[: cut.n_evaluated])
        assert np.all(np.isnan(cut.funs[cut.n_evaluated:]))
        resumed = mw.solve(problem, mapper, resume=ckpt)
    assert resumed.success
    np.testing.assert_array_equal(resumed.funs, whole.funs)


def test_bad_input():
    with pytest.raises(ValueError, match=r"points\[1\] = \[nan, 0.0\] has a coordinate that is not finite"):
        mw.Mapper(points=[[1.0, 2.0], [np.nan, 0.0]])
    with pytest.raises(ValueError, match=r"points must be an \(M, d\) array .* got shape \(0, 2\)"):
        mw.Mapper(points=np.zeros((0, 2)))
    with pytest.raises(ValueError, match=r"batch_size must be a positive integer or None \(points evaluated per step\), got 0"):
        mw.Mapper(points=[[1.0, 2.0]], batch_size=0)
    with pytest.raises(ValueError, match="num must be positive integers"):
        mw.Mapper.grid([0.0, 0.0], [1.0, 1.0], [3, 0])
    problem = mw.Problem(objective=lambda x: jnp.sum(x**2), lower=[-1.0] * 3, upper=[1.0] * 3)
    with pytest.raises(ValueError, match="points have 2 coordinates each but the problem has 3 parameters"):
        mw.solve(problem, mw.Mapper(points=[[1.0, 2.0]]))


MAPPER_INPUT = """
[base]
dimension = 2
output_dir = "output"
[solver]
name = "analytical"
function_name = "himmelblau"
[algorithm]
name = "mapper"
[algorithm.param]
min_list = [-6.0, -5.0]
max_list = [6.0, 5.0]
num_list = [4, 3]
"""


def test_run_writes_odatse_colormap_byte_for_byte(tmp_path):
    """ODAT-SE's layout (mapper_mpi_base.py): ``%8f`` columns; in folder 0 the header and the
    minimum; at the top every point's line.  The grid's values are integers, exact in any order."""
    (tmp_path / "input.toml").write_text(MAPPER_INPUT)
    assert run_cli(tmp_path, "input.toml") == 0
    x1, x2 = np.meshgrid(np.linspace(-6, 6, 4), np.linspace(-5, 5, 3), indexing="xy")
    points = np.stack([x1.ravel(), x2.ravel()], 1)  # the first coordinate varies fastest
    f = numpy_himmelblau(points)
    rows = [" ".join(f"{v:8f}" for v in (*p, v)) for p, v in zip(points.tolist(), f.tolist())]
    best = int(np.argmin(f))
    tail = ["#Minimum point : " + " ".join(f"{v:8f}" for v in points[best]), f"#R-factor : {f[best]:8f}", f"#see Log{best}"]
    assert (tmp_path / "output" / "ColorMap.txt").read_text() == "\n".join(rows) + "\n"
    assert (tmp_path / "output" / "0" / "ColorMap.txt").read_text() == "\n".join(["#x1 x2 fval", *rows, *tail]) + "\n"


def test_run_resumes_from_its_checkpoint_and_refuses_nprocs(tmp_path, capsys):
    (tmp_path / "input.toml").write_text(MAPPER_INPUT)
    assert run_cli(tmp_path, "input.toml") == 0
    first = (tmp_path / "output" / "0" / "ColorMap.txt").read_bytes()
    assert (tmp_path / "output" / "0" / "checkpoint.npz").exists()  # [algorithm] checkpoint's default: on
    assert run_cli(tmp_path, "input.toml", "--resume") == 0  # the finished map, read back
    assert (tmp_path / "output" / "0" / "ColorMap.txt").read_bytes() == first
    (tmp_path / "input.toml").write_text(MAPPER_INPUT.replace("himmelblau", "ackley"))
    capsys.readouterr()
    assert run_cli(tmp_path, "input.toml", "--resume") == 2  # the checkpoint is read: another problem's
    assert "checkpoint.npz was written for another problem" in capsys.readouterr().err
    assert run_cli(tmp_path, "input.toml", "--nprocs", "2") == 2
    assert "--nprocs is not used by the mapper" in capsys.readouterr().err
