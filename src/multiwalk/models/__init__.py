"""Scientific models in plain ``jax.numpy``: black-hole images with analytic visibilities.

One file per model: :mod:`.xringaus` (cuda_mcmc's ring + Gaussian, 9 and 13 parameters),
:mod:`.mring` (the blurred m=1 m-ring), :mod:`.crescent` (the blurred slashed crescent),
:mod:`.gaussian` (an elliptical Gaussian); :mod:`.base` holds their shared conventions.

>>> from multiwalk.models import MODELS, xringaus
>>> vis = xringaus(params, u, v)                    # complex Jy at u, v in gigalambda
>>> vis = MODELS["mring"].fn(params, u, v)         # any model by name
"""

from . import crescent, gaussian, mring
from .base import Model
from .xringaus import *  # noqa: F403
from .xringaus import MODELS as _XRINGAUS_MODELS
from .xringaus import __all__ as _XRINGAUS_ALL

#: Every model form by name: "xringaus", "xringaus13", "mring", "crescent", "gaussian".
MODELS: dict[str, Model] = {**_XRINGAUS_MODELS, "mring": mring.MODEL, "crescent": crescent.MODEL,
                            "gaussian": gaussian.MODEL}


def get_model(name: str) -> Model:
    """The :class:`Model` called ``name``, or a ValueError listing the names there are."""
    if name not in MODELS:
        raise ValueError(f"model must be one of {list(MODELS)}, got {name!r}")
    return MODELS[name]


# xringaus.py's names (its ``__all__``, kept there) and the registry; the other models by module.
__all__ = [*_XRINGAUS_ALL, "Model", "get_model", "mring", "crescent", "gaussian"]
