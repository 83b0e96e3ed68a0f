"""cuda_mcmc's examples/sgra_model_fit/model_obsfit.py: fit the 9- or 13-parameter xringaus model
to a ``*_uvdata.txt`` file with ``Mcgpu_Sgra``, the seed's flow step by step, the model in JAX.

Usage (as the seed's)::

    python examples/model_obsfit.py {9|13} 000008_1_1_000snd_uvdata.txt [nburn=400] [niter=1000] \
        [nbeta=32] [nseq=16] [seed=N] [noplot] [png]

Steps: the model's descriptors and box, ``Mcgpu_Sgra(uvfile=..., ecph=1.)``, the closure-phase
errors from the visibility SNRs (Rogers & Doeleman 1995, eq. 31, and the phase-error table
``pherr_vs_snr.txt``: read from the working directory when there, else computed by
``phase_error_deg``), ``burnin_and_search()``, the best fit, and a histogram per parameter
(saved as ``hist_<file>_<9|13>prm_burnNNN_iterNNNNN.png`` with ``png``).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from multiwalk.compat import imgpu
from multiwalk.compat.imgpu_sgra import phase_error_deg


def parse(argv: list[str]) -> dict:
    """The seed's command line: model number, file, then name=value options and flags."""
    if len(argv) < 3:
        sys.exit("Usage: model_obsfit.py {9|13} uvdata_file [nburn=400] [niter=1000] [nbeta=32] [nseq=16] [noplot]")
    opts = dict(modnum=int(argv[1]), uvdata_file=argv[2], nburn=400, niter=1000, nbeta=32, nseq=16, seed=None,
                show=True, png=False)
    for arg in argv[3:]:
        name, _, value = arg.partition("=")
        if value and name in ("nburn", "niter", "nbeta", "nseq", "seed"):
            opts[name] = int(value)
        elif arg.lstrip("-") in ("noplot", "png"):
            opts["show" if arg.lstrip("-") == "noplot" else "png"] = arg.lstrip("-") == "png"
        else:
            sys.exit(f'Invalid option "{arg}". Exiting.')
    if opts["modnum"] not in (9, 13):
        sys.exit(f"Wrong number of model parameters: {opts['modnum']}; may be either 9 or 13")
    return opts


def model_setup(modnum: int) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]:
    """``(names, pdescr, ptotal, bounds)`` of the seed's script for the 9- or 13-parameter model."""
    if modnum == 9:
        names = ("Zsp", "Re", "rq", "ecc", "fade", "gax", "aq", "gq", "th")
        pdescr = np.array((1, 1, 1, 1, 1, 1, 1, 1, 2), dtype=np.int32)
        ptotal = np.array((2.4, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0), dtype=np.float32)
        bnd = np.array(((0.01, 5.0), (20.0, 60.0), (0.0, 0.99), (0.0, 1.0), (0.0, 1.0), (0.1, 2.0), (0.1, 1.5),
                        (0.0, 1.0), (-np.pi, np.pi)), dtype=np.float32)
    else:
        names = ("Zsp", "Re", "rq", "ecc", "fade", "gr", "gax", "aq", "gq", "alpha", "beta", "eta", "th")
        pdescr = np.array((1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2), dtype=np.int32)
        ptotal = np.array((2.4, 31.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), dtype=np.float32)
        bnd = np.array(((0.01, 5.0), (20.0, 60.0), (0.0, 0.99), (0.0, 1.0), (0.0, 1.0), (0.0, 1.0), (0.1, 2.0),
                        (0.1, 1.0), (0.0, 1.0), (-np.pi, np.pi), (0.0, np.pi / 2.0), (-np.pi, np.pi),
                        (-np.pi, np.pi)), dtype=np.float32)
    return names, pdescr, ptotal, bnd


def closure_phase_errors(sgra: imgpu.Mcgpu_Sgra) -> None:
    """The seed's step: each closure phase's error from its visibilities' SNRs, into ecph and std2r."""
    pherr = np.loadtxt("pherr_vs_snr.txt") if os.path.exists("pherr_vs_snr.txt") else \
        phase_error_deg(np.arange(3001) / 100.0)  # degrees, SNR 0 .. 30 by 0.01
    snr = sgra.amp / sgra.eamp  # visibility SNR
    i1, i2, i3 = sgra.cpix[:, 0], sgra.cpix[:, 1], sgra.cpix[:, 2]
    snrc = snr[i1] * snr[i2] * snr[i3] / np.sqrt((snr[i1] * snr[i2]) ** 2 + (snr[i1] * snr[i3]) ** 2
                                                 + (snr[i2] * snr[i3]) ** 2)
    high = snrc > 30.0
    sgra.ecph[high] = 1.0 / snrc[high]
    sgra.ecph[~high] = np.radians(pherr[(100 * snrc[~high]).astype(int)])
    sgra.std2r[sgra.nvis:] = 1.0 / sgra.ecph**2


def histograms(sgra: imgpu.Mcgpu_Sgra, names: tuple[str, ...], pout1: np.ndarray, im: int, opts: dict) -> None:
    """One histogram per free parameter with its mean, +-1 std and best fit (angles in degrees)."""
    import matplotlib.pyplot as plt

    ncol = 3 if opts["modnum"] == 9 else 4
    nrow = -(-sgra.nprm // ncol)
    fig = plt.figure(figsize=(19.5, 13.5))
    for i in range(sgra.nprm):
        j = sgra.ivar[i]
        pp = np.degrees(pout1[i]) if sgra.pdescr[j] == 2 else pout1[i]
        ax = fig.add_subplot(nrow, ncol, i + 1)
        counts, _, _ = ax.hist(pp, 50, color="b")
        mu, sig, top = pp.mean(), pp.std(), 1.2 * counts.max()
        ax.plot([mu, mu], [0, top], "k", lw=3, label=f"mean={mu:6.2f}")
        ax.plot([mu - sig] * 2, [0, top], "g--", lw=2, label=f"std=+-{sig:6.3f}")
        ax.plot([mu + sig] * 2, [0, top], "g--", lw=2)
        ax.plot([pp[im]] * 2, [0, top], "r", lw=3, label=f"bestfit={pp[im]:6.2f}")
        ax.set_title(names[j])
        ax.legend(loc="best", prop={"size": 10})
    fig.suptitle(f"MCMC chains for the model parameter estimates: {opts['uvdata_file']}, "
                 f"{sgra.nseq} chains x {sgra.niter} iterations")
    if opts["png"]:
        stem = os.path.basename(opts["uvdata_file"]).removesuffix("_uvdata.txt")
        fig.savefig(f"hist_{stem}_{opts['modnum']}prm_burn{sgra.nburn:03d}_iter{sgra.niter:05d}.png")
    if opts["show"]:
        plt.show()
    plt.close(fig)


def main(argv: list[str]) -> imgpu.Mcgpu_Sgra:
    opts = parse(argv)
    names, pdescr, ptotal, bnd = model_setup(opts["modnum"])
    pmint, pmaxt = bnd[:, 0].copy(), bnd[:, 1].copy()
    imodel = {9: 1, 13: 2}[opts["modnum"]]
    seed = opts["seed"] if opts["seed"] is not None else int(1e6 * time.time() % (10 * opts["nseq"] * opts["nbeta"]))
    print("seed = ", seed)
    sgra = imgpu.Mcgpu_Sgra(uvfile=opts["uvdata_file"], pdescr=pdescr, ptotal=ptotal, pmint=pmint, pmaxt=pmaxt,
                            seed=seed, nseq=opts["nseq"], nbeta=opts["nbeta"], nburn=opts["nburn"],
                            niter=opts["niter"], betan=1e-4, imodel=imodel, ecph=1.0)
    closure_phase_errors(sgra)
    sgra.burnin_and_search()
    chi2 = sgra.chi2_2d.flatten()
    pout1 = sgra.pout_4d[:, 0, :, :].reshape((sgra.nprm, sgra.nseq * sgra.niter))
    im = int(chi2.argmin())  # index of the chi^2 minimum
    print(f"best chi2 = {chi2[im]:.4g} of {sgra.ndat} data")
    for i in range(sgra.nprm):
        print(f"  {names[sgra.ivar[i]]:>6s} = {pout1[i, im]: .5g}")
    histograms(sgra, names, pout1, im, opts)
    return sgra


if __name__ == "__main__":
    main(sys.argv)
