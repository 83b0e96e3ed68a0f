"""XLA's CPU options for the test processes and every subprocess they start with XLA_FLAGS of its own.

XLA's CPU backend at -O0 (LLVM's optimisation passes off) and with its older fusion code
generator (the fusion emitters take longer to compile): the suite is mostly compilation of small
programs, which each of the two makes about a third faster.  IEEE semantics are kept either way;
comparisons between differently compiled programs use ulp tolerances anyway.  XLA aborts on a flag
it does not know, and jaxlib 0.11's XLA has no fusion-emitter switch, so the set depends on the
installed jaxlib: written once here (a clean install takes the newest jax).  Imports no JAX: read
before JAX makes its CPU client.
"""

from __future__ import annotations

__all__ = ["TEST_XLA_FLAGS", "flags_text"]


def _flags() -> dict[str, str]:
    flags = {"xla_backend_optimization_level": "0", "xla_cpu_use_fusion_emitters": "false"}
    try:
        from importlib.metadata import version

        if tuple(int(p) for p in version("jaxlib").split(".")[:2]) >= (0, 11):
            del flags["xla_cpu_use_fusion_emitters"]
    except Exception:  # noqa: BLE001 - no jaxlib metadata: keep the flags
        pass
    return flags


TEST_XLA_FLAGS: dict[str, str] = _flags()


def flags_text() -> str:
    """The flags as XLA_FLAGS spells them: ``--name=value`` separated by spaces."""
    return " ".join(f"--{name}={value}" for name, value in TEST_XLA_FLAGS.items())
