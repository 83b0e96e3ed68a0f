"""The data and models behind cuda_mcmc's ``imgpu.Mcgpu_Sgra`` (its ``examples/sgra_model_fit``).

:class:`multiwalk.compat.imgpu.Mcgpu_Sgra` is built from these functions: the ``*_uvdata.txt``
file read into the seed's arrays (:func:`read_sgra_uvfile`), the closure phases, the 1-sigma
errors ``eamp`` / ``ecph`` as the seed accepts them (:func:`sigma_per_datum`), and the data
model for ``imodel`` 1 (the 9-parameter xringaus) or 2 (the 13-parameter xringaus2) in JAX
(:func:`sgra_data_model`).  :func:`phase_error_deg` makes the seed's ``pherr_vs_snr.txt`` table.

Units are the seed's: u, v in gigalambda, phases and closure phases in radians, amplitudes in Jy.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from scipy import integrate, special

from ..eht.closure import closure_phases, model_closure_phases
from ..io.uvdata import UVData, read_uvdata
from ..models.xringaus import PARAM_NAMES, PARAM_NAMES13, xringaus, xringaus13

__all__ = ["SgraData", "read_sgra_uvfile", "sgra_arrays", "sgra_visibilities", "n_params", "sigma_per_datum",
           "sgra_data_model", "closures_of", "phase_error_deg"]

_MODELS: dict[int, tuple[Callable[..., jax.Array], tuple[str, ...]]] = {
    1: (xringaus, PARAM_NAMES), 2: (xringaus13, PARAM_NAMES13)}


@dataclass
class SgraData:
    """The seed's visibility arrays, shape (nvis,): ``ulam, vlam, wlam`` (gigalambda), ``amp``
    (Jy), ``phase`` (rad), ``fsig`` (Jy, the file's sigmas), ``tsec`` (s), ``chan``, ``wei``;
    ``blin`` (nvis, 2) station numbers; ``uvdata`` the same rows as a UVData."""

    ulam: np.ndarray
    vlam: np.ndarray
    wlam: np.ndarray
    amp: np.ndarray
    phase: np.ndarray
    fsig: np.ndarray
    tsec: np.ndarray
    chan: np.ndarray
    wei: np.ndarray
    blin: np.ndarray
    uvdata: UVData


def read_sgra_uvfile(path: str | os.PathLike) -> SgraData:
    """A ``*_uvdata.txt`` file (:func:`multiwalk.io.uvdata.read_uvdata`) as the seed's arrays."""
    d = read_uvdata(path)
    return SgraData(ulam=d.u, vlam=d.v, wlam=d.w, amp=np.abs(d.vis), phase=np.angle(d.vis), fsig=d.sigma,
                    tsec=d.mjd * 86400.0, chan=d.chan, wei=d.weight, blin=np.stack([d.ant1, d.ant2], axis=1),
                    uvdata=d)


def sgra_arrays(ulam: Any, vlam: Any, amp: Any, phase: Any, eamp: Any, tsec: Any, blin: Any,
                wlam: Any = None, chan: Any = None, wei: Any = None) -> SgraData:
    """The seed's arrays given one by one (no ``uvfile``); ``tsec`` and ``blin`` place the rows in
    time and on baselines, which closure phases need.  ``eamp`` here only fills the rows' sigma."""
    given = {"ulam": ulam, "vlam": vlam, "amp": amp, "phase": phase}
    missing = [k for k, v in given.items() if v is None]
    if missing:
        raise TypeError(f"Mcgpu_Sgra needs uvfile= or the arrays {', '.join(missing)} (one value per visibility)")
    u, v, a, ph = (np.asarray(given[k], np.float64).ravel() for k in given)
    n = u.size
    for name, arr in (("vlam", v), ("amp", a), ("phase", ph)):
        if arr.size != n:
            raise ValueError(f"{name} has {arr.size} values but ulam has {n}: give one per visibility")
    t = np.zeros(n) if tsec is None else np.asarray(tsec, np.float64).ravel()
    bl = np.tile([1, 2], (n, 1)) if blin is None else np.asarray(blin, np.int64).reshape(n, 2)
    sig = sigma_per_datum("eamp", eamp, n, np.ones(n))
    d = UVData(mjd=t / 86400.0, u=u, v=v, w=np.zeros(n) if wlam is None else np.asarray(wlam, np.float64).ravel(),
               ant1=bl[:, 0], ant2=bl[:, 1], vis=a * np.exp(1j * ph), sigma=sig, weight=wei, chan=chan)
    return SgraData(ulam=u, vlam=v, wlam=d.w, amp=a, phase=ph, fsig=sig, tsec=t, chan=d.chan, wei=d.weight,
                    blin=bl, uvdata=d)


def n_params(imodel: int) -> int:
    """9 for ``imodel=1`` (xringaus), 13 for ``imodel=2`` (xringaus2); ValueError otherwise."""
    if imodel not in _MODELS:
        raise ValueError(f"imodel must be 1 (the 9-parameter xringaus) or 2 (the 13-parameter xringaus2), got {imodel!r}")
    return len(_MODELS[imodel][1])


def sgra_visibilities(imodel: int) -> Callable[..., jax.Array]:
    """The complex visibility function ``f(p, u, v)`` of ``imodel`` (1 or 2)."""
    n_params(imodel)
    return _MODELS[imodel][0]


def sigma_per_datum(name: str, value: Any, n: int, default: np.ndarray | None) -> np.ndarray:
    """``eamp`` / ``ecph`` as the seed takes them: None (``default``; an error when there is none),
    one number for every datum, or ``n`` numbers; each must be positive and finite."""
    if value is None:
        if default is None:
            raise ValueError(f"{name} is needed: the 1-sigma error of the closure phases (radians), "
                             "one number or one per closure phase")
        return np.asarray(default, np.float64)
    arr = np.asarray(value, np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    elif arr.shape != (n,):
        raise ValueError(f"{name} has {arr.size} values but there are {n} data: give one number or {n}")
    bad = ~(np.isfinite(arr) & (arr > 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}[{i}]={arr[i]} must be positive and finite (a 1-sigma error)")
    return arr


def closures_of(data: SgraData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(cphs, cpix, conj)`` of the data: closure phases (rad) of a maximal independent set of
    triangles at each time (:func:`multiwalk.eht.closure.closure_phases`), the rows of each
    triangle's three baselines (ncph, 3) and whether a row enters conjugated (ncph, 3)."""
    cp = closure_phases(data.uvdata)
    return cp.value, cp.index.astype(np.int32), cp.conj


@functools.cache
def sgra_data_model(imodel: int, external_closures: bool) -> Callable[[jax.Array, tuple], jax.Array]:
    """``f(p, (u, v, cpix, conj, uvcp)) -> concat(|V|, closure phases)`` for ONE parameter vector.

    The closure phases are those of the triangles ``cpix`` / ``conj`` of the data's rows, or, with
    ``external_closures``, ``arg(V(u1, v1) V(u2, v2) V(u3, v3))`` with ``u3 = -(u1 + u2)`` from
    the rows ``(u1, v1, u2, v2)`` of ``uvcp``.  One function per case, so fits of new data of the
    same shapes reuse the compiled sampler.
    """
    vis_fn = sgra_visibilities(imodel)

    def sgra_amplitudes_and_closures(p: jax.Array, args: tuple) -> jax.Array:
        u, v, cpix, conj, uvcp = args
        vis = vis_fn(p, u, v)
        if external_closures:
            legs = [vis_fn(p, uvcp[:, 0], uvcp[:, 1]), vis_fn(p, uvcp[:, 2], uvcp[:, 3]),
                    vis_fn(p, -uvcp[:, 0] - uvcp[:, 2], -uvcp[:, 1] - uvcp[:, 3])]
            triple = legs[0] * legs[1] * legs[2]
            cph = jnp.arctan2(jnp.imag(triple), jnp.real(triple))
        else:
            cph = model_closure_phases(vis, cpix, conj)
        return jnp.concatenate([jnp.abs(vis), cph]).astype(p.dtype)

    return sgra_amplitudes_and_closures


def phase_error_deg(snr: Any) -> np.ndarray:
    """The standard deviation (degrees) of the phase of a visibility of signal-to-noise ``snr``
    (amplitude over the sigma of its real and of its imaginary part), from the exact phase
    density of a constant plus complex Gaussian noise: the seed's ``pherr_vs_snr.txt`` table
    (``phase_error_deg(np.arange(0, 30.01, 0.01))``).  ``snr = 0``: 180/sqrt(3) (uniform)."""
    s = np.atleast_1d(np.asarray(snr, np.float64))
    phi = np.linspace(-np.pi, np.pi, 4001)
    c = s[:, None] * np.cos(phi)[None, :]
    # p(phi) = (exp(-s^2/2) + sqrt(pi/2) c exp(-(s^2 - c^2)/2) (1 + erf(c / sqrt 2))) / (2 pi),
    # c = s cos(phi); s^2 >= c^2, so no term overflows.
    dens = (np.exp(-s[:, None] ** 2 / 2) + np.sqrt(np.pi / 2) * c * np.exp(-(s[:, None] ** 2 - c**2) / 2)
            * special.erfc(-c / np.sqrt(2))) / (2 * np.pi)
    var = integrate.trapezoid(phi**2 * dens, phi, axis=1) / integrate.trapezoid(dens, phi, axis=1)
    return np.rad2deg(np.sqrt(var)).reshape(np.shape(snr))
