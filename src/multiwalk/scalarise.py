"""Scalarise a ``jax.numpy`` function of ONE point into a graph of scalar operations.

``scalarise(f, n, dtype)`` traces ``f`` on a point of shape ``(n,)`` (``jax.make_jaxpr``) and
interprets its jaxpr with every array "taken apart": an array of shape ``S`` becomes a NumPy
object array of shape ``S`` whose entries are :class:`Node` s, each ONE scalar value (an input
coordinate ``x[i]``, a constant, or an elementwise primitive applied to other nodes).
Structural primitives (slice, broadcast, reshape, concatenate, gather/scatter with constant
indices, ...) only rearrange nodes; reductions, cumulative sums and ``dot_general`` become
chains of binary nodes; calls (``jit``, ``custom_jvp``, ...) are inlined.  The result,
:class:`ScalarGraph`, is a DAG whose every value has the same shape in any later evaluation.

Why: a kernel that keeps one walker per GPU thread (``multiwalk.solvers.pattern_search_kernel``)
evaluates the graph on ``[BLOCK]`` vectors, one lane per walker, so every array it handles
is ``[BLOCK]`` whatever the shapes inside ``f`` (Triton accepts only power-of-two shapes), and
because each node knows which coordinates it depends on, ``f(x + delta e_j)`` recomputes only
the nodes that depend on ``x[j]`` and reuses the others' values at ``x`` - exactly the same
floating-point values, so the result equals a full evaluation in the same order.

Sums, products, max/min over axes are folded pairwise (a balanced tree in index order), and
``cumsum`` sequentially; XLA's own order of a reduction differs between backends, so values
agree with ``f`` up to rounding (exactly when the arithmetic is exact).

What is not supported raises :class:`Unsupported` with the reason: control flow on traced
values (``while``, ``scan``, ``cond`` on a non-constant predicate), random-number primitives,
complex numbers, scatter-add, out-of-bounds gathers, and graphs above the size limits.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax as _public_lax

if TYPE_CHECKING:
    from jax.extend.core import Jaxpr


@functools.cache
def _jaxpr_types() -> tuple[type, type]:
    """``(ClosedJaxpr, Literal)``, imported on first use: ``jax.extend`` imports every one of its
    modules, Pallas's among them (~20 ms), which ``import multiwalk`` need not pay."""
    try:  # jax.extend.core is the public home of these (JAX >= 0.4.36); jax.core keeps them in older ones
        from jax.extend.core import ClosedJaxpr, Literal
    except ImportError:  # pragma: no cover
        from jax.core import ClosedJaxpr, Literal  # type: ignore[no-redef]
    return ClosedJaxpr, Literal



class _Primitives:
    """``lax.add_p`` and friends, from ``jax.lax`` or, where a JAX version no longer exports them, its source."""

    def __getattr__(self, name: str) -> Any:
        prim = getattr(_public_lax, name, None)
        if prim is None:
            from jax._src.lax import lax as _src_lax

            prim = getattr(_src_lax, name)
        return prim


lax = _Primitives()

__all__ = ["Node", "ScalarGraph", "Unsupported", "scalarise", "MAX_ELEMENTS", "MAX_NODES"]

MAX_ELEMENTS = 1 << 16  # largest intermediate array taken apart (elements)
MAX_NODES = 200_000  # largest graph (operation nodes) built before giving up

# Elementwise primitives: applied per element with the eqn's own parameters.
_ELEMENTWISE = frozenset(
    """add sub mul div rem pow max min neg sign floor ceil round is_finite exp exp2 log log1p expm1
    tanh logistic sin cos tan asin acos atan atan2 sinh cosh asinh acosh atanh sqrt rsqrt cbrt
    integer_pow square abs select_n clamp convert_element_type eq ne lt le gt ge and or not xor
    shift_left shift_right_arithmetic shift_right_logical nextafter erf erfc erf_inv lgamma digamma
    population_count clz bitcast_convert_type copy copy_p reduce_precision""".split()
)
# Reductions over axes: the binary primitive they fold with.
_REDUCTIONS = {
    "reduce_sum": lax.add_p,
    "reduce_prod": lax.mul_p,
    "reduce_max": lax.max_p,
    "reduce_min": lax.min_p,
    "reduce_and": lax.and_p,
    "reduce_or": lax.or_p,
    "reduce_xor": lax.xor_p,
}
_CUMULATIVE = {"cumsum": lax.add_p, "cumprod": lax.mul_p, "cummax": lax.max_p, "cummin": lax.min_p}
# Primitives that only move elements, evaluated on integer ids: (data operands, constant operands).
_ID_MOVES = {"pad", "gather", "scatter", "dynamic_slice", "dynamic_update_slice"}
_CALLS = {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
          "custom_vjp_call_jaxpr", "remat", "checkpoint", "custom_lin"}

INPUT, CONST, OP = 0, 1, 2


class Unsupported(Exception):
    """``f`` cannot be scalarised; ``str(err)`` says why (a primitive, a size, a shape)."""


class Node:
    """One scalar value: an input coordinate, a constant, or ``prim(*args, **params)``.

    ``deps`` is the bitmask of input coordinates the value depends on; ``id`` is the node's
    position in topological order (inputs first).
    """

    __slots__ = ("kind", "dtype", "index", "value", "prim", "params", "args", "deps", "id")

    def __init__(self, kind: int, dtype: np.dtype, *, index: int = -1, value: Any = None, prim: Any = None,
                 params: dict | None = None, args: tuple = (), deps: int = 0, id: int = -1) -> None:
        self.kind, self.dtype, self.index, self.value = kind, np.dtype(dtype), index, value
        self.prim, self.params, self.args, self.deps, self.id = prim, params or {}, args, deps, id

    def __repr__(self) -> str:
        if self.kind == INPUT:
            return f"x[{self.index}]"
        if self.kind == CONST:
            return f"{self.value!r}:{self.dtype}"
        return f"%{self.id} = {self.prim.name}({', '.join(f'%{a.id}' if a.kind == OP else repr(a) for a in self.args)})"


class ScalarGraph:
    """The scalar DAG of one ``f``: ``inputs`` (n nodes), ``ops`` (topological order), ``output``.

    ``dependents[j]`` lists, in topological order, the operation nodes that depend on ``x[j]``:
    the ones to recompute when only ``x[j]`` changes.
    """

    def __init__(self, inputs: list[Node], ops: list[Node], output: Node) -> None:
        self.inputs, self.ops, self.output = inputs, ops, output
        self.n = len(inputs)
        self.dependents = [[op for op in ops if op.deps >> j & 1] for j in range(self.n)]
        self.primitives = frozenset(op.prim for op in ops)
        # Operation nodes whose value at x some re-evaluation reads (an argument of a dependent of
        # x[j] that does not itself depend on x[j]), and the output where it ignores some x[j]:
        # what a caller keeps between re-evaluations.
        cached: set[int] = set()
        for dep in self.dependents:
            dep_ids = {op.id for op in dep}
            cached.update(a.id for op in dep for a in op.args if a.kind == OP and a.id not in dep_ids)
            if output.kind == OP and output.id not in dep_ids:
                cached.add(output.id)
        self.cached = sorted(cached)

    def __repr__(self) -> str:
        return f"ScalarGraph(n={self.n}, ops={len(self.ops)}, output={self.output!r})"

    # ------------------------------------------------------------------ evaluation on lanes
    @staticmethod
    def _apply(node: Node, args: list[Any]) -> Any:
        return node.prim.bind(*args, **node.params)

    def evaluate(self, xs: Sequence[Any], const: Callable[[Node], Any]) -> list[Any]:
        """Values of every node at the point whose coordinates are ``xs`` (n arrays of one shape).

        ``const(node)`` materialises a constant node (an array of the lanes' shape and the
        node's dtype).  Returns a list indexed by ``node.id`` (inputs and ops; constants None).
        """
        vals: list[Any] = [None] * (self.n + len(self.ops))
        vals[: self.n] = list(xs)
        for op in self.ops:
            vals[op.id] = self._apply(op, [vals[a.id] if a.kind != CONST else const(a) for a in op.args])
        return vals

    def reevaluate(self, vals: list[Any], j: int, xj: Any, const: Callable[[Node], Any]) -> dict[int, Any]:
        """Values of the nodes that depend on ``x[j]`` when ``x[j]`` becomes ``xj`` and every other
        value is as in ``vals`` (from :meth:`evaluate`): ``{node id: value}``, including ``j`` itself."""
        new: dict[int, Any] = {j: xj}
        for op in self.dependents[j]:
            new[op.id] = self._apply(
                op, [const(a) if a.kind == CONST else new[a.id] if a.id in new else vals[a.id] for a in op.args]
            )
        return new

    def value(self, vals: list[Any] | dict[int, Any], const: Callable[[Node], Any], base: list[Any] | None = None) -> Any:
        """The output's value in ``vals`` (falling back to ``base`` for nodes ``vals`` lacks)."""
        out = self.output
        if out.kind == CONST:
            return const(out)
        if isinstance(vals, dict) and out.id not in vals:
            return base[out.id]  # type: ignore[index]
        return vals[out.id]

    def lanes_function(self) -> Callable[[jax.Array], jax.Array]:
        """``X (m, n) -> f at each row (m,)``, evaluated through the graph (jit-able; for tests)."""

        def run(X: jax.Array) -> jax.Array:
            m = X.shape[0]

            def const(node: Node) -> jax.Array:
                return jnp.full((m,), node.value, node.dtype)

            xs = [X[:, i].astype(node.dtype) for i, node in enumerate(self.inputs)]
            return self.value(self.evaluate(xs, const), const)

        return run


# ============================================================================ building the graph
def _identity(prim: Any, dtype: np.dtype) -> Any:
    """The value a fold over no elements gives (0 for a sum, 1 for a product, -inf for a max, ...)."""
    if prim in (lax.add_p, lax.or_p, lax.xor_p):
        return 0
    if prim is lax.mul_p:
        return 1
    if prim is lax.and_p:
        return True if dtype == np.bool_ else -1
    info = np.finfo(dtype) if jnp.issubdtype(dtype, jnp.floating) else np.iinfo(dtype)
    low, high = (-np.inf, np.inf) if jnp.issubdtype(dtype, jnp.floating) else (info.min, info.max)
    return low if prim is lax.max_p else high


class _Builder:
    def __init__(self, n: int, dtype: np.dtype, max_nodes: int, max_elements: int) -> None:
        self.inputs = [Node(INPUT, dtype, index=i, deps=1 << i, id=i) for i in range(n)]
        self.ops: list[Node] = []
        self.max_nodes, self.max_elements = max_nodes, max_elements
        self._cse: dict[Any, Node] = {}

    # ------------------------------------------------------------------ nodes
    @staticmethod
    def const(value: Any, dtype: Any) -> Node:
        return Node(CONST, dtype, value=np.asarray(value, dtype=dtype)[()])

    def op(self, prim: Any, params: dict, args: Sequence[Node], dtype: Any) -> Node:
        """A node ``prim(*args)``: folded when every argument is constant, shared when an equal
        node exists (common subexpressions), a pick when ``select_n`` has a constant predicate."""
        args = tuple(args)
        if prim is lax.select_n_p and args[0].kind == CONST:
            return args[1 + int(args[0].value)]
        if all(a.kind == CONST for a in args):
            with jax.ensure_compile_time_eval():
                out = prim.bind(*[np.asarray(a.value, a.dtype) for a in args], **params)
            return self.const(np.asarray(out), dtype)
        try:
            key: Any = (prim, tuple(sorted(params.items())),
                        tuple((a.id, None) if a.kind != CONST else (None, a.value.item(), str(a.dtype)) for a in args))
            hash(key)
        except TypeError:  # unhashable parameters: no sharing
            key = None
        if key is not None and key in self._cse:
            return self._cse[key]
        if len(self.ops) >= self.max_nodes:
            raise Unsupported(f"the objective needs more than {self.max_nodes} scalar operations")
        deps = 0
        for a in args:
            deps |= a.deps
        node = Node(OP, dtype, prim=prim, params=dict(params), args=args, deps=deps,
                    id=len(self.inputs) + len(self.ops))
        self.ops.append(node)
        if key is not None:
            self._cse[key] = node
        return node

    def fold(self, prim: Any, items: list[Node], dtype: Any) -> Node:
        """Pairwise (balanced) fold of ``items`` in order: ((a0 . a1) . (a2 . a3)) . ..."""
        if not items:  # the identity of the operation
            return self.const(_identity(prim, np.dtype(dtype)), dtype)
        while len(items) > 1:
            nxt = [self.op(prim, {}, (items[i], items[i + 1]), dtype) for i in range(0, len(items) - 1, 2)]
            if len(items) % 2:
                nxt.append(items[-1])
            items = nxt
        return items[0]

    # ------------------------------------------------------------------ arrays
    def array(self, value: Any, dtype: Any) -> np.ndarray:
        """An object array of constant nodes for a concrete array."""
        arr = np.asarray(value, dtype=dtype)
        self.check_size(arr.shape)
        out = np.empty(arr.shape, dtype=object)
        for idx in np.ndindex(arr.shape):
            out[idx] = self.const(arr[idx], dtype)
        return out

    def check_size(self, shape: tuple[int, ...]) -> None:
        if math.prod(shape) > self.max_elements:
            raise Unsupported(f"the objective builds an array of shape {shape}, more than {self.max_elements} elements")

    @staticmethod
    def constant_values(arr: np.ndarray, what: str) -> np.ndarray:
        if any(node.kind != CONST for node in arr.flat):
            raise Unsupported(f"{what} depends on x (only constant indices are supported)")
        return np.asarray([node.value for node in arr.flat], dtype=arr.flat[0].dtype if arr.size else np.int32).reshape(
            arr.shape)

    # ------------------------------------------------------------------ the interpreter
    def run(self, jaxpr: Jaxpr, consts: Sequence[Any], args: Sequence[np.ndarray]) -> list[np.ndarray]:
        env: dict[Any, np.ndarray] = {}
        literal = _jaxpr_types()[1]

        def read(v: Any) -> np.ndarray:
            if isinstance(v, literal):
                return self.array(v.val, v.aval.dtype)
            return env[v]

        for var, c in zip(jaxpr.constvars, consts):
            env[var] = c if isinstance(c, np.ndarray) and c.dtype == object else self.array(c, var.aval.dtype)
        for var, a in zip(jaxpr.invars, args):
            env[var] = a
        for eqn in jaxpr.eqns:
            ins = [read(v) for v in eqn.invars]
            outs = self.equation(eqn, ins)
            for var, val in zip(eqn.outvars, outs):
                if type(var).__name__ != "DropVar":
                    env[var] = val
        return [read(v) for v in jaxpr.outvars]

    def equation(self, eqn: Any, ins: list[np.ndarray]) -> list[np.ndarray]:
        name, params = eqn.primitive.name, eqn.params
        avals = [v.aval for v in eqn.outvars]
        for aval in avals:
            if not hasattr(aval, "shape") or not hasattr(aval, "dtype"):
                raise Unsupported(f"primitive {name!r} returns a non-array value")
            if jnp.issubdtype(aval.dtype, jnp.complexfloating) or jnp.issubdtype(aval.dtype, jax.dtypes.extended):
                raise Unsupported(f"primitive {name!r} returns {aval.dtype} values (complex and key types are not supported)")
            self.check_size(aval.shape)
        if name in _ELEMENTWISE:
            return [self.elementwise(eqn.primitive, params, ins, avals[0])]
        if name in _REDUCTIONS:
            return [self.reduce(_REDUCTIONS[name], ins[0], params["axes"], avals[0].dtype)]
        if name in ("argmax", "argmin"):
            return [self.argreduce(name, ins[0], params["axes"], params["index_dtype"])]
        if name in _CUMULATIVE:
            return [self.cumulative(_CUMULATIVE[name], ins[0], params["axis"], params.get("reverse", False))]
        if name == "dot_general":
            return [self.dot_general(ins[0], ins[1], params, avals[0].dtype)]
        if name == "iota":
            shape, dim = params["shape"], params["dimension"]
            idx = np.arange(shape[dim]).reshape([-1 if i == dim else 1 for i in range(len(shape))])
            return [self.array(np.broadcast_to(idx, shape), params["dtype"])]
        if name == "broadcast_in_dim":
            shape, dims = params["shape"], params["broadcast_dimensions"]
            op = ins[0]
            expanded = op.reshape([op.shape[dims.index(i)] if i in dims else 1 for i in range(len(shape))])
            return [np.broadcast_to(expanded, shape)]
        if name == "reshape":
            if params.get("dimensions") is not None:
                raise Unsupported("reshape with dimensions= is not supported")
            return [ins[0].reshape(params["new_sizes"])]
        if name == "squeeze":
            return [np.squeeze(ins[0], axis=tuple(params["dimensions"]))]
        if name == "expand_dims":
            return [np.expand_dims(ins[0], tuple(params["dimensions"]))]
        if name == "transpose":
            return [np.transpose(ins[0], params["permutation"])]
        if name == "rev":
            return [np.flip(ins[0], axis=tuple(params["dimensions"]))]
        if name == "slice":
            strides = params["strides"] or (1,) * len(params["start_indices"])
            sl = tuple(slice(s, e, k) for s, e, k in zip(params["start_indices"], params["limit_indices"], strides))
            return [ins[0][sl]]
        if name == "concatenate":
            return [np.concatenate(ins, axis=params["dimension"])]
        if name == "split":
            cuts = np.cumsum(params["sizes"])[:-1]
            return list(np.split(ins[0], cuts, axis=params["axis"]))
        if name in _ID_MOVES:
            return [self.move(eqn.primitive, params, ins, avals[0])]
        if name == "cond":
            index = self.constant_values(ins[0], "the branch index of cond")
            branch = params["branches"][int(index)]
            return self.run(branch.jaxpr, branch.consts, ins[1:])
        if name in _CALLS:
            inner = params.get("call_jaxpr") or params.get("jaxpr") or params.get("fun_jaxpr")
            if inner is None:
                raise Unsupported(f"call primitive {name!r} without a jaxpr")
            if isinstance(inner, _jaxpr_types()[0]):
                return self.run(inner.jaxpr, inner.consts, ins)
            return self.run(inner, [], ins)
        raise Unsupported(f"the objective uses primitive {name!r}, which the scalariser does not support")

    def elementwise(self, prim: Any, params: dict, ins: list[np.ndarray], aval: Any) -> np.ndarray:
        if prim.name == "bitcast_convert_type" and np.dtype(params["new_dtype"]).itemsize != ins[0].flat[0].dtype.itemsize:
            raise Unsupported("bitcast_convert_type between types of different sizes")
        shape = tuple(aval.shape)
        ops = [np.broadcast_to(a, shape) for a in ins]
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(shape):
            out[idx] = self.op(prim, params, [a[idx] for a in ops], aval.dtype)
        return out

    def _lanes(self, arr: np.ndarray, axes: Sequence[int]) -> tuple[np.ndarray, tuple[int, ...]]:
        """``arr`` with the reduced ``axes`` moved last and flattened: (kept..., reduced)."""
        axes = tuple(a % arr.ndim for a in axes) if arr.ndim else ()
        kept = [i for i in range(arr.ndim) if i not in axes]
        moved = np.transpose(arr, kept + list(axes))
        kept_shape = tuple(arr.shape[i] for i in kept)
        return moved.reshape(kept_shape + (-1,)), kept_shape

    def reduce(self, prim: Any, arr: np.ndarray, axes: Sequence[int], dtype: Any) -> np.ndarray:
        flat, kept_shape = self._lanes(arr, axes)
        out = np.empty(kept_shape, dtype=object)
        for idx in np.ndindex(kept_shape):
            out[idx] = self.fold(prim, list(flat[idx]), dtype)
        return out

    def argreduce(self, name: str, arr: np.ndarray, axes: Sequence[int], index_dtype: Any) -> np.ndarray:
        """First index of the max (min); NaN counts as the max (min), as in XLA."""
        flat, kept_shape = self._lanes(arr, axes)
        better = lax.gt_p if name == "argmax" else lax.lt_p
        out = np.empty(kept_shape, dtype=object)
        for idx in np.ndindex(kept_shape):
            items = list(flat[idx])
            best, best_i = items[0], self.const(0, index_dtype)
            for i, v in enumerate(items[1:], start=1):
                dt = v.dtype
                v_nan = self.op(lax.ne_p, {}, (v, v), np.bool_)
                best_nan = self.op(lax.ne_p, {}, (best, best), np.bool_)
                beats = self.op(better, {}, (v, best), np.bool_)
                nan_wins = self.op(lax.and_p, {}, (v_nan, self.op(lax.not_p, {}, (best_nan,), np.bool_)), np.bool_)
                take = self.op(lax.or_p, {}, (beats, nan_wins), np.bool_)
                best = self.op(lax.select_n_p, {}, (take, best, v), dt)
                best_i = self.op(lax.select_n_p, {}, (take, best_i, self.const(i, index_dtype)), np.dtype(index_dtype))
            out[idx] = best_i
        return out

    def cumulative(self, prim: Any, arr: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
        moved = np.moveaxis(arr, axis, -1)
        if reverse:
            moved = moved[..., ::-1]
        out = np.empty(moved.shape, dtype=object)
        for idx in np.ndindex(moved.shape[:-1]):
            acc = None
            for k, v in enumerate(moved[idx]):
                acc = v if acc is None else self.op(prim, {}, (acc, v), v.dtype)
                out[idx + (k,)] = acc
        if reverse:
            out = out[..., ::-1]
        return np.moveaxis(out, -1, axis)

    def dot_general(self, lhs: np.ndarray, rhs: np.ndarray, params: dict, dtype: Any) -> np.ndarray:
        (lc, rc), (lb, rb) = params["dimension_numbers"]
        lf = [i for i in range(lhs.ndim) if i not in lc and i not in lb]
        rf = [i for i in range(rhs.ndim) if i not in rc and i not in rb]
        L = np.transpose(lhs, list(lb) + lf + list(lc))
        R = np.transpose(rhs, list(rb) + rf + list(rc))
        bshape = tuple(lhs.shape[i] for i in lb)
        lfs, rfs = tuple(lhs.shape[i] for i in lf), tuple(rhs.shape[i] for i in rf)
        L = L.reshape(bshape + lfs + (-1,))
        R = R.reshape(bshape + rfs + (-1,))
        dtype = np.dtype(dtype)
        out = np.empty(bshape + lfs + rfs, dtype=object)
        for b in np.ndindex(bshape):
            for i in np.ndindex(lfs):
                for k in np.ndindex(rfs):
                    terms = []
                    for a, c in zip(L[b + i], R[b + k]):
                        a, c = self._convert(a, dtype), self._convert(c, dtype)
                        terms.append(self.op(lax.mul_p, {}, (a, c), dtype))
                    out[b + i + k] = self.fold(lax.add_p, terms, dtype)
        return out

    def _convert(self, node: Node, dtype: np.dtype) -> Node:
        if node.dtype == dtype:
            return node
        return self.op(lax.convert_element_type_p, {"new_dtype": dtype, "weak_type": False, "sharding": None},
                       (node,), dtype)

    def move(self, prim: Any, params: dict, ins: list[np.ndarray], aval: Any) -> np.ndarray:
        """A primitive that only moves elements (pad, gather, scatter, dynamic slices), applied to
        integer ids of the data elements: its output ids say which node lands where."""
        name = prim.name
        data_pos = {"pad": (0, 1), "gather": (0,), "scatter": (0, 2), "dynamic_slice": (0,),
                    "dynamic_update_slice": (0, 1)}[name]
        flat: list[Node] = []
        args: list[Any] = []
        for pos, arr in enumerate(ins):
            if pos in data_pos:
                ids = np.arange(len(flat), len(flat) + arr.size, dtype=np.int32).reshape(arr.shape)
                flat.extend(arr.flat)
                args.append(ids)
            else:
                args.append(self.constant_values(arr, f"an index operand of {name}"))
        if name == "scatter" and params.get("update_jaxpr") is not None and len(getattr(params["update_jaxpr"], "eqns", ())):
            raise Unsupported("scatter with a combining function (scatter-add and the like)")
        with jax.ensure_compile_time_eval():
            out_ids = np.asarray(prim.bind(*args, **params))
        if out_ids.shape != tuple(aval.shape):
            raise Unsupported(f"{name}: unexpected output shape {out_ids.shape}")
        if out_ids.size and (out_ids.min() < 0 or out_ids.max() >= len(flat)):
            raise Unsupported(f"{name} reads out of bounds (its fill value is not supported)")
        table = np.empty(len(flat), dtype=object)
        table[:] = flat
        return table[out_ids] if out_ids.size else np.empty(aval.shape, dtype=object)


def scalarise(f: Callable[[jax.Array], jax.Array], n: int, dtype: Any, *, max_nodes: int = MAX_NODES,
              max_elements: int = MAX_ELEMENTS) -> ScalarGraph:
    """The :class:`ScalarGraph` of ``f`` (ONE point of shape ``(n,)`` and ``dtype`` -> a scalar).

    Raises :class:`Unsupported` (with the reason) when ``f`` uses something the graph cannot
    express; nothing is compiled.
    """
    dtype = np.dtype(dtype)
    closed = jax.make_jaxpr(f)(jax.ShapeDtypeStruct((n,), dtype))
    if len(closed.jaxpr.outvars) != 1 or closed.jaxpr.outvars[0].aval.shape != ():
        raise Unsupported("the objective must return one scalar")
    b = _Builder(n, dtype, max_nodes, max_elements)
    x = np.empty((n,), dtype=object)
    x[:] = b.inputs
    (out,) = b.run(closed.jaxpr, closed.consts, [x])
    root = out[()]
    # Keep only what the output needs (dead code would still cost registers in a kernel).
    live: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node.kind == OP and node.id not in live:
            live.add(node.id)
            stack.extend(node.args)
    ops = [op for op in b.ops if op.id in live]
    renumber = {op.id: n + k for k, op in enumerate(ops)}
    for op in ops:
        op.id = renumber[op.id]
    return ScalarGraph(b.inputs, ops, root)
