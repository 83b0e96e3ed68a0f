"""The mapper (ODAT-SE's ``algorithm.name = "mapper"``): the objective at every point of a mesh.

The points ``(M, d)`` are cut into ``ceil(M / batch_size)`` batches of ``batch_size`` points
(the last one padded with copies of the last point, whose values are not kept); each step
evaluates one batch with one vmapped call of the objective.  The driver runs the steps in
chunks, so a long map shows its progress, stops cleanly on Ctrl-C or a time limit (the points
evaluated so far are kept, the others are NaN) and can be checkpointed and resumed.

The points travel in the state, not as constants of the compiled program: a mesh of millions of
points costs no compile time.  No random numbers are drawn.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..compile_cache import cached_jit, start_with
from ..problem import Problem
from ..result import Result, Status
from ..spaces import read_mesh
from ._common import check_int_option, worst_if_nonfinite
from .base import Phase, Solver, end_status, value_at_point

__all__ = ["Mapper", "MapperResult", "MapperState", "grid_points"]

DEFAULT_BATCH = 65536  # points per compiled call when batch_size is not given: bounded memory, one compilation


def grid_points(lower: Any, upper: Any, num: Any) -> np.ndarray:
    """ODAT-SE's mapper grid ``(prod(num), d)``: ``num[k]`` evenly spaced values from ``lower[k]`` to
    ``upper[k]`` (both included) on each axis (its ``min_list``, ``max_list`` and ``num_list``), in
    ODAT-SE's order: ``numpy.meshgrid(..., indexing="xy")`` flattened, so the second coordinate
    varies slowest, then the first, then the third to the last (the last fastest; with d = 2 the
    first coordinate varies fastest)."""
    lo, hi = np.asarray(lower, np.float64).reshape(-1), np.asarray(upper, np.float64).reshape(-1)
    counts = list(np.asarray(num).reshape(-1))
    if not lo.size == hi.size == len(counts):
        raise ValueError(f"lower, upper and num must have one entry per coordinate, got {lo.size}, {hi.size} and {len(counts)}")
    if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1 for n in counts):
        raise ValueError(f"num must be positive integers (points along each axis), got {list(num)}")
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise ValueError(f"lower and upper must be finite, got {lo.tolist()} and {hi.tolist()}")
    axes = [np.linspace(a, b, num=int(n)) for a, b, n in zip(lo, hi, counts)]
    return np.array(np.meshgrid(*axes, indexing="xy")).reshape(lo.size, -1).T


class MapperState(NamedTuple):
    """The mesh in batches (B batches of P points) and what the steps found."""

    points: jax.Array  # (B, P, d) the mesh's points, batch after batch; the last batch padded
    funs: jax.Array  # (B, P) f at each point as the objective returned it (NaN: not evaluated yet)
    iteration: jax.Array  # () int32, batches evaluated
    best_fun: jax.Array  # () lowest finite f so far (+inf while none)
    best_index: jax.Array  # () int32 its point's index in the mesh (the first of equal values)
    n_nonfinite: jax.Array  # () int32 mesh points whose f was NaN or +-inf


@dataclass(frozen=True)
class Mapper(Solver):
    """Grid search: the objective at every point of a mesh, in batches of ``batch_size`` points.

    Parameters
    ----------
    points : the mesh, ``(M, d)`` full points (every coordinate of the problem);
        :meth:`from_mesh_file` reads ODAT-SE's mesh file, :meth:`grid` makes its grid.
    batch_size : points evaluated per step (one vmapped call); None: all of them, at most 65536.
    """

    points: np.ndarray = field(compare=False, repr=False)
    batch_size: int | None = None
    #: a digest of the points: two mappers are equal (share compiled code) only on the same mesh
    digest: str = field(init=False, default="")

    wraps_periodic = True  # it evaluates the points it is given: there are no moves to wrap
    evaluates_once_per_step = True  # one batch of replicas (points) a step: a non-JAX objective runs as a host loop
    reports_value_at_point = True  # result.fun by value_at_point: its one-point program compiles beside the loop

    def __post_init__(self) -> None:
        try:
            pts = np.array(self.points, dtype=np.float64, ndmin=2)
        except (TypeError, ValueError):
            raise TypeError(f"points must be an (M, d) array of numbers, got {type(self.points).__name__}") from None
        if pts.ndim != 2 or pts.shape[0] == 0 or pts.shape[1] == 0:
            raise ValueError(f"points must be an (M, d) array with M >= 1 points of d >= 1 coordinates, got shape {pts.shape}")
        bad = np.flatnonzero(~np.all(np.isfinite(pts), axis=1))
        if bad.size:
            raise ValueError(f"points[{int(bad[0])}] = {pts[bad[0]].tolist()} has a coordinate that is not finite")
        pts.setflags(write=False)
        object.__setattr__(self, "points", pts)
        check_int_option("batch_size", self.batch_size, 1, none_ok=True, hint="points evaluated per step")
        h = hashlib.blake2b(pts.tobytes(), digest_size=8)
        h.update(repr(pts.shape).encode())
        object.__setattr__(self, "digest", h.hexdigest())

    @classmethod
    def from_mesh_file(cls, path: str | os.PathLike, batch_size: int | None = None) -> Mapper:
        """The points of ODAT-SE's mesh file (``index x1 ... xd`` per line, ``#`` comments)."""
        return cls(points=read_mesh(path), batch_size=batch_size)

    @classmethod
    def grid(cls, lower: Any, upper: Any, num: Any, batch_size: int | None = None) -> Mapper:
        """ODAT-SE's grid (``min_list``, ``max_list``, ``num_list``): :func:`grid_points`."""
        return cls(points=grid_points(lower, upper, num), batch_size=batch_size)

    # ----------------------------------------------------------------- set-up
    @property
    def n_points(self) -> int:
        return int(self.points.shape[0])

    @property
    def per_batch(self) -> int:
        """Points evaluated per step."""
        return self.batch_size if self.batch_size is not None else min(self.n_points, DEFAULT_BATCH)

    @property
    def n_batches(self) -> int:
        return math.ceil(self.n_points / self.per_batch)

    def check(self, problem: Problem) -> None:
        if self.points.shape[1] != problem.n:
            raise ValueError(f"points have {self.points.shape[1]} coordinates each but the problem has {problem.n} parameters")
        if problem.fixed:
            raise ValueError("Mapper evaluates the points as given (every coordinate): fixed parameters are not "
                             "supported; put their values in the points instead")

    def phases(self, problem: Problem) -> list[Phase]:
        return [Phase("map", self.n_batches)]

    def options(self) -> dict[str, Any]:
        return {"points": self.digest, "n_points": self.n_points, "dimension": int(self.points.shape[1]),
                "batch_size": self.per_batch}

    def state_memory(self, problem: Problem) -> tuple[int, str]:
        padded = self.n_batches * self.per_batch
        need = padded * (problem.n + 1) * np.dtype(problem.dtype).itemsize + 32
        return need, f"fewer points (the mesh has {self.n_points}): map it in parts"

    def batched_points(self, dtype: Any) -> np.ndarray:
        """The points as the state holds them, ``(B, P, d)`` in ``dtype``, the last batch padded."""
        pad = self.n_batches * self.per_batch - self.n_points
        pts = np.concatenate([self.points, np.repeat(self.points[-1:], pad, axis=0)]) if pad else self.points
        return pts.astype(dtype).reshape(self.n_batches, self.per_batch, -1)

    def init(self, problem: Problem, key: jax.Array) -> MapperState:
        return self._initial_state(problem, jnp.asarray(self.batched_points(problem.dtype)))

    def initial_state_fn(self, problem: Problem, shardings: Any = None, plan: Any = None) -> Any:
        """The points go to the start as an argument, never compiled in as constants."""
        make = cached_jit(problem, self, "init", lambda pts: self._initial_state(problem, pts), shardings)
        return start_with(make, self.batched_points(problem.dtype))

    def _initial_state(self, problem: Problem, points: jax.Array) -> MapperState:
        i32 = jnp.int32
        return MapperState(
            points=points, funs=jnp.full(points.shape[:2], jnp.nan, problem.dtype), iteration=jnp.asarray(0, i32),
            best_fun=jnp.asarray(jnp.inf, problem.dtype), best_index=jnp.asarray(0, i32), n_nonfinite=jnp.asarray(0, i32),
        )

    # ----------------------------------------------------------------- one step
    def step(self, problem: Problem, state: MapperState, phase: int) -> MapperState:
        i, per = state.iteration, self.per_batch
        f = jax.vmap(problem.chi2_full)(state.points[i]).astype(problem.dtype)
        index = i * per + jnp.arange(per, dtype=jnp.int32)  # the mesh index of each point of the batch
        real = index < self.n_points  # the padding's values are not kept
        clean, bad = worst_if_nonfinite(jnp.where(real, f, jnp.inf))
        j = jnp.argmin(clean)  # the first of equal values in the batch; earlier batches win ties
        better = clean[j] < state.best_fun
        return state._replace(
            funs=jax.lax.dynamic_update_index_in_dim(state.funs, jnp.where(real, f, jnp.nan), i, 0),
            iteration=i + 1,
            best_fun=jnp.where(better, clean[j], state.best_fun),
            best_index=jnp.where(better, index[j], state.best_index),
            n_nonfinite=state.n_nonfinite + jnp.sum(bad & real, dtype=jnp.int32),
        )

    # ----------------------------------------------------------------- devices, progress, result
    def batch_axes(self, problem: Problem, state: Any) -> MapperState:
        """Each batch's points split over the devices."""
        return MapperState(points=1, funs=1, iteration=None, best_fun=None, best_index=None, n_nonfinite=None)

    def batch_option(self, problem: Problem) -> str:
        return "batch_size"

    def summary(self, problem: Problem, state: MapperState) -> dict[str, jax.Array]:
        return {"best": state.best_fun, "points": jnp.minimum(state.iteration * self.per_batch, self.n_points)}

    def result(self, problem: Problem, state: MapperState, done: list[int], status: Status,
               stats: dict[str, Any]) -> MapperResult:
        funs = np.asarray(state.funs).reshape(-1)[: self.n_points]
        evaluated = min(int(state.iteration) * self.per_batch, self.n_points)
        best_index, best_fun = int(state.best_index), np.asarray(state.best_fun)[()]
        # a run stopped early keeps its status (FAILED only when every point was evaluated)
        status, message = end_status(
            status, f"evaluated all {self.n_points} points", bool(np.isfinite(best_fun)) or evaluated < self.n_points,
            f"none of the {self.n_points} points had a finite objective value",
        )
        if evaluated < self.n_points:
            message = f"{message}: {evaluated} of {self.n_points} points evaluated (the others are NaN)"
        x = self.points[best_index].astype(problem.dtype)
        stats = {**stats, "nonfinite": int(state.n_nonfinite), "evaluated": evaluated}
        return MapperResult(
            x=x, fun=value_at_point(problem, x, best_fun), status=status, message=message, stats=stats,
            points=np.asarray(self.points), funs=funs, best_index=best_index, n_evaluated=evaluated,
        )


@dataclass(repr=False, kw_only=True)
class MapperResult(Result):
    """Result of :class:`Mapper`.

    ``points`` (M, d): the mesh; ``funs`` (M,): f at each point as the objective returned it
    (NaN and +-inf kept; NaN where the run stopped before the point); ``best_index``: the point
    of the lowest finite value (the first of equal ones), ``x = points[best_index]``;
    ``n_evaluated``: the points evaluated (the first ``n_evaluated``).
    """

    points: np.ndarray
    funs: np.ndarray
    best_index: int
    n_evaluated: int
