"""Scientific models in plain ``jax.numpy``: the xringaus black-hole ring of cuda_mcmc.

>>> from multiwalk.models import xringaus
>>> vis = xringaus(params, u, v)        # complex Jy at u, v in gigalambda
"""

# The package exports exactly what xringaus.py exports (its ``__all__``): one list, kept there.
from .xringaus import *  # noqa: F403
from .xringaus import __all__ as __all__
