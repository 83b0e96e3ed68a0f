"""The user's function traced once, however many compiled programs call it.

A solve compiles several programs that each evaluate the problem's function: the start, the
loop of each phase, the result's one-point value.  Tracing a large model runs its Python once per
program (the xringaus fit: six times, ~0.5 s of a new process's first call on a GPU host).
:class:`TracedOnce` wraps the function in ``jax.jit(..., inline=True)``: JAX keeps the jaxpr of
the first trace (per argument shapes and dtypes, and per JAX's configuration) and later programs
replay it, inlined, so they hold the same operations as a direct call.

Only traced calls take that way, and only when every array of ``args`` is traced too (inside a
compiled loop, :func:`multiwalk.compile_cache.problem_arrays` makes them arguments).  A call
with concrete ``args`` (a kernel that compiles them in as constants) or an eager call runs the
function directly, as before: the function may read concrete values there, and an eager call
should not compile.  ``Problem``'s check of the function (:meth:`TracedOnce.eval_shape`) makes
the trace the programs replay, ``args``' arrays abstract as in a compiled loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.core import Tracer

__all__ = ["TracedOnce", "split_args", "joined_args"]


class TracedOnce:
    """``fn(x)`` or ``fn(x, args)`` (``takes_args``), whose Python runs once per shapes and dtypes
    of ``x`` and of ``args``' arrays; ``args``' other leaves (numbers, strings) stay constants."""

    def __init__(self, fn: Callable, takes_args: bool) -> None:
        self.fn = fn
        self.takes_args = takes_args
        self._jitted: dict[Any, Callable] = {}  # args' tree and constant leaves -> the jitted function

    def __call__(self, x: Any, args: Any = None) -> Any:
        if not isinstance(x, Tracer):
            return self._direct(x, args)
        if not self.takes_args:
            return self._jitted_for(None)(x)
        arrays, (tree, constants) = split_args(args)
        if any(not isinstance(a, Tracer) for a in arrays):
            return self._direct(x, args)  # the function may read them: trace it as it is
        try:
            jitted = self._jitted_for(tree, constants)
        except TypeError:  # a constant leaf that cannot key a cache: no sharing of traces
            return self._direct(x, args)
        return jitted(x, arrays)

    def eval_shape(self, x: Any, args: Any = None) -> Any:
        """The output's shape and dtype for ``x`` (a ``jax.ShapeDtypeStruct``), ``args``' arrays
        taken as abstract: the trace compiled programs then replay, made here once."""
        if not self.takes_args:
            return jax.eval_shape(self._jitted_for(None), x)
        arrays, (tree, constants) = split_args(args)  # as compiled loops take them
        try:
            jitted = self._jitted_for(tree, constants)
        except TypeError:
            return jax.eval_shape(lambda x: self._direct(x, args), x)
        try:
            return jax.eval_shape(jitted, x, arrays)
        except Exception:  # reads an array of args concretely: fine where they are constants (a
            # kernel's plan), so checked as before, on the concrete args
            return jax.eval_shape(lambda x: self._direct(x, args), x)

    def __getstate__(self) -> dict[str, Any]:  # a pickled problem holds the function, not its traces
        return {"fn": self.fn, "takes_args": self.takes_args}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["fn"], state["takes_args"])

    def _direct(self, x: Any, args: Any) -> Any:
        return self.fn(x, args) if self.takes_args else self.fn(x)

    def _jitted_for(self, tree: Any = None, constants: tuple = ()) -> Callable:
        """The jitted function for ``args``' ``tree`` and its ``constants`` (None where an array
        goes); no ``tree``: ``fn(x)``.  TypeError where a constant cannot key the cache."""
        key = None if tree is None else (tree, tuple(_constant_key(c) for c in constants))
        jitted = self._jitted.get(key)  # hashes the key: TypeError for an unhashable constant
        if jitted is None:
            jitted = self._jitted.setdefault(key, jax.jit(self._rebuilt(tree, constants), inline=True))
        return jitted

    def _rebuilt(self, tree: Any, constants: tuple) -> Callable:
        """The function of ``x`` and ``args``' traced arrays, the constants put back in place."""
        fn = self.fn
        if tree is None:  # a function of its own: jax.jit hashes it, and a callable object may not be hashable

            def call_x(x: Any) -> Any:
                return fn(x)

            return call_x

        def call(x: Any, arrays: list[Any]) -> Any:
            return fn(x, joined_args(arrays, (tree, constants)))

        return call


def _constant_key(constant: Any) -> Any:
    """``constant`` as a cache key that equals another only for the same value of the same type:
    ``1``, ``1.0`` and ``True`` are equal in Python, ``0.0`` and ``-0.0`` too, yet a function may
    tell them apart (``1 / a``, ``a // 2``); a float's repr also makes NaN equal to itself."""
    if constant is None:
        return None
    if isinstance(constant, (float, complex)):
        return type(constant), repr(constant)
    return type(constant), constant


def split_args(args: Any) -> tuple[list[Any], tuple[Any, tuple]]:
    """``(arrays, (tree, constants))``: ``args``' array leaves (NumPy or JAX arrays, traced or not),
    which compiled code takes as arguments, and its tree with the other leaves (numbers, strings,
    NumPy scalars; None where an array goes), which it compiles in (:func:`joined_args` undoes it)."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    is_array = [isinstance(leaf, (np.ndarray, jax.Array)) for leaf in leaves]
    arrays = [leaf for leaf, a in zip(leaves, is_array) if a]
    return arrays, (tree, tuple(None if a else leaf for leaf, a in zip(leaves, is_array)))


def joined_args(arrays: list[Any], static: tuple[Any, tuple]) -> Any:
    """``args`` from :func:`split_args`'s parts, ``arrays`` (perhaps traced) in place of its arrays."""
    tree, constants = static
    it = iter(arrays)
    return jax.tree_util.tree_unflatten(tree, [next(it) if c is None else c for c in constants])
