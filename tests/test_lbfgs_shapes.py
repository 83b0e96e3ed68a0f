"""The shapes of L-BFGS's start as the driver takes them without tracing it (``LBFGS.state_shapes``,
``initial_state_fn(...).shapes``), against ``jax.eval_shape`` of the start itself: the loop is
lowered for the former and run on the latter, so they must agree leaf for leaf (shape, dtype,
weak type, tree)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import multiwalk as mw
from multiwalk.functions import cute


@pytest.fixture(autouse=True, scope="module")
def _float64():
    """float64 for this file only (a global jax_enable_x64 would leak into the other test files)."""
    with jax.enable_x64(True):
        yield


def _problem(n: int, dtype: str, starts: int = 1, box: bool = False) -> mw.Problem:
    """Extended Rosenbrock from the seed's start (``starts`` > 1: that many x0 rows; in a box: drawn
    by ``LBFGS(starts=)``, no x0)."""
    if box:
        x0 = None if starts > 1 else 0.5 * cute.start("extended_rosenbrock", n)
        return mw.Problem(objective=cute.extended_rosenbrock, x0=x0, dtype=dtype, lower=-2 * np.ones(n),
                          upper=3 * np.ones(n))
    x0 = cute.start("extended_rosenbrock", n)
    x0 = np.stack([x0 + k for k in range(starts)]) if starts > 1 else x0
    return mw.Problem(objective=cute.extended_rosenbrock, x0=x0, dtype=dtype)


@pytest.mark.parametrize(("n", "m", "dtype", "starts", "box", "options"), [
    (10, 7, "float64", 1, False, {}),  # the default solver
    (6, 3, "float32", 1, False, {"max_iterations": 5}),
    (8, 4, "float64", 3, False, {"diag": np.ones(8)}),  # a user H0: h0 is (n,)
    (10, 5, "float32", 1, True, {}),  # L-BFGS-B: h0 is the box (2, n)
    (4, 2, "float64", 70, True, {"starts": 70}),  # drawn starts, more than the history keeps
])
def test_start_shapes_match_the_traced_start(n, m, dtype, starts, box, options):
    problem = _problem(n, dtype, starts, box)
    solver = mw.LBFGS(m=m, **options)
    init_fn = solver.initial_state_fn(problem)
    key = jax.random.key(0)
    traced = jax.eval_shape(init_fn, key)
    known = init_fn.shapes(key)
    assert jax.tree.structure(known) == jax.tree.structure(traced)
    # ShapeDtypeStruct equality: shape, dtype, weak type and sharding, leaf by leaf
    for (path, leaf), traced_leaf in zip(jax.tree_util.tree_flatten_with_path(known)[0], jax.tree.leaves(traced)):
        assert leaf == traced_leaf, f"{jax.tree_util.keystr(path)}: {leaf} != traced {traced_leaf}"
