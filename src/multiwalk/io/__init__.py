"""Readers and writers of observation and result files.

``multiwalk.io.uvdata``: cuda_mcmc's ``*_uvdata.txt`` visibility files (:class:`UVData`).
``multiwalk.io.uvfits``: UVFITS visibility files (:func:`read_uvfits`, :func:`write_uvfits`).
``multiwalk.io.uvprep``: co-located baselines, scan averaging, a systematic error budget.
"""

from .uvdata import UVData, read_uvdata, write_uvdata
from .uvfits import read_uvfits, write_uvfits
from .uvprep import add_systematic_error, drop_colocated, scan_average, scan_numbers

__all__ = [
    "UVData",
    "read_uvdata",
    "write_uvdata",
    "read_uvfits",
    "write_uvfits",
    "add_systematic_error",
    "drop_colocated",
    "scan_average",
    "scan_numbers",
]
