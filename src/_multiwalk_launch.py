"""The first thing the ``multiwalk run`` command does, outside the ``multiwalk`` package on purpose:
start the worker processes of a Python objective before JAX is imported.

``python -m multiwalk`` and the ``multiwalk`` console script both import the package, whose
``__init__`` imports JAX and every solver (~0.6 s on a 2-core VM, ~1.1 s on a 16-core host).  The
pool of worker processes of ``[solver] name = "python"`` (a fork server that preloads
``_multiwalk_worker``, then W forks of it) takes about as long to come up.  Both are separate
processes, so they can overlap: ``multiwalk/__init__`` calls :func:`start_pool_early` before its
first import, which reads the command line and the input's TOML with the standard library alone
and, when the run will evaluate a Python objective on this machine's processes, starts the pool in
a background thread.  :class:`multiwalk.executors.Engine` takes that pool (:func:`claim_early_pool`)
when its worker count and paths are the ones it would have started; the command shuts down a pool
nobody took (:func:`shutdown_early_pool`), on every path out, errors included.

Under a plain ``mpiexec -n N multiwalk run`` of such an input, the ranks other than 0 only evaluate
rank 0's batches (:func:`serve_mpi_early`): they serve from here and end, never importing JAX.

Whenever the command line or the input is anything but plain (an option not known here, ``--help``,
``--distributed``, another executor, an unreadable file, ``backend`` not given), nothing starts
here: the command then starts its workers as it always did, and reports any error itself.
Only the standard library and ``_multiwalk_worker`` (NumPy, cloudpickle) are imported here.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["MPI_POLL_SECONDS", "MPI_SIZE_VARIABLES", "claim_early_pool", "default_workers", "end_after_cleanup",
           "ignore_stop_signals", "launched_rank", "launched_size", "mark",
           "mpi_launch_environment", "mpi_servers_met", "release_mpi_servers", "run_options_read_early",
           "serve_mpi_early", "shutdown_early_pool", "start_every_worker", "start_pool_early"]

# the longest sleep of mpi4py.futures' polling loops (its ``backoff``; its default is 1 ms): rank 0 waits
# for a step's values, the other ranks for their next piece.  One 40 ms piece sent, one evaluated on
# rank 0 (2 ranks, 2-core VM, median of 40): 43.07 ms a round at 1 ms, 41.17 ms at 0.1 ms; an idle
# rank's polls cost it ~nothing.
MPI_POLL_SECONDS = 1e-4
# environment variables that MPI launchers set in every rank: the world size
MPI_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE")

# ``multiwalk run``'s options as its parser (multiwalk.commands.run.add_parser) spells them; any other
# option (an abbreviation included) makes the early start give up. tests/test_early_pool.py compares.
RUN_OPTIONS_WITH_VALUE = frozenset({
    "--nprocs", "--coordinator", "--num-processes", "--process-id", "--write-threads", "--write-processes",
    "--write-chunks", "--dtype", "--unroll", "--kernel", "--workers", "--executor", "--time-limit"})
RUN_FLAGS = frozenset({"--init", "--resume", "--cont", "--reset-rand", "--reset_rand", "--step-files",
                       "--no-step-files", "--progress", "--no-progress"})
# algorithms whose Python objective goes to the executor (minsearch evaluates in this process)
_ALGORITHMS_WITH_WORKERS = ("exchange", "pattern", "lbfgs", "tempering", "pamc", "mapper")

_START = time.perf_counter()
_EARLY: dict[str, Any] = {}  # the pool started here until claimed: pool, workers, paths, pid
_CHOSE_CPU: list[bool] = []  # [True] once start_pool_early set JAX_PLATFORMS=cpu
_EXIT_STATUS: list[int] = []  # multiwalk run's exit status, once it has returned (see end_after_cleanup)
_MPI_SERVERS_WAITING: list[bool] = []  # [True] on rank 0 while ranks > 0 serve early and rank 0 has not met them


# ``MULTIWALK_TIMELINE``, read once: os.environ's lookup cost ~15 us a mark, five marks a solve() call
# (~11 % of a short PatternSearch call's host time on a 2-core CPU)
_TIMELINE = bool(os.environ.get("MULTIWALK_TIMELINE"))


def mark(label: str) -> None:
    """With ``MULTIWALK_TIMELINE`` set (in the environment the process started with): one line on
    stderr, the seconds since this module was imported (the interpreter's first ~20 ms are before
    it), ``label``, and the CPU seconds of the thread that marks and of the process (a wall span
    much longer than the thread's CPU span: it waited)."""
    if _TIMELINE:
        print(f"multiwalk timeline: {time.perf_counter() - _START:7.3f} s  {label}  (CPU seconds: this thread "
              f"{time.thread_time():.3f}, the process {time.process_time():.3f})", file=sys.stderr, flush=True)


def default_workers() -> int:
    """The CPUs this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` elsewhere): the
    processes executor's default worker count (:mod:`multiwalk.executors` uses this one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def mpi_launch_environment() -> bool:
    """Whether an MPI launcher's environment variables give this process a world of more than one
    rank (MPI itself is not started to find out)."""
    return launched_size() > 1


def _is_the_command() -> bool:
    """Whether this process is ``python -m multiwalk`` (the package being imported to find its
    ``__main__``) or the ``multiwalk`` console script."""
    argv = getattr(sys, "orig_argv", [])
    if sys.argv[:1] == ["-m"]:
        return "-m" in argv[:-1] and argv[argv.index("-m") + 1] == "multiwalk"
    main = sys.modules.get("__main__")
    return (bool(sys.argv) and Path(sys.argv[0]).name == "multiwalk"
            and getattr(main, "__file__", None) == sys.argv[0])


def run_options_read_early(args: list[str]) -> dict[str, Any] | None:
    """``{"input": ..., "workers": ..., "executor": ...}`` of a ``run`` command line, or None when it is
    not one, or not plain enough to be sure (the command's own parser then has the last word)."""
    if not args or args[0] != "run":
        return None
    found: dict[str, Any] = {"input": None, "workers": None, "executor": None}
    rest = iter(args[1:])
    for token in rest:
        name, has_value, value = token.partition("=")
        if token.startswith("-") and name in RUN_OPTIONS_WITH_VALUE:
            value = value if has_value else next(rest, None)
            if value is None:
                return None
            key = name.removeprefix("--")
            if key in found:
                found[key] = value
        elif token.startswith("-") and token in RUN_FLAGS:
            continue
        elif token.startswith("-") or found["input"] is not None:
            return None  # --help, --distributed, an abbreviation, a second input, ...
        else:
            found["input"] = token
    if found["input"] is None:
        return None
    try:
        found["workers"] = None if found["workers"] is None else int(found["workers"])
    except ValueError:
        return None
    return found


def _python_objective(options: dict[str, Any]) -> tuple[str, str] | None:
    """(the algorithm's name, the input's root_dir) when the input's objective is a Python one."""
    import tomllib

    try:
        with open(options["input"], "rb") as file:
            data = tomllib.load(file)
        solver, algorithm, base = data["solver"], data["algorithm"], data.get("base", {})
        python = solver.get("name") == "python" and (
            solver.get("backend") == "python" or (solver.get("vectorized") is True and "backend" not in solver))
        root_dir = str(Path(base.get("root_dir", ".")).expanduser().absolute())
        name = str(algorithm.get("name"))
    except Exception:  # noqa: BLE001 - any problem with the input: the command reports it later
        return None
    return (name, root_dir) if python else None


def _pool_plan(options: dict[str, Any]) -> tuple[int, str] | None:
    """(workers, the input's root_dir) when the input evaluates a Python objective on processes here."""
    if options["executor"] not in (None, "processes") or options["workers"] is not None and options["workers"] < 1:
        return None
    if options["executor"] is None and mpi_launch_environment():
        return None  # under mpiexec the executor is MPI
    found = _python_objective(options)
    if found is None or found[0] not in _ALGORITHMS_WITH_WORKERS:
        return None
    return options["workers"] or default_workers(), found[1]


def launched_size() -> int:
    """The number of ranks the MPI launcher started (1 when not launched so), from its environment:
    the largest of :data:`MPI_SIZE_VARIABLES` (``MPI_LOCALNRANKS`` counts one node's ranks only)."""
    sizes = [1]
    for name in MPI_SIZE_VARIABLES:
        try:
            sizes.append(int(os.environ[name]))
        except (KeyError, ValueError):
            continue
    return max(sizes)


MPI_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")


def launched_rank(environ: Any = None, variables: tuple[str, ...] = MPI_RANK_VARIABLES) -> int:
    """This process's rank as the MPI launcher's environment gives it (0 when not launched so):
    the first of ``variables`` set in ``environ`` (default ``os.environ``)."""
    environ = os.environ if environ is None else environ
    for name in variables:
        try:
            return int(environ[name])
        except (KeyError, ValueError):
            continue
    return 0


def _mpi_serving_root_dir(options: dict[str, Any] | None) -> str | None:
    """The input's root_dir when ranks > 0 of this launch serve from :func:`serve_mpi_early`, else None."""
    import importlib.util

    if (options is None or options["executor"] not in (None, "mpi") or not mpi_launch_environment()
            or "mpi4py.futures" in sys.modules):
        return None
    found = _python_objective(options)
    if found is None or importlib.util.find_spec("mpi4py") is None:
        return None
    return found[1]


def serve_mpi_early(options: dict[str, Any] | None) -> bool:
    """On a rank > 0 of a plain ``mpiexec -n N multiwalk run`` whose objective is a Python one
    (``multiwalk.executors.mpi_comm_executor``: rank 0 runs the sampler, the others only evaluate):
    serve rank 0's batches now, before JAX and the package are imported, which such a rank never
    uses (16 ranks importing them took ~1.3 s more than a process pool on a 16-core host); True
    once rank 0 is done.  False, doing nothing, outside MPI, under ``python -m mpi4py.futures``
    (its own pool), for another executor or input, or without mpi4py (the command then reports
    it); False on rank 0, which notes that the others serve: should the command end without
    meeting them (an error in the input or the options), :func:`release_mpi_servers` lets them go."""
    root_dir = _mpi_serving_root_dir(options)
    if root_dir is None:
        return False
    if launched_rank() == 0:
        _MPI_SERVERS_WAITING[:] = [True]
        return False
    sys.path[:0] = [p for p in (root_dir,) if p not in sys.path]  # the objective may import its neighbours
    from mpi4py import MPI
    from mpi4py.futures import MPICommExecutor

    mark(f"rank {MPI.COMM_WORLD.Get_rank()} serves rank 0's batches")
    ignore_stop_signals()
    # None here: this rank evaluates until rank 0 is done (rank 0's options, MPI_POLL_SECONDS, reach it)
    with MPICommExecutor(MPI.COMM_WORLD, root=0):
        pass
    mark(f"rank {MPI.COMM_WORLD.Get_rank()} served every batch")
    return True


def ignore_stop_signals() -> None:
    """On a rank that only evaluates rank 0's batches: ignore Ctrl-C (SIGINT) and SIGTERM.  mpiexec
    hands them to every rank, as a batch system's time limit does, but only rank 0 acts on them: it
    ends the run after the chunk in flight, writes its checkpoint, then lets these ranks go.  A rank
    that died of them would leave that chunk without its values, and mpiexec would end every rank,
    the partial result lost.  (The objective's own child processes inherit the choice, as the
    process pool's workers' do.)"""
    import signal

    for name in ("SIGINT", "SIGTERM"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)


def mpi_servers_met() -> None:
    """Rank 0 enters the ``MPICommExecutor`` the ranks served from :func:`serve_mpi_early` wait in."""
    _MPI_SERVERS_WAITING.clear()


def release_mpi_servers() -> None:
    """On rank 0 of a launch whose other ranks serve from :func:`serve_mpi_early`, when the command
    ends without having entered their ``MPICommExecutor`` (an error before the run): enter it and
    leave at once, so they end too; else they would wait for rank 0 forever, and mpiexec with them."""
    if not _MPI_SERVERS_WAITING:
        return
    _MPI_SERVERS_WAITING.clear()
    from mpi4py import MPI
    from mpi4py.futures import MPICommExecutor

    with MPICommExecutor(MPI.COMM_WORLD, root=0):
        pass


def start_pool_early() -> None:
    """Start the workers of ``multiwalk run``'s Python objective now, when this process is that command
    and its input asks for them (the module's docstring says when); otherwise do nothing."""
    if _EARLY or not _is_the_command():
        return
    if sys.argv[1:2] in (["run"], ["demo"]):  # the commands that end by end_after_cleanup
        _register_fast_exit()
    options = run_options_read_early(sys.argv[1:])
    if serve_mpi_early(options):
        raise SystemExit(0)  # rank 0 ran the command and reports its outcome
    plan = None if options is None else _pool_plan(options)
    if plan is None:
        return
    import concurrent.futures as cf
    import importlib.machinery
    import multiprocessing

    import _multiwalk_worker

    workers, root_dir = plan
    _say_cpu_before_jax()
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__spec__", None) is None:
        # the workers do not import the console script again (multiwalk.executors.workers_for_the_command)
        main.__spec__ = importlib.machinery.ModuleSpec("multiwalk.__main__", None)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([_multiwalk_worker.__name__])
    pool = cf.ProcessPoolExecutor(workers, mp_context=context, initializer=_multiwalk_worker.start_worker,
                                  initargs=((root_dir,),))
    _EARLY.update(pool=pool, workers=workers, paths=(root_dir,), pid=os.getpid())

    starter = threading.Thread(target=start_every_worker, args=(pool, workers), name="multiwalk-start-workers-early",
                               daemon=True)
    starter.start()
    _EARLY["starter"] = starter
    mark("worker pool started in the background")


def _say_cpu_before_jax() -> None:
    """``JAX_PLATFORMS=cpu`` when the user chose no platform and JAX is not imported yet: the
    sampler of a Python objective runs on the CPU (multiwalk.commands.run._sampler_on_the_cpu);
    said before JAX is imported, its import skips the GPU plugins (0.1-0.4 s on an H100 host).
    A JAX imported already (a ``sitecustomize``, perhaps with its own ``jax.config`` choice) has
    read its platforms: the variable would change nothing here, and the command decides later."""
    if os.environ.get("JAX_PLATFORMS") or os.environ.get("JAX_PLATFORM_NAME") or "jax" in sys.modules:
        return
    os.environ["JAX_PLATFORMS"] = "cpu"
    _CHOSE_CPU.append(True)


def _register_fast_exit() -> None:
    """Register an exit handler holding the only reference to an :class:`_EndWhenReleased`, which
    ends the process once the command has returned (:func:`end_after_cleanup`).  The interpreter
    calls every exit handler (in the reverse order of their registration: JAX's, multiprocessing's,
    logging's, and those registered before this one, a ``sitecustomize``'s or ``.pth`` file's such as
    coverage's) and only then releases their arguments, so wherever this handler stands in the
    list, the end comes after all of them have run, and before the modules are torn down."""
    import atexit

    atexit.register(_hold, _EndWhenReleased())


def _hold(end: _EndWhenReleased) -> None:
    """The exit handler of :func:`_register_fast_exit`: nothing to do but keep ``end`` until the
    interpreter releases every handler's arguments, after calling them all."""


class _EndWhenReleased:
    """Ends the process (``os._exit`` with the command's status) when the interpreter releases it:
    after every exit handler has run, the threads joined before them.  Nothing happens when the
    command has not returned (an error, ``--help``, ``SystemExit``): the process then ends as usual."""

    def __del__(self) -> None:
        if _EXIT_STATUS:
            _end_without_teardown()


def chose_the_cpu() -> bool:
    """Whether :func:`start_pool_early` set ``JAX_PLATFORMS=cpu`` (the user did not)."""
    return bool(_CHOSE_CPU)


def start_every_worker(pool: Any, workers: int) -> None:
    """Start all ``workers`` processes of a fresh ``ProcessPoolExecutor`` and wait until each has run
    a task (to be called in a background thread: each process start waits for the fork server).
    Since Python 3.9 a pool starts a process only for a task that finds none idle, so W quick tasks
    alone start one or two; the pool's own ``_launch_processes`` (what it does for ``fork``) starts
    them all, under the lock its ``submit`` takes.  A pool that cannot start is reported by the
    first batch, with its own message."""
    import _multiwalk_worker

    try:
        launch = getattr(pool, "_launch_processes", None)
        lock = getattr(pool, "_shutdown_lock", None)
        if launch is not None and lock is not None:
            with lock:
                if getattr(pool, "_executor_manager_thread", True) is None and not pool._processes:
                    launch()
        [future.result() for future in [pool.submit(_multiwalk_worker.ready) for _ in range(workers)]]
        mark(f"{workers} workers ready ({len(getattr(pool, '_processes', None) or {})} processes)")
    except Exception:  # noqa: BLE001 - reported by the first batch
        pass


def claim_early_pool(workers: int, paths: tuple[str, ...]) -> Any:
    """The pool :func:`start_pool_early` started, if it has ``workers`` processes with ``paths`` first
    on their path (from now on the caller's to shut down); None otherwise."""
    if _EARLY.get("pid") != os.getpid() or _EARLY["workers"] != workers or tuple(_EARLY["paths"]) != tuple(paths):
        return None
    pool = _EARLY.pop("pool")
    _EARLY.clear()
    mark("the run took the workers started early")
    return pool


def shutdown_early_pool() -> None:
    """Stop a pool started early that nobody claimed (the run failed before it, or used another)."""
    pool = _EARLY.pop("pool", None)
    starter = _EARLY.pop("starter", None)
    _EARLY.clear()
    if starter is not None:  # its workers all launched before the pool is shut down: none is left behind
        starter.join(timeout=30)
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)


def end_after_cleanup(status: int) -> None:
    """``multiwalk run`` or ``multiwalk demo`` returned ``status``: once the interpreter has joined the
    threads and called every exit handler (JAX's, multiprocessing's, MPI's, the pool's, a
    ``sitecustomize``'s, ...), the process ends with it at once (``os._exit``) rather than tearing
    down every module and XLA object one by one, which took ~0.1-0.4 s after a run
    (:func:`_register_fast_exit` says how).  Every file of the run is closed by then.  Only for the
    process's own command line."""
    _EXIT_STATUS[:] = [status]


def _end_without_teardown() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    _finalize_mpi()
    os._exit(_EXIT_STATUS[0])


def _finalize_mpi() -> None:
    """End MPI if this process started it (rank 0 of a plain ``mpiexec -n N multiwalk run``).
    mpi4py ends it only in the interpreter's teardown, which ``os._exit`` skips; a rank that leaves
    without ``MPI_Finalize`` makes mpiexec kill the ranks still ending (exit status 9), the ranks
    that served its batches among them."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
        mark("MPI finalized")
