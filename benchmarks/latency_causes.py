"""The causes behind the user-latency rows that miss their goals, measured (a diagnostic; the
figures of record are ``benchmarks/user_latency.py``'s):

* ``re_scaling``: ReplicaExchange 32 x nseq, 300+500, cheap 2-D, for nseq from 14 to 14000:
  ``run_seconds`` flat in the number of chains means the loop costs a fixed time per iteration
  (kernel launches and the loop's control), not work;
* ``fixed_cost``: the wall time of a call whose run is almost nothing (PatternSearch, 512 walkers,
  1 iteration), against the 15360 x 20 row: what every call pays outside its run;
* ``call_work``: the same PatternSearch calls, 200 in a row (per-call wall: mean, median, and the
  median ``run_seconds``), and what one of them asks of the device: the programs it runs (each a
  launch) and the reads back it waits for, counted through wrappers;
* ``replay``: the PatternSearch 15360 x 20 call against the same compiled programs it runs, called
  again in the same order on the same arguments with nothing around them, and their outputs read
  back: what a call would cost if the driver's host work were nil (the floor of a repeated call);
* ``replay_parts``: the same programs, each timed alone (launched, waited for, its small outputs read
  back: a call reads its report, not its state) with the
  ones before it already run and waited for: what a call of one program would cost, the floor of a
  call that ran the start, the chunk and the one-point value as one program;
* ``xringaus_compiles``: every program the xringaus fit's first call compiles, with its time
  (``jax_log_compiles``), and the whole first call.

    PYTHONPATH=src python3 benchmarks/latency_causes.py re_scaling fixed_cost call_work replay replay_parts \
        xringaus_compiles
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_timeline import call  # noqa: E402  (one call as a user makes it, result read back)


def second_call(problem: Any, solver: Any, **options: Any) -> tuple[float, Any]:

    call(problem, solver, options)
    return call(problem, solver, options)


def re_scaling() -> None:
    from user_latency import sphere2  # the table's cheap 2-D objective

    import multiwalk as mw

    problem = mw.Problem(objective=sphere2, lower=[-5.0, -5.0], upper=[5.0, 5.0])
    for nseq in (14, 140, 1400, 14000):
        wall, r = second_call(problem, mw.ReplicaExchange(nbeta=32, nseq=nseq, nburn=300, niter=500))
        run = r.stats["run_seconds"]
        print(f"re_scaling: 32 x {nseq:>5} chains, 800 iterations: wall {wall * 1e3:7.1f} ms, run {run * 1e3:7.1f} ms, "
              f"{run / 800 * 1e6:6.1f} us per iteration")


def fixed_cost() -> None:
    import pattern_search as bench

    import multiwalk as mw

    problem = bench.make_problem(mw, "ackley", 20)
    for walkers, iterations in ((512, 1), (15360, 1), (15360, 20)):
        walls = []
        for _ in range(5):
            wall, r = second_call(problem, mw.PatternSearch(n_walkers=walkers, iterations=iterations))
            walls.append((wall, r.stats["run_seconds"]))
        wall, run = sorted(walls)[2]
        print(f"fixed_cost: PatternSearch {walkers} x {iterations}: wall {wall * 1e3:6.2f} ms, run {run * 1e3:6.2f} ms, "
              f"outside the run {(wall - run) * 1e3:6.2f} ms (median of 5)")


def _counted_call(problem: Any, solver: Any) -> tuple[list[str], list[str]]:
    """``(programs, reads)`` of one ``mw.solve`` call with ``result.x`` and ``result.fun`` read: the
    compiled programs run (``jax.stages.Compiled.__call__``, named by the multiwalk function that
    ran each) and the reads back (the driver's ``progress.fetch``, ``jax.device_get``, and any
    other host copy of a device array, ``ArrayImpl._value``), each read counted once."""
    import traceback

    import jax
    from jax._src.array import ArrayImpl

    import multiwalk as mw
    from multiwalk import progress

    programs: list[str] = []
    reads: list[str] = []
    inside: list[str] = []
    run, fetch, device_get, value = jax.stages.Compiled.__call__, progress.fetch, jax.device_get, ArrayImpl._value

    def caller() -> str:
        frames = [f for f in traceback.extract_stack() if "/multiwalk/" in f.filename]
        return frames[-1].name if frames else "?"

    def counting_run(compiled: Any, *args: Any, **kwargs: Any) -> Any:
        programs.append(caller())
        return run(compiled, *args, **kwargs)

    def counted(name: str, read: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not inside:
                reads.append(f"{name} in {caller()}")
            inside.append(name)
            try:
                return read(*args, **kwargs)
            finally:
                inside.pop()
        return wrapper

    jax.stages.Compiled.__call__ = counting_run
    progress.fetch, jax.device_get = counted("fetch", fetch), counted("device_get", device_get)
    ArrayImpl._value = property(counted("np.asarray", value.fget))
    try:
        r = mw.solve(problem, solver, progress=False)
        np.asarray(r.x), float(r.fun)
    finally:
        jax.stages.Compiled.__call__, progress.fetch, jax.device_get, ArrayImpl._value = run, fetch, device_get, value
    return programs, reads


def call_work(calls: int = 200) -> None:
    import pattern_search as bench

    import multiwalk as mw

    problem = bench.make_problem(mw, "ackley", 20)
    for walkers, iterations in ((512, 1), (15360, 20)):
        solver = mw.PatternSearch(n_walkers=walkers, iterations=iterations)
        second_call(problem, solver)
        walls, runs = [], []
        while len(walls) < calls and sum(walls) < 20.0:  # 200 calls, or 20 s (15360 x 20 on a CPU: ~1.6 s a call)
            wall, r = call(problem, solver, {})
            walls.append(wall)
            runs.append(r.stats["run_seconds"])
        programs, reads = _counted_call(problem, solver)
        print(f"call_work: PatternSearch {walkers} x {iterations}, {len(walls)} calls: wall mean {np.mean(walls) * 1e3:.3f} "
              f"ms, median {np.median(walls) * 1e3:.3f} ms, run median {np.median(runs) * 1e3:.3f} ms; "
              f"{len(programs)} programs ({', '.join(programs)}), {len(reads)} reads back ({', '.join(reads)})")


def _recorded_programs(problem: Any, solver: Any) -> list[tuple[Any, Any, list[Any]]]:
    """Every compiled program one ``mw.solve`` call runs, in order: ``(executable, argument tree,
    leaves)``, a leaf that an earlier program returned given as ``(program index, output leaf
    index)`` (a chunk takes, and donates, the start's state), any other leaf as itself."""
    import jax

    import multiwalk as mw

    calls: list[tuple[Any, Any, list[Any]]] = []
    made: dict[int, tuple[int, int]] = {}  # id of an output leaf -> (program, leaf)
    alive: list[Any] = []  # the outputs, held so that no id is reused during the call
    run = jax.stages.Compiled.__call__

    def recording(compiled: Any, *args: Any) -> Any:
        leaves, tree = jax.tree_util.tree_flatten(args)
        calls.append((compiled, tree, [made.get(id(x), x) if isinstance(x, jax.Array) else x for x in leaves]))
        out = run(compiled, *args)
        alive.append(out)
        for j, leaf in enumerate(jax.tree_util.tree_leaves(out)):
            made[id(leaf)] = (len(calls) - 1, j)
        return out

    jax.stages.Compiled.__call__ = recording
    try:
        r = mw.solve(problem, solver, progress=False)
        np.asarray(r.x), float(r.fun)
    finally:
        jax.stages.Compiled.__call__ = run
    return calls


def _replayed(programs: list[tuple[Any, Any, list[Any]]]) -> list[Any]:
    """The recorded programs run again on their arguments, each earlier output taken from this run."""
    import jax

    outputs: list[list[Any]] = []
    for compiled, tree, leaves in programs:
        args = [outputs[x[0]][x[1]] if isinstance(x, tuple) else x for x in leaves]
        outputs.append(jax.tree_util.tree_leaves(compiled(*jax.tree_util.tree_unflatten(tree, args))))
    return outputs


def replay(calls: int = 200) -> None:
    import jax
    import pattern_search as bench

    import multiwalk as mw

    problem = bench.make_problem(mw, "ackley", 20)
    solver = mw.PatternSearch(n_walkers=15360, iterations=20)
    second_call(problem, solver)
    programs = _recorded_programs(problem, solver)
    walls, runs, bare = [], [], []
    for _ in range(calls):
        wall, r = call(problem, solver, {})
        walls.append(wall)
        runs.append(r.stats["run_seconds"])
        t0 = time.perf_counter()
        jax.device_get(_replayed(programs)[-1])
        bare.append(time.perf_counter() - t0)
    print(f"replay: PatternSearch 15360 x 20, {calls} calls alternated: mw.solve median {np.median(walls) * 1e3:.3f} ms "
          f"(run_seconds median {np.median(runs) * 1e3:.3f} ms); its {len(programs)} programs alone, the same arguments, "
          f"the last one's outputs read: median {np.median(bare) * 1e3:.3f} ms")


def replay_parts(calls: int = 200) -> None:
    import jax
    import pattern_search as bench

    import multiwalk as mw

    problem = bench.make_problem(mw, "ackley", 20)
    solver = mw.PatternSearch(n_walkers=15360, iterations=20)
    second_call(problem, solver)
    programs = _recorded_programs(problem, solver)
    alone: list[list[float]] = [[] for _ in programs]
    for _ in range(calls):
        outputs: list[list[Any]] = []
        for i, (compiled, tree, leaves) in enumerate(programs):
            args = [outputs[x[0]][x[1]] if isinstance(x, tuple) else x for x in leaves]
            t0 = time.perf_counter()
            out = jax.tree_util.tree_leaves(compiled(*jax.tree_util.tree_unflatten(tree, args)))
            jax.block_until_ready(out)  # the program done; its small outputs read, as a call reads its report
            jax.device_get([x for x in out if x.nbytes <= 4096])
            alone[i].append(time.perf_counter() - t0)
            outputs.append(out)
    parts = ", ".join(f"program {i} ({len(programs[i][2])} inputs) {np.median(t) * 1e3:.3f} ms"
                      for i, t in enumerate(alone))
    print(f"replay_parts: PatternSearch 15360 x 20, {calls} calls, each program launched, waited for and its "
          f"small outputs read, alone (median): {parts}")


class _Compiles(logging.Handler):
    """Collects JAX's "Finished XLA compilation of NAME in T sec" lines (``jax_log_compiles``)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        m = re.search(r"Finished XLA compilation of (.+?) in ([0-9.e-]+) s", record.getMessage())
        if m:
            self.seen.append((m.group(1), float(m.group(2))))


def xringaus_compiles(unroll: int | None = None) -> None:
    import jax
    import sgra

    import multiwalk as mw
    from multiwalk.commands.demo import DEMO_TRUTH
    from multiwalk.eht import closure_phases, xringaus_problem
    from multiwalk.models import PARAM_NAMES

    handler = _Compiles()
    logging.getLogger("jax").addHandler(handler)
    jax.config.update("jax_log_compiles", True)
    data = sgra.observe(np.array([DEMO_TRUTH[n] for n in PARAM_NAMES]), seed=0)
    cp = closure_phases(data)
    problem = xringaus_problem(data, closure=cp)
    solver = mw.ReplicaExchange(nbeta=32, nseq=16, nburn=400, niter=1000, metropolis_unroll=unroll)
    t0 = time.perf_counter()
    r = mw.solve(problem, solver, progress=False, seed=0)
    wall = time.perf_counter() - t0
    again, r2 = second_call(problem, solver, seed=0)
    print(f"xringaus_compiles (metropolis_unroll={unroll}): first call {wall:.2f} s, compile_seconds "
          f"{r.stats['compile_seconds']:.2f} s; second call {again:.3f} s, run {r2.stats['run_seconds']:.3f} s, "
          f"best chi2 {float(r2.fun):.2f}; {len(handler.seen)} programs compiled, "
          f"{sum(t for _, t in handler.seen):.2f} s in all:")
    for name, t in sorted(handler.seen, key=lambda p: -p[1])[:6]:
        print(f"  {t:7.2f} s  {name[:110]}")
    logging.getLogger("jax").removeHandler(handler)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", nargs="+", choices=["re_scaling", "fixed_cost", "call_work", "replay", "replay_parts",
                                                    "xringaus_compiles"])
    p.add_argument("--unroll", type=int, nargs="+", default=[0], help="xringaus: metropolis_unroll (0: default)")
    args = p.parse_args()
    for name in args.what:
        if name == "xringaus_compiles":
            for u in args.unroll:
                xringaus_compiles(u or None)
        else:
            globals()[name]()


if __name__ == "__main__":
    main()
