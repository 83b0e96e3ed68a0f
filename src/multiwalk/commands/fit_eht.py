"""``multiwalk fit-eht FILE.uvfits``: fit an image model to EHT data on closure quantities (and amplitudes).

    multiwalk fit-eht SR1_M87_2017_095_hi_hops_netcal_StokesI.uvfits --model mring --out m87_095

Reads the UVFITS file (:func:`multiwalk.io.read_uvfits`), drops the co-located baselines,
averages scans and adds a systematic error as asked, fits the model with ReplicaExchange
(:func:`multiwalk.eht.fit_eht`), prints the parameters, the ring's diameter, width and bright
side (68 % and 95 % intervals) and chi2 per data product, and writes ``fit.npz`` and the
figures into ``--out``.  A file the reader cannot use is one paragraph on stderr (exit 2).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from ..eht.likelihood import EHTTerms

__all__ = ["add_parser", "prepare", "run_fit_eht"]

EXIT_USAGE = 2


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``fit-eht`` to the ``multiwalk`` subcommands."""
    p = commands.add_parser(
        "fit-eht",
        help="fit a black-hole image model to an EHT UVFITS file (closure phases, log closure amplitudes, amplitudes)",
        description=(
            "Read an EHT UVFITS file, fit a ring model to its closure phases and log closure amplitudes (and "
            "optionally amplitudes, station gains marginalised per scan) with ReplicaExchange, print the ring's "
            "diameter, width and bright side with 68 % and 95 % intervals and chi2 per data product, and write "
            "fit.npz and the figures."
        ),
    )
    p.add_argument("file", type=Path, metavar="FILE.uvfits", help="the visibilities (UVFITS, Stokes I or RR/LL)")
    p.add_argument("--model", default="mring",
                   help="the image model: mring, crescent, gaussian, xringaus, ... (default: %(default)s)")
    p.add_argument("--data", default="cphase,logcamp", metavar="PRODUCTS",
                   help="data products, comma-separated: cphase, logcamp, amp (default: %(default)s)")
    p.add_argument("--scan-average", action=argparse.BooleanOptionalAction, default=True,
                   help="average each baseline's scan coherently before forming closures (default: on)")
    p.add_argument("--scan-gap", type=float, default=None, metavar="SECONDS",
                   help="a scan ends at a gap longer than this (default: twice the median step between times; "
                        "give it for data with one integration per scan)")
    p.add_argument("--systematic", type=float, default=0.0, metavar="FRAC",
                   help="add FRAC |V| to each sigma in quadrature (default: %(default)s)")
    p.add_argument("--drop-colocated", action=argparse.BooleanOptionalAction, default=True,
                   help="drop baselines of stations closer than 5 km, e.g. ALMA-APEX, JCMT-SMA (default: on)")
    p.add_argument("--covariance", action="store_true",
                   help="use each time's closure covariance (closures sharing a baseline are correlated)")
    p.add_argument("--gain-sigma", type=float, default=0.1,
                   help="width of the log-normal station gain prior, with amp (default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("fit_eht_output"), help="output folder (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the sampler (default: %(default)s)")
    p.add_argument("--nbeta", type=int, default=None, help="temperatures per sequence (default: 16)")
    p.add_argument("--nseq", type=int, default=None, help="independent sequences (default: 8)")
    p.add_argument("--nburn", type=int, default=None, help="burn-in iterations (default: 500)")
    p.add_argument("--niter", type=int, default=None, help="sampling iterations (default: 500)")
    p.add_argument("--time-limit", type=float, default=None, metavar="SECONDS", help="stop sampling after this long")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                   help="progress bar on stderr (default: on)")
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    p.set_defaults(handler=_run, command_parser=p)


def _check(args: argparse.Namespace) -> None:
    """ValueError (one line naming the option) for options the library does not check."""
    for name in ("nbeta", "nseq", "niter"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name} must be a positive integer, got {getattr(args, name)}")
    if args.nburn is not None and args.nburn < 0:
        raise ValueError(f"--nburn must be a non-negative integer, got {args.nburn}")
    if not 0 <= args.seed < 2**32:
        raise ValueError(f"--seed must be an integer in [0, 2**32), got {args.seed}")
    if not 0 <= args.systematic < 1:
        raise ValueError(f"--systematic must be a fraction of |V| in [0, 1) (0.02 for 2 %), got {args.systematic}")
    if not args.gain_sigma > 0:
        raise ValueError(f"--gain-sigma must be positive (0.1 for 10 %), got {args.gain_sigma}")
    if args.time_limit is not None and not args.time_limit > 0:
        raise ValueError(f"--time-limit must be a positive number of seconds, got {args.time_limit}")
    if args.scan_gap is not None and not args.scan_gap > 0:
        raise ValueError(f"--scan-gap must be a positive number of seconds, got {args.scan_gap}")


def _solver(args: argparse.Namespace):
    import dataclasses

    from ..eht.fit_eht import EHT_SOLVER

    chosen = {k: getattr(args, k) for k in ("nbeta", "nseq", "nburn", "niter") if getattr(args, k) is not None}
    return dataclasses.replace(EHT_SOLVER, **chosen)


def prepare(args: argparse.Namespace) -> EHTTerms:
    """The file read and prepared as the options say, and its data products (errors before any sampling)."""
    from ..eht.likelihood import eht_terms, parse_products
    from ..io.uvfits import read_uvfits
    from ..models import MODELS

    if args.model not in MODELS:
        raise ValueError(f"--model must be one of {', '.join(MODELS)}, got {args.model!r}")
    products = parse_products(args.data)
    data = read_uvfits(args.file, drop_colocated_km=5.0 if args.drop_colocated else None,
                       average_scans=args.scan_average, scan_gap_seconds=args.scan_gap, systematic=args.systematic)
    return eht_terms(data, products, covariance=args.covariance, gain_sigma=args.gain_sigma)


def run_fit_eht(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Read, fit, print, save and plot; the exit status (0, or 1 if the run was cut short).

    ValueError / FileNotFoundError for a file or option that cannot be used (raised before sampling)."""
    out = sys.stdout if out is None else out
    from ..eht.fit_eht import fit_eht
    from ..eht.likelihood import PRODUCT_LABELS
    from ..result import Status

    t_start = time.perf_counter()
    solver = _solver(args)
    terms = prepare(args)
    data, products = terms.data, terms.products
    print(data.describe(), file=out)
    counts = ", ".join(f"{terms.count(p)} {PRODUCT_LABELS[p]}" for p in products)
    print(f"Fitting {args.model} to {counts} with ReplicaExchange(nbeta={solver.nbeta}, nseq={solver.nseq}, "
          f"nburn={solver.nburn}, niter={solver.niter}) ...", file=out)
    out.flush()
    fit = fit_eht(data, args.model, products, solver, covariance=args.covariance, gain_sigma=args.gain_sigma,
                  seed=args.seed, progress=args.progress, time_limit=args.time_limit)
    stats = fit.result.stats
    print(file=out)
    print(fit.table(), file=out)
    print(f"{fit.result.message}; compile {stats.get('compile_seconds', float('nan')):.1f} s, "
          f"sampling {stats.get('run_seconds', float('nan')):.1f} s", file=out)
    args.out.mkdir(parents=True, exist_ok=True)
    written = [fit.save(args.out / "fit.npz")]
    if not args.no_plots:
        written += fit.plot(args.out)
    print(f"Wrote {', '.join(str(p) for p in written)}", file=out)
    print(f"Total wall time {time.perf_counter() - t_start:.1f} s", file=out)
    return 0 if fit.result.status == Status.SUCCESS else 1


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        _check(args)
    except ValueError as err:
        parser.error(str(err))  # exits with status 2, before anything is read
    try:
        return run_fit_eht(args)
    except (ValueError, FileNotFoundError) as err:  # the file, the model or the data products: one paragraph
        sys.stdout.flush()
        print(f"{parser.prog}: error: {' '.join(str(err).split())}", file=sys.stderr)
        return EXIT_USAGE
