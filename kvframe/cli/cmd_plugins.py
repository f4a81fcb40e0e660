"""``kvframe plugins``: list the installed plugins, broken ones included."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import kvframe
from kvframe.cli.common import EXIT_OK, Context
from kvframe.config import KINDS

if TYPE_CHECKING:
    from rich.table import Table

    from kvframe.host.registry import PluginEntry

__all__ = ["add_plugins_command", "format_plugin_table", "plugin_count", "plugin_table"]


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
    if not entries:
        ctx.print("no kvframe plugins installed")
        return EXIT_OK
    from kvframe.console import emit

    emit(ctx.stdout, plugin_table(entries), "", plugin_count(entries))
    return EXIT_OK


def plugin_table(entries: Sequence[PluginEntry]) -> Table:
    """One row per name; its options (and, for a conflict, its class path) under the description.

    The extra lines go inside the description cell, not in rows of their own,
    so that on a narrow terminal they wrap with the description they belong to.
    """
    from kvframe.console import new_table

    table = new_table("KIND", "NAME", "DISTRIBUTION", "VERSION", "DESCRIPTION", wrap_last_at=100)
    for e in entries:
        description = e.description if e.status == "ok" else f"{e.status.upper()}: {e.error}"
        lines = [description]
        if e.options:
            lines.append("options: " + ", ".join(o.describe() for o in e.options))
        if e.status == "conflict" and e.class_path:
            lines.append(f"select by path: {e.class_path}")
        table.add_row(
            e.kind or "?",
            e.name,
            e.source.distribution or "-",
            e.source.version or "-",
            "\n".join(lines),
        )
    return table


def plugin_count(entries: Sequence[PluginEntry]) -> str:
    """``3 usable, 1 with problems``: the line under the table."""
    broken = sum(e.status != "ok" for e in entries)
    return f"{len(entries) - broken} usable, {broken} with problems"


def format_plugin_table(entries: Sequence[PluginEntry]) -> str:
    """The listing as plain text, as ``kvframe plugins`` prints it into a pipe or a file."""
    if not entries:
        return "no kvframe plugins installed"
    from kvframe.console import render_text

    return render_text(plugin_table(entries), "", plugin_count(entries)).rstrip("\n")
