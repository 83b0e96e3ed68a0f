"""What reading a small result back costs on this device (a diagnostic): a jitted call on 448
floats launched and waited for, launched and read back (``np.asarray``, ``jax.device_get``, after
``copy_to_host_async``), and the same call with its output in pinned host memory (the jit's
``out_shardings``) or moved there after it (``jax.device_put``); medians of 300.

    PYTHONPATH=src python3 benchmarks/readback.py
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import SingleDeviceSharding


def median_us(fn: Callable[[], Any], calls: int = 300) -> float:
    for _ in range(20):
        fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e6)


def main() -> None:
    device = jax.devices()[0]
    if "pinned_host" not in {memory.kind for memory in device.addressable_memories()}:
        raise SystemExit(f"{device.device_kind} has no pinned host memory: nothing to compare")
    pinned = SingleDeviceSharding(device, memory_kind="pinned_host")
    x = jnp.ones(448, jnp.float32)
    on_device = jax.jit(lambda v: v * 2 + 1)
    to_pinned = jax.jit(lambda v: v * 2 + 1, out_shardings=pinned)

    def async_then_read() -> Any:
        y = on_device(x)
        y.copy_to_host_async()
        return np.asarray(y)

    rows = {
        "launched and waited for": lambda: on_device(x).block_until_ready(),
        "launched and read (np.asarray)": lambda: np.asarray(on_device(x)),
        "launched and read (jax.device_get)": lambda: jax.device_get(on_device(x)),
        "launched, copy_to_host_async, read": async_then_read,
        "launched, jax.device_put to pinned memory, read": lambda: np.asarray(jax.device_put(on_device(x), pinned)),
        "output in pinned host memory: launched and read": lambda: np.asarray(to_pinned(x)),
    }
    print(f"{device.device_kind}: {', '.join(str(m) for m in device.addressable_memories())}")
    for name, fn in rows.items():
        print(f"{name}: {median_us(fn):.1f} us")


if __name__ == "__main__":
    main()
