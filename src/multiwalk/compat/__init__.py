"""The seed documents' interfaces as thin wrappers over the modern API; nothing lives only here.

* :class:`multiwalk.compat.imgpu.Mcgpu`: cuda_mcmc's ``imgpu.Mcgpu`` (``burnin_and_search()``,
  ``pout``, ``chi2``, ...) on top of :class:`multiwalk.Problem`, :class:`multiwalk.ReplicaExchange`
  and :func:`multiwalk.solve`.
"""

from .imgpu import Mcgpu

__all__ = ["Mcgpu"]
