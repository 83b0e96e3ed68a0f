"""Where a non-JAX objective's points are evaluated: one ``concurrent.futures.Executor``.

``executor=`` of :class:`multiwalk.Problem` (``backend="python"``) and ``multiwalk run --executor``:

* ``"processes"`` (the default): a :class:`concurrent.futures.ProcessPoolExecutor` of ``workers``
  processes on this machine (default: the CPUs this process may use), started by ``forkserver``
  (JAX's threads do not survive a fork), each ignoring Ctrl-C so the driver ends the run cleanly;
* ``"mpi"``: :mod:`mpi4py.futures`, the default when launched under ``mpiexec`` with several ranks:
  ``mpiexec -n N python -m mpi4py.futures ...`` gives an :class:`~mpi4py.futures.MPIPoolExecutor`
  over ranks 1 .. N-1; a plain ``mpiexec -n N multiwalk run`` (ODAT-SE's way) an
  :class:`~mpi4py.futures.MPICommExecutor` on ``COMM_WORLD`` (rank 0 runs the solver, and every
  rank, rank 0 too, evaluates one piece of each batch: ``Engine.evaluates_here``);
* ``"dask"``: a Dask distributed ``Client`` (``Client()`` reads ``DASK_SCHEDULER_ADDRESS``, else
  starts a local cluster of ``workers`` processes), its ``client.get_executor()``;
* ``"serial"``: in this process, one point after another;
* an ``Executor`` instance (used as it is, never shut down here) or a Dask ``Client``.

No scheduling of our own: the batch is cut into one contiguous piece per worker and handed to the
executor; the values come back in the batch's order, so every executor gives the same numbers.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import _multiwalk_launch
import _multiwalk_worker

__all__ = ["EXECUTORS", "Engine", "check_executor", "default_workers", "launched_rank", "launched_under_mpi",
           "mpi_comm_executor"]

EXECUTORS = ("processes", "mpi", "dask", "serial")


# the MPICommExecutor of a plain ``mpiexec -n N multiwalk run`` (see mpi_comm_executor), on rank 0
_COMM_EXECUTOR: list[cf.Executor] = []
# what the processes' fork server imports before forking the workers (see Engine.executor)
_FORK_SERVER_IMPORTS = [_multiwalk_worker.__name__, "multiwalk", "__main__"]
_WORKER_PATHS: list[str] = []  # put first on the workers' sys.path (workers_for_the_command)


def workers_for_the_command(root_dir: str | os.PathLike | None = None) -> None:
    """For the ``multiwalk`` command: its workers need only the workers' module.  The objective is
    loaded from the input's file and sent to them whole (by value), so the fork server imports
    neither multiwalk nor the command's own script, and the workers do not import the script again
    either (multiprocessing skips a main module named ``*.__main__``, which the console script, with
    no module name, is given here).  The fork server is then ready in ~0.3 s instead of ~3 s."""
    _FORK_SERVER_IMPORTS[:] = [_multiwalk_worker.__name__]
    if root_dir is not None:  # the objective's module may import its neighbours there
        _WORKER_PATHS[:] = [os.fspath(root_dir)]
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__spec__", None) is None:
        import importlib.machinery

        main.__spec__ = importlib.machinery.ModuleSpec("multiwalk.__main__", None)


default_workers = _multiwalk_launch.default_workers  # the CPUs this process may run on


def mpi_futures_pool_launched() -> bool:
    """Whether this program runs under ``python -m mpi4py.futures`` (its ranks > 0 a shared pool)."""
    core = sys.modules.get("mpi4py.futures._core")
    return core is not None and getattr(core, "SharedPool", None) is not None


def launched_under_mpi() -> bool:
    """Whether an MPI launcher started this process with other ranks (the launchers' environment
    variables say so; MPI itself is not started to find out) or ``python -m mpi4py.futures`` did."""
    return mpi_futures_pool_launched() or _multiwalk_launch.mpi_launch_environment()


launched_rank = _multiwalk_launch.launched_rank  # this process's rank by the MPI launcher's environment


def _is_dask_client(value: Any) -> bool:
    return type(value).__name__ == "Client" and type(value).__module__.startswith("distributed")


def check_executor(executor: Any, workers: Any) -> None:
    """ValueError/TypeError naming ``executor`` or ``workers`` when they are not usable (nothing started)."""
    if executor is not None and not isinstance(executor, (str, cf.Executor)) and not _is_dask_client(executor):
        raise TypeError(
            f"executor must be one of {', '.join(map(repr, EXECUTORS))}, a concurrent.futures.Executor or a "
            f"dask.distributed.Client, got {type(executor).__name__}"
        )
    if isinstance(executor, str) and executor not in EXECUTORS:
        raise ValueError(f"executor={executor!r}; allowed: {', '.join(map(repr, EXECUTORS))}, an Executor or a Dask Client")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be a positive integer (processes that evaluate the objective), got {workers!r}")
    if workers is not None and executor is not None and not isinstance(executor, str):
        raise ValueError("workers= goes with executor='processes', 'mpi' or 'dask'; an executor instance has its own")
    if executor == "mpi":
        _need("mpi4py", "mpi")
    if executor == "dask" or _is_dask_client(executor):
        _need("distributed", "dask")


def _need(module: str, extra: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ImportError(f"executor={extra!r} needs {module}: pip install \"multiwalk[{extra}]\"")


@dataclass
class Engine:
    """The executor one non-JAX objective uses, made on first use (``executor()``), and restarted
    when a worker process died (``restart()``, ``restarts`` counted).  ``name`` and ``workers`` say
    what it is, for the messages and ``stats["host_objective"]``."""

    spec: Any = None  # what the user gave: None, a name of EXECUTORS, an Executor or a Dask Client
    requested_workers: int | None = None
    name: str = ""
    workers: int = 1
    restarts: int = 0
    _executor: cf.Executor | None = field(default=None, repr=False)
    _owned: bool = field(default=False, repr=False)  # made here: shut down and restarted here
    _started_early: bool = field(default=False, repr=False)  # the pool `multiwalk run` started before JAX

    def __post_init__(self) -> None:
        check_executor(self.spec, self.requested_workers)
        spec = self.spec
        if spec is None:
            spec = "mpi" if launched_under_mpi() else "processes"
        if isinstance(spec, str):
            self.name = spec
        else:
            self.name = "dask" if _is_dask_client(spec) else type(spec).__name__
        self.workers = 1 if self.name == "serial" else (self.requested_workers or self._known_workers())

    def _known_workers(self) -> int:
        """The pieces a batch is cut into: the workers of the pool when known, else the CPUs."""
        if self.name == "mpi":
            import importlib

            size = int(importlib.import_module("mpi4py.MPI").COMM_WORLD.Get_size())
            # a plain mpiexec launch: every rank evaluates a piece, rank 0 too (as each of ODAT-SE's
            # ranks evaluates its own replicas); an mpi4py.futures pool: ranks 1 .. N-1
            return size if self.evaluates_here else max(size - 1, 1)
        if _is_dask_client(self.spec):
            return max(len(self.spec.scheduler_info().get("workers", {})), 1)
        if isinstance(self.spec, cf.ProcessPoolExecutor):
            return int(getattr(self.spec, "_max_workers", default_workers()))
        return default_workers()

    @property
    def serial(self) -> bool:
        return self.name == "serial"

    @property
    def evaluates_here(self) -> bool:
        """Whether this process evaluates one piece of each batch itself, beside the executor's
        workers: rank 0 of a plain ``mpiexec -n N multiwalk run`` (:func:`mpi_comm_executor`), which
        holds a core of its own that would otherwise wait for the others."""
        return self.name == "mpi" and self.spec in (None, "mpi") and bool(_COMM_EXECUTOR)

    def ranks_elsewhere(self) -> int:
        """With :attr:`evaluates_here`: the other ranks, each evaluating one piece at a time."""
        import importlib

        return int(importlib.import_module("mpi4py.MPI").COMM_WORLD.Get_size()) - 1

    def executor(self) -> cf.Executor:
        """The executor, made now if it is not yet (processes start on first use)."""
        if self._executor is None:
            self._executor, self._owned = self._make()
        return self._executor

    def _make(self) -> tuple[cf.Executor, bool]:
        spec = self.spec if self.spec is not None else self.name
        if isinstance(spec, cf.Executor):
            return spec, False
        if _is_dask_client(spec):
            return spec.get_executor(), False
        if spec == "processes":
            early = _multiwalk_launch.claim_early_pool(self.workers, tuple(_WORKER_PATHS))
            if early is not None:  # `multiwalk run` started these workers before importing JAX
                self._started_early = True
                return early, True
            context = multiprocessing.get_context("forkserver")
            # The fork server imports, once, the workers' module, multiwalk (with jax) and the user's
            # script, so a worker (or a pool started again after a crash) is a fork of it ready to run.
            # Without them each worker imports them itself on its first task, whenever the objective
            # comes from a module that imports them (a script using multiwalk always does): on an
            # H100 host, 16 workers doing so at once made a 0.86 s run 1.5 s (64 replicas, 10 ms a
            # point).  The fork server starts in the background while the solver compiles
            # (Engine.start).  A script is imported as multiprocessing always does, under the name
            # __mp_main__ (its ``if __name__ == "__main__":`` part does not run); ``python -m
            # multiwalk`` (the command) has none to import.
            # (the command imports less: workers_for_the_command)
            context.set_forkserver_preload(list(_FORK_SERVER_IMPORTS))
            return cf.ProcessPoolExecutor(self.workers, mp_context=context,
                                          initializer=_multiwalk_worker.start_worker,
                                          initargs=(tuple(_WORKER_PATHS),)), True
        if spec == "mpi":
            if _COMM_EXECUTOR:  # a plain mpiexec launch: mpi_comm_executor made it on rank 0
                return _COMM_EXECUTOR[-1], False
            from mpi4py.futures import MPIPoolExecutor

            # mpiexec hands Ctrl-C and SIGTERM to every rank: the pool's ranks ignore them, as the
            # processes' workers do, and this rank ends the run after the chunk, with its checkpoint
            return MPIPoolExecutor(max_workers=self.workers, initializer=_multiwalk_launch.ignore_stop_signals), True
        if spec == "dask":
            from distributed import Client

            # Client() connects to DASK_SCHEDULER_ADDRESS when set, else starts a local cluster
            client = Client(n_workers=self.workers, threads_per_worker=1) if not os.environ.get(
                "DASK_SCHEDULER_ADDRESS") else Client()
            self.spec = client
            return client.get_executor(), True
        raise AssertionError(spec)  # check_executor refused anything else

    def start(self) -> None:
        """Start the worker processes now, in a background thread (``"processes"`` only; the other
        executors start on first use), so they come up while the solver compiles: starting the fork
        server and the workers takes ~0.5 s, which the first batch would otherwise wait for.  A
        failure to start shows at the first batch, with its own message."""
        if self.name != "processes" or self._executor is not None:
            return
        executor = self.executor()
        if self._started_early:  # its workers are started already (their W tasks would only wait in line)
            return
        threading.Thread(target=_multiwalk_launch.start_every_worker, args=(executor, self.workers),
                         name="multiwalk-start-workers", daemon=True).start()

    def restart(self) -> bool:
        """After a worker died: a fresh pool of processes (True), or False when this executor is not
        ours to restart (then the crash is reported)."""
        if not (self._owned and self.name == "processes"):
            return False
        self.shutdown()
        self.restarts += 1
        return True

    def shutdown(self) -> None:
        """Stop the processes this engine started (an executor given by the user is left alone)."""
        if self._executor is not None and self._owned:
            self._executor.shutdown(wait=False, cancel_futures=True)
            if self.name == "dask" and _is_dask_client(self.spec):
                self.spec.close()
        self._executor = None
        self._started_early = False


@contextmanager
def mpi_comm_executor() -> Iterator[bool]:
    """For a plain ``mpiexec -n N multiwalk run`` (every rank runs the program, as ODAT-SE's users
    launch it): rank 0 gets an :class:`~mpi4py.futures.MPICommExecutor` on ``COMM_WORLD`` and runs
    the body (yields True); the other ranks evaluate its batches until it is done (yields False:
    skip the body).  Nothing happens (True) when not so launched."""
    if mpi_futures_pool_launched() or not launched_under_mpi():
        yield True
        return
    _need("mpi4py", "mpi")
    from mpi4py import MPI
    from mpi4py.futures import MPICommExecutor

    _multiwalk_launch.mark("MPI initialized")
    _multiwalk_launch.mpi_servers_met()  # rank 0 meets the ranks serving from _multiwalk_launch here
    if MPI.COMM_WORLD.Get_rank() != 0:  # only rank 0 ends the run on Ctrl-C or SIGTERM
        _multiwalk_launch.ignore_stop_signals()
    with MPICommExecutor(MPI.COMM_WORLD, root=0, backoff=_multiwalk_launch.MPI_POLL_SECONDS) as executor:
        if executor is None:  # a worker rank: it has served every batch
            yield False
            return
        _multiwalk_launch.mark("MPI executor ready")
        _COMM_EXECUTOR.append(executor)
        try:
            yield True
        finally:
            _COMM_EXECUTOR.remove(executor)
