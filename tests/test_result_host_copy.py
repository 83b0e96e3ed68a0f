"""Result fields that come to the host when first read: :class:`~multiwalk.result.Deferred`
computations and :func:`~multiwalk.result.to_host`'s copy through pinned host memory."""

import pickle
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from multiwalk.result import Deferred, Result, Status, through_pinned_memory, to_host, tree_to_host


@dataclass(repr=False, kw_only=True)
class _Lazy(Result):
    record: np.ndarray
    lazy_fields = frozenset({"record"})


def test_pinned_copy_is_the_same_values():
    # a copy, not arithmetic: bit for bit, float64 and int8 (the backend here may have pinned host
    # memory, as GPUs do, or fall back to np.asarray: both must give the values exactly)
    with jax.enable_x64(True):
        x = jnp.linspace(-1.0, 1.0, 300_001, dtype=jnp.float64) ** 3
        out = through_pinned_memory(x)
        assert isinstance(out, np.ndarray) and out.dtype == np.float64
        np.testing.assert_array_equal(out, np.asarray(x))
    k = jnp.arange(1 << 21, dtype=jnp.int32).astype(jnp.int8)  # over PINNED_COPY_BYTES
    np.testing.assert_array_equal(to_host(k), np.asarray(k))


def test_spare_pinned_buffers_made_by_the_first_call_reading_a_size(monkeypatch):
    # Each read of a size by the first call that reads it also makes (and frees) one more pinned
    # buffer, which JAX's pool keeps for the next call's reads while the caller holds the first
    # result; later calls make none for that size; sizes above SPARE_PINNED_MAX_BYTES none.
    # Counted through jax.device_put.
    from multiwalk import result as result_module

    monkeypatch.setattr(result_module, "_SPARE_PINNED", {})
    monkeypatch.setattr(result_module, "_SPARE_BYTES", [0])
    monkeypatch.setattr(result_module, "SPARE_PINNED_MAX_BYTES", 1 << 16)
    monkeypatch.setattr(result_module, "SPARE_PINNED_TOTAL_BYTES", 1 << 20)  # room for the spares below
    calls = []
    real = jax.device_put

    def counting(x, *args, **kwargs):
        calls.append(getattr(x, "nbytes", None))
        return real(x, *args, **kwargs)

    small, other, large = jnp.arange(1000.0), jnp.arange(2000.0), jnp.arange(1 << 15, dtype=jnp.float32)
    try:
        jax.device_put(small, small.sharding.with_memory_kind("pinned_host"))
    except (ValueError, TypeError, NotImplementedError, RuntimeError):
        pytest.skip("no pinned host memory on this backend")
    monkeypatch.setattr(jax, "device_put", counting)
    calls_of_a_process = [  # per call: (array read, copies made)
        [(small, 2), (small, 2), (large, 1)],  # two reads of one size: two spares
        [(small, 1), (small, 1), (other, 2)],  # its spares were made; a new size
        [(other, 1), (small, 1), (large, 1)],
    ]
    for reads in calls_of_a_process:
        result_module.call_started()
        for x, copies in reads:
            calls.clear()
            out = through_pinned_memory(x)
            np.testing.assert_array_equal(out, np.asarray(x))
            assert calls == [x.nbytes] * copies
    assert result_module._SPARE_BYTES == [2 * small.nbytes + other.nbytes]
    # the total is capped: with no room left, a new size's first call makes no spare
    monkeypatch.setattr(result_module, "SPARE_PINNED_TOTAL_BYTES", 2 * small.nbytes + other.nbytes + 100)
    result_module.call_started()
    calls.clear()
    third = jnp.arange(3000.0)
    through_pinned_memory(third)
    assert calls == [third.nbytes]


def test_tree_to_host_keeps_the_tree_and_the_values():
    # small leaves in one device_get, a large one through to_host, NumPy and None left as they are:
    # every leaf a NumPy array with the device values bit for bit, the tree's structure unchanged
    tree = {"small": (jnp.arange(5, dtype=jnp.int32), jnp.float32(2.5)), "none": None,
            "large": jnp.arange(1 << 19, dtype=jnp.float32) / 7, "host": np.ones(3)}
    out = tree_to_host(tree)
    assert out["none"] is None
    for got, want in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(tree)):
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got, np.asarray(want))
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(tree)


class _PinnedCopies:
    """A stand-in for a GPU's copies into pinned memory, on any backend: ``_goes_through_pinned_memory``
    true for arrays of 1 MiB or more, each started copy (``_pinned_copy``) a device copy, counted."""

    def __init__(self, monkeypatch) -> None:
        from multiwalk import result as result_module

        self.started: list[int] = []
        monkeypatch.setattr(result_module, "_STARTED", {})
        monkeypatch.setattr(result_module, "_SPARE_PINNED", {})
        monkeypatch.setattr(result_module, "SPARE_PINNED_MAX_BYTES", 0)  # no spares: only the reads' copies
        monkeypatch.setattr(result_module, "_goes_through_pinned_memory",
                            lambda v: not isinstance(v, np.ndarray) and v.nbytes >= result_module.PINNED_COPY_BYTES)
        monkeypatch.setattr(result_module, "_pinned_copy", self.copy)

    def copy(self, value):
        self.started.append(id(value))
        return jnp.copy(value)


def test_a_copy_started_ahead_is_the_one_its_read_takes(monkeypatch):
    # start_reads starts a large array's copy once (a second start_reads of it adds none) and a
    # small one's by copy_to_host_async; the read (to_host) then takes the large one's copy instead
    # of starting one: one copy in all, the values bit for bit.  A copy started for an array that is
    # gone unread is dropped with it.
    from jax._src.array import ArrayImpl

    from multiwalk import result as result_module

    copies = _PinnedCopies(monkeypatch)
    asked = []
    copy_to_host_async = ArrayImpl.copy_to_host_async
    monkeypatch.setattr(ArrayImpl, "copy_to_host_async", lambda self: asked.append(id(self)) or copy_to_host_async(self))
    x = jnp.arange(1 << 19, dtype=jnp.float32) / 7  # 2 MiB
    small = jnp.arange(5, dtype=jnp.int32)
    result_module.start_reads({"x": x, "small": small, "host": np.ones(3), "none": None})
    result_module.start_reads([x])
    assert copies.started == [id(x)] and asked == [id(small)]
    np.testing.assert_array_equal(result_module.to_host(x), np.asarray(x))
    assert copies.started == [id(x)] and result_module._STARTED == {}
    np.testing.assert_array_equal(result_module.to_host(x), np.asarray(x))  # read again: a copy of its own
    assert copies.started == [id(x), id(x)]
    y = jnp.ones(1 << 19, jnp.float32)
    result_module.start_reads([y])
    assert list(result_module._STARTED) == [id(y)]
    del y
    assert result_module._STARTED == {}


def test_without_pinned_memory_a_large_array_starts_its_copy_to_the_host(monkeypatch):
    from jax._src.array import ArrayImpl

    from multiwalk import result as result_module

    copies = _PinnedCopies(monkeypatch)
    monkeypatch.setattr(result_module, "_pinned_copy", lambda value: copies.started.append(id(value)))  # None
    asked = []
    copy_to_host_async = ArrayImpl.copy_to_host_async
    monkeypatch.setattr(ArrayImpl, "copy_to_host_async", lambda self: asked.append(id(self)) or copy_to_host_async(self))
    x = jnp.arange(1 << 19, dtype=jnp.float32)
    result_module.start_reads([x])
    assert copies.started == asked == [id(x)] and result_module._STARTED == {}
    np.testing.assert_array_equal(result_module.to_host(x), np.arange(1 << 19, dtype=np.float32))


def test_tree_to_host_starts_the_large_copies_before_reading_the_small_ones(monkeypatch):
    # the large leaves' copies run while the small ones are read (one device_get), not after
    copies = _PinnedCopies(monkeypatch)
    events = []
    get = jax.device_get
    monkeypatch.setattr(jax, "device_get", lambda tree: (events.append(("get", len(copies.started))), get(tree))[1])
    tree = {"a": jnp.arange(1 << 19, dtype=jnp.float32), "b": jnp.float32(2.5), "c": jnp.ones(1 << 19, jnp.float32)}
    out = tree_to_host(tree)
    assert events == [("get", 2)]
    for k in tree:
        np.testing.assert_array_equal(out[k], np.asarray(tree[k]))


def test_deferred_field_is_computed_once_when_read():
    calls = []

    def record():
        calls.append(1)
        return jnp.arange(6.0).reshape(2, 3) * 2

    r = _Lazy(x=np.zeros(1), fun=0.0, status=Status.SUCCESS, message="", record=Deferred(record))
    assert not calls  # nothing computed by building the result
    first = r.record
    assert isinstance(first, np.ndarray) and r.record is first and len(calls) == 1
    np.testing.assert_array_equal(first, [[0, 2, 4], [6, 8, 10]])


def test_pickled_result_holds_arrays():
    r = _Lazy(x=np.zeros(1), fun=0.0, status=Status.SUCCESS, message="", record=Deferred(lambda: jnp.ones(3)))
    back = pickle.loads(pickle.dumps(r))  # the Deferred (a lambda) would not pickle: the array does
    np.testing.assert_array_equal(object.__getattribute__(back, "record"), np.ones(3))


def _sphere(x):
    return jnp.sum(x**2)


def test_records_keep_the_fixed_values_and_box_of_their_run():
    # a record computed when first read uses the problem as it was at the end of its run, not as the
    # caller changed it in place afterwards (for the next run): exact equality, the values are copies
    import multiwalk as mw

    problem = mw.Problem(objective=_sphere, lower=[-3.0] * 3, upper=[3.0] * 3, fixed={1: 0.5})
    re = mw.solve(problem, mw.ReplicaExchange(nbeta=1, nseq=2, nburn=0, niter=2), seed=0, progress=False)
    ps = mw.solve(problem, mw.PatternSearch(n_walkers=4, iterations=2, rounds=1), seed=0, progress=False)
    problem.fixed[1] = 2.0
    problem.lower[:] = -30.0  # PatternSearch's steps are a twentieth of the box's width
    problem.upper[:] = 30.0
    assert np.all(re.samples[..., 1] == np.float32(0.5))
    assert np.all(ps.walkers[:, 1] == np.float32(0.5))
    # a scale in (0, 1] (halved on failure) times the run's delta0, 0.3 for both (not the new box's 3.0)
    assert np.all(ps.steps[:, 0] == ps.steps[:, 1]) and np.all((ps.steps > 0) & (ps.steps <= np.float32(0.3)))
