"""Helpers that the L-BFGS test files share (not a test module: pytest collects only test_*.py):
the Extended Rosenbrock reference problem at n = 100 and a NumPy view of a JAX objective.  Its run
is the ``rosen100`` fixture of tests/conftest.py; float64 is the ``float64`` fixture there.

Imported as ``from lbfgs_cases import numpy_vg``: pytest puts this folder on ``sys.path``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import multiwalk as mw
from multiwalk.functions import cute

ROSEN = "extended_rosenbrock"
rosen = cute.extended_rosenbrock
N100 = 100
X100 = cute.start(ROSEN, N100)


def solve(problem: mw.Problem, solver: mw.LBFGS, **kwargs) -> mw.LBFGSResult:
    """``mw.solve`` without the progress line."""
    return mw.solve(problem, solver, progress=False, **kwargs)


def numpy_vg(fn):
    """``x -> (float f, ndarray g)`` for scipy and AskTell, from a JAX function (jitted once)."""
    vg = jax.jit(jax.value_and_grad(fn))

    def call(x):
        f, g = vg(jnp.asarray(x, jnp.float64))
        return float(f), np.asarray(g, dtype=np.float64)

    return call
