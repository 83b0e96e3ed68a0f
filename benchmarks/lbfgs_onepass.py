#!/usr/bin/env python
"""L-BFGS with one kernel per line-search evaluation (``LBFGS(kernel="onepass")``) against the two-pass form.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python3 benchmarks/lbfgs_onepass.py --out "$OUT" --budget-seconds 250          # GPU, ~4 min
    PYTHONPATH=src python3 benchmarks/lbfgs_onepass.py --device cpu --n 2e4 --check-n 2000 --large-n 0 \\
        --f32-n 0 --reps 1 --trips 2 --launches 32x4x2 --no-optax                               # smoke (interpret)

The two-pass fused form (``kernel="pallas"``; the default before) reads the 2m stored vectors
twice per iteration (pass A, pass B: ~39 n values per iteration, plus 3 n per extra evaluation).
``kernel="onepass"`` reads them once per line-search EVALUATION, with the direction formed in
registers and f and g evaluated on each column block (``value_and_grad.block``): (2m + 2) n
read, 3 n written, 19 n at m = 7.  In one run:

* bandwidth: PyTorch's device-to-device copy (read + write; the floor uses it);
* the kernel alone per call inside one jitted ``fori_loop`` (``lbfgs_common.device_time``) for
  each ``--launches`` (rows x warps x chunks), its sums checked against the first launch's;
* whole solves of Extended Rosenbrock at ``--n`` (1e7 float64), ``--large-n`` (5e7) and
  ``--f32-n`` (1e7 float32): two-pass, onepass, auto (the default) and onepass at
  ``--solve-launch`` if given, each compiled first, then interleaved reps; the check: same
  iterations, evaluations and status as two-pass, f within ``--f-rtol``;
* the seed's 37 iterations / 51 evaluations / f = 6.752e-10 at ``--check-n`` (1e6), both forms;
* optax.lbfgs(memory_size=7) with the same f and g and stop rule, once, at ``--n``.

Floors: onepass moves 19 n values per evaluation (``evals x 19 n``); the two-pass design's floor is
38 n per iteration plus 4 n per extra evaluation (docs/benchmarks.md).  Partial results are
written after every stage (``lbfgs_onepass.json`` / ``.md``).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import lbfgs_common as lc  # noqa: E402 - timing, bandwidth, interleaved solves, seed check, optax
from lbfgs_common import FLOOR_VALUES, M  # noqa: E402

EPS = lc.EPS
ONEPASS_VALUES = 2 * M + 5  # n values per evaluation: (2m + 2) read, 3 written


def kernel_times(n: int, dtype: str, launches: list[tuple[int, ...]], trips: int, interpret: bool, log) -> list[dict]:
    """The one-pass kernel alone per call at each launch (rows, warps, chunks); ``rel_diff``: the
    largest relative difference of its sums from the first launch's (another summation order)."""
    import jax
    import jax.numpy as jnp

    from multiwalk.functions import cute_kernel
    from multiwalk.solvers import lbfgs_onepass as op

    dt = jnp.dtype(dtype)
    k = jax.random.split(jax.random.PRNGKey(0), 4)
    X = 1.0 + 0.1 * jax.random.normal(k[0], (2, n), dt)
    G = jax.random.normal(k[1], (M + 2, n), dt)
    S = 0.01 * jax.random.normal(k[2], (M + 1, n), dt)
    w = 0.1 * jax.random.normal(k[3], (2 * M,), dt)
    it = jnp.asarray(20, jnp.int32)  # a full window, the rings wrapped
    ints, floats = op.ring_rows(it, it % M, jnp.asarray(M, jnp.int32), w, jnp.asarray(0.9, dt), jnp.asarray(0.5, dt), M)
    out, first = [], None
    for launch in launches:
        rows, warps, chunks = launch
        kw = {"rows": rows, "num_warps": warps, "chunks": chunks, "interpret": interpret}

        def call(c, data, kw=kw):
            X, G, S, acc = c
            X, G, S, sums = op.line_pass(X, G, S, data[0], data[1], cute_kernel.rosenbrock_block, **kw)
            return X, G, S, acc + sums

        try:
            sums = jax.jit(lambda X, G, S, i, f, kw=kw: op.line_pass(X, G, S, i, f, cute_kernel.rosenbrock_block, **kw)[3])(
                X * 1.0, G * 1.0, S * 1.0, ints, floats)
            first = sums if first is None else first
            rel = float(jnp.max(jnp.abs(sums - first) / jnp.maximum(jnp.abs(first), 1e-300)))
            sec = lc.device_time(call, (X * 1.0, G * 1.0, S * 1.0, jnp.zeros(64, dt)), (ints, floats), trips)
            out.append({"launch": "x".join(map(str, launch)), "seconds": sec, "rel_diff": rel})
            log(f"kernel {out[-1]['launch']}: {sec * 1e3:.4f} ms per call, sums rel diff {rel:.1e}")
        except Exception as e:  # noqa: BLE001 - report it, time the other launches
            out.append({"launch": "x".join(map(str, launch)), "error": f"{type(e).__name__}: {str(e)[:600]}"})
            log(f"kernel {out[-1]['launch']} FAILED: {out[-1]['error']}")
    return out


def forms(mw, solve_launch: tuple[int, ...] | None, auto: bool = True) -> dict[str, Any]:
    """``two-pass`` (kernel="pallas": the fused passes A and B, the default before), ``onepass``,
    ``auto`` (the default now: onepass on one GPU in float64, else two-pass), and onepass at
    ``solve_launch`` (rows x warps)."""
    out = {"two-pass": mw.LBFGS(m=M, eps=EPS, kernel="pallas"), "onepass": mw.LBFGS(m=M, eps=EPS, kernel="onepass")}
    if auto:
        out["auto"] = mw.LBFGS(m=M, eps=EPS)
    if solve_launch:
        rows, warps = solve_launch[:2]
        from multiwalk.solvers import lbfgs_onepass

        out[f"onepass {rows}x{warps}x{lbfgs_onepass.CHUNKS}"] = mw.LBFGS(m=M, eps=EPS, kernel="onepass", kernel_block=2 * rows,
                                                   kernel_warps=warps)
    return out


def whole_solves(mw, n: int, dtype: str, reps: int, solve_launch, f_rtol: float, log, budget) -> dict:
    problem = lc.rosenbrock_problem(mw, n, dtype)
    rows = lc.interleaved_solves(mw, {name: (problem, s) for name, s in forms(mw, solve_launch).items()}, reps, log,
                                 f"n={n:.0e} {dtype}", budget)
    for o in rows.values():
        if "error" not in o:
            o["ok"] = o["same_counts"] and o["f_rel_diff"] <= f_rtol
    return rows


def chunk_hlo(mw, n: int, dtype: str) -> dict:
    """Per form: copies of n-sized arrays, fusions and custom calls in the optimized HLO of one chunk at ``n``."""
    import re

    import jax
    import jax.numpy as jnp

    problem = lc.rosenbrock_problem(mw, n, dtype)
    out = {}
    for name, solver in forms(mw, None, auto=False).items():
        state = solver.init(problem, jax.random.PRNGKey(0))
        text = jax.jit(lambda s, k, solver=solver: solver.run_chunk(problem, s, 0, k), donate_argnums=0).lower(
            state, jnp.asarray(1, jnp.int32)).compile().as_text()
        big = re.compile(rf"= [a-z0-9]+\[(?:\d+,)*{n}(?:,\d+)*\]" + r"\{[^}]*\} copy\(")
        copies = [line.strip()[:160] for line in text.splitlines() if big.search(line)]
        out[name] = {"n_copies": len(copies), "copies": copies, "fusions": len(re.findall(r" fusion\(", text)),
                     "custom_calls": len(re.findall(r" custom-call\(", text)), "hlo_chars": len(text)}
    return out


def table(report: dict) -> str:
    env, bw = report["environment"], report["bandwidth"]
    lines = [f"L-BFGS one pass per evaluation (kernel='onepass') vs the two-pass form; Extended Rosenbrock, m = {M}; "
             f"{env['device']}, {env['date']}, JAX {env['jax']}; {'PyTorch' if report['torch_copy'] else 'XLA'} copy "
             f"bandwidth {bw / 1e9:.0f} GB/s of this run.  Floors: onepass {ONEPASS_VALUES} n per evaluation; the "
             f"two-pass design {FLOOR_VALUES} n per iteration + 4 n per extra evaluation.", ""]
    kt = report.get("kernel", [])
    if kt:
        item = 8 if report["dtype"] == "float64" else 4
        floor = ONEPASS_VALUES * report["n"] * item / bw
        lines += [f"Kernel alone at n = {report['n']:.0e} {report['dtype']} (floor {floor * 1e3:.4f} ms):", "",
                  "| launch (rows x warps x chunks) | ms per call | x floor | sums rel diff |", "| --- | --- | --- | --- |"]
        for o in kt:
            if "seconds" in o:
                lines.append(f"| {o['launch']} | {o['seconds'] * 1e3:.4f} | {o['seconds'] / floor:.2f} | {o['rel_diff']:.0e} |")
            else:
                lines.append(f"| {o['launch']} | failed: {o['error'][:100]} | | |")
        lines.append("")
    opt = report.get("optax", {})
    lines += ["| dtype | n | form | ms (median) | min ms | reps | it / evals | per it ms | run floor ms | x run floor "
              "| two-pass design floor ms | same counts, f rel diff | optax ms (it) | optax / ours |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, n, dtype in (("solves", report["n"], report["dtype"]), ("large", report.get("large_n"), report["dtype"]),
                          ("f32", report.get("f32_n"), "float32")):
        item = 8 if dtype == "float64" else 4
        for name, o in report.get(key, {}).items():
            if "seconds" not in o:
                lines.append(f"| {dtype} | {n:.0e} | {name} | failed: {o.get('error', 'no timed reps')[:80]} "
                             "| | | | | | | | | | |")
                continue
            it, ev = o["iterations"], o["nfev"]
            per = o["seconds"] / max(it, 1)
            design = (FLOOR_VALUES * it + 4 * (ev - 1 - it)) * n * item / bw
            floor = ev * ONEPASS_VALUES * n * item / bw if o["kernel"].startswith("onepass") else design
            ot, ratio = lc.optax_cells(opt if key == "solves" else None, o["seconds"])
            lines.append(f"| {dtype} | {n:.0e} | {name} ({o['kernel']}) | {o['seconds'] * 1e3:.2f} | "
                         f"{o['min_seconds'] * 1e3:.2f} | "
                         f"{len(o['times'])} | {it} / {ev} | {per * 1e3:.4f} | {floor * 1e3:.2f} | "
                         f"{o['seconds'] / floor:.3f} | {design * 1e3:.2f} | {o['same_counts']}, {o['f_rel_diff']:.0e} "
                         f"| {ot} | {ratio} |")
    lines += lc.seed_check_lines(report.get("seed_check", {}), report["check_n"])
    for name, h in report.get("hlo", {}).items():
        lines.append(f"- HLO of one chunk at n = {report['hlo_n']}, {name}: {h['n_copies']} copies of n-sized arrays, "
                     f"{h['fusions']} fusions, {h['custom_calls']} custom calls")
        lines += [f"  - `{c}`" for c in h["copies"][:6]]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = common.new_parser(__doc__)
    common.add_out_option(p, "lbfgs_onepass")
    p.add_argument("--n", type=float, default=1e7)
    p.add_argument("--large-n", type=float, default=5e7, help="a second size with fewer reps (0: none)")
    p.add_argument("--f32-n", type=float, default=1e7, help="a float32 size (0: none)")
    p.add_argument("--check-n", type=float, default=1e6, help="n of the seed check (37 it / 51 evals; 0: none)")
    p.add_argument("--dtype", default="float64")
    p.add_argument("--hlo-n", type=float, default=2 ** 20, help="n of the HLO count (0: none)")
    p.add_argument("--launches", default="32x1x32,32x1x16,32x1x64,16x1x64,16x1x32,32x2x32,64x2x16,32x1x128",
                   help="kernel launches rows x warps x chunks to time alone (the first is the reference)")
    p.add_argument("--chunks", type=int, default=None, help="lbfgs_onepass.CHUNKS for the solves")
    p.add_argument("--solve-launch", default="", help="also solve onepass at rows x warps (kernel_block = 2 rows)")
    p.add_argument("--trips", type=int, default=50, help="calls per jitted fori_loop for the kernel alone")
    p.add_argument("--reps", type=int, default=7, help="timed whole solves of each form at --n")
    p.add_argument("--large-reps", type=int, default=5)
    p.add_argument("--no-optax", action="store_true")
    p.add_argument("--skip-kernel", action="store_true")
    p.add_argument("--f-rtol", type=float, default=1e-6, help="f of onepass vs the default, relative")
    p.add_argument("--budget-seconds", type=float, default=240.0, help="start no new stage after this many seconds")
    begun = lc.begin(p)
    if begun is None:
        return 2
    args, start, bw, torch_bw, xla_bw = begun
    import multiwalk as mw
    from multiwalk.solvers import lbfgs_onepass

    if args.chunks:
        lbfgs_onepass.CHUNKS = args.chunks
    log, env, on_gpu = start.log, start.env, start.on_gpu
    n, check_n = int(args.n), int(args.check_n)
    budget = lc.budget_clock(start.t_start, args.budget_seconds)
    solve_launch = lc.parse_launches(args.solve_launch)[0] if args.solve_launch else None
    report: dict[str, Any] = {"environment": env, "bandwidth": bw, "torch_copy": torch_bw is not None, "xla_copy": xla_bw,
                              "n": n, "check_n": check_n, "dtype": args.dtype, "large_n": int(args.large_n),
                              "f32_n": int(args.f32_n), "hlo_n": int(args.hlo_n), "chunks": lbfgs_onepass.CHUNKS,
                              "defaults": [lbfgs_onepass.ROWS, lbfgs_onepass.WARPS, lbfgs_onepass.CHUNKS]}
    out = Path(args.out)

    def save() -> str:
        md = table(report)
        common.write_report(out, "lbfgs_onepass", report, md)
        return md

    if not args.skip_kernel:
        report["kernel"] = kernel_times(n, args.dtype, lc.parse_launches(args.launches), args.trips, not on_gpu, log)
        save()
    if check_n and not budget():
        report["seed_check"] = lc.seed_check(mw, lc.rosenbrock_problem(mw, check_n, args.dtype),
                                             forms(mw, None), log, budget)
        save()
    report["solves"] = whole_solves(mw, n, args.dtype, args.reps, solve_launch, args.f_rtol, log, budget)
    save()
    if not args.no_optax and not budget():
        report["optax"] = lc.optax_row(n, args.dtype, log)
        save()
    if args.large_n and not budget():
        report["large"] = whole_solves(mw, int(args.large_n), args.dtype, args.large_reps, solve_launch, args.f_rtol,
                                       log, budget)
        save()
    if args.f32_n and not budget():
        report["f32"] = whole_solves(mw, int(args.f32_n), "float32", args.large_reps, solve_launch, args.f_rtol, log,
                                     budget)
    if args.hlo_n and not budget():
        try:
            report["hlo"] = chunk_hlo(mw, int(args.hlo_n), args.dtype)
            log("HLO: " + ", ".join(f"{k} {v['n_copies']} n-copies / {v['fusions']} fusions / {v['custom_calls']} "
                                    "custom calls" for k, v in report["hlo"].items()))
        except Exception as e:  # noqa: BLE001
            log(f"HLO count FAILED: {type(e).__name__}: {str(e)[:400]}")
    md = save()
    times = [o["seconds"] for o in report.get("kernel", []) if "seconds" in o]
    if times:
        log(f"kernel alone: fastest {min(times) * 1e3:.4f} ms, median {statistics.median(times) * 1e3:.4f} ms")
    common.print_done(log, out, "lbfgs_onepass", start.t_start, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
