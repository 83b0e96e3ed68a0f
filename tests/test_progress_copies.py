"""The chunk's small results read back (multiwalk.progress.start_copies / fetch): on one GPU through
a program that copies them into pinned host memory, elsewhere through JAX's own async copies.  This
machine has no GPU: the choice is tested on stand-ins, and the copy program on the CPU's own pinned
host memory (the same program, for another device)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from multiwalk import progress


@dataclass(frozen=True)
class _Device:
    platform: str
    id: int = 0


@dataclass(frozen=True)
class _Sharding:
    device_set: frozenset
    memory_kind: str = "device"


@dataclass(frozen=True)
class _Leaf:
    sharding: _Sharding


def _on(*devices: _Device, memory_kind: str = "device") -> _Leaf:
    return _Leaf(_Sharding(frozenset(devices), memory_kind))


def test_one_gpu_is_chosen_only_when_every_leaf_is_in_its_device_memory():
    gpu, other = _Device("gpu", 0), _Device("gpu", 1)
    assert progress._one_gpu([_on(gpu), _on(gpu)]) == gpu
    assert progress._one_gpu([_on(gpu), _on(other)]) is None  # two GPUs
    assert progress._one_gpu([_on(gpu, other)]) is None  # a leaf split over two
    assert progress._one_gpu([_on(gpu), _on(gpu, memory_kind="pinned_host")]) is None  # already on the host
    assert progress._one_gpu([_on(_Device("cpu"))]) is None  # a CPU reads its arrays in place
    assert progress._one_gpu([_on(gpu), np.zeros(2)]) is None  # a host array among them
    assert progress._one_gpu([]) is None


def test_on_a_cpu_the_tree_is_read_as_it_is():
    cpu = jax.devices("cpu")[0]
    tree = jax.device_put((jnp.int32(3), {"best": jnp.float32(0.5)}, {"x": jnp.arange(4.0)}), cpu)
    assert progress.start_copies(tree) == (tree, 0.0)
    n, info, report = progress.fetch(tree)
    assert int(n) == 3 and float(info["best"]) == 0.5 and report["x"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_the_copy_program_gives_the_same_bits_in_pinned_host_memory():
    # the program the driver queues behind a GPU's chunk, made for the default device (in CI a CPU,
    # which has pinned host memory too): every leaf lands there with the bits it had, and what
    # fetch reads is the same; compiled once for these leaves' types, then kept
    tree = (jnp.int32(7), {}, {"x": jnp.asarray([np.pi, -0.0, np.nan]), "numbers": jnp.arange(3, dtype=jnp.int32)})
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    copy, seconds = progress._pinned_copy(jax.devices()[0], treedef, leaves)
    assert copy is not None and seconds >= 0.0
    assert progress._pinned_copy(jax.devices()[0], treedef, leaves) == (copy, 0.0)
    assert progress._pinned_copy(None, treedef, leaves) == (None, 0.0)
    copied = jax.tree_util.tree_unflatten(treedef, copy(*leaves))
    assert {leaf.sharding.memory_kind for leaf in jax.tree_util.tree_leaves(copied)} == {"pinned_host"}
    for a, b in zip(jax.tree_util.tree_leaves(progress.fetch(copied)), jax.tree_util.tree_leaves(progress.fetch(tree))):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _solve_twice(monkeypatch: Any, pinned_on: Any) -> tuple[Any, Any, list[set]]:
    """A PatternSearch solve with the copy program on ``pinned_on`` (a device), then one with JAX's
    copies; the memory kinds of what the driver fetched after each chunk."""
    import multiwalk as mw

    fetched: list[set] = []
    fetch = progress.fetch

    def spy(tree: Any) -> Any:
        fetched.append({leaf.sharding.memory_kind for leaf in jax.tree_util.tree_leaves(tree)})
        return fetch(tree)

    monkeypatch.setattr(progress, "fetch", spy)
    problem = mw.Problem(objective=lambda x: jnp.sum((x - 0.25) ** 2), lower=[-1.0] * 4, upper=[1.0] * 4)
    solver = mw.PatternSearch(n_walkers=256, iterations=10, rounds=1)
    # in chunks: a time limit it never reaches (without one the run is one program, whose small
    # outputs a GPU writes into pinned memory itself)
    monkeypatch.setattr(progress, "_one_gpu", lambda leaves: pinned_on)
    pinned = mw.solve(problem, solver, progress=False, time_limit=600.0)
    monkeypatch.setattr(progress, "_one_gpu", lambda leaves: None)  # JAX's own copies
    plain = mw.solve(problem, solver, progress=False, time_limit=600.0)
    return pinned, plain, fetched


def test_the_driver_reads_a_chunk_through_the_copy_program_with_the_same_result(monkeypatch):
    # the driver's side, on this machine's own pinned host memory: what it fetched after the chunk
    # came from the copy program, and the result is the one of JAX's copies, bit for bit
    pinned, plain, fetched = _solve_twice(monkeypatch, jax.devices()[0])
    assert fetched[0] == {"pinned_host"} and fetched[-1] != {"pinned_host"}
    assert np.asarray(pinned.x).tobytes() == np.asarray(plain.x).tobytes() and pinned.fun == plain.fun
    assert pinned.status == plain.status and pinned.stats["nonfinite"] == plain.stats["nonfinite"]


def test_a_copy_program_that_cannot_be_made_falls_back_to_jax_copies_with_one_warning(monkeypatch):
    import pytest

    class Refusing:  # a device whose XLA would offer pinned memory but cannot make the program
        platform = "gpu"

        def addressable_memories(self) -> list:
            return [type("Memory", (), {"kind": "pinned_host"})()]

    device = Refusing()
    tree = (jnp.int32(3), {"x": jnp.arange(3.0)})
    monkeypatch.setattr(progress, "_one_gpu", lambda leaves: device)
    with pytest.warns(UserWarning, match="without pinned host memory"):
        copies, _ = progress.start_copies(tree)
    assert copies is tree and device in progress._NO_PINNED_COPY  # not tried again, no second warning
    assert progress.start_copies(tree) == (tree, 0.0)
    progress._NO_PINNED_COPY.discard(device)


def test_on_a_gpu_a_solve_reads_its_chunk_through_pinned_memory_with_the_same_result(monkeypatch):
    import pytest

    if jax.default_backend() != "gpu":
        pytest.skip("needs a GPU (the copy program is for one)")
    pinned, plain, fetched = _solve_twice(monkeypatch, jax.devices()[0])
    assert fetched[0] == {"pinned_host"}
    assert np.asarray(pinned.x).tobytes() == np.asarray(plain.x).tobytes() and pinned.fun == plain.fun
    assert pinned.status == plain.status and pinned.stats["nonfinite"] == plain.stats["nonfinite"]
