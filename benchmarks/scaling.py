"""Strong and weak scaling of the walker-parallel solvers over the devices of one host (``mw.solve(devices=k)``).

Cases (``--cases``, default all): ReplicaExchange (32 temperatures x ``--re-nseq`` sequences,
Rastrigin-10, sampling phase), PatternSearch in its XLA form (Ackley-20, ``--ps-walkers``,
20 iterations), multi-start L-BFGS (extended Rosenbrock, ``--lbfgs-starts`` starts of
``--lbfgs-starts-n`` variables, 20 iterations) and the exchange runner mw.Exchange in its XLA form
(Himmelblau, ``--ex-replicas`` replicas, one temperature each, ``--ex-steps`` steps, one step per
loop trip).  For each case with
batch B and device counts k = 1, 2, ... up to ``--max-devices``, every batch j B (j a device
count) runs on every k:

* throughput check: on one device, 2B should take >= 1.7x the time of B; less means B is still
  bound by per-iteration latency, where splitting cannot pay (raise B);
* strong scaling: the same batch on k devices; speed-up = time(1) / time(k) (goal: >= 1.9x on
  2 GPUs, >= 3.6x on 4);
* weak scaling: k B on k devices; efficiency = time(1, B) / time(k, k B) (1.0 is perfect);
* "best": the best value found, which must not depend on k (bit for bit for the sampler and the
  searches; L-BFGS's batched products may round differently, relative difference shown).

Each configuration is timed as a user calls it: the wall clock of ``mw.solve(..., devices=k)``
with the result read back, the first call (compiling) and the second (the compiled loop reused,
warm collectives).  In the table the peer is the same batch on one device, measured in the same
run (ratio = speed-up), and the floor is perfect scaling, time(1 device) / k.

Then one L-BFGS problem (extended Rosenbrock, ``--lbfgs-n`` variables on the most devices, m = 7,
float64) with its vectors split along n: n k / k_max on k devices (the same per-device size; n alone
on fewer devices does not fit) against the memory floor per iteration and device over the measured
bandwidth of one device: (4m + 10) n / k values for the two-pass and XLA forms (the floor of
benchmarks/lbfgs.py, divided over the devices), (2m + 5) n / k = 19 n / k values per evaluation
times the loop's evaluations per iteration for the one-pass form (``kernel="onepass"``), per
iteration of ``run_seconds``; a configuration whose state would not fit in the devices' memory is
skipped with its estimate. ``--split-problem cute`` (default) gives the problem as cute's
``extended_rosenbrock_value_and_grad`` (with its ``.block`` hook, so ``kernel="auto"`` /
``"onepass"`` run the one-pass loop split over the devices on GPUs in float64), ``objective`` as the
plain objective (the two-pass form's case before 2026-11-23); ``--split-compare`` adds the goal's
size on the most devices with other kernels (same run).

    XLA_FLAGS=--xla_force_host_platform_device_count=2 PYTHONPATH=src python3 benchmarks/scaling.py --device cpu --quick
    PYTHONPATH=src python3 benchmarks/scaling.py --device gpu --budget 400 --out "$OUT"    # 2-8 GPUs of one host

Cases run in the order ``--cases`` gives.  Every row is printed and the report (scaling.json /
.md in ``--out``) rewritten as soon as it is measured, so a run cut off by a time limit keeps what
it did; ``--budget`` seconds: no new configuration starts after it (the skipped ones are listed).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

M = 7
THROUGHPUT_BOUND = 1.7  # time(2B) / time(B) on one device at or above this: throughput-bound


def timed(mw: Any, problem: Any, solver: Any, k: int) -> dict[str, Any]:
    """The wall clock of ``mw.solve(..., devices=k)`` twice, the result read back: the first call
    compiles; the second is the time.  The first run is whole, not one iteration: what runs first
    inside a run is then warm too (on several GPUs the collectives' communicators are set up at
    their first execution: mw.Exchange's first exchange comes at step ``numsteps_exchange``)."""
    calls = common.wall_calls(lambda: mw.solve(problem, solver, seed=0, progress=False, devices=k))
    r = calls.result
    return {
        "devices": r.stats["devices"], "seconds": calls.second, "first_seconds": calls.first,
        "run_seconds": r.stats["run_seconds"], "iterations": sum(r.stats["iterations"].values()),
        "compile_seconds": calls.first_result.stats["compile_seconds"], "fun": float(r.fun),
        "nfev": int(r.stats.get("evaluations", 0)), "kernel": r.stats.get("kernel", ""),
    }


def loop_bytes_per_device(problem: Any, solver: Any, k: int) -> int:
    """Device memory one device needs for the run's compiled loop on ``k`` devices (arguments,
    temporaries and outputs not aliased to the donated state), from XLA's memory analysis of the
    loop compiled for abstract inputs: nothing is allocated, so an n too large for the devices is
    found before its state is built (compiling costs seconds; the driver compiles again)."""
    import importlib

    import jax
    import jax.numpy as jnp

    driver = importlib.import_module("multiwalk.solve")  # the module; mw.solve is the function
    dist = importlib.import_module("multiwalk.distributed")
    compile_cache = importlib.import_module("multiwalk.compile_cache")
    plan = solver.plan(problem, k, None)
    shapes = jax.eval_shape(solver.initial_state_fn(problem, None, plan), driver.run_key(0))
    placement = dist.choose_devices(solver, problem, shapes, k)
    plan = dataclasses.replace(plan, mesh=placement.mesh)
    arrays, static = compile_cache.problem_arrays(problem, plan.arrays_as_arguments)
    runner = driver._chunk_runner(problem, solver, 0, static, plan)
    if placement.sharded:
        shapes = jax.tree_util.tree_map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                                        shapes, placement.shardings)
        rep = placement.replicated
        jitted = jax.jit(runner, donate_argnums=0, in_shardings=(placement.shardings, rep, rep),
                         out_shardings=(placement.shardings, rep, rep, rep))  # state, steps, summary, report
    else:
        jitted = jax.jit(runner, donate_argnums=0)
    # compiled as the driver does: with the plan's mesh (L-BFGS then picks the form XLA can split)
    with dist.mesh_context(placement.mesh if placement.sharded else None):
        ma = jitted.lower(shapes, jax.ShapeDtypeStruct((), jnp.int32), arrays).compile().memory_analysis()
    return int(ma.argument_size_in_bytes + ma.temp_size_in_bytes + ma.output_size_in_bytes - ma.alias_size_in_bytes)


def himmelblau(x: Any) -> Any:
    """Himmelblau's function (4 minima of value 0 in [-6, 6]^2), ODAT-SE's usual test."""
    return (x[0] ** 2 + x[1] - 11) ** 2 + (x[0] + x[1] ** 2 - 7) ** 2


def same_best(a: float, b: float) -> str:
    """'same' if equal, else the relative difference."""
    if a == b or (np.isnan(a) and np.isnan(b)):
        return "same"
    return f"rel. diff {abs(a - b) / max(abs(a), abs(b), 1e-300):.1e}"


def scaling_rows(rows: list[dict[str, Any]]) -> list[common.Row]:
    """Per case, batch and device count: ours on k devices against the same batch on one device
    (the peer), the floor time(1) / k; the note has the weak-scaling efficiency, the throughput
    check (time(2B) / time(B) on one device) and whether the best agrees with one device's."""
    out = []
    for row in rows:
        at = {(r["batch"], r["k"]): r for r in rows if r["case"] == row["case"]}
        base = min(b for b, _ in at)  # B: the case's smallest batch
        one = at.get((row["batch"], 1))
        notes = [f"{row['iterations']} it, best {row['fun']:.6g}"]
        if row["k"] > 1 and row["batch"] == base * row["k"] and (base, 1) in at:
            notes.append(f"weak efficiency {at[(base, 1)]['seconds'] / row['seconds']:.2f}")
        if row["k"] == 1 and row["batch"] == 2 * base and (base, 1) in at:
            g = row["seconds"] / at[(base, 1)]["seconds"]
            notes.append(f"time(2B)/time(B) {g:.2f}: {'throughput' if g >= THROUGHPUT_BOUND else 'LATENCY'}-bound")
        if one and row["k"] > 1:
            notes.append(f"best vs 1 device: {same_best(one['fun'], row['fun'])}")
        peer = one["seconds"] if one and row["k"] > 1 else None
        out.append(common.Row(f"{row['case']}, {row['option']}={row['batch']}, {row['devices']} device(s)",
                              row["first_seconds"], row["seconds"], peer, "1 device" if peer else "",
                              peer / row["k"] if peer else None, "; ".join(notes)))
    return out


ONEPASS_VALUES = 2 * M + 5  # n values per evaluation of the one-pass loop: (2m + 2) read, 3 written
TWO_PASS_VALUES = 4 * M + 10  # n values per iteration of the two-pass design (benchmarks/lbfgs.py)


def split_floor(kernel: str, n_per_device: float, iterations: int, nfev: int, bw: float) -> float:
    """Seconds per iteration at the memory floor on one device of the split problem (float64): the
    one-pass form ``19 n / k`` values per evaluation times the loop's evaluations per iteration
    (``nfev - 1``: the first evaluation is the start's, outside the timed loop), the others
    ``(4m + 10) n / k`` values per iteration."""
    if kernel.startswith("onepass"):
        per_iteration = ONEPASS_VALUES * (nfev - 1) / max(iterations, 1)
    else:
        per_iteration = TWO_PASS_VALUES
    return per_iteration * n_per_device * 8 / bw


def lbfgs_table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| L-BFGS n | devices | n per device | kernel | ms / iteration | floor ms / iteration | ratio | "
           f"ratio to the {TWO_PASS_VALUES} n floor | iterations / evals | f | f vs 1 device |",
           "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    for r in rows:
        one = next((x for x in rows if x["n"] == r["n"] and x["k"] == 1), None)
        agree = same_best(one["fun"], r["fun"]) if one is not None and r is not one else ""
        design = r.get("design_floor", r["floor"])
        out.append(f"| {r['n']:.3g} | {r['devices']} | {r['n'] / r['k']:.3g} | {r['kernel']} | "
                   f"{r['per_iteration'] * 1e3:.2f} | {r['floor'] * 1e3:.2f} | {r['per_iteration'] / r['floor']:.2f} | "
                   f"{r['per_iteration'] / design:.2f} | {r['iterations']} / {r['nfev']} | {r['fun']:.10g} | {agree} |")
    return out


def main() -> int:
    p = common.new_parser(__doc__, "scaling")
    p.add_argument("--max-devices", type=int, default=None, help="largest device count (default: all)")
    p.add_argument("--device-counts", default=None,
                   help="comma-separated device counts to run, 1 included (default: 1, 2, 4, 8 up to --max-devices); "
                        "e.g. 1,4 on a 4-GPU host when the 2-GPU rows are known")
    p.add_argument("--budget", type=float, default=230.0, help="seconds after which no new configuration starts")
    p.add_argument("--cases", default=None,
                   help="comma-separated subset of re, ps, lbfgs (multi-start), exchange, split (one L-BFGS problem); "
                        "default all (with --quick: re)")
    p.add_argument("--re-nseq", type=int, default=32768, help="ReplicaExchange sequences B (x 32 temperatures)")
    p.add_argument("--re-iters", type=int, default=30, help="ReplicaExchange sampling iterations")
    p.add_argument("--ps-walkers", type=int, default=1 << 22, help="PatternSearch walkers B (1.9x on 2 H200s needs >= ~2.8M)")
    p.add_argument("--lbfgs-starts", type=int, default=1024, help="multi-start L-BFGS starts B")
    p.add_argument("--lbfgs-starts-n", type=int, default=100_000, help="variables of each multi-start problem")
    p.add_argument("--ex-replicas", type=int, default=1 << 21, help="Exchange replicas B")
    p.add_argument("--ex-steps", type=int, default=400, help="Exchange Monte Carlo steps")
    p.add_argument("--lbfgs-n", type=float, default=1e9,
                   help="variables of the split L-BFGS problem on the most devices (0: skip)")
    p.add_argument("--split-kernel", choices=("auto", "xla", "pallas", "onepass"), default="auto",
                   help="LBFGS(kernel=...) of the split problem: 'onepass' runs the one-pass loop per device "
                        "(shard_map; needs --split-problem cute), 'pallas' the fused two passes, 'auto' the one-pass "
                        "loop on GPUs in float64 where it applies (else the passes), 'xla' the XLA form")
    p.add_argument("--split-problem", choices=("cute", "objective"), default="cute",
                   help="the split problem's form: cute's value_and_grad with its block hook (the one-pass loop "
                        "can run) or the plain objective (the two-pass form only)")
    p.add_argument("--split-compare", default="",
                   help="comma-separated kernels also run at the goal's size on the most devices (e.g. pallas)")
    args = p.parse_args()
    args.cases = args.cases or ("re" if args.quick else "re,ps,lbfgs,exchange,split")
    if args.quick and args.device != "gpu":  # two virtual CPU devices, unless XLA_FLAGS says otherwise
        os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    common.select_platform(args.device)
    # the split L-BFGS problem is sized to fill the devices: let JAX take 95 % of each (default 75 %)
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
    t_start = time.perf_counter()
    log = common.make_log(t_start)

    import jax

    jax.config.update("jax_enable_x64", True)
    import multiwalk as mw
    from multiwalk.functions import cute, yao
    from multiwalk.solvers.exchange import temperature_ladder

    found = common.first_device(args.device)
    if found is None:
        return 2
    dev, on_gpu = found
    env = common.environment(dev, on_gpu, mw, args.quick)
    n_max = min(args.max_devices or jax.device_count(), jax.device_count())
    counts = [k for k in (1, 2, 4, 8) if k <= n_max]
    if args.device_counts:
        try:
            asked = sorted({int(k) for k in args.device_counts.split(",")})
        except ValueError:
            p.error(f"--device-counts: whole numbers separated by commas, got {args.device_counts!r}")
        if asked[0] != 1 or asked[-1] > n_max:
            p.error(f"--device-counts {args.device_counts}: must include 1 and stay <= {n_max} (the devices here)")
        counts = asked
    env["device_counts"] = counts
    env["command"] = " ".join(sys.argv)
    log(f"{env['device']} x {jax.device_count()}; device counts {counts}")
    # first: one device's bandwidth (the split L-BFGS floor), which also wakes a fresh GPU up
    # before the first timed row (a fresh machine's first rows have run 2x slow)
    bw = common.measure_bandwidth((1 << 30) if on_gpu else (1 << 26), reps=10 if on_gpu else 3)["bytes_per_s"]
    env["bandwidth_bytes_per_s"] = bw
    log(f"bandwidth of one device {bw / 1e9:.0f} GB/s")
    wanted = set(args.cases.split(","))
    unknown = wanted - {"re", "ps", "lbfgs", "exchange", "split"}
    if unknown:
        p.error(f"--cases: unknown {sorted(unknown)}; choose from re, ps, lbfgs, exchange, split")
    compare = [c for c in args.split_compare.split(",") if c]
    bad = [c for c in compare if c not in ("auto", "xla", "pallas", "onepass")]
    if bad:
        p.error(f"--split-compare: unknown kernels {bad}; choose from auto, xla, pallas, onepass")
    if args.split_problem == "objective" and "onepass" in [args.split_kernel, *compare]:
        p.error("kernel 'onepass' needs --split-problem cute (the plain objective has no block hook .block)")
    quick = args.quick
    nseq = 32 if quick else args.re_nseq
    walkers = 256 if quick else args.ps_walkers
    starts = 32 if quick else args.lbfgs_starts
    starts_n = 100 if quick else args.lbfgs_starts_n
    replicas = 256 if quick else args.ex_replicas
    ex_steps = 20 if quick else args.ex_steps
    re_iters = 5 if quick else args.re_iters

    rastrigin = mw.Problem(objective=yao.rastrigin, lower=-5.12 * np.ones(10), upper=5.12 * np.ones(10))
    ackley = mw.Problem(objective=yao.ackley, lower=-32.0 * np.ones(20), upper=32.0 * np.ones(20))
    rosen = mw.Problem(objective=cute.extended_rosenbrock, lower=-2.0 * np.ones(starts_n),
                       upper=2.0 * np.ones(starts_n))
    plane = mw.Problem(objective=himmelblau, lower=-6.0 * np.ones(2), upper=6.0 * np.ones(2))

    def exchange(r: int) -> Any:  # ODAT-SE's benchmark input: T = 1..100 log-spaced, exchanges every 10 steps
        betas = temperature_ladder(r, Tmin=1.0, Tmax=100.0)
        # the XLA form: a Pallas form (one kernel XLA cannot split) stays on one device.  One step
        # per loop trip: the ladder (R values) is compiled in as constants, and with the GPU's
        # default of 8 steps per trip compiling took 32 s at 2^21 replicas on a 2-core CPU (5 s
        # with 1); at these sizes a step is bound by throughput, not by the loop trip
        extra = {"kernel": "xla"} if "kernel" in {f.name for f in dataclasses.fields(mw.Exchange)} else {}
        return mw.Exchange(betas=tuple(betas), numsteps=ex_steps + 1, numsteps_exchange=10, step_width=(0.5, 0.5),
                           unroll=1, **extra)

    cases = [
        ("re", "ReplicaExchange", "nseq", nseq, rastrigin,
         lambda b: mw.ReplicaExchange(nbeta=32, nseq=b, nburn=0, niter=re_iters)),
        ("ps", "PatternSearch (xla)", "n_walkers", walkers, ackley,
         lambda b: mw.PatternSearch(n_walkers=b, iterations=20, rounds=1, kernel="xla")),
        ("lbfgs", f"LBFGS multi-start, n={starts_n}", "starts", starts, rosen,
         # the box (for the drawn starts) makes it L-BFGS-B; pgtol=0: every start runs all 20 iterations
         lambda b: mw.LBFGS(starts=b, max_iterations=20, pgtol=0.0)),
        ("exchange", "Exchange (xla)", "replicas", replicas, plane, exchange),
    ]
    rows: list[dict[str, Any]] = []
    lbfgs_rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    out = Path(args.out)

    def report() -> str:
        lines = [f"Scaling: {env['device']} x {jax.device_count()}, {env['date']}, JAX {env['jax']}; "
                 f"`{env['command']}`", "", *common.results_table(env, scaling_rows(rows))]
        if lbfgs_rows:
            bw = env.get("bandwidth_bytes_per_s", 0.0)
            lines += ["", f"One L-BFGS problem split along n (m = {M}, float64, --split-problem {args.split_problem}; "
                      f"floor = {TWO_PASS_VALUES} n / k values per iteration, the one-pass form {ONEPASS_VALUES} n / k "
                      f"per evaluation in the loop, at {bw / 1e9:.0f} GB/s, the measured bandwidth of one device):", ""]
            lines += lbfgs_table(lbfgs_rows)
        if skipped:
            lines += ["", f"Note: skipped (time budget, memory or error): {'; '.join(skipped)}"]
        md = "\n".join(lines) + "\n"
        out.mkdir(parents=True, exist_ok=True)
        (out / "scaling.json").write_text(json.dumps({"environment": env, "rows": rows, "lbfgs": lbfgs_rows,
                                                      "skipped": skipped}, indent=1, default=str))
        (out / "scaling.md").write_text(md)
        return md

    def over_budget(what: str) -> bool:
        if time.perf_counter() - t_start > args.budget:
            skipped.append(what)
            log(f"skipped (budget): {what}")
            return True
        return False

    batches_of = sorted(set(counts) | {2})  # j B: B, 2B (the throughput check), ... k_max B
    def run_case(tag: str, name: str, option: str, base: int, problem: Any, make: Any) -> None:
        # throughput check first (B, 2B on one device), then the other device counts
        configs = [(base * j, 1) for j in batches_of] + [(base * j, k) for k in counts[1:] for j in batches_of]
        for batch, k in configs:
            what = f"{name} {option}={batch} k={k}"
            if over_budget(what):
                continue
            try:
                r = timed(mw, problem, make(batch), k)
            except Exception as err:  # noqa: BLE001 - out of memory at the largest batch: report and go on
                skipped.append(f"{what}: {type(err).__name__}: {str(err)[:200]}")
                log(skipped[-1])
                continue
            rows.append({"case": name, "option": option, "batch": batch, "k": k, **r})
            log(f"{what}: first {r['first_seconds']:.2f} s, second {r['seconds']:.3f} s "
                f"(compile {r['compile_seconds']:.1f} s, {r['iterations']} it)")
            report()

    def run_split() -> None:
        """One L-BFGS problem split along n (see the module docstring)."""
        if over_budget("split L-BFGS (all)"):
            return
        n_top = int(args.lbfgs_n) if not quick else 1 << 16
        kmax = max(counts)
        # n k / k_max on every k: its n / 2 rows of the block hook a multiple of k and of the host's
        # device count (kernel='auto' takes the one-pass loop on several devices only where they split)
        step = 4 * kmax * jax.device_count()
        n_top -= n_top % step
        limit = (dev.memory_stats() or {}).get("bytes_limit") if on_gpu else None
        env["device_bytes_limit"] = limit
        has_kernel = "kernel" in {f.name for f in dataclasses.fields(mw.LBFGS)}

        def lbfgs(kernel: str | None = None) -> Any:
            kernel = kernel or (args.split_kernel if args.split_kernel != "auto" else None)
            extra = {"kernel": kernel} if kernel and has_kernel else {}
            return mw.LBFGS(m=M, eps=0.0, max_iterations=20, **extra)

        @functools.lru_cache(maxsize=2)  # x0 is 8 GB at n = 1e9: built once for the check and the run
        def problem_of(n: int) -> Any:
            x0 = cute.start("extended_rosenbrock", n)
            if args.split_problem == "cute":
                return mw.Problem(value_and_grad=cute.extended_rosenbrock_value_and_grad, x0=x0)
            return mw.Problem(objective=cute.extended_rosenbrock, x0=x0)

        # The goal's size on the most devices, halved until XLA's memory analysis of the compiled
        # loop (nothing allocated) says it fits; a crude 40 values per variable skips the analysis.
        while n_top >= step and limit is not None and 40 * 8 * n_top / kmax > limit:
            need = loop_bytes_per_device(problem_of(n_top), lbfgs(), kmax)
            log(f"L-BFGS n={n_top:.3g} on {kmax} devices: the compiled loop needs {need / 1e9:.1f} GB per device "
                f"of {limit / 1e9:.1f} GB")
            env.setdefault("split_memory_checks", []).append({"n": n_top, "k": kmax, "bytes": need})
            if need <= limit:
                break
            skipped.append(f"L-BFGS n={n_top:.3g} k={kmax}: needs {need / 1e9:.1f} GB per device, "
                           f"{limit / 1e9:.1f} GB there; n halved")
            n_top //= 2
            n_top -= n_top % step
        # the same size per device on each k (the goal's case first), then the smaller ones on all
        # devices; on one device also the XLA form the split runs use (the default may be Pallas)
        configs: list[tuple[int, int, str | None]] = [(n_top * k // kmax, k, None) for k in reversed(counts)]
        if has_kernel:
            configs[1:1] = [(n_top, kmax, kernel) for kernel in compare]
        if has_kernel and kmax > 1:
            configs.append((n_top // kmax, 1, "xla"))
        configs += [(n_top * k // kmax, kmax, None) for k in reversed(counts[:-1])]
        for n, k, kernel in configs:
            what = f"L-BFGS n={n:.3g} k={k}" + (f" kernel={kernel}" if kernel else "")
            if over_budget(what):
                continue
            try:
                r = timed(mw, problem_of(n), lbfgs(kernel), k)
            except Exception as err:  # noqa: BLE001 - out of memory: report and go on
                skipped.append(f"{what}: {type(err).__name__}: {str(err)[:200]}")
                log(skipped[-1])
                continue
            per_it = r["run_seconds"] / max(r["iterations"], 1)
            floor = split_floor(r["kernel"], n / k, r["iterations"], r["nfev"], bw)
            design = split_floor("", n / k, r["iterations"], r["nfev"], bw)
            lbfgs_rows.append({"n": n, "k": k, "per_iteration": per_it, "floor": floor, "design_floor": design, **r})
            log(f"{lbfgs_table(lbfgs_rows)[-1]}  (compile {r['compile_seconds']:.1f} s)")
            report()

    for token in args.cases.split(","):  # in the order given
        if token == "split":
            run_split()
        else:
            run_case(*next(c for c in cases if c[0] == token))

    md = report()
    log(f"wrote {out / 'scaling.json'} and {out / 'scaling.md'}; total {time.perf_counter() - t_start:.1f} s")
    print()
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
