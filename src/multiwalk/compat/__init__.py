"""The seed documents' interfaces as thin wrappers over the modern API; nothing lives only here.

* :class:`multiwalk.compat.imgpu.Mcgpu`: cuda_mcmc's ``imgpu.Mcgpu`` (``burnin_and_search()``,
  ``pout``, ``chi2``, ...) on top of :class:`multiwalk.Problem`, :class:`multiwalk.ReplicaExchange`
  and :func:`multiwalk.solve`.
* :class:`multiwalk.compat.imgpu.Mcgpu_Sgra`: its subclass fitting the xringaus model to a
  ``*_uvdata.txt`` file (the seed's ``model_obsfit.py``); data and models in ``imgpu_sgra.py``.
"""

from .imgpu import Mcgpu, Mcgpu_Sgra

__all__ = ["Mcgpu", "Mcgpu_Sgra"]
