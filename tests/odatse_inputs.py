"""ODAT-SE input.toml texts, ``multiwalk run`` in a folder, Ctrl-C after a chunk, and the reading of
a run's output files, that the tests share (not a test module: pytest collects only test_*.py).

Imported as ``from odatse_inputs import himmelblau_exchange``: pytest puts this folder on
``sys.path`` (the tests folder has no ``__init__.py``).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest


def himmelblau_exchange(
    *, seed: int = 12345, numsteps: int | str = 60, numsteps_exchange: int = 10, nreplica_per_proc: int = 4,
    labels: bool = True, algorithm_extra: str = "",
) -> str:
    """ODAT-SE's replica exchange on the 2-D Himmelblau function in [-6, 6]^2, steps of 0.5, T in [1, 100].

    ``numsteps`` may be a placeholder such as ``"{numsteps}"`` for a later ``str.format``;
    ``labels``: name the coordinates z1, z2; ``algorithm_extra``: lines added to ``[algorithm]``.
    """
    label_line = 'label_list = ["z1", "z2"]\n' if labels else ""
    extra = algorithm_extra + "\n" if algorithm_extra else ""
    return f"""
[base]
dimension = 2
output_dir = "output"

[solver]
name = "analytical"
function_name = "himmelblau"

[algorithm]
name = "exchange"
seed = {seed}
{label_line}{extra}
[algorithm.param]
min_list = [-6.0, -6.0]
max_list = [6.0, 6.0]
step_list = [0.5, 0.5]

[algorithm.exchange]
Tmin = 1.0
Tmax = 100.0
numsteps = {numsteps}
numsteps_exchange = {numsteps_exchange}
nreplica_per_proc = {nreplica_per_proc}
"""


def output_files(folder: Path) -> dict[str, bytes]:
    """Every ``*.txt`` file a run in ``folder`` wrote under ``folder/output``: relative path -> bytes."""
    out = folder / "output"
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.txt"))}


def run_cli(folder: Path, *args: str) -> int:
    """``multiwalk run *args --no-progress`` with ``folder`` as the working directory (the input's
    output_dir is relative to it): the exit status; the caller's directory restored."""
    from multiwalk.cli import main

    old = os.getcwd()
    os.chdir(folder)
    try:
        return main(["run", *args, "--no-progress"])
    finally:
        os.chdir(old)


@contextlib.contextmanager
def ctrl_c_after_chunks(monkeypatch: pytest.MonkeyPatch, chunks: int = 3) -> Iterator[list[int]]:
    """Inside: ``StepWriter.on_steps`` sends this process SIGINT (Ctrl-C) after writing chunk
    ``chunks``, so the driver ends the run after that chunk; yields the list of each written
    chunk's last step.  The original ``on_steps`` is back on leaving."""
    from multiwalk.io import odatse as odatse_io

    calls: list[int] = []
    original = odatse_io.StepWriter.on_steps

    def on_steps(self, state, first, last):  # noqa: ANN001, ANN202
        original(self, state, first, last)
        calls.append(last)
        if len(calls) == chunks:
            os.kill(os.getpid(), signal.SIGINT)  # the driver ends the run after this chunk

    monkeypatch.setattr(odatse_io.StepWriter, "on_steps", on_steps)
    try:
        yield calls
    finally:
        monkeypatch.setattr(odatse_io.StepWriter, "on_steps", original)
