"""Helpers shared by the benchmark scripts: platform, device and versions, hardware ceilings, timing, tables.

The scripts import this module as ``common`` (they put their own folder on ``sys.path``).  JAX is
imported inside the functions, so that a script can set ``JAX_PLATFORMS`` (:func:`select_platform`)
before JAX starts.

Every script measures through the public API as a user calls it (:func:`wall_calls`: the wall clock
around ``mw.solve`` or the command, the result read back, first call and second call) and prints
one table (:func:`results_table`): what, device, date, ours, the peer measured in the same run, the
ratio, the hardware floor.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

TRANSCENDENTAL_OPS = 20  # lane instructions assumed per exp / log / sin / cos / sqrt (range reduction + polynomial)


# ============================================================================ device and environment
def select_platform(device: str) -> None:
    """Set ``JAX_PLATFORMS`` for ``--device cpu|gpu`` (before JAX is imported) and put the checkout's ``src/`` first."""
    if device == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
    elif device == "gpu":
        os.environ["JAX_PLATFORMS"] = "cuda"
    src = Path(__file__).resolve().parents[1] / "src"
    if given_multiwalk():
        return  # PYTHONPATH names the sources to measure (another version's, for an A/B): they stay first
    if (src / "multiwalk").is_dir() and str(src) not in sys.path:
        sys.path.insert(0, str(src))  # benchmark the checkout, not some installed copy


def given_multiwalk() -> bool:
    """Whether an entry of ``PYTHONPATH`` holds a ``multiwalk`` package (the sources to measure)."""
    return any(p and (Path(p) / "multiwalk").is_dir() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep))


def first_device(device: str) -> tuple[Any, bool] | None:
    """JAX's first device and whether it is an accelerator; None (after an error message) if ``--device`` cannot be met."""
    import jax

    try:
        dev = jax.devices()[0]
    except RuntimeError as err:
        print(f"error: no JAX device for --device {device}: {err}", file=sys.stderr)
        return None
    on_gpu = dev.platform not in ("cpu",)
    if device == "gpu" and not on_gpu:
        print(f"error: --device gpu but JAX runs on {dev.platform}", file=sys.stderr)
        return None
    return dev, on_gpu


def cpu_name() -> str:
    """The host CPU's model name and core count."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"


def environment(dev: Any, on_gpu: bool, mw: Any, quick: bool) -> dict[str, Any]:
    """Date, device and versions, for the report's "environment" (``["device"]`` is the name the tables show)."""
    import jax

    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "device": f"{dev.device_kind}" if on_gpu else f"CPU: {cpu_name()}",
        "platform": dev.platform, "n_devices": jax.device_count(),
        "jax": jax.__version__, "multiwalk": getattr(mw, "__version__", "?"), "numpy": np.__version__,
        "python": platform.python_version(), "cpu": cpu_name(), "quick": quick,
    }


def make_log(t_start: float) -> Callable[[str], None]:
    """A ``log(msg)`` that prints ``msg`` after the seconds elapsed since ``t_start`` (a ``time.perf_counter()``)."""

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:7.1f} s] {msg}", flush=True)

    return log


class Start(NamedTuple):
    """What :func:`start_run` gives a script: its device, the clock and log, and the report's environment."""

    dev: Any
    on_gpu: bool
    t_start: float  # time.perf_counter() at the start
    log: Callable[[str], None]
    env: dict[str, Any]


def start_run(device: str, quick: bool) -> Start | None:
    """After :func:`select_platform`: the first device (:func:`first_device`), the clock started
    now, its ``log`` and the :func:`environment`; None (after an error message) if ``--device``
    cannot be met (the script exits with 2)."""
    found = first_device(device)
    if found is None:
        return None
    import multiwalk as mw

    dev, on_gpu = found
    t_start = time.perf_counter()
    return Start(dev, on_gpu, t_start, make_log(t_start), environment(dev, on_gpu, mw, quick))


# ============================================================================ timing
def median_calls(fn: Callable[[Any], Any], state: Any, min_reps: int, min_seconds: float,
                 max_reps: int = 200) -> tuple[Any, list[float]]:
    """Call ``state = fn(state)`` until min_reps calls and min_seconds have passed; host clock per call."""
    import jax

    times: list[float] = []
    t_start = time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() - t_start < min_seconds):
        t0 = time.perf_counter()
        state = fn(state)
        jax.block_until_ready(state)
        times.append(time.perf_counter() - t0)
    return state, times


def xla_cost(problem: Any) -> dict[str, float]:
    """XLA's own operation count of one objective (chi2) evaluation, on this backend."""
    import jax

    x = jax.ShapeDtypeStruct((problem.n_free,), problem.dtype)
    cost = jax.jit(problem.chi2_free).lower(x).compile().cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    cost = cost or {}
    return {"flops": float(cost.get("flops", 0.0) or 0.0), "transcendentals": float(cost.get("transcendentals", 0.0) or 0.0)}


# ============================================================================ ceilings
def measure_bandwidth(nbytes: int, reps: int) -> dict[str, Any]:
    """Device-to-device streaming rate of y = x + 1 on float32: bytes read + bytes written over time."""
    import jax
    import jax.numpy as jnp

    n = nbytes // 4
    x = jax.random.uniform(jax.random.PRNGKey(1), (n,), jnp.float32)
    f = jax.jit(lambda a: a + 1.0)
    y = f(x)
    jax.block_until_ready(y)
    ok = bool(jnp.allclose(y[:1000], x[:1000] + 1.0))
    del x
    y, times = median_calls(f, y, reps, 0.0, reps)  # each call reads the previous output: no cache reuse
    del y
    t = statistics.median(times)
    return {"bytes": 2 * 4 * n, "seconds": t, "bytes_per_s": 2 * 4 * n / t, "check": ok}


def measure_fp32(n: int, chain: int, reps: int) -> dict[str, Any]:
    """FP32 lane rate from one fused kernel: ``chain`` dependent x = x*a + b per element (2 flops each)."""
    import jax
    import jax.numpy as jnp

    def body(x, a, b):
        for _ in range(chain):
            x = x * a + b
        return x

    f = jax.jit(body)
    x = jax.random.uniform(jax.random.PRNGKey(2), (n,), jnp.float32)
    a, b = jnp.float32(0.999), jnp.float32(1e-3)
    y = f(x, a, b)
    jax.block_until_ready(y)
    ok = bool(jnp.all(jnp.isfinite(y)))
    _, times = median_calls(lambda s: f(x, a, b), None, reps, 0.0, reps)
    t = statistics.median(times)
    flops = 2.0 * chain * n
    return {"flops": flops, "seconds": t, "flops_per_s": flops / t, "check": ok, "elements": n, "chain": chain}


def measure_matmul(n: int, reps: int) -> dict[str, Any]:
    """float32 matrix product at precision HIGHEST (no TF32): the other FP32 rate (XLA's FMA chain runs below peak)."""
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.PRNGKey(3))
    a = jax.random.normal(k1, (n, n), jnp.float32)
    b = jax.random.normal(k2, (n, n), jnp.float32)
    f = jax.jit(lambda p, q: jnp.matmul(p, q, precision=jax.lax.Precision.HIGHEST))
    jax.block_until_ready(f(a, b))
    _, times = median_calls(lambda s: f(a, b), None, reps, 0.0, reps)
    t = statistics.median(times)
    return {"n": n, "seconds": t, "flops_per_s": 2.0 * n**3 / t}


def torch_copy_bandwidth(nbytes: int, reps: int = 20) -> float | None:
    """Bytes per second (read + write) of PyTorch's device-to-device copy, or None without a CUDA torch.

    XLA's own copy reached only 2.8-3.3 TB/s on an H200 where this copy reached 4.2 TB/s: a floor
    must use the best a simple kernel achieves."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    for _ in range(5):
        dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    out = 2 * src.numel() * 4 / statistics.median(times)
    del src, dst
    torch.cuda.empty_cache()
    return out


def measure_ceilings(on_gpu: bool, log: Callable[[str], None], cpu_bandwidth_bytes: int = 1 << 26,
                     cpu_matmul_n: int = 512) -> dict[str, Any]:
    """Copy bandwidth, FMA-chain and matmul FP32 rates (GPU sizes, or the given CPU ones), and the lane rate; logged.

    ``bytes_per_s`` is the faster of XLA's copy and PyTorch's (where a CUDA torch is installed).
    The lane rate is the faster of the two FP32 rates (a floor needs an upper bound on the rate) / 2:
    an FMA is 2 flops in one lane operation.
    """
    bw = measure_bandwidth((1 << 30) if on_gpu else cpu_bandwidth_bytes, reps=10 if on_gpu else 5)
    torch_bw = torch_copy_bandwidth(1 << 30) if on_gpu else None
    fp = measure_fp32((1 << 26) if on_gpu else (1 << 18), chain=512 if on_gpu else 64, reps=10 if on_gpu else 3)
    mm = measure_matmul(8192 if on_gpu else cpu_matmul_n, reps=10 if on_gpu else 3)
    lane_ops = max(fp["flops_per_s"], mm["flops_per_s"]) / 2.0
    bytes_per_s = max(bw["bytes_per_s"], torch_bw or 0.0)
    log(f"copy bandwidth {bw['bytes_per_s'] / 1e9:.3g} GB/s (XLA), "
        f"{'-' if torch_bw is None else f'{torch_bw / 1e9:.3g}'} GB/s (PyTorch); "
        f"FP32 FMA chain {fp['flops_per_s'] / 1e12:.3g} TFLOP/s; matmul HIGHEST {mm['flops_per_s'] / 1e12:.3g} TFLOP/s")
    return {"bandwidth": bw, "torch_bytes_per_s": torch_bw, "bytes_per_s": bytes_per_s, "fp32": fp, "matmul": mm,
            "lane_ops_per_s": lane_ops}


def ceilings_line(ceilings: dict[str, Any]) -> str:
    """One sentence for the table's heading: the ceilings the floors were computed from."""
    return (f"Ceilings measured in this run: copy {ceilings['bytes_per_s'] / 1e9:.3g} GB/s (read + write), "
            f"{ceilings['lane_ops_per_s'] / 1e12:.3g} T FP32 lane operations/s.")


# ============================================================================ options
def new_parser(doc: str, name: str) -> argparse.ArgumentParser:
    """The options every script has: ``--device``, ``--quick`` and ``--out`` (for ``name``.json and .md);
    described by the first paragraph of ``doc``."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "gpu", "auto"], default="auto",
                   help="cpu: JAX_PLATFORMS=cpu; gpu: JAX_PLATFORMS=cuda (fails if none); auto: JAX's choice")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a check of the script that runs in seconds on a CPU")
    p.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results",
                   help=f"folder for {name}.json and .md (default $OUT, else benchmarks/results)")
    return p


def begin(args: argparse.Namespace) -> Start | None:
    """Select the platform (before JAX is imported), then :func:`start_run`; None if ``--device`` cannot be met."""
    select_platform(args.device)
    return start_run(args.device, args.quick)


def floats(text: str) -> list[float]:
    """``"1e6,1e7"`` -> ``[1e6, 1e7]`` (an empty string gives ``[]``)."""
    return [float(v) for v in text.split(",") if v.strip()]


# ============================================================================ timing the public API
class Calls(NamedTuple):
    """Wall clock of the first call (compiling) and of the second (compiled programs reused), in seconds."""

    first: float
    second: float
    result: Any  # the second call's result
    first_result: Any


def wall_calls(call: Callable[[], Any], read_back: Callable[[Any], Any] | None = None) -> Calls:
    """Call ``call()`` twice as a user does, the wall clock around each call with its result read back.

    ``read_back(result)`` brings what a user looks at to the host (default: ``result.x`` as a NumPy
    array and ``float(result.fun)``), so no device work is left outside the clock."""
    def default(result: Any) -> Any:
        return np.asarray(result.x), float(result.fun)

    read = read_back or default
    times, results = [], []
    for _ in range(2):
        t0 = time.perf_counter()
        results.append(call())
        read(results[-1])
        times.append(time.perf_counter() - t0)
    return Calls(times[0], times[1], results[1], results[0])


# ============================================================================ the table
@dataclass
class Row:
    """One line of a script's table; times in seconds (None: not measured, printed as "-")."""

    what: str
    first: float | None  # ours, first call (compiles)
    second: float | None  # ours, second call
    peer: float | None = None  # the peer, the same work, measured in the same run
    peer_name: str = ""
    floor: float | None = None  # the least time the hardware allows for this work
    note: str = ""  # iterations, status, a check: what the reader needs to trust the row


def seconds(v: float | None) -> str:
    """A time with its unit: 12.3 us, 4.56 ms, 7.89 s; "-" for None or NaN."""
    if v is None or v != v:
        return "-"
    if v < 1e-3:
        return f"{v * 1e6:.3g} us"
    if v < 1.0:
        return f"{v * 1e3:.3g} ms"
    return f"{v:.3g} s"


def ratio(num: float | None, den: float | None) -> str:
    """``num / den`` as "12.3x"; "-" when either is missing."""
    if num is None or den is None or num != num or den != den or den <= 0:
        return "-"
    return f"{num / den:.3g}x"


TABLE_HEAD = ("| what | device | date | ours, 1st call (compiles) | ours, 2nd call | peer (same run) | "
              "peer / ours | floor | ours / floor | note |")


def results_table(env: dict[str, Any], rows: list[Row]) -> list[str]:
    """The Markdown table every script prints: what, device, date, ours (first and second call), the
    peer, the ratio peer / ours (second call), the floor and ours / floor."""
    lines = [TABLE_HEAD, "|---|---|---|---:|---:|---|---:|---:|---:|---|"]
    date = env["date"].split(" ")[0]
    for r in rows:
        peer = f"{seconds(r.peer)} ({r.peer_name})" if r.peer is not None and r.peer_name else seconds(r.peer)
        lines.append(f"| {r.what} | {env['device']} | {date} | {seconds(r.first)} | {seconds(r.second)} | {peer} | "
                     f"{ratio(r.peer, r.second)} | {seconds(r.floor)} | {ratio(r.second, r.floor)} | {r.note} |")
    return lines


def finish(args: argparse.Namespace, run: Start, name: str, heading: list[str], rows: list[Row],
           notes: list[str], report: dict[str, Any] | None = None, extra: list[str] | None = None) -> int:
    """Print and write (``--out``/name.md and .json) the heading, the table, ``extra`` lines (a second
    table of results that are not times) and the notes; returns 0."""
    lines = [*heading, "", *results_table(run.env, rows)]
    if extra:
        lines += ["", *extra]
    for note in notes:
        lines += ["", f"Note: {note}"]
    md = "\n".join(lines) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    full = {"environment": run.env, "rows": [r.__dict__ for r in rows], "notes": notes, **(report or {})}
    (out / f"{name}.json").write_text(json.dumps(full, indent=1, default=str))
    (out / f"{name}.md").write_text(md)
    run.log(f"wrote {out / f'{name}.json'} and {out / f'{name}.md'}; total {time.perf_counter() - run.t_start:.1f} s")
    print()
    print(md)
    return 0
