"""Does ``Exchange(kernel="pallas")`` (one Pallas kernel per block of Metropolis steps) give the
XLA form's run on this device?  Same seed, same random numbers: prints, per replica count, how
many replicas end at bitwise the same point, the largest difference of any state array, and the
per-temperature means of f (fx.txt) of both forms.  On a CPU (interpret mode) they are equal bit
for bit (tests/test_exchange_kernel.py); on a GPU only the rounding of f differs (libdevice vs
XLA math), which may flip a rare accept decision and then the chains part.

    PYTHONPATH=src python3 benchmarks/exchange_kernel_check.py --device gpu
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def himmelblau(x):  # noqa: ANN001, ANN201 - ODAT-SE's analytical function, as benchmarks/odatse.py runs it
    return (x[0] ** 2 + x[1] - 11) ** 2 + (x[0] + x[1] ** 2 - 7) ** 2


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "gpu", "auto"], default="auto")
    p.add_argument("--replicas", default="1000,10000")
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--tune", default="", help="block:warps[:unroll] timed at the largest replica count, e.g. 32:1,64:2:80")
    p.add_argument("--tune-steps", type=int, default=2000)
    p.add_argument("--breakdown", action="store_true", help="time the parts of a kernel block at the largest count")
    args = p.parse_args()
    common.select_platform(args.device)
    if common.first_device(args.device) is None:
        return 1
    import jax

    jax.config.update("jax_enable_x64", True)
    import multiwalk as mw
    from multiwalk.solvers.exchange import temperature_ladder

    problem = mw.Problem(objective=himmelblau, lower=[-6.0, -6.0], upper=[6.0, 6.0])
    for R in (int(r) for r in args.replicas.split(",")):
        betas = tuple(temperature_ladder(R, Tmin=1.0, Tmax=100.0).tolist())
        out = {}
        for kernel in ("xla", "pallas"):
            solver = mw.Exchange(betas=betas, numsteps=args.steps, numsteps_exchange=10, step_width=(0.5, 0.5),
                                 kernel=kernel)
            t0 = time.perf_counter()
            r = mw.solve(problem, solver, seed=7)
            out[kernel] = (jax.tree_util.tree_map(np.asarray, r.state), r)
            print(f"R={R} {kernel}: {r.stats['kernel']}, run {r.stats['run_seconds']:.3f} s, "
                  f"compile {r.stats['compile_seconds']:.2f} s, wall {time.perf_counter() - t0:.2f} s", flush=True)
        a, b = out["xla"][0], out["pallas"][0]
        same = np.all(a.x == b.x, axis=1)
        print(f"R={R}: replicas at bitwise the same point {same.sum()}/{R}; accepted moves xla {a.n_accepted.sum()} "
              f"pallas {b.n_accepted.sum()}; exchanges {a.n_exchanges.sum()} / {b.n_exchanges.sum()}")
        for name in a._fields:
            va, vb = np.asarray(getattr(a, name), np.float64), np.asarray(getattr(b, name), np.float64)
            if va.size and not np.array_equal(va, vb):
                print(f"  {name}: max |diff| {np.nanmax(np.abs(va - vb)):.3g}")
        sa, sb = out["xla"][1].statistics, out["pallas"][1].statistics
        z = (sa["mean"] - sb["mean"]) / np.hypot(sa["error"], sb["error"])
        print(f"  per-temperature mean f: rms z (xla - pallas) {np.sqrt(np.nanmean(z**2)):.3f}, "
              f"max |z| {np.nanmax(np.abs(z)):.2f}; best fx xla {out['xla'][1].fun:.3g} pallas {out['pallas'][1].fun:.3g}")
    # launch tuning: run time of --tune-steps steps at the largest count per (replicas per program, warps)
    R = max(int(r) for r in args.replicas.split(","))
    betas = tuple(temperature_ladder(R, Tmin=1.0, Tmax=100.0).tolist())
    for item in (t for t in args.tune.split(",") if t):
        block, warps, *unroll = (int(v) for v in item.split(":"))
        solver = mw.Exchange(betas=betas, numsteps=args.tune_steps, numsteps_exchange=10, step_width=(0.5, 0.5),
                             kernel="pallas", kernel_block=block, kernel_warps=warps, unroll=unroll[0] if unroll else None)
        r = mw.solve(problem, solver, seed=7)
        print(f"tune R={R} block={block} warps={warps} blocks per trip={solver.kernel_blocks_per_trip(problem)}: "
              f"{r.stats['run_seconds'] / (args.tune_steps - 1) * 1e6:.2f} us "
              f"per step (compile {r.stats['compile_seconds']:.2f} s)", flush=True)
    if args.breakdown:
        breakdown(mw, problem, R, args.tune_steps)
    return 0


def breakdown(mw, problem, R: int, steps: int) -> None:  # noqa: ANN001
    """Where a block's time goes at ``R`` replicas: loops of ``steps / 10`` blocks of 10 steps, each
    running only a part of the block (the draws; the draws and the exchange; everything but the
    kernel; the kernel alone on fixed inputs), per step."""
    import time

    import jax
    import jax.numpy as jnp

    from multiwalk.solvers import exchange_kernel
    from multiwalk.solvers.exchange import _ATOL, _RTOL, temperature_ladder

    betas = tuple(temperature_ladder(R, Tmin=1.0, Tmax=100.0).tolist())
    solver = mw.Exchange(betas=betas, numsteps=steps, numsteps_exchange=10, step_width=(0.5, 0.5), kernel="pallas")
    plan = solver.kernel_plan(problem)
    st0 = solver.init(problem, jax.random.PRNGKey(0))
    K, blocks = 10, steps // 10
    dt = problem.dtype

    def draws(st, s):  # noqa: ANN001, ANN202
        return jax.vmap(lambda t: solver._draws(problem, st.key, t))(s + jnp.arange(K, dtype=jnp.int32))

    def kernel(st, move, u):  # noqa: ANN001, ANN202
        # the state is in temperature order: row t's replica, statistics and beta side by side
        moves = exchange_kernel.Moves(st.x, st.fx, st.n_accepted, st.n_nonfinite, st.best_fx, st.best_step,
                                      st.best_x, st.stat_n, st.stat_sum, st.stat_sum2, st.stat_changed,
                                      st.stat_fbase, st.stat_lse)
        return exchange_kernel.metropolis_steps(
            plan.graph, moves, st.stat_prev, jnp.asarray(betas, dt), jnp.asarray(solver.reweighting_dbeta(), dt),
            move, u, st.step, K, step_width=np.asarray((0.5, 0.5)), lower=np.asarray(problem.lower),
            upper=np.asarray(problem.upper), thermalization=solver.thermalization, atol=_ATOL, rtol=_RTOL,
            interpret=plan.interpret)

    def part_draws(i, st):  # noqa: ANN001, ANN202
        u_ex, move, u = draws(st, st.step)
        return st._replace(step=st.step + K, fx=st.fx + u[0] + move[0, :, 0] + u_ex[0, 0])

    def part_exchange(i, st):  # noqa: ANN001, ANN202
        u_ex, move, u = draws(st, st.step)
        st = solver._exchange(problem, st, u_ex[0])
        return st._replace(step=st.step + K, fx=st.fx + u[0] + move[0, :, 0])

    def part_no_kernel(i, st):  # noqa: ANN001, ANN202
        u_ex, move, u = draws(st, st.step)
        st = solver._exchange(problem, st, u_ex[0])
        g = [a + u[0] + move[0, :, 0] for a in (st.stat_sum, st.stat_sum2, st.stat_fbase, st.stat_lse)]
        return st._replace(step=st.step + K, stat_sum=g[0], stat_sum2=g[1], stat_fbase=g[2], stat_lse=g[3],
                           stat_prev=st.x)

    move0, u0 = jax.random.normal(jax.random.PRNGKey(1), (K, R, 2), dt), jax.random.uniform(jax.random.PRNGKey(2), (K, R), dt)

    def part_kernel(i, st):  # noqa: ANN001, ANN202
        out = kernel(st, move0, u0)
        return st._replace(x=out.x, fx=out.fx, step=st.step + K)

    for name, body in (("draws", part_draws), ("draws+exchange", part_exchange),
                       ("all but the kernel", part_no_kernel), ("kernel alone", part_kernel)):
        run = jax.jit(lambda st, n, body=body: jax.lax.fori_loop(0, n, body, st))
        jax.block_until_ready(run(st0, 2))
        t0 = time.perf_counter()
        jax.block_until_ready(run(st0, blocks))
        dt_s = time.perf_counter() - t0
        print(f"breakdown R={R}: {name}: {dt_s / (blocks * K) * 1e6:.2f} us per step", flush=True)


if __name__ == "__main__":
    sys.exit(main())
