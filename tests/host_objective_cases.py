"""Plain NumPy objectives for tests/test_host_objective.py, importable by worker processes and
by the 2-rank MPI run (tests/host_objective_mpi.py)."""

from __future__ import annotations

import os

import numpy as np

LOWER, UPPER = [-3.0, -3.0], [3.0, 3.0]
BETAS = (10.0, 3.0, 1.0, 0.3)  # four replicas
STEPS = 24


def shifted_sphere(x: np.ndarray) -> float:
    """A NumPy function that jax cannot trace (float() of the point's values)."""
    return float(np.sum((np.asarray(x) - 1.0) ** 2)) + 0.1 * float(np.sin(x[0]))


def crash_when_marked(x: np.ndarray) -> float:
    """``os._exit(3)`` (a dying worker) while the folder MULTIWALK_TEST_CRASH_DIR holds a file
    ``always``, or ``once`` (removed first: a crash that starting the pool again cures).  The
    folder is named at import (a fork server's workers keep the environment it started with)."""
    folder = os.environ.get("MULTIWALK_TEST_CRASH_DIR", "")
    if folder and os.path.exists(os.path.join(folder, "once")):
        try:
            os.remove(os.path.join(folder, "once"))
        except FileNotFoundError:  # the other worker removed it first
            pass
        os._exit(3)
    if folder and os.path.exists(os.path.join(folder, "always")):
        os._exit(3)
    return shifted_sphere(x)


def solver():
    import multiwalk as mw

    return mw.Exchange(betas=BETAS, numsteps=STEPS, numsteps_exchange=4, step_width=(0.7, 0.7))
