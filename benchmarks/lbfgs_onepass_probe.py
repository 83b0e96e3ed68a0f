#!/usr/bin/env python
"""Where the one-pass L-BFGS loop's time outside its kernel goes, and variants of its compiled chunk.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python3 benchmarks/lbfgs_onepass_probe.py --out "$OUT"                          # GPU, ~3 min
    PYTHONPATH=src python3 benchmarks/lbfgs_onepass_probe.py --device cpu --n 2e4 --reps 1 \\
        --variants before,chrono --no-trace                                                          # smoke (interpret)

``LBFGS(kernel="onepass")`` on Extended Rosenbrock (``--n``, float64): the chunk the driver runs
(``solver.run_chunk``, jitted as ``solve`` does, the state donated) compiled once per variant
(:data:`VARIANTS`): the small matrices' order (``lbfgs_onepass.SMALL_ORDER``: ``ring`` as
measured at 22:58 UTC, or ``chronological``, every index of the accepting branch static) and the
XLA command-buffer types (``compile(compiler_options={"xla_gpu_enable_command_buffer": ...})``:
XLA's default, none, or with WHILE / CONDITIONAL: the loop as one CUDA graph, no host round trip
per trip).  ``chrono`` is today's default (XLA's default command buffers).

Per variant: the whole solve in ONE chunk call (``loop``) and as the driver runs it (``driver``:
chunks of 1, 2, 4, ... iterations, each synchronised, as ``solve``'s doubling does), interleaved
reps, medians; iterations / evaluations / status / f against the first variant.  ``--trace``: a
``jax.profiler`` trace of each mode per traced variant, parsed from its xplane
(``jax.profiler.ProfileData``): per GPU kernel the count and time, the GPU-busy time and the gaps
between kernels; the host's events by total time.  Then whole ``mw.solve`` runs of
:data:`SOLVE_VARIANTS` at ``--n`` (interleaved), the seed check at ``--check-n`` and ``--large-n``.
"""

from __future__ import annotations

import glob
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import lbfgs_common as lc  # noqa: E402

CB = "FUSION,CUSTOM_CALL,WHILE,CONDITIONAL"  # for lbfgs_onepass.COMMAND_BUFFERS (off by default)
ALL_TYPES = "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,DYNAMIC_SLICE_FUSION"  # XLA's default list (jax 0.11)
# name: (lbfgs_onepass.SMALL_ORDER, xla_gpu_enable_command_buffer or None for XLA's default)
VARIANTS: dict[str, tuple[str, str | None]] = {
    "before": ("ring", None),  # the one-pass loop as measured at 22:58 UTC
    "chrono": ("chronological", None),  # the default since 23:25 UTC
    "cb-off": ("chronological", ""),
    "chrono+cb": ("chronological", CB),  # named "committed" in the 23:21 run (1e55337's default)
    "ring+cb": ("ring", CB),
    "chrono+cb-all-types": ("chronological", ALL_TYPES + ",WHILE,CONDITIONAL"),  # the 23:15 run's list
    "cb-plus": ("chronological", "+WHILE,+CONDITIONAL"),  # refused by jax 0.11's XLA (23:15 UTC)
}


def compile_variant(mw, problem, solver, state, order: str, cb: str | None) -> Any:
    import jax
    import jax.numpy as jnp

    from multiwalk.solvers import lbfgs_onepass

    saved = lbfgs_onepass.SMALL_ORDER
    lbfgs_onepass.SMALL_ORDER = order  # read while tracing: a fresh jit traces again
    try:
        lowered = jax.jit(lambda s, k: solver.run_chunk(problem, s, 0, k), donate_argnums=0).lower(
            state, jnp.asarray(1, jnp.int32))
        return lowered.compile() if cb is None else lowered.compile(compiler_options={"xla_gpu_enable_command_buffer": cb})
    finally:
        lbfgs_onepass.SMALL_ORDER = saved


def outcome(out) -> dict:
    st = out.starts
    return {"nfev": int(st.nfev[0]), "status": int(st.status[0]), "f": float(st.f[0]), "iteration": int(st.iteration[0])}


def run_loop(compiled, fresh, limit: int) -> tuple[float, dict]:
    """The whole solve in one call: seconds, outcome."""
    import jax
    import jax.numpy as jnp

    state = fresh()
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    out, n_run = compiled(state, jnp.asarray(limit, jnp.int32))
    jax.block_until_ready(out)
    dt = time.perf_counter() - t0
    return dt, {**outcome(out), "iterations": int(n_run)}


def run_driver(compiled, fresh, limit: int) -> tuple[float, dict, int]:
    """As solve's loop: chunks of 1, 2, 4, ... iterations, each synchronised and its count read."""
    import jax
    import jax.numpy as jnp

    state = fresh()
    jax.block_until_ready(state)
    total, done, n, chunks = 0.0, 0, 1, 0
    while done < limit:
        t0 = time.perf_counter()
        state, n_run = compiled(state, jnp.asarray(n, jnp.int32))
        jax.block_until_ready(state)
        total += time.perf_counter() - t0
        n_run = int(n_run)
        done += n_run
        chunks += 1
        if n_run < n:
            break
        n = 2 * n
    return total, {**outcome(state), "iterations": done}, chunks


def analyse_trace(path: str, nfev: int) -> dict:
    """GPU kernels of one xplane: per name count, total and mean us; busy time, gaps."""
    from jax.profiler import ProfileData

    data = ProfileData.from_file(path)
    lines_seen, events = [], []
    for plane in data.planes:
        if "GPU" not in plane.name:
            continue
        for line in plane.lines:
            evs = [(e.name, e.start_ns, e.duration_ns) for e in line.events]
            lines_seen.append(f"{plane.name} / {line.name}: {len(evs)}")
            if line.name.startswith("Stream") or "stream" in line.name.lower():
                events += evs
    events.sort(key=lambda e: e[1])
    by_name: dict[str, list[float]] = {}
    for name, _, dur in events:
        by_name.setdefault(name, []).append(dur / 1e3)
    gaps, busy, end = [], 0.0, None
    for _, start, dur in events:
        if end is not None and start > end:
            gaps.append((start - end) / 1e3)
        busy += dur / 1e3
        end = max(end or 0, start + dur)
    span = (events[-1][1] + events[-1][2] - events[0][1]) / 1e3 if events else 0.0
    kernels = sorted(({"name": k[:90], "count": len(v), "per_eval": len(v) / max(nfev, 1), "total_us": sum(v),
                       "mean_us": sum(v) / len(v)} for k, v in by_name.items()), key=lambda o: -o["total_us"])
    big = [g for g in gaps if g > 5.0]
    return {"lines": lines_seen, "n_events": len(events), "span_us": span, "busy_us": busy, "gap_us": sum(gaps),
            "n_gaps": len(gaps), "gaps_over_5us": len(big), "gap_over_5us_total": sum(big),
            "gap_median_us": statistics.median(gaps) if gaps else 0.0, "kernels": kernels}


def host_events(path: str, top: int = 20) -> list[dict]:
    """The host planes' events by total time (XLA's runtime, Python's dispatch): name, count, total us."""
    from jax.profiler import ProfileData

    totals: dict[str, list[float]] = {}
    for plane in ProfileData.from_file(path).planes:
        if "GPU" in plane.name:
            continue
        for line in plane.lines:
            for e in line.events:
                totals.setdefault(e.name, []).append(e.duration_ns / 1e3)
    rows = sorted(({"name": k[:90], "count": len(v), "total_us": sum(v)} for k, v in totals.items()),
                  key=lambda o: -o["total_us"])
    return rows[:top]


def trace_variant(compiled, fresh, limit: int, where: Path, driver: bool = False) -> str | None:
    import jax

    where.mkdir(parents=True, exist_ok=True)
    with jax.profiler.trace(str(where)):
        (run_driver if driver else run_loop)(compiled, fresh, limit)
    found = sorted(glob.glob(str(where / "**" / "*.xplane.pb"), recursive=True))
    return found[-1] if found else None


SOLVE_VARIANTS = {name: VARIANTS[name] for name in ("before", "chrono", "chrono+cb")}  # whole mw.solve runs


def solve_as(mw, problem, solver, name: str, caches: dict) -> Any:
    """``mw.solve`` with variant ``name``'s settings; each variant keeps its own compiled loops
    (SMALL_ORDER is not part of the driver's cache key; the command buffers are)."""
    from multiwalk.solvers import lbfgs_onepass

    driver = sys.modules["multiwalk.solve"]
    saved = lbfgs_onepass.SMALL_ORDER, lbfgs_onepass.COMMAND_BUFFERS, driver._COMPILED
    lbfgs_onepass.SMALL_ORDER, lbfgs_onepass.COMMAND_BUFFERS = SOLVE_VARIANTS[name]
    driver._COMPILED = caches.setdefault(name, {})
    try:
        return mw.solve(problem, solver, progress=False)
    finally:
        lbfgs_onepass.SMALL_ORDER, lbfgs_onepass.COMMAND_BUFFERS, driver._COMPILED = saved


def solve_stage(mw, n: int, dtype: str, names: list[str], reps: int, log, budget) -> dict:
    """Whole solves of each variant at ``n``: first call (compile; counts), then interleaved timed reps
    (``stats["run_seconds"]``), medians; counts and f against the first variant."""
    problem = lc.rosenbrock_problem(mw, n, dtype)
    solver = mw.LBFGS(m=lc.M, eps=lc.EPS, kernel="onepass")
    caches: dict = {}
    rows: dict[str, dict] = {}
    for name in names:
        if budget():
            break
        try:
            t0 = time.perf_counter()
            r = solve_as(mw, problem, solver, name, caches)
            rows[name] = {"iterations": r.iterations, "nfev": r.nfev, "status": r.status.name, "f": float(r.fun),
                          "kernel": r.stats["kernel"], "first_s": time.perf_counter() - t0, "times": []}
        except Exception as e:  # noqa: BLE001
            rows[name] = {"error": f"{type(e).__name__}: {str(e)[:600]}"}
            log(f"solve {name} n={n:.0e}: FAILED {rows[name]['error']}")
    alive = [k for k, v in rows.items() if "error" not in v]
    for _ in range(reps):
        if budget():
            break
        for name in alive:
            rows[name]["times"].append(solve_as(mw, problem, solver, name, caches).stats["run_seconds"])
    base = rows.get(names[0], {})
    for name in alive:
        o = rows[name]
        if o["times"]:
            o["ms"], o["min_ms"] = statistics.median(o["times"]) * 1e3, min(o["times"]) * 1e3
        o["same_counts"] = all(o[k] == base.get(k) for k in ("iterations", "nfev", "status"))
        o["f_rel_diff"] = abs(o["f"] - base.get("f", o["f"])) / max(abs(base.get("f", o["f"])), 1e-300)
        log(f"solve {name:>10} n={n:.0e}: {o.get('ms', float('nan')):.2f} ms (min {o.get('min_ms', float('nan')):.2f}, "
            f"{len(o['times'])} reps) {o['iterations']} it / {o['nfev']} ev {o['status']} f {o['f']:.6e}; same counts "
            f"{o['same_counts']}, f rel diff {o['f_rel_diff']:.1e}")
    return rows


def main() -> int:
    p = common.new_parser(__doc__)
    common.add_out_option(p, "lbfgs_onepass_probe")
    p.add_argument("--n", type=float, default=1e7)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--variants", default="before,chrono,cb-off,chrono+cb,ring+cb")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--limit", type=int, default=2000, help="iterations per one-call loop (the solve ends first)")
    p.add_argument("--trace", default="before,chrono", help="variants to trace (one-call loop and driver)")
    p.add_argument("--no-trace", action="store_true")
    p.add_argument("--budget-seconds", type=float, default=200.0)
    p.add_argument("--solve-variants", default=",".join(SOLVE_VARIANTS), help="whole mw.solve variants ('' none)")
    p.add_argument("--solve-reps", type=int, default=7)
    p.add_argument("--check-n", type=float, default=1e6, help="the seed check's n (37 it / 51 ev; 0 none)")
    p.add_argument("--large-n", type=float, default=5e7, help="one more size, 2 reps (0 none)")
    p.add_argument("--optax", action="store_true", help="optax.lbfgs once at --n (last)")
    args = p.parse_args()
    common.select_platform(args.device)
    import jax

    jax.config.update("jax_enable_x64", True)
    start = common.start_run(args.device, quick=False)
    if start is None:
        return 2
    log = start.log
    log(f"device {start.env['device']}, jax {start.env['jax']}")
    budget = lc.budget_clock(start.t_start, args.budget_seconds)
    import multiwalk as mw

    n = int(args.n)
    problem = lc.rosenbrock_problem(mw, n, args.dtype)
    solver = mw.LBFGS(m=lc.M, eps=lc.EPS, kernel="onepass")
    state0 = solver.init(problem, jax.random.PRNGKey(0))
    jax.block_until_ready(state0)

    def fresh():  # the chunk donates its state
        return jax.tree.map(lambda a: a.copy(), state0)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"environment": start.env, "n": n, "dtype": args.dtype, "variants": {}}
    compiled = {}
    for name in args.variants.split(","):
        order, cb = VARIANTS[name]
        row = report["variants"].setdefault(name, {"order": order, "command_buffers": cb})
        try:
            t0 = time.perf_counter()
            compiled[name] = compile_variant(mw, problem, solver, state0, order, cb)
            row["compile_s"] = time.perf_counter() - t0
            dt, res = run_loop(compiled[name], fresh, args.limit)  # first call: warms up, checks
            row["first"] = res
            log(f"{name}: compiled in {row['compile_s']:.1f} s; first loop {dt * 1e3:.2f} ms, {res}")
        except Exception as e:  # noqa: BLE001 - report it, go on with the others
            row["error"] = f"{type(e).__name__}: {str(e)[:800]}"
            compiled.pop(name, None)
            log(f"{name}: FAILED {row['error']}")
    base = report["variants"].get(args.variants.split(",")[0], {}).get("first")
    for row in report["variants"].values():
        if "first" in row and base:
            r = row["first"]
            row["same_counts"] = all(r[k] == base[k] for k in ("iterations", "nfev", "status"))
            row["f_rel_diff"] = abs(r["f"] - base["f"]) / max(abs(base["f"]), 1e-300)
    loops = {k: [] for k in compiled}
    drivers = {k: [] for k in compiled}
    for rep in range(args.reps):
        if budget():
            log(f"reps cut at {rep} by the budget")
            break
        for name, c in compiled.items():
            loops[name].append(run_loop(c, fresh, args.limit)[0])
            dt, _, chunks = run_driver(c, fresh, args.limit)
            drivers[name].append(dt)
            report["variants"][name]["driver_chunks"] = chunks
    for name in compiled:
        row = report["variants"][name]
        row["loop_times"], row["driver_times"] = loops[name], drivers[name]
        if loops[name]:
            row["loop_ms"] = statistics.median(loops[name]) * 1e3
            row["driver_ms"] = statistics.median(drivers[name]) * 1e3
    common.write_report(out, "lbfgs_onepass_probe", report, "")
    if not args.no_trace:
        for name in args.trace.split(","):
            if name not in compiled or budget():
                continue
            try:
                for mode in ("loop", "driver"):
                    path = trace_variant(compiled[name], fresh, args.limit, out / "trace" / f"{name}-{mode}",
                                         driver=mode == "driver")
                    if path:
                        t = analyse_trace(path, report["variants"][name]["first"]["nfev"])
                        t["host"] = host_events(path)
                        report["variants"][name]["trace" if mode == "loop" else "trace_driver"] = t
            except Exception as e:  # noqa: BLE001
                report["variants"][name]["trace_error"] = f"{type(e).__name__}: {str(e)[:500]}"
                log(f"trace {name} FAILED: {report['variants'][name]['trace_error']}")
    lines = [f"one-pass L-BFGS chunk variants, Extended Rosenbrock n = {n:.0e} {args.dtype}, {start.env['device']}, "
             f"{start.env['date']}", "", "| variant | loop ms (median) | min | driver ms (median) | min | chunks | "
             "it / evals / status | same counts, f rel diff | compile s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, row in report["variants"].items():
        if "loop_ms" not in row:
            lines.append(f"| {name} | {row.get('error', 'no reps')[:200]} | | | | | | | |")
            continue
        r = row["first"]
        lines.append(f"| {name} | {row['loop_ms']:.2f} | {min(row['loop_times']) * 1e3:.2f} | {row['driver_ms']:.2f} | "
                     f"{min(row['driver_times']) * 1e3:.2f} | {row.get('driver_chunks')} | {r['iterations']} / {r['nfev']} / "
                     f"{r['status']} | {row.get('same_counts')}, {row.get('f_rel_diff', 0):.1e} | {row['compile_s']:.1f} |")
    for (name, row), key in [(item, key) for item in report["variants"].items() for key in ("trace", "trace_driver")]:
        t = row.get(key)
        if not t:
            continue
        ev = row["first"]["nfev"]
        lines += ["", f"{key} {name}: {t['n_events']} GPU events ({t['n_events'] / ev:.1f} per evaluation), span "
                  f"{t['span_us'] / 1e3:.2f} ms, busy {t['busy_us'] / 1e3:.2f} ms, gaps {t['gap_us'] / 1e3:.2f} ms in "
                  f"{t['n_gaps']} (median {t['gap_median_us']:.1f} us; {t['gaps_over_5us']} over 5 us = "
                  f"{t['gap_over_5us_total'] / 1e3:.2f} ms)", "", "| kernel | count | per eval | total us | mean us |",
                  "| --- | --- | --- | --- | --- |"]
        lines += [f"| {k['name']} | {k['count']} | {k['per_eval']:.2f} | {k['total_us']:.0f} | {k['mean_us']:.2f} |"
                  for k in t["kernels"][:25]]
        lines.append("lines: " + "; ".join(t["lines"][:12]))
        lines.append("host: " + "; ".join(f"{h['name']} {h['count']}x {h['total_us']:.0f} us" for h in t["host"][:14]))
    solve_names = [v for v in args.solve_variants.split(",") if v]
    if solve_names:
        for key, size, reps in (("solves", n, args.solve_reps), ("seed_check", int(args.check_n), 0),
                                ("large", int(args.large_n), 2)):
            if size and not budget():
                report[key] = solve_stage(mw, size, args.dtype, solve_names, reps, log, budget)
                common.write_report(out, "lbfgs_onepass_probe", report, "")
        for key, size in (("solves", n), ("seed_check", int(args.check_n)), ("large", int(args.large_n))):
            if key not in report:
                continue
            lines += ["", f"whole mw.solve, n = {size:.0e} ({key}):", "",
                      "| variant | ms (median) | min | reps | it / evals | status | f | same counts, f rel diff |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- |"]
            for name, o in report[key].items():
                if "error" in o:
                    lines.append(f"| {name} | {o['error'][:200]} | | | | | | |")
                    continue
                lines.append(f"| {name} | {o.get('ms', float('nan')):.2f} | {o.get('min_ms', float('nan')):.2f} | "
                             f"{len(o['times'])} | {o['iterations']} / {o['nfev']} | {o['status']} | {o['f']:.6e} | "
                             f"{o['same_counts']}, {o['f_rel_diff']:.1e} |")
    if args.optax and not budget():
        report["optax"] = lc.optax_row(n, args.dtype, log)
        lines.append(f"\noptax: {report['optax']}")
    md = "\n".join(lines) + "\n"
    common.write_report(out, "lbfgs_onepass_probe", report, md)
    print(md)
    (out / "lbfgs_onepass_probe.full.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
