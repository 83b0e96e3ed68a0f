"""Large host arguments sent to a GPU in parts (multiwalk.upload): the same values, placed as a
host argument would be, and taken by the same executables.  On a CPU the parts are never used
(a CPU's device arrays are host memory), so these tests turn them on by hand: the split, the
join and the call path are the ones a GPU runs."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import multiwalk as mw
from multiwalk import upload
from multiwalk.functions import cute


@pytest.fixture
def parts_everywhere(monkeypatch):
    """uploads_in_parts true for any NumPy array of at least 64 KiB, on any device; counts the
    arrays to_device sent in parts."""
    sent = []

    def in_parts(value, device):
        return isinstance(value, np.ndarray) and value.nbytes >= 1 << 16

    original = upload.to_device

    def counting(value):
        sent.append(value.shape)
        return original(value)

    monkeypatch.setattr(upload, "uploads_in_parts", in_parts)
    monkeypatch.setattr(upload, "PART_BYTES", 1 << 14)  # several parts for these small arrays
    monkeypatch.setattr(upload, "to_device", counting)
    return sent


@pytest.mark.parametrize("shape", [(40_001,), (1, 40_000), (3, 10_007)])
def test_an_array_sent_in_parts_is_the_same_array_uncommitted(parts_everywhere, shape):
    # parts of uneven sizes (array_split), a (1, n) x0 as L-BFGS passes it, rows not a multiple
    # of the parts: the array jax.device_put(value) makes (its dtype too: float32 unless x64 is
    # on), every value bit for bit, and uncommitted as that one is
    value = np.random.default_rng(0).standard_normal(shape)
    on_device, whole = upload.to_device(value), jax.device_put(value)
    assert on_device.shape == whole.shape and on_device.dtype == whole.dtype
    assert not on_device.committed and not whole.committed
    np.testing.assert_array_equal(np.asarray(on_device), np.asarray(whole))


def test_a_small_array_or_a_cpu_target_goes_whole(monkeypatch):
    # the real rule: below the threshold, or bound for a CPU, one device_put (no join program)
    cpu = upload.default_device()
    assert cpu.platform == "cpu"
    assert not upload.uploads_in_parts(np.zeros(upload.UPLOAD_IN_PARTS_BYTES // 8), cpu)
    assert not upload.uploads_in_parts(np.zeros(10), cpu)

    class FakeGpu:
        platform = "gpu"

    assert upload.uploads_in_parts(np.zeros(upload.UPLOAD_IN_PARTS_BYTES // 8), FakeGpu())
    assert not upload.uploads_in_parts(np.zeros(upload.UPLOAD_IN_PARTS_BYTES // 8 - 1), FakeGpu())


def test_an_lbfgs_solve_with_its_x0_sent_in_parts_is_bit_for_bit_the_one_without(parts_everywhere):
    # The start's kept executable takes the uploaded x0 as it takes the NumPy one (the same
    # program, so the same bits); the parts were really used (counted).
    n = 20_000  # x0 of 80 kB in float32: above the fixture's 64 KiB
    problem = mw.Problem(objective=cute.extended_rosenbrock, x0=cute.start("extended_rosenbrock", n))
    solver = mw.LBFGS(m=5, eps=1e-6)
    with_parts = mw.solve(problem, solver, progress=False)
    assert (1, n) in parts_everywhere
    parts_everywhere.clear()
    upload.uploads_in_parts, original = (lambda value, device: False), upload.uploads_in_parts
    try:
        whole = mw.solve(problem, solver, progress=False)
    finally:
        upload.uploads_in_parts = original
    assert parts_everywhere == []
    assert with_parts.status == whole.status and with_parts.iterations == whole.iterations
    np.testing.assert_array_equal(with_parts.x, whole.x)
    assert with_parts.fun == whole.fun
