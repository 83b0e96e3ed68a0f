"""``multiwalk run`` for ODAT-SE's ``algorithm.name = "pamc"`` and ``"mapper"``.

* ``pamc``: population annealing Monte Carlo (:class:`multiwalk.PopulationAnnealing`), every
  walker at once, with ``[algorithm.pamc]``'s keys; writes ODAT-SE's files: in ``output_dir/<p>/``
  (``p`` = 0 .. P-1, ``--nprocs P`` standing for ``mpiexec -np P``) ``trial.txt``, ``result.txt``
  and, with ``separate_T`` (the default), ``trial_T<i>.txt`` and ``result_T<i>.txt`` (columns
  ``step walker T fx x... weight ancestor``); in ``output_dir/``, ``fx.txt`` (beta, mean of f,
  its error, replicas, log(Z/Z0), acceptance), ``pr.txt`` (participation ratios) and
  ``best_result.txt``.  ``--resume`` continues a run from its checkpoint.
* ``mapper``: every point of a mesh (``mesh_path``, or the grid ``min_list``/``max_list``/
  ``num_list``) evaluated in batches by :class:`multiwalk.Mapper`; writes ``ColorMap.txt``
  (``[algorithm] colormap``); checkpoints and ``--resume`` as for pamc.

Nothing here imports :mod:`multiwalk.commands.run`: it hands this module the checked set-up and
its options, and turns the ValueErrors raised here (each naming the input file and key) into
its usage error.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130

# [algorithm.pamc]'s keys and the kind of value each takes
PAMC_KEYS: dict[str, type | tuple[type, ...]] = {
    "numsteps": int, "numsteps_annealing": int, "Tnum": int, "Tmin": (int, float), "Tmax": (int, float),
    "bmin": (int, float), "bmax": (int, float), "Tlogspace": bool, "nreplica_per_proc": int,
    "resampling_interval": int, "fix_num_replicas": bool, "separate_T": bool, "export_combined_files": bool,
}


def read_pamc_options(path: Path, table: Any) -> dict[str, Any]:
    """[algorithm.pamc], checked: every key known and of its kind; ValueError naming the file and key."""
    if not isinstance(table, dict):
        raise ValueError(f"{path}: section [algorithm.pamc] is missing (name = \"pamc\" reads its keys there)")
    for key, value in table.items():
        if key not in PAMC_KEYS:
            raise ValueError(f"{path}: unknown key [algorithm.pamc] {key}; allowed: {', '.join(sorted(PAMC_KEYS))}")
        kind = PAMC_KEYS[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            words = {bool: "true or false", int: "an integer"}.get(kind, "a number")  # type: ignore[call-overload]
            raise ValueError(f"{path}: [algorithm.pamc] {key} must be {words}, got {value!r}")
    if not table.get("fix_num_replicas", True):
        raise ValueError(
            f"{path}: [algorithm.pamc] fix_num_replicas = false (a population of varying size) is not supported: "
            "multiwalk keeps the population's size fixed on the device; remove the key or set it true"
        )
    if table.get("export_combined_files", False):
        raise ValueError(f"{path}: [algorithm.pamc] export_combined_files = true is not supported: "
                         "multiwalk writes the separate files; remove the key")
    if table.get("nreplica_per_proc", 1) < 1:
        raise ValueError(f"{path}: [algorithm.pamc] nreplica_per_proc must be at least 1, got {table['nreplica_per_proc']}")
    return dict(table)


def pamc_solver(setup: Any, opts: dict[str, Any], nprocs: int, record: int) -> tuple[Any, bool]:
    """``(PopulationAnnealing, betas given as beta)`` from the set-up and [algorithm.pamc]."""
    from ..solvers.exchange import temperature_ladder
    from ..solvers.population_annealing import PopulationAnnealing, annealing_schedule

    path = setup.input_path
    try:
        steps = annealing_schedule(opts.get("numsteps", 0), opts.get("numsteps_annealing", 0), opts.get("Tnum", 0))
        pair = {k: opts.get(k) for k in ("Tmin", "Tmax", "bmin", "bmax")}
        betas = np.sort(temperature_ladder(len(steps), **pair, logspace=opts.get("Tlogspace", True)))
    except ValueError as err:
        raise ValueError(f"{path}: [algorithm.pamc] {err}") from None
    if setup.mesh is None and setup.step_list is None:
        raise ValueError(f"{path}: [algorithm.param] step_list is required (the Gaussian step of each coordinate)")
    per = opts.get("nreplica_per_proc", 1)
    if setup.initial is not None and len(setup.initial) > per:  # each process starts its first walkers there
        raise ValueError(f"{path}: [algorithm.param] initial_list has {len(setup.initial)} points but [algorithm.pamc] "
                         f"nreplica_per_proc = {per}: at most one per walker of a process")
    interval = opts.get("resampling_interval", 1)
    a, b = ((), ()) if setup.constraint is None else (tuple(map(tuple, setup.constraint[0].tolist())),
                                                      tuple(setup.constraint[1].tolist()))
    try:
        solver = PopulationAnnealing(
            betas=tuple(betas.tolist()), numsteps_for_T=tuple(steps.tolist()), n_replicas=nprocs * per,
            step_width=None if setup.step_list is None else tuple(setup.step_list), mesh=setup.mesh,
            resampling_interval=interval if interval >= 1 else None, record=record, nreplica_per_proc=per,
            initial=() if setup.initial is None else tuple(map(tuple, setup.initial.tolist())), constraint_a=a, constraint_b=b,
        )
    except ValueError as err:
        raise ValueError(f"{path}: [algorithm.pamc] {err}") from None
    return solver, "bmin" in opts or "bmax" in opts


class PamcStepFiles:
    """ODAT-SE's pamc step files, written as the run goes (a :class:`~multiwalk.solvers.base.Writer`):
    in folder ``p`` the walkers ``p*per .. (p+1)*per - 1`` (numbered 0 .. per-1 there), each step's
    trial and result lines ``step walker T fx x... weight ancestor``, also split by temperature
    into ``trial_T<i>.txt`` and ``result_T<i>.txt`` with ``separate_T``."""

    def __init__(self, output_dir: Path, labels: list[str], solver: Any, as_beta: bool, nprocs: int, per: int,
                 separate_T: bool, resume_step: int | None) -> None:
        self.solver, self.nprocs, self.per, self.separate_T = solver, nprocs, per, separate_T
        betas = np.asarray(solver.betas)
        self.t_values = betas if as_beta else 1.0 / betas
        self.header = "# " + " ".join(["step", "walker", "beta" if as_beta else "T", "fx", *labels, "weight", "ancestor"])
        self.weight_header = "# " + " ".join(["Tindex", "beta", "walker", "idnum", "fx", "log_weight", *labels])
        self.folders = [output_dir / str(p) for p in range(nprocs)]
        self.next_step = 0 if resume_step is None else resume_step
        self.seconds = 0.0
        for folder in self.folders:
            folder.mkdir(parents=True, exist_ok=True)
            for name in self._names(folder):
                if resume_step is None:
                    name.write_text(self.header + "\n") if "_T" not in name.name else name.unlink(missing_ok=True)
                elif name.exists():
                    from ..io.odatse import truncate_from_step

                    truncate_from_step(name, resume_step)
            if resume_step is None:
                (folder / "weight.txt").write_text(self.weight_header + "\n")
            elif (folder / "weight.txt").exists():  # keep the temperatures that ended before resume_step
                truncate_weights(folder / "weight.txt", int(np.sum(solver.last_steps() < resume_step)))

    def _names(self, folder: Path) -> list[Path]:
        split = [folder / f"{tag}_T{i}.txt" for tag in ("trial", "result") for i in range(len(self.t_values))]
        return [folder / "trial.txt", folder / "result.txt", *(split if self.separate_T else [])]

    def write(self, problem: Any, state: Any, first: int, last: int) -> None:
        """Steps ``next_step .. last`` (the ring holds them: chunks are shorter than ``record``)."""
        t0 = time.perf_counter()
        steps = np.arange(self.next_step, last + 1)
        if steps.size:
            self._write(steps, np.asarray(state.rec_values), np.asarray(state.rec_ancestor))
            self.next_step = int(last) + 1
        self.seconds += time.perf_counter() - t0

    def flush(self) -> None:
        """Every line is written when ``write`` returns."""

    def _write(self, steps: np.ndarray, rec_values: np.ndarray, rec_ancestor: np.ndarray) -> None:
        import polars as pl

        from ..io.odatse import number_column

        B, N, width = rec_values.shape
        d = (width - 3) // 2
        slots = steps % B
        values, ancestors = rec_values[slots], rec_ancestor[slots]  # (S, N, 3 + 2d), (S, N)
        tindex = self.solver.temperature_of_steps(steps)
        for p, folder in enumerate(self.folders):
            rows = slice(p * self.per, (p + 1) * self.per)
            v, a = values[:, rows].reshape(-1, width), ancestors[:, rows].reshape(-1)
            common = {"step": np.repeat(steps, self.per), "walker": np.tile(np.arange(self.per), steps.size),
                      "T": number_column(np.repeat(self.t_values[tindex], self.per))}
            t_of_row = np.repeat(tindex, self.per)
            weight = number_column(np.exp(v[:, 2]))
            for tag, f_col, x_cols in (("trial", 0, slice(3, 3 + d)), ("result", 1, slice(3 + d, 3 + 2 * d))):
                cols = {**common, "fx": number_column(v[:, f_col])}
                cols.update({f"x{k}": number_column(v[:, x_cols][:, k]) for k in range(d)})
                frame = pl.DataFrame({**cols, "weight": weight, "ancestor": a})
                self._append(folder / f"{tag}.txt", frame)
                if self.separate_T:
                    for t in np.unique(t_of_row).tolist():
                        self._append(folder / f"{tag}_T{t}.txt", frame.filter(pl.Series(t_of_row == t)), self.header)
            self._write_weights(folder, steps, values[:, rows], d)

    def _write_weights(self, folder: Path, steps: np.ndarray, values: np.ndarray, d: int) -> None:
        """ODAT-SE's weight.txt: at the last step of each temperature, every walker's
        ``Tindex beta walker idnum fx log_weight x...`` (``beta`` whether the input gave T or beta;
        ``idnum`` 0 with a fixed population; ``log_weight`` before it is carried to the next
        temperature); ``values`` (S, per, 3 + 2d) are the records of ``steps`` (S,)."""
        import polars as pl

        from ..io.odatse import number_column

        ends = np.flatnonzero(np.isin(steps, self.solver.last_steps()))
        if not ends.size:
            return
        v = values[ends].reshape(-1, values.shape[-1])  # (E * per, 3 + 2d): f, logw and x of the result
        tindex = np.repeat(self.solver.temperature_of_steps(steps[ends]), self.per)
        cols = {"Tindex": tindex, "beta": number_column(np.asarray(self.solver.betas)[tindex]),
                "walker": np.tile(np.arange(self.per), ends.size), "idnum": np.zeros(v.shape[0], np.int64),
                "fx": number_column(v[:, 1]), "log_weight": number_column(v[:, 2])}
        cols.update({f"x{k}": number_column(v[:, 3 + d + k]) for k in range(d)})
        self._append(folder / "weight.txt", pl.DataFrame(cols))

    @staticmethod
    def _append(path: Path, frame: Any, header: str | None = None) -> None:
        with open(path, "ab") as fh:
            if header is not None and fh.tell() == 0:
                fh.write((header + "\n").encode())
            frame.write_csv(fh, separator=" ", include_header=False, quote_style="never")


def truncate_weights(path: Path, n_temperatures: int) -> None:
    """Cut weight.txt just before its first line of ``Tindex >= n_temperatures``, or before a line
    that is not whole (no line end, or no temperature index first): what a resumed run writes again."""
    from ..io.odatse import truncate_before

    truncate_before(path, n_temperatures)


def write_pamc_files(output_dir: Path, statistics: dict[str, np.ndarray]) -> None:
    """ODAT-SE's fx.txt and pr.txt from :meth:`multiwalk.PopulationAnnealing.statistics`."""
    from ..io.odatse import number

    rows = ["# $1: 1/T", "# $2: mean of f(x)", "# $3: standard error of f(x)", "# $4: number of replicas",
            "# $5: log(Z/Z0)", "# $6: acceptance ratio"]
    st = statistics
    for i in range(st["beta"].size):
        rows.append(f"{number(st['beta'][i])} {number(st['mean'][i])} {number(st['error'][i])} {int(st['count'][i])} "
                    f"{number(st['logz'][i])} {number(st['acceptance'][i])}")
    (output_dir / "fx.txt").write_text("\n".join(rows) + "\n")
    rows = ["# $1: Tindex", "# $2: 1/T", "# $3: participation ratio"]
    rows += [f"{i} {number(b)} {number(pr)}" for i, (b, pr) in enumerate(zip(st["beta"], st["participation"]))]
    (output_dir / "pr.txt").write_text("\n".join(rows) + "\n")


def run_pamc(setup: Any, args: Any, opts: dict[str, Any], seed: int) -> int:
    """Run [algorithm.pamc] and write its files; the exit status."""
    import jax

    from ..checkpoint import read_checkpoint
    from ..io.odatse import write_best_result
    from ..solve import solve

    nprocs = args.nprocs or 1
    per = opts.get("nreplica_per_proc", 1)
    record = 0
    if args.step_files:  # steps kept on the device between writes: about 4e6 numbers, 16 .. 1024 steps
        record = int(min(1024, max(16, 4_000_000 // (nprocs * per * (2 * setup.dimension + 4)))))
    solver, as_beta = pamc_solver(setup, opts, nprocs, record)
    if setup.checkpoint and setup.checkpoint_steps:  # chunks of at most checkpoint_steps, a checkpoint after each
        solver = dataclasses.replace(solver, max_chunk_steps=setup.checkpoint_steps)
    ckpt = setup.checkpoint_file
    resume_step = None
    if args.resume:
        try:
            meta, _ = read_checkpoint(ckpt, label=str(ckpt))
        except FileNotFoundError:
            raise ValueError(f"{ckpt}: no checkpoint to resume from (run without --resume first)") from None
        seed = int(meta["seed"])
        resume_step = int(meta["done"][0]) + 1
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    files = None
    if record:
        files = PamcStepFiles(setup.output_dir, setup.labels, solver, as_beta, nprocs, per,
                              opts.get("separate_T", True), resume_step)
    with jax.enable_x64(args.dtype == "float64"):
        box = {} if setup.mesh is not None else {"lower": setup.lower, "upper": setup.upper,
                                                 "periodic": setup.periodic}  # pbc_list
        problem = checked_problem(setup, args, **box)
        try:
            solver.check(problem)  # before compiling: start points and [runner.limitation] against the box
        except ValueError as err:
            raise ValueError(f"{setup.input_path}: {err}") from None
        t0 = time.perf_counter()
        result = solve(problem, solver, seed=seed, progress=args.progress, time_limit=args.time_limit,
                       checkpoint=ckpt if setup.checkpoint else None, resume=ckpt if args.resume else None,
                       checkpoint_every=0.0 if setup.checkpoint_steps else setup.checkpoint_interval or 0.0, writer=files)
        wall = time.perf_counter() - t0
    setup.output_dir.mkdir(parents=True, exist_ok=True)
    write_best_result(setup.output_dir / "best_result.txt", nprocs, per, result.best_walker, result.best_step,
                      result.fun, result.x, setup.labels)
    write_pamc_files(setup.output_dir, result.statistics)
    return _report(setup, result, nprocs * per, per, wall, files)


def _report(setup: Any, result: Any, replicas: int, per: int, wall: float, files: Any) -> int:
    from ..result import Status

    rank, walker = divmod(result.best_walker, per)
    print(f"Best Result:\n  rank = {rank}\n  step = {result.best_step}\n  walker = {walker}\n  fx = {result.fun!r}")
    for label, v in zip(setup.labels, np.asarray(result.x).tolist()):
        print(f"  {label} = {v!r}")
    st = result.stats
    print(f"{result.message}; {replicas} walkers; run {st['run_seconds']:.3f} s, compile {st['compile_seconds']:.2f} s, "
          f"step files {0.0 if files is None else files.seconds:.3f} s, wall {wall:.2f} s")
    print(f"output in {setup.output_dir}; checkpoint {setup.checkpoint_file}")
    if result.status == Status.INTERRUPTED:
        return EXIT_INTERRUPTED
    return EXIT_OK if result.success else EXIT_FAILED


# ---------------------------------------------------------------------------- mapper
def mapper_points(path: Path, param: dict[str, Any], dimension: int, root_dir: Path) -> np.ndarray:
    """The mapper's points (M, d): the mesh file's (``mesh_path``; its first column the index; read
    with ``comments``, ``delimiter`` and ``skiprows``, checked by the command), or ODAT-SE's grid
    from ``min_list``, ``max_list`` and ``num_list`` (:func:`multiwalk.solvers.mapper.grid_points`,
    in ODAT-SE's order)."""
    from ..solvers.mapper import grid_points
    from ..spaces import read_mesh

    if "mesh_path" in param:
        points = read_mesh(root_dir / Path(param["mesh_path"]).expanduser(), comments=param.get("comments", "#"),
                           delimiter=param.get("delimiter"), skiprows=param.get("skiprows", 0))
        if points.shape[1] != dimension:
            raise ValueError(f"{param['mesh_path']}: {points.shape[1]} coordinates per point but [base] dimension = {dimension}")
        return points
    for key in ("min_list", "max_list", "num_list"):
        if key not in param:
            raise ValueError(f"{path}: [algorithm.param] {key} is required for the mapper's grid (or give mesh_path)")
        if len(param[key]) != dimension:
            raise ValueError(f"{path}: [algorithm.param] {key} has {len(param[key])} entries but [base] dimension = {dimension}")
    nums = param["num_list"]
    if not all(isinstance(n, int) and n >= 1 for n in nums):
        raise ValueError(f"{path}: [algorithm.param] num_list must be positive integers, got {nums}")
    return grid_points(param["min_list"], param["max_list"], nums)


def write_colormap(output_dir: Path, colormap: str, labels: list[str], result: Any) -> Path:
    """ODAT-SE's ColorMap.txt from a :class:`multiwalk.MapperResult`: ``x... fval`` as ``%8f`` for
    each point evaluated, then in ``output_dir/0/`` the header and the minimum point, its value
    and its index (ODAT-SE: each process's folder has its points with the header and the minimum;
    the top folder's file has every point's line only).  Returns the top folder's file."""
    points, fx, best = result.points[: result.n_evaluated], result.funs[: result.n_evaluated], result.best_index
    lines = ["#" + " ".join(labels) + " fval"]
    lines += [" ".join(f"{v:8f}" for v in (*x, f)) for x, f in zip(points.tolist(), fx.tolist())]
    lines.append("#Minimum point : " + " ".join(f"{v:8f}" for v in result.points[best].tolist()))
    lines.append(f"#R-factor : {float(result.funs[best]):8f}")
    lines.append(f"#see Log{best:d}")
    (output_dir / "0").mkdir(parents=True, exist_ok=True)
    (output_dir / "0" / colormap).write_text("\n".join(lines) + "\n")
    out = output_dir / colormap
    out.write_text("\n".join(lines[1:1 + len(points)]) + "\n")
    return out


def checked_problem(setup: Any, args: Any, **box: Any) -> Any:
    """The run's :class:`multiwalk.Problem`: a Python objective (``setup.host``: ``[solver] backend =
    "python"``, or a function jax cannot trace) is evaluated outside the compiled loop on ``--workers``
    / ``--executor``; a JAX one that fails to trace is a ValueError naming the input file and
    ``[solver]``, in one paragraph, before anything compiles."""
    from ..problem import Problem

    host = {} if setup.host is None else {"backend": "python", "executor": args.executor, "workers": args.workers,
                                          **setup.host}
    try:
        return Problem(objective=setup.function, names=setup.labels, **box, **host)
    except TypeError as err:
        first = str(err).splitlines()[0]
        raise ValueError(
            f"{setup.input_path}: [solver] function {setup.function_label!r}: {setup.algorithm} compiles the objective into its "
            f"loop, so it must be a jax.numpy function of ONE point; {first}"
        ) from None


def run_mapper(setup: Any, args: Any, param: dict[str, Any], colormap: str) -> int:
    """Evaluate every mesh point with :class:`multiwalk.Mapper` and write ODAT-SE's ColorMap.txt;
    checkpoints as [algorithm] asks (``checkpoint_steps``: after every chunk of batches), ``--resume``."""
    import jax

    from ..result import Status
    from ..solve import solve
    from ..solvers.mapper import Mapper

    if args.nprocs not in (None, 1):
        raise ValueError(f"--nprocs is not used by the mapper: every point is evaluated at once, the files are "
                         f"those of one process; remove --nprocs {args.nprocs}")
    points = mapper_points(setup.input_path, param, setup.dimension, setup.root_dir)
    ckpt = setup.checkpoint_file
    if args.resume and not ckpt.exists():
        raise ValueError(f"{ckpt}: no checkpoint to resume from (run without --resume first)")
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    with jax.enable_x64(args.dtype == "float64"):
        problem = checked_problem(setup, args)
        t0 = time.perf_counter()
        result = solve(problem, Mapper(points=points), progress=args.progress, time_limit=args.time_limit,
                       checkpoint=ckpt if setup.checkpoint else None, resume=ckpt if args.resume else None,
                       checkpoint_every=0.0 if setup.checkpoint_steps else setup.checkpoint_interval or 0.0)
        wall = time.perf_counter() - t0
    out = write_colormap(setup.output_dir, colormap, setup.labels, result)
    best = result.best_index
    print(f"mapper: {result.n_evaluated} points evaluated in {wall:.3f} s (compile {result.stats['compile_seconds']:.2f} s); "
          f"minimum fx = {float(result.funs[best])!r} at point {best}; wrote {out}")
    if result.status != Status.SUCCESS:
        print(result.message)
    if result.status == Status.INTERRUPTED:
        return EXIT_INTERRUPTED
    return EXIT_OK if result.success else EXIT_FAILED
