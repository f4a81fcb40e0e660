"""Calibration: time the torch executor and fit the sim's cost model to it.

* :mod:`kvframe.calibrate.fit` -- timing step shapes on the torch executor and the
  least-squares fit of :class:`~kvframe.domain.costs.CostModel`;
* :mod:`kvframe.calibrate.replay` -- replaying a held-out workload through the
  engine with the torch executor and with the fitted sim, to check the fit.

It sits above the engine (a replay drives it) and imports torch only inside
what needs it, so listing the CLI's commands never pays for torch.
"""
