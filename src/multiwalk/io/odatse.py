"""ODAT-SE's output files for the replica-exchange run, in ODAT-SE's layout (4.0.1).

``<output_dir>/<rank>/trial.txt`` and ``result.txt``
    ``# step walker T fx x1 x2 ...`` (``beta`` in place of ``T`` when the ladder was given as
    bmin/bmax), then one line per step and walker of that process: the proposal (trial) or
    the state after the Metropolis test (result).
``<output_dir>/result_T<t>.txt``
    ``# T = value`` then ``step walker fx x1 ...`` of whichever replica sat at temperature t
    (``walker`` is the replica's global index, ``rank * nreplica_per_proc + walker``).
``<output_dir>/best_result.txt``
    ``key = value`` lines: nprocs, rank, step, walker, fx, then each coordinate by its label.
``<output_dir>/fx.txt``
    six commented header lines, then per temperature (hottest first): 1/T, mean f, its
    standard error, the number of temperatures, log(Z/Z0), acceptance.

Numbers are written with Python's ``repr`` (the shortest string that reads back to the same
double), which is what ODAT-SE's ``str(numpy.float64)`` gives.  The step files are written as
the run goes (:meth:`StepWriter.on_steps`, called by the driver after each chunk), so a crash
loses at most the chunk in flight; a resumed run first cuts them back to its checkpoint.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["StepWriter", "write_best_result", "write_fx", "truncate_from_step", "read_result_T", "number"]


def number(v: float) -> str:
    """A float as ODAT-SE writes it (``str(numpy.float64(v))`` == ``repr(float(v))``)."""
    return repr(float(v))


def truncate_from_step(path: Path, step: int) -> None:
    """Cut ``path`` (a step file, in step order) just before its first line of step >= ``step``."""
    if not path.exists():
        return
    with open(path, "rb+") as fh:
        offset = 0
        for line in fh:
            words = line.split(None, 1)
            if words and not words[0].startswith(b"#") and int(words[0]) >= step:
                break
            offset += len(line)
        fh.truncate(offset)


def read_result_T(path: str | os.PathLike) -> tuple[str, np.ndarray]:
    """``(header, rows)`` of a ``result_T<t>.txt`` file: rows ``(n, 3 + d)`` = step, walker, fx, x."""
    with open(path) as fh:
        header = fh.readline().rstrip("\n")
    return header, np.loadtxt(path, comments="#", ndmin=2)


class StepWriter:
    """Writes trial.txt, result.txt (per emulated process) and result_T<t>.txt as the run goes.

    ``labels``: coordinate names; ``betas`` (T,); ``as_beta``: the ladder was given as
    bmin/bmax; ``nprocs`` x ``per`` replicas; ``coordinates``: the mesh's node coordinates
    (discrete space) or None; ``separate_T``: write result_T files.  ``resume_step``: None for
    a fresh run, else the next step of the checkpoint: files are cut back to it and appended.
    ``state`` (the state at ``resume_step``) fills the cache of each replica's last result.
    """

    def __init__(
        self, output_dir: Path, labels: list[str], betas: np.ndarray, as_beta: bool, nprocs: int, per: int,
        coordinates: np.ndarray | None = None, separate_T: bool = True, resume_step: int | None = None,
        state: Any = None,
    ) -> None:
        self.output_dir = Path(output_dir)
        self.nprocs, self.per = nprocs, per
        self.n = nprocs * per
        self.separate_T = separate_T
        self.coordinates = coordinates
        values = np.asarray(betas) if as_beta else 1.0 / np.asarray(betas)
        self.t_strings = [number(v) for v in values]
        self._node_strings: dict[int, str] = {}
        self.proc_dirs = [self.output_dir / str(p) for p in range(nprocs)]
        for d in self.proc_dirs:
            d.mkdir(parents=True, exist_ok=True)
        header = "# " + " ".join(["step", "walker", "beta" if as_beta else "T", "fx", *labels]) + "\n"
        files = [d / name for d in self.proc_dirs for name in ("trial.txt", "result.txt")]
        self.t_files = [self.output_dir / f"result_T{t}.txt" for t in range(self.n)] if separate_T else []
        if resume_step is None:
            for f in files:
                f.write_text(header)
            label = "beta" if as_beta else "T"
            for t, f in enumerate(self.t_files):
                f.write_text(f"# {label} = {self.t_strings[t]}\n")
            self.next_step = 0
            self.last_result: list[str] = [""] * self.n
        else:
            for f in files + self.t_files:
                truncate_from_step(f, resume_step)
            self.next_step = resume_step
            self.last_result = self._rests(np.asarray(state.fx), np.asarray(state.x), np.asarray(state.node))
        self.seconds = 0.0  # spent formatting and writing in on_steps

    def _coords(self, node: int) -> str:
        s = self._node_strings.get(node)
        if s is None:
            s = self._node_strings[node] = " ".join(map(number, self.coordinates[node]))
        return s

    def _rests(self, fx: np.ndarray, x: np.ndarray, node: np.ndarray | None) -> list[str]:
        """``"fx x1 x2 ..."`` for each row of ``fx`` (m,) and ``x`` (m, d) or mesh ``node`` (m,)."""
        if self.coordinates is not None:
            return [f"{number(f)} {self._coords(k)}" for f, k in zip(fx.tolist(), node.tolist())]
        vals = np.concatenate([fx[:, None], x], axis=1).tolist()
        return [" ".join(map(repr, row)) for row in vals]

    def on_steps(self, state: Any, first: int, last: int) -> None:
        """Write steps ``next_step .. last`` from the state's record of the last steps."""
        steps = np.arange(self.next_step, last + 1)
        if steps.size == 0:
            return
        t0 = time.perf_counter()
        record = int(state.rec_fx.shape[0])
        if steps.size > record:
            raise RuntimeError(f"steps {steps[0]}..{steps[-1]} do not fit the record of {record} steps")
        slots = steps % record
        # whole buffers to the host, then numpy indexing (indexing the device arrays would
        # compile a gather for every new chunk length)
        fx = np.asarray(state.rec_fx)[slots]
        acc = np.asarray(state.rec_accepted)[slots]
        tind = np.asarray(state.rec_t)[slots]
        if self.coordinates is None:
            x = np.asarray(state.rec_x)[slots]
            node = None
        else:
            x = None
            node = np.asarray(state.rec_node)[slots]
        self._write(steps, fx, x, node, acc, tind)
        self.seconds += time.perf_counter() - t0

    def _write(self, steps, fx, x, node, acc, tind) -> None:
        n, per = self.n, self.per
        m = steps.size
        trial_rest = self._rests(
            fx.reshape(-1), None if x is None else x.reshape(m * n, -1), None if node is None else node.reshape(-1)
        )
        trial_lines: list[list[str]] = [[] for _ in range(self.nprocs)]
        result_lines: list[list[str]] = [[] for _ in range(self.nprocs)]
        t_lines: list[list[str]] = [[] for _ in range(n)] if self.separate_T else []
        last = self.last_result
        tstr = self.t_strings
        acc_l = acc.tolist()
        t_l = tind.tolist()
        for i, s in enumerate(steps.tolist()):
            base = i * n
            acc_i, t_i = acc_l[i], t_l[i]
            for r in range(n):
                p, w = divmod(r, per)
                rest = trial_rest[base + r]
                if acc_i[r]:
                    last[r] = rest
                head = f"{s} {w} {tstr[t_i[r]]} "
                trial_lines[p].append(head + rest)
                result_lines[p].append(head + last[r])
                if t_lines:
                    t_lines[t_i[r]].append(f"{s} {r} {last[r]}")
        for p, d in enumerate(self.proc_dirs):
            with open(d / "trial.txt", "a") as fh:
                fh.write("\n".join(trial_lines[p]) + "\n")
            with open(d / "result.txt", "a") as fh:
                fh.write("\n".join(result_lines[p]) + "\n")
        for t, lines in enumerate(t_lines):
            with open(self.t_files[t], "a") as fh:
                fh.write("\n".join(lines) + "\n")
        self.next_step = int(steps[-1]) + 1


def write_best_result(path: Path, nprocs_total: int, per: int, replica: int, step: int, fx: float, x: np.ndarray,
                      labels: list[str]) -> None:
    """ODAT-SE's best_result.txt (``nprocs`` is the number of replicas, as ODAT-SE writes it)."""
    rank, walker = divmod(int(replica), per)
    lines = [f"nprocs = {nprocs_total}", f"rank = {rank}", f"step = {step}", f"walker = {walker}", f"fx = {number(fx)}"]
    lines += [f"{label} = {number(v)}" for label, v in zip(labels, np.asarray(x).tolist())]
    Path(path).write_text("\n".join(lines) + "\n")


def write_fx(path: Path, statistics: dict[str, np.ndarray]) -> None:
    """ODAT-SE's fx.txt from :meth:`multiwalk.Exchange.statistics` (hottest temperature first,
    log(Z/Z0) summed from the hottest, Z0 being its partition function)."""
    beta = statistics["beta"]
    temps = 1.0 / beta
    order = np.argsort(beta, kind="stable")  # hottest first
    rows = [
        "# $1: 1/T", "# $2: mean of f(x)", "# $3: standard error of f(x)",
        "# $4: number of replicas [Not used for exchange MC]", "# $5: log(Z/Z0)", "# $6: acceptance ratio",
    ]
    acc_logz = 0.0
    previous = None
    for t in order.tolist():
        if previous is not None:
            acc_logz += float(statistics["dlogz"][previous])  # log(Z_t / Z_previous) from the samples at previous
        previous = t
        rows.append(
            f"{number(1.0 / temps[t])} {number(statistics['mean'][t])} {number(statistics['error'][t])} "
            f"{beta.size} {number(acc_logz)} {number(statistics['acceptance'][t])}"
        )
    Path(path).write_text("\n".join(rows) + "\n")
