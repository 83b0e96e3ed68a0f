"""Readers and writers of observation and result files.

``multiwalk.io.uvdata``: cuda_mcmc's ``*_uvdata.txt`` visibility files (:class:`UVData`).
"""
