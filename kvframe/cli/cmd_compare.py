"""``kvframe compare SOURCE...``: runs side by side, from a sweep database or run directories.

Prints a table (rich), or ``--json`` / ``--csv`` on stdout; ``--plots DIR``
also writes the figures (PNG + SVG) and ``DIR/report.html``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvframe.cli.common import Context

__all__ = ["add_compare_command"]


def add_compare_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare runs: a table, JSON or CSV, and plots with an HTML report",
        description="Compare the runs of a sweep database (kvframe sweep) or of run "
        "directories (kvframe run --out): a table of the settings that differ and the "
        "headline metrics; --plots DIR writes figures and report.html.",
    )
    parser.add_argument(
        "sources", nargs="+", metavar="SOURCE", help="a sweep database (.sqlite) or run directory"
    )
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="every metric of every run as JSON")
    fmt.add_argument("--csv", action="store_true", help="every metric of every run as CSV")
    parser.add_argument(
        "--plots",
        metavar="DIR",
        help="write figures (PNG + SVG) and report.html to DIR (pip install 'kvframe[plot]')",
    )
    parser.add_argument("--title", help="title of the table and the report")
    parser.add_argument(
        "--all-requests",
        action="store_true",
        help="each run's figures over every request it served, even where another run of "
        "the same workload ignored some (default: over the requests every run served)",
    )
    parser.set_defaults(handler=compare_command)


def compare_command(args: argparse.Namespace, ctx: Context) -> int:
    from kvframe.compare.common import on_common_requests
    from kvframe.compare.load import load_entries
    from kvframe.compare.table import render_table, write_csv, write_json

    entries = load_entries(args.sources)
    if not args.all_requests:
        entries = on_common_requests(entries)
    title = args.title or "kvframe compare: " + ", ".join(Path(s).name for s in args.sources)
    if args.json:
        write_json(entries, ctx.stdout)
    elif args.csv:
        write_csv(entries, ctx.stdout)
    else:
        render_table(entries, ctx.stdout, title=title)
    if args.plots:
        from kvframe.compare.plots import write_plots, write_report

        out = Path(args.plots)
        plots = write_plots(entries, out)
        write_report(entries, plots, out / "report.html", title=title)
        print(
            f"wrote {len(plots)} figures ({', '.join(p.stem.name for p in plots)}) "
            f"and {out / 'report.html'}",
            file=sys.stderr,
        )
    return 0
