"""One L-BFGS problem split along n over devices with the one-pass loop (``LBFGS(kernel="onepass")``).

The runs happen in the session's multi-device subprocess (tests/lbfgs_onepass_split_check.py, run
by tests/multidevice_check.py) with 4 virtual CPU devices and the kernel in Pallas' interpret mode:
Extended Rosenbrock at n = 728 on 1, 2 and 4 devices, each device's rows ending in a masked
program, a Ctrl-C'd 4-device run
resumed on one device, the fallbacks where the hook's rows do not split, 'auto' on a simulated
4-GPU host, and the Triton lowering of the shard_mapped kernel for CUDA.
Tolerances: the split run folds the kernel's sums per device and then across devices (psum), the
one-device run over all programs at once: the same terms added in another order, so f agrees to
float64 rounding and x far below the convergence tolerance.
"""

from __future__ import annotations

import pytest
from subprocess_check import section

import multiwalk as mw


@pytest.fixture(scope="module")
def report(multidevice_report) -> dict:
    return section(multidevice_report, "lbfgs_onepass_split")


def test_split_runs_use_the_one_pass_kernel_under_shard_map(report):
    assert report["devices"] == 4
    assert report["kernel_1"] == "onepass (interpret mode)" and "on one device" in report["reason_1"]
    for k in (2, 4):
        assert report[f"devices_{k}"] == k
        assert report[f"kernel_{k}"] == "onepass (interpret mode, split over devices)"
        assert f"split along n over {k} devices" in report[f"reason_{k}"]
        assert report[f"X_spec_{k}"] == "P(None, None, 'batch')"  # X (1, 2, n/2, 2) split along its rows
        # the only collective in the compiled loop: the psum of the kernel's 64 sums (512 bytes per
        # evaluation); no all-gather or other movement of n-sized arrays
        assert report[f"collectives_{k}"] == [["all-reduce", "f64[64]{0}"]]
    assert report["collectives_1"] == []


@pytest.mark.parametrize("k", [2, 4])
def test_split_run_is_the_one_device_run(report, k):
    assert report["status_1"] == report[f"status_{k}"] == int(mw.lbfgs.LBFGSStatus.SUCCESS)
    assert report["iterations_1"] == report[f"iterations_{k}"] > 30  # a real run, with the rings wrapping (m = 7)
    assert report["nfev_1"] == report[f"nfev_{k}"] > report["iterations_1"]  # some searches took 2+ evaluations
    assert report[f"nfev_hist_equal_{k}"]  # the same evaluations in every line search
    # f at every iteration relative to f at the start: sums folded per device, then over devices
    # (float64, 364 rows; measured <= 8e-15), so 1e-12 leaves room and still catches a real difference
    assert report[f"f_hist_diff_{k}"] < 1e-12
    # the final f (~1e-11, near the minimum, where x ~ 1): an ulp of x moves the terms (1 - x)^2 by
    # ~1e-16 x |1 - x|, far below 1's ulp; relative to f itself the two runs differ by up to 1.2e-8
    # (measured), so f is counted in 1's ulp, the scale of the cancelling terms
    assert report[f"f_ulps_{k}"] <= 4
    # x: both stopped at ||g|| < 1e-5 max(1, ||x||); rounding moves the last iterate by far less (measured 0)
    assert report[f"x_maxdiff_{k}"] < 1e-8


def test_split_checkpoint_resumes_on_one_device(report):
    status, iterations = report["interrupted"]
    assert status == int(mw.lbfgs.LBFGSStatus.INTERRUPTED) and 0 < iterations < report["iterations_4"]
    assert report["resumed"] == [int(mw.lbfgs.LBFGSStatus.SUCCESS), report["iterations_4"], report["nfev_4"]]
    assert report["resumed_x_maxdiff"] < 1e-8  # the same rounding as test_split_run_is_the_one_device_run


def test_rows_that_do_not_split_fall_back_clearly(report):
    # n = 732 is a multiple of 4 but its 366 rows of the hook are not: refused before compiling when
    # asked for, one device with the reason when the driver chooses
    odd = report["rows"] + 2
    msg = report["uneven_error"]
    assert msg.startswith("devices=4:") and f"n / 2 (rows of the block hook) = {odd}" in msg and "multiple of 4" in msg
    devices, note, kernel = report["fallback"]
    assert devices == 1 and f"= {odd}" in note and note.endswith("ran on one device")
    assert kernel == "onepass (interpret mode)"


def test_auto_takes_the_split_loop_where_the_rows_split(report):
    rows, odd = report["rows"], report["rows"] + 2
    assert rows % 4 == 0 and rows % 3 and odd % 4 and odd % 2 == 0  # the premises of the cases below
    use, reason = report["auto_plan_big"]
    assert use and "split along n over 4 devices" in reason
    use, reason = report["auto_plan_odd"]
    assert not use and f"{odd} rows of the block hook is not a multiple of 4" in reason
    # solve(devices=k): 'auto' decides with the k asked for, so an explicit devices=3 with n / 2 = 364
    # rows takes the two-pass form (which splits n itself) instead of refusing; 366 rows split over 2
    use, reason = report["auto_plan_big_on_3"]
    assert not use and f"{rows} rows of the block hook is not a multiple of 3" in reason
    use, reason = report["auto_plan_odd_on_2"]
    assert use and "one Pallas kernel per line-search evaluation" in reason


def test_shard_mapped_kernel_lowers_for_cuda(report):
    if report["lowers_for_cuda"] is None:
        pytest.skip("this JAX has its CUDA plugin but the check's process hides the GPUs (4 virtual CPU devices): "
                    "Pallas' Triton lowering then asks for a GPU to target")
    assert report["lowers_for_cuda"]  # lowered (Pallas -> Triton) with its psum, no all-gather
