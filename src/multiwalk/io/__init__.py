"""Readers and writers of observation and result files.

``multiwalk.io.uvdata``: cuda_mcmc's ``*_uvdata.txt`` visibility files (:class:`UVData`).
``multiwalk.io.uvfits``: UVFITS visibility files (:func:`read_uvfits`, :func:`write_uvfits`).
``multiwalk.io.uvprep``: co-located baselines, scan averaging, a systematic error budget.
"""

from typing import TYPE_CHECKING

from .._lazy import attach

if TYPE_CHECKING:  # imported on first use (below): multiwalk run reads and writes ODAT-SE's files alone
    from .uvdata import UVData, read_uvdata, write_uvdata
    from .uvfits import read_uvfits, write_uvfits
    from .uvprep import add_systematic_error, drop_colocated, scan_average, scan_numbers

__getattr__, __dir__ = attach(__name__, {
    "UVData": "uvdata", "read_uvdata": "uvdata", "write_uvdata": "uvdata", "read_uvfits": "uvfits",
    "write_uvfits": "uvfits", "add_systematic_error": "uvprep", "drop_colocated": "uvprep",
    "scan_average": "uvprep", "scan_numbers": "uvprep",
})

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
