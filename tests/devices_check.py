"""Runs of every solver on 1, 2 and 4 CPU devices, for tests/test_devices.py.

Run by tests/multidevice_check.py (4 virtual CPU devices, float64); :func:`main` returns a dict of
comparisons (every value a plain number, bool or string) that the test asserts on: decisions
(integers, statuses) compared exactly, floats as their largest distance in ulp (tests/ulp.py).
Sizes are small: the time goes into compiling one loop per solver and device count.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import jax
import numpy as np
from ulp import max_ulps

import multiwalk as mw
from multiwalk.functions import yao


def sphere(x):
    return (x**2).sum()


def rosenbrock(x):
    return ((1 - x[:-1]) ** 2 + 100 * (x[1:] - x[:-1] ** 2) ** 2).sum()


def ulps(a, b) -> float:
    """Largest ulp distance (values below 1 counted in 1's ulp); ``inf`` where integers differ."""
    return max_ulps(a, b, scale=1.0)


def worst(pairs: dict) -> dict:
    """``{field: ulps}`` of ``{field: (a, b)}``."""
    return {name: ulps(a, b) for name, (a, b) in pairs.items()}


def _split_pinned_fallback(rex, re) -> dict:
    """A split one program whose small outputs XLA will not put in pinned host memory: compiled
    without, with one warning, the devices marked; a failure of the run's own is raised, with no
    warning and no mark (the split form of tests/test_one_program.py's two pinned-memory tests)."""
    import warnings

    from multiwalk import one_program

    out: dict = {}
    plane = mw.Problem(objective=sphere, lower=-5.0 * np.ones(2), upper=5.0 * np.ones(2))
    platforms, rex.ONE_PROGRAM_PLATFORMS = rex.ONE_PROGRAM_PLATFORMS, ("cpu", "gpu")
    outputs = one_program._pinned_split_outputs
    one_program._pinned_split_outputs = lambda placement: (
        None if placement.devices[0] in one_program._NO_PINNED_SPLIT_OUTPUTS else ("not", "a sharding"))
    report_in_program = rex.ReplicaExchange.report_in_program
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = mw.solve(plane, re, seed=3, progress=False, devices=2)
        ours = [w for w in caught if "without pinned host memory" in str(w.message)]
        out["split_fallback"] = [r.stats["one_program"], len(ours), ours[0].filename if ours else "",
                                 len(one_program._NO_PINNED_SPLIT_OUTPUTS)]
        one_program._NO_PINNED_SPLIT_OUTPUTS.clear()

        def fails(self, problem, report):
            raise ValueError("a failure of the run's own")

        rex.ReplicaExchange.report_in_program = fails
        other = mw.Problem(objective=sphere, lower=-4.0 * np.ones(2), upper=4.0 * np.ones(2))  # not kept
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                mw.solve(other, re, seed=3, progress=False, devices=2)
                raised = "nothing"
            except ValueError as err:
                raised = str(err)
        out["split_own_failure"] = [raised, sum("pinned" in str(w.message) for w in caught),
                                    len(one_program._NO_PINNED_SPLIT_OUTPUTS)]
    finally:
        rex.ReplicaExchange.report_in_program = report_in_program
        one_program._pinned_split_outputs = outputs
        one_program._NO_PINNED_SPLIT_OUTPUTS.clear()
        rex.ONE_PROGRAM_PLATFORMS = platforms
    return out


def main() -> dict:
    out: dict = {"devices": jax.device_count(), "threefry_partitionable": bool(jax.config.jax_threefry_partitionable)}
    box = mw.Problem(objective=sphere, lower=-5.0 * np.ones(3), upper=5.0 * np.ones(3))
    t0 = time.perf_counter()

    # ReplicaExchange: 8 sequences over 1, 2, 4 devices (2 parameters: shorter compilation)
    plane = mw.Problem(objective=sphere, lower=-5.0 * np.ones(2), upper=5.0 * np.ones(2))
    re = mw.ReplicaExchange(nseq=8, nbeta=4, nburn=10, niter=20)
    runs = {k: mw.solve(plane, re, seed=3, progress=False, devices=k) for k in (1, 2, 4)}
    fields = ("samples", "fun_trace", "acceptance", "exchange_rate", "steps", "labels", "x")
    for k in (2, 4):
        out[f"re_ulps_{k}"] = worst({f: (getattr(runs[k], f), getattr(runs[1], f)) for f in fields})
        out[f"re_devices_{k}"] = runs[k].stats["devices"]
    out["re_default_devices"] = mw.solve(plane, re, seed=3, progress=False).stats["devices"]  # cached: 4 devices
    # a repeated split call copies nothing to the devices: the run's key and the chunks' trip counts
    # are kept where the split start and loop take them (the first repeat keeps the trip counts of
    # whole phases; a first call's chunks were shorter)
    mw.solve(plane, re, seed=3, progress=False, devices=2)
    try:
        with jax.transfer_guard_host_to_device("disallow"), jax.transfer_guard_device_to_device("disallow"):
            again = mw.solve(plane, re, seed=3, progress=False, devices=2)
        out["re_repeat_2_copies"] = "none"
        out["re_repeat_2_same"] = bool(np.array_equal(again.samples, runs[2].samples) and again.fun == runs[2].fun)
    except Exception as err:  # noqa: BLE001 - the guard's refusal, reported to the test
        out["re_repeat_2_copies"] = f"{type(err).__name__}: {str(err)[:200]}"
    # a short run as ONE program (as on a GPU: ONE_PROGRAM_PLATFORMS), split over 2 devices, against
    # one device and against the split run in chunks; a repeat runs the kept program, copying nothing
    from multiwalk.solvers import replica_exchange as rex

    # (a problem of its own: its kept program would outlive the platforms' change for ``plane``)
    plane_whole = mw.Problem(objective=sphere, lower=-5.0 * np.ones(2), upper=5.0 * np.ones(2))
    platforms, rex.ONE_PROGRAM_PLATFORMS = rex.ONE_PROGRAM_PLATFORMS, ("cpu", "gpu")
    try:
        whole = {k: mw.solve(plane_whole, re, seed=3, progress=False, devices=k) for k in (1, 2)}
        with jax.transfer_guard_host_to_device("disallow"), jax.transfer_guard_device_to_device("disallow"):
            whole_again = mw.solve(plane_whole, re, seed=3, progress=False, devices=2)
        # a device other than the default one, asked for: the run stays in chunks
        other_device = mw.solve(plane_whole, re, seed=3, progress=False, devices=[jax.devices()[1]])
    finally:
        rex.ONE_PROGRAM_PLATFORMS = platforms
    out["re_one_program"] = [r.stats["one_program"] for r in (whole[1], whole[2], whole_again, other_device)]
    out["re_one_program_devices"] = [whole[k].stats["devices"] for k in (1, 2)]
    out["re_one_program_ulps_2"] = worst({f: (getattr(whole[2], f), getattr(whole[1], f)) for f in (*fields, "fun")})
    out["re_one_program_vs_chunks_ulps_2"] = worst({f: (getattr(whole[2], f), getattr(runs[2], f)) for f in fields})
    out["re_one_program_repeat_same"] = bool(np.array_equal(whole_again.samples, whole[2].samples)
                                             and whole_again.fun == whole[2].fun)
    out.update(_split_pinned_fallback(rex, re))
    # the swap kernel (Pallas, interpret mode here) on each device's sequences, against one device
    re_kernel = mw.ReplicaExchange(nseq=8, nbeta=4, nburn=10, niter=20, kernel="pallas")
    kernel_runs = {k: mw.solve(plane, re_kernel, seed=3, progress=False, devices=k) for k in (1, 2)}
    out["re_kernel_ulps_2"] = worst({f: (getattr(kernel_runs[2], f), getattr(kernel_runs[1], f)) for f in fields})
    out["re_kernel_form_2"] = kernel_runs[2].stats["kernel"]
    # a run stopped after its first chunk reads its result from the final state (no chunk's report):
    # split over 2 devices as on one

    def first_chunk_only(info):
        raise KeyboardInterrupt  # as Ctrl-C: the run ends after this chunk

    stopped = {k: mw.solve(plane, re, seed=3, progress=False, devices=k, callback=first_chunk_only) for k in (1, 2)}
    out["re_stopped_status"] = [stopped[k].status.name for k in (1, 2)]
    out["re_stopped_ulps_2"] = worst({f: (getattr(stopped[2], f), getattr(stopped[1], f)) for f in ("x", "fun")})

    # PatternSearch (XLA form): 64 walkers, two rounds
    ps = mw.PatternSearch(n_walkers=64, iterations=4, rounds=2, kernel="xla")
    a, b = (mw.solve(box, ps, seed=1, progress=False, devices=k) for k in (1, 4))
    out["ps_ulps"] = worst({"walkers": (b.walkers, a.walkers), "funs": (b.funs, a.funs), "x": (b.x, a.x),
                            "fun": (b.fun, a.fun)})
    out["ps_devices"] = b.stats["devices"]

    # a split run's few results read back: what is replicated, from its copy on one device; what
    # is split, as it is (progress.start_copies)
    from jax.sharding import NamedSharding, PartitionSpec

    from multiwalk import progress

    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("d",))
    replicated = jax.device_put(np.arange(3.0), NamedSharding(mesh, PartitionSpec()))
    split = jax.device_put(np.arange(8.0), NamedSharding(mesh, PartitionSpec("d")))
    (one, whole), _ = progress.start_copies((replicated, split))
    read = progress.fetch((one, whole))
    out["copies_devices"] = [len(one.sharding.device_set), len(whole.sharding.device_set)]
    out["copies_same"] = bool(np.array_equal(read[0], np.arange(3.0)) and np.array_equal(read[1], np.arange(8.0)))

    # PatternSearch on Rastrigin-4 in float32, 1024 walkers: XLA's CPU backend evaluates a batch of
    # 1024 points with other kernels than the 4 devices' 256 each, which round differently
    rastrigin4 = mw.Problem(objective=yao.rastrigin, lower=np.full(4, -5.12), upper=np.full(4, 5.12), dtype="float32")
    ps1024 = mw.PatternSearch(n_walkers=1024, iterations=20, kernel="xla")
    # (the value at the point comes with the run's last chunk, the split run's too: value_at_point,
    # a program and a read after the run, is not called)
    from multiwalk.solvers import pattern_search as ps_module

    after_run, value_at_point = [], ps_module.value_at_point
    ps_module.value_at_point = lambda *a: after_run.append(a) or value_at_point(*a)
    a1, b4 = (mw.solve(rastrigin4, ps1024, seed=4, progress=False, devices=k) for k in (1, 4))
    ps_module.value_at_point = value_at_point
    out["ps1024_values_after_run"] = len(after_run)
    out["ps1024_x_ulps"] = ulps(b4.x, a1.x)
    out["ps1024_x_same"] = bool(np.array_equal(a1.x, b4.x))
    out["ps1024_fun"] = [float(a1.fun), float(b4.fun)]  # exact: float32 -> float64

    # A checkpoint written on 4 devices resumes on 1: interrupted after the first chunk, then resumed
    with tempfile.TemporaryDirectory() as tmp:
        ck = Path(tmp) / "ps.npz"

        def stop(info):
            raise KeyboardInterrupt

        part = mw.solve(box, ps, seed=1, progress=False, devices=4, checkpoint=ck, callback=stop)
        resumed = mw.solve(box, ps, seed=1, progress=False, devices=1, resume=ck)
        out["resume_partial"] = part.status == mw.Status.INTERRUPTED and part.stats["iterations"]["search"] < 8
        out["resume_ulps"] = worst({"walkers": (resumed.walkers, a.walkers), "fun": (resumed.fun, a.fun)})

    # Exchange (ODAT-SE's): 8 replicas, 2 per device: neighbouring-temperature swaps cross devices
    ex = mw.Exchange(betas=tuple(np.geomspace(10.0, 0.1, 8)), numsteps=40, step_width=(0.5, 0.5, 0.5))
    a, b = (mw.solve(box, ex, seed=2, progress=False, devices=k) for k in (1, 4))
    out["ex_ulps"] = worst({
        "replica_x": (b.replica_x, a.replica_x), "temperature_index": (b.temperature_index, a.temperature_index),
        "fun": (b.fun, a.fun), "exchange_rate": (b.exchange_rate, a.exchange_rate),
        **{f"statistics[{key}]": (b.statistics[key], a.statistics[key]) for key in a.statistics},
    })
    out["ex_swaps"] = int(np.nansum(a.exchange_rate > 0))  # exchanges did happen
    out["ex_devices"] = b.stats["devices"]

    # Mapper: 21 points of a mesh in batches of 8, each batch split over 4 devices (the last padded)
    mapper = mw.Mapper(points=np.random.default_rng(6).uniform(-5.0, 5.0, (21, 3)), batch_size=8)
    a, b = (mw.solve(box, mapper, progress=False, devices=k) for k in (1, 4))
    out["map_ulps"] = worst({"funs": (b.funs, a.funs), "fun": (b.fun, a.fun)})
    out["map_best_same"] = a.best_index == b.best_index
    out["map_devices"] = b.stats["devices"]

    # multi-start L-BFGS: 8 starts
    rosen4 = mw.Problem(objective=rosenbrock, lower=-2.0 * np.ones(4), upper=2.0 * np.ones(4))
    lb = mw.LBFGS(starts=8, max_iterations=60)
    a, b = (mw.solve(rosen4, lb, seed=0, progress=False, devices=k) for k in (1, 4))
    out["lbm_iterations_same"] = bool(np.array_equal(a.iterations_per_start, b.iterations_per_start))
    out["lbm_statuses_same"] = [int(s) for s in a.statuses] == [int(s) for s in b.statuses]
    out["lbm_x_maxdiff"] = float(np.max(np.abs(a.xs - b.xs)))
    out["lbm_f0_ulps"] = max_ulps(b.history["f"][:2], a.history["f"][:2])  # start and first iteration
    out["lbm_devices"] = b.stats["devices"]

    # one L-BFGS problem of n = 128, its vectors split over 4 devices; the coupling term
    # (x[1:] - x[:-1]) reads across the devices' boundaries
    n = 128
    weights = np.linspace(1.0, 4.0, n)

    def coupled(x):
        return (weights * (x - 0.5) ** 2).sum() + ((x[1:] - x[:-1]) ** 2).sum() + 0.1 * (x**4).sum()

    big = mw.Problem(objective=coupled, x0=np.linspace(-1.0, 1.0, n))
    lb1 = mw.LBFGS(max_iterations=100, eps=1e-9)
    a, b = (mw.solve(big, lb1, seed=0, progress=False, devices=k) for k in (1, 4))
    hist = min(a.history_length[0], b.history_length[0])
    out["lb1_devices"] = b.stats["devices"]
    # f along the iterations, relative to the starting value
    out["lb1_f_hist_diff"] = float(np.max(np.abs(b.history["f"][:hist, 0] - a.history["f"][:hist, 0])) / a.history["f"][0, 0])
    out["lb1_iterations"] = [a.iterations, b.iterations]
    out["lb1_success"] = bool(a.success and b.success)
    out["lb1_x_maxdiff"] = float(np.max(np.abs(a.x - b.x)))
    out["lb1_sharding"] = str(_last_compiled_shardings().spec)

    # devices=None falls back to one device with a note when the batch does not split
    odd = mw.solve(box, mw.PatternSearch(n_walkers=6, iterations=2, rounds=1, kernel="xla"), seed=0, progress=False)
    out["fallback_devices"] = odd.stats["devices"]
    out["fallback_note"] = odd.stats.get("devices_note", "")
    # devices=3 with 8 sequences: a ValueError before compiling, naming the option and the fix
    try:
        mw.solve(plane, re, seed=3, progress=False, devices=3)
        out["error"] = ""
    except ValueError as err:
        out["error"] = str(err)
    out["seconds"] = time.perf_counter() - t0
    return out


def _last_compiled_shardings():
    from multiwalk.compile_cache import compiled_loops

    compiled = compiled_loops()[-1]
    return compiled.input_shardings[0][0].starts.P

