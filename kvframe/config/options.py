"""Option binding: a plugin class's keyword-only ``__init__`` parameters are its options.

Their type hints decide how the text of each ``key=value`` is converted, so
``--eviction lfu:decay=0.5`` reaches ``LFU(capacity, decay=0.5)`` as a float.
"""

from __future__ import annotations

import builtins
import enum
import functools
import inspect
import pathlib
import sys
import types
import typing
from typing import Any, Literal

import attrs

from kvframe.config.errors import ConfigError, did_you_mean, suggest
from kvframe.config.grammar import BOOL_WORDS, INT_RE, PluginSpec, guess_value, parse_size
from kvframe.contract.kinds import get_kind

__all__ = [
    "Bytes",
    "OptionInfo",
    "bind_options",
    "context_params",
    "convert_option",
    "plugin_options",
    "type_text",
    "value_text",
]

_NoneType = type(None)


class _ByteSize:
    """The marker of :data:`Bytes` (compared by type, so any instance matches)."""

    def __repr__(self) -> str:
        return "bytes"


Bytes = typing.Annotated[int, _ByteSize()]
"""An option that is a number of bytes: it also takes sizes (``512MiB``, ``8GiB``).

Why a marker: a plain ``int`` option (a block count, a token window) took
``1KiB`` as 1024 without a word -- a unit on a count is a slip, not a wish.
Annotate byte options ``capacity: Bytes`` (``kvframe.Bytes``).
"""


def _is_bytes(annotation: Any) -> bool:
    return typing.get_origin(annotation) is typing.Annotated and any(
        isinstance(m, _ByteSize) for m in annotation.__metadata__
    )


@attrs.frozen(slots=True)
class OptionInfo:
    """One option a plugin class accepts, read off its ``__init__`` signature."""

    name: str
    annotation: Any
    """The resolved type hint, or ``Any`` when there is none (or it cannot be resolved)."""
    default: Any = inspect.Parameter.empty

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty

    @property
    def type_text(self) -> str:
        return type_text(self.annotation)

    def describe(self) -> str:
        """``decay: float = 0.0``, as listings and error messages show it."""
        out = f"{self.name}: {self.type_text}"
        return out + (" (required)" if self.required else f" = {value_text(self.default)}")


def value_text(value: Any) -> str:
    """A default as a user would write it: ``'trace.jsonl'``, not ``PosixPath('trace.jsonl')``."""
    if isinstance(value, pathlib.PurePath):
        return repr(str(value))
    if isinstance(value, enum.Enum):
        return repr(value.name)
    return repr(value)


def type_text(annotation: Any) -> str:
    """A short, user-facing spelling of a type hint: ``int | None``, ``'a' | 'b'``."""
    if _is_bytes(annotation):
        return "bytes"
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return type_text(typing.get_args(annotation)[0])
    if origin is Literal:
        return " | ".join(repr(arg) for arg in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(arg) for arg in typing.get_args(annotation))
    if annotation is _NoneType:
        return "None"
    if annotation is Any:
        return "any"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _init_type_hints(init: Any) -> dict[str, Any]:
    """Type hints of ``__init__``, resolving string annotations one by one.

    ``typing.get_type_hints`` fails as a whole when one annotation names something
    imported only under ``TYPE_CHECKING``; then each annotation is evaluated on
    its own and the unresolvable ones become ``Any`` (their values are guessed).
    """
    try:
        return typing.get_type_hints(init, include_extras=True)
    except Exception:
        pass
    module = sys.modules.get(getattr(init, "__module__", ""), None)
    namespace = dict(vars(builtins))
    namespace.update(vars(module) if module is not None else {})
    hints: dict[str, Any] = {}
    for name, annotation in getattr(init, "__annotations__", {}).items():
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)  # same as get_type_hints does
            except Exception:
                annotation = Any
        hints[name] = annotation
    return hints


@functools.lru_cache(maxsize=512)
def _signature_parts(cls: type) -> tuple[tuple[str, ...], tuple[OptionInfo, ...], bool]:
    init = cls.__init__
    if init is object.__init__:
        return (), (), False
    params = list(inspect.signature(init).parameters.values())[1:]  # drop self
    hints = _init_type_hints(init)
    context = tuple(
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    )
    options = tuple(
        OptionInfo(p.name, hints.get(p.name, Any), p.default)
        for p in params
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    )
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    return context, options, takes_any


def plugin_options(cls: type) -> tuple[OptionInfo, ...]:
    """The options of a plugin class: its keyword-only ``__init__`` parameters, in order."""
    return _signature_parts(cls)[1]


def context_params(cls: type) -> tuple[str, ...]:
    """The positional ``__init__`` parameters: context the host supplies, never options."""
    return _signature_parts(cls)[0]


class _BadValue(Exception):
    """A value does not fit a type hint; ``expected`` says what would have."""

    def __init__(self, expected: str, hint: str | None = None) -> None:
        super().__init__(expected)
        self.expected = expected
        self.hint = hint


def convert_option(text: str, annotation: Any, *, quoted: bool = False) -> Any:
    """Convert the text of a value to ``annotation``.

    Supported: ``int``, :data:`Bytes` (an int that also takes sizes: ``8GiB``), ``float``, ``bool``
    (true/false/yes/no/on/off/1/0), ``str``, ``pathlib.Path``, enums (by member
    name or value), ``Literal[...]`` choices, unions such as ``int | None``
    (``none`` or ``null`` gives ``None``). Without a usable hint the value keeps
    its natural type.

    :raises _BadValue: (internal) when the text does not fit.
    """
    if _is_bytes(annotation):
        stripped = text.strip()
        if INT_RE.fullmatch(stripped):
            return int(stripped)
        size = parse_size(stripped)
        if size is None:
            raise _BadValue("bytes (a number, or a size such as 512MiB or 8GiB)")
        return size
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return convert_option(text, typing.get_args(annotation)[0], quoted=quoted)
    if origin is Literal:
        choices = typing.get_args(annotation)
        for choice in choices:
            try:
                if convert_option(text, type(choice), quoted=quoted) == choice:
                    return choice
            except _BadValue:
                continue
        best = suggest(text, [str(c) for c in choices])
        raise _BadValue(
            "one of " + ", ".join(repr(c) for c in choices),
            f"did you mean {best!r}?" if best else None,
        )
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if _NoneType in args and not quoted and text.lower() in ("none", "null"):
            return None
        # Try the strict types first so that "3" becomes 3 for ``int | str``.
        for arg in sorted((a for a in args if a is not _NoneType), key=lambda a: a is str):
            try:
                return convert_option(text, arg, quoted=quoted)
            except _BadValue:
                continue
        raise _BadValue(type_text(annotation))
    if annotation is bool:
        lowered = text.strip().lower()
        if lowered in BOOL_WORDS:
            return BOOL_WORDS[lowered]
        if lowered in ("1", "0"):
            return lowered == "1"
        raise _BadValue("bool (true/false, yes/no, on/off, 1/0)")
    if annotation is int:
        stripped = text.strip()
        if INT_RE.fullmatch(stripped):
            return int(stripped)
        if parse_size(stripped) is not None:
            raise _BadValue(
                "int (a count, not a size: units such as KiB are for options typed Bytes)"
            )
        raise _BadValue("int")
    if annotation is float:
        try:
            return float(text)
        except ValueError:
            raise _BadValue("float") from None
    if annotation is str:
        return text
    if isinstance(annotation, type) and issubclass(annotation, pathlib.PurePath):
        return annotation(text)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        for member in annotation:
            if text in (member.name, str(member.value)):
                return member
        raise _BadValue("one of " + ", ".join(repr(m.name) for m in annotation))
    return text if quoted else guess_value(text)


def bind_options(cls: type, spec: PluginSpec, *, what: str | None = None) -> dict[str, Any]:
    """Check ``spec``'s options against ``cls``'s ``__init__`` and convert them.

    Returns only the options that were given; the constructor's defaults apply
    to the rest.

    :param what: how messages name the plugin, e.g. ``"eviction policy 'arc'"``.
    :raises ConfigError: for an unknown option (listing the accepted ones with
        their defaults), a context parameter set from config, a value that does
        not fit its type, or a missing required option.
    """
    what = what or f"{get_kind(spec.kind).label} {spec.target!r}"
    context, options, takes_any = _signature_parts(cls)
    infos = {info.name: info for info in options}
    accepted = [info.describe() for info in options]
    accepted_hint = (
        "accepted options: " + ", ".join(accepted) if accepted else f"{what} takes no options"
    )
    out: dict[str, Any] = {}
    for key, value in spec.options.items():
        info = infos.get(key)
        if info is None:
            if takes_any:
                out[key] = value.value
                continue
            if key in context:
                message = f"{key!r} cannot be set for {what}: kvframe supplies it itself"
            else:
                message = f"unknown option {key!r} for {what}{did_you_mean(key, infos)}"
            raise ConfigError(
                message,
                text=spec.source,
                span=value.key_span,
                origin=spec.origin,
                hints=[accepted_hint],
            )
        try:
            out[key] = convert_option(value.text, info.annotation, quoted=value.quoted)
        except _BadValue as bad:
            where = f" at column {value.span[0] + 1}" if value.span else ""
            raise ConfigError(
                f"bad value for option {key!r} of {what}: expected {bad.expected}, "
                f"got {value.text!r}{where}",
                text=spec.source,
                span=value.span,
                origin=spec.origin,
                hints=[h for h in (bad.hint, f"option {info.describe()}") if h],
            ) from None
    missing = [info for info in options if info.required and info.name not in out]
    if missing:
        names = ", ".join(repr(info.name) for info in missing)
        example = ",".join(f"{info.name}=..." for info in missing)
        raise ConfigError(
            f"missing required option {names} for {what}",
            text=spec.source,
            span=(len(spec.source), len(spec.source) + 1) if spec.source else None,
            origin=spec.origin,
            hints=[f"write it as {spec.target}:{example}", accepted_hint],
        )
    return out
