#!/usr/bin/env python
"""L-BFGS with both gradients in one (2, n) buffer (``LBFGS.gradient_rows``, opt-in) against the default.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python3 benchmarks/lbfgs_rows.py --out "$OUT" --budget-seconds 170           # GPU, ~2 min
    PYTHONPATH=src python3 benchmarks/lbfgs_rows.py --device cpu --n 2e4 --check-n 2000 --large-n 0 \\
        --reps 2 --trips 2 --kernel pallas --no-optax                                         # smoke (interpret)

In the default fused one-device loop the evaluation (cute's ``rosenbrock_along``) writes the new
gradient into a buffer of its own, which pass B then copies into the loop's g buffer (n values
written per iteration).  With ``gradient_rows`` (a subclass sets it; not the default until
measured faster) the evaluation writes g into the row of the older gradient of one (2, n) buffer,
and passes A and B read both rows: n values fewer per iteration, 3 n more per driver chunk (the
buffer filled from g, g taken out after the chunk).  In one run:

* bandwidth: PyTorch's device-to-device copy (read + write; the floor uses it);
* pass B alone, per call inside one jitted ``fori_loop`` (``lbfgs_tune.device_time``), copying vs rows;
* whole solves of Extended Rosenbrock at ``--n`` (1e7 float64), both forms compiled first, then
  ``--reps`` calls of each, interleaved; median ``run_seconds``; the check: same iterations,
  evaluations and status, f within ``--f-rtol``; the same at ``--large-n`` (5e7) with fewer reps;
* the seed's 37 iterations / 51 evaluations / f = 6.752e-10 at ``--check-n`` (1e6), both forms;
* the optimized HLO of one chunk at n = 2^20: the copies of n-sized arrays, and the custom calls;
* optax.lbfgs(memory_size=7) with the same f and g and stop rule, once.

Partial results are written after every stage (``lbfgs_rows.json`` / ``.md``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import lbfgs_common as lc  # noqa: E402 - timing, bandwidth, interleaved solves, seed check, optax
from lbfgs_common import FLOOR_VALUES, M  # noqa: E402

EPS = lc.EPS


def forms(mw, kernel: str) -> dict[str, Any]:
    """``{"copying": LBFGS (the default), "rows": LBFGS with gradient_rows True}``."""

    class Rows(mw.LBFGS):
        gradient_rows = True

    return {"copying": mw.LBFGS(m=M, eps=EPS, kernel=kernel), "rows": Rows(m=M, eps=EPS, kernel=kernel)}


def whole_solves(mw, n: int, dtype: str, reps: int, kernel: str, f_rtol: float, log, budget) -> dict:
    """Both forms on one problem, interleaved (``lbfgs_common.interleaved_solves``); ``ok``: the same
    counts as the copying form and f within ``f_rtol``."""
    problem = lc.rosenbrock_problem(mw, n, dtype)
    rows = lc.interleaved_solves(mw, {name: (problem, s) for name, s in forms(mw, kernel).items()}, reps, log,
                                 f"n={n:.0e} {dtype}", budget)
    for o in rows.values():
        if "error" not in o:
            o["ok"] = o["same_counts"] and o["f_rel_diff"] <= f_rtol
    return rows


def pass_b_times(n: int, dtype: str, trips: int, interpret: bool) -> dict:
    """Pass B per call, copying (writes g) vs rows (g read from a (2, n) buffer, not written)."""
    import jax
    import jax.numpy as jnp

    from multiwalk.solvers import lbfgs_kernel as K

    dt = jnp.dtype(dtype)
    k = jax.random.split(jax.random.PRNGKey(0), 6)
    P = jax.random.normal(k[0], (2 * M, n), dt)
    gt, g, d = (jax.random.normal(k[i], (n,), dt) for i in range(1, 4))
    w = jax.random.normal(k[4], (2 * M,), dt)
    grads = jnp.stack([gt, g])
    scal = (jnp.asarray(1.3, dt), jnp.asarray(0.7, dt), jnp.asarray(3, jnp.int32), jnp.asarray(M, jnp.int32))

    def copying(c, data):
        P_, d_, g_ = c
        gt, w, gamma, stp, slot, count = data[0], data[2], *data[3:]
        d_, P_, g_ = K.direction_and_store(P_, w, gamma, stp, gt, g_, d_, slot, count, interpret=interpret)
        return P_, d_, g_

    def rows(c, data):
        P_, d_ = c
        grads, w, gamma, stp, slot, count = data[1], data[2], *data[3:]
        d_, P_, _ = K.direction_and_store(P_, w, gamma, stp, grads, grads, d_, slot, count, new=jnp.asarray(0),
                                          interpret=interpret)
        return P_, d_

    data = (gt, grads, w, *scal)
    out = {"copying": lc.device_time(copying, (P * 1.0, d * 1.0, g * 1.0), data, trips),
           "rows": lc.device_time(rows, (P * 1.0, d * 1.0), data, trips)}
    return out


def chunk_hlo(mw, n: int, dtype: str, kernel: str) -> dict:
    """Per form: copies of n-sized arrays and custom calls in the optimized HLO of one chunk at ``n``."""
    import jax
    import jax.numpy as jnp

    problem = lc.rosenbrock_problem(mw, n, dtype)
    out = {}
    for name, solver in forms(mw, kernel).items():
        state = solver.init(problem, jax.random.PRNGKey(0))
        # the state donated, as the driver does (solve.py): no copies of the inputs
        text = jax.jit(lambda s, k, solver=solver: solver.run_chunk(problem, s, 0, k), donate_argnums=0).lower(
            state, jnp.asarray(1, jnp.int32)).compile().as_text()
        big = re.compile(rf"= [a-z0-9]+\[(?:\d+,)*{n}(?:,\d+)*\]" + r"\{[^}]*\} copy\(")
        copies = [line.strip()[:160] for line in text.splitlines() if big.search(line)]
        out[name] = {"n_copies": len(copies), "copies": copies,
                     "custom_calls": len(re.findall(r" custom-call\(", text)), "hlo_chars": len(text)}
    return out


def table(report: dict) -> str:
    env, bw = report["environment"], report["bandwidth"]
    item = 8 if report["dtype"] == "float64" else 4
    lines = [f"L-BFGS, gradients in one (2, n) buffer (rows) vs the copying form; Extended Rosenbrock, m = {M}; "
             f"{env['device']}, {env['date']}, JAX {env['jax']}; floor {FLOOR_VALUES} n values per iteration at the "
             f"{'PyTorch' if report['torch_copy'] else 'XLA'} copy bandwidth {bw / 1e9:.0f} GB/s of this run.", ""]
    pb = report.get("pass_b", {})
    if pb:
        lines.append(f"Pass B per call at n = {report['n']:.0e}: copying {pb['copying'] * 1e3:.4f} ms, rows "
                     f"{pb['rows'] * 1e3:.4f} ms (floor 19 n / 18 n: {19 * report['n'] * item / bw * 1e3:.4f} / "
                     f"{18 * report['n'] * item / bw * 1e3:.4f} ms).")
        lines.append("")
    opt = report.get("optax", {})
    lines += ["| n | form | ms (median) | min ms | reps | it / evals | per it ms | floor per it ms | per it / floor "
              "| same counts, f rel diff | optax ms (it) | optax / ours |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, n in (("solves", report["n"]), ("large", report.get("large_n"))):
        for name, o in report.get(key, {}).items():
            if "seconds" not in o:
                lines.append(f"| {n:.0e} | {name} | failed: {o.get('error', 'no timed reps')[:80]} | | | | | | | | | |")
                continue
            per = o["seconds"] / max(o["iterations"], 1)
            floor = FLOOR_VALUES * n * item / bw
            ot, ratio = lc.optax_cells(opt if key == "solves" else None, o["seconds"])
            lines.append(f"| {n:.0e} | {name} | {o['seconds'] * 1e3:.2f} | {o['min_seconds'] * 1e3:.2f} | "
                         f"{len(o['times'])} | {o['iterations']} / {o['nfev']} | {per * 1e3:.4f} | {floor * 1e3:.4f} | "
                         f"{per / floor:.3f} | {o['same_counts']}, {o['f_rel_diff']:.0e} | {ot} | {ratio} |")
    lines += lc.seed_check_lines(report.get("seed_check", {}), report["check_n"])
    hlo = report.get("hlo", {})
    if hlo:
        lines += ["", f"Optimized HLO of one chunk at n = {report['hlo_n']}:", ""]
        for name, h in hlo.items():
            lines.append(f"- {name}: {h['n_copies']} copies of n-sized arrays, {h['custom_calls']} custom calls")
            lines += [f"  - `{c}`" for c in h["copies"][:8]]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = common.new_parser(__doc__)
    common.add_out_option(p, "lbfgs_rows")
    p.add_argument("--n", type=float, default=1e7)
    p.add_argument("--large-n", type=float, default=5e7, help="a second size with fewer reps (0: none)")
    p.add_argument("--check-n", type=float, default=1e6, help="n of the seed check (37 it / 51 evals)")
    p.add_argument("--hlo-n", type=float, default=2 ** 20, help="n of the HLO count (0: none)")
    p.add_argument("--dtype", default="float64")
    p.add_argument("--trips", type=int, default=50, help="calls per jitted fori_loop for pass B")
    p.add_argument("--reps", type=int, default=8, help="timed whole solves of each form at --n")
    p.add_argument("--large-reps", type=int, default=3)
    p.add_argument("--kernel", default="pallas",
                   help="LBFGS(kernel=...): 'pallas' (default) the two-pass fused form this compares ('auto' now takes "
                        "the one-pass loop on one GPU in float64); on a CPU: interpret mode")
    p.add_argument("--no-optax", action="store_true")
    p.add_argument("--f-rtol", type=float, default=1e-6,
                   help="f of rows vs copying, relative (the same operations: expected equal)")
    p.add_argument("--budget-seconds", type=float, default=170.0, help="start no new stage after this many seconds")
    begun = lc.begin(p)
    if begun is None:
        return 2
    args, start, bw, torch_bw, xla_bw = begun
    import multiwalk as mw

    log, env, on_gpu = start.log, start.env, start.on_gpu
    n, check_n = int(args.n), int(args.check_n)
    budget = lc.budget_clock(start.t_start, args.budget_seconds)
    report: dict[str, Any] = {"environment": env, "bandwidth": bw, "torch_copy": torch_bw is not None, "n": n,
                              "check_n": check_n, "dtype": args.dtype, "large_n": int(args.large_n),
                              "hlo_n": int(args.hlo_n)}
    out = Path(args.out)

    def save() -> str:
        md = table(report)
        common.write_report(out, "lbfgs_rows", report, md)
        return md

    try:
        report["pass_b"] = pb = pass_b_times(n, args.dtype, args.trips, not on_gpu)
        log(f"pass B per call: copying {pb['copying'] * 1e3:.4f} ms, rows {pb['rows'] * 1e3:.4f} ms")
    except Exception as e:  # noqa: BLE001
        log(f"pass B timing FAILED: {type(e).__name__}: {str(e)[:400]}")
    save()
    report["solves"] = whole_solves(mw, n, args.dtype, args.reps, args.kernel, args.f_rtol, log, budget)
    save()

    report["seed_check"] = lc.seed_check(mw, lc.rosenbrock_problem(mw, check_n, args.dtype), forms(mw, args.kernel),
                                         log, budget)
    save()

    if not args.no_optax and not budget():
        report["optax"] = lc.optax_row(n, args.dtype, log)
        save()

    if args.hlo_n and not budget():
        try:
            report["hlo"] = chunk_hlo(mw, int(args.hlo_n), args.dtype, args.kernel)
            log("HLO: " + ", ".join(f"{k} {v['n_copies']} n-copies / {v['custom_calls']} custom calls"
                                    for k, v in report["hlo"].items()))
        except Exception as e:  # noqa: BLE001
            log(f"HLO count FAILED: {type(e).__name__}: {str(e)[:400]}")
        save()

    if args.large_n and not budget():
        report["large"] = whole_solves(mw, int(args.large_n), args.dtype, args.large_reps, args.kernel, args.f_rtol,
                                       log, budget)
    md = save()
    common.print_done(log, out, "lbfgs_rows", start.t_start, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
