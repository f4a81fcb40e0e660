"""Workloads: request specs, trace readers and generators.

:func:`load_workload` reads a Mooncake or kvframe JSONL file (optionally
gzip-compressed), or a workload bundled with kvframe by name
(``mooncake:conversation``, see :mod:`kvframe.workloads.bundled`), into a
:class:`Workload`. Reading is eager at the level of
*specs* — every line is parsed and checked before a run starts, so a bad line
400 requests in fails now rather than an hour into a simulation — but lazy at
the level of *tokens*: prompts stay recipes until the engine reads
``spec.prompt_token_ids``. ``limit`` stops reading after that many requests.

Arrival order. Specs must come out in non-decreasing arrival time because the
engine releases them as its virtual clock passes. A file whose arrivals go
backwards is an error by default (pointing at the first offending line),
because silently reordering a trace usually hides a bug in whatever wrote it;
``sort_arrivals=True`` instead sorts stably (equal arrivals keep file order),
which needs the whole file before ``limit`` applies. Backward arrivals are a
property of the file, not of one line, so ``skip_bad_lines`` does not skip them.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import time
import zlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from operator import attrgetter
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from kvframe.log import get_logger
from kvframe.workloads.bundled import (
    BUNDLED_WORKLOADS,
    BundledWorkload,
    WorkloadNotFoundError,
    find_bundled,
    not_found,
)
from kvframe.workloads.errors import WorkloadError, describe_value
from kvframe.workloads.kvframe_jsonl import HEADER_KEY, KvframeJsonlParser, write_jsonl
from kvframe.workloads.mooncake import MooncakeParser, looks_like_mooncake
from kvframe.workloads.spec import (
    MOONCAKE_BLOCK_TOKENS,
    MooncakePrompt,
    Prompt,
    RequestSpec,
    SyntheticPrompt,
    TokenPrompt,
    Workload,
)

__all__ = [
    "BUNDLED_WORKLOADS",
    "FORMATS",
    "MAX_KEPT_ERRORS",
    "MooncakePrompt",
    "Prompt",
    "RequestSpec",
    "SyntheticPrompt",
    "TokenPrompt",
    "Workload",
    "WorkloadError",
    "WorkloadNotFoundError",
    "detect_format",
    "load_workload",
    "write_jsonl",
]

log = get_logger(__name__)

FORMATS = ("auto", "mooncake", "kvframe")
MAX_KEPT_ERRORS = 10
"""How many skipped-line errors a :class:`Workload` keeps (all are counted)."""

Format = Literal["auto", "mooncake", "kvframe"]


class _RecordParser(Protocol):
    format: str
    metadata: dict[str, Any]

    def parse(self, obj: dict[str, Any], line: int) -> RequestSpec | None: ...

    def finish(self, specs: list[RequestSpec]) -> list[RequestSpec]: ...


def detect_format(obj: dict[str, Any]) -> str:
    """``"mooncake"`` or ``"kvframe"`` from the first JSON object of a file."""
    if HEADER_KEY in obj:
        return "kvframe"
    return "mooncake" if looks_like_mooncake(obj) else "kvframe"


def _resolve(path: str | os.PathLike[str]) -> Path | BundledWorkload:
    """A file that exists wins; else a bundled workload of that name; else a did-you-mean error."""
    file_path = Path(path)
    if file_path.exists():
        return file_path
    bundled = find_bundled(os.fspath(path))
    if bundled is None:
        raise not_found(os.fspath(path))
    return bundled


def _open_text(source: Path | BundledWorkload) -> AbstractContextManager[IO[str]]:
    if isinstance(source, BundledWorkload):
        return source.open_text()
    # Bytes that are not UTF-8 become lone surrogates, so that the line holding them
    # is the error (with its number, and skippable with skip_bad_lines), not the file.
    if source.suffix == ".gz":
        return gzip.open(source, "rt", encoding="utf-8", errors="surrogateescape")
    return source.open("r", encoding="utf-8", errors="surrogateescape")


_NOT_UTF8 = re.compile("[\udc80-\udcff]")
"""A byte that was not UTF-8, as ``surrogateescape`` decodes it."""


@contextlib.contextmanager
def _unreadable_as_workload_error(source: Path | BundledWorkload, display: str) -> Iterator[None]:
    """A file that is not what its name says (``.gz`` but not gzip, not UTF-8) names the file."""
    try:
        yield
    except gzip.BadGzipFile as exc:
        raise WorkloadError(f"not a gzip file ({exc})", path=display) from None
    except (EOFError, zlib.error) as exc:
        raise WorkloadError(
            f"the gzip data is truncated or corrupt ({exc})", path=display
        ) from None
    except UnicodeDecodeError as exc:
        raise WorkloadError(
            f"not UTF-8 text (byte {exc.start} of a block: {exc.reason}); "
            "is it compressed without a .gz suffix?",
            path=display,
        ) from None


def _decoded_lines(
    stream: IO[str], display: str
) -> Iterator[tuple[int, dict[str, Any] | WorkloadError]]:
    """(line number, object) for each non-blank line, or the error that line has."""
    decode = json.loads
    for line_no, text in enumerate(stream, 1):
        if not text.strip():
            continue
        bad = _NOT_UTF8.search(text)
        if bad is not None:
            byte = ord(bad.group()) - 0xDC00
            problem = f"not UTF-8 text (byte 0x{byte:02x} at column {bad.start() + 1})"
            if line_no == 1:
                problem += "; is the file compressed without a .gz suffix?"
            yield line_no, WorkloadError(problem, path=display, line=line_no)
            continue
        try:
            obj = decode(text)
        except json.JSONDecodeError as exc:
            yield line_no, WorkloadError(_json_problem(text, exc), path=display, line=line_no)
            continue
        if type(obj) is not dict:
            yield (
                line_no,
                WorkloadError(
                    f"expected a JSON object, got {describe_value(obj)}", path=display, line=line_no
                ),
            )
            continue
        yield line_no, obj


def _json_problem(text: str, exc: json.JSONDecodeError) -> str:
    """What is wrong with one line's JSON, with a column that points into that line.

    The decoder sees the line's newline too, so a line cut short used to be
    reported at "line 2, column 1"; say instead that the line ends too early.
    """
    body = text.rstrip("\r\n")
    if exc.pos >= len(body.rstrip()):
        return (
            f"invalid JSON: {exc.msg.removesuffix(' at')}: the line ends at column "
            f"{len(body)} before the JSON value does (truncated?)"
        )
    return f"invalid JSON: {exc.msg.removesuffix(' at')} at column {exc.pos + 1}"


def load_workload(
    path: str | os.PathLike[str],
    *,
    format: Format = "auto",
    limit: int | None = None,
    skip_bad_lines: bool = False,
    sort_arrivals: bool = False,
    mooncake_block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    name: str | None = None,
) -> Workload:
    """Read a workload file into a :class:`Workload` of specs in arrival order.

    :param path: a ``.jsonl`` file, or ``.jsonl.gz``; or the name of a bundled
        workload (``"mooncake:conversation"``; :data:`BUNDLED_WORKLOADS`), looked
        up only when no file of that name exists.
    :param format: ``"mooncake"``, ``"kvframe"``, or ``"auto"`` (from the first
        JSON object: a kvframe header or record vs. Mooncake's fields).
    :param limit: keep only the first ``limit`` requests (the earliest
        ``limit`` when sorting). Reading stops there unless sorting.
    :param skip_bad_lines: drop malformed lines instead of raising; the count
        and the first :data:`MAX_KEPT_ERRORS` errors are kept on the workload.
    :param sort_arrivals: sort stably by arrival instead of rejecting a file
        whose arrivals go backwards.
    :param mooncake_block_tokens: tokens per Mooncake hash id.
    :param name: the workload's name (default: the header's, else the file stem).
    :raises WorkloadError: on malformed input (``file:line: field 'x': ...``),
        backward arrivals without ``sort_arrivals``, or a file with no requests.
    :raises WorkloadNotFoundError: (a ``FileNotFoundError``) if ``path`` is
        neither a file nor a bundled name; the message suggests close names.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1 or None, got {limit}")
    display = os.fspath(path)
    source = _resolve(path)
    started = time.perf_counter()
    reader = _SpecReader(display, format, mooncake_block_tokens)
    if isinstance(source, Path) and source.is_dir():
        raise WorkloadError("is a directory, not a workload file", path=display)
    with _open_text(source) as stream, _unreadable_as_workload_error(source, display):
        reader.read(stream, limit=limit, skip_bad_lines=skip_bad_lines, sort_arrivals=sort_arrivals)
    specs = reader.finish(limit)

    workload = _workload_of(reader, specs, source, name)
    _log_loaded(workload, reader, display, started)
    return workload


def _workload_of(
    reader: _SpecReader, specs: list[RequestSpec], source: Path | BundledWorkload, name: str | None
) -> Workload:
    """The :class:`Workload` of a finished read: its name, source, format and errors."""
    parser = reader.parser
    metadata = dict(parser.metadata) if parser is not None else {}
    return Workload(
        specs,
        name=name
        or metadata.get("name")
        or (source.stem if isinstance(source, BundledWorkload) else _stem(source)),
        source=source.name if isinstance(source, BundledWorkload) else source,
        format=parser.format if parser is not None else "kvframe",
        num_skipped_lines=reader.num_skipped,
        errors=tuple(reader.kept_errors),
        metadata=metadata,
    )


def _log_loaded(workload: Workload, reader: _SpecReader, display: str, started: float) -> None:
    """``workload_loaded`` (debug), and ``workload_lines_skipped`` when lines were dropped."""
    log.debug(
        "workload_loaded",
        path=display,
        format=workload.format,
        requests=len(workload),
        skipped_lines=reader.num_skipped,
        sorted=reader.unsorted,
        seconds=round(time.perf_counter() - started, 4),
    )
    if reader.num_skipped:
        log.warning(
            "workload_lines_skipped",
            path=display,
            skipped=reader.num_skipped,
            first=str(reader.kept_errors[0]),
        )


class _SpecReader:
    """One pass of :func:`load_workload` over a file's lines.

    The parser (fixed by ``format`` or detected from the first object), the
    specs kept, the skipped-line count and the arrival-order bookkeeping live
    here rather than in locals so that each step of loading -- parse a line,
    check its arrival, finish the list -- is its own short method.
    """

    __slots__ = (
        "block_tokens",
        "display",
        "kept_errors",
        "last_arrival",
        "last_arrival_line",
        "num_skipped",
        "parser",
        "specs",
        "unsorted",
    )

    def __init__(self, display: str, format: Format, block_tokens: int) -> None:
        self.display = display
        self.block_tokens = block_tokens
        self.parser: _RecordParser | None = None
        if format == "mooncake":
            self.parser = MooncakeParser(path=display, block_tokens=block_tokens)
        elif format == "kvframe":
            self.parser = KvframeJsonlParser(path=display)
        self.specs: list[RequestSpec] = []
        self.kept_errors: list[WorkloadError] = []
        self.num_skipped = 0
        self.last_arrival = 0.0
        self.last_arrival_line = 0
        self.unsorted = False

    def read(
        self, stream: IO[str], *, limit: int | None, skip_bad_lines: bool, sort_arrivals: bool
    ) -> None:
        """Parse lines into :attr:`specs` until the file (or, unsorted, ``limit``) ends."""
        for line_no, item in _decoded_lines(stream, self.display):
            try:
                spec = self._parse(item, line_no)
            except WorkloadError as exc:
                if not skip_bad_lines:
                    raise
                self.num_skipped += 1
                if len(self.kept_errors) < MAX_KEPT_ERRORS:
                    self.kept_errors.append(exc)
                continue
            if spec is None:  # a header line
                continue
            self._check_arrival(spec, line_no, sort_arrivals)
            self.specs.append(spec)
            if limit is not None and len(self.specs) >= limit and not sort_arrivals:
                break

    def _parse(self, item: dict[str, Any] | WorkloadError, line_no: int) -> RequestSpec | None:
        """One decoded line as a spec (``None`` for a header), detecting the format first."""
        if isinstance(item, WorkloadError):
            raise item
        if self.parser is None:
            detected = detect_format(item)
            self.parser = (
                MooncakeParser(path=self.display, block_tokens=self.block_tokens)
                if detected == "mooncake"
                else KvframeJsonlParser(path=self.display)
            )
        return self.parser.parse(item, line_no)

    def _check_arrival(self, spec: RequestSpec, line_no: int, sort_arrivals: bool) -> None:
        """Reject (or, when sorting, note) an arrival earlier than the last one kept."""
        if spec.arrival_time >= self.last_arrival:
            self.last_arrival, self.last_arrival_line = spec.arrival_time, line_no
            return
        if not sort_arrivals:
            mooncake = self.parser is not None and self.parser.format == "mooncake"
            raise WorkloadError(
                f"arrival {spec.arrival_time:g} s is earlier than "
                f"{self.last_arrival:g} s on line {self.last_arrival_line}; arrivals must "
                "not decrease (kvframe run --sort-arrivals, sort_arrivals = true in a "
                "sweep, or load_workload(sort_arrivals=True) sorts them stably)",
                path=self.display,
                line=line_no,
                field="timestamp" if mooncake else "arrival",
            )
        self.unsorted = True

    def finish(self, limit: int | None) -> list[RequestSpec]:
        """Sort, cut to ``limit`` and let the parser finish; an empty result is an error."""
        specs = self.specs
        if self.unsorted:
            specs.sort(key=attrgetter("arrival_time"))  # list.sort is stable
        if limit is not None:
            del specs[limit:]
        if self.parser is not None:
            specs = self.parser.finish(specs)
        if not specs:
            reason = "no requests in the file"
            if self.num_skipped:
                reason += f" ({self.num_skipped} bad lines skipped; first: {self.kept_errors[0]})"
            raise WorkloadError(reason, path=self.display)
        return specs


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return name
