"""Tests of `multiwalk.functions.yao`: the thirteen functions of Yao, Liu & Lin (1999), Table I.

Every function is checked against a reference written here, independently, in plain NumPy float64
straight from the paper's formulas (loops where the paper has sums, no shared helpers with the
library).  Inputs are rounded to float32 first and the reference evaluates those same float32
values in float64, so a comparison measures only the library's arithmetic, not input rounding.

Tolerances:
* float32 (JAX's default): the error of a float32 evaluation is a few ulp of the *size of the
  terms* that are summed, not of the result (Schwefel 2.26 sums terms of both signs; the phase
  ``sqrt|x|`` of its sine carries ~|x| sqrt|x| eps; see `scale`).  We allow 32 eps32 = 3.8e-6 times
  that scale; the largest error measured is 2.3 eps * scale, so the margin is 14x, while any
  formula slip (a wrong constant, an index off by one, a missing term) is an O(1) relative error.
* float64 (under ``jax.enable_x64``): the same bound with eps64, i.e. 7e-15 of the scale: this
  pins every constant of every formula to ~13 digits.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from multiwalk.functions import yao


# --------------------------------------------------------------------------- the reference (NumPy float64)
def ref_u(x: float, a: float, k: float, m: int) -> float:
    """Yao's penalty u(x, a, k, m): k (x - a)^m if x > a; 0 if -a <= x <= a; k (-x - a)^m if x < -a."""
    if x > a:
        return k * (x - a) ** m
    if x < -a:
        return k * (-x - a) ** m
    return 0.0


def ref_sphere(x):  # f1
    return sum(xi**2 for xi in x)


def ref_schwefel_2_22(x):  # f2
    return sum(abs(xi) for xi in x) + math.prod(abs(xi) for xi in x)


def ref_schwefel_1_2(x):  # f3
    return sum(sum(x[j] for j in range(i + 1)) ** 2 for i in range(len(x)))


def ref_schwefel_2_21(x):  # f4
    return max(abs(xi) for xi in x)


def ref_rosenbrock(x):  # f5
    return sum(100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (x[i] - 1.0) ** 2 for i in range(len(x) - 1))


def ref_step(x):  # f6
    return sum(math.floor(xi + 0.5) ** 2 for xi in x)


def ref_quartic(x):  # f7 without its noise
    return sum((i + 1) * x[i] ** 4 for i in range(len(x)))


def ref_schwefel_2_26(x):  # f8
    return sum(-xi * math.sin(math.sqrt(abs(xi))) for xi in x)


def ref_rastrigin(x):  # f9
    return sum(xi**2 - 10.0 * math.cos(2.0 * math.pi * xi) + 10.0 for xi in x)


def ref_ackley(x):  # f10
    n = len(x)
    return (
        -20.0 * math.exp(-0.2 * math.sqrt(sum(xi**2 for xi in x) / n))
        - math.exp(sum(math.cos(2.0 * math.pi * xi) for xi in x) / n)
        + 20.0
        + math.e
    )


def ref_griewank(x):  # f11
    return sum(xi**2 for xi in x) / 4000.0 - math.prod(math.cos(x[i] / math.sqrt(i + 1)) for i in range(len(x))) + 1.0


def ref_penalized_1(x):  # f12, y_i = 1 + (x_i + 1)/4
    n = len(x)
    y = [1.0 + (xi + 1.0) / 4.0 for xi in x]
    body = 10.0 * math.sin(math.pi * y[0]) ** 2
    for i in range(n - 1):
        body += (y[i] - 1.0) ** 2 * (1.0 + 10.0 * math.sin(math.pi * y[i + 1]) ** 2)
    body += (y[n - 1] - 1.0) ** 2
    return math.pi / n * body + sum(ref_u(xi, 10.0, 100.0, 4) for xi in x)


def ref_penalized_2(x):  # f13
    n = len(x)
    body = math.sin(3.0 * math.pi * x[0]) ** 2
    for i in range(n - 1):
        body += (x[i] - 1.0) ** 2 * (1.0 + math.sin(3.0 * math.pi * x[i + 1]) ** 2)
    body += (x[n - 1] - 1.0) ** 2 * (1.0 + math.sin(2.0 * math.pi * x[n - 1]) ** 2)
    return 0.1 * body + sum(ref_u(xi, 5.0, 100.0, 4) for xi in x)


# Yao et al. (1999) Table I: the box of each function.
YAO_BOUNDS = {
    "sphere": (-100.0, 100.0),
    "schwefel_2_22": (-10.0, 10.0),
    "schwefel_1_2": (-100.0, 100.0),
    "schwefel_2_21": (-100.0, 100.0),
    "rosenbrock": (-30.0, 30.0),
    "step": (-100.0, 100.0),
    "quartic": (-1.28, 1.28),
    "schwefel_2_26": (-500.0, 500.0),
    "rastrigin": (-5.12, 5.12),
    "ackley": (-32.0, 32.0),
    "griewank": (-600.0, 600.0),
    "penalized_1": (-50.0, 50.0),
    "penalized_2": (-50.0, 50.0),
}
NAMES = list(YAO_BOUNDS)  # the thirteen names in Table I order (f1 ... f13)
REF = {name: globals()[f"ref_{name}"] for name in NAMES}


def scale(name: str, x) -> float:
    """Size of the quantities the function adds up at ``x``: what its rounding error is relative to.

    The formula evaluated with every difference replaced by a sum of absolute values (so no
    cancellation hides a term), plus, for each sine or cosine, its amplitude times the size of its
    argument (an argument rounded by one ulp, |t| eps, moves the value by up to amplitude |t| eps).
    """
    x = [abs(float(v)) for v in x]
    n = len(x)
    pi = math.pi
    if name == "schwefel_1_2":
        return sum(sum(x[: i + 1]) ** 2 for i in range(n))
    if name == "rosenbrock":
        return sum(100.0 * (x[i + 1] + x[i] ** 2) ** 2 + (x[i] + 1.0) ** 2 for i in range(n - 1)) + 1e-30
    if name == "schwefel_2_26":  # x sin(sqrt x): the term and its phase error x * sqrt(x)
        return sum(v * (1.0 + math.sqrt(v)) for v in x) + 1e-30
    if name == "rastrigin":  # x^2 + 10 cos(2 pi x) + 10, phase 10 * 2 pi x
        return sum(v**2 + 20.0 + 20.0 * pi * v for v in x)
    if name == "ackley":
        rms = math.sqrt(sum(v**2 for v in x) / n)
        return 2 * (20.0 + math.e) + 4.0 * rms + math.e * 2 * pi * sum(x) / n
    if name == "griewank":
        return sum(v**2 for v in x) / 4000.0 + 2.0 + sum(x[i] / math.sqrt(i + 1) for i in range(n))
    if name == "penalized_1":
        y = [1.0 + (v + 1.0) / 4.0 for v in x]  # |y_i| <= 1 + (|x_i| + 1)/4
        body = 10.0 * (1.0 + 2 * pi * y[0]) + (y[-1] + 1.0) ** 2
        body += sum((y[i] + 1.0) ** 2 * (11.0 + 20.0 * pi * y[i + 1]) for i in range(n - 1))
        return pi / n * body + sum(100.0 * (v - 10.0) ** 3 * 5 * v for v in x if v > 10.0)
    if name == "penalized_2":
        body = 1.0 + 6 * pi * x[0] + (x[-1] + 1.0) ** 2 * (2.0 + 4 * pi * x[-1])
        body += sum((x[i] + 1.0) ** 2 * (2.0 + 6 * pi * x[i + 1]) for i in range(n - 1))
        return 0.1 * body + sum(100.0 * (v - 5.0) ** 3 * 5 * v for v in x if v > 5.0)
    # sphere, schwefel_2_22, schwefel_2_21, step, quartic: sums of non-negative terms.
    return abs(REF[name](x)) + 1e-30


# Half-width of a box around the optimum where the interesting part of each function lives: the
# penalty terms u of the Penalized functions vanish in it, the sum x^2/4000 does not swamp the
# cosines of Griewank, ... .  Random points are drawn both in Yao's box and in this one.
CORE = {
    "penalized_1": 10.0,
    "penalized_2": 5.0,
    "griewank": 10.0,
    "ackley": 3.0,
    "rastrigin": 2.0,
    "schwefel_2_26": 500.0,
    "quartic": 1.28,
}


def random_points(name: str, n: int, m: int, rng: np.random.Generator) -> np.ndarray:
    entry = yao.TABLE[name]
    full = rng.uniform(entry.lower, entry.upper, (m, n))
    half = CORE.get(name, 0.1 * entry.upper)
    core = np.clip(entry.x_opt + rng.uniform(-half, half, (m, n)), entry.lower, entry.upper)
    return np.concatenate([full, core])


def f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def lib(name: str, x) -> float:
    return float(yao.TABLE[name].fn(jnp.asarray(f32(x))))


# --------------------------------------------------------------------------- the table
def test_table_lists_the_thirteen_functions_with_yao_labels():
    assert list(yao.TABLE) == NAMES
    for k, name in enumerate(NAMES, start=1):
        entry = yao.TABLE[name]
        assert entry.name == name
        assert entry.label == f"f{k}", name
        assert entry.fn is getattr(yao, name)


@pytest.mark.parametrize("name", NAMES)
def test_bounds_are_yaos(name):
    entry = yao.TABLE[name]
    assert (entry.lower, entry.upper) == YAO_BOUNDS[name]
    lo, hi = entry.bounds(7)
    assert lo.shape == hi.shape == (7,)
    assert np.all(lo == YAO_BOUNDS[name][0]) and np.all(hi == YAO_BOUNDS[name][1])


def test_paper_functions_are_the_twelve_of_zhu_and_curry_in_table_4_order():
    # Zhu & Curry, Table 4: Ackley, Griewank, Penalty1, Penalty2, Quartic, Rastrigin, Rosenbrock,
    # Schwefel 1.2, Schwefel 2.22, Schwefel 2.21, Sphere, Step: every Yao function but f8.
    assert yao.PAPER_FUNCTIONS == (
        "ackley",
        "griewank",
        "penalized_1",
        "penalized_2",
        "quartic",
        "rastrigin",
        "rosenbrock",
        "schwefel_1_2",
        "schwefel_2_22",
        "schwefel_2_21",
        "sphere",
        "step",
    )
    assert set(yao.PAPER_FUNCTIONS) == set(NAMES) - {"schwefel_2_26"}


# --------------------------------------------------------------------------- optima
# At the optimum.  Reference (float64): exact, except that Table I gives the Schwefel 2.26 optimum to
# 4 decimals (420.9687, -418.9829 per coordinate) while the true minimum per coordinate is
# -418.98288727, 1.3e-5 above the rounded value: 1e-4 * n covers that.
# Library (float32): sin(pi * k) of a float32 multiple of pi is ~1e-7, squared ~1e-14, so every
# zero-valued optimum evaluates to below 1e-6 (an eps of an O(1) quantity).  For Schwefel 2.26
# the float32 phase sqrt(420.97) = 20.5 carries ~20.5 eps, i.e. 421 * 20.5 * eps = 1e-3 per
# coordinate: we add 2 eps * scale (scale = n * 421 * 21.5) to the reference tolerance.
def optimum_tol(name: str, n: int) -> float:
    return 1e-4 * n if name == "schwefel_2_26" else 1e-6


@pytest.mark.parametrize("n", [2, 10, 30])
@pytest.mark.parametrize("name", NAMES)
def test_value_at_the_optimum(name, n):
    x_opt, f_opt = yao.TABLE[name].optimum(n)
    assert x_opt.shape == (n,)
    tol = optimum_tol(name, n)
    # The table agrees with the paper's formula (the reference) at its optimum ...
    assert abs(REF[name](x_opt.astype(np.float64)) - f_opt) <= tol
    # ... the library too, up to float32 rounding ...
    lib_tol = tol + (2 * float(np.finfo(np.float32).eps) * scale(name, x_opt) if name == "schwefel_2_26" else 0.0)
    assert abs(lib(name, x_opt) - f_opt) <= lib_tol
    # ... and the point is a minimum of that formula: nearby points are not lower.
    rng = np.random.default_rng(n)
    for _ in range(20):
        near = x_opt + rng.uniform(-1e-2, 1e-2, n)
        assert REF[name](near) >= REF[name](x_opt) - 1e-12


def test_schwefel_2_26_optimum_per_coordinate():
    # d/dx [x sin sqrt x] = sin(sqrt x) + sqrt(x)/2 cos(sqrt x) = 0 near x = 420.9687, where the
    # value is -418.98288727 (Yao: -12569.5 for n = 30 = 30 * -418.9829).
    x = 420.9687
    s = math.sqrt(x)
    assert abs(math.sin(s) + s / 2 * math.cos(s)) < 1e-4
    assert abs(ref_schwefel_2_26([x]) - (-418.98288727)) < 1e-7
    assert abs(yao.TABLE["schwefel_2_26"].optimum(30)[1] - (-12569.487)) < 1e-3


# --------------------------------------------------------------------------- hand-computed points
# Each expected value is worked out by hand in the comment; the library evaluates in float32,
# so the tolerance is 1e-6 relative plus 1e-6 absolute (a few float32 ulp of these O(1-1000) values).
HAND = [
    # f1: 1 + 4 + 9 = 14
    ("sphere", [1.0, 2.0, 3.0], 14.0),
    # f1: 0.25 + 0.25 = 0.5
    ("sphere", [-0.5, 0.5], 0.5),
    # f2: (1 + 2 + 3) + 1*2*3 = 6 + 6 = 12
    ("schwefel_2_22", [1.0, -2.0, 3.0], 12.0),
    # f2: (0.5 + 4) + 0.5*4 = 4.5 + 2 = 6.5
    ("schwefel_2_22", [0.5, -4.0], 6.5),
    # f3: partial sums 1, 3, 6 -> 1 + 9 + 36 = 46
    ("schwefel_1_2", [1.0, 2.0, 3.0], 46.0),
    # f3: partial sums 1, 0, 2 -> 1 + 0 + 4 = 5
    ("schwefel_1_2", [1.0, -1.0, 2.0], 5.0),
    # f4: max(1, 7, 3) = 7
    ("schwefel_2_21", [1.0, -7.0, 3.0], 7.0),
    # f4: max(0.5, 0.25) = 0.5
    ("schwefel_2_21", [-0.5, 0.25], 0.5),
    # f5: 100 (0 - 0)^2 + (0 - 1)^2 = 1
    ("rosenbrock", [0.0, 0.0], 1.0),
    # f5: 100 (2 - 1)^2 + (1 - 1)^2 = 100
    ("rosenbrock", [1.0, 2.0], 100.0),
    # f5: [100 (3 - 4)^2 + (2 - 1)^2] + [100 (4 - 9)^2 + (3 - 1)^2] = 101 + 2504 = 2605
    ("rosenbrock", [2.0, 3.0, 4.0], 2605.0),
    # f5: 100 (1 - 1)^2 + (-1 - 1)^2 = 4
    ("rosenbrock", [-1.0, 1.0], 4.0),
    # f6: floor(0.9)^2 + floor(0.1)^2 = 0 + 0 = 0
    ("step", [0.4, -0.4], 0.0),
    # f6: floor(1.0)^2 + floor(0.0)^2 = 1 + 0 = 1
    ("step", [0.5, -0.5], 1.0),
    # f6: floor(2.1)^2 + floor(-2.2)^2 = 2^2 + (-3)^2 = 4 + 9 = 13
    ("step", [1.6, -2.7], 13.0),
    # f6: floor(-0.01)^2 = (-1)^2 = 1
    ("step", [-0.51], 1.0),
    # f7 (no noise): 1*1 + 2*1 + 3*1 = 6
    ("quartic", [1.0, 1.0, 1.0], 6.0),
    # f7: 1*1 + 2*16 = 33
    ("quartic", [1.0, -2.0], 33.0),
    # f7: 1*0.0625 + 2*0.0625 = 0.1875
    ("quartic", [0.5, 0.5], 0.1875),
    # f8: -(1 sin 1) = -0.8414709848
    ("schwefel_2_26", [1.0], -0.8414709848078965),
    # f8: x = (pi/2)^2, (3pi/2)^2: -[(pi/2)^2 sin(pi/2) + (3pi/2)^2 sin(3pi/2)] = (9 - 1) pi^2/4 = 2 pi^2
    ("schwefel_2_26", [(math.pi / 2) ** 2, (3 * math.pi / 2) ** 2], 2 * math.pi**2),
    # f9: (0.25 - 10 cos(pi) + 10) + (0 - 10 cos 0 + 10) = (0.25 + 10 + 10) + 0 = 20.25
    ("rastrigin", [0.5, 0.0], 20.25),
    # f9: 2 * (1 - 10 cos(2 pi) + 10) = 2 * 1 = 2
    ("rastrigin", [1.0, 1.0], 2.0),
    # f9: 0.0625 - 10 cos(pi/2) + 10 = 10.0625
    ("rastrigin", [0.25], 10.0625),
    # f10: mean x^2 = 1, mean cos 2pi = 1: -20 e^-0.2 - e + 20 + e = 20 (1 - 0.8187307531) = 3.6253849384
    ("ackley", [1.0, 1.0], 3.6253849384403622),
    # f10: mean x^2 = 0.25 -> sqrt 0.5; mean cos(pi) = -1:
    #      -20 e^-0.1 - e^-1 + 20 + e = -18.0967483607 - 0.3678794412 + 22.7182818285 = 4.2536540266
    ("ackley", [0.5, 0.5], 4.253654026568412),
    # f11: pi^2/4000 - cos(pi/1) cos(0/sqrt 2) + 1 = 0.0024674011 + 1 + 1 = 2.0024674011
    ("griewank", [math.pi, 0.0], 2.0024674011002723),
    # f11: x2 / sqrt(2) = pi: 2 pi^2/4000 - cos(0) cos(pi) + 1 = 0.0049348022 + 2 = 2.0049348022
    ("griewank", [0.0, math.pi * math.sqrt(2)], 2.0049348022005447),
    # f12 at 0 (n = 2): y = 1.25, sin^2(1.25 pi) = 1/2:
    #      pi/2 {10 * 0.5 + 0.25^2 (1 + 10 * 0.5) + 0.25^2} = pi/2 (5 + 0.375 + 0.0625) = pi/2 * 5.4375 = 8.5412050269
    ("penalized_1", [0.0, 0.0], 8.54120502694725),
    # f12: y = (2, 1): pi/2 {10 sin^2(2 pi) + (2 - 1)^2 (1 + 10 sin^2 pi) + 0} = pi/2 = 1.5707963268
    ("penalized_1", [3.0, -1.0], math.pi / 2),
    # f12: y = (4, 1): pi/2 {0 + 3^2 (1 + 0) + 0} + u(11) = 14.1371669412 + 100 (11 - 10)^4 = 114.1371669412
    ("penalized_1", [11.0, -1.0], 114.13716694115406),
    # f12: y1 = 1 - 11/4 = -1.75, sin^2(-1.75 pi) = 1/2: pi/2 {5 + 2.75^2} = pi/2 * 12.5625 = 19.7331288553;
    #      u(-12) = 100 (12 - 10)^4 = 1600 -> 1619.7331288553
    ("penalized_1", [-12.0, -1.0], 1619.733128855361),
    # f13 at 0: 0.1 {sin^2 0 + (0 - 1)^2 (1 + sin^2 0) + (0 - 1)^2 (1 + sin^2 0)} = 0.1 * 2 = 0.2
    ("penalized_2", [0.0, 0.0], 0.2),
    # f13: 0.1 {sin^2(3 pi) + 0 + (0.5 - 1)^2 (1 + sin^2 pi)} = 0.1 * 0.25 = 0.025
    ("penalized_2", [1.0, 0.5], 0.025),
    # f13: 0.1 {sin^2(1.5 pi) + (0.5 - 1)^2 (1 + sin^2(3 pi)) + 0} = 0.1 (1 + 0.25) = 0.125
    ("penalized_2", [0.5, 1.0], 0.125),
    # f13: 0.1 {sin^2(18 pi) + 5^2 (1 + sin^2 3pi) + 0} + u(6, 5) = 2.5 + 100 (6 - 5)^4 = 102.5
    ("penalized_2", [6.0, 1.0], 102.5),
]


@pytest.mark.parametrize("name, x, expected", HAND, ids=[f"{h[0]}-{i}" for i, h in enumerate(HAND)])
def test_hand_computed_points(name, x, expected):
    # The reference agrees with the hand computation to float64 rounding ...
    assert REF[name]([float(v) for v in x]) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    # ... and the library, evaluated in float32, to a few float32 ulp.
    assert lib(name, x) == pytest.approx(expected, rel=1e-6, abs=1e-6)


def test_penalty_u():
    # u(x, 10, 100, 4): 100 (12 - 10)^4 = 1600 below -10; 0 on [-10, 10] (ends included);
    # 100 (10.5 - 10)^4 = 6.25 and 1600 above.
    x = f32([-12.0, -10.0, -5.0, 0.0, 5.0, 10.0, 10.5, 12.0])
    got = np.asarray(yao.penalty_u(jnp.asarray(x), 10.0, 100.0, 4))
    np.testing.assert_allclose(got, [1600.0, 0, 0, 0, 0, 0, 6.25, 1600.0], rtol=1e-6)


# --------------------------------------------------------------------------- Penalized 1 pitfalls
@pytest.mark.parametrize("n", [2, 10, 30])
def test_penalized_1_is_not_zero_at_the_origin_and_zero_at_minus_one(n):
    # At x = 0 every y_i = 1.25, sin^2(1.25 pi) = 1/2, so the value is
    # pi/n {10/2 + (n-1) 0.0625 (1 + 10/2) + 0.0625} = pi/n (5.0625 + 0.375 (n - 1)): 8.54, 2.65, 1.67.
    expected = math.pi / n * (5.0625 + 0.375 * (n - 1))
    assert lib("penalized_1", np.zeros(n)) == pytest.approx(expected, rel=1e-6)
    assert expected > 1.6  # far from the copies that put the optimum at 0
    assert abs(lib("penalized_1", -np.ones(n))) < 1e-6  # y = 1: every term vanishes


def test_penalized_u_terms_switch_on_outside_a():
    # Moving one coordinate from just inside to just outside |x| <= a adds exactly the u term there,
    # and nothing while inside: compare with the reference to a float32 ulp of the values.
    base = -np.ones(4)
    for name, a in (("penalized_1", 10.0), ("penalized_2", 5.0)):
        for xk in (a - 0.5, a, a + 0.5, a + 2.0, -a - 2.0):
            x = base.copy() if name == "penalized_1" else np.ones(4)
            x[2] = xk
            want = REF[name](x)
            assert lib(name, x) == pytest.approx(want, rel=2e-6, abs=2e-6)
            assert (ref_u(xk, a, 100.0, 4) > 0) == (abs(xk) > a)


# --------------------------------------------------------------------------- random points
@pytest.mark.parametrize("name", NAMES)
def test_random_points_match_reference_float32(name):
    entry = yao.TABLE[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    eps = float(np.finfo(np.float32).eps)
    fn = jax.jit(jax.vmap(entry.fn))
    for n in (1, 2, 10, 30):
        X = f32(random_points(name, n, 30, rng))
        got = np.asarray(fn(jnp.asarray(X)), dtype=np.float64)
        for x, g in zip(X.astype(np.float64), got):
            want = REF[name](x)
            assert abs(g - want) <= 32 * eps * scale(name, x), (name, n, x, g, want)


@pytest.mark.parametrize("name", NAMES)
def test_random_points_match_reference_float64(name):
    # Under x64 the library computes in float64: formulas must agree to ~1e-14 of the term scale.
    entry = yao.TABLE[name]
    rng = np.random.default_rng(1000 + sum(map(ord, name)))
    eps = float(np.finfo(np.float64).eps)
    # Points near the optimum too (where Ackley / Griewank / Rastrigin cancel down to small values).
    with jax.enable_x64(True):
        fn = jax.jit(jax.vmap(entry.fn))
        for n in (1, 3, 30):
            X = random_points(name, n, 15, rng)
            X = np.concatenate([X, entry.optimum(n)[0] + rng.uniform(-1e-3, 1e-3, (5, n))])
            got = np.asarray(fn(jnp.asarray(X, dtype=jnp.float64)))
            assert got.dtype == np.float64
            for x, g in zip(X, got):
                want = REF[name](x)
                assert abs(g - want) <= 32 * eps * scale(name, x), (name, n, x, g, want)


# --------------------------------------------------------------------------- quartic noise
def test_quartic_noise_in_unit_interval_deterministic_and_per_point():
    key = jax.random.PRNGKey(7)
    rng = np.random.default_rng(3)
    # |x| <= 0.5 keeps the noiseless part below 3.5 (n = 10), so float32 rounding of the sum
    # (spacing <= 2.4e-7) cannot carry a noise value below 1 up to 1.
    X = jnp.asarray(f32(rng.uniform(-0.5, 0.5, (2000, 10))))
    noisy = np.asarray(jax.jit(jax.vmap(lambda x: yao.quartic(x, key)))(X), dtype=np.float64)
    clean = np.asarray(jax.vmap(yao.quartic)(X), dtype=np.float64)
    noise = noisy - clean
    assert np.all(noise >= 0) and np.all(noise < 1)
    # Same point and key: same value (also eagerly, outside jit/vmap).
    again = np.asarray(jax.jit(jax.vmap(lambda x: yao.quartic(x, key)))(X), dtype=np.float64)
    np.testing.assert_array_equal(noisy, again)
    assert float(yao.quartic(X[0], key)) == pytest.approx(noisy[0], rel=1e-6)
    # Different points: different draws.  The noise read back as (value - noiseless) is quantized
    # by the float32 spacing of the sum (<= 2^-22 here), so 2000 independent draws share a value in
    # about 2000^2 / 2 / 2^22 = 0.5 pairs: we require at least 1990 distinct values (deterministic
    # for this key; a noise that ignores the point, or takes few values, gives far fewer).
    assert len(np.unique(noise.astype(np.float32))) >= 1990
    # Uniform on [0, 1): KS test; deterministic for this key, p > 1e-3 for a correct uniform draw.
    assert stats.kstest(noise, "uniform").pvalue > 1e-3
    # Another key gives other noise at the same points.
    other = np.asarray(jax.vmap(lambda x: yao.quartic(x, jax.random.PRNGKey(8)))(X), dtype=np.float64)
    assert np.mean(other != noisy) > 0.99


def test_quartic_noise_differs_between_neighbouring_points():
    key = jax.random.PRNGKey(0)
    x = f32([0.1, -0.2, 0.3])
    y = x.copy()
    y[1] = np.nextafter(y[1], np.float32(1))  # one ulp away
    z = x[[1, 0, 2]]  # a permutation of the same coordinates
    vals = [float(yao.quartic(jnp.asarray(p), key) - yao.quartic(jnp.asarray(p))) for p in (x, y, z)]
    assert len(set(vals)) == 3
    # Without a key the value is the noiseless formula.
    assert float(yao.quartic(jnp.asarray(x))) == pytest.approx(ref_quartic(x.astype(np.float64)), rel=1e-6)


# --------------------------------------------------------------------------- jit and vmap
@pytest.mark.parametrize("name", NAMES)
def test_jit_and_vmap_agree_with_a_loop(name):
    entry = yao.TABLE[name]
    rng = np.random.default_rng(11)
    X = f32(rng.uniform(entry.lower, entry.upper, (6, 5)))
    loop = np.array([float(entry.fn(jnp.asarray(x))) for x in X])
    jitted = np.array([float(jax.jit(entry.fn)(jnp.asarray(x))) for x in X])
    batched = np.asarray(jax.vmap(entry.fn)(jnp.asarray(X)))
    both = np.asarray(jax.jit(jax.vmap(entry.fn))(jnp.asarray(X)))
    # XLA may fuse or reorder a float32 reduction differently under jit: a few ulp of the term scale.
    eps = float(np.finfo(np.float32).eps)
    tol = np.array([8 * eps * scale(name, x.astype(np.float64)) for x in X])
    for other in (jitted, batched, both):
        assert other.shape == (6,)
        assert np.all(np.abs(other - loop) <= tol), (name, other, loop)
