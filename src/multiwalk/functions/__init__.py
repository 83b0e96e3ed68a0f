"""Test functions in plain jax.numpy, each ``f(x) -> scalar`` for ONE point."""

from typing import TYPE_CHECKING

from .._lazy import attach

if TYPE_CHECKING:  # imported on first use (below): a run of one function does not load the others
    from . import cute, odatse, yao

__getattr__, __dir__ = attach(__name__, {}, submodules=("cute", "odatse", "yao"))

__all__ = ["cute", "odatse", "yao"]
