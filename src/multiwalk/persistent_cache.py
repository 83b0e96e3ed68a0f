"""JAX's persistent compilation cache, on by default in a per-user folder.

Compiling is most of a short run's time (a fit's first call, a new ``multiwalk run`` process).
JAX can keep compiled programs on disk and load them in later processes instead of compiling
again; multiwalk turns that on when it is imported, unless the user configured it already:

* ``MULTIWALK_CACHE_DIR=/path``: the folder (default: ``$XDG_CACHE_HOME/multiwalk/jax-<jaxlib>``,
  i.e. ``~/.cache/multiwalk/jax-<jaxlib version>``; one folder per jaxlib, so programs compiled
  by one version are never offered to another);
* ``MULTIWALK_CACHE_DIR=off``: no persistent cache;
* JAX's own settings win: with ``JAX_COMPILATION_CACHE_DIR`` (or ``jax_compilation_cache_dir``
  set before ``import multiwalk``) multiwalk changes nothing.

Every program is kept, however fast it compiled (``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS``
sets a threshold): JAX's default, 1 s, leaves out most of a solver's loops on a CPU, and any
threshold leaves out the small programs JAX compiles for each operation run outside ``jit``
(``multiwalk demo`` simulates and plots its model that way: about 90 programs of ~20 ms, 1.9 s
of every run, where loading each from the cache takes a few ms).  The folder is
limited to 2 GiB, the least recently used programs going first (``JAX_COMPILATION_CACHE_MAX_SIZE``
sets it, in bytes; JAX's eviction needs the ``filelock`` package, a dependency of multiwalk).
Clearing the cache is deleting the folder: :func:`cache_dir` names it.  The programs of the library's
own functions are also kept in its subfolder ``multiwalk-programs``, found without tracing
(:mod:`multiwalk.program_store`).

A folder that cannot be written (a read-only or missing home, as batch jobs and containers often
have, or a path through a file) leaves the cache off, with one warning naming the folder and the
fix (on rank 0 only, under an MPI launcher), where JAX would warn in its own words about the
programs it fails to read or write.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import jax

import _multiwalk_launch

__all__ = ["cache_dir", "configure"]

ENVIRONMENT_VARIABLE = "MULTIWALK_CACHE_DIR"
MIN_COMPILE_SECONDS = 0.0
MAX_BYTES = 2 << 30


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/multiwalk/jax-<jaxlib version>`` (``~/.cache`` when XDG_CACHE_HOME is unset)."""
    import jaxlib

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "multiwalk" / f"jax-{jaxlib.__version__}"


def configure(environ: dict[str, str] | None = None) -> Path | None:
    """Turn JAX's persistent compilation cache on as the module docstring says, from ``environ``
    (default ``os.environ``); returns the folder in use (None: off).  Called on ``import multiwalk``."""
    environ = os.environ if environ is None else environ
    configured = jax.config.jax_compilation_cache_dir
    if configured:  # the user's own JAX setting
        return Path(configured)
    wanted = environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if wanted.lower() in ("off", "0", "false", "no", "none"):
        return None
    folder = Path(wanted).expanduser() if wanted else default_dir()
    unusable = _why_unusable(folder)
    if unusable:
        # every rank of a launch (MPI's or SLURM's) has the same folder: one says it
        if _multiwalk_launch.launched_rank(environ, (*_multiwalk_launch.MPI_RANK_VARIABLES, "SLURM_PROCID")) != 0:
            return None
        warnings.warn(f"multiwalk compiles without its persistent compilation cache: the folder {folder} {unusable}. "
                      f"Set {ENVIRONMENT_VARIABLE} to a folder you can write (or to 'off' to silence this).",
                      stacklevel=2)
        return None
    folder = folder.absolute()  # a later chdir does not move it
    jax.config.update("jax_compilation_cache_dir", str(folder))
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    if "JAX_COMPILATION_CACHE_MAX_SIZE" not in environ and _has_filelock():
        jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)  # JAX's eviction locks with filelock
    return folder


def _why_unusable(folder: Path) -> str | None:
    """Why ``folder`` cannot hold the cache (None: it can): it, or the nearest folder above it that
    exists (JAX makes the rest), must be a folder this process may write in.  Nothing is created.
    A path that cannot even be looked at (a folder above it this user may not enter) counts as
    one that cannot be made."""
    existing = os.path.abspath(folder)
    while not os.path.lexists(existing) and existing != os.path.dirname(existing):
        existing = os.path.dirname(existing)  # os.path's tests say False where Path's raise (EACCES)
    if os.path.islink(existing) and not os.path.exists(existing):
        return f"cannot be made ({existing} is a broken link)"
    if not os.path.isdir(existing):
        return f"cannot be made ({existing} is not a folder)"
    if not os.access(existing, os.W_OK | os.X_OK):
        return "is not writable" if existing == os.path.abspath(folder) else f"cannot be made ({existing} is not writable)"
    return None


def _has_filelock() -> bool:
    try:
        import filelock  # noqa: F401
    except ImportError:
        return False
    return True


def cache_dir() -> Path | None:
    """The folder of the persistent compilation cache in use, or None when it is off."""
    configured = jax.config.jax_compilation_cache_dir
    return Path(configured) if configured else None
