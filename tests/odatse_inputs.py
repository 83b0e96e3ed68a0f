"""ODAT-SE input.toml texts, and the reading of a run's output files, that the tests share (not a
test module: pytest collects only test_*.py).

Imported as ``from odatse_inputs import himmelblau_exchange``: pytest puts this folder on
``sys.path`` (the tests folder has no ``__init__.py``).
"""

from __future__ import annotations

from pathlib import Path


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
