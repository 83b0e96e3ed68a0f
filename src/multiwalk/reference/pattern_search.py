"""SIMT-PS as the paper's "CPU code": the multi-walk pattern search as a one-core NumPy loop.

For benchmarks and tests only (the library never imports it).  Zhu & Curry compare their GPU
code with "the same algorithm implemented with CPU-based only functions" on one core; this module
is that peer, written to do exactly what :class:`multiwalk.PatternSearch` does in one round:

* every walker has a step ``scale * delta0`` per coordinate, ``scale`` starting at 1
  (``delta0`` defaults to ``(upper - lower) / 20`` per coordinate);
* per iteration, for each coordinate ``j`` in turn, the walker evaluates ``x + delta_j e_j``
  and ``x - delta_j e_j``; a trial point outside the box is never taken (its value counts as
  +inf), a NaN value counts as +inf;
  b) if ``f(plus) <= f(x)`` and ``f(plus) <= f(minus)`` it moves to ``plus``;
  c) else if ``f(minus) <= f(x)`` and ``f(minus) <= f(plus)`` it moves to ``minus``;
* d) if no coordinate *strictly* lowered ``f`` during the iteration, ``scale`` is halved, and
  when it reaches ``tol_scale`` (default ``2**-16``) it is reset to 1 (unless ``reset=False``);
* e) the best walker is the answer: ``x_final[np.argmin(f_final)]`` (values never increase
  during a round, so the last values hold each walker's best).

Arithmetic is done in the dtype of ``x_init`` (float32 walkers give float32 trial points, as on
the device); objective values are compared as float64.

Two drivers:

* :func:`pattern_search_numpy` loops in Python over walkers, iterations and coordinates and calls
  ``f`` on ONE point at a time: the honest scalar loop of the paper's CPU code.  Slow by design.
* :func:`pattern_search_numpy_batched` loops over iterations and coordinates only and evaluates
  all walkers' trial points with one call of ``f_batch`` on an ``(m, d)`` array: NumPy's best
  effort on one core (NumPy's elementwise kernels use one thread).

The twelve test functions of the paper (Yao, Liu & Lin 1999, as in :mod:`multiwalk.functions.yao`,
in the same algebraic forms so float64 values agree with the library's to rounding) are written
for arrays with the coordinates on the last axis, so each serves both drivers: ``f(x)`` with ``x``
of shape ``(d,)`` returns a scalar, with ``(m, d)`` an ``(m,)`` array.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..functions.yao import PAPER_FUNCTIONS

__all__ = [
    "pattern_search_numpy",
    "pattern_search_numpy_batched",
    "default_delta0",
    *PAPER_FUNCTIONS,  # the twelve test functions, by yao's names
    "penalty_u",
    "FUNCTIONS",
    "noisy_quartic",
]

#: The reset test of ``multiwalk.PatternSearch``: ``scale <= tol_scale * (1 + RESET_SLACK)``.
RESET_SLACK = 1e-6


# ============================================================================ test functions
def sphere(x: np.ndarray) -> np.ndarray:
    """f1: sum x_i^2."""
    return np.sum(x**2, axis=-1)


def schwefel_2_22(x: np.ndarray) -> np.ndarray:
    """f2: sum |x_i| + prod |x_i|."""
    a = np.abs(x)
    return np.sum(a, axis=-1) + np.prod(a, axis=-1)


def schwefel_1_2(x: np.ndarray) -> np.ndarray:
    """f3: sum_i (sum_{j<=i} x_j)^2."""
    return np.sum(np.cumsum(x, axis=-1) ** 2, axis=-1)


def schwefel_2_21(x: np.ndarray) -> np.ndarray:
    """f4: max_i |x_i|."""
    return np.max(np.abs(x), axis=-1)


def rosenbrock(x: np.ndarray) -> np.ndarray:
    """f5: sum_{i<n} 100 (x_{i+1} - x_i^2)^2 + (x_i - 1)^2."""
    a, b = x[..., :-1], x[..., 1:]
    return np.sum(100.0 * (b - a**2) ** 2 + (a - 1.0) ** 2, axis=-1)


def step(x: np.ndarray) -> np.ndarray:
    """f6: sum floor(x_i + 1/2)^2."""
    return np.sum(np.floor(x + 0.5) ** 2, axis=-1)


def _pow4(v: np.ndarray) -> np.ndarray:
    """v^4 as two squarings: what C code writes, and what XLA does for ``v**4`` (NumPy's ``v**4`` calls pow)."""
    return np.square(np.square(v))


def quartic(x: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """f7: sum_i i x_i^4, plus a uniform [0, 1) number per point when ``rng`` is given."""
    i = np.arange(1, x.shape[-1] + 1, dtype=x.dtype)
    value = np.sum(i * _pow4(x), axis=-1)
    if rng is None:
        return value
    return value + rng.random(np.shape(value))


def noisy_quartic(seed: int = 0) -> Callable[[np.ndarray], np.ndarray]:
    """The quartic with its noise (a fresh uniform [0, 1) draw per evaluated point), as one function."""
    rng = np.random.default_rng(seed)
    return lambda x: quartic(x, rng)


def rastrigin(x: np.ndarray) -> np.ndarray:
    """f9: sum x_i^2 - 10 cos(2 pi x_i) + 10, computed as sum x_i^2 + 20 sin^2(pi x_i) (as in yao.py)."""
    return np.sum(x**2 + 20.0 * np.sin(np.pi * x) ** 2, axis=-1)


def ackley(x: np.ndarray) -> np.ndarray:
    """f10, in yao.py's cancellation-free form: -20 expm1(-0.2 sqrt(mean x^2)) - e expm1(-2 mean sin^2(pi x))."""
    n = x.shape[-1]
    return -20.0 * np.expm1(-0.2 * np.sqrt(np.sum(x**2, axis=-1) / n)) - np.e * np.expm1(
        -2.0 * np.sum(np.sin(np.pi * x) ** 2, axis=-1) / n
    )


def griewank(x: np.ndarray) -> np.ndarray:
    """f11: sum x_i^2 / 4000 - prod cos(x_i / sqrt(i)) + 1."""
    i = np.arange(1, x.shape[-1] + 1, dtype=x.dtype)
    return np.sum(x**2, axis=-1) / 4000.0 - np.prod(np.cos(x / np.sqrt(i)), axis=-1) + 1.0


def penalty_u(x: np.ndarray, a: float, k: float, m: int) -> np.ndarray:
    """u(x, a, k, m) elementwise: k (x - a)^m for x > a, 0 for -a <= x <= a, k (-x - a)^m for x < -a."""
    p = _pow4 if m == 4 else (lambda v: v**m)
    return np.where(x > a, k * p(x - a), np.where(x < -a, k * p(-x - a), 0.0))


def penalized_1(x: np.ndarray) -> np.ndarray:
    """f12, Generalized Penalized 1 with y_i = 1 + (x_i + 1)/4 (minimum 0 at x = -1)."""
    n = x.shape[-1]
    y = 1.0 + (x + 1.0) / 4.0
    body = (
        10.0 * np.sin(np.pi * y[..., 0]) ** 2
        + np.sum((y[..., :-1] - 1.0) ** 2 * (1.0 + 10.0 * np.sin(np.pi * y[..., 1:]) ** 2), axis=-1)
        + (y[..., -1] - 1.0) ** 2
    )
    return np.pi / n * body + np.sum(penalty_u(x, 10.0, 100.0, 4), axis=-1)


def penalized_2(x: np.ndarray) -> np.ndarray:
    """f13, Generalized Penalized 2 (minimum 0 at x = 1)."""
    body = (
        np.sin(3.0 * np.pi * x[..., 0]) ** 2
        + np.sum((x[..., :-1] - 1.0) ** 2 * (1.0 + np.sin(3.0 * np.pi * x[..., 1:]) ** 2), axis=-1)
        + (x[..., -1] - 1.0) ** 2 * (1.0 + np.sin(2.0 * np.pi * x[..., -1]) ** 2)
    )
    return 0.1 * body + np.sum(penalty_u(x, 5.0, 100.0, 4), axis=-1)


#: The twelve functions of the paper, by the names and in the order of
#: ``multiwalk.functions.yao.PAPER_FUNCTIONS`` (quartic noise-free here; see :func:`noisy_quartic`).
FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {name: globals()[name] for name in PAPER_FUNCTIONS}


# ============================================================================ the search
def default_delta0(lower: Any, upper: Any) -> np.ndarray:
    """The paper's initial step: (upper - lower) / 20 per coordinate."""
    return (np.asarray(upper, np.float64) - np.asarray(lower, np.float64)) / 20.0


def _setup(x_init: Any, lower: Any, upper: Any, iterations: int, delta0: Any, tol_scale: float):
    x = np.array(x_init, copy=True)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    if x.ndim != 2:
        raise ValueError(f"x_init must have shape (n_walkers, d), got {x.shape}")
    dt = x.dtype
    d = x.shape[1]
    lo = np.broadcast_to(np.asarray(lower, np.float64), (d,)).astype(dt)
    hi = np.broadcast_to(np.asarray(upper, np.float64), (d,)).astype(dt)
    if np.any((x < lo) | (x > hi)):
        raise ValueError("x_init has points outside [lower, upper]: the walkers start inside the box")
    d0 = default_delta0(lower, upper) if delta0 is None else np.asarray(delta0, np.float64)
    d0 = np.broadcast_to(d0, (d,)).astype(dt)
    if isinstance(iterations, bool) or int(iterations) != iterations or iterations < 0:
        raise ValueError(f"iterations must be a non-negative integer, got {iterations!r}")
    if not 0.0 < tol_scale < 1.0:
        raise ValueError(f"tol_scale must be in (0, 1), got {tol_scale!r}")
    return x, lo, hi, d0, int(iterations), dt


def _clean(v: np.ndarray) -> np.ndarray:
    """Objective values as float64 with NaN and +-inf replaced by +inf (they never win)."""
    v = np.asarray(v, dtype=np.float64)
    return np.where(np.isfinite(v), v, np.inf)


def pattern_search_numpy(
    f: Callable[[np.ndarray], Any],
    x_init: Any,
    lower: Any,
    upper: Any,
    iterations: int,
    delta0: Any = None,
    tol_scale: float = 2.0**-16,
    reset: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One round of SIMT-PS, one walker, one iteration, one coordinate, one point at a time.

    ``f(x) -> scalar`` takes ONE point of shape ``(d,)``; ``x_init`` is ``(n_walkers, d)``.
    Returns ``(x_final (n_walkers, d), f_final (n_walkers,) float64, scale_final (n_walkers,))``;
    the step of walker ``w`` along coordinate ``j`` is ``scale_final[w] * delta0[j]``.
    """
    x_all, lo, hi, d0, iterations, dt = _setup(x_init, lower, upper, iterations, delta0, tol_scale)
    n_walkers, d = x_all.shape
    lo_l, hi_l = lo.tolist(), hi.tolist()
    inf = float("inf")
    reset_at = tol_scale * (1.0 + RESET_SLACK)
    f_out = np.empty(n_walkers, np.float64)
    s_out = np.empty(n_walkers, dt)
    one = dt.type(1.0)
    half = dt.type(0.5)

    def value(x: np.ndarray) -> float:
        v = float(f(x))
        return v if math.isfinite(v) else inf

    for w in range(n_walkers):
        x = x_all[w]  # a view: updated in place
        fx = value(x)
        scale = one
        for _ in range(iterations):
            improved = False
            for j in range(d):
                delta = scale * d0[j]
                xj = x[j]
                plus, minus = xj + delta, xj - delta
                in_plus, in_minus = plus <= hi_l[j], minus >= lo_l[j]
                x[j] = plus
                f_plus = value(x) if in_plus else inf
                x[j] = minus
                f_minus = value(x) if in_minus else inf
                if in_plus and f_plus <= fx and f_plus <= f_minus:  # rule b)
                    x[j] = plus
                    f_new = f_plus
                elif in_minus and f_minus <= fx and f_minus <= f_plus:  # rule c)
                    x[j] = minus
                    f_new = f_minus
                else:
                    x[j] = xj
                    f_new = fx
                if f_new < fx:
                    improved = True
                fx = f_new
            if not improved:  # rule d)
                scale = scale * half
                if reset and scale <= reset_at:
                    scale = one
        f_out[w] = fx
        s_out[w] = scale
    return x_all, f_out, s_out


def pattern_search_numpy_batched(
    f_batch: Callable[[np.ndarray], Any],
    x_init: Any,
    lower: Any,
    upper: Any,
    iterations: int,
    delta0: Any = None,
    tol_scale: float = 2.0**-16,
    reset: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same search as :func:`pattern_search_numpy`, all walkers at once with NumPy arrays.

    ``f_batch(X) -> (m,)`` takes ``m`` points of shape ``(m, d)``.  Each coordinate sub-step
    evaluates the ``2 * n_walkers`` trial points with one call.  Same returns, same results.
    """
    x, lo, hi, d0, iterations, dt = _setup(x_init, lower, upper, iterations, delta0, tol_scale)
    n_walkers, d = x.shape
    reset_at = tol_scale * (1.0 + RESET_SLACK)
    fx = _clean(f_batch(x))
    scale = np.ones(n_walkers, dt)
    trial = np.empty((2 * n_walkers, d), dt)
    for _ in range(iterations):
        improved = np.zeros(n_walkers, bool)
        for j in range(d):
            delta = scale * d0[j]
            xj = x[:, j].copy()
            plus, minus = xj + delta, xj - delta
            in_plus, in_minus = plus <= hi[j], minus >= lo[j]
            trial[:n_walkers] = x
            trial[n_walkers:] = x
            trial[:n_walkers, j] = plus
            trial[n_walkers:, j] = minus
            both = _clean(f_batch(trial))
            f_plus = np.where(in_plus, both[:n_walkers], np.inf)
            f_minus = np.where(in_minus, both[n_walkers:], np.inf)
            go_plus = in_plus & (f_plus <= fx) & (f_plus <= f_minus)  # rule b)
            go_minus = ~go_plus & in_minus & (f_minus <= fx) & (f_minus <= f_plus)  # rule c)
            f_new = np.where(go_plus, f_plus, np.where(go_minus, f_minus, fx))
            improved |= f_new < fx
            x[:, j] = np.where(go_plus, plus, np.where(go_minus, minus, xj))
            fx = f_new
        scale = np.where(improved, scale, scale * dt.type(0.5))  # rule d)
        if reset:
            scale = np.where(scale <= reset_at, dt.type(1.0), scale)
    return x, fx, scale
