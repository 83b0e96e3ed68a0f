"""The state of one L-BFGS problem, the run around it, and the direction ``d = -H g`` from it.

One problem keeps its last ``m`` pairs ``(s, y)`` in a ring ``P`` and the small matrices of the
compact representation (Byrd, Nocedal and Schnabel 1994) next to them; the solver vmaps the state
over ``K`` independent starts.  The direction is read from the state in one of two ways:

* :func:`compact_direction`, ``H0 = gamma I``: ``d = -gamma g + w @ P`` with the ``2m``
  coefficients ``w`` from the small matrices (one pass over ``P``);
* :func:`two_loop_direction`, a user ``H0`` (vector or scalar): Nocedal's two-loop recursion.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ..lbfgs_common import _chronological, compact_coefficients
from ..more_thuente import LineSearchParams, LineSearchState, line_search_init

__all__ = ["HISTORY_STARTS", "History", "LBFGSRun", "LBFGSState", "compact_direction", "run_shapes", "state_bytes",
           "two_loop_direction"]

HISTORY_STARTS = 64  # per-iteration history is kept for the first this-many starts


class LBFGSState(NamedTuple):
    """One L-BFGS problem.  ``n``: free parameters, ``m``: stored pairs.

    ``P`` holds the pairs in a ring: rows ``0..m-1`` the steps ``s``, rows ``m..2m-1`` the gradient
    changes ``y``; ``head`` is the slot the next pair goes to, ``count`` the number stored.
    ``SY[i, j] = s_i'y_j`` (kept for slot i not newer than slot j), ``YY[i, j] = y_i'y_j``;
    ``a = S'g``, ``b = Y'g`` for the current gradient.
    """

    x: jax.Array  # (n,)
    f: jax.Array  # ()
    g: jax.Array  # (n,)
    d: jax.Array  # (n,) search direction of the current iteration
    P: jax.Array  # (2m, n)
    SY: jax.Array  # (m, m)
    YY: jax.Array  # (m, m)
    a: jax.Array  # (m,)
    b: jax.Array  # (m,)
    gamma: jax.Array  # () scale of H0
    gg: jax.Array  # () g'g
    head: jax.Array  # () int32
    count: jax.Array  # () int32
    ls: LineSearchState  # the line search of the current iteration
    iteration: jax.Array  # () int32, completed iterations
    nfev: jax.Array  # () int32, evaluations of f and g (the first one included)
    gnorm: jax.Array  # () ||g||
    xnorm: jax.Array  # () ||x||
    stp: jax.Array  # () step of the last iteration
    status: jax.Array  # () int32: _RUNNING or a Status value
    nonfinite: jax.Array  # () int32 evaluations whose f or g'd was NaN or +-inf (f taken as +inf)


class History(NamedTuple):
    """Per-iteration record of the first starts: row i is after iteration i (row 0: the start)."""

    f: jax.Array  # (max_iterations + 1, k), k = min(K, HISTORY_STARTS)
    gnorm: jax.Array  # (max_iterations + 1, k)
    stp: jax.Array  # (max_iterations + 1, k)
    nfev: jax.Array  # (max_iterations + 1, k) int32


class LBFGSRun(NamedTuple):
    """The solver's state: every start, the history of the first ones, and the user's ``H0``."""

    starts: LBFGSState  # every leaf has a leading axis K (or a OnePassState: the one-pass loop's rings)
    history: History
    h0: jax.Array  # (n,) the user's constant diag; (2, n) the box [lower; upper] of a bounded problem; or ()


def run_shapes(n: int, m: int, starts: int, dtype: Any, max_iterations: int, h0_shape: tuple[int, ...],
               params: LineSearchParams) -> LBFGSRun:
    """The shapes and dtypes of the start ``LBFGS.init`` makes in the stored-pairs layout
    (``jax.ShapeDtypeStruct`` leaves), from the sizes alone: ``n`` free parameters, ``m`` pairs,
    ``starts`` starts, ``h0_shape`` that of the state's ``h0``.  What the driver lowers the loop
    for; ``jax.eval_shape`` of the start would trace it (its first direction batched over the
    starts: ~0.1 s on a CPU, in every new process).  Only the line search's own start is traced
    (a few scalar operations), so its fields follow :func:`line_search_init`."""
    dt = jnp.dtype(dtype)

    def of(shape: tuple[int, ...], kind: Any = dt) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, kind)

    scalar = of(())
    ls = jax.eval_shape(lambda f, gd, stp: line_search_init(f, gd, stp, params), scalar, scalar, scalar)
    one = LBFGSState(
        x=of((n,)), f=scalar, g=of((n,)), d=of((n,)), P=of((2 * m, n)), SY=of((m, m)), YY=of((m, m)),
        a=of((m,)), b=of((m,)), gamma=scalar, gg=scalar, head=of((), jnp.int32), count=of((), jnp.int32),
        ls=ls, iteration=of((), jnp.int32), nfev=of((), jnp.int32), gnorm=scalar, xnorm=scalar, stp=scalar,
        status=of((), jnp.int32), nonfinite=of((), jnp.int32),
    )
    every_start = jax.tree.map(lambda leaf: of((starts, *leaf.shape), leaf.dtype), one)
    rows, kept = max_iterations + 1, min(starts, HISTORY_STARTS)
    history = History(f=of((rows, kept)), gnorm=of((rows, kept)), stp=of((rows, kept)),
                      nfev=of((rows, kept), jnp.int32))
    return LBFGSRun(starts=every_start, history=history, h0=of(h0_shape))


def compact_direction(st: LBFGSState, m: int) -> tuple[jax.Array, jax.Array]:
    """``(d, g'd)`` with ``d = -H g`` by the compact representation (H0 = gamma I)."""
    w, gd = compact_coefficients(st, m)
    return -st.gamma * st.g + w @ st.P, gd


def two_loop_direction(st: LBFGSState, m: int, h0: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(d, g'd)`` with ``d = -H g`` by Nocedal's two-loop recursion, ``H0 = h0`` (vector or scalar)."""
    order, valid = _chronological(st.head, st.count, m)
    rho = jnp.where(valid, 1.0 / jnp.where(valid, jnp.diagonal(st.SY)[order], 1.0), 0.0)
    S, Y = st.P[:m], st.P[m:]

    def newest_first(q, k):  # k = m-1 .. 0 over chronological positions
        slot = order[k]
        alpha = rho[k] * (S[slot] @ q)
        return q - alpha * Y[slot], alpha

    q, alphas = lax.scan(newest_first, st.g, jnp.arange(m - 1, -1, -1))
    alphas = alphas[::-1]
    r = h0 * q

    def oldest_first(r, k):
        slot = order[k]
        beta = rho[k] * (Y[slot] @ r)
        return r + (alphas[k] - beta) * S[slot], None

    r, _ = lax.scan(oldest_first, r, jnp.arange(m))
    d = -r
    return d, st.g @ d


def state_bytes(n: int, m: int, starts: int, item: int, max_iterations: int, diag_vector: bool, onepass: bool) -> int:
    """Bytes of an :class:`LBFGSRun` (``init``'s state; floats of ``item`` bytes, int32, bool): per start
    x, g, d and the 2m pairs (the one-pass rings: 2m + 5 vectors), the m x m matrices SY and YY, and
    the scalars of the state and its line search; the history of the first starts; H0."""
    vectors = (2 * m + 5) * n + 2 * m if onepass else (2 * m + 3) * n  # rings X, G, S and w; or x, g, d, P
    per_start = (vectors + 2 * m * m + 2 * m + 6 + 19) * item + (6 + 5) * 4 + 4  # + a, b; scalars; 4 bools
    history = (max_iterations + 1) * min(starts, HISTORY_STARTS) * (3 * item + 4)
    return starts * per_start + history + (n if diag_vector else 1) * item
