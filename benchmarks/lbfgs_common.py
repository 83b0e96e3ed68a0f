"""Pieces the L-BFGS benchmarks share (lbfgs.py, lbfgs_along.py, lbfgs_tune.py, lbfgs_rows.py,
lbfgs_passes.py, lbfgs_variants.py): timing, the floor's bandwidth, interleaved whole solves, the
seed check, optax's row and the table cells built from them.

JAX is imported inside the functions (as in common.py), so a script can pick the platform first.
"""

from __future__ import annotations

import argparse
import statistics
import time
import traceback
from collections.abc import Callable
from typing import Any

import common

M = 7  # the seed's memory
EPS = 1e-5  # the seed's stop rule: ||g|| <= eps * max(1, ||x||)
SEED = {"iterations": 37, "nfev": 51, "f": 6.752e-10}  # the seed's printout at n = 1e6, m = 7
FLOOR_VALUES = 4 * M + 10  # n values one iteration must move ((4m + 10) n; 38 n at m = 7)

Log = Callable[[str], None]


def timed(fn: Callable[..., Any], *args: Any, reps: int = 5) -> float:
    """Median seconds of ``reps`` synchronised calls of ``fn(*args)`` after one warm-up call."""
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def device_time(fn: Callable[[Any, Any], Any], carry: Any, data: Any, trips: int, reps: int = 5) -> float:
    """Seconds per call of ``carry = fn(carry, data)``: median of ``reps`` runs of one jitted fori_loop
    of ``trips`` calls.  ``data`` goes in as an argument: arrays a jitted function closes over are
    compiled in as constants (the first GPU try, 2026-11-22, spent ~30 s compiling each launch
    with the 1.1 GB pair buffer baked in)."""
    import jax

    run = jax.jit(lambda c, data: jax.lax.fori_loop(0, trips, lambda i, c: fn(c, data), c))
    return timed(run, carry, data, reps=reps) / trips


def torch_copy_bandwidth(nbytes: int, reps: int = 20) -> float | None:
    """Bytes per second (read + write) of PyTorch's device-to-device copy, or None without a CUDA torch.

    XLA's own copy and sum kernels reached only 2.8-3.3 TB/s on an H200 while this copy reached
    4.2 TB/s in the same run: the floor must use the best a simple kernel achieves."""
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


def floor_bandwidth(on_gpu: bool, log: Log) -> tuple[float, float | None, float]:
    """``(bw, torch_bw, xla_bw)`` in bytes per second, read + write: PyTorch's copy on a GPU (None
    without a CUDA torch) and XLA's copy; the floor uses ``bw``, PyTorch's where there is one."""
    torch_bw = torch_copy_bandwidth(1 << 31) if on_gpu else None
    xla_bw = common.measure_bandwidth((1 << 30) if on_gpu else (1 << 24), reps=10 if on_gpu else 3)["bytes_per_s"]
    bw = torch_bw or xla_bw
    log(f"bandwidth: PyTorch copy {(torch_bw or 0) / 1e9:.0f} GB/s, XLA copy {xla_bw / 1e9:.0f} GB/s; the floor uses "
        f"{bw / 1e9:.0f} GB/s")
    return bw, torch_bw, xla_bw


def begin(p: argparse.ArgumentParser) -> tuple[argparse.Namespace, common.Start, float, float | None, float] | None:
    """A script's start: parse ``p``'s command line, pick the platform, turn float64 on, find the
    device (``common.start_run``), log it and measure the floor's bandwidth (:func:`floor_bandwidth`):
    ``(args, start, bw, torch_bw, xla_bw)``, or None where the device asked for is missing."""
    args = p.parse_args()
    common.select_platform(args.device)
    import jax

    jax.config.update("jax_enable_x64", True)
    start = common.start_run(args.device, quick=False)
    if start is None:
        return None
    start.log(f"device {start.env['device']}, jax {start.env['jax']}")
    return args, start, *floor_bandwidth(start.on_gpu, start.log)


def budget_clock(t_start: float, seconds: float) -> Callable[[], bool]:
    """A ``budget()`` that is True once ``seconds`` have passed since ``t_start`` (start no new stage)."""
    return lambda: time.perf_counter() - t_start > seconds


def parse_launches(configs: str) -> list[tuple[int, ...]]:
    """``"1024x4,512x4x8x1"`` -> ``[(1024, 4), (512, 4, 8, 1)]`` (kernel launches on the command line)."""
    return [tuple(int(v) for v in c.split("x")) for c in configs.split(",") if c]


def rosenbrock_problem(mw: Any, n: int, dtype: str, value_and_grad: Any = None) -> Any:
    """Extended Rosenbrock from the seed's start; f and g by ``value_and_grad`` (default cute's
    analytic pair, with the one-pass line-search kernel as ``.along`` on GPUs)."""
    from multiwalk.functions import cute

    return mw.Problem(objective=cute.extended_rosenbrock,
                      value_and_grad=value_and_grad or cute.extended_rosenbrock_value_and_grad,
                      x0=cute.start("extended_rosenbrock", n), dtype=dtype)


def interleaved_solves(mw: Any, cases: dict[str, tuple[Any, Any]], reps: int, log: Log, label: str,
                       budget: Callable[[], bool] | None = None) -> dict[str, dict]:
    """Whole solves of each ``name: (problem, solver)``: each compiled first (its result kept), then
    ``reps`` rounds of one timed call each, interleaved (so drift hits all alike); ``seconds`` is the
    median of ``stats["run_seconds"]``.  Each case is compared with the first: ``same_counts``
    (iterations, evaluations, status) and ``f_rel_diff``.  A case that fails to compile gets
    ``{"error": ...}`` and the others go on; past ``budget()`` no new case or round starts."""
    rows: dict[str, dict] = {}
    for name, (problem, solver) in cases.items():
        if budget is not None and budget():
            log(f"solve {name} {label}: skipped, past the budget")
            continue
        try:
            t0 = time.perf_counter()
            r = mw.solve(problem, solver, progress=False)
            rows[name] = {"iterations": r.iterations, "nfev": r.nfev, "f": r.fun, "gnorm": r.gnorm,
                          "status": r.status.name, "kernel": r.stats["kernel"],
                          "line_evaluation": r.stats.get("line_evaluation"),
                          "first_call_seconds": time.perf_counter() - t0, "times": []}
        except Exception as e:  # noqa: BLE001 - report it, time the other cases
            rows[name] = {"error": f"{type(e).__name__}: {e}"}
            log(f"solve {name} {label} FAILED: {type(e).__name__}: {str(e)[:1500]}")
            traceback.print_exc(limit=6)
    alive = [k for k, v in rows.items() if "error" not in v]
    for _ in range(reps):
        if budget is not None and budget():
            log(f"{label}: reps cut short by the budget")
            break
        for name in alive:
            rows[name]["times"].append(mw.solve(*cases[name], progress=False).stats["run_seconds"])
    base = rows.get(next(iter(cases)), {})
    for name in alive:
        o = rows[name]
        if o["times"]:
            o["seconds"], o["min_seconds"] = statistics.median(o["times"]), min(o["times"])
        o["same_counts"] = all(o[k] == base.get(k) for k in ("iterations", "nfev", "status"))
        o["f_rel_diff"] = abs(o["f"] - base.get("f", o["f"])) / max(abs(base.get("f", o["f"])), 1e-300)
        log(f"solve {name:>10} {label}: {o.get('seconds', float('nan')) * 1e3:8.2f} ms "
            f"(min {o.get('min_seconds', float('nan')) * 1e3:.2f}, {len(o['times'])} reps), {o['iterations']} it / "
            f"{o['nfev']} ev, f {o['f']:.6e}, {o['status']}, kernel {o['kernel']}, first call "
            f"{o['first_call_seconds']:.1f} s; same counts as {next(iter(cases))} {o['same_counts']}, f rel diff "
            f"{o['f_rel_diff']:.1e}")
    return rows


def seed_check(mw: Any, problem: Any, solvers: dict[str, Any], log: Log,
               budget: Callable[[], bool] | None = None) -> dict[str, dict]:
    """Each solver on ``problem`` (n = 1e6 for the seed's printout) against :data:`SEED`: the same
    iterations and evaluations, f to 1e-3 relative (f ~ 1e-9 is rounding-sensitive)."""
    out: dict[str, dict] = {}
    for name, solver in solvers.items():
        if budget is not None and budget():
            break
        try:
            r = mw.solve(problem, solver, progress=False)
            ok = (r.iterations, r.nfev) == (SEED["iterations"], SEED["nfev"]) and abs(r.fun - SEED["f"]) < 1e-3 * SEED["f"]
            out[name] = {"iterations": r.iterations, "nfev": r.nfev, "f": r.fun, "status": r.status.name, "ok": ok}
            log(f"seed check {name}: {r.iterations} it / {r.nfev} ev, f {r.fun:.6e} -> {ok}")
        except Exception as e:  # noqa: BLE001 - report it, check the others
            out[name] = {"error": f"{type(e).__name__}: {e}"}
            log(f"seed check {name} FAILED: {e}")
    return out


def seed_check_lines(checks: dict[str, dict], check_n: int) -> list[str]:
    """Markdown lines of :func:`seed_check`'s result (none if it is empty)."""
    if not checks:
        return []
    lines = ["", f"Seed check at n = {check_n:.0e} (expected {SEED['iterations']} it / {SEED['nfev']} evals, "
             f"f = {SEED['f']:.4g}):", ""]
    for name, o in checks.items():
        lines.append(f"- {name}: " + (o["error"] if "error" in o else
                                      f"{o['iterations']} it / {o['nfev']} evals, f = {o['f']:.6e}, {o['status']} "
                                      f"-> {'OK' if o['ok'] else 'DIFFERENT'}"))
    return lines


def optax_row(n: int, dtype: str, log: Log) -> dict:
    """optax.lbfgs(memory_size=7) with cute's analytic f and g and our stop rule (``lbfgs.run_optax``:
    median of 3 calls), or ``{"error": ...}`` where optax is missing or fails."""
    import lbfgs  # benchmarks/lbfgs.py (it imports this module: here, not at the top)

    from multiwalk.functions import cute

    try:
        q = lbfgs.run_optax(cute, n, dtype)
        log(f"optax n={n:.0e}: {q['seconds'] * 1e3:.1f} ms ({q['iterations']} it, f {q['f']:.3e}, gnorm {q['gnorm']:.2e})")
        return q
    except Exception as e:  # noqa: BLE001 - the peer may be missing or fail at this size
        log(f"optax failed: {type(e).__name__}: {str(e)[:300]}")
        return {"error": f"{type(e).__name__}: {e}"}


def optax_cells(opt: dict | None, ours_seconds: float) -> tuple[str, str]:
    """Table cells ``optax ms (it)`` and ``optax / ours`` ("-" where optax has no time)."""
    if not opt or "seconds" not in opt:
        return "-", "-"
    return f"{opt['seconds'] * 1e3:.1f} ({opt['iterations']})", f"{opt['seconds'] / ours_seconds:.2f}x"
