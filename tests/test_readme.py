"""The examples of the README and of the guides in docs/ run as written (output files go to a
temporary folder).  The README's tour shows excerpts of the guides' examples: the guides' blocks
run here, and every README block must be a part of one of them, so what the README shows runs too."""

import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDES = {name: ROOT / "docs" / f"{name}.md" for name in ("replica_exchange", "pattern_search", "lbfgs")}


def python_blocks(path: Path) -> list[str]:
    """The ```python blocks of a Markdown file, in order."""
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def guide_block(name: str, word: str) -> str:
    """The first ```python block of ``docs/<name>.md`` that mentions ``word``."""
    return next(b for b in python_blocks(GUIDES[name]) if word in b)


RUN_BLOCKS = {  # the guide blocks the tests below run, by the words that pick them
    "replica_exchange": "ReplicaExchange",
    "pattern_search": "PatternSearch",
    "lbfgs": "LBFGS",
}


def test_readme_examples_are_parts_of_the_examples_run_here():
    run = [guide_block(name, word) for name, word in RUN_BLOCKS.items()]
    shown = python_blocks(README)
    assert len(shown) >= 3  # one per family of the tour
    for block in shown:
        # a README block is a run of whole lines of one run block (an excerpt), so it runs there
        assert any(("\n" + block) in ("\n" + whole) for whole in run), (
            f"this README example is not a part of a guide example that tests/test_readme.py runs:\n{block}"
        )


def test_readme_tour_runs_and_finds_what_it_promises(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    code = guide_block("replica_exchange", "ReplicaExchange")
    scope: dict = {}
    exec(compile(code, str(GUIDES["replica_exchange"]), "exec"), scope)
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
    code = guide_block("pattern_search", "PatternSearch")
    scope: dict = {}
    exec(compile("import multiwalk as mw\n" + code, str(GUIDES["pattern_search"]), "exec"), scope)
    plain, refined = scope["plain"], scope["refined"]
    assert plain.success and refined.success and plain.stats["rounds"] >= 1
    # Rastrigin-10 has local minima at integer points (values 1, 2, ...): the plain rounds stay
    # in one of them within 2 s of CPU; the refining rounds must do at least as well.
    assert refined.fun <= plain.fun


def test_readme_lbfgs_example_runs():
    import jax

    code = guide_block("lbfgs", "LBFGS")
    scope: dict = {}
    old = jax.config.jax_enable_x64
    try:
        exec(compile("import multiwalk as mw\n" + code, str(GUIDES["lbfgs"]), "exec"), scope)
    finally:
        jax.config.update("jax_enable_x64", old)
    lbfgs, many, opt = scope["lbfgs"], scope["many"], scope["opt"]
    # Extended Rosenbrock is separable with identical blocks: converged means the stop rule held,
    # and the minimum is 0 at x = 1 (f below 1e-8 at n = 1e4 is what the stop rule eps = 1e-5 gives).
    assert lbfgs.success and lbfgs.fun < 1e-8 and 30 <= lbfgs.iterations <= 45
    assert "I" in lbfgs.table(every=10).splitlines()[0]
    # every block of Extended Rosenbrock has one minimum in the box, on the bound x_2k+1 = 0.5: every
    # start converges to it; f there 5 x 0.085360511 (scipy's L-BFGS-B on one block at gtol 1e-10:
    # 0.42680255508363), to 1e-9 (pgtol 1e-5 on a minimum with curvature ~1 along the free a's)
    assert many.stats["converged"] == 64 and many.message.startswith("64 of 64 starts converged")
    assert abs(many.fun - 0.42680255508363) < 1e-9
    assert np.all(many.xs[:, 1::2] == 0.5) and np.all(many.xs <= np.array([2.0, 0.5] * 5))
    assert opt.status == "done" and np.allclose(opt.x, 1.0, atol=1e-3)
    res = scope["res"]  # mw.minimize, scipy's form: the same L-BFGS, converged
    assert res.success and res.fun < 1e-8 and res.hess_inv.shape == (10, 10)


def test_guide_evidence_example_runs():
    """The replica-exchange guide's model comparison, as written: a line against a parabola on data
    drawn from a line.  Both models are linear in their parameters, so their log evidence is known
    exactly (Gaussian integrals over a box far wider than the posterior): 15.564 and 12.902."""
    code = next(b for b in python_blocks(GUIDES["replica_exchange"]) if ".evidence()" in b)
    scope: dict = {}
    exec(compile("import multiwalk as mw\n" + code, str(GUIDES["replica_exchange"]), "exec"), scope)
    log_z = scope["log_z"]
    # the estimates' error bars are ~0.04 (line) and ~0.06 (parabola) from the 14 sequences: 3 of them
    assert abs(log_z["line"] - 15.564) < 0.12 and abs(log_z["parabola"] - 12.902) < 0.18
    assert log_z["line"] - log_z["parabola"] > 2.3  # the line wins, by about 2.7 nats
