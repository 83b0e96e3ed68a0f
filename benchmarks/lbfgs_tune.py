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
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import lbfgs_common as lc  # noqa: E402 - timing, bandwidth, interleaved solves, seed check, optax
from lbfgs_common import EPS, FLOOR_VALUES, M, device_time  # noqa: E402

A_BYTES = 17  # n values pass A moves (12 stored rows, gt, g, d, x read; x written)
B_BYTES = 19  # pass B: 12 rows, gt, g, d read; d, g, s, y written
# A swept launch's outputs against the default launch's (max |difference| / max |value| over its
# outputs): the same sums folded in another order, ~1e-16 in float64 and ~1e-7 in float32 (pass B
# is columnwise: exact); a wrong mask or a lost block of columns is far above these.  One limit for
# both dtypes (1e-12) refused every pass A launch of a float32 run: no variant reached the solves.
SWEEP_RTOL = {"float64": 1e-12, "float32": 1e-5}


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

    ref_a = [np.asarray(v) for v in jax.jit(pass_a((K.PASS_A_BLOCK, K.PASS_A_WARPS, K.PASS_A_CHUNKS, K.PASS_A_STAGES)))(
        x * 1.0, data)]
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


def select_variants(sweep: dict, dtype: str, default_a: tuple, default_b: tuple) -> dict[str, tuple]:
    """The whole-solve variants ``name: (pass A launch, pass B launch)`` from the sweeps: "default",
    then the fastest pass A launch, the fastest with one chunk, and the fastest A and B together,
    among the launches whose outputs matched the default's (:data:`SWEEP_RTOL` of ``dtype``)."""
    rtol = SWEEP_RTOL.get(dtype, SWEEP_RTOL["float32"])
    timed_a = [e for e in sweep.get("a", []) if "seconds" in e and e["rel_err"] < rtol]
    timed_b = [e for e in sweep.get("b", []) if "seconds" in e and e["rel_err"] < rtol]
    variants: dict[str, tuple] = {"default": (default_a, default_b)}
    best_a = tuple(min(timed_a, key=lambda e: e["seconds"])["cfg"]) if timed_a else default_a
    if best_a != default_a:
        variants["A best"] = (best_a, default_b)
    plain = [e for e in timed_a if e["cfg"][2] == 1]
    best_plain = tuple(min(plain, key=lambda e: e["seconds"])["cfg"]) if plain else default_a
    if best_plain not in (default_a, best_a):
        variants["A best, 1 chunk"] = (best_plain, default_b)
    if timed_b:
        best_b = tuple(min(timed_b, key=lambda e: e["seconds"])["cfg"])
        if best_b != default_b:
            variants["A and B best"] = (best_a, best_b)
    return variants


def check_solves(rows: dict, f_rtol: float) -> None:
    """Each solve's ``ok`` (what the table prints): the same iterations, evaluations and status as
    the default and f within ``f_rtol`` relative of it (``--f-rtol``)."""
    for o in rows.values():
        if "error" not in o:
            o["ok"] = bool(o["same_counts"] and o["f_rel_diff"] <= f_rtol)


def solves(mw, n: int, dtype: str, variants: dict, reps: int, kernel: str, f_rtol: float, log, budget) -> dict:
    """Whole solves of each variant ``name: (pass A launch, pass B launch)``, interleaved
    (``lbfgs_common.interleaved_solves``; the first, "default", is the reference), each checked
    against it (:func:`check_solves`)."""
    problem = lc.rosenbrock_problem(mw, n, dtype)
    cases = {name: (problem, tuned(mw, kernel, a, b)) for name, (a, b) in variants.items()}
    rows = lc.interleaved_solves(mw, cases, reps, log, f"n={n:.0e} {dtype}", budget)
    check_solves(rows, f_rtol)
    for name, o in rows.items():
        o["a"], o["b"] = list(variants[name][0]), list(variants[name][1])
        if "ok" in o:
            log(f"solve {name}: same counts as the default and f within {f_rtol:g} -> {'OK' if o['ok'] else 'FAILED'}")
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
    floor_it = FLOOR_VALUES * n * item / bw
    lines += ["", f"Whole solves (median of the interleaved calls); per-iteration floor {floor_it * 1e3:.3f} ms "
              "((4m + 10) n values).", "",
              "| variant | A | B | ms | it / evals | per it ms | per it / floor | check: same counts, f rel diff | optax ms (it) "
              "| optax / ours |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    opt = report.get("optax", {})
    for name, o in report.get("solves", {}).items():
        if "seconds" not in o:
            lines.append(f"| {name} | {o['a']} | {o['b']} | failed: {o.get('error', '-')[:60]} | | | | | | |")
            continue
        per = o["seconds"] / max(o["iterations"], 1)
        ot, ratio = lc.optax_cells(opt, o["seconds"])
        lines.append(f"| {name} | {'x'.join(map(str, o['a']))} | {'x'.join(map(str, o['b']))} | {o['seconds'] * 1e3:.2f} "
                     f"| {o['iterations']} / {o['nfev']} | {per * 1e3:.4f} | {per / floor_it:.3f} | "
                     f"{'ok' if o.get('ok') else 'FAILED'}: {o['same_counts']}, {o['f_rel_diff']:.0e} | {ot} | {ratio} |")
    lines += lc.seed_check_lines(report.get("seed_check", {}), report["check_n"])
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
    p.add_argument("--kernel", default="pallas",
                   help="LBFGS(kernel=...): 'pallas' (default) the two-pass fused form whose passes this tunes ('auto' "
                        "now takes the one-pass loop on one GPU in float64); on a CPU: interpret mode")
    p.add_argument("--no-optax", action="store_true")
    p.add_argument("--f-rtol", type=float, default=1e-6,
                   help="f of a variant vs the default, relative (rounding of other sums grows along the path: "
                        "lbfgs_along.py saw 2e-8 at 1e7)")
    p.add_argument("--budget-seconds", type=float, default=175.0, help="start no new stage after this many seconds")
    begun = lc.begin(p)
    if begun is None:
        return 2
    args, start, bw, torch_bw, xla_bw = begun
    import multiwalk as mw
    from multiwalk.solvers import lbfgs_kernel as K

    log, env, on_gpu = start.log, start.env, start.on_gpu
    n, check_n, item = int(args.n), int(args.check_n), 8 if args.dtype == "float64" else 4
    budget = lc.budget_clock(start.t_start, args.budget_seconds)
    report: dict[str, Any] = {"environment": env, "bandwidth": bw, "torch_copy": torch_bw is not None, "n": n,
                              "check_n": check_n, "dtype": args.dtype, "sweep": {}, "solves": {}}
    out = Path(args.out)

    def save() -> str:
        md = table(report, bw, n, item)
        common.write_report(out, "lbfgs_tune", report, md)
        return md

    report["sweep"] = sweep_passes(n, args.dtype, lc.parse_launches(args.a_configs), lc.parse_launches(args.b_configs),
                                   args.trips, not on_gpu, log, budget)
    save()

    default_a = (K.PASS_A_BLOCK, K.PASS_A_WARPS, K.PASS_A_CHUNKS, K.PASS_A_STAGES)
    default_b = (K.DEFAULT_BLOCK, K.DEFAULT_WARPS)
    variants = select_variants(report["sweep"], args.dtype, default_a, default_b)
    log(f"whole-solve variants: {variants}")
    report["solves"] = solves(mw, n, args.dtype, variants, args.reps, args.kernel, args.f_rtol, log,
                              budget)
    save()

    # the seed's printout at check_n for the default and the fastest variant
    ranked = sorted((o["seconds"], k) for k, o in report["solves"].items() if "seconds" in o and o.get("ok"))
    names = ["default"] + [k for _, k in ranked[:1] if k != "default"]
    report["seed_check"] = lc.seed_check(mw, lc.rosenbrock_problem(mw, check_n, args.dtype),
                                         {k: tuned(mw, args.kernel, *variants[k]) for k in names if k in variants},
                                         log, budget)
    save()

    if not args.no_optax and not budget():
        report["optax"] = lc.optax_row(n, args.dtype, log)
    md = save()
    common.print_done(log, out, "lbfgs_tune", start.t_start, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
