"""Diagnostics across the sequences of a replica-exchange run, its ArviZ export, netCDF file and
corner plot (``multiwalk.diagnostics``, ``ReplicaExchangeResult.summary / to_arviz / save /
plot_corner``).

One small run (4 sequences x 4 temperatures x 400 sampling iterations of a 2-D Gaussian, a third
parameter fixed) serves every test; the unconverged cases are made from it by cutting or shifting
its samples, so no test compiles another sampler.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import re
import sys
import warnings
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import multiwalk as mw
from multiwalk import diagnostics

az = diagnostics.import_arviz()
SD = np.array([1.0, 2.0])  # the Gaussian's standard deviations of a and b


@pytest.fixture(scope="module")
def result() -> mw.ReplicaExchangeResult:
    problem = mw.Problem(
        objective=lambda x: jnp.sum((x[:2] / jnp.asarray(SD)) ** 2),
        lower=[-6, -12, 0], upper=[6, 12, 1], names=["a", "b", "c"], fixed={"c": 0.5},
    )
    solver = mw.ReplicaExchange(nbeta=4, nseq=4, nburn=200, niter=400, betan=0.1)
    out = mw.solve(problem, solver, seed=0, progress=False)
    assert out.success, out.message
    return out


def _arviz_posterior(result: mw.ReplicaExchangeResult):
    """The same samples handed to ArviZ without multiwalk: (chain, draw) = (sequence, iteration)."""
    return az.convert_to_dataset({"a": result.samples[:, :, 0].T, "b": result.samples[:, :, 1].T})


def test_rhat_ess_and_tau_are_arviz_on_the_same_samples(result):
    with warnings.catch_warnings():
        warnings.simplefilter("error", diagnostics.ConvergenceWarning)  # this run has converged
        table = diagnostics.convergence_table(result)
    direct = _arviz_posterior(result)
    rhat = az.rhat(direct, method="rank")
    bulk, tail, mean = (az.ess(direct, method=m) for m in ("bulk", "tail", "mean"))
    n_draws = result.samples.shape[0] * result.samples.shape[1]
    for name in ("a", "b"):
        # the same ArviZ functions on the same float32 samples: equal to the last bit
        assert table.loc[name, "r_hat"] == float(rhat[name])
        assert table.loc[name, "ess_bulk"] == float(bulk[name])
        assert table.loc[name, "ess_tail"] == float(tail[name])
        assert table.loc[name, "tau"] == n_draws / float(mean[name])
    assert list(table.index) == ["a", "b"]  # the fixed parameter c is not a chain's variable
    # the sampler is right too: sd within 10 % of the truth (ESS > 500 per parameter here, so the
    # sd's relative error is ~1/sqrt(2 * 500) ~ 3 %; 10 % is over 3 of those)
    assert np.allclose(table["sd"].to_numpy(), SD, rtol=0.10)


def test_summary_prints_the_table_and_the_rates(result):
    out = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("error", diagnostics.ConvergenceWarning)
        table = result.summary(file=out)
    text = out.getvalue()
    for word in ("mean", "sd", "hdi_3%", "hdi_97%", "ess_bulk", "ess_tail", "r_hat", "tau", "acceptance",
                 "exchange rate", "4 sequences x 400 sampling iterations"):
        assert word in text
    rows = [line.split()[0] for line in text.splitlines()[2:4]]
    assert rows == ["a", "b"]
    assert f"{table.loc['a', 'r_hat']:.3f}" in text


def test_short_or_unmixed_runs_warn(result):
    short = dataclasses.replace(result, samples=result.samples[:10], fun_trace=result.fun_trace[:10])
    with pytest.warns(diagnostics.ConvergenceWarning, match=r"ess_bulk=\d+, ess_tail=\d+ \(< 100\)") as record:
        short.summary(print_table=False)  # 40 draws in all: every ESS is below 100
    assert record[0].filename == __file__  # the warning points at the line that asked for the summary
    assert "a:" in str(record[0].message) and "b:" in str(record[0].message)
    shifted = result.samples.copy()
    shifted[:, 0, 1] += 3 * SD[1]  # sequence 0 sits elsewhere in b: the sequences disagree
    unmixed = dataclasses.replace(result, samples=shifted)
    with pytest.warns(diagnostics.ConvergenceWarning, match=r"b: r_hat=\d\.\d+ > 1\.01") as record:
        diagnostics.convergence_table(unmixed)
    assert record[0].filename == __file__
    assert "a: r_hat" not in str(record[0].message)  # a is untouched and converged


def test_a_nan_ess_warns():
    import pandas as pd

    # a tail ESS that ArviZ could not compute (NaN) fails the test even beside a large bulk ESS
    table = pd.DataFrame({"r_hat": [1.0], "ess_bulk": [500.0], "ess_tail": [np.nan]}, index=["a"])
    with pytest.warns(diagnostics.ConvergenceWarning, match=r"a: ess_bulk=500, ess_tail=nan"):
        diagnostics.warn_unconverged(table, niter=400, nseq=4)


def test_to_arviz_groups_and_shapes(result):
    idata = result.to_arviz()
    assert set(idata.groups()) == {"posterior", "sample_stats", "constant_data"}
    post = idata.posterior
    assert set(post.data_vars) == {"a", "b"} and dict(post.sizes) == {"chain": 4, "draw": 400}
    assert np.array_equal(post["b"].values, result.samples[:, :, 1].T)
    stats = idata.sample_stats
    assert np.array_equal(stats["chi2"].values, result.fun_trace.T)
    assert stats["acceptance"].dims == ("chain", "beta", "parameter")
    assert stats["acceptance"].shape == (4, 4, 2) and stats["exchange_rate"].shape == (4, 3)
    assert np.array_equal(stats["beta"].values, result.betas)
    # every temperature's chi2 and the round trips, which every run records
    assert np.array_equal(stats["chi2_all"].values, np.transpose(result.fun_trace_all, (1, 0, 2)))
    assert np.array_equal(stats["round_trips"].values, result.round_trips)
    assert float(idata.constant_data["c"]) == 0.5
    clash = dataclasses.replace(result, names=["chain", "b", "c"])
    with pytest.raises(ValueError, match="'chain' clashes with ArviZ's dimension"):
        clash.to_arviz()


def test_per_temperature_record_and_round_trips_when_present(result):
    richer = copy.copy(result)
    richer.fun_trace_all = np.arange(400 * 4 * 4, dtype=np.float32).reshape(400, 4, 4)  # (niter, nseq, nbeta)
    richer.round_trips = np.array([3, 0, 5, 2])
    stats = richer.to_arviz().sample_stats
    assert stats["chi2_all"].dims == ("chain", "draw", "beta")
    assert np.array_equal(stats["chi2_all"].values, np.transpose(richer.fun_trace_all, (1, 0, 2)))
    assert np.array_equal(stats["round_trips"].values, richer.round_trips)
    out = io.StringIO()
    richer.summary(file=out)
    assert "round trips across the ladder per sequence: mean 2.5 (min 0, max 5)" in out.getvalue()


def test_save_nc_round_trips_and_npz_is_unchanged(result, tmp_path):
    result.save(tmp_path / "fit.nc")
    back = az.from_netcdf(tmp_path / "fit.nc")
    assert np.array_equal(back.posterior["a"].values, result.samples[:, :, 0].T)
    assert np.array_equal(back.sample_stats["exchange_rate"].values, result.exchange_rate.T, equal_nan=True)
    assert back.posterior.attrs["solver"] == "ReplicaExchange"
    result.save(tmp_path / "fit.npz")
    with np.load(tmp_path / "fit.npz") as saved:
        assert np.array_equal(saved["samples"], result.samples)


def test_plot_corner_writes_a_png(result, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    result.plot_corner(tmp_path / "corner.png")
    assert (tmp_path / "corner.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("module", "call"), [("arviz", "to_arviz"), ("corner", "plot_corner")])
def test_missing_extra_names_it(result, monkeypatch, module, call):
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    with pytest.raises(ImportError, match=rf'pip install "multiwalk\[{module}\]"'):
        getattr(result, call)()


def test_guide_example_runs(result, tmp_path, monkeypatch):
    guide = (Path(__file__).resolve().parents[1] / "docs" / "replica_exchange.md").read_text()
    section = guide.split("## Diagnostics and ArviZ", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    scope = {"result": result}
    with warnings.catch_warnings():
        warnings.simplefilter("error", diagnostics.ConvergenceWarning)
        exec(compile(code, "docs/replica_exchange.md", "exec"), scope)
    assert list(scope["table"].index) == ["a", "b"] and set(scope["idata"].posterior.data_vars) == {"a", "b"}
    assert (tmp_path / "fit.nc").stat().st_size > 0 and (tmp_path / "corner.png").stat().st_size > 0
