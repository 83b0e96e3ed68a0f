"""The README's tour runs as written (with its output files redirected to a temporary folder)."""

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_tour_runs_and_finds_what_it_promises(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    scope: dict = {}
    exec(compile(code, str(README), "exec"), scope)
    # The tour's last result is the equation system; its two roots (exact values below).
    roots = scope["result"].roots().x
    exact = np.array([[(-4 - np.sqrt(832)) / 34, 0.0], [(-4 + np.sqrt(832)) / 34, 0.0]])
    exact[:, 1] = np.sqrt(1 - exact[:, 0] ** 2)
    assert roots.shape == (2, 2)
    # polished in float32: the terms are ~1 and ||J^-1|| ~ 1.2, so 8 eps * 2 * 1.2 ~ 2.3e-6
    for e in exact:
        assert np.min(np.max(np.abs(roots - e), axis=1)) < 2.3e-6
    assert (tmp_path / "fit.png").stat().st_size > 0
    with np.load(tmp_path / "fit.npz") as saved:
        assert np.array_equal(saved["samples"], scope["result"].samples)


def test_readme_pattern_search_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    code = next(b for b in blocks if "PatternSearch" in b)
    scope: dict = {}
    exec(compile("import multiwalk as mw\n" + code, str(README), "exec"), scope)
    plain, refined = scope["plain"], scope["refined"]
    assert plain.success and refined.success and plain.stats["rounds"] >= 1
    # Rastrigin-10 has local minima at integer points (values 1, 2, ...): the plain rounds stay
    # in one of them within 2 s of CPU; the refining rounds must do at least as well.
    assert refined.fun <= plain.fun


def test_readme_lbfgs_example_runs():
    import jax

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    code = next(b for b in blocks if "LBFGS" in b)
    scope: dict = {}
    old = jax.config.jax_enable_x64
    try:
        exec(compile("import multiwalk as mw\n" + code, str(README), "exec"), scope)
    finally:
        jax.config.update("jax_enable_x64", old)
    lbfgs, many, opt = scope["lbfgs"], scope["many"], scope["opt"]
    # Extended Rosenbrock is separable with identical blocks: converged means the stop rule held,
    # and the minimum is 0 at x = 1 (f below 1e-8 at n = 1e4 is what the stop rule eps = 1e-5 gives).
    assert lbfgs.success and lbfgs.fun < 1e-8 and 30 <= lbfgs.iterations <= 45
    assert "I" in lbfgs.table(every=10).splitlines()[0]
    # every block of Extended Rosenbrock has one minimum: every start converges to it
    assert many.stats["converged"] == 64 and many.message.startswith("64 of 64 starts converged")
    assert many.fun < 1e-8
    assert opt.status == "done" and np.allclose(opt.x, 1.0, atol=1e-3)
