#!/usr/bin/env python
"""The user's clock: the wall time of ``mw.solve`` (or the command) as a user calls it, first call, second call, new process.

Run from the repository root (see benchmarks/README.md)::

    PYTHONPATH=src python3 benchmarks/user_latency.py --gpu-rows --out "$OUT"      # an H100: < 8 min
    PYTHONPATH=src python3 benchmarks/user_latency.py --cpu-rows --out results/    # the 2-core CPU rows
    PYTHONPATH=src python3 benchmarks/user_latency.py --cpu-rows --quick           # small sizes: a check
    PYTHONPATH=src python3 benchmarks/user_latency.py --rows pattern_search,re_default

Every row is measured the way the latency table of docs/benchmarks.md is: the wall clock around
``mw.solve(...)`` (or the command) with the result read back to the host (``result.x`` and
``result.fun``), for

* the first call in a process (compiling, with an empty persistent compilation cache: the run
  uses a fresh ``MULTIWALK_CACHE_DIR``),
* the second call in the same process (the same problem and solver objects),
* the first call in a new process whose persistent cache the first process filled ("warm");
  for the rows that are a whole command (``multiwalk run``, ``multiwalk demo``) the first and the
  second process are the two timings.

Each row runs in its own process (``--child ROW``) with a time limit (``--row-timeout``): a row
that fails or runs out of time prints its error and the others go on.  Peers run in the same
process as ours: optax.lbfgs (when installed) and scipy's L-BFGS-B for L-BFGS, ODAT-SE for
``multiwalk run`` (skipped when not installed); the other rows have none.  Floors: bytes over the
copy bandwidth measured in the same process where the row's goal is memory-bound, else none.

The table goes to standard output (Markdown: row, device, date, ours, peer, ratio, floor, goal);
``--out`` names a JSON file (or a folder for user_latency.json and .md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this script is started
import common  # noqa: E402

MARK = "USER_LATENCY_RESULT "  # the line a row's process prints its measurement on


@dataclass(frozen=True)
class RowSpec:
    name: str
    what: str  # the table's row, in words
    goal: str
    gpu: bool  # in --gpu-rows (else in --cpu-rows)
    measure: Callable[[bool, bool], dict[str, Any]]  # (quick, warm) -> the row's numbers
    whole_process: bool = False  # the row times a command's processes itself (no warm child)


# ============================================================================ timing helpers
def two_calls(call: Callable[[], Any], warm: bool) -> dict[str, Any]:
    """The first call's wall clock and (unless ``warm``: a new process, its first call only) the
    second's, each with ``result.x`` and ``result.fun`` read back; the last result in ``"result"``."""
    out: dict[str, Any] = {}
    for label in ("first",) if warm else ("first", "second"):
        t0 = time.perf_counter()
        result = call()
        np.asarray(result.x), float(np.asarray(result.fun).ravel()[0])
        out[label] = time.perf_counter() - t0
        out["result"] = result
    return out


def solve_row(make: Callable[[], tuple[Any, Any]], warm: bool, **options: Any) -> dict[str, Any]:
    """``mw.solve(problem, solver, progress=False, **options)`` timed by :func:`two_calls`, with the
    second call's ``run_seconds`` and chunks."""
    import multiwalk as mw

    problem, solver = make()
    out = two_calls(lambda: mw.solve(problem, solver, progress=False, **options), warm)
    stats = out["result"].stats
    out.update(run_seconds=stats.get("run_seconds"), compile_seconds=stats.get("compile_seconds"),
               chunks=stats.get("chunks"))
    return out


def bandwidth() -> float:
    """The device's copy bandwidth (bytes/s), measured here (256 MiB, or 64 MiB on a CPU)."""
    import jax

    on_cpu = jax.devices()[0].platform == "cpu"
    return common.measure_bandwidth((1 << 26) if on_cpu else (1 << 28), 5)["bytes_per_s"]


# ============================================================================ the rows
def lbfgs_row(n_full: float, gradient: str, device_x0: bool, peer: str) -> Callable[[bool, bool], dict[str, Any]]:
    def measure(quick: bool, warm: bool) -> dict[str, Any]:
        import jax

        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        import lbfgs as bench

        import multiwalk as mw
        from multiwalk.functions import cute

        n = int(1e5 if quick else n_full)
        x0 = cute.start("extended_rosenbrock", n)
        vg = cute.extended_rosenbrock_value_and_grad if gradient == "analytic" else None
        if device_x0:
            x0 = jax.block_until_ready(jnp.asarray(x0))
        out = solve_row(lambda: (mw.Problem(objective=cute.extended_rosenbrock, value_and_grad=vg, x0=x0,
                                            dtype="float64"), mw.LBFGS(m=bench.M, eps=bench.EPS)), warm)
        r = out["result"]
        out["note"] = f"n = {n:.0e}, {r.iterations} it, {r.nfev} evaluations, {r.status.name}"
        if warm:
            return out
        out["floor"] = bench.floor_seconds(n, 8, r.iterations, r.nfev, bandwidth())
        out.update(_lbfgs_peer(bench, cute, n, gradient, peer))
        return out

    return measure


def _lbfgs_peer(bench: Any, cute: Any, n: int, gradient: str, peer: str) -> dict[str, Any]:
    """optax.lbfgs (second call, same device) or scipy's L-BFGS-B (host, float64), this process."""
    try:
        if peer == "optax":
            p = bench.run_optax(cute, n, "float64", "analytic" if gradient == "analytic" else "autodiff")
            return {"peer": p["seconds"], "peer_name": f"optax.lbfgs {p['version']}, {p['iterations']} it"}
        p = bench.run_scipy(cute, n)
        return {"peer": p["seconds"], "peer_name": f"scipy L-BFGS-B {p['version']}, {p['iterations']} it"}
    except ImportError as err:
        return {"peer_name": f"{peer} not installed ({err})"}


def sphere2(x: Any) -> Any:
    """A cheap 2-D objective (the table's "cheap 2-D")."""
    return (x[0] - 1.0) ** 2 + (x[1] + 0.5) ** 2


def replica_exchange_row(nbeta: int, nseq: int, nburn: int, niter: int, quick_nseq: int,
                         rate: bool = False) -> Callable[[bool, bool], dict[str, Any]]:
    def measure(quick: bool, warm: bool) -> dict[str, Any]:
        import multiwalk as mw

        ns = quick_nseq if quick else nseq
        solver = mw.ReplicaExchange(nbeta=nbeta, nseq=ns, nburn=nburn, niter=niter)
        out = solve_row(lambda: (mw.Problem(objective=sphere2, lower=[-5.0, -5.0], upper=[5.0, 5.0]), solver), warm)
        updates = nbeta * ns * (nburn + niter) * 2  # one coordinate update each, 2 coordinates
        label = "second" if "second" in out else "first"
        out["note"] = (f"{nbeta * ns} chains; {updates / out[label]:.3g} coordinate updates/s wall, "
                       f"{updates / out['run_seconds']:.3g} in run_seconds")
        if rate:
            out["updates_per_s"] = updates / out[label]
        return out

    return measure


def pattern_search_row(quick: bool, warm: bool) -> dict[str, Any]:
    import pattern_search as bench

    import multiwalk as mw

    walkers = 512 if quick else 15360
    out = solve_row(lambda: (bench.make_problem(mw, "ackley", 20), mw.PatternSearch(n_walkers=walkers, iterations=20)),
                    warm)
    out["note"] = f"{walkers} walkers x 20 iterations; {out['chunks']} chunk(s); best {float(out['result'].fun):.3g}"
    out["peer_name"] = "SIMT-PS 76.6 ms on a GTX 280 (quoted, not run)"
    return out


def xringaus_row(quick: bool, warm: bool) -> dict[str, Any]:
    import sgra

    import multiwalk as mw
    from multiwalk.commands.demo import DEMO_TRUTH
    from multiwalk.eht import closure_phases, xringaus_problem
    from multiwalk.models import PARAM_NAMES

    data = sgra.observe(np.array([DEMO_TRUTH[n] for n in PARAM_NAMES]), seed=0)
    cp = closure_phases(data)
    nburn, niter = (40, 100) if quick else (400, 1000)
    solver = mw.ReplicaExchange(nbeta=32, nseq=16, nburn=nburn, niter=niter)
    out = solve_row(lambda: (xringaus_problem(data, closure=cp), solver), warm, seed=0)
    out["note"] = (f"{len(data)} visibilities + {len(cp)} closure phases, 32 x 16, {nburn}+{niter}; "
                   f"compile {out['compile_seconds']:.2f} s (first call of this process)"
                   if warm else f"{len(data)} visibilities + {len(cp)} closure phases, 32 x 16, {nburn}+{niter}")
    return out


def deconv_row(kind: str) -> Callable[[bool, bool], dict[str, Any]]:
    def measure(quick: bool, warm: bool) -> dict[str, Any]:
        import deconv as bench

        import multiwalk as mw

        n, iterations = (128, 200) if quick else (4096, 10_000)
        dirty, psf = bench.synthetic(n)
        if kind == "cd":
            solver = mw.deconv.CoordinateDescent(lam=1e-3, epsilon=1e-12, max_iterations=iterations)
        else:
            solver = mw.deconv.Clean(gain=0.1, max_iterations=iterations)
        out = solve_row(lambda: (mw.deconv.Deconvolution(dirty, psf), solver), warm)
        label = "second" if "second" in out else "first"
        its = out["result"].stats["iterations"]
        its = sum(its.values()) if isinstance(its, dict) else int(its)
        out["note"] = f"{n}^2, {its} iterations: {1e6 * out[label] / max(its, 1):.0f} us/it wall"
        if not warm and kind == "cd":  # the floor: 12 N^2 bytes an iteration at the copy bandwidth
            out["floor"] = 12 * n * n * its / bandwidth()
        return out

    return measure


def two_devices_row(kind: str) -> Callable[[bool, bool], dict[str, Any]]:
    """1 vs 2 devices, second calls, one process: ``first`` is one device, ``second`` two."""

    def measure(quick: bool, warm: bool) -> dict[str, Any]:
        import jax

        import multiwalk as mw

        if jax.device_count() < 2:
            raise RuntimeError(f"needs 2 devices, this machine has {jax.device_count()}")
        if kind == "re":
            solver = mw.ReplicaExchange(nbeta=32, nseq=1024 if quick else 131072, nburn=20, niter=100)
            problem = mw.Problem(objective=sphere2, lower=[-5.0, -5.0], upper=[5.0, 5.0])
        else:
            import pattern_search as bench

            solver = mw.PatternSearch(n_walkers=8192 if quick else 1 << 20, iterations=20, kernel="xla")
            problem = bench.make_problem(mw, "rastrigin", 30)
        out: dict[str, Any] = {}
        for label, k in (("first", 1), ("second", 2)):
            timed = two_calls(lambda k=k: mw.solve(problem, solver, progress=False, devices=k), False)
            out[label] = timed["second"]
            out[f"run_seconds_{k}"] = timed["result"].stats["run_seconds"]
        out["note"] = (f"1 device {out['first']:.3f} s, 2 devices {out['second']:.3f} s wall: "
                       f"{out['first'] / out['second']:.2f}x (run_seconds {out['run_seconds_1']:.3f} vs "
                       f"{out['run_seconds_2']:.3f}: {out['run_seconds_1'] / out['run_seconds_2']:.2f}x)")
        return out

    return measure


def _command(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    """The wall clock of one new process running ``python -m multiwalk *args`` (raises on failure)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "multiwalk", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"multiwalk {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return wall


def multiwalk_run_row(quick: bool, warm: bool) -> dict[str, Any]:
    """``multiwalk run`` of ODAT-SE's exchange input, whole processes: the first with the empty cache,
    the second with it warm; ODAT-SE on the same input when it is installed."""
    import odatse as bench

    replicas, steps = (4, 500) if quick else (16, 20_000)
    with tempfile.TemporaryDirectory(prefix="user-latency-run-") as tmp:
        ours = bench.prepared(Path(tmp) / "ours", replicas, steps, steps // 10)
        out: dict[str, Any] = {"first": _command(["run", "input.toml", "--no-progress"], ours),
                               "second": _command(["run", "input.toml", "--no-progress"], ours)}
        out["note"] = f"{replicas} replicas x {steps} steps, himmelblau, step files written"
        if bench.odatse_available():
            out.update(_odatse_peer(bench.prepared(Path(tmp) / "odatse", replicas, steps, steps // 10), bench))
        else:
            out["peer_name"] = "ODAT-SE not installed: skipped"
    return out


ODATSE = """import sys, odatse, odatse._main as m
print("ODATSE_VERSION", getattr(odatse, "__version__", "?"))
if hasattr(m, "cli"):
    m.cli(["input.toml"])
else:  # the releases whose entry point reads sys.argv
    sys.argv = ["odatse", "input.toml"]
    m.main()
"""


def _odatse_peer(folder: Path, bench: Any) -> dict[str, Any]:
    """ODAT-SE's command on the same input in a new process: its whole wall clock."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", ODATSE], cwd=folder, capture_output=True, text=True,
                          env=bench.odatse_env())
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"peer_name": f"ODAT-SE failed: {proc.stderr.strip().splitlines()[-1][:200] if proc.stderr else '?'}"}
    version = next((ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("ODATSE_VERSION")), "?")
    return {"peer": wall, "peer_name": f"ODAT-SE {version} (whole process)"}


def demo_row(quick: bool, warm: bool) -> dict[str, Any]:
    """``make demo``'s command (``multiwalk demo``, CPU, Agg), whole processes: the first with the empty
    cache, the second with it warm."""
    extra = ["--nburn", "30", "--niter", "30"] if quick else []
    env = {"MPLBACKEND": "Agg", "JAX_PLATFORMS": "cpu"}
    with tempfile.TemporaryDirectory(prefix="user-latency-demo-") as tmp:
        first = _command(["demo", "--out", str(Path(tmp) / "demo"), *extra], Path(tmp), env)
        second = _command(["demo", "--out", str(Path(tmp) / "demo"), *extra], Path(tmp), env)
    return {"first": first, "second": second, "note": "whole `multiwalk demo` process, CPU"}


ROWS = [
    RowSpec("lbfgs_1e7", "LBFGS, Ext. Rosenbrock n=1e7 f64, x0 from cute.start", "<= 40 ms, <= 1.15x run_seconds",
            True, lbfgs_row(1e7, "autodiff", False, "optax")),
    RowSpec("lbfgs_vg_1e7", "the same with value_and_grad= (one-pass kernel)", "<= 40 ms", True,
            lbfgs_row(1e7, "analytic", False, "optax")),
    RowSpec("lbfgs_device_x0_1e7", "the same with x0 already a device array", "<= 40 ms", True,
            lbfgs_row(1e7, "autodiff", True, "optax")),
    RowSpec("pattern_search", "PatternSearch 15360 x 20, Ackley-20", "<= 1 ms wall", True, pattern_search_row),
    RowSpec("re_default", "ReplicaExchange, seed default (32 x 14, 300+500), cheap 2-D", "<= 50 ms", True,
            replica_exchange_row(32, 14, 300, 500, 14)),
    RowSpec("re_1m", "ReplicaExchange, 1M chains (32 x 32768, 20+100), cheap 2-D", ">= 5e9 updates/s", True,
            replica_exchange_row(32, 32768, 20, 100, 256, rate=True)),
    RowSpec("xringaus", "xringaus fit 32 x 16, 400+1000", "first <= 5 s; new process warm <= 2 s; run <= 0.3 s",
            True, xringaus_row),
    RowSpec("cd_4096", "CoordinateDescent 4096^2, 10k iterations", "<= 1 s", True, deconv_row("cd")),
    RowSpec("clean_4096", "Clean 4096^2, 10k iterations", "<= 1 s", True, deconv_row("clean")),
    RowSpec("re_2gpu", "ReplicaExchange 4.2M chains (32 x 131072, 20+100), 1 vs 2 devices",
            ">= 1.9x in wall time", True, two_devices_row("re"), whole_process=True),
    RowSpec("ps_2gpu", "PatternSearch 1M walkers x 20 (XLA form), Rastrigin-30, 1 vs 2 devices",
            ">= 1.8x in wall time", True, two_devices_row("ps"), whole_process=True),
    RowSpec("lbfgs_1e6_cpu", "LBFGS n=1e6 f64 on the CPU", "first <= 1.5 s warm cache, second <= 0.9 s", False,
            lbfgs_row(1e6, "autodiff", False, "scipy")),
    RowSpec("multiwalk_run", "`multiwalk run` 16 replicas x 20000 steps, himmelblau, whole process",
            ">= 10x odatse", False, multiwalk_run_row, whole_process=True),
    RowSpec("make_demo", "`make demo` (multiwalk demo), second run, CPU", "<= 15 s", False, demo_row,
            whole_process=True),
]
BY_NAME = {r.name: r for r in ROWS}


# ============================================================================ one row, in its own process
def child(name: str, quick: bool, warm: bool) -> int:
    """Measure one row in this process and print it on one ``MARK`` line (JSON)."""
    spec = BY_NAME[name]
    try:
        out = spec.measure(quick, warm)
        out.pop("result", None)
        import jax

        dev = jax.devices()[0]
        out["device"] = dev.device_kind if dev.platform != "cpu" else f"CPU: {common.cpu_name()}"
    except Exception as err:  # noqa: BLE001 - one row failing must not end the others
        traceback.print_exc()
        out = {"error": f"{type(err).__name__}: {err}"[:500]}
    print(MARK + json.dumps(out, default=str), flush=True)
    return 0


def run_child(name: str, quick: bool, warm: bool, timeout: float, env: dict[str, str]) -> dict[str, Any]:
    """:func:`child` in a new process; its numbers, or ``{"error": ...}``; ``process`` is its wall clock."""
    args = [sys.executable, str(Path(__file__).resolve()), "--child", name] + ["--quick"] * quick + ["--warm"] * warm
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"ran past --row-timeout {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if not lines:
        return {"error": f"exit {proc.returncode}, no result: {proc.stderr[-800:]}"}
    return {**json.loads(lines[-1][len(MARK):]), "process": wall}


# ============================================================================ the table
HEAD = ("| row | device | date | ours, 1st call | ours, 2nd call | new process, warm cache: 1st call (whole process) | "
        "run_seconds | peer (same run) | peer / ours | floor | goal | note |")


def table_line(spec: RowSpec, r: dict[str, Any], date: str) -> str:
    s = common.seconds
    if "error" in r:
        return f"| {spec.what} | {r.get('device', '-')} | {date} | error: {r['error'][:200]} | | | | | | | {spec.goal} | |"
    warm = r.get("warm", {})
    warm_text = "-" if not warm else (f"error: {warm['error'][:100]}" if "error" in warm
                                      else f"{s(warm.get('first'))} ({s(warm.get('process'))})")
    peer = f"{s(r.get('peer'))} ({r['peer_name']})" if r.get("peer_name") else s(r.get("peer"))
    return (f"| {spec.what} | {r.get('device', '-')} | {date} | {s(r.get('first'))} | {s(r.get('second'))} | "
            f"{warm_text} | {s(r.get('run_seconds'))} | {peer} | {common.ratio(r.get('peer'), r.get('second'))} | "
            f"{s(r.get('floor'))} | {spec.goal} | {r.get('note', '')} |")


def chosen_rows(args: argparse.Namespace) -> list[RowSpec]:
    if args.rows:
        unknown = [n for n in args.rows.split(",") if n not in BY_NAME]
        if unknown:
            raise SystemExit(f"--rows: unknown {unknown}; the rows are {', '.join(BY_NAME)}")
        return [BY_NAME[n] for n in args.rows.split(",")]
    want_gpu = args.gpu_rows or not args.cpu_rows
    want_cpu = args.cpu_rows or not args.gpu_rows
    return [r for r in ROWS if (r.gpu and want_gpu) or (not r.gpu and want_cpu)]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default="", help=f"comma-separated rows: {', '.join(BY_NAME)}")
    p.add_argument("--gpu-rows", action="store_true", help="the rows measured on a GPU")
    p.add_argument("--cpu-rows", action="store_true", help="the rows measured on the CPU (2 cores)")
    p.add_argument("--quick", action="store_true", help="small sizes: a check of the script on a CPU")
    p.add_argument("--row-timeout", type=float, default=240.0, help="seconds for each row's process (default 240)")
    p.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results",
                   help="a .json file, or a folder for user_latency.json and .md (default $OUT, else benchmarks/results)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def write(args: argparse.Namespace, rows: list[RowSpec], results: dict[str, Any], date: str) -> str:
    """The table of the rows measured so far, written to ``--out`` (JSON and Markdown); returned."""
    done = [spec for spec in rows if spec.name in results]
    lines = [HEAD, "|---|---|---|---:|---:|---:|---:|---|---:|---:|---|---|"]
    lines += [table_line(spec, results[spec.name], date.split(" ")[0]) for spec in done]
    md = "\n".join(lines) + "\n"
    report = {"date": date, "quick": args.quick, "python": sys.version.split()[0],
              "rows": {spec.name: {"what": spec.what, "goal": spec.goal, **results[spec.name]} for spec in done}}
    out = Path(args.out)
    path = out if out.suffix == ".json" else out / "user_latency.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=str))
    path.with_suffix(".md").write_text(md)
    return md


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # the checkout's src/ first (for this process and, by PYTHONPATH, the rows'), unless PYTHONPATH
    # names other sources of multiwalk (an A/B of two versions): then those
    common.select_platform("auto")
    if not common.given_multiwalk():
        os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                                    *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    if args.child:
        return child(args.child, args.quick, args.warm)
    rows, t_start = chosen_rows(args), time.perf_counter()
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="user-latency-cache-") as cache:
        env = {**os.environ, "MULTIWALK_CACHE_DIR": cache}  # empty: the first process compiles everything
        env.pop("JAX_COMPILATION_CACHE_DIR", None)  # (JAX's own setting would win over ours)
        for spec in rows:
            t0 = time.perf_counter()
            r = run_child(spec.name, args.quick, False, args.row_timeout, env)
            if "error" not in r and not spec.whole_process:
                r["warm"] = run_child(spec.name, args.quick, True, args.row_timeout, env)
            results[spec.name] = r
            write(args, rows, results, date)  # after every row: a run cut short keeps what it measured
            print(f"[{time.perf_counter() - t_start:7.1f} s] {spec.name}: {time.perf_counter() - t0:.1f} s"
                  + (f", error: {r['error']}" if "error" in r else ""), file=sys.stderr, flush=True)
    print(write(args, rows, results, date))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
