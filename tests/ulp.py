"""Comparing the results of two differently compiled programs: decisions exactly, floats to a few ulp.

Two compilations of the same computation (a Pallas kernel and the XLA form, a loop split over
devices and the one-device loop, an unrolled loop and one step per trip, another chunk length)
may round differently: XLA promises no bit equality across its compilations, nor across CPUs (one
program contracts ``a * b + c`` into a fused multiply-add where the other does not, depending on
the CPU's instructions and the fusion; sums split over devices are folded in another order).  So
tests compare such runs with :func:`assert_close_ulp`: integers and booleans (accept/reject,
temperature indices, counts, best steps, statuses, iteration counts) exactly, floats to a stated
number of units in the last place.  Bit equality is asserted only where one compiled program runs
twice (the same seed, a resume, the same loop in other chunkings of its dynamic trip count).
"""

from __future__ import annotations

import numpy as np


def ulp_distance(actual, desired, scale: float = 0.0) -> np.ndarray:
    """``|actual - desired|`` in units of the float spacing (dtype-aware) at ``max(|actual|, |desired|, scale)``.

    ``scale`` (in the values' units) counts differences of values near zero in the spacing of the
    magnitude their computation had (a sum of terms ~1 that cancels to 1e-12 carries the terms'
    rounding, not its own).  NaN against NaN and equal infinities are 0; a NaN or an infinity
    against anything else is ``inf``.
    """
    a, d = np.asarray(actual), np.asarray(desired)
    dtype = np.result_type(a.dtype, d.dtype)
    a, d = a.astype(dtype), d.astype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        magnitude = np.maximum(np.maximum(np.abs(a), np.abs(d)), np.asarray(scale, dtype))
        distance = np.abs(a - d) / np.spacing(np.where(np.isfinite(magnitude), magnitude, 1).astype(dtype))
    same = (a == d) | (np.isnan(a) & np.isnan(d))
    return np.where(same, 0.0, np.where(np.isfinite(distance), distance, np.inf))


def assert_close_ulp(actual, desired, ulps: float, err_msg: str = "", scale: float = 0.0) -> None:
    """Floats within ``ulps`` units in the last place of each other; anything else exactly equal.

    Why a tolerance: ``actual`` and ``desired`` come from two differently compiled programs, which
    may round differently (see the module docstring); a few ulp is what another contraction or
    summation order leaves, far below any difference a wrong result would make.  The caller
    states why its ``ulps`` (and ``scale``, see :func:`ulp_distance`) suffice.

    Integer and boolean arrays are the run's decisions and must be equal.  Comparing them exactly
    between programs whose floats differ by ulps is sound for short seeded runs: a decision flips
    only if a compared value lies within those ulps of its threshold (a uniform random number
    falling within ~1e-16 of an acceptance probability), vanishingly unlikely in a few hundred
    decisions.  NaN must meet NaN (same places), infinities must be equal.
    """
    a, d = np.asarray(actual), np.asarray(desired)
    assert a.shape == d.shape, f"{err_msg}: shapes {a.shape} and {d.shape}"
    if a.dtype.kind != "f" and d.dtype.kind != "f":
        np.testing.assert_array_equal(a, d, err_msg=err_msg)
        return
    distance = ulp_distance(a, d, scale)
    worst = np.unravel_index(np.argmax(distance), distance.shape) if distance.size else ()
    assert not distance.size or distance[worst] <= ulps, (
        f"{err_msg}: {int(np.sum(distance > ulps))} of {distance.size} values differ by more than {ulps} ulp; "
        f"the largest: {distance[worst]:.3g} ulp at {worst}: {a[worst]!r} against {d[worst]!r}"
    )


def assert_fields_close_ulp(actual, desired, ulps: float, names=None, scale: float = 0.0) -> None:
    """:func:`assert_close_ulp` on every field of two NamedTuple states (or two lists of leaves,
    named by ``names``): decisions exactly, floats to ``ulps``."""
    names = names if names is not None else actual._fields
    actual, desired = list(actual), list(desired)
    assert len(actual) == len(desired) == len(names), (len(actual), len(desired), len(names))
    for name, a, d in zip(names, actual, desired):
        assert_close_ulp(a, d, ulps, err_msg=name, scale=scale)


def max_ulps(actual, desired, scale: float = 0.0) -> float:
    """The largest :func:`ulp_distance` of two arrays as one number, for reports made in a subprocess
    (``inf`` where shapes differ or integer/boolean decisions differ at all; 0 for empty arrays).
    A test then asserts ``max_ulps(...) <= ulps`` with the same reasons as :func:`assert_close_ulp`."""
    a, d = np.asarray(actual), np.asarray(desired)
    if a.shape != d.shape:
        return float("inf")
    if a.dtype.kind != "f" and d.dtype.kind != "f":
        return 0.0 if np.array_equal(a, d) else float("inf")
    return float(ulp_distance(a, d, scale).max()) if a.size else 0.0
