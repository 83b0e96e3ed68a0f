#!/usr/bin/env python
"""L-BFGS's fused passes tuned with device-side timing, then whole solves with each candidate launch.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python3 benchmarks/lbfgs_tune.py --out "$OUT" --budget-seconds 175          # GPU, ~3 min
    PYTHONPATH=src python3 benchmarks/lbfgs_tune.py --device cpu --n 2e4 --check-n 2000 --reps 2 --trips 2 \\
        --a-configs 1024x4x1x1,256x4x4x1 --b-configs 1024x4 --kernel pallas                  # smoke (interpret)

In one run, at one ``n`` (default 1e7) and dtype (float64), m = 7:

* bandwidth: PyTorch's device-to-device copy (read + write; the floor uses it, as in the LBFGS
  section of docs/benchmarks.md);
* pass A (``lbfgs_kernel.pair_products`` as the solver calls it: the trial point ``x + stp d``
  formed in the kernel and written over ``x``) for each ``block x warps x chunks x stages``, and
  pass B (``direction_and_store``) for each ``block x warps``, each checked against the default
  launch and timed per call inside ONE jitted ``fori_loop`` of ``--trips`` calls (no host round
  trips; host timing of one call was too noisy), with its floor: pass A reads 12 stored rows
  and gt, g, d, x and writes x (17 n values), pass B reads 12 rows and gt, g, d and writes d, g
  and the new pair (19 n);
* whole solves of Extended Rosenbrock (cute's analytic f and g with the one-pass line-search
  kernel, as ``multiwalk lbfgs`` runs them) for the default launch and the candidates the sweeps
  found (each an ``LBFGS`` whose ``_config`` sets pass A's and B's launch), compiled first, then
  ``--reps`` calls of each, interleaved, median of ``stats["run_seconds"]``; the check: the same
  iterations, evaluations and status as the default, f within ``--f-rtol``; and at ``--check-n``
  (1e6) the seed's 37 iterations / 51 evaluations / f = 6.752e-10 for the default and the fastest;
* optax.lbfgs(memory_size=7) with the same f and g and stop rule, once (median of 3 calls).

Partial results are written after every stage (``lbfgs_tune.json`` / ``.md``).
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import lbfgs as bench  # noqa: E402 - benchmarks/lbfgs.py: optax's run and the PyTorch copy bandwidth

M = 7
EPS = 1e-5
A_BYTES = 17  # n values pass A moves (12 stored rows, gt, g, d, x read; x written)
B_BYTES = 19  # pass B: 12 rows, gt, g, d read; d, g, s, y written
SEED = {"iterations": 37, "nfev": 51, "f": 6.752e-10}  # the seed's printout at n = 1e6, m = 7


def device_time(fn, carry, data, trips: int, reps: int = 5) -> float:
    """Seconds per call of ``carry = fn(carry, data)``: median of ``reps`` runs of one jitted fori_loop
    of ``trips`` calls.  ``data`` goes in as an argument: arrays a jitted function closes over are
    compiled in as constants (the first GPU try, 2026-11-22, spent ~30 s compiling each launch
    with the 1.1 GB pair buffer baked in)."""
    import jax

    run = jax.jit(lambda c, data: jax.lax.fori_loop(0, trips, lambda i, c: fn(c, data), c))
    jax.block_until_ready(run(carry, data))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(run(carry, data))
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / trips


def parse(configs: str) -> list[tuple[int, ...]]:
    return [tuple(int(v) for v in c.split("x")) for c in configs.split(",") if c]


def sweep_passes(n: int, dtype: str, a_configs, b_configs, trips: int, interpret: bool, log, budget) -> dict:
    """Per-call device time and relative error (against the default launch) of pass A and pass B launches."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from multiwalk.solvers import lbfgs_kernel as K

    dt = jnp.dtype(dtype)
    k = jax.random.split(jax.random.PRNGKey(0), 8)
    P = jax.random.normal(k[0], (2 * M, n), dt)
    gt, g, d, x = (jax.random.normal(k[i], (n,), dt) for i in range(1, 5))
    w = jax.random.normal(k[5], (2 * M,), dt)
    stp, gamma = jnp.asarray(0.7, dt), jnp.asarray(1.3, dt)
    slot, count = jnp.asarray(3, jnp.int32), jnp.asarray(M, jnp.int32)
    out: dict[str, list] = {"a": [], "b": []}
    data = (P, gt, g, d, w, stp, gamma, slot, count)  # jit arguments, never closed over (constants)
    if not interpret:  # a GPU idles at low clocks (345 MHz seen): ~3 s of streaming first
        double = jax.jit(lambda a: 2.0 * a)
        t_end = time.perf_counter() + 3.0
        while time.perf_counter() < t_end:
            jax.block_until_ready(double(P))

    def pass_a(cfg):
        block, warps, chunks, stages = cfg

        def fa(x_, data):
            P, gt, g, d, _, stp, _, slot, count = data
            return K.pair_products(P, gt, g, d, None, stp, slot, count, x_, block=block, num_warps=warps,
                                   chunks=chunks, num_stages=stages, interpret=interpret)
        return fa

    ref_a = [np.asarray(v) for v in jax.jit(pass_a((K.DEFAULT_BLOCK, K.DEFAULT_WARPS, 1, 1)))(x * 1.0, data)]
    for cfg in a_configs:
        if budget():
            log(f"pass A {cfg}: skipped, past the budget")
            continue
        try:
            fa = pass_a(cfg)
            got = [np.asarray(v) for v in jax.jit(fa)(x * 1.0, data)]
            err = max(float(np.max(np.abs(a - b)) / np.max(np.abs(b))) for a, b in zip(got, ref_a))

            def step(c, data, fa=fa):
                x_, acc = c
                pg, py, dots, x_ = fa(x_, data)
                return x_, acc + pg[0] + py[0] + dots[0]

            t = device_time(step, (x * 1.0, jnp.zeros((), dt)), data, trips)
            out["a"].append({"config": "x".join(map(str, cfg)), "cfg": list(cfg), "seconds": t, "rel_err": err})
            log(f"pass A {'x'.join(map(str, cfg)):>14}: {t * 1e3:.4f} ms, rel err {err:.1e}")
        except Exception as e:  # noqa: BLE001 - a launch Triton refuses (registers, shapes): time the others
            out["a"].append({"config": "x".join(map(str, cfg)), "cfg": list(cfg), "error": f"{type(e).__name__}: {e}"})
            log(f"pass A {cfg} FAILED: {type(e).__name__}: {str(e)[:400]}")

    def pass_b(cfg):
        block, warps = cfg

        def fb(P_, g_, d_, data):
            _, gt, _, _, w, stp, gamma, slot, count = data
            return K.direction_and_store(P_, w, gamma, stp, gt, g_, d_, slot, count, block=block, num_warps=warps,
                                         interpret=interpret)
        return fb

    ref_b = [np.asarray(v) for v in jax.jit(pass_b((K.DEFAULT_BLOCK, K.DEFAULT_WARPS)))(P * 1.0, g * 1.0, d * 1.0, data)]
    for cfg in b_configs:
        if budget():
            log(f"pass B {cfg}: skipped, past the budget")
            continue
        try:
            fb = pass_b(cfg)
            got = [np.asarray(v) for v in jax.jit(fb)(P * 1.0, g * 1.0, d * 1.0, data)]
            err = max(float(np.max(np.abs(a - b)) / np.max(np.abs(b))) for a, b in zip(got, ref_b))

            def step_b(c, data, fb=fb):
                P_, d_, g_ = c
                d_, P_, g_ = fb(P_, g_, d_, data)
                return P_, d_, g_

            t = device_time(step_b, (P * 1.0, d * 1.0, g * 1.0), data, trips)
            out["b"].append({"config": "x".join(map(str, cfg)), "cfg": list(cfg), "seconds": t, "rel_err": err})
            log(f"pass B {'x'.join(map(str, cfg)):>14}: {t * 1e3:.4f} ms, rel err {err:.1e}")
        except Exception as e:  # noqa: BLE001
            out["b"].append({"config": "x".join(map(str, cfg)), "cfg": list(cfg), "error": f"{type(e).__name__}: {e}"})
            log(f"pass B {cfg} FAILED: {type(e).__name__}: {str(e)[:400]}")
    return out


def tuned(mw, kernel: str, a: tuple[int, ...], b: tuple[int, int]) -> Any:
    """``LBFGS(m=7, eps=1e-5, kernel=kernel)`` whose passes launch with pass A ``(block, warps, chunks,
    stages)`` and pass B ``(block, warps)``: a subclass per launch, so the driver compiles each apart."""

    class Tuned(mw.LBFGS):
        def _config(self, dtype, plan=None):  # noqa: ANN001, ANN202
            cfg = super()._config(dtype, plan)
            return dataclasses.replace(cfg, a_block=a[0], a_warps=a[1], a_chunks=a[2], a_stages=a[3],
                                       block=b[0], warps=b[1])

    return Tuned(m=M, eps=EPS, kernel=kernel)


def solves(mw, n: int, dtype: str, variants: dict, reps: int, kernel: str, log, budget) -> dict:
    """Whole solves of each variant (compiled first, then ``reps`` interleaved calls): median run_seconds."""
    from multiwalk.functions import cute

    problem = mw.Problem(objective=cute.extended_rosenbrock, value_and_grad=cute.extended_rosenbrock_value_and_grad,
                         x0=cute.start("extended_rosenbrock", n), dtype=dtype)
    rows: dict[str, dict] = {}
    for name, (a, b) in variants.items():
        if budget():
            log(f"solve {name}: skipped, past the budget")
            continue
        solver = tuned(mw, kernel, a, b)
        try:
            t0 = time.perf_counter()
            r = mw.solve(problem, solver, progress=False)
            rows[name] = {"a": list(a), "b": list(b), "iterations": r.iterations, "nfev": r.nfev, "f": r.fun,
                          "gnorm": r.gnorm, "status": r.status.name, "kernel": r.stats["kernel"],
                          "line_evaluation": r.stats["line_evaluation"], "first_call_seconds": time.perf_counter() - t0,
                          "times": [], "solver": solver}
        except Exception as e:  # noqa: BLE001
            rows[name] = {"a": list(a), "b": list(b), "error": f"{type(e).__name__}: {e}"}
            log(f"solve {name} n={n:.0e} FAILED: {type(e).__name__}: {str(e)[:600]}")
    alive = [k for k, v in rows.items() if "solver" in v]
    for _ in range(reps):
        for name in alive:
            r = mw.solve(problem, rows[name]["solver"], progress=False)
            rows[name]["times"].append(r.stats["run_seconds"])
    base = rows.get("default", {})
    for name in alive:
        o = rows[name]
        del o["solver"]
        if o["times"]:
            o["seconds"] = statistics.median(o["times"])
        same = all(o[k] == base.get(k) for k in ("iterations", "nfev", "status"))
        o["f_rel_diff"] = abs(o["f"] - base.get("f", o["f"])) / max(abs(base.get("f", o["f"])), 1e-300)
        o["same_as_default"] = same
        log(f"solve {name:>10} n={n:.0e} {dtype}: {o.get('seconds', float('nan')) * 1e3:8.2f} ms "
            f"(min {min(o['times'] or [float('nan')]) * 1e3:.2f}), {o['iterations']} it / {o['nfev']} ev, "
            f"f {o['f']:.6e}, {o['status']}, same counts as default {same}, f rel diff {o['f_rel_diff']:.1e}; "
            f"A {o['a']} B {o['b']}")
    return rows


def table(report: dict, bw: float, n: int, item: int) -> str:
    env = report["environment"]
    lines = [f"L-BFGS fused passes tuned; Extended Rosenbrock n = {n:.0e}, m = {M}; {env['device']}, {env['date']}, "
             f"JAX {env['jax']}. Floors over the {'PyTorch' if report['torch_copy'] else 'XLA'} copy bandwidth "
             f"{bw / 1e9:.0f} GB/s of this run (read + write).", "",
             "| pass | launch (block x warps [x chunks x stages]) | ms per call (in-loop) | floor ms | x floor | rel err |",
             "| --- | --- | --- | --- | --- | --- |"]
    for p, nb in (("a", A_BYTES), ("b", B_BYTES)):
        floor = nb * n * item / bw
        for e in report["sweep"].get(p, []):
            if "seconds" in e:
                lines.append(f"| {p.upper()} | {e['config']} | {e['seconds'] * 1e3:.4f} | {floor * 1e3:.4f} | "
                             f"{e['seconds'] / floor:.3f} | {e['rel_err']:.0e} |")
            else:
                lines.append(f"| {p.upper()} | {e['config']} | failed: {e['error'][:60]} | | | |")
    floor_it = (4 * M + 10) * n * item / bw
    lines += ["", f"Whole solves (median of the interleaved calls); per-iteration floor {floor_it * 1e3:.3f} ms "
              "((4m + 10) n values).", "",
              "| variant | A | B | ms | it / evals | per it ms | per it / floor | same counts, f rel diff | optax ms (it) "
              "| optax / ours |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    opt = report.get("optax", {})
    for name, o in report.get("solves", {}).items():
        if "seconds" not in o:
            lines.append(f"| {name} | {o['a']} | {o['b']} | failed: {o.get('error', '-')[:60]} | | | | | | |")
            continue
        per = o["seconds"] / max(o["iterations"], 1)
        ot = f"{opt['seconds'] * 1e3:.1f} ({opt['iterations']})" if "seconds" in opt else "-"
        ratio = f"{opt['seconds'] / o['seconds']:.2f}x" if "seconds" in opt else "-"
        lines.append(f"| {name} | {'x'.join(map(str, o['a']))} | {'x'.join(map(str, o['b']))} | {o['seconds'] * 1e3:.2f} "
                     f"| {o['iterations']} / {o['nfev']} | {per * 1e3:.4f} | {per / floor_it:.3f} | "
                     f"{o['same_as_default']}, {o['f_rel_diff']:.0e} | {ot} | {ratio} |")
    checks = report.get("seed_check", {})
    if checks:
        lines += ["", f"Seed check at n = {report['check_n']:.0e}: expected {SEED['iterations']} it / {SEED['nfev']} evals, "
                  f"f = {SEED['f']:.4g}", ""]
        for name, o in checks.items():
            lines.append(f"- {name}: " + (o["error"] if "error" in o else
                                          f"{o['iterations']} it / {o['nfev']} evals, f = {o['f']:.6e}, {o['status']} "
                                          f"-> {'OK' if o['ok'] else 'DIFFERENT'}"))
    return "\n".join(lines) + "\n"


def main() -> int:
    p = common.new_parser(__doc__)
    common.add_out_option(p, "lbfgs_tune")
    p.add_argument("--n", type=float, default=1e7)
    p.add_argument("--check-n", type=float, default=1e6, help="n of the seed check (37 it / 51 evals)")
    p.add_argument("--dtype", default="float64")
    # 512x4 was 0.1 ms faster than the default 1024x4 in the first (flawed) run, 1024x8 and 2048x8 slower
    p.add_argument("--a-configs", default="1024x4x1x1,512x4x1x1,256x4x1x1,512x8x1x1,256x4x4x1,256x4x8x1,"
                   "256x4x16x1,256x4x8x2,512x8x8x1",
                   help="pass A launches: block x warps x chunks x stages")
    p.add_argument("--b-configs", default="1024x4,512x4,256x4,2048x8", help="pass B: block x warps")
    p.add_argument("--trips", type=int, default=50, help="calls per jitted fori_loop in the sweeps")
    p.add_argument("--reps", type=int, default=6, help="timed whole solves of each variant")
    p.add_argument("--kernel", default="auto", help="LBFGS(kernel=...); 'pallas' on a CPU: interpret mode")
    p.add_argument("--no-optax", action="store_true")
    p.add_argument("--f-rtol", type=float, default=1e-6,
                   help="f of a variant vs the default, relative (rounding of other sums grows along the path: "
                        "lbfgs_along.py saw 2e-8 at 1e7)")
    p.add_argument("--budget-seconds", type=float, default=175.0, help="start no new stage after this many seconds")
    args = p.parse_args()
    common.select_platform(args.device)
    import jax

    jax.config.update("jax_enable_x64", True)
    start = common.start_run(args.device, quick=False)
    if start is None:
        return 2
    import multiwalk as mw
    from multiwalk.functions import cute
    from multiwalk.solvers import lbfgs_kernel as K

    log, env, on_gpu = start.log, start.env, start.on_gpu
    n, check_n, item = int(args.n), int(args.check_n), 8 if args.dtype == "float64" else 4

    def budget() -> bool:
        return time.perf_counter() - start.t_start > args.budget_seconds

    torch_bw = bench.torch_copy_bandwidth(1 << 31) if on_gpu else None
    bw = torch_bw or common.measure_bandwidth((1 << 30) if on_gpu else (1 << 24), reps=10 if on_gpu else 3)["bytes_per_s"]
    log(f"device {env['device']}, jax {env['jax']}; bandwidth {bw / 1e9:.0f} GB/s ({'PyTorch' if torch_bw else 'XLA'} copy)")
    report: dict[str, Any] = {"environment": env, "bandwidth": bw, "torch_copy": torch_bw is not None, "n": n,
                              "check_n": check_n, "dtype": args.dtype, "sweep": {}, "solves": {}}
    out = Path(args.out)

    def save() -> str:
        md = table(report, bw, n, item)
        common.write_report(out, "lbfgs_tune", report, md)
        return md

    report["sweep"] = sweep_passes(n, args.dtype, parse(args.a_configs), parse(args.b_configs), args.trips,
                                   not on_gpu, log, budget)
    save()

    default_a = (K.PASS_A_BLOCK, K.PASS_A_WARPS, K.PASS_A_CHUNKS, K.PASS_A_STAGES)
    default_b = (K.DEFAULT_BLOCK, K.DEFAULT_WARPS)
    timed_a = [e for e in report["sweep"]["a"] if "seconds" in e and e["rel_err"] < 1e-12]
    timed_b = [e for e in report["sweep"]["b"] if "seconds" in e and e["rel_err"] < 1e-12]
    variants: dict[str, tuple] = {"default": (default_a, default_b)}
    if timed_a:
        best_a = tuple(min(timed_a, key=lambda e: e["seconds"])["cfg"])
        plain = [e for e in timed_a if e["cfg"][2] == 1]
        best_plain = tuple(min(plain, key=lambda e: e["seconds"])["cfg"]) if plain else default_a
        if best_a != default_a:
            variants["A best"] = (best_a, default_b)
        if best_plain not in (default_a, best_a):
            variants["A best, 1 chunk"] = (best_plain, default_b)
        if timed_b:
            best_b = tuple(min(timed_b, key=lambda e: e["seconds"])["cfg"])
            if best_b != default_b:
                variants["A and B best"] = (best_a, best_b)
    log(f"whole-solve variants: {variants}")
    report["solves"] = solves(mw, n, args.dtype, variants, args.reps, args.kernel, log, budget)
    save()

    # the seed's printout at check_n for the default and the fastest variant
    ranked = sorted((o["seconds"], k) for k, o in report["solves"].items() if "seconds" in o)
    names = ["default"] + [k for _, k in ranked[:1] if k != "default"]
    report["seed_check"] = {}
    problem = mw.Problem(objective=cute.extended_rosenbrock, value_and_grad=cute.extended_rosenbrock_value_and_grad,
                         x0=cute.start("extended_rosenbrock", check_n), dtype=args.dtype)
    for name in names:
        if budget() or name not in variants:
            continue
        try:
            r = mw.solve(problem, tuned(mw, args.kernel, *variants[name]), progress=False)
            ok = (r.iterations, r.nfev) == (SEED["iterations"], SEED["nfev"]) and abs(r.fun - SEED["f"]) < 1e-3 * SEED["f"]
            report["seed_check"][name] = {"iterations": r.iterations, "nfev": r.nfev, "f": r.fun, "status": r.status.name,
                                          "ok": ok}
            log(f"seed check {name} n={check_n:.0e}: {r.iterations} it / {r.nfev} ev, f {r.fun:.6e} -> {ok}")
        except Exception as e:  # noqa: BLE001
            report["seed_check"][name] = {"error": f"{type(e).__name__}: {e}"}
            log(f"seed check {name} FAILED: {e}")
    save()

    if not args.no_optax and not budget():
        try:
            report["optax"] = q = bench.run_optax(cute, n, args.dtype)
            log(f"optax {q['seconds'] * 1e3:.1f} ms ({q['iterations']} it, f {q['f']:.3e})")
        except Exception as e:  # noqa: BLE001 - the peer may be missing
            report["optax"] = {"error": f"{type(e).__name__}: {e}"}
            log(f"optax failed: {report['optax']['error'][:300]}")
    md = save()
    common.print_done(log, out, "lbfgs_tune", start.t_start, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
