"""``ReplicaExchangeResult.roots()``: every root of systems with known roots, polished.

Four polynomial systems in (x, y), one model function with the coefficients in ``args``, so the
four share one compiled sampler and one compiled polish per dtype.  The sampler runs with
ReplicaExchange's defaults but short (100 + 100 iterations: they find every basin at this seed),
in the issue's box [-5, 5]^2; roots() with its defaults.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw

BOX = 5.0
RUNS: dict[tuple[str, str], mw.ReplicaExchangeResult] = {}


def polynomial_pair(p: jax.Array, coeffs: jax.Array) -> jax.Array:
    """Two polynomials of degree <= 4: ``g_i = sum_jk coeffs[i, j, k] x^j y^k``."""
    x, y = p[0], p[1]
    one = jnp.ones_like(x)
    xp = jnp.stack([one, x, x * x, x * x * x, x * x * x * x])
    yp = jnp.stack([one, y, y * y, y * y * y, y * y * y * y])
    return jnp.einsum("ijk,j,k->i", coeffs, xp, yp)


def _coeffs(*terms: dict[tuple[int, int], float]) -> np.ndarray:
    c = np.zeros((2, 5, 5))
    for i, poly in enumerate(terms):
        for (j, k), v in poly.items():
            c[i, j, k] = v
    return c


_circle_line_x = (-4.0 + np.array([-1.0, 1.0]) * np.sqrt(832.0)) / 34.0  # x^2 + (x/4 + 1/2)^2 = 1
_hyperbola_x = np.sqrt(2.0 + np.array([-1.0, 1.0, -1.0, 1.0]) * np.sqrt(3.0)) * np.array([1, 1, -1, -1])
SYSTEMS = {
    # x^2 + y^2 = 1, -x/4 + y = 1/2 (the solvsys example): two simple roots
    "circle_line": (
        _coeffs({(2, 0): 1, (0, 2): 1, (0, 0): -1}, {(1, 0): -0.25, (0, 1): 1, (0, 0): -0.5}),
        np.stack([_circle_line_x, np.sqrt(1 - _circle_line_x**2)], axis=1),
    ),
    # x^2 + y^2 = 4, x y = 1: four simple roots, x^2 = 2 -+ sqrt(3), y = 1 / x
    "circle_hyperbola": (
        _coeffs({(2, 0): 1, (0, 2): 1, (0, 0): -4}, {(1, 1): 1, (0, 0): -1}),
        np.stack([_hyperbola_x, 1 / _hyperbola_x], axis=1),
    ),
    # z^3 = 1 in real and imaginary parts: three simple roots
    "cube_roots_of_unity": (
        _coeffs({(3, 0): 1, (1, 2): -3, (0, 0): -1}, {(2, 1): 3, (0, 3): -1}),
        np.array([[1.0, 0.0], [-0.5, np.sqrt(3) / 2], [-0.5, -np.sqrt(3) / 2]]),
    ),
    # x^2 + y^2 = 1, y = 1: the line touches the circle, a double root at (0, 1)
    "tangent_double_root": (
        _coeffs({(2, 0): 1, (0, 2): 1, (0, 0): -1}, {(0, 1): 1, (0, 0): -1}),
        np.array([[0.0, 1.0]]),
    ),
}
SIMPLE = {"circle_line", "circle_hyperbola", "cube_roots_of_unity"}


def _term_size(coeffs: np.ndarray, root: np.ndarray) -> float:
    """sum |c x^j y^k| at the root: what the rounding of the residual is relative to."""
    j, k = np.arange(5)[:, None], np.arange(5)[None, :]
    return float(np.abs(coeffs * root[0] ** j * root[1] ** k).sum())


def _solve_system(name: str, dtype: str) -> tuple[mw.ReplicaExchangeResult, np.ndarray, np.ndarray]:
    coeffs, exact = SYSTEMS[name]
    problem = mw.Problem(model=polynomial_pair, data=np.zeros(2), args=coeffs.astype(dtype),
                         lower=[-BOX, -BOX], upper=[BOX, BOX], dtype=dtype)
    if (name, dtype) not in RUNS:
        RUNS[name, dtype] = mw.solve(problem, mw.ReplicaExchange(nburn=100, niter=100), seed=3, progress=False)
    return RUNS[name, dtype], coeffs, exact


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(SYSTEMS))
def test_roots_finds_every_root_to_the_dtype_precision(name, dtype):
    with jax.enable_x64(dtype == "float64"):
        result, coeffs, exact = _solve_system(name, dtype)
        roots = result.roots()
    eps = float(np.finfo(dtype).eps)
    assert roots.x.shape == exact.shape, (roots, exact)  # every root, each once
    assert roots.x.dtype == np.dtype(dtype) and roots.residual.shape == (len(exact),)
    for root in exact:
        err = np.max(np.abs(roots.x - root), axis=1)
        i = int(np.argmin(err))
        size = _term_size(coeffs, root)
        # The residual is at the rounding level: a few eps times the size of its terms.
        assert roots.residual[i] <= 8 * eps * size, (root, roots)
        if name in SIMPLE:
            # Simple root: x within ||J^-1|| times that rounding (quadratic convergence gets there).
            jac = jax.jacfwd(lambda p: polynomial_pair(p, coeffs))(jnp.asarray(root, jnp.float32))
            bound = 8 * eps * size * np.linalg.norm(np.linalg.inv(np.asarray(jac, np.float64)), 2)
        else:
            # Double root (singular J): the residual is x^2 near (0, 1), flat to sqrt(rounding):
            # x is known to ~sqrt(8 eps size) (float32 ~1.4e-3, float64 ~6e-8), y exactly to rounding.
            bound = np.sqrt(8 * eps * size)
        assert err[i] <= bound, (root, roots.x[i], err[i], bound)


def test_roots_rejects_bad_input_before_polishing():
    with jax.enable_x64(False):
        result, _, _ = _solve_system("circle_line", "float32")  # the run of the test above
        with pytest.raises(ValueError, match="tol must be"):
            result.roots(-1.0)
        with pytest.raises(ValueError, match="radius must be"):
            result.roots(radius=0)
        with pytest.raises(ValueError, match="max_candidates must be"):
            result.roots(max_candidates=0)
        with pytest.raises(ValueError, match="does not hold"):
            dataclasses.replace(result, problem=None).roots()
