"""kvframe from Python, for notebooks: runs, sweeps and comparisons as pandas DataFrames.

* :func:`run` (``kvframe.run``) -- one run, as ``kvframe run`` makes it: a
  :class:`Result` with the summary and the requests and steps as DataFrames;
* :func:`sweep` (``kvframe.sweep``) -- a sweep file's cells, run (or resumed) and
  returned as one DataFrame;
* :func:`compare` (``kvframe.compare``) -- sweep databases and run directories as
  ``kvframe compare --csv``'s rows; :func:`requests` their requests, stacked.

pandas and pyarrow are the ``frames`` extra (``pip install 'kvframe[frames]'``);
each function imports them when it builds a table and names the extra when they
are missing. ``docs/notebooks.md`` is the guide.
"""

from __future__ import annotations

from kvframe.api.run import Result, run, selection
from kvframe.api.tables import compare, requests, sweep

__all__ = ["Result", "compare", "requests", "run", "selection", "sweep"]
