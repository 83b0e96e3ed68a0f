"""Non-JAX objectives (``Problem(backend="python")``): the same seed gives the same numbers serially,
on 2 worker processes, on a real 2-rank MPI run and on a real Dask LocalCluster; a failing objective
is one paragraph; ignore_error counts; a dying worker is restarted, or reported with the checkpoint kept.

One Problem object serves the executor comparisons (its engine swapped between runs), so the
solver's loop is compiled once for them: the compiled callback reads the engine when it runs.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import host_objective_cases as cases
import jax
import numpy as np
import pytest
from odatse_inputs import himmelblau_exchange, run_cli

import multiwalk as mw
from multiwalk import host_objective
from multiwalk.executors import Engine
from multiwalk.host_objective import ObjectiveError, WorkerCrashError

solve_module = sys.modules["multiwalk.solve"]  # the package exports the function solve

HERE = Path(__file__).parent
SEED = 5
# where crash_when_marked looks for its marks, fixed before any worker process starts
CRASH_DIR = Path(os.environ.setdefault("MULTIWALK_TEST_CRASH_DIR", tempfile.mkdtemp(prefix="multiwalk-crash-")))


@pytest.fixture(scope="module")
def x64():
    with jax.enable_x64(True):
        yield


@pytest.fixture(scope="module")
def problem(x64):
    return mw.Problem(objective=cases.crash_when_marked, lower=cases.LOWER, upper=cases.UPPER, backend="python",
                      executor="serial")


@pytest.fixture(scope="module")
def serial(problem):
    """The reference: every point evaluated in this process, one after another."""
    problem.host_objective.engine = Engine("serial")
    return mw.solve(problem, cases.solver(), seed=SEED)


def _same(result, reference) -> None:
    # exact: every executor evaluates the same float64 points with the same function, in the
    # batch's order, so the run is the same number for number
    np.testing.assert_array_equal(np.asarray(result.replica_fx), np.asarray(reference.replica_fx))
    np.testing.assert_array_equal(np.asarray(result.x), np.asarray(reference.x))


def test_serial_run_finds_the_minimum_and_counts(serial):
    # the minimum of sum((x-1)^2) + 0.1 sin(x0) is near (0.95, 1); 24 steps of 4 replicas get within 0.5
    assert serial.fun < 0.5 and np.all(np.abs(np.asarray(serial.x) - 1.0) < 0.8)
    stats = serial.stats["host_objective"]
    assert stats["executor"] == "serial" and stats["errors"] == 0
    # one batch per Monte Carlo step (24: the start and 23 moves) and one for result.fun: never one per point
    assert stats["batches"] == cases.STEPS + 1
    assert 0 < stats["points"] <= 4 * (cases.STEPS + 1)


def test_two_worker_processes_give_the_same_result(problem, serial):
    # a worker that dies once (os._exit in the objective) is replaced and the batch evaluated again
    marker = CRASH_DIR / "once"
    marker.touch()
    problem.host_objective.engine = engine = Engine("processes", 2)
    try:
        result = mw.solve(problem, cases.solver(), seed=SEED)
    finally:
        engine.shutdown()
    _same(result, serial)
    assert result.stats["host_objective"]["workers"] == 2
    assert result.stats["host_objective"]["restarts"] == 1 and not marker.exists()


def test_the_start_is_evaluated_by_the_workers_while_the_loops_are_prepared(problem, serial, monkeypatch):
    # on worker processes the start's batch is evaluated on a thread of its own while this thread
    # traces and loads the step's programs (solve._prepare_loops, once, for the start's shapes);
    # every later batch here; the numbers are the serial run's
    host = problem.host_objective
    on_main, prepared = [], []
    evaluate, prepare_loops = host.evaluate, solve_module._prepare_loops
    monkeypatch.setattr(host, "evaluate", lambda X: on_main.append(threading.current_thread() is threading.main_thread())
                        or evaluate(X))
    monkeypatch.setattr(solve_module, "_prepare_loops", lambda *args: prepared.append(args[-1]) or prepare_loops(*args))
    host.engine = engine = Engine("processes", 2)
    try:
        result = mw.solve(problem, cases.solver(), seed=SEED)
    finally:
        engine.shutdown()
    _same(result, serial)
    assert on_main[0] is False and all(on_main[1:]) and len(on_main) == cases.STEPS + 1
    assert len(prepared) == 1 and jax.tree_util.tree_structure(prepared[0]) == jax.tree_util.tree_structure(result.state)


def test_a_ctrl_c_while_the_start_is_evaluated_waits_for_its_batch(problem, monkeypatch):
    # Ctrl-C while this thread waits for the start's batch (here: its future's result() raising
    # KeyboardInterrupt, the batch held until then and 0.2 s more): the batch ends before the
    # interrupt goes on; left running, it would count its points into the next run's statistics
    from multiwalk import host_loop

    real = host_loop._in_background
    waiting = threading.Event()
    finished = []  # the batch's end, recorded before its thread hands the values over

    class Interrupted:
        def __init__(self, future):
            self.future = future

        def result(self):
            waiting.set()
            raise KeyboardInterrupt

        def exception(self):
            return self.future.exception()

    def held(fun, *args):
        waiting.wait(10)
        time.sleep(0.2)
        values = fun(*args)
        finished.append(True)
        return values

    monkeypatch.setattr(host_loop, "_in_background", lambda fun, *args: Interrupted(real(held, fun, *args)))
    problem.host_objective.engine = engine = Engine("processes", 2)
    try:
        with pytest.raises(KeyboardInterrupt):
            mw.solve(problem, cases.solver(), seed=SEED + 1)
        # the batch had ended when the interrupt went on (its thread may still be ending: not asked)
        assert waiting.is_set() and finished == [True]
    finally:
        engine.shutdown()


def test_dask_local_cluster_gives_the_same_result(problem, serial):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        problem.host_objective.engine = Engine(client)
        result = mw.solve(problem, cases.solver(), seed=SEED)
    _same(result, serial)
    assert result.stats["host_objective"]["executor"] == "dask" and result.stats["host_objective"]["workers"] == 2


def _mpiexec() -> str:
    """The ``mpiexec`` beside this Python (mpich's, from the dev extras), else on the PATH; skips without one."""
    pytest.importorskip("mpi4py")
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec (pip install mpich)")
    return mpiexec


def _mpiexec_multiwalk_run(folder: Path, *options: str, timeout: float = 240,
                           **env: str) -> subprocess.CompletedProcess:
    """``mpiexec -n 2 python -m multiwalk run input.toml *options`` in ``folder``, its output captured."""
    return subprocess.run([_mpiexec(), "-n", "2", sys.executable, "-m", "multiwalk", "run", "input.toml", *options],
                          cwd=folder, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env})


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (its path relative to it) and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_two_rank_mpi_run_gives_the_same_result(serial, tmp_path):
    out = tmp_path / "mpi.npz"
    run = subprocess.run(
        [_mpiexec(), "-n", "2", sys.executable, "-m", "mpi4py.futures", str(HERE / "host_objective_mpi.py"), str(out)],
        capture_output=True, text=True, timeout=240, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    saved = np.load(out)
    assert str(saved["name"]) == "mpi" and int(saved["workers"]) == 1  # rank 0 runs, rank 1 evaluates
    np.testing.assert_array_equal(saved["replica_fx"], np.asarray(serial.replica_fx))
    np.testing.assert_array_equal(saved["x"], np.asarray(serial.x))


PLAIN_MPI_INPUT = """
[base]
dimension = 2
output_dir = "out"
[solver]
name = "python"
function = "cheap.py:sphere"
backend = "python"
[algorithm]
name = "exchange"
seed = 3
[algorithm.param]
min_list = [-5.0, -5.0]
max_list = [5.0, 5.0]
step_list = [0.3, 0.3]
[algorithm.exchange]
Tmin = 0.1
Tmax = 10.0
numsteps = 6
numsteps_exchange = 2
nreplica_per_proc = 4
"""


PLAIN_MPI_PAMC_INPUT = PLAIN_MPI_INPUT.split("[algorithm]")[0] + """
[algorithm]
name = "pamc"
seed = 7
[algorithm.param]
min_list = [-5.0, -5.0]
max_list = [5.0, 5.0]
step_list = [0.3, 0.3]
[algorithm.pamc]
Tmin = 1.0
Tmax = 10.0
Tnum = 2
numsteps_annealing = 2
nreplica_per_proc = 4
resampling_interval = 2
"""


SPHERE_ENDING_LATE_OFF_RANK_0 = """import atexit
import os
import time

import numpy as np


def _end_late(rank):
    time.sleep(0.5)
    open(f"rank {rank} ended", "w").close()


def sphere(x):
    rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")
    if rank is not None and "SPHERE_SEEN" not in os.environ:  # once per process launched by mpiexec
        os.environ["SPHERE_SEEN"] = "1"
        with open("ranks", "a") as ranks:  # the ranks that evaluated
            ranks.write(rank + " ")
        if rank != "0":
            atexit.register(_end_late, rank)
    return float(np.sum(x * x))
"""


@pytest.mark.parametrize("text", [PLAIN_MPI_INPUT, PLAIN_MPI_PAMC_INPUT], ids=["exchange", "pamc"])
def test_plain_mpiexec_command_gives_the_serial_files(tmp_path, text):
    # ODAT-SE's launch, `mpiexec -n 2 multiwalk run input.toml`: ODAT-SE's 2 x nreplica_per_proc
    # replicas; rank 0 samples, and both ranks evaluate a piece of each batch, rank 1 serving before
    # it imports JAX (its timeline says so); the output folder is that of the serial run of
    # `--nprocs 2`, byte for byte (the same seed, the same numbers: the values are the objective's,
    # on either rank).  pamc too: its rank 0 must serve rank 1 the end of the batches, or mpiexec
    # kills rank 1 (exit 9).
    # Rank 1 ends 0.5 s after rank 0 (its objective's exit handler; a loaded machine does so by
    # itself): rank 0 must end MPI before it leaves, or mpiexec kills rank 1 before that handler ends.
    for folder in ("mpi", "serial"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "cheap.py").write_text(SPHERE_ENDING_LATE_OFF_RANK_0)
        (tmp_path / folder / "input.toml").write_text(text)
    run = _mpiexec_multiwalk_run(tmp_path / "mpi", "--no-progress", MULTIWALK_TIMELINE="1")
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "mpi" / "rank 1 ended").exists(), "mpiexec killed rank 1 before its exit handlers ran"
    assert "rank 1 serves rank 0's batches" in run.stderr
    assert "executor mpi (2 workers)" in run.stdout or text is PLAIN_MPI_PAMC_INPUT  # pamc does not print it
    assert sorted(set((tmp_path / "mpi" / "ranks").read_text().split())) == ["0", "1"]  # both evaluated
    assert run_cli(tmp_path / "serial", "input.toml", "--executor", "serial", "--nprocs", "2") == 0
    serial = _files(tmp_path / "serial" / "out")
    assert serial and _files(tmp_path / "mpi" / "out") == serial


def test_plain_mpiexec_command_with_an_error_on_rank_0_ends(tmp_path):
    # Rank 1 serves from the launcher while rank 0 reads the options and the input; an error there
    # (one the launcher cannot see: --nprocs 0) must end rank 1 too, with rank 0's status, not leave
    # it waiting for batches forever.  60 s: a run that ends takes ~1 s.
    (tmp_path / "cheap.py").write_text("def sphere(x):\n    return float(sum(x * x))\n")
    (tmp_path / "input.toml").write_text(PLAIN_MPI_INPUT)
    run = _mpiexec_multiwalk_run(tmp_path, "--nprocs", "0", timeout=60, MULTIWALK_TIMELINE="1")
    assert "rank 1 serves rank 0's batches" in run.stderr  # the case at stake: rank 1 served early
    assert run.returncode == 2 and "--nprocs must be at least 1, got 0" in run.stderr, run.stderr[-3000:]


SPHERE_SLOW_SAYING_RANK_1_SAMPLES = """import os
import time

import numpy as np

CALLS = [0]


def sphere(x):
    CALLS[0] += 1
    if CALLS[0] == 20 and (os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")) == "1":
        open("rank 1 samples", "w").close()  # its 5th batch: the run is in its chunks
    time.sleep(0.005)
    return float(np.sum(x * x))
"""


@pytest.mark.parametrize("pool", [[], ["-m", "mpi4py.futures"]], ids=["plain", "mpi4py.futures"])
def test_ctrl_c_on_mpiexec_ends_the_run_with_its_partial_result(tmp_path, pool):
    # Ctrl-C on mpiexec reaches every rank.  Rank 0 ends the run after the chunk in flight, with its
    # files and checkpoint (exit 130); the ranks serving it ignore the signal: one that died of it,
    # or handed back a KeyboardInterrupt, would leave that chunk without its values (exit 1 or a hang).
    # So do the ranks of mpi4py.futures' own pool (`python -m mpi4py.futures`), which then ends the
    # job with MPI_Abort(130), as it does for any status but 0.
    (tmp_path / "cheap.py").write_text(SPHERE_SLOW_SAYING_RANK_1_SAMPLES)
    (tmp_path / "input.toml").write_text(PLAIN_MPI_INPUT.replace("numsteps = 6", "numsteps = 100000"))
    command = [_mpiexec(), "-n", "2", sys.executable, *pool, "-m", "multiwalk", "run", "input.toml", "--no-progress"]
    run = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        deadline = time.monotonic() + 200  # a loaded 2-core machine starts the two ranks in seconds
        while not (tmp_path / "rank 1 samples").exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=120)
    finally:
        run.kill()
    assert run.returncode == 130, err[-3000:]
    assert "interrupted (Ctrl-C or SIGTERM)" in out and (tmp_path / "out" / "0" / "checkpoint.npz").exists()


def test_plain_mpiexec_with_a_jax_objective_runs_on_rank_0_alone(tmp_path):
    # Every rank of `mpiexec -n 2 multiwalk run` runs the command: with a JAX objective (nothing to
    # hand out) rank 0 runs it, saying so, and rank 1 ends, rather than both running it and writing
    # the same files at once.  The folder is a single process's, byte for byte.
    pytest.importorskip("mpi4py")
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec (pip install mpich)")
    # Its replicas are ODAT-SE's: 2 x nreplica_per_proc, as `--nprocs 2` in one process.
    for folder in ("mpi", "one"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "input.toml").write_text(himmelblau_exchange(seed=3, numsteps=6, numsteps_exchange=2))
    run = _mpiexec_multiwalk_run(tmp_path / "mpi", "--no-progress")
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("output in") == 1 and "a JAX objective runs on rank 0 alone (2 x" in run.stderr
    assert run_cli(tmp_path / "one", "input.toml", "--nprocs", "2") == 0
    one = _files(tmp_path / "one" / "output")
    assert one and _files(tmp_path / "mpi" / "output") == one


def _raises_right_of_two(x: np.ndarray) -> float:
    if x[0] > 2.0:
        _raises_right_of_two.raised += 1  # type: ignore[attr-defined]
        raise RuntimeError("the simulation diverged")
    return cases.shifted_sphere(x)


def test_a_failing_objective_is_one_paragraph(x64):
    _raises_right_of_two.raised = 0  # type: ignore[attr-defined]
    problem = mw.Problem(objective=_raises_right_of_two, lower=cases.LOWER, upper=cases.UPPER, backend="python",
                         executor="serial")
    with pytest.raises(ObjectiveError) as err:
        mw.solve(problem, cases.solver(), seed=SEED)
    text = str(err.value)
    assert "\n" not in text and "Traceback" not in text
    assert "_raises_right_of_two(x) raised RuntimeError: the simulation diverged at replica " in text
    x = [float(v) for v in text.split("x = [")[1].split("]")[0].split(",")]
    assert x[0] > 2.0 and "ignore_error" in text


def test_ignore_error_rejects_and_counts(x64):
    _raises_right_of_two.raised = 0  # type: ignore[attr-defined]
    problem = mw.Problem(objective=_raises_right_of_two, lower=cases.LOWER, upper=cases.UPPER, backend="python",
                         executor="serial", ignore_error=True)
    result = mw.solve(problem, cases.solver(), seed=SEED)
    stats = result.stats["host_objective"]
    assert stats["errors"] == _raises_right_of_two.raised > 0  # every raise counted, in this process (serial)
    assert "RuntimeError: the simulation diverged" in stats["first_error"]
    assert np.isfinite(result.fun) and result.x[0] <= 2.0  # a point that raised is never taken
    assert result.stats["nonfinite"] >= stats["errors"]  # ... and the sampler counted it as rejected


def test_a_worker_that_keeps_dying_is_reported_and_the_checkpoint_resumes(problem, serial, tmp_path, monkeypatch):
    marker, ckpt = CRASH_DIR / "always", tmp_path / "run.npz"
    monkeypatch.setattr(host_objective, "MAX_RESTARTS", 0)  # report the first crash (a restart is tested above)
    chunks = []

    def crash_after_two_chunks(info):
        chunks.append(info["done"])
        if len(chunks) == 2:
            marker.touch()  # from now on every worker that evaluates dies

    problem.host_objective.engine = engine = Engine("processes", 2)
    try:
        with pytest.raises(WorkerCrashError, match="worker process of the processes executor died .* last checkpoint"):
            mw.solve(problem, cases.solver(), seed=SEED, checkpoint=ckpt, checkpoint_every=0.0, chunk_seconds=1e-4,
                     callback=crash_after_two_chunks)
        marker.unlink()
        resumed = mw.solve(problem, cases.solver(), seed=SEED, resume=ckpt)
    finally:
        engine.shutdown()
    _same(resumed, serial)


def test_bad_options_are_refused_before_anything_runs(x64):
    with pytest.raises(ValueError, match="workers= goes with backend='python'"):
        mw.Problem(objective=cases.shifted_sphere, lower=cases.LOWER, upper=cases.UPPER, workers=2)
    with pytest.raises(ValueError, match="executor='threads'"):
        mw.Problem(objective=cases.shifted_sphere, lower=cases.LOWER, upper=cases.UPPER, backend="python",
                   executor="threads")
    with pytest.raises(ValueError, match=r"objective \(backend='python'\) at x = \[0.0, 0.0\] .* failed: ValueError"):
        mw.Problem(objective=lambda x: "not a number", lower=cases.LOWER, upper=cases.UPPER, backend="python")
    problem = mw.Problem(objective=cases.shifted_sphere, lower=cases.LOWER, upper=cases.UPPER, backend="python",
                         executor="serial")
    with pytest.raises(TypeError, match="needs gradients"):
        mw.solve(problem, mw.LBFGS(starts=2), seed=0)


CLI_INPUT = """
[base]
dimension = 2
output_dir = "output"
[solver]
name = "python"
function = "sim.py:diverges_right_of_two"
[algorithm]
name = "exchange"
seed = 3
[algorithm.param]
min_list = [-3.0, -3.0]
max_list = [3.0, 3.0]
step_list = [0.7, 0.7]
[algorithm.exchange]
Tmin = 0.3
Tmax = 10.0
numsteps = 16
numsteps_exchange = 4
nreplica_per_proc = 4
"""

CLI_FUNCTION = """
import numpy as np

def diverges_right_of_two(x):
    if x[0] > 2.0:
        raise RuntimeError("the simulation diverged")
    return float(np.sum((np.asarray(x) - 1.0) ** 2))
"""


def test_multiwalk_run_with_a_numpy_solver(tmp_path, capsys):
    (tmp_path / "sim.py").write_text(CLI_FUNCTION)
    (tmp_path / "input.toml").write_text(CLI_INPUT)
    (tmp_path / "ignore.toml").write_text(CLI_INPUT + "[runner]\nignore_error = true\n")
    with jax.enable_x64(False):  # multiwalk run sets the precision itself
        failed = run_cli(tmp_path, "input.toml", "--executor", "serial")
        err = capsys.readouterr()
        ran = run_cli(tmp_path, "ignore.toml", "--executor", "serial")
        out = capsys.readouterr().out
    assert failed == 1 and "Traceback" not in err.err
    assert "is not a jax.numpy function" in err.out  # [solver] backend found out, and said
    assert re.search(r"error: the objective diverges_right_of_two\(x\) raised RuntimeError: the simulation diverged "
                     r"at replica \d of 4, x = \[2\.", err.err)
    assert ran == 0 and "ignore_error: " in out and "evaluations raised and were rejected moves" in out
    assert (tmp_path / "output" / "fx.txt").exists()


MINSEARCH_INPUT = """
[base]
dimension = 2
output_dir = "output"
[solver]
name = "python"
function = "sim.py:fails_left_of"
vectorized = true
[algorithm]
name = "minsearch"
seed = 3
[algorithm.param]
min_list = [-3.0, -3.0]
max_list = [3.0, 3.0]
initial_list = [2.0, 2.0]
"""

MINSEARCH_FUNCTION = """
import numpy as np

def fails_left_of(X):  # vectorized: X (m, 2) -> (m,)
    if np.any(X[:, 0] < 1.5):
        raise RuntimeError("no convergence")
    return np.sum((X - 1.0) ** 2, axis=1)
"""


def test_minsearch_calls_a_vectorized_objective_one_row_at_a_time(tmp_path, capsys):
    """minsearch with a Python objective: a vectorized one gets a batch of one row, [runner]
    ignore_error makes a point that raised f = inf (and says how many), without it the run stops
    with one paragraph; --workers is refused (Nelder-Mead evaluates one point at a time)."""
    (tmp_path / "sim.py").write_text(MINSEARCH_FUNCTION)
    (tmp_path / "input.toml").write_text(MINSEARCH_INPUT)
    (tmp_path / "ignore.toml").write_text(MINSEARCH_INPUT + "[runner]\nignore_error = true\n")
    failed = run_cli(tmp_path, "input.toml")
    err = capsys.readouterr().err
    assert failed == 1 and "Traceback" not in err
    assert re.search(r"error: the objective .*fails_left_of.* raised RuntimeError: no convergence at x = \[1\.", err)
    assert run_cli(tmp_path, "ignore.toml", "--workers", "2") == 2
    assert "--workers and --executor are not for minsearch" in capsys.readouterr().err
    assert run_cli(tmp_path, "ignore.toml") == 0
    out = capsys.readouterr().out
    assert re.search(r"ignore_error: \d+ evaluations raised and were f = inf; the first: x = \[1\.", out)
    res = dict(ln.split(" = ") for ln in (tmp_path / "output" / "res.txt").read_text().splitlines())
    # the minimum of (x - 1)^2 where x1 >= 1.5: (1.5, 1), f = 0.25, to Nelder-Mead's xatol 1e-4 (f within ~1e-3)
    assert float(res["fx"]) == pytest.approx(0.25, abs=1e-3)


def test_a_vectorized_objective_gives_the_rows_values(x64):
    calls = []

    def batch(X):
        calls.append(X.shape)
        return np.array([cases.shifted_sphere(x) for x in X])

    problem = mw.Problem(objective=batch, lower=cases.LOWER, upper=cases.UPPER, backend="python", vectorized=True,
                         executor="serial")
    X = np.array([[[0.5, 1.5], [2.0, -1.0], [9.0, 0.0]], [[1.0, 1.0], [-3.0, 3.0], [0.0, 0.0]]])
    values = problem.host_objective.evaluate(X)
    expected = [[cases.shifted_sphere(x) for x in row] for row in X]
    expected[0][2] = np.inf  # outside the box: not sent out
    np.testing.assert_array_equal(values, expected)  # exact: the same function on the same float64 rows
    assert calls[-1] == (5, 2)  # one call with the five points inside the box


def _sum_of_squares(x: np.ndarray) -> float:
    return float(np.sum(x**2))


def test_a_point_on_the_float32_box_edge_is_evaluated():
    """float32(0.1) lies above the float64 upper bound 0.1 but is the solvers' edge of the box: it is
    evaluated, not set to +inf as a point outside."""
    problem = mw.Problem(objective=_sum_of_squares, lower=[0.0, 0.0], upper=[0.1, 0.1], backend="python",
                         executor="serial", dtype="float32")
    result = mw.solve(problem, mw.Mapper(points=[[0.1, 0.1], [0.05, 0.05]]), progress=False)
    # float32 arithmetic of 2 * 0.1^2 and 2 * 0.05^2: rtol 1e-6 (a few float32 ulps)
    np.testing.assert_allclose(result.funs, [0.02, 0.005], rtol=1e-6)


def test_a_module_found_in_root_dir_travels_to_the_workers_by_value(tmp_path, monkeypatch):
    # "module:callable" is imported from root_dir; the workers (other processes, another working
    # directory) could not import it by name.  Unpickled here
    # with the module gone from sys.modules and root_dir off the path, as a worker would: no
    # process and nothing compiled.
    import sys

    import cloudpickle

    from multiwalk.commands.run import build_setup

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "objective_in_root_dir.py").write_text(CLI_FUNCTION)
    text = CLI_INPUT.replace('"sim.py:diverges_right_of_two"', '"objective_in_root_dir:diverges_right_of_two"')
    (tmp_path / "input.toml").write_text(text.replace("[base]", '[base]\nroot_dir = "proj"'))
    monkeypatch.chdir(tmp_path)  # root_dir "proj" is not the working directory
    fn = build_setup(tmp_path / "input.toml").function
    payload = cloudpickle.dumps(fn)
    monkeypatch.delitem(sys.modules, "objective_in_root_dir")
    # the command keeps root_dir on its own path; a worker starts without it unless told
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path / "proj")])
    assert cloudpickle.loads(payload)(np.array([1.0, 2.0])) == 1.0


def test_an_objective_in_root_dir_may_import_its_neighbours(tmp_path, monkeypatch):
    # a module of root_dir that imports another of root_dir when called (here and in a worker,
    # whose initializer puts root_dir first on its path); no process and nothing compiled
    import sys

    import _multiwalk_worker
    from multiwalk.commands.run import build_setup

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "neighbour_helper.py").write_text("def sq(x):\n    return float((x ** 2).sum())\n")
    (tmp_path / "proj" / "neighbour_user.py").write_text("def f(x):\n    import neighbour_helper\n"
                                                          "    return neighbour_helper.sq(x)\n")
    text = CLI_INPUT.replace('"sim.py:diverges_right_of_two"', '"neighbour_user:f"')
    (tmp_path / "input.toml").write_text(text.replace("[base]", '[base]\nroot_dir = "proj"'))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # restored after the test
    assert build_setup(tmp_path / "input.toml").function(np.array([1.0, 2.0])) == 5.0
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path / "proj")])
    import signal

    handler = signal.getsignal(signal.SIGINT)
    try:
        _multiwalk_worker.start_worker((str(tmp_path / "proj"),))  # also ignores Ctrl-C, as a worker does
    finally:
        signal.signal(signal.SIGINT, handler)
    assert sys.path[0] == str(tmp_path / "proj")


def test_the_piece_of_rank_0_waits_for_as_many_pieces_as_the_other_ranks_can_hold():
    # mpiexec -n 2 with --workers 4: rank 0 keeps one piece and sends 3, of which rank 1 holds one at a
    # time.  Rank 0 starts on its own once that one is sent, not once rank 1 has done two of them.
    import concurrent.futures as cf

    futures = [cf.Future() for _ in range(3)]
    futures[0].set_running_or_notify_cancel()  # sent to rank 1; the others wait in the executor's queue
    waiting = threading.Thread(target=host_objective._until_sent, args=(futures, 1, 600.0), daemon=True)
    waiting.start()
    waiting.join(timeout=60)  # it returns at once; 60 s is far above any machine's load
    assert not waiting.is_alive()
    t0 = time.perf_counter()
    host_objective._until_sent(futures, 2, seconds=0.05)  # one sent of the two ranks' worth: waits it out
    assert time.perf_counter() - t0 >= 0.05
