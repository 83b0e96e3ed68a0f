"""The progress summary after each chunk (`multiwalk.progress.summary_runner`): computed on the
device from only the state's leaves that ``solver.summary`` reads, read back with the step count
in one ``jax.device_get``.  The values must be those of ``solver.summary`` on the whole state.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

import multiwalk as mw
from multiwalk import compile_cache
from multiwalk.functions import cute
from multiwalk.progress import summary_runner
from multiwalk.solve import run_key


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
    """LBFGS's summary reads f and gnorm (and status with several starts), 2-3 of 53 leaves."""
    problem = box()
    for starts, fields in ((1, ("f", "gnorm")), (3, ("f", "gnorm", "status"))):
        solver = mw.LBFGS(max_iterations=5, starts=starts if starts > 1 else None)
        state = solver.initial_state_fn(problem)(run_key(0))
        _, used = summary_runner(problem, solver, state, None)
        want = sorted(leaf_index(state, lambda s, f=f: getattr(s.starts, f)) for f in fields)
        assert list(used) == want, (starts, used, want)
        assert len(jax.tree_util.tree_leaves(state)) > 40


def test_the_progress_summary_is_the_solvers_summary_of_the_state():
    """The callback's f and gnorm after the last chunk are the result's (exactly: the same
    reductions of the same numbers, one start)."""
    seen = []
    unbounded = mw.Problem(objective=sphere, x0=np.zeros(3))  # L-BFGS refuses a box it would ignore
    r = mw.solve(unbounded, mw.LBFGS(max_iterations=30), progress=False, chunk_seconds=1e-9, callback=seen.append)
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
        state = BufferSummary(nseq=2, nbeta=2, nburn=0, niter=niter).initial_state_fn(problem)(run_key(0))
        summary, used = summary_runner(problem, solver, state, None)
        leaves = jax.tree_util.tree_leaves(state)
        assert float(summary([leaves[i] for i in used])["buffer"]) == niter


def test_the_summary_allocates_nothing_of_the_unread_leaves_size():
    """The unread leaves stand in as zeros inside the compiled summary; XLA must drop them, or an
    L-BFGS state at n = 1e9 would allocate GBs after every chunk.  LBFGS at n = 1e5 (float32:
    53 leaves, ~4.4 MB): the compiled summary's temporaries and outputs stay below one n-sized
    vector (4e5 bytes), where keeping the zeros would need at least that much (measured: 0 B
    temporaries, 8 B out)."""
    n = 100_000
    problem = mw.Problem(objective=cute.extended_rosenbrock, x0=cute.start("extended_rosenbrock", n))
    solver = mw.LBFGS(max_iterations=3, kernel="xla")
    state = solver.initial_state_fn(problem)(run_key(0))
    leaves = jax.tree_util.tree_leaves(state)
    summary, used = summary_runner(problem, solver, state, None)
    assert len(used) < len(leaves)
    summary([leaves[i] for i in used])  # compiles and keeps it
    kept = [v for name, v in compile_cache.kept_for(problem) if name.startswith("summary ") and name != "summary inputs"]
    assert len(kept) == 1
    memory = kept[0].memory_analysis()
    assert memory.temp_size_in_bytes + memory.output_size_in_bytes < 4 * n, memory
