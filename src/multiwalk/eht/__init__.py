"""Simulated EHT observations of Sgr A* and the xringaus fit (the seed's flagship application).

* :func:`load_array` / :func:`read_array`: station positions and SEFDs (EHT 2017 ships along);
* :func:`simulate`: Earth-rotation synthesis with elevation limits, scans and thermal noise;
* :func:`closure_phases`, :func:`log_closure_amplitudes`: maximal independent sets per time
  (chosen by rank), with sigmas and :func:`closure_covariance`; the model side
  :func:`model_closure_phases`, :func:`model_log_closure_amplitudes`;
* :func:`fit_xringaus`: ReplicaExchange on amplitudes + closure phases -> :class:`XringausFit`.
"""

from .array import ARRAYS, StationArray, load_array, read_array
from .closure import (
    ClosurePhases,
    LogClosureAmplitudes,
    closure_covariance,
    closure_phases,
    closure_sets,
    closure_triangles,
    log_closure_amplitudes,
    model_closure_phases,
    model_log_closure_amplitudes,
    select_independent,
)
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
    "LogClosureAmplitudes",
    "closure_covariance",
    "closure_sets",
    "log_closure_amplitudes",
    "model_log_closure_amplitudes",
    "select_independent",
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
