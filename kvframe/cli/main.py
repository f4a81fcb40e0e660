"""The ``kvframe`` command line.

Each subcommand is one module ``kvframe/cli/cmd_NAME.py`` whose
``add_NAME_command(subparsers)`` builds its parser and sets ``handler``
(``(args, ctx) -> exit code``). To add a subcommand, write such a module and
append its function to :data:`SUBCOMMANDS`; use
:func:`~kvframe.cli.common.add_selection_arguments` and
:func:`~kvframe.cli.common.load_selection` for the plugin flags so every
command reads ``kvframe.toml`` and the flags the same way.

Exit codes: 0 success, 2 usage or configuration error (a one-paragraph message on
stderr, never a traceback). Logs (structlog) go to stderr so that stdout stays
machine-readable.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import kvframe
from kvframe import hot_modules
from kvframe.cli.cmd_analyze import add_analyze_command
from kvframe.cli.cmd_calibrate import add_calibrate_command
from kvframe.cli.cmd_check import add_check_command
from kvframe.cli.cmd_compare import add_compare_command
from kvframe.cli.cmd_gen import add_gen_command
from kvframe.cli.cmd_outputs_diff import add_outputs_diff_command
from kvframe.cli.cmd_plugins import add_plugins_command
from kvframe.cli.cmd_run import add_run_command
from kvframe.cli.cmd_sweep import add_sweep_command
from kvframe.cli.cmd_workloads import add_workloads_command
from kvframe.cli.common import EXIT_OK, EXIT_USAGE, Context, Handler
from kvframe.config import ConfigError
from kvframe.log import configure_when_needed, discard_pending

if TYPE_CHECKING:
    import structlog

    from kvframe.host.registry import PluginRegistry

__all__ = ["SUBCOMMANDS", "build_parser", "configure_logging", "main"]


SUBCOMMANDS: list[Callable[[Any], None]] = [
    add_plugins_command,
    add_check_command,
    add_run_command,
    add_gen_command,
    add_workloads_command,
    add_sweep_command,
    add_compare_command,
    add_calibrate_command,
    add_outputs_diff_command,
    add_analyze_command,
]
"""Functions that each add one subcommand; later commands append themselves here."""


_BAD_VALUE = re.compile(r"argument (?P<flag>[^:]+): invalid (?P<type>\w+) value: (?P<value>.*)")
_EXPECTED = {"int": "an integer", "float": "a number"}


class _Parser(argparse.ArgumentParser):
    """argparse, except that a bad *value* gets kvframe's one-line error.

    Why: ``--num-gpu-blocks abc`` is not a usage mistake; the usage dump argparse
    prints for it buried the one line that matters, while the same value in
    ``kvframe.toml`` got a plain message. Subcommand parsers are this class too
    (``add_subparsers`` makes its parsers of the parent's class).
    """

    def error(self, message: str) -> Any:  # argparse's signature: it never returns
        bad = _BAD_VALUE.fullmatch(message)
        if bad is None:
            super().error(message)
        expected = _EXPECTED.get(bad["type"], f"a valid {bad['type']}")
        self.exit(
            2, f"{self.prog}: error: {bad['flag']}: expected {expected}, got {bad['value']}\n"
        )


_NEGATIVE = re.compile(r"-\.?\d")
"""A value that starts like a negative number: ``-3``, ``-3GiB``, ``-.5``."""


def _value_options(parser: argparse.ArgumentParser) -> set[str]:
    """Every long option, of every subcommand, that takes one value (``--kv-memory``)."""
    options: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                options |= _value_options(sub)
        elif action.nargs is None:
            options.update(o for o in action.option_strings if o.startswith("--"))
    return options


def join_negative_values(argv: Sequence[str], options: set[str]) -> list[str]:
    """``--kv-memory -3GiB`` as ``--kv-memory=-3GiB``.

    Why: argparse reads a separate ``-3GiB`` as an unknown option and answers with a
    usage dump ("expected one argument"), while ``--kv-memory=-3GiB`` reaches the
    check that explains what is wrong. Joined, both spellings get that message.
    Tokens after ``--`` are left alone.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            out.extend(argv[i:])
            break
        if token in options and i + 1 < len(argv) and _NEGATIVE.match(argv[i + 1]):
            out.append(f"{token}={argv[i + 1]}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kvframe",
        description="Try KV-cache scheduling, eviction and offload policies "
        "on vLLM V1's semantics.",
    )
    parser.add_argument("--version", action="version", version=f"kvframe {kvframe.__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more log output (repeatable)"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors in the log")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in SUBCOMMANDS:
        add(subparsers)
    _accept_log_flags_everywhere(parser)
    return parser


def _accept_log_flags_everywhere(parser: argparse.ArgumentParser) -> None:
    """Let ``-v``/``-q`` also follow the subcommand (``kvframe run -v ...``).

    Their default is ``SUPPRESS`` in subcommands, so a flag given only before
    the subcommand is not reset by the subcommand's parser. A subcommand that
    uses ``-v`` or ``-q`` for something else keeps it.
    """
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for sub in action.choices.values():
            taken = sub._option_string_actions
            if not {"-v", "--verbose"} & taken.keys():
                sub.add_argument(
                    "-v",
                    "--verbose",
                    action="count",
                    default=argparse.SUPPRESS,
                    help="more log output (repeatable)",
                )
            if not {"-q", "--quiet"} & taken.keys():
                sub.add_argument(
                    "-q",
                    "--quiet",
                    action="store_true",
                    default=argparse.SUPPRESS,
                    help="only errors in the log",
                )
            _accept_log_flags_everywhere(sub)


class _StderrLoggerFactory:
    """Looks ``sys.stderr`` up on every log call, so redirections (and pytest) work."""

    def __call__(self, *args: Any) -> structlog.PrintLogger:
        import structlog

        return structlog.PrintLogger(sys.stderr)


def configure_logging(level: int) -> None:
    """Human-readable structlog output on stderr, at ``level`` and above."""
    import structlog

    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=_StderrLoggerFactory(),
        cache_logger_on_first_use=False,
    )


def _log_level(args: argparse.Namespace) -> int:
    if args.quiet:
        return logging.ERROR
    if args.verbose >= 2:
        return logging.DEBUG
    if args.verbose == 1:
        return logging.INFO
    return logging.ERROR if getattr(args, "quiet_logs", False) else logging.WARNING


def main(argv: Sequence[str] | None = None, *, registry: PluginRegistry | None = None) -> int:
    """Run the ``kvframe`` command; returns the exit code.

    :param registry: the plugin registry to use instead of the installed plugins
        (tests pass one).
    """
    parser = build_parser()
    argv = join_negative_values(sys.argv[1:] if argv is None else argv, _value_options(parser))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version and usage errors (code 2)
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    level = _log_level(args)
    if "structlog" in sys.modules:  # someone may log through structlog directly
        configure_logging(level)
    else:  # configured by the first line printed: structlog costs start-up (kvframe.log)
        configure_when_needed(level, lambda: configure_logging(level))
    # `--core python` runs the hot modules as Python too; decided before they are imported.
    hot_modules.choose(getattr(args, "core", None) or "auto")
    handler: Handler = args.handler
    try:
        return handler(args, Context(registry))
    except ConfigError as err:
        print(f"kvframe {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `kvframe plugins | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    finally:
        discard_pending()


if __name__ == "__main__":
    sys.exit(main())
