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

Programs that compiled in at least 0.2 s are kept (JAX's default, 1 s, leaves out most of a
solver's loops; ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` sets it), and the folder is
limited to 2 GiB, the least recently used programs going first (``JAX_COMPILATION_CACHE_MAX_SIZE``
sets it, in bytes; JAX's eviction needs the ``filelock`` package, a dependency of multiwalk).
Clearing the cache is deleting the folder: :func:`cache_dir` names it.

A run of a non-JAX objective keeps every program it compiles, however fast
(:func:`keeping_every_program`): they are compiled with cheap options, most in well under 0.2 s,
and each new process of a short ``multiwalk run`` would otherwise compile them again.
Unless the user set the threshold (``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS``, or JAX's own
cache settings): theirs holds.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import jax

__all__ = ["cache_dir", "configure", "keeping_every_program"]

ENVIRONMENT_VARIABLE = "MULTIWALK_CACHE_DIR"
MIN_COMPILE_SECONDS = 0.2
MAX_BYTES = 2 << 30
_THRESHOLD_IS_OURS = False  # whether configure() set the minimum compile time (the user did not)


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/multiwalk/jax-<jaxlib version>`` (``~/.cache`` when XDG_CACHE_HOME is unset)."""
    import jaxlib

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "multiwalk" / f"jax-{jaxlib.__version__}"


def configure(environ: dict[str, str] | None = None) -> Path | None:
    """Turn JAX's persistent compilation cache on as the module docstring says, from ``environ``
    (default ``os.environ``); returns the folder in use (None: off).  Called on ``import multiwalk``."""
    global _THRESHOLD_IS_OURS
    environ = os.environ if environ is None else environ
    _THRESHOLD_IS_OURS = False
    configured = jax.config.jax_compilation_cache_dir
    if configured:  # the user's own JAX setting
        return Path(configured)
    wanted = environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if wanted.lower() in ("off", "0", "false", "no", "none"):
        return None
    folder = Path(wanted).expanduser() if wanted else default_dir()
    jax.config.update("jax_compilation_cache_dir", str(folder))
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
        _THRESHOLD_IS_OURS = True
    if "JAX_COMPILATION_CACHE_MAX_SIZE" not in environ and _has_filelock():
        jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)  # JAX's eviction locks with filelock
    return folder


@contextlib.contextmanager
def keeping_every_program(on: bool = True) -> Iterator[None]:
    """While the block runs (in this thread), every program compiled is written to the persistent
    cache, whatever its compile time; nothing changes when ``on`` is False, the cache is off, or
    the threshold is the user's."""
    if not (on and _THRESHOLD_IS_OURS and cache_dir() is not None):
        yield
        return
    from jax._src import config as jax_config  # the per-thread form of jax.config.update

    with jax_config.persistent_cache_min_compile_time_secs(0.0):
        yield


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
