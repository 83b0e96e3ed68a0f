"""``multiwalk run input.toml [--resume | --cont] [--reset-rand]``: ODAT-SE's input files, run by multiwalk.

The input is ODAT-SE's TOML (``[base]``, ``[algorithm]``, ``[algorithm.param]``,
``[algorithm.exchange]``, ``[solver]``); the output files are ODAT-SE's (see
:mod:`multiwalk.io.odatse`).  ``algorithm.name``:

* ``"exchange"``: ODAT-SE's replica-exchange Monte Carlo, :class:`multiwalk.Exchange`, every
  replica at once; ``--nprocs P`` stands for ``mpiexec -np P`` (P x nreplica_per_proc replicas,
  output folders 0 .. P-1), and a plain ``mpiexec -n N multiwalk run`` is such a run of P = N
  (pamc's too).  ``--distributed`` runs it over several processes (hosts) through
  ``jax.distributed``: P is then the number of processes, the replicas are split over every
  process's devices, and process 0 writes the files.
* ``"minsearch"``: ODAT-SE's Nelder-Mead (scipy), ``[algorithm.minimize]``, with its files
  SimplexData.txt, History_FunctionCall.txt and res.txt (:mod:`multiwalk.commands.run_minsearch`).
* ``"pattern"``, ``"lbfgs"``, ``"tempering"``: :class:`multiwalk.PatternSearch`,
  :class:`multiwalk.LBFGS`, :class:`multiwalk.ReplicaExchange` (cuda_mcmc's MCMC, which samples
  exp(-beta f / 2)), in the box min_list..max_list; the keys of ``[algorithm.<name>]`` are the
  solver's constructor arguments.  They write ``res.txt`` (``fx = ...`` and the coordinates).

Every key is checked before anything runs: an unknown key, a wrong type or a missing required
key is an error naming the key and the file.  ``[runner.mapping]`` (f evaluated at ``A x + b``),
``[runner.limitation]`` (``co_a x + co_b > 0``), ``pbc_list``, ``export_combined_files``, the
mesh file's ``comments``/``delimiter``/``skiprows``, ``[runner] ignore_error`` and
``[algorithm] dimension`` have ODAT-SE's meanings (docs/odatse.md, "ODAT-SE's keys").
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import math
import os
import sys
import time
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import _multiwalk_launch

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_CHECKPOINT_INTERVAL = 60.0  # seconds of wall time between checkpoints when the input names none

ALGORITHMS = ("exchange", "minsearch", "pattern", "lbfgs", "tempering", "pamc", "mapper")


class InputError(ValueError):
    """A problem with the input file; the message names the file and the key."""


# ---------------------------------------------------------------------------- the schema
_INT, _NUM, _STR, _BOOL, _NUMS, _STRS, _TABLE, _NUMS2, _BOOLS, _MATRIX = (
    "an integer", "a number", "a string", "true or false", "a list of numbers", "a list of strings",
    "a table", "a list of numbers or a list of such lists", "a list of true/false",
    "a matrix (a list of rows of numbers, or text with one row of numbers per line)",
)

SCHEMA: dict[str, dict[str, str]] = {
    "base": {"dimension": _INT, "output_dir": _STR, "root_dir": _STR},
    "algorithm": {
        "name": _STR, "dimension": _INT, "seed": _INT, "seed_delta": _INT, "label_list": _STRS, "checkpoint": _BOOL,
        "checkpoint_steps": _INT, "checkpoint_interval": _NUM, "checkpoint_file": _STR,
        "param": _TABLE, "exchange": _TABLE, "minimize": _TABLE, "pattern": _TABLE, "lbfgs": _TABLE,
        "tempering": _TABLE, "pamc": _TABLE, "colormap": _STR,  # [algorithm.pamc]: commands/run_pamc.py checks it
    },
    "algorithm.param": {
        "min_list": _NUMS, "max_list": _NUMS, "step_list": _NUMS, "unit_list": _NUMS, "initial_list": _NUMS2,
        "mesh_path": _STR, "neighborlist_path": _STR, "radius": _NUM, "num_list": _NUMS, "pbc_list": _BOOLS,
        "comments": _STR, "delimiter": _STR, "skiprows": _INT,
    },
    "algorithm.exchange": {
        "numsteps": _INT, "numsteps_exchange": _INT, "numsteps_thermalization": _INT, "Tmin": _NUM, "Tmax": _NUM,
        "bmin": _NUM, "bmax": _NUM, "Tlogspace": _BOOL, "nreplica_per_proc": _INT, "separate_T": _BOOL,
        "export_combined_files": _BOOL,
    },
    "algorithm.minimize": {
        "method": _STR, "initial_scale_list": _NUMS, "xatol": _NUM, "fatol": _NUM, "maxiter": _INT, "maxfev": _INT,
        "adaptive": _BOOL,
    },
    "solver": {"name": _STR, "function_name": _STR, "function": _STR, "dimension": _INT, "backend": _STR,
               "vectorized": _BOOL},
    "runner": {"log": _TABLE, "ignore_error": _BOOL, "mapping": _TABLE, "limitation": _TABLE},
    "runner.log": {"interval": _INT},
    "runner.mapping": {"A": _MATRIX, "b": _MATRIX},
    "runner.limitation": {"co_a": _MATRIX, "co_b": _MATRIX},
}
TOP = ("base", "algorithm", "solver", "runner")
# [algorithm.pattern], [algorithm.lbfgs] and [algorithm.tempering] have no entry: their keys are a
# multiwalk solver's constructor arguments (setup.tables), checked by the constructor.


def _type_ok(kind: str, v: Any) -> bool:
    is_num = isinstance(v, (int, float)) and not isinstance(v, bool)
    if kind == _INT:
        return isinstance(v, int) and not isinstance(v, bool)
    if kind == _NUM:
        return is_num
    if kind == _STR:
        return isinstance(v, str)
    if kind == _BOOL:
        return isinstance(v, bool)
    if kind == _NUMS:
        return isinstance(v, list) and all(isinstance(e, (int, float)) and not isinstance(e, bool) for e in v)
    if kind == _STRS:
        return isinstance(v, list) and all(isinstance(e, str) for e in v)
    if kind == _TABLE:
        return isinstance(v, dict)
    if kind == _NUMS2:
        return _type_ok(_NUMS, v) or (isinstance(v, list) and all(_type_ok(_NUMS, e) for e in v))
    if kind == _BOOLS:
        return isinstance(v, list) and all(isinstance(e, bool) for e in v)
    if kind == _MATRIX:
        return isinstance(v, str) or (isinstance(v, list) and all(_type_ok(_NUMS, e) for e in v))
    raise AssertionError(kind)


def _check_table(path: Path, name: str, table: dict[str, Any]) -> None:
    allowed = SCHEMA[name]
    for key, value in table.items():
        full = f"[{name}] {key}"
        if key not in allowed:
            raise InputError(f"{path}: unknown key {full}; allowed in [{name}]: {', '.join(sorted(allowed))}")
        if allowed[key] == _INT and isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
            table[key] = value = int(value)  # ODAT-SE reads numsteps = 100.0 as 100
        if not _type_ok(allowed[key], value):
            whole = " (a whole number: 100 or 100.0)" if allowed[key] == _INT and isinstance(value, float) else ""
            if allowed[key] == _MATRIX and _type_ok(_NUMS, value):
                whole = " (a column is written [[b1], [b2], ...], as in ODAT-SE)"
            raise InputError(f"{path}: {full} must be {allowed[key]}{whole}, got {value!r}")
        sub = f"{name}.{key}"
        if allowed[key] == _TABLE and sub in SCHEMA:
            _check_table(path, sub, value)


def load_input(path: str | Path) -> dict[str, Any]:
    """Read and check an ODAT-SE input file; InputError names the file and the key."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such input file") from None
    except OSError as err:
        raise InputError(f"{path}: cannot be read: {err.strerror or err}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        column = err.start - (raw.rfind(b"\n", 0, err.start) + 1) + 1
        raise InputError(
            f"{path}, line {line}: not text (byte {raw[err.start]:#04x} at column {column} is not UTF-8): "
            "an input file is TOML text"
        ) from None
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"{path}: not valid TOML: {err}") from None
    for key in data:
        if key not in TOP:
            raise InputError(f"{path}: unknown section [{key}]; an input file has [{'], ['.join(TOP)}]")
    for key in ("base", "algorithm", "solver"):
        if key not in data:
            raise InputError(f"{path}: section [{key}] is missing")
        if not isinstance(data[key], dict):
            raise InputError(f"{path}: [{key}] must be a table")
    for key in TOP:
        if key in data:
            _check_table(path, key, data[key])
    return data


def _need(path: Path, table: dict, section: str, key: str) -> Any:
    if key not in table:
        raise InputError(f"{path}: [{section}] {key} is required")
    return table[key]


# ---------------------------------------------------------------------------- the set-up
@dataclass
class RunSetup:
    """Everything ``multiwalk run`` needs, checked."""

    input_path: Path
    algorithm: str
    dimension: int
    labels: list[str]
    root_dir: Path
    output_dir: Path
    seed: int | None
    function: Any
    function_label: str
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None
    step_list: np.ndarray | None = None
    initial: np.ndarray | None = None
    mesh: Any = None
    betas: np.ndarray | None = None
    as_beta: bool = False
    numsteps: int = 0
    numsteps_exchange: int = 1
    numsteps_thermalization: int | None = None
    nreplica_per_proc: int = 1
    separate_T: bool = True
    checkpoint: bool = False
    checkpoint_steps: int | None = None
    checkpoint_interval: float | None = None
    checkpoint_file: Path | None = None
    tables: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    periodic: np.ndarray | None = None  # (dimension,) bool: [algorithm.param] pbc_list
    unit_list: np.ndarray | None = None  # (dimension,): minsearch evaluates f at x / unit_list (ODAT-SE's)
    constraint: tuple[np.ndarray, np.ndarray] | None = None  # [runner.limitation] co_a (m, d), co_b (m,)
    mapping: tuple[np.ndarray, np.ndarray] | None = None  # [runner.mapping] A (m, d), b (m,): f(A x + b)
    ignore_error: bool = False  # [runner] ignore_error
    export_combined_files: bool = False  # [algorithm.exchange]: trial and result lines in one combined.txt
    host: dict[str, bool] | None = None  # a non-JAX objective: {"vectorized": ..., "ignore_error": ...}


def _function(path: Path, solver: dict[str, Any], dimension: int, root_dir: Path) -> tuple[Any, str]:
    name = _need(path, solver, "solver", "name")
    if name == "analytical":
        from ..functions import odatse as analytical  # the test functions: only for them (~5 ms)

        if "function" in solver:
            raise InputError(f'{path}: [solver] function goes with name = "python", not "analytical"')
        fname = solver.get("function_name", "quadratics")
        if fname not in analytical.TABLE:
            raise InputError(
                f"{path}: [solver] function_name = {fname!r} is not one of ODAT-SE's analytical functions: "
                f"{', '.join(analytical.TABLE)}"
            )
        entry = analytical.TABLE[fname]
        if entry.dimension is not None and dimension != entry.dimension:
            raise InputError(f"{path}: {fname} needs [base] dimension = {entry.dimension}, got {dimension}")
        if dimension < entry.min_dimension:
            raise InputError(f"{path}: {fname} needs [base] dimension >= {entry.min_dimension}, got {dimension}")
        return entry.fn, fname
    if name == "python":
        if "function_name" in solver:
            raise InputError(f'{path}: [solver] function_name goes with name = "analytical"; "python" takes function')
        spec = _need(path, solver, "solver", "function")
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise InputError(f'{path}: [solver] function = {spec!r} must be "module:callable" or "file.py:callable"')
        try:
            if module_name.endswith(".py"):
                file = (root_dir / module_name).resolve()
                mod_spec = importlib.util.spec_from_file_location(file.stem, file)
                if mod_spec is None or not file.exists():
                    raise FileNotFoundError(f"no such file {file}")
                module = importlib.util.module_from_spec(mod_spec)
                mod_spec.loader.exec_module(module)  # type: ignore[union-attr]
            else:
                # root_dir stays on the path (this process runs one input): the module's functions may
                # import its neighbours when called; the workers get it too (workers_for_the_command)
                if str(root_dir) not in sys.path:
                    sys.path.insert(0, str(root_dir))
                module = importlib.import_module(module_name)
                _by_value_if_in(module, root_dir)
            fn = getattr(module, attr)
        except Exception as err:
            raise InputError(f"{path}: [solver] function = {spec!r} cannot be loaded: {type(err).__name__}: {err}") from None
        if not callable(fn):
            raise InputError(f"{path}: [solver] function = {spec!r} is not callable")
        return fn, spec
    raise InputError(f'{path}: [solver] name = {name!r}; multiwalk runs "analytical" and "python"')


def _by_value_if_in(module: Any, root_dir: Path) -> None:
    """A module found in ``root_dir`` (on the path only while it was imported) travels to the
    workers of a Python objective by value: they could not import it by its name."""
    file = getattr(module, "__file__", None)
    if file and Path(file).resolve().is_relative_to(root_dir.resolve()):
        import cloudpickle

        cloudpickle.register_pickle_by_value(module)


def _vector(path: Path, param: dict, key: str, dimension: int, positive: bool = False) -> np.ndarray | None:
    if key not in param:
        return None
    v = np.asarray(param[key], dtype=np.float64)
    if v.shape != (dimension,):
        raise InputError(f"{path}: [algorithm.param] {key} has {v.size} entries but [base] dimension = {dimension}")
    if not np.all(np.isfinite(v)):
        raise InputError(f"{path}: [algorithm.param] {key} must be finite, got {param[key]}")
    if positive and not np.all(v > 0):
        raise InputError(f"{path}: [algorithm.param] {key} must be positive, got {param[key]}")
    return v


def _check_initial_in_box(path: Path, given: Any, setup: RunSetup, upper_inside: bool) -> None:
    """InputError unless every point of initial_list lies in the box: ``min <= x < max`` for the
    exchange (whose moves keep ``x < max``, ODAT-SE's rule), ``min <= x <= max`` for minsearch and lbfgs.
    A start outside would stay there (every move from it is rejected, or f is inf there)."""
    init, lo, hi = setup.initial, setup.lower, setup.upper
    inside = (init >= lo) & ((init <= hi) if upper_inside else (init < hi))
    if inside.all():
        return
    k, i = (int(v) for v in np.argwhere(~inside)[0])
    point = f"initial_list[{k}] = {init[k].tolist()}" if np.ndim(given) == 2 else f"initial_list = {init[k].tolist()}"
    raise InputError(
        f"{path}: [algorithm.param] {point} is outside the box: {setup.labels[i]} = {init[k, i]} is not in "
        f"[{lo[i]}, {hi[i]}{']' if upper_inside else ')'} (min_list[{i}], max_list[{i}]): start inside the box"
    )


def build_setup(path: str | Path, data: dict[str, Any] | None = None) -> RunSetup:
    """Check an input file's contents and gather what the run needs (no compilation)."""
    path = Path(path)
    data = load_input(path) if data is None else data
    setup = _base_setup(path, data)
    alg = data["algorithm"]
    param = alg.get("param")
    if param is None:
        raise InputError(f"{path}: section [algorithm.param] is missing")
    if setup.algorithm == "mapper":  # its mesh or grid: commands/run_pamc.py, the mesh file's format checked here
        if "mesh_path" in param:
            _mesh_format(path, param)
        else:
            _refuse_mesh_format_without_mesh(path, param)
    elif "mesh_path" in param:
        _read_mesh_space(path, param, setup)
    else:
        _read_box_space(path, param, setup)
    if setup.algorithm == "exchange":
        _read_exchange_options(path, alg, setup)
    _read_checkpoint_options(path, alg, setup)
    return setup


def _base_setup(path: Path, data: dict[str, Any]) -> RunSetup:
    """The setup from [base], [algorithm]'s own keys and [solver]: dimension, folders, the
    algorithm, labels, seed and function; the algorithm's option tables."""
    base, alg, solver = data["base"], data["algorithm"], data["solver"]
    dimension = _algorithm_dimension(path, base, alg)
    root_dir = Path(base.get("root_dir", ".")).expanduser().absolute()
    output_dir = root_dir / Path(base.get("output_dir", ".")).expanduser()
    name = _need(path, alg, "algorithm", "name")
    if name not in ALGORITHMS:
        raise InputError(f"{path}: [algorithm] name = {name!r}; multiwalk run knows {', '.join(ALGORITHMS)}")
    labels = alg.get("label_list", [f"x{i + 1}" for i in range(dimension)])
    if len(labels) != dimension:
        raise InputError(f"{path}: [algorithm] label_list has {len(labels)} labels but [base] dimension = {dimension}")
    seed = alg.get("seed")
    if seed is not None and not 0 <= seed < 2**63:
        raise InputError(f"{path}: [algorithm] seed must be a non-negative integer, got {seed}")
    if "seed_delta" in alg and alg["seed_delta"] < 0:
        raise InputError(f"{path}: [algorithm] seed_delta must be non-negative, got {alg['seed_delta']}")
    runner = data.get("runner", {})
    mapping = _read_mapping(path, runner.get("mapping"), dimension)
    fn, flabel = _function(path, solver, _function_dimension(path, base, solver, dimension, mapping), root_dir)
    if mapping is not None:
        fn = _mapped(fn, *mapping)
    setup = RunSetup(path, name, dimension, list(labels), root_dir, output_dir, seed, fn, flabel, mapping=mapping)
    setup.ignore_error = runner.get("ignore_error", False)
    setup.constraint = _read_limitation(path, runner.get("limitation"), dimension)
    if setup.constraint is not None and name not in ("exchange", "pamc", "minsearch"):
        raise InputError(
            f"{path}: [runner.limitation] is supported for exchange and pamc (a move outside it is rejected) and minsearch "
            f"(f = inf outside it), not {name!r}, whose walkers start and move without it"
        )
    _read_backend(path, data, setup)
    for other in ("exchange", "minimize", "pattern", "lbfgs", "tempering"):
        wanted = {"exchange": "exchange", "minimize": "minsearch"}.get(other, other)
        if other in alg and wanted != name:
            raise InputError(f"{path}: [algorithm.{other}] is for name = {wanted!r}, but [algorithm] name = {name!r}")
    setup.tables = {k: dict(alg.get(k, {})) for k in ("pattern", "lbfgs", "tempering", "minimize")}
    if "log" in runner:
        setup.notes.append("[runner.log] is accepted but multiwalk writes no runner.log")
    return setup


def _algorithm_dimension(path: Path, base: dict[str, Any], alg: dict[str, Any]) -> int:
    """The number of parameters the algorithm searches: [algorithm] dimension, else [base]'s (ODAT-SE's rule)."""
    where = "algorithm" if "dimension" in alg else "base"
    dimension = alg.get("dimension", base.get("dimension"))
    if dimension is None:
        raise InputError(f"{path}: [base] dimension is required (or [algorithm] dimension)")
    if dimension < 1:
        raise InputError(f"{path}: [{where}] dimension must be at least 1, got {dimension}")
    return dimension


def _function_dimension(path: Path, base: dict[str, Any], solver: dict[str, Any], dimension: int,
                        mapping: tuple[np.ndarray, np.ndarray] | None) -> int:
    """The number of values the function takes: [solver] dimension, else [base]'s (ODAT-SE's rule), else
    the algorithm's or the mapping's rows; InputError where they cannot agree."""
    where = "[solver] dimension" if "dimension" in solver else "[base] dimension"
    given = solver.get("dimension", base.get("dimension"))
    if mapping is not None:
        rows = mapping[0].shape[0]
        if given is not None and given != rows:
            raise InputError(f"{path}: [runner.mapping] A has {rows} rows but {where} = {given}: A x + b must give "
                             "the function's values")
        return rows
    if given is not None and given != dimension:
        raise InputError(
            f"{path}: {where} = {given} differs from the algorithm's dimension = {dimension} ([algorithm] dimension, "
            f"else [base]'s): the function receives the algorithm's {dimension} values unless [runner.mapping] A "
            f"({given} x {dimension}) maps them"
        )
    return dimension


def _matrix(path: Path, section: str, key: str, value: Any) -> np.ndarray:
    """A 2-D matrix from ODAT-SE's two spellings: a list of rows, or text of rows (one per line)."""
    if not value:  # ODAT-SE reads an empty matrix as "not given"
        return np.zeros((0, 0))
    if isinstance(value, str):
        rows = []
        for k, line in enumerate(ln for ln in value.splitlines() if ln.strip()):
            try:
                rows.append([float(w) for w in line.split()])
            except ValueError:
                raise InputError(f"{path}: [{section}] {key}: row {k} {line.strip()!r} is not numbers") from None
        value = rows
    if len({len(r) for r in value}) > 1:
        raise InputError(f"{path}: [{section}] {key}: rows of different lengths {[len(r) for r in value]}")
    m = np.asarray(value, dtype=np.float64).reshape(len(value), -1)
    if not np.all(np.isfinite(m)):
        raise InputError(f"{path}: [{section}] {key} must be finite, got {value}")
    return m


def _column(path: Path, section: str, key: str, value: Any, rows: int, of: str) -> np.ndarray:
    """ODAT-SE's column vector (``[[1], [2]]`` or text of one number per line) of ``rows`` entries."""
    m = _matrix(path, section, key, value)
    if m.shape != (rows, 1):
        raise InputError(f"{path}: [{section}] {key} must be a column of {rows} numbers (one per row of {of}), "
                         f"written [[b1], [b2], ...], got shape {m.shape}")
    return m[:, 0]


def _read_mapping(path: Path, table: dict[str, Any] | None, dimension: int) -> tuple[np.ndarray, np.ndarray] | None:
    """[runner.mapping] (ODAT-SE's affine map): the function is evaluated at ``A x + b``; A (m, dimension)
    (default the identity), b (m,) (default 0; needs A, as in ODAT-SE).  None: no table or an empty one."""
    if not table:
        return None
    if "b" in table and "A" not in table:
        raise InputError(f"{path}: [runner.mapping] b needs A (the map is A x + b)")
    a = _matrix(path, "runner.mapping", "A", table["A"]) if "A" in table else np.zeros((0, 0))
    a = np.eye(dimension) if a.size == 0 else a
    if a.shape[1] != dimension:
        raise InputError(f"{path}: [runner.mapping] A has {a.shape[1]} columns but [algorithm] dimension = {dimension}")
    b = _column(path, "runner.mapping", "b", table["b"], a.shape[0], "A") if "b" in table else np.zeros(a.shape[0])
    return a, b


def _read_limitation(path: Path, table: dict[str, Any] | None, dimension: int) -> tuple[np.ndarray, np.ndarray] | None:
    """[runner.limitation] (ODAT-SE's linear inequalities): a point x is allowed when every row of
    ``co_a x + co_b`` is > 0; co_a (m, dimension), co_b (m,), both or neither."""
    if not table:
        return None
    if ("co_a" in table) != ("co_b" in table):
        raise InputError(f"{path}: [runner.limitation] needs both co_a and co_b (allowed: co_a x + co_b > 0)")
    a = _matrix(path, "runner.limitation", "co_a", table["co_a"])
    if a.size == 0 and _matrix(path, "runner.limitation", "co_b", table["co_b"]).size == 0:
        return None  # both empty: no limitation (ODAT-SE's reading)
    if a.shape[1] != dimension:
        raise InputError(f"{path}: [runner.limitation] co_a has {a.shape[1]} columns but [algorithm] dimension = {dimension}")
    return a, _column(path, "runner.limitation", "co_b", table["co_b"], a.shape[0], "co_a")


def _mapped(fn: Any, a: np.ndarray, b: np.ndarray) -> Any:
    """``x -> fn(a @ x + b)`` (numpy or jax ``x``; a and b are rounded to x's dtype by jax's rules)."""

    def mapped(x: Any) -> Any:
        return fn(x @ a.T + b)

    return mapped


def _read_backend(path: Path, data: dict[str, Any], setup: RunSetup) -> None:
    """How ``[solver] name = "python"``'s function runs: compiled (``backend = "jax"``, or not given and
    the function traces with jax) or called as Python outside the compiled solver (``backend =
    "python"``, or not given and it does not trace), with ``vectorized`` and ``[runner] ignore_error``."""
    solver, runner = data["solver"], data.get("runner", {})
    backend = solver.get("backend")
    if backend not in (None, "jax", "python"):
        raise InputError(f'{path}: [solver] backend = {backend!r}; allowed: "jax" (compiled) or "python" '
                         "(plain Python/NumPy, called outside the compiled solver)")
    if backend is not None and solver["name"] != "python":
        raise InputError(f'{path}: [solver] backend goes with name = "python"')
    if backend is None and solver["name"] == "python" and not solver.get("vectorized"):
        import jax

        try:
            jax.eval_shape(setup.function, jax.ShapeDtypeStruct((setup.dimension,), np.float32))
            backend = "jax"
        except Exception as err:  # noqa: BLE001 - any failure to trace: the function is not JAX
            backend = "python"
            setup.notes.append(f"{setup.function_label} is not a jax.numpy function ({type(err).__name__}): it is "
                               "called as Python outside the compiled solver ([solver] backend = \"python\")")
    if solver.get("vectorized") and backend != "python" and solver["name"] == "python":
        backend = "python"  # a vectorized function is a Python one: f(X) of a whole batch
    elif "vectorized" in solver and backend != "python":
        raise InputError(f'{path}: [solver] vectorized goes with name = "python" and backend = "python"')
    if backend == "python":
        setup.host = {"vectorized": solver.get("vectorized", False), "ignore_error": runner.get("ignore_error", False)}
    elif runner.get("ignore_error"):
        setup.notes.append("[runner] ignore_error applies to Python objectives; a jax objective's NaN or inf is "
                           "already a rejected move")


def _read_mesh_space(path: Path, param: dict[str, Any], setup: RunSetup) -> None:
    """A discrete space ([algorithm.param] mesh_path, with neighborlist_path or radius): setup.mesh."""
    from ..spaces import Mesh, build_neighbor_list, read_mesh

    if setup.algorithm not in ("exchange", "pamc"):
        raise InputError(f"{path}: [algorithm.param] mesh_path (a discrete space) is only for name = \"exchange\" or \"pamc\"")
    for key in ("min_list", "max_list", "step_list", "unit_list", "initial_list", "pbc_list"):
        if key in param:
            raise InputError(f"{path}: [algorithm.param] {key} is for a continuous space; mesh_path makes it discrete")
    if setup.constraint is not None:
        raise InputError(f"{path}: [runner.limitation] is for a continuous space; on a mesh leave the nodes out instead")
    mesh_path = setup.root_dir / Path(param["mesh_path"]).expanduser()
    mesh_format = _mesh_format(path, param)
    coords = read_mesh(mesh_path, **mesh_format)
    if coords.shape[1] != setup.dimension:
        raise InputError(f"{mesh_path}: {coords.shape[1]} coordinates per point but [base] dimension = {setup.dimension}")
    if "neighborlist_path" in param:
        if "radius" in param:
            raise InputError(f"{path}: [algorithm.param] give neighborlist_path or radius, not both")
        setup.mesh = Mesh.from_files(mesh_path, setup.root_dir / Path(param["neighborlist_path"]).expanduser(),
                                     **mesh_format)
    else:
        if "radius" not in param:
            raise InputError(f"{path}: [algorithm.param] neighborlist_path (or radius) is required with mesh_path")
        if not param["radius"] > 0:
            raise InputError(f"{path}: [algorithm.param] radius must be positive, got {param['radius']}")
        setup.mesh = Mesh(coords, build_neighbor_list(coords, float(param["radius"])), source=f"{mesh_path} (radius)")


def _mesh_format(path: Path, param: dict[str, Any]) -> dict[str, Any]:
    """[algorithm.param] comments, delimiter, skiprows: how the mesh file is read (numpy.loadtxt's
    meanings, ODAT-SE's defaults "#", whitespace, 0)."""
    out = {"comments": param.get("comments", "#"), "delimiter": param.get("delimiter"), "skiprows": param.get("skiprows", 0)}
    for key in ("comments", "delimiter"):
        if out[key] == "":
            raise InputError(f"{path}: [algorithm.param] {key} must not be empty (leave it out for the default)")
    if out["delimiter"] is not None and out["delimiter"] in out["comments"]:
        raise InputError(f"{path}: [algorithm.param] delimiter = {out['delimiter']!r} is also the comment mark")
    if out["skiprows"] < 0:
        raise InputError(f"{path}: [algorithm.param] skiprows must be 0 or more, got {out['skiprows']}")
    return out


def _refuse_mesh_format_without_mesh(path: Path, param: dict[str, Any]) -> None:
    """InputError for the mesh file's keys (comments, delimiter, skiprows) given without mesh_path."""
    for key in ("comments", "delimiter", "skiprows"):
        if key in param:
            raise InputError(f"{path}: [algorithm.param] {key} needs mesh_path (a discrete space)")


def _read_box_space(path: Path, param: dict[str, Any], setup: RunSetup) -> None:
    """A continuous space: the box (min_list, max_list), step_list (or the obsolete unit_list)
    and initial_list, into setup."""
    name, dimension = setup.algorithm, setup.dimension
    for key in ("neighborlist_path", "radius"):
        if key in param:
            raise InputError(f"{path}: [algorithm.param] {key} needs mesh_path (a discrete space)")
    _refuse_mesh_format_without_mesh(path, param)
    setup.lower = _vector(path, param, "min_list", dimension)
    setup.upper = _vector(path, param, "max_list", dimension)
    for key, v in (("min_list", setup.lower), ("max_list", setup.upper)):
        if v is None and name != "lbfgs":
            raise InputError(f"{path}: [algorithm.param] {key} is required")
    if setup.lower is not None and setup.upper is not None and not np.all(setup.lower < setup.upper):
        i = int(np.flatnonzero(~(setup.lower < setup.upper))[0])
        raise InputError(
            f"{path}: [algorithm.param] min_list[{i}] = {setup.lower[i]} is not below max_list[{i}] = {setup.upper[i]}"
        )
    step = _vector(path, param, "step_list", dimension, positive=True)
    unit = _vector(path, param, "unit_list", dimension, positive=True)
    setup.unit_list = unit
    if step is None and unit is not None and name != "minsearch":  # minsearch: ODAT-SE's unit_list, not a step
        # stacklevel 3: the warning points at the caller of build_setup
        warnings.warn(f"{path}: [algorithm.param] unit_list is obsolete; use step_list", DeprecationWarning, stacklevel=3)
        setup.notes.append("unit_list is obsolete: use step_list (read as step_list, as ODAT-SE does)")
        step = unit
    if step is None and name == "exchange":
        raise InputError(f"{path}: [algorithm.param] step_list is required (the Gaussian step of each coordinate)")
    setup.step_list = step
    if "initial_list" in param:
        init = np.asarray(param["initial_list"], dtype=np.float64)
        init = init[None, :] if init.ndim == 1 else init
        if init.ndim != 2 or init.shape[1] != dimension:
            raise InputError(
                f"{path}: [algorithm.param] initial_list must be {dimension} numbers or a list of such lists, "
                f"got {param['initial_list']}"
            )
        setup.initial = init
        if setup.lower is not None and setup.upper is not None:  # lbfgs may run without a box (L-BFGS-B with one)
            _check_initial_in_box(path, param["initial_list"], setup, upper_inside=name in ("minsearch", "lbfgs"))
        _check_initial_allowed(path, param["initial_list"], setup)
    _read_pbc_list(path, param, setup)


def _check_initial_allowed(path: Path, given: Any, setup: RunSetup) -> None:
    """InputError unless every point of initial_list satisfies [runner.limitation]."""
    if setup.constraint is None:
        return
    a, b = setup.constraint
    bad = np.flatnonzero(~np.all(setup.initial @ a.T + b > 0, axis=1))
    if bad.size:
        k = int(bad[0])
        where = f"initial_list[{k}]" if np.ndim(given) == 2 else "initial_list"
        point = f"{where} = {setup.initial[k].tolist()}"
        raise InputError(f"{path}: [algorithm.param] {point} violates [runner.limitation] (co_a x + co_b > 0 fails): "
                         "start where the constraints hold")


def _read_pbc_list(path: Path, param: dict[str, Any], setup: RunSetup) -> None:
    """[algorithm.param] pbc_list: the periodic coordinates (a move wraps into [min, max)), for
    exchange, tempering and pamc, whose moves wrap; a note for minsearch, which does not read it (as
    ODAT-SE's)."""
    if "pbc_list" not in param:
        return
    pbc = np.asarray(param["pbc_list"], dtype=bool)
    if pbc.shape != (setup.dimension,):
        raise InputError(f"{path}: [algorithm.param] pbc_list has {pbc.size} entries but [algorithm] dimension = "
                         f"{setup.dimension}")
    if setup.algorithm == "minsearch":
        setup.notes.append("[algorithm.param] pbc_list is not used by minsearch (Nelder-Mead does not wrap; "
                           "ODAT-SE's minsearch does not read it either)")
    elif setup.algorithm not in ("exchange", "tempering", "pamc"):
        raise InputError(f"{path}: [algorithm.param] pbc_list is for exchange, tempering and pamc (their moves wrap into "
                         f"[min, max)); {setup.algorithm} does not wrap: leave pbc_list out")
    setup.periodic = pbc


def _read_exchange_options(path: Path, alg: dict[str, Any], setup: RunSetup) -> None:
    """[algorithm.exchange]: steps, replicas per process, the temperature ladder (checked by
    building a small one), into setup."""
    from ..solvers.exchange import temperature_ladder

    ex = alg.get("exchange")
    if ex is None:
        raise InputError(f"{path}: section [algorithm.exchange] is missing")
    setup.numsteps = _need(path, ex, "algorithm.exchange", "numsteps")
    setup.numsteps_exchange = _need(path, ex, "algorithm.exchange", "numsteps_exchange")
    for key in ("numsteps", "numsteps_exchange", "nreplica_per_proc"):
        if key in ex and ex[key] < 1:
            raise InputError(f"{path}: [algorithm.exchange] {key} must be at least 1, got {ex[key]}")
    setup.numsteps_thermalization = ex.get("numsteps_thermalization")
    if setup.numsteps_thermalization is not None and setup.numsteps_thermalization < 0:
        raise InputError(f"{path}: [algorithm.exchange] numsteps_thermalization must be >= 0")
    setup.nreplica_per_proc = ex.get("nreplica_per_proc", 1)
    setup.separate_T = ex.get("separate_T", True)
    setup.export_combined_files = ex.get("export_combined_files", False)
    setup.as_beta = "bmin" in ex or "bmax" in ex
    pair = {k: ex.get(k) for k in ("Tmin", "Tmax", "bmin", "bmax")}
    try:
        temperature_ladder(2, **pair, logspace=ex.get("Tlogspace", True))  # checks the pair
    except ValueError as err:
        raise InputError(f"{path}: [algorithm.exchange] {err}") from None
    setup.tables["ladder"] = {**pair, "logspace": ex.get("Tlogspace", True)}
    if setup.initial is not None and len(setup.initial) > setup.nreplica_per_proc:
        raise InputError(
            f"{path}: [algorithm.param] initial_list has {len(setup.initial)} points but nreplica_per_proc = "
            f"{setup.nreplica_per_proc}: at most one per replica of a process"
        )


def _read_checkpoint_options(path: Path, alg: dict[str, Any], setup: RunSetup) -> None:
    """[algorithm] checkpoint, checkpoint_steps, checkpoint_interval, checkpoint_file, into setup.

    Checkpoints unless checkpoint = false: a crash then loses at most checkpoint_interval seconds
    (default DEFAULT_CHECKPOINT_INTERVAL) or checkpoint_steps steps of the run."""
    setup.checkpoint = alg.get("checkpoint", True)
    setup.checkpoint_steps = alg.get("checkpoint_steps")
    setup.checkpoint_interval = alg.get("checkpoint_interval")
    if setup.checkpoint_steps is None and setup.checkpoint_interval is None:
        setup.checkpoint_interval = DEFAULT_CHECKPOINT_INTERVAL
    for key in ("checkpoint_steps", "checkpoint_interval"):
        if key in alg and not alg[key] > 0:
            raise InputError(f"{path}: [algorithm] {key} must be positive, got {alg[key]}")
    unused = [key for key in ("checkpoint_steps", "checkpoint_interval") if key in alg]
    if not setup.checkpoint and unused and setup.algorithm == "exchange":
        setup.notes.append(f"[algorithm] checkpoint = false: {' and '.join(unused)} not used; the checkpoint is "
                           "written at the end only, so a crash loses the whole run")
    ckpt = Path(alg.get("checkpoint_file", "checkpoint.npz")).expanduser()
    setup.checkpoint_file = ckpt if ckpt.is_absolute() else setup.output_dir / "0" / ckpt


# ---------------------------------------------------------------------------- exchange
def _record_length(n_replicas: int, dimension: int) -> int:
    """Steps kept on the device between writes: about 4e6 numbers at most, 16 .. 1024 steps."""
    return int(min(1024, max(16, 4_000_000 // (n_replicas * (dimension + 3)))))


def _read_checkpoint_file(path: Path) -> tuple[dict[str, Any], list[np.ndarray]]:
    """``(meta, leaves)`` of the checkpoint to resume or continue from, read whole (its checksums
    checked) before any file of the run is touched; InputError naming it when it is missing or damaged."""
    from ..checkpoint import read_checkpoint

    try:
        return read_checkpoint(path, label=str(path))
    except FileNotFoundError:
        raise InputError(f"{path}: no checkpoint to resume or continue from (run without --resume/--cont first)") from None
    except ValueError as err:
        raise InputError(str(err)) from None


# how the input file names the parts of a problem that multiwalk.identity compares
PART_KEYS = {"objective": "[solver] function_name/function", "lower": "[algorithm.param] min_list",
             "upper": "[algorithm.param] max_list", "n": "[base] dimension"}


def _prepare_checkpoint_path(setup: RunSetup) -> None:
    """Make the checkpoint's folder and check a file can be written there, before the run compiles
    or touches its files; InputError naming the path and the keys it comes from."""
    from ..checkpoint import check_checkpoint_path

    path = setup.checkpoint_file
    label = f"{setup.input_path}: checkpoint {str(path)!r} ([base] output_dir, [algorithm] checkpoint_file)"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"{label}: its folder cannot be made ({err.strerror or err})") from None
    try:
        check_checkpoint_path(path, label)
    except (ValueError, FileNotFoundError) as err:
        raise InputError(str(err)) from None


def _reset_random(path: Path, seed: int, step: int) -> None:
    """``--reset-rand``: a new random series from here on (the checkpoint's key is replaced)."""
    import jax

    from ..checkpoint import write_leaves
    from ..solve import run_key
    from ..solvers.exchange import ExchangeState

    meta, leaves = _read_checkpoint_file(path)
    i = ExchangeState._fields.index("key")
    new = jax.random.fold_in(jax.random.fold_in(run_key(seed), 0x5EED), step)
    leaves[i] = np.asarray(new, dtype=leaves[i].dtype)
    write_leaves(path, meta, leaves)


def run_exchange(setup: RunSetup, args: argparse.Namespace) -> int:
    import jax

    from .. import distributed as dist
    from ..io.odatse import combine_step_files, write_best_result, write_fx
    from ..problem import Problem
    from ..solve import solve
    from ..solvers.exchange import Exchange, ReplicaOrderWriter

    # ODAT-SE's meaning: P MPI processes of nreplica_per_proc replicas each; under --distributed
    # P is the number of jax processes (unless --nprocs says otherwise)
    nprocs = args.nprocs or jax.process_count()
    writes = dist.is_writer()
    per = setup.nreplica_per_proc
    R = nprocs * per
    betas = _exchange_betas(setup, R)
    mode = "resume" if args.resume else "cont" if args.cont else "init"
    ckpt = setup.checkpoint_file
    meta, saved_leaves = _read_checkpoint_file(ckpt) if mode != "init" else (None, None)
    seed = _exchange_seed(setup, meta, writes)
    _check_resume_mode(setup, meta, mode, nprocs)
    record = _record_length(R, setup.dimension) if args.step_files else 0
    processes, max_chunk = _write_plan(setup, args, R, record)
    thermalization = _thermalization(setup, meta)

    with jax.enable_x64(args.dtype == "float64"):
        host = _host_keywords(setup, args)
        if setup.mesh is None:
            problem = Problem(objective=setup.function, lower=setup.lower, upper=setup.upper, names=setup.labels,
                              periodic=setup.periodic, **host)
        else:
            problem = Problem(objective=setup.function, names=setup.labels, **host)
        if problem.host_objective is not None:
            problem.host_objective.start()  # the workers come up while the run is prepared and compiled
        writer = None
        solver_kw = _exchange_options(setup, args, betas, thermalization, record, max_chunk)
        if meta is not None:  # before any file of the run is touched
            _refuse_other_run(setup, args, meta, record, problem)
        if writes:
            _prepare_checkpoint_path(setup)
        if meta is not None and args.reset_rand:
            if writes:
                _reset_random(ckpt, seed, int(meta["done"][0]) + 1)
            dist.barrier("multiwalk run --reset-rand")  # the others read the new key after process 0 wrote it
        if record and writes:
            writer = _step_writer(setup, args, betas, nprocs, meta, saved_leaves, processes)
        elif writes:
            setup.output_dir.mkdir(parents=True, exist_ok=True)
        solver = Exchange(**solver_kw)
        every = setup.checkpoint_interval if setup.checkpoint else None
        if setup.checkpoint and setup.checkpoint_steps:
            every = 0.0  # after every chunk: chunks are at most checkpoint_steps long (max_chunk)
        _multiwalk_launch.mark("run prepared")
        t0 = time.perf_counter()
        try:
            result = solve(
                problem, solver, seed=seed, progress=args.progress, time_limit=args.time_limit, checkpoint=ckpt,
                resume=ckpt if meta is not None else None, checkpoint_every=math.inf if every is None else every,
                writer=None if writer is None else ReplicaOrderWriter(writer),  # the step files as the run goes
            )
            wall = time.perf_counter() - t0
            t1 = time.perf_counter()  # "files after the run": the steps left, closing the writer, fx, best
            if writer is not None:
                writer.on_steps(result.state, 0, result.steps - 1)  # steps not written yet (a run of no chunk)
        finally:
            if writer is not None:
                writer.close()  # every line handed to the writer thread is in the files
        if writes:
            write_best_result(setup.output_dir / "best_result.txt", R, per, result.best_replica, result.best_step,
                              result.fun, result.x, setup.labels)
            write_fx(setup.output_dir / "fx.txt", result.statistics)
            if writer is not None and setup.export_combined_files and result.steps == setup.numsteps:
                for p in range(nprocs):  # the run is whole: ODAT-SE's one combined.txt per process
                    combine_step_files(setup.output_dir / str(p), per)
        post = time.perf_counter() - t1
    if writes and os.environ.get("MULTIWALK_PROFILE"):
        _write_profile(Path(os.environ["MULTIWALK_PROFILE"]), result.stats, post, writer)
    if not writes:  # process 0 reports
        return EXIT_OK if result.success else EXIT_FAILED
    return _report_exchange(setup, result, writer, R, wall, post)


def _exchange_options(setup: RunSetup, args: argparse.Namespace, betas: np.ndarray, thermalization: int,
                      record: int, max_chunk: int | None) -> dict[str, Any]:
    """The keyword arguments of :class:`multiwalk.Exchange` for this run."""
    return dict(
        betas=tuple(betas.tolist()), numsteps=setup.numsteps, numsteps_exchange=setup.numsteps_exchange,
        numsteps_thermalization=thermalization, step_width=None if setup.step_list is None else tuple(setup.step_list),
        mesh=setup.mesh, initial=() if setup.initial is None else tuple(map(tuple, setup.initial.tolist())),
        nreplica_per_proc=setup.nreplica_per_proc, record=record, max_chunk_steps=max_chunk, unroll=args.unroll,
        kernel=args.kernel,
        constraint_a=() if setup.constraint is None else tuple(map(tuple, setup.constraint[0].tolist())),
        constraint_b=() if setup.constraint is None else tuple(setup.constraint[1].tolist()),
    )


def _exchange_betas(setup: RunSetup, replicas: int) -> np.ndarray:
    """The ``replicas`` inverse temperatures of [algorithm.exchange]'s ladder, coldest first;
    InputError if result_T files would need two of the same spelling."""
    from ..solvers.exchange import temperature_ladder

    betas = temperature_ladder(replicas, **setup.tables["ladder"])
    if setup.as_beta is False and len(set(map(repr, (1.0 / betas).tolist()))) != replicas and setup.separate_T:
        raise InputError(f"{setup.input_path}: the temperatures are not distinct: result_T files need distinct values")
    return betas


def _exchange_seed(setup: RunSetup, meta: dict[str, Any] | None, writes: bool) -> int:
    """The run's seed: the checkpoint's (the input's must agree), the input's, or a fresh one
    drawn by process 0, shared with every process and printed."""
    from .. import distributed as dist

    seed = setup.seed
    if meta is not None:
        seed = int(meta["seed"])
        if setup.seed is not None and setup.seed != seed:
            raise InputError(
                f"{setup.input_path}: [algorithm] seed = {setup.seed} but {setup.checkpoint_file} was run with seed {seed}")
    elif seed is None:
        seed = int(np.random.SeedSequence().entropy % (2**63))  # ODAT-SE draws one too; we print it
        halves = dist.broadcast(np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32))  # process 0's seed for all
        seed = int(halves[0]) | int(halves[1]) << 32
        if writes:
            print(f"[algorithm] seed is not given: using seed = {seed}")
    return seed


def _check_resume_processes(setup: RunSetup, meta: dict[str, Any], nprocs: int) -> None:
    """InputError when the checkpoint's run had P x nreplica_per_proc replicas for another P: a run
    started under ``mpiexec -n P`` (or with ``--nprocs P``) goes on with the same P, as ODAT-SE's does."""
    replicas, per = len(meta["options"].get("betas", ())), setup.nreplica_per_proc
    if meta["options"].get("nreplica_per_proc") != per or replicas in (0, nprocs * per) or replicas % per:
        return  # another nreplica_per_proc: the options' own comparison names it
    saved = replicas // per
    raise InputError(
        f"{setup.checkpoint_file} holds {replicas} replicas, {saved} x nreplica_per_proc = {per} (a run of {saved} "
        f"processes), but this run has {nprocs} x {per}: go on with the same count, under mpiexec -n {saved} or "
        f"with --nprocs {saved}"
    )


def _check_resume_mode(setup: RunSetup, meta: dict[str, Any] | None, mode: str, nprocs: int) -> None:
    """--resume continues a run that stopped before its end; --cont extends a finished run to a
    larger numsteps, both with its ``nprocs``: InputError, naming the checkpoint, where the saved run
    says otherwise."""
    if meta is None:
        return
    _check_resume_processes(setup, meta, nprocs)
    ckpt = setup.checkpoint_file
    done = int(meta["done"][0])
    saved = meta["options"]
    if mode == "resume" and done >= saved["numsteps"] - 1:
        raise InputError(
            f"{ckpt}: that run finished all its {saved['numsteps']} steps; use --cont with a larger "
            "[algorithm.exchange] numsteps to extend it"
        )
    if mode == "cont" and setup.numsteps <= done + 1:
        raise InputError(
            f"{setup.input_path}: [algorithm.exchange] numsteps = {setup.numsteps} but {ckpt} has {done + 1} steps "
            "done: --cont needs a larger numsteps"
        )
    combined = setup.output_dir / "0" / "combined.txt"
    if mode == "cont" and combined.exists() and not combined.with_name("trial.txt").exists():
        raise InputError(
            f"{combined}: the finished run merged its trial.txt and result.txt into it (export_combined_files), so "
            "--cont cannot extend them; start a new run with the larger numsteps"
        )
    if mode == "cont" and done < saved["numsteps"] - 1:
        raise InputError(f"{ckpt}: that run stopped before its end (step {done + 1} of {saved['numsteps']}): use --resume")


def _thermalization(setup: RunSetup, meta: dict[str, Any] | None) -> int:
    """numsteps_thermalization: the input's, else the saved run's (its statistics were
    accumulated with that cut), else a tenth of numsteps."""
    thermalization = setup.numsteps_thermalization
    if thermalization is None and meta is not None:
        thermalization = meta["options"]["numsteps_thermalization"]
    if thermalization is None:
        thermalization = int(0.1 * setup.numsteps)
    return thermalization


def _write_plan(setup: RunSetup, args: argparse.Namespace, replicas: int, record: int) -> tuple[int, int | None]:
    """``(writer processes, longest chunk in steps or None)``: ``--write-processes auto``
    resolved, and chunks short enough that the step files are written while the run goes on."""
    max_chunk = setup.checkpoint_steps if setup.checkpoint else None
    processes = args.write_processes
    if processes == "auto":  # worker processes where they pay (many cores, a long run), else threads
        from ..io.odatse import default_write_processes

        processes = default_write_processes(replicas * setup.numsteps) if args.write_threads is None else 0
    if record and (args.write_threads != 0 or processes):
        # chunks of at most ~1/K of the run (K = --write-chunks, default 8 with writer processes, 16
        # with threads): each chunk's files are written while the next one is sampled, so only the
        # last chunk's writing is not hidden; fewer chunks, fewer of each writer's fixed per-chunk
        # costs (the same on every process)
        from ..io.odatse import DEFAULT_WRITE_CHUNKS

        piece = max(16, -(-setup.numsteps // (args.write_chunks or (DEFAULT_WRITE_CHUNKS if processes else 16))))
        max_chunk = min(max_chunk or piece, piece)
    return processes, max_chunk


def _refuse_other_run(setup: RunSetup, args: argparse.Namespace, meta: dict[str, Any], record: int,
                      problem: Any) -> None:
    """InputError unless the checkpoint's run wrote the step files as this one will, and is of
    the same problem (:mod:`multiwalk.identity`); before any file of the run is touched."""
    from ..identity import problem_identity, refuse_other_problem

    ckpt = setup.checkpoint_file
    if meta["options"].get("record") != record:
        raise InputError(
            f"{ckpt} was written {'with' if meta['options'].get('record') else 'without'} the per-step files; "
            f"resume it {'without' if args.step_files else 'with'} --no-step-files as before"
        )
    try:
        refuse_other_problem(ckpt, meta, problem_identity(problem), PART_KEYS)
    except ValueError as err:
        raise InputError(f"{setup.input_path}: {err}") from None


def _step_writer(setup: RunSetup, args: argparse.Namespace, betas: np.ndarray, nprocs: int,
                 meta: dict[str, Any] | None, saved_leaves: list[np.ndarray] | None, processes: int) -> Any:
    """The :class:`multiwalk.io.odatse.StepWriter` of trial.txt, result.txt and result_T*.txt;
    on a resume it starts from each replica's last result in the checkpoint."""
    from ..io.odatse import StepWriter

    state0 = None
    if meta is not None:  # the writer starts from each replica's last result
        from types import SimpleNamespace

        from ..solvers.exchange import checkpoint_replica_rows

        state0 = SimpleNamespace(**checkpoint_replica_rows(saved_leaves))  # state is by temperature
    return StepWriter(
        setup.output_dir, setup.labels, betas, setup.as_beta, nprocs, setup.nreplica_per_proc,
        coordinates=None if setup.mesh is None else setup.mesh.coordinates,
        separate_T=setup.separate_T and not setup.export_combined_files,  # ODAT-SE writes no result_T then
        resume_step=None if meta is None else int(meta["done"][0]) + 1, state=state0,
        threads=args.write_threads, processes=processes,
    )


def _report_exchange(setup: RunSetup, result: Any, writer: Any, replicas: int, wall: float, post: float) -> int:
    """Print the best point and where the time went (process 0); the exit code."""
    import jax

    from ..result import Status

    best_rank, walker = divmod(result.best_replica, setup.nreplica_per_proc)
    print("Best Result:")
    print(f"  rank = {best_rank}")
    print(f"  step = {result.best_step}")
    print(f"  walker = {walker}")
    print(f"  fx = {result.fun!r}")
    for label, v in zip(setup.labels, np.asarray(result.x).tolist()):
        print(f"  {label} = {v!r}")
    st = result.stats
    print(
        f"{result.message}; {replicas} replicas, steps 0..{result.steps - 1}; run {st['run_seconds']:.3f} s, "
        f"step files {0.0 if writer is None else writer.seconds:.3f} s, files after the run {post:.3f} s, "
        f"compile {st['compile_seconds']:.2f} s, chunk loop {st.get('loop_seconds', math.nan):.3f} s, "
        f"wall {wall + post:.2f} s ({jax.devices()[0].platform}, "
        f"{st['kernel']} steps, "
        f"{st['devices']} device{'s' if st['devices'] > 1 else ''}"
        f"{', ' + str(st['processes']) + ' processes' if 'processes' in st else ''})"
    )
    if writer is not None and (writer.threads or writer.processes):
        who = (f"{writer.processes} process{'es' if writer.processes > 1 else ''}" if writer.processes else
               f"{writer.threads} thread{'s' if writer.threads > 1 else ''}")
        ring = (f", waited {writer.ring_wait_seconds:.3f} s for the offsets of its pieces" if writer.processes else "")
        print(f"step files written beside the sampling: {writer.busy_seconds:.3f} s of formatting and writing "
              f"({who}{ring}); the run waited {writer.seconds:.3f} s for them")
    if "devices_note" in st:
        print(f"note: {st['devices_note']}")
    _report_host(st)
    print(f"output in {setup.output_dir}; checkpoint {setup.checkpoint_file}")
    if result.status == Status.INTERRUPTED:
        print("interrupted: continue with --resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    if result.status == Status.TIME_LIMIT:
        print("stopped at --time-limit: continue with --resume", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK if result.success else EXIT_FAILED


def _write_profile(path: Path, stats: dict[str, Any], post: float, writer: Any) -> None:
    """Where an exchange run's time went, as JSON at ``path`` (environment variable MULTIWALK_PROFILE;
    benchmarks/odatse.py --profile reads it): the driver's figures (compiled chunks, the chunk loop,
    compilation), the files after the run and the step-file writer's :meth:`StepWriter.profile`."""
    import json

    keep = ("run_seconds", "loop_seconds", "compile_seconds", "chunks")
    data = {"stats": {k: stats[k] for k in keep if k in stats}, "post_seconds": post,
            "writer": None if writer is None else writer.profile()}
    try:
        path.write_text(json.dumps(data, default=float))
    except OSError as err:  # the run's files are complete: say so and go on
        print(f"MULTIWALK_PROFILE: could not write {path}: {err}", file=sys.stderr)


def _host_keywords(setup: RunSetup, args: argparse.Namespace) -> dict[str, Any]:
    """Problem's keywords for a non-JAX objective (``--executor``, ``--workers``, ``[solver] vectorized``,
    ``[runner] ignore_error``); none for a JAX one."""
    if setup.host is None:
        return {}
    return {"backend": "python", "executor": args.executor, "workers": args.workers, **setup.host}


def _sampler_on_the_cpu(setup: RunSetup) -> None:
    """A Python objective: the solver runs on the CPU, and no GPU is started.  Its points go to the
    host at every step anyway, and its arithmetic is negligible next to the objective; starting a
    GPU and compiling for it cost seconds.  ``JAX_PLATFORMS`` (JAX's own setting) chooses otherwise."""
    if _multiwalk_launch.chose_the_cpu():  # already so, before JAX was imported
        _no_plugin_search()
        _note_cpu_sampler(setup)
        return
    if os.environ.get("JAX_PLATFORMS") or os.environ.get("JAX_PLATFORM_NAME"):
        return
    import jax
    from jax._src import xla_bridge

    if getattr(xla_bridge, "backends_are_initialized", lambda: False)():  # too late: a device was used
        return
    jax.config.update("jax_platforms", "cpu")
    _no_plugin_search()
    _note_cpu_sampler(setup)


def _no_plugin_search() -> None:
    """The CPU chosen by the command (:func:`_sampler_on_the_cpu`): JAX is kept from looking for its
    PJRT plugins when its first backend starts.  It looks whatever ``jax_platforms`` says, and
    initialises the GPU's plugin, loading CUDA's libraries: 0.13-0.16 s on an H100 host, for a
    process that will start no GPU.  JAX has no setting for it: its own flag that the search was
    done is set (``xla_bridge._plugins_registered``), before any backend starts; a JAX without that
    flag searches as usual."""
    from jax._src import xla_bridge

    if not isinstance(getattr(xla_bridge, "_plugins_registered", None), bool):
        return
    if not getattr(xla_bridge, "backends_are_initialized", lambda: True)():
        xla_bridge._plugins_registered = True


def _note_cpu_sampler(setup: RunSetup) -> None:
    if importlib.util.find_spec("jax_plugins") is not None:  # a GPU plugin is installed
        setup.notes.append("the solver runs on the CPU: the objective is Python, so every step's points go to "
                           "the host anyway (JAX_PLATFORMS=cuda runs it on the GPU)")


def _report_host(stats: dict[str, Any]) -> None:
    """What the non-JAX objective's evaluation did: the executor, the evaluations, the errors ignored."""
    host = stats.get("host_objective")
    if host is None:
        return
    print(f"objective evaluated outside the solver: {host['points']} points in {host['batches']} batches, executor "
          f"{host['executor']} ({host['workers']} worker{'s' if host['workers'] > 1 else ''}), {host['seconds']:.3f} s"
          + (f", the pool restarted {host['restarts']} times" if host["restarts"] else ""))
    if host["errors"]:
        print(f"ignore_error: {host['errors']} evaluations raised and were rejected moves; the first: "
              f"{host['first_error']}")


# ---------------------------------------------------------------------------- the other algorithms
def _write_res(setup: RunSetup, fx: float, x: np.ndarray, extra: dict[str, Any]) -> None:
    from .. import distributed as dist
    from ..io.odatse import write_res

    if not dist.is_writer():
        return
    setup.output_dir.mkdir(parents=True, exist_ok=True)
    print("\n".join(write_res(setup.output_dir / "res.txt", fx, x, setup.labels, extra)))


def run_multiwalk_solver(setup: RunSetup, args: argparse.Namespace) -> int:
    import jax

    from .. import LBFGS, PatternSearch, Problem, ReplicaExchange, solve

    kind = {"pattern": PatternSearch, "lbfgs": LBFGS, "tempering": ReplicaExchange}[setup.algorithm]
    options = setup.tables[setup.algorithm]
    with jax.enable_x64(args.dtype == "float64"):
        try:
            solver = kind(**options)
        except TypeError as err:
            raise InputError(f"{setup.input_path}: [algorithm.{setup.algorithm}]: {err}") from None
        except ValueError as err:
            raise InputError(f"{setup.input_path}: [algorithm.{setup.algorithm}] {err}") from None
        # initial_list starts the walkers (pattern), the sequences (tempering) or the problems (lbfgs);
        # lbfgs with min_list/max_list is L-BFGS-B in that box (its starts drawn there without initial_list)
        problem = Problem(objective=setup.function, lower=setup.lower, upper=setup.upper, names=setup.labels,
                          x0=setup.initial,
                          periodic=setup.periodic,  # pbc_list: tempering only (the others refuse it)
                          **_host_keywords(setup, args))
        result = solve(problem, solver, seed=setup.seed or 0, progress=args.progress, time_limit=args.time_limit)
    _write_res(setup, result.fun, result.x, {"message": result.message})
    _report_host(result.stats)
    return EXIT_OK if result.success else EXIT_FAILED


# ---------------------------------------------------------------------------- the command
def _run_pamc_or_mapper(setup: RunSetup, args: argparse.Namespace) -> int:
    """``pamc`` and ``mapper`` (:mod:`multiwalk.commands.run_pamc`), with the input's tables."""
    from . import run_pamc

    if args.cont or args.distributed:
        raise InputError(f"--cont and --distributed are not supported for algorithm {setup.algorithm}")
    alg = load_input(setup.input_path)["algorithm"]
    if setup.algorithm == "mapper":
        return run_pamc.run_mapper(setup, args, alg["param"], alg.get("colormap", "ColorMap.txt"))
    seed = setup.seed if setup.seed is not None else int(np.random.SeedSequence().entropy % (2**63))
    return run_pamc.run_pamc(setup, args, run_pamc.read_pamc_options(setup.input_path, alg.get("pamc")), seed)


def _processes_option(text: str) -> int | str:
    """``--write-processes``: ``auto`` or a number (checked for sign in the handler, before anything runs)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of processes or auto, got {text!r}") from None


def add_parser(commands: Any) -> None:
    from ..io.odatse import AUTO_MIN_CORES, AUTO_MIN_REPLICA_STEPS

    p = commands.add_parser(
        "run",
        help="run an ODAT-SE input file (replica-exchange Monte Carlo and more), writing ODAT-SE's output files",
        description=(
            "Run an ODAT-SE input.toml: algorithm.name = exchange (replica-exchange Monte Carlo, every replica at "
            "once), minsearch, pattern, lbfgs or tempering. Output files as ODAT-SE writes them."
        ),
    )
    p.add_argument("input", type=Path, help="the ODAT-SE input file (TOML)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--init", action="store_true", help="a fresh run (the default)")
    mode.add_argument("--resume", action="store_true", help="continue a run that was stopped, from its checkpoint")
    mode.add_argument("--cont", action="store_true", help="extend a finished run to the larger numsteps of the input")
    p.add_argument("--reset-rand", "--reset_rand", action="store_true", help="a new random series after --resume/--cont")
    p.add_argument("--nprocs", type=int, default=None, metavar="P",
                   help="replicas = P x nreplica_per_proc, output folders 0..P-1, as mpiexec -np P "
                        "(default 1; the ranks started under a plain mpiexec -n N; the number of processes "
                        "with --distributed)")
    group = p.add_argument_group(
        "several processes or hosts (jax.distributed)",
        "Start the same command once per process. Each flag left out is read from MULTIWALK_COORDINATOR, "
        "MULTIWALK_NUM_PROCESSES, MULTIWALK_PROCESS_ID (or JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, "
        "JAX_PROCESS_ID), else detected from SLURM or Open MPI by JAX.",
    )
    group.add_argument("--distributed", action="store_true",
                       help="run over several processes: replicas split over every process's devices, "
                            "process 0 writes the files")
    group.add_argument("--coordinator", metavar="HOST:PORT", default=None, help="address of process 0")
    group.add_argument("--num-processes", type=int, default=None, metavar="N", help="number of processes")
    group.add_argument("--process-id", type=int, default=None, metavar="I", help="this process's index, 0 .. N-1")
    p.add_argument("--step-files", action=argparse.BooleanOptionalAction, default=True,
                   help="write trial.txt, result.txt and result_T*.txt (default: yes); fx.txt and best_result.txt "
                        "are always written")
    p.add_argument("--write-threads", type=int, default=None, metavar="N",
                   help="exchange: threads that format the step files while the next steps are sampled (default: the "
                        "CPUs, at most 4; 0: write them between the chunks); the files are the same")
    p.add_argument("--write-processes", type=_processes_option, default="auto", metavar="N|auto",
                   help="exchange: worker processes that format and write the step files while the next steps are "
                        "sampled, each a share of every file (0: threads, see --write-threads). Default auto: "
                        f"processes (half the CPUs, at most 16) when {AUTO_MIN_CORES} or more CPUs are usable "
                        f"and the run has {AUTO_MIN_REPLICA_STEPS:,} or more replica-steps, and --write-threads is "
                        "not given; threads otherwise (on a 16-core host the processes were 1.5-1.9x faster than the "
                        "threads, on 2 cores no faster: docs/benchmarks.md). The files are the same")
    p.add_argument("--write-chunks", type=int, default=None, metavar="K",
                   help="exchange: write the step files in about K pieces of the run (default 8 with writer "
                        "processes, 16 with threads), each while the "
                        "next is sampled (the last one's writing is not hidden; each piece costs every writer a "
                        "fixed ~2-3 ms); the files are the same")
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64", help="precision (default float64)")
    p.add_argument("--unroll", type=int, default=None, metavar="K",
                   help="exchange: Monte Carlo steps per compiled loop trip off CPUs (default 8 on a GPU; "
                        "a CPU's XLA form runs one step per trip whatever K); the results do not depend on it")
    p.add_argument("--kernel", choices=["auto", "xla", "pallas"], default="auto",
                   help="exchange: how the Monte Carlo steps run: auto (default: one Pallas kernel per block of steps "
                        "between exchanges on a GPU, for a continuous space with --no-step-files), xla, or pallas")
    host = p.add_argument_group(
        "a Python objective ([solver] name = \"python\" that is not jax.numpy, or backend = \"python\")",
        "The batch of points of each step is spread over worker processes (or MPI ranks, or a Dask cluster); "
        "the same seed gives the same result for any executor and worker count.",
    )
    host.add_argument("--workers", type=int, default=None, metavar="N",
                      help="processes that evaluate the objective (default: the CPUs)")
    host.add_argument("--executor", choices=["processes", "mpi", "dask", "serial"], default=None,
                      help="where: processes on this machine (default), mpi (the default under mpiexec: every rank "
                           "evaluates a piece; under python -m mpi4py.futures ranks 1..N-1), dask (a Dask cluster: "
                           "DASK_SCHEDULER_ADDRESS, else a local one), serial")
    p.add_argument("--time-limit", type=float, default=None, metavar="SECONDS", help="stop after this much run time")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")
    p.set_defaults(handler=_handle, command_parser=p)


def _run_minsearch(setup: RunSetup, args: argparse.Namespace) -> int:
    from .run_minsearch import run_minsearch

    return run_minsearch(setup, args.dtype)


# the algorithms whose replicas are ODAT-SE's P x nreplica_per_proc (P: --nprocs, or mpiexec's ranks)
_PER_PROCESS_ALGORITHMS = ("exchange", "pamc")


def _run_algorithm(setup: RunSetup, args: argparse.Namespace) -> int:
    """Run the set-up's algorithm.  Under a plain ``mpiexec -n N`` exchange and pamc run ODAT-SE's
    N x nreplica_per_proc replicas (``--nprocs`` N, unless given); with a Python objective rank 0
    runs the algorithm and every rank evaluates a piece of each batch
    (:func:`multiwalk.executors.mpi_comm_executor`), with a JAX one rank 0 runs it alone."""
    from ..executors import launched_under_mpi, mpi_comm_executor

    run = {"exchange": run_exchange, "minsearch": _run_minsearch, "pamc": _run_pamc_or_mapper,
           "mapper": _run_pamc_or_mapper}.get(setup.algorithm, run_multiwalk_solver)
    plain = _plain_mpi_launch(args)
    if plain and args.nprocs is None and setup.algorithm in _PER_PROCESS_ALGORITHMS:
        args.nprocs = _multiwalk_launch.launched_size()  # ODAT-SE's P x nreplica_per_proc: P the ranks started
    if plain and setup.algorithm == "minsearch" and _multiwalk_launch.launched_rank() == 0:
        print(f"note: under mpiexec -n {_multiwalk_launch.launched_size()} ODAT-SE's minsearch runs one Nelder-Mead a "
              "rank (initial_list's row of that rank, or a random start); this one runs one, from the first start, "
              "and the other ranks wait", file=sys.stderr, flush=True)
    if setup.host is None and plain:
        return _run_on_rank_0(run, setup, args)
    if setup.host is None or args.executor not in (None, "mpi") or not launched_under_mpi():
        return run(setup, args)
    with mpi_comm_executor() as runs_here:
        return run(setup, args) if runs_here else EXIT_OK


def _plain_mpi_launch(args: argparse.Namespace) -> bool:
    """Whether every rank of an ``mpiexec -n N`` runs this command as its own program (not
    ``--distributed``, not ``python -m mpi4py.futures``, whose ranks > 0 are a pool)."""
    from ..executors import mpi_futures_pool_launched

    return not args.distributed and _multiwalk_launch.mpi_launch_environment() and not mpi_futures_pool_launched()


def _run_on_rank_0(run: Any, setup: RunSetup, args: argparse.Namespace) -> int:
    """A JAX objective under a plain ``mpiexec -n N``: every rank would run the whole run and write
    the same files.  Rank 0 runs it, saying so; the other ranks, with nothing to evaluate, end."""
    if _multiwalk_launch.launched_rank() > 0:
        return EXIT_OK
    replicas = (f" ({args.nprocs} x {setup.nreplica_per_proc} replicas, as ODAT-SE's {args.nprocs} processes)"
                if setup.algorithm in _PER_PROCESS_ALGORITHMS else "")
    print(f"multiwalk run: under mpiexec, a JAX objective runs on rank 0 alone{replicas}; the other ranks have "
          "nothing to evaluate and end.  The same run without mpiexec: --nprocs P (one process stands for "
          "ODAT-SE's P).", file=sys.stderr, flush=True)
    return run(setup, args)


def _handle(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .. import distributed as dist  # imports jax, which starts no device yet
    from ..host_objective import ObjectiveError, WorkerCrashError

    try:
        if args.nprocs is not None and args.nprocs < 1:
            raise InputError(f"--nprocs must be at least 1, got {args.nprocs}")
        given = [f for f in ("coordinator", "num_processes", "process_id") if getattr(args, f) is not None]
        if given and not args.distributed:
            raise InputError(f"--{given[0].replace('_', '-')} goes with --distributed")
        if args.distributed:  # before anything touches a device
            try:
                dist.initialize(args.coordinator, args.num_processes, args.process_id)
            except RuntimeError as err:
                raise InputError(str(err)) from None
        if args.write_threads is not None and args.write_threads < 0:
            raise InputError(f"--write-threads must be 0 (write between chunks) or more, got {args.write_threads}")
        if args.write_processes != "auto" and args.write_processes < 0:
            raise InputError(f"--write-processes must be 0 (no writer processes), more, or auto, got {args.write_processes}")
        if args.unroll is not None and args.unroll < 1:
            raise InputError(f"--unroll must be at least 1, got {args.unroll}")
        if args.write_chunks is not None and args.write_chunks < 1:
            raise InputError(f"--write-chunks must be at least 1, got {args.write_chunks}")
        if args.time_limit is not None and not args.time_limit > 0:
            raise InputError(f"--time-limit must be positive, got {args.time_limit}")
        if args.workers is not None and args.workers < 1:
            raise InputError(f"--workers must be at least 1, got {args.workers}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            setup = build_setup(args.input)
        _multiwalk_launch.mark("input read")
        if setup.host is not None and not args.distributed:
            _sampler_on_the_cpu(setup)
        if setup.export_combined_files and not args.step_files:
            setup.notes.append("export_combined_files: --no-step-files writes no step lines, so no combined.txt")
        from ..executors import launched_rank

        for note in setup.notes if dist.is_writer() and launched_rank() == 0 else ():  # once under mpiexec
            print(f"note: {note}")
        if args.reset_rand and not (args.resume or args.cont):
            raise InputError("--reset-rand goes with --resume or --cont")
        if setup.host is not None:  # the objective goes to the workers whole: they need no more
            from ..executors import workers_for_the_command

            workers_for_the_command(setup.root_dir)
        if setup.algorithm in ("pamc", "mapper"):  # under mpiexec too: the other ranks serve its batches
            return _run_algorithm(setup, args)
        if setup.algorithm != "exchange" and (args.resume or args.cont):
            raise InputError(f"--resume/--cont are for algorithm exchange, not {setup.algorithm}")
        if setup.algorithm != "exchange" and args.nprocs not in (None, 1):
            raise InputError("--nprocs is for algorithm exchange")
        if setup.algorithm == "minsearch" and args.distributed:
            raise InputError("--distributed is for algorithms exchange, pattern, lbfgs and tempering (minsearch is serial)")
        if setup.algorithm == "minsearch" and (args.workers is not None or args.executor is not None):
            raise InputError("--workers and --executor are not for minsearch: Nelder-Mead evaluates one point at a "
                             "time, in this process")
        if setup.host is None and (args.workers is not None or args.executor is not None):
            raise InputError("--workers and --executor are for a Python objective ([solver] backend = \"python\")")
        return _run_algorithm(setup, args)
    except (ObjectiveError, WorkerCrashError) as err:  # the user's objective failed: one paragraph
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return EXIT_FAILED
    except (InputError, FileNotFoundError) as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as err:  # the mesh and neighbour-list readers: file and line in the message
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
