"""The examples of the README and of the replica-exchange guide run as written (output files go to
a temporary folder).  The README's tour shows excerpts of the guides' examples: the guides' blocks
run here and in tests/test_guide_examples.py (the pattern-search and L-BFGS guides': a file of
their own, so that parallel test workers can run the two halves side by side), and every README
block must be a part of one of them, so what the README shows runs too."""

import numpy as np
from guide_blocks import GUIDES, README, RUN_BLOCKS, guide_block, python_blocks


def test_readme_examples_are_parts_of_the_examples_run_here():
    run = [guide_block(name, word) for name, word in RUN_BLOCKS.items()]
    shown = python_blocks(README)
    assert len(shown) >= 3  # one per family of the tour
    for block in shown:
        # a README block is a run of whole lines of one run block (an excerpt), so it runs there
        assert any(("\n" + block) in ("\n" + whole) for whole in run), (
            "this README example is not a part of a guide example that tests/test_readme.py or "
            f"tests/test_guide_examples.py runs:\n{block}"
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
