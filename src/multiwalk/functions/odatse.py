"""ODAT-SE's analytical test functions (``[solver] name = "analytical"``, ``function_name = ...``).

Each is ``f(x) -> scalar`` for ONE point ``x`` of shape ``(d,)`` in plain ``jax.numpy``, written
after ``odatse/solver/analytical.py`` (ODAT-SE 4.0.1) term for term, so the values agree with
ODAT-SE's NumPy ones to rounding.  :data:`TABLE` maps ODAT-SE's names to them, with the
dimension each needs (``None``: any).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = [
    "quadratics", "quartics", "ackley", "alpine", "exponential", "griewank", "himmelblau", "michalewicz",
    "qing", "rastrigin", "rosenbrock", "schaffer", "schwefel", "linear_regression_test", "TABLE", "Analytical",
    "HIMMELBLAU_MINIMA",
]


def quadratics(x: jax.Array) -> jax.Array:
    """sum x_i^2; minimum 0 at 0."""
    return jnp.sum(x * x)


def quartics(x: jax.Array) -> jax.Array:
    """mean((x - 1)^2) * mean((x + 1)^2); minima 0 at (1, ..., 1) and (-1, ..., -1), saddle 1 at 0."""
    return jnp.mean((x - 1.0) ** 2) * jnp.mean((x + 1.0) ** 2)


def ackley(x: jax.Array) -> jax.Array:
    """Ackley's function, 20 + e - 20 exp(-0.2 sqrt(mean x^2)) - exp(mean cos 2 pi x); minimum 0 at 0."""
    a = 20.0 * jnp.exp(-0.2 * jnp.sqrt(jnp.mean(x**2)))
    b = jnp.exp(jnp.mean(jnp.cos(2.0 * jnp.pi * x)))
    return 20.0 + jnp.exp(1.0) - a - b


def alpine(x: jax.Array) -> jax.Array:
    """sum |x sin x + 0.1 x|; minimum 0 at 0."""
    return jnp.sum(jnp.abs(x * jnp.sin(x) + 0.1 * x))


def exponential(x: jax.Array) -> jax.Array:
    """-exp(-sum x^2 / 2); minimum -1 at 0."""
    return -jnp.exp(-0.5 * jnp.sum(x**2))


def griewank(x: jax.Array) -> jax.Array:
    """1 + sum x^2 / 4000 - prod cos(x_i / sqrt(i)); minimum 0 at 0."""
    i = jnp.arange(x.shape[0]) + 1
    return 1 + jnp.sum(x**2) / 4000 - jnp.prod(jnp.cos(x / jnp.sqrt(i)))


def himmelblau(x: jax.Array) -> jax.Array:
    """(x^2 + y - 11)^2 + (x + y^2 - 7)^2 in 2-D; four minima of value 0 (:data:`HIMMELBLAU_MINIMA`)."""
    return (x[0] ** 2 + x[1] - 11.0) ** 2 + (x[0] + x[1] ** 2 - 7.0) ** 2


#: Himmelblau's four global minima (value 0), as ODAT-SE's docstring lists them (more digits).
HIMMELBLAU_MINIMA = (
    (3.0, 2.0),
    (-2.805118086952745, 3.131312518250573),
    (-3.779310253377747, -3.283185991286170),
    (3.584428340330492, -1.848126526964404),
)


def michalewicz(x: jax.Array) -> jax.Array:
    """-sum sin(x_i) sin(i x_i^2 / pi)^20; for d = 2 minimum -1.8013 at (2.2051, 1.5698)."""
    i = jnp.arange(x.shape[0]) + 1
    return -jnp.sum(jnp.sin(x) * jnp.sin(i * x**2 / jnp.pi) ** (2 * 10))


def qing(x: jax.Array) -> jax.Array:
    """sum (x_i^2 - i)^2; minima 0 at x_i = +-sqrt(i)."""
    i = jnp.arange(x.shape[0]) + 1
    return jnp.sum((x**2 - i) ** 2)


def rastrigin(x: jax.Array) -> jax.Array:
    """10 d + sum (x^2 - 10 cos 2 pi x); minimum 0 at 0."""
    return x.shape[0] * 10 + jnp.sum(x**2 - 10 * jnp.cos(2 * jnp.pi * x))


def rosenbrock(x: jax.Array) -> jax.Array:
    """sum 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2; minimum 0 at (1, ..., 1)."""
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def schaffer(x: jax.Array) -> jax.Array:
    """Generalised Schaffer: sum 0.5 + (sin(a)^2 - 0.5) / (1 + 0.001 a)^2 with a = x_i^2 + x_{i+1}^2."""
    a = x[:-1] ** 2 + x[1:] ** 2
    return jnp.sum(0.5 + (jnp.sin(a) ** 2 - 0.5) / (1 + 0.001 * a) ** 2)


def schwefel(x: jax.Array) -> jax.Array:
    """418.9829 d - sum x sin sqrt|x|; minimum ~0 at x_i = 420.9687."""
    return x.shape[0] * 418.9829 - jnp.sum(x * jnp.sin(jnp.sqrt(jnp.abs(x))))


def linear_regression_test(x: jax.Array) -> jax.Array:
    """Negative log likelihood of y = a t + b with noise variance exp(x[2]) for ODAT-SE's six
    points; minimum 1.005071 at (0.628571, 0.8, -0.664976)."""
    t = jnp.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    y = jnp.array([1.0, 3.0, 2.0, 4.0, 3.0, 5.0])
    return 0.5 * (y.shape[0] * x[2] + jnp.sum((x[0] * t + x[1] - y) ** 2) / jnp.exp(x[2]))


class Analytical(NamedTuple):
    """One entry of :data:`TABLE`: the function and the dimension it needs (None: any >= 1)."""

    fn: Callable[[jax.Array], jax.Array]
    dimension: int | None = None
    min_dimension: int = 1


#: ODAT-SE's ``function_name`` values -> functions (``quadratics`` is ODAT-SE's default).
TABLE: dict[str, Analytical] = {
    "quadratics": Analytical(quadratics),
    "quartics": Analytical(quartics),
    "ackley": Analytical(ackley),
    "alpine": Analytical(alpine),
    "exponential": Analytical(exponential),
    "griewank": Analytical(griewank),
    "himmelblau": Analytical(himmelblau, dimension=2),
    "michalewicz": Analytical(michalewicz),
    "qing": Analytical(qing),
    "rastrigin": Analytical(rastrigin),
    "rosenbrock": Analytical(rosenbrock, min_dimension=2),
    "schaffer": Analytical(schaffer, min_dimension=2),
    "schwefel": Analytical(schwefel),
    "linear_regression_test": Analytical(linear_regression_test, dimension=3),
}
