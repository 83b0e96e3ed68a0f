"""Host-to-device copy of n float64 values from NumPy (an L-BFGS ``x0`` of n = 1e7 is 80 MB): one
``jax.device_put``, a list of parts put at once and joined on the device, and
:func:`multiwalk.upload.to_device` (the parts, with its spare staging) as a process's calls 1-6.
Run it in a new process each time: the runtime's staging buffers are per process.

    PYTHONPATH=src python3 benchmarks/h2d.py --n 10000000        # a GPU
"""
import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)


def times(put, repeat: int) -> str:
    """``put()``'s wall clock in ms, ``repeat`` times, each waited for."""
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        jax.block_until_ready(put())
        out.append(1e3 * (time.perf_counter() - t))
    return " ".join(f"{v:.1f}" for v in out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000_000)
    p.add_argument("--repeat", type=int, default=6)
    args = p.parse_args()
    from multiwalk import upload

    x = np.tile(np.array([-1.2, 1.0]), args.n // 2)
    print(f"{jax.devices()[0].device_kind}, {x.nbytes / 1e6:.0f} MB; ms per copy, first call first")
    # to_device first: its calls 1-6 are a process's first uploads of this size
    print("upload.to_device:", times(lambda: upload.to_device(x), args.repeat))
    print("jax.device_put, one array:", times(lambda: jax.device_put(x), args.repeat))
    join = jax.jit(lambda *parts: jnp.concatenate(parts))
    for k in (2, 4, 8, 16):
        parts = np.array_split(x, k)
        print(f"{k} parts, joined:", times(lambda parts=parts: join(*jax.device_put(parts)), args.repeat))


if __name__ == "__main__":
    main()
