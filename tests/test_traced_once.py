"""The problem's function is traced once for every compiled program that calls it (multiwalk.traced_once)."""

from __future__ import annotations

import pickle

import jax
import jax.numpy as jnp
import numpy as np

import multiwalk as mw
from multiwalk.compile_cache import problem_arrays, with_arrays
from multiwalk.traced_once import TracedOnce

U = np.linspace(0.0, 3.0, 20)


def _counted_problem() -> tuple[mw.Problem, list]:
    calls: list = []

    def model(x, args):
        calls.append(type(args[0]))
        return x[0] * jnp.sin(args[0] * x[1]) + x[2]

    data = 1.3 * np.sin(U * 0.7) + 0.2
    problem = mw.Problem(model=model, args=(U,), data=data, sigma=np.full(20, 0.1),
                         lower=[0.0, 0.0, -1.0], upper=[3.0, 2.0, 1.0])
    return problem, calls


def test_the_model_runs_once_however_many_programs_trace_it():
    problem, calls = _counted_problem()
    assert len(calls) == 1  # Problem's own check: the trace every program replays
    assert issubclass(calls[0], jax.core.Tracer)  # its args' arrays abstract, as in a compiled loop
    mw.solve(problem, mw.ReplicaExchange(nbeta=2, nseq=2, nburn=2, niter=3), progress=False, seed=1)
    mw.solve(problem, mw.ReplicaExchange(nbeta=2, nseq=3, nburn=2, niter=3), progress=False, seed=1)
    assert len(calls) == 1  # the start, the loops of two solves (other shapes), the result: no new trace


def test_programs_are_those_of_a_direct_call():
    problem, _ = _counted_problem()
    arrays, static = problem_arrays(problem)

    def chi2_of_batch(arrays, x):
        return jax.vmap(with_arrays(problem, arrays, static).chi2_full)(x)

    x = jnp.ones((5, 3))
    replayed = jax.jit(chi2_of_batch).lower(arrays, x).as_text(debug_info=False)
    problem._traced = None  # the direct call, as before TracedOnce
    direct = jax.jit(chi2_of_batch).lower(arrays, x).as_text(debug_info=False)
    assert replayed == direct


def test_concrete_args_and_eager_calls_run_the_function_directly():
    seen = []

    def fn(x, args):
        seen.append((type(x), type(args["u"])))
        return jnp.sum(x * np.asarray(args["u"]))  # reads its args concretely: must see NumPy

    traced = TracedOnce(fn, takes_args=True)
    jax.jit(lambda x: traced(x, {"u": U[:3]}))(jnp.ones(3))
    assert seen[-1][1] is np.ndarray  # traced x, concrete args: a direct call
    value = float(traced(np.ones(3), {"u": U[:3]}))  # eager: direct, no trace
    assert abs(value - float(np.sum(U[:3]))) < 1e-6  # float32 without x64: a sum of three values in [0, 1]
    assert not issubclass(seen[-1][0], jax.core.Tracer)


def _square_sum(x):
    return jnp.sum(x * x)


def test_pickles_without_its_traces():
    traced = TracedOnce(_square_sum, takes_args=False)
    jax.jit(lambda x: traced(x))(jnp.ones(2))
    again = pickle.loads(pickle.dumps(traced))
    assert again.fn is _square_sum and float(jax.jit(lambda x: again(x))(jnp.arange(3.0))) == 5.0


def test_a_numpy_scalar_in_args_stays_a_constant_the_function_may_branch_on():
    # a compiled loop keeps NumPy scalars as constants (compile_cache.problem_arrays), so the
    # check must too: ``if args["flag"]:`` on an np.bool_ is a Python branch on a constant
    def objective(x, args):
        return jnp.sum(x * x) if args["flag"] else jnp.sum(x)

    problem = mw.Problem(objective=objective, lower=[-1.0, -1.0], upper=[1.0, 1.0],
                         args={"flag": np.bool_(True), "scale": np.float32(2.0)})
    assert float(jax.jit(problem.chi2_full)(jnp.array([0.5, 0.5]))) == 0.5  # 0.25 + 0.25, exact in float32


def test_numpy_scalars_in_args_do_not_stop_the_programs_sharing_the_trace():
    # the check and the compiled programs split args alike (traced_once.split_args): the arrays
    # traced, the NumPy scalars constants, so the check's trace is the one every program replays
    calls: list = []

    def model(x, args):
        calls.append(1)
        return args["scale"] * x[0] * jnp.sin(args["u"] * x[1]) + x[2]

    data = 1.3 * np.sin(U * 0.7) + 0.2
    problem = mw.Problem(model=model, args={"u": U, "scale": np.float32(1.0)}, data=data,
                         sigma=np.full(20, 0.1), lower=[0.0, 0.0, -1.0], upper=[3.0, 2.0, 1.0])
    mw.solve(problem, mw.ReplicaExchange(nbeta=2, nseq=2, nburn=2, niter=3), progress=False, seed=1)
    assert len(calls) == 1  # the check's trace only: the start, the loop and the result replay it


def test_constants_equal_in_python_but_not_the_same_value_get_traces_of_their_own():
    traced = TracedOnce(lambda x, args: x / args["a"], takes_args=True)

    u = jnp.ones(1)  # a traced array leaf of args, so the calls take the replayed way
    # 0.0 == -0.0 in Python, yet 1 / 0.0 is +inf and 1 / -0.0 is -inf: exact, no tolerance
    assert float(jax.jit(lambda x, u: traced(x, {"u": u, "a": 0.0}))(1.0, u)) == np.inf
    assert float(jax.jit(lambda x, u: traced(x, {"u": u, "a": -0.0}))(1.0, u)) == -np.inf
    kinds = []
    flagged = TracedOnce(lambda x, args: kinds.append(type(args["a"])) or x, takes_args=True)
    for a in (1, True, 1.0):  # equal in Python, three types the function may tell apart
        jax.jit(lambda x, u, a=a: flagged(x, {"u": u, "a": a}))(1.0, u)
    assert kinds == [int, bool, float]


class _ScaledSquares:
    """A callable objective that cannot be hashed (it defines __eq__ without __hash__)."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ScaledSquares) and other.scale == self.scale

    def __call__(self, x):
        return self.scale * jnp.sum(x * x)


def test_an_unhashable_callable_objective_is_traced_once_too():
    problem = mw.Problem(objective=_ScaledSquares(2.0), lower=[-1.0, -1.0], upper=[1.0, 1.0])
    assert float(jax.jit(problem.chi2_full)(jnp.array([0.5, 0.5]))) == 1.0  # 2 * 0.5, exact in float32
