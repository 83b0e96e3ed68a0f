"""One file per algorithm: pure ``init`` / ``step`` / ``done`` / ``result`` on a state pytree."""

from .base import Phase, Solver
from .replica_exchange import ReplicaExchange, ReplicaExchangeResult

__all__ = ["Phase", "Solver", "ReplicaExchange", "ReplicaExchangeResult"]
