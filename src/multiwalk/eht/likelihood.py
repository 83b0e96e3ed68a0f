"""The likelihood of an image model given EHT data products: closure phases, log closure amplitudes, amplitudes.

Every product enters as the Gaussian likelihood of cuda_mcmc (its eq. 7),
``P(x | p) = prod_i (2 pi sigma_i^2)^(-1/2) exp(-chi2 / 2)``, so what the sampler sees is
``chi2 = chi2_cphase + chi2_logcamp + chi2_amp`` (the normalisation is constant):

* **cphase**: ``sum (wrap(cp_model - cp_obs) / sigma_cp)^2``, residuals wrapped to [-pi, pi).
* **logcamp**: ``sum ((lca_model - lca_obs) / sigma_lca)^2``.
* With ``covariance=True`` each time's closure residuals ``r`` (sharing baselines, so
  correlated) give ``r^T C^-1 r`` instead, with ``C`` from
  :func:`~multiwalk.eht.closure.closure_covariance`: ``r`` is whitened by ``L^-1``
  (``C = L L^T``), block by block.
* **amp**: visibility amplitudes with one unknown amplitude gain ``g_s`` per station per scan,
  ``|V_ab| = g_a g_b |M_ab|``, log-normal prior ``log g ~ N(0, gain_sigma^2)``.  In log
  amplitude (error ``sigma / |V|``, the high-SNR limit) the data are linear in ``x = log g``:
  ``r = log|V| - log|M| = A x + noise`` with ``A`` two ones per row.  So for a given model the
  gains are not sampled: per scan,
  ``chi2_amp = min_x [(r - A x)^T D (r - A x) + x^T x / gain_sigma^2]
  = r^T D r - b^T H^-1 b``, ``b = A^T D r``, ``H = A^T D A + I / gain_sigma^2``,
  ``D = diag(|V|^2 / sigma^2)``.  ``H`` depends on the data only, so ``H^-1`` is computed once
  (``(scans, stations, stations)``); one evaluation costs a segment sum over the rows and a
  small quadratic form per scan.  Because the problem is linear-Gaussian in ``x``, this profile
  is also the marginal likelihood (integrating the gains out adds ``log det H``, the same for
  every model): hundreds of nuisance parameters, none of them sampled.  The best gains of a
  model are ``x = H^-1 b`` (:meth:`EHTTerms.gains`).

Closure quantities cancel station gains exactly (phases and amplitudes); the amplitude term
constrains the flux and the ring's profile where closures are weak.  :class:`EHTTerms` holds the
data side (NumPy, made once); :func:`product_chi2` is the model side in ``jax.numpy``, one
value per product, for ONE parameter vector.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..io.uvdata import UVData
from ..io.uvprep import scan_numbers
from .closure import (
    ClosurePhases,
    LogClosureAmplitudes,
    closure_covariance,
    closure_phases,
    log_closure_amplitudes,
    model_closure_phases,
    model_log_closure_amplitudes,
)

__all__ = ["PRODUCTS", "PRODUCT_LABELS", "parse_products", "EHTTerms", "eht_terms", "product_chi2", "GAIN_SIGMA",
           "total_chi2_function", "product_chi2_function"]

#: The data products a fit may use, in the order their chi2 values are reported.
PRODUCTS = ("cphase", "logcamp", "amp")
PRODUCT_LABELS = {"cphase": "closure phases", "logcamp": "log closure amplitudes", "amp": "amplitudes (gains marginalised)"}
#: The log-normal prior's width of a station's amplitude gain (EHT calibration: about 10 %).
GAIN_SIGMA = 0.1


def parse_products(products: str | Iterable[str]) -> tuple[str, ...]:
    """``"cphase,logcamp"`` or ``("cphase", "logcamp")`` -> the products in :data:`PRODUCTS` order; ValueError otherwise."""
    items = products.split(",") if isinstance(products, str) else list(products)
    names = [str(s).strip() for s in items if str(s).strip()]
    unknown = [s for s in names if s not in PRODUCTS]
    if unknown or not names:
        raise ValueError(f"data products must be a comma-separated choice of {', '.join(PRODUCTS)} "
                         f"(e.g. cphase,logcamp), got {products!r}")
    return tuple(p for p in PRODUCTS if p in names)


@dataclass
class _Whitening:
    """Block-diagonal whitening of residuals: ``index`` (B, k) rows of each block (padding
    points at the extra zero residual after the last), ``matrix`` (B, k, k) ``L^-1`` per block."""

    index: np.ndarray
    matrix: np.ndarray


def _whitening(closures: ClosurePhases | LogClosureAmplitudes, data: UVData) -> _Whitening:
    blocks = closure_covariance(closures, data)
    size = max(len(b) for b in blocks)
    index = np.full((len(blocks), size), len(closures), np.int64)
    matrix = np.zeros((len(blocks), size, size))
    for b, (t, cov) in enumerate(zip(np.unique(closures.mjd), blocks)):
        members = np.flatnonzero(closures.mjd == t)
        index[b, : len(members)] = members
        matrix[b, : len(members), : len(members)] = np.linalg.inv(np.linalg.cholesky(cov))
    return _Whitening(index, matrix)


@dataclass
class _Gains:
    """The amplitude term's constants: ``slot1``/``slot2`` (n,) ``scan * n_stations + station``
    of each row's two stations; ``weight`` (n,) ``|V|^2 / sigma^2``; ``h_inv`` (scans, n_st, n_st)."""

    stations: np.ndarray  # (n_st,) station numbers in slot order
    scan: np.ndarray  # (n,) scan of each row
    slot1: np.ndarray
    slot2: np.ndarray
    weight: np.ndarray
    h_inv: np.ndarray


def _gain_terms(data: UVData, gain_sigma: float) -> _Gains:
    if np.any(data.amplitude == 0):
        row = int(np.flatnonzero(data.amplitude == 0)[0])
        raise ValueError(f"{data.origin or 'the data'}: row {row} has |V| = 0, whose log amplitude is undefined")
    scan, _ = scan_numbers(data.mjd)
    stations = np.unique(np.concatenate([data.ant1, data.ant2]))
    n_st, n_scans = len(stations), int(scan.max()) + 1
    local1, local2 = np.searchsorted(stations, data.ant1), np.searchsorted(stations, data.ant2)
    weight = (data.amplitude / data.sigma) ** 2
    h = np.broadcast_to(np.eye(n_st) / gain_sigma**2, (n_scans, n_st, n_st)).copy()
    for a, b in ((local1, local1), (local2, local2), (local1, local2), (local2, local1)):
        np.add.at(h, (scan, a, b), weight)
    return _Gains(stations=stations, scan=scan, slot1=scan * n_st + local1, slot2=scan * n_st + local2,
                  weight=weight, h_inv=np.linalg.inv(h))


@dataclass
class EHTTerms:
    """The data side of the likelihood (see the module): what is fitted, with its constants.

    ``products``: those used, in :data:`PRODUCTS` order; ``data``: the visibilities (all rows
    enter the model; ``amp`` uses every row); ``cphase`` / ``logcamp``: the closure sets (None
    when not used); ``covariance``: whether closures are whitened per time; ``gain_sigma``.
    """

    products: tuple[str, ...]
    data: UVData
    cphase: ClosurePhases | None
    logcamp: LogClosureAmplitudes | None
    covariance: bool
    gain_sigma: float
    _white: dict[str, _Whitening] = field(default_factory=dict, repr=False)
    _gains: _Gains | None = field(default=None, repr=False)

    def count(self, product: str) -> int:
        """The number of data of ``product`` (0 when not used)."""
        if product == "amp":
            return len(self.data) if "amp" in self.products else 0
        closures = getattr(self, product)
        return 0 if closures is None else len(closures)

    @property
    def n_data(self) -> int:
        return sum(self.count(p) for p in self.products)

    def args(self, dtype: Any) -> dict[str, Any]:
        """The arrays :func:`product_chi2` reads (the problem's ``args``): NumPy, in ``dtype``."""
        real = np.dtype(dtype)
        out: dict[str, Any] = {"u": np.asarray(self.data.u, real), "v": np.asarray(self.data.v, real)}
        if self.cphase is not None:
            out["cphase"] = {"index": self.cphase.index, "conj": self.cphase.conj,
                             "obs": np.asarray(self.cphase.value, real), "sigma": np.asarray(self.cphase.sigma, real)}
        if self.logcamp is not None:
            out["logcamp"] = {"index": self.logcamp.index, "obs": np.asarray(self.logcamp.value, real),
                              "sigma": np.asarray(self.logcamp.sigma, real)}
        for name, white in self._white.items():
            out[name]["white_index"], out[name]["white"] = white.index, np.asarray(white.matrix, real)
        if self._gains is not None:
            g = self._gains
            out["amp"] = {"log_obs": np.asarray(np.log(self.data.amplitude), real), "weight": np.asarray(g.weight, real),
                          "slot1": g.slot1, "slot2": g.slot2, "h_inv": np.asarray(g.h_inv, real)}
        return out

    def scan_of_rows(self) -> np.ndarray:
        """(n,) the scan of each visibility row (the gains' first index)."""
        if self._gains is None:
            raise ValueError("scans are kept only for fits that use amplitudes ('amp' in the data products)")
        return self._gains.scan

    def gains(self, model_vis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The best amplitude gains for model visibilities ``model_vis`` (n,) at the data's rows:
        ``(stations (n_st,), gains (scans, n_st))``, ``g = exp(H^-1 b)`` (1 where a station did not observe)."""
        if self._gains is None:
            raise ValueError("gains exist only for fits that use amplitudes ('amp' in the data products)")
        g = self._gains
        r = np.log(self.data.amplitude) - np.log(np.abs(np.asarray(model_vis)))
        n_scans, n_st = g.h_inv.shape[:2]
        b = (np.bincount(g.slot1, g.weight * r, n_scans * n_st) + np.bincount(g.slot2, g.weight * r, n_scans * n_st))
        x = np.einsum("sij,sj->si", g.h_inv, b.reshape(n_scans, n_st))
        return g.stations, np.exp(x)


def eht_terms(data: UVData, products: str | Iterable[str] = ("cphase", "logcamp"), *, covariance: bool = False,
              gain_sigma: float = GAIN_SIGMA) -> EHTTerms:
    """The :class:`EHTTerms` of ``data`` for ``products`` (see :func:`parse_products`).

    ValueError (naming the file) when a product cannot be formed: no time with 3 stations
    (closure phases) or 4 (log closure amplitudes), or a zero amplitude.
    """
    if not isinstance(data, UVData):
        raise TypeError(f"data must be a multiwalk.io.uvdata.UVData, got {type(data).__name__}")
    chosen = parse_products(products)
    if isinstance(gain_sigma, bool) or not (isinstance(gain_sigma, (int, float, np.number)) and np.isfinite(gain_sigma)
                                            and gain_sigma > 0):
        raise ValueError(f"gain_sigma must be a positive width of log(gain) (0.1 for 10 %), got {gain_sigma!r}")
    cp = closure_phases(data) if "cphase" in chosen else None
    lca = log_closure_amplitudes(data) if "logcamp" in chosen else None
    white = {}
    if covariance:
        white = {name: _whitening(c, data) for name, c in (("cphase", cp), ("logcamp", lca)) if c is not None}
    gains = _gain_terms(data, float(gain_sigma)) if "amp" in chosen else None
    return EHTTerms(products=chosen, data=data, cphase=cp, logcamp=lca, covariance=bool(covariance),
                    gain_sigma=float(gain_sigma), _white=white, _gains=gains)


# ---------------------------------------------------------------------------- the model side (jax.numpy)
_EXACT = jax.lax.Precision.HIGHEST  # the products' precision: the data's dtype in full on every device


def _sum_squares(residual: jax.Array, arrays: dict[str, Any]) -> jax.Array:
    """``sum (r / sigma)^2``, or with whitening blocks ``sum |L^-1 r_block|^2``."""
    if "white" not in arrays:
        return jnp.sum((residual / arrays["sigma"]) ** 2)
    padded = jnp.concatenate([residual, jnp.zeros(1, residual.dtype)])
    # HIGHEST: full float32 on a GPU too, whose default for float32 products is TensorFloat-32
    whitened = jnp.einsum("bij,bj->bi", arrays["white"], padded[arrays["white_index"]], precision=_EXACT)
    return jnp.sum(whitened**2)


def _amp_chi2(vis: jax.Array, arrays: dict[str, Any]) -> jax.Array:
    """The gain-profiled (= marginalised, up to a constant) log-amplitude chi2 (see the module)."""
    re, im = jnp.real(vis), jnp.imag(vis)
    r = arrays["log_obs"] - 0.5 * jnp.log(re * re + im * im)
    wr = arrays["weight"] * r
    h_inv = arrays["h_inv"]
    n_slots = h_inv.shape[0] * h_inv.shape[1]
    b = jnp.zeros(n_slots, r.dtype).at[arrays["slot1"]].add(wr).at[arrays["slot2"]].add(wr).reshape(h_inv.shape[:2])
    # the difference of two large terms: in TensorFloat-32 (a GPU's default for float32 products,
    # ~1e-3 relative) the gains' term alone was off by more than the fit's whole chi2
    return jnp.sum(r * wr) - jnp.einsum("si,sij,sj->", b, h_inv, b, precision=_EXACT)


def product_chi2(fn: Callable, products: tuple[str, ...], p: jax.Array, args: dict[str, Any]) -> jax.Array:
    """chi2 of each product in ``products`` (a vector in that order) for ONE parameter vector ``p``.

    ``fn(p, u, v)`` gives the model's complex visibilities; ``args`` is :meth:`EHTTerms.args`.
    """
    vis = fn(p, args["u"], args["v"])
    out = []
    for name in products:
        arrays = args[name]
        if name == "cphase":
            diff = model_closure_phases(vis, arrays["index"], arrays["conj"]) - arrays["obs"]
            out.append(_sum_squares(jnp.mod(diff + jnp.pi, 2 * jnp.pi) - jnp.pi, arrays))
        elif name == "logcamp":
            out.append(_sum_squares(model_log_closure_amplitudes(vis, arrays["index"]) - arrays["obs"], arrays))
        else:
            out.append(_amp_chi2(vis, arrays))
    return jnp.stack(out).astype(p.dtype)


@functools.cache
def total_chi2_function(fn: Callable, products: tuple[str, ...]) -> Callable[[jax.Array, dict], jax.Array]:
    """``f(p, args) -> chi2`` summed over ``products``: one function object per model and products,
    so fits to new data of the same shapes reuse the compiled sampler.  A partial of a module-level
    function: for the library's own models it has a name a later process knows
    (:mod:`multiwalk.program_store` then finds the fit's programs without tracing)."""
    return functools.partial(total_chi2, fn, products)


def total_chi2(fn: Callable, products: tuple[str, ...], p: jax.Array, args: dict[str, Any]) -> jax.Array:
    """The chi-square of model ``fn`` at ``p`` summed over the data ``products`` (see :func:`product_chi2`)."""
    return jnp.sum(product_chi2(fn, products, p, args))


@functools.cache
def product_chi2_function(fn: Callable, products: tuple[str, ...]) -> Callable[[jax.Array, dict], jax.Array]:
    """:func:`product_chi2` for ``fn`` and ``products``, jitted: ``f(p, args) -> (len(products),)``;
    one compiled function per model and products (the reports of every fit reuse it)."""
    return jax.jit(functools.partial(product_chi2, fn, products))
