"""``kvframe workloads``: list the workloads bundled with kvframe.

Kept apart from ``run`` so that listing what ships never imports the engine;
it only reads the packaged files' sizes and counts their lines (a few
milliseconds of decompression each).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvframe.cli.common import Context

__all__ = ["add_workloads_command", "format_workload_table", "workload_table"]


def add_workloads_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "workloads",
        help="list the workloads bundled with kvframe",
        description="List the workloads that ship with kvframe: pass a NAME to "
        "`kvframe run NAME` or to `load_workload(NAME)` instead of a file path.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=_run_workloads)


def _rows() -> list[dict[str, Any]]:
    from kvframe.workloads.bundled import BUNDLED_WORKLOADS

    return [
        {
            "name": w.name,
            "requests": w.count_requests(),
            "size_bytes": w.size_bytes(),
            "description": w.description,
        }
        for w in BUNDLED_WORKLOADS.values()
    ]


def workload_table(rows: list[dict[str, Any]]) -> Any:
    """One row per workload: name, requests, compressed size, description."""
    from kvframe.console import new_table

    table = new_table("name", "requests", "size", "description", numeric_from=1)
    table.columns[-1].justify = "left"
    for r in rows:
        table.add_row(
            r["name"], f"{r['requests']:,}", f"{r['size_bytes'] / 1e6:.2f} MB", r["description"]
        )
    return table


def format_workload_table(rows: list[dict[str, Any]]) -> str:
    """The listing as plain text, as ``kvframe workloads`` prints it into a pipe or a file."""
    from kvframe.console import render_text

    return render_text(workload_table(rows)).rstrip("\n")


def _run_workloads(args: argparse.Namespace, ctx: Context) -> int:
    rows = _rows()
    if args.json:
        ctx.print(json.dumps({"workloads": rows}, indent=2))
    else:
        from kvframe.console import emit

        emit(ctx.stdout, workload_table(rows))
    return 0
