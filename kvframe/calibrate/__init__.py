"""Fitting the sim's cost model to measurements made elsewhere.

:mod:`.steps` reads per-step timings of any engine (the CSV of
``kvframe calibrate --from-steps``), :mod:`.fit` fits a cost model's step
coefficients to them, :mod:`.copies` fits the transfer model to a table of
copy bandwidths by chunk size. Pure Python: no torch, no numpy.
"""
