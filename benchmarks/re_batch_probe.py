"""Why ReplicaExchange's time per chain depends on the batch (issue 8): time one compiled sampling
chunk per ``nseq`` and list the GPU kernels it runs.

For each ``nseq`` (x 32 temperatures, Rastrigin-10, float64, ``nburn=0``: the rows of
benchmarks/scaling.py's case "re") the driver's chunk runner for the sampling phase is compiled
as ``mw.solve`` compiles it (donated state), warmed up, then a chunk of ``--iters`` iterations is
run ``--reps`` times (host clock around a blocking call: a chunk is milliseconds, the clock's
resolution microseconds); the median gives ms per iteration and ns per chain-iteration.  Then,
with ``--trace``, one more chunk runs under ``jax.profiler`` and the device's kernels are summed by
name (``jax.profiler.ProfileData``: no TensorBoard needed) into time per iteration; ``--hlo``
writes the optimized HLO (``compiled.as_text()``) of each size to ``re_hlo_<nseq>.tar.gz``.

Several solver versions can be timed in one process, interleaved chunk by chunk (``--versions``:
module paths of ReplicaExchange classes, e.g. a copy of HEAD's file beside the current one, each
optionally with integer options: ``module:exchange_unroll=1``), so a before/after comparison sees
the same GPU state; ``--check`` compares their states after the timed chunks field by field, on the device (for a float
field that differs: the largest absolute and relative difference and how many elements differ).
Results (json, md, HLO) are rewritten after every size, so a run cut off keeps what it measured.

    PYTHONPATH=src python3 benchmarks/re_batch_probe.py --device gpu --sizes 16384,32768 --trace --out "$OUT"
"""

from __future__ import annotations

import importlib
import io
import json
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

NBETA = 32
N_FREE = 10


def kernel_times(trace_dir: Path) -> dict[str, dict[str, float]]:
    """Device kernels of a ``jax.profiler`` trace: name -> {"ns": total duration, "n": launches}.

    Kernels are the events of the GPU planes' stream lines; the XLA op/module summary lines of
    the same plane are skipped so that nothing is counted twice."""
    import jax

    files = sorted(trace_dir.rglob("*.xplane.pb"))
    if not files:
        return {}
    data = jax.profiler.ProfileData.from_file(str(files[-1]))
    out: dict[str, dict[str, float]] = {}
    for plane in data.planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        for line in plane.lines:
            if line.name in ("XLA Modules", "XLA Ops", "Steps", "XLA TraceMe", "Source", "Framework Name Scope"):
                continue
            for ev in line.events:
                d = out.setdefault(ev.name, {"ns": 0.0, "n": 0})
                d["ns"] += ev.duration_ns
                d["n"] += 1
    return out


def short(version: str) -> str:
    """``package.module:options`` -> ``module:options``."""
    return version.split(":")[0].rsplit(".", 1)[-1] + "".join(":" + o for o in version.split(":")[1:])


def main() -> int:
    p = common.new_parser(__doc__)
    p.add_argument("--sizes", default="16384,32768,65536,131072,262144", help="comma-separated nseq values")
    p.add_argument("--iters", type=int, default=10, help="iterations per timed chunk")
    p.add_argument("--reps", type=int, default=7, help="timed chunks per size and version (median)")
    p.add_argument("--trace", action="store_true", help="profile one chunk per size: kernel times by name")
    p.add_argument("--hlo", action="store_true", help="save the optimized HLO of each size (re_hlo_<nseq>.tar.gz)")
    p.add_argument("--versions", default="multiwalk.solvers.replica_exchange",
                   help="comma-separated modules holding a ReplicaExchange class, each optionally with solver "
                        "options (module:exchange_unroll=1:...), timed interleaved")
    p.add_argument("--check", action="store_true",
                   help="with several versions: assert that their states after the timed chunks are equal")
    common.add_out_option(p, "re_batch_probe")
    args = p.parse_args()
    common.select_platform(args.device)
    t_start = time.perf_counter()
    log = common.make_log(t_start)

    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    import multiwalk as mw
    driver = importlib.import_module("multiwalk.solve")  # the module; mw.solve is the function
    from multiwalk.functions import yao

    found = common.first_device(args.device)
    if found is None:
        return 2
    dev, on_gpu = found
    env = common.environment(dev, on_gpu, mw, False)
    env["command"] = " ".join(sys.argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    versions = args.versions.split(",")
    classes = {}
    for v in versions:  # "module[:option=int]..."
        module, *opts = v.split(":")
        options = {o.split("=")[0]: int(o.split("=")[1]) for o in opts}
        classes[v] = (importlib.import_module(module).ReplicaExchange, options)
    problem = mw.Problem(objective=yao.rastrigin, lower=-5.12 * np.ones(N_FREE), upper=5.12 * np.ones(N_FREE))
    n_total = 1 + args.reps + (1 if args.trace else 0)
    niter = args.iters * n_total  # every timed iteration records a row (no clamped writes)
    hlo_texts: dict[str, bytes] = {}
    rows: list[dict[str, Any]] = []
    n_arg = jnp.asarray(args.iters, jnp.int32)

    for nseq in sizes:
        prepared = {}
        for v, (cls, options) in classes.items():
            solver = cls(nbeta=NBETA, nseq=nseq, nburn=0, niter=niter, **options)
            state = jax.jit(lambda k, s=solver: s.init(problem, k))(driver._key(0))
            arrays, static = driver._problem_arrays(problem, solver)
            t0 = time.perf_counter()
            runner = jax.jit(driver._chunk_runner(problem, solver, 1, static), donate_argnums=0)
            compiled = runner.lower(state, n_arg, arrays).compile()
            t_compile = time.perf_counter() - t0
            if args.hlo:
                hlo_texts[f"{short(v).replace(':', '_').replace('=', '')}_nseq{nseq}.hlo.txt"] = compiled.as_text().encode()
            state, _ = compiled(state, n_arg, arrays)  # warm-up
            jax.block_until_ready(state)
            prepared[v] = [compiled, state, arrays, [], t_compile]
            log(f"nseq={nseq} {v}: compiled in {t_compile:.1f} s")
        for _ in range(args.reps):  # versions interleaved, chunk by chunk
            for v in versions:
                compiled, state, arrays, times, _ = prepared[v]
                t0 = time.perf_counter()
                state, _ = compiled(state, n_arg, arrays)
                jax.block_until_ready(state)
                times.append(time.perf_counter() - t0)
                prepared[v][1] = state
        same: dict[str, str] = {}
        if args.check and len(versions) > 1:
            # Compared on the device (only flags and maxima come back: at nseq = 262144 the
            # burn-in history alone is 8.4 GB, whose copy to the host took ~15 s per version).
            fields = type(prepared[versions[0]][1])._fields
            ref = jax.tree_util.tree_leaves(prepared[versions[0]][1])
            for v in versions[1:]:
                differ = []
                for f, a, b in zip(fields, ref, jax.tree_util.tree_leaves(prepared[v][1])):
                    if bool(jnp.array_equal(a, b, equal_nan=True)):
                        continue
                    if jnp.issubdtype(a.dtype, jnp.floating):  # how far apart: max |a-b| and max |a-b|/|a|
                        d = jnp.where(jnp.isnan(a) & jnp.isnan(b), 0.0, jnp.abs(a - b))
                        rel = jnp.max(jnp.where(d > 0, d / jnp.abs(a), 0.0))
                        differ.append(f"{f} (max abs {float(jnp.max(d)):.2g}, rel {float(rel):.2g}, "
                                      f"{int(jnp.sum(d > 0))} of {a.size})")
                    else:
                        differ.append(f"{f} ({int(jnp.sum(a != b))} of {a.size})")
                same[v] = "same" if not differ else f"differs in {', '.join(differ)}"
                log(f"nseq={nseq}: state of {short(v)} after {1 + args.reps} chunks vs {short(versions[0])}: {same[v]}")
        for v in versions:
            compiled, state, arrays, times, t_compile = prepared[v]
            kernels: dict[str, dict[str, float]] = {}
            if args.trace:
                with tempfile.TemporaryDirectory() as tmp:
                    jax.profiler.start_trace(tmp)
                    state, _ = compiled(state, n_arg, arrays)
                    jax.block_until_ready(state)
                    jax.profiler.stop_trace()
                    kernels = kernel_times(Path(tmp))
            med = statistics.median(times)
            per_it = med / args.iters
            row = {"version": v, "nseq": nseq, "chains": nseq * NBETA, "ms_per_iteration": per_it * 1e3,
                   "ns_per_chain_iteration": per_it / (nseq * NBETA) * 1e9, "compile_seconds": t_compile,
                   "seconds": times, "spread": (max(times) - min(times)) / med, "state_vs_first": same.get(v, ""),
                   "kernels": {k: {"us_per_iteration": d["ns"] / args.iters / 1e3, "launches_per_iteration": d["n"] / args.iters}
                               for k, d in sorted(kernels.items(), key=lambda kv: -kv[1]["ns"])}}
            rows.append(row)
            log(f"nseq={nseq} {v}: {row['ms_per_iteration']:.2f} ms/it, {row['ns_per_chain_iteration']:.2f} ns per "
                f"chain-iteration (spread {row['spread']:.1%})")
            del prepared[v][1], state  # free the state before the next size
        prepared.clear()
        (out / "re_batch_probe.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
        if hlo_texts:  # one archive per size, written once (re-compressing all sizes each time cost seconds)
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                for name, text in hlo_texts.items():
                    info = tarfile.TarInfo(name)
                    info.size = len(text)
                    tar.addfile(info, io.BytesIO(text))
            (out / f"re_hlo_{nseq}.tar.gz").write_bytes(buf.getvalue())
            hlo_texts.clear()

    lines = ["| version | nseq | chains | ms / iteration | ns / chain-iteration | spread | state vs first version |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        lines.append(f"| {short(r['version'])} | {r['nseq']} | {r['chains']} | {r['ms_per_iteration']:.2f} | "
                     f"{r['ns_per_chain_iteration']:.2f} | {r['spread']:.1%} | {r['state_vs_first']} |")
    if args.trace:
        for r in rows:
            lines += ["", f"{short(r['version'])} nseq={r['nseq']}: kernels (us / iteration, launches / iteration)"]
            total = sum(k["us_per_iteration"] for k in r["kernels"].values())
            launches = sum(k["launches_per_iteration"] for k in r["kernels"].values())
            lines.append(f"  total {total:.0f} us / iteration in {launches:.0f} launches")
            for name, k in list(r["kernels"].items())[:14]:
                lines.append(f"  {k['us_per_iteration']:9.1f} {k['launches_per_iteration']:5.1f}  {name[:90]}")
    md = "\n".join([f"## ReplicaExchange time per chain vs batch ({env['device']}, {env['date']}, JAX {env['jax']})", ""] + lines)
    (out / "re_batch_probe.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
