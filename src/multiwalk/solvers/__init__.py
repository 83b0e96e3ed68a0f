"""One file per algorithm: pure ``init`` / ``step`` / ``done`` / ``result`` on a state pytree.

The solvers are imported on first use (``multiwalk._lazy``): a program that runs one algorithm
(``multiwalk run`` of ODAT-SE's exchange) does not pay for the others' modules at start-up."""

from typing import TYPE_CHECKING

from .._lazy import attach
from .base import Phase, RunPlan, Solver, Writer

if TYPE_CHECKING:  # imported on first use (below); named here for type checkers
    from .lbfgs import LBFGS, LBFGSResult, LBFGSStatus
    from .mapper import Mapper, MapperResult
    from .pattern_search import PatternSearch, PatternSearchResult
    from .population_annealing import PopulationAnnealing, PopulationAnnealingResult
    from .replica_exchange import ReplicaExchange, ReplicaExchangeResult

__getattr__, __dir__ = attach(__name__, {
    "LBFGS": "lbfgs", "LBFGSResult": "lbfgs", "LBFGSStatus": "lbfgs", "Mapper": "mapper", "MapperResult": "mapper",
    "PatternSearch": "pattern_search", "PatternSearchResult": "pattern_search",
    "PopulationAnnealing": "population_annealing", "PopulationAnnealingResult": "population_annealing",
    "ReplicaExchange": "replica_exchange", "ReplicaExchangeResult": "replica_exchange",
})

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
