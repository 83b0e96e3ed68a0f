"""Test functions in plain jax.numpy, each ``f(x) -> scalar`` for ONE point."""

from . import cute, odatse, yao

__all__ = ["cute", "odatse", "yao"]
