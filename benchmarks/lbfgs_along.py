#!/usr/bin/env python
"""L-BFGS line-search evaluations by cute_kernel's one-pass Pallas kernel ("along") vs the analytic XLA form.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python3 benchmarks/lbfgs_along.py --out "$OUT"                          # GPU, ~3 min
    PYTHONPATH=src python3 benchmarks/lbfgs_along.py --device cpu --sizes 2000 --extra '' --eval-n 1e4 --reps 2 --kernel pallas

Extended Rosenbrock from the seed's start, m = 7, eps = 1e-5, ``LBFGS(kernel="auto")`` (the fused
passes on a GPU), in one run:

* bandwidth: PyTorch's device-to-device copy (read + write; the floor uses it, as in the LBFGS
  section of docs/benchmarks.md) and XLA's copy, beside it;
* one line-search evaluation at the largest checked n: the analytic XLA form (``x + stp d``,
  ``cute.extended_rosenbrock_value_and_grad``, ``g'd``; the trial point not written) and the
  kernel ``cute_kernel.rosenbrock_along_kernel`` at a few (rows, warps), each checked against
  the XLA form and timed per call inside one jitted ``fori_loop``; floor 3 n values;
* whole solves, for each n and dtype: "analytic" (``Problem(value_and_grad=cute_kernel.extended_rosenbrock_xla)``:
  cute's analytic f and g, the line search by XLA) and "along" (the same f and g with the kernel as
  ``.along``: what ``cute.extended_rosenbrock_value_and_grad`` does on GPUs), compiled first, then ``--reps``
  calls of each, interleaved (so drift hits both alike), median of ``stats["run_seconds"]``.
  The check: the same iterations, evaluations and status, f to ``--f-rtol`` relative.  If the
  along form fails (e.g. Triton cannot compile it) the error is printed and the analytic rows go on;
* optax.lbfgs(memory_size=7) with the same analytic f and g (``lbfgs.with_gradient``) and the
  same stop rule, median of 3 calls (``lbfgs.run_optax``);
* a table: ms, iterations / evaluations, per iteration, per-iteration floor ((4m + 10) n values
  over the PyTorch copy bandwidth), ratio, optax and optax / ours.  Partial results are written
  after every row (``lbfgs_along.json`` / ``.md``), so a run stopped by a time limit keeps them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import lbfgs_common as lc  # noqa: E402 - timing, bandwidth, interleaved solves, optax
from lbfgs_common import EPS, FLOOR_VALUES, M  # noqa: E402

DEFAULT_CONFIG = (512, 4)  # cute_kernel.ROWS, cute_kernel.WARPS


def analytic_form() -> Any:
    """cute's analytic f and g without ``.along``: the line search evaluates by XLA."""
    from multiwalk.functions import cute_kernel

    return cute_kernel.extended_rosenbrock_xla


def along_form(rows: int, warps: int, traced: list) -> Any:
    """f and g of the analytic form, with the one-pass kernel (``rows`` pairs per program, ``warps``)
    as ``.along``; ``traced`` gets a note each time the solver traces it (its loop was built on it)."""
    from multiwalk.functions import cute, cute_kernel
    from multiwalk.kernels import backend

    def vg(x):
        return cute.extended_rosenbrock_value_and_grad(x)

    def along(x, d, stp):
        traced.append(x.shape)
        if backend(("gpu", "cuda"))[1]:
            return cute_kernel.rosenbrock_along_kernel(x, d, stp, rows=rows, num_warps=warps)
        return cute_kernel.rosenbrock_along(x, d, stp)  # the jax.numpy form off GPUs (smoke runs)

    vg.along = along
    return vg


def evaluation_step(fn: Any) -> Any:
    """``step(carry, (x, d))`` for ``lbfgs_common.device_time``: one evaluation ``fn(x, d, stp)`` whose
    step depends on the carry (so nothing is hoisted out of the loop); carry ``(g, acc)``."""

    def step(c, data):
        _, acc = c
        xc, dc = data
        f, gt, gd = fn(xc, dc, 1e-3 + 1e-30 * acc)
        return gt, acc + f + gd

    return step


def evaluation_times(n: int, dtype: str, configs: list[tuple[int, int]], trips: int, on_gpu: bool, log) -> list[dict]:
    """Per-call time of one line-search evaluation in each form, and the kernel's error against the XLA form."""
    import jax
    import jax.numpy as jnp

    from multiwalk.functions import cute, cute_kernel

    dt = jnp.dtype(dtype)
    k = jax.random.split(jax.random.PRNGKey(0), 2)
    x = jnp.asarray(cute.start("extended_rosenbrock", n), dt) + 0.01 * jax.random.normal(k[0], (n,), dt)
    d = 1e-3 * jax.random.normal(k[1], (n,), dt)

    def xla(xc, dc, stp):
        f, g = cute.extended_rosenbrock_value_and_grad(xc + stp * dc)
        return f, g, g @ dc

    forms: list[tuple[str, Any]] = [("analytic XLA", xla)]
    for rows, warps in configs:
        kernel = (lambda xc, dc, stp, rows=rows, warps=warps:  # noqa: E731
                  cute_kernel.rosenbrock_along_kernel(xc, dc, stp, rows=rows, num_warps=warps, interpret=not on_gpu))
        forms.append((f"along kernel {rows}x{warps}", kernel))
    f0, g0, gd0 = jax.jit(xla)(x, d, jnp.asarray(1e-3, dt))
    out = []
    for name, fn in forms:
        try:
            f1, g1, gd1 = jax.jit(fn)(x, d, jnp.asarray(1e-3, dt))
            err = max(abs(float(f1 - f0)) / abs(float(f0)), abs(float(gd1 - gd0)) / abs(float(gd0)),
                      float(jnp.max(jnp.abs(g1 - g0)) / jnp.max(jnp.abs(g0))))
            step = evaluation_step(fn)
            # x and d go in as device_time's data: closed over, they were compiled in as constants
            # (2 n values; at 1e7 float64 160 MB in every form's program, as lbfgs_tune's first run had)
            out.append({"form": name, "seconds": lc.device_time(step, (x, jnp.zeros((), dt)), (x, d), trips),
                        "rel_err": err})
            log(f"evaluation n={n:.0e} {dtype}, {name}: {out[-1]['seconds'] * 1e3:.4f} ms, rel err {err:.1e}")
        except Exception as err:  # noqa: BLE001 - report the failing form, time the others
            out.append({"form": name, "error": f"{type(err).__name__}: {err}"})
            log(f"evaluation {name} FAILED: {type(err).__name__}: {str(err)[:800]}")
    return out


def solve_pair(mw, n: int, dtype: str, reps: int, config: tuple[int, int], f_rtol: float, log, kernel: str,
               forms: list[str]) -> dict:
    """Whole solves, analytic and along, compiled first, then ``reps`` interleaved timed calls each
    (``lbfgs_common.interleaved_solves``); the check: the same counts, f to ``f_rtol``, and the
    along form's loop built on the kernel."""
    traced: list = []
    problems = {"analytic": lc.rosenbrock_problem(mw, n, dtype, analytic_form()),
                "along": lc.rosenbrock_problem(mw, n, dtype, along_form(*config, traced))}
    solver = mw.LBFGS(m=M, eps=EPS, kernel=kernel)
    cases = {name: (problem, solver) for name, problem in problems.items() if name in forms}
    row: dict[str, Any] = {"n": n, "dtype": dtype, "config": f"{config[0]}x{config[1]}",
                           **lc.interleaved_solves(mw, cases, reps, log, f"{dtype} n={n:.0e}")}
    if "along" in row and "error" not in row["along"]:
        row["along"]["along_traced"] = len(traced)  # > 0: the loop was built on the kernel
    if all(name in row and "seconds" in row[name] for name in ("analytic", "along")):
        b = row["along"]
        row["check"] = {"same_counts": b["same_counts"], "f_rel_diff": b["f_rel_diff"],
                        "ok": b["same_counts"] and b["f_rel_diff"] <= f_rtol and b["along_traced"] > 0}
        log(f"{dtype} n={n:.0e} check: same it/evals/status {b['same_counts']}, f rel diff {b['f_rel_diff']:.1e} "
            f"(tolerance {f_rtol:g}), along traced {b['along_traced']} -> {'OK' if row['check']['ok'] else 'FAILED'}")
    return row


def table(rows: list[dict], bw: float, env: dict, evals: list[dict], item_of, bw_name: str) -> str:
    lines = [
        f"L-BFGS line-search evaluation: one-pass Pallas kernel (along) vs analytic XLA; Extended Rosenbrock, m = {M}, "
        f"eps = {EPS}; {env['device']}, {env['date']}, JAX {env['jax']}. Floor: (4m + 10) n values per iteration "
        f"over the {bw_name} bandwidth {bw / 1e9:.0f} GB/s of this run.",
        "",
        "| dtype | n | form | ms | it / evals | per it ms | floor per it ms | per it / floor | check | optax ms (it) "
        "| optax / ours |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        floor = FLOOR_VALUES * row["n"] * item_of(row["dtype"]) / bw
        opt = row.get("optax", {})
        for name in ("analytic", "along"):
            o = row.get(name)
            if o is None:
                continue
            if "seconds" not in o:
                lines.append(f"| {row['dtype']} | {row['n']:.0e} | {name} | failed: {o.get('error', '-')[:60]} | | | | | | | |")
                continue
            per_it = o["seconds"] / max(o["iterations"], 1)
            check = row.get("check")
            check_txt = "" if name == "analytic" or check is None else (
                f"{'ok' if check['ok'] else 'FAILED'} (f {check['f_rel_diff']:.0e})")
            opt_txt, ratio = lc.optax_cells(opt, o["seconds"])
            label = name if name == "analytic" else f"along {row['config']}"
            lines.append(f"| {row['dtype']} | {row['n']:.0e} | {label} | {o['seconds'] * 1e3:.2f} | {o['iterations']} / "
                         f"{o['nfev']} | {per_it * 1e3:.3f} | {floor * 1e3:.3f} | {per_it / floor:.2f} | {check_txt} | "
                         f"{opt_txt} | {ratio} |")
    lines += ["", "| one evaluation | ms | floor (3 n values) ms | ratio | rel err vs XLA |", "| --- | --- | --- | --- | --- |"]
    for e in evals:
        if "seconds" in e:
            fl = 3 * e["n"] * item_of(e["dtype"]) / bw
            lines.append(f"| {e['form']}, n = {e['n']:.0e} {e['dtype']} | {e['seconds'] * 1e3:.4f} | {fl * 1e3:.4f} | "
                         f"{e['seconds'] / fl:.2f} | {e['rel_err']:.1e} |")
        else:
            lines.append(f"| {e['form']} | failed: {e['error'][:80]} | | | |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = common.new_parser(__doc__)
    common.add_out_option(p, "lbfgs_along")
    p.add_argument("--sizes", default="1e6,1e7,5e7", help="comma-separated n of the whole solves, in this order")
    p.add_argument("--dtypes", default="float64", help="comma-separated; each after all sizes of the one before")
    p.add_argument("--extra", default="float32:1e7", help="dtype:n rows run last, if time is left ('' for none)")
    p.add_argument("--forms", default="analytic,along", help="'analytic' alone skips the kernel (after a crash)")
    p.add_argument("--optax-sizes", default="1e7,5e7", help="n at which optax runs (float64 rows)")
    p.add_argument("--reps", type=int, default=7, help="timed solves of each form per row")
    p.add_argument("--eval-n", type=float, default=1e7, help="n of the per-evaluation timings")
    p.add_argument("--configs", default="512x4,256x4,1024x4,1024x8,2048x8", help="kernel rows x warps timed per evaluation")
    p.add_argument("--trips", type=int, default=50)
    # The counts and status must be equal; f only to rounding amplified along the path: at the end f
    # is ~1e-18 of f(x0) (2.4e-10 against 1.2e8 at n = 1e7), and the line search interpolates on
    # differences of f values whose last bits depend on the summation order.  The first GPU run
    # (2026-11-22) used 1e-8 and saw 0, 2.0e-8, 2.4e-9 at 1e6, 1e7, 5e7 with equal counts; the
    # seed's test (tests/test_cute_fused.py) allows 1e-3 for the same reason.
    p.add_argument("--f-rtol", type=float, default=1e-6,
                   help="f of along vs analytic, relative (default %(default)s: rounding along the path)")
    p.add_argument("--kernel", default="auto", help="LBFGS(kernel=...); 'pallas' on a CPU runs the passes in interpret mode")
    p.add_argument("--budget-seconds", type=float, default=250.0, help="start no new row after this many seconds")
    begun = lc.begin(p)
    if begun is None:
        return 2
    args, start, bw, torch_bw, xla_bw = begun
    import multiwalk as mw

    log, env, on_gpu = start.log, start.env, start.on_gpu

    def item_of(dtype: str) -> int:
        return 8 if dtype == "float64" else 4

    report: dict[str, Any] = {"environment": env, "torch_copy_bandwidth": torch_bw, "xla_copy_bandwidth": xla_bw,
                              "rows": [], "evaluations": []}
    out = Path(args.out)

    def save() -> str:
        md = table(report["rows"], bw, env, report["evaluations"], item_of, "PyTorch copy" if torch_bw else "XLA copy")
        common.write_report(out, "lbfgs_along", report, md)
        return md

    forms = args.forms.split(",")
    configs = lc.parse_launches(args.configs) if "along" in forms else []
    eval_n = int(args.eval_n)
    for e in evaluation_times(eval_n, "float64", configs, args.trips, on_gpu, log):
        report["evaluations"].append({**e, "n": eval_n, "dtype": "float64"})
    save()
    timed = [e for e in report["evaluations"] if "seconds" in e and e["form"].startswith("along")]
    best = min(timed, key=lambda e: e["seconds"]) if timed else None
    best_config = tuple(int(v) for v in best["form"].split()[-1].split("x")) if best else DEFAULT_CONFIG

    cases = [(dt, int(float(s))) for dt in args.dtypes.split(",") for s in args.sizes.split(",")]
    cases += [(e.split(":")[0], int(float(e.split(":")[1]))) for e in args.extra.split(",") if e]
    optax_sizes = {int(float(s)) for s in args.optax_sizes.split(",") if s}
    for dtype, n in cases:
        if time.perf_counter() - start.t_start > args.budget_seconds:
            log(f"skipping {dtype} n={n:.0e}: past --budget-seconds")
            continue
        row = solve_pair(mw, n, dtype, args.reps, DEFAULT_CONFIG, args.f_rtol, log, args.kernel, forms)
        report["rows"].append(row)
        save()
        if dtype == "float64" and n in optax_sizes:
            row["optax"] = lc.optax_row(n, dtype, log)
            save()
        if best_config != DEFAULT_CONFIG and n == eval_n and dtype == "float64" and "seconds" in row.get("along", {}):
            if time.perf_counter() - start.t_start < args.budget_seconds:
                log(f"the fastest kernel configuration per evaluation was {best_config}: whole solves with it")
                report["rows"].append(solve_pair(mw, n, dtype, args.reps, best_config, args.f_rtol, log, args.kernel, forms))
                save()
    md = save()
    common.print_done(log, out, "lbfgs_along", start.t_start, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
