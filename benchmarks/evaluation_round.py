"""The wall time of one step's evaluation round, 64 points of 10 ms (``time.sleep``) spread over W
processes, by each way of spreading them: what a host-loop step of ``multiwalk run`` cannot beat.

Under ``mpiexec -np W`` (every rank runs this script):

* ``allgather``: each rank evaluates its own rows, then ``MPI_Allgatherv`` (ODAT-SE's way: each of
  its ranks holds its own replicas);
* ``scatter/gather``: rank 0 sends a header (polled by the others, as an idle rank would), scatters
  the rows (``MPI_Scatterv``), evaluates its own and gathers the values (``MPI_Gatherv``);
* ``MPICommExecutor``: :mod:`mpi4py.futures` on ``COMM_WORLD`` as ``mpiexec -n W multiwalk run`` uses
  it: W - 1 pieces submitted, rank 0 evaluates the last once they are sent.

Without ``mpiexec`` (``--pool W``): a ``ProcessPoolExecutor`` of W workers (forkserver) given W pieces,
and ``HostObjective.evaluate`` (multiwalk's own round: the pieces, the payload, the box) on the same
number of workers, alone and after a small jitted program each round (JAX's threads awake).

    mpiexec -np 16 python3 benchmarks/evaluation_round.py --rounds 60
    PYTHONPATH=src python3 benchmarks/evaluation_round.py --pool 16 --rounds 60

Prints the median, mean and least round (ms) of each, after 3 rounds not counted.

``--host-loop W``: where a step of ``mw.Exchange`` (64 replicas, the same objective, W worker
processes) spends its time: each part of :class:`multiwalk.host_loop.HostLoop`'s step (the capture
program, its read back, the evaluation, the finish program run to its end), ms a step, twice (the
second call).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

POINTS, DIMENSION, SLEEP = 64, 3, 0.010


def evaluate(X: np.ndarray) -> np.ndarray:
    out = np.empty(len(X))
    for i, x in enumerate(X):
        time.sleep(SLEEP)
        out[i] = float(np.sum(x**2))
    return out


def slow_point(x: np.ndarray) -> float:
    time.sleep(SLEEP)
    return float(np.sum(np.asarray(x) ** 2))


def report(name: str, seconds: list[float], per_worker: int) -> None:
    ms = np.array(seconds[3:]) * 1e3
    print(f"{name}: median {np.median(ms):.2f} ms, mean {ms.mean():.2f}, least {ms.min():.2f} "
          f"(objective {1e3 * SLEEP * per_worker:.0f} ms a worker, and each sleep's overshoot)", flush=True)


def under_mpi(rounds: int) -> None:
    from mpi4py import MPI
    from mpi4py.futures import MPICommExecutor

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    counts = np.array([len(a) for a in np.array_split(np.arange(POINTS), size)])
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
    X = np.random.default_rng(0).normal(size=(POINTS, DIMENSION))
    rows = [X[displs[r]:displs[r] + counts[r]] for r in range(size)]

    seconds = []
    for _ in range(rounds):
        comm.Barrier()
        t0 = time.perf_counter()
        values = np.empty(POINTS)
        comm.Allgatherv(evaluate(rows[rank]), [values, counts, displs, MPI.DOUBLE])
        seconds.append(time.perf_counter() - t0)
    if rank == 0:
        report(f"allgather, {size} ranks", seconds, counts.max())

    comm.Barrier()
    seconds = []
    header = np.empty(1, np.int64)
    for r in range(rounds + 1):
        t0 = time.perf_counter()
        if rank == 0:
            header[0] = r < rounds
            comm.Ibcast(header, root=0).Wait()
        else:
            request = comm.Ibcast(header, root=0)
            while not request.Test():
                time.sleep(1e-4)
        if not header[0]:
            break
        piece = np.empty((counts[rank], DIMENSION))
        comm.Scatterv([X, counts * DIMENSION, displs * DIMENSION, MPI.DOUBLE] if rank == 0 else None, piece, root=0)
        values = np.empty(POINTS) if rank == 0 else None
        comm.Gatherv(evaluate(piece), [values, counts, displs, MPI.DOUBLE] if rank == 0 else None, root=0)
        seconds.append(time.perf_counter() - t0)
    if rank == 0:
        report(f"scatter/gather, {size} ranks", seconds, counts.max())

    comm.Barrier()
    with MPICommExecutor(comm, root=0, backoff=1e-4) as executor:
        if executor is None:
            return
        [f.result() for f in [executor.submit(time.sleep, 0.0) for _ in range(size - 1)]]
        seconds = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            futures = [executor.submit(evaluate, piece) for piece in rows[:-1]]
            while sum(f.running() or f.done() for f in futures) < len(futures):
                time.sleep(1e-5)
            evaluate(rows[-1])
            [f.result() for f in futures]
            seconds.append(time.perf_counter() - t0)
        report(f"MPICommExecutor, {size} ranks", seconds, counts.max())


def on_a_pool(workers: int, rounds: int) -> None:
    import concurrent.futures as cf
    import multiprocessing

    X = np.random.default_rng(0).normal(size=(POINTS, DIMENSION))
    pieces = np.array_split(X, workers)
    per_worker = max(len(p) for p in pieces)
    with cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("forkserver")) as pool:
        [f.result() for f in [pool.submit(time.sleep, 0.05) for _ in range(workers)]]
        seconds = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            [f.result() for f in [pool.submit(evaluate, p) for p in pieces]]
            seconds.append(time.perf_counter() - t0)
        report(f"ProcessPoolExecutor, {workers} workers", seconds, per_worker)

    import jax
    import jax.numpy as jnp

    import multiwalk as mw

    @jax.jit
    def small_program(key: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        for _ in range(6):
            key, sub = jax.random.split(key)
            x = x + 0.01 * jax.random.normal(sub, x.shape) * jnp.exp(-jnp.abs(x))
        return key, x

    key, x = jax.block_until_ready(small_program(jax.random.key(0), jnp.zeros((POINTS, DIMENSION))))
    problem = mw.Problem(objective=slow_point, lower=[-5.0] * DIMENSION, upper=[5.0] * DIMENSION, backend="python",
                         executor="processes", workers=workers)
    host = problem.host_objective
    host.evaluate(X)
    for with_program in (False, True):
        seconds = []
        for _ in range(rounds):
            if with_program:
                key, x = small_program(key, x)
                np.asarray(x)
            t0 = time.perf_counter()
            host.evaluate(X)
            seconds.append(time.perf_counter() - t0)
        report(f"HostObjective.evaluate, {workers} workers{', a jitted program between rounds' * with_program}",
               seconds, per_worker)
    host.engine.shutdown()


def host_loop_parts(workers: int, steps: int) -> None:
    import jax

    import multiwalk as mw
    from multiwalk import host_loop

    parts = dict.fromkeys(("capture", "read", "evaluate", "finish"), 0.0)
    timed = [0]  # steps timed (Exchange runs numsteps - 1)

    def timed_call(self, state, n, arrays):  # HostLoop.__call__ with a clock around each part
        assert not self.checks_done  # Exchange has no convergence test to stop a chunk early
        for _ in range(int(n)):
            timed[0] += 1
            t0 = time.perf_counter()
            out = self.capture(state, arrays)
            t1 = time.perf_counter()
            points, _ = jax.device_get(out)
            t2 = time.perf_counter()
            values = self.host.evaluate(points)
            t3 = time.perf_counter()
            state = jax.block_until_ready(self.finish(state, values, arrays))
            t4 = time.perf_counter()
            for name, dt in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                parts[name] += dt
        return state, jax.device_put(np.int32(n))

    host_loop.HostLoop.__call__ = timed_call
    problem = mw.Problem(objective=slow_point, lower=[-5.0] * DIMENSION, upper=[5.0] * DIMENSION, backend="python",
                         executor="processes", workers=workers)
    solver = mw.Exchange(betas=tuple(np.geomspace(10, 0.1, POINTS).tolist()), numsteps=steps, numsteps_exchange=5,
                         step_width=(0.2,) * DIMENSION)
    for call in ("first", "second"):
        parts.update(dict.fromkeys(parts, 0.0))
        timed[0] = 0
        result = mw.solve(problem, solver, seed=0, progress=False)
        each = ", ".join(f"{name} {1e3 * t / timed[0]:.3f}" for name, t in parts.items())
        print(f"host loop, {workers} workers, {call} call: run {1e3 * result.stats['run_seconds'] / timed[0]:.2f} ms "
              f"a step; {each} ms a step ({timed[0]} steps)", flush=True)
    problem.host_objective.engine.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pool", type=int, default=None, help="workers of a process pool (else: under mpiexec)")
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--host-loop", type=int, default=None, help="workers: the parts of an Exchange step")
    p.add_argument("--steps", type=int, default=100, help="--host-loop's steps")
    args = p.parse_args()
    if args.rounds < 4:
        p.error(f"--rounds must be at least 4 (the first 3 are not counted), got {args.rounds}")
    if args.host_loop is not None:
        host_loop_parts(args.host_loop, args.steps)
    elif args.pool is None:
        under_mpi(args.rounds)
    else:
        on_a_pool(args.pool, args.rounds)


if __name__ == "__main__":
    main()
