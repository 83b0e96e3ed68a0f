"""A minimal multiwalk solver: uniform random search in the box, kept best point per walker.

The Solver contract in about sixty lines (docs/architecture.md walks through it): what every
solver must have, ``phases``, ``init``, ``step`` and ``result`` (``done``, ``check`` and
``options`` have defaults; ``check`` is given here), then three optional hooks, for devices and
the progress bar.  The options are fields of a frozen dataclass, the state is a NamedTuple of arrays with the walkers
on axis 0, ``step`` is a pure function whose random numbers come from the run's key folded with
the iteration counter (so results do not depend on chunking, resumes or devices), and
``result`` turns the final state into a :class:`multiwalk.Result`.  Run it:

    python examples/minimal_solver.py
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import multiwalk as mw
from multiwalk.solvers._common import check_int_option, worst_if_nonfinite
from multiwalk.solvers.base import end_status, value_at_point

_INIT_STREAM = 0x7FFFFFFF  # key stream of the start; iteration i draws from stream i


class RandomSearchState(NamedTuple):
    key: jax.Array  # the run's key
    iteration: jax.Array  # () int32, iterations done
    best_x: jax.Array  # (n_walkers, n_free) best point each walker has drawn
    best_fun: jax.Array  # (n_walkers,) its objective; +inf while none was finite
    n_nonfinite: jax.Array  # () int32, draws whose objective was NaN or +-inf


@dataclass(frozen=True)
class RandomSearch(mw.Solver):
    """``n_walkers`` walkers each draw one uniform point of the box per iteration, ``iterations`` times."""

    n_walkers: int = 64
    iterations: int = 100

    def __post_init__(self) -> None:  # bad options fail here, before anything compiles
        check_int_option("n_walkers", self.n_walkers, 1)
        check_int_option("iterations", self.iterations, 0)

    # ------------------------------------------------------------ required (check: a default accepts all)
    def check(self, problem: mw.Problem) -> None:
        if problem.lower is None:
            raise ValueError("RandomSearch needs a box: pass lower= and upper= to Problem")

    def phases(self, problem: mw.Problem) -> list[mw.Phase]:
        return [mw.Phase("search", self.iterations)]

    def _draw(self, problem: mw.Problem, key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """One uniform point per walker, its objective (NaN, +-inf -> +inf) and how many were not finite."""
        lo, hi, _ = problem.free_bounds()
        u = jax.random.uniform(key, (self.n_walkers, problem.n_free), problem.dtype)
        x = jnp.asarray(lo, problem.dtype) + jnp.asarray(hi - lo, problem.dtype) * u
        f, bad = worst_if_nonfinite(jax.vmap(problem.chi2_free)(x))  # the one-point objective, batched
        return x, f, jnp.sum(bad, dtype=jnp.int32)

    def init(self, problem: mw.Problem, key: jax.Array) -> RandomSearchState:
        x, f, bad = self._draw(problem, jax.random.fold_in(key, _INIT_STREAM))
        return RandomSearchState(key, jnp.asarray(0, jnp.int32), x, f, bad)

    def step(self, problem: mw.Problem, state: RandomSearchState, phase: int) -> RandomSearchState:
        x, f, bad = self._draw(problem, jax.random.fold_in(state.key, state.iteration))
        better = f < state.best_fun
        return state._replace(
            iteration=state.iteration + 1,
            best_x=jnp.where(better[:, None], x, state.best_x),
            best_fun=jnp.where(better, f, state.best_fun),
            n_nonfinite=state.n_nonfinite + bad,
        )

    def result(self, problem: mw.Problem, state: RandomSearchState, done: list[int],
               status: mw.Status, stats: dict[str, Any]) -> mw.Result:
        best_fun = np.asarray(state.best_fun)
        i = int(np.argmin(best_fun))
        x = np.asarray(problem.expand(np.asarray(state.best_x)[i]))
        status, message = end_status(status, f"drew {(done[0] + 1) * self.n_walkers} points",
                                     bool(np.isfinite(best_fun[i])), "no draw had a finite objective value")
        stats = {**stats, "nonfinite": int(state.n_nonfinite)}
        return mw.Result(x=x, fun=value_at_point(problem, x, float(best_fun[i])),
                         status=status, message=message, stats=stats)

    # ------------------------------------------------------------ optional: devices, the progress bar
    def state_memory(self, problem: mw.Problem) -> tuple[int, str]:  # checked before compiling
        per_walker = (problem.n_free + 1) * np.dtype(problem.dtype).itemsize
        return self.n_walkers * per_walker + 16, f"lower n_walkers={self.n_walkers}"

    def batch_axes(self, problem: mw.Problem, state: Any) -> RandomSearchState:
        return RandomSearchState(key=None, iteration=None, best_x=0, best_fun=0, n_nonfinite=None)

    def batch_option(self, problem: mw.Problem) -> str:
        return "n_walkers"

    def summary(self, problem: mw.Problem, state: RandomSearchState) -> dict[str, jax.Array]:
        return {"best": jnp.min(state.best_fun)}


if __name__ == "__main__":
    problem = mw.Problem(objective=lambda x: jnp.sum((x - 0.3) ** 2), lower=[-1, -1], upper=[1, 1])
    print(mw.solve(problem, RandomSearch(n_walkers=64, iterations=100), seed=0))
