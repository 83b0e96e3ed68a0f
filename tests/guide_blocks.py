"""The ```python blocks of the README and of the guides in docs/, for the tests that run them
(tests/test_readme.py, tests/test_guide_examples.py).  Not a test module: pytest collects only
test_*.py; imported as ``from guide_blocks import guide_block``, pytest puts this folder on sys.path."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDES = {name: ROOT / "docs" / f"{name}.md" for name in ("replica_exchange", "pattern_search", "lbfgs")}


def python_blocks(path: Path) -> list[str]:
    """The ```python blocks of a Markdown file, in order."""
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def guide_block(name: str, word: str) -> str:
    """The first ```python block of ``docs/<name>.md`` that mentions ``word``."""
    return next(b for b in python_blocks(GUIDES[name]) if word in b)


RUN_BLOCKS = {  # the guide blocks tests/test_readme.py and tests/test_guide_examples.py run, by the words that pick them
    "replica_exchange": "ReplicaExchange",
    "pattern_search": "PatternSearch",
    "lbfgs": "LBFGS",
}
