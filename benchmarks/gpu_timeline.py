"""What the device does during a user's call, and the floors of a launch-bound loop (a diagnostic;
the figures of record are ``benchmarks/user_latency.py``'s).

For each workload: a first call (compiling), a second, then a third under ``jax.profiler.trace``.
From the trace, within the third call's wall clock: the number of device operations (kernels and
copies), their summed time, the time the device was busy (their union), the host time before the
first and after the last, the largest idle gaps, and the operations that take the most time.
``spikes``: L-BFGS n = 1e7 called ``--repeat`` times, each under cProfile, with the slowest and
fastest calls' profiles and the garbage collector's time in each.  ``floors``: an XLA loop of one
tiny kernel an iteration, a jitted call's round trip, a host-to-device copy of 80 MB and the
device's copy rate.

    PYTHONPATH=src python3 benchmarks/gpu_timeline.py floors re_default re_1m ps_15k ps_fixed lbfgs_1e7 \\
        xringaus clean cd spikes
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import glob
import io
import pstats
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def workload(name: str) -> tuple[Any, Any, dict[str, Any]]:
    """``(problem, solver, solve options)``: ``profile_call``'s workloads and four more."""
    from profile_call import workload as profiled

    import multiwalk as mw

    if name == "re_1m":
        from user_latency import sphere2

        return (mw.Problem(objective=sphere2, lower=[-5.0, -5.0], upper=[5.0, 5.0]),
                mw.ReplicaExchange(nbeta=32, nseq=32768, nburn=20, niter=100), {})
    if name == "ps_fixed":
        import pattern_search as bench

        return bench.make_problem(mw, "ackley", 20), mw.PatternSearch(n_walkers=512, iterations=1), {}
    if name == "xringaus":
        import sgra

        from multiwalk.commands.demo import DEMO_TRUTH
        from multiwalk.eht import closure_phases, xringaus_problem
        from multiwalk.models import PARAM_NAMES

        data = sgra.observe(np.array([DEMO_TRUTH[n] for n in PARAM_NAMES]), seed=0)
        return (xringaus_problem(data, closure=closure_phases(data)),
                mw.ReplicaExchange(nbeta=32, nseq=16, nburn=400, niter=1000), {"seed": 0})
    if name in ("clean", "cd"):
        import deconv as bench

        dirty, psf = bench.synthetic(4096)
        solver = (mw.deconv.CoordinateDescent(lam=1e-3, epsilon=1e-12, max_iterations=10_000) if name == "cd"
                  else mw.deconv.Clean(gain=0.1, max_iterations=10_000))
        return mw.deconv.Deconvolution(dirty, psf), solver, {}
    return profiled(name)


def call(problem: Any, solver: Any, options: dict[str, Any]) -> tuple[float, Any]:
    """One call as a user makes it: ``solve``, then ``x`` and ``fun`` read back."""
    import multiwalk as mw

    t0 = time.perf_counter()
    r = mw.solve(problem, solver, progress=False, **options)
    np.asarray(r.x), np.asarray(r.fun)
    return time.perf_counter() - t0, r


def device_events(path: str) -> tuple[list[tuple[float, float, str]], tuple[float, float]]:
    """The device's operations ``(start_ns, end_ns, name)`` and the annotated call's ``(start, end)``."""
    from jax.profiler import ProfileData

    ops: list[tuple[float, float, str]] = []
    window = (0.0, 0.0)
    for plane in ProfileData.from_file(path).planes:
        for line in plane.lines:
            for e in line.events:
                if plane.name.startswith("/device:") and line.name.startswith("Stream"):
                    ops.append((e.start_ns, e.start_ns + e.duration_ns, e.name))
                elif e.name == "user_call":
                    window = (e.start_ns, e.start_ns + e.duration_ns)
    return sorted(ops), window


def describe(ops: list[tuple[float, float, str]], window: tuple[float, float], iterations: int, top: int = 8) -> None:
    t0, t1 = window
    ops = [o for o in ops if o[1] > t0 and o[0] < t1]
    if not ops:
        print("  no device operations in the call (a CPU run?)")
        return
    busy, end, gaps = 0.0, t0, []
    for s, e, name in ops:
        if s > end:
            gaps.append((s - end, name))
        busy += max(0.0, e - max(s, end))
        end = max(end, e)
    total = sum(e - s for s, e, _ in ops)
    wall = t1 - t0
    print(f"  call {wall / 1e6:.2f} ms: {len(ops)} device operations ({len(ops) / max(iterations, 1):.1f} an "
          f"iteration), {total / 1e6:.2f} ms summed, busy {busy / 1e6:.2f} ms ({100 * busy / wall:.0f} %); "
          f"before the first {(ops[0][0] - t0) / 1e6:.2f} ms, after the last {(t1 - end) / 1e6:.2f} ms")
    if iterations:
        print(f"  per iteration: {wall / iterations / 1e3:.1f} us of wall, {busy / iterations / 1e3:.1f} us busy")
    for gap, name in sorted(gaps, reverse=True)[:4]:
        print(f"    idle {gap / 1e6:7.3f} ms before {name[:90]}")
    by_name: dict[str, list[float]] = {}
    for s, e, name in ops:
        by_name.setdefault(name, []).append(e - s)
    for name, d in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]:
        print(f"    {sum(d) / 1e6:8.3f} ms  {len(d):6d} x {np.mean(d) / 1e3:8.2f} us  {name[:90]}")


def iterations_of(name: str, result: Any) -> int:
    its = result.stats.get("iterations", 0)
    if isinstance(its, dict):
        return int(sum(its.values()))
    return {"re_default": 800, "re_1m": 120, "xringaus": 1400}.get(name, int(np.asarray(its).max()) if its else 0)


def timeline(name: str, top: int = 8) -> None:
    import jax

    problem, solver, options = workload(name)
    first, _ = call(problem, solver, options)
    second, r2 = call(problem, solver, options)
    folder = tempfile.mkdtemp()
    with jax.profiler.trace(folder):
        with jax.profiler.TraceAnnotation("user_call"):
            traced, r = call(problem, solver, options)
    ops, window = device_events(glob.glob(f"{folder}/**/*.xplane.pb", recursive=True)[0])
    print(f"\n=== {name}: first call {first:.3f} s, second {second * 1e3:.2f} ms (run "
          f"{r2.stats.get('run_seconds', float('nan')) * 1e3:.2f} ms), traced {traced * 1e3:.2f} ms (run "
          f"{r.stats.get('run_seconds', float('nan')) * 1e3:.2f} ms)")
    describe(ops, window, iterations_of(name, r), top)
    if name in ("clean", "cd"):  # a whole-image copy an iteration in the loop is traffic for nothing
        from multiwalk import compile_cache

        text = compile_cache.compiled_loops()[-1].as_text()
        print(f"  image-sized copies in the loop's program: {len(re.findall(r'f32.4096,4096.[^ ]* copy[(]', text))}")


def best_of(f: Callable[[], Any], repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def floors() -> None:
    import jax
    import jax.numpy as jnp

    x = jnp.ones(448, jnp.float32)
    for steps in (800, 8000):
        loop = jax.jit(lambda x, n=steps: jax.lax.fori_loop(0, n, lambda i, y: y * 0.5 + 1.0, x))
        loop(x).block_until_ready()
        t = best_of(lambda loop=loop: loop(x).block_until_ready())
        print(f"floors: an XLA loop of {steps} iterations, one elementwise kernel each (448 floats): "
              f"{t * 1e3:.2f} ms, {t / steps * 1e6:.2f} us an iteration")
    tiny = jax.jit(lambda x: x + 1.0)
    tiny(x).block_until_ready()
    print(f"floors: a jitted call's round trip (448 floats, launched and waited for): "
          f"{best_of(lambda: tiny(x).block_until_ready()) * 1e6:.1f} us; with the result read back: "
          f"{best_of(lambda: np.asarray(tiny(x))) * 1e6:.1f} us")
    host = np.ones(10_000_000)
    print(f"floors: 80 MB from a NumPy array to the device (jax.device_put): "
          f"{best_of(lambda: jax.device_put(host).block_until_ready()) * 1e3:.2f} ms")
    big = jnp.ones(32 * 1024 * 1024, jnp.float32)
    passes = 20  # in one program, so that one launch and one wait are spread over 20 passes
    copy = jax.jit(lambda a: jax.lax.fori_loop(0, passes, lambda i, b: b * 1.0000001, a))
    copy(big).block_until_ready()
    t = best_of(lambda: copy(big).block_until_ready())
    print(f"floors: the device's copy rate ({passes} passes over 128 MB, each read and written): "
          f"{2 * passes * big.nbytes / t / 1e9:.0f} GB/s")


def spikes(repeat: int) -> None:
    problem, solver, options = workload("lbfgs_1e7")
    call(problem, solver, options)
    gc_time = [0.0]
    started = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            gc_time[0] += time.perf_counter() - started[0]

    gc.callbacks.append(on_gc)
    calls = []
    for _ in range(repeat):
        gc_time[0] = 0.0
        prof = cProfile.Profile()
        prof.enable()
        wall, r = call(problem, solver, options)
        prof.disable()
        calls.append((wall, r.stats["run_seconds"], gc_time[0], prof))
    gc.callbacks.remove(on_gc)
    print("\n=== spikes: L-BFGS n = 1e7, calls (wall / run / gc, ms): "
          + ", ".join(f"{w * 1e3:.0f}/{run * 1e3:.0f}/{g * 1e3:.0f}" for w, run, g, _ in calls))
    ordered = sorted(calls, key=lambda c: c[0])
    for label, (wall, _, _, prof) in (("slowest", ordered[-1]), ("fastest", ordered[0])):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
        print(f"--- {label} call, {wall * 1e3:.0f} ms, by own time:")
        print("\n".join(line for line in buf.getvalue().splitlines() if line.strip())[-2600:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", nargs="+")
    p.add_argument("--repeat", type=int, default=12, help="spikes: calls")
    p.add_argument("--top", type=int, default=8, help="the operations listed, those of most time first")
    args = p.parse_args()
    for name in args.what:
        if name == "floors":
            floors()
        elif name == "spikes":
            spikes(args.repeat)
        else:
            timeline(name, args.top)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
