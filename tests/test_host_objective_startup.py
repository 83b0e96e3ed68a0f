"""What makes a run of a non-JAX objective start fast: the worker processes import a module without
JAX, and the code around the objective is compiled with cheap XLA options on a CPU."""

from __future__ import annotations

import subprocess
import sys

import jax
import numpy as np

import multiwalk as mw
from multiwalk import host_objective


def test_the_workers_module_imports_neither_jax_nor_the_package():
    # the fork server preloads this module alone: were jax among its imports, every pool would wait
    # seconds for it (a real process: this test process has jax imported already)
    code = "import sys, _multiwalk_worker; print(sorted(m for m in ('jax', 'multiwalk') if m in sys.modules))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"


def test_cheap_compiler_options_for_a_python_objective_only():
    box = {"lower": [-1.0, -1.0], "upper": [1.0, 1.0]}
    python = mw.Problem(objective=lambda x: float(np.sum(x**2)), backend="python", executor="serial", **box)
    compiled = mw.Problem(objective=lambda x: (x**2).sum(), **box)
    expected = host_objective.CHEAP_CPU_OPTIONS if jax.default_backend() == "cpu" else {}
    assert host_objective.compiler_options(python) == expected
    assert host_objective.compiler_options(compiled) == {}  # a JAX objective's arithmetic is the run
