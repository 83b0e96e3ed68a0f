"""The m-ring, crescent and elliptical Gaussian models: Fourier sums of their images, the bright
side's direction in images and closure phases, rho -> 0, jit/vmap/grad, derived quantities, the registry."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from multiwalk.eht import model_closure_phases, xringaus_problem
from multiwalk.io.uvdata import UVData
from multiwalk.models import MODELS, UAS_TO_NRAD, crescent, gaussian, get_model, mring

FOV = 160.0  # uas


def _dft(img: np.ndarray, fov: float, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Direct Fourier sum of an image laid out as the models' (x East along columns, y North along rows)."""
    npix = img.shape[0]
    x = (np.arange(npix) - (npix - 1) / 2) * fov * UAS_TO_NRAD / npix
    ex = np.exp(-2j * np.pi * np.outer(u, x))
    ey = np.exp(-2j * np.pi * np.outer(v, x))
    return np.einsum("my,yx,mx->m", ey, img, ex)


def _pa_vector(pa_deg: float) -> np.ndarray:
    """The unit vector (East, North) of a position angle east of north."""
    return np.array([np.sin(np.radians(pa_deg)), np.cos(np.radians(pa_deg))])


def _uv_along_and_across(pa_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """Baselines of 0-8.5 G lambda along the bright side, against it, across it, and three others."""
    rho = np.array([0.0, 1.0, 3.0, 6.0, 8.5])
    along, across = _pa_vector(pa_deg), _pa_vector(pa_deg + 90.0)
    others = np.array([[2.0, -5.0], [-7.0, 1.5], [4.0, 4.0]])
    uv = np.concatenate([rho[:, None] * along, -rho[1:, None] * along, rho[1:, None] * across, others])
    return uv[:, 0], uv[:, 1]


PA = 240.0  # a bright side that is neither on an axis nor symmetric under an East-West mirror
CASES = {
    # name: (visibility function, image function, parameters, npix, oversample, tolerance in Jy)
    # The blurred m-ring's image is analytic (Bessel I0, I1) and smooth: point samples 0.625 uas
    # apart (8 per sigma of the blur) alias only V at 330 G lambda (exp(-1300)), and the field
    # ends 11 sigma past the ring, so the sum equals the transform to rounding: 1e-12 Jy.
    "mring": (mring.visibilities, mring.image, [0.6, 42.0, 12.0, 0.6, np.radians(PA)], 256, 1, 1e-12),
    "mring with offset": (mring.visibilities, mring.image, [0.6, 42.0, 12.0, 0.6, np.radians(PA), 6.0, -4.0],
                          256, 1, 1e-12),
    # The Gaussian likewise, but for its tails beyond the field's edge, 6.4 sigma out along the
    # major axis (FWHM 30 uas): measured 1.5e-12 Jy.
    "gaussian": (gaussian.visibilities, gaussian.image, [0.6, 30.0, 14.0, np.radians(PA)], 256, 1, 1e-10),
    # The crescent's sharp disks are sampled 4 x 4 times per pixel before the blur and the pixel
    # means: each sample on an edge is in or out whole, which changes the total flux by ~1e-4 of
    # it (measured 1.5e-4 Jy of 0.6) and shrinks as the samples do (next test).  A mirrored or
    # rotated crescent would differ by ~0.1 Jy at 3 G lambda, two hundred times the tolerance.
    "crescent": (crescent.visibilities, crescent.image, [0.6, 55.0, 0.6, 0.5, 0.3, 10.0, np.radians(PA)], 256, 4,
                 5e-4),
}


@pytest.mark.parametrize("name", list(CASES))
def test_visibilities_equal_the_fourier_sum_of_the_image(name: str) -> None:
    fn, image_fn, params, npix, oversample, tol = CASES[name]
    u, v = _uv_along_and_across(PA)
    with jax.enable_x64(True):
        model = np.asarray(fn(np.asarray(params), u, v))
    img = image_fn(np.asarray(params), npix, FOV, oversample)
    err = np.abs(_dft(img, FOV, u, v) - model)
    assert np.max(err) < tol, (name, err)
    assert model[0] == pytest.approx(params[0], abs=1e-14)  # V(0, 0) = flux
    assert np.max(np.abs(model[1:])) > 0.1  # the comparison is not between two small numbers


def test_crescent_error_is_the_sampling_of_its_edges() -> None:
    # The same crescent unblurred, at 2 x 2 and 4 x 4 samples per pixel: the error halves (or
    # better) with the sample spacing, so it is the image's sampling and not the formula.
    fn, image_fn, params, _, _, _ = CASES["crescent"]
    p = np.asarray(params)
    p[5] = 0.0
    u, v = _uv_along_and_across(PA)
    with jax.enable_x64(True):
        model = np.asarray(fn(p, u, v))
    err = {n: np.max(np.abs(_dft(image_fn(p, 256, FOV, n), FOV, u, v) - model)) for n in (2, 4)}
    assert err[4] < 0.6 * err[2] and err[4] < 5e-4, err  # measured 5.0e-4 and 2.3e-4 Jy


def _drawn(img: np.ndarray) -> np.ndarray:
    """The image as drawn with imshow(origin="lower") and the x axis inverted (multiwalk.eht.plots):
    ``drawn[0]`` is the top row, ``drawn[:, 0]`` the leftmost column."""
    return img[::-1, ::-1]


RING_PARAMS = {  # the bright side's position angle, in degrees, is filled in by the tests
    "mring": lambda pa: [0.6, 42.0, 10.0, 0.5, np.radians(pa)],
    "crescent": lambda pa: [0.6, 55.0, 0.6, 0.5, 0.3, 8.0, np.radians(pa)],
    "xringaus": lambda pa: [0.6, 27.0, 0.6, 0.5, 0.3, 0.6, 0.8, 0.2, np.radians(90.0 - pa)],  # th from East to North
}


@pytest.mark.parametrize("name", list(RING_PARAMS))
@pytest.mark.parametrize("pa", [90.0, 180.0, 240.0])
def test_bright_side_is_where_its_position_angle_says(name: str, pa: float) -> None:
    model = MODELS[name]
    params = np.asarray(RING_PARAMS[name](pa))
    img = model.image(params, 64, FOV, 2)
    x = (np.arange(64) - 31.5) * FOV / 64  # uas, East along columns, North along rows
    centroid = np.array([np.sum(img.sum(axis=0) * x), np.sum(img.sum(axis=1) * x)]) / img.sum()
    pa_image = np.degrees(np.arctan2(centroid[0], centroid[1])) % 360
    assert abs((pa_image - pa + 180) % 360 - 180) < 1.0, (name, pa, pa_image)
    assert model.derived(params)["pa_bright"] == pytest.approx(pa)
    # as drawn: East to the left, North up
    drawn = _drawn(img)
    left, right = drawn[:, :32].sum(), drawn[:, 32:].sum()
    top, bottom = drawn[:32].sum(), drawn[32:].sum()
    expect_left = {90.0: True, 180.0: None, 240.0: False}[pa]  # PA 240 is South-West: right, below
    if expect_left is not None:
        assert (left > 1.2 * right) if expect_left else (right > 1.2 * left), (name, pa, left, right)
    if pa != 90.0:
        assert bottom > 1.1 * top, (name, pa, top, bottom)


# A triangle of baselines (G lambda) summing to zero, long enough that the ring's asymmetry sets
# its closure phase: stations 1 -> 2, 2 -> 3, 3 -> 1.
TRIANGLE_U = np.array([3.2, -0.7, -2.5])
TRIANGLE_V = np.array([1.1, 3.4, -4.5])


def _closure_phase(vis: np.ndarray) -> float:
    return float(np.degrees(model_closure_phases(vis, np.array([[0, 1, 2]]), np.zeros((1, 3), bool))[0]))


@pytest.mark.parametrize("name", ["mring", "crescent"])
def test_closure_phase_sign_follows_the_bright_side(name: str) -> None:
    model = MODELS[name]
    cps = {}
    for pa in (90.0, 180.0, 240.0, 270.0, 120.0):  # 270 and 120 are 90 and 240 mirrored East <-> West
        params = np.asarray(RING_PARAMS[name](pa))
        with jax.enable_x64(True):
            cp_model = _closure_phase(np.asarray(model.fn(params, TRIANGLE_U, TRIANGLE_V)))
        cp_image = _closure_phase(_dft(model.image(params, 256, FOV, 1), FOV, TRIANGLE_U, TRIANGLE_V))
        # the image's sampling (see above) moves the crescent's closure phase by < 0.1 deg
        assert abs(cp_model - cp_image) < 0.5, (name, pa, cp_model, cp_image)
        assert abs(cp_model) > 5.0, (name, pa, cp_model)  # a clear sign
        cps[pa] = cp_model
    # an East-West mirror changes the closure phase by far more than the tolerance above, so the
    # comparison with the image would catch it (a bright side due South cannot: 180 is its own mirror)
    assert abs(cps[90.0] - cps[270.0]) > 10.0 and abs(cps[240.0] - cps[120.0]) > 10.0, cps


@pytest.mark.parametrize("name", ["mring", "crescent", "gaussian"])
def test_gradients_finite_at_zero_spacing(name: str) -> None:
    model = MODELS[name]
    uu = jnp.asarray([0.0, 1e-9, 3.0])

    def parts(q: jax.Array, u: jax.Array, v: jax.Array) -> jax.Array:
        vis = model.fn(q, u, v)
        return jnp.stack([jnp.real(vis), jnp.imag(vis), jnp.abs(vis)])

    with jax.enable_x64(True):
        p = jnp.asarray((model.lower + model.upper) / 2, jnp.float64)
        # with respect to the parameters, u and v (no square root of rho^2 anywhere), at rho = 0,
        # near it and far from it; one compiled program
        g, du, dv = jax.jit(jax.jacfwd(parts, argnums=(0, 1, 2)))(p, uu, 0.5 * uu)  # g: (3 parts, 3 baselines, n)
        for jac in (g, du, dv):
            assert np.all(np.isfinite(np.asarray(jac))), (name, jac)
        # V(0, 0) = flux: its gradient is 1 for the flux and 0 for the rest
        gz = np.asarray(g[0, 0])
        assert gz[0] == pytest.approx(1.0) and np.allclose(gz[1:], 0.0, atol=1e-12), gz


def test_jit_vmap_float32() -> None:
    u = jnp.linspace(-8, 8, 40, dtype=jnp.float32)
    for name in ("mring", "crescent", "gaussian"):
        model = MODELS[name]
        a = (model.lower + model.upper) / 2
        b = model.lower + 0.3 * (model.upper - model.lower)
        batch = jnp.asarray(np.stack([a, b]), jnp.float32)
        out = jax.jit(jax.vmap(lambda p, fn=model.fn: fn(p, u, 0.3 * u)))(batch)
        assert out.shape == (2, 40) and out.dtype == jnp.complex64
        with jax.enable_x64(True):
            u64 = np.asarray(u, np.float64)
            ref = np.asarray(model.fn(np.asarray(batch[1], np.float64), u64, 0.3 * u64))
        # float32 rounding over ~100 operations, values up to the flux (1.5 Jy at most here): 2e-5 Jy
        assert np.max(np.abs(np.asarray(out[1]) - ref)) < 2e-5, name


def _numerical_fwhm(thickness: float, blur: float) -> float:
    """FWHM of the top hat convolved with the Gaussian, sampled 1e-3 uas apart (FFT convolution)."""
    from scipy import signal

    s = np.arange(-60000, 60001) * 1e-3
    hat = (np.abs(s) <= thickness / 2).astype(float)
    sigma = blur / np.sqrt(8 * np.log(2))
    profile = signal.fftconvolve(hat, np.exp(-0.5 * (s / sigma) ** 2), mode="same") if blur > 0 else hat
    above = s[profile >= profile.max() / 2]
    return above[-1] - above[0] + 1e-3


def test_derived_quantities() -> None:
    # m-ring: the parameters themselves, PA in degrees in [0, 360)
    out = mring.derived(np.array([[0.6, 42.0, 12.0, 0.3, -np.pi / 2]]))
    assert out["diameter"][0] == 42.0 and out["width"][0] == 12.0 and out["pa_bright"][0] == pytest.approx(270.0)
    # crescent: diameter R + Rin; width the FWHM of the blurred profile (1-D), checked on a fine grid
    for thickness, blur in ((11.0, 0.0), (11.0, 11.0), (4.0, 15.0), (20.0, 3.0)):
        rq = 1 - thickness / 30.0  # R = 30 uas
        got = crescent.derived(np.array([0.6, 60.0, rq, 0.5, 0.3, blur, 0.0]))
        assert float(got["diameter"]) == pytest.approx(30.0 * (1 + rq))
        # the sampled FWHM is good to a step or two, 2e-3 uas
        assert float(got["width"]) == pytest.approx(_numerical_fwhm(thickness, blur), abs=2e-3), (thickness, blur)
    assert float(crescent.derived(np.array([0.6, 60.0, 1.0, 0.0, 1.0, 9.0, 0.0]))["width"]) == 9.0
    # xringaus: its th counts from East towards North
    th_east = np.array([1, 30.0, 0.5, 0, 0, 1, 1, 0, 0.0])
    assert float(MODELS["xringaus"].derived(th_east)["pa_bright"]) == pytest.approx(90.0)
    # the Gaussian: both labellings of one image give the same long and short axes
    one = gaussian.derived(np.array([0.6, 30.0, 10.0, np.radians(20.0)]))
    two = gaussian.derived(np.array([0.6, 10.0, 30.0, np.radians(110.0)]))
    for key in ("fwhm_long", "fwhm_short", "pa_long"):
        assert float(one[key]) == pytest.approx(float(two[key])), key
    assert float(one["pa_long"]) == pytest.approx(20.0)
    with jax.enable_x64(True):
        u, v = _uv_along_and_across(40.0)
        a = gaussian.visibilities(np.array([0.6, 30.0, 10.0, np.radians(20.0)]), u, v)
        b = gaussian.visibilities(np.array([0.6, 10.0, 30.0, np.radians(110.0)]), u, v)
        assert np.max(np.abs(np.asarray(a) - np.asarray(b))) < 1e-14


def test_registry_and_fit_problem() -> None:
    assert set(MODELS) == {"xringaus", "xringaus13", "mring", "crescent", "gaussian"}
    for name, model in MODELS.items():
        assert model.name == name and len(model.names) == len(model.lower) == len(model.upper)
        assert np.all(model.lower < model.upper) and set(model.periodic) <= set(model.names)
        assert set(model.names) <= set(model.units)
        assert set(model.derived_periods) <= set(model.derived_units)
    for name in ("mring", "crescent"):  # the ring diameters the default boxes allow: 20-80 uas at least
        d = MODELS[name].derived(np.stack([MODELS[name].lower, MODELS[name].upper]))["diameter"]
        assert d[0] <= 20.0 and d[1] >= 80.0, (name, d)
    with pytest.raises(ValueError, match="model must be one of .*'mring'.*got 'ring'"):
        get_model("ring")
    # the fit picks the models by name: three stations at two times (one closure phase each)
    u = np.array([1.0, -3.0, 2.0, 1.5, -3.5, 2.0])
    v = np.array([2.0, 0.5, -2.5, 2.0, 1.0, -3.0])
    data = UVData(mjd=np.repeat([60000.0, 60000.1], 3), u=u, v=v, w=np.zeros(6), ant1=np.array([1, 2, 3] * 2),
                  ant2=np.array([2, 3, 1] * 2), vis=np.asarray(mring.visibilities(np.array(RING_PARAMS["mring"](150.0)),
                                                                                  u, v)), sigma=np.full(6, 0.01))
    for name in ("mring", "crescent", "gaussian"):
        problem = xringaus_problem(data, name)
        assert problem.names == list(MODELS[name].names) and problem.data.size == 6 + 2
    # at the truth the m-ring's data model gives back the noiseless amplitudes and closure phases
    problem = xringaus_problem(data, "mring")
    out = problem.evaluate(np.array(RING_PARAMS["mring"](150.0))[None])[0]
    assert np.allclose(out, problem.data, atol=1e-5)  # float32 rounding of values below 1


def test_bad_input() -> None:
    with pytest.raises(ValueError, match=r"mring takes the 5 parameters .* or the 7"):
        mring.visibilities(np.ones(6), 0.0, 0.0)
    with pytest.raises(ValueError, match="crescent takes 7 parameters"):
        crescent.visibilities(np.ones(5), 0.0, 0.0)
    with pytest.raises(ValueError, match="gaussian takes 4 parameters"):
        gaussian.visibilities(np.ones(5), 0.0, 0.0)
    with pytest.raises(ValueError, match="7 parameters"):
        crescent.image(np.ones(5))
    with pytest.raises(ValueError, match="npix"):
        gaussian.image(np.ones(4), npix=1)
    with pytest.raises(ValueError, match="fov"):
        mring.image(np.ones(5), fov=0.0)
