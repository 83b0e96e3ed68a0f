"""One L-BFGS problem split along n over devices with the fused Pallas passes (``kernel="pallas"``).

The runs happen in the session's multi-device subprocess (tests/lbfgs_split_check.py, run by
tests/multidevice_check.py) with 4 virtual CPU devices and the kernels in Pallas' interpret mode:
n = 192 on 1, 2 and 4 devices; and L-BFGS-B (a box, the XLA form) at n = 64 on 1 and 4.
Tolerances: the split run sums pass A's products per device and then across devices (psum), the
one-device run per 128-column program then over programs: the same terms folded in another order,
so f agrees to float64 rounding (eps 2.2e-16) and x to far below the convergence tolerance.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from subprocess_check import section

import multiwalk as mw
from multiwalk.solvers import lbfgs_kernel


@pytest.fixture(scope="module")
def report(multidevice_report) -> dict:
    return section(multidevice_report, "lbfgs_split")


def test_split_runs_use_the_fused_passes_under_shard_map(report):
    assert report["devices"] == 4
    assert report["kernel_1"] == "pallas (interpret mode)"
    for k in (2, 4):
        assert report[f"devices_{k}"] == k
        assert report[f"kernel_{k}"] == "pallas (interpret mode, split over devices)"
        assert f"split along n over {k} devices" in report[f"reason_{k}"]
        assert report[f"P_spec_{k}"] == "P(None, None, 'batch')"  # P (1, 2m, n) stays split along n
        # psum of the small sums (all-reduce) and the objective's neighbour term (collective-permute);
        # no all-gather: no n-sized array is gathered (the unsplit kernel on a split P needs one)
        assert "all-reduce" in report[f"collectives_{k}"]
        assert "all-gather" not in report[f"collectives_{k}"]


@pytest.mark.parametrize("k", [2, 4])
def test_split_iterates_equal_the_one_device_run(report, k):
    assert report["status_1"] == report[f"status_{k}"] == int(mw.lbfgs.LBFGSStatus.SUCCESS)
    a, b = report[f"iterations_{k}"]
    assert a == b and a > 10  # a real run, the same number of iterations
    assert report[f"nfev_{k}"][0] == report[f"nfev_{k}"][1]  # the same line searches
    # f at every iteration relative to f at the start: sums folded in another order (float64,
    # 192 terms; measured <= 1.6e-16 at 768), so 1e-12 leaves room and still catches any real difference
    assert report[f"f_hist_diff_{k}"] < 1e-12
    # x: both stopped at ||g|| < 1e-7 max(1, ||x||); rounding moves the last iterate by ~1e-10
    assert report[f"x_maxdiff_{k}"] < 1e-8


def test_n_must_divide_over_the_devices(report):
    msg = report["uneven_error"]
    assert msg.startswith("devices=4:") and f"= {report['n'] + 2}" in msg and "multiple of 4" in msg and "devices=2" in msg


def test_plans_of_a_split_problem():
    """Off a GPU ``kernel="auto"`` runs the XLA form, split or not, on GPUs the split kernels;
    ``"pallas"`` runs the split kernels (in interpret mode off a GPU)."""
    auto = lbfgs_kernel.plan("auto", 7, 1, False, devices=2)
    if jax.default_backend() == "gpu":
        assert auto.use_pallas and auto.split and "split along n" in auto.reason
    else:
        assert not auto.use_pallas and "GPUs only" in auto.reason
    split = lbfgs_kernel.plan("pallas", 7, 1, False, devices=4)
    assert split.use_pallas and split.split and "split along n over 4 devices" in split.reason
    assert not lbfgs_kernel.plan("pallas", 7, 8, False, devices=4).use_pallas  # starts split: XLA form
    problem = mw.Problem(objective=lambda x: (x**2).sum(), x0=np.ones(8))
    assert mw.LBFGS(kernel="pallas").kernel_plan(problem, devices=2).split
    assert mw.LBFGS(kernel="pallas").kernel_plan(problem).split is False  # no mesh here: one device


def test_a_value_and_grad_problem_is_not_gathered(report):
    """cute's Extended Rosenbrock ``value_and_grad`` (pair partners read as x shifted by one) runs on
    the split x outside the passes' shard_map: only one value crosses each device boundary
    (collective-permute) and the sums are all-reduced; no all-gather of x (issue 8: written with
    concatenate, XLA gathered x twice per evaluation, 2.3x slower split on 2 H200s)."""
    assert report["vg_kernel_4"] == "pallas (interpret mode, split over devices)"
    assert report["vg_collectives_4"] == ["all-reduce", "collective-permute"]
    assert report["vg_status"] == [int(mw.lbfgs.LBFGSStatus.SUCCESS)] * 2
    assert report["vg_iterations"][0] == report["vg_iterations"][1] > 10
    assert report["vg_nfev"][0] == report["vg_nfev"][1]
    # f relative to f at the start (~9.3e3): one device evaluates through value_and_grad.along (its
    # own summation order), the split run through value_and_grad and psum: 96 terms folded
    # otherwise, measured 1.8e-14 at 384; 1e-12 still catches any real difference
    assert report["vg_f_hist_diff"] < 1e-12
    assert report["vg_x_maxdiff"] < 1e-8  # measured 0.0; both stop at ||g|| < 1e-7 max(1, ||x||)


def test_bounded_split_run_equals_the_one_device_run(report):
    """L-BFGS-B (the XLA form: the Cauchy point's sort runs on the split vectors) on n = 64 split over
    4 devices, half the bounds active at the optimum."""
    assert report["box_devices"] == [1, 4]
    assert report["box_status"] == [int(mw.Status.SUCCESS)] * 2
    a, b = report["box_iterations"]
    assert a == b and a > 10  # decisions exact: the same iterations and evaluations
    assert report["box_nfev"][0] == report["box_nfev"][1]
    assert report["box_active"] == 32 and report["box_inside"]
    # f per iteration relative to f at the start: the split sums fold 64 terms in another order
    # (measured 2e-16, one ulp); 1e-12 still catches any real difference
    assert report["box_f_hist_diff"] < 1e-12
    assert report["box_x_maxdiff"] < 1e-8  # measured 0.0; both stop at max |proj g| <= 1e-7
