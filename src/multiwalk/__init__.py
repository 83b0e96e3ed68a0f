"""multiwalk: massively parallel optimisation, equation solving and Bayesian fitting in JAX.

The user writes the objective for ONE point in ``jax.numpy``; every solver advances a batch
of walkers in lockstep with one jitted step, on the CPU or on GPUs.

>>> import multiwalk as mw
>>> problem = mw.Problem(objective=f, lower=lo, upper=hi)
>>> result = mw.solve(problem, mw.ReplicaExchange(nbeta=32, nseq=14), seed=0)
"""

from . import deconv, lbfgs, persistent_cache
from .minimize import minimize
from .problem import Problem
from .result import Result, Status
from .solve import solve
from .solvers.base import Phase, RunPlan, Solver, Writer
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
