"""The xringaus model: Bessel helpers, numerical Fourier transform of its image, rho -> 0 limits, symmetries."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

from multiwalk.models import UAS_TO_NRAD, bessel, image, image13, xringaus, xringaus13

P9 = np.array([2.5, 30.0, 0.7, 0.5, 0.3, 0.6, 0.8, 0.25, 0.7])  # Zsp, Re, rq, ecc, fade, gax, aq, gq, th


def _p13(p9: np.ndarray) -> np.ndarray:
    """The 13-parameter vector that draws the same image as ``p9``."""
    zsp, re_uas, rq, ecc, fade, gax, aq, gq, th = p9
    re = re_uas * UAS_TO_NRAD
    rin, d = rq * re, ecc * (re - rq * re)
    return np.array([zsp, re_uas, rq, ecc, fade, (rin - d) / re, gax, aq, gq, th, th, th, th])


def _dft(img: np.ndarray, fov: float, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Direct Fourier sum of an image laid out as multiwalk.models.image (x conjugate to u)."""
    npix = img.shape[0]
    x = (np.arange(npix) - (npix - 1) / 2) * fov * UAS_TO_NRAD / npix
    ex = np.exp(-2j * np.pi * np.outer(u, x))  # (m, npix) along columns
    ey = np.exp(-2j * np.pi * np.outer(v, x))  # (m, npix) along rows
    return np.einsum("my,yx,mx->m", ey, img, ex)


@pytest.fixture(scope="module")
def uv() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    r = rng.uniform(0, 9, 60)  # up to 9 G lambda: the EHT 2017 array's longest baselines at 230 GHz
    a = rng.uniform(-np.pi, np.pi, 60)
    return np.r_[0.0, r * np.cos(a)], np.r_[0.0, r * np.sin(a)]


def scipy_ratios(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SciPy's J1(z)/z and J2(z)/z^2 (float64), with their limits 1/2 and 1/8 at z = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(z > 0, special.j1(z) / z, 0.5), np.where(z > 0, special.jv(2, z) / z**2, 0.125)


def test_bessel_matches_scipy_in_float64() -> None:
    with jax.enable_x64(True):
        z = np.concatenate([np.linspace(0, 60, 30001), np.geomspace(60, 1e4, 500)])
        zj = jnp.asarray(z)
        # The Chebyshev fits are accurate to 2e-14 in absolute terms (fitted in float64); 1e-13 leaves room.
        assert np.max(np.abs(np.asarray(bessel.j0(zj)) - special.j0(z))) < 1e-13
        assert np.max(np.abs(np.asarray(bessel.j1(zj)) - special.j1(z))) < 1e-13
        r1, r2 = scipy_ratios(z)
        assert np.max(np.abs(np.asarray(bessel.jinc1(zj)) - r1)) < 1e-13
        assert np.max(np.abs(np.asarray(bessel.jinc2(zj)) - r2)) < 1e-13
        # exact limits and finite slopes at z = 0 (the functions are even: slope 0)
        assert float(bessel.jinc1(0.0)) == 0.5 and float(bessel.jinc2(0.0)) == 0.125
        assert float(jax.grad(bessel.jinc1)(0.0)) == 0.0 and float(jax.grad(bessel.jinc2)(0.0)) == 0.0


def test_bessel_float32() -> None:
    z = np.linspace(0, 40, 4001).astype(np.float32)
    ref = special.j1(z.astype(np.float64))
    # measured 1.0e-6 (float32's rounding of z and z^2, the largest near z = 8); 2e-6 allows 2x.
    assert np.max(np.abs(np.asarray(bessel.j1(jnp.asarray(z))) - ref)) < 2e-6


def test_bessel_float32_series_are_cut_to_float32s_precision() -> None:
    """float32 evaluates shorter series (cut where the dropped terms are below an eighth of its
    epsilon) and keeps the ratios at float32's precision, on each branch."""
    short, full = bessel._coefficients(np.dtype(np.float32)), bessel._coefficients(np.dtype(np.float64))
    assert all(len(short[name]) < len(full[name]) for name in full)
    z = np.linspace(0, 200, 200001)
    r1, r2 = scipy_ratios(z)
    a, b = bessel.jinc12_sq(jnp.asarray(z * z, jnp.float32))
    # all z: measured 1.7e-7 and 3.7e-8 (float32's rounding of z^2 and of the steps: 3 ulps of 0.5 at
    # most; with the small-z series one term shorter 1.7e-7 and 4.1e-8); 3e-7 and 1e-7 leave room,
    # and every series two terms shorter (4.6e-7, 4.5e-7) fails both
    assert np.max(np.abs(np.asarray(a, np.float64) - r1)) < 3e-7
    assert np.max(np.abs(np.asarray(b, np.float64) - r2)) < 1e-7
    # z > 8, the large-z series alone: measured 2.5e-8 and 3.9e-9; 5e-8 and 8e-9 leave 2x, and those
    # series two terms shorter (1.0e-7, 1.7e-8) fail both
    large = z > 8
    assert np.max(np.abs(np.asarray(a, np.float64) - r1)[large]) < 5e-8
    assert np.max(np.abs(np.asarray(b, np.float64) - r2)[large]) < 8e-9


def test_bessel_gradient_at_the_branches_seam() -> None:
    """At z = 8 (z^2 = SPLIT^2, the small-z branch's) the gradients are whole: d/dz J1(z)/z =
    -J2(z)/z and d/dz J2(z)/z^2 = -J3(z)/z^2 (a clamp by jnp.minimum there halved them)."""
    with jax.enable_x64(True):
        # float64: measured within 1e-13 of SciPy's; 1e-11 leaves room, a halved gradient misses by 7e-3
        assert abs(float(jax.grad(bessel.jinc1)(8.0)) + special.jv(2, 8.0) / 8) < 1e-11
        assert abs(float(jax.grad(bessel.jinc2)(8.0)) + special.jv(3, 8.0) / 64) < 1e-11


def test_model_matches_fourier_transform_of_its_image(uv) -> None:
    u, v = uv
    fov, npix = 160.0, 256  # pixels of 0.625 uas; the ring (30 uas radius) spans ~100 pixels
    with jax.enable_x64(True):
        model = np.asarray(xringaus(P9, u, v))
        model13 = np.asarray(xringaus13(np.r_[_p13(P9)[:9], -1.0, 0.3, 2.0, P9[8]], u, v))
    err = {}
    for over in (2, 8):
        err[over] = np.max(np.abs(_dft(image(P9, npix, fov, oversample=over), fov, u, v) - model))
    err13 = np.max(np.abs(_dft(image13(np.r_[_p13(P9)[:9], -1.0, 0.3, 2.0, P9[8]], npix, fov, oversample=8), fov, u, v)
                          - model13))
    # What is left is the pixelisation of the ring's sharp edges (measured 5e-4 Jy at 8 samples
    # per pixel side, i.e. 2e-4 of Zsp); it shrinks as the sub-pixel size does, which shows it
    # is the image's sampling and not the formula.  1.5e-3 Jy = 0.06 % of Zsp.
    assert err[8] < 1.5e-3, err
    assert err13 < 1.5e-3, err13
    assert err[8] < 0.6 * err[2], err
    # a wrong sign, a missing term or a flipped axis would differ by a sizeable fraction of Zsp:
    assert np.max(np.abs(model)) > 0.3


def test_zero_spacing_and_small_rho_limits() -> None:
    with jax.enable_x64(True):
        p = jnp.asarray(P9)
        v0 = complex(xringaus(p, 0.0, 0.0))
        assert v0 == pytest.approx(P9[0], abs=1e-14)  # V(0, 0) = Zsp exactly: the ring and Gaussian have flux 1
        # continuity: at rho = 1e-6 G lambda the change is at most 2 pi rho |<x>| Zsp, with the
        # centroid |<x>| below Re = 0.145 nrad: 2.3e-6
        assert abs(complex(xringaus(p, 1e-6, 0.0)) - v0) < 2.3e-6
        # first moments: dV/du(0) = -2 pi i Zsp <x>; this checks the rho -> 0 limit of the ImE, ImI terms
        img = image(P9, 256, 160.0, oversample=8)
        x = (np.arange(256) - 127.5) * 160.0 * UAS_TO_NRAD / 256
        cx, cy = np.sum(img.sum(axis=0) * x), np.sum(img.sum(axis=1) * x)
        # the derivatives jitted, as a fit evaluates them: op by op, each of the model's many
        # primitives would be compiled on its own (most of this test's time)
        du, dv = jax.jit(jax.jacfwd(lambda uv: xringaus(p, uv[0], uv[1])))(jnp.zeros(2))
        # the image's centroid carries the pixelisation error (~1e-3 of the ~0.01 nrad offset): 2e-3 relative
        assert complex(du) == pytest.approx(-2j * np.pi * cx, rel=2e-3)
        assert complex(dv) == pytest.approx(-2j * np.pi * cy, rel=2e-3)
        # finite gradients with respect to every parameter at rho = 0 and near it (one program, three points)
        jacobian = jax.jit(jax.jacfwd(lambda q, uu: jnp.abs(xringaus(q, uu, 0.5 * uu))))
        for uu in (0.0, 1e-9, 3.0):
            g = jacobian(p, uu)
            assert np.all(np.isfinite(np.asarray(g)))
        gz = jax.jit(jax.grad(lambda q: jnp.real(xringaus(q, 0.0, 0.0))))(p)
        assert float(gz[0]) == pytest.approx(1.0) and np.allclose(np.asarray(gz[1:]), 0.0, atol=1e-12)


def test_ring_only_limits_match_the_stated_formulas() -> None:
    # With gq = 0 and small rho, V = Zsp (ReE - ReI) + i Zsp (ImE - ImI - 2 pi d U ReI) to first order:
    # the limits ReE -> (h + h0) pi Re^2 / 2, ImE -> -pi^2 (h - h0) Re^3 U / 4 (and the inner ones).
    with jax.enable_x64(True):
        zsp, re_uas, rq, ecc, fade = 1.0, 40.0, 0.5, 0.6, 0.2
        p = jnp.asarray([zsp, re_uas, rq, ecc, fade, 1.0, 1.0, 0.0, 0.0])
        re = re_uas * UAS_TO_NRAD
        rin, d = rq * re, ecc * (re - rq * re)
        h = (2 / np.pi) / ((re**2 - rin**2 * (1 + d / re)) * fade + (re**2 - rin**2 * (1 - d / re)))
        h0 = fade * h
        re_e, re_i = (h + h0) * np.pi * re**2 / 2, (h + h0 - d * (h - h0) / re) * np.pi * rin**2 / 2
        slope_e = -np.pi**2 * (h - h0) * re**3 / 4
        slope_i = -np.pi**2 * (h - h0) * rin**4 / re / 4
        assert re_e - re_i == pytest.approx(1.0, rel=1e-12)  # h normalises the ring's flux to 1
        dv_du = complex(jax.jacfwd(lambda q: xringaus(p, q, 0.0))(0.0))
        assert dv_du.imag == pytest.approx(slope_e - slope_i - 2 * np.pi * d * re_i, rel=1e-9)


def test_rotation_by_two_pi_and_13_parameter_form(uv) -> None:
    u, v = uv
    with jax.enable_x64(True):
        a = np.asarray(xringaus(P9, u, v))
        shifted = P9.copy()
        shifted[8] += 2 * np.pi
        # th -> th + 2 pi changes cos/sin by rounding only: 1e-12 of values of order 1
        assert np.max(np.abs(np.asarray(xringaus(shifted, u, v)) - a)) < 1e-12
        assert np.max(np.abs(np.asarray(xringaus13(_p13(P9), u, v)) - a)) < 1e-12
        p13 = _p13(P9)
        for i in (9, 10, 11, 12):  # alpha, beta, eta, th: all 2 pi periodic
            q = p13.copy()
            q[i] -= 2 * np.pi
            assert np.max(np.abs(np.asarray(xringaus13(q, u, v)) - a)) < 1e-12
        # Hermitian: V(-u, -v) = conj V(u, v) for a real image
        assert np.max(np.abs(np.asarray(xringaus(P9, -u, -v)) - np.conj(a))) < 1e-12


def test_jit_vmap_float32() -> None:
    u = jnp.linspace(-8, 8, 50, dtype=jnp.float32)
    batch = jnp.asarray(np.stack([P9, P9 * [1, 1.2, 0.5, 1, 1, 1, 1, 1, 1]]), jnp.float32)
    out = jax.jit(jax.vmap(lambda p: xringaus(p, u, 0.3 * u)))(batch)
    assert out.shape == (2, 50) and out.dtype == jnp.complex64
    with jax.enable_x64(True):
        ref = np.asarray(xringaus(P9, np.asarray(u, np.float64), 0.3 * np.asarray(u, np.float64)))
    # float32: relative rounding ~1e-6 over ~100 operations, values up to 2.5 Jy: 2e-5 Jy
    assert np.max(np.abs(np.asarray(out[0]) - ref)) < 2e-5


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="9 parameters"):
        xringaus(np.ones(8), 0.0, 0.0)
    with pytest.raises(ValueError, match="13 parameters"):
        xringaus13(np.ones(9), 0.0, 0.0)
    with pytest.raises(ValueError, match="npix"):
        image(P9, npix=1)
    with pytest.raises(ValueError, match="fov"):
        image(P9, fov=-3.0)
    with pytest.raises(ValueError, match="oversample"):
        image(P9, oversample=0)
