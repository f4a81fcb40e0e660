"""The config-string grammar: ``NAME[:key=value,...]`` or ``package.module:Class[:...]``.

Parsing and printing only: what a value looks like (int, float, bool, size,
string) and where each part sits in the text, so errors can point at it.
Whether the name is installed and whether the options fit the class is decided
later (:mod:`kvframe.config.options`, :mod:`kvframe.host.registry`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from kvframe.config.errors import ConfigError
from kvframe.contract.kinds import get_kind

__all__ = [
    "BOOL_WORDS",
    "INT_RE",
    "NAME_PATTERN",
    "OptionValue",
    "PluginSpec",
    "format_spec",
    "guess_value",
    "parse_size",
    "parse_spec",
]

BOOL_WORDS: Mapping[str, bool] = {
    "true": True,
    "false": False,
    "yes": True,
    "no": False,
    "on": True,
    "off": False,
}
INT_RE = re.compile(r"[+-]?\d+(?:_\d+)*")
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
    if INT_RE.fullmatch(text) and not text.startswith(("+", "-")):
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
    if lowered in BOOL_WORDS:
        return BOOL_WORDS[lowered]
    if INT_RE.fullmatch(text):
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
    the options exist is checked by :meth:`kvframe.host.registry.PluginRegistry.resolve`.

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
