"""Exchange's Pallas form (one kernel per block of Metropolis steps, interpret mode on this CPU)
and the step-file writer that formats in threads beside the sampling.

The kernel must take the XLA form's decisions from the same random numbers (temperatures,
acceptances, counts, best steps: exactly) with its floats to a few ulp (two compilations, see
tests/ulp.py); the threaded writer must write the same bytes as the writer in the caller, and the
files must reach every checkpoint's step when the checkpoint is written.  ~40 s on 2 cores.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from odatse_inputs import himmelblau_exchange, output_files, run_cli
from ulp import assert_fields_close_ulp

import multiwalk as mw
from multiwalk.checkpoint import read_checkpoint
from multiwalk.io import odatse as odatse_io
from multiwalk.solvers import exchange_kernel
from multiwalk.solvers.exchange import temperature_ladder
from multiwalk.spaces import Mesh, build_neighbor_list


def himmelblau_with_a_hole(x):
    # NaN in a corner of the box (x1 + x2 > 4): the kernel must reject and count those moves as the XLA form does
    f = (x[0] ** 2 + x[1] - 11) ** 2 + (x[0] + x[1] ** 2 - 7) ** 2
    return jnp.where(x[0] + x[1] > 4.0, jnp.nan, f)


def _run(kernel: str, betas: tuple, **kw) -> mw.ExchangeResult:
    with jax.enable_x64(True):
        problem = mw.Problem(objective=himmelblau_with_a_hole, lower=[-6.0, -6.0], upper=[6.0, 6.0])
        solver = mw.Exchange(betas=betas, step_width=(0.9, 0.9), kernel=kernel, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # "pallas" must not fall back to XLA here
            return mw.solve(problem, solver, seed=11)


# Floats of the two forms to 64 ulp, values below 1 counted in 1's ulp.  The two compilations
# may contract a step's x + step_width * move into a fused multiply-add differently (1-ulp
# differences in x seen on two CPUs); f = Himmelblau amplifies an ulp of x (~3) by |grad f|:
# near a minimum (f ~ 1, where (x1^2 + x2 - 11)^2 cancels ~10s to ~1) that was 19 ulp of f, and
# below f = 1 the error stays ~|grad f| ulp(x) < 1e-14, i.e. < 48 ulp of 1.
ULPS, SCALE = 64, 1.0


@pytest.mark.parametrize(
    "replicas, options",
    [
        # 6 replicas (the kernel pads to 8), exchanges every 3 steps, thermalisation ending inside a
        # block, chunks of 7 steps (blocks cut by chunk ends), two blocks per loop trip (unroll=6:
        # a trip's second block may have no step left in the chunk and must change nothing)
        (6, dict(numsteps=41, numsteps_exchange=3, numsteps_thermalization=5, max_chunk_steps=7, unroll=6)),
        # an exchange every step (blocks of one step), statistics from step 0
        (3, dict(numsteps=12, numsteps_exchange=1, numsteps_thermalization=0, unroll=1)),
    ],
)
def test_kernel_equals_the_xla_form(replicas, options):
    betas = tuple(temperature_ladder(replicas, Tmin=1.0, Tmax=30.0).tolist())
    xla = _run("xla", betas, **options)
    pallas = _run("pallas", betas, **options)
    assert xla.stats["kernel"] == "xla"
    assert pallas.stats["kernel"] == ("pallas" if jax.default_backend() == "gpu" else "pallas (interpret mode)")
    # every array of the state: integers (temperatures, counts, best steps) exactly, floats to ULPS
    assert_fields_close_ulp(pallas.state, xla.state, ULPS, scale=SCALE)
    assert int(np.sum(xla.state.n_accepted)) > 0  # the chains moved: the comparison is not vacuous
    if replicas == 6:
        assert int(np.sum(xla.state.n_nonfinite)) > 0  # and some moves hit the NaN corner


def test_kernel_plan_and_its_reasons():
    with jax.enable_x64(True):
        problem = mw.Problem(objective=himmelblau_with_a_hole, lower=[-6.0, -6.0], upper=[6.0, 6.0])
        betas = (1.0, 0.5)
        auto = mw.Exchange(betas=betas, numsteps=5, step_width=(1.0, 1.0))
        on_gpu = jax.default_backend() == "gpu"  # 'auto' runs the kernel on GPUs only
        assert auto.kernel_plan(problem).use_pallas is on_gpu
        assert ("on the GPU" if on_gpu else "GPUs only") in auto.kernel_plan(problem).reason
        with pytest.warns(RuntimeWarning, match="per-step records"):
            plan = mw.Exchange(betas=betas, numsteps=5, step_width=(1.0, 1.0), record=4,
                               kernel="pallas").kernel_plan(problem)
        assert not plan.use_pallas
        coords = np.arange(5.0)[:, None]
        mesh = Mesh(coords, build_neighbor_list(coords, 1.0))
        with pytest.warns(RuntimeWarning, match="discrete"):
            plan = mw.Exchange(betas=betas, numsteps=5, mesh=mesh, kernel="pallas").kernel_plan(
                mw.Problem(objective=lambda x: x[0] ** 2, names=["a"]))
        assert not plan.use_pallas
    with pytest.raises(ValueError, match="kernel must be one of"):
        mw.Exchange(betas=betas, numsteps=5, step_width=(1.0,), kernel="triton")
    with pytest.raises(ValueError, match="kernel_block must be a power of two, got 48"):
        mw.Exchange(betas=betas, numsteps=5, step_width=(1.0,), kernel_block=48)
    assert exchange_kernel.KERNELS == ("auto", "xla", "pallas")


# ---------------------------------------------------------------------------- the threaded writer
# Every run of these tests has chunks of at most 16 steps: a checkpoint every 16 steps bounds them
# (the writers' own bound, --write-chunks' piece, is never below 16).  The longest chunk sets how
# many exchange intervals one trip of the compiled loop holds (Exchange.interval_group), so runs
# with other bounds are other compiled programs, which may round differently (tests/ulp.py); with
# one bound every run is the same program and the files must be the same bytes.
CHECKPOINT_EVERY_16 = "checkpoint = true\ncheckpoint_steps = 16"


def _input() -> str:
    """The ODAT-SE input these tests run: 3 replicas per process, 300 steps, seed 777, chunks of <= 16 steps."""
    return himmelblau_exchange(seed=777, numsteps=300, nreplica_per_proc=3, labels=False,
                               algorithm_extra=CHECKPOINT_EVERY_16)


def _cli(folder: Path, *args: str) -> int:
    return run_cli(folder, "input.toml", "--nprocs", "2", *args)


def _solver_options(folder: Path) -> dict:
    """The Exchange options a run in ``folder`` compiled its loop with (from its checkpoint)."""
    return read_checkpoint(folder / "output" / "0" / "checkpoint.npz")[0]["options"]


@pytest.fixture(scope="module")
def in_the_caller(tmp_path_factory) -> Path:
    """The reference: step files written between chunks by the caller (--write-threads 0)."""
    folder = tmp_path_factory.mktemp("caller")
    (folder / "input.toml").write_text(_input())
    assert _cli(folder, "--write-threads", "0") == 0
    return folder


def test_threaded_writer_writes_the_same_bytes(in_the_caller, tmp_path, monkeypatch):
    # pieces of 7 lines: every chunk is cut into many row ranges and temperature groups, formatted
    # on 3 threads and put back in order
    monkeypatch.setattr(odatse_io, "ROWS_PER_PIECE", 7)
    (tmp_path / "input.toml").write_text(_input())
    assert _cli(tmp_path, "--write-threads", "3") == 0
    # the same compiled loop (the same options, max_chunk_steps=16 included), so the same bytes
    assert _solver_options(tmp_path) == _solver_options(in_the_caller)
    ours, reference = output_files(tmp_path), output_files(in_the_caller)
    assert len(reference) == 4 + 6 + 2  # trial/result of 2 processes, 6 result_T, fx, best_result
    assert ours == reference


def test_files_reach_every_checkpoint_and_a_crash_resumes(in_the_caller, tmp_path, monkeypatch):
    """With a slow writer thread, each checkpoint is written only once the files hold its steps;
    a crash in the fourth chunk's step-file writer keeps the third's checkpoint, whose --resume gives the
    reference files."""
    from multiwalk import checkpoint as checkpoint_format

    (tmp_path / "input.toml").write_text(_input())
    original_write, original_on_steps, original_ckpt = (
        odatse_io.StepWriter._write, odatse_io.StepWriter.on_steps, checkpoint_format.write_checkpoint)
    seen = []

    def slow_write(self, *args):
        import time

        time.sleep(0.02)  # the writer lags the sampling: without the flush the files would be behind
        original_write(self, *args)

    def checked_checkpoint(path, state, meta):
        last = (tmp_path / "output" / "1" / "result.txt").read_text().splitlines()[-1]
        seen.append((int(last.split()[0]), int(state.step) - 1))
        original_ckpt(path, state, meta)

    calls = []

    def crashing_on_steps(self, state, first, last):
        original_on_steps(self, state, first, last)
        calls.append(last)
        if len(calls) == 4:
            raise RuntimeError("simulated crash")

    monkeypatch.setattr(odatse_io.StepWriter, "_write", slow_write)
    monkeypatch.setattr(checkpoint_format, "write_checkpoint", checked_checkpoint)
    monkeypatch.setattr(odatse_io.StepWriter, "on_steps", crashing_on_steps)
    with pytest.raises(RuntimeError, match="simulated crash"):
        _cli(tmp_path, "--write-threads", "2")
    # checkpoints after chunks 1-3; the failed fourth chunk is not checkpointed (its files may lag it)
    assert len(seen) == 3 and all(file_step == state_step for file_step, state_step in seen), seen
    monkeypatch.setattr(odatse_io.StepWriter, "on_steps", original_on_steps)
    assert _cli(tmp_path, "--resume") == 0
    assert _solver_options(tmp_path) == _solver_options(in_the_caller)  # one compiled loop: the same bytes
    ours, reference = output_files(tmp_path), output_files(in_the_caller)
    assert ours == reference


def _sphere(x):
    return (x**2).sum()


def test_checkpoint_is_not_written_past_step_files_that_failed_to_flush(tmp_path):
    # A writer's error that surfaces in its flush (before a checkpoint) means the step
    # files do not reach the chunk just run.  The checkpoint stays at the last step the files
    # reach: a checkpoint written past them would make `multiwalk run --resume` cut the files back
    # to the checkpoint's step and append from there, leaving the failed chunk's lines out for good.
    class FailingFlush:
        flushes = 0

        def write(self, problem, state, first, last):
            pass

        def flush(self):
            self.flushes += 1
            if self.flushes == 2:  # the first checkpoint is written; the second flush fails
                raise OSError("disk full (test)")

    problem = mw.Problem(objective=_sphere, lower=[-2.0, -2.0], upper=[2.0, 2.0])
    solver = mw.Exchange(betas=(1.0, 0.5), numsteps=40, step_width=(0.3, 0.3), max_chunk_steps=5, kernel="xla")
    ckpt = tmp_path / "run.npz"
    with pytest.raises(OSError, match="disk full"):
        mw.solve(problem, solver, checkpoint=ckpt, checkpoint_every=0.0, progress=False, writer=FailingFlush())
    meta, _ = read_checkpoint(ckpt)
    # exact: the checkpoint written after the first (successful) flush holds the first chunk, 1 step
    assert meta["done"] == [1], f"checkpoint at {meta['done']} is past the step files (they reach [1])"


def test_writer_thread_errors_reach_the_caller(tmp_path, monkeypatch):
    (tmp_path / "input.toml").write_text(_input())

    def failing(columns):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(odatse_io, "_csv_bytes", failing)
    with pytest.raises(OSError, match="disk full"):
        _cli(tmp_path, "--write-threads", "2")
    assert _cli(tmp_path, "--write-threads", "-1") == 2  # a usage error, before anything runs
