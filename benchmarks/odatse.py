"""`multiwalk run` against ODAT-SE (`odatse`, one process) on the same input.toml.

Case A (same CPU, equal replicas and steps): Himmelblau, replica exchange, R replicas from
T = 1 to 100, N steps.  Both programs write their files (trial, result, result_T, fx,
best_result); ours is also timed with ``--no-step-files`` (fx.txt and best_result.txt only).
Times: ODAT-SE's own time.log (run + post, its Python start excluded) and our wall time less
JAX's compilation (reported beside it).  Statistics: the mean of f at each temperature from
both programs' result_T files after thermalisation, with standard errors from 20 blocks, their
difference in units of the combined error, and both against the exact mean (grid integral).

Case B (GPU): ``--gpu-replicas 10000,100000,...`` replicas, no step files, replica-steps per
second of the run (compilation excluded) with each ``--kernel`` of ``--gpu-kernel`` (``pallas``:
one Pallas kernel per block of steps between exchanges; ``xla``), at the smallest count also the
XLA form with each ``--unroll`` of ``--gpu-unroll`` (Monte Carlo steps per compiled loop trip),
against ODAT-SE's replica-steps per second measured on this machine's CPU at the smallest of
those replica counts (a short run, after ours).

    PYTHONPATH=src:$(ls .whl/odat_se-*.whl) python benchmarks/odatse.py --device cpu --out /tmp/odatse
    PYTHONPATH=src:$(ls .whl/odat_se-*.whl) python3 benchmarks/odatse.py --device gpu --out "$OUT"
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

PROFILE = False  # --profile: each run of ours writes its breakdown (MULTIWALK_PROFILE) and the report shows it

INPUT = """
[base]
dimension = 2
output_dir = "output"

[solver]
name = "analytical"
function_name = "himmelblau"

[algorithm]
name = "exchange"
seed = 12345

[algorithm.param]
min_list = [-6.0, -6.0]
max_list = [6.0, 6.0]
step_list = [0.5, 0.5]

[algorithm.exchange]
Tmin = 1.0
Tmax = 100.0
numsteps = {steps}
numsteps_exchange = 10
numsteps_thermalization = {therm}
nreplica_per_proc = {replicas}
"""


def exact_means(temps: np.ndarray) -> np.ndarray:
    """Mean of Himmelblau's f under exp(-f/T) on [-6, 6)^2, by a 2401^2 grid (error < 1e-4 relative)."""
    g = np.linspace(-6, 6, 2401)
    X, Y = np.meshgrid(g, g)
    f = (X**2 + Y - 11) ** 2 + (X + Y**2 - 7) ** 2
    out = []
    for T in temps:
        w = np.exp(-(f - f.min()) / T)
        out.append(float((w * f).sum() / w.sum()))
    return np.array(out)


def block_stats(path: Path, therm: int, blocks: int = 20) -> tuple[float, float]:
    rows = np.loadtxt(path, comments="#", ndmin=2)
    fx = rows[rows[:, 0] >= therm, 2]
    means = np.array([b.mean() for b in np.array_split(fx, blocks)])
    return float(fx.mean()), float(means.std(ddof=1) / np.sqrt(blocks))


def run_odatse(folder: Path) -> dict:
    # PYTHONPATH made absolute: odatse runs in the case's folder, where a relative entry such
    # as .whl/odat_se-*.whl (the device run's way to bring it) would not be found
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, odatse._main as m; m.cli(sys.argv[1:])", "input.toml"],
        cwd=folder, capture_output=True, text=True, env=env,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"odatse failed: {proc.stderr[-2000:]}")
    log = (folder / "output" / "0" / "time.log").read_text()
    totals = [float(v) for v in re.findall(r"total = (\S+)", log)]  # init, prepare, run, post
    best = dict(ln.split(" = ") for ln in (folder / "output" / "best_result.txt").read_text().splitlines())
    return {"wall": wall, "run": totals[2], "post": totals[3], "work": totals[2] + totals[3], "best_fx": float(best["fx"])}


def _parse_ours(folder: Path, text: str, wall: float) -> dict:
    m = re.search(r"run (\S+) s, step files (\S+) s, files after the run (\S+) s, compile (\S+) s, "
                  r"chunk loop (\S+) s, wall (\S+) s \(\w+, ([^,]+) steps", text)
    run_s, files_s, post_s, compile_s, loop_s, solve_wall = (float(v) for v in m.groups()[:6])
    kernel = m.group(7)
    beside = re.search(r"beside the sampling: (\S+) s of formatting and writing \((\d+) (thread|process)e?s?"
                       r"(?:, waited (\S+) s for the offsets)?", text)
    best = dict(ln.split(" = ") for ln in (folder / "output" / "best_result.txt").read_text().splitlines())
    # work: the chunk loop (the compiled chunks, the host's work between them: the records to the
    # writer, waiting for the step files) and the files after it (the last chunk's step files,
    # fx.txt, best_result.txt, ending the writer), like ODAT-SE's run + post; set-up and
    # compilation are reported apart
    return {"wall": wall, "run": run_s, "files": files_s, "compile": compile_s, "loop": loop_s, "post": post_s,
            "work": loop_s + post_s, "setup": solve_wall - loop_s - post_s, "best_fx": float(best["fx"]),
            "kernel": kernel, "files_busy": float(beside.group(1)) if beside else files_s,
            "writer": f"{beside.group(2)} {beside.group(3)}" if beside else "caller",
            "ring_wait": float(beside.group(4)) if beside and beside.group(4) else 0.0}


PHASES = ("sources", "lines", "publish", "result_T", "result_T_write", "pwrite", "offsets_wait", "idle", "warm_up")


def profile_summary(path: Path) -> dict | None:
    """The breakdown of a run's time from the JSON ``multiwalk run`` writes under MULTIWALK_PROFILE
    (None if there is none: an older tree, or threads): the compiled chunks, the parent's work
    between them (copying into the slots, waiting for a free slot, waiting in flush, the rest:
    reordering, the progress summary, checkpoints, fx/best files), and each worker phase's time
    (the mean over workers and the busiest worker's), all in seconds; ``tail``: from the last
    chunk sent to the last worker done."""
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    w = data.get("writer") or {}
    if "workers" not in w:
        return None
    st = data["stats"]
    out = {"sample": st["run_seconds"], "copy": w["copy_seconds"], "slot_wait": w["slot_wait_seconds"],
           "flush_wait": w["flush_seconds"],
           "host_other": st["loop_seconds"] + data["post_seconds"] - st["run_seconds"] - w["seconds"],
           "chunks_sent": len(w["timeline"])}
    busiest = int(np.argmax(w["busy"]))
    for phase in PHASES:
        values = [k.get(phase, 0.0) for k in w["workers"]]
        out[f"w_{phase}"] = float(np.mean(values))
        out[f"b_{phase}"] = float(values[busiest])
    last = w["timeline"][-1] if w["timeline"] else None
    if last and all(v is not None for v in last["done"]):
        out["tail"] = max(last["done"]) - last["sent"]
    return out


def run_ours(folder: Path, *extra: str) -> dict:
    """``multiwalk run`` in this Python process (JAX imported once; a repeated input's compilation cached)."""
    from multiwalk.cli import main

    buf = io.StringIO()
    old = os.getcwd()
    os.chdir(folder)
    profile = folder.resolve() / "profile.json"
    if PROFILE:
        os.environ["MULTIWALK_PROFILE"] = str(profile)
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(buf):
            code = main(["run", "input.toml", "--no-progress", *extra])
    finally:
        os.chdir(old)
        os.environ.pop("MULTIWALK_PROFILE", None)
    wall = time.perf_counter() - t0
    text = buf.getvalue()
    if code != 0:
        raise RuntimeError(f"multiwalk run failed ({code}): {text[-2000:]}")
    return {**_parse_ours(folder, text, wall), "profile": profile_summary(profile) if PROFILE else None}


def run_ours_fresh(folder: Path, *extra: str, env_extra: dict | None = None) -> dict:
    """``python -m multiwalk run`` in a new process, as a user starts it: JAX imported and the
    chunks compiled afresh (the writer processes start before the compilation); ``wall``: the
    whole command, Python's start included.  ``env_extra``: environment variables set for it;
    ``MULTIWALK_BENCH_SRC=DIR`` among them runs the package from DIR instead of this checkout's
    src (an earlier commit's tree, ``git archive COMMIT src | tar -x -C DIR/..``, compared in the
    same run)."""
    env = {**os.environ, **(env_extra or {})}
    profile = folder.resolve() / "profile.json"
    if PROFILE:
        env["MULTIWALK_PROFILE"] = str(profile)
    src = str(Path(env.pop("MULTIWALK_BENCH_SRC", None) or Path(__file__).resolve().parents[1] / "src").resolve())
    paths = [str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([src, *paths])
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "multiwalk", "run", "input.toml", "--no-progress", *extra],
                          cwd=folder, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"multiwalk run failed ({proc.returncode}): {proc.stdout[-1000:]} {proc.stderr[-2000:]}")
    return {**_parse_ours(folder, proc.stdout, wall), "profile": profile_summary(profile) if PROFILE else None}


def case_a(out: Path, replicas: int, steps: int, log, threads: tuple[int, ...] = (),
           processes: tuple[str, ...] = (), skip_odatse: bool = False, fresh: tuple[str, ...] = (),
           stats: bool = True) -> dict:
    """ODAT-SE and ours (the default writer; ``--write-threads 0``: files between chunks; no step
    files; each ``--write-threads`` of ``threads`` and ``--write-processes`` of ``processes``) on
    the same input, in this process; and each ``--write-processes`` of ``fresh`` as a fresh
    ``multiwalk run`` (a new process: compilation and the writer's start-up as a user gets them)."""
    from multiwalk.solvers.exchange import temperature_ladder

    therm = steps // 10
    res: dict = {"replicas": replicas, "steps": steps}
    extra = {"ours": [], "ours_serial": ["--write-threads", "0"], "ours_nofiles": ["--no-step-files"]}
    extra.update({f"ours_threads_{n}": ["--write-threads", str(n)] for n in threads})
    extra.update({f"ours_processes_{n}": ["--write-processes", str(n)] for n in processes})
    # fresh items: N (--write-processes N), N/K (and --write-chunks K), N@VAR=VALUE (with that
    # environment variable), or N/K@VAR=VALUE
    def fresh_args(item: str) -> list[str]:
        n, _, chunks = item.split("@")[0].partition("/")
        return ["--write-processes", n, *(["--write-chunks", chunks] if chunks else [])]

    extra.update({f"fresh_processes_{n}": fresh_args(n) for n in fresh})
    for name in ("odatse", *extra):
        folder = out / f"A_{replicas}_{steps}_{name}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "input.toml").write_text(INPUT.format(steps=steps, therm=therm, replicas=replicas))
        if name == "odatse":
            nan = float("nan")
            res[name] = {"wall": nan, "work": nan, "best_fx": nan} if skip_odatse else run_odatse(folder)
        elif name.startswith("fresh_"):
            env = dict(item.split("=", 1) for item in name.split("@")[1:])
            res[name] = run_ours_fresh(folder, *extra[name], env_extra=env)
        else:
            res[name] = run_ours(folder, *extra[name])
        log(f"A R={replicas} N={steps} {name}: {res[name]}")
    temps = 1.0 / temperature_ladder(replicas, Tmin=1.0, Tmax=100.0)
    rows = []
    if stats and not skip_odatse:
        exact = exact_means(temps)
    for t in range(replicas if stats and not skip_odatse else 0):
        mo, eo = block_stats(out / f"A_{replicas}_{steps}_odatse" / "output" / f"result_T{t}.txt", therm)
        mm, em = block_stats(out / f"A_{replicas}_{steps}_ours" / "output" / f"result_T{t}.txt", therm)
        rows.append({"T": float(temps[t]), "exact": float(exact[t]), "odatse": mo, "odatse_err": eo, "ours": mm,
                     "ours_err": em, "z": (mm - mo) / np.hypot(eo, em)})
    res["temperatures"] = rows
    return res


def case_b(out: Path, sizes: list[int], steps: int, odatse_steps: int, dtype: str, unrolls: list[int], log,
           kernels: tuple[str, ...] = ("auto",)) -> dict:
    """Replica-steps per second at each size with each ``--kernel`` of ``kernels`` (``multiwalk
    run``'s default unroll), and at the smallest size also the XLA form with each ``--unroll``
    of ``unrolls``."""
    res: dict = {"steps": steps, "runs": []}
    r0 = min(sizes)
    cases = [(R, k, None) for R in sizes for k in kernels] + [(r0, "xla", u) for u in unrolls]
    for R, kernel, unroll in cases:
        folder = out / f"B_{R}_{kernel}_{unroll or 'default'}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "input.toml").write_text(INPUT.format(steps=steps, therm=steps // 10, replicas=R))
        extra = ["--unroll", str(unroll)] if unroll else []
        ours = run_ours(folder, "--no-step-files", "--dtype", dtype, "--kernel", kernel, *extra)
        ours["replica_steps_per_s"] = R * (steps - 1) / ours["run"]
        ours["replicas"], ours["unroll"] = R, unroll or "default"
        res["runs"].append(ours)
        log(f"B R={R} kernel={kernel} unroll={unroll}: {ours}")
    folder = out / "B_odatse"  # after ours: a short run of the same input with r0 replicas
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "input.toml").write_text(INPUT.format(steps=odatse_steps, therm=0, replicas=r0))
    try:
        od = run_odatse(folder)
        od["replica_steps_per_s"] = r0 * (odatse_steps - 1) / od["run"]
        res["odatse"] = od
        log(f"B odatse R={r0} N={odatse_steps}: {od}")
    except Exception as err:  # odat-se missing: say so
        res["odatse"] = {"error": str(err)[:300]}
        log(f"B odatse: {err}")
    return res


def report(env: dict, a: list[dict], b: dict | None) -> str:
    lines = [f"Device: {env['device']}; JAX {env['jax']}; {env['date']}; CPU {env['cpu']}", ""]
    if a:
        lines += [
            "Case A, same CPU, equal replicas and steps (Himmelblau, T = 1..100 log-spaced, numsteps_exchange = 10):",
            "",
            "| replicas | steps | ODAT-SE run+post (s) | ours run+files (s) | ratio | ours, files between chunks (s) "
            "| ratio | ours, no step files (s) | ratio | ours set-up + compile (s) | ODAT-SE wall (s) | ours wall (s) "
            "| best fx ODAT-SE | best fx ours |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in a:
            o, m, q, n = r["odatse"], r["ours"], r["ours_serial"], r["ours_nofiles"]
            lines.append(
                f"| {r['replicas']} | {r['steps']} | {o['work']:.2f} | {m['work']:.3f} | {o['work'] / m['work']:.0f}x "
                f"| {q['work']:.3f} | {o['work'] / q['work']:.0f}x "
                f"| {n['work']:.3f} | {o['work'] / n['work']:.0f}x | {m['setup']:.2f} | {o['wall']:.2f} | {m['wall']:.2f} "
                f"| {o['best_fx']:.3g} | {m['best_fx']:.3g} |"
            )
        variants = [k for k in a[0] if k.startswith(("ours_threads_", "ours_processes_"))]
        if variants:
            lines += ["", "Step-file writers in this process (run+files, s, and ratio to ODAT-SE; the busiest writer's "
                      "own busy time in brackets):", "",
                      "| replicas | steps | " + " | ".join(f"--write-{k.split('_')[1]} {k.rsplit('_', 1)[1]}" for k in variants)
                      + " |", "|---:|---:|" + "---:|" * len(variants)]
            for r in a:
                lines.append(f"| {r['replicas']} | {r['steps']} | "
                             + " | ".join(f"{r[k]['work']:.3f} ({r[k]['files_busy']:.3f}) "
                                          f"{r['odatse']['work'] / r[k]['work']:.0f}x" for k in variants) + " |")
        fresh = [k for k in a[0] if k.startswith("fresh_processes_")]
        if fresh:
            lines += ["", "Fresh `multiwalk run` processes (`--write-processes N`; 0: threads): run+files (chunk loop + "
                      "files after it), ratio to ODAT-SE's run+post, the writer, its busiest worker's busy time, the "
                      "longest wait for the pieces' offsets, set-up + compile, and the whole command's wall time "
                      "(Python start and JAX import included) against ODAT-SE's:", "",
                      "| replicas | steps | --write-processes | writer | run+files (s) | ratio | busiest (s) | "
                      "ring wait (s) | set-up + compile (s) | wall (s) | ODAT-SE wall (s) | wall ratio |",
                      "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for r in a:
                o = r["odatse"]
                for k in fresh:
                    m = r[k]
                    lines.append(f"| {r['replicas']} | {r['steps']} | {k.split('_', 2)[2]} | {m['writer']} "
                                 f"| {m['work']:.3f} | {o['work'] / m['work']:.0f}x | {m['files_busy']:.3f} "
                                 f"| {m['ring_wait']:.3f} | {m['setup']:.2f} | {m['wall']:.2f} | {o['wall']:.2f} "
                                 f"| {o['wall'] / m['wall']:.1f}x |")
        groups: dict[str, list[str]] = {}  # the same item repeated (@REP=k): medians
        for k in fresh:
            label = "@".join(part for part in k.split("_", 2)[2].split("@") if not part.startswith("REP="))
            groups.setdefault(label, []).append(k)
        if any(len(v) > 1 for v in groups.values()):
            lines += ["", "Repeated fresh items (`@REP=k` dropped): run+files of each repeat in run order, their median "
                      "and its ratio to ODAT-SE's run+post:", "",
                      "| replicas | steps | item | run+files (s) | median (s) | ratio |", "|---:|---:|---|---|---:|---:|"]
            for r in a:
                for label, keys in groups.items():
                    works = [r[k]["work"] for k in keys]
                    med = float(np.median(works))
                    lines.append(f"| {r['replicas']} | {r['steps']} | {label} | {', '.join(f'{v:.3f}' for v in works)} "
                                 f"| {med:.3f} | {r['odatse']['work'] / med:.0f}x |")
        profiled = [(r, k) for r in a for k in r if isinstance(r[k], dict) and r[k].get("profile")]
        if profiled:
            lines += ["", "Where the time goes (`--profile`, seconds): run+files; the compiled chunks; the parent's "
                      "copying into the slots, waits for a free slot, waits in flush (checkpoints, the end) and the rest "
                      "of its work (reordering, summary, files after the run); chunks sent; from the last chunk sent to "
                      "its last worker done; then per writer process, the mean over workers / the busiest worker: "
                      + ", ".join(PHASES) + ":", "",
                      "| replicas | steps | run | run+files | chunks | copy | slot wait | flush wait | host other | sent "
                      "| tail | " + " | ".join(PHASES) + " |",
                      "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|" + "---|" * len(PHASES)]
            for r, k in profiled:
                m = r[k]
                pr = m["profile"]
                lines.append(f"| {r['replicas']} | {r['steps']} | {k} | {m['work']:.3f} | {pr['sample']:.3f} "
                             f"| {pr['copy']:.3f} | {pr['slot_wait']:.3f} | {pr['flush_wait']:.3f} "
                             f"| {pr['host_other']:.3f} | {pr['chunks_sent']} | {pr.get('tail', float('nan')):.3f} | "
                             + " | ".join(f"{pr['w_' + ph]:.3f} / {pr['b_' + ph]:.3f}" for ph in PHASES) + " |")
        for r in (r for r in a if r["temperatures"]):
            lines += ["", f"Mean f per temperature, R = {r['replicas']}, N = {r['steps']} (errors from 20 blocks):", "",
                      "| T | exact | ODAT-SE | ours | (ours - ODAT-SE) / error |", "|---:|---:|---:|---:|---:|"]
            for t in r["temperatures"]:
                lines.append(f"| {t['T']:.4g} | {t['exact']:.4g} | {t['odatse']:.4g} ± {t['odatse_err']:.2g} "
                             f"| {t['ours']:.4g} ± {t['ours_err']:.2g} | {t['z']:+.2f} |")
            z = np.array([t["z"] for t in r["temperatures"]])
            lines += ["", f"R = {r['replicas']}: rms z = {np.sqrt(np.mean(z**2)):.2f} over {z.size} temperatures, "
                      f"{np.mean(np.abs(z) > 2):.1%} with |z| > 2"]
    if b:
        od = b["odatse"]
        peer = od.get("replica_steps_per_s")
        lines += ["", f"Case B: replica-steps per second, {b['steps']} steps, no step files (fx.txt, best_result.txt):", "",
                  "| replicas | steps run by | unroll | ours replica-steps/s | ODAT-SE replica-steps/s (CPU) | ratio "
                  "| ours run (s) | µs per step | set-up + compile (s) |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for m in b["runs"]:
            ratio = f"{m['replica_steps_per_s'] / peer:.3g}x" if peer else "—"
            lines.append(f"| {m['replicas']} | {m['kernel']} | {m['unroll']} | {m['replica_steps_per_s']:.3g} "
                         f"| {peer if peer is None else f'{peer:.3g}'} | {ratio} | {m['run']:.3f} "
                         f"| {m['run'] / (b['steps'] - 1) * 1e6:.1f} | {m['setup']:.2f} |")
        if "error" in od:
            lines.append(f"\nODAT-SE could not run: {od['error']}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "gpu", "auto"], default="auto")
    p.add_argument("--cases", default="A,B")
    p.add_argument("--replicas", default="16:20000,256:2000", help="case A: replicas:numsteps, comma-separated")
    p.add_argument("--write-threads", default="", help="case A: also ours with each --write-threads of this list")
    p.add_argument("--write-processes", default="", help="case A: also ours with each --write-processes of this list")
    p.add_argument("--fresh", default="", help="case A: also a fresh `multiwalk run` process with each --write-processes "
                   "of this list (0: threads, auto: the default; N/K: and --write-chunks K; N@VAR=VALUE: with that environment "
                   "variable; @MULTIWALK_BENCH_SRC=DIR: the package from DIR, e.g. an earlier commit's src)")
    p.add_argument("--profile", action="store_true", help="case A: each run of ours writes where its time went "
                   "(MULTIWALK_PROFILE: the compiled chunks, the parent's copying and waits, each writer process's phases) "
                   "and the report shows it (writer processes only; an older tree's runs have none)")
    p.add_argument("--skip-odatse", action="store_true", help="case A: ours only (ratios then read 'nan')")
    p.add_argument("--no-stats", action="store_true", help="case A: skip the per-temperature statistics (the exact "
                   "means take ~1 minute at 1024 temperatures)")
    p.add_argument("--gpu-replicas", default="10000,100000,1000000")
    p.add_argument("--gpu-steps", type=int, default=2000)
    p.add_argument("--gpu-unroll", default="", help="case B: --unroll values of the XLA form tried at the smallest size")
    p.add_argument("--gpu-kernel", default="pallas,xla", help="case B: --kernel values run at every size")
    p.add_argument("--odatse-steps", type=int, default=30, help="ODAT-SE's short run in case B")
    p.add_argument("--dtype", default="float64")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    global PROFILE
    PROFILE = args.profile
    common.select_platform(args.device)
    got = common.first_device(args.device)
    if got is None:
        return 1
    dev, on_gpu = got
    import multiwalk as mw

    out = args.out or Path(os.environ.get("OUT", "benchmarks/results"))
    out.mkdir(parents=True, exist_ok=True)
    log = common.make_log(time.perf_counter())
    env = common.environment(dev, on_gpu, mw, False)
    cases = args.cases.split(",")
    sizes = [tuple(int(v) for v in item.split(":")) for item in args.replicas.split(",")]
    threads = tuple(int(v) for v in args.write_threads.split(",") if v)
    processes = tuple(v for v in args.write_processes.split(",") if v)
    fresh = tuple(v for v in args.fresh.split(",") if v)
    a = ([case_a(out, r, n, log, threads, processes, args.skip_odatse, fresh, not args.no_stats) for r, n in sizes]
         if "A" in cases else [])
    b = None
    if "B" in cases:
        b = case_b(out, [int(r) for r in args.gpu_replicas.split(",")], args.gpu_steps, args.odatse_steps, args.dtype,
                   [int(u) for u in args.gpu_unroll.split(",") if u], log, tuple(args.gpu_kernel.split(",")))
    text = report(env, a, b)
    print(text)
    (out / "odatse.md").write_text(text + "\n")
    (out / "odatse.json").write_text(json.dumps({"environment": env, "A": a, "B": b}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
