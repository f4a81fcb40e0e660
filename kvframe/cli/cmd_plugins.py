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
    from kvframe.plugins import PluginEntry

__all__ = ["add_plugins_command", "format_plugin_table"]


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
