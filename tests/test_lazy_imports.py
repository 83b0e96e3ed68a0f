"""``import multiwalk`` and the ``multiwalk`` command import only what the call needs.

The applications' libraries (scipy's FFTs and special functions, astropy, matplotlib, polars,
ArviZ, ...) load when their subpackage is first used, so neither a script that solves nor a
``multiwalk`` command pays for them at start-up.  Each check runs in a fresh interpreter: this
test process has imported everything already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# libraries that neither `import multiwalk` nor `multiwalk <command> --help` may import
NOT_AT_IMPORT = ("scipy", "astropy", "matplotlib", "polars", "arviz", "corner", "dask", "distributed", "mpi4py", "tqdm")


# modules of the package that `import multiwalk` leaves for their first use (multiwalk._lazy)
LOADED_ON_USE = ("multiwalk.minimize", "multiwalk.lbfgs", "multiwalk.solvers.lbfgs", "multiwalk.solvers.exchange",
                 "multiwalk.solvers.mapper", "multiwalk.solvers.pattern_search", "multiwalk.solvers.population_annealing",
                 "multiwalk.solvers.replica_exchange", "multiwalk.io.uvfits", "multiwalk.functions.cute")


def _python(code: str, *argv: str) -> dict:
    """Run ``code`` in a fresh interpreter with this checkout's sources first; its last stdout line, as JSON."""
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""), JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *argv], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_multiwalk_leaves_the_applications_libraries_out_and_every_name_works() -> None:
    found = _python(f"""
        import json, sys
        import multiwalk as mw
        heavy = {NOT_AT_IMPORT!r}
        loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set(heavy))
        # the solvers, minimize and the subpackages' modules wait for their first use too
        modules = sorted(m for m in sys.modules if m.startswith("multiwalk."))
        eager = [m for m in {LOADED_ON_USE!r} if m in sys.modules]
        import multiwalk.solvers.exchange  # an XLA run (multiwalk run's exchange): no objective scalarised
        eager += ["multiwalk.scalarise"] if "multiwalk.scalarise" in sys.modules else []
        # jax.extend imports all its modules, Pallas's among them: the scalariser imports it when it runs
        loaded += ["jax.extend"] if "jax.extend" in sys.modules else []
        # every public name, and the subpackages on first use
        names = {{name: hasattr(mw, name) for name in mw.__all__}}
        # the models: scipy.signal (~0.4 s) waits for an image that needs it (the crescent's blur)
        models_signal = mw.models.MODELS is not None and "scipy.signal" in sys.modules
        lazy = {{
            "deconv": mw.deconv.CoordinateDescent.__name__,
            "eht": mw.eht.fit_eht.__name__,
            "io": mw.io.UVData.__name__,
            "models": type(mw.models.MODELS).__name__,
            "functions": mw.functions.cute.extended_rosenbrock.__name__,
        }}
        scipy_now = "scipy.fft" in sys.modules  # deconv's FFTs came with mw.deconv
        listed = sorted({{"deconv", "eht", "io", "models", "functions", "compat", "diagnostics"}} - set(dir(mw)))
        star = {{}}
        exec("from multiwalk import *", star)
        try:
            mw.no_such_name
            missing = "no error"
        except AttributeError as err:
            missing = str(err)
        print(json.dumps(dict(loaded=loaded, eager=eager, modules=modules, names=names, lazy=lazy, scipy_now=scipy_now,
                              listed=listed, models_signal=models_signal,
                              star=sorted(set(mw.__all__) - set(star)), missing=missing)))
    """)
    assert found["loaded"] == [], f"import multiwalk imported {found['loaded']}"
    assert found["eager"] == [], f"import multiwalk imported {found['eager']} (of {found['modules']})"
    assert all(found["names"].values()), found["names"]
    assert found["lazy"] == {"deconv": "CoordinateDescent", "eht": "fit_eht", "io": "UVData", "models": "dict",
                             "functions": "extended_rosenbrock"}
    assert found["scipy_now"]
    assert not found["models_signal"], "import multiwalk.models imported scipy.signal"
    assert found["listed"] == [], f"dir(multiwalk) lacks {found['listed']}"
    assert found["star"] == [], f"from multiwalk import * lacks {found['star']}"
    assert found["missing"] == "module 'multiwalk' has no attribute 'no_such_name'"


def test_the_command_imports_its_libraries_in_its_handlers() -> None:
    # build_parser imports the module of the command given (every command's without one, below);
    # its libraries wait for the handler that runs
    found = _python(f"""
        import contextlib, io, json, runpy, sys
        sys.argv = ["multiwalk", "run", "--help"]
        with contextlib.redirect_stdout(io.StringIO()) as text, contextlib.suppress(SystemExit):
            runpy.run_module("multiwalk", run_name="__main__", alter_sys=True)
        loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({NOT_AT_IMPORT!r}))
        others = [m for m in sys.modules if m.startswith("multiwalk.commands.") and m != "multiwalk.commands.run"
                  or m == "multiwalk.io.step_processes"]  # the writer processes: only when a run takes them
        from multiwalk.cli import build_parser
        every = sorted(build_parser()._subparsers._group_actions[0].choices)
        print(json.dumps(dict(loaded=loaded, usage=text.getvalue().startswith("usage: multiwalk run"),
                              cute="multiwalk.functions.cute" in sys.modules, others=others, every=every)))
    """)
    assert found == {"loaded": [], "usage": True, "cute": False, "others": [],
                     "every": ["demo", "fit-eht", "image", "lbfgs", "neighborlist", "run"]}, found


def test_minimize_stays_the_function_when_its_module_is_imported_first() -> None:
    # multiwalk.minimize is an export and the module defining it: importing the module (or
    # unpickling the function, which imports it by name) before the first mw.minimize binds the
    # module on the package, unless the package keeps the function
    import pickle

    import multiwalk as mw

    found = _python("""
        import json, pickle, sys
        f = pickle.loads(bytes.fromhex(sys.argv[1]))  # imports multiwalk.minimize first
        import multiwalk.minimize
        import multiwalk as mw
        from multiwalk import minimize
        print(json.dumps(dict(attribute=mw.minimize is f, imported=minimize is f)))
    """, pickle.dumps(mw.minimize).hex())
    assert found == {"attribute": True, "imported": True}


def test_an_lbfgs_solve_imports_the_inverse_hessian_only_for_kept_pairs() -> None:
    # The inverse Hessian (a scipy LinearOperator) is built only with keep_pairs=True: its module,
    # which imports scipy.sparse.linalg, is not loaded by a solve without it (a first call in a new
    # process paid ~0.12 s for it on a 2-core CPU where nothing else imports scipy).
    found = _python("""
        import json, sys
        import jax
        jax.config.update("jax_enable_x64", True)
        import multiwalk as mw
        from multiwalk.functions import cute
        problem = mw.Problem(objective=cute.extended_rosenbrock, x0=cute.start("extended_rosenbrock", 100))
        module = "multiwalk.solvers.lbfgs.inverse_hessian"  # it imports scipy.sparse.linalg
        mw.solve(problem, mw.LBFGS(), progress=False)
        plain = module in sys.modules
        kept = mw.solve(problem, mw.LBFGS(keep_pairs=True), progress=False)
        print(json.dumps({"plain": plain, "kept": module in sys.modules,
                          "hess_inv": type(kept.inverse_hessian()).__name__}))
    """)
    assert found == {"plain": False, "kept": True, "hess_inv": "InverseHessian"}
