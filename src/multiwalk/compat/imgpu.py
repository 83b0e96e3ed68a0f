"""cuda_mcmc's ``imgpu.Mcgpu`` (seed 000, sections 4.3 and 5.4) as a thin wrapper over the modern API.

Old scripts keep their shape::

    from multiwalk.compat.imgpu import Mcgpu
    solver = Mcgpu(pdescr=pdescr1, pmint=pmint1, pmaxt=pmaxt1, model=model)
    solver.burnin_and_search()
    best = solver.pout[:, solver.chi2.argmin()]

Everything algorithmic is :class:`multiwalk.Problem` + :class:`multiwalk.ReplicaExchange` +
:func:`multiwalk.solve`; this module only translates names and array layouts.  The same
``seed`` and options give exactly the samples of ``mw.solve(mc.problem, mc.solver, seed=mc.seed)``.

Differences from the CUDA original, all deliberate:

* ``model.cuh`` becomes a JAX function ``model(p, coor, icoor, dat, idat, imodel) -> datm`` for
  ONE full parameter vector ``p`` (length ``nptot``, fixed values filled in) returning all
  ``ndat`` model values at once (``datm`` has ``dat``'s shape).
* ``npass`` is accepted and ignored: the model computes every datum in one call, so several
  passes (amplitudes, then closure phases from them) are just lines of the same function.
* The model's return code 2 ("this datum is an angle") becomes the ``angular_data=`` mask
  (one bool per datum): those residuals are wrapped to [-pi, pi) before squaring.
* Angular parameters (``pdescr == 2``) are periodic with period ``pmaxt - pmint``: a step that
  leaves ``[pmint, pmaxt)`` is wrapped back into it.  The seed wraps angles into [-pi, pi) with
  ``atan2`` and then rejects values outside the prior; the two agree for the usual
  ``pmint=-pi, pmaxt=pi`` (or any full 2*pi range).
* Every temperature is recorded, as in the seed (``ReplicaExchange(record_temperatures=True)``):
  ``pout_4d [nprm, nbeta, nseq, niter]`` and ``tout [nbeta, nseq, niter]`` take
  ``niter * nseq * nbeta * (nprm + 1)`` values; the chi2 of every temperature is in
  ``result.fun_trace_all``.
* ``pmint`` / ``pmaxt`` of fixed parameters (``pdescr == 0``) are ignored, as in the seed.
* ``reset_gpu()`` is a no-op: JAX manages device memory.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..problem import Problem
from ..solve import solve
from ..solvers.base import check_int_option
from ..solvers.replica_exchange import ReplicaExchange, ReplicaExchangeResult
from . import imgpu_sgra as sgra

__all__ = ["Mcgpu", "Mcgpu_Sgra"]

_PDESCR_VALUES = (0, 1, 2)


def _vector(name: str, value: Any, n: int) -> np.ndarray:
    """A finite float vector of ``n`` entries; errors name the argument."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a sequence of numbers, got {value!r}") from err
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} has shape {arr.shape} but pdescr gives nptot={n}: give one value per parameter")
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"{name}[{bad}]={arr[bad]} is not finite")
    return arr


def _int_option(name: str, value: Any, minimum: int) -> int:
    check_int_option(name, value, minimum)
    return int(value)


def _aux_array(name: str, value: Any, integer: bool) -> np.ndarray:
    """``coor`` / ``icoor`` / ``idat``: any shape, default one zero like the seed."""
    if value is None:
        return np.zeros(1, np.int32 if integer else np.float64)
    arr = np.asarray(value)
    if integer and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integers (the seed's np.int32 array), got dtype {arr.dtype}")
    if not integer and not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    return arr.astype(np.int32) if integer else arr.astype(np.float64)


def _time_seed() -> int:
    """A 32-bit seed from the clock and the process id, like the seed's time-based default."""
    return (time.time_ns() ^ (os.getpid() << 16)) & 0xFFFFFFFF


def _parameters(pdescr: Any, ptotal: Any, pmint: Any, pmaxt: Any) -> tuple[np.ndarray, ...]:
    """``(pdescr, ptotal, pmint, pmaxt)`` checked: ``[nptot]`` int32 descriptors 0/1/2 (not all
    0) and float64 values (ptotal defaults to zeros), ``pmint < pmaxt`` where not fixed."""
    if pdescr is None:
        raise TypeError(
            "Mcgpu needs pdescr=[...]: one descriptor per parameter, "
            "0 fixed (value from ptotal), 1 normal, 2 angular"
        )
    pd = np.asarray(pdescr)
    if pd.ndim != 1 or pd.size == 0:
        raise ValueError(f"pdescr must be a non-empty 1-D sequence of 0/1/2, got shape {pd.shape}")
    if not (np.issubdtype(pd.dtype, np.integer) or np.issubdtype(pd.dtype, np.floating)) \
            or np.any(pd != np.round(pd)):
        raise TypeError(f"pdescr must hold the integers 0, 1 or 2, got {pdescr!r}")
    pd = pd.astype(np.int32)
    for i, v in enumerate(pd):
        if v not in _PDESCR_VALUES:
            raise ValueError(f"pdescr[{i}]={v} is not 0 (fixed), 1 (normal) or 2 (angular)")
    nptot = int(pd.size)
    if not np.any(pd != 0):
        raise ValueError("pdescr is all zeros: every parameter is fixed; mark at least one with 1 or 2")
    if pmint is None or pmaxt is None:
        missing = " and ".join(n for n, v in (("pmint", pmint), ("pmaxt", pmaxt)) if v is None)
        raise TypeError(f"Mcgpu needs {missing}: the lower and upper limits of every parameter (length {nptot})")
    lo = _vector("pmint", pmint, nptot)
    hi = _vector("pmaxt", pmaxt, nptot)
    pt = np.zeros(nptot) if ptotal is None else _vector("ptotal", ptotal, nptot)
    for i in np.flatnonzero(pd != 0):
        if not lo[i] < hi[i]:
            raise ValueError(
                f"pmint[{i}]={lo[i]} is not below pmaxt[{i}]={hi[i]}: each lower limit must be "
                "strictly below its upper limit"
            )
    return pd, pt, lo, hi


def _model_inputs(model: Any, dat: Any, std2r: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(dat, std2r)`` as float64 arrays of dat's shape (defaults ``[0.]`` and ones), after
    checking that ``model`` is given and callable; std2r positive and finite."""
    if model is None:
        raise TypeError(
            "Mcgpu needs model=f with f(p, coor, icoor, dat, idat, imodel) -> datm, written in "
            "jax.numpy for ONE parameter vector p of length nptot (it replaces model.cuh)"
        )
    if not callable(model):
        raise TypeError(f"model must be a function f(p, coor, icoor, dat, idat, imodel), got {model!r}")
    d = np.atleast_1d(np.asarray(np.zeros(1) if dat is None else dat))
    if not (np.issubdtype(d.dtype, np.floating) or np.issubdtype(d.dtype, np.integer)):
        raise TypeError(f"dat must hold real numbers, got dtype {d.dtype}")
    d = d.astype(np.float64)
    if std2r is None:
        return d, np.ones(d.shape)
    try:
        s2r = np.broadcast_to(np.asarray(std2r, dtype=np.float64), d.shape).copy()
    except ValueError as err:
        raise ValueError(
            f"std2r has shape {np.shape(std2r)} but dat has shape {d.shape}: give one 1/sigma^2 per datum"
        ) from err
    ok = np.isfinite(s2r) & (s2r > 0)
    if not np.all(ok):
        bad = tuple(int(i) for i in np.argwhere(~ok)[0])
        raise ValueError(
            f"std2r{list(bad)}={s2r[bad]} must be positive and finite: it is 1/sigma^2 of that datum "
            "(drop a datum instead of giving it zero weight)"
        )
    return d, s2r


def _betas(beta: Any) -> tuple[float, ...] | None:
    """Explicit inverse temperatures, checked: in (0, 1], strictly decreasing; None if not given."""
    if beta is None:
        return None
    b = np.asarray(beta, dtype=np.float64)
    if b.ndim != 1 or b.size == 0:
        raise ValueError(f"beta must be a non-empty 1-D sequence of inverse temperatures, got shape {b.shape}")
    if not np.all(np.isfinite(b) & (b > 0) & (b <= 1)):
        raise ValueError(f"beta values must lie in (0, 1], got {b.tolist()}")
    if np.any(np.diff(b) >= 0):
        raise ValueError(f"beta must be strictly decreasing (coldest, beta=1, first), got {b.tolist()}")
    return tuple(float(v) for v in b)


def _seed(seed: Any) -> int:
    """The seed as a Python int in [0, 2**64), or one from the clock when None."""
    if seed is None:
        seed = _time_seed()
    elif isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**64:
        raise ValueError(f"seed must be an integer in [0, 2**64) (the seed's np.uint64) or None, got {seed!r}")
    return int(seed)


def _box_holding_fixed(lo: np.ndarray, hi: np.ndarray, pt: np.ndarray,
                       fixed_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Problem's box: pmint, pmaxt, widened where a parameter is fixed so that it holds the
    fixed value (the seed ignores the limits of fixed parameters)."""
    lo_p, hi_p = lo.copy(), hi.copy()
    for i in np.flatnonzero(fixed_mask):  # bounds of fixed parameters are unused: make them hold the value
        lo_p[i] = min(lo[i], pt[i])
        hi_p[i] = max(hi[i], pt[i])
        if not lo_p[i] < hi_p[i]:
            lo_p[i], hi_p[i] = pt[i] - 0.5, pt[i] + 0.5
    return lo_p, hi_p


def _problem(model: Callable[..., Any], args: tuple[jax.Array, ...], d: np.ndarray, s2r: np.ndarray,
             pd: np.ndarray, pt: np.ndarray, lo: np.ndarray, hi: np.ndarray, angular_data: Any) -> Problem:
    """The seed's arguments as a Problem: ``model(p, args)`` fitted to ``dat`` with sigma
    ``1 / sqrt(std2r)``, the box pmint .. pmaxt (holding the fixed values), parameters with
    ``pdescr`` 0 fixed at ``ptotal``, 2 periodic, named ``p0, p1, ...``."""
    fixed_mask = pd == 0
    lo_p, hi_p = _box_holding_fixed(lo, hi, pt, fixed_mask)
    return Problem(
        model=model,
        data=d,
        sigma=1.0 / np.sqrt(s2r),
        lower=lo_p,
        upper=hi_p,
        fixed={int(i): float(pt[i]) for i in np.flatnonzero(fixed_mask)},
        periodic=pd == 2,
        angular_data=angular_data,
        args=args,
        names=[f"p{i}" for i in range(pd.size)],
    )


class Mcgpu:
    """Replica-exchange MCMC with cuda_mcmc's ``imgpu.Mcgpu`` names, run by :func:`multiwalk.solve`.

    Parameters (the seed's names and meanings; see section 4.3 of the seed document)
    ----------
    coor, icoor, idat : float / integer / integer arrays handed to ``model`` (default ``[0]``).
    dat : the data ``[ndat]`` the model is compared with (default ``[0.]``: minimise the model).
    std2r : ``1 / sigma^2`` per datum (default ones); becomes ``Problem(sigma=1 / sqrt(std2r))``.
    pdescr : ``[nptot]`` descriptors: 0 fixed (value from ``ptotal``), 1 normal, 2 angular
        (periodic with period ``pmaxt - pmint``).  Required.
    ptotal : ``[nptot]`` parameter values; only the fixed ones (``pdescr == 0``) are used.
    pmint, pmaxt : ``[nptot]`` the box (uniform prior) of the search.  Required.
    beta : explicit inverse temperatures, decreasing from the coldest; ``nbeta = len(beta)``.
    beta1, betan : coldest and hottest beta of the geometric ladder (defaults 1 and 1e-4).
    seed : random seed; ``None`` picks one from the clock, stored in ``self.seed``.  Seeds up to
        ``2**32 - 1`` go to :func:`multiwalk.solve` unchanged; larger 64-bit seeds are folded to
        32 bits (xor of the halves), since JAX's default 32-bit keys would drop the high bits.
    imodel : an integer passed to ``model`` (e.g. to choose between several models); it is a
        plain Python int, so the model may branch on it with ``if``.
    npass : accepted for old scripts and ignored (must be >= 1): the model computes every
        datum in one call.
    nadj, nbeta, nseq, nburn, niter : as :class:`multiwalk.ReplicaExchange`.
    model : ``model(p, coor, icoor, dat, idat, imodel) -> datm``, written in ``jax.numpy`` for
        ONE full parameter vector ``p`` of length ``nptot``; replaces ``model.cuh``.  Required.
    angular_data : optional bool mask of ``dat``'s shape (an extension): the data that the
        seed's ``model()`` flags with return code 2 (angles); their residuals are wrapped to
        [-pi, pi) before squaring.

    After :meth:`burnin_and_search`: ``pout [nprm, nseq*niter]`` (the coldest chain), ``chi2 [nseq*niter]``,
    ``pout_4d [nprm, nbeta, nseq, niter]`` (every temperature), ``chi2_2d [nseq, niter]``,
    ``tout [nbeta, nseq, niter]`` (``tcur`` after each iteration: the replica at each temperature),
    ``n_hist [nadj, nprm, nbeta, nseq]`` (the last ``nadj`` burn-in outcomes of each parameter, 1
    accepted, in slot ``n_cnt % nadj`` of the seed's count from 1),
    ``n_acpt`` and ``n_cnt [nprm, nbeta, nseq]`` (accepted / tried moves in the main stage),
    ``n_exch [nbeta, nseq]`` (accepted exchanges of pair (k, k+1) in row k; last row zero),
    ``tcur [nbeta, nseq]`` (replica label at each temperature), ``pstp [nprm, nbeta, nseq]``
    (adapted steps) and ``result`` (the :class:`multiwalk.ReplicaExchangeResult`).
    """

    def __init__(
        self,
        coor: Any = None,
        dat: Any = None,
        std2r: Any = None,
        icoor: Any = None,
        idat: Any = None,
        pdescr: Any = None,
        ptotal: Any = None,
        pmint: Any = None,
        pmaxt: Any = None,
        beta: Any = None,
        beta1: float | None = None,
        betan: float | None = None,
        seed: int | None = None,
        imodel: int = 0,
        npass: int = 1,
        nadj: int = 100,
        nbeta: int = 32,
        nseq: int = 14,
        nburn: int = 300,
        niter: int = 500,
        model: Callable[..., Any] | None = None,
        *,
        angular_data: Any = None,
    ) -> None:
        # every argument is checked first, in this order, before anything is traced
        pd, pt, lo, hi = _parameters(pdescr, ptotal, pmint, pmaxt)
        nptot = int(pd.size)
        d, s2r = _model_inputs(model, dat, std2r)
        coor_a = _aux_array("coor", coor, integer=False)
        icoor_a = _aux_array("icoor", icoor, integer=True)
        idat_a = _aux_array("idat", idat, integer=True)
        imodel = _int_option("imodel", imodel, -(2**31))
        npass = _int_option("npass", npass, 1)
        betas = _betas(beta)
        if betas is not None:
            nbeta = len(betas)
        beta1 = 1.0 if beta1 is None else float(beta1)
        betan = 1e-4 if betan is None else float(betan)
        seed = _seed(seed)

        # --- the modern objects ------------------------------------------------------------
        fixed_mask = pd == 0
        shape = d.shape
        im = imodel

        # defined here, as it was: the problem's identity in a checkpoint digests this function's
        # name, code and closure, so a checkpoint written before stays resumable
        def _model(p: jax.Array, args: tuple[jax.Array, ...]) -> jax.Array:
            c, ic, dd, idd = args
            out = jnp.asarray(model(p, c, ic, dd, idd, im))
            return out.reshape(shape) if out.size == d.size and out.shape != shape else out

        dt = jnp.result_type(float)
        args = (jnp.asarray(coor_a, dt), jnp.asarray(icoor_a), jnp.asarray(d, dt), jnp.asarray(idat_a))
        self.problem = _problem(_model, args, d, s2r, pd, pt, lo, hi, angular_data)
        self.solver = ReplicaExchange(nbeta=nbeta, nseq=nseq, nburn=nburn, niter=niter, beta1=beta1, betan=betan,
                                      betas=betas, nadj=nadj, record_temperatures=True)  # pout, tout: every temperature

        # --- the seed's attributes ---------------------------------------------------------
        self.model = model
        self.coor, self.icoor, self.dat, self.idat = coor_a, icoor_a, d, idat_a
        self.std2r = s2r
        self.pdescr, self.ptotal, self.pmint, self.pmaxt = pd, pt, lo, hi
        self.angular_data = None if angular_data is None else np.asarray(angular_data)
        self.beta = self.solver.ladder()
        self.beta1, self.betan = beta1, betan
        self.seed = seed
        self.imodel, self.npass = imodel, npass
        self.nadj, self.nbeta, self.nseq = self.solver.nadj, self.solver.nbeta, self.solver.nseq
        self.nburn, self.niter = self.solver.nburn, self.solver.niter
        self.nptot = nptot
        self.ivar = np.flatnonzero(~fixed_mask).astype(np.int32)
        self.nprm = int(self.ivar.size)
        self.invar = np.full(nptot, -1, np.int32)
        self.invar[self.ivar] = np.arange(self.nprm, dtype=np.int32)
        self.ndat, self.ncoor, self.nicoor, self.nidat = d.size, coor_a.size, icoor_a.size, idat_a.size
        self._clear_outputs()

    def _clear_outputs(self) -> None:
        """The outputs, None until :meth:`burnin_and_search` fills them."""
        self.result: ReplicaExchangeResult | None = None
        self.pout: np.ndarray | None = None
        self.chi2: np.ndarray | None = None
        self.pout_4d: np.ndarray | None = None
        self.tout: np.ndarray | None = None
        self.n_hist: np.ndarray | None = None
        self.chi2_2d: np.ndarray | None = None
        self.n_acpt: np.ndarray | None = None
        self.n_cnt: np.ndarray | None = None
        self.n_exch: np.ndarray | None = None
        self.tcur: np.ndarray | None = None
        self.pstp: np.ndarray | None = None

    @property
    def solve_seed(self) -> int:
        """The seed handed to :func:`multiwalk.solve` (``seed`` itself when below 2**32)."""
        s = self.seed
        return s if s < 2**32 else (s ^ (s >> 32)) & 0xFFFFFFFF

    def burnin_and_search(
        self,
        *,
        progress: bool | None = None,
        time_limit: float | None = None,
        checkpoint: str | os.PathLike | None = None,
        resume: str | os.PathLike | None = None,
        callback: Callable[[dict[str, Any]], None] | None = None,
        chunk_seconds: float = 1.0,
        checkpoint_every: float = 0.0,
    ) -> ReplicaExchangeResult:
        """Run burn-in and the main stage with :func:`multiwalk.solve`; fill the seed's output attributes.

        The keywords are those of :func:`multiwalk.solve`.  Returns the modern result (also in
        ``self.result``).  After a time limit or Ctrl-C the ``niter`` axes hold the iterations done.
        """
        res = solve(
            self.problem,
            self.solver,
            seed=self.solve_seed,
            progress=progress,
            time_limit=time_limit,
            checkpoint=checkpoint,
            resume=resume,
            callback=callback,
            chunk_seconds=chunk_seconds,
            checkpoint_every=checkpoint_every,
        )
        # samples_all (niter, nseq, nbeta, nptot) -> pout_4d (nprm, nbeta, nseq, niter), every temperature
        free = np.asarray(res.samples_all)[..., self.ivar]
        self.pout_4d = np.ascontiguousarray(np.transpose(free, (3, 2, 1, 0)))
        self.tout = np.ascontiguousarray(np.transpose(res.label_trace, (2, 1, 0)))
        self.n_hist = np.asarray(res.accept_history, np.int32)
        n_rec = self.pout_4d.shape[-1]
        self.pout = self.pout_4d[:, 0].reshape(self.nprm, self.nseq * n_rec)
        self.chi2_2d = np.ascontiguousarray(np.asarray(res.fun_trace).T)
        self.chi2 = self.chi2_2d.flatten()
        self.n_acpt = np.asarray(res.n_accepted)
        self.n_cnt = np.asarray(res.n_trials)
        n_exch = np.zeros((self.nbeta, self.nseq), np.int32)
        n_exch[: self.nbeta - 1] = res.n_swaps
        self.n_exch = n_exch
        self.tcur = np.asarray(res.labels)
        self.pstp = np.asarray(res.steps)
        self.result = res
        return res

    # ------------------------------------------------------------------ model evaluation
    def _full_sets(self, pars: Any) -> tuple[np.ndarray, tuple[int, ...]]:
        p = np.asarray(pars, dtype=np.float64)
        if p.ndim == 0 or p.shape[-1] != self.nptot:
            raise ValueError(
                f"pars must have shape [..., nptot={self.nptot}] (full parameter sets, fixed ones included), got {p.shape}"
            )
        return p.reshape(-1, self.nptot), p.shape[:-1]

    def calcmodel(self, pars: Any) -> np.ndarray:
        """Model outputs ``datm [..., *dat.shape]`` for full parameter sets ``pars [..., nptot]``."""
        flat, lead = self._full_sets(pars)
        return self.problem.evaluate(flat).reshape(lead + self.dat.shape)

    def calcmodchi2(self, pars: Any) -> np.ndarray:
        """chi2 ``[...]`` for full parameter sets ``pars [..., nptot]`` (angular data wrapped)."""
        flat, lead = self._full_sets(pars)
        return self.problem.chi2(flat).reshape(lead)

    def reset_gpu(self) -> None:
        """Kept for old scripts; does nothing (JAX manages device memory)."""

    def __repr__(self) -> str:
        ran = "not run" if self.result is None else f"best chi2={self.result.fun:.4g}"
        return (
            f"Mcgpu(nptot={self.nptot}, nprm={self.nprm}, ndat={self.ndat}, nbeta={self.nbeta}, "
            f"nseq={self.nseq}, nburn={self.nburn}, niter={self.niter}, seed={self.seed}; {ran})"
        )


class Mcgpu_Sgra(Mcgpu):  # noqa: N801 (the seed's class name)
    """cuda_mcmc's ``imgpu.Mcgpu_Sgra``: the xringaus model fitted to a ``*_uvdata.txt`` file.

    Parameters (the seed's; those of :class:`Mcgpu` keep their meaning)
    ----------
    uvfile : the ``*_uvdata.txt`` file; or give ``ulam, vlam`` (gigalambda), ``amp`` (Jy),
        ``phase`` (rad) and, for closure phases, ``tsec`` (s) and ``blin`` (nvis, 2) station pairs.
    imodel : 1, the 9-parameter xringaus, or 2, the 13-parameter xringaus2 (``pdescr`` etc. of
        that length).  The model is JAX (:mod:`multiwalk.models.xringaus`).
    eamp : 1-sigma amplitude errors: None (the file's sigmas), one number, or one per visibility.
    use_cphs : fit closure phases too (the default); turned off, as in the seed, when every
        phase is zero and no ``cphs`` is given (with a warning).
    cphs, uvcp : closure phases (rad) given from outside, with the rows ``(u1, v1, u2, v2)`` of
        their triangles (the third leg is ``-(u1 + u2)``); else they are computed from the phases.
    ecph : 1-sigma closure-phase errors (rad): one number or one per closure phase; required
        with ``use_cphs``.  ``std2r[nvis:]`` may be changed before :meth:`burnin_and_search`
        (model_obsfit.py does), which then fits with the new weights.
    npass, cpix, wlam, chan, wei : accepted as the seed's; ``cpix`` is computed (a given one is not
        used, with a warning: closure phases of one's own are ``cphs`` with ``uvcp``).

    Attributes as the seed's: ``ulam, vlam, amp, phase, eamp, ecph, fsig, tsec, blin, base, cphs,
    cpix`` ((ncph, 3) rows of each triangle's baselines), ``nvis, ncph, ndat, dat, std2r, cpExt``.

    Differences from the seed, deliberate: the computed closure phases are a maximal independent
    set of triangles at each time with the signs that cancel station phases
    (:mod:`multiwalk.eht.closure`), not every triangle's ``phase[i] + phase[j] - phase[k]``;
    external ones are ``arg(V1 V2 V3)``; :meth:`calcmodel`'s ``imodel`` defaults to the instance's
    (the seed's default, 2, evaluates a 9-parameter set with the 13-parameter model).
    """

    def __init__(self, uvfile: Any = None, imodel: int = 1, npass: int = 2, nseq: int = 14, nbeta: int = 32,
                 nburn: int = 100, niter: int = 100, seed: int | None = 1234, beta1: float = 1.0,
                 betan: float = 0.0001, pdescr: Any = None, ptotal: Any = None, pmint: Any = None,
                 pmaxt: Any = None, ulam: Any = None, vlam: Any = None, blin: Any = None, amp: Any = None,
                 phase: Any = None, cphs: Any = None, cpix: Any = None, uvcp: Any = None, eamp: Any = None,
                 ecph: Any = None, tsec: Any = None, chan: Any = None, wei: Any = None, wlam: Any = None,
                 nadj: int = 100, use_cphs: bool = True) -> None:
        npar = sgra.n_params(imodel)
        if pdescr is not None and np.size(pdescr) != npar:
            raise ValueError(f"pdescr has {np.size(pdescr)} entries but imodel={imodel} is the {npar}-parameter model")
        if cpix is not None:
            warnings.warn("cpix is not used: the closure triangles are computed from the data (self.cpix); give "
                          "cphs= with uvcp= for closure phases of your own", stacklevel=2)
        data = self._read(uvfile, ulam, vlam, amp, phase, eamp, tsec, blin, wlam, chan, wei)
        nvis = data.amp.size
        self.eamp = sgra.sigma_per_datum("eamp", eamp, nvis, data.fsig)
        self.use_cphs = bool(use_cphs)
        if self.use_cphs and cphs is None and not np.any(data.phase):
            warnings.warn("every phase is zero and no cphs were given: fitting the amplitudes only (use_cphs=False)",
                          stacklevel=2)
            self.use_cphs = False
        self.cphs, self.cpix, conj, self.uvcp = self._closures(data, cphs, uvcp)
        self.ncph = ncph = self.cphs.size
        self.ecph = sgra.sigma_per_datum("ecph", ecph, ncph, None) if self.use_cphs else None
        dat = np.concatenate([data.amp, self.cphs])
        std2r = np.concatenate([1.0 / self.eamp**2, [] if self.ecph is None else 1.0 / self.ecph**2])
        self.cpExt = int(cphs is not None and self.use_cphs)
        self._sgra_model = sgra.sgra_data_model(imodel, bool(self.cpExt))
        self._angular = np.arange(dat.size) >= nvis
        self._sgra_args = (data.ulam, data.vlam, self.cpix, conj, self.uvcp)
        fn, args = self._sgra_model, self._sgra_args
        super().__init__(
            coor=np.concatenate([np.stack([data.ulam, data.vlam], 1).ravel(), self.uvcp.ravel()]),
            icoor=self.cpix.ravel() if not self.cpExt else None, idat=np.array([nvis, dat.size, self.cpExt]),
            dat=dat, std2r=std2r, pdescr=pdescr, ptotal=ptotal, pmint=pmint, pmaxt=pmaxt, beta1=beta1, betan=betan,
            seed=seed, imodel=imodel, npass=npass, nadj=nadj, nbeta=nbeta, nseq=nseq, nburn=nburn, niter=niter,
            model=lambda p, coor, icoor, dat, idat, imodel: fn(p, args), angular_data=self._angular)
        self.uvfile, self.nvis = uvfile, nvis
        self.ulam, self.vlam, self.wlam, self.amp, self.phase = data.ulam, data.vlam, data.wlam, data.amp, data.phase
        self.fsig, self.tsec, self.blin, self.chan, self.wei = data.fsig, data.tsec, data.blin, data.chan, data.wei
        self.base = np.hypot(data.ulam, data.vlam)
        self.vicp, self.nvicp = dat, dat.size
        self._set_problem()

    @staticmethod
    def _read(uvfile: Any, ulam: Any, vlam: Any, amp: Any, phase: Any, eamp: Any, tsec: Any, blin: Any,
              wlam: Any, chan: Any, wei: Any) -> sgra.SgraData:
        if uvfile is None:
            return sgra.sgra_arrays(ulam, vlam, amp, phase, eamp, tsec, blin, wlam, chan, wei)
        given = [k for k, v in dict(ulam=ulam, vlam=vlam, amp=amp, phase=phase, tsec=tsec, blin=blin).items()
                 if v is not None]
        if given:
            raise ValueError(f"give uvfile= or the arrays, not both: {', '.join(given)} would replace the file's rows")
        return sgra.read_sgra_uvfile(uvfile)

    def _closures(self, data: sgra.SgraData, cphs: Any, uvcp: Any) -> tuple[np.ndarray, ...]:
        """``(cphs, cpix, conj, uvcp)``: computed from the phases, given with ``uvcp``, or empty."""
        none3 = np.zeros((0, 3), np.int32)
        if not self.use_cphs:
            return np.zeros(0), none3, none3.astype(bool), np.zeros((0, 4))
        if cphs is None:
            value, cpix, conj = sgra.closures_of(data)
            return value, cpix, conj, np.zeros((0, 4))
        c = np.asarray(cphs, np.float64).ravel()
        if uvcp is None or np.size(uvcp) != 4 * c.size:
            raise ValueError(f"cphs given from outside need uvcp: one row (u1, v1, u2, v2) per closure phase, "
                             f"shape ({c.size}, 4), got {None if uvcp is None else np.shape(uvcp)}")
        return c, none3, none3.astype(bool), np.asarray(uvcp, np.float64).reshape(c.size, 4)

    def _set_problem(self) -> None:
        """The Problem with the current ``std2r`` (the seed's scripts set it after construction)."""
        self._std2r_used = np.array(self.std2r, np.float64)
        self.problem = _problem(self._sgra_model, tuple(jnp.asarray(a) for a in self._sgra_args), self.dat,
                                self._std2r_used, self.pdescr, self.ptotal, self.pmint, self.pmaxt, self._angular)

    def burnin_and_search(self, **kwargs: Any) -> ReplicaExchangeResult:
        """:meth:`Mcgpu.burnin_and_search` with the current ``std2r``; sets ``rate_acpt [nprm, nbeta]``
        and ``rate_exch [nbeta]`` (accepted moves / exchanges per sequence and iteration)."""
        self.std2r = _model_inputs(self.model, self.dat, self.std2r)[1]  # checked again: a script may change it
        if not np.array_equal(self.std2r, self._std2r_used):
            self._set_problem()
        res = super().burnin_and_search(**kwargs)
        n = max(self.pout_4d.shape[-1], 1) * self.nseq
        self.rate_acpt = self.n_acpt.sum(axis=2) / n
        self.rate_exch = self.n_exch.sum(axis=1) / n
        return res

    def calcmodel(self, ulam: Any, vlam: Any, prm_in: Any, imodel: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Model ``(mamp, mpha)`` (Jy, rad) at ``ulam, vlam`` (gigalambda, any shape) for parameter
        sets ``prm_in`` [nptot], [n, nptot] or [nbeta, nseq, nptot]: shapes ``uv``, ``(n, *uv)`` or
        ``(nbeta, nseq, *uv)`` as the seed's."""
        fn = sgra.sgra_visibilities(self.imodel if imodel is None else imodel)
        p = np.asarray(prm_in, np.float64)
        u, v = np.asarray(ulam, np.float64), np.asarray(vlam, np.float64)
        flat = p.reshape(-1, p.shape[-1])
        vis = np.asarray(jax.jit(jax.vmap(lambda q: fn(q, u.ravel(), v.ravel())))(flat))
        vis = vis.reshape(p.shape[:-1] + u.shape)
        return np.abs(vis), np.angle(vis)

    def calcmodchi2(self, prm_in: Any, imodel: int | None = None) -> tuple[Any, ...]:
        """``(chi2c, mvicp, mpha, chi2m, datm)`` for parameter sets ``prm_in`` [nptot], [n, nptot] or
        [nbeta, nseq, nptot], as the seed's: ``chi2c`` (nbeta, nseq) chi2, ``mvicp`` (nbeta, nseq, ndat)
        model amplitudes and closure phases, ``mpha`` (nbeta, nseq, nvis) model phases, ``chi2m``
        (nbeta, nseq, ndat) the weighted squared residuals (closure ones wrapped to [-pi, pi)),
        ``datm`` mvicp then mpha, flat; a 2-D input gives nseq = 1, a 1-D one flat arrays and a scalar chi2c."""
        im = self.imodel if imodel is None else imodel
        p = np.asarray(prm_in, np.float64)
        if p.ndim not in (1, 2, 3):
            raise ValueError(f"prm_in must have 1 to 3 dimensions ([nptot], [n, nptot] or [nbeta, nseq, nptot]), got {p.shape}")
        p3 = p.reshape((-1, 1, p.shape[-1]) if p.ndim < 3 else p.shape)
        flat = p3.reshape(-1, p.shape[-1])
        fn, args = sgra.sgra_data_model(im, bool(self.cpExt)), self._sgra_args
        mvicp = np.asarray(jax.jit(jax.vmap(lambda q: fn(q, args)))(flat)).reshape(p3.shape[:2] + (self.ndat,))
        resid = mvicp - self.dat
        resid[..., self.nvis:] = np.mod(resid[..., self.nvis:] + np.pi, 2 * np.pi) - np.pi
        chi2m = resid**2 * self.std2r
        _, mpha = self.calcmodel(self.ulam, self.vlam, p3, im)
        datm = np.concatenate([mvicp.ravel(), mpha.ravel()])
        if p.ndim == 1:
            return float(chi2m.sum()), mvicp.ravel(), mpha.ravel(), chi2m.ravel(), datm
        return chi2m.sum(axis=-1), mvicp, mpha, chi2m, datm
