"""The CLI's tables: rich on a terminal, plain ASCII everywhere else (``kvframe.console``)."""

from __future__ import annotations

import io

import pytest

from kvframe.cli import main
from kvframe.console import emit, new_table, render_text


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _table() -> object:
    table = new_table("name", "value", title="a title longer than the table itself", numeric_from=1)
    table.add_row("alpha", "1,234")
    table.add_row("[bold]beta[/bold]", "5")  # looks like rich markup: must print literally
    return table


def test_off_a_terminal_tables_are_plain_ascii_with_no_trailing_spaces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # would make rich emit colour into a pipe
    out = io.StringIO()
    emit(out, _table(), "", "a line after")
    text = out.getvalue()
    assert text.isascii() and "\x1b" not in text
    assert all(line == line.rstrip() for line in text.splitlines())
    lines = text.splitlines()
    assert lines[0] == "a title longer than the table itself"  # one line, not wrapped
    assert lines[1].split() == ["name", "value"]
    assert set(lines[2]) == {"-"}
    assert lines[3].split() == ["alpha", "1,234"]
    assert lines[4].split() == ["[bold]beta[/bold]", "5"]
    assert lines[3].endswith("1,234") and lines[4].endswith("5")  # numbers right-aligned
    assert lines[-2:] == ["", "a line after"]
    assert render_text(_table()) == "\n".join(lines[:5]) + "\n"


def test_on_a_terminal_tables_are_drawn_by_rich() -> None:
    out = Terminal()
    emit(out, _table())
    text = out.getvalue()
    assert "\x1b[1m" in text  # bold headings
    assert "\u2500" in text  # a unicode rule under them
    assert "[bold]beta[/bold]" in text  # still no markup interpretation
    assert "alpha" in text and "1,234" in text


def test_a_long_free_text_column_wraps_at_its_limit_also_off_a_terminal() -> None:
    table = new_table("kind", "description", wrap_last_at=20)
    table.add_row("x", "one two three four five six seven eight")
    lines = render_text(table).splitlines()
    assert len(lines) > 3  # the description took several lines
    assert all(len(line) <= len("kind") + 3 + 20 + 3 for line in lines)
    column = lines[0].index("description")
    assert all(line[column:].strip() for line in lines[2:])  # every line in that column


def test_plain_cli_output_is_stable_ascii(capsys: pytest.CaptureFixture[str]) -> None:
    """What CI logs see: the workloads table, byte for byte the same on two calls."""
    assert main(["workloads"]) == 0
    first = capsys.readouterr().out
    assert main(["workloads"]) == 0
    assert capsys.readouterr().out == first
    assert first.isascii() and "\x1b" not in first
