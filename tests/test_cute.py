"""Tests of `multiwalk.functions.cute`: the seed's five CUTE test functions (Extended Rosenbrock,
Beale, Powell, Wood, Trigonometric).

The reference below is written here independently, in plain NumPy float64 with loops over blocks
exactly as Moré, Garbow & Hillstrom (1981) write the sums (1-based indices translated to 0-based),
sharing nothing with the library.

Tolerances:
* float64 (under ``jax.enable_x64``): library vs reference to rtol 1e-13 — any wrong constant, index
  or missing term is an O(1) relative error.
* float32 hand values: rtol 1e-6 (about 8 eps32; every hand value is a sum of a few exact terms).
* gradients: jax.grad vs central differences with step h = 1e-6 (1 + |x_k|) in float64; truncation
  error ~h^2 |f'''| and rounding ~eps |f| / h, both below 1e-8 of the scale here, and we allow
  1e-6 (1 + max|g|).
* n = 10**6 in float32: rtol 1e-4 against a closed form (sums of 10**6 terms in float32).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from multiwalk.functions import cute

NAMES = ["extended_rosenbrock", "extended_beale", "extended_powell", "extended_wood", "extended_trigonometric"]
SMALL_N = {
    "extended_rosenbrock": [2, 4, 10],
    "extended_beale": [2, 6],
    "extended_powell": [4, 8],
    "extended_wood": [4, 12],
    "extended_trigonometric": [1, 2, 5, 16],
}


# --------------------------------------------------------------------------- the reference (NumPy float64)
def ref_rosenbrock(x):  # MGH (21): f_{2i-1} = 10 (x_{2i} - x_{2i-1}^2), f_{2i} = 1 - x_{2i-1}
    total = 0.0
    for i in range(len(x) // 2):
        a, b = x[2 * i], x[2 * i + 1]
        total += (10.0 * (b - a * a)) ** 2 + (1.0 - a) ** 2
    return total


def ref_beale(x):  # MGH (5): f_k = y_k - x1 (1 - x2^k), y = (1.5, 2.25, 2.625), per block
    total = 0.0
    for i in range(len(x) // 2):
        a, b = x[2 * i], x[2 * i + 1]
        for k, y in enumerate((1.5, 2.25, 2.625), start=1):
            total += (y - a * (1.0 - b**k)) ** 2
    return total


def ref_powell(x):  # MGH (22): x1 + 10 x2, sqrt5 (x3 - x4), (x2 - 2 x3)^2, sqrt10 (x1 - x4)^2
    total = 0.0
    for i in range(len(x) // 4):
        x1, x2, x3, x4 = x[4 * i : 4 * i + 4]
        residuals = (x1 + 10.0 * x2, math.sqrt(5.0) * (x3 - x4), (x2 - 2.0 * x3) ** 2, math.sqrt(10.0) * (x1 - x4) ** 2)
        total += sum(r * r for r in residuals)
    return total


def ref_wood(x):  # MGH (14), per block of 4
    total = 0.0
    for i in range(len(x) // 4):
        x1, x2, x3, x4 = x[4 * i : 4 * i + 4]
        total += (
            100.0 * (x2 - x1**2) ** 2
            + (1.0 - x1) ** 2
            + 90.0 * (x4 - x3**2) ** 2
            + (1.0 - x3) ** 2
            + 10.1 * ((x2 - 1.0) ** 2 + (x4 - 1.0) ** 2)
            + 19.8 * (x2 - 1.0) * (x4 - 1.0)
        )
    return total


def ref_trigonometric(x):  # MGH (26): f_i = n - sum_j cos x_j + i (1 - cos x_i) - sin x_i
    n = len(x)
    sum_cos = sum(math.cos(v) for v in x)
    return sum((n - sum_cos + i * (1.0 - math.cos(x[i - 1])) - math.sin(x[i - 1])) ** 2 for i in range(1, n + 1))


REF = {
    "extended_rosenbrock": ref_rosenbrock,
    "extended_beale": ref_beale,
    "extended_powell": ref_powell,
    "extended_wood": ref_wood,
    "extended_trigonometric": ref_trigonometric,
}


def small_cases():
    return [(name, n) for name in NAMES for n in SMALL_N[name]]


# --------------------------------------------------------------------------- hand-computed values
HAND = [
    # Rosenbrock at (-1.2, 1): 100 (1 - 1.44)^2 + (1 + 1.2)^2 = 100 * 0.1936 + 4.84 = 24.2; two blocks 48.4.
    ("extended_rosenbrock", [-1.2, 1.0], 24.2),
    ("extended_rosenbrock", [-1.2, 1.0, -1.2, 1.0], 48.4),
    # Rosenbrock at (0, 0): 100 * 0 + 1 = 1 per block; at (2, 3): 100 (3 - 4)^2 + (1 - 2)^2 = 101.
    ("extended_rosenbrock", [0.0, 0.0, 2.0, 3.0], 102.0),
    # Beale at (1, 1) (MGH's start): 1.5^2 + 2.25^2 + 2.625^2 = 2.25 + 5.0625 + 6.890625 = 14.203125.
    ("extended_beale", [1.0, 1.0], 14.203125),
    # Beale at (1, 0.8) (the seed's start): 1 - 0.8 = 0.2, 1 - 0.64 = 0.36, 1 - 0.512 = 0.488, so
    # (1.5 - 0.2)^2 + (2.25 - 0.36)^2 + (2.625 - 0.488)^2 = 1.69 + 3.5721 + 4.566769 = 9.828869.
    ("extended_beale", [1.0, 0.8], 9.828869),
    # Beale at (0, 5): x1 = 0 kills the x2 terms: 14.203125 again; plus (3, 0.5) block = 0.
    ("extended_beale", [0.0, 5.0, 3.0, 0.5], 14.203125),
    # Powell at (3, -1, 0, 1): (3 - 10)^2 + 5 (0 - 1)^2 + (-1 - 0)^4 + 10 (3 - 1)^4 = 49 + 5 + 1 + 160 = 215.
    ("extended_powell", [3.0, -1.0, 0.0, 1.0], 215.0),
    # Powell at (1, 0, 0, 0): 1 + 0 + 0 + 10 * 1 = 11; second block (0, 1, 0, 0): 100 + 0 + 1 + 0 = 101.
    ("extended_powell", [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0], 112.0),
    # Wood at (-3, -1, -3, -1): 100 (9 + 1)^2 + (-4)^2 + 90 (9 + 1)^2 + 4^2 + 10.1 (4 + 4) + 19.8 (-2)(-2)
    #   = 10000 + 16 + 9000 + 16 + 80.8 + 79.2 = 19192 (MGH's f(x0)).
    ("extended_wood", [-3.0, -1.0, -3.0, -1.0], 19192.0),
    # Wood at 0: 100 * 0 + 1 + 90 * 0 + 1 + 10.1 (1 + 1) + 19.8 (-1)(-1) = 2 + 20.2 + 19.8 = 42.
    ("extended_wood", [0.0, 0.0, 0.0, 0.0], 42.0),
    # Trigonometric n = 1 at pi/2: (1 - cos) = 1, so ((1 - 0) + 1 * 1 - 1)^2 = 1.
    ("extended_trigonometric", [math.pi / 2], 1.0),
    # n = 2 at (pi/2, 0): n - sum cos = 2 - 1 = 1; f_1 = 1 + 1 * 1 - 1 = 1; f_2 = 1 + 2 * 0 - 0 = 1: f = 2.
    ("extended_trigonometric", [math.pi / 2, 0.0], 2.0),
    # n = 2 at (pi, pi): n - sum cos = 4; f_1 = 4 + 1 * 2 - 0 = 6; f_2 = 4 + 2 * 2 - 0 = 8: f = 36 + 64 = 100.
    ("extended_trigonometric", [math.pi, math.pi], 100.0),
]


@pytest.mark.parametrize(("name", "x", "expected"), HAND)
def test_hand_values(name, x, expected):
    fn = getattr(cute, name)
    value = float(fn(jnp.asarray(x, dtype=jnp.float32)))
    assert value == pytest.approx(expected, rel=1e-6, abs=1e-6)


# --------------------------------------------------------------------------- minimisers
MINIMISERS = [
    ("extended_rosenbrock", np.ones(6)),
    ("extended_beale", np.tile([3.0, 0.5], 3)),
    ("extended_powell", np.zeros(8)),
    ("extended_wood", np.ones(8)),
    ("extended_trigonometric", np.zeros(7)),
]


@pytest.mark.parametrize(("name", "x"), MINIMISERS)
def test_zero_at_minimiser(name, x):
    # Exactly 0: at 1, 0 and (3, 0.5) every term vanishes in binary arithmetic.
    assert float(getattr(cute, name)(jnp.asarray(x, dtype=jnp.float32))) == 0.0


def test_trigonometric_zero_on_2pi_lattice():
    # x = 2 pi (1, -1, 2) is a global minimiser too; float64 rounding of 2 pi k leaves residuals
    # ~ i |sin x_i| <~ 3 * 2.5e-16 * 4 pi, so f < 1e-26; allow 1e-24.
    x = 2.0 * math.pi * np.array([1.0, -1.0, 2.0])
    with jax.enable_x64(True):
        assert 0.0 <= float(cute.extended_trigonometric(jnp.asarray(x))) < 1e-24


@pytest.mark.parametrize("name", NAMES)
def test_table_optimum_is_zero(name):
    entry = cute.TABLE[name]
    n = SMALL_N[name][-1]
    x, f = entry.optimum(n)
    assert x.shape == (n,) and f == 0.0
    assert float(entry.fn(jnp.asarray(x, dtype=jnp.float32))) == 0.0
    assert REF[name](list(x)) == 0.0


# --------------------------------------------------------------------------- starting points
def test_start_points_follow_the_seed():
    np.testing.assert_array_equal(cute.start("extended_rosenbrock", 6), [-1.2, 1, -1.2, 1, -1.2, 1])
    np.testing.assert_array_equal(cute.start("extended_beale", 4), [1, 0.8, 1, 0.8])
    np.testing.assert_array_equal(cute.start("extended_powell", 8), [3, -1, 0, 1, 3, -1, 0, 1])
    np.testing.assert_array_equal(cute.start("extended_wood", 8), [-3, -1, -3, -1, -3, -1, -3, -1])
    np.testing.assert_array_equal(cute.start("extended_trigonometric", 5), np.full(5, 0.2))
    for name in NAMES:
        x = cute.start(name, SMALL_N[name][-1])
        assert x.dtype == np.float64 and isinstance(x, np.ndarray)


def test_start_points_mgh():
    np.testing.assert_array_equal(cute.start("extended_beale", 4, source="mgh"), np.ones(4))
    np.testing.assert_array_equal(cute.start("extended_trigonometric", 5, source="mgh"), np.full(5, 0.2))
    np.testing.assert_array_equal(cute.start("extended_trigonometric", 8, source="mgh"), np.full(8, 0.125))
    for name in ("extended_rosenbrock", "extended_powell", "extended_wood"):
        n = SMALL_N[name][-1]
        np.testing.assert_array_equal(cute.start(name, n, source="mgh"), cute.start(name, n))


def test_seed_printed_wood_is_not_wood():
    """The seed's eq. (6), as printed, is 40.4 at x = 1 — why the module implements MGH's Wood instead."""

    def printed(x1, x2, x3, x4):
        return (
            100 * (x1**2 - x2) ** 2
            + (x1 - 1) ** 2
            + 90 * (x3**2 - x4) ** 2
            + 10.1 * ((x2 - 1) ** 2 + (x4 + 1) ** 2)
            + 19.8 * (x2 - 1) * (x4 - 1)
        )

    assert printed(1.0, 1.0, 1.0, 1.0) == pytest.approx(40.4)
    assert float(cute.extended_wood(jnp.ones(4))) == 0.0


# --------------------------------------------------------------------------- against the NumPy reference
@pytest.mark.parametrize(("name", "n"), small_cases())
def test_matches_reference_float64(name, n):
    rng = np.random.default_rng(n)
    points = [cute.start(name, n), cute.start(name, n, source="mgh"), rng.uniform(-2.0, 2.0, n)]
    fn = getattr(cute, name)
    with jax.enable_x64(True):
        for x in points:
            got = float(fn(jnp.asarray(x, dtype=jnp.float64)))
            assert got == pytest.approx(REF[name](list(x)), rel=1e-13, abs=1e-13)


@pytest.mark.parametrize(("name", "n"), small_cases())
def test_matches_reference_float32_at_start(name, n):
    x = cute.start(name, n).astype(np.float32)
    got = float(getattr(cute, name)(jnp.asarray(x)))
    # Reference on the same float32 inputs, in float64: only the library's float32 arithmetic differs.
    assert got == pytest.approx(REF[name]([float(v) for v in x]), rel=1e-5)


# --------------------------------------------------------------------------- gradients
@pytest.mark.parametrize(("name", "n"), small_cases())
def test_gradient_vs_central_differences(name, n):
    fn = getattr(cute, name)
    rng = np.random.default_rng(100 + n)
    with jax.enable_x64(True):
        grad = jax.jit(jax.grad(fn))
        for x in (cute.start(name, n), rng.uniform(-1.5, 1.5, n)):
            g = np.asarray(grad(jnp.asarray(x, dtype=jnp.float64)))
            fd = np.empty(n)
            for k in range(n):
                h = 1e-6 * (1.0 + abs(x[k]))
                e = np.zeros(n)
                e[k] = h
                fd[k] = (REF[name](list(x + e)) - REF[name](list(x - e))) / (2.0 * h)
            np.testing.assert_allclose(g, fd, rtol=0, atol=1e-6 * (1.0 + np.max(np.abs(g))))


# --------------------------------------------------------------------------- jit / vmap
@pytest.mark.parametrize("name", NAMES)
def test_jit_and_vmap(name):
    fn = getattr(cute, name)
    n = SMALL_N[name][-1]
    batch = np.random.default_rng(7).uniform(-2.0, 2.0, (5, n)).astype(np.float32)
    one_by_one = np.array([float(fn(jnp.asarray(row))) for row in batch])
    vmapped = np.asarray(jax.jit(jax.vmap(fn))(jnp.asarray(batch)))
    assert vmapped.shape == (5,)
    np.testing.assert_allclose(vmapped, one_by_one, rtol=1e-6)
    grads = jax.jit(jax.vmap(jax.grad(fn)))(jnp.asarray(batch))
    assert grads.shape == (5, n) and bool(jnp.all(jnp.isfinite(grads)))


# --------------------------------------------------------------------------- large n
def _closed_form_at_start(name: str, n: int) -> float:
    """f at the seed's start, from the per-block values derived in HAND (float64)."""
    if name == "extended_rosenbrock":
        return 24.2 * n / 2
    if name == "extended_beale":
        return 9.828869 * n / 2
    if name == "extended_powell":
        return 215.0 * n / 4
    if name == "extended_wood":
        return 19192.0 * n / 4
    # Trigonometric at x_j = t: residual_i = A + i c with c = 1 - cos t, A = n c - sin t, so
    # f = n A^2 + 2 A c n(n+1)/2 + c^2 n(n+1)(2n+1)/6.
    t = 0.2
    c = 1.0 - math.cos(t)
    a = n * c - math.sin(t)
    return n * a * a + a * c * n * (n + 1) + c * c * n * (n + 1) * (2 * n + 1) / 6


@pytest.mark.parametrize("name", NAMES)
def test_large_n_float32(name):
    n = 10**6
    x = jnp.asarray(cute.start(name, n), dtype=jnp.float32)
    value = jax.jit(getattr(cute, name))(x)
    assert value.dtype == jnp.float32
    assert float(value) == pytest.approx(_closed_form_at_start(name, n), rel=1e-4)


# --------------------------------------------------------------------------- bad input
BAD_N = [
    ("extended_rosenbrock", 3, "n even"),
    ("extended_beale", 5, "n even"),
    ("extended_powell", 6, "multiple of 4"),
    ("extended_wood", 2, "multiple of 4"),
    ("extended_wood", 10, "multiple of 4"),
    ("extended_trigonometric", 0, "n >= 1"),
]


@pytest.mark.parametrize(("name", "n", "rule"), BAD_N)
def test_bad_n_raises(name, n, rule):
    fn = getattr(cute, name)
    pattern = rf"{name}: n = {n} is not a valid dimension.*{rule}"
    with pytest.raises(ValueError, match=pattern):
        fn(jnp.zeros(n))
    with pytest.raises(ValueError, match=pattern):
        jax.jit(fn)(jnp.zeros(n))  # found while tracing, before compilation
    with pytest.raises(ValueError, match=pattern):
        cute.start(name, n)


def test_other_bad_input():
    with pytest.raises(ValueError, match=r"extended_powell: x must be ONE point.*shape \(2, 4\).*vmap"):
        cute.extended_powell(jnp.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"unknown CUTE function 'rosenbrock'"):
        cute.start("rosenbrock", 4)
    with pytest.raises(ValueError, match=r"source='cute' is not known"):
        cute.start("extended_wood", 4, source="cute")
    with pytest.raises(ValueError, match=r"n = 4.0 is not a valid dimension"):
        cute.start("extended_wood", 4.0)
