#!/usr/bin/env python
"""Exchange (ODAT-SE's replica exchange) through the command ``multiwalk run``, against ODAT-SE on the same input.toml.

Run from the repository root (see benchmarks/README.md); ODAT-SE is pure Python (numpy only)::

    mkdir -p .whl && .venv/bin/pip wheel --no-deps -w .whl odat-se
    PYTHONPATH=src:$(ls .whl/odat_se-*.whl) python3 benchmarks/odatse.py --device cpu --cases A --out "$OUT"
    PYTHONPATH=src:$(ls .whl/odat_se-*.whl) python3 benchmarks/odatse.py --device gpu --cases B --out "$OUT"
    PYTHONPATH=src python3 benchmarks/odatse.py --device cpu --quick            # seconds; ODAT-SE if importable

Case A (one CPU, equal replicas and steps, ``--replicas R:N,...``): Himmelblau, replica exchange
of R replicas from T = 1 to 100, N steps, exchanges every 10 steps; both programs write their
step files.  Ours: the wall clock of ``multiwalk run input.toml`` called in this process (first
call compiling, second call reusing the compiled chunks) with each ``--write-processes`` of
``--write-processes`` (``default``: the command's default) and ``--no-step-files``; and with
``--fresh`` one fresh ``python -m multiwalk run`` process (Python's start, JAX's import and the
compilation included, as a user starts it).  Peer: ODAT-SE (``odatse``, one process) on the same
input, the whole command's wall clock.  Floor: the step files' bytes written once at the copy
bandwidth measured in the same run (a bound, not a target: formatting text costs more).  Check:
the mean of f at each temperature from both programs' result_T files against the exact value
(grid integral), errors from 20 blocks (``--no-stats`` skips it).

Case B (``--gpu-replicas R,...``, ``--gpu-steps N``): no step files, each ``--kernel`` of
``--gpu-kernel``; the peer is ODAT-SE's time for the same replica-steps, from its rate on a short
run (``--odatse-steps``) on this machine's CPU.  Floor: replica-steps x (Himmelblau's operations
by XLA's cost analysis + the Metropolis step's random words, log and arithmetic) over the FP32
lane rate.

``--profile``: where each of ours' runs spent its time (the compiled chunks, the parent's copying
and waits, each writer process's phases), from ``multiwalk run``'s MULTIWALK_PROFILE JSON.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this script is started
import common  # noqa: E402

STEP_OPS = 2 * 38 + common.TRANSCENDENTAL_OPS + 10  # two threefry words, a log, the Metropolis arithmetic

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


def odatse_env() -> dict[str, str]:
    """The environment ODAT-SE runs in: PYTHONPATH made absolute (it runs in the case's folder,
    where a relative entry such as .whl/odat_se-*.whl would not be found)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)
    return env


def odatse_available() -> bool:
    """Whether ODAT-SE imports in a fresh process (here, ``import odatse`` would find this script)."""
    return subprocess.run([sys.executable, "-c", "import odatse._main"], capture_output=True, env=odatse_env(),
                          cwd=Path.home()).returncode == 0


def run_odatse(folder: Path) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, odatse._main as m; m.cli(sys.argv[1:])", "input.toml"],
        cwd=folder, capture_output=True, text=True, env=odatse_env(),
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


def run_ours_fresh(folder: Path, *extra: str) -> dict:
    """``python -m multiwalk run`` in a new process, as a user starts it (``wall``: the whole command)."""
    env = dict(os.environ)
    profile = folder.resolve() / "profile.json"
    if PROFILE:
        env["MULTIWALK_PROFILE"] = str(profile)
    src = str((Path(__file__).resolve().parents[1] / "src").resolve())
    paths = [str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([src, *paths])
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "multiwalk", "run", "input.toml", "--no-progress", *extra],
                          cwd=folder, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"multiwalk run failed ({proc.returncode}): {proc.stdout[-1000:]} {proc.stderr[-2000:]}")
    return {**_parse_ours(folder, proc.stdout, wall), "profile": profile_summary(profile) if PROFILE else None}


def prepared(folder: Path, replicas: int, steps: int, therm: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "input.toml").write_text(INPUT.format(steps=steps, therm=therm, replicas=replicas))
    return folder


def files_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in (folder / "output").rglob("*.txt"))


def case_a(out: Path, replicas: int, steps: int, writers: list[str], fresh: bool, peer: bool, stats: bool,
           ceilings: dict[str, Any], log: Any) -> tuple[list[common.Row], list[str]]:
    """Case A's rows (module docstring) and its per-temperature check lines."""
    therm = steps // 10
    od = run_odatse(prepared(out / f"A_{replicas}_{steps}_odatse", replicas, steps, therm)) if peer else None
    if od:
        log(f"A R={replicas} N={steps} ODAT-SE: wall {od['wall']:.2f} s, run+post {od['work']:.2f} s")
    rows, folders = [], {}
    variants = [(f"--write-processes {w}", [] if w == "default" else ["--write-processes", w]) for w in writers]
    variants.append(("--no-step-files", ["--no-step-files"]))
    for label, extra in variants:
        walls, results = [], []
        for call in range(2):  # first call compiles, the second reuses the compiled chunks
            folder = prepared(out / f"A_{replicas}_{steps}_{len(rows)}_{call}", replicas, steps, therm)
            results.append(run_ours(folder, *extra))
            walls.append(results[-1]["wall"])
        folders[label] = folder
        nbytes = files_bytes(folder)
        prof = results[1].get("profile")
        if prof:  # --profile
            log(f"profile of {label}: " + ", ".join(f"{k} {v:.3f}" for k, v in prof.items() if isinstance(v, float)))
        note = (f"run+files {results[1]['work']:.3f} s (ODAT-SE run+post {od['work']:.2f} s)" if od else
                f"run+files {results[1]['work']:.3f} s") + f"; best fx {results[1]['best_fx']:.3g}; {nbytes / 1e6:.3g} MB"
        if prof:
            note += (f"; profile: sampling {prof['sample']:.3f} s, copy {prof['copy']:.3f} s, slot wait "
                     f"{prof['slot_wait']:.3f} s, flush wait {prof['flush_wait']:.3f} s, host other {prof['host_other']:.3f} s")
        rows.append(common.Row(f"A: {replicas} replicas, {steps} steps, multiwalk run {label}", walls[0], walls[1],
                               od["wall"] if od else None, "ODAT-SE" if od else "", nbytes / ceilings["bytes_per_s"],
                               note))
        log(f"A R={replicas} N={steps} {label}: walls {walls[0]:.2f} / {walls[1]:.2f} s; {note}")
    if fresh:
        folder = prepared(out / f"A_{replicas}_{steps}_fresh", replicas, steps, therm)
        m = run_ours_fresh(folder)
        rows.append(common.Row(f"A: {replicas} replicas, {steps} steps, a fresh `python -m multiwalk run` process",
                               m["wall"], None, od["wall"] if od else None, "ODAT-SE" if od else "",
                               files_bytes(folder) / ceilings["bytes_per_s"],
                               f"set-up + compile {m['setup']:.2f} s, run+files {m['work']:.3f} s"))
    lines = []
    if od and stats:
        lines = temperature_check(out / f"A_{replicas}_{steps}_odatse", folders[variants[0][0]], replicas, therm)
    return rows, lines


def temperature_check(odatse_folder: Path, ours_folder: Path, replicas: int, therm: int) -> list[str]:
    """Mean f per temperature of both programs against the exact means, in units of the combined error."""
    from multiwalk.solvers.exchange import temperature_ladder

    temps = 1.0 / temperature_ladder(replicas, Tmin=1.0, Tmax=100.0)
    exact = exact_means(temps)
    lines = [f"Mean f per temperature, R = {replicas} (errors from 20 blocks):", "",
             "| T | exact | ODAT-SE | ours | (ours - ODAT-SE) / error |", "|---:|---:|---:|---:|---:|"]
    z = []
    for t in range(replicas):
        mo, eo = block_stats(odatse_folder / "output" / f"result_T{t}.txt", therm)
        mm, em = block_stats(ours_folder / "output" / f"result_T{t}.txt", therm)
        z.append((mm - mo) / np.hypot(eo, em))
        lines.append(f"| {temps[t]:.4g} | {exact[t]:.4g} | {mo:.4g} ± {eo:.2g} | {mm:.4g} ± {em:.2g} | {z[-1]:+.2f} |")
    z = np.array(z)
    return lines + ["", f"rms z = {np.sqrt(np.mean(z**2)):.2f} over {z.size} temperatures, "
                    f"{np.mean(np.abs(z) > 2):.1%} with |z| > 2."]


def case_b(out: Path, sizes: list[int], steps: int, odatse_steps: int, kernels: list[str], dtype: str, peer: bool,
           ceilings: dict[str, Any], log: Any) -> list[common.Row]:
    """Case B's rows: replica-steps without step files, ODAT-SE's rate measured on a short run."""
    import multiwalk as mw

    rate = None
    if peer:
        od = run_odatse(prepared(out / "B_odatse", min(sizes), odatse_steps, 0))
        rate = min(sizes) * (odatse_steps - 1) / od["run"]
        log(f"B ODAT-SE: {rate:.3g} replica-steps/s")
    problem = mw.Problem(objective=lambda x: (x[0] ** 2 + x[1] - 11) ** 2 + (x[0] + x[1] ** 2 - 7) ** 2,
                         lower=[-6.0, -6.0], upper=[6.0, 6.0])
    cost = common.xla_cost(problem)
    ops = cost["flops"] + common.TRANSCENDENTAL_OPS * cost["transcendentals"] + STEP_OPS
    rows = []
    for replicas in sizes:
        for kernel in kernels:
            extra = ["--no-step-files", "--dtype", dtype, "--kernel", kernel]
            results = [run_ours(prepared(out / f"B_{replicas}_{kernel}_{k}", replicas, steps, steps // 10), *extra)
                       for k in range(2)]
            work = replicas * (steps - 1)
            note = (f"{work / results[1]['run']:.3g} replica-steps/s in the run, kernel {results[1]['kernel']}; "
                    f"set-up + compile {results[0]['setup']:.2f} s")
            rows.append(common.Row(f"B: {replicas} replicas, {steps} steps, --no-step-files --kernel {kernel}",
                                   results[0]["wall"], results[1]["wall"], work / rate if rate else None,
                                   "ODAT-SE, from its rate" if rate else "", work * ops / ceilings["lane_ops_per_s"],
                                   note))
            log(f"B R={replicas} kernel={kernel}: {note}")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = common.new_parser(__doc__, "odatse")
    p.add_argument("--cases", default="A,B")
    p.add_argument("--replicas", default="16:20000,256:2000", help="case A: replicas:numsteps, comma-separated")
    p.add_argument("--write-processes", default="default", help="case A: ours with each --write-processes of this list")
    p.add_argument("--fresh", action="store_true", help="case A: also one fresh `python -m multiwalk run` process")
    p.add_argument("--profile", action="store_true", help="case A: where each run of ours spent its time "
                   "(MULTIWALK_PROFILE), in the report's JSON")
    p.add_argument("--no-stats", action="store_true", help="case A: skip the per-temperature check")
    p.add_argument("--gpu-replicas", default="10000,100000,1000000")
    p.add_argument("--gpu-steps", type=int, default=2000)
    p.add_argument("--gpu-kernel", default="pallas,xla", help="case B: --kernel values run at every size")
    p.add_argument("--odatse-steps", type=int, default=30, help="ODAT-SE's short run in case B")
    p.add_argument("--dtype", default="float64")
    args = p.parse_args(argv)
    if args.quick:
        args.replicas, args.gpu_replicas, args.gpu_steps, args.gpu_kernel = "4:200", "64", 100, "xla"
        args.odatse_steps = 20
    global PROFILE
    PROFILE = args.profile
    run = common.begin(args)
    if run is None:
        return 2
    out = Path(args.out)
    ceilings = common.measure_ceilings(run.on_gpu, run.log)
    peer = odatse_available()
    notes = [] if peer else ["ODAT-SE is not importable: the peer column reads '-' (see the module docstring)."]
    rows, extra = [], []
    if "A" in args.cases.split(","):
        for item in args.replicas.split(","):
            replicas, steps = (int(v) for v in item.split(":"))
            a_rows, a_lines = case_a(out, replicas, steps, args.write_processes.split(","), args.fresh, peer,
                                     not args.no_stats, ceilings, run.log)
            rows += a_rows
            extra += a_lines
    if "B" in args.cases.split(","):
        rows += case_b(out, [int(v) for v in common.floats(args.gpu_replicas)], args.gpu_steps, args.odatse_steps,
                       args.gpu_kernel.split(","), args.dtype, peer, ceilings, run.log)
    heading = [f"Exchange (`multiwalk run`) against ODAT-SE: {run.env['device']}, {run.env['date']}, "
               f"JAX {run.env['jax']}, CPU {run.env['cpu']}. " + common.ceilings_line(ceilings)]
    return common.finish(args, run, "odatse", heading, rows, notes, {"ceilings": ceilings}, extra)


if __name__ == "__main__":
    sys.exit(main())
