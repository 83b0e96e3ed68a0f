"""Limited-memory BFGS (Liu & Nocedal 1989) with the Moré-Thuente line search, for huge n.

This is the algorithm of Nocedal's ``lbfgs.f`` (Harwell VA15), the routine the CUDA L-BFGS of
the seeds ports, step for step:

* the first direction is ``d = -H0 g`` with ``H0 = I`` (or the user's ``diag``) and the first
  trial step ``1 / ||g||``; later trial steps are 1;
* ``H0 = gamma I`` with ``gamma = s'y / y'y`` of the newest pair (or the user's diagonal);
* the step satisfies the strong Wolfe conditions (``ftol``, ``gtol``), found by ``MCSRCH`` /
  ``MCSTEP`` (:mod:`multiwalk.solvers.more_thuente`) with at most ``maxfev`` evaluations;
* the run stops when ``||g|| < eps * max(1, ||x||)`` (Euclidean norms), after
  ``max_iterations`` iterations, or when the line search fails (a named status).

What differs is how ``-H g`` is computed.  With the default ``H0 = gamma I`` it uses the compact
representation of Byrd, Nocedal and Schnabel (1994)::

    H = gamma I + [S  gamma Y] [[R^-T (D + gamma Y'Y) R^-1, -R^-T], [-R^-1, 0]] [S'; gamma Y']

where ``S``, ``Y`` hold the last ``m`` pairs, ``R`` is the upper triangle of ``S'Y`` and ``D`` its
diagonal.  Per iteration the ``2m`` stored vectors are read in two passes of one matrix product
each (``[S Y]' [g, y]`` for the small matrices, ``[S Y] w`` for the direction) instead of the
``4m`` dot products and ``2m`` updates of the two-loop recursion, which also re-reads and rewrites
its work vector ``2m`` times: the iteration is memory-bound for large n, and this is about 2.4x
less memory traffic.  The small ``m x m`` matrices are updated from those products (no other pass
over the pairs).  With a user ``diag`` (the seed's ``diagco``) the two-loop recursion is used.
On a GPU the two passes of one problem run as two fused Pallas kernels (``kernel="auto"``,
:mod:`multiwalk.solvers.lbfgs_kernel`), and its loop carries the state's scalars packed
(:meth:`LBFGS.run_chunk`); ``kernel="xla"`` keeps the XLA form (same iterates up to rounding).
Where the problem's ``value_and_grad`` has a block-local ``.block`` (cute's Extended Rosenbrock),
``kernel="onepass"`` (and ``"auto"`` on GPUs in float64) runs ONE kernel per line-search
evaluation instead, the pairs read once per evaluation (:mod:`multiwalk.solvers.lbfgs_onepass`).
One problem split along ``n`` over GPUs (``mw.solve(..., devices=k)``) runs the passes per device
under ``jax.shard_map`` (:func:`~multiwalk.solvers.lbfgs_kernel.pair_products_split`): the
objective still sees the global ``x``; the one-pass loop splits its rings likewise
(:func:`~multiwalk.solvers.lbfgs_onepass.line_pass_split`, the kernel's sums added by ``psum``).

Many independent problems (``x0`` of shape ``(K, n)``, or ``starts=K``) run in lockstep, each with
its own line search and status; the driver stops when all have finished.  The same pure functions
drive :class:`AskTell`, the reverse-communication interface for objectives that are not JAX.

The package, one module per concern:

* :mod:`~multiwalk.solvers.lbfgs.state`: the state of one problem (the pairs ``P`` and the small
  matrices) and the direction from it (compact form, two-loop recursion);
* :mod:`~multiwalk.solvers.lbfgs.evaluation`: how the line search evaluates (at the trial point,
  or through the problem's ``value_and_grad.along``);
* :mod:`~multiwalk.solvers.lbfgs.iteration`: the start and the end of an iteration, as named steps
  each execution form composes;
* :mod:`~multiwalk.solvers.lbfgs.forms`: the execution forms (XLA, packed and rows, one-pass) and
  :mod:`~multiwalk.solvers.lbfgs.conversion`, a checkpoint of one form resumed in the other;
* :mod:`~multiwalk.solvers.lbfgs.solver`: :class:`LBFGS`; :mod:`~multiwalk.solvers.lbfgs.result`:
  :class:`LBFGSResult`; :mod:`~multiwalk.solvers.lbfgs.ask_tell`: :class:`AskTell`.
"""

from __future__ import annotations

from ..lbfgs_common import LBFGSStatus
from .ask_tell import AskTell
from .result import LBFGSResult
from .solver import LBFGS
from .state import compact_direction, two_loop_direction

__all__ = ["LBFGS", "LBFGSResult", "LBFGSStatus", "AskTell", "compact_direction", "two_loop_direction"]
