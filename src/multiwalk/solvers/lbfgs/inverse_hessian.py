"""The L-BFGS inverse-Hessian approximation as a scipy ``LinearOperator`` (scipy's ``hess_inv``).

``H = V_k' ... (gamma I) ... V_k + ...``: the matrix L-BFGS multiplies the gradient by, built from
the last ``k <= m`` pairs ``s_i = x_{i+1} - x_i``, ``y_i = g_{i+1} - g_i`` and ``H0 = gamma I``.
``H v`` is Nocedal's two-loop recursion (O(k n)); the n x n matrix is never formed unless
``todense()`` is asked for.  Unlike scipy's ``LbfgsInvHessProduct`` (``H0 = I``), ``gamma`` is the
scale the run itself used, so ``H @ g`` is the run's own next direction (negated).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from scipy.sparse.linalg import LinearOperator

from ..lbfgs_common import _chronological

__all__ = ["InverseHessian", "best_start_pairs"]


class InverseHessian(LinearOperator):
    """``H`` (n, n) from ``s``, ``y`` (k, n), oldest first, and ``gamma`` (the scale of ``H0``)."""

    def __init__(self, s: np.ndarray, y: np.ndarray, gamma: float) -> None:
        s, y = np.atleast_2d(np.asarray(s)), np.atleast_2d(np.asarray(y))
        if s.shape != y.shape:
            raise ValueError(f"s and y must have the same shape, got {s.shape} and {y.shape}")
        super().__init__(dtype=np.result_type(s, y, np.float32), shape=(s.shape[1], s.shape[1]))
        self.s, self.y, self.gamma = s, y, float(gamma)
        self.rho = 1.0 / np.einsum("ij,ij->i", s, y)

    def _matvec(self, v: np.ndarray) -> np.ndarray:
        q = np.array(v, dtype=self.dtype).reshape(-1)
        alpha = np.empty(len(self.rho))
        for i in range(len(self.rho) - 1, -1, -1):  # newest to oldest
            alpha[i] = self.rho[i] * (self.s[i] @ q)
            q -= alpha[i] * self.y[i]
        r = self.gamma * q
        for i in range(len(self.rho)):  # oldest to newest
            beta = self.rho[i] * (self.y[i] @ r)
            r += self.s[i] * (alpha[i] - beta)
        return r

    def _adjoint(self) -> InverseHessian:
        return self  # symmetric

    def todense(self) -> np.ndarray:
        """The n x n matrix (for small n)."""
        return self.matmat(np.eye(self.shape[0], dtype=self.dtype))


def best_start_pairs(starts: Any, best: int, m: int) -> dict[str, Any]:
    """``{"s", "y", "gamma"}`` of start ``best`` from a two-pass state's ring (``P``: rows
    ``0..m-1`` the steps, ``m..2m-1`` the gradient changes; ``head``, ``count``), oldest first."""
    head, count = int(starts.head[best]), int(starts.count[best])
    slots, _ = _chronological(jax.numpy.asarray(head), jax.numpy.asarray(count), m)
    order = np.asarray(slots)[:count]
    P = np.asarray(starts.P[best])
    return {"s": P[order], "y": P[m + order], "gamma": float(starts.gamma[best])}
