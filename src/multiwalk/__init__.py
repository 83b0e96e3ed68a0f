"""multiwalk: massively parallel optimisation, equation solving and Bayesian fitting in JAX.

The user writes the objective for ONE point in ``jax.numpy``; every solver advances a batch
of walkers in lockstep with one jitted step, on the CPU or on GPUs.

>>> import multiwalk as mw
>>> problem = mw.Problem(objective=f, lower=lo, upper=hi)
>>> result = mw.solve(problem, mw.ReplicaExchange(nbeta=32, nseq=14), seed=0)
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import TYPE_CHECKING, Any

import _multiwalk_launch

# `multiwalk run` with a Python objective: its worker processes start now, while JAX is imported
# below (a no-op for any other program; _multiwalk_launch says when and why)
_multiwalk_launch.start_pool_early()

from . import persistent_cache  # noqa: E402 - after the workers' start
from ._lazy import attach  # noqa: E402
from .problem import Problem  # noqa: E402
from .result import Result, Status  # noqa: E402
from .solve import solve  # noqa: E402
from .solvers.base import Phase, RunPlan, Solver, Writer  # noqa: E402

if TYPE_CHECKING:  # imported on first use (__getattr__ below); named here for type checkers
    from . import compat as compat
    from . import deconv as deconv
    from . import diagnostics as diagnostics
    from . import eht as eht
    from . import functions as functions
    from . import io as io
    from . import lbfgs as lbfgs
    from . import models as models
    from .minimize import minimize
    from .solvers.exchange import Exchange, ExchangeResult
    from .solvers.lbfgs import LBFGS, LBFGSResult, LBFGSStatus
    from .solvers.mapper import Mapper, MapperResult
    from .solvers.pattern_search import PatternSearch, PatternSearchResult
    from .solvers.population_annealing import PopulationAnnealing, PopulationAnnealingResult
    from .solvers.replica_exchange import ReplicaExchange, ReplicaExchangeResult

__version__ = "0.1.0"

# compiled programs kept on disk for later processes (off with MULTIWALK_CACHE_DIR=off)
persistent_cache.configure()

__all__ = [
    "Problem",
    "Result",
    "Status",
    "solve",
    "minimize",
    "Solver",
    "Phase",
    "RunPlan",
    "Writer",
    "ReplicaExchange",
    "ReplicaExchangeResult",
    "PatternSearch",
    "PatternSearchResult",
    "LBFGS",
    "LBFGSResult",
    "LBFGSStatus",
    "Exchange",
    "ExchangeResult",
    "PopulationAnnealing",
    "PopulationAnnealingResult",
    "Mapper",
    "MapperResult",
    "lbfgs",
    "deconv",
    "__version__",
]

# The package's subpackages and modules (deconv, eht, io, models, functions, compat, ...) are
# imported on first use, ``mw.deconv`` as well as ``import multiwalk.deconv``: they pull
# scipy.fft, scipy.signal, astropy, matplotlib or ArviZ, which a solve does not need, and
# ``import multiwalk`` (or the ``multiwalk`` command, whose package this is) would pay for them
# every time.  So are the solvers and ``minimize`` (``mw.LBFGS``, ``from multiwalk import
# ReplicaExchange``): a program runs one or two of them, and each one's modules cost every
# process ~5-40 ms of start-up (the ``multiwalk run`` of ODAT-SE's exchange: ~50 ms for the
# others).  tests/test_lazy_imports.py pins which libraries ``import multiwalk`` leaves out.
_EXPORTS = {  # name -> the module that defines it
    "minimize": "minimize", "Exchange": "solvers.exchange", "ExchangeResult": "solvers.exchange",
    "LBFGS": "solvers.lbfgs", "LBFGSResult": "solvers.lbfgs", "LBFGSStatus": "solvers.lbfgs",
    "Mapper": "solvers.mapper", "MapperResult": "solvers.mapper",
    "PatternSearch": "solvers.pattern_search", "PatternSearchResult": "solvers.pattern_search",
    "PopulationAnnealing": "solvers.population_annealing",
    "PopulationAnnealingResult": "solvers.population_annealing",
    "ReplicaExchange": "solvers.replica_exchange", "ReplicaExchangeResult": "solvers.replica_exchange",
}
_export, _ = attach(__name__, _EXPORTS)


class _Package(types.ModuleType):
    """This package's module type.  ``minimize`` is both an export (the function) and the module
    that defines it: importing ``multiwalk.minimize`` first (``import multiwalk.minimize``, or
    unpickling the function) has the import system bind the module here, which would hide the
    function from ``mw.minimize``; the function is bound instead."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "minimize" and isinstance(value, types.ModuleType):
            value = value.minimize
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    """``mw.<solver or result class>`` or ``mw.minimize``: imported from its module now;
    ``mw.<submodule>``: the module, imported now (PEP 562: only names not bound yet get here)."""
    if name in _EXPORTS:
        return _export(name)
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")  # the import binds it here too
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The names bound now, the exports imported on first use and every submodule (imported or not)."""
    import pkgutil

    names = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
    return sorted(set(globals()) | set(_EXPORTS) | names)
