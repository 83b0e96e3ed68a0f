"""Wall time of a non-JAX objective of 10 ms a point (``time.sleep``, or ``--busy``: a busy loop of
that length) with W worker processes against serial, and against ``mpiexec -np W`` ODAT-SE on the
same problem when odatse is installed (skipped otherwise); ``mpiexec -np W multiwalk run`` on
ODAT-SE's own input too, where an ``mpiexec`` is found.

    python benchmarks/host_objective.py --workers 1 2 4 8 16 --out host_objective.json

Replica exchange (``mw.Exchange``) of ``--replicas`` replicas for ``--steps`` steps: one batch of
``replicas`` points a step.  Prints a markdown table; writes JSON to ``--out``.  The whole
``multiwalk run`` process is timed twice on a fresh persistent compilation cache: cold (it
compiles and keeps its programs), then warm (it loads them).

    python benchmarks/host_objective.py --dispatch --replicas 64 1024

prints instead the driver's time per step around a cheap objective (a sum of squares, serial):
the host loop between compiled steps (multiwalk.host_loop) against the callback inside the
compiled loop.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import jax
import numpy as np

import multiwalk as mw

jax.config.update("jax_enable_x64", True)
SECONDS_PER_POINT = 0.010


def slow_sphere(x: np.ndarray) -> float:
    """sum(x^2) after 10 ms of sleep (or of busy work when MULTIWALK_BENCH_BUSY is set)."""
    if os.environ.get("MULTIWALK_BENCH_BUSY"):
        end = time.perf_counter() + SECONDS_PER_POINT
        while time.perf_counter() < end:
            pass
    else:
        time.sleep(SECONDS_PER_POINT)
    return float(np.sum(np.asarray(x) ** 2))


def ours(executor: str, workers: int | None, replicas: int, steps: int) -> dict:
    problem = mw.Problem(objective=slow_sphere, lower=[-5.0] * 3, upper=[5.0] * 3, backend="python",
                         executor=executor, workers=workers)
    solver = mw.Exchange(betas=tuple(np.geomspace(10, 0.1, replicas).tolist()), numsteps=steps,
                         numsteps_exchange=5, step_width=(0.2,) * 3)
    problem.host_objective.engine.executor().submit(int, 0).result() if executor != "serial" else None  # start workers
    t0 = time.perf_counter()
    result = mw.solve(problem, solver, seed=0)
    wall = time.perf_counter() - t0
    problem.host_objective.engine.shutdown()
    host = result.stats["host_objective"]
    return {"executor": executor, "workers": host["workers"], "wall_s": wall, "run_s": result.stats["run_seconds"],
            "points": host["points"], "fun": float(result.fun)}


PEER = textwrap.dedent('''
    import sys, time, numpy as np, odatse, odatse.algorithm.exchange, odatse.solver.function
    def slow_sphere(x):
        time.sleep(0.010)
        return float(np.sum(np.asarray(x) ** 2))
    info = odatse.Info.from_file(sys.argv[1])
    solver = odatse.solver.function.Solver(info)
    solver.set_function(slow_sphere)
    runner = odatse.Runner(solver, info)
    odatse.algorithm.exchange.Algorithm(info, runner).main()
''')


def exchange_input(output_dir: str, solver: str, per_process: int, steps: int) -> str:
    """ODAT-SE's input.toml of the exchange both programs run: 3-D, 64 replicas in all."""
    return textwrap.dedent(f'''
        [base]
        dimension = 3
        output_dir = "{output_dir}"
        {{solver}}
        [algorithm]
        name = "exchange"
        seed = 0
        [algorithm.param]
        min_list = [-5.0, -5.0, -5.0]
        max_list = [5.0, 5.0, 5.0]
        step_list = [0.2, 0.2, 0.2]
        [algorithm.exchange]
        Tmin = 0.1
        Tmax = 10.0
        numsteps = {steps}
        numsteps_exchange = 5
        nreplica_per_proc = {per_process}
    ''').replace("{solver}", solver)


def peer(workers: int, replicas: int, steps: int, folder: Path) -> dict | None:
    """``mpiexec -np W`` odatse's exchange on the same problem (replicas / W per process), or None."""
    mpiexec = _mpiexec()
    if mpiexec is None or replicas % workers:
        return None
    # the package, not benchmarks/odatse.py beside this script: asked of a Python started in the folder
    probe = subprocess.run([sys.executable, "-c", "import odatse.algorithm.exchange"], cwd=folder, capture_output=True)
    if probe.returncode:
        return None
    (folder / "peer.py").write_text(PEER)
    (folder / "input.toml").write_text(exchange_input(f"out{workers}", '[solver]\nname = "function"',
                                                      replicas // workers, steps))
    t0 = time.perf_counter()
    subprocess.run([mpiexec, "-np", str(workers), sys.executable, "peer.py", "input.toml"], cwd=folder, check=True,
                   capture_output=True)
    return {"workers": workers, "wall_s": time.perf_counter() - t0}


SLOW_MODULE = textwrap.dedent('''
    import time
    import numpy as np
    def slow_sphere(x):
        time.sleep(0.010)
        return float(np.sum(np.asarray(x) ** 2))
''')


def dispatch(replicas: list[int], steps: int = 400) -> None:
    """Milliseconds a step outside a cheap objective: the host loop against the callback form."""
    from multiwalk import host_loop

    def cheap(x: np.ndarray) -> float:
        return float(np.sum(np.asarray(x) ** 2))

    print("| replicas | form | ms a step | of which the objective (ms) | the rest (ms) |\n| --- | --- | --- | --- | --- |")
    applies = host_loop.applies
    for r in replicas:
        for form in ("host loop", "callback", "host loop", "callback"):  # alternated: the machine's load drifts
            host_loop.applies = applies if form == "host loop" else (lambda *args: False)
            problem = mw.Problem(objective=cheap, lower=[-5.0] * 3, upper=[5.0] * 3, backend="python", executor="serial")
            solver = mw.Exchange(betas=tuple(np.geomspace(10, 0.1, r).tolist()), numsteps=steps + 1,
                                 numsteps_exchange=5, step_width=(0.2,) * 3)
            result = mw.solve(problem, solver, seed=0, progress=False)
            step = 1e3 * result.stats["run_seconds"] / steps
            host = result.stats["host_objective"]
            objective = 1e3 * host["seconds"] / host["batches"]
            print(f"| {r} | {form} | {step:.3f} | {objective:.3f} | {step - objective:.3f} |")
    host_loop.applies = applies


def ours_command(workers: int, replicas: int, steps: int, folder: Path, mpiexec: str | None = None) -> dict:
    """``multiwalk run input.toml --workers W`` (or, with ``mpiexec``, ``mpiexec -np W multiwalk run
    input.toml`` on the peer's own input: ``nreplica_per_proc`` = replicas / W, every rank evaluating),
    the whole process (start, imports, compiling, files), the objective a plain NumPy file ([solver]
    name = "python"); cold (a fresh persistent cache), then warm."""
    run_dir = folder / f"ours{workers}{'_mpi' if mpiexec else ''}"
    run_dir.mkdir()
    (run_dir / "slow.py").write_text(SLOW_MODULE)
    solver = '[solver]\nname = "python"\nfunction = "slow.py:slow_sphere"\nbackend = "python"'
    (run_dir / "input.toml").write_text(exchange_input("out", solver, replicas // workers if mpiexec else replicas,
                                                       steps))
    command = [sys.executable, "-m", "multiwalk", "run", "input.toml"]
    command = [mpiexec, "-np", str(workers), *command] if mpiexec else [*command, "--workers", str(workers)]
    try:
        import polars  # noqa: F401  (the step files' writer)
    except ImportError:
        command.append("--no-step-files")  # no polars here: the per-step files are not written
    environment = {**os.environ, "MULTIWALK_CACHE_DIR": str(run_dir / "jax-cache")}  # fresh: cold, then warm
    walls = []
    for _ in ("cold", "warm"):
        shutil.rmtree(run_dir / "out", ignore_errors=True)
        t0 = time.perf_counter()
        done = subprocess.run(command, cwd=run_dir, capture_output=True, text=True, env=environment)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        walls.append(time.perf_counter() - t0)
    return {"workers": workers, "wall_s": walls[1], "cold_s": walls[0], "step_files": "--no-step-files" not in command}


def _mpiexec() -> str | None:
    return shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--replicas", type=int, nargs="+", default=[64], help="one value, or several with --dispatch")
    parser.add_argument("--dispatch", action="store_true", help="time a step around a cheap objective, both forms")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--busy", action="store_true", help="a busy loop of 10 ms instead of time.sleep")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    if args.dispatch:
        dispatch(args.replicas)
        return
    args.replicas = args.replicas[0]
    if args.busy:
        os.environ["MULTIWALK_BENCH_BUSY"] = "1"  # before the worker processes start
    serial = ours("serial", None, args.replicas, args.steps)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for w in args.workers:
            row = ours("processes", w, args.replicas, args.steps)
            row["speedup"] = serial["run_s"] / row["run_s"]
            row["command"] = ours_command(w, args.replicas, args.steps, Path(tmp))
            mpiexec = _mpiexec() if args.replicas % w == 0 else None
            row["mpiexec"] = None if mpiexec is None else ours_command(w, args.replicas, args.steps, Path(tmp), mpiexec)
            row["peer"] = peer(w, args.replicas, args.steps, Path(tmp))
            rows.append(row)
    floor = args.replicas * args.steps * SECONDS_PER_POINT
    print(f"# non-JAX objective, {SECONDS_PER_POINT * 1e3:.0f} ms a point ({'busy loop' if args.busy else 'time.sleep'}), "
          f"{args.replicas} replicas x {args.steps} steps; {platform.node()}, {os.cpu_count()} CPUs, "
          f"{datetime.date.today()}\n")
    print(f"serial: {serial['run_s']:.2f} s of run ({floor:.2f} s of objective at most)\n")
    print("| W | run (s) | speed-up vs serial | >= 0.8 W | `multiwalk run --workers W`, whole process, warm cache (s) "
          "| cold cache (s) | `mpiexec -np W multiwalk run`, the peer's input, warm (s) "
          "| odatse mpiexec -np W, whole process (s) | odatse / ours (warm) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        p, c, m = r["peer"], r["command"], r["mpiexec"]
        enough = "yes" if r["speedup"] >= 0.8 * r["workers"] else "no"
        files = "" if c["step_files"] else " (no step files)"
        ratio = "" if p is None else f"{p['wall_s'] / c['wall_s']:.2f}"
        print(f"| {r['workers']} | {r['run_s']:.2f} | {r['speedup']:.2f} | {enough} | {c['wall_s']:.2f}{files} "
              f"| {c['cold_s']:.2f} | {'no mpiexec' if m is None else format(m['wall_s'], '.2f')} "
              f"| {'odatse not installed' if p is None else format(p['wall_s'], '.2f')} | {ratio} |")
    if args.out is not None:
        args.out.write_text(json.dumps({"serial": serial, "rows": rows, "busy": args.busy, "replicas": args.replicas,
                                        "steps": args.steps, "cpus": os.cpu_count(), "date": str(datetime.date.today())},
                                       indent=1))


if __name__ == "__main__":
    main()
