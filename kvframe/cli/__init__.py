"""The ``kvframe`` command line, one module per subcommand.

- :mod:`kvframe.cli.main`: the parser, logging set-up and :func:`main`;
- :mod:`kvframe.cli.common`: the handler :class:`Context`, exit codes and the
  plugin-selection and engine flags every command reads the same way;
- :mod:`kvframe.cli.cmd_run`, :mod:`~kvframe.cli.cmd_check`,
  :mod:`~kvframe.cli.cmd_plugins`, :mod:`~kvframe.cli.cmd_gen`: one subcommand each.

To add a subcommand, write ``kvframe/cli/cmd_NAME.py`` with an
``add_NAME_command(subparsers)`` function and append it to :data:`SUBCOMMANDS`.
"""

from __future__ import annotations

from kvframe.cli.common import Context, add_selection_arguments, load_selection
from kvframe.cli.main import SUBCOMMANDS, build_parser, configure_logging, main

__all__ = [
    "SUBCOMMANDS",
    "Context",
    "add_selection_arguments",
    "build_parser",
    "configure_logging",
    "load_selection",
    "main",
]
