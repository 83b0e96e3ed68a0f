"""The checkpoint file: a run's state and what it was run with, written as it goes, read to resume.

A checkpoint is an ``.npz`` file: ``__meta__`` (JSON: format version, solver and its options,
seed, iterations done per phase, the state's layout and the problem's identity,
:mod:`multiwalk.identity`) and the state's leaves ``leaf_0000``, ``leaf_0001``, ... in
``jax.tree_util.tree_leaves`` order, as host arrays.  It is written atomically (a crash while
writing leaves the previous file) and read whole, its zip checksums checked, before anything
compiles.  A resume may run on another number of devices: the arrays are whole on disk.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np

from . import distributed as dist
from .identity import refuse_other_problem
from .solvers.base import Phase, Solver

__all__ = [
    "CHECKPOINT_VERSION", "write_checkpoint", "write_leaves", "check_checkpoint_path", "read_checkpoint", "read_resume",
    "checkpoint_meta", "state_layout", "restore", "resumed_position",
]

CHECKPOINT_VERSION = 1


def write_checkpoint(path: Path, state: Any, meta: dict[str, Any]) -> None:
    """Write the state atomically (:func:`write_leaves`): a crash while writing leaves the
    previous file intact.

    A state split over devices is gathered whole; under ``jax.distributed`` every process
    takes part in the gather (a collective) and process 0 writes."""
    leaves = jax.tree_util.tree_leaves(dist.to_host(state))
    if not dist.is_writer():
        return
    write_leaves(path, meta, leaves)


def write_leaves(path: Path, meta: dict[str, Any], leaves: list[np.ndarray]) -> None:
    """Write a checkpoint file of ``meta`` and the state's ``leaves`` (host arrays, in
    ``jax.tree_util.tree_leaves`` order) atomically: into ``path.tmp``, then renamed."""
    arrays = {f"leaf_{i:04d}": leaf for i, leaf in enumerate(leaves)}
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, __meta__=np.array(json.dumps(meta)), **arrays)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # no stray half-written file beside the checkpoint
        raise


def check_checkpoint_path(path: Path, label: str) -> None:
    """Raise before anything compiles unless a checkpoint can be written at ``path`` (``label``
    names the argument in the message): its folder exists and takes a new file, and ``path``
    is not a folder.  The probe file is the write's own ``.tmp``, removed at once."""
    folder = path.parent
    if not folder.exists():
        raise FileNotFoundError(f"{label}: folder {str(folder)!r} does not exist")
    if not folder.is_dir():
        raise ValueError(f"{label}: {str(folder)!r} is a file, not a folder: put the checkpoint in a folder")
    if path.is_dir():
        raise ValueError(f"{label} is a folder: give a file name, such as {str(path / 'checkpoint.npz')!r}")
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb"):
            pass
        tmp.unlink()
    except OSError as err:
        raise ValueError(f"{label}: a file cannot be written in {str(folder)!r} ({err.strerror or err}): "
                         "give a path in a folder you can write to") from None


def read_checkpoint(path: Path, label: str | None = None) -> tuple[dict[str, Any], list[np.ndarray]]:
    """``(meta, leaves)`` of a checkpoint; a file that is missing, not a checkpoint, cut short or
    altered (the zip's checksums) is a FileNotFoundError / ValueError naming it (``label``:
    how the message names it, default ``resume='path'``)."""
    label = f"resume={str(path)!r}" if label is None else label
    try:
        with np.load(path, allow_pickle=False) as npz:
            meta = json.loads(str(npz["__meta__"]))
            leaves = [npz[f"leaf_{i:04d}"] for i in range(meta["n_leaves"])]
    except FileNotFoundError:
        raise FileNotFoundError(f"{label}: no such checkpoint file") from None
    except Exception as err:  # noqa: BLE001 - zipfile.BadZipFile, EOFError, zlib.error, a bad header...
        raise ValueError(
            f"{label} is not a multiwalk checkpoint, or it is damaged (cut short or altered: {type(err).__name__}: "
            f"{err}): resume from an intact copy, or start the run anew"
        ) from err
    return meta, leaves


def state_layout(state: Any) -> list[str]:
    """The names of the state's NamedTuple types, outermost first (e.g. ``LBFGSRun``, ``OnePassState``):
    written into checkpoints, so a resume whose solver lays its state out in another form (LBFGS's
    one-pass rings vs its stored pairs) is told so instead of failing on an array's shape."""
    names: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            names.append(type(node).__name__)
        if isinstance(node, (tuple, list)):
            for child in node:
                walk(child)
        elif isinstance(node, dict):
            for key in sorted(node):
                walk(node[key])

    walk(state)
    return names


def restore(solver: Solver, fresh_state: Any, meta: dict[str, Any], leaves: list[np.ndarray], path: Path) -> Any:
    """Put the checkpoint's arrays into a state shaped for ``solver`` (numpy arrays; the driver
    puts them on the devices, split or not, so a run may resume on another number of devices).

    Buffers that grew because a resumable option grew (``niter``) keep their saved prefix.
    """
    if meta.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"{path}: checkpoint version {meta.get('version')} is not {CHECKPOINT_VERSION}")
    if meta["solver"] != type(solver).__name__:
        raise ValueError(f"{path} holds a {meta['solver']} run, not a {type(solver).__name__} run")
    # as the file holds them: a tuple option (block=(8, 16)) is a list there; a NumPy scalar a number
    now = json.loads(json.dumps(solver.options(), default=lambda v: v.item() if hasattr(v, "item") else str(v)))
    for name, saved in meta["options"].items():
        if name in solver.resumable_options:
            continue
        if now.get(name) != saved:
            raise ValueError(
                f"{path} was written with {name}={saved!r} but the solver now has {name}={now.get(name)!r}: "
                f"resume with the same options (only {', '.join(solver.resumable_options) or 'none'} may change)"
            )
    saved_layout, layout = meta.get("layout"), state_layout(fresh_state)
    fresh_state = dist.to_host(fresh_state)  # once: its shapes, a conversion and the leaves below
    fresh_shapes = [np.shape(a) for a in jax.tree_util.tree_leaves(fresh_state)]
    # A resumable option may also change the shapes within one layout (Clean's ``block``: other
    # block arrays): the solver converts those too, else a grown prefix would keep stale values.
    if saved_layout is not None and (saved_layout != layout or fresh_shapes != [np.shape(a) for a in leaves]):
        try:
            converted = solver.convert_checkpoint(fresh_state, saved_layout, leaves)
        except ValueError as err:  # a solver that refuses the conversion: its reason, with the file
            raise ValueError(f"{path}: {err}") from None
        if converted is not None:
            leaves, saved_layout = converted, layout
    if saved_layout is not None and saved_layout != layout:
        # e.g. LBFGS: kernel="onepass" (or "auto" on one GPU in float64) keeps rings, the other forms
        # the stored pairs; say which options were saved, as the shapes alone would blame the problem
        changed = {k: (meta["options"].get(k), now.get(k)) for k in solver.resumable_options
                   if meta["options"].get(k) != now.get(k)}
        said = ", ".join(f"{k}={a!r} then, {b!r} now" for k, (a, b) in changed.items())
        raise ValueError(
            f"{path} holds a {type(solver).__name__} run whose state is laid out as {'/'.join(saved_layout)}, but this solver "
            f"makes one laid out as {'/'.join(layout)} here ({said or 'the same options'}): the form was chosen "
            "by an option or by the machine (backend, number of devices); resume with the options and on the "
            "kind of machine that wrote it"
        )
    fresh_leaves, treedef = jax.tree_util.tree_flatten(fresh_state)
    if len(fresh_leaves) != len(leaves):
        # e.g. a state whose fields changed between multiwalk versions (mw.Exchange's layout
        # changed in 6376614): say what differs and what to do, not only that it differs
        raise ValueError(
            f"{path}: the checkpoint holds {len(leaves)} state arrays but a {type(solver).__name__} state "
            f"now has {len(fresh_leaves)}: it was written by another version of multiwalk or for another "
            "problem; resume it with the version that wrote it, or start the run anew"
        )
    out = []
    for new, old in zip(fresh_leaves, leaves):
        if new.shape == old.shape:
            out.append(np.asarray(old, dtype=new.dtype))
        elif new.shape[1:] == old.shape[1:] and new.shape[0] >= old.shape[0]:
            grown = new.copy()
            grown[: old.shape[0]] = old
            out.append(grown)
        else:
            raise ValueError(
                f"{path}: saved array of shape {old.shape} does not fit the state's {new.shape}; "
                "was it written for another problem, or by another form of the solver (chosen by an option "
                "such as LBFGS's kernel, or by the machine)?"
            )
    return jax.tree_util.tree_unflatten(treedef, out)


def read_resume(path: Path, seed: int, identity: dict[str, Any]) -> tuple[dict[str, Any], list[np.ndarray]]:
    """``(meta, leaves)`` of the checkpoint a run resumes from, refused (ValueError naming it) when
    it was written with another seed or for another problem than the one of ``identity``."""
    meta, leaves = read_checkpoint(path)
    if meta["seed"] != seed:
        raise ValueError(f"{path} was written with seed={meta['seed']}, not seed={seed}")
    refuse_other_problem(path, meta, identity)
    return meta, leaves


def checkpoint_meta(solver: Solver, seed: int, done: list[int], phase_index: int, state: Any,
                    identity: dict[str, Any]) -> dict[str, Any]:
    """The ``__meta__`` of a checkpoint of ``state``, ``done[i]`` iterations of phase ``i`` run and
    phase ``phase_index`` the current one."""
    return {
        "version": CHECKPOINT_VERSION,
        "solver": type(solver).__name__,
        "options": solver.options(),
        "seed": seed,
        "done": done,
        "phase_index": phase_index,
        "n_leaves": len(jax.tree_util.tree_leaves(state)),
        "layout": state_layout(state),  # the state's form, named when a resume makes another
        "problem": identity,
    }


def resumed_position(meta: dict[str, Any], phases: list[Phase], path: Path) -> tuple[list[int], int]:
    """``(done, phase_index)`` a resumed run starts from: the iterations done in each of ``phases``
    (phases added since count 0) and the current phase.  ValueError if a phase is now shorter than
    what was done: a resumed run may only be longer."""
    done = list(meta["done"]) + [0] * (len(phases) - len(meta["done"]))
    for ph, d in zip(phases, done):
        if d > ph.length:
            raise ValueError(
                f"{path} has {d} {ph.name} iterations done, more than the {ph.length} asked for now: "
                "a resumed run may only be longer"
            )
    # A run that finished its last phase and is resumed with a longer one goes on there.
    return done, min(int(meta["phase_index"]), len(phases) - 1)
