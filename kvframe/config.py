"""Config strings, plugin options and ``kvframe.toml``: everything a user types.

Users choose plugins without code, with the same grammar on the command line and
in ``kvframe.toml``::

    NAME                                   lru
    NAME:key=value,key=value               arc:variant=paper,ghost=true
    package.module:Class                   my_pkg.policies:LFU
    package.module:Class:key=value,...     my_pkg.policies:LFU:decay=0.5

A value is an int, a float, a bool (``true``/``false``/``yes``/``no``/``on``/``off``),
a size (``8GiB``, ``512MiB``, ``1.5GB``: an int of bytes) or a string. Quote a
string with ``'...'`` or ``"..."`` when it contains ``,``, ``:`` or ``=``. A
plugin's options are the keyword-only parameters of its ``__init__``; their type
hints decide how each value is converted, so ``--eviction lfu:decay=0.5`` reaches
``LFU(capacity, decay=0.5)`` as a float.

Every mistake is a :class:`ConfigError` (a :class:`ValueError`) whose message
quotes the text, points at the bad part with a caret and says what would have
been accepted. This module knows the grammar and the option types; which plugins
exist is :mod:`kvframe.plugins`' business.
"""

from __future__ import annotations

import builtins
import difflib
import enum
import functools
import inspect
import os
import pathlib
import re
import sys
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs

from kvframe.bases import (
    EvictionPolicy,
    OffloadSpec,
    PluginBase,
    ReuseFilter,
    SchedulingPolicy,
    Tracer,
)

__all__ = [
    "KINDS",
    "ConfigError",
    "Kind",
    "OptionInfo",
    "OptionValue",
    "PluginSpec",
    "UserConfig",
    "bind_options",
    "config_from_mapping",
    "context_params",
    "convert_option",
    "find_config_file",
    "format_spec",
    "get_kind",
    "load_config",
    "merge",
    "parse_size",
    "parse_spec",
    "plugin_options",
    "suggest",
]

CONFIG_FILE_NAME = "kvframe.toml"


# ==========================================================================
# Errors
# ==========================================================================


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


def _did_you_mean(word: str, candidates: Iterable[str]) -> str:
    best = suggest(word, candidates)
    return f"; did you mean {best!r}?" if best else ""


# ==========================================================================
# Kinds of plugin
# ==========================================================================


@attrs.frozen(slots=True)
class Kind:
    """One extension point: its base class, registration hook and user-facing words."""

    name: str
    """The key used everywhere in code: ``"eviction"``, ``"reuse_filter"``, ..."""
    base: type[PluginBase]
    hook: str
    """The registration hook in :mod:`kvframe.hookspecs` that offers classes of this kind."""
    label: str
    """Singular noun for messages: ``"eviction policy"``."""
    plural: str
    flag: str
    """The command-line flag that selects it."""
    multiple: bool = False
    """Whether several may be selected at once (tracers)."""


KINDS: Mapping[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "scheduling",
            SchedulingPolicy,
            "kvframe_scheduling_policies",
            "scheduling policy",
            "scheduling policies",
            "--scheduler",
        ),
        Kind(
            "eviction",
            EvictionPolicy,
            "kvframe_eviction_policies",
            "eviction policy",
            "eviction policies",
            "--eviction",
        ),
        Kind(
            "offload",
            OffloadSpec,
            "kvframe_offload_specs",
            "offload spec",
            "offload specs",
            "--offload",
        ),
        Kind(
            "reuse_filter",
            ReuseFilter,
            "kvframe_reuse_filters",
            "reuse filter",
            "reuse filters",
            "--reuse-filter",
        ),
        Kind("tracer", Tracer, "kvframe_tracers", "tracer", "tracers", "--tracer", multiple=True),
    )
}
"""Every extension point, in the order listings show them."""

_KIND_ALIASES: Mapping[str, str] = {
    "scheduler": "scheduling",
    "reuse-filter": "reuse_filter",
    "tracers": "tracer",
}
"""Other spellings users write, e.g. ``scheduler = "fcfs"`` in ``kvframe.toml``."""


def get_kind(kind: str) -> Kind:
    """Look up an extension point by name or alias (``"scheduler"`` → scheduling)."""
    found = KINDS.get(_KIND_ALIASES.get(kind, kind))
    if found is None:
        raise ValueError(f"unknown plugin kind {kind!r}; kinds are {', '.join(KINDS)}")
    return found


def kind_of(cls: type) -> Kind | None:
    """The extension point a class belongs to, from the base it subclasses."""
    for kind in KINDS.values():
        if isinstance(cls, type) and issubclass(cls, kind.base):
            return kind
    return None


# ==========================================================================
# Values
# ==========================================================================

_BOOL_WORDS: Mapping[str, bool] = {
    "true": True,
    "false": False,
    "yes": True,
    "no": False,
    "on": True,
    "off": False,
}
_INT_RE = re.compile(r"[+-]?\d+(?:_\d+)*")
_FLOAT_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_SIZE_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([kmgtp]i?b|b)", re.IGNORECASE)
_SIZE_UNITS: Mapping[str, int] = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "pb": 10**15,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "pib": 2**50,
}


def parse_size(text: str) -> int | None:
    """``8GiB`` → 8589934592, ``1.5GB`` → 1500000000, ``4096`` → 4096; else None.

    Binary units (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones (KB, MB,
    GB, TB) powers of 1000, as in the IEC convention. Units are case-insensitive.
    A size that is not a whole number of bytes (``1.3B``) is not a size.
    """
    text = text.strip()
    if _INT_RE.fullmatch(text) and not text.startswith(("+", "-")):
        return int(text)
    match = _SIZE_RE.fullmatch(text)
    if match is None:
        return None
    number, unit = match.groups()
    scale = _SIZE_UNITS[unit.lower()]
    if "." not in number:
        return int(number) * scale
    whole, _, frac = number.partition(".")
    numerator = int(whole or "0") * 10 ** len(frac) + int(frac or "0")
    total, remainder = divmod(numerator * scale, 10 ** len(frac))
    return None if remainder else total


def guess_value(text: str) -> int | float | bool | str:
    """The natural type of an unquoted value when no type hint decides it."""
    lowered = text.lower()
    if lowered in _BOOL_WORDS:
        return _BOOL_WORDS[lowered]
    if _INT_RE.fullmatch(text):
        return int(text)
    if _FLOAT_RE.fullmatch(text):
        return float(text)
    size = parse_size(text)
    return size if size is not None else text


@attrs.frozen(slots=True)
class OptionValue:
    """One ``key=value`` as written, before it meets the option's type hint.

    The text is kept (not only the guessed value) so that an option annotated
    ``str`` receives ``"0012"`` and not ``12``.
    """

    text: str
    """The value without its quotes."""
    quoted: bool = False
    """Written in quotes: always a string when no type hint says otherwise."""
    span: tuple[int, int] | None = None
    """Offsets of the value (quotes included) in the spec's source text."""
    key_span: tuple[int, int] | None = None

    @property
    def value(self) -> int | float | bool | str:
        """The value's natural type: int, float, bool, size (int of bytes) or str."""
        return self.text if self.quoted else guess_value(self.text)


# ==========================================================================
# Plugin specs: the grammar
# ==========================================================================

_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]*")
_HEAD_RE = re.compile(r"[A-Za-z0-9_.\-]+")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BARE_STOP = ",:='\""

NAME_PATTERN = _NAME_RE.pattern
"""What a plugin name may look like: letters, digits, ``_`` and ``-``, no dots."""


@attrs.frozen(slots=True)
class PluginSpec:
    """A parsed config string: which plugin of a kind, and its raw options.

    Exactly one of :attr:`name` (a registered name) and :attr:`path`
    (``package.module:Class``) is set. Options are still raw here; they meet the
    class's type hints in :func:`bind_options`.
    """

    kind: str
    name: str | None = None
    path: str | None = None
    options: Mapping[str, OptionValue] = attrs.field(factory=dict, hash=False)
    source: str = ""
    """The text as the user wrote it; option spans point into it."""
    origin: str | None = None
    """Where the text came from, for messages: ``--eviction``, ``kvframe.toml, key 'eviction'``."""

    @property
    def target(self) -> str:
        """The name or the import path, whichever was given."""
        return self.name if self.name is not None else str(self.path)

    @property
    def raw_options(self) -> dict[str, int | float | bool | str]:
        """Options with their natural types, before any type hint is applied."""
        return {key: value.value for key, value in self.options.items()}

    def __str__(self) -> str:
        return format_spec(self)


class _Scanner:
    """A cursor over one config string that raises errors pointing into it."""

    def __init__(self, text: str, kind: str, origin: str | None) -> None:
        self.text = text
        self.kind = kind
        self.origin = origin
        self.pos = 0

    def error(self, message: str, start: int, end: int | None = None, *hints: str) -> ConfigError:
        end = start + 1 if end is None else end
        return ConfigError(
            message,
            text=self.text,
            span=(start, end),
            origin=self.origin,
            hints=[*hints, _GRAMMAR_HINT],
        )

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def match(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        found = pattern.match(self.text, self.pos)
        if found:
            self.pos = found.end()
        return found

    def describe_here(self) -> str:
        return f"{self.peek()!r}" if not self.at_end() else "the end of the text"


_GRAMMAR_HINT = "expected NAME, NAME:key=value,... or package.module:Class[:key=value,...]"


def parse_spec(text: str, kind: str, *, origin: str | None = None) -> PluginSpec:
    """Parse a config string into a :class:`PluginSpec` of ``kind``.

    Only the grammar is checked here; whether the name is installed and whether
    the options exist is checked by :meth:`kvframe.plugins.PluginRegistry.resolve`.

    :raises ConfigError: with the position of the first character that does not fit.
    """
    kind = get_kind(kind).name
    sc = _Scanner(text, kind, origin)
    sc.skip_ws()
    if sc.at_end():
        raise sc.error("empty config string", 0, max(1, len(text)))
    start = sc.pos
    head = sc.match(_HEAD_RE)
    if head is None:
        raise sc.error(f"expected a plugin name, found {sc.describe_here()}", sc.pos)
    name: str | None = None
    path: str | None = None
    if "." in head.group():
        path = _parse_class_path(sc, head)
    elif not _NAME_RE.fullmatch(head.group()):
        raise sc.error(
            f"{head.group()!r} is not a valid plugin name (letters, digits, '_' and '-')",
            start,
            head.end(),
        )
    else:
        sc.skip_ws()
        if _looks_like_class_after_colon(sc):
            path = _parse_class_path(sc, head)
        else:
            name = head.group()
    sc.skip_ws()
    options: dict[str, OptionValue] = {}
    if not sc.at_end():
        if sc.peek() != ":":
            raise sc.error(
                f"unexpected {sc.describe_here()} after {text[start : sc.pos].strip()!r}",
                sc.pos,
            )
        sc.pos += 1
        options = _parse_options(sc)
    return PluginSpec(kind=kind, name=name, path=path, options=options, source=text, origin=origin)


def _looks_like_class_after_colon(sc: _Scanner) -> bool:
    """``mod:Class`` (an undotted module) versus ``name:key=value``.

    A class name starts with a capital letter and is not followed by ``=``; an
    option key always is.
    """
    if sc.peek() != ":":
        return False
    found = _IDENT_RE.match(sc.text, sc.pos + 1)
    if found is None or not found.group()[0].isupper():
        return False
    rest = sc.text[found.end() :].lstrip(" \t")
    return rest == "" or rest.startswith(":")


def _parse_class_path(sc: _Scanner, head: re.Match[str]) -> str:
    module = head.group()
    offset = head.start()
    for part in module.split("."):
        if not part.isidentifier():
            raise sc.error(
                f"{module!r} is not a module path: {part!r} is not a Python identifier",
                offset,
                offset + max(1, len(part)),
            )
        offset += len(part) + 1
    sc.skip_ws()
    if sc.peek() != ":":
        raise sc.error(
            f"a module path needs a class after ':', e.g. '{module}:MyPolicy' "
            "(plugin names have no dots)",
            sc.pos,
        )
    sc.pos += 1
    sc.skip_ws()
    cls = sc.match(_IDENT_RE)
    if cls is None:
        raise sc.error(f"expected a class name after '{module}:'", sc.pos)
    return f"{module}:{cls.group()}"


def _parse_options(sc: _Scanner) -> dict[str, OptionValue]:
    options: dict[str, OptionValue] = {}
    while True:
        sc.skip_ws()
        key_start = sc.pos
        key = sc.match(_IDENT_RE)
        if key is None:
            what = "after ','" if options else "after ':'"
            raise sc.error(
                f"expected an option name {what}, found {sc.describe_here()}",
                sc.pos,
                None,
                "options are key=value pairs separated by ','",
            )
        key_span = (key_start, key.end())
        if key.group() in options:
            raise sc.error(f"option {key.group()!r} is given twice", *key_span)
        sc.skip_ws()
        if sc.peek() != "=":
            raise sc.error(
                f"expected '=' after option name {key.group()!r}, found {sc.describe_here()}",
                sc.pos,
            )
        sc.pos += 1
        sc.skip_ws()
        options[key.group()] = _parse_value(sc, key.group(), key_span)
        sc.skip_ws()
        if sc.at_end():
            return options
        if sc.peek() != ",":
            raise sc.error(
                f"unexpected {sc.describe_here()} after the value of {key.group()!r}",
                sc.pos,
                None,
                "quote values that contain ',', ':' or '=': key='a:b'",
            )
        sc.pos += 1


def _parse_value(sc: _Scanner, key: str, key_span: tuple[int, int]) -> OptionValue:
    start = sc.pos
    quote = sc.peek()
    if quote in ("'", '"'):
        sc.pos += 1
        chars: list[str] = []
        while not sc.at_end():
            ch = sc.text[sc.pos]
            if ch == "\\" and sc.pos + 1 < len(sc.text):
                chars.append(sc.text[sc.pos + 1])
                sc.pos += 2
                continue
            sc.pos += 1
            if ch == quote:
                return OptionValue("".join(chars), True, (start, sc.pos), key_span)
            chars.append(ch)
        raise sc.error(f"unterminated string in the value of {key!r}", start, len(sc.text))
    while not sc.at_end() and sc.text[sc.pos] not in _BARE_STOP:
        sc.pos += 1
    raw = sc.text[start : sc.pos].rstrip(" \t")
    if not raw:
        raise sc.error(
            f"missing value for option {key!r}", start, None, "write '' for an empty string"
        )
    return OptionValue(raw, False, (start, start + len(raw)), key_span)


def _format_value(value: OptionValue) -> str:
    text = value.text
    retyped = value.quoted and not isinstance(guess_value(text), str)
    needs_quotes = (
        retyped
        or not text
        or text != text.strip(" \t")
        or any(ch in _BARE_STOP or ch == "\\" for ch in text)
    )
    if not needs_quotes:
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def format_spec(spec: PluginSpec) -> str:
    """The canonical config string of ``spec``; :func:`parse_spec` reads it back equal."""
    out = spec.target
    if spec.options:
        out += ":" + ",".join(f"{k}={_format_value(v)}" for k, v in spec.options.items())
    return out


# ==========================================================================
# Options: a plugin class's keyword-only __init__ parameters
# ==========================================================================

_NoneType = type(None)


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
        return out + (" (required)" if self.required else f" = {self.default!r}")


def type_text(annotation: Any) -> str:
    """A short, user-facing spelling of a type hint: ``int | None``, ``'a' | 'b'``."""
    origin = typing.get_origin(annotation)
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
        return typing.get_type_hints(init)
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

    Supported: ``int`` (also sizes: ``8GiB``), ``float``, ``bool``
    (true/false/yes/no/on/off/1/0), ``str``, ``pathlib.Path``, enums (by member
    name or value), ``Literal[...]`` choices, unions such as ``int | None``
    (``none`` or ``null`` gives ``None``). Without a usable hint the value keeps
    its natural type.

    :raises _BadValue: (internal) when the text does not fit.
    """
    origin = typing.get_origin(annotation)
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
        if lowered in _BOOL_WORDS:
            return _BOOL_WORDS[lowered]
        if lowered in ("1", "0"):
            return lowered == "1"
        raise _BadValue("bool (true/false, yes/no, on/off, 1/0)")
    if annotation is int:
        stripped = text.strip()
        if _INT_RE.fullmatch(stripped):
            return int(stripped)
        size = parse_size(stripped)
        if size is None:
            raise _BadValue("int (or a size such as 512MiB or 8GiB)")
        return size
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
                message = f"unknown option {key!r} for {what}{_did_you_mean(key, infos)}"
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


# ==========================================================================
# kvframe.toml and merging with command-line flags
# ==========================================================================


@attrs.frozen(slots=True)
class UserConfig:
    """A plugin selection plus plain engine settings, from a file, flags, or both.

    Engine settings (``block_size``, ``num_gpu_blocks``, ...) are passed through
    unvalidated: the engine validates them, and can name the file and key from
    :attr:`origins`.
    """

    scheduling: PluginSpec | None = None
    eviction: PluginSpec | None = None
    offload: PluginSpec | None = None
    reuse_filter: PluginSpec | None = None
    tracer: tuple[PluginSpec, ...] = ()
    engine: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    origins: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    """Where each engine setting came from: ``kvframe.toml, key 'block_size'`` or a flag."""

    def selected(self, kind: str) -> PluginSpec | tuple[PluginSpec, ...] | None:
        """The spec(s) selected for ``kind`` (a tuple for tracers)."""
        return getattr(self, get_kind(kind).name)

    def specs(self) -> list[PluginSpec]:
        """Every selected spec, in kind order."""
        out: list[PluginSpec] = []
        for kind in KINDS.values():
            chosen = getattr(self, kind.name)
            if isinstance(chosen, tuple):
                out.extend(chosen)
            elif chosen is not None:
                out.append(chosen)
        return out


_PLUGIN_KEYS: Mapping[str, str] = {
    **{name: name for name in KINDS},
    **_KIND_ALIASES,
}


def _key_origin(origin: str, key: str, flags: bool) -> str:
    if flags:
        return "--" + key.replace("_", "-")
    return f"{origin}, key {key!r}"


def _spec_from_value(value: Any, kind: str, where: str) -> PluginSpec:
    label = get_kind(kind).label
    if isinstance(value, str):
        return parse_spec(value, kind, origin=where)
    if isinstance(value, Mapping):
        return _spec_from_table(value, kind, where)
    raise ConfigError(
        f"expected a config string for the {label}, like 'NAME:key=value', "
        f"got {type(value).__name__} {value!r}",
        origin=where,
    )


def _spec_from_table(table: Mapping[str, Any], kind: str, where: str) -> PluginSpec:
    """``{name = "arc", variant = "paper"}``: the TOML-table spelling of a spec."""
    table = dict(table)
    target = table.pop("name", None)
    if not isinstance(target, str):
        raise ConfigError(
            "a plugin table needs a string 'name' (a plugin name or package.module:Class)",
            origin=where,
        )
    base = parse_spec(target, kind, origin=where)
    if base.options:
        raise ConfigError("put options in the table, not in 'name'", text=target, origin=where)
    options: dict[str, OptionValue] = {}
    for key, value in table.items():
        if isinstance(value, bool):
            options[key] = OptionValue("true" if value else "false")
        elif isinstance(value, int | float):
            options[key] = OptionValue(repr(value))
        elif isinstance(value, str):
            options[key] = OptionValue(value, quoted=True)
        else:
            raise ConfigError(
                f"option {key!r} must be a string, number or boolean, got {type(value).__name__}",
                origin=where,
            )
    source = format_spec(attrs.evolve(base, options=options))
    return attrs.evolve(base, options=options, source=source)


def config_from_mapping(
    values: Mapping[str, Any], *, origin: str = "config", flags: bool = False
) -> UserConfig:
    """Build a :class:`UserConfig` from parsed TOML or from command-line values.

    Plugin keys (``scheduler``/``scheduling``, ``eviction``, ``offload``,
    ``reuse_filter``, ``tracer``/``tracers``) are parsed as config strings (or
    tables with a ``name``); every other key is an engine setting, kept as is.
    ``None`` values mean "not given" and are dropped, so that :func:`merge` lets
    the other source through.

    :param origin: the file name, used in messages as ``FILE, key 'eviction'``.
    :param flags: the values come from the command line: messages name the flag
        (``--eviction``) instead.
    """
    chosen: dict[str, Any] = {}
    engine: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for key, value in values.items():
        if value is None:
            continue
        where = _key_origin(origin, key, flags)
        kind_name = _PLUGIN_KEYS.get(key)
        if kind_name is None:
            engine[key] = value
            origins[key] = where
            continue
        if kind_name in chosen:
            raise ConfigError(
                f"the {get_kind(kind_name).label} is selected twice (check for aliases such as "
                "'scheduler' and 'scheduling')",
                origin=where,
            )
        if get_kind(kind_name).multiple:
            items = list(value) if isinstance(value, list | tuple) else [value]
            chosen[kind_name] = tuple(
                _spec_from_value(item, kind_name, f"{where}[{i}]" if len(items) > 1 else where)
                for i, item in enumerate(items)
            )
        else:
            chosen[kind_name] = _spec_from_value(value, kind_name, where)
    return UserConfig(**chosen, engine=engine, origins=origins)


def load_config(path: str | os.PathLike[str]) -> UserConfig:
    """Read ``kvframe.toml`` (or any TOML file of the same shape) into a :class:`UserConfig`.

    :raises ConfigError: naming the file, and the key when a value is wrong.
    """
    import tomllib  # only runs need it; keep `import kvframe.config` cheap

    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as err:
        raise ConfigError(f"cannot read config file: {err.strerror}", origin=name) from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"invalid TOML: {err}", origin=name) from None
    return config_from_mapping(data, origin=name)


def find_config_file(directory: str | os.PathLike[str] = ".") -> pathlib.Path | None:
    """``kvframe.toml`` in ``directory`` if there is one (no search upwards: explicit is safer)."""
    candidate = pathlib.Path(directory) / CONFIG_FILE_NAME
    return candidate if candidate.is_file() else None


def merge(file_values: UserConfig, cli_values: UserConfig) -> UserConfig:
    """Command-line values override the file's, key by key.

    Tracers are replaced as a whole: ``--tracer`` on the command line means
    "these tracers", not "these as well".
    """
    chosen: dict[str, Any] = {}
    for kind in KINDS.values():
        cli = getattr(cli_values, kind.name)
        chosen[kind.name] = cli if cli else getattr(file_values, kind.name)
    return UserConfig(
        **chosen,
        engine={**file_values.engine, **cli_values.engine},
        origins={**file_values.origins, **cli_values.origins},
    )
