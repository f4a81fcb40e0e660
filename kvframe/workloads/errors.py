"""The one exception every workload reader raises for bad input.

A reader never lets a raw ``json.JSONDecodeError``, ``KeyError`` or
``TypeError`` escape: the user wrote (or downloaded) the file, so the message
must point at the file, the line and the field, and say what was expected.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["RecordChecker", "WorkloadError", "describe_value"]


def describe_value(value: Any, *, limit: int = 40) -> str:
    """Render a JSON value the way the user wrote it, shortened for messages."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


class WorkloadError(ValueError):
    """Malformed workload input: ``file:line: field 'name': what was wrong``.

    A ``ValueError`` so that callers catching bad-value errors generally still
    catch it; the structured attributes let a CLI or a test inspect the parts
    without parsing the message.

    :param reason: what was wrong, phrased for the user.
    :param path: the file as the user named it (``None`` for in-memory input).
    :param line: 1-based line number, or ``None`` for a whole-file problem.
    :param field: the JSON field at fault, or ``None``.
    """

    def __init__(
        self,
        reason: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.reason = reason
        self.path = path
        self.line = line
        self.field = field
        super().__init__(self._render())

    def _render(self) -> str:
        where = self.path if self.path is not None else "<workload>"
        if self.line is not None:
            where = f"{where}:{self.line}"
        text = f"{where}: "
        if self.field is not None:
            text += f"field {self.field!r}: "
        return text + self.reason

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only constructor arguments need help to survive pickling
        # (multiprocessing sweeps send errors between processes).
        return (_rebuild, (self.reason, self.path, self.line, self.field))


def _rebuild(reason: str, path: str | None, line: int | None, field: str | None) -> WorkloadError:
    return WorkloadError(reason, path=path, line=line, field=field)


# --------------------------------------------------------------------------
# Field checking shared by the readers: every accessor either returns a value
# of the promised type or raises a WorkloadError naming file, line and field.
# --------------------------------------------------------------------------

_MISSING: Any = object()


def _expected_integer(minimum: int | None) -> str:
    if minimum is None:
        return "an integer"
    if minimum == 0:
        return "a non-negative integer"
    if minimum == 1:
        return "a positive integer"
    return f"an integer >= {minimum}"


class RecordChecker:
    """Typed, located access to the fields of one JSON object (one input line).

    JSON numbers that are integral floats (``512.0``, as some dataframe writers
    emit) are accepted where an integer is expected; booleans never are, even
    though Python treats them as ints.
    """

    __slots__ = ("line", "obj", "path")

    def __init__(self, obj: dict[str, Any], *, path: str | None, line: int | None) -> None:
        self.obj = obj
        self.path = path
        self.line = line

    def error(self, field: str | None, reason: str) -> WorkloadError:
        return WorkloadError(reason, path=self.path, line=self.line, field=field)

    def has(self, field: str) -> bool:
        return self.obj.get(field) is not None

    def require(self, field: str) -> Any:
        value = self.obj.get(field, _MISSING)
        if value is _MISSING:
            raise self.error(field, "required field is missing")
        if value is None:
            raise self.error(field, "required field is null")
        return value

    def integer(self, field: str, *, minimum: int | None = 0, default: Any = _MISSING) -> int:
        value = self.obj.get(field)
        if value is None:
            if default is _MISSING:
                return self.require(field)  # raises with the right wording
            return default
        return self.as_integer(field, value, minimum=minimum)

    def as_integer(self, field: str, value: Any, *, minimum: int | None = 0) -> int:
        if type(value) is float and value.is_integer():
            value = int(value)
        if type(value) is not int or (minimum is not None and value < minimum):
            raise self.error(
                field, f"expected {_expected_integer(minimum)}, got {describe_value(value)}"
            )
        return value

    def number(self, field: str, *, default: Any = _MISSING) -> float:
        """A finite, non-negative number (times and durations)."""
        value = self.obj.get(field)
        if value is None:
            if default is _MISSING:
                return self.require(field)
            return default
        if type(value) not in (int, float) or not 0 <= value < float("inf"):
            raise self.error(field, f"expected a non-negative number, got {describe_value(value)}")
        return float(value)

    def string(self, field: str, *, allow_int: bool = False) -> str | None:
        """An optional string; ``allow_int`` also accepts integers (as ids), made strings."""
        value = self.obj.get(field)
        if value is None:
            return None
        if type(value) is str:
            return value
        if allow_int and type(value) is int:
            return str(value)
        kind = "a string or an integer" if allow_int else "a string"
        raise self.error(field, f"expected {kind}, got {describe_value(value)}")

    def boolean(self, field: str, *, default: bool | None = None) -> bool | None:
        value = self.obj.get(field)
        if value is None:
            return default
        if type(value) is not bool:
            raise self.error(field, f"expected true or false, got {describe_value(value)}")
        return value

    def integer_list(self, field: str) -> list[int]:
        """A required list of non-negative integers."""
        value = self.require(field)
        if type(value) is not list:
            raise self.error(field, f"expected a list of integers, got {describe_value(value)}")
        # Fast path: one C-level pass for the common all-int case.
        if not all(type(item) is int for item in value):
            value = [self.as_integer(f"{field}[{i}]", item) for i, item in enumerate(value)]
            # as_integer raised for anything that is not integral; value is clean now.
        elif value and min(value) < 0:
            index = next(i for i, item in enumerate(value) if item < 0)
            raise self.error(
                f"{field}[{index}]",
                f"expected a non-negative integer, got {describe_value(value[index])}",
            )
        return value
