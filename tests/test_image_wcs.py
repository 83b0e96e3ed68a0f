"""Radio images the right way up at the right place: ``mw.deconv``'s gridding conventions, the
FITS WCS, the clean beam's position angle and ``multiwalk image``'s outputs (CPU, small images).

Sky order: ``image[row, col]``, north up the rows, east at column 0, the phase centre at
(npix // 2, npix // 2); pixel (row, col) is the direction (l, m) = (-(col - c), row - c) cells."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pytest

from multiwalk.deconv import major_cycle as mc
from multiwalk.io.fits import read_image, write_image

_SHARED = Path("shared") / "data" / "p9_meerkat_two_points"
# beside the checkout (../shared) or beside the folder of worktrees (../../shared)
DATA = next((p / _SHARED for p in Path(__file__).resolve().parents[1:4] if (p / _SHARED).is_dir()),
            Path(__file__).resolve().parents[1].parent / _SHARED)
C = 299_792_458.0  # m/s: at this frequency uvw in metres are wavelengths
SIGN = {"casa": +1.0, "fourier": -1.0}  # the phase sign of V = sum I exp(sign 2 pi i (ul + vm + w(n - 1)))


def sky_position(l: float, m: float, ra0: float, dec0: float) -> tuple[float, float]:
    """(RA, Dec) [rad] of the direction cosines (l east, m north) about (ra0, dec0): the inverse
    SIN projection (Thompson, Moran & Swenson, eq. 3.9), written out here independently of astropy."""
    n = math.sqrt(1.0 - l * l - m * m)
    dec = math.asin(m * math.cos(dec0) + n * math.sin(dec0))
    ra = ra0 + math.atan2(l, n * math.cos(dec0) - m * math.sin(dec0))
    return ra % (2 * math.pi), dec


def point_source_vis(uvw: np.ndarray, freqs: np.ndarray, l: float, m: float, flux: float, convention: str) -> np.ndarray:
    """(rows, channels) visibilities of a point source at (l, m), w-term included."""
    n = math.sqrt(1.0 - l * l - m * m)
    path = uvw[:, 0, None] * l + uvw[:, 1, None] * m + uvw[:, 2, None] * (n - 1.0)  # metres
    return flux * np.exp(SIGN[convention] * 2j * np.pi * path * freqs[None, :] / C)


@pytest.fixture(scope="module")
def wide_w():
    # 64 pixels of 1 arcmin; |u|, |v| < 1500 wavelengths (the image's Nyquist limit is 1719) and
    # |w| up to 1e5: at the source below (23 pixels out) w(n - 1) reaches 2.3 turns, so a wrong
    # w sign smears the source out.
    rng = np.random.default_rng(7)
    uvw = np.column_stack([rng.uniform(-1500, 1500, (400, 2)), rng.uniform(-1e5, 1e5, 400)])
    return uvw, np.array([C, 1.05 * C]), math.radians(1.0 / 60.0)


@pytest.mark.parametrize("convention", ["casa", "fourier"])
def test_point_source_at_its_pixel_and_sky_position(tmp_path, wide_w, convention):
    uvw, freqs, cell = wide_w
    npix, ra0, dec0 = 64, math.radians(150.0), math.radians(-30.0)
    d_row, d_col = 13, -19  # 13 pixels north, 19 east of the phase centre
    l, m = -d_col * cell, d_row * cell
    ra, dec = sky_position(l, m, ra0, dec0)
    vis = point_source_vis(uvw, freqs, l, m, 1.0, convention)
    dirty = mc.grid(vis, uvw, freqs, np.ones(vis.shape), npix, cell, convention=convention)
    row, col = np.unravel_index(np.argmax(dirty), dirty.shape)
    assert (row, col) == (npix // 2 + d_row, npix // 2 + d_col)
    # the peak is the flux divided by n (ducc0's divide_by_n): 1e-6 for ducc0's epsilon 1e-7
    assert dirty[row, col] == pytest.approx(1.0 / math.sqrt(1 - l * l - m * m), rel=1e-6)
    write_image(tmp_path / "dirty.fits", dirty, cell, ra=ra0, dec=dec0)
    back, wcs = read_image(tmp_path / "dirty.fits")
    np.testing.assert_array_equal(back, dirty.astype(np.float32))  # the array as written: sky order
    world = wcs.pixel_to_world(col, row)
    # astropy's SIN projection against the formula above: 1e-6 arcsec (float64 rounding, far below a pixel)
    assert world.ra.rad == pytest.approx(ra, abs=1e-6 / 206265) and world.dec.rad == pytest.approx(dec, abs=1e-6 / 206265)
    # the adjoint: the model's visibilities are the measurement equation's, 1e-6 relative (epsilon 1e-7)
    model = np.zeros((npix, npix))
    model[row, col] = 2.0
    np.testing.assert_allclose(mc.predict(model, uvw, freqs, cell, convention=convention),
                               point_source_vis(uvw, freqs, l, m, 2.0 / math.sqrt(1 - l * l - m * m), convention),
                               rtol=0, atol=2e-6)


def write_seed_layout(folder: Path, uvw: np.ndarray, freqs: np.ndarray, vis: np.ndarray, header: dict | None = None):
    """uvw.fits (baselines x 1 x 3), vis.fits (baselines x 1 x channels x 4 x re/im, XX = YY = vis)
    and freq.fits, the layout ``multiwalk image`` reads; ``header`` cards go into vis.fits."""
    from astropy.io import fits

    corr = np.zeros(vis.shape + (4, 2))
    corr[..., [0, 3], 0] = vis.real[..., None]
    corr[..., [0, 3], 1] = vis.imag[..., None]
    fits.PrimaryHDU(uvw[:, None, :]).writeto(folder / "uvw.fits")
    fits.PrimaryHDU(corr[:, None], header=fits.Header(header or {})).writeto(folder / "vis.fits")
    fits.PrimaryHDU(freqs).writeto(folder / "freq.fits")
    return [f"--{name}={folder / name}.fits" for name in ("uvw", "vis", "freq")]


def sky_frame_gaussian(path: Path) -> tuple[float, float, float]:
    """(FWHM major, FWHM minor [deg], position angle [deg, north through east]) of a Gaussian
    fitted by astropy.modeling to the main lobe (above half the peak) of the PSF in ``path``, on
    the sky offsets that its WCS gives (east, north)."""
    import scipy.ndimage
    from astropy.modeling import fitting, models

    psf, wcs = read_image(path)
    row, col = np.unravel_index(np.argmax(psf), psf.shape)
    labels, _ = scipy.ndimage.label(psf > 0.5 * psf[row, col])
    rows, cols = np.nonzero(labels == labels[row, col])
    centre = wcs.pixel_to_world(col, row)
    east, north = centre.spherical_offsets_to(wcs.pixel_to_world(cols, rows))
    model = models.Gaussian2D(1.0, 0.0, 0.0, 1e-4, 1e-4, 0.0, fixed={"amplitude": True, "x_mean": True, "y_mean": True})
    fit = fitting.LevMarLSQFitter()(model, east.deg, north.deg, psf[rows, cols] / psf[row, col])
    fwhm = 2 * math.sqrt(2 * math.log(2))
    major, minor = sorted([abs(fit.x_stddev.value), abs(fit.y_stddev.value)], reverse=True)
    # theta turns x (east) towards y (north); the major axis' angle from north towards east:
    axis = fit.theta.value + (0.0 if abs(fit.x_stddev.value) >= abs(fit.y_stddev.value) else math.pi / 2)
    position_angle = (90.0 - math.degrees(axis) + 90.0) % 180.0 - 90.0
    return fwhm * major, fwhm * minor, position_angle


def test_command_writes_sky_images(tmp_path):
    # A point source 1 Jy 7 pixels north and 5 east of the phase centre, 300 baselines drawn from an
    # elongated Gaussian: the PSF's main lobe is a Gaussian whose major axis lies 35 deg east of
    # north (perpendicular to the uv distribution's).  CLEAN's images and psf.fits, read back
    # through their WCS, have the source, the PSF peak and the beam where they are on the sky.
    from multiwalk.cli import main

    rng = np.random.default_rng(11)
    cell, npix, ra0, dec0 = math.radians(1 / 3600), 64, math.radians(210.0), math.radians(-45.0)
    pa_true = math.radians(35.0)
    major_dir, minor_dir = np.array([math.sin(pa_true), math.cos(pa_true)]), np.array([math.cos(pa_true), -math.sin(pa_true)])
    # PSF sigma along a direction d is 1 / (2 pi sigma_uv(d)): 3 pixels along the major axis, 1.5 across
    sigma_uv = [1 / (2 * math.pi * 3 * cell), 1 / (2 * math.pi * 1.5 * cell)]
    uv = rng.standard_normal((300, 2)) @ np.array([sigma_uv[0] * major_dir, sigma_uv[1] * minor_dir])
    uvw = np.column_stack([uv, rng.uniform(-50, 50, 300)])
    freqs = np.array([C])
    d_row, d_col = 7, -5
    l, m = -d_col * cell, d_row * cell
    vis = point_source_vis(uvw, freqs, l, m, 1.0, "casa")
    files = write_seed_layout(tmp_path, uvw, freqs, vis)
    out = tmp_path / "out"
    code = main(["image", *files, f"--npix={npix}", "--cell=1arcsec", "--ra=14h00m00s", "--dec=-45deg", "--solver=clean",
                 "--threshold=0.02", "--max-iterations=300", "--major-cycles=1", f"--out={out}"])
    assert code == 0
    want = sky_position(l, m, ra0, dec0)
    for name in ("dirty", "model"):
        image, wcs = read_image(out / f"{name}.fits")
        row, col = np.unravel_index(np.argmax(image), image.shape)
        world = wcs.pixel_to_world(col, row)
        assert (row, col) == (npix // 2 + d_row, npix // 2 + d_col), name
        assert world.ra.rad == pytest.approx(want[0], abs=1e-6 / 206265)
        assert world.dec.rad == pytest.approx(want[1], abs=1e-6 / 206265)
    psf, wcs = read_image(out / "psf.fits")
    assert np.unravel_index(np.argmax(psf), psf.shape) == (wcs.wcs.crpix[1] - 1, wcs.wcs.crpix[0] - 1) == (npix, npix)
    np.testing.assert_allclose(wcs.wcs.crval, [210.0, -45.0], rtol=0, atol=1e-12)
    from astropy.io import fits

    header = fits.getheader(out / "restored.fits")
    bmaj, bmin, bpa = sky_frame_gaussian(out / "psf.fits")
    # the same Gaussian fitted to the same pixels in two frames: 1e-3 relative, 0.05 deg
    assert header["BMAJ"] == pytest.approx(bmaj, rel=1e-3) and header["BMIN"] == pytest.approx(bmin, rel=1e-3)
    assert header["BPA"] == pytest.approx(bpa, abs=0.05)
    # and near the PSF drawn: 300 random baselines put ~6% noise in the PSF, so 5 deg (a mirrored
    # frame gives -35)
    assert header["BPA"] == pytest.approx(35.0, abs=5.0)
    # the restored image is the clean beam at the source (one component, 0.98 Jy) plus a residual
    # of rms 0.001: its lobe has the header's shape within 2% and 1 deg (mirrored: 70 deg off)
    shape = sky_frame_gaussian(out / "restored.fits")
    assert shape[:2] == pytest.approx((header["BMAJ"], header["BMIN"]), rel=0.02)
    assert shape[2] == pytest.approx(header["BPA"], abs=1.0)
    assert all((out / f"{name}.png").stat().st_size > 0 for name in ("dirty", "model", "residual", "restored"))


def phase_centre_args(files: list[str], *flags: str) -> argparse.Namespace:
    from multiwalk.cli import build_parser

    return build_parser().parse_args(["image", *files, "--out=unused", *flags])


def test_phase_centre_from_headers_or_flags(tmp_path):
    from multiwalk.commands.image import phase_centre

    uvw, freqs = np.zeros((2, 3)), np.array([1e9])
    bare = write_seed_layout(tmp_path, uvw, freqs, np.ones((2, 1)))
    assert phase_centre(phase_centre_args(bare, "--ra=12h", "--dec=-30d30m")) == pytest.approx((math.pi, math.radians(-30.5)))
    (tmp_path / "h").mkdir()
    headed = write_seed_layout(tmp_path / "h", uvw, freqs, np.ones((2, 1)), {"OBSRA": 15.0, "OBSDEC": -60.0})
    in_headers = pytest.approx((math.radians(15.0), math.radians(-60.0)))
    assert phase_centre(phase_centre_args(headed)) == in_headers
    assert phase_centre(phase_centre_args(headed, "--ra=1h", "--dec=-60deg")) == in_headers  # the same: accepted
    (tmp_path / "half").mkdir()
    half = write_seed_layout(tmp_path / "half", uvw, freqs, np.ones((2, 1)), {"OBSRA": 15.0})
    for files, flags, message in [
        (half, ("--ra=15deg", "--dec=-60deg"), r"vis.fits: the header has OBSRA but not the other"),
        (bare, (), r"phase centre is in none of .*uvw.fits.*give it with --ra and --dec"),
        (bare, ("--ra=10deg",), r"give both --ra and --dec"),
        (bare, ("--ra=10", "--dec=-30deg"), r"--ra '10' is not an angle with a unit"),
        (bare, ("--ra=10deg", "--dec=-95deg"), r"--dec must lie in \[-90deg, 90deg\], got '-95deg'"),
        (headed, ("--ra=10deg", "--dec=-60deg"),
         r"disagree with the phase centre in the files' headers \(OBSRA 15 deg, OBSDEC -60 deg\)"),
    ]:
        with pytest.raises(ValueError, match=message):
            phase_centre(phase_centre_args(files, *flags))


def test_png_axes_are_offsets_east_left_north_up():
    # A pixel 3 north and 2 east of the centre of 1-arcsec pixels is drawn at (+2", +3") on axes
    # whose RA offset grows to the left.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from multiwalk.plotting import plot_sky_image

    image = np.zeros((32, 32))
    image[16 + 3, 16 - 2] = 1.0
    fig = plot_sky_image(image, math.radians(1 / 3600))
    ax = fig.axes[0]
    left, right = ax.get_xlim()
    bottom, top = ax.get_ylim()
    assert left > right and top > bottom  # east left, north up
    shown = ax.images[0]
    x0, x1, y0, y1 = shown.get_extent()
    # the centre of pixel (row, col) on the axes, from the extent (edges) and the array's shape
    x = x0 + (16 - 2 + 0.5) * (x1 - x0) / 32
    y = y0 + (16 + 3 + 0.5) * (y1 - y0) / 32
    assert (x, y) == pytest.approx((2.0, 3.0), abs=1e-9) and shown.origin == "lower"
    plt.close(fig)


@pytest.mark.skipif(not (DATA / "dirty.fits").is_file(), reason=f"the MeerKAT data with CASA's dirty.fits is not at {DATA}")
def test_dirty_image_matches_casa(tmp_path):
    # The seed's MeerKAT observation (phase centre RA 0, Dec -30) imaged at CASA's 512 pixels of
    # 0.5 arcsec: pixel for pixel CASA's dirty.fits, whose WCS our header repeats.  Tolerance 1e-3
    # Jy/beam (0.035% of the 2.82 peak): CASA's gridding (not ducc0's, which agrees with a direct
    # Fourier sum to 1e-8) is off by up to 8.7e-4 at the image's corners, 4.5e-4 inside its centre
    # quarter; the image flipped north-south differs by 1.68.
    from astropy.io import fits

    from multiwalk.commands.image import read_visibilities

    vis, uvw, freqs = read_visibilities(DATA / "uvw.fits", DATA / "vis.fits", DATA / "freq.fits")
    cell = math.radians(0.5 / 3600)
    dirty = mc.grid(vis, uvw, freqs, np.ones(vis.shape), 512, cell)
    with fits.open(DATA / "dirty.fits") as hdul:
        casa, casa_header = np.squeeze(hdul[0].data).astype(np.float64), hdul[0].header
    assert np.abs(dirty - casa).max() <= 1e-3
    write_image(tmp_path / "dirty.fits", dirty, cell, ra=0.0, dec=math.radians(-30.0))
    ours = fits.getheader(tmp_path / "dirty.fits")
    for key in ("CTYPE1", "CTYPE2", "CRPIX1", "CRPIX2"):
        assert ours[key] == casa_header[key], key
    for key in ("CRVAL1", "CRVAL2", "CDELT1", "CDELT2"):
        assert ours[key] == pytest.approx(casa_header[key], rel=1e-12, abs=1e-12), key
