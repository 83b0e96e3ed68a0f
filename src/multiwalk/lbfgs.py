"""``mw.lbfgs``: the L-BFGS solver and its reverse-communication interface in one place.

>>> import multiwalk as mw
>>> result = mw.solve(mw.Problem(objective=f, x0=x0), mw.LBFGS(m=7, eps=1e-5))
>>> opt = mw.lbfgs.AskTell(n, m=7, x0=x0)      # for objectives that are not JAX
"""

from .solvers.lbfgs import LBFGS, AskTell, LBFGSResult, LBFGSStatus, compact_direction, two_loop_direction

__all__ = ["LBFGS", "AskTell", "LBFGSResult", "LBFGSStatus", "compact_direction", "two_loop_direction"]
