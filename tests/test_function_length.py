"""No function in src/ longer than MAX_LINES, except those in ALLOWED, which are to be split.

Read with the ast module only (the package is not imported): each function, method and nested
function counts from its ``def`` line to its last line, comments included, its docstring not
(documentation, not code to read through).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
MAX_LINES = 80

# functions still longer than MAX_LINES, as "path under src/::qualified name"; remove an entry
# once its function is split (test_allowed_functions_are_still_long says which)
ALLOWED: set[str] = set()  # none left


def function_lengths(root: Path = SRC) -> dict[str, int]:
    """``{"path::qualified.name": lines}`` of every function under ``root``, nested ones included
    (a method is ``Class.method``, a function inside another ``outer.inner``)."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, where: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                lengths[f"{where}::{name}"] = child.end_lineno - child.lineno + 1 - _docstring_lines(child)
                visit(child, where, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, where, prefix + child.name + ".")
            else:
                visit(child, where, prefix)

    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
        visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), where, "")
    return lengths


def _docstring_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The lines of the function's docstring, if it has one (a public entry point's docstring, such
    as solve()'s parameter list, is documentation, not code to read through)."""
    first = function.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno - first.lineno + 1
    return 0


def test_no_new_function_is_longer_than_the_limit():
    long = {name: n for name, n in function_lengths().items() if n > MAX_LINES and name not in ALLOWED}
    assert not long, (
        f"functions over {MAX_LINES} lines: "
        + ", ".join(f"{name} ({n} lines)" for name, n in sorted(long.items()))
        + ": split them into named helpers"
    )


def test_allowed_functions_are_still_long():
    lengths = function_lengths()
    stale = sorted(name for name in ALLOWED if lengths.get(name, 0) <= MAX_LINES)
    assert not stale, f"remove from ALLOWED in {Path(__file__).name} (split, renamed or gone): {', '.join(stale)}"


def test_lengths_count_nested_functions_and_methods(tmp_path):
    (tmp_path / "m.py").write_text(
        "class A:\n    def f(self):\n        def g():\n            return 1\n\n        return g\n"
    )
    assert function_lengths(tmp_path) == {"m.py::A.f": 5, "m.py::A.f.g": 2}


def test_a_docstring_does_not_count(tmp_path):
    (tmp_path / "m.py").write_text('def f():\n    """One.\n\n    Three.\n    """\n    return 1\n')
    assert function_lengths(tmp_path) == {"m.py::f": 2}
