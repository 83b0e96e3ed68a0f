"""``mw.solve(..., devices=...)``: every solver's batch split over 4 CPU devices gives the 1-device result.

The runs happen in the session's multi-device subprocess (tests/devices_check.py, run by
tests/multidevice_check.py): JAX must see ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
before it starts, and this test process has started JAX already.  Each solver runs on 1 and 4
devices (ReplicaExchange also on 2) and the report holds the comparisons.  One chosen device
(``devices=[d]``) runs in a subprocess of its own, the last test.

Tolerances: walker-parallel solvers must take the same decisions EXACTLY (acceptances, ladder
positions, counts, statuses) - their arithmetic is per walker, the random numbers do not depend on
the split (jax_threefry_partitionable), and what crosses walkers (a best value, argmin, exchanges
of temperatures) is exact - and give floats within ULPS: the split loop is another compiled program,
which may contract a multiply-add where the one-device loop does not (tests/ulp.py).  L-BFGS is
compared up to rounding:
per start, its small matrix products are batched, and XLA's CPU kernels sum them in an order that
depends on the batch per device; a single problem split along n sums its dot products per device
and then across devices.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from subprocess_check import section

SRC = Path(__file__).resolve().parents[1] / "src"

# Floats of the split and one-device runs to 64 ulp, values below 1 counted in 1's ulp: a walker's
# x moves by x + step * r each step, where one compilation may fuse the multiply-add and the other
# not (an ulp of the box's ~5 per step at most); 40 steps of sphere (no cancellation) stay far below.
ULPS = 64


@pytest.fixture(scope="module")
def report(multidevice_report) -> dict:
    return section(multidevice_report, "devices")


def test_four_devices_and_partitionable_random_streams(report):
    assert report["devices"] == 4
    # the premise of "same seed, same result on any number of devices"
    assert report["threefry_partitionable"] is True


def _within(ulps: dict) -> bool:
    """Every field's distance (``inf`` where integers differ) within ULPS."""
    return max(ulps.values()) <= ULPS


def test_replica_exchange_on_1_2_4_devices(report):
    assert (report["re_devices_2"], report["re_devices_4"]) == (2, 4)
    # samples, chi2, rates, steps, best x to ULPS; labels (temperature order) exactly
    assert _within(report["re_ulps_2"]), report["re_ulps_2"]
    assert _within(report["re_ulps_4"]), report["re_ulps_4"]
    assert report["re_default_devices"] == 4  # devices=None takes all 4: 8 sequences split evenly


def test_a_repeated_split_replica_exchange_copies_nothing_to_the_devices(report):
    # the run's key replicated and the trip counts kept on the mesh: no host->device or
    # device->device copy in a repeated call (each was one per call or per chunk), the same run
    assert report["re_repeat_2_copies"] == "none", report["re_repeat_2_copies"]
    assert report["re_repeat_2_same"]


def test_replica_exchange_as_one_program_split_over_2_devices(report):
    # the whole run one program (its path on a GPU), split: the one-device run's decisions exactly and
    # floats to ULPS, as the split run in chunks; its repeat copies nothing and gives the same bits
    # (a device other than the default one, asked for: in chunks, the last)
    assert report["re_one_program"] == [True, True, True, False], report["re_one_program"]
    assert report["re_one_program_devices"] == [1, 2]
    assert _within(report["re_one_program_ulps_2"]), report["re_one_program_ulps_2"]
    assert _within(report["re_one_program_vs_chunks_ulps_2"]), report["re_one_program_vs_chunks_ulps_2"]
    assert report["re_one_program_repeat_same"]


def test_a_split_one_program_without_pinned_outputs_falls_back_with_one_warning(report):
    # refused: compiled without, said once at the caller's line (tests/devices_check.py), the devices
    # marked; a failure of the run's own: raised, no warning, nothing marked
    one, warned, where, marked = report["split_fallback"]
    assert one and warned == 1 and where.endswith("devices_check.py") and marked == 2, report["split_fallback"]
    assert report["split_own_failure"] == ["a failure of the run's own", 0, 0], report["split_own_failure"]


def test_replica_exchange_s_swap_kernel_on_each_device_s_sequences(report):
    # split over 2 devices, the Pallas swap kernel runs under shard_map on each device's sequences
    # (it ran the XLA form there before): the run of one device, to ULPS (labels exactly)
    assert "split over devices" in report["re_kernel_form_2"], report["re_kernel_form_2"]
    assert _within(report["re_kernel_ulps_2"]), report["re_kernel_ulps_2"]


def test_a_stopped_split_replica_exchange_reads_its_result_from_the_state(report):
    # no chunk's report: the result's own program on the split state gives one device's best point
    assert report["re_stopped_status"] == ["INTERRUPTED"] * 2, report["re_stopped_status"]
    assert _within(report["re_stopped_ulps_2"]), report["re_stopped_ulps_2"]


def test_pattern_search_on_4_devices(report):
    assert report["ps_devices"] == 4
    assert _within(report["ps_ulps"]), report["ps_ulps"]  # every walker, its value, and the best point


def test_a_split_runs_replicated_results_are_read_from_one_device(report):
    # (on GPUs through the copy into pinned host memory); a split array is read whole, as it is
    assert report["copies_devices"] == [1, 4] and report["copies_same"]


def test_pattern_search_reports_the_same_value_at_the_same_point(report):
    # float32 Rastrigin-4, 1024 walkers: the walkers' values round differently on 1 and on 4
    # devices (the batch per device picks XLA's kernels); the reported f is f at the reported x by
    # one program for one point, so the same x gives the same f, exactly.  The walkers themselves
    # may move differently on another CPU (their values round differently), so x is held to ulps
    assert report["ps1024_x_ulps"] <= ULPS, report["ps1024_x_ulps"]
    assert report["ps1024_values_after_run"] == 0  # the value came with the last chunk, on 4 devices too
    one, four = report["ps1024_fun"]
    if report["ps1024_x_same"]:
        assert one == four
    else:
        assert abs(one - four) <= 64 * np.spacing(np.float32(max(abs(one), 1.0))), (one, four)


def test_checkpoint_from_4_devices_resumes_on_1(report):
    assert report["resume_partial"]  # the first run really stopped early
    assert _within(report["resume_ulps"]), report["resume_ulps"]  # the uninterrupted 1-device run


def test_exchange_with_swaps_across_devices(report):
    assert report["ex_devices"] == 4
    assert report["ex_swaps"] >= 3  # neighbouring temperatures did swap (2 replicas per device: across devices too)
    # ladder positions exactly; replicas, statistics, exchange rates, best to ULPS
    assert _within(report["ex_ulps"]), report["ex_ulps"]


def test_mapper_batches_split_over_4_devices(report):
    assert report["map_devices"] == 4 and report["map_best_same"]
    assert _within(report["map_ulps"]), report["map_ulps"]  # every point's value, and the best's


def test_multistart_lbfgs_up_to_rounding(report):
    assert report["lbm_devices"] == 4
    # start and first iteration (no stored pairs yet): the same evaluations, another compilation
    assert report["lbm_f0_ulps"] <= 16
    assert report["lbm_iterations_same"] and report["lbm_statuses_same"]
    # later iterates differ by the rounding of the batched products (float64: ~1e-16 relative per
    # iteration, grown over ~40 iterations of Rosenbrock's curved valley); 1e-9 is far below any
    # difference a wrong result would make (x ~ 1)
    assert report["lbm_x_maxdiff"] < 1e-9


def test_single_lbfgs_problem_split_along_n(report):
    assert report["lb1_devices"] == 4
    assert report["lb1_sharding"] == "P(None, None, 'batch')"  # P (1, 2m, n): split along n
    a, b = report["lb1_iterations"]
    assert a == b and report["lb1_success"]
    # f at every iteration, relative to f at the start: dot products summed per device then
    # across devices round differently (float64 eps 2.2e-16, n = 128 terms)
    assert report["lb1_f_hist_diff"] < 1e-12
    # x: both converged to ||g|| < 1e-9 max(1, ||x||); rounding moves the last iterates by far less
    assert report["lb1_x_maxdiff"] < 1e-8


def test_devices_none_falls_back_with_a_note_and_explicit_count_errors(report):
    assert report["fallback_devices"] == 1
    assert "n_walkers = 6" in report["fallback_note"] and "devices=3" in report["fallback_note"]
    msg = report["error"]
    assert msg.startswith("devices=3:") and "nseq = 8" in msg and "multiple of 3" in msg and "devices=2" in msg


_ONE_CHOSEN_DEVICE = textwrap.dedent("""
    import json
    import jax, numpy as np
    import multiwalk as mw
    from multiwalk import compile_cache, progress
    box = mw.Problem(objective=lambda x: ((x - 0.5) ** 2).sum(), lower=-5 * np.ones(3), upper=5 * np.ones(3))
    fetched = set()
    fetch = progress.fetch
    def spy(tree, **kwargs):
        fetched.update(d.id for x in jax.tree_util.tree_leaves(tree) for d in x.devices())
        return fetch(tree, **kwargs)
    progress.fetch = spy
    r = mw.solve(box, mw.ReplicaExchange(nseq=3, nbeta=2, nburn=3, niter=6), progress=False,
                 chunk_seconds=1e-9, devices=[jax.devices()[2]])
    loop = compile_cache.compiled_loops()[-1]
    print(json.dumps({"devices": r.stats["devices"], "fetched": sorted(fetched),
                      "loop": sorted({d.id for s in jax.tree_util.tree_leaves(loop.input_shardings)
                                      for d in s.device_set})}))
""")


def test_one_chosen_device_runs_the_loop_and_the_summary_there():
    """``solve(..., devices=[jax.devices()[2]])`` (the docstring: "a list of jax devices: those") on
    4 virtual CPU devices: the compiled loop's inputs and the per-chunk read are on device 2, not
    on device 0 (a user giving each of two runs its own GPU must not get GPU 0 twice)."""
    # a clean environment but for the test run's compilation cache (conftest.py): without it the
    # subprocess used the per-user folder (~/.cache/multiwalk), whatever an earlier run left there
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAX_"))}
    env.update({k: v for k, v in os.environ.items() if k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))})
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4",
               PYTHONPATH=os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]))
    out = subprocess.run([sys.executable, "-c", _ONE_CHOSEN_DEVICE], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["devices"] == 1
    assert report == {"devices": 1, "fetched": [2], "loop": [2]}, report
