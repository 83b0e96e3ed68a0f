"""The progress summary after each chunk (`multiwalk.solve._summary_runner`): computed on the
device from only the state's leaves that ``solver.summary`` reads, read back with the step count
in one ``jax.device_get``.  The values must be those of ``solver.summary`` on the whole state.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

import multiwalk as mw

driver = importlib.import_module("multiwalk.solve")  # the package exports the function solve


def sphere(x):
    return ((x - 0.5) ** 2).sum()


def box() -> mw.Problem:
    return mw.Problem(objective=sphere, lower=-5.0 * np.ones(3), upper=5.0 * np.ones(3), x0=np.zeros(3))


def leaf_index(state, pick) -> int:
    """The position of the leaf ``pick(state)`` among the state's leaves."""
    leaves = jax.tree_util.tree_leaves(state)
    target = pick(state)
    return next(i for i, leaf in enumerate(leaves) if leaf is target)


def test_the_summary_gets_only_the_leaves_it_reads():
    """LBFGS's summary reads f and gnorm (and status with several starts), 2-3 of 51 leaves."""
    problem = box()
    for starts, fields in ((1, ("f", "gnorm")), (3, ("f", "gnorm", "status"))):
        solver = mw.LBFGS(max_iterations=5, starts=starts if starts > 1 else None)
        state = solver.initial_state_fn(problem)(driver._key(0))
        _, used = driver._summary_runner(problem, solver, state, None)
        want = sorted(leaf_index(state, lambda s, f=f: getattr(s.starts, f)) for f in fields)
        assert list(used) == want, (starts, used, want)
        assert len(jax.tree_util.tree_leaves(state)) > 40


def test_the_progress_summary_is_the_solvers_summary_of_the_state():
    """The callback's f and gnorm after the last chunk are the result's (exactly: the same
    reductions of the same numbers, one start)."""
    seen = []
    r = mw.solve(box(), mw.LBFGS(max_iterations=30), progress=False, chunk_seconds=1e-9, callback=seen.append)
    assert len(seen) == r.stats["chunks"] > 1
    assert seen[-1]["f"] == r.fun and seen[-1]["gnorm"] == r.gnorm
    assert all(isinstance(info["f"], float) for info in seen)


@dataclass(frozen=True)
class BufferSummary(mw.ReplicaExchange):
    """A summary that uses the shape of a leaf it does not read (the samples buffer grows with niter)."""

    def summary(self, problem, state):
        out = dict(super().summary(problem, state))
        out["buffer"] = jnp.asarray(state.samples.shape[0], jnp.float32)
        return out


def test_a_summary_may_read_an_unread_leafs_shape():
    """The leaves it does not read stand in with their true shapes, in solve() and in the kept
    executable, which is keyed by the whole state's layout: a state with a bigger samples buffer
    (the same read leaves) must not reuse the first one's constant, even under the same solver."""
    problem = box()
    for niter in (5, 9):  # nburn=0: only the sampling loop compiles (the summary is the same in both phases)
        seen = []
        mw.solve(problem, BufferSummary(nseq=2, nbeta=2, nburn=0, niter=niter), progress=False,
                 chunk_seconds=1e-9, callback=seen.append)
        assert {info["buffer"] for info in seen} == {float(niter)}
        assert all(np.isfinite(info["best"]) for info in seen)
    solver = BufferSummary(nseq=2, nbeta=2, nburn=0, niter=5)
    for niter in (5, 9):
        state = BufferSummary(nseq=2, nbeta=2, nburn=0, niter=niter).initial_state_fn(problem)(driver._key(0))
        summary, used = driver._summary_runner(problem, solver, state, None)
        leaves = jax.tree_util.tree_leaves(state)
        assert float(summary([leaves[i] for i in used])["buffer"]) == niter
