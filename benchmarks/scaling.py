"""Strong and weak scaling of the walker-parallel solvers over the devices of one host (``mw.solve(devices=k)``).

For k = 1, 2, ... up to ``--max-devices`` (default all), each solver runs its iterations with the
batch split over k devices:

* strong scaling: the same batch on k devices; speed-up = time(1) / time(k) (goal: >= 1.9x on
  2 GPUs, >= 3.6x on 4);
* weak scaling: k times the batch on k devices; efficiency = time(1) / time(k) (1.0 is perfect).

Cases: ReplicaExchange (32 temperatures x ``nseq`` sequences, Rastrigin-10, sampling phase),
PatternSearch in its XLA form (Ackley-20, ``n_walkers`` walkers, 20 iterations) and multi-start
L-BFGS (extended Rosenbrock n = 100, ``starts`` starts, 40 iterations).  Each configuration is
compiled and run once, then run again (the compiled loop is cached); the second run's
``stats["run_seconds"]`` (compilation excluded) is the time.  Results equal on every k
(tests/test_devices.py); the script checks the best value agrees.

Then one L-BFGS problem (extended Rosenbrock, ``--lbfgs-n`` variables, m = 7, float64) with its
vectors split over k devices: milliseconds per iteration against the memory floor per iteration
and device, (4m + 10) n / k values over the measured bandwidth of one device (the floor of
benchmarks/lbfgs.py, divided over the devices).

``--budget`` seconds: cases that would start after it are skipped (and listed), so a device run
ends in time.  Prints a Markdown table; writes scaling.json / .md to ``--out``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

M = 7


def timed(mw: Any, problem: Any, solver: Any, k: int) -> dict[str, Any]:
    """Compile-and-run, then a second run; its run seconds and iterations."""
    first = mw.solve(problem, solver, seed=0, progress=False, devices=k)
    r = mw.solve(problem, solver, seed=0, progress=False, devices=k)
    iters = sum(r.stats["iterations"].values())
    return {
        "devices": r.stats["devices"], "seconds": r.stats["run_seconds"], "iterations": iters,
        "compile_seconds": first.stats["compile_seconds"], "fun": float(r.fun),
    }


def main() -> int:
    p = common.new_parser(__doc__)
    p.add_argument("--max-devices", type=int, default=None, help="largest device count (default: all)")
    p.add_argument("--quick", action="store_true", help="small batches (a CPU check of the script)")
    p.add_argument("--budget", type=float, default=150.0, help="seconds after which no new case starts")
    p.add_argument("--lbfgs-n", type=float, default=5e8, help="variables of the split L-BFGS problem (0: skip)")
    common.add_out_option(p, "scaling")
    args = p.parse_args()
    common.select_platform(args.device)
    t_start = time.perf_counter()
    log = common.make_log(t_start)

    import jax

    jax.config.update("jax_enable_x64", True)
    import multiwalk as mw
    from multiwalk.functions import cute, yao

    found = common.first_device(args.device)
    if found is None:
        return 2
    dev, on_gpu = found
    env = common.environment(dev, on_gpu, mw, args.quick)
    n_max = min(args.max_devices or jax.device_count(), jax.device_count())
    counts = [k for k in (1, 2, 4, 8) if k <= n_max]
    log(f"{env['device']} x {jax.device_count()}; device counts {counts}")
    scale = 1 if not args.quick else 0
    nseq = 1792 if scale else 32  # 32 temperatures each: 57,344 chains
    walkers = 122880 if scale else 256
    starts = 4096 if scale else 32

    rastrigin = mw.Problem(objective=yao.rastrigin, lower=-5.12 * np.ones(10), upper=5.12 * np.ones(10))
    ackley = mw.Problem(objective=yao.ackley, lower=-32.0 * np.ones(20), upper=32.0 * np.ones(20))
    rosen = mw.Problem(objective=cute.extended_rosenbrock, lower=-2.0 * np.ones(100), upper=2.0 * np.ones(100))
    cases = [
        ("ReplicaExchange", "nseq", nseq, rastrigin,
         lambda b: mw.ReplicaExchange(nbeta=32, nseq=b, nburn=0, niter=50 if scale else 5)),
        ("PatternSearch (xla)", "n_walkers", walkers, ackley,
         lambda b: mw.PatternSearch(n_walkers=b, iterations=20, rounds=1, kernel="xla")),
        ("LBFGS multi-start", "starts", starts, rosen,
         lambda b: mw.LBFGS(starts=b, max_iterations=40, eps=0.0)),
    ]
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    out = Path(args.out)

    def save() -> None:
        common.write_report(out, "scaling", {"environment": env, "rows": rows, "skipped": skipped}, "")

    for name, option, base, problem, make in cases:
        for kind in ("strong", "weak"):
            for k in counts:
                if kind == "weak" and k == 1:
                    continue  # the same run as strong, k = 1
                if time.perf_counter() - t_start > args.budget:
                    skipped.append(f"{name} {kind} k={k}")
                    continue
                batch = base * (k if kind == "weak" else 1)
                r = timed(mw, problem, make(batch), k)
                rows.append({"case": name, "kind": kind, "option": option, "batch": batch, "k": k, **r})
                log(f"{name} {kind} {option}={batch} on {r['devices']}: {r['seconds'] * 1e3:.1f} ms "
                    f"({r['iterations']} it), compile {r['compile_seconds']:.1f} s, best {r['fun']:.6g}")
                save()

    lbfgs_rows: list[dict[str, Any]] = []
    n_big = int(args.lbfgs_n) if scale else 1 << 16
    n_big -= n_big % (4 * max(counts))
    if n_big > 0:
        bw = common.measure_bandwidth((1 << 30) if on_gpu else (1 << 26), reps=10 if on_gpu else 3)["bytes_per_s"]
        env["bandwidth_bytes_per_s"] = bw
        log(f"bandwidth of one device {bw / 1e9:.0f} GB/s")
        x0 = cute.start("extended_rosenbrock", n_big)
        problem = mw.Problem(objective=cute.extended_rosenbrock, x0=x0)
        solver = mw.LBFGS(m=M, eps=0.0, max_iterations=20)
        for k in counts:
            if time.perf_counter() - t_start > args.budget:
                skipped.append(f"L-BFGS n={n_big} k={k}")
                continue
            try:
                r = timed(mw, problem, solver, k)
            except Exception as err:  # noqa: BLE001 - out of memory on too few devices: report and go on
                skipped.append(f"L-BFGS n={n_big} k={k}: {type(err).__name__}: {str(err)[:200]}")
                log(skipped[-1])
                continue
            per_it = r["seconds"] / max(r["iterations"], 1)
            floor = (4 * M + 10) * (n_big / k) * 8 / bw
            lbfgs_rows.append({"n": n_big, "k": k, "per_iteration": per_it, "floor": floor, **r})
            log(f"L-BFGS n={n_big:.3g} on {r['devices']}: {per_it * 1e3:.2f} ms/it, floor {floor * 1e3:.2f} ms, "
                f"ratio {per_it / floor:.2f}")
        del problem, x0
    rows_all = {"rows": rows, "lbfgs": lbfgs_rows, "skipped": skipped}

    lines = [f"## Scaling ({env['device']} x {jax.device_count()}, {env['date']}, JAX {env['jax']})", "",
             "| solver | scaling | batch | devices | ms | speed-up / efficiency | best |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        ref = next(r for r in rows if r["case"] == row["case"] and r["kind"] == "strong" and r["k"] == 1)
        ratio = ref["seconds"] / row["seconds"]
        lines.append(f"| {row['case']} | {row['kind']} | {row['option']}={row['batch']} | {row['devices']} | "
                     f"{row['seconds'] * 1e3:.1f} | {ratio:.2f}{'x' if row['kind'] == 'strong' else ''} | {row['fun']:.6g} |")
    if lbfgs_rows:
        lines += ["", "| L-BFGS n | devices | ms / iteration | floor ms / iteration | ratio | iterations |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for r in lbfgs_rows:
            lines.append(f"| {r['n']:.3g} | {r['devices']} | {r['per_iteration'] * 1e3:.2f} | {r['floor'] * 1e3:.2f} | "
                         f"{r['per_iteration'] / r['floor']:.2f} | {r['iterations']} |")
    notes = [f"skipped (time budget or memory): {', '.join(skipped)}"] if skipped else []
    md = common.finish_markdown(lines, notes)
    common.write_report(out, "scaling", {"environment": env, **rows_all}, md)
    common.print_done(log, out, "scaling", t_start, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
