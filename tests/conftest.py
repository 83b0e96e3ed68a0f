"""Fixtures shared by several test files."""

from __future__ import annotations

import os
import shutil
import tempfile

# XLA's CPU options for the test processes and the subprocesses they start (tests/xla_test_flags.py
# says which and why), set before JAX makes its CPU client.
from xla_test_flags import TEST_XLA_FLAGS  # noqa: E402

for _name, _value in TEST_XLA_FLAGS.items():
    if _name not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --{_name}={_value}").strip()

import jax  # noqa: E402
import pytest  # noqa: E402
import subprocess_check  # noqa: E402
from lbfgs_cases import X100, rosen, solve  # noqa: E402

import multiwalk as mw  # noqa: E402

_CACHE_VARIABLE = "MULTIWALK_TEST_COMPILATION_CACHE"


def pytest_configure(config: pytest.Config) -> None:
    """One JAX compilation cache for the whole run: the two xdist workers and every subprocess a
    test starts compile many of the same programs (the same solver on the same problem from
    different test files), and XLA's CPU compile is most of the suite's time.  A cached executable
    is the program XLA would build again, so every comparison means what it did; the directory is
    made fresh for each run and removed at its end (see pytest_unconfigure).  No eviction in any of
    them (``max_size`` -1): ``import multiwalk`` above turned it on for this process (2 GiB), and an
    evicting process reads every entry's access-time file, which processes that do not evict never
    write: each of this process's cache writes then failed with a warning (FileNotFoundError).

    The program store (``multiwalk.program_store``, in that folder) is on too, shared the same
    way: a program of the library's own functions that one test compiled is loaded by the next
    without tracing.  A test that changes multiwalk's code in place (monkeypatching a function or
    a constant the traced code reads) and then solves a library function must turn it off for its
    process (``monkeypatch.setattr(multiwalk.program_store, "folder", lambda: None)``)."""
    if _CACHE_VARIABLE not in os.environ:  # the controlling process; xdist workers inherit it
        os.environ[_CACHE_VARIABLE] = tempfile.mkdtemp(prefix="multiwalk-test-jax-cache-")
        config._multiwalk_made_cache = True  # type: ignore[attr-defined]
    settings = {
        "JAX_COMPILATION_CACHE_DIR": os.environ[_CACHE_VARIABLE],
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
        "JAX_COMPILATION_CACHE_MAX_SIZE": "-1",
    }
    os.environ.update(settings)  # for the subprocesses tests start
    for name, value in settings.items():  # for this process, whose jax is already imported
        jax.config.update(name.lower(), os.environ[_CACHE_VARIABLE] if name.endswith("DIR") else int(value))


def pytest_unconfigure(config: pytest.Config) -> None:
    if getattr(config, "_multiwalk_made_cache", False):
        shutil.rmtree(os.environ.pop(_CACHE_VARIABLE), ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _start_multidevice_checks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Start the multi-device subprocess with the session's first test, to run beside the other
    tests, if any collected test needs its report; wait for it at the end if this process started it."""
    if any("multidevice_report" in getattr(item, "fixturenames", ()) for item in request.session.items):
        subprocess_check.start(subprocess_check.report_path(tmp_path_factory))
    yield
    subprocess_check.finish()


@pytest.fixture(scope="session")
def multidevice_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The report of tests/multidevice_check.py (every multi-device check, 4 virtual CPU devices),
    made once per session by one subprocess; see tests/subprocess_check.py."""
    return subprocess_check.wait(subprocess_check.report_path(tmp_path_factory))


@pytest.fixture(scope="module")
def float64():
    """float64 for one test module (the seed's precision; a global jax_enable_x64 would leak into the
    other test files); restored at the module's end.  A module asks for it with
    ``pytestmark = pytest.mark.usefixtures("float64")``."""
    with jax.enable_x64(True):
        yield


@pytest.fixture(scope="module")
def rosen100(float64):
    """(problem, result) of the default L-BFGS (m=7, eps=1e-5) on Extended Rosenbrock, n = 100, from
    the seed's start, float64.  Later runs on this same problem object with the same options reuse its
    compiled loop (within one module: the fixture is made once per module)."""
    problem = mw.Problem(objective=rosen, x0=X100)
    return problem, solve(problem, mw.LBFGS())

