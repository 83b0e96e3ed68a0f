"""Tests of `mw.PatternSearch`, the multi-walk coordinate pattern search of Zhu & Curry (SIMT-PS, Fig. 1).

Fig. 1 of the paper, per walker: a) start uniform in the box with step delta0; for every
coordinate j in turn, b) move to x + delta e_j if f there is <= f(x) and <= f(x - delta e_j),
c) else to x - delta e_j if f there is <= f(x) and <= f(x + delta e_j); d) if no coordinate
lowered f in the iteration halve delta, and when it reaches delta_tol reset it to delta0;
e) the best walker is the answer.

Every `mw.solve` compiles its loop (about a second on a 2-core CPU), so runs are module fixtures
shared by the tests.  The exact walks of rules b)-d) are checked by stepping `solver.step` by hand
on 1-D / 2-D problems whose every move is worked out in the comments; all step sizes there are
powers of two times 0.25, so the float32 arithmetic of the walk is exact and positions are compared
with NumPy float32 arithmetic bit for bit.
"""

from __future__ import annotations

import json
import math

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw
from multiwalk.functions import yao


def yao_problem(name: str, n: int) -> mw.Problem:
    lo, hi = yao.TABLE[name].bounds(n)
    return mw.Problem(objective=yao.TABLE[name].fn, lower=lo, upper=hi)


def in_box(walkers: np.ndarray, problem: mw.Problem) -> bool:
    return bool(np.all(walkers >= problem.lower) and np.all(walkers <= problem.upper))


# --------------------------------------------------------------------------- shared runs
@pytest.fixture(scope="module")
def sphere5():
    problem = yao_problem("sphere", 5)
    return problem, mw.solve(problem, mw.PatternSearch(n_walkers=2000, iterations=40), seed=0)


@pytest.fixture(scope="module")
def rastrigin5():
    problem = yao_problem("rastrigin", 5)
    solver = mw.PatternSearch(n_walkers=4096, iterations=20, rounds=50)
    return problem, mw.solve(problem, solver, seed=0)


@pytest.fixture(scope="module")
def faces():
    """Minimum outside the box: (x0 - 20)^2 + (x1 + 20)^2 + x2^2 in [-5, 5]^3 -> best (5, -5, 0)."""

    def f(x):
        return (x[0] - 20.0) ** 2 + (x[1] + 20.0) ** 2 + x[2] ** 2

    problem = mw.Problem(objective=f, lower=-5.0 * np.ones(3), upper=5.0 * np.ones(3))
    return problem, mw.solve(problem, mw.PatternSearch(n_walkers=256, iterations=60), seed=0)


# A small multimodal problem for the rounds / time limit / determinism runs.
@pytest.fixture(scope="module")
def small():
    return yao_problem("rastrigin", 3)


@pytest.fixture(scope="module")
def one_round(small):
    return mw.solve(small, mw.PatternSearch(n_walkers=512, iterations=5), seed=0)


@pytest.fixture(scope="module")
def one_round_again(small):
    return mw.solve(small, mw.PatternSearch(n_walkers=512, iterations=5), seed=0)


@pytest.fixture(scope="module")
def one_round_seed1(small):
    return mw.solve(small, mw.PatternSearch(n_walkers=512, iterations=5), seed=1)


@pytest.fixture(scope="module")
def three_rounds(small):
    return mw.solve(small, mw.PatternSearch(n_walkers=512, iterations=5, rounds=3), seed=0)


@pytest.fixture(scope="module")
def timed(small):
    return mw.solve(small, mw.PatternSearch(n_walkers=512, iterations=5), seed=0, time_limit=2.0)


@pytest.fixture(scope="module")
def restarts():
    """Rastrigin 10-D under the same small budget, restart='random' (the paper) and 'best'."""
    problem = yao_problem("rastrigin", 10)
    out = {}
    for restart in ("random", "best"):
        solver = mw.PatternSearch(n_walkers=500, iterations=20, rounds=20, restart=restart)
        out[restart] = mw.solve(problem, solver, seed=0)
    return problem, out


# --------------------------------------------------------------------------- finding optima
def test_sphere_5d_optimum(sphere5):
    problem, r = sphere5
    assert r.success and r.stats["rounds"] == 1
    # A converged walker sits within half its smallest step of 0 in every coordinate: the steps
    # go down to delta0 / 2^15 = 10 / 32768 = 3e-4 before the reset, so |x_j| <= 1.5e-4 and
    # f <= 5 * (1.5e-4)^2 = 1.1e-7.  We allow 1e-3 in x and 1e-6 in f.
    assert np.max(np.abs(r.x)) < 1e-3
    assert 0 <= r.fun < 1e-6
    assert r.fun == pytest.approx(float(np.sum(r.x.astype(np.float64) ** 2)), rel=1e-5)
    # Evaluations: one per walker at the start, two per walker, coordinate and iteration.
    assert r.evaluations == r.stats["evaluations"] == 2000 * (1 + 2 * 5 * 40)


def test_rastrigin_5d_optimum(rastrigin5):
    problem, r = rastrigin5
    # Every local minimum but the global one has f >= 0.995 (one coordinate at +-1).  A walker of
    # the paper's search ends in the global basin with probability ~3e-5 here (measured: 12 of
    # 400000 walkers of one round), so 50 rounds of 4096 walkers expect ~6 hits and miss all with
    # probability e^-6 ~ 2e-3 (for this fixed seed: never).  In the basin 20 iterations bring f
    # to 1e-5 .. 1e-4 (measured; 15 iterations leave 5e-3: the walker must still travel there).
    assert r.success and r.stats["rounds"] == 50
    assert r.fun < 1e-3
    assert np.max(np.abs(r.x)) < 1e-2
    assert r.fun == pytest.approx(float(yao.rastrigin(jnp.asarray(r.x, jnp.float32))), rel=1e-5, abs=1e-7)


# --------------------------------------------------------------------------- the box
def test_walkers_stay_in_the_box(sphere5, rastrigin5, restarts):
    for problem, r in (sphere5, rastrigin5, (restarts[0], restarts[1]["random"]), (restarts[0], restarts[1]["best"])):
        assert r.walkers.shape == (r.stats["walkers"], problem.n)
        assert in_box(r.walkers, problem)
        assert in_box(r.x[None], problem)


def test_minimum_outside_the_box_ends_on_the_faces(faces):
    problem, r = faces
    # Never beyond the faces, exactly (no tolerance: moves past a face are not taken) ...
    assert in_box(r.walkers, problem)
    assert in_box(r.x[None], problem)
    # ... but on them: steps halve to 0.5 / 2^15 = 1.5e-5 near a face before each reset, so the
    # best walker is within 1e-4 of (5, -5).  The free coordinate x2 only adds x2^2 to a value of
    # 450, whose float32 spacing is 3e-5: x2^2 below that is invisible, so |x2| < sqrt(3e-5) = 5.5e-3
    # is all that can be asked (1e-2 allowed).
    np.testing.assert_allclose(r.x[:2], [5.0, -5.0], atol=1e-4)
    assert abs(r.x[2]) < 1e-2
    assert r.fun == pytest.approx(15.0**2 * 2, abs=1e-2)  # (5-20)^2 + (-5+20)^2 = 450
    # Most walkers got there too (all start uniform; 60 iterations are plenty to cross 10 at 0.5).
    near = np.all(np.abs(r.walkers[:, :2] - [5.0, -5.0]) < 1e-3, axis=1)
    assert near.mean() > 0.9


# --------------------------------------------------------------------------- rules b) - d), by hand
def manual(problem: mw.Problem, solver: mw.PatternSearch, starts):
    """A state with the walkers at ``starts`` (their values recomputed) and a jitted step."""
    state = solver.init(problem, jax.random.PRNGKey(0))
    x = jnp.asarray(np.asarray(starts, dtype=np.float32).reshape(solver.n_walkers, problem.n))
    fun = jax.vmap(problem.chi2_free)(x)
    state = state._replace(x=x, fun=fun)
    step = jax.jit(lambda s: solver.step(problem, s, 0))
    return state, step


def walk(problem, solver, starts, k):
    """Positions (k, W, n), scales (k, W), halvings, resets after each of k iterations."""
    state, step = manual(problem, solver, starts)
    xs, scales, halvings, resets = [], [], [], []
    for _ in range(k):
        state = step(state)
        xs.append(np.asarray(state.x))
        scales.append(np.asarray(state.scale))
        halvings.append(np.asarray(state.n_halvings))
        resets.append(np.asarray(state.n_resets))
    return np.array(xs), np.array(scales), np.array(halvings), np.array(resets)


def box1(f) -> mw.Problem:
    return mw.Problem(objective=f, lower=[-1.0], upper=[1.0])


def test_walk_of_abs_x_minus_0_3():
    # f = |x - 0.3| on [-1, 1], delta0 = 0.25 (given explicitly: it is the first step taken).
    # Walker A from 0:                                                     x after,  scale after
    #  1: +0.25 -> f 0.05, -0.25 -> 0.55, f(x) 0.3: rule b)               0.25      1
    #  2: 0.5 -> 0.2, 0.0 -> 0.3, both > 0.05: stay, halve                0.25      1/2
    #  3: 0.375 -> 0.075, 0.125 -> 0.175: stay, halve                     0.25      1/4
    #  4: 0.3125 -> 0.0125 <= 0.05, 0.1875 -> 0.1125: rule b)             0.3125    1/4
    #  5: 0.375 -> 0.075, 0.25 -> 0.05, both > 0.0125: halve              0.3125    1/8
    #  6: 0.34375 -> 0.04375, 0.28125 -> 0.01875: halve                   0.3125    1/16
    #  7: 0.328125 -> 0.028125, 0.296875 -> 0.003125: rule c)             0.296875  1/16
    # Walker B at 0.3 (f = 0): both neighbours are worse, it never moves and halves every time.
    # Walker C from 0.75:
    #  1: 1.0 (on the face, allowed) -> 0.7, 0.5 -> 0.2 < 0.45: rule c)   0.5       1
    #  2: 0.75 -> 0.45, 0.25 -> 0.05 < 0.2: rule c)                       0.25      1
    #  3-7: as walker A from its iteration 2 on                           0.25, 0.25, 0.3125, 0.3125, 0.3125
    problem = box1(lambda x: jnp.abs(x[0] - 0.3))
    solver = mw.PatternSearch(n_walkers=3, iterations=100, delta0=0.25)
    xs, scales, halvings, resets = walk(problem, solver, [0.0, 0.3, 0.75], 7)
    want_a = [0.25, 0.25, 0.25, 0.3125, 0.3125, 0.3125, 0.296875]
    want_c = [0.5, 0.25, 0.25, 0.25, 0.3125, 0.3125, 0.3125]
    np.testing.assert_array_equal(xs[:, 0, 0], want_a)
    np.testing.assert_array_equal(xs[:, 1, 0], np.float32(0.3))
    np.testing.assert_array_equal(xs[:, 2, 0], want_c)
    np.testing.assert_array_equal(scales[:, 0], [1, 0.5, 0.25, 0.25, 0.125, 0.0625, 0.0625])
    np.testing.assert_array_equal(scales[:, 1], 0.5 ** np.arange(1, 8))
    np.testing.assert_array_equal(scales[:, 2], [1, 1, 0.5, 0.25, 0.25, 0.125, 0.0625])
    np.testing.assert_array_equal(halvings[-1], [4, 7, 4])
    np.testing.assert_array_equal(resets[-1], [0, 0, 0])


def test_moves_never_leave_the_box_but_reach_the_face():
    # f = -x on [-1, 1] (minimum beyond the upper face), delta0 = 0.25.
    # Walker from 0.9: 1.15 is outside (not taken), 0.65 is worse: stay, halve (0.125); 1.025 outside:
    # halve (0.0625); 0.9625 inside and better: move; 1.025 outside: halve (0.03125); 0.99375: move;
    # then 1.009375 and 1.0015625 are outside (halve twice) and 0.99765625 is taken.
    # Walker from 0.75: 0.75 + 0.25 = 1.0 is exactly on the face, allowed: it moves there, then stays.
    problem = box1(lambda x: -x[0])
    solver = mw.PatternSearch(n_walkers=2, iterations=100, delta0=0.25)
    xs, scales, halvings, _ = walk(problem, solver, [0.9, 0.75], 9)
    a = np.float32(0.9)
    want = [a, a, a + np.float32(0.0625)]
    want += [want[-1], want[-1] + np.float32(0.03125)]
    want += [want[-1]] * 3 + [want[-1] + np.float32(0.00390625)]
    np.testing.assert_array_equal(xs[:, 0, 0], np.array(want, dtype=np.float32))
    np.testing.assert_array_equal(xs[:, 1, 0], 1.0)
    assert np.all(xs <= 1.0)
    np.testing.assert_array_equal(halvings[-1], [6, 8])  # walker 2 halves from iteration 2 on


def test_rule_b_wins_a_tie_between_plus_and_minus():
    # f = -x^2 on [-1, 1], delta0 = 0.25.  From 0, f(+0.25) = f(-0.25) = -0.0625 < 0: both rules
    # apply, b) comes first, so the walker goes up: 0.25, 0.5, 0.75, 1.0, then stays at the face.
    # From -0.5: f(-0.25) = -0.0625 > f(-0.5) = -0.25 > f(-0.75) = -0.5625: rule c) to -0.75, -1.0.
    problem = box1(lambda x: -(x[0] ** 2))
    solver = mw.PatternSearch(n_walkers=2, iterations=100, delta0=0.25)
    xs, scales, _, _ = walk(problem, solver, [0.0, -0.5], 5)
    np.testing.assert_array_equal(xs[:, 0, 0], [0.25, 0.5, 0.75, 1.0, 1.0])
    np.testing.assert_array_equal(xs[:, 1, 0], [-0.75, -1.0, -1.0, -1.0, -1.0])
    np.testing.assert_array_equal(scales[:, 0], [1, 1, 1, 1, 0.5])


def test_equal_values_move_but_do_not_count_as_improvement():
    # f = max(x, 0) on [-1, 1], delta0 = 0.25, from -0.5: f = 0 at x and both neighbours, so rule
    # b) (<=) moves the walker up by delta, but f did not decrease: the step halves every time.
    # x + delta = x / 2 then holds at every iteration: -0.25, -0.125, -0.0625, -0.03125.
    problem = box1(lambda x: jnp.maximum(x[0], 0.0))
    solver = mw.PatternSearch(n_walkers=1, iterations=100, delta0=0.25)
    xs, scales, halvings, _ = walk(problem, solver, [-0.5], 4)
    np.testing.assert_array_equal(xs[:, 0, 0], [-0.25, -0.125, -0.0625, -0.03125])
    np.testing.assert_array_equal(scales[:, 0], [0.5, 0.25, 0.125, 0.0625])
    np.testing.assert_array_equal(halvings[:, 0], [1, 2, 3, 4])


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_bests_fold_to_the_iteration_by_iteration_best(groups):
    # Walker values drawn from {0, 1, 2, 3} so that ties abound (between walkers, between groups,
    # between iterations): the best kept per group and folded once must be the point that the
    # update after every iteration keeps (the lowest value; its first iteration; its first walker).
    # Pure selection, no arithmetic: exact.
    from multiwalk.solvers import pattern_search as ps

    rng = np.random.default_rng(groups)
    w, d = 16, 3
    for trial in range(20):
        best_fun, best_x = jnp.asarray(rng.choice([1.0, np.inf])), jnp.asarray(rng.normal(size=d))
        want_fun, want_x = best_fun, best_x
        bests = ps.empty_group_bests(groups, d, jnp.result_type(float))
        for it in range(1, 7):
            x = jnp.asarray(rng.normal(size=(w, d)))
            fun = jnp.asarray(rng.integers(0, 4, size=w).astype(float) + (it < 3))  # lower later
            walker_x, walker_fun = ps.lowest_row(x, fun)
            want_fun, want_x, _ = ps.keep_better(want_fun, want_x, walker_fun, walker_x)
            bests = ps.update_group_bests(bests, x, fun, jnp.asarray(it, jnp.int32))
        got_fun, got_x = ps.fold_group_bests(best_fun, best_x, bests)
        assert float(got_fun) == float(want_fun), trial
        np.testing.assert_array_equal(np.asarray(got_x), np.asarray(want_x), err_msg=str(trial))


@pytest.mark.parametrize("restart", ["random", "best"])
def test_a_chunk_keeps_the_best_point_as_its_steps_do(restart):
    # A staircase objective (whole-number values: walkers tie and move along equal values) over three
    # rounds in one chunk, as a run split over two devices runs it (here on one): the chunk, which
    # keeps the best per group of walkers and folds it at its end and, for restart="best", before
    # each round, ends in the state of 12 calls of step.  Decisions and values
    # exactly (whole numbers); points to 4 ulp (two compiled programs may contract x + step
    # differently), in practice equal.
    problem = mw.Problem(objective=lambda x: jnp.sum(jnp.floor(40 * (x - 0.3) ** 2)), lower=-np.ones(3),
                         upper=np.ones(3))
    solver = mw.PatternSearch(n_walkers=32, iterations=3, rounds=4, restart=restart, kernel="xla")
    state = solver.init(problem, jax.random.key_data(jax.random.key(5)))
    n = jnp.asarray(12, jnp.int32)
    chunk, n_run = jax.jit(lambda s: solver._run_chunk_grouped(problem, s, 0, n, None, False, groups=2))(state)
    step = jax.jit(lambda s: solver.step(problem, s, 0))
    for _ in range(12):
        state = step(state)
    assert int(n_run) == 12
    assert float(chunk.best_fun) == float(state.best_fun)
    np.testing.assert_array_max_ulp(np.asarray(chunk.best_x), np.asarray(state.best_x), maxulp=4)
    np.testing.assert_array_max_ulp(np.asarray(chunk.x), np.asarray(state.x), maxulp=4)
    np.testing.assert_array_equal(np.asarray(chunk.fun), np.asarray(state.fun))
    np.testing.assert_array_equal(np.asarray(chunk.n_halvings), np.asarray(state.n_halvings))


def test_coordinates_are_searched_in_turn_from_the_updated_point():
    # f = |x - y - 0.25| on [-1, 1]^2, delta0 = 0.25, from (0, 0), f = 0.25.
    # j = 0: (0.25, 0) -> 0, (-0.25, 0) -> 0.5: move to (0.25, 0).
    # j = 1 from (0.25, 0), f = 0: (0.25, 0.25) -> 0.25, (0.25, -0.25) -> 0.25: stay.
    # (Searching y from the old point (0, 0) would have moved to y = -0.25, where f(0, -0.25) = 0.)
    problem = mw.Problem(objective=lambda x: jnp.abs(x[0] - x[1] - 0.25), lower=[-1.0, -1.0], upper=[1.0, 1.0])
    solver = mw.PatternSearch(n_walkers=1, iterations=100, delta0=0.25)
    xs, scales, _, _ = walk(problem, solver, [[0.0, 0.0]], 1)
    np.testing.assert_array_equal(xs[0, 0], [0.25, 0.0])
    assert scales[0, 0] == 1.0


# --------------------------------------------------------------------------- halving and reset
LO3, HI3 = np.array([-1.0, 0.0, -10.0]), np.array([1.0, 4.0, 10.0])  # default delta0 = (0.1, 0.2, 1.0)


def constant_problem() -> mw.Problem:
    # No point is ever better than another: no iteration improves, every one halves.
    return mw.Problem(objective=lambda x: 0.0 * jnp.sum(x), lower=LO3, upper=HI3)


def test_constant_objective_halves_each_iteration_and_resets_at_delta_tol():
    # Default delta0 = (upper - lower)/20 and delta_tol = delta0 / 2^16 (the paper).  The step
    # halves after iterations 1..16; the 16th halving reaches delta_tol, which resets it to delta0
    # at once (Fig. 1 d): "If delta = delta_tol, reset delta = delta0"), so delta_tol is never used
    # as a step.  After iteration k <= 15: scale 2^-k; after 16: 1 with one reset; after 17: 1/2.
    problem = constant_problem()
    solver = mw.PatternSearch(n_walkers=4, iterations=100)
    xs, scales, halvings, resets = walk(problem, solver, np.tile(LO3, (4, 1)), 17)
    k = np.arange(1, 18)
    want_scale = np.where(k < 16, 0.5**k, np.where(k == 16, 1.0, 0.5))
    np.testing.assert_array_equal(scales, np.repeat(want_scale[:, None], 4, axis=1))
    np.testing.assert_array_equal(halvings[:, 0], k)
    np.testing.assert_array_equal(resets[:, 0], (k >= 16).astype(int))
    # The steps taken: every move is a tie, so rule b) moves each coordinate up by its step
    # (walkers start at the lower corner, far from the upper face).  The first step is the default
    # delta0 = (0.1, 0.2, 1.0); after 16 iterations the walker has moved delta0 (2 - 2^-15), and
    # the 17th iteration moves by delta0 again (after the reset), not by delta0 / 2^16.
    d0 = (HI3 - LO3) / 20
    np.testing.assert_allclose(xs[0, 0] - LO3, d0, rtol=1e-6, atol=1e-6)  # float32 positions
    np.testing.assert_allclose(xs[15, 0] - LO3, d0 * (2 - 2.0**-15), rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(xs[16, 0] - xs[15, 0], d0, rtol=1e-5, atol=2e-6)


def test_reset_false_keeps_halving():
    problem = constant_problem()
    solver = mw.PatternSearch(n_walkers=2, iterations=100, reset=False)
    _, scales, halvings, resets = walk(problem, solver, np.tile(LO3, (2, 1)), 20)
    np.testing.assert_array_equal(scales[:, 0], 0.5 ** np.arange(1, 21))
    np.testing.assert_array_equal(halvings[-1], [20, 20])
    np.testing.assert_array_equal(resets[-1], [0, 0])


def test_solve_reports_halvings_resets_and_steps_with_explicit_delta0():
    # 16 iterations of the constant objective: 16 halvings, one reset, and the steps are back at
    # the delta0 given (exactly: a power-of-two scale of 1 times delta0).
    delta0 = [0.5, 0.25, 2.0]
    r = mw.solve(constant_problem(), mw.PatternSearch(n_walkers=8, iterations=16, delta0=delta0), seed=0)
    np.testing.assert_array_equal(r.halvings, 16)
    np.testing.assert_array_equal(r.resets, 1)
    assert r.steps.shape == (8, 3)
    np.testing.assert_array_equal(r.steps, np.tile(np.float32(delta0), (8, 1)))
    assert in_box(r.walkers, constant_problem())


def test_solve_with_explicit_delta_tol():
    # delta0 = 1, delta_tol = 1/4: 1 -> 1/2 -> 1/4 = delta_tol -> reset to 1, i.e. a reset every
    # 2 iterations.  After 7: 7 halvings, resets after iterations 2, 4, 6, and the step is 1/2.
    r = mw.solve(constant_problem(), mw.PatternSearch(n_walkers=4, iterations=7, delta0=1.0, delta_tol=0.25), seed=0)
    np.testing.assert_array_equal(r.halvings, 7)
    np.testing.assert_array_equal(r.resets, 3)
    np.testing.assert_array_equal(r.steps, 0.5)


# --------------------------------------------------------------------------- rounds and time limit
def test_time_limited_rounds(timed, one_round):
    r = timed
    assert r.status == mw.Status.SUCCESS and r.success  # reaching the limit is this mode's natural end
    assert r.stats["ended_by_time_limit"] is True
    assert r.stats["rounds"] > 1
    iters = r.stats["iterations"]["search"]
    assert r.stats["rounds"] == math.ceil(iters / 5)
    # The run stops once one more step would pass the limit, so it used nearly all of it
    # (a step here takes about a millisecond).
    assert r.stats["run_seconds"] > 1.5
    # The first round is the one-round run (same seed, same keys), and the best is kept over
    # rounds: never worse, to the bit.
    assert r.fun <= one_round.fun
    assert in_box(r.walkers, yao_problem("rastrigin", 3))


def _primitives(jaxpr) -> set[str]:
    """The primitives of ``jaxpr`` and of every jaxpr it calls."""
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            names |= _primitives(sub)
    return names


def test_rounds_none_is_one_round_without_a_time_limit(small):
    """rounds=None (the default): one round without a time limit, to the bit the rounds=1 run, its
    chunk without a conditional for a new round (on a GPU XLA reads a conditional's predicate back
    on the host every iteration); fresh rounds until the limit with one.  The two loops are compiled
    apart: a timed call after an untimed one of the same solver still starts fresh rounds (the
    halvings count the last round's 5 iterations only)."""
    from multiwalk.solvers.base import RunPlan

    solver = mw.PatternSearch(n_walkers=64, iterations=5)
    untimed = mw.solve(small, solver, seed=3)
    once = mw.solve(small, mw.PatternSearch(n_walkers=64, iterations=5, rounds=1), seed=3)
    assert untimed.fun == once.fun and np.array_equal(untimed.x, once.x)
    for field in ("walkers", "funs", "steps", "halvings", "resets"):
        np.testing.assert_array_equal(getattr(untimed, field), getattr(once, field), err_msg=field)
    timed = mw.solve(small, solver, seed=3, time_limit=0.5)
    assert timed.stats["rounds"] > 2 and timed.halvings.max() <= 5
    state = jax.jit(lambda k: solver.init(small, k))(jax.random.PRNGKey(3))
    for until_time_limit, conditional in ((False, False), (True, True)):
        plan = RunPlan(until_time_limit=until_time_limit)
        traced = jax.make_jaxpr(lambda s, n, plan=plan: solver.run_chunk(small, s, 0, n, plan=plan))(state, jnp.int32(3))
        assert ("cond" in _primitives(traced.jaxpr)) is conditional


def test_fixed_rounds_run_exactly(three_rounds, one_round):
    r = three_rounds
    assert r.success and "ended_by_time_limit" not in r.stats
    assert r.stats["iterations"] == {"search": 15}
    assert r.stats["rounds"] == 3
    assert r.evaluations == 512 * (3 + 2 * 3 * 15)  # each round evaluates its fresh starts once
    # halvings and resets count the last round only: at most its 5 iterations.
    assert r.halvings.max() <= 5
    assert r.fun <= one_round.fun  # the first of the 3 rounds is the one-round run
    assert one_round.stats["iterations"] == {"search": 5} and one_round.stats["rounds"] == 1


def test_save_writes_every_field(one_round, tmp_path):
    """Result.save (shared by every result) writes the fields of PatternSearchResult too."""
    path = tmp_path / "ps.npz"
    one_round.save(path)
    with np.load(path, allow_pickle=False) as npz:
        assert set(npz.files) == {"x", "fun", "status", "message", "stats", "walkers", "funs", "steps",
                                  "evaluations", "halvings", "resets"}
        np.testing.assert_array_equal(npz["funs"], one_round.funs)
        assert one_round.values is one_round.funs  # the older name reads the same array
        np.testing.assert_array_equal(npz["walkers"], one_round.walkers)
        assert npz["walkers"].dtype == one_round.walkers.dtype
        assert int(npz["evaluations"]) == one_round.evaluations and int(npz["status"]) == int(one_round.status)
        assert json.loads(str(npz["stats"]))["rounds"] == 1


def test_same_seed_same_result_other_seed_other_result(one_round, one_round_again, one_round_seed1):
    a, b, c = one_round, one_round_again, one_round_seed1
    np.testing.assert_array_equal(a.x, b.x)
    assert a.fun == b.fun
    np.testing.assert_array_equal(a.walkers, b.walkers)
    np.testing.assert_array_equal(a.funs, b.funs)
    # Another seed: other starting points, so (almost surely) other final walkers everywhere.
    assert np.mean(np.any(a.walkers != c.walkers, axis=1)) > 0.99
    assert not np.array_equal(a.x, c.x)


# --------------------------------------------------------------------------- NaN and inf
def _bad_left_half(x, bad):
    """(x0 + 1)^2 + (x1 + 1)^2 where x0 >= 0, ``bad`` (NaN, inf or -inf) where x0 < 0.  ``bad`` is
    an argument of the compiled loop (args), so the three runs below share one compilation."""
    return jnp.where(x[0] < 0, bad, (x[0] + 1.0) ** 2 + (x[1] + 1.0) ** 2)


def _bad_left_half_problem(bad: float) -> mw.Problem:
    return mw.Problem(objective=_bad_left_half, lower=[-5.0, -5.0], upper=[5.0, 5.0], args=np.asarray(bad))


@pytest.fixture(scope="module")
def nan_run():
    problem = _bad_left_half_problem(np.nan)
    return mw.solve(problem, mw.PatternSearch(n_walkers=512, iterations=40), seed=0)


def _check_best_avoids_the_bad_half(r):
    # f = (x0 + 1)^2 + (x1 + 1)^2 where x0 >= 0, NaN/inf where x0 < 0: the best finite value is 1
    # at (0, -1).  Walkers approach x0 = 0 from above to within the smallest step 0.5 / 2^15, so
    # f - 1 ~ 2 * 1.5e-5: we allow 1e-3.
    assert np.isfinite(r.fun)
    assert r.x[0] >= 0
    assert 1.0 <= r.fun < 1.001
    np.testing.assert_allclose(r.x, [0.0, -1.0], atol=1e-3)


def test_nan_never_wins(nan_run):
    _check_best_avoids_the_bad_half(nan_run)


def test_inf_never_wins():
    problem = _bad_left_half_problem(np.inf)
    _check_best_avoids_the_bad_half(mw.solve(problem, mw.PatternSearch(n_walkers=512, iterations=40), seed=0))


def test_minus_inf_never_wins():
    problem = _bad_left_half_problem(-np.inf)
    _check_best_avoids_the_bad_half(mw.solve(problem, mw.PatternSearch(n_walkers=512, iterations=40), seed=0))


def test_nonfinite_values_are_counted_in_stats(nan_run):
    # Half of the uniform starts lie in the NaN half (x0 < 0): at least ~256 NaN values were seen.
    assert nan_run.stats["nonfinite"] >= 200


def _bad_left_third_fixed(x):
    return jnp.where(x[0] < 0, jnp.nan, (x[0] + 1.0) ** 2 + (x[1] + 1.0) ** 2 + x[2] ** 2)


def test_the_result_read_with_the_last_chunk_is_the_result_read_from_the_state(tmp_path, monkeypatch):
    # The chunk that ends a run also makes what the result reads (the best point with the fixed
    # value filled in, the non-finite counts) and queues the point's one-point value; a run resumed
    # with nothing left to run has no such chunk and computes them from the state by programs of
    # its own.  Same state, same arithmetic (expand and integer sums are exact; the value is the
    # same one-point program): equal bit for bit, and the counts too.
    problem = mw.Problem(objective=_bad_left_third_fixed, lower=[-5.0] * 3, upper=[5.0] * 3, fixed={2: 0.25})
    solver = mw.PatternSearch(n_walkers=64, iterations=6)
    from_state = []
    report_now = mw.PatternSearch._report_now
    monkeypatch.setattr(mw.PatternSearch, "_report_now", lambda *a: from_state.append(1) or report_now(*a))
    ended = mw.solve(problem, solver, seed=0, progress=False, checkpoint=tmp_path / "ps.npz")
    assert from_state == []  # read with the last chunk
    again = mw.solve(problem, solver, seed=0, progress=False, resume=tmp_path / "ps.npz")
    assert from_state == [1] and again.stats["chunks"] == 0
    assert ended.stats["nonfinite"] == again.stats["nonfinite"] > 0  # ~half the starts lie where f is NaN
    assert np.array_equal(ended.x, again.x) and ended.x[2] == 0.25
    assert type(ended.fun) is type(again.fun) and ended.fun == again.fun
    assert (ended.status, ended.message) == (again.status, again.message)


# --------------------------------------------------------------------------- restart='best'
def test_restart_best_beats_restart_random_on_rastrigin_10d(restarts):
    _, r = restarts
    # Observed (seed 0; 500 walkers, 20 iterations, 20 rounds): random 7.96, best 2.8e-10; over
    # seeds 0-2 random 7.96-10.9 and best < 3e-10 (with 1000 walkers and 30 rounds, seeds 0-3:
    # random 5.97-7.96, best < 6e-11).  Any local minimum but the global one has
    # f >= 0.995, so 'best' reached the global basin and 'random' did not (a walker of the
    # paper's search reaches it in 10-D with probability ~(3e-5)^2).  Safe bounds: best < 1e-3,
    # and 100 times better than random.
    assert r["best"].fun < 1e-3
    assert r["best"].fun * 100 < r["random"].fun
    assert r["best"].success and r["best"].stats["rounds"] == 20


def test_restart_best_keeps_float32_with_x64_enabled():
    """The refining rounds' arithmetic stays in the problem's dtype when float64 is available too (a
    numpy float64 constant made the new round's step scale float64, which the loop refused)."""
    with jax.enable_x64(True):
        problem = mw.Problem(objective=lambda x: jnp.sum(x**2), lower=[-1.0] * 2, upper=[1.0] * 2, dtype=jnp.float32)
        r = mw.solve(problem, mw.PatternSearch(n_walkers=8, iterations=2, rounds=2, restart="best", kernel="xla"), seed=0)
    assert r.success and r.walkers.dtype == np.float32 and r.stats["rounds"] == 2


# --------------------------------------------------------------------------- bad input
def test_bounds_are_required():
    problem = mw.Problem(objective=lambda x: jnp.sum(x**2), x0=np.zeros(3))
    with pytest.raises(ValueError, match=r"lower=.*upper="):
        mw.solve(problem, mw.PatternSearch(n_walkers=4, iterations=2))


@pytest.mark.parametrize("value", [0, -3, 2.5, True, "10"])
def test_bad_n_walkers(value):
    with pytest.raises(ValueError, match=rf"n_walkers must be a positive integer, got {value!r}"):
        mw.PatternSearch(n_walkers=value)


@pytest.mark.parametrize("value", [0, -1, 1.0])
def test_bad_iterations(value):
    with pytest.raises(ValueError, match=rf"iterations must be a positive integer, got {value!r}"):
        mw.PatternSearch(iterations=value)


@pytest.mark.parametrize("value", [0, -1, False, 2.0])
def test_bad_rounds(value):
    with pytest.raises(ValueError, match=rf"rounds must be a positive integer or None, got {value!r}"):
        mw.PatternSearch(rounds=value)


@pytest.mark.parametrize("name", ["delta0", "delta_tol"])
@pytest.mark.parametrize("value", [0.0, -1.0, [1.0, 0.0, 1.0], float("nan"), float("inf"), [[1.0]]])
def test_bad_delta(name, value):
    with pytest.raises(ValueError, match=rf"{name} must be a positive number or a list of positive numbers"):
        mw.PatternSearch(**{name: value})


@pytest.mark.parametrize(
    "opts",
    [
        {"delta0": 1.0, "delta_tol": 1.0},  # equal: no halving before the reset
        {"delta0": 1.0, "delta_tol": 2.0},
        {"delta_tol": 1.0},  # the default delta0 is (5 - -5) / 20 = 0.5
    ],
)
def test_delta_tol_must_be_below_delta0(opts):
    problem = mw.Problem(objective=lambda x: jnp.sum(x**2), lower=-5.0 * np.ones(3), upper=5.0 * np.ones(3))
    with pytest.raises(ValueError, match=r"delta_tol must be below delta0"):
        mw.solve(problem, mw.PatternSearch(n_walkers=4, iterations=2, **opts))


def test_delta_tol_must_be_below_delta0_in_every_coordinate():
    problem = mw.Problem(objective=lambda x: jnp.sum(x**2), lower=-5.0 * np.ones(2), upper=5.0 * np.ones(2))
    with pytest.raises(ValueError, match=r"delta_tol"):
        mw.solve(problem, mw.PatternSearch(n_walkers=4, iterations=2, delta0=1.0, delta_tol=[2.0, 0.001]))


@pytest.mark.parametrize("name", ["delta0", "delta_tol"])
def test_per_coordinate_delta_with_the_wrong_length(name):
    problem = mw.Problem(objective=lambda x: jnp.sum(x**2), lower=-5.0 * np.ones(3), upper=5.0 * np.ones(3))
    opts = {"delta0": 1.0, name: [1e-3, 1e-3]}
    with pytest.raises(ValueError, match=rf"{name} has 2 entries but the problem has 3 parameters"):
        mw.solve(problem, mw.PatternSearch(n_walkers=4, iterations=2, **opts))


def test_bad_restart_and_reset():
    with pytest.raises(ValueError, match=r"restart must be one of \('random', 'best'\), got 'foo'"):
        mw.PatternSearch(restart="foo")
    with pytest.raises(TypeError, match=r"reset must be True or False, got 1"):
        mw.PatternSearch(reset=1)


def test_all_nan_objective_is_a_failure_not_a_success():
    # Every evaluation is NaN: there is no answer, and the result must say so.
    problem = mw.Problem(objective=lambda x: jnp.nan * jnp.sum(x), lower=[-1.0, -1.0], upper=[1.0, 1.0])
    r = mw.solve(problem, mw.PatternSearch(n_walkers=8, iterations=3), seed=0)
    assert r.status == mw.Status.FAILED and not r.success
    assert "no finite objective value" in r.message
    assert r.stats["nonfinite"] > 0
