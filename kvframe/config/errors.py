"""Errors for text a user typed: a caret under the bad part, and what would fit.

Every module of :mod:`kvframe.config` raises :class:`ConfigError`; :func:`suggest`
and :func:`did_you_mean` turn a misspelling into a hint.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["ConfigError", "did_you_mean", "suggest"]


class ConfigError(ValueError):
    """A config string, option value or config file the user must fix.

    The rendered message (``str(err)``) is meant to be printed as is::

        --eviction: unknown eviction policy 'arx'; did you mean 'arc'?
            arx:variant=paper
            ^^^
          installed eviction policies: arc, lru

    The parts stay available as attributes for callers that re-render them.
    """

    def __init__(
        self,
        message: str,
        *,
        text: str | None = None,
        span: tuple[int, int] | None = None,
        origin: str | None = None,
        hints: Iterable[str] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.text = text
        """The config string the error is about, if there is one."""
        self.span = span
        """``(start, end)`` offsets into :attr:`text` of the offending part."""
        self.origin = origin
        """Where the text came from: ``--eviction``, ``kvframe.toml, key 'eviction'``."""
        self.hints = list(hints)
        """Extra lines: what is accepted, what is installed."""

    @property
    def column(self) -> int | None:
        """1-based column of the offending part in :attr:`text`."""
        return None if self.span is None else self.span[0] + 1

    def __str__(self) -> str:
        head = f"{self.origin}: {self.message}" if self.origin else self.message
        lines = [head]
        if self.text is not None:
            lines.append(f"    {self.text}")
            if self.span is not None:
                start, end = self.span
                lines.append("    " + " " * start + "^" * max(1, end - start))
        lines.extend(f"  {hint}" for hint in self.hints)
        return "\n".join(lines)


def suggest(word: str, candidates: Iterable[str]) -> str | None:
    """The closest of ``candidates`` to a misspelt ``word``, if any is close."""
    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``"; did you mean 'arc'?"`` to append to a message, or ``""`` when nothing is close."""
    best = suggest(word, candidates)
    return f"; did you mean {best!r}?" if best else ""
