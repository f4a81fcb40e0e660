"""The one error a model description raises: it names the file and the field."""

from __future__ import annotations

__all__ = ["ModelConfigError"]


class ModelConfigError(ValueError):
    """A ``config.json`` kvframe cannot read as a model shape.

    The message names the source (a file path or a preset's name) and the field,
    so that a user who passes ``--model-config PATH`` knows what to fix.
    """

    def __init__(self, source: str, field: str | None, problem: str) -> None:
        where = f"{source}: field {field!r}" if field else source
        super().__init__(f"{where}: {problem}")
        self.source = source
        self.field = field
        self.problem = problem
