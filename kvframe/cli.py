"""The ``kvframe`` command line.

Each subcommand is one ``add_*_command(subparsers)`` function that builds its
parser and sets ``handler`` (``(args, ctx) -> exit code``). To add a subcommand
(``run``, ``compare``, ``gen``), write such a function and append it to
:data:`SUBCOMMANDS`; use :func:`add_selection_arguments` and
:func:`load_selection` for the plugin flags so every command reads
``kvframe.toml`` and the flags the same way.

Exit codes: 0 success, 2 usage or configuration error (a one-paragraph message on
stderr, never a traceback). Logs (structlog) go to stderr so that stdout stays
machine-readable.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

import structlog

import kvframe
from kvframe.config import (
    KINDS,
    ConfigError,
    UserConfig,
    config_from_mapping,
    find_config_file,
    load_config,
    merge,
)
from kvframe.run_cli import add_gen_command, add_run_command
from kvframe.torch_cli import add_calibrate_command, add_outputs_diff_command
from kvframe.workloads_cli import add_workloads_command

if TYPE_CHECKING:
    from kvframe.plugins import PluginEntry, PluginRegistry

__all__ = [
    "SUBCOMMANDS",
    "Context",
    "add_selection_arguments",
    "build_parser",
    "load_selection",
    "main",
]

EXIT_OK = 0
EXIT_USAGE = 2


class Context:
    """What a subcommand handler gets besides its arguments.

    The plugin registry is built on first access, so subcommands that do not
    need plugins never scan entry points.
    """

    def __init__(
        self, registry: PluginRegistry | None = None, stdout: TextIO | None = None
    ) -> None:
        self._registry = registry
        self.stdout = stdout if stdout is not None else sys.stdout

    @property
    def registry(self) -> PluginRegistry:
        if self._registry is None:
            from kvframe.plugins import get_registry

            self._registry = get_registry()
        return self._registry

    def print(self, *parts: object) -> None:
        print(*parts, file=self.stdout)


Handler = Callable[[argparse.Namespace, Context], int]


# ==========================================================================
# Shared plugin-selection flags
# ==========================================================================


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and one flag per plugin kind (``--scheduler``, ``--eviction``, ...)."""
    group = parser.add_argument_group(
        "plugin selection",
        "config strings: NAME, NAME:key=value,... or package.module:Class[:key=value,...]; "
        "flags override kvframe.toml",
    )
    group.add_argument(
        "--config",
        metavar="PATH",
        help="TOML file with plugin selection and engine settings "
        "(default: ./kvframe.toml if it exists)",
    )
    group.add_argument("--no-config", action="store_true", help="ignore ./kvframe.toml")
    for kind in KINDS.values():
        group.add_argument(
            kind.flag,
            dest=kind.flag[2:].replace("-", "_"),
            metavar="SPEC",
            action="append" if kind.multiple else "store",
            help=f"the {kind.label}" + (" (repeat for several)" if kind.multiple else ""),
        )


def load_selection(args: argparse.Namespace, engine_keys: Sequence[str] = ()) -> UserConfig:
    """The plugin selection and engine settings: ``kvframe.toml`` overridden by flags.

    :param engine_keys: argument ``dest`` names that are engine settings
        (``block_size``, ...); given ones override the file's keys of the same name.
    :raises ConfigError: naming the file and key, or the flag, that is wrong.
    """
    path = getattr(args, "config", None)
    if path is None and not getattr(args, "no_config", False):
        path = find_config_file()
    file_values = load_config(path) if path is not None else UserConfig()
    values: dict[str, Any] = {kind.flag[2:].replace("-", "_"): None for kind in KINDS.values()}
    for key in [*values, *engine_keys]:
        values[key] = getattr(args, key, None)
    return merge(file_values, config_from_mapping(values, flags=True))


# ==========================================================================
# kvframe plugins
# ==========================================================================


def add_plugins_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plugins",
        help="list installed plugins",
        description="List every kvframe plugin found through entry points, "
        "including broken ones and why they cannot be used.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--kind", choices=list(KINDS), help="only plugins of this kind (and broken ones)"
    )
    # The listing already shows every problem; repeating it as log lines is noise.
    parser.set_defaults(handler=_run_plugins, quiet_logs=True)


def _run_plugins(args: argparse.Namespace, ctx: Context) -> int:
    entries = ctx.registry.entries(args.kind)
    if args.json:
        ctx.print(
            json.dumps(
                {"kvframe_version": kvframe.__version__, "plugins": [e.to_json() for e in entries]},
                indent=2,
            )
        )
        return EXIT_OK
    ctx.print(format_plugin_table(entries))
    return EXIT_OK


def format_plugin_table(entries: Sequence[PluginEntry]) -> str:
    """The human-readable listing: one row per name, options and problems under it."""
    if not entries:
        return "no kvframe plugins installed"
    header = ("KIND", "NAME", "DISTRIBUTION", "VERSION", "DESCRIPTION")
    rows: list[tuple[str, ...]] = []
    details: list[list[str]] = []
    for e in entries:
        description = e.description if e.status == "ok" else f"{e.status.upper()}: {e.error}"
        dist, version = e.source.distribution or "-", e.source.version or "-"
        rows.append((e.kind or "?", e.name, dist, version, description))
        extra = []
        if e.options:
            extra.append("options: " + ", ".join(o.describe() for o in e.options))
        if e.status == "conflict" and e.class_path:
            extra.append(f"select by path: {e.class_path}")
        details.append(extra)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    indent = " " * (widths[0] + 2)

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=False)) + "  " + cells[-1]

    out = [line(header)]
    for row, extra in zip(rows, details, strict=True):
        out.append(line(row).rstrip())
        out.extend(indent + text for text in extra)
    broken = sum(e.status != "ok" for e in entries)
    usable = len(entries) - broken
    out.append("")
    out.append(f"{usable} usable, {broken} with problems")
    return "\n".join(out)


# ==========================================================================
# kvframe check
# ==========================================================================


def add_check_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="validate a plugin selection without running anything",
        description="Resolve the plugins selected by kvframe.toml and the flags, "
        "validate their options, and print what would be built.",
    )
    add_selection_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(handler=_run_check)


def _run_check(args: argparse.Namespace, ctx: Context) -> int:
    config = load_selection(args)
    resolved = [ctx.registry.resolve(spec.kind, spec) for spec in config.specs()]
    if args.json:
        ctx.print(
            json.dumps(
                {
                    "plugins": [
                        {
                            "kind": r.kind,
                            "name": r.name,
                            "class": f"{r.cls.__module__}:{r.cls.__qualname__}",
                            "options": {
                                k: v if isinstance(v, str | int | float | bool | None) else repr(v)
                                for k, v in r.effective_options().items()
                            },
                        }
                        for r in resolved
                    ],
                    "engine": dict(config.engine),
                },
                indent=2,
                default=repr,
            )
        )
        return EXIT_OK
    if not resolved:
        ctx.print("no plugins selected")
    for r in resolved:
        options = ", ".join(f"{k}={v!r}" for k, v in r.effective_options().items())
        ctx.print(f"{r.kind:<13} {r.name}  ({r.cls.__module__}:{r.cls.__qualname__})")
        if options:
            ctx.print(f"{'':<13} {options}")
    for key, value in config.engine.items():
        ctx.print(f"{'engine':<13} {key} = {value!r}")
    return EXIT_OK


# ==========================================================================
# Entry point
# ==========================================================================

SUBCOMMANDS: list[Callable[[Any], None]] = [
    add_plugins_command,
    add_check_command,
    add_run_command,
    add_gen_command,
    add_workloads_command,
    add_calibrate_command,
    add_outputs_diff_command,
]
"""Functions that each add one subcommand; later commands append themselves here."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    return parser


class _StderrLoggerFactory:
    """Looks ``sys.stderr`` up on every log call, so redirections (and pytest) work."""

    def __call__(self, *args: Any) -> structlog.PrintLogger:
        return structlog.PrintLogger(sys.stderr)


def configure_logging(level: int) -> None:
    """Human-readable structlog output on stderr, at ``level`` and above."""
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
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version and usage errors (code 2)
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    configure_logging(_log_level(args))
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


if __name__ == "__main__":
    sys.exit(main())
