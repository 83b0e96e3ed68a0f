"""The benchmark functions f1-f13 of Yao, Liu & Lin (1999), "Evolutionary programming made faster",
IEEE Trans. Evol. Comput. 3(2), 82-102, Table I — in jax.numpy, each ``f(x) -> scalar`` for ONE
point ``x`` of any dimension ``n``.

Written from the paper's definitions.  Pitfalls of some public copies that this module avoids:
Generalized Penalized 1 uses ``y_i = 1 + (x_i + 1) / 4`` (so its optimum is ``x = -1``, not 0),
the factor ``10 sin^2(pi y_1)`` on the first term and ``pi / n`` in front; Penalized 2 has
``(x_n - 1)^2 [1 + sin^2(2 pi x_n)]`` as its last term; both add ``sum u(x_i, a, 100, 4)``.

``TABLE`` maps each name to its bounds, optimum location and value (for dimension ``n``).  The
pattern-search paper (Zhu & Curry) uses twelve of them (all but Schwefel 2.26) with these bounds,
except Ackley: its appendix gives [-30, 30] where Yao et al. give [-32, 32].  ``bounds(n)`` is
Yao's box, ``bounds(n, source="zhu_curry")`` the pattern-search paper's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "sphere",
    "schwefel_2_22",
    "schwefel_1_2",
    "schwefel_2_21",
    "rosenbrock",
    "step",
    "quartic",
    "schwefel_2_26",
    "rastrigin",
    "ackley",
    "griewank",
    "penalized_1",
    "penalized_2",
    "penalty_u",
    "YaoFunction",
    "TABLE",
    "PAPER_FUNCTIONS",
]


def sphere(x: jax.Array) -> jax.Array:
    """f1: sum x_i^2.  Box [-100, 100]^n, minimum 0 at 0."""
    return jnp.sum(x**2)


def schwefel_2_22(x: jax.Array) -> jax.Array:
    """f2: sum |x_i| + prod |x_i|.  Box [-10, 10]^n, minimum 0 at 0."""
    a = jnp.abs(x)
    return jnp.sum(a) + jnp.prod(a)


def schwefel_1_2(x: jax.Array) -> jax.Array:
    """f3: sum_i (sum_{j<=i} x_j)^2.  Box [-100, 100]^n, minimum 0 at 0."""
    return jnp.sum(jnp.cumsum(x) ** 2)


def schwefel_2_21(x: jax.Array) -> jax.Array:
    """f4: max_i |x_i|.  Box [-100, 100]^n, minimum 0 at 0."""
    return jnp.max(jnp.abs(x))


def rosenbrock(x: jax.Array) -> jax.Array:
    """f5: sum_{i<n} 100 (x_{i+1} - x_i^2)^2 + (x_i - 1)^2.  Box [-30, 30]^n, minimum 0 at 1."""
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (x[:-1] - 1.0) ** 2)


def step(x: jax.Array) -> jax.Array:
    """f6: sum floor(x_i + 1/2)^2.  Box [-100, 100]^n, minimum 0 for every |x_i| < 1/2."""
    return jnp.sum(jnp.floor(x + 0.5) ** 2)


def _point_noise(x: jax.Array, key: jax.Array) -> jax.Array:
    """A uniform [0, 1) number drawn from ``key`` and the bits of ``x``: every distinct point gets
    its own draw, the same point always the same one (reproducible noise inside jit/vmap)."""
    bits = jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    mix = jnp.sum(bits * (jnp.arange(bits.size, dtype=jnp.uint32) * jnp.uint32(2654435761) + jnp.uint32(1)))
    return jax.random.uniform(jax.random.fold_in(key, mix), dtype=x.dtype)


def quartic(x: jax.Array, key: jax.Array | None = None) -> jax.Array:
    """f7: sum_i i x_i^4 + random[0, 1).  Box [-1.28, 1.28]^n, minimum 0 (plus noise) at 0.

    With ``key`` (a ``jax.random.PRNGKey``) the noise is drawn from the key and the point;
    without it the noise-free part is returned.
    """
    i = jnp.arange(1, x.shape[0] + 1, dtype=x.dtype)
    value = jnp.sum(i * x**4)
    if key is None:
        return value
    return value + _point_noise(x, key)


def schwefel_2_26(x: jax.Array) -> jax.Array:
    """f8: -sum x_i sin(sqrt|x_i|).  Box [-500, 500]^n, minimum -418.9829 n at 420.9687."""
    return -jnp.sum(x * jnp.sin(jnp.sqrt(jnp.abs(x))))


def rastrigin(x: jax.Array) -> jax.Array:
    """f9: sum x_i^2 - 10 cos(2 pi x_i) + 10.  Box [-5.12, 5.12]^n, minimum 0 at 0.

    Computed as sum x_i^2 + 20 sin^2(pi x_i) (the same function, since 1 - cos 2t = 2 sin^2 t),
    which keeps its float32 rounding error relative to the value near the optimum.
    """
    return jnp.sum(x**2 + 20.0 * jnp.sin(jnp.pi * x) ** 2)


def ackley(x: jax.Array) -> jax.Array:
    """f10: -20 exp(-0.2 sqrt(mean x^2)) - exp(mean cos(2 pi x)) + 20 + e.  Box [-32, 32]^n (Yao; the
    pattern-search paper's appendix: [-30, 30]^n), min 0 at 0.

    Computed as -20 expm1(-0.2 sqrt(mean x^2)) - e expm1(-2 mean sin^2(pi x)): the same function
    (20 - 20 exp(a) = -20 expm1(a); e - exp(c) = -e expm1(c - 1); cos 2t - 1 = -2 sin^2 t), without
    the cancellation that leaves ~1e-6 of float32 rounding at the optimum in the textbook form.
    """
    n = x.shape[0]
    return -20.0 * jnp.expm1(-0.2 * jnp.sqrt(jnp.sum(x**2) / n)) - jnp.e * jnp.expm1(
        -2.0 * jnp.sum(jnp.sin(jnp.pi * x) ** 2) / n
    )


def griewank(x: jax.Array) -> jax.Array:
    """f11: sum x_i^2 / 4000 - prod cos(x_i / sqrt(i)) + 1.  Box [-600, 600]^n, minimum 0 at 0."""
    i = jnp.arange(1, x.shape[0] + 1, dtype=x.dtype)
    return jnp.sum(x**2) / 4000.0 - jnp.prod(jnp.cos(x / jnp.sqrt(i))) + 1.0


def penalty_u(x: jax.Array, a: float, k: float, m: int) -> jax.Array:
    """u(x, a, k, m) elementwise: k (x - a)^m for x > a, 0 for -a <= x <= a, k (-x - a)^m for x < -a."""
    return jnp.where(x > a, k * (x - a) ** m, jnp.where(x < -a, k * (-x - a) ** m, 0.0))


def penalized_1(x: jax.Array) -> jax.Array:
    """f12, Generalized Penalized 1, with y_i = 1 + (x_i + 1)/4.  Box [-50, 50]^n, minimum 0 at x = -1.

    pi/n {10 sin^2(pi y_1) + sum_{i<n} (y_i - 1)^2 [1 + 10 sin^2(pi y_{i+1})] + (y_n - 1)^2}
    + sum u(x_i, 10, 100, 4).
    """
    n = x.shape[0]
    y = 1.0 + (x + 1.0) / 4.0
    body = (
        10.0 * jnp.sin(jnp.pi * y[0]) ** 2
        + jnp.sum((y[:-1] - 1.0) ** 2 * (1.0 + 10.0 * jnp.sin(jnp.pi * y[1:]) ** 2))
        + (y[-1] - 1.0) ** 2
    )
    return jnp.pi / n * body + jnp.sum(penalty_u(x, 10.0, 100.0, 4))


def penalized_2(x: jax.Array) -> jax.Array:
    """f13, Generalized Penalized 2.  Box [-50, 50]^n, minimum 0 at x = 1.

    0.1 {sin^2(3 pi x_1) + sum_{i<n} (x_i - 1)^2 [1 + sin^2(3 pi x_{i+1})]
         + (x_n - 1)^2 [1 + sin^2(2 pi x_n)]} + sum u(x_i, 5, 100, 4).
    """
    body = (
        jnp.sin(3.0 * jnp.pi * x[0]) ** 2
        + jnp.sum((x[:-1] - 1.0) ** 2 * (1.0 + jnp.sin(3.0 * jnp.pi * x[1:]) ** 2))
        + (x[-1] - 1.0) ** 2 * (1.0 + jnp.sin(2.0 * jnp.pi * x[-1]) ** 2)
    )
    return 0.1 * body + jnp.sum(penalty_u(x, 5.0, 100.0, 4))


@dataclass(frozen=True)
class YaoFunction:
    """One entry of Yao et al.'s Table I: the function, its box and its optimum."""

    name: str
    label: str  # f1 ... f13
    fn: Callable[[jax.Array], jax.Array]
    lower: float
    upper: float
    x_opt: float  # every coordinate of the optimum has this value
    f_opt_per_dim: float  # the minimum value is f_opt_per_dim * n (0 except Schwefel 2.26)
    zhu_curry_box: tuple[float, float] | None = None  # the pattern-search paper's box where it differs

    def bounds(self, n: int, source: str = "yao") -> tuple[np.ndarray, np.ndarray]:
        """``(lower, upper)``, each ``(n,)``: Yao et al.'s box (``source="yao"``), or the box of
        Zhu & Curry's pattern-search paper (``"zhu_curry"``: Ackley on [-30, 30], the others as Yao)."""
        if source not in ("yao", "zhu_curry"):
            raise ValueError(f"source must be 'yao' or 'zhu_curry', got {source!r}")
        lo, hi = self.zhu_curry_box if source == "zhu_curry" and self.zhu_curry_box else (self.lower, self.upper)
        return np.full(n, lo), np.full(n, hi)

    def optimum(self, n: int) -> tuple[np.ndarray, float]:
        """(location, value) of the global minimum in dimension ``n``."""
        return np.full(n, self.x_opt), self.f_opt_per_dim * n


TABLE: dict[str, YaoFunction] = {
    f.name: f
    for f in (
        YaoFunction("sphere", "f1", sphere, -100.0, 100.0, 0.0, 0.0),
        YaoFunction("schwefel_2_22", "f2", schwefel_2_22, -10.0, 10.0, 0.0, 0.0),
        YaoFunction("schwefel_1_2", "f3", schwefel_1_2, -100.0, 100.0, 0.0, 0.0),
        YaoFunction("schwefel_2_21", "f4", schwefel_2_21, -100.0, 100.0, 0.0, 0.0),
        YaoFunction("rosenbrock", "f5", rosenbrock, -30.0, 30.0, 1.0, 0.0),
        YaoFunction("step", "f6", step, -100.0, 100.0, 0.0, 0.0),
        YaoFunction("quartic", "f7", quartic, -1.28, 1.28, 0.0, 0.0),
        YaoFunction("schwefel_2_26", "f8", schwefel_2_26, -500.0, 500.0, 420.9687, -418.9829),
        YaoFunction("rastrigin", "f9", rastrigin, -5.12, 5.12, 0.0, 0.0),
        YaoFunction("ackley", "f10", ackley, -32.0, 32.0, 0.0, 0.0, zhu_curry_box=(-30.0, 30.0)),
        YaoFunction("griewank", "f11", griewank, -600.0, 600.0, 0.0, 0.0),
        YaoFunction("penalized_1", "f12", penalized_1, -50.0, 50.0, -1.0, 0.0),
        YaoFunction("penalized_2", "f13", penalized_2, -50.0, 50.0, 1.0, 0.0),
    )
}

#: The twelve functions of Zhu & Curry's pattern-search paper (Table 4), in its order.
PAPER_FUNCTIONS = (
    "ackley",
    "griewank",
    "penalized_1",
    "penalized_2",
    "quartic",
    "rastrigin",
    "rosenbrock",
    "schwefel_1_2",
    "schwefel_2_22",
    "schwefel_2_21",
    "sphere",
    "step",
)
