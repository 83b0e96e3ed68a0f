"""The collectives in the compiled loops of split runs, for tests/test_collectives.py.

Run by tests/multidevice_check.py (4 virtual CPU devices).  :func:`main` runs ReplicaExchange
(burn-in and sampling), PatternSearch (XLA form) and Exchange (ODAT-SE's, XLA form, with step
records; and in its interval form, with the compiled loops' structure) with ``devices=2``
(``main(4, exchange_only=True)``: Exchange alone, split over 4), then reads the HLO of the loops
the driver compiled and cached, and returns one dict: per solver and phase, each collective's
kind and element count.  A walker-parallel loop should only move a few numbers between devices
per iteration (a best value and its point); a collective as large as the batch means every device
gathers every walker, which scales no better than one device.
"""

from __future__ import annotations

import re

import numpy as np

import multiwalk as mw
from multiwalk import compile_cache

COLLECTIVE = re.compile(r"= (.+?) (all-reduce|all-gather|collective-permute|all-to-all|reduce-scatter)(?:-start)?\(")


def sphere(x):
    return (x**2).sum()


def elements(shapes: str) -> int:
    """Elements of an HLO result type: ``f64[20]{0}`` or a tuple ``(f64[20]{0}, f64[])``."""
    total = 0
    for dims in re.findall(r"\w+\[([\d,]*)\]", shapes):
        total += int(np.prod([int(d) for d in dims.split(",") if d])) if dims else 1
    return total


def loop_collectives(run) -> dict[int, list[list]]:
    """Run ``run()`` (one mw.solve) and return, per loop it compiled (in phase order: one per phase,
    or one for all, ReplicaExchange's), the collectives of that loop."""
    compile_cache.clear_loops()
    run()
    out: dict[int, list[list]] = {}
    # the driver compiles every phase's loop before running, in phase order
    for phase, compiled in enumerate(compile_cache.compiled_loops()):
        out[phase] = [[kind, elements(shapes)] for shapes, kind in COLLECTIVE.findall(compiled.as_text())]
    return out


COMPUTATION = re.compile(r"^(?:ENTRY )?(%[\w.\-]+) \(", re.M)
CALLED = re.compile(r"(?:calls|body|condition|to_apply|true_computation|false_computation|branch_computations)="
                    r"\{?(%[\w.\-]+(?:, %[\w.\-]+)*)\}?")
WHILE = re.compile(r"= (.+?) while\(.*?body=(%[\w.\-]+)(.*)$", re.M)


def loop_structure(text: str, state_shape: str) -> list[list]:
    """Every while loop of an HLO module: [known trip count or None, whether its type holds an
    array of ``state_shape`` (e.g. the per-device points ``f64[8,3]``: a loop over steps),
    whether its body (with what it calls) holds a collective]."""
    starts = [(m.start(), m.group(1)) for m in COMPUTATION.finditer(text)]
    bodies = {name: text[a:b] for (a, name), (b, _) in zip(starts, starts[1:] + [(len(text), "")])}
    calls = {name: {c for group in CALLED.findall(body) for c in group.split(", ")} for name, body in bodies.items()}
    direct = {name: bool(COLLECTIVE.search(body)) for name, body in bodies.items()}

    def reaches(name: str, seen: set) -> bool:
        if name in seen or name not in bodies:
            return False
        seen.add(name)
        return direct[name] or any(reaches(c, seen) for c in calls[name])

    out = []
    for shapes, body, rest in WHILE.findall(text):
        trip = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', rest)
        out.append([int(trip.group(1)) if trip else None, state_shape in shapes, reaches(body, set())])
    return out


def main(n_devices: int = 2, exchange_only: bool = False) -> dict:
    box = mw.Problem(objective=sphere, lower=-5.0 * np.ones(3), upper=5.0 * np.ones(3))
    report: dict = {"devices": n_devices}
    if not exchange_only:
        solve_others(box, report)
    # ODAT-SE's exchange: 16 replicas (8 per device on 2, 4 on 4), swaps every step, step records kept
    ex_solver = mw.Exchange(betas=tuple(np.geomspace(10.0, 0.1, 16)), numsteps=6, step_width=(0.5, 0.5, 0.5),
                            record=4, kernel="xla")
    ex_run = {}
    report["ex"] = loop_collectives(
        lambda: ex_run.setdefault("r", mw.solve(box, ex_solver, progress=False, devices=n_devices))
    )
    report["ex_devices"] = ex_run["r"].stats["devices"]
    # the interval form (off CPUs; forced here): an exchange every 20 steps (one interval per
    # group: 32 steps drawn at once at 16 replicas), its 20 Metropolis moves in a loop of static
    # trip count that must hold no collective; 45 steps: edges and two whole intervals
    iv_solver = IntervalExchange(betas=tuple(np.geomspace(10.0, 0.1, 16)), numsteps=46, numsteps_exchange=20,
                                 step_width=(0.5, 0.5, 0.5), record=0, kernel="xla")
    iv_run = {}
    report["ex_intervals"] = loop_collectives(
        lambda: iv_run.setdefault("r", mw.solve(box, iv_solver, progress=False, devices=n_devices))
    )
    report["ex_intervals_devices"] = iv_run["r"].stats["devices"]
    report["ex_intervals_loops"] = loop_structure(
        compile_cache.compiled_loops()[-1].as_text(), f"f64[{16 // n_devices},3]"
    )
    report["batch"] = {"re": 48 * 4, "ps": 96, "ex": 16}  # chains (nseq x nbeta), walkers, replicas
    return report


class IntervalExchange(mw.Exchange):
    """mw.Exchange in its interval form (as off CPUs)."""

    def interval_form(self, problem: mw.Problem) -> bool:
        return True


def solve_others(box: mw.Problem, report: dict) -> None:
    """ReplicaExchange and PatternSearch on 2 devices."""
    re_solver = mw.ReplicaExchange(nseq=48, nbeta=4, nburn=4, niter=4)
    ps_solver = mw.PatternSearch(n_walkers=96, iterations=4, rounds=1, kernel="xla")
    re_run = {}
    report["re"] = loop_collectives(lambda: re_run.setdefault("r", mw.solve(box, re_solver, progress=False, devices=2)))
    report["re_devices"] = re_run["r"].stats["devices"]
    report["re_loops"] = loop_structure(compile_cache.compiled_loops()[-1].as_text(), "f64[24,4,3]")
    # the swap kernel (Pallas, interpret mode here) on each device's sequences: nothing crosses
    # devices in the loop (run whole on every device, its operands would be gathered every iteration)
    re_kernel = mw.ReplicaExchange(nseq=48, nbeta=4, nburn=4, niter=4, kernel="pallas")
    kernel_run = {}
    loop_collectives(lambda: kernel_run.setdefault("r", mw.solve(box, re_kernel, progress=False, devices=2)))
    report["re_kernel_form"] = kernel_run["r"].stats["kernel"]
    report["re_kernel_loops"] = loop_structure(compile_cache.compiled_loops()[-1].as_text(), "f64[24,4,3]")
    ps_run = {}
    report["ps"] = loop_collectives(lambda: ps_run.setdefault("r", mw.solve(box, ps_solver, progress=False, devices=2)))
    report["ps_devices"] = ps_run["r"].stats["devices"]
    report["ps_loops"] = loop_structure(compile_cache.compiled_loops()[-1].as_text(), "f64[48,3]")

