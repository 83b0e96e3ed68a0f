"""The ``multiwalk`` command line.

Subcommands (argparse): ``lbfgs`` lives here; ``demo`` (the xringaus fit to simulated EHT
data), ``run`` (ODAT-SE's input.toml), ``neighborlist``, ``image`` (deconvolution from
visibilities) and ``fit-eht`` (a ring model fitted to an EHT UVFITS file) live in
:mod:`multiwalk.commands` (:data:`SUBCOMMAND_MODULES`).

``multiwalk lbfgs``
    The driver program of the CUDA L-BFGS seed: minimise one of its five CUTE test functions
    (Extended Rosenbrock, Beale, Powell, Wood, Trigonometric) from the standard starting point
    with :class:`multiwalk.LBFGS` and print the seed's report: the function, ``Xtol``, the
    header and iteration table (printed by the solver), the termination message, then a timing
    summary of what is measured (compilation, run time, time per iteration, the device).

Exit status: 0 on success, 1 when the run ends with a failure status (iteration limit,
line-search failure, time limit, ...), 2 for bad options, 130 when interrupted by Ctrl-C
(the partial result and the summary are still printed).

>>> main(["lbfgs", "--function", "rosenbrock", "--n", "1000000", "--m", "7"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import jax
import numpy as np

import _multiwalk_launch

from . import __version__
from .problem import Problem
from .result import Status
from .solve import solve

if TYPE_CHECKING:  # the lbfgs command's solver, imported in its handler: the other commands do not load it
    from .solvers.lbfgs import LBFGS, LBFGSResult

__all__ = ["main", "build_parser", "FUNCTIONS"]

#: ``--function`` choices: (name in the cute module, the name the report prints).
FUNCTIONS: dict[str, tuple[str, str]] = {
    "rosenbrock": ("extended_rosenbrock", "Rosenbrock"),
    "beale": ("extended_beale", "Beale"),
    "powell": ("extended_powell", "Powell"),
    "wood": ("extended_wood", "Wood"),
    "trigonometric": ("extended_trigonometric", "Trigonometric"),
}

#: Subcommands that live in modules of their own (``multiwalk.commands.<name>``); each module
#: has ``add_parser(commands)``, which adds its subparser and sets ``handler`` and ``command_parser``
#: like ``lbfgs`` below.  Those modules import their heavy dependencies inside the handler, so
#: ``multiwalk --help`` stays fast.
SUBCOMMAND_MODULES: tuple[str, ...] = ("run", "neighborlist", "demo", "image", "fit_eht")
# each module's command (the word on the command line)
COMMAND_OF_MODULE = {"run": "run", "neighborlist": "neighborlist", "demo": "demo", "image": "image", "fit_eht": "fit-eht"}

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

# LBFGS / Problem keyword -> command-line option, to reuse the library's messages.
_OPTION_NAMES = {
    "max_iterations": "--max-iterations",
    "print_every": "--print-every",
    "maxfev": "--maxfev",
    "ftol": "--ftol",
    "gtol": "--gtol",
    "xtol": "--xtol",
    "eps": "--eps",
    "dtype": "--dtype",
    "m": "--m",
}
_OPTION_RE = re.compile(r"(?<![\w-])(" + "|".join(_OPTION_NAMES) + r")(?=( must\b|=))")


def _as_cli_message(message: str) -> str:
    """The library's message with keyword names (``m must be``, ``ftol=...``) as options, on one line."""
    message = " ".join(str(message).split()).replace(" or None, got", ", got")  # None is no command-line value
    return _OPTION_RE.sub(lambda mt: _OPTION_NAMES[mt.group(1)], message)


# ---------------------------------------------------------------------------- the parser
def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``multiwalk`` parser with its subcommands; each sets ``handler`` and ``command_parser``.

    ``command`` (the command line's first word): when it names a command of
    :data:`SUBCOMMAND_MODULES`, that command's module alone is imported and its subcommand alone
    added (the same parser for that command line: its usage, help and errors); otherwise, every
    command (``--help``, a misspelt command).  Each module is ~5 ms of start-up on a 2-core VM
    (more where Python compiles it anew, under ``PYTHONDONTWRITEBYTECODE``)."""
    parser = argparse.ArgumentParser(
        prog="multiwalk",
        description="multiwalk: massively parallel optimisation in JAX, on CPUs and GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    lbfgs = commands.add_parser(
        "lbfgs",
        help="L-BFGS on a CUTE test function (the CUDA L-BFGS seed's driver program)",
        description=(
            "Minimise an extended CUTE test function with L-BFGS (Liu & Nocedal, More-Thuente line search) "
            "from its standard starting point and print the seed's report and a timing summary."
        ),
    )
    _add_lbfgs_options(lbfgs)
    lbfgs.set_defaults(handler=_run_lbfgs, command_parser=lbfgs)
    chosen = [name for name in SUBCOMMAND_MODULES if COMMAND_OF_MODULE[name] == command]
    for name in chosen if command == "lbfgs" or chosen else SUBCOMMAND_MODULES:
        importlib.import_module(f".commands.{name}", __package__).add_parser(commands)
    return parser


def _add_lbfgs_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--function", choices=list(FUNCTIONS), default="rosenbrock", help="the test function (default: %(default)s)")
    p.add_argument(
        "--n", type=int, default=1_000_000,
        help="number of variables; rosenbrock, beale: even; powell, wood: a multiple of 4 (default: %(default)s)",
    )
    p.add_argument("--m", type=int, default=7, help="number of stored correction pairs (default: %(default)s)")
    p.add_argument("--eps", type=float, default=1e-5, help="stop when ||g|| < eps * max(1, ||x||) (default: %(default)s)")
    p.add_argument("--max-iterations", type=int, default=2000, metavar="N", help="iteration limit (default: %(default)s)")
    p.add_argument("--maxfev", type=int, default=20, help="evaluations allowed in one line search (default: %(default)s)")
    p.add_argument("--gtol", type=float, default=0.9, help="strong Wolfe curvature constant (default: %(default)s)")
    p.add_argument("--ftol", type=float, default=1e-4, help="strong Wolfe sufficient-decrease constant (default: %(default)s)")
    p.add_argument("--xtol", type=float, default=None, help="line-search interval tolerance (default: eps of --dtype)")
    p.add_argument(
        "--print-every", type=int, default=1, metavar="K",
        help="print a table row every K iterations; 0: the first and last only (default: %(default)s)",
    )
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64", help="precision (default: %(default)s)")
    p.add_argument(
        "--gradient", choices=["analytic", "autodiff"], default="analytic",
        help="f and g by the function's analytic value_and_grad in one pass (the seed's eval_fg), or by "
        "jax.value_and_grad (default: %(default)s)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    p.add_argument("--time-limit", type=float, default=None, metavar="SECONDS", help="stop after this much run time")
    p.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=False,
        help="show a progress bar on stderr (default: off, the table is printed)",
    )
    p.add_argument("--save", type=Path, default=None, metavar="PATH", help="write x, fun, gnorm, iterations, nfev, status (.npz)")


# ---------------------------------------------------------------------------- lbfgs
def _check_lbfgs_args(args: argparse.Namespace) -> None:
    """Raise ValueError (a one-line message naming the option) for options the library does not check."""
    from .functions import cute  # the lbfgs command's alone: the other commands do not import it

    name = FUNCTIONS[args.function][0]
    if not cute.TABLE[name].valid(args.n):
        raise ValueError(f"--n {args.n} is not valid for --function {args.function}: it needs {cute.TABLE[name].rule}")
    if not 0 <= args.seed < 2**64:
        raise ValueError(f"--seed must be an integer in [0, 2**64), got {args.seed}")
    if args.time_limit is not None and not args.time_limit > 0:
        raise ValueError(f"--time-limit must be a positive number of seconds, got {args.time_limit}")
    if args.save is not None:
        args.save = args.save.expanduser()
    if args.save is not None and not args.save.resolve().parent.is_dir():
        raise ValueError(f"--save {str(args.save)!r}: folder {str(args.save.parent)!r} does not exist")


def _setup(args: argparse.Namespace) -> tuple[Problem, LBFGS, float]:
    """The problem, the solver and the line search's xtol; ValueError/TypeError for bad options."""
    from .functions import cute
    from .solvers.lbfgs import LBFGS

    _check_lbfgs_args(args)
    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)  # before any array of the run is made
    name = FUNCTIONS[args.function][0]
    fn: Callable = cute.TABLE[name].fn
    xtol = float(np.finfo(np.dtype(args.dtype)).eps) if args.xtol is None else args.xtol
    solver = LBFGS(
        m=args.m, eps=args.eps, max_iterations=args.max_iterations, maxfev=args.maxfev, gtol=args.gtol,
        ftol=args.ftol, xtol=xtol, print_every=args.print_every,
    )
    x0 = cute.start(name, args.n)
    if args.gradient == "analytic":  # one fused pass for f and g, as the seed's eval_fg
        problem = Problem(objective=fn, value_and_grad=cute.TABLE[name].value_and_grad, x0=x0, dtype=args.dtype)
    else:
        problem = Problem(objective=fn, x0=x0, dtype=args.dtype)
    return problem, solver, xtol


def _save(path: Path, result: LBFGSResult) -> Path:
    """Write the result to ``path`` (``.npz`` appended by numpy when missing); the path written."""
    np.savez(
        path, x=np.asarray(result.x), fun=np.float64(result.fun), gnorm=np.float64(result.gnorm),
        iterations=np.int64(result.iterations), nfev=np.int64(result.nfev), status=np.int64(int(result.status)),
        status_name=np.str_(result.status.name), message=np.str_(result.message),
    )
    return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")


def _print_summary(result: LBFGSResult, wall: float) -> None:
    """The timing summary: only what is measured (no per-kernel times)."""
    compile_s = float(result.stats.get("compile_seconds", float("nan")))
    run_s = float(result.stats.get("run_seconds", float("nan")))
    per_iteration = f"{1e3 * run_s / result.iterations:.3f} ms" if result.iterations > 0 else "n/a (no iteration)"
    device, count = jax.devices()[0], len(jax.devices())
    where = device.device_kind if device.device_kind == device.platform else f"{device.device_kind} ({device.platform})"
    if count > 1:
        where += f"; the run uses 1 of {count} devices"
    print()
    print(f"Number of function and gradient evaluations for L-BFGS: {result.nfev}")
    print(f"Number of iterations: {result.iterations}")
    print(f"Compilation time: {1e3 * compile_s:.1f} ms")
    print(f"Total time for the minimization: {1e3 * run_s:.1f} ms (compilation excluded)")
    print(f"Average time per iteration: {per_iteration}")
    print(f"Wall time including set-up and compilation: {1e3 * wall:.1f} ms")
    print(f"Device: {where}")
    if "line_evaluation" in result.stats:  # the one-pass kernel on GPUs, else XLA, and why
        print(f"Line-search evaluation: {result.stats['line_evaluation']}")


def _run_lbfgs(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``multiwalk lbfgs``: set up, print the header, solve, print the summary; the exit status."""
    try:
        problem, solver, xtol = _setup(args)
    except (ValueError, TypeError) as err:
        parser.error(_as_cli_message(str(err)))  # exits with status 2
    print(f"Function to minimize: {FUNCTIONS[args.function][1]}")
    print(f"Xtol: {xtol:e}")
    sys.stdout.flush()
    t0 = time.perf_counter()
    result = cast("LBFGSResult", solve(problem, solver, seed=args.seed, progress=args.progress, time_limit=args.time_limit))
    wall = time.perf_counter() - t0
    _print_summary(result, wall)
    if args.save is not None:
        try:
            print(f"Saved x, fun, gnorm, iterations, nfev and status to {_save(args.save, result)}")
        except OSError as err:
            sys.stdout.flush()
            print(f"{parser.prog}: could not write --save {str(args.save)!r}: {err}", file=sys.stderr)
            return EXIT_FAILED
    sys.stdout.flush()
    if result.status == Status.SUCCESS:
        return EXIT_OK
    print(f"{parser.prog}: {result.status.name}: {result.message}", file=sys.stderr)
    return EXIT_INTERRUPTED if result.status == Status.INTERRUPTED else EXIT_FAILED


# ---------------------------------------------------------------------------- entry point
def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    Bad options raise ``SystemExit(2)`` (argparse's convention) after a one-line message.
    """
    _multiwalk_launch.mark("multiwalk imported")
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        parser = build_parser(words[0] if words else None)
        args = parser.parse_args(words)
        handler: Callable[[argparse.Namespace, argparse.ArgumentParser], int] = args.handler
        command_parser: Any = args.command_parser
        try:
            status = handler(args, command_parser)
            if argv is None and args.command in ("run", "demo"):  # the process's own command (not a
                # caller's main([...]), which goes on after it): end without tearing down every module
                _multiwalk_launch.end_after_cleanup(status)
            return status
        except KeyboardInterrupt:  # before or after solve()'s own Ctrl-C handling (a second Ctrl-C aborts)
            sys.stdout.flush()
            print(f"\n{command_parser.prog}: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
    finally:  # workers `multiwalk run` started before importing JAX that no run took (an error, --help, ...)
        _multiwalk_launch.release_mpi_servers()  # and, under mpiexec, ranks > 0 that no run met
        _multiwalk_launch.shutdown_early_pool()
        _multiwalk_launch.mark("command done")


if __name__ == "__main__":
    sys.exit(main())
