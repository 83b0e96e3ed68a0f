"""L-BFGS ``kernel="pallas"`` with Extended Rosenbrock given as an objective or as a value_and_grad (issue 8).

On 2 H200s (n = 1e9 split, 2026-11-23) the two-pass fused split run took 112 ms per iteration
with ``Problem(value_and_grad=cute.extended_rosenbrock_value_and_grad)`` and 48 ms with
``Problem(objective=cute.extended_rosenbrock)``.  The split form evaluates the user's
value_and_grad on the split x (outside the passes' shard_map); its shifts by one coordinate,
written as ``concatenate([x[1:], x[-1:]])`` until 8fba4df, made XLA all-gather x twice per
evaluation; now ``lax.pad`` (one value crosses each device boundary).  This script times, on
``--devices`` devices (default all; x split along n when more than one):

* one line-search evaluation ``(f, g, g'd)`` at ``x + stp d``: the old concatenate form
  (``concat``, defined here) against cute's (``pad``), and ``jax.value_and_grad`` of the objective;
* whole solves (m = 7, 20 iterations, eps = 0, float64) with ``kernel="pallas"`` for the forms
  objective, value_and_grad (cute's, with its ``.along`` / ``.block`` hooks: on one device the line
  search then runs through ``.along``), value_and_grad without hooks (pad) and the old concat form;
  ms per iteration (``stats["run_seconds"]``, compile excluded), medians of ``--reps`` solves with
  their spread, and the collectives of each compiled loop.

``--cpu-devices K`` (before JAX starts) makes K virtual CPU devices: a smoke run of the split case
(Pallas in interpret mode; slow, so small ``--n``).  Writes lbfgs_split_forms.json / .md in --out.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

M = 7
ITERATIONS = 20


def concat_vg(x: Any) -> tuple[Any, Any]:
    """cute.extended_rosenbrock_value_and_grad as it was until 8fba4df (shifts by concatenate)."""
    import jax
    import jax.numpy as jnp

    n = x.shape[0]
    first = jax.lax.iota(jnp.int32, n) % 2 == 0
    after = jnp.concatenate([x[1:], x[-1:]])
    before = jnp.concatenate([x[:1], x[:-1]])
    x1 = jnp.where(first, x, before)
    x2 = jnp.where(first, after, x)
    t = x2 - x1 * x1
    u = 1.0 - x1
    g = jnp.where(first, -400.0 * x1 * t - 2.0 * u, 200.0 * t)
    return jnp.sum(jnp.where(first, 100.0 * t * t + u * u, 0.0)), g


def collectives(compiled: Any) -> list[str]:
    """The kinds of collective operations in a compiled executable's HLO."""
    text = compiled.as_text()
    return sorted(set(re.findall(r"\b(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)\b", text)))


def spread(times: list[float]) -> dict[str, float]:
    """Median, min and max of ``times`` (s), in ms."""
    return {"median_ms": 1e3 * statistics.median(times), "min_ms": 1e3 * min(times), "max_ms": 1e3 * max(times)}


def main() -> int:
    p = common.new_parser(__doc__)
    p.add_argument("--n", default="2.5e8,5e8", help="problem sizes (total over the devices), comma-separated")
    p.add_argument("--devices", type=int, default=0, help="devices to split over (0: all)")
    p.add_argument("--reps", type=int, default=3, help="timed solves per form (after one compiling run)")
    p.add_argument("--eval-reps", type=int, default=7, help="timed evaluations per form (after 2 warm-ups)")
    p.add_argument("--forms", default="objective,vg,vg-pad,vg-concat", help="solve forms, comma-separated")
    p.add_argument("--no-solves", action="store_true", help="evaluations only")
    p.add_argument("--budget", type=float, default=250.0, help="seconds: no new measurement starts after")
    p.add_argument("--cpu-devices", type=int, default=0, help="K virtual CPU devices (smoke run; sets XLA_FLAGS)")
    common.add_out_option(p, "lbfgs_split_forms")
    args = p.parse_args()
    if args.cpu_devices:
        os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={args.cpu_devices}"
        args.device = "cpu"
    common.select_platform(args.device)
    start = common.start_run(args.device, False)
    if start is None:
        return 2
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    import multiwalk as mw
    from multiwalk.functions import cute
    from multiwalk.solve import _COMPILED

    log, env = start.log, start.env
    k = args.devices or jax.device_count()
    env["command"] = " ".join(sys.argv)
    env["devices_used"] = k
    out = Path(args.out)
    evals: list[dict[str, Any]] = []
    solves: list[dict[str, Any]] = []
    skipped: list[str] = []

    def over(what: str) -> bool:
        if time.perf_counter() - start.t_start > args.budget:
            skipped.append(what)
            log(f"skipped (budget): {what}")
            return True
        return False

    def report() -> str:
        lines = [f"## L-BFGS pallas, objective vs value_and_grad ({env['device']}, {k} device(s), {env['date']}, "
                 f"JAX {env['jax']})", "", f"Command: `{env['command']}`", "",
                 "One evaluation (f, g, g'd) at x + stp d, ms (median [min, max]):", "",
                 "| n | form | collectives | ms |", "|---|---|---|---|"]
        lines += [f"| {e['n']:.3g} | {e['form']} | {', '.join(e['collectives']) or '-'} | {e['median_ms']:.3f} "
                  f"[{e['min_ms']:.3f}, {e['max_ms']:.3f}] |" for e in evals]
        lines += ["", f"Solves, kernel='pallas', m = {M}, {ITERATIONS} iterations, ms per iteration (median [min, max] "
                  f"of {args.reps}):", "", "| n | form | it / ev | kernel | collectives | ms / it |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {s['n']:.3g} | {s['form']} | {s['iterations']} / {s['nfev']} | {s['kernel']} | "
                  f"{', '.join(s['collectives']) or '-'} | {s['median_ms']:.2f} [{s['min_ms']:.2f}, {s['max_ms']:.2f}] |"
                  for s in solves]
        md = common.finish_markdown(lines, [f"skipped: {'; '.join(skipped)}"] if skipped else [])
        common.write_report(out, "lbfgs_split_forms", {"environment": env, "evaluations": evals, "solves": solves,
                                                       "skipped": skipped}, md)
        return md

    mesh = jax.sharding.Mesh(np.array(jax.devices()[:k]), ("batch",))
    split = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))
    whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    def plain_pad(x: Any) -> tuple[Any, Any]:  # cute's evaluation without its .along / .block hooks
        return cute.extended_rosenbrock_value_and_grad(x)

    eval_forms = {"concat": concat_vg, "pad": cute.extended_rosenbrock_value_and_grad,
                  "autodiff": jax.value_and_grad(cute.extended_rosenbrock)}
    sizes = [int(float(s)) for s in args.n.split(",")]
    sizes = [n - n % (4 * k) for n in sizes]

    for n in sizes:  # evaluations first (cheap), every size
        x = jax.device_put(jnp.asarray(cute.start("extended_rosenbrock", n)), split)
        d = jax.device_put(jnp.asarray(np.random.default_rng(0).normal(size=n) * 1e-3), split)
        for name, vg in eval_forms.items():
            if over(f"evaluation n={n:.3g} {name}"):
                continue

            def line(x: Any, d: Any, stp: Any, vg: Any = vg) -> tuple[Any, Any, Any]:
                f, g = vg(x + stp * d)
                return f, g, g @ d

            fn = jax.jit(line, in_shardings=(split, split, whole), out_shardings=(whole, split, whole))
            stp = jnp.asarray(0.5)
            comp = fn.lower(x, d, stp).compile()
            res = None
            for _ in range(2):
                res = jax.block_until_ready(comp(x, d, stp))
            times = []
            for _ in range(args.eval_reps):
                t0 = time.perf_counter()
                res = jax.block_until_ready(comp(x, d, stp))
                times.append(time.perf_counter() - t0)
            evals.append({"n": n, "form": name, "collectives": collectives(comp), "f": float(res[0]), **spread(times)})
            del res
            log(f"eval n={n:.3g} {name}: {evals[-1]['median_ms']:.3f} ms {evals[-1]['collectives']}")
            report()
        del x, d

    problems = {
        "objective": lambda x0: mw.Problem(objective=cute.extended_rosenbrock, x0=x0),
        "vg": lambda x0: mw.Problem(value_and_grad=cute.extended_rosenbrock_value_and_grad, x0=x0),
        "vg-pad": lambda x0: mw.Problem(value_and_grad=plain_pad, x0=x0),
        "vg-concat": lambda x0: mw.Problem(value_and_grad=concat_vg, x0=x0),
    }
    solver = mw.LBFGS(m=M, eps=0.0, max_iterations=ITERATIONS, kernel="pallas")
    for n in [] if args.no_solves else sizes:
        x0 = cute.start("extended_rosenbrock", n)
        for form in args.forms.split(","):
            what = f"solve n={n:.3g} {form}"
            if over(what):
                continue
            problem = problems[form](x0)
            try:
                mw.solve(problem, solver, seed=0, progress=False, devices=k, time_limit=1e-9)  # compiles
                loop = collectives(list(_COMPILED.values())[-1])
                runs = [mw.solve(problem, solver, seed=0, progress=False, devices=k) for _ in range(args.reps)]
            except Exception as err:  # noqa: BLE001 - out of memory: report and go on
                skipped.append(f"{what}: {type(err).__name__}: {str(err)[:200]}")
                log(skipped[-1])
                continue
            r = runs[-1]
            iters = sum(r.stats["iterations"].values())
            per_it = [run.stats["run_seconds"] / max(sum(run.stats["iterations"].values()), 1) for run in runs]
            solves.append({"n": n, "form": form, "iterations": iters, "nfev": int(r.stats.get("evaluations", 0)),
                           "kernel": r.stats.get("kernel", ""), "line_evaluation": r.stats.get("line_evaluation", ""),
                           "fun": float(r.fun), "collectives": loop, **spread(per_it)})
            log(f"{what}: {solves[-1]['median_ms']:.2f} ms/it, {iters} it / {solves[-1]['nfev']} ev, f={r.fun:.6e}, "
                f"{loop}")
            del runs, r
            report()
    md = report()
    common.print_done(log, out, "lbfgs_split_forms", start.t_start, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
