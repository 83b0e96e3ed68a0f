"""The pattern-search and L-BFGS guides' examples (of which the README's tour shows excerpts, see
tests/test_readme.py) run as written."""

import numpy as np
from guide_blocks import GUIDES, guide_block


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
