"""The command line of the example scripts: ``[--out DIR] [--quick] [--seed N]``.

Imported by ``examples/solvsys.py`` and ``examples/search_rosenbrock.py`` (run as
``python examples/<name>.py``, so this folder is on ``sys.path``).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def parse_options(doc: str, argv: list[str] | None = None) -> tuple[argparse.Namespace, Path]:
    """``(options, output folder)``: the arguments parsed (``doc``'s first line is the --help
    description) and the ``--out`` folder, created if missing."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--out", default="demo_output", help="folder for the figures (created)")
    parser.add_argument("--quick", action="store_true", help="smaller run (for tests)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (both runs use it)")
    opts = parser.parse_args(argv)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    return opts, out
