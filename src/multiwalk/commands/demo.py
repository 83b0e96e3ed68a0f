"""``multiwalk demo``: simulate an EHT 2017 observation of an xringaus Sgr A* and fit it back.

The flagship of the seed (cuda_mcmc's ``model_obsfit.py``): a known xringaus image is observed
with the EHT 2017 array (Earth-rotation synthesis, elevation limits, scans, thermal noise from
the SEFDs), written as a cuda_mcmc ``*_uvdata.txt`` file, read back, and fitted on visibility
amplitudes and closure phases with ReplicaExchange.  It prints the table of truth, best fit,
marginal median and 68 % interval, and writes the plots.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TextIO

import numpy as np

__all__ = ["add_parser", "DEMO_TRUTH", "run_demo"]

#: The demo's image: a 2.5 Jy ring of 26 uas radius, thick and bright towards PA ~ 60 deg, with
#: a compact Gaussian knot (in the order of multiwalk.models.PARAM_NAMES).
DEMO_TRUTH = {"Zsp": 2.5, "Re": 26.0, "rq": 0.6, "ecc": 0.4, "fade": 0.3, "gax": 0.6, "aq": 0.8, "gq": 0.2, "th": 1.0}


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``demo`` to the ``multiwalk`` subcommands."""
    p = commands.add_parser(
        "demo",
        help="fit the xringaus black-hole model to a simulated EHT 2017 observation of Sgr A* (the flagship)",
        description=(
            "Simulate an EHT 2017 observation of an xringaus model of Sgr A* at 230 GHz, write it as a cuda_mcmc "
            "*_uvdata.txt file, fit the model back to the visibility amplitudes and closure phases with "
            "ReplicaExchange, print truth / best fit / median / 68% interval and write the plots."
        ),
    )
    p.add_argument("--out", type=Path, default=Path("demo_output"), help="output folder (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the noise and of the sampler (default: %(default)s)")
    p.add_argument("--nbeta", type=int, default=16, help="temperatures per sequence (default: %(default)s; the seed: 32)")
    p.add_argument("--nseq", type=int, default=8, help="independent sequences (default: %(default)s; the seed: 16)")
    p.add_argument("--nburn", type=int, default=300, help="burn-in iterations (default: %(default)s; the seed: 400)")
    p.add_argument("--niter", type=int, default=300, help="sampling iterations (default: %(default)s; the seed: 1000)")
    p.add_argument(
        "--truth", default="", metavar="NAME=VALUE,...",
        help="change parameters of the simulated image, e.g. 'Re=30,th=-0.5' (default: " +
             ", ".join(f"{k}={v}" for k, v in DEMO_TRUTH.items()) + ")",
    )
    p.add_argument("--array", default="EHT2017", help="array: EHT2017 or a file in ehtim's array format (default: %(default)s)")
    p.add_argument("--uvdata", type=Path, default=None, metavar="FILE",
                   help="fit this *_uvdata.txt file instead of simulating (no truth is shown)")
    p.add_argument("--scan-seconds", type=float, default=300.0, help="scan length (default: %(default)s)")
    p.add_argument("--cadence-seconds", type=float, default=1800.0,
                   help="time from one scan's start to the next (default: %(default)s)")
    p.add_argument("--bandwidth-ghz", type=float, default=2.0, help="bandwidth for the thermal noise (default: %(default)s)")
    p.add_argument("--fractional-noise", type=float, default=0.05, metavar="F",
                   help="add an error of F |V| in quadrature to the thermal noise (non-closing systematics; "
                        "default: %(default)s)")
    p.add_argument("--time-limit", type=float, default=None, metavar="SECONDS", help="stop sampling after this long")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    p.set_defaults(handler=_run, command_parser=p)


def _parse_truth(text: str) -> np.ndarray:
    from ..models.xringaus import LOWER, PARAM_NAMES, UPPER

    values = dict(DEMO_TRUTH)
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, val = item.partition("=")
        name = name.strip()
        if not sep or name not in values:
            raise ValueError(f"--truth item {item!r} must be NAME=VALUE with NAME in {list(PARAM_NAMES)}")
        try:
            values[name] = float(val)
        except ValueError:
            raise ValueError(f"--truth {name}={val!r} is not a number") from None
    truth = np.array([values[n] for n in PARAM_NAMES])
    bad = np.flatnonzero((truth < LOWER) | (truth > UPPER))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"--truth {PARAM_NAMES[i]}={truth[i]} is outside the fit's box [{LOWER[i]:.4g}, {UPPER[i]:.4g}]")
    return truth


def _check(args: argparse.Namespace) -> np.ndarray | None:
    for name in ("nbeta", "nseq"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be a positive integer, got {getattr(args, name)}")
    for name in ("nburn", "niter"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name} must be a non-negative integer, got {getattr(args, name)}")
    if args.niter < 1:
        raise ValueError("--niter must be at least 1: the intervals come from the sampling iterations")
    if not 0 <= args.seed < 2**32:
        raise ValueError(f"--seed must be an integer in [0, 2**32), got {args.seed}")
    for name in ("scan_seconds", "cadence_seconds", "bandwidth_ghz"):
        if not getattr(args, name) > 0:
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if not args.fractional_noise >= 0:
        raise ValueError(f"--fractional-noise must be >= 0, got {args.fractional_noise}")
    if args.time_limit is not None and not args.time_limit > 0:
        raise ValueError(f"--time-limit must be a positive number of seconds, got {args.time_limit}")
    if args.uvdata is not None:
        if not args.uvdata.is_file():
            raise ValueError(f"--uvdata {str(args.uvdata)!r}: no such file")
        if args.truth:
            raise ValueError("--truth describes the simulated image; it has no meaning with --uvdata")
        return None
    return _parse_truth(args.truth)


def run_demo(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Simulate (or read), fit, print and plot; the exit status (0, or 1 if the run was cut short).

    ``out``: where the report goes (default: ``sys.stdout`` as it is at the call)."""
    import multiwalk as mw

    out = sys.stdout if out is None else out

    from ..eht import fit_xringaus, load_array, simulate
    from ..io.uvdata import read_uvdata, write_uvdata
    from ..models import xringaus

    truth = _check(args)
    t_start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.uvdata is None:
        array = load_array(args.array)
        import jax.numpy as jnp

        data = simulate(
            array, lambda u, v: np.asarray(xringaus(jnp.asarray(truth, jnp.float32), u, v)),
            scan_seconds=args.scan_seconds, cadence_seconds=args.cadence_seconds, bandwidth_hz=args.bandwidth_ghz * 1e9,
            fractional_noise=args.fractional_noise, seed=args.seed,
        )
        path = args.out / "sgra_uvdata.txt"
        write_uvdata(path, data)
        data = read_uvdata(path)  # fit what the file holds, as cuda_mcmc did
        print(f"Simulated {len(data)} visibilities of Sgr A* with the {args.array} array "
              f"({len(np.unique(data.mjd))} scans of {args.scan_seconds:g} s, 230 GHz); written to {path}", file=out)
    else:
        data = read_uvdata(args.uvdata)
        print(f"Read {len(data)} visibilities from {args.uvdata}", file=out)
    solver = mw.ReplicaExchange(nbeta=args.nbeta, nseq=args.nseq, nburn=args.nburn, niter=args.niter)
    print(f"Fitting xringaus (9 parameters) with ReplicaExchange(nbeta={args.nbeta}, nseq={args.nseq}, "
          f"nburn={args.nburn}, niter={args.niter}) ...", file=out)
    out.flush()
    fit = fit_xringaus(data, solver, seed=args.seed, progress=args.progress, time_limit=args.time_limit)
    stats = fit.result.stats
    print(file=out)
    print(fit.table(truth), file=out)
    print(f"{fit.result.message}; compile {stats.get('compile_seconds', float('nan')):.1f} s, "
          f"sampling {stats.get('run_seconds', float('nan')):.1f} s", file=out)
    fit.result.save(str(args.out / "fit.npz"))
    written = [args.out / "fit.npz"]
    if not args.no_plots:
        written += fit.plot(args.out, truth=truth)
    print(f"Wrote {', '.join(str(p) for p in written)}", file=out)
    print(f"Total wall time {time.perf_counter() - t_start:.1f} s", file=out)
    return 0 if fit.result.status == mw.Status.SUCCESS else 1


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        _check(args)
    except ValueError as err:
        parser.error(str(err))  # exits with status 2, before anything is computed
    return run_demo(args)
