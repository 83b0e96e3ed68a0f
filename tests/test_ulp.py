"""tests/ulp.py's comparison: floats to a number of ulp in their own dtype, decisions exactly."""

from __future__ import annotations

import numpy as np
import pytest
from ulp import assert_close_ulp, ulp_distance


def test_ulp_distance_is_dtype_aware():
    one = np.float64(1.0)
    assert ulp_distance(np.nextafter(one, 2.0), one) == 1.0
    assert ulp_distance(np.float32(1.0) + np.float32(2**-23) * 3, np.float32(1.0)) == 3.0  # float32 spacing
    assert ulp_distance(1e-20, 0.0, scale=1.0) == pytest.approx(1e-20 / np.spacing(1.0))
    assert ulp_distance([np.nan, np.inf, -np.inf], [np.nan, np.inf, -np.inf]).tolist() == [0.0, 0.0, 0.0]
    assert ulp_distance([np.nan, np.inf], [1.0, -np.inf]).tolist() == [np.inf, np.inf]


def test_assert_close_ulp_floats_within_ints_exact():
    x = np.linspace(-3.0, 3.0, 7)
    assert_close_ulp(x + 2 * np.spacing(x), x, 2)
    with pytest.raises(AssertionError, match="1 of 7 values differ by more than 2 ulp"):
        assert_close_ulp(np.where(x == 3.0, np.nextafter(3.0, 4.0, dtype=np.float64) + np.spacing(3.0) * 2, x), x, 2)
    with pytest.raises(AssertionError):
        assert_close_ulp(np.array([1, 2, 4]), np.array([1, 2, 3]), 100)  # integers: decisions, exactly
    with pytest.raises(AssertionError, match="shapes"):
        assert_close_ulp(np.zeros(3), np.zeros(4), 1)
