"""ODAT-SE's input keys beyond the exchange's core (pbc_list, [runner.limitation], [runner.mapping],
export_combined_files, the mesh file's comments/delimiter/skiprows, [runner] ignore_error, an
integral float numsteps, [algorithm] dimension) and minsearch's files, through `multiwalk run`.

One exchange run and two minsearch runs compile anything; the rest checks the input only.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from odatse_inputs import run_cli

from multiwalk.commands.run import InputError, build_setup


def quadratics(y: np.ndarray) -> np.ndarray:
    """ODAT-SE's quadratics in float64 numpy, points on the last axis."""
    return np.sum(y * y, axis=-1)


def himmelblau(y: np.ndarray) -> np.ndarray:
    """ODAT-SE's himmelblau in float64 numpy, points on the last axis."""
    return (y[..., 0] ** 2 + y[..., 1] - 11.0) ** 2 + (y[..., 0] + y[..., 1] ** 2 - 7.0) ** 2


KEYS = """
[base]
dimension = 2
output_dir = "output"

[algorithm]
name = "exchange"
dimension = 3
seed = 5

[algorithm.param]
min_list = [0.0, -2.0, -2.0]
max_list = [1.0, 2.0, 2.0]
step_list = [0.4, 0.3, 0.3]
pbc_list = [true, false, false]

[algorithm.exchange]
Tmin = 0.5
Tmax = 5.0
numsteps = 40.0
numsteps_exchange = 4
nreplica_per_proc = 3
export_combined_files = true

[solver]
name = "analytical"
function_name = "quadratics"

[runner]
ignore_error = true

[runner.mapping]
A = '''
1 1 0
0 1 -1
'''
b = [[0.5], [-0.25]]

[runner.limitation]
co_a = [[0.0, 1.0, -1.0]]
co_b = [[0.5]]
"""


def write_input(folder: Path, text: str) -> Path:
    path = folder / "input.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_keys_are_read_with_odatse_meaning(tmp_path):
    setup = build_setup(write_input(tmp_path, KEYS))
    assert setup.dimension == 3 and setup.labels == ["x1", "x2", "x3"]  # [algorithm] dimension: the searched space
    assert setup.numsteps == 40 and isinstance(setup.numsteps, int)  # 40.0 read as 40
    assert setup.ignore_error is True and setup.export_combined_files is True
    np.testing.assert_array_equal(setup.periodic, [True, False, False])
    a, b = setup.mapping  # the text form of A, the column form of b
    np.testing.assert_array_equal(a, [[1, 1, 0], [0, 1, -1]])
    np.testing.assert_array_equal(b, [0.5, -0.25])
    co_a, co_b = setup.constraint
    np.testing.assert_array_equal(co_a, [[0, 1, -1]])
    np.testing.assert_array_equal(co_b, [0.5])
    # the function sees A x + b ([base] dimension = 2 values); rtol 1e-15: a sum of two squares in
    # float64 may round once differently
    x = np.array([0.25, 1.0, -0.5])
    with jax.enable_x64(True):
        np.testing.assert_allclose(float(setup.function(x)), quadratics(a @ x + b), rtol=1e-15)
    plain = build_setup(write_input(tmp_path, KEYS.split("[runner]")[0].replace("dimension = 3\n", "").replace(
        "[0.0, -2.0, -2.0]", "[0.0, -2.0]").replace("[1.0, 2.0, 2.0]", "[1.0, 2.0]").replace(
        "[0.4, 0.3, 0.3]", "[0.4, 0.3]").replace("[true, false, false]", "[true, false]")))
    assert plain.ignore_error is False and plain.mapping is None and plain.constraint is None


BAD = [
    # (replace this, by this, a part of the message)
    ("numsteps = 40.0", "numsteps = 40.5",
     "[algorithm.exchange] numsteps must be an integer (a whole number: 100 or 100.0), got 40.5"),
    ("[true, false, false]", "[true, false]", "pbc_list has 2 entries but [algorithm] dimension = 3"),
    ("[true, false, false]", "[1, 0, 0]", "[algorithm.param] pbc_list must be a list of true/false"),
    ("ignore_error = true", 'ignore_error = "yes"', "[runner] ignore_error must be true or false"),
    ("b = [[0.5], [-0.25]]", "b = [0.5, -0.25]", "a column is written [[b1], [b2], ...]"),
    ("b = [[0.5], [-0.25]]", "b = [[0.5]]", "[runner.mapping] b must be a column of 2 numbers (one per row of A)"),
    ("co_b = [[0.5]]", "", "[runner.limitation] needs both co_a and co_b"),
    ("co_a = [[0.0, 1.0, -1.0]]", "co_a = [[1.0, -1.0]]", "co_a has 2 columns but [algorithm] dimension = 3"),
    ("1 1 0\n0 1 -1", "1 1\n0 1", "[runner.mapping] A has 2 columns but [algorithm] dimension = 3"),
    ("1 1 0\n0 1 -1", "1 1 0\n0 1 x", "[runner.mapping] A: row 1 '0 1 x' is not numbers"),
    ("[runner.mapping]", "[runner.mapping_]\nA = 1\n[runner.mapping]", "unknown key [runner] mapping_"),
    ("[solver]", "[solver]\ndimension = 3", "A has 2 rows but [solver] dimension = 3"),
    ("pbc_list", 'skiprows = 1\npbc_list', "[algorithm.param] skiprows needs mesh_path"),
]


@pytest.mark.parametrize("old,new,message", BAD)
def test_bad_keys_say_why(tmp_path, old, new, message):
    assert old in KEYS
    path = write_input(tmp_path, KEYS.replace(old, new, 1))
    with pytest.raises(InputError) as err:
        build_setup(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_limitation_and_dimension_rules(tmp_path):
    """A limitation is refused where the walkers ignore it; [algorithm] dimension different from the
    function's needs the mapping; an initial point breaking the limitation is refused."""
    no_map = KEYS.split("[runner.mapping]")[0] + "[runner.limitation]" + KEYS.split("[runner.limitation]")[1]
    with pytest.raises(InputError, match=r"\[base\] dimension = 2 differs from the algorithm's dimension = 3"):
        build_setup(write_input(tmp_path, no_map))
    tempering = KEYS.replace('name = "exchange"', 'name = "tempering"').split("[algorithm.exchange]")[0] + "[solver]" + \
        KEYS.split("[solver]")[1]
    with pytest.raises(InputError, match=r"\[runner.limitation\] is supported for exchange and pamc .* not 'tempering'"):
        build_setup(write_input(tmp_path, tempering))
    pattern = KEYS.replace('name = "exchange"', 'name = "pattern"').split("[algorithm.exchange]")[0] + "[solver]" + \
        KEYS.split("[solver]")[1].split("[runner.limitation]")[0]
    with pytest.raises(InputError, match="pbc_list is for exchange, tempering and pamc .* pattern does not wrap"):
        build_setup(write_input(tmp_path, pattern))
    with pytest.raises(InputError, match=r"initial_list = \[0.5, 0.0, 1.0\] violates \[runner.limitation\]"):
        build_setup(write_input(tmp_path, KEYS.replace("pbc_list", "initial_list = [0.5, 0.0, 1.0]\npbc_list")))


def test_mesh_file_comments_delimiter_skiprows(tmp_path, monkeypatch):
    """The mesh file is read as ODAT-SE reads it: numpy.loadtxt(comments, delimiter, skiprows), index column dropped."""
    mesh = tmp_path / "mesh.csv"
    mesh.write_text("header line 1\nheader, line 2\n0, 0.0, 0.0 % first\n% a comment\n1, 1.0, 0.0\n2, 1.0, 1.5\n")
    text = KEYS.split("[algorithm.param]")[0].replace("dimension = 3\n", "") + textwrap.dedent("""
        [algorithm.param]
        mesh_path = "mesh.csv"
        radius = 1.6
        comments = "%"
        delimiter = ","
        skiprows = 2
        [algorithm.exchange]
        Tmin = 0.5
        Tmax = 5.0
        numsteps = 10
        numsteps_exchange = 2
        [solver]
        name = "analytical"
        function_name = "quadratics"
        """)
    monkeypatch.chdir(tmp_path)  # root_dir "." is the working directory
    setup = build_setup(write_input(tmp_path, text))
    expected = np.loadtxt(mesh, comments="%", delimiter=",", skiprows=2)[:, 1:]
    np.testing.assert_array_equal(setup.mesh.coordinates, expected)
    with pytest.raises(InputError, match="delimiter = ',' is also the comment mark"):
        build_setup(write_input(tmp_path, text.replace('comments = "%"', 'comments = ","')))


def test_mapper_reads_the_mesh_file_with_its_format(tmp_path, monkeypatch):
    """The mapper's mesh file is read with comments, delimiter and skiprows too (ODAT-SE's MeshGrid
    reads them for the mapper); without mesh_path they are refused.  Input only: nothing compiles."""
    from multiwalk.commands.run_pamc import mapper_points

    mesh = tmp_path / "mesh.csv"
    mesh.write_text("9, 9.0, 9.0\n0, 0.0, 0.5 % first\n% a comment\n1, 1.0, 0.0\n")
    text = textwrap.dedent("""
        [base]
        dimension = 2
        [algorithm]
        name = "mapper"
        [algorithm.param]
        mesh_path = "mesh.csv"
        comments = "%"
        delimiter = ","
        skiprows = 1
        [solver]
        name = "analytical"
        function_name = "quadratics"
        """)
    monkeypatch.chdir(tmp_path)  # root_dir "." is the working directory
    path = write_input(tmp_path, text)
    setup = build_setup(path)
    points = mapper_points(path, setup_param(path), 2, setup.root_dir)
    # exact: the file's numbers, read as numpy.loadtxt reads them (the first row skipped)
    np.testing.assert_array_equal(points, np.loadtxt(mesh, comments="%", delimiter=",", skiprows=1)[:, 1:])
    with pytest.raises(InputError, match="delimiter = ',' is also the comment mark"):
        build_setup(write_input(tmp_path, text.replace('comments = "%"', 'comments = ","')))
    grid = text.replace('mesh_path = "mesh.csv"', "min_list = [0.0, 0.0]\nmax_list = [1.0, 1.0]\nnum_list = [2, 2]")
    with pytest.raises(InputError, match=r"\[algorithm.param\] comments needs mesh_path"):
        build_setup(write_input(tmp_path, grid))


def setup_param(path: Path) -> dict:
    """[algorithm.param] of the input file at ``path``."""
    from multiwalk.commands.run import load_input

    return load_input(path)["algorithm"]["param"]


@pytest.fixture(scope="module")
def exchange_run(tmp_path_factory) -> Path:
    """KEYS run by `multiwalk run` (the one compiled exchange of this file): its folder."""
    folder = tmp_path_factory.mktemp("keys")
    write_input(folder, KEYS)
    assert run_cli(folder, "input.toml") == 0
    return folder


def test_exchange_with_the_keys(exchange_run):
    out = exchange_run / "output"
    lines = (out / "0" / "combined.txt").read_text().splitlines()
    # export_combined_files: ODAT-SE's combined.txt (both headers, then per step the 3 trial and the 3
    # result lines, tagged), trial.txt and result.txt merged away, no result_T files
    assert lines[:2] == ["<trial.txt> # step walker T fx x1 x2 x3", "<result.txt> # step walker T fx x1 x2 x3"]
    assert len(lines) == 2 + 40 * 6
    tags = [ln.split()[0] for ln in lines[2:]]
    assert tags == (["<trial.txt>"] * 3 + ["<result.txt>"] * 3) * 40
    assert not list(out.glob("0/trial.txt")) + list(out.glob("0/result.txt")) + list(out.glob("result_T*"))
    rows = {tag: np.array([ln.split()[1:] for ln in lines[2:] if ln.startswith(tag)], dtype=float)
            for tag in ("<trial.txt>", "<result.txt>")}
    trial, result = rows["<trial.txt>"], rows["<result.txt>"]
    assert np.array_equal(trial[:, 0], np.repeat(np.arange(40), 3))
    # pbc_list: x1 wraps into [0, 1), so no proposal leaves its box; x2 and x3 do leave theirs
    assert np.all((trial[:, 4] >= 0) & (trial[:, 4] < 1))
    outside = np.any((trial[:, 5:] < -2) | (trial[:, 5:] >= 2), axis=1)
    assert outside.any()
    # [runner.limitation]: x2 - x3 + 0.5 > 0 for every state; a proposal breaking it is rejected, f = inf
    breaks = trial[:, 5] - trial[:, 6] + 0.5 <= 0
    assert breaks.any() and np.all(np.isinf(trial[breaks | outside, 3]))
    assert np.all(result[:, 5] - result[:, 6] + 0.5 > 0) and np.all(np.isfinite(result[:, 3]))
    # [runner.mapping]: f is quadratics(A x + b); rtol 1e-14: XLA and numpy may round the sums differently
    a, b = np.array([[1, 1, 0], [0, 1, -1]]), np.array([0.5, -0.25])
    np.testing.assert_allclose(result[:, 3], quadratics(result[:, 4:] @ a.T + b), rtol=1e-14)


def test_cont_after_combined_files_is_refused(exchange_run):
    """--cont cannot extend step files merged into combined.txt: refused (exit 2) before anything runs."""
    (exchange_run / "input.toml").write_text(textwrap.dedent(KEYS).replace("numsteps = 40.0", "numsteps = 80"))
    before = (exchange_run / "output" / "0" / "combined.txt").read_bytes()
    assert run_cli(exchange_run, "input.toml", "--cont") == 2
    assert (exchange_run / "output" / "0" / "combined.txt").read_bytes() == before


MINSEARCH = """
[base]
dimension = 2
output_dir = "output"

[algorithm]
name = "minsearch"
seed = 12345
label_list = ["z1", "z2"]

[algorithm.param]
min_list = [-6.0, -6.0]
max_list = [6.0, 6.0]

[algorithm.minimize]
xatol = 1e-6
fatol = 1e-8

[solver]
name = "analytical"
function_name = "himmelblau"
"""


def _table(path: Path) -> tuple[str, np.ndarray]:
    lines = path.read_text().splitlines()
    return lines[0], np.array([ln.split() for ln in lines[1:]], dtype=float)


def test_minsearch_files_as_odatse(tmp_path):
    """The files of ODAT-SE's minsearch, compared with those ODAT-SE's min_search.py wrote on
    this input (ODAT-SE 3.2.1; seed 12345: its start is RandomState(12345)'s draw in the box)."""
    write_input(tmp_path, MINSEARCH)
    assert run_cli(tmp_path, "input.toml") == 0
    out = tmp_path / "output"
    head, simplex = _table(out / "0" / "SimplexData.txt")
    assert head == "#step z1 z2 R-factor"
    head, calls = _table(out / "0" / "History_FunctionCall.txt")
    assert head == "#No z1 z2"
    res = (out / "0" / "res.txt").read_text().splitlines()
    assert [ln.split(" = ")[0] for ln in res] == ["fx", "z1", "z2", "iterations", "function_evaluations"]
    assert res[3:] == ["iterations = 50", "function_evaluations = 98"]  # ODAT-SE's numbers on this input
    assert (out / "res.txt").read_text().splitlines() == res[:3]  # the best point, as ODAT-SE's _post
    # ODAT-SE's first rows: the points bit for bit (the same scipy steps), f to 1e-12 relative (rounding of f)
    odatse_calls = [[1, 5.155393113805774, -2.203493345018569, 187.94429125133564],
                    [2, 5.405393113805774, -2.203493345018569, 267.1058826739146],
                    [3, 5.155393113805774, -1.9534933450185692, 189.51623935127608]]
    np.testing.assert_array_equal(calls[:3, :3], np.array(odatse_calls)[:, :3])
    np.testing.assert_allclose(calls[:3, 3], np.array(odatse_calls)[:, 3], rtol=1e-12)
    assert len(simplex) == 50 and len(calls) == 98  # as ODAT-SE's files: every call was inside the box
    np.testing.assert_array_equal(simplex[:, 0], np.arange(50))
    np.testing.assert_array_equal(calls[:, 0], np.arange(1, 99))
    np.testing.assert_array_equal(simplex[0, 1:3], -6 + 12 * np.random.RandomState(12345).rand(1, 2)[0])


def test_minsearch_limitation_and_mapping(tmp_path):
    """With [runner.limitation] the search never evaluates outside it (ODAT-SE: f = inf there without
    a call); with [runner.mapping] the function is evaluated at A x + b."""
    text = MINSEARCH + "\n[runner.limitation]\nco_a = [[-1.0, 0.0]]\nco_b = [[2.5]]\n"  # z1 < 2.5
    text += "[runner.mapping]\nA = [[2.0, 0.0], [0.0, 1.0]]\nb = [[0.0], [0.0]]\n"  # f(2 z1, z2)
    # the start's simplex has the vertex (2.3 + 0.25, 2.0), outside z1 < 2.5
    write_input(tmp_path, text.replace("max_list = [6.0, 6.0]", "max_list = [6.0, 6.0]\ninitial_list = [2.3, 2.0]"))
    assert run_cli(tmp_path, "input.toml") == 0
    _, calls = _table(tmp_path / "output" / "0" / "History_FunctionCall.txt")
    evaluations = int((tmp_path / "output" / "0" / "res.txt").read_text().split("function_evaluations = ")[1])
    assert np.all(calls[:, 1] < 2.5) and evaluations > len(calls)  # scipy's calls outside: inf, not evaluated
    # f = himmelblau(2 z1, z2): rounding only, ~1e-15 of the terms (|terms| < 1e3 here) near f = 0
    np.testing.assert_allclose(calls[:, 3], himmelblau(calls[:, 1:3] * [2.0, 1.0]), rtol=1e-12, atol=1e-12)
    res = dict(ln.split(" = ") for ln in (tmp_path / "output" / "res.txt").read_text().splitlines())
    # a zero of himmelblau(2 z1, z2) inside z1 < 2.5 (all four are), to fatol = 1e-8
    assert float(res["fx"]) < 1e-8 and float(res["z1"]) < 2.5
