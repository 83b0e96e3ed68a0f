"""Large host arguments sent to a GPU in parts (multiwalk.upload): the same values, placed as a
host argument would be, and taken by the same executables.  On a CPU the parts are never used
(a CPU's device arrays are host memory), so these tests turn them on by hand: the split, the
join and the call path are the ones a GPU runs.  Every comparison is exact (a copy, and the same
program run on the same values)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import multiwalk as mw
from multiwalk import compile_cache, upload
from multiwalk.functions import cute


@pytest.fixture
def parts_everywhere(monkeypatch):
    """uploads_in_parts true for any NumPy array of at least 64 KiB, on any device; returns the
    shapes to_device sent in parts, and the lists jax.device_put was given (one per put)."""
    sent, puts = [], []

    def in_parts(value, device):
        return isinstance(value, np.ndarray) and value.nbytes >= 1 << 16

    original_to_device, original_put = upload.to_device, jax.device_put

    def counting_to_device(value):
        sent.append(value.shape)
        return original_to_device(value)

    def counting_put(x, *args, **kwargs):
        if isinstance(x, list):
            puts.append(len(x))
        return original_put(x, *args, **kwargs)

    monkeypatch.setattr(upload, "uploads_in_parts", in_parts)
    monkeypatch.setattr(upload, "PART_BYTES", 1 << 14)  # several parts for these small arrays
    monkeypatch.setattr(upload, "to_device", counting_to_device)
    monkeypatch.setattr(jax, "device_put", counting_put)
    monkeypatch.setattr(upload, "_SPARED", set())
    return sent, puts


@pytest.mark.parametrize("shape", [(40_001,), (1, 40_000), (3, 10_007)])
def test_an_array_sent_in_parts_is_the_same_array_uncommitted(parts_everywhere, shape):
    # parts of uneven sizes (array_split), a (1, n) x0 as L-BFGS passes it, rows not a multiple
    # of the parts: the array jax.device_put(value) makes (its dtype too: float32 unless x64 is
    # on), every value bit for bit, placed and typed as that one is
    value = np.random.default_rng(0).standard_normal(shape)
    on_device, whole = upload.to_device(value), jax.device_put(value)
    assert on_device.shape == whole.shape and on_device.dtype == whole.dtype
    assert on_device.aval.weak_type == whole.aval.weak_type
    assert on_device.sharding == whole.sharding
    assert not on_device.committed and not whole.committed
    np.testing.assert_array_equal(np.asarray(on_device), np.asarray(whole))


def test_a_strided_array_is_sent_as_its_values(parts_everywhere):
    # a non-contiguous view is copied to one contiguous array first: its values, not its buffer's
    base = np.arange(2 * 30_000, dtype=np.float32).reshape(2, 30_000)
    view = base[:, ::2]
    np.testing.assert_array_equal(np.asarray(upload.to_device(view)), view)


def test_the_first_upload_of_a_size_is_sent_twice_and_later_ones_once(parts_everywhere):
    # the spare staging: the parts go twice the first time a size is sent (the second set of
    # staging buffers), once afterwards; another size is its own first time
    _, puts = parts_everywhere
    value = np.ones(40_000, np.float32)
    upload.to_device(value)
    first = len(puts)
    upload.to_device(value)
    upload.to_device(value + 1)  # the same size
    assert first == 2 and len(puts) == 4
    upload.to_device(np.ones(50_000, np.float32))
    assert len(puts) == 6


def test_the_upload_follows_the_default_device():
    # the decision reads the device an uncommitted array goes to (jax.default_device), and a CPU
    # target, or an array outside the sizes, goes whole
    devices = jax.devices()
    with jax.default_device(devices[-1]):
        assert upload.default_device() == devices[-1]
    assert upload.default_device() == devices[0]
    cpu = jax.devices("cpu")[0]  # the default device on a machine without a GPU
    assert not upload.uploads_in_parts(np.zeros(upload.UPLOAD_IN_PARTS_BYTES // 8), cpu)

    class FakeGpu:
        platform = "gpu"

    assert upload.uploads_in_parts(np.zeros(upload.UPLOAD_IN_PARTS_BYTES // 8), FakeGpu())
    assert not upload.uploads_in_parts(np.zeros(upload.UPLOAD_IN_PARTS_BYTES // 8 - 1), FakeGpu())
    assert not upload.uploads_in_parts(np.zeros(upload.UPLOAD_IN_PARTS_MAX_BYTES // 8 + 1, np.uint8)[:0], FakeGpu())


def test_an_lbfgs_solve_with_its_x0_sent_in_parts_is_bit_for_bit_the_one_without(parts_everywhere, monkeypatch):
    # The start's kept executable takes the uploaded x0 as it takes the NumPy one: no other
    # executable is compiled for it (the kept ones counted), the parts were really used (counted),
    # and the results are the same bits (the same program on the same values).
    sent, _ = parts_everywhere
    n = 20_000  # x0 of 160 kB of float64 on the host: above the fixture's 64 KiB
    problem = mw.Problem(objective=cute.extended_rosenbrock, x0=cute.start("extended_rosenbrock", n))
    solver = mw.LBFGS(m=5, eps=1e-6)
    with_parts = mw.solve(problem, solver, progress=False)
    assert (n,) in sent  # one start's x0 goes into the start as it was given
    kept = [(name, id(value)) for name, value in compile_cache.kept_for(problem)]
    assert kept  # the start's executable, at least
    sent.clear()
    monkeypatch.setattr(upload, "uploads_in_parts", lambda value, device: False)
    whole = mw.solve(problem, solver, progress=False)
    assert sent == [] and [(name, id(value)) for name, value in compile_cache.kept_for(problem)] == kept
    assert with_parts.status == whole.status and with_parts.iterations == whole.iterations
    np.testing.assert_array_equal(with_parts.x, whole.x)
    assert with_parts.fun == whole.fun
