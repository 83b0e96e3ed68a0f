"""A package's public names imported from their modules on first use (PEP 562).

Each module imported at start-up costs every process that imports the package, the ``multiwalk``
command included (~1 ms of CPU per small module on a 2-core VM, ~50 ms for the solvers a run
of one algorithm does not use).  A package lists the names it exports and the module each
lives in; :func:`attach` gives its ``__getattr__`` and ``__dir__``: ``package.Name``, ``from
package import Name`` and ``from package import *`` import the module when a name is first
read, and bind the name in the package so that later reads are plain attribute reads.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["attach"]


def attach(package: str, homes: dict[str, str], submodules: tuple[str, ...] = (),
           ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` (its ``__name__``) whose names ``homes`` maps to
    the submodule (relative to the package, e.g. ``"solvers.lbfgs"``) that defines each, and whose
    ``submodules`` are read as attributes (``package.submodule``)."""

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")  # the import binds it in the package
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        setattr(sys.modules[package], name, value)  # the next read finds it bound
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(homes) | set(submodules))

    return __getattr__, __dir__
