"""Tables and text for the command line, drawn with ``rich``, plain when not on a terminal.

Every table the CLI prints (``kvframe run``'s summary, ``plugins``,
``check``, ``workloads``, ``sweep --dry-run``, ``compare``) is a
:class:`rich.table.Table` made by :func:`new_table` and printed by
:func:`emit`, so they share one look and one rule for where output goes:

* **a terminal**: rich as usual -- bold headings, the terminal's width (long
  cells wrap inside their column), unicode rules;
* **anything else** (a pipe, a file, a CI log, a test's ``StringIO``): plain
  ASCII text -- no ANSI codes whatever ``FORCE_COLOR`` says, a fixed width
  wide enough that no cell wraps but a free-text column with its own limit (so
  a line per row, which ``grep`` and diffs can rely on), trailing spaces
  stripped. The same input prints the same bytes
  on every machine, which is what the documentation's transcripts and the
  tests compare against.

``rich`` is imported inside the functions: ``import kvframe`` must stay light
(``tests/packaging/test_import_light.py``), and only commands that print a table pay for
it (about 30 ms).
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.table import Table

__all__ = [
    "PLAIN_WIDTH",
    "counted",
    "emit",
    "is_terminal",
    "make_console",
    "new_table",
    "render_text",
]

PLAIN_WIDTH = 1000
"""Columns of plain output: tables are only as wide as their cells, so this only
means "never wrap" (free-text columns wrap at their own ``max_width``, the same
everywhere); a terminal's own width applies on a terminal."""


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 cell``, ``2 cells``, ``1,204 requests``: a count and its noun, in agreement."""
    word = noun if count == 1 else (plural or noun + "s")
    return f"{count:,} {word}"


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is an interactive terminal (a missing ``isatty`` means no)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed file
        return False


def make_console(stream: TextIO, *, terminal: bool | None = None) -> Console:
    """A rich console on ``stream``: full rich on a terminal, plain text elsewhere.

    :param terminal: force one mode (default: :func:`is_terminal`).
    """
    from rich.console import Console

    if terminal is None:
        terminal = is_terminal(stream)
    if terminal:
        return Console(file=stream, highlight=False, emoji=False, markup=False, force_terminal=True)
    return Console(
        file=stream,
        width=PLAIN_WIDTH,
        color_system=None,
        force_terminal=False,
        force_interactive=False,
        highlight=False,
        emoji=False,
        markup=False,
        soft_wrap=False,
    )


def new_table(
    *headings: str,
    title: str | None = None,
    numeric_from: int | None = None,
    wrap_last_at: int | None = None,
) -> Table:
    """A table in the CLI's style: headings over a rule, no frame, a left-aligned title.

    :param headings: column headings, in order.
    :param numeric_from: index of the first right-aligned (numeric) column; the
        columns from there on are right-aligned.
    :param wrap_last_at: wrap the last column (free text: descriptions, options)
        at this many characters, also off a terminal, so that one long cell does
        not stretch the rule under the headings across the screen.
    """
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        # A title longer than the table stays on one line rather than wrapping.
        title=None if title is None else Text(title, no_wrap=True, overflow="ignore"),
        title_justify="left",
        title_style="bold",
        header_style="bold",
    )
    for i, heading in enumerate(headings):
        right = numeric_from is not None and i >= numeric_from
        last = i == len(headings) - 1
        table.add_column(
            heading,
            justify="right" if right else "left",
            max_width=wrap_last_at if last else None,
        )
    return table


def _plain_box() -> Any:
    """``box.SIMPLE_HEAD`` in ASCII: a row of dashes under the headings, nothing else."""
    from rich.box import Box

    return Box("    \n    \n -- \n    \n    \n    \n    \n    \n", ascii=True)


def render_text(*renderables: RenderableType) -> str:
    """What :func:`emit` prints off a terminal, as a string (lines end with ``\\n``)."""
    from rich.table import Table

    plain = _plain_box()
    for item in renderables:
        if isinstance(item, Table):
            item.box = plain
    buffer = io.StringIO()
    console = make_console(buffer, terminal=False)
    for item in renderables:
        console.print(item)
    lines = buffer.getvalue().splitlines()
    return "".join(line.rstrip() + "\n" for line in lines)


def emit(stream: TextIO, *renderables: RenderableType) -> None:
    """Print tables or text on ``stream``: rich on a terminal, :func:`render_text` elsewhere.

    Strings are printed as they are (no markup, no highlighting), so a plugin's
    description with brackets in it is shown literally.
    """
    if is_terminal(stream):
        console = make_console(stream, terminal=True)
        for item in renderables:
            console.print(item)
        return
    stream.write(render_text(*renderables))
    stream.flush()
