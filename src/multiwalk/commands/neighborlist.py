"""``multiwalk neighborlist mesh.txt -r RADIUS -o neighborlist.txt``: ODAT-SE's odatse_neighborlist.

Reads a mesh file (index then coordinates per line), lists for every point the points within
RADIUS (Euclidean distance of the coordinates divided by ``--unit``; found with
``scipy.spatial.cKDTree``) and writes ODAT-SE's neighbour-list file.  Checks that the graph
connects all points (else the discrete Monte Carlo could not reach some of them).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_USAGE = 0, 2


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "neighborlist",
        help="make a neighbour-list file from a mesh file (ODAT-SE's odatse_neighborlist)",
        description="Make ODAT-SE's neighbour-list file from a mesh file: the points within RADIUS of each point.",
    )
    p.add_argument("input", type=Path, help="mesh file: an index then the coordinates on each line")
    p.add_argument("-o", "--output", type=Path, default=Path("neighborlist.txt"), help="output file (default %(default)s)")
    p.add_argument("-r", "--radius", type=float, default=1.0, help="neighbourhood radius (default %(default)s)")
    p.add_argument("-u", "--unit", default=None,
                   help='length unit of each coordinate, as one string: -u "1.0 0.5" (coordinates are divided by it)')
    p.add_argument("--allow-selfloop", action="store_true", help="list each point among its own neighbours")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(handler=_handle, command_parser=p)


def _handle(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import numpy as np

    from ..spaces import build_neighbor_list, check_neighbor_list, read_mesh, write_neighbor_list

    t0 = time.perf_counter()
    try:
        if not (args.radius > 0 and np.isfinite(args.radius)):
            raise ValueError(f"--radius must be a positive number, got {args.radius}")
        coords = read_mesh(args.input)
        unit = None
        if args.unit is not None:
            try:
                unit = np.array([float(w) for w in args.unit.split()])
            except ValueError:
                raise ValueError(f'--unit {args.unit!r} must be numbers separated by spaces, e.g. -u "1.0 0.5"') from None
            if unit.shape != (coords.shape[1],) or not np.all(unit > 0):
                raise ValueError(
                    f"--unit needs {coords.shape[1]} positive numbers (one per coordinate of {args.input}), got {args.unit!r}"
                )
        lists = build_neighbor_list(coords, args.radius, unit=unit, allow_selfloop=args.allow_selfloop)
        if not args.output.resolve().parent.is_dir():
            raise ValueError(f"--output {str(args.output)!r}: folder {str(args.output.parent)!r} does not exist")
        check_neighbor_list(lists, f"the neighbour list of {args.input} with radius {args.radius}")
        write_neighbor_list(args.output, lists, radius=args.radius, unit=np.ones(coords.shape[1]) if unit is None else unit)
    except (ValueError, OSError) as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    if not args.quiet:
        counts = [len(nn) for nn in lists]
        print(
            f"{args.output}: {len(lists)} points, {min(counts)} to {max(counts)} neighbours each "
            f"(radius {args.radius}), {time.perf_counter() - t0:.2f} s"
        )
    return EXIT_OK
