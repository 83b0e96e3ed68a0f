"""``python -m multiwalk ...``: the same as the ``multiwalk`` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
