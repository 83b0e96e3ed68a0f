"""What both forms of L-BFGS share: :mod:`~multiwalk.solvers.lbfgs` (the state with its stored
pairs ``P``) and :mod:`~multiwalk.solvers.lbfgs_onepass` (the rings of one kernel per evaluation).

* the status codes a problem's state holds (:class:`multiwalk.Status`, also importable as
  ``LBFGSStatus``; ``_RUNNING`` while it runs, ``_INFO_TO_STATUS`` from the line search's ``info``);
* the small ``m x m`` algebra of the compact representation: :func:`compact_coefficients` (the
  direction's coefficients from ``S'Y``, ``Y'Y``, ``S'g``, ``Y'g``) and :func:`store_in_ring`
  (those matrices with a new pair in its ring slot);
* the scalars of a state packed in two small vectors, the fused loops' carry (:func:`_pack`).

Names with a leading underscore are shared by the two L-BFGS modules only, not the package's API.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular

from ..result import Status

__all__ = ["LBFGSStatus", "compact_coefficients", "store_in_ring"]

_RUNNING = -1  # the status of a problem still running


# One start's ending is a member of the one status enum: the general codes (SUCCESS, MAX_STEPS, ...)
# and L-BFGS's own (LINE_SEARCH_*, DIAG_NOT_POSITIVE, NONFINITE_START), each with its message.
LBFGSStatus = Status

# MCSRCH's info 0..6 -> the status (info 1, the Wolfe conditions met, is no ending: callers keep _RUNNING)
_INFO_TO_STATUS = np.array(
    [Status.LINE_SEARCH_BAD_INPUT, Status.SUCCESS, Status.LINE_SEARCH_XTOL, Status.LINE_SEARCH_MAXFEV,
     Status.LINE_SEARCH_STPMIN, Status.LINE_SEARCH_STPMAX, Status.LINE_SEARCH_ROUNDING], np.int32
)


# --------------------------------------------------------------------------------------------------
# the direction's coefficients from the small matrices
# --------------------------------------------------------------------------------------------------


def _chronological(head: jax.Array, count: jax.Array, m: int) -> tuple[jax.Array, jax.Array]:
    """Slots oldest to newest (first ``count`` entries), then the unused slots: a permutation."""
    i = jnp.arange(m)
    return (head - count + i) % m, i < count


def _solve_upper(R: jax.Array, v: jax.Array, transpose: bool, unrolled: bool = False) -> jax.Array:
    """``R^-1 v`` (``transpose``: ``R^-T v``) for the small upper-triangular ``R`` (m, m).

    ``unrolled`` (the fused GPU path): by substitution unrolled over the static ``m``, a few small
    fusions where ``solve_triangular`` is two cuBLAS trsm calls (faster for the small algebra of a
    direction alone; whole solves did not show the difference above their noise).  Elsewhere ``solve_triangular`` (LAPACK on a
    CPU): the summation order of its rounding is what the XLA form's tests were written against
    (tests/test_devices.py's split run at eps = 1e-9 ends otherwise)."""
    if not unrolled:
        return solve_triangular(R, v, trans="T" if transpose else 0, lower=False)
    m = R.shape[0]
    out: list[jax.Array] = [jnp.zeros((), v.dtype)] * m
    for i in range(m) if transpose else range(m - 1, -1, -1):
        acc = v[i]
        # R^T is lower triangular (its row i is R's column i, entries j < i); R: row i, entries j > i
        for j in range(i) if transpose else range(i + 1, m):
            acc = acc - (R[j, i] if transpose else R[i, j]) * out[j]
        out[i] = acc / R[i, i]
    return jnp.stack(out)


def compact_coefficients(st: Any, m: int, unrolled: bool = False) -> tuple[jax.Array, jax.Array]:
    """``(w, g'd)`` such that ``d = -H g = -gamma g + w @ P`` (compact representation, H0 = gamma I).

    ``st``: an ``LBFGSState``, or the one-pass form's small matrices (anything with ``head``,
    ``count``, ``SY``, ``YY``, ``a``, ``b``, ``gamma``, ``gg`` and ``g``, whose dtype alone is read).
    Only the small matrices are used: ``w`` has one coefficient per stored row of ``P`` (ring
    order, zero on unused slots).  ``unrolled``: the triangular solves of :func:`_solve_upper`."""
    order, valid = _chronological(st.head, st.count, m)
    both = valid[:, None] & valid[None, :]
    SY = st.SY[order][:, order]
    R = jnp.where(both & (jnp.arange(m)[:, None] <= jnp.arange(m)[None, :]), SY, 0.0)
    R = R + jnp.diag(jnp.where(valid, 0.0, 1.0)).astype(R.dtype)  # identity on unused slots
    D = jnp.where(valid, jnp.diagonal(SY), 0.0)
    YY = jnp.where(both, st.YY[order][:, order], 0.0)
    a = jnp.where(valid, st.a[order], 0.0)
    b = jnp.where(valid, st.b[order], 0.0)
    gamma = st.gamma
    u = _solve_upper(R, a, False, unrolled)  # R^-1 S'g
    p = _solve_upper(R, D * u + gamma * (YY @ u) - gamma * b, True, unrolled)
    # d = -gamma g - S p + gamma Y u, the coefficients put back in ring order
    w = jnp.zeros(2 * m, st.g.dtype).at[order].set(-p).at[m + order].set(gamma * u)
    gd = -gamma * st.gg - a @ p + gamma * (b @ u)
    return w, gd


def store_in_ring(
    st: Any, m: int, slot: jax.Array, g_prods: jax.Array, y_prods: jax.Array, sy: jax.Array, yy: jax.Array,
    yg: jax.Array, sdg: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """``(SY, YY, a, b)`` of ``st`` with the new pair ``s, y`` in ring slot ``slot``: ``g_prods`` (2m,)
    = [S'g_t, Y'g_t] and ``y_prods`` = [S'y, Y'y] from the pairs before the update; ``sy, yy, yg``
    the new pair's s'y, y'y, y'g_t and ``sdg`` = s'g_t (= stp g_t'd).  The one-pass loop's ring
    order (:mod:`~multiwalk.solvers.lbfgs_onepass`) uses the same update."""
    col_sy = y_prods[:m].at[slot].set(sy)
    col_yy = y_prods[m:].at[slot].set(yy)
    SY = st.SY.at[:, slot].set(col_sy).at[slot, :].set(0.0).at[slot, slot].set(sy)
    YY = st.YY.at[:, slot].set(col_yy).at[slot, :].set(col_yy)
    return SY, YY, g_prods[:m].at[slot].set(sdg), g_prods[m:].at[slot].set(yg)


# --------------------------------------------------------------------------------------------------
# the scalars of a state in two small vectors (the fused forms' loop carry)
# --------------------------------------------------------------------------------------------------


class _ScalarLayout(NamedTuple):
    """Where a pytree's scalar leaves go: ``floats[j]`` / ``ints[j]`` holds leaf ``index[j]``."""

    treedef: Any
    float_index: tuple[int, ...]
    float_dtypes: tuple[Any, ...]
    int_index: tuple[int, ...]
    int_dtypes: tuple[Any, ...]


def _scalar_layout(tree: Any) -> _ScalarLayout:
    leaves, treedef = jax.tree.flatten(tree)
    scalars = [(i, jnp.result_type(leaf)) for i, leaf in enumerate(leaves) if jnp.ndim(leaf) == 0]
    floats = [(i, t) for i, t in scalars if jnp.issubdtype(t, jnp.floating)]
    ints = [(i, t) for i, t in scalars if not jnp.issubdtype(t, jnp.floating)]  # int32 and bool: exact in int32
    return _ScalarLayout(treedef, tuple(i for i, _ in floats), tuple(t for _, t in floats),
                         tuple(i for i, _ in ints), tuple(t for _, t in ints))


def _pack(layout: _ScalarLayout, tree: Any, dt: Any) -> tuple[list, jax.Array, jax.Array]:
    """``(array leaves (None for scalars), floats, ints)``: every scalar leaf in one of two vectors.

    On a GPU, XLA computes each scalar leaf a loop body outputs in its own small kernel (and
    copies constant ones into the loop's buffers): ~45 scalars of the L-BFGS state and its line
    search were ~80 launches per iteration, a few microseconds each.  Stacked, they are a few
    fusions.  The casts are exact (floats keep the state's dtype; int32 and bool go to int32)."""
    leaves = jax.tree.leaves(tree)
    floats = jnp.stack([jnp.asarray(leaves[i]).astype(dt) for i in layout.float_index])
    ints = jnp.stack([jnp.asarray(leaves[i]).astype(jnp.int32) for i in layout.int_index])
    rest = [None if jnp.ndim(leaf) == 0 else leaf for leaf in leaves]
    return rest, floats, ints


def _unpack(layout: _ScalarLayout, rest: list, floats: jax.Array, ints: jax.Array) -> Any:
    leaves = list(rest)
    for j, (i, t) in enumerate(zip(layout.float_index, layout.float_dtypes)):
        leaves[i] = floats[j].astype(t)
    for j, (i, t) in enumerate(zip(layout.int_index, layout.int_dtypes)):
        leaves[i] = ints[j].astype(t)
    return jax.tree.unflatten(layout.treedef, leaves)
