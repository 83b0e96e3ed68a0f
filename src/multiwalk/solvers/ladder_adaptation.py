"""The temperature ladder of replica exchange: round trips across it, and its adaptation.

Round trips.  A replica makes a round trip when it goes from the coldest temperature to the
hottest and back to the coldest.  Each replica carries a phase: 0 (has not been at the coldest
yet), ``GOING_HOT`` (its last end was the coldest) or ``GOING_COLD`` (it went from the coldest to
the hottest and has not come back).  Reaching the coldest in phase ``GOING_COLD`` completes one
trip.  The number of round trips per iteration measures how well the ladder mixes the modes
the hot chains find into the cold chain.

Adaptation (Vousden, Farr & Mandel 2016, MNRAS 455, 1919; the rule ptemcee implements).  With
``T_i = 1 / beta_i`` and ``S_i = log(T_{i+1} - T_i)`` the log spacing of pair ``(i, i+1)``, each
burn-in iteration ``t`` moves

    S_i += kappa(t) * (A_i - A_{i+1}),     kappa(t) = 1 / nu * t0 / (t + t0)

for the inner pairs (the coldest and hottest temperatures stay), where ``A_i`` is the
acceptance of swaps in pair ``(i, i+1)``, ``nu`` the ``adaptation_time`` and ``t0`` the
``adaptation_lag`` (iterations).  A pair that swaps more often than the next one widens; in the
fixed point every pair swaps at the same rate.  ``A_i`` here is the Metropolis probability of
swapping the pair at the current chi2 values, ``min(1, exp(-(beta_{i+1} - beta_i)(chi2_i -
chi2_{i+1}) / 2))``, averaged over the ``nseq`` sequences: every pair gets a value every
iteration (the exchange attempts pick random pairs, so an iteration's realised swaps leave
some pairs untried), and one ladder serves all sequences, as ptemcee's serves all walkers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["GOING_COLD", "GOING_HOT", "adapt_ladder", "pair_acceptance", "track_round_trips"]

GOING_HOT = 1  # the replica's last end of the ladder was the coldest temperature
GOING_COLD = 2  # it went from the coldest to the hottest and heads back


def track_round_trips(trip_phase: jax.Array, label: jax.Array, round_trips: jax.Array,
                      count: bool | jax.Array) -> tuple[jax.Array, jax.Array]:
    """Update each replica's phase after an exchange; ``(trip_phase, round_trips)``.

    ``trip_phase`` (nseq, nbeta) int8 indexed by replica; ``label`` (nseq, nbeta) int32 the
    replica at each temperature, coldest first; ``round_trips`` (nseq,) int32 trips completed,
    incremented only when ``count`` (a bool, or a traced () bool: the sampling phase; burn-in only
    moves the phases).
    """
    # one-hot masks over the (few) replicas of a row, not indexed gathers and scatters: elementwise
    # along the sequences, so a run split over devices by sequence moves nothing between them
    replicas = jnp.arange(label.shape[1])
    is_hot = replicas == label[:, -1:]  # (nseq, nbeta): the replica at the hottest temperature
    is_cold = replicas == label[:, :1]  # the replica at the coldest
    trip_phase = jnp.where(is_hot & (trip_phase == GOING_HOT), jnp.asarray(GOING_COLD, trip_phase.dtype), trip_phase)
    completed = jnp.any(is_cold & (trip_phase == GOING_COLD), axis=1)
    trip_phase = jnp.where(is_cold, jnp.asarray(GOING_HOT, trip_phase.dtype), trip_phase)
    return trip_phase, round_trips + (completed & count).astype(round_trips.dtype)


def pair_acceptance(betas: jax.Array, fun: jax.Array) -> jax.Array:
    """The probability of swapping each adjacent pair at the current chi2, averaged over the
    sequences: ``(nbeta - 1,)`` from ``betas`` (nbeta,) and ``fun`` (nseq, nbeta).  A NaN chi2
    never swaps (probability 0); +inf at the colder end always does, as in the exchange."""
    log_a = -0.5 * (betas[1:] - betas[:-1]) * (fun[:, :-1] - fun[:, 1:])
    a = jnp.where(jnp.isnan(log_a), 0.0, jnp.exp(jnp.minimum(log_a, 0.0)))
    return jnp.mean(a, axis=0)


def adapt_ladder(betas: jax.Array, fun: jax.Array, t: jax.Array, adaptation_lag: int,
                 adaptation_time: float) -> jax.Array:
    """One burn-in iteration's move of the ladder (the module docstring's rule).

    ``betas`` (nbeta,) coldest first, ``nbeta >= 3``; ``fun`` (nseq, nbeta) chi2 after the
    exchange; ``t`` () iterations of burn-in done.  Returns the new ``betas`` (nbeta,), the two
    ends unchanged and the inner values strictly decreasing (every spacing stays positive).
    """
    dt = betas.dtype
    accept = pair_acceptance(betas, fun)
    kappa = (adaptation_lag / (t.astype(dt) + adaptation_lag)) / adaptation_time
    temps = 1.0 / betas
    # The hottest pair's spacing is whatever is left to reach T_hottest: only the first
    # nbeta - 2 spacings move, and the last absorbs the change, as in ptemcee.
    spacing = jnp.diff(temps)[:-1] * jnp.exp(kappa * (accept[:-1] - accept[1:]))
    inner = temps[0] + jnp.cumsum(spacing)
    # Keep the inner temperatures below the hottest one (a long jump early in the burn-in
    # could pass it); the factor leaves them strictly ordered.
    inner = jnp.minimum(inner, temps[-1] - (temps[-1] - temps[0]) * 1e-6 * jnp.arange(len(inner), 0, -1))
    return jnp.concatenate([betas[:1], (1.0 / inner).astype(dt), betas[-1:]])
