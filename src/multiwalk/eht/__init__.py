"""Simulated EHT observations of Sgr A* and the xringaus fit (the seed's flagship application).

* :func:`load_array` / :func:`read_array`: station positions and SEFDs (EHT 2017 ships along);
* :func:`simulate`: Earth-rotation synthesis with elevation limits, scans and thermal noise;
* :func:`closure_phases`: all independent triangles per time, with sigmas;
* :func:`fit_xringaus`: ReplicaExchange on amplitudes + closure phases -> :class:`XringausFit`.
"""

from .array import ARRAYS, StationArray, load_array, read_array
from .closure import ClosurePhases, closure_phases, closure_triangles, model_closure_phases
from .fit import SEED_SOLVER, XringausFit, fit_xringaus, interval_summary, xringaus_problem
from .simulate import SGRA_DEC_DEG, SGRA_RA_HOURS, gmst_hours, simulate, thermal_sigma, uv_tracks

__all__ = [
    "ARRAYS",
    "StationArray",
    "load_array",
    "read_array",
    "ClosurePhases",
    "closure_phases",
    "closure_triangles",
    "model_closure_phases",
    "SEED_SOLVER",
    "XringausFit",
    "fit_xringaus",
    "interval_summary",
    "xringaus_problem",
    "SGRA_DEC_DEG",
    "SGRA_RA_HOURS",
    "gmst_hours",
    "simulate",
    "thermal_sigma",
    "uv_tracks",
]
