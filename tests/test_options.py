"""Nothing the user gives is ignored or accepted silently: options are checked before anything is
compiled (each message names the option, the value given and what is allowed), a problem's box or
x0 is used or refused, and a state too large for the machine is refused with what to lower."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw
from multiwalk.functions import yao
from multiwalk.solve import run_key

pytestmark = pytest.mark.usefixtures("float64")  # float64 for this module only

BOX = dict(lower=-np.ones(2), upper=np.ones(2))


def sphere(x):
    return jnp.sum((x - 0.5) ** 2)


def exchange(**options):
    return mw.Exchange(**{"betas": (1.0, 0.5), "numsteps": 10, "step_width": (0.1, 0.1), **options})


@pytest.mark.parametrize(
    "make, option, value",
    [
        (mw.ReplicaExchange, "step0", "0.1"),
        (mw.ReplicaExchange, "beta1", "1"),
        (mw.ReplicaExchange, "betan", None),
        (mw.ReplicaExchange, "betas", "ab"),
        (mw.ReplicaExchange, "nseq", 2.0),
        (mw.ReplicaExchange, "exchange_unroll", "8"),
        (mw.ReplicaExchange, "metropolis_unroll", 0),
        (mw.PatternSearch, "delta0", "a"),
        (mw.PatternSearch, "delta_tol", [1.0, "b"]),
        (mw.PatternSearch, "reset", "yes"),
        (mw.PatternSearch, "restart", 3),
        (mw.PatternSearch, "n_walkers", "64"),
        (mw.LBFGS, "m", 2.5),
        (mw.LBFGS, "eps", "1e-5"),
        (mw.LBFGS, "ftol", None),
        (mw.LBFGS, "xtol", "0"),
        (mw.LBFGS, "stpmax", "big"),
        (mw.LBFGS, "line_search", None),
        (mw.LBFGS, "kernel", 1),
        (exchange, "betas", "ab"),
        (exchange, "step_width", ["a", 1.0]),
        (exchange, "initial", "xy"),
    ],
)
def test_a_bad_option_is_named_with_its_value(make, option, value):
    """Before, strings failed in comparisons or conversions (TypeError: '<' not supported ..., could
    not convert string to float: 'a') and callables were not checked: no option named."""
    with pytest.raises((ValueError, TypeError)) as err:
        make(**{option: value})
    message = str(err.value)
    assert message.startswith(option) or f" {option} " in message, message
    assert repr(value) in message, message


def test_callback_must_be_callable():
    """Before, callback=3 ran the compiled loop and then failed with "'int' object is not callable"."""
    with pytest.raises(TypeError, match=r"callback must be a function .* got 3"):
        mw.solve(mw.Problem(objective=sphere, **BOX), mw.PatternSearch(n_walkers=4, iterations=1), callback=3)


def test_writer_must_have_write_and_flush():
    with pytest.raises(TypeError, match=r"writer must be an object with methods write\(problem, state, first, last\) "
                                        r"and flush\(\) .* got int"):
        mw.solve(mw.Problem(objective=sphere, **BOX), mw.PatternSearch(n_walkers=4, iterations=1), writer=3)


def test_lbfgs_honours_the_box():
    """Before: x0 = 0 in [-1, 1]^2 with the minimum at 5 ran to x = (5, 5); now to the corner."""
    far = mw.Problem(objective=lambda x: jnp.sum((x - 5.0) ** 2), x0=np.zeros(2), **BOX)
    r = mw.solve(far, mw.LBFGS(), progress=False)
    assert r.success and np.array_equal(r.x, np.asarray(BOX["upper"], float))
    with pytest.raises(ValueError, match=r"not both"):  # x0 (n,) was dropped silently for the drawn starts
        mw.solve(far, mw.LBFGS(starts=3))


def test_pattern_search_starts_walker_0_at_x0():
    """Problem(x0=...) starts walker 0 (before: ignored).  x0 is the minimum, so after one
    iteration the best value is exactly 0 there (uniform starts never hit it exactly)."""
    at_minimum = mw.Problem(objective=sphere, x0=[0.5, 0.5], **BOX)
    r = mw.solve(at_minimum, mw.PatternSearch(n_walkers=4, iterations=1, rounds=1), progress=False)
    assert r.fun == 0.0 and r.x.tolist() == [0.5, 0.5]
    too_many = mw.Problem(objective=sphere, x0=np.zeros((5, 2)), **BOX)
    with pytest.raises(ValueError, match=r"x0 has 5 starting points but PatternSearch has n_walkers=4"):
        mw.solve(too_many, mw.PatternSearch(n_walkers=4, iterations=1))


@pytest.mark.parametrize(
    "problem, solver, lower",
    [
        (mw.Problem(objective=sphere, x0=np.zeros(2)), mw.LBFGS(m=10**9), "m=1000000000"),
        (mw.Problem(objective=sphere, **BOX), mw.ReplicaExchange(nseq=10**12), "nseq=1000000000000"),
        (mw.Problem(objective=sphere, **BOX), mw.PatternSearch(n_walkers=10**14), "n_walkers=100000000000000"),
        (mw.Problem(objective=sphere, **BOX), exchange(record=10**14), "record=100000000000000"),
    ],
)
def test_a_state_beyond_any_machine_is_refused_before_compiling(problem, solver, lower):
    """Each state is over 1 PB (m = 1e9: the m x m matrices alone are 1.6e19 bytes), beyond any
    device or host.  Before: m = 1e9 aborted the interpreter in XLA, the others ran out of memory."""
    with pytest.raises(ValueError, match=r"state would need .* GiB but .*: .*lower") as err:
        mw.solve(problem, solver, progress=False)
    assert lower in str(err.value)


def test_asktell_refuses_a_state_beyond_any_machine():
    with pytest.raises(ValueError, match=r"AskTell's state would need .* lower m=1000000000"):
        mw.lbfgs.AskTell(2, m=10**9, x0=np.zeros(2))


@pytest.mark.parametrize(
    "problem, solver",
    [
        (mw.Problem(objective=sphere, x0=np.zeros(3)), mw.LBFGS(m=4, max_iterations=7)),
        (mw.Problem(objective=sphere, x0=np.zeros((3, 3))), mw.LBFGS(m=2, max_iterations=5, diag=np.ones(3))),
        (mw.Problem(objective=sphere, **BOX), mw.LBFGS(starts=70, m=3, max_iterations=2)),
        (mw.Problem(objective=sphere, **BOX), mw.ReplicaExchange(nseq=3, nbeta=4, nadj=5, niter=6)),
        (mw.Problem(objective=sphere, **BOX), mw.PatternSearch(n_walkers=5)),
        (mw.Problem(objective=sphere, **BOX), exchange(record=4)),
        (mw.Problem(objective=sphere, **BOX),
         mw.PopulationAnnealing(betas=(0.0, 1.0), numsteps_for_T=(2, 2), n_replicas=5, step_width=(0.1, 0.1), record=4)),
    ],
)
def test_the_state_estimate_is_the_state_init_makes(problem, solver):
    """The estimate is computed from the options (no tracing): it equals the bytes of the state
    traced by jax.eval_shape (exact: the same shapes and dtypes)."""
    shapes = jax.eval_shape(solver.initial_state_fn(problem), run_key(0))
    traced = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree_util.tree_leaves(shapes))
    assert solver.state_memory(problem)[0] == traced


def test_ackley_has_both_boxes():
    """Yao et al. give Ackley [-32, 32]; the pattern-search paper's appendix [-30, 30] (002_..., Appendix A)."""
    ackley = yao.TABLE["ackley"]
    assert [b.tolist() for b in ackley.bounds(2)] == [[-32.0, -32.0], [32.0, 32.0]]
    assert [b.tolist() for b in ackley.bounds(2, source="zhu_curry")] == [[-30.0, -30.0], [30.0, 30.0]]
    sphere_box = yao.TABLE["sphere"]  # the others are the same in both
    assert [b.tolist() for b in sphere_box.bounds(1, source="zhu_curry")] == [[-100.0], [100.0]]
    with pytest.raises(ValueError, match=r"source must be 'yao' or 'zhu_curry', got 'paper'"):
        ackley.bounds(2, source="paper")
