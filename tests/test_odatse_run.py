"""`multiwalk run input.toml` (ODAT-SE's exchange), mw.Exchange, discrete spaces, ODAT-SE's files.

Statistical tests use fixed seeds; each states its tolerance.  Tests that read our files with
ODAT-SE's own code are skipped when odat-se is not installed (it is not a dependency).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from odatse_inputs import ctrl_c_after_chunks, himmelblau_exchange, output_files, run_cli
from ulp import assert_close_ulp, assert_fields_close_ulp

import multiwalk as mw
from multiwalk.cli import main
from multiwalk.commands.run import InputError, build_setup, load_input
from multiwalk.functions import odatse as analytical
from multiwalk.io import odatse as odatse_io
from multiwalk.solvers.exchange import temperature_ladder
from multiwalk.spaces import Mesh, build_neighbor_list, read_mesh, read_neighbor_list

HIMMELBLAU = himmelblau_exchange(numsteps="{numsteps}")  # filled in by .format(numsteps=...)


def write_input(folder: Path, text: str, name: str = "input.toml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def text(path: Path) -> str:
    return path.read_text()


# ---------------------------------------------------------------------------- parsing
FULL = """
[base]
dimension = 2
output_dir = "out"
root_dir = "."

[algorithm]
name = "exchange"
seed = 7
seed_delta = 11
label_list = ["a", "b"]
checkpoint = true
checkpoint_steps = 50
checkpoint_interval = 30.0
checkpoint_file = "state.npz"

[algorithm.param]
min_list = [-1.0, -2.0]
max_list = [1.0, 2.0]
step_list = [0.1, 0.2]
initial_list = [[0.5, 0.5], [0.1, -0.1]]

[algorithm.exchange]
numsteps = 100
numsteps_exchange = 5
numsteps_thermalization = 20
bmin = 0.1
bmax = 2.0
Tlogspace = false
nreplica_per_proc = 3

[solver]
name = "analytical"
function_name = "quartics"

[runner]
[runner.log]
interval = 20
"""


def test_every_key_is_read(tmp_path):
    setup = build_setup(write_input(tmp_path, FULL))
    assert (setup.dimension, setup.algorithm, setup.labels, setup.seed) == (2, "exchange", ["a", "b"], 7)
    assert setup.output_dir == Path.cwd() / "out"  # root_dir "." is the working directory, as in ODAT-SE
    assert setup.checkpoint and setup.checkpoint_steps == 50 and setup.checkpoint_interval == 30.0
    assert setup.checkpoint_file.name == "state.npz" and setup.checkpoint_file.parent.name == "0"
    np.testing.assert_array_equal(setup.lower, [-1, -2])
    np.testing.assert_array_equal(setup.upper, [1, 2])
    np.testing.assert_array_equal(setup.step_list, [0.1, 0.2])
    np.testing.assert_array_equal(setup.initial, [[0.5, 0.5], [0.1, -0.1]])
    assert (setup.numsteps, setup.numsteps_exchange, setup.numsteps_thermalization) == (100, 5, 20)
    assert setup.nreplica_per_proc == 3 and setup.as_beta
    assert setup.tables["ladder"] == {"Tmin": None, "Tmax": None, "bmin": 0.1, "bmax": 2.0, "logspace": False}
    assert setup.function is analytical.quartics
    # the ladder: bmin..bmax linearly (Tlogspace = false), as ODAT-SE's read_Ts
    np.testing.assert_allclose(temperature_ladder(3, bmin=0.1, bmax=2.0, logspace=False), [0.1, 1.05, 2.0])
    np.testing.assert_allclose(temperature_ladder(3, Tmin=1.0, Tmax=100.0), [1.0, 0.1, 0.01])


def test_unit_list_is_read_as_step_list_with_a_warning(tmp_path):
    path = write_input(tmp_path, FULL.replace("step_list", "unit_list"))
    with pytest.warns(DeprecationWarning, match="unit_list is obsolete"):
        setup = build_setup(path)
    np.testing.assert_array_equal(setup.step_list, [0.1, 0.2])


BAD_INPUTS = [
    # (replace this, by this, a part of the message)
    ('dimension = 2\n', "dimension = 2\nsize = 3\n", "unknown key [base] size"),
    ('dimension = 2\n', 'dimension = "2"\n', "[base] dimension must be an integer"),
    ('dimension = 2\n', "", "[base] dimension is required"),
    ("seed = 7\n", "seed = 1.5\n", "[algorithm] seed must be an integer"),
    ("seed_delta = 11\n", "seed_delta = true\n", "[algorithm] seed_delta must be an integer"),
    ('label_list = ["a", "b"]', 'label_list = ["a"]', "label_list has 1 labels"),
    ("checkpoint = true", 'checkpoint = "yes"', "[algorithm] checkpoint must be true or false"),
    ("checkpoint_steps = 50", "checkpoint_steps = 0", "checkpoint_steps must be positive"),
    ("checkpoint_interval = 30.0", "checkpoint_interval = -1", "checkpoint_interval must be positive"),
    ('checkpoint_file = "state.npz"', "checkpoint_file = 3", "[algorithm] checkpoint_file must be a string"),
    ('name = "exchange"', 'name = "bayes"', "[algorithm] name = 'bayes'"),
    ('name = "exchange"\n', "", "[algorithm] name is required"),
    ("min_list = [-1.0, -2.0]\n", "", "[algorithm.param] min_list is required"),
    ("max_list = [1.0, 2.0]", "max_list = [1.0]", "max_list has 1 entries but [base] dimension = 2"),
    ("max_list = [1.0, 2.0]", "max_list = [-1.0, 2.0]", "min_list[0] = -1.0 is not below max_list[0]"),
    ("step_list = [0.1, 0.2]\n", "", "[algorithm.param] step_list is required"),
    ("step_list = [0.1, 0.2]", "step_list = [0.1, -0.2]", "step_list must be positive"),
    ("step_list = [0.1, 0.2]", 'step_list = ["a", 1]', "step_list must be a list of numbers"),
    ("initial_list = [[0.5, 0.5], [0.1, -0.1]]", "initial_list = [[0.5, 0.5, 1.0]]", "initial_list must be 2 numbers"),
    ("nreplica_per_proc = 3", "nreplica_per_proc = 1", "initial_list has 2 points but nreplica_per_proc = 1"),
    ("initial_list = [[0.5, 0.5], [0.1, -0.1]]", "initial_list = [[0.5, 0.5], [0.1, 2.0]]",
     "initial_list[1] = [0.1, 2.0] is outside the box: b = 2.0 is not in [-2.0, 2.0) (min_list[1], max_list[1])"),
    ("nreplica_per_proc = 3", "nreplica_per_proc = 0", "nreplica_per_proc must be at least 1"),
    ("min_list", 'mesh_path = "m.txt"\nmin_list', "min_list is for a continuous space"),
    ("min_list", 'neighborlist_path = "n.txt"\nmin_list', "neighborlist_path needs mesh_path"),
    ("numsteps = 100\n", "", "[algorithm.exchange] numsteps is required"),
    ("numsteps_exchange = 5\n", "", "[algorithm.exchange] numsteps_exchange is required"),
    ("numsteps = 100", "numsteps = 0", "numsteps must be at least 1"),
    ("numsteps_thermalization = 20", "numsteps_thermalization = -2", "numsteps_thermalization must be >= 0"),
    ("bmin = 0.1\n", "bmin = 0.1\nTmin = 1.0\nTmax = 2.0\n", "exactly one pair of Tmin/Tmax or bmin/bmax, not both"),
    ("bmin = 0.1\nbmax = 2.0\n", "", "exactly one pair of Tmin/Tmax or bmin/bmax"),
    ("bmax = 2.0\n", "", "bmin and bmax go together"),
    ("bmin = 0.1", "bmin = 3.0", "bmin=3.0 is above bmax=2.0"),
    ("Tlogspace = false", "Tlogspace = 1", "Tlogspace must be true or false"),
    ("Tlogspace = false", "Tlogspace = true\nseparate_T = 2", "separate_T must be true or false"),
    ("bmin = 0.1", "bmin = 0.0\nTlogspace_ = 1", "unknown key [algorithm.exchange] Tlogspace_"),
    ('function_name = "quartics"', 'function_name = "sphere"', "function_name = 'sphere' is not one of ODAT-SE"),
    ('name = "analytical"', 'name = "sim-trhepd-rheed"', "[solver] name = 'sim-trhepd-rheed'"),
    ('name = "analytical"', 'name = "python"', "[solver] function_name goes with name = \"analytical\""),
    ("interval = 20", "interval = 20\n[runner.mapping]\nA = 1", "[runner.mapping] A must be a matrix"),
    ("[base]", "[other]\nx = 1\n[base]", "unknown section [other]"),
]


@pytest.mark.parametrize("old,new,message", BAD_INPUTS)
def test_input_errors_name_the_key_and_the_file(tmp_path, old, new, message):
    assert old in FULL
    path = write_input(tmp_path, FULL.replace(old, new, 1))
    with pytest.raises(InputError) as err:
        build_setup(path)
    assert message in str(err.value)
    assert str(path) in str(err.value)


def test_more_input_errors(tmp_path):
    path = write_input(tmp_path, "[base\n")
    with pytest.raises(InputError, match="not valid TOML"):
        load_input(path)
    with pytest.raises(InputError, match="no such input file"):
        load_input(tmp_path / "missing.toml")
    path = write_input(tmp_path, FULL.replace('function_name = "quartics"', 'function_name = "himmelblau"')
                       .replace("dimension = 2", "dimension = 3").replace("[-1.0, -2.0]", "[-1.0, -2.0, 0.0]")
                       .replace("[1.0, 2.0]", "[1.0, 2.0, 1.0]").replace('["a", "b"]', '["a", "b", "c"]'))
    with pytest.raises(InputError, match="himmelblau needs \\[base\\] dimension = 2"):
        build_setup(path)
    path = write_input(tmp_path, FULL.replace("[algorithm.exchange]", "[algorithm.minimize]\nmaxiter = 3\n[algorithm.exchange]"))
    with pytest.raises(InputError, match="\\[algorithm.minimize\\] is for name = 'minsearch'"):
        build_setup(path)
    # the command turns these into a one-line error and exit status 2, before anything runs
    path = write_input(tmp_path, FULL.replace("seed = 7", "seed = -1"))
    assert run_cli(tmp_path, str(path)) == 2


# ---------------------------------------------------------------------------- mesh files
def test_mesh_and_neighbor_list_errors_name_file_and_line(tmp_path):
    mesh = tmp_path / "mesh.txt"
    mesh.write_text("# a mesh\n0 0.0 0.0\n1 1.0 0.0\n2 1.0 x\n")
    with pytest.raises(ValueError, match=f"{mesh}, line 4: 'x' is not a number"):
        read_mesh(mesh)
    mesh.write_text("0 0.0 0.0\n1 1.0\n")
    with pytest.raises(ValueError, match=f"{mesh}, line 2: 2 columns where the lines above have 3"):
        read_mesh(mesh)
    mesh.write_text("0 0.0 0.0\n1 1.0 0.0\n2 2.0 0.0\n")
    nn = tmp_path / "nn.txt"
    nn.write_text("0 1\n1 0 2\n2 1 3\n")
    with pytest.raises(ValueError, match=f"{nn}, line 3: node index 3 is outside 0..2"):
        read_neighbor_list(nn, 3)
    nn.write_text("0 1\n1 0\n2 1\n")
    with pytest.raises(ValueError, match=f"{nn}, line 3: node 2 lists 1 but node 1 \\(line 2\\) does not list 2"):
        read_neighbor_list(nn, 3)
    nn.write_text("0 1\n1 0\n")
    with pytest.raises(ValueError, match="1 of the 3 mesh points have no line"):
        read_neighbor_list(nn, 3)
    nn.write_text("0 1\n1 0\n2 2\n")
    with pytest.raises(ValueError, match="falls into 2 parts"):
        read_neighbor_list(nn, 3)
    nn.write_text("0 1\n1 0 2\n2 1\n")
    assert read_neighbor_list(nn, 3) == [[1], [0, 2], [1]]


BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe"  # the start of a binary file: byte 0x89 is not UTF-8


@pytest.mark.parametrize(
    "kind, content, message",
    [
        ("mesh", b"0 0.0 0.0\n" + BINARY, "{path}, line 2: not text (byte 0x89 at column 1 is not UTF-8)"),
        ("neighbour list", BINARY, "{path}, line 1: not text (byte 0x89 at column 1 is not UTF-8)"),
        ("input", b'[base]\ndimension = 2\noutput_dir = "\xff"\n', "{path}, line 3: not text (byte 0xff at column 15"),
        # a neighbour listed twice is a duplicate (its move would be drawn twice as often), not an asymmetry
        ("neighbour list", b"0 1\n1 0 2 2\n2 1\n", "{path}, line 2: node 1 lists neighbour 2 more than once"),
    ],
    ids=["binary mesh", "binary neighbour list", "binary input", "duplicate neighbour"],
)
def test_binary_files_and_duplicate_neighbours_name_file_and_line(tmp_path, kind, content, message):
    path = tmp_path / "file"
    path.write_bytes(content)
    read = {"mesh": read_mesh, "neighbour list": lambda p: read_neighbor_list(p, 3), "input": load_input}[kind]
    with pytest.raises(ValueError, match=re.escape(message.format(path=path))):  # InputError is a ValueError
        read(path)


def test_initial_points_outside_the_box_are_refused(tmp_path):
    """A start outside the box would stay there (exchange: every move from it is rejected;
    minsearch: f = inf there): refused, naming the key, the value and the box."""
    head, tail = FULL.replace('name = "exchange"', 'name = "minsearch"').split("[algorithm.exchange]")
    minsearch = head + "[solver]" + tail.split("[solver]")[1]
    path = write_input(tmp_path, minsearch.replace("[[0.5, 0.5], [0.1, -0.1]]", "[1.5, 0.0]"))
    with pytest.raises(InputError, match=re.escape("initial_list = [1.5, 0.0] is outside the box: a = 1.5 is not in "
                                                   "[-1.0, 1.0] (min_list[0], max_list[0])")):
        build_setup(path)
    problem = mw.Problem(objective=analytical.quadratics, lower=[-1, -1], upper=[1, 1])
    with pytest.raises(ValueError, match=re.escape("initial[0] = [0.0, 1.0] is outside the box: coordinate 1 = 1.0 "
                                                   "is not in [lower[1], upper[1]) = [-1.0, 1.0)")):
        mw.solve(problem, mw.Exchange(betas=(1.0, 0.5), numsteps=5, step_width=(0.1, 0.1), initial=((0.0, 1.0),)))


def test_checkpoints_by_default(tmp_path):
    """Without checkpoint keys a run writes its checkpoint every DEFAULT_CHECKPOINT_INTERVAL seconds;
    checkpoint_interval alone is used; checkpoint = false writes it only at the end, saying so."""
    from multiwalk.commands.run import DEFAULT_CHECKPOINT_INTERVAL

    plain = FULL.split("checkpoint = true")[0] + FULL.split('checkpoint_file = "state.npz"\n')[1]
    setup = build_setup(write_input(tmp_path, plain))
    assert setup.checkpoint and setup.checkpoint_steps is None and setup.checkpoint_interval == DEFAULT_CHECKPOINT_INTERVAL
    setup = build_setup(write_input(tmp_path, plain.replace('name = "exchange"', 'name = "exchange"\ncheckpoint_interval = 5')))
    assert setup.checkpoint and setup.checkpoint_interval == 5
    setup = build_setup(write_input(tmp_path, plain.replace('name = "exchange"', 'name = "exchange"\ncheckpoint = false\n'
                                                                                 "checkpoint_interval = 5")))
    assert not setup.checkpoint and any("checkpoint_interval not used" in note for note in setup.notes)


def test_neighborlist_command(tmp_path):
    rng = np.random.default_rng(3)
    pts = rng.uniform(0, 4, size=(300, 2))
    mesh = tmp_path / "mesh.txt"
    mesh.write_text("".join(f"{i + 1} {a} {b}\n" for i, (a, b) in enumerate(pts)))
    out = tmp_path / "nl.txt"
    assert main(["neighborlist", str(mesh), "-r", "0.6", "-o", str(out), "-u", "1.0 2.0", "-q"]) == 0
    lines = out.read_text().splitlines()
    assert lines[0] == "# radius = 0.6" and lines[1] == "# unit = 1.0 2.0"
    got = read_neighbor_list(out, 300)
    # brute force: all pairs within the radius of the scaled coordinates, self excluded, sorted
    scaled = pts / [1.0, 2.0]
    dist = np.linalg.norm(scaled[:, None] - scaled[None], axis=2)
    want = [[j for j in np.flatnonzero(row <= 0.6) if j != i] for i, row in enumerate(dist)]
    assert got == want
    try:
        from odatse.util.neighborlist import make_neighbor_list
    except ImportError:
        pass
    else:  # ODAT-SE's own tool gives the same lists
        assert make_neighbor_list(scaled, 0.6) == want
    # errors: exit status 2, nothing written
    bad = tmp_path / "bad.txt"
    assert main(["neighborlist", str(mesh), "-r", "0.01", "-o", str(bad), "-q"]) == 2
    assert not bad.exists()
    assert main(["neighborlist", str(mesh), "-r", "0.6", "-u", "1.0", "-o", str(bad), "-q"]) == 2


# ---------------------------------------------------------------------------- the sampler
def test_discrete_space_samples_the_boltzmann_weights(tmp_path):
    """A 4x4 grid (corner, edge and inner nodes have 2, 3, 4 neighbours): the visits of each
    temperature against exp(-f/T) normalised over the 16 nodes."""
    xs = np.array([(i, j) for i in range(4) for j in range(4)], dtype=float)
    (tmp_path / "mesh.txt").write_text("".join(f"{k + 1} {a} {b}\n" for k, (a, b) in enumerate(xs)))
    assert main(["neighborlist", str(tmp_path / "mesh.txt"), "-r", "1.0", "-o", str(tmp_path / "nl.txt"), "-q"]) == 0
    (tmp_path / "f.py").write_text(
        "import jax.numpy as jnp\n\ndef f(x):\n    return (x[0] - 1.2) ** 2 + 0.5 * (x[1] - 2.0) ** 2 + 0.3 * x[0] * x[1]\n"
    )
    numsteps = 20001
    write_input(tmp_path, f"""
        [base]
        dimension = 2
        [algorithm]
        name = "exchange"
        seed = 5
        [algorithm.param]
        mesh_path = "mesh.txt"
        neighborlist_path = "nl.txt"
        [algorithm.exchange]
        numsteps = {numsteps}
        numsteps_exchange = 5
        numsteps_thermalization = 1000
        Tmin = 0.5
        Tmax = 4.0
        nreplica_per_proc = 4
        [solver]
        name = "python"
        function = "f.py:f"
    """)
    assert run_cli(tmp_path, "input.toml") == 0
    f = (xs[:, 0] - 1.2) ** 2 + 0.5 * (xs[:, 1] - 2.0) ** 2 + 0.3 * xs[:, 0] * xs[:, 1]
    for t, temp in enumerate(1.0 / temperature_ladder(4, Tmin=0.5, Tmax=4.0)):
        header, rows = odatse_io.read_result_T(tmp_path / f"result_T{t}.txt")
        assert header == f"# T = {float(temp)!r}"
        rows = rows[rows[:, 0] >= 1000]
        node = np.rint(rows[:, 3]).astype(int) * 4 + np.rint(rows[:, 4]).astype(int)
        exact = np.exp(-(f - f.min()) / temp)
        exact /= exact.sum()
        # 20 blocks of 1000 steps: the block-to-block spread gives the standard error with the
        # chain's autocorrelation in it.  5 standard errors per node (+0.002 for nodes that are
        # almost never visited) leave a false alarm chance of ~1e-5 for the 64 comparisons,
        # while ODAT-SE 4.0.1's (n_old-1)/(n_new-1) correction (corner nodes weighted 1.5x against inner
        # ones) fails it: checked by putting that rule into the solver.
        blocks = np.array([np.bincount(b, minlength=16) / b.size for b in np.array_split(node, 20)])
        se = blocks.std(axis=0, ddof=1) / np.sqrt(20)
        freq = np.bincount(node, minlength=16) / node.size
        assert np.all(np.abs(freq - exact) <= 5 * se + 0.002), (t, freq.round(4), exact.round(4), se.round(4))


@pytest.fixture(scope="module")
def himmelblau_result():
    with jax.enable_x64(True):
        problem = mw.Problem(objective=analytical.himmelblau, lower=[-6, -6], upper=[6, 6])
        betas = temperature_ladder(16, Tmin=0.05, Tmax=20.0)
        solver = mw.Exchange(betas=tuple(betas), numsteps=1001, numsteps_exchange=10, step_width=(0.3, 0.3))
        return mw.solve(problem, solver, seed=0, progress=False)


def test_continuous_exchange_finds_all_four_himmelblau_minima(himmelblau_result):
    best_x = np.asarray(himmelblau_result.state.best_x)
    best_fx = np.asarray(himmelblau_result.state.best_fun)
    for m in np.array(analytical.HIMMELBLAU_MINIMA):
        near = np.linalg.norm(best_x - m, axis=1) < 0.1
        # some replica's best point lies within 0.1 of each minimum with f < 0.05: f is about
        # 100 * r^2 near the minima, so f < 0.05 means within ~0.02 of the exact point
        assert np.any(near & (best_fx < 0.05)), m
    assert himmelblau_result.fun < 0.01 and himmelblau_result.success
    assert himmelblau_result.stats["nonfinite"] == 0


def test_exchange_rejects_bad_options():
    with pytest.raises(ValueError, match="numsteps must be a positive integer"):
        mw.Exchange(betas=(1.0,), numsteps=0, step_width=(1.0,))
    with pytest.raises(ValueError, match="needs step_width"):
        mw.Exchange(betas=(1.0,), numsteps=5)
    with pytest.raises(ValueError, match="nreplica_per_proc=3 does not divide the 4 replicas"):
        mw.Exchange(betas=(1.0, 0.5, 0.2, 0.1), numsteps=5, step_width=(1.0,), nreplica_per_proc=3)
    with pytest.raises(TypeError, match="mesh must be a multiwalk.spaces.Mesh"):
        mw.Exchange(betas=(1.0,), numsteps=5, mesh="mesh.txt")
    with pytest.raises(ValueError, match="step_width has 1 entries but the problem has 2"):
        mw.solve(mw.Problem(objective=analytical.quadratics, lower=[-1, -1], upper=[1, 1]),
                 mw.Exchange(betas=(1.0,), numsteps=5, step_width=(1.0,)))
    with pytest.raises(ValueError, match="the neighbour list has 2 nodes but the mesh has 3"):
        Mesh(np.zeros((3, 1)), [[1], [0]])
    assert build_neighbor_list(np.array([[0.0], [1.0], [2.5]]), 1.0) == [[1], [0], []]


# ---------------------------------------------------------------------------- the files
@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """A run of 401 steps (4 replicas in 2 emulated processes), the reference of the resume tests."""
    folder = tmp_path_factory.mktemp("full")
    write_input(folder, HIMMELBLAU.format(numsteps=401).replace("nreplica_per_proc = 4", "nreplica_per_proc = 2"))
    assert run_cli(folder, "input.toml", "--nprocs", "2") == 0
    return folder


STEP_FILES = ["0/trial.txt", "0/result.txt", "1/trial.txt", "1/result.txt"] + [f"result_T{t}.txt" for t in range(4)]


def test_output_files_have_odatse_layout(full_run):
    out = full_run / "output"
    betas = temperature_ladder(4, Tmin=1.0, Tmax=100.0)
    tstr = [repr(float(1.0 / b)) for b in betas]
    rows_by_t = {t: [] for t in range(4)}
    for rank in (0, 1):
        for name in ("trial.txt", "result.txt"):
            lines = (out / str(rank) / name).read_text().splitlines()
            assert lines[0] == "# step walker T fx z1 z2"
            data = [ln.split() for ln in lines[1:]]
            assert len(data) == 401 * 2 and all(len(w) == 6 for w in data)
            assert [int(w[0]) for w in data] == [s for s in range(401) for _ in range(2)]
            assert [int(w[1]) for w in data] == [0, 1] * 401
            assert {w[2] for w in data} <= set(tstr)
            for w in data:
                assert all(repr(float(v)) == v for v in w[3:])  # shortest round-trip numbers, as ODAT-SE's
                if name == "result.txt":
                    rows_by_t[tstr.index(w[2])].append(f"{w[0]} {rank * 2 + int(w[1])} {' '.join(w[3:])}")
    for t in range(4):
        lines = (out / f"result_T{t}.txt").read_text().splitlines()
        assert lines[0] == f"# T = {tstr[t]}"
        assert lines[1:] == sorted(rows_by_t[t], key=lambda s: int(s.split()[0]))  # result.txt sorted by temperature
    best = dict(ln.split(" = ") for ln in (out / "best_result.txt").read_text().splitlines())
    assert list(best) == ["nprocs", "rank", "step", "walker", "fx", "z1", "z2"] and best["nprocs"] == "4"
    result_rows = [ln.split() for r in (0, 1) for ln in (out / str(r) / "result.txt").read_text().splitlines()[1:]]
    fx_all = np.array([float(w[3]) for w in result_rows])
    # best_result.txt's fx is f at the best point by the one-point program (value_at_point), the
    # logged values come from the batched program: differently compiled, so equal up to rounding.
    # Himmelblau's value there (~0.07) is a sum of squares of terms ~11 that cancel: counted in
    # the spacing of 11 (scale), a few ulp of those terms.
    assert_close_ulp(float(best["fx"]), fx_all.min(), 8, "best fx against the smallest logged fx", scale=11.0)
    fx_lines = (out / "fx.txt").read_text().splitlines()
    assert fx_lines[:6] == ["# $1: 1/T", "# $2: mean of f(x)", "# $3: standard error of f(x)",
                            "# $4: number of replicas [Not used for exchange MC]", "# $5: log(Z/Z0)", "# $6: acceptance ratio"]
    table = np.loadtxt(out / "fx.txt")
    assert table.shape == (4, 6)
    np.testing.assert_allclose(table[:, 0], np.sort(betas))  # hottest first
    assert table[0, 4] == 0.0 and np.all(table[:, 3] == 4)


def test_statistics_agree_with_odatse_reading_our_files(full_run):
    """ODAT-SE's own separateT and fx statistics, run on our result.txt files, give our files."""
    odatse_sep = pytest.importorskip("odatse.util.separateT")
    out = full_run / "output"
    copy = full_run / "copy"
    for r in (0, 1):
        (copy / str(r)).mkdir(parents=True, exist_ok=True)
        (copy / str(r) / "result.txt").write_text((out / str(r) / "result.txt").read_text())
    temps = 1.0 / temperature_ladder(4, Tmin=1.0, Tmax=100.0)
    # ODAT-SE's separateT on one process with all 4 replicas as walkers of rank 0 (our walker column is
    # global): concatenate the two processes' result.txt into one
    merged = ["# step walker T fx z1 z2"]
    rows = []
    for r in (0, 1):
        for ln in (out / str(r) / "result.txt").read_text().splitlines()[1:]:
            w = ln.split()
            rows.append((int(w[0]), r * 2 + int(w[1]), " ".join([w[0], str(r * 2 + int(w[1])), *w[2:]])))
    merged += [row for _, _, row in sorted(rows)]
    (copy / "0" / "result.txt").write_text("\n".join(merged) + "\n")
    odatse_sep.separateT(Ts=temps, nwalkers=4, output_dir=copy, comm=None, use_beta=False)
    for t in range(4):
        assert (copy / f"result_T{t}.txt").read_text() == (out / f"result_T{t}.txt").read_text()
    odatse_sep.calculate_statistics_from_separated_files(Ts=temps, output_dir=copy, thermalization_steps=40, comm=None)
    # ours accumulated on the device, ODAT-SE's read back from the text: equal to rounding (1e-9)
    np.testing.assert_allclose(np.loadtxt(out / "fx.txt"), np.loadtxt(copy / "fx.txt"), rtol=1e-9, atol=1e-12)


def test_continue_equals_one_long_run(full_run, tmp_path):
    """200 steps, then --cont to 401: the same files as one run of 401 steps (same seed)."""
    base = HIMMELBLAU.replace("nreplica_per_proc = 4", "nreplica_per_proc = 2").replace(
        "numsteps_exchange = 10", "numsteps_exchange = 10\nnumsteps_thermalization = 40")
    write_input(tmp_path, base.format(numsteps=200))
    assert run_cli(tmp_path, "input.toml", "--nprocs", "2") == 0
    assert run_cli(tmp_path, "input.toml", "--nprocs", "2", "--resume") == 2  # finished: --resume is refused
    assert run_cli(tmp_path, "input.toml", "--nprocs", "2", "--cont") == 2  # numsteps not larger
    write_input(tmp_path, base.format(numsteps=401))
    assert run_cli(tmp_path, "input.toml", "--nprocs", "2", "--cont") == 0
    for name in STEP_FILES + ["best_result.txt", "fx.txt"]:
        assert text(tmp_path / "output" / name) == text(full_run / "output" / name), name


def test_resume_after_interrupt_equals_one_run(full_run, tmp_path, monkeypatch):
    """Ctrl-C after the third chunk, then --resume: the same files as the uninterrupted run."""
    write_input(tmp_path, HIMMELBLAU.format(numsteps=401).replace("nreplica_per_proc = 4", "nreplica_per_proc = 2"))
    with ctrl_c_after_chunks(monkeypatch, 3) as calls:
        assert run_cli(tmp_path, "input.toml", "--nprocs", "2") == 130
    assert 0 < calls[-1] < 400
    # a stray line past the checkpoint (a crash between writing and checkpointing) is cut away
    with open(tmp_path / "output" / "0" / "trial.txt", "a") as fh:
        fh.write("399 0 1.0 0.0 0.0 0.0\n")
    assert run_cli(tmp_path, "input.toml", "--nprocs", "2", "--resume") == 0
    for name in STEP_FILES + ["best_result.txt", "fx.txt"]:
        assert text(tmp_path / "output" / name) == text(full_run / "output" / name), name
    # --reset-rand: a new random series from the checkpoint on (here: the end), so --cont differs
    write_input(tmp_path, HIMMELBLAU.format(numsteps=451).replace("nreplica_per_proc = 4", "nreplica_per_proc = 2"))
    assert run_cli(tmp_path, "input.toml", "--nprocs", "2", "--cont", "--reset-rand") == 0
    tail = (tmp_path / "output" / "0" / "trial.txt").read_text().splitlines()[-100:]
    assert all(int(ln.split()[0]) >= 401 for ln in tail) and len(tail) == 100


KILL_AFTER_CHUNKS = """
import os, signal, sys
from multiwalk.cli import main
from multiwalk.commands import run
from multiwalk.io import odatse

run.DEFAULT_CHECKPOINT_INTERVAL = 0.0  # the default interval, shortened: a checkpoint after every chunk
original, calls = odatse.StepWriter.on_steps, []

def on_steps(self, state, first, last):
    original(self, state, first, last)  # this chunk's lines go to the writer threads
    calls.append(last)
    if len(calls) == 5:
        os.kill(os.getpid(), signal.SIGKILL)

odatse.StepWriter.on_steps = on_steps
sys.exit(main(["run", "input.toml", "--nprocs", "2", "--no-progress"]))
"""


def test_resume_after_sigkill_equals_one_run(full_run, tmp_path):
    """A run with default checkpoint settings (the interval shortened) killed by SIGKILL in the middle
    of its 5th chunk leaves its last checkpoint; --resume then gives the files of the uninterrupted run."""
    write_input(tmp_path, HIMMELBLAU.format(numsteps=401).replace("nreplica_per_proc = 4", "nreplica_per_proc = 2"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", KILL_AFTER_CHUNKS], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    out = tmp_path / "output"
    assert (out / "0" / "checkpoint.npz").exists() and not (out / "fx.txt").exists()  # killed before the end
    assert run_cli(tmp_path, "input.toml", "--nprocs", "2", "--resume") == 0
    for name in STEP_FILES + ["best_result.txt", "fx.txt"]:
        assert text(out / name) == text(full_run / "output" / name), name


def _cut_last_lines(path: Path, k: int) -> None:
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-k]))


RESUME_REFUSALS = {
    # (what is changed in the input, or a function damaging the copy of the finished run; the message)
    "function_name": ('function_name = "himmelblau"', 'function_name = "rosenbrock"',
                      "objective ([solver] function_name/function): multiwalk.functions.odatse.himmelblau then, "
                      "multiwalk.functions.odatse.rosenbrock now"),
    "min_list": ("min_list = [-6.0, -6.0]", "min_list = [-5.0, -6.0]",
                 "lower ([algorithm.param] min_list): [-6.0, -6.0] then, [-5.0, -6.0] now"),
    "short step file": (lambda out: _cut_last_lines(out / "result_T2.txt", 3), None,
                        "result_T2.txt ends with step 397, walker"),
    "damaged checkpoint": (lambda out: (out / "0" / "checkpoint.npz").write_bytes(
        (out / "0" / "checkpoint.npz").read_bytes()[:-100]), None, "is not a multiwalk checkpoint, or it is damaged"),
}


@pytest.mark.parametrize("case", list(RESUME_REFUSALS))
def test_continuing_another_problem_or_damaged_files_is_refused(full_run, tmp_path, capsys, case):
    """--cont of the finished 401-step run, after changing the problem in the input or damaging its
    files: refused before anything runs, naming what changed or the file."""
    change, by, message = RESUME_REFUSALS[case]
    shutil.copytree(full_run / "output", tmp_path / "output")
    source = HIMMELBLAU.format(numsteps=451).replace("nreplica_per_proc = 4", "nreplica_per_proc = 2")
    if by is None:
        change(tmp_path / "output")
    else:
        assert change in source
        source = source.replace(change, by)
    write_input(tmp_path, source)
    before = output_files(tmp_path)
    assert run_cli(tmp_path, "input.toml", "--nprocs", "2", "--cont") == 2
    assert message in capsys.readouterr().err
    assert output_files(tmp_path) == before  # nothing was written


def test_continuing_with_another_count_of_processes_is_refused_naming_it(full_run, tmp_path, capsys):
    # the run was 2 x nreplica_per_proc (mpiexec -n 2, or --nprocs 2); --cont without either is 1 x
    shutil.copytree(full_run / "output", tmp_path / "output")
    write_input(tmp_path, HIMMELBLAU.format(numsteps=451).replace("nreplica_per_proc = 4", "nreplica_per_proc = 2"))
    assert run_cli(tmp_path, "input.toml", "--cont") == 2
    assert "holds 4 replicas, 2 x nreplica_per_proc = 2 (a run of 2 processes), but this run has 1 x 2: go on with " \
           "the same count, under mpiexec -n 2 or with --nprocs 2" in capsys.readouterr().err


def test_checkpoint_file_that_cannot_be_written_is_refused_first(tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    write_input(tmp_path, himmelblau_exchange(algorithm_extra=f'checkpoint_file = "{tmp_path / "a_file" / "ck.npz"}"'))
    assert run_cli(tmp_path, "input.toml") == 2
    assert "a_file/ck.npz' ([base] output_dir, [algorithm] checkpoint_file): its folder cannot be made" in capsys.readouterr().err
    assert not (tmp_path / "output").exists()  # refused before any file was written


def test_minsearch_and_pattern(tmp_path):
    minsearch = HIMMELBLAU.format(numsteps=10).replace('name = "exchange"', 'name = "minsearch"').replace(
        "[algorithm.exchange]", "[algorithm.minimize]\nxatol = 1e-8\nfatol = 1e-10\n[x]").split("[x]")[0]
    minsearch = minsearch.replace("step_list = [0.5, 0.5]", "initial_list = [2.5, 1.5]")
    write_input(tmp_path, minsearch)
    assert run_cli(tmp_path, "input.toml") == 0
    res = dict(ln.split(" = ") for ln in (tmp_path / "output" / "res.txt").read_text().splitlines())
    # Nelder-Mead from (2.5, 1.5) lands on Himmelblau's minimum (3, 2) to its tolerances
    assert float(res["fx"]) < 1e-8 and abs(float(res["z1"]) - 3) < 1e-4 and abs(float(res["z2"]) - 2) < 1e-4
    pattern = minsearch.replace('name = "minsearch"', 'name = "pattern"').replace(
        "[algorithm.minimize]\nxatol = 1e-8\nfatol = 1e-10", "[algorithm.pattern]\nn_walkers = 64\niterations = 30")
    write_input(tmp_path, pattern)
    assert run_cli(tmp_path, "input.toml") == 0
    res = dict(ln.split(" = ") for ln in (tmp_path / "output" / "res.txt").read_text().splitlines())
    assert float(res["fx"]) < 1e-3  # 64 pattern searches of 30 iterations reach one of the four zeros
    write_input(tmp_path, pattern.replace("n_walkers = 64", "n_walkers = -1"))
    assert run_cli(tmp_path, "input.toml") == 2
    # initial_list starts walker 0 (it was ignored): from Himmelblau's zero (3, 2) one iteration of
    # 4 walkers reports f = 0 exactly (random starts do not land on a zero)
    at_zero = pattern.replace("initial_list = [2.5, 1.5]", "initial_list = [3.0, 2.0]")
    write_input(tmp_path, at_zero.replace("n_walkers = 64\niterations = 30", "n_walkers = 4\niterations = 1"))
    assert run_cli(tmp_path, "input.toml") == 0
    res = dict(ln.split(" = ") for ln in (tmp_path / "output" / "res.txt").read_text().splitlines())
    assert float(res["fx"]) == 0.0


def test_minsearch_under_mpiexec_says_it_runs_one_start(tmp_path, monkeypatch, capsys):
    # rank 0 of mpiexec -n 2 as its launcher's variables say (mpich's): ODAT-SE would run a start a rank
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setenv("PMI_RANK", "0")
    minsearch = HIMMELBLAU.format(numsteps=10).replace('name = "exchange"', 'name = "minsearch"').replace(
        "[algorithm.exchange]", "[x]").split("[x]")[0].replace("step_list = [0.5, 0.5]", "initial_list = [2.5, 1.5]")
    write_input(tmp_path, minsearch)
    assert run_cli(tmp_path, "input.toml") == 0
    assert "note: under mpiexec -n 2 ODAT-SE's minsearch runs one Nelder-Mead a rank" in capsys.readouterr().err


LBFGS_IN_A_BOX = """
[base]
dimension = 2
output_dir = "output"
[solver]
name = "analytical"
function_name = "himmelblau"
[algorithm]
name = "lbfgs"
[algorithm.param]
min_list = [0.0, 0.0]
max_list = [2.0, 2.0]
initial_list = [1.0, 1.0]
"""


def test_lbfgs_honours_the_box_with_initial_list(tmp_path, capsys):
    write_input(tmp_path, LBFGS_IN_A_BOX)
    assert run_cli(tmp_path, "input.toml") == 0
    res = dict(ln.split(" = ") for ln in (tmp_path / "output" / "res.txt").read_text().splitlines())
    # Himmelblau's zeros are all outside [0, 2]^2; its lowest point in the box is the corner (2, 2),
    # f = 26, where L-BFGS-B puts both coordinates exactly on their bounds
    assert (float(res["x1"]), float(res["x2"]), float(res["fx"])) == (2.0, 2.0, 26.0)
    write_input(tmp_path, LBFGS_IN_A_BOX.replace("initial_list = [1.0, 1.0]", "initial_list = [3.0, 1.0]"))
    assert run_cli(tmp_path, "input.toml") == 2
    assert "initial_list = [3.0, 1.0] is outside the box: x1 = 3.0 is not in [0.0, 2.0]" in capsys.readouterr().err


# ---------------------------------------------------------------------------- fast writing, unroll
def test_step_file_numbers_are_spelled_as_repr():
    """polars' spelling of the step files' numbers (with repr for the values polars spells
    otherwise) is repr's, and reads back to the same double: random values over the whole
    range of doubles (random bit patterns, so subnormals and every exponent), and edge values."""
    rng = np.random.default_rng(0)
    edge = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.1125369292536007e-308, 1e-300, 1e300,
            1.7976931348623157e308, 1.0, -3.0, 2.0**53, 2.0**60, 123456789.0, 1e15, 1e16, 1e22, 1e23, 0.1, 0.3,
            1 / 3, 1e-4, 9.999999999999999e-5, 1e-5, 2e-5, -3.5e-7, 1e-10, 9.99e-11, 1e-11, np.inf, -np.inf, np.nan,
            *[10.0**k for k in range(-320, 309, 7)], *[np.nextafter(10.0**k, 0.0) for k in range(-300, 309, 7)]]
    values = np.concatenate([
        edge,
        rng.integers(0, 2**64, 20000, dtype=np.uint64).view(np.float64),  # includes NaNs of many payloads
        rng.normal(size=20000) * 5,
        np.exp(rng.uniform(-745, 709, 20000)) * rng.choice([-1, 1], 20000),
        rng.integers(-(10**6), 10**6, 2000).astype(float),
    ])
    got = odatse_io.number_strings(values)
    want = [repr(float(v)) for v in values.tolist()]
    assert got == want  # exactly: every spelling equal, so files equal those of repr
    back = np.array([float(s) for s in got])
    assert np.array_equal(back.view(np.uint64)[~np.isnan(values)], values.view(np.uint64)[~np.isnan(values)])


def _mesh_4x4() -> Mesh:
    xs = np.array([(i, j) for i in range(4) for j in range(4)], dtype=float)
    return Mesh(xs, build_neighbor_list(xs, 1.0))


@pytest.mark.parametrize("space", ["continuous", "mesh"])
def test_steps_per_loop_trip_do_not_change_the_run(space):
    """``unroll=3`` (3 steps per loop trip, their random numbers drawn at once) with chunks of
    7 steps (blocks cut by chunk ends, remainders run one at a time) equals one step per trip:
    every leaf of the state, statistics and the record of trials included; another compiled
    program, so decisions exactly and floats to 64 ulp (values below 1 in 1's ulp): an ulp of x
    where the two contract x + step_width * move differently, times |grad f| (~10 here) in f."""
    def f(x):
        return (x[0] - 1.2) ** 2 + 0.5 * (x[1] - 2.0) ** 2 + 0.3 * x[0] * x[1]

    with jax.enable_x64(True):
        if space == "mesh":
            problem = mw.Problem(objective=f, names=["a", "b"])
            kw = dict(mesh=_mesh_4x4())
        else:
            problem = mw.Problem(objective=f, lower=[-3, -3], upper=[4, 4])
            kw = dict(step_width=(0.4, 0.7))
        betas = tuple(temperature_ladder(6, Tmin=0.2, Tmax=5.0))
        states = []
        for unroll, chunk in ((1, None), (3, 7)):
            solver = mw.Exchange(betas=betas, numsteps=120, numsteps_exchange=3, numsteps_thermalization=10,
                                 record=16, max_chunk_steps=chunk, unroll=unroll, **kw)
            states.append(mw.solve(problem, solver, seed=3, progress=False).state)
    assert_fields_close_ulp(states[1], states[0], 64, scale=1.0)
    assert int(states[0].stat_n[0]) == 110  # statistics were accumulated (steps 10..119)
