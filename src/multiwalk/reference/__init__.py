"""Plain NumPy reference implementations of the solvers, for benchmarks and tests only.

Nothing in the library imports this package.  It holds the "CPU code" the papers compare their
GPU code against: the same algorithm written as a simple one-core NumPy loop, so that tests can
check a solver step by step and benchmarks can time the peer in the same run.
"""

from . import pattern_search

__all__ = ["pattern_search"]
