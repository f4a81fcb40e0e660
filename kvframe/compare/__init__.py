"""``kvframe compare``: runs side by side, as a table, JSON, CSV, figures and an HTML report.

* :mod:`kvframe.compare.load` -- runs from a sweep database or run directories;
* :mod:`kvframe.compare.table` -- the table (rich), JSON and CSV;
* :mod:`kvframe.compare.plots` -- matplotlib figures and ``report.html`` (extra ``plot``);
* :mod:`kvframe.cli.cmd_compare` -- the subcommand.
"""

from __future__ import annotations

from kvframe.compare.load import Entry, load_entries

__all__ = ["Entry", "load_entries"]
