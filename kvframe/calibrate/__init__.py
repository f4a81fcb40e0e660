"""Calibration: fit the sim's cost model to measured step times and copies.

* :mod:`kvframe.calibrate.steps` -- per-step timings of any engine (the CSV of
  ``kvframe calibrate --from-steps``) and the model's prediction for each;
* :mod:`kvframe.calibrate.fit` -- fitting a cost model's step coefficients to
  them (pure Python: no torch, no numpy);
* :mod:`kvframe.calibrate.copies` -- fitting the transfer model to a table of
  copy bandwidths by chunk size;
* :mod:`kvframe.calibrate.torch_timing` -- timing step shapes on the torch
  executor (``kvframe calibrate`` without ``--from-steps``);
* :mod:`kvframe.calibrate.replay` -- replaying a held-out workload through the
  engine with the torch executor and with the fitted sim, to check a fit.

It sits above the engine (a replay drives it) and imports torch only inside
what needs it, so listing the CLI's commands never pays for torch.
"""
