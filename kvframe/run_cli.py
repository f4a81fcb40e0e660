"""Old home of ``kvframe run`` and ``kvframe gen``; kept so existing imports work.

The commands now live in :mod:`kvframe.cli.cmd_run` and :mod:`kvframe.cli.cmd_gen`.
"""

from __future__ import annotations

from kvframe.cli.cmd_gen import GENERATORS, add_gen_command
from kvframe.cli.cmd_run import add_run_command

__all__ = ["GENERATORS", "add_gen_command", "add_run_command"]
