"""Scientific models in plain ``jax.numpy``: the xringaus black-hole ring of cuda_mcmc.

>>> from multiwalk.models import xringaus
>>> vis = xringaus(params, u, v)        # complex Jy at u, v in gigalambda
"""

from .xringaus import (
    LOWER,
    LOWER13,
    MODELS,
    PARAM_NAMES,
    PARAM_NAMES13,
    PERIODIC,
    PERIODIC13,
    UAS_TO_NRAD,
    UPPER,
    UPPER13,
    image,
    image13,
    xringaus,
    xringaus13,
)

__all__ = [
    "xringaus",
    "xringaus13",
    "image",
    "image13",
    "PARAM_NAMES",
    "PARAM_NAMES13",
    "LOWER",
    "UPPER",
    "LOWER13",
    "UPPER13",
    "PERIODIC",
    "PERIODIC13",
    "UAS_TO_NRAD",
    "MODELS",
]
