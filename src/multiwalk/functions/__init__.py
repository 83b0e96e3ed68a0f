"""Test functions in plain jax.numpy, each ``f(x) -> scalar`` for ONE point."""

from . import cute, yao

__all__ = ["cute", "yao"]
