"""Split runs move only a few numbers between devices per iteration (no whole-batch gathers).

tests/collectives_check.py runs ReplicaExchange (192 chains), PatternSearch (96 walkers, XLA
form) and Exchange (16 replicas) split over 2 virtual CPU devices, and Exchange alone over 4, in
the session's multi-device subprocess (tests/multidevice_check.py), and reports the collectives
in the HLO of the compiled loops.  PatternSearch's iterations need none: each device keeps its
walkers' best point until the chunk ends.  Before
the fix, PatternSearch's best point (``x[argmin(fx)]``) all-gathered every walker's point and value
each iteration (288 and 96 elements), and ReplicaExchange's burn-in ring buffer
(``jnp.put_along_axis``) all-gathered whole-batch scatter indices for each trial (576 and 192
elements): on GPUs every device then waits for every walker.
Exchange (ODAT-SE's, 16 replicas, XLA form) kept its temperature-indexed state whole on every
device and all-reduced every replica's f, and f with x (16 and 64 elements), each step; its state
is now in temperature order and split with it, so only the rows beside a device boundary move.
That the results stay the same on 1, 2 and 4 devices is tests/test_devices.py's job.
Exchange's interval form (its XLA form off CPUs, forced here) runs the exchange, so its
collectives, only on exchange steps: the moves between two exchanges are a loop of static trip
count without any collective (the form before masked the exchange into every step).
"""

from __future__ import annotations

import pytest
from subprocess_check import section


@pytest.fixture(scope="module")
def report(multidevice_report) -> dict:
    return section(multidevice_report, "collectives")


@pytest.fixture(scope="module")
def report4(multidevice_report) -> dict:
    return section(multidevice_report, "collectives4")


def test_runs_were_split_over_two_devices(report):
    assert report["devices"] == 2
    assert report["re_devices"] == 2 and report["ps_devices"] == 2


def test_replica_exchange_loops_have_no_collectives(report):
    # sequences are independent and exchanges stay within a sequence: nothing crosses devices,
    # in the burn-in (with the step-width ring buffer) nor in the sampling, one loop for both
    assert set(report["re"]) == {"0"}
    loops = report["re_loops"]  # [known trip count, loop over the chains' points, holds a collective]
    assert [loop for loop in loops if loop[1]], loops  # the iterations' loop was found
    assert not [loop for loop in loops if loop[1] and loop[2]], loops
    # what crosses devices, after the loop, once a chunk: the progress summary (a few sums) and the
    # result's report: the best sequence's point and chi2 (argmin as a value and an index per device,
    # then the point with its value reduced: 3 + 1 + 1), the counts; never every sequence's best point
    # (48 x 3, which indexing with the traced argmin gathered)
    assert all(n <= 2 * 3 for _, n in report["re"]["0"]), report["re"]["0"]


def test_replica_exchange_s_swap_kernel_runs_on_each_device_s_sequences(report):
    # the Pallas swap kernel split over 2 devices: its iterations' loop holds no collective (the
    # kernel run whole on every device would gather its operands every iteration)
    assert "split over devices" in report["re_kernel_form"], report["re_kernel_form"]
    loops = report["re_kernel_loops"]
    assert [loop for loop in loops if loop[1]], loops
    assert not [loop for loop in loops if loop[1] and loop[2]], loops


def test_pattern_search_reduces_its_best_point_not_the_walkers(report):
    ops = report["ps"]["0"]
    assert ops  # the best value over walkers must cross devices somehow
    # each device's best point, value and iteration (2 x (3 + 1 + 1)) at most; every collective far
    # below the 96 walkers
    assert all(n <= 2 * (3 + 1 + 1) for _, n in ops), ops


def test_pattern_search_s_iterations_need_no_collective(report):
    # each device keeps its walkers' best point as the chunk runs; the devices' bests meet once, after
    # the loop over iterations (a collective per iteration made each device wait for the other)
    loops = report["ps_loops"]  # [known trip count, loop over the walkers' points, holds a collective]
    assert [loop for loop in loops if loop[1]], loops
    assert not [loop for loop in loops if loop[1] and loop[2]], loops


def _without_summary(ops: list) -> list:
    """The collectives but the chunk's progress summary's: a program ends with the summary of the
    state it returns (the best value, the acceptance), at most two all-reduces of a number each,
    once a chunk and outside the loop over steps."""
    summary = [op for op in ops if op == ["all-reduce", 1]]
    assert len(summary) <= 2, ops
    return [op for op in ops if op != ["all-reduce", 1]]


def test_exchange_moves_only_the_rows_at_the_device_boundary(report):
    assert report["ex_devices"] == 2
    ops = _without_summary(report["ex"]["0"])
    assert ops  # neighbouring temperatures on the two devices must meet somehow
    # only neighbour exchanges, no reduction or gather over replicas
    assert {kind for kind, _ in ops} == {"collective-permute"}, ops
    # a collective-permute moves one row per device: of the packed float columns (fx, best fx,
    # x, best x: 2 + 2 * 3 = 8) or int columns (node, replica, 2 counters, best step, swap flag:
    # 6); 8 is the limit, below the 16 replicas and the old all-reduce of 16 x (1 + 3) = 64
    assert all(n <= 8 for _, n in ops), ops
    assert len(ops) <= 4, ops  # 2 packed arrays x (up, down)


def test_exchange_on_four_devices_too(report4):
    # 4 replicas per device: every device has two boundaries, still one row per collective
    assert report4["devices"] == 4 and report4["ex_devices"] == 4
    ops = _without_summary(report4["ex"]["0"])
    assert ops and {kind for kind, _ in ops} == {"collective-permute"}, ops
    assert all(n <= 8 for _, n in ops) and len(ops) <= 4, ops  # the same limits as on 2 devices


def _interval_form_checks(report: dict) -> None:
    ops = _without_summary(report["ex_intervals"]["0"])
    assert ops and {kind for kind, _ in ops} == {"collective-permute"}, ops
    # the exchange is compiled twice (the chunk's edges, the groups of whole intervals), each with
    # 2 packed arrays x (up, down), one row per device boundary: 8 instructions of at most 8 elements
    assert all(n <= 8 for _, n in ops) and len(ops) <= 8, ops
    loops = report["ex_intervals_loops"]  # [known trip count, loop over steps, holds a collective]
    # the 20 Metropolis moves between two exchanges: a loop of static trip count, no collective in it
    assert [20, True, False] in loops, loops
    # no loop over steps of static trip count moves anything between devices (a masked exchange
    # every step would put its collective-permutes there)
    assert not [loop for loop in loops if loop[0] is not None and loop[1] and loop[2]], loops


def test_exchange_interval_form_moves_rows_only_at_exchanges(report):
    assert report["ex_intervals_devices"] == 2
    _interval_form_checks(report)


def test_exchange_interval_form_on_four_devices_too(report4):
    assert report4["ex_intervals_devices"] == 4
    _interval_form_checks(report4)
