"""``multiwalk image``: deconvolve visibilities (FITS) by major cycles; write FITS and PNG images.

    multiwalk image --uvw uvw.fits --vis vis.fits --freq freq.fits --npix 512 --cell 0.5arcsec \\
        --ra 0deg --dec=-30deg --solver cd --out DIR

uvw: baselines x times x 3 (metres); vis: baselines x times x channels x 4 correlations x re/im
(Stokes I = (XX + YY) / 2); freq: channels (Hz).  The phase centre is read from the files'
OBSRA/OBSDEC header keywords (degrees), or given by --ra/--dec where they have none.  Writes
dirty, psf, model, residual and restored images as FITS (north up, east left, with a WCS header
about the phase centre) and PNG (offsets from the phase centre in arcsec) into DIR.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Any

_UNITS = {"rad": 1.0, "deg": 0.017453292519943295, "arcmin": 2.908882086657216e-4, "arcsec": 4.84813681109536e-6}


def parse_angle(text: str) -> float:
    """``'0.5arcsec'``, ``'1e-5rad'``, ``'0.01deg'``, ``'0.2arcmin'`` -> radians."""
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(rad|deg|arcmin|arcsec)?\s*", text)
    if not m:
        raise ValueError(f"--cell {text!r} is not an angle: give a number and a unit, e.g. 0.5arcsec, 1e-5rad")
    value = float(m.group(1)) * _UNITS[m.group(2) or "rad"]
    if not value > 0:
        raise ValueError(f"--cell must be positive, got {text!r}")
    return value


def parse_sky_angle(text: str, name: str) -> float:
    """``--ra``/``--dec`` -> radians: a number with a unit (``'-30deg'``, ``'0.5rad'``) or
    sexagesimal (``'12h30m00s'``, ``'-30d00m00s'``); a bare number is refused (degrees or hours?)."""
    from astropy.coordinates import Angle
    from astropy.units import UnitsError

    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(rad|deg|arcmin|arcsec)\s*", text)
    try:
        value = float(m.group(1)) * _UNITS[m.group(2)] if m else float(Angle(text).rad)
    except (ValueError, TypeError, UnitsError):
        raise ValueError(
            f"{name} {text!r} is not an angle with a unit: e.g. {name}=-30deg, {name}=0.5rad, {name} 12h30m00s"
        ) from None
    if name == "--dec" and not abs(value) <= math.pi / 2:
        raise ValueError(f"--dec must lie in [-90deg, 90deg], got {text!r}")
    return value


def phase_centre(args: argparse.Namespace) -> tuple[float, float]:
    """(RA, Dec) in radians: the files' OBSRA/OBSDEC, or ``--ra``/``--dec`` where they have none.

    ValueError where neither gives it, where only one of --ra/--dec is given, or where the flags
    disagree with the files (the phase centre is where the data were phased: an image cannot move it)."""
    from ..io.fits import read_phase_centre

    given = [parse_sky_angle(text, name) for text, name in ((args.ra, "--ra"), (args.dec, "--dec")) if text is not None]
    if len(given) == 1:
        raise ValueError("give both --ra and --dec (the phase centre), or neither")
    from_files = read_phase_centre(args.uvw, args.vis, args.freq)
    if from_files is None and not given:
        raise ValueError(
            f"the phase centre is in none of {args.uvw}, {args.vis}, {args.freq} (no OBSRA/OBSDEC header keywords): "
            "give it with --ra and --dec, e.g. --ra 0deg --dec=-30deg"
        )
    if from_files is not None and given and not all(_same_angle(a, b) for a, b in zip(given, from_files)):
        raise ValueError(
            f"--ra {args.ra} --dec {args.dec} disagree with the phase centre in the files' headers "
            f"(OBSRA {math.degrees(from_files[0]):.10g} deg, OBSDEC {math.degrees(from_files[1]):.10g} deg): leave --ra/--dec out"
        )
    ra, dec = from_files if from_files is not None else given
    return ra, dec


def _same_angle(a: float, b: float, tolerance: float = 1e-9) -> bool:
    """Equal within ``tolerance`` radians (2e-4 arcsec), modulo a full turn."""
    return abs(math.remainder(a - b, 2 * math.pi)) <= tolerance


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "image", help="deconvolve visibilities (major cycles, coordinate descent or CLEAN) into FITS and PNG images",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--uvw", type=Path, required=True, help="FITS: baselines x times x 3, metres")
    p.add_argument("--vis", type=Path, required=True, help="FITS: baselines x times x channels x 4 correlations x re/im")
    p.add_argument("--freq", type=Path, required=True, help="FITS: channel frequencies, Hz")
    p.add_argument("--ra", type=str, default=None,
                   help="phase centre's right ascension, where the files' headers have no OBSRA (e.g. 0deg, 12h30m00s)")
    p.add_argument("--dec", type=str, default=None,
                   help="phase centre's declination, where the files' headers have no OBSDEC (e.g. --dec=-30deg)")
    p.add_argument("--convention", choices=["casa", "fourier"], default="casa",
                   help="phase sign of the visibilities: casa (Measurement Sets, V ~ exp(+2 pi i (ul + vm))) "
                        "or fourier (exp(-2 pi i ...)) (default: %(default)s)")
    p.add_argument("--npix", type=int, default=512, help="image side in pixels, even (default: %(default)s)")
    p.add_argument("--cell", type=str, default="0.5arcsec", help="pixel size with unit (default: %(default)s)")
    p.add_argument("--solver", choices=["cd", "cd-serial", "clean"], default="cd",
                   help="minor cycle: cd, the elastic net by block coordinate descent (many pixels per iteration); "
                        "cd-serial, the same objective by the seed's one-pixel greedy coordinate descent; clean, "
                        "Hogbom CLEAN (default: %(default)s)")
    p.add_argument("--lam", type=float, default=0.5,
                   help="cd, cd-serial: elastic-net weight lambda; the residual floor is ~lam / sum(PSF^2) Jy/beam "
                        "(default: %(default)s)")
    p.add_argument("--alpha", type=float, default=1.0, help="cd, cd-serial: elastic-net L1 share (default: %(default)s)")
    p.add_argument("--epsilon", type=float, default=None,
                   help="cd, cd-serial: stop when no pixel can change by more than this times the brightest pixel, on the exact "
                        "gradient map (default: the solver's, 1e-6)")
    p.add_argument("--gain", type=float, default=0.1, help="clean: loop gain (default: %(default)s)")
    p.add_argument("--threshold", type=float, default=0.01, help="clean: stop below this peak (default: %(default)s)")
    p.add_argument("--max-iterations", type=int, default=None,
                   help="minor iterations per major cycle (default: the solver's, cd 1000 blocks, cd-serial 100000 "
                        "pixels; clean 5000)")
    p.add_argument("--refresh-every", type=int, default=None,
                   help="cd-serial: exact gradient map every k iterations (default: the solver's, 100; cd computes "
                        "it every iteration)")
    p.add_argument("--major-cycles", type=int, default=3, help="(default: %(default)s)")
    p.add_argument("--out", type=Path, required=True, help="output folder (created)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=False, help="progress bars on stderr")
    p.set_defaults(handler=run, command_parser=p)


def read_visibilities(uvw_path: Path, vis_path: Path, freq_path: Path) -> tuple[Any, Any, Any]:
    """(Stokes I vis (rows, channels) complex, uvw (rows, 3), freqs) from the seed's FITS layout."""
    import numpy as np

    from ..io.fits import read_array

    uvw = read_array(uvw_path, "baselines x times x 3")
    vis = read_array(vis_path, "baselines x times x channels x 4 x 2")
    freqs = np.atleast_1d(read_array(freq_path, "channels"))
    if uvw.ndim != 3 or uvw.shape[-1] != 3:
        raise ValueError(f"{uvw_path}: expected baselines x times x 3 (metres), got shape {uvw.shape}")
    if vis.ndim != 5 or vis.shape[-2:] != (4, 2) or vis.shape[:2] != uvw.shape[:2] or vis.shape[2] != freqs.size:
        raise ValueError(
            f"{vis_path}: expected {uvw.shape[0]} x {uvw.shape[1]} x {freqs.size} x 4 x 2 "
            f"(baselines x times x channels x correlations x re/im), got shape {vis.shape}"
        )
    stokes_i = 0.5 * ((vis[..., 0, 0] + 1j * vis[..., 0, 1]) + (vis[..., 3, 0] + 1j * vis[..., 3, 1]))
    return stokes_i.reshape(-1, freqs.size), uvw.reshape(-1, 3), freqs


def write_outputs(out: Path, result: Any, ra: float, dec: float, freq: float, label: str) -> None:
    """dirty, model, residual, restored (FITS and PNG) and psf (FITS) of an ImagingResult into ``out``:
    sky order with the WCS about the phase centre (``ra``, ``dec`` in radians); the restored image
    carries the clean beam (BMAJ/BMIN/BPA)."""
    from ..io.fits import write_image
    from ..plotting import plot_sky_image

    centre = f"phase centre RA {math.degrees(ra) % 360:.6f} deg, Dec {math.degrees(dec):.6f} deg"
    for name, img, unit in (("dirty", result.dirty, "Jy/beam"), ("model", result.model, "Jy/pixel"),
                            ("residual", result.residual, "Jy/beam"), ("restored", result.restored, "Jy/beam")):
        write_image(out / f"{name}.fits", img, result.cell, ra=ra, dec=dec, freq=freq, unit=unit,
                    beam=result.beam if name == "restored" else None)
        plot_sky_image(img, result.cell, out / f"{name}.png", title=f"{name} ({label})\n{centre}", unit=unit)
    write_image(out / "psf.fits", result.psf, result.cell, ra=ra, dec=dec, freq=freq, unit="")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import multiwalk as mw

    try:
        cell = parse_angle(args.cell)
        if args.solver == "cd" and args.refresh_every is not None:
            raise ValueError(
                f"--refresh-every {args.refresh_every} applies to --solver cd-serial only: --solver cd computes the "
                "exact gradient map every iteration; leave it out or use --solver cd-serial"
            )
        if args.solver in ("cd", "cd-serial"):
            given = {"epsilon": args.epsilon, "max_iterations": args.max_iterations, "refresh_every": args.refresh_every}
            kind = mw.deconv.BlockCoordinateDescent if args.solver == "cd" else mw.deconv.CoordinateDescent
            solver: Any = kind(lam=args.lam, alpha=args.alpha, **{k: v for k, v in given.items() if v is not None})
        else:
            solver = mw.deconv.Clean(gain=args.gain, threshold=args.threshold, max_iterations=args.max_iterations or 5000)
        vis, uvw, freqs = read_visibilities(args.uvw, args.vis, args.freq)
        ra, dec = phase_centre(args)
    except (ValueError, TypeError, FileNotFoundError) as err:
        parser.error(str(err))
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        r = mw.deconv.image(vis, uvw, freqs, args.npix, cell, solver, major_cycles=args.major_cycles,
                            convention=args.convention, progress=args.progress)
    except (ValueError, TypeError) as err:
        parser.error(str(err))
    write_outputs(args.out, r, ra, dec, float(freqs.mean()), args.solver)
    print(r.message)
    print(f"wrote dirty, psf, model, residual, restored (.fits, .png but psf) to {args.out}")
    sys.stdout.flush()
    return 0 if r.success else (130 if r.status == mw.Status.INTERRUPTED else 1)
