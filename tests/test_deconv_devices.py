"""Deconvolution split in row patches over 4 CPU devices gives the 1-device result (deconv/patches.py).

The runs happen in the session's multi-device subprocess (tests/deconv_devices_check.py, run by
tests/multidevice_check.py): JAX must see ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
before it starts.

Tolerance: the decisions EXACTLY (which pixels are in the model, iterations, status), floats (model,
per-iteration steps, objective history) to ULPS.  Each pixel gets the one-device arithmetic (the
same ``map - d * kernel`` per element, the same block maxima), the pixel pick is an exact argmax
over the gathered patch candidates, and sums over the image (objective at the start and at
refreshes) are computed whole as on one device; but the split loop is another compiled program,
which may contract ``map - d * kernel`` into a fused multiply-add where the other does not.
"""

from __future__ import annotations

import pytest
from subprocess_check import section

# float32 values to 64 ulp, the model's and the maps' below its peak counted in the peak's ulp:
# each of the <= 200 updates subtracts d * kernel from a map at that scale, where the two
# compilations may round once differently (rounding errors of a few updates per pixel, far below 64).
ULPS = 64
# With FFT refreshes (every 40 iterations and the final check) the maps are recomputed from the
# model by a gathered FFT whose rounding is relative to the map's largest terms (all sources' flux,
# several times the peak), and the running updates go on from the two compilations' refreshed maps:
# measured 288 ulp of the peak between 1 and 4 devices (XLA's older fusion code generator, which
# the multi-device checks use); the decisions are still compared exactly.
REFRESH_ULPS = 1024


@pytest.fixture(scope="module")
def report(multidevice_report) -> dict:
    return section(multidevice_report, "deconv_devices")


def test_coordinate_descent_on_1_2_4_devices(report):
    assert report["devices"] == 4
    assert report["cd_devices"] == [1, 2, 4]
    assert report["cd_nonzero"] >= 5  # the run really placed sources (not a trivial all-zero model)
    assert report["cd_ulps_2"] <= ULPS and report["cd_ulps_4"] <= ULPS  # see the module doc
    assert report["cd_default_devices"] == 4  # devices=None: 4 rows of blocks split over all 4


def test_per_iteration_collectives_are_small(report):
    # The loop's collectives (optimised HLO of the 4-device loop): the candidates' all-gathers and
    # the convergence test's max, 4 values each; a gathered map would be 128 x 96 = 12288.  The
    # exact refresh's one gather of the model (for its FFTs) runs once per refresh, not per iteration.
    assert report["cd_largest_collective"] <= 4
    assert report["cd_refresh_gathers"] == 1
    assert report["clean_largest_collective"] <= 4


def test_small_window_and_refreshes(report):
    assert report["cdw_devices"] == 4
    assert report["cdw_ulps"] <= REFRESH_ULPS  # a 7 x 7 window inside one patch; refreshes gather the model for the FFTs


def test_clean_and_ties_broken_as_on_one_device(report):
    assert report["clean_devices"] == 4
    assert report["clean_tie"]  # two exactly equal peaks, on devices 0 and 3
    assert report["clean_first_pick_upper"]  # the first in row-major order, as jnp.argmax on one device
    assert report["clean_ulps"] <= ULPS


def test_checkpoint_from_4_devices_resumes_on_1(report):
    assert report["resume_partial"] and report["resume_ulps"] <= ULPS


def test_rows_that_do_not_split(report):
    assert report["odd_devices"] == 4  # 100 rows pad to 4 rows of blocks: they split
    assert report["fallback_devices"] == 1
    assert "32-row blocks over N = 96 rows = 3" in report["fallback_note"] and "devices=3" in report["fallback_note"]
    msg = report["error"]
    assert msg.startswith("devices=4:") and "16-row blocks over N = 96 rows = 6" in msg and "multiple of 4" in msg
    msg = report["pallas_split_error"]  # the Pallas form names itself and the option that splits
    assert msg.startswith("devices=4: Clean(kernel='pallas') runs its Pallas form") and "pass kernel='xla'" in msg
