"""Device-to-host copy of n float64 values: np.asarray of a device array, against a copy through
pinned host memory (``memory_kind="pinned_host"``), the floor under any result that hands the
user n values on the host.  ``python benchmarks/d2h.py --n 10000000``"""
import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=10_000_000)
    n = p.parse_args().n
    dev = jax.devices()[0]
    print("devices", jax.devices(), "memories", [m.kind for m in dev.addressable_memories()])
    fresh = jax.jit(lambda s: jnp.arange(n, dtype=jnp.float64) * s)

    def plain():
        x = fresh(1.0).block_until_ready()
        t = time.perf_counter()
        np.asarray(x)
        return time.perf_counter() - t

    s = jax.sharding.SingleDeviceSharding(dev, memory_kind="pinned_host")

    def pinned():
        x = fresh(1.0).block_until_ready()
        t = time.perf_counter()
        h = jax.device_put(x, s)
        np.asarray(h)
        return time.perf_counter() - t

    for name, f in (("np.asarray", plain), ("via pinned_host", pinned)):
        try:
            ts = sorted(f() for _ in range(7))
            print(f"{name}: {n * 8 / 1e6:.0f} MB in min {ts[0] * 1e3:.1f} ms, median {ts[3] * 1e3:.1f} ms "
                  f"({n * 8 / ts[0] / 1e9:.1f} GB/s)")
        except Exception as err:  # noqa: BLE001
            print(f"{name}: failed {type(err).__name__}: {str(err)[:300]}")


if __name__ == "__main__":
    main()
