"""One file per algorithm: pure ``init`` / ``step`` / ``done`` / ``result`` on a state pytree."""

from .base import Phase, RunPlan, Solver, Writer
from .lbfgs import LBFGS, LBFGSResult, LBFGSStatus
from .mapper import Mapper, MapperResult
from .pattern_search import PatternSearch, PatternSearchResult
from .population_annealing import PopulationAnnealing, PopulationAnnealingResult
from .replica_exchange import ReplicaExchange, ReplicaExchangeResult

__all__ = [
    "Phase",
    "RunPlan",
    "Writer",
    "Solver",
    "LBFGS",
    "LBFGSResult",
    "LBFGSStatus",
    "Mapper",
    "MapperResult",
    "PatternSearch",
    "PatternSearchResult",
    "PopulationAnnealing",
    "PopulationAnnealingResult",
    "ReplicaExchange",
    "ReplicaExchangeResult",
]
