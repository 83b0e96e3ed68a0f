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
from typing import TYPE_CHECKING, Any

import _multiwalk_launch

# `multiwalk run` with a Python objective: its worker processes start now, while JAX is imported
# below (a no-op for any other program; _multiwalk_launch says when and why)
_multiwalk_launch.start_pool_early()

from . import lbfgs, persistent_cache  # noqa: E402 - after the workers' start
from .minimize import minimize  # noqa: E402
from .problem import Problem  # noqa: E402
from .result import Result, Status  # noqa: E402
from .solve import solve  # noqa: E402
from .solvers.base import Phase, RunPlan, Solver, Writer  # noqa: E402
from .solvers.exchange import Exchange, ExchangeResult  # noqa: E402
from .solvers.lbfgs import LBFGS, LBFGSResult, LBFGSStatus  # noqa: E402
from .solvers.mapper import Mapper, MapperResult  # noqa: E402
from .solvers.pattern_search import PatternSearch, PatternSearchResult  # noqa: E402
from .solvers.population_annealing import PopulationAnnealing, PopulationAnnealingResult  # noqa: E402
from .solvers.replica_exchange import ReplicaExchange, ReplicaExchangeResult  # noqa: E402

if TYPE_CHECKING:  # imported on first use (__getattr__ below); named here for type checkers
    from . import compat as compat
    from . import deconv as deconv
    from . import diagnostics as diagnostics
    from . import eht as eht
    from . import functions as functions
    from . import io as io
    from . import models as models

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

# The package's subpackages and modules (deconv, eht, io, models, functions, compat, ...; not
# diagnostics, which the replica-exchange solver imports, its ArviZ inside its functions) are
# imported on first use, ``mw.deconv`` as well as ``import multiwalk.deconv``: they pull
# scipy.fft, scipy.signal, astropy, matplotlib or ArviZ, which a solve does not need, and
# ``import multiwalk`` (or the ``multiwalk`` command, whose package this is) would pay for them
# every time.  tests/test_lazy_imports.py pins which libraries ``import multiwalk`` leaves out.
def __getattr__(name: str) -> Any:
    """``mw.<submodule>``: the module, imported now (PEP 562: only names not bound yet get here)."""
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")  # the import binds it here too
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The names bound now and every submodule (imported or not)."""
    import pkgutil

    return sorted(set(globals()) | {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")})
