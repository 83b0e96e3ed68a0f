"""The ``nbeta`` sequential swap attempts of :class:`~multiwalk.ReplicaExchange`'s exchange in ONE Pallas kernel.

The XLA form of an exchange is a loop of ``nbeta`` dependent attempts, each a few gathers and
selects over ``(nseq, nbeta)`` values: on a GPU each is a kernel of microseconds of launch latency
and almost no work, so a small run's iteration is bound by launches.  Here each Pallas program
owns ``block`` sequences (rows), keeps their chi2 values and the permutation in registers as
``(block, nbp)`` tiles (``nbp``: ``nbeta`` padded to a power of two; the padded columns are never
touched, as pairs ``k`` lie in ``[0, nbeta - 2]``), and runs every attempt without leaving the kernel.

The arithmetic is the XLA form's, in its order: for pair ``k`` of attempt ``a`` and each row,
``swap = log_u[a] <= (-0.5 * (beta[k+1] - beta[k])) * (c_k - c_k1)`` (NaN never swaps), then the two
values of ``fun`` and ``perm`` trade places where ``swap``, and ``tries[k] += 1``,
``swaps[k] += swap``.  No gathers: the value at column ``k`` of a row is the integer sum of
``where(cols == k, row, 0)`` over the row, on the values' bit patterns (one non-zero term, so
exact for every value: NaN payloads, +-inf and -0.0 come out as they went in), and
``beta[k]`` likewise.  The random draws are made by the caller exactly as the XLA form makes
them.  Off GPUs the kernel runs in Pallas' interpret mode (tests: correct, not fast).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .. import kernels
from ..kernels import KernelPlan

__all__ = ["plan", "swap_attempts", "DEFAULT_BLOCK", "DEFAULT_WARPS"]

# One sequence and one warp a program: its nbeta attempts are sequential, so a program is fastest
# where every reduction over a row stays within one warp, and the sequences spread over the
# multiprocessors.  An H100, 32 temperatures, one launch: 14 sequences 8.3 us (blocks of 16 and
# 4 warps: 23 us), 32768 sequences 62 us (blocks of 128 and 4 warps: 90 us; the best of 24
# shapes tried, blocks of 4 and 4 warps, 61 us).
DEFAULT_BLOCK = 1  # sequences per Pallas program (a power of two)
DEFAULT_WARPS = 1  # warps per program


def plan(kernel: str, split: bool, exchange_unroll: int | None = None) -> KernelPlan:
    """Which form runs ``ReplicaExchange(kernel=kernel)``'s swap attempts, and why; ``split``: the
    state is split over several devices (the kernel, one custom call XLA cannot split, then runs
    under ``shard_map`` on each device's sequences: ``ReplicaExchange._swap_kernel``);
    ``exchange_unroll`` given: the XLA form it shapes runs under ``"auto"`` (ReplicaExchange
    refuses it with ``"pallas"``).  Never raises; ``kernel="pallas"`` that cannot run warns."""
    name, on_gpu = kernels.backend()
    what = "the exchange's swap kernel"
    decided = kernels.xla_plan(kernel, name, on_gpu, what)
    if decided is not None:
        return decided
    if kernel == "auto" and exchange_unroll is not None:
        return kernels.KernelPlan(False, False, f"exchange_unroll={exchange_unroll} was given: it unrolls the "
                                                "XLA form of the swap attempts, which kernel='auto' then runs")
    return kernels.pallas_plan(kernel, name, on_gpu, what, detail=", on each device's sequences" if split else "",
                               split=split)


def _bits_dtype(dtype: Any) -> Any:
    """The integer type of ``dtype``'s size (the values' bit patterns move through it)."""
    return {2: jnp.int16, 4: jnp.int32, 8: jnp.int64}[jnp.dtype(dtype).itemsize]


def swap_attempts(
    fun: jax.Array, pairs: jax.Array, log_u: jax.Array, beta: jax.Array, *,
    block: int = DEFAULT_BLOCK, num_warps: int = DEFAULT_WARPS, interpret: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """``nbeta`` sequential swap attempts of every sequence in ONE kernel launch.

    ``fun`` (nseq, nbeta) chi2 of each temperature; ``pairs`` (nbeta, nseq) int, attempt ``a``'s
    pair ``k`` in ``[0, nbeta - 2]``; ``log_u`` (nbeta, nseq) the log of its uniform; ``beta``
    (nbeta,) the ladder.  Returns ``(fun, perm, tries, swaps)``: the chi2 values after the
    attempts (nseq, nbeta), the permutation (int32, nseq x nbeta: column j now holds what was at
    ``perm[:, j]``), and per pair the attempts and accepted swaps (int32, nseq x (nbeta - 1)).
    """
    from jax.experimental import pallas as pl

    ns, nb = fun.shape
    nbp = kernels.next_power_of_two(nb)
    b, nsp, programs = kernels.row_blocks(ns, block)
    bits_t = _bits_dtype(fun.dtype)
    # bit patterns, padded to whole blocks (rows: copies of the last, computed then dropped) and
    # to nbp columns (never read: pairs stay below nbeta - 1)
    bits = jax.lax.bitcast_convert_type(fun, bits_t)
    (bits,) = kernels.pad_rows([bits], nsp)
    bits = jnp.pad(bits, ((0, 0), (0, nbp - nb)))
    pairs_t, log_u_t = (kernels.pad_rows([a.T], nsp)[0].T for a in (pairs.astype(jnp.int32), log_u))
    beta_p = jnp.pad(beta, (0, nbp - nb))
    i32 = jnp.int32
    out_shape = (
        jax.ShapeDtypeStruct((nsp, nbp), bits_t),
        jax.ShapeDtypeStruct((nsp, nbp), i32),
        jax.ShapeDtypeStruct((nsp, nbp), i32),
        jax.ShapeDtypeStruct((nsp, nbp), i32),
    )
    out = pl.pallas_call(
        _swaps_kernel(nb, nbp, b, fun.dtype), out_shape=out_shape, grid=(programs,), interpret=interpret,
        name="replica_exchange_swaps", **kernels.compiler_params(num_warps, interpret),
    )(bits, pairs_t, log_u_t, beta_p)
    bits_out, perm, tries, swaps = (a[:ns] for a in out)
    fun_out = jax.lax.bitcast_convert_type(bits_out[:, :nb], fun.dtype)
    return fun_out, perm[:, :nb], tries[:, : nb - 1], swaps[:, : nb - 1]


def _at_column(values: jax.Array, hit: jax.Array) -> jax.Array:
    """Per row, the one value of integer ``values`` (rows, cols) where ``hit`` is true: a sum of
    one term and zeros, exact (a gather-free read of column k)."""
    return jnp.sum(jnp.where(hit, values, jnp.zeros_like(values)), axis=1, dtype=values.dtype)


def _swaps_kernel(nb: int, nbp: int, b: int, dtype: Any) -> Callable[..., None]:
    """The body of :func:`swap_attempts`: ``nb`` attempts of ``b`` sequences per program."""
    from jax.experimental import pallas as pl

    bits_t = _bits_dtype(dtype)

    def kernel(bits_ref, pairs_ref, log_u_ref, beta_ref, bits_out, perm_out, tries_out, swaps_out):  # noqa: ANN001
        rows = pl.ds(pl.program_id(0) * b, b)
        all_cols = pl.ds(0, nbp)
        cols = jnp.arange(nbp, dtype=jnp.int32)[None, :]  # (1, nbp); a 1-D iota, which Triton has
        beta_bits = jax.lax.bitcast_convert_type(beta_ref[all_cols], _bits_dtype(beta_ref.dtype))[None, :]
        beta_bits = jnp.broadcast_to(beta_bits, (b, nbp))

        def beta_at(hit: jax.Array) -> jax.Array:
            return jax.lax.bitcast_convert_type(_at_column(beta_bits, hit), beta_ref.dtype)

        def attempt(a: jax.Array, carry: tuple) -> tuple:
            bits, perm, tries, swaps = carry
            k = pairs_ref[a, rows][:, None]  # (b, 1)
            at_k, at_k1 = cols == k, cols == k + 1
            c_k_bits, c_k1_bits = _at_column(bits, at_k), _at_column(bits, at_k1)
            c_k, c_k1 = (jax.lax.bitcast_convert_type(v, dtype) for v in (c_k_bits, c_k1_bits))
            swap = log_u_ref[a, rows] <= -0.5 * (beta_at(at_k1) - beta_at(at_k)) * (c_k - c_k1)  # NaN never swaps
            move_k, move_k1 = at_k & swap[:, None], at_k1 & swap[:, None]
            bits = jnp.where(move_k, c_k1_bits[:, None], jnp.where(move_k1, c_k_bits[:, None], bits))
            p_k, p_k1 = _at_column(perm, at_k)[:, None], _at_column(perm, at_k1)[:, None]
            perm = jnp.where(move_k, p_k1, jnp.where(move_k1, p_k, perm))
            return bits, perm, tries + at_k.astype(jnp.int32), swaps + move_k.astype(jnp.int32)

        zeros = jnp.zeros((b, nbp), jnp.int32)
        init = (bits_ref[rows, all_cols].astype(bits_t), jnp.broadcast_to(cols, (b, nbp)), zeros, zeros)
        bits, perm, tries, swaps = jax.lax.fori_loop(0, nb, attempt, init)
        bits_out[rows, all_cols] = bits
        perm_out[rows, all_cols] = perm
        tries_out[rows, all_cols] = tries
        swaps_out[rows, all_cols] = swaps

    return kernel
