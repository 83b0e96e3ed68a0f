"""``multiwalk run`` with a Python objective starts its worker processes before JAX is imported
(src/_multiwalk_launch.py), the run takes them, and an error after they started leaves none behind."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

import _multiwalk_launch as launch
from multiwalk.cli import build_parser

SRC = Path(__file__).resolve().parents[1] / "src"

INPUT = textwrap.dedent('''
    [base]
    dimension = 2
    output_dir = "out"
    [solver]
    name = "python"
    function = "square.py:square"
    backend = "python"
    [algorithm]
    name = "exchange"
    seed = 0
    [algorithm.param]
    min_list = [-1.0, -1.0]
    max_list = [1.0, 1.0]
    step_list = [0.1, 0.1]
    [algorithm.exchange]
    Tmin = 0.1
    Tmax = 1.0
    numsteps = 4
    numsteps_exchange = 2
    nreplica_per_proc = 2
''')


def test_the_early_reading_knows_every_option_of_run() -> None:
    # an option the early reading does not know only makes it give up (no early start), but every
    # option of the run parser should be known, or a plain command line would start late
    run = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    spelled = {s for a in run._actions for s in a.option_strings if s.startswith("--")}
    given_up_on = {"--help", "--distributed"}  # the command does no run, or runs over several hosts
    assert spelled - given_up_on == launch.RUN_OPTIONS_WITH_VALUE | launch.RUN_FLAGS
    assert launch.run_options_read_early(["run", "in.toml", "--workers=3", "--no-progress"]) == {
        "input": "in.toml", "workers": 3, "executor": None}
    assert launch.run_options_read_early(["run", "--executor", "dask", "in.toml"])["executor"] == "dask"
    for line in (["run", "in.toml", "--work", "3"], ["run", "in.toml", "-h"], ["run", "a", "b"], ["lbfgs"], ["run"]):
        assert launch.run_options_read_early(line) is None, line


SQUARE = """import os
def square(x):
    with open("platforms.txt", "w") as f:  # what the workers' environment says of JAX's platforms
        f.write(os.environ.get("JAX_PLATFORMS", "unset"))
    return float(x[0] ** 2 + x[1] ** 2)
"""


# a module-level object whose release says the interpreter is tearing the modules down
TEARDOWN_MARKER = """
class _TornDown:
    def __del__(self, write=os.write):
        write(2, b"modules torn down\\n")
_marker = _TornDown()
"""

# an exit handler registered at start-up, before the command's own (as coverage's is), and the marker,
# in the command's process only (not in its fork server nor its resource tracker)
SITECUSTOMIZE = "import atexit, os, sys\n" + textwrap.dedent("""
    argv = sys.orig_argv
    if "-m" in argv and argv[argv.index("-m") + 1:][:1] == ["multiwalk"]:
        atexit.register(print, "an earlier exit handler ran", file=sys.stderr, flush=True)
""") + textwrap.indent(TEARDOWN_MARKER, "    ")


def _command(tmp_path: Path, *options: str) -> tuple[subprocess.CompletedProcess, str]:
    """``python -m multiwalk run input.toml --workers 2 <options>`` with its timeline and its import
    times on stderr, JAX's platforms not set; the processes it starts carry a tag in their environment."""
    (tmp_path / "input.toml").write_text(INPUT)
    (tmp_path / "square.py").write_text(SQUARE)
    (tmp_path / "site").mkdir()  # an exit handler registered before the command's, as coverage's is
    (tmp_path / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "JAX_PLATFORM_NAME")}
    env.update(PYTHONPATH=os.pathsep.join([str(SRC), str(tmp_path / "site")]), MULTIWALK_TIMELINE="1",
               MULTIWALK_EARLY_TEST=tag)
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "multiwalk", "run", "input.toml", "--workers", "2",
                           "--no-progress", *options], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return done, tag


def _tagged_processes(tag: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"MULTIWALK_EARLY_TEST={tag}".encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:  # gone, or not ours
            continue
    return found


def _line(stderr: str, text: str) -> int:
    return next(i for i, line in enumerate(stderr.splitlines()) if text in line)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the worker processes in /proc")
def test_the_pool_starts_before_jax_is_imported_and_the_run_takes_it(tmp_path: Path) -> None:
    done, _ = _command(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    started = _line(done.stderr, "worker pool started in the background")
    jax_imported = next(i for i, line in enumerate(done.stderr.splitlines())
                        if line.startswith("import time:") and line.split("|")[-1].strip() == "jax")
    assert started < jax_imported  # -X importtime writes a module's line once it is imported
    assert "the run took the workers started early" in done.stderr
    assert done.stderr.count("workers ready") == 1  # the run sends them no second round of start-up tasks
    assert (tmp_path / "out" / "best_result.txt").exists()
    # the sampler of a Python objective runs on the CPU: said before JAX's import (it then skips
    # the GPU plugins), and so the workers' environment says it too
    assert (tmp_path / "platforms.txt").read_text() == "cpu"
    # the exit handler registered before the command's ran, and the process ended before tearing its
    # modules down (the fast end, taken after every handler)
    assert "an earlier exit handler ran" in done.stderr and "modules torn down" not in done.stderr


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the worker processes in /proc")
def test_an_input_error_after_the_early_start_leaves_no_worker_process(tmp_path: Path) -> None:
    done, tag = _command(tmp_path, "--reset-rand")  # refused after the input is read: the pool is up by then
    assert done.returncode == 2
    assert "--reset-rand goes with --resume or --cont" in done.stderr
    assert "worker pool started in the background" in done.stderr
    deadline = time.monotonic() + 10  # the fork server ends when it sees its parent gone: within moments
    while _tagged_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _tagged_processes(tag) == []


def test_jax_platforms_is_said_only_before_jax_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    # once JAX is imported (here by multiwalk; in a command, by a sitecustomize), it has read its
    # platforms: the variable would change nothing in this process, yet say "cpu" to the workers
    environ = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "JAX_PLATFORM_NAME")}
    monkeypatch.setattr(launch.os, "environ", environ)
    monkeypatch.setattr(launch, "_CHOSE_CPU", [])
    launch._say_cpu_before_jax()
    assert "JAX_PLATFORMS" not in environ and not launch.chose_the_cpu()
    monkeypatch.delitem(sys.modules, "jax")  # as at the top of multiwalk/__init__ in the command
    launch._say_cpu_before_jax()
    assert environ["JAX_PLATFORMS"] == "cpu" and launch.chose_the_cpu()
    environ["JAX_PLATFORMS"], launch._CHOSE_CPU[:] = "cuda", []  # the user's choice stays
    launch._say_cpu_before_jax()
    assert environ["JAX_PLATFORMS"] == "cuda" and not launch.chose_the_cpu()


def test_the_command_on_the_cpu_keeps_jax_from_searching_for_plugins() -> None:
    # JAX initialises every installed PJRT plugin when its first backend starts, whatever its platforms
    # (the GPU's loads CUDA's libraries: 0.13-0.16 s on an H100 host); the command that chose the CPU
    # keeps it from searching.  A fresh interpreter: this one has started its backends.
    code = textwrap.dedent("""
        import os
        from types import SimpleNamespace
        os.environ.pop("JAX_PLATFORMS", None)
        import _multiwalk_launch
        _multiwalk_launch._say_cpu_before_jax()  # as the command does before JAX's import
        import jax
        from jax._src import xla_bridge
        searched = []
        xla_bridge.discover_pjrt_plugins = lambda: searched.append(True)
        from multiwalk.commands import run
        run._sampler_on_the_cpu(SimpleNamespace(notes=[]))
        print(jax.default_backend(), searched)
    """)
    env = dict(os.environ, PYTHONPATH=str(SRC))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.split("\n")[-2:] == ["cpu []", ""], done.stderr[-2000:]


@pytest.mark.parametrize("returned", [True, False])
def test_the_fast_end_comes_after_every_exit_handler(returned: bool) -> None:
    # handlers registered before the command's own (a sitecustomize's, coverage's) and after it
    # (JAX's, multiprocessing's) all run, in the usual order; then the process ends with the command's
    # status, its modules not torn down.  A command that did not return (an error, --help) ends as usual.
    script = "import atexit, os\n" + TEARDOWN_MARKER + textwrap.dedent(f"""
        atexit.register(print, "registered before", flush=True)
        import _multiwalk_launch as launch
        launch._register_fast_exit()
        atexit.register(print, "registered after", flush=True)
        if {returned}:
            launch.end_after_cleanup(7)
    """)
    env = dict(os.environ, PYTHONPATH=str(SRC))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout == "registered after\nregistered before\n"
    assert (done.returncode, "modules torn down" in done.stderr) == ((7, False) if returned else (0, True)), done.stderr


def test_a_call_of_main_with_its_own_arguments_never_ends_the_process(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a script (perhaps named multiwalk) calling main([...]) goes on after it, to its own exit status
    from multiwalk import cli

    monkeypatch.setattr(launch, "_EXIT_STATUS", [])
    assert cli.main(["run", str(tmp_path / "missing.toml")]) != 0
    assert launch._EXIT_STATUS == []
