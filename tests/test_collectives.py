"""Split runs move only a few numbers between devices per iteration (no whole-batch gathers).

tests/collectives_check.py runs ReplicaExchange (192 chains) and PatternSearch (96 walkers, XLA
form) on 2 virtual CPU devices in a subprocess (~15 s on 2 cores) and reports the collectives in
the HLO of the compiled loops.  Before the fix, PatternSearch's best point (``x[argmin(fx)]``)
all-gathered every walker's point and value each iteration (288 and 96 elements), and
ReplicaExchange's burn-in ring buffer (``jnp.put_along_axis``) all-gathered whole-batch scatter
indices for each trial (576 and 192 elements): on GPUs every device then waits for every walker.
That the results stay the same on 1, 2 and 4 devices is tests/test_devices.py's job.
"""

from __future__ import annotations

import pytest
from subprocess_check import run_check_script


@pytest.fixture(scope="module")
def report() -> dict:
    return run_check_script("collectives_check.py")


def test_runs_were_split_over_two_devices(report):
    assert report["devices"] == 2
    assert report["re_devices"] == 2 and report["ps_devices"] == 2


def test_replica_exchange_loops_have_no_collectives(report):
    # sequences are independent and exchanges stay within a sequence: nothing crosses devices,
    # in the burn-in (phase 0, with the step-width ring buffer) nor in the sampling (phase 1)
    assert set(report["re"]) == {"0", "1"}
    assert report["re"]["0"] == [] and report["re"]["1"] == []


def test_pattern_search_reduces_its_best_point_not_the_walkers(report):
    ops = report["ps"]["0"]
    assert ops  # the best value over walkers must cross devices somehow
    # the argmin over walkers (a value and an index per device: 2 + 2) and the best point with its
    # value (3 coordinates + 1); every collective far below the 96 walkers: 3 + 1 = 4 is the limit
    assert all(n <= 4 for _, n in ops), ops
