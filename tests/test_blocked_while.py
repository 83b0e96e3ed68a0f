"""``kernels.blocked_while``, the deconvolution kernel forms' loop: ``trip`` steps a trip of a
``while_loop``, the later ones in an inner loop of fixed trip count.  Whatever ``n``, the trip,
where the run stops and where a later step waits for the next trip's first, it runs the steps a
loop of one step a trip runs: ``min(n, steps until done)``.  Integer counters: exact."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import pytest

from multiwalk.kernels import blocked_while


def run(n: int, trip: int, stop: int | None, wait: int | None) -> tuple[int, int, int]:
    """(steps counted by the state, steps blocked_while returns, first steps) for a state that
    counts its steps, done at ``stop`` steps, whose later steps wait where the count is a multiple
    of ``wait`` (the first step of a trip runs there)."""
    limit = stop if stop is not None else 1 << 30

    def first(s: tuple, live: jax.Array) -> tuple:
        count, firsts = s
        return count + live.astype(jnp.int32), firsts + live.astype(jnp.int32)

    def rest(s: tuple, may_run: jax.Array) -> tuple:
        count, firsts = s
        ran = may_run & (count < limit)
        if wait is not None:
            ran = ran & (count % wait != 0)
        return (count + ran.astype(jnp.int32), firsts), ran

    def done(s: tuple) -> jax.Array:
        return s[0] >= limit

    @jax.jit
    def go(n: jax.Array) -> tuple:
        return blocked_while(first, rest, done, (jnp.int32(0), jnp.int32(0)), n, trip)

    (count, firsts), n_run = go(jnp.int32(n))
    return int(count), int(n_run), int(firsts)


@pytest.mark.parametrize("n, trip, stop, wait", list(itertools.product(
    [0, 1, 2, 7, 10, 23], [1, 3, 5], [None, 4, 11], [None, 4])))
def test_runs_the_steps_of_one_step_a_trip(n, trip, stop, wait):
    count, n_run, firsts = run(n, trip, stop, wait)
    expected = min(n, stop if stop is not None else n)
    assert count == n_run == expected
    if wait is None and expected:
        # no step waits: a trip's first step, then trip - 1 more while any are left
        assert firsts == -(-expected // trip)
