"""Large host arrays sent to a GPU in parts, which the runtime copies on several threads at once.

``jax.device_put`` of one NumPy array copies it from pageable memory on one thread: 80 MB (an
L-BFGS ``x0`` of n = 1e7 float64) took 14-15 ms on an H200 host.  Handed the same bytes as a list
of 16 parts, the runtime copies them concurrently: 2.9-3.8 ms, joined on the device after (one
pass over the array there).  :func:`to_device` does that for the arguments of the starts and small
functions :mod:`multiwalk.compile_cache` calls on one device, so a call's cost before its run
stays near the copy rate of the host's memory, not one thread's.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["PARTS_AT_MOST", "PART_BYTES", "UPLOAD_IN_PARTS_BYTES", "UPLOAD_IN_PARTS_MAX_BYTES", "default_device", "device_of",
           "to_device", "uploads_in_parts"]

#: host arrays at least this large go to a GPU in parts (below it one copy takes < ~1.5 ms) ...
UPLOAD_IN_PARTS_BYTES = 8 << 20
#: ... and at most this large: the parts and the joined array are both on the device while they
#: are joined, and a size's first upload keeps a second set of pinned staging buffers (page-locked
#: memory is the host's), so a larger array goes as one copy
UPLOAD_IN_PARTS_MAX_BYTES = 1 << 30
#: the most pinned staging memory the spare uploads (:func:`_reserve_spare_staging`) may add in a process
SPARE_STAGING_TOTAL_BYTES = 4 << 30
#: the bytes of one part at least, and the most parts: 16 parts of 5 MB gave the 80 MB figure above
PART_BYTES = 2 << 20
PARTS_AT_MOST = 16


def default_device() -> Any:
    """The device a host array goes to when an executable runs it: ``jax.default_device`` (a device,
    or a platform's name) or JAX's first device."""
    return device_of(jax.config.jax_default_device)


@functools.lru_cache(maxsize=8)
def device_of(default: Any) -> Any:
    """The device ``jax.default_device``'s setting ``default`` names (None: JAX's first)."""
    return jax.devices(default)[0] if isinstance(default, str) else default or jax.devices()[0]


def uploads_in_parts(value: Any, device: Any) -> bool:
    """Whether :func:`to_device` sends ``value`` in parts to ``device`` (the default device): a
    NumPy array of :data:`UPLOAD_IN_PARTS_BYTES` to :data:`UPLOAD_IN_PARTS_MAX_BYTES`, bound for a
    device that is not a CPU (where a device array is host memory already), in a process of its own
    (``jax.distributed`` places its own shards)."""
    return (isinstance(value, np.ndarray) and UPLOAD_IN_PARTS_BYTES <= value.nbytes <= UPLOAD_IN_PARTS_MAX_BYTES
            and device.platform != "cpu" and jax.process_count() == 1)


def to_device(value: np.ndarray) -> jax.Array:
    """``value`` on the default device, uncommitted as ``jax.device_put(value)`` leaves it (the same
    dtype, shape and placement: the same executables take it as they take ``value``).  Sent in
    parts where :func:`uploads_in_parts` says so; where that fails (the parts and the joined array
    need twice the array's device memory while they are joined), as one copy."""
    if not uploads_in_parts(value, default_device()):
        return jax.device_put(value)
    flat = np.ascontiguousarray(value).reshape(-1)  # a view where it is contiguous already
    count = int(min(PARTS_AT_MOST, max(2, value.nbytes // PART_BYTES)))
    parts = np.array_split(flat, count)
    try:
        on_device = jax.device_put(parts)  # a list: its copies run concurrently
        _reserve_spare_staging(parts)
        return _joined(value.shape)(*on_device)
    except jax.errors.JaxRuntimeError:  # out of memory for the parts beside the joined array
        return jax.device_put(value)


def _reserve_spare_staging(parts: list[np.ndarray]) -> None:
    """The runtime stages each part through pinned host memory, keeping freed buffers for reuse;
    but a process's second upload of a size found none free and allocated its own (27.6 and 34.6
    ms for 80 MB on an H200 host, against 3.3-4.6 ms from the third).  So the first upload of each
    size sends its parts twice, the second copy dropped: its buffers join the pool, and the later
    uploads alternate between the two sets.  Up to :data:`SPARE_STAGING_TOTAL_BYTES` in a process."""
    size = (default_device().id, tuple(p.nbytes for p in parts))
    nbytes = sum(size[1])
    with _SPARE_LOCK:
        if size in _SPARED or _SPARE_BYTES[0] + nbytes > SPARE_STAGING_TOTAL_BYTES:
            return
        _SPARED.add(size)
        _SPARE_BYTES[0] += nbytes
    jax.block_until_ready(jax.device_put(parts))


_SPARED: set[tuple[int, tuple[int, ...]]] = set()  # (device id, the parts' bytes) sent twice already
_SPARE_BYTES = [0]  # the spares' bytes so far
_SPARE_LOCK = threading.Lock()  # solve() may run on several threads


@functools.lru_cache(maxsize=32)
def _joined(shape: tuple[int, ...]) -> Any:
    """A program joining the parts into one array of ``shape`` (one per shape: a jitted
    concatenate retraces for each tuple of part shapes anyway)."""
    return jax.jit(lambda *parts: jnp.concatenate(parts).reshape(shape))
