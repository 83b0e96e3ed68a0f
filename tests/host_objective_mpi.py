"""Run by tests/test_host_objective.py as ``mpiexec -n 2 python -m mpi4py.futures THIS OUT.npz``:
the objective of host_objective_cases evaluated on rank 1 through executor="mpi"."""

import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import host_objective_cases as cases  # noqa: E402

import multiwalk as mw  # noqa: E402

if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)
    problem = mw.Problem(objective=cases.shifted_sphere, lower=cases.LOWER, upper=cases.UPPER, backend="python",
                         executor="mpi")
    result = mw.solve(problem, cases.solver(), seed=5)
    np.savez(sys.argv[1], replica_fx=result.replica_fx, x=result.x, workers=problem.host_objective.engine.workers,
             name=problem.host_objective.engine.name)
