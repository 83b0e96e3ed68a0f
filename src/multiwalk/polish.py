"""Levenberg-Marquardt polishing of many points at once: a sampler finds the basins of a
system's roots, this finds the roots in them to the precision of the dtype.

For a ``model=`` problem the residual vector is ``r = (model(x) - data) / sigma`` (complex
residuals split into real and imaginary parts) and each step solves
``(J^T J + mu I) d = -J^T r`` with ``J = jax.jacfwd(r)``; for an ``objective=`` problem ``f``
(a chi2 whose roots are its zeros) the step is the damped Newton step
``(H/2 + mu I) d = -grad f / 2``.  ``mu`` follows Nielsen's rule (Madsen, Nielsen & Tingleff,
"Methods for non-linear least squares problems", 2004, sec. 3.2).  Every candidate point
runs the same iterations in one jitted, vmapped program.

Near a simple root the steps converge quadratically, to a residual of a few rounding errors
of the terms.  At a multiple root (``(x - 1)^2 = 0``, a line tangent to a circle) ``J`` is
singular there and convergence is linear; the residual still reaches the rounding level, but
``x`` is only known to about ``sqrt(eps)`` relative (the residual is flat to that distance).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .compile_cache import fingerprint, problem_arrays, with_arrays
from .problem import Problem

__all__ = ["polish", "Roots", "default_root_tol", "CHUNK", "MAX_ITERATIONS"]

MAX_ITERATIONS = 100  # per point; a simple root needs ~10, a double root ~30 (linear rate 1/2)
_MAX_NU = 2.0**20  # ~20 rejected steps in a row: mu has grown by 2^190, no step is left to take
CHUNK = 256  # points per call of the compiled program
_COMPILED: dict[tuple, Any] = {}
_COMPILED_MAX = 16


class Roots(NamedTuple):
    """Distinct roots: ``x`` (k, n) full parameter vectors, ``residual`` (k,) the norm of
    ``(model(x) - data) / sigma`` at each (``sqrt(chi2)``; ``sqrt(f)`` for an objective)."""

    x: np.ndarray
    residual: np.ndarray


def default_root_tol(problem: Problem) -> float:
    """The chi2 below which a polished point is a root, unless the user says otherwise: every
    residual at most ``sqrt(eps) * max(1, max|data|)`` in data units (``eps`` of the problem's
    dtype: 3.5e-4 relative in float32, 1.5e-8 in float64), i.e. ``eps * max(1, max|data|)^2 *
    sum(1 / sigma^2)``; ``eps`` for an objective.  Polished simple roots sit far below it."""
    eps = float(np.finfo(problem.dtype).eps)
    if not problem.is_model:
        return eps
    scale = max(1.0, float(np.max(np.abs(problem.data))))
    return eps * scale**2 * float(np.sum(1.0 / np.asarray(problem.sigma, np.float64) ** 2))


def _local_model(problem: Problem) -> Callable[[jax.Array], tuple[jax.Array, jax.Array, jax.Array]]:
    """``theta (n_free,) -> (F, g, A)``: half the chi2, its gradient and its (Gauss-Newton)
    Hessian at a point given by its free parameters."""
    if problem.is_model:

        def residual_vector(theta: jax.Array) -> jax.Array:
            r = problem.residuals_full(problem.expand(theta)).ravel()
            if jnp.iscomplexobj(r):
                r = jnp.concatenate([jnp.real(r), jnp.imag(r)])
            return r.astype(problem.dtype)

        def local(theta: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
            r = residual_vector(theta)
            jac = jax.jacfwd(residual_vector)(theta)
            # HIGHEST: the Gauss-Newton matrix in full float32 on a GPU too (its default, TensorFloat-32,
            # would stop the polish short of machine precision)
            exact = jax.lax.Precision.HIGHEST
            return 0.5 * jnp.dot(r, r), jnp.matmul(jac.T, r, precision=exact), jnp.matmul(jac.T, jac, precision=exact)

        return local

    def half(theta: jax.Array) -> jax.Array:
        return 0.5 * problem.chi2_free(theta)

    def local_objective(theta: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        return half(theta), jax.grad(half)(theta), jax.hessian(half)(theta)

    return local_objective


def _levenberg_marquardt(local: Callable, theta: jax.Array, max_iterations: int) -> tuple[jax.Array, jax.Array]:
    """One point's iterations: ``(theta, F)`` at the end (``F`` = chi2 / 2)."""
    eps = jnp.finfo(theta.dtype).eps
    f, g, a = local(theta)
    mu = 1e-3 * jnp.max(jnp.abs(jnp.diag(a)))  # Nielsen's start: tau * max(diag A)
    eye = jnp.eye(theta.shape[0], dtype=theta.dtype)

    def cond(c: tuple) -> jax.Array:
        return (c[0] < max_iterations) & ~c[-1]

    def body(c: tuple) -> tuple:
        i, theta, f, g, a, mu, nu, _ = c
        d = jnp.linalg.solve(a + mu * eye, -g)
        f_new, g_new, a_new = local(theta + d)
        predicted = 0.5 * jnp.dot(d, mu * d - g)  # decrease of the local quadratic model
        rho = (f - f_new) / predicted
        accept = jnp.isfinite(f_new) & (predicted > 0) & (f_new < f)
        mu = jnp.where(accept, mu * jnp.maximum(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3), mu * nu)
        nu = jnp.where(accept, 2.0, 2.0 * nu)
        theta = jnp.where(accept, theta + d, theta)
        f, g, a = (jnp.where(accept, new, old) for new, old in ((f_new, f), (g_new, g), (a_new, a)))
        small_step = accept & (jnp.max(jnp.abs(d)) <= eps * (jnp.max(jnp.abs(theta)) + eps))
        done = (f == 0) | jnp.all(g == 0) | small_step | (nu > _MAX_NU) | ~jnp.isfinite(mu)
        return i + 1, theta, f, g, a, mu, nu, done

    start = (jnp.asarray(0), theta, f, g, a, mu, jnp.asarray(2.0, theta.dtype), ~jnp.isfinite(f))
    _, theta, f, *_ = jax.lax.while_loop(cond, body, start)
    return theta, f


def polish(problem: Problem, points: np.ndarray, max_iterations: int = MAX_ITERATIONS) -> tuple[np.ndarray, np.ndarray]:
    """Polish ``points`` (m, n) (full vectors; the free parameters move) towards roots of
    ``problem``: ``(x (m, n), chi2 (m,))`` where the iterations stopped (a start without a
    finite chi2 stays where it was, with chi2 inf).

    Points go through one compiled program in chunks of ``CHUNK`` (the last one padded), and
    data, sigma and ``args`` arrays are its arguments: runs with any number of points, and
    problems that differ only in those arrays, share it."""
    theta = np.asarray(points, dtype=problem.dtype)[:, problem.free_index]
    m = theta.shape[0]
    padded = np.concatenate([theta, np.repeat(theta[:1], -m % CHUNK, axis=0)])
    run, arrays = _compiled_polish(problem, max_iterations)
    ends, halves = zip(*(run(padded[i:i + CHUNK], arrays) for i in range(0, padded.shape[0], CHUNK)))
    theta_end = np.concatenate([np.asarray(t) for t in ends])[:m]
    half_chi2 = np.concatenate([np.asarray(h) for h in halves])[:m]
    chi2 = np.where(np.isfinite(half_chi2), 2.0 * half_chi2, np.inf)
    return np.asarray(problem.expand(theta_end)), chi2


def _compiled_polish(problem: Problem, max_iterations: int) -> tuple[Callable, Any]:
    """``(run, arrays)``: the compiled ``run(theta (CHUNK, n_free), arrays) -> (theta, chi2 / 2)``
    for problems like this one, and this problem's arrays to pass it."""
    arrays, static = problem_arrays(problem)
    key = (problem._user_fn, fingerprint(problem, True), static, max_iterations)
    compiled = _COMPILED.get(key)
    if compiled is None:

        def run(theta: jax.Array, arrays: Any) -> tuple[jax.Array, jax.Array]:
            local = _local_model(with_arrays(problem, arrays, static))
            return jax.vmap(lambda t: _levenberg_marquardt(local, t, max_iterations))(theta)

        shape = jax.ShapeDtypeStruct((CHUNK, problem.n_free), problem.dtype)
        compiled = jax.jit(run).lower(shape, arrays).compile()
        if len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.pop(next(iter(_COMPILED)))
        _COMPILED[key] = compiled
    return compiled, arrays
