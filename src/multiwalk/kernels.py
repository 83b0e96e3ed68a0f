"""What the Pallas kernel modules share: the plan of which form runs, and its small helpers.

Six solvers have a Pallas (Triton) form beside their XLA form
(:mod:`~multiwalk.solvers.pattern_search_kernel`, :mod:`~multiwalk.solvers.exchange_kernel`,
:mod:`~multiwalk.solvers.lbfgs_kernel`, :mod:`~multiwalk.deconv.coordinate_descent_kernel`,
:mod:`~multiwalk.deconv.clean_kernel`,
:mod:`~multiwalk.solvers.replica_exchange_swaps_kernel`: the replica-exchange swap attempts).
Each is chosen by the same option (``kernel="auto" | "xla" | "pallas"``) and reports its choice
the same way (``stats["kernel"]``, ``stats["kernel_reason"]``): that part lives here.  What each
kernel supports (sizes, spaces, objectives) stays in its own module's ``plan``.

The kernel modules split a long kernel alike: the public function prepares the launch (padding
to whole blocks, constants in the state's dtype, output shapes) and calls ``pl.pallas_call`` on a
body made by a ``_..._kernel`` factory beside it, and the body's steps (a coordinate move, a
Metropolis step, the statistics) are plain Python helpers, which trace inline into the one
kernel.  A short body stays inside its function.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

if TYPE_CHECKING:  # scalarise is imported where an objective is scalarised: an XLA run never needs it
    from .scalarise import Node, ScalarGraph

__all__ = [
    "KERNELS", "GPU_BACKENDS", "KernelPlan", "check_kernel_option", "check_launch_options", "backend",
    "xla_plan", "pallas_plan", "fallback_plan", "objective_plan", "scalarise_objective", "triton_lacks", "lowering_reason",
    "next_power_of_two", "is_power_of_two", "row_blocks", "pad_rows", "compiler_params", "blocked_while", "LaneValues",
]

log = logging.getLogger("multiwalk")

KERNELS = ("auto", "xla", "pallas")  # the values of every solver's ``kernel`` option
GPU_BACKENDS = ("gpu", "cuda", "rocm")  # jax.default_backend() names under which "auto" picks Pallas


@dataclass(frozen=True)
class KernelPlan:
    """Which form runs a solver's step, and why.

    ``use_pallas``: the Pallas kernel (else the XLA form); ``interpret``: in Pallas' interpret
    mode (off GPUs, for tests); ``reason``: one line for ``stats["kernel_reason"]``; ``graph``:
    the scalarised objective the kernel evaluates (kernels that take one); ``split``: one problem
    split over devices (the kernel runs under shard_map on each device's part).
    """

    use_pallas: bool
    interpret: bool
    reason: str
    graph: ScalarGraph | None = None
    split: bool = False

    @property
    def name(self) -> str:
        """``stats["kernel"]``: ``"xla"``, ``"pallas"`` or ``"pallas (interpret mode, ...)"``."""
        if not self.use_pallas:
            return "xla"
        notes = (["interpret mode"] if self.interpret else []) + (["split over devices"] if self.split else [])
        return f"pallas ({', '.join(notes)})" if notes else "pallas"


def check_kernel_option(kernel: Any) -> None:
    """Raise ValueError unless ``kernel`` is one of :data:`KERNELS` (a solver's ``__post_init__``)."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")


def check_launch_options(options: Any, names: tuple[str, ...] = ("kernel_block", "kernel_warps"), why: str = "") -> None:
    """Raise ValueError unless each option ``names`` of ``options`` is None or a power of two >= 1.

    ``why``: words put after "power of two" in the message (e.g. ``" (Triton needs that)"``).
    """
    from .solvers.base import check_int_option  # here, not at the top: solvers import this module

    for name in names:
        value = getattr(options, name)
        check_int_option(name, value, 1, none_ok=True)
        if value is not None and not is_power_of_two(value):
            raise ValueError(f"{name} must be a power of two{why}, got {value}")


def backend(gpu_backends: tuple[str, ...] = GPU_BACKENDS) -> tuple[str, bool]:
    """``(jax.default_backend(), whether it is one of gpu_backends)``."""
    name = jax.default_backend()
    return name, name in gpu_backends


def xla_plan(kernel: str, name: str, on_gpu: bool, what: str = "the Pallas kernel") -> KernelPlan | None:
    """The plan the option alone decides, or None: ``"xla"`` asked for, or ``"auto"`` off a GPU."""
    if kernel == "xla":
        return KernelPlan(False, False, "kernel='xla' was asked for")
    if kernel == "auto" and not on_gpu:
        return KernelPlan(False, False, f"kernel='auto' uses {what} on GPUs only (backend: {name})")
    return None


def pallas_plan(
    kernel: str, name: str, on_gpu: bool, what: str = "the Pallas kernel", graph: ScalarGraph | None = None,
    detail: str = "", split: bool = False,
) -> KernelPlan:
    """The plan that runs the kernel: on the GPU, else in interpret mode; ``detail`` ends the reason."""
    where = "on the GPU" if on_gpu else f"in interpret mode (backend: {name}; for tests, slow)"
    return KernelPlan(True, not on_gpu, f"kernel={kernel!r}: {what} {where}{detail}", graph, split)


def fallback_plan(kernel: str, solver: str, reason: str) -> KernelPlan:
    """The XLA form because the kernel cannot run (``reason``): a RuntimeWarning when
    ``kernel="pallas"`` was asked for, else a debug log line."""
    reason += "; using the XLA form"
    if kernel == "pallas":
        # One location, so Python's default filter shows it once, however often the plan is made.
        warnings.warn(f"{solver}(kernel='pallas'): {reason}", RuntimeWarning, stacklevel=1)
    else:
        log.debug("%s kernel: %s", solver, reason)
    return KernelPlan(False, False, reason)


def objective_plan(
    kernel: str, solver: str, objective: Callable[[jax.Array], jax.Array], n: int, dtype: Any,
    refusal: Callable[[], str | None], too_large: Callable[[ScalarGraph], str | None],
) -> KernelPlan:
    """The plan of a kernel that evaluates ``objective`` (of ONE point of ``n`` values) through
    its scalarised graph.  Checked in this order: the option alone (:func:`xla_plan`);
    ``refusal()``: why this run does not suit the kernel, or None; scalarising the objective;
    ``too_large(graph)``: the kernel's own size limits, or None; the Triton lowering
    (:func:`lowering_reason`).  The first reason found: the XLA form (:func:`fallback_plan`);
    none: the kernel (:func:`pallas_plan`).  Never raises.
    """
    name, on_gpu = backend()
    decided = xla_plan(kernel, name, on_gpu)
    if decided is not None:
        return decided
    reason = refusal()
    graph = None
    if reason is None:
        graph, reason = scalarise_objective(objective, n, dtype)
    if graph is not None:
        reason = too_large(graph) or lowering_reason(graph, on_gpu)
    if reason is not None:
        return fallback_plan(kernel, solver, reason)
    return pallas_plan(kernel, name, on_gpu, graph=graph)


def scalarise_objective(f: Callable[[jax.Array], jax.Array], n: int, dtype: Any) -> tuple[ScalarGraph | None, str | None]:
    """``(graph, None)`` for ``f`` of one point of ``n`` values, or ``(None, why not)``; never raises."""
    from .scalarise import Unsupported, scalarise

    try:
        return scalarise(f, n, dtype), None
    except Unsupported as err:
        return None, f"the objective cannot be scalarised: {err}"
    except Exception as err:  # noqa: BLE001 - never fail a run over the faster form
        return None, f"scalarising the objective failed: {type(err).__name__}: {err}"


def triton_lacks(graph: ScalarGraph) -> list[str]:
    """Primitives of ``graph`` that the Pallas Triton lowering has no rule for ([] if unknown)."""
    try:
        from jax._src.pallas.triton.lowering import triton_lowering_rules
    except Exception:  # noqa: BLE001 - a private module: if it moved, let compilation decide
        return []
    return sorted({p.name for p in graph.primitives if p not in triton_lowering_rules})


def lowering_reason(graph: ScalarGraph, on_gpu: bool) -> str | None:
    """Why ``graph`` cannot be lowered by Triton on this backend (primitives it has no rule
    for), or None; only checked on a GPU (interpret mode lowers anything)."""
    lacking = triton_lacks(graph) if on_gpu else []
    return f"Pallas' Triton lowering has no rule for {', '.join(lacking)}" if lacking else None


def next_power_of_two(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    return 1 << max(0, (n - 1).bit_length())


def is_power_of_two(n: int) -> bool:
    """Whether ``n`` is 1, 2, 4, ... (Triton's block shapes must be)."""
    return n > 0 and n & (n - 1) == 0


def row_blocks(n: int, block: int) -> tuple[int, int, int]:
    """``(b, n_padded, programs)`` for ``n`` rows, one Pallas program per ``b`` rows: ``b`` is
    ``block`` (a power of two), or less for few rows; ``n_padded = programs * b >= n``."""
    b = min(block, next_power_of_two(n))
    n_padded = -(-n // b) * b
    return b, n_padded, n_padded // b


def pad_rows(arrays: Any, n_padded: int) -> list[jax.Array]:
    """Each array (rows on axis 0) padded to ``n_padded`` rows with copies of its last row: whole
    blocks for the kernel, whose extra rows are computed and then dropped (``a[:n]``)."""
    return [
        a if a.shape[0] == n_padded else jnp.pad(a, ((0, n_padded - a.shape[0]),) + ((0, 0),) * (a.ndim - 1), mode="edge")
        for a in arrays
    ]


def compiler_params(num_warps: int, interpret: bool) -> dict[str, Any]:
    """``pallas_call`` keyword arguments for the Triton launch (none in interpret mode)."""
    if interpret:
        return {}
    from jax.experimental.pallas import triton as plgpu

    return {"compiler_params": plgpu.CompilerParams(num_warps=num_warps, num_stages=1)}


def blocked_while(
    first: Callable[[Any, jax.Array], Any], rest: Callable[[Any, jax.Array], tuple[Any, jax.Array]],
    done: Callable[[Any], jax.Array], state: Any, n: jax.Array, trip: int,
) -> tuple[Any, jax.Array]:
    """Up to ``n`` steps, fewer once ``done(state)``, ``trip`` of them per trip of a ``while_loop``
    (a kernel form's run_chunk): a trip makes one call of ``first(state, live)``, then ``trip - 1``
    calls of ``rest(state, may_run)`` in an inner loop of that fixed trip count.  On a GPU, XLA
    reads the outer loop's predicate back on the host once a trip (the device waits for the host);
    the inner loop's count is known, so it reads none.

    ``rest`` is given ``may_run`` (fewer than ``n`` steps so far) and returns ``(state, ran)``: it
    runs unless ``done`` (or it waits for work only ``first`` does, until the next trip), and
    where it does not it changes nothing.  Returns ``(state, steps run)``, those of a loop of one
    step a trip."""

    def inner(_: jax.Array, carry: tuple) -> tuple:
        i, s = carry
        s, ran = rest(s, i < n)
        return i + ran.astype(jnp.int32), s

    def body(carry: tuple) -> tuple:
        i, s = carry
        s = first(s, jnp.asarray(True))  # the loop's predicate, i < n and not done, holds here
        return jax.lax.fori_loop(0, trip - 1, inner, (i + 1, s))

    n_run, state = jax.lax.while_loop(lambda carry: (carry[0] < n) & ~done(carry[1]), body,
                                      (jnp.asarray(0, jnp.int32), state))
    return state, n_run


class LaneValues:
    """Inside a kernel body of one value per lane: constants as ``[block]`` vectors of ``dtype``.

    ``const(node)``: a constant of the scalarised objective (made once per node until
    :meth:`clear`; Triton folds it); ``full(v)``: ``v`` in every lane.  Call :meth:`clear` on
    entering a loop body, so that values made inside it stay in it.
    """

    def __init__(self, block: int, dtype: Any) -> None:
        self.block = block
        self.dtype = dtype
        self._consts: dict[int, jax.Array] = {}

    def const(self, node: Node) -> jax.Array:
        key = id(node)
        if key not in self._consts:
            self._consts[key] = jnp.full((self.block,), node.value, node.dtype)
        return self._consts[key]

    def full(self, v: Any, dtype: Any = None) -> jax.Array:
        return jnp.full((self.block,), v, self.dtype if dtype is None else dtype)

    def clear(self) -> None:
        self._consts.clear()
