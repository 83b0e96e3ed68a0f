"""A checkpoint of one L-BFGS form resumed in the other: the one-pass loop's rings (``X, G, S``,
:class:`~multiwalk.solvers.lbfgs_onepass.OnePassState`) to the stored pairs ``P`` of the XLA and
fused forms (:class:`~multiwalk.solvers.lbfgs.state.LBFGSState`), or the reverse.

``kernel`` is a resumable option, and ``"auto"`` picks the form by backend, dtype and device
count, so a run may be resumed in the other form.  The pairs of age ``a = 1..count`` sit in slot
``(head - a) % m`` of ``P`` and at position ``m - a`` of the one-pass small matrices, with
``y_a = g_{k-a+1} - g_{k-a}``; the direction is rebuilt from ``w`` (or ``w`` from the small
matrices).  Equal up to rounding (older gradients rebuilt as g - y).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import lbfgs_onepass
from .state import LBFGSRun, LBFGSState

__all__ = ["convert_checkpoint"]

# the fields both layouts share, copied as they are
_SHARED = ("f", "gamma", "gg", "head", "count", "ls", "iteration", "nfev", "gnorm", "xnorm", "stp", "status",
           "nonfinite")


def convert_checkpoint(m: int, fresh_state: LBFGSRun, saved_layout: list[str], leaves: list[np.ndarray]) -> list | None:
    """The saved ``leaves`` in the layout of ``fresh_state`` (one start), or None where the saved
    layout is already the fresh one's or the run has several starts (no conversion)."""
    one_now = isinstance(fresh_state.starts, lbfgs_onepass.OnePassState)
    if ("OnePassState" in saved_layout) == one_now or fresh_state.starts.f.shape[0] != 1:
        return None
    other = lbfgs_onepass.OnePassState if not one_now else LBFGSState
    template = other(**{f: 0 for f in other._fields if f != "ls"}, ls=fresh_state.starts.ls)
    saved_run = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(fresh_state._replace(starts=template)),
                                             leaves)
    st = jax.tree_util.tree_map(lambda v: np.asarray(v)[0], saved_run.starts)  # one problem
    small = _small_matrices(st, m, to_ring=not one_now)
    keep = {f: getattr(st, f) for f in _SHARED}
    if one_now:
        new = _pairs_to_rings(st, m, small, keep, fresh_state.starts.X.shape[2:])
    else:
        new = _rings_to_pairs(st, m, small, keep)
    starts = jax.tree_util.tree_map(lambda v: np.asarray(v)[None], new)
    return jax.tree_util.tree_leaves(saved_run._replace(starts=starts))  # the history and h0 as saved


def _small_matrices(st: Any, m: int, to_ring: bool) -> dict[str, np.ndarray]:
    """``SY, YY, a, b`` moved from chronological positions to ring slots (``to_ring``) or back."""
    ages = np.arange(1, m + 1)
    ring, chrono = (int(st.head) - ages) % m, m - ages  # where the pair of each age sits in either form
    src, dst = (chrono, ring) if to_ring else (ring, chrono)
    small = {}
    for name in ("SY", "YY", "a", "b"):
        v = np.asarray(getattr(st, name))
        out = np.zeros_like(v)
        if v.ndim == 2:
            out[np.ix_(dst, dst)] = v[np.ix_(src, src)]
        else:
            out[dst] = v[src]
        small[name] = out
    return small


def _rings_to_pairs(st: Any, m: int, small: dict, keep: dict) -> LBFGSState:
    """The stored pairs ``P`` (2m, n) and the direction from the one-pass rings and ``w``."""
    k, c, head = int(st.iteration), int(st.count), int(st.head)
    n = st.X[0].size
    X, G, S = (np.asarray(r).reshape(r.shape[0], n) for r in (st.X, st.G, st.S))
    x, g = X[k % 2], G[k % (m + 2)]
    P = np.zeros((2 * m, n), x.dtype)
    d = -st.gamma * g
    for a in range(1, c + 1):
        sl, s_a = (head - a) % m, S[(k - a) % (m + 1)]
        y_a = G[(k - a + 1) % (m + 2)] - G[(k - a) % (m + 2)]
        P[sl], P[m + sl] = s_a, y_a
        d = d + st.w[m - a] * s_a + st.w[2 * m - a] * y_a
    return LBFGSState(x=x, g=g, d=d, P=P, **small, **keep)


def _pairs_to_rings(st: Any, m: int, small: dict, keep: dict, shape: tuple[int, ...]) -> lbfgs_onepass.OnePassState:
    """The one-pass rings (rows of ``shape`` = (n / width, width)) and ``w`` from the stored pairs."""
    k, c, head = int(st.iteration), int(st.count), int(st.head)
    n, dt = st.x.size, st.x.dtype
    X, G, S = np.zeros((2, n), dt), np.zeros((m + 2, n), dt), np.zeros((m + 1, n), dt)
    X[k % 2], G[k % (m + 2)] = st.x, st.g
    for a in range(1, c + 1):
        sl = (head - a) % m
        S[(k - a) % (m + 1)] = st.P[sl]
        G[(k - a) % (m + 2)] = G[(k - a + 1) % (m + 2)] - st.P[m + sl]
    coef = lbfgs_onepass._Small(**{f: jnp.asarray(small[f]) for f in ("SY", "YY", "a", "b")},
                                gamma=st.gamma, gg=st.gg, head=st.head, count=st.count, g=jnp.zeros((0,), dt))
    w, _ = lbfgs_onepass._coefficients_chronological(coef, m)
    return lbfgs_onepass.OnePassState(X=X.reshape(2, *shape), G=G.reshape(m + 2, *shape),
                                      S=S.reshape(m + 1, *shape), w=np.asarray(w), **small, **keep)
