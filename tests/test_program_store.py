"""The program store (multiwalk.program_store): compiled programs of the library's own functions
found on disk by a later process without tracing, with the same results bit for bit."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from xla_test_flags import flags_text

import multiwalk as mw
from multiwalk import compile_cache, persistent_cache, program_store
from multiwalk.functions.odatse import himmelblau

# the store is off where the CPU's model cannot be read (Linux's /proc/cpuinfo): keys are then None
needs_store = pytest.mark.skipif(program_store._cpu_features() is None,
                                 reason="this system does not tell its CPU's model: no program store")


@pytest.fixture
def store(tmp_path, monkeypatch):
    """The store in a folder of this test's own."""
    monkeypatch.setattr(persistent_cache, "cache_dir", lambda: tmp_path)
    return tmp_path / program_store.FOLDER_NAME


def users_function(x):
    return jnp.sum(x**2)


@needs_store
def test_library_parts_have_lasting_names_and_users_functions_none(store):
    solver = mw.ReplicaExchange(nbeta=4, nseq=2, nburn=10, niter=20)
    parts = ("functions", himmelblau, None, np.dtype("float32"), solver, jax.tree_util.tree_structure((1, {"a": 2})),
             ((2,), np.dtype("float32")), np.arange(3.0), functools.partial(himmelblau))
    key = program_store.key("loop", parts)
    assert key is not None and key == program_store.key("loop", parts)
    assert program_store.key("start", parts) != key  # the program's kind counts
    other_solver = mw.ReplicaExchange(nbeta=4, nseq=2, nburn=10, niter=21)
    assert program_store.key("loop", (*parts[:4], other_solver, *parts[5:])) != key
    other_array = np.arange(3.0) + 1
    assert program_store.key("loop", (*parts[:7], other_array, *parts[8:])) != key
    closure_value = 2.0
    for unnamed in (users_function, lambda x: x, lambda x: x * closure_value, functools.partial(users_function),
                    object(), jax.ShapeDtypeStruct((2,), jnp.float32, sharding=jax.sharding.SingleDeviceSharding(
                        jax.devices()[0]))):
        assert program_store.key("loop", (*parts, unnamed)) is None, unnamed
    assert program_store.key("loop", None) is None  # a key the driver has no lasting form of


class Doubled(mw.Problem):
    """A user's subclass: it may compute differently from Problem with the same functions."""

    def chi2_full(self, x):
        return 2 * super().chi2_full(x)


@needs_store
def test_a_problems_class_and_its_other_callables_are_part_of_its_functions(store):
    plain = mw.Problem(objective=himmelblau, lower=[-6, -6], upper=[6, 6])
    doubled = Doubled(objective=himmelblau, lower=[-6, -6], upper=[6, 6])
    assert compile_cache.user_functions(plain) != compile_cache.user_functions(doubled)
    assert program_store.key("loop", compile_cache.lasting_key((id(plain), "fingerprint"), plain)) is not None
    assert program_store.key("loop", compile_cache.lasting_key((id(doubled), "fingerprint"), doubled)) is None
    plain.extra = users_function  # a callable set on the object: held in the key too
    assert users_function in compile_cache.user_functions(plain)


class Pair(NamedTuple):
    a: int
    b: int


def test_values_alike_in_print_have_different_names():
    name = program_store._name
    assert name(np.float64(0.5)) != name(0.5) != name(np.float32(0.5))
    assert name(True) != name(1) and name((1, 2)) != name([1, 2])
    assert name(np.zeros(2, jnp.float8_e4m3fn)) != name(np.zeros(2, np.int8))
    for unnamed in (Pair(1, 2), jax.ShapeDtypeStruct((2,), jax.random.key(0).dtype)):  # a user's class; a PRNG key
        with pytest.raises(program_store._Unnamed):
            name(unnamed)


@needs_store
def test_no_store_for_several_processes_a_remote_folder_or_an_unknown_installation(store, monkeypatch):
    parts = ("functions", himmelblau)
    assert program_store.key("loop", parts) is not None
    with monkeypatch.context() as m:
        m.setattr(jax, "process_count", lambda: 2)  # jax.distributed: each process's programs are its own
        assert program_store.key("loop", parts) is None
    with monkeypatch.context() as m:
        m.setattr(program_store, "_installation", lambda: None)  # a zipped package, an unknown CPU
        assert program_store.key("loop", parts) is None
    monkeypatch.setattr(persistent_cache, "cache_dir", lambda: Path("gs:/bucket/cache"))
    assert program_store.folder() is None


def test_source_stamp_needs_python_files(tmp_path):
    assert program_store._source_stamp(tmp_path) is None


@needs_store
def test_settings_and_variables_change_the_key(store, monkeypatch):
    parts = ("functions", himmelblau)
    key = program_store.key("loop", parts)
    with jax.enable_x64(not jax.config.jax_enable_x64):
        assert program_store.key("loop", parts) != key
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
    assert program_store.key("loop", parts) != key


def test_the_store_is_off_with_the_persistent_cache(monkeypatch):
    monkeypatch.setattr(persistent_cache, "cache_dir", lambda: None)
    assert program_store.folder() is None
    assert program_store.key("loop", ("functions", himmelblau)) is None


def test_source_stamp_follows_edits(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "__pycache__").mkdir()
    stamp = program_store._source_stamp(tmp_path)
    (tmp_path / "__pycache__" / "a.pyc").write_bytes(b"ignored")
    assert program_store._source_stamp(tmp_path) == stamp
    (tmp_path / "a.py").write_text("x = 2\n")  # the same size
    assert program_store._source_stamp(tmp_path) != stamp


def _unique_program(digest: str):
    """A small compiled program whose name no other test's has (JAX's cache cannot hold it)."""
    lowered = jax.jit(program_store.named(lambda x: jnp.sin(x) * 2, digest)).lower(np.zeros(3, np.float32))
    return lowered


def test_a_program_compiled_here_is_stored_and_loads_the_same(store):
    digest = uuid.uuid4().hex
    lowered = _unique_program(digest)
    compiled = program_store.compile_and_save(digest, lowered.compile)
    program_store.wait()  # written on a thread of its own
    assert (store / f"{digest}.program").exists()
    loaded = program_store.load(digest)
    x = np.linspace(0, 1, 3, dtype=np.float32)
    assert np.array_equal(np.asarray(loaded(x)), np.asarray(compiled(x)))  # the same executable: exactly


def test_a_program_jax_loaded_from_its_cache_is_not_stored_but_renamed(store):
    """An executable JAX loaded from its persistent cache, written out again, loses code on the
    CPU; it is not stored, and the next process's name for it differs, so that one compiles it."""
    digest = uuid.uuid4().hex
    lowered = _unique_program(digest)
    assert "_mw" in lowered.as_text().split("\n", 1)[0]

    def as_if_loaded_by_jax():
        compiled = lowered.compile()
        jax.monitoring.record_event(program_store._CONSULTED)
        jax.monitoring.record_event(program_store._FOUND)
        return compiled

    program_store.compile_and_save(digest, as_if_loaded_by_jax)
    program_store.wait()
    assert not (store / f"{digest}.program").exists()
    assert program_store.named(lambda x: x, digest).__name__.endswith(f"{digest[:16]}_1")


def test_programs_with_host_callbacks_are_not_stored_nor_renamed(store):
    digest = uuid.uuid4().hex

    def with_callback(x):
        jax.debug.callback(lambda v: None, x)
        return x + 1

    lowered = jax.jit(program_store.named(with_callback, digest)).lower(np.zeros(3, np.float32))
    program_store.compile_and_save(digest, lowered.compile)
    program_store.wait()
    assert not (store / f"{digest}.program").exists()

    def as_if_loaded_by_jax():
        compiled = lowered.compile()
        jax.monitoring.record_event(program_store._FOUND)
        return compiled

    program_store.compile_and_save(digest, as_if_loaded_by_jax)  # never storable: its name stays
    assert not (store / f"{digest}.lost").exists()


def test_a_damaged_file_is_not_read(store, monkeypatch):
    monkeypatch.setattr(program_store, "_WARNED", set())  # its warning is once per process
    program_store.save_value("entry", {"shapes": (2, 3)})
    blob = bytearray((store / "entry.value").read_bytes())
    blob[-1] ^= 1  # one bit
    (store / "entry.value").write_bytes(bytes(blob))
    with pytest.warns(UserWarning, match="checksum"):
        assert program_store.load_value("entry") is None
    assert not (store / "entry.value").exists()


def test_least_recently_used_entries_go_first(store, monkeypatch):
    monkeypatch.setattr(program_store, "MAX_ENTRIES", 3)
    for i in range(5):
        program_store.save_value(f"entry{i}", {"i": i})
        os.utime(store / f"entry{i}.value", ns=(i * 10**9, i * 10**9))  # written one second apart
    assert sorted(p.name for p in store.iterdir()) == ["entry2.value", "entry3.value", "entry4.value"]
    assert program_store.load_value("entry3") == {"i": 3}


SCRIPT = textwrap.dedent("""
    import hashlib, json, sys
    import jax.numpy as jnp, numpy as np
    import multiwalk as mw
    from multiwalk import program_store
    from multiwalk.functions.odatse import himmelblau

    def users_own(x):
        return (x[0] ** 2 + x[1] - 11) ** 2 + (x[0] + x[1] ** 2 - 7) ** 2

    if sys.argv[1] == "two_devices":  # on 1 and 2 of the 2 devices, in the order given
        problem = mw.Problem(objective=himmelblau, lower=[-6, -6], upper=[6, 6])
        solver = mw.PatternSearch(n_walkers=16, iterations=4)
        runs = {k: mw.solve(problem, solver, seed=1, progress=False, devices=k) for k in map(int, sys.argv[2])}
        result = runs[1]
        assert runs[2].stats["devices"] == 2 and np.array_equal(np.asarray(runs[2].x), np.asarray(result.x))
    elif sys.argv[1] == "pattern_search":  # a short run: one program (multiwalk.one_program)
        problem = mw.Problem(objective=himmelblau, lower=[-6, -6], upper=[6, 6])
        result = mw.solve(problem, mw.PatternSearch(n_walkers=16, iterations=4), seed=1, progress=False)
        assert result.stats["one_program"]
    elif sys.argv[1] == "lbfgs":  # its start does not read the key it is given
        from multiwalk.functions import cute
        problem = mw.Problem(objective=cute.extended_rosenbrock, x0=cute.start("extended_rosenbrock", 100))
        result = mw.solve(problem, mw.LBFGS(m=5), progress=False)
    else:
        fn = himmelblau if sys.argv[1] == "library" else users_own
        problem = mw.Problem(objective=fn, lower=[-6, -6], upper=[6, 6])
        result = mw.solve(problem, mw.ReplicaExchange(nbeta=4, nseq=2, nburn=10, niter=20), seed=1, progress=False)
    digest = hashlib.sha256(np.asarray(result.x).tobytes() + np.asarray(result.fun).tobytes()).hexdigest()
    program_store.wait()  # the programs are written on threads of their own
    print(json.dumps({"counts": program_store.counts(), "digest": digest}))
""")


def _process(tmp_path: Path, which: str, cache: str, *args: str, devices: int = 1) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "MULTIWALK_TEST"))}
    env.update(MULTIWALK_CACHE_DIR=cache, JAX_PLATFORMS="cpu")
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices} {flags_text()}"
    script = tmp_path / "solve_once.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), which, *args], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@needs_store
def test_a_later_process_loads_the_programs_and_gets_the_same_bits(tmp_path):
    cache = str(tmp_path / "cache")
    first, _ = _process(tmp_path, "library", cache)
    second, _ = _process(tmp_path, "library", cache)
    traced, _ = _process(tmp_path, "library", "off")  # no store, no persistent cache: traced and compiled
    # the start, the loop and the one-point value, and the start's shapes
    assert first["counts"] == {"loaded": 0, "stored": 4}, f"stored: the start, loop, value and shapes? {first}"
    assert second["counts"] == {"loaded": 4, "stored": 0}, f"loaded: those four? {second}"
    assert first["digest"] == second["digest"] == traced["digest"]  # the same programs: the same bits

    # a damaged entry is compiled again, with a warning, and stored again by a later process: the
    # first one's checksum fails, the others pass it but hold no program (they fail to load)
    for i, entry in enumerate(sorted((tmp_path / "cache" / program_store.FOLDER_NAME).glob("*.program"))):
        contents = pickle.dumps(("not", "a", "program"))
        check = hashlib.blake2b(contents, digest_size=program_store._CHECK_BYTES).digest()
        entry.write_bytes((b"x" * len(check) if i == 0 else check) + contents)
    damaged, err = _process(tmp_path, "library", cache)
    assert "could not load its stored program" in err
    again, _ = _process(tmp_path, "library", cache)
    assert again["counts"]["stored"] == 3 and damaged["digest"] == again["digest"] == first["digest"]


@needs_store
def test_a_program_loads_onto_the_device_it_was_compiled_for(tmp_path):
    """On a machine of two devices, a program of one (a run on ``devices=1``, the one-point value
    after a run on both) is loaded onto that one: loaded onto both, its first call asked for two
    shards of each argument and failed.  In either order, the later process gets the same bits."""
    cache = str(tmp_path / "cache")
    first, _ = _process(tmp_path, "two_devices", cache, "12", devices=2)
    for order in ("12", "21"):
        later, _ = _process(tmp_path, "two_devices", cache, order, devices=2)
        assert later["counts"]["loaded"] >= 1 and later["digest"] == first["digest"], (order, first, later)


@needs_store
def test_a_short_run_in_one_program_is_stored_and_loaded(tmp_path):
    cache = str(tmp_path / "cache")
    first, _ = _process(tmp_path, "pattern_search", cache)
    second, _ = _process(tmp_path, "pattern_search", cache)
    assert first["counts"]["stored"] >= 1 and second["counts"] == {"loaded": first["counts"]["stored"], "stored": 0}
    assert first["digest"] == second["digest"]


@needs_store
def test_where_outputs_go_is_part_of_the_name(store):
    # a program writing its outputs to pinned host memory is not the one writing them to the device
    device = jax.devices()[0]
    names = {program_store.key("program", ("functions", himmelblau, jax.sharding.SingleDeviceSharding(device, **kind)))
             for kind in ({}, {"memory_kind": "pinned_host"})}
    assert len(names) == 2 and None not in names


@needs_store
def test_a_program_that_does_not_read_an_argument_is_not_stored(tmp_path):
    """JAX drops an argument a program does not read; such a program, loaded again, crashed its
    process on the first call (L-BFGS's start and its unused key): it is compiled in each process."""
    assert not program_store._storable(jax.jit(lambda k, x: x * 2).lower(1.0, np.ones(3)).compile())
    assert program_store._storable(jax.jit(lambda k, x: x * k).lower(1.0, np.ones(3)).compile())
    cache = str(tmp_path / "cache")
    first, _ = _process(tmp_path, "lbfgs", cache)
    second, _ = _process(tmp_path, "lbfgs", cache)
    assert second["counts"]["loaded"] >= 1 and second["digest"] == first["digest"], (first, second)


def test_a_users_own_function_is_traced_in_each_process(tmp_path):
    cache = str(tmp_path / "cache")
    for _ in range(2):
        run, _ = _process(tmp_path, "users", cache)
        assert run["counts"] == {"loaded": 0, "stored": 0}, run
