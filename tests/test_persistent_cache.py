"""JAX's persistent compilation cache: on by default in a per-user folder, off or moved by
MULTIWALK_CACHE_DIR, and JAX's own setting left alone (multiwalk.persistent_cache)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# one process: import multiwalk, print the folder it uses and, with "solve", solve a small problem
# and print how many programs JAX loaded from the persistent cache and how many it looked up there
# (its monitoring events)
PROGRAM = textwrap.dedent("""
    import sys
    import jax
    import multiwalk as mw
    from multiwalk.persistent_cache import cache_dir
    hits, lookups = [], []
    jax.monitoring.register_event_listener(
        lambda event, **kw: hits.append(event) if event == "/jax/compilation_cache/cache_hits" else None)
    jax.monitoring.register_event_listener(lambda event, **kw: lookups.append(event)
                                           if event == "/jax/compilation_cache/compile_requests_use_cache" else None)
    if sys.argv[1:] == ["solve"]:
        problem = mw.Problem(objective=lambda x: ((x - 1.0) ** 2).sum(), lower=[-5.0] * 3, upper=[5.0] * 3)
        mw.solve(problem, mw.ReplicaExchange(nseq=2, nbeta=4, nburn=0, niter=5), progress=False)
        print(len(hits), len(lookups))
    print(cache_dir())
""")


def _run(environment: dict[str, str], *argv: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE",
                                                                     "MULTIWALK_CACHE"))}
    env.update(environment, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""), JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", PROGRAM, *argv], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1 - len(argv):]


def test_the_cache_is_on_by_default_and_a_second_process_loads_from_it(tmp_path):
    # XDG_CACHE_HOME moves the default folder into the test's own; the run's programs are written,
    # and the second process finds them: every one, the loop and the small ones that compile in
    # milliseconds alike (a threshold on the compile time left those to compile in every process).
    counts, folder = _run({"XDG_CACHE_HOME": str(tmp_path)}, "solve")
    folder = Path(folder)
    assert folder.parent == tmp_path / "multiwalk" and folder.name.startswith("jax-")
    assert counts.split()[0] == "0" and any(p.name.startswith("jit_run_chunk") for p in folder.iterdir())
    counts, again = _run({"XDG_CACHE_HOME": str(tmp_path)}, "solve")
    hits, lookups = map(int, counts.split())
    assert again == str(folder) and hits == lookups > 1, counts  # loaded, none compiled


@pytest.mark.parametrize(("setting", "expected"), [("off", "None"), ("{tmp}/mine", "{tmp}/mine")])
def test_the_cache_can_be_turned_off_or_moved(tmp_path, setting, expected):
    [folder] = _run({"MULTIWALK_CACHE_DIR": setting.format(tmp=tmp_path), "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert folder == expected.format(tmp=tmp_path)
    assert not (tmp_path / "xdg").exists()


def test_jax_own_setting_wins(tmp_path):
    [folder] = _run({"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax"), "MULTIWALK_CACHE_DIR": str(tmp_path / "ours")})
    assert folder == str(tmp_path / "jax") and not (tmp_path / "ours").exists()


@pytest.mark.parametrize("variable", ["MULTIWALK_CACHE_DIR", "XDG_CACHE_HOME"])
def test_a_folder_that_cannot_be_written_leaves_the_cache_off_with_one_warning(tmp_path, variable):
    # a path through a file cannot be made, for any user (root too, who may write anywhere else);
    # without the check JAX warned in its own words about the first program it failed to read
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "MULTIWALK_CACHE"))}
    env.update({variable: str(blocker / "cache")}, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", PROGRAM, "solve"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "None"  # cache_dir(): off, and the run went on
    warned = [line for line in out.stderr.splitlines() if "persistent compilation cache" in line]
    assert len(warned) == 1 and str(blocker) in warned[0] and "MULTIWALK_CACHE_DIR" in warned[0], out.stderr[-2000:]


def test_unusable_folders_are_named_with_the_reason(tmp_path):
    from multiwalk.persistent_cache import _why_unusable

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert _why_unusable(tmp_path / "new" / "deeper") is None  # made by JAX under a writable folder
    assert _why_unusable(tmp_path) is None
    assert "is not a folder" in _why_unusable(blocker / "cache")
    assert "is not a folder" in _why_unusable(blocker)
    broken = tmp_path / "broken"
    broken.symlink_to(tmp_path / "gone")
    assert "is a broken link" in _why_unusable(broken / "cache")
    if os.geteuid() != 0:  # root may write in any folder
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert _why_unusable(locked) == "is not writable"
        assert "is not writable" in _why_unusable(locked / "cache")


def test_a_folder_above_that_cannot_be_entered_is_named_not_raised(tmp_path, monkeypatch):
    # as a user who may not enter a folder above the cache's (a container run as another user
    # with HOME=/root), looking at the path says "not found" rather than raising; the folder
    # then named is the nearest one that exists (here made unwritable for this test's user, root
    # included, by os.access)
    from multiwalk import persistent_cache

    locked = tmp_path / "home"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(persistent_cache.os, "access", lambda path, mode: False if str(path) == str(locked)
                        else real_access(path, mode))
    assert persistent_cache._why_unusable(locked / ".cache" / "multiwalk") == f"cannot be made ({locked} is not writable)"


def test_only_rank_0_of_a_launch_warns(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "MULTIWALK_CACHE"))}
    env.update(MULTIWALK_CACHE_DIR=str(blocker / "cache"), OMPI_COMM_WORLD_RANK="1", JAX_PLATFORMS="cpu",
               PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "None" and "persistent compilation cache" not in out.stderr
