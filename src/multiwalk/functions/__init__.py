"""Test functions in plain jax.numpy, each ``f(x) -> scalar`` for ONE point."""

from . import yao

__all__ = ["yao"]
