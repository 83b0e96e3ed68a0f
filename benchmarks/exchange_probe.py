"""Where a step of mw.Exchange's XLA form goes (issue 8): time compiled chunks per replica count,
list the GPU kernels a step runs, compare solver versions bit for bit.

The case of benchmarks/scaling.py's "exchange" rows: Himmelblau (d = 2), one temperature per
replica, T = 1 .. 100 log-spaced, ``numsteps_exchange=10``, ``unroll=1``, ``kernel="xla"``,
float64.  For each replica count the driver's chunk runner is compiled as ``mw.solve`` compiles
it (``solve._chunk_runner``, donated state), a first chunk from step 1 warms it up, then chunks
of ``--steps`` steps run ``--reps`` times (host clock around a blocking call; ``--schedule``: a
sequence of chunks per repetition, each read back as mw.solve does); the median gives ms per
step and ns per replica-step.  A least-squares line through the sizes' medians splits a
step into a fixed part (ms) and a part per replica (ns); from it the speed-ups on k devices are
predicted as ``t1(B) / (t1(B / k) + c)``, ``c`` the extra time per step of a split run
(``--collective-ms``, e.g. the measured 4-device excess; 0 by default).

``--trace``: one more chunk per size and version under ``jax.profiler``; the device's kernels
are summed by name (``jax.profiler.ProfileData``) into us per step and launches per step, and
their sum is set against the chunk's wall time (what is left is the GPU idle: loop tests read
back by the host, launch gaps).

``--versions``: module paths holding an ``Exchange`` class (e.g. a copy of an older
solvers/exchange.py put beside the current one as ``multiwalk.solvers.exchange_old``), each
optionally with integer options (``module:unroll=8``), timed interleaved chunk by chunk so that
a before/after comparison sees the same GPU state.  ``--check`` compares their states after the
timed chunks field by field on the device (every version ran the same steps from the same
state): for a float field that differs, the largest absolute and relative difference.
Results (json, md) are rewritten after every size, so a run cut off keeps what it measured.

    PYTHONPATH=src python3 benchmarks/exchange_probe.py --device gpu --trace --check \\
        --versions multiwalk.solvers.exchange_old,multiwalk.solvers.exchange --out "$OUT"
    PYTHONPATH=src python3 benchmarks/exchange_probe.py --device cpu --sizes 64,256 --steps 23 --check \\
        --versions multiwalk.solvers.exchange:unroll=1,multiwalk.solvers.exchange:unroll=3
"""

from __future__ import annotations

import importlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from re_batch_probe import kernel_times, short  # noqa: E402


def fit_line(r: list[float], t: list[float]) -> tuple[float, float]:
    """Least squares ``t = a + b r``: (a, b); (mean t, 0) with fewer than two sizes."""
    if len(set(r)) < 2:
        return float(np.mean(t)), 0.0
    b, a = np.polyfit(np.asarray(r, float), np.asarray(t, float), 1)
    return float(a), float(b)


def main() -> int:
    p = common.new_parser(__doc__)
    p.add_argument("--sizes", default="1048576,4194304,8388608,16777216", help="comma-separated replica counts")
    p.add_argument("--steps", type=int, default=50, help="steps per timed chunk")
    p.add_argument("--schedule", default="",
                   help="comma-separated chunk lengths run one after another as one timed repetition, each "
                        "read back like mw.solve's chunks (e.g. 1,2,4,8,16,32,64,73: the driver's doubling "
                        "chunks of a 200-step run); replaces --steps")
    p.add_argument("--reps", type=int, default=5, help="timed chunks per size and version (median)")
    p.add_argument("--nex", type=int, default=10, help="numsteps_exchange")
    p.add_argument("--trace", action="store_true", help="profile one chunk per size and version: kernels by name")
    p.add_argument("--versions", default="multiwalk.solvers.exchange",
                   help="comma-separated modules holding an Exchange class, each optionally with integer "
                        "options (module:unroll=8:...), timed interleaved")
    p.add_argument("--check", action="store_true",
                   help="with several versions: compare their states after the timed chunks, bit for bit")
    p.add_argument("--collective-ms", type=float, default=0.0,
                   help="extra ms per step of a split run, added in the predicted speed-ups")
    common.add_out_option(p, "exchange_probe")
    args = p.parse_args()
    for name in ("steps", "reps", "nex"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    sizes = [int(s) for s in args.sizes.split(",")]
    if any(r < 2 for r in sizes):
        p.error(f"--sizes: every replica count must be at least 2, got {args.sizes}")
    common.select_platform(args.device)
    t_start = time.perf_counter()
    log = common.make_log(t_start)

    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    import multiwalk as mw
    driver = importlib.import_module("multiwalk.solve")  # the module; mw.solve is the function
    from multiwalk.functions.odatse import himmelblau
    from multiwalk.solvers.exchange import temperature_ladder

    found = common.first_device(args.device)
    if found is None:
        return 2
    dev, on_gpu = found
    env = common.environment(dev, on_gpu, mw, False)
    env["command"] = " ".join(sys.argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    versions = args.versions.split(",")
    classes = {}
    for v in versions:  # "module[:option=int]..."
        module, *opts = v.split(":")
        options = {o.split("=")[0]: int(o.split("=")[1]) for o in opts}
        classes[v] = (importlib.import_module(module).Exchange, options)
    problem = mw.Problem(objective=himmelblau, lower=-6.0 * np.ones(2), upper=6.0 * np.ones(2))
    n_chunks = 1 + args.reps + (1 if args.trace else 0)
    schedule = [int(c) for c in args.schedule.split(",")] if args.schedule else [args.steps]
    if any(c < 1 for c in schedule):
        p.error(f"--schedule: every chunk length must be at least 1, got {args.schedule}")
    steps = sum(schedule)  # per repetition
    numsteps = 2 + steps * n_chunks  # never reached: every chunk runs all its steps
    chunk_args = [jnp.asarray(c, jnp.int32) for c in schedule]

    def repetition(compiled: Any, state: Any, arrays: Any) -> Any:
        """One repetition: the schedule's chunks, each read back (its step count) as the driver does."""
        for c, n_arg in zip(schedule, chunk_args):
            state, done = compiled(state, n_arg, arrays)
            assert int(done) == c, (int(done), c)
        return state

    rows: list[dict[str, Any]] = []

    for R in sizes:
        betas = tuple(temperature_ladder(R, Tmin=1.0, Tmax=100.0))
        prepared: dict[str, list] = {}
        for v, (cls, options) in classes.items():
            opts = {"unroll": 1, **options}
            solver = cls(betas=betas, numsteps=numsteps, numsteps_exchange=args.nex, step_width=(0.5, 0.5),
                         kernel="xla", **opts)
            state = jax.jit(lambda k, s=solver: s.init(problem, k))(driver._key(0))
            arrays, static = driver._problem_arrays(problem, solver)
            t0 = time.perf_counter()
            runner = jax.jit(driver._chunk_runner(problem, solver, 0, static), donate_argnums=0)
            compiled = runner.lower(state, chunk_args[0], arrays).compile()
            t_compile = time.perf_counter() - t0
            state = repetition(compiled, state, arrays)  # warm-up
            jax.block_until_ready(state)
            prepared[v] = [compiled, state, arrays, [], t_compile]
            log(f"R={R} {short(v)}: compiled in {t_compile:.1f} s")
        for _ in range(args.reps):  # versions interleaved, chunk by chunk
            for v in versions:
                compiled, state, arrays, times, _ = prepared[v]
                t0 = time.perf_counter()
                state = repetition(compiled, state, arrays)
                jax.block_until_ready(state)
                times.append(time.perf_counter() - t0)
                prepared[v][1] = state
        same: dict[str, str] = {}
        if args.check and len(versions) > 1:
            fields = type(prepared[versions[0]][1])._fields
            ref = jax.tree_util.tree_leaves(prepared[versions[0]][1])
            for v in versions[1:]:
                differ = []
                for f, a, b in zip(fields, ref, jax.tree_util.tree_leaves(prepared[v][1])):
                    if bool(jnp.array_equal(a, b, equal_nan=True)):
                        continue
                    if jnp.issubdtype(a.dtype, jnp.floating):  # how far apart: max |a-b| and max |a-b|/|a|
                        d = jnp.where(jnp.isnan(a) & jnp.isnan(b), 0.0, jnp.abs(a - b))
                        d = jnp.where(jnp.isinf(a) & (a == b), 0.0, d)
                        rel = jnp.max(jnp.where(d > 0, d / jnp.abs(a), 0.0))
                        differ.append(f"{f} (max abs {float(jnp.max(d)):.2g}, rel {float(rel):.2g}, "
                                      f"{int(jnp.sum(d > 0))} of {a.size})")
                    else:
                        differ.append(f"{f} ({int(jnp.sum(a != b))} of {a.size})")
                same[v] = "same" if not differ else f"differs in {', '.join(differ)}"
                log(f"R={R}: state of {short(v)} after {1 + args.reps} chunks vs {short(versions[0])}: {same[v]}")
        for v in versions:
            compiled, state, arrays, times, t_compile = prepared[v]
            kernels: dict[str, dict[str, float]] = {}
            wall = 0.0
            if args.trace:
                with tempfile.TemporaryDirectory() as tmp:
                    jax.profiler.start_trace(tmp)
                    t0 = time.perf_counter()
                    state = repetition(compiled, state, arrays)
                    jax.block_until_ready(state)
                    wall = time.perf_counter() - t0
                    jax.profiler.stop_trace()
                    kernels = kernel_times(Path(tmp))
            med = statistics.median(times)
            per_step = med / steps
            busy = sum(k["ns"] for k in kernels.values()) / steps / 1e3
            row = {"version": v, "replicas": R, "ms_per_step": per_step * 1e3,
                   "ns_per_replica_step": per_step / R * 1e9, "compile_seconds": t_compile, "seconds": times,
                   "spread": (max(times) - min(times)) / med, "state_vs_first": same.get(v, ""),
                   "traced_us_per_step": wall / steps * 1e6 if wall else None,
                   "kernel_us_per_step": busy if kernels else None,
                   "launches_per_step": sum(k["n"] for k in kernels.values()) / steps if kernels else None,
                   "kernels": {k: {"us_per_step": d["ns"] / steps / 1e3, "launches_per_step": d["n"] / steps}
                               for k, d in sorted(kernels.items(), key=lambda kv: -kv[1]["ns"])}}
            rows.append(row)
            log(f"R={R} {short(v)}: {row['ms_per_step']:.3f} ms/step, {row['ns_per_replica_step']:.3f} ns per "
                f"replica-step (spread {row['spread']:.1%})")
            del prepared[v][1], state  # free the state before the next size
        prepared.clear()
        (out / "exchange_probe.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))

    per = f"chunks of {args.schedule} steps, each read back," if args.schedule else f"a chunk of {steps} steps"
    lines = [f"{per} per repetition, median of {args.reps} repetitions", "",
             "| version | replicas | ms / step | ns / replica-step | spread | compile s | state vs first version |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        lines.append(f"| {short(r['version'])} | {r['replicas']} | {r['ms_per_step']:.3f} | "
                     f"{r['ns_per_replica_step']:.3f} | {r['spread']:.1%} | {r['compile_seconds']:.1f} | "
                     f"{r['state_vs_first']} |")
    fits = {}
    for v in versions:
        rs = [r for r in rows if r["version"] == v]
        a, b = fit_line([r["replicas"] for r in rs], [r["ms_per_step"] for r in rs])
        t1 = {r["replicas"]: r["ms_per_step"] for r in rs}
        pred = {}
        for k in (2, 4):  # one device's measured time over the fit's time for B / k replicas
            for R in sorted(t1)[-2:]:
                pred[f"{k} devices at {R}"] = t1[R] / (a + b * R / k + args.collective_ms)
        fits[v] = {"fixed_ms_per_step": a, "ns_per_replica_step": b * 1e6, "predicted_speedup": pred}
        lines += ["", f"{short(v)}: fit over the sizes: {a:.4f} ms fixed per step + {b * 1e6:.4f} ns per replica-step; "
                      f"predicted speed-up (one device's time / (fit at B/k + {args.collective_ms} ms)): "
                      + ", ".join(f"{name} {s:.2f}x" for name, s in pred.items())]
    if args.trace:
        for r in rows:
            lines += ["", f"{short(r['version'])} R={r['replicas']}: kernels (us / step, launches / step)"]
            if r["kernel_us_per_step"] is None:  # a CPU run: no GPU plane in the trace
                lines.append(f"  traced chunk {r['traced_us_per_step']:.0f} us / step; no device kernels in the trace")
                continue
            idle = r["traced_us_per_step"] - r["kernel_us_per_step"]
            lines.append(f"  traced chunk {r['traced_us_per_step']:.0f} us / step, kernels {r['kernel_us_per_step']:.0f} us"
                         f" in {r['launches_per_step']:.1f} launches (idle {idle:.0f} us)")
            for name, k in list(r["kernels"].items())[:16]:
                lines.append(f"  {k['us_per_step']:9.1f} {k['launches_per_step']:5.2f}  {name[:90]}")
    md = "\n".join([f"## mw.Exchange XLA form per step ({env['device']}, {env['date']}, JAX {env['jax']})", ""] + lines)
    (out / "exchange_probe.json").write_text(json.dumps({"environment": env, "rows": rows, "fits": fits}, indent=1))
    (out / "exchange_probe.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
