"""Problem construction stays vectorised in n (a split L-BFGS run has n = 1e9 variables).

Default names are made on demand (``problem.DefaultNames``) and the free indices come from a
mask: a list of n names and a Python loop over n took ~100 s at n = 1e8 on the 2-core CI CPU
(measured; speed itself is not asserted here).  These tests check the behaviour is that of the
list and the loop they replace; exact comparisons (names and indices are exact).
"""

from __future__ import annotations

import numpy as np
import pytest

import multiwalk as mw
from multiwalk import compile_cache
from multiwalk.problem import DefaultNames


def sphere(x):
    return (x**2).sum()


def test_default_names_behave_like_the_list():
    names = DefaultNames(12)
    as_list = [f"x{i}" for i in range(12)]
    assert names == as_list and list(names) == as_list and len(names) == 12
    assert names[0] == "x0" and names[-1] == "x11" and names[3:7] == as_list[3:7] and names[::-5] == as_list[::-5]
    assert names.index("x10") == 10 and "x11" in names
    for absent in ("x12", "x-1", "x01", "y1", "x", 3):  # not names of this problem ("x01" is not "x1")
        assert absent not in names
        with pytest.raises(ValueError):
            names.index(absent)
    with pytest.raises(IndexError):
        names[12]
    assert names != as_list[:-1] and names != "x0"
    assert repr(DefaultNames(2)) == "['x0', 'x1']" and repr(names) == "['x0', ..., 'x11']"


def test_problem_names_free_index_and_keys():
    p = mw.Problem(objective=sphere, lower=-np.ones(5), upper=np.ones(5), fixed={"x3": 0.5, 0: -0.25},
                   periodic=["x1"])
    assert p.names == ["x0", "x1", "x2", "x3", "x4"]
    assert p.free_index.dtype == np.int64 and p.free_index.tolist() == [1, 2, 4]  # the loop's order: ascending
    assert p.fixed == {3: 0.5, 0: -0.25} and p.periodic.tolist() == [False, True, False, False, False]
    with pytest.raises(ValueError, match=r"fixed names parameter 'x7', which is not in names="):
        mw.Problem(objective=sphere, lower=-np.ones(5), upper=np.ones(5), fixed={"x7": 0.0})
    given = mw.Problem(objective=sphere, lower=-np.ones(2), upper=np.ones(2), names=["a", "b"])
    assert given.names == ["a", "b"] and isinstance(given.names, list)


def test_fingerprint_does_not_depend_on_names():
    # names never enter compiled code, so they do not force a new compilation
    a = mw.Problem(objective=sphere, lower=-np.ones(3), upper=np.ones(3))
    b = mw.Problem(objective=sphere, lower=-np.ones(3), upper=np.ones(3), names=["p", "q", "r"])
    c = mw.Problem(objective=sphere, lower=-np.ones(3), upper=2 * np.ones(3))
    assert compile_cache.fingerprint(a) == compile_cache.fingerprint(b) != compile_cache.fingerprint(c)
    # fixed values (and so free_index) still count
    d = mw.Problem(objective=sphere, lower=-np.ones(3), upper=np.ones(3), fixed={1: 0.0})
    assert compile_cache.fingerprint(d) != compile_cache.fingerprint(a)
