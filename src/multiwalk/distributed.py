"""Devices: the 1-D mesh a solver's batch axis is sharded over, and ``jax.distributed`` start-up.

Every solver advances a batch of independent walkers (sequences, walkers, replicas, starts), so
one run spreads over several devices by splitting that batch axis: the driver puts the state on
a 1-D :class:`jax.sharding.Mesh` (axis name ``"batch"``) with a :class:`~jax.sharding.NamedSharding`
per state leaf (``PartitionSpec`` naming the leaf's walker axis, or replicated), and compiles the
loop for those shardings; XLA (GSPMD) propagates them through ``step`` and inserts the few
collectives the solver needs (a best value over walkers, the neighbouring-temperature exchanges).
The solver says which axis of each leaf indexes walkers with ``Solver.batch_axes``.  The image
solvers of :mod:`multiwalk.deconv` split their images by rows instead and place their own
collectives with ``jax.shard_map`` on the mesh the driver names while compiling
(:func:`current_mesh`; :mod:`multiwalk.deconv.patches`).

Random numbers do not depend on the split: JAX's ``jax_threefry_partitionable`` (True from JAX
0.5 on) makes ``jax.random`` draws of a sharded shape the same numbers as unsharded, so a run
with the same seed gives the same result on 1, 2 or 4 devices (see :func:`check_random_streams`).

Across hosts, :func:`initialize` starts ``jax.distributed`` (one process per host or per GPU);
the mesh then spans every process's devices, each process runs the same program on its shards,
and process 0 writes the files (:func:`is_writer`).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = [
    "AXIS",
    "Placement",
    "barrier",
    "broadcast",
    "choose_devices",
    "initialize",
    "is_writer",
    "multi_process",
    "place",
    "to_host",
    "check_random_streams",
    "current_mesh",
    "mesh_context",
    "shard_map_unchecked",
]

AXIS = "batch"  # the mesh's one axis name


@dataclass(frozen=True)
class Placement:
    """Where a run's state lives: ``devices`` (the mesh's devices, in order), ``mesh`` (None on
    one device: nothing is sharded), ``shardings`` (a pytree like the state, one
    :class:`NamedSharding` per leaf, or None) and ``note`` (why fewer devices than asked for)."""

    devices: tuple[Any, ...]
    mesh: Mesh | None
    shardings: Any
    note: str = ""

    @property
    def sharded(self) -> bool:
        return self.mesh is not None

    @property
    def replicated(self) -> NamedSharding | None:
        """The sharding of values every device holds whole (problem data, loop counters)."""
        return None if self.mesh is None else NamedSharding(self.mesh, PartitionSpec())

    def key(self) -> tuple:
        """A hashable description for the compiled-loop cache (device ids and partition specs)."""
        if self.mesh is None:
            return ()
        specs = tuple(s.spec for s in jax.tree_util.tree_leaves(self.shardings))
        return (tuple(d.id for d in self.devices), specs)


_MESH: contextvars.ContextVar[Mesh | None] = contextvars.ContextVar("multiwalk_mesh", default=None)


@contextlib.contextmanager
def mesh_context(mesh: Mesh | None) -> Iterator[None]:
    """While the driver compiles a split run's loop: the mesh, for :func:`current_mesh`."""
    token = _MESH.set(mesh)
    try:
        yield
    finally:
        _MESH.reset(token)


def current_mesh() -> Mesh | None:
    """The mesh the driver is compiling the loop for (None on one device).  Solvers that place
    their own collectives read it while tracing ``step``: the deconvolution solvers run their
    per-patch update under :func:`jax.shard_map` on it (:mod:`multiwalk.deconv.patches`)."""
    return _MESH.get()


def shard_map_unchecked(f: Any, mesh: Mesh, in_specs: Any, out_specs: Any) -> Any:
    """``jax.shard_map`` (JAX >= 0.6, else ``jax.experimental.shard_map``) with its replication check
    off: a ``pallas_call`` has no replication rule, and the outputs a caller declares replicated are
    the same on every device by construction (a ``psum`` or an ``all_gather``)."""
    import inspect

    sm = getattr(jax, "shard_map", None)
    if sm is not None:
        check = "check_vma" if "check_vma" in inspect.signature(sm).parameters else "check_rep"
        return sm(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, **{check: False})
    from jax.experimental.shard_map import shard_map  # older JAX

    return shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)


def multi_process() -> bool:
    """Whether ``jax.distributed`` runs more than one process."""
    return jax.process_count() > 1


def is_writer() -> bool:
    """True in the process that writes outputs (checkpoints, ODAT-SE files): process 0."""
    return jax.process_index() == 0


def _leaf_axes(state: Any, axes: Any) -> list[int | None]:
    """The solver's ``batch_axes`` tree flattened like ``state`` (one ``int | None`` per leaf)."""
    leaves, treedef = jax.tree_util.tree_flatten(state)
    if axes is None:
        return [None] * len(leaves)
    flat = treedef.flatten_up_to(axes)
    out = []
    for leaf, ax in zip(leaves, flat):
        if ax is not None:
            ax = int(ax)
            if not 0 <= ax < len(leaf.shape):
                raise ValueError(f"batch_axes: axis {ax} does not exist for a state leaf of shape {leaf.shape}")
        out.append(ax)
    return out


def _device_list(devices: Any) -> tuple[list[Any], bool]:
    """``(devices, explicit)`` from the ``devices=`` option (None, an int or a list of devices)."""
    everything = jax.devices()  # all processes' devices under jax.distributed, else the local ones
    if devices is None:
        return list(everything), False
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer, Sequence)):
        raise TypeError(f"devices must be None, a number of devices or a list of jax devices, got {devices!r}")
    if isinstance(devices, (int, np.integer)):
        if not 1 <= devices <= len(everything):
            raise ValueError(
                f"devices={devices}: there are {len(everything)} devices ({everything[0].platform}); "
                f"give a number from 1 to {len(everything)}, or None for all"
            )
        return list(everything[: int(devices)]), True
    chosen = list(devices)
    if not chosen or not all(isinstance(d, jax.Device) for d in chosen):
        raise TypeError(f"devices must be a non-empty list of jax devices (jax.devices()), got {devices!r}")
    if len({d.id for d in chosen}) != len(chosen):
        raise ValueError(f"devices lists a device twice: {chosen}")
    return chosen, True


def choose_devices(solver: Any, problem: Any, state_shapes: Any, devices: Any) -> Placement:
    """The devices and shardings of a run, checked before anything is compiled.

    ``state_shapes``: the initial state or its ``jax.eval_shape``.  ``devices=None``: all devices
    when the solver declares batch axes whose lengths the device count divides, else one
    device and a note saying why.  ``devices=k`` or a list: exactly those, or a ValueError
    naming the option and the fix when the batch does not split evenly.
    """
    chosen, explicit = _device_list(devices)
    axes = _leaf_axes(state_shapes, solver.batch_axes(problem, state_shapes))
    leaves = jax.tree_util.tree_leaves(state_shapes)
    k = len(chosen)
    if multi_process() and len(chosen) != jax.device_count():
        raise ValueError(
            f"devices={devices!r}: under jax.distributed a run uses every process's devices "
            f"({jax.device_count()}); leave devices=None"
        )
    if k == 1:
        return Placement(tuple(chosen), None, None)
    name = type(solver).__name__
    if all(a is None for a in axes):
        why = solver.unsplit_reason(problem) or f"{name} declares no batch axis to split over devices (Solver.batch_axes)"
        if explicit or multi_process():
            raise ValueError(f"devices={devices!r}: {why}; use devices=1 (or None)")
        return Placement((chosen[0],), None, None, why + ": ran on one device")
    sizes = sorted({leaf.shape[a] for leaf, a in zip(leaves, axes) if a is not None})
    bad = [s for s in sizes if s % k]
    if bad:
        what = solver.batch_option(problem)
        size = bad[0]
        divisors = [d for d in range(1, k + 1) if all(s % d == 0 for s in sizes)]
        msg = (
            f"{name}'s batch ({what} = {size}) does not split evenly over {k} devices: "
            + (f"make {what} a multiple of {k} (under jax.distributed every process's devices take part)"
               if multi_process() else f"make {what} a multiple of {k}, or pass devices={max(divisors)}")
        )
        if explicit or multi_process():
            raise ValueError(f"devices={devices!r}: {msg}")
        return Placement((chosen[0],), None, None, msg + "; ran on one device")
    mesh = Mesh(np.asarray(chosen, dtype=object), (AXIS,))
    flat = [
        NamedSharding(mesh, PartitionSpec(*([None] * a + [AXIS])) if a is not None else PartitionSpec())
        for a in axes
    ]
    treedef = jax.tree_util.tree_structure(state_shapes)
    return Placement(tuple(chosen), mesh, jax.tree_util.tree_unflatten(treedef, flat))


def place(tree: Any, shardings: Any) -> Any:
    """Host (numpy) or device arrays put with ``shardings`` (a tree like ``tree``, or one sharding
    for every leaf).  Under ``jax.distributed`` every process passes the same values and keeps
    the shards of its own devices."""
    if isinstance(shardings, jax.sharding.Sharding):
        shardings = jax.tree_util.tree_map(lambda _: shardings, tree)
    if not multi_process():
        return jax.device_put(tree, shardings)

    def one(x: Any, s: NamedSharding) -> jax.Array:
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, s, lambda index: host[index])

    return jax.tree_util.tree_map(one, tree, shardings)


def to_host(tree: Any) -> Any:
    """Every leaf as a numpy array, gathered whole.  Under ``jax.distributed`` this is a
    collective (every process must call it, in the same order)."""
    if not multi_process():
        return jax.tree_util.tree_map(np.asarray, tree)
    from jax.experimental import multihost_utils

    def one(x: Any) -> np.ndarray:
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)

    return jax.tree_util.tree_map(one, tree)


def broadcast(values: Any) -> Any:
    """Process 0's ``values`` (a pytree of numbers or small arrays, at most 32 bits wide when
    64-bit JAX is off) in every process: decisions taken by one clock."""
    if not multi_process():
        return values
    from jax.experimental import multihost_utils

    out = multihost_utils.broadcast_one_to_all(jax.tree_util.tree_map(np.asarray, values))
    return jax.tree_util.tree_map(lambda v: np.asarray(v).item() if np.ndim(v) == 0 else np.asarray(v), out)


# ---------------------------------------------------------------------------- jax.distributed
_ENV_COORDINATOR = ("MULTIWALK_COORDINATOR", "JAX_COORDINATOR_ADDRESS")
_ENV_PROCESSES = ("MULTIWALK_NUM_PROCESSES", "JAX_NUM_PROCESSES")
_ENV_PROCESS_ID = ("MULTIWALK_PROCESS_ID", "JAX_PROCESS_ID")


def _env(names: tuple[str, ...]) -> str | None:
    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    return None


def _int_option(name: str, value: Any, env_names: tuple[str, ...]) -> int | None:
    where = name
    if value is None:
        value = _env(env_names)
        where = next((n for n in env_names if os.environ.get(n)), name)
        if value is None:
            return None
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where} must be an integer, got {value!r}") from None
    if out < 0:
        raise ValueError(f"{where} must not be negative, got {out}")
    return out


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: Sequence[int] | None = None,
) -> None:
    """Start ``jax.distributed`` once, before anything touches a device.

    Each argument left None is read from ``MULTIWALK_COORDINATOR`` / ``JAX_COORDINATOR_ADDRESS``
    (``host:port`` of process 0), ``MULTIWALK_NUM_PROCESSES`` / ``JAX_NUM_PROCESSES`` and
    ``MULTIWALK_PROCESS_ID`` / ``JAX_PROCESS_ID``; if still None, JAX's own cluster detection
    fills it (SLURM, Open MPI, Kubernetes, ...).  A second call is a no-op if already started.
    """
    if jax.distributed.is_initialized():
        return
    address = coordinator_address or _env(_ENV_COORDINATOR)
    count = _int_option("num_processes", num_processes, _ENV_PROCESSES)
    index = _int_option("process_id", process_id, _ENV_PROCESS_ID)
    if count is not None and index is not None and index >= count:
        raise ValueError(f"process_id={index} must be below num_processes={count}")
    try:
        jax.distributed.initialize(
            coordinator_address=address, num_processes=count, process_id=index, local_device_ids=local_device_ids
        )
    except (ValueError, RuntimeError) as err:
        raise RuntimeError(
            f"jax.distributed.initialize failed ({err}); give the coordinator address (host:port of process 0), "
            "the number of processes and this process's id (keywords, multiwalk run flags --coordinator, "
            "--num-processes, --process-id, or MULTIWALK_COORDINATOR / MULTIWALK_NUM_PROCESSES / "
            "MULTIWALK_PROCESS_ID), or run under SLURM / Open MPI, which JAX detects"
        ) from err


def check_random_streams() -> bool:
    """Whether ``jax.random`` draws are independent of sharding here (``jax_threefry_partitionable``)."""
    return bool(jax.config.jax_threefry_partitionable)


def barrier(name: str) -> None:
    """Wait until every process gets here (nothing to wait for in one process)."""
    if multi_process():
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)
