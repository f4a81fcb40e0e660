"""Workloads that ship inside kvframe, addressed by name (``mooncake:conversation``).

Why bundle them: the main job and most examples replay the Mooncake FAST'25
traces. Before they shipped, every command pointed at a directory beside the
repository that only our own machines had, so a plain clone or a
``pip install kvframe`` could not run the README. The traces are small once
compressed (0.79 MB and 0.29 MB at ``gzip -9``) and Apache-2.0, so they travel
as package data under ``kvframe/data/`` and are read straight from the ``.gz``
(decompressing costs a few milliseconds next to parsing the JSON).

Names are ``SOURCE:TRACE``: the source says whose format and provenance the
data has, so further bundled sets (``sharegpt:...``) cannot collide with these,
and the colon keeps a name from being mistaken for a file in the working
directory. A real file always wins: ``load_workload`` only looks a name up
when no such file exists, so every path that worked before still does.
"""

from __future__ import annotations

import difflib
import gzip
import os
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import IO

import attrs

__all__ = [
    "BUNDLED_WORKLOADS",
    "BundledWorkload",
    "WorkloadNotFoundError",
    "find_bundled",
    "not_found",
]


@attrs.frozen(slots=True)
class BundledWorkload:
    """One workload file shipped as package data of kvframe.

    :param name: what users type (``kvframe run NAME``, ``load_workload(NAME)``).
    :param resource: the file under ``kvframe/data/`` (gzip-compressed JSONL).
    :param description: one line for ``kvframe workloads``.
    :param upstream: the file's name where it comes from, so that a user who
        types the upstream name gets pointed here.
    """

    name: str
    resource: str
    description: str
    upstream: str = ""

    @property
    def stem(self) -> str:
        """The name as a file-name-safe word (``mooncake-conversation``), e.g. for run folders."""
        return self.name.replace(":", "-")

    def traversable(self) -> Traversable:
        """The packaged file (a plain path for any normal install)."""
        node = resources.files("kvframe") / "data"
        for part in self.resource.split("/"):
            node = node / part
        return node

    @contextmanager
    def open_text(self) -> Iterator[IO[str]]:
        """The decompressed JSONL as a text stream; closes both layers on exit."""
        with self.traversable().open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as text:
            yield text

    def size_bytes(self) -> int:
        """Bytes on disk (compressed)."""
        node = self.traversable()
        if isinstance(node, os.PathLike):
            return os.stat(node).st_size
        return len(node.read_bytes())  # pragma: no cover - zipped installs only

    def count_requests(self) -> int:
        """Non-blank lines, i.e. requests (decompresses the file: a few milliseconds)."""
        with self.open_text() as stream:
            return sum(1 for line in stream if line.strip())


BUNDLED_WORKLOADS: dict[str, BundledWorkload] = {
    w.name: w
    for w in (
        BundledWorkload(
            name="mooncake:conversation",
            resource="mooncake/conversation.jsonl.gz",
            description="Mooncake FAST'25: one real hour of chat traffic, recorded arrivals",
            upstream="conversation_trace.jsonl",
        ),
        BundledWorkload(
            name="mooncake:synthetic",
            resource="mooncake/synthetic.jsonl.gz",
            description="Mooncake FAST'25: synthetic multi-turn sessions, Poisson arrivals",
            upstream="synthetic_trace.jsonl",
        ),
    )
}
"""Every bundled workload by name, in the order ``kvframe workloads`` lists them."""


def find_bundled(name: str) -> BundledWorkload | None:
    """The bundled workload called ``name``, or ``None``."""
    return BUNDLED_WORKLOADS.get(name)


class WorkloadNotFoundError(FileNotFoundError):
    """Neither a file nor a bundled workload; the message suggests the closest name.

    A ``FileNotFoundError`` so that code written when only paths existed still
    catches it.
    """

    def __init__(self, message: str, filename: str) -> None:
        super().__init__(message)
        self.filename = filename
        self.message = message

    def __str__(self) -> str:
        return self.message


def _keys(workload: BundledWorkload) -> list[str]:
    short = workload.name.partition(":")[2]
    keys = [workload.name, short, workload.stem]
    if workload.upstream:
        keys += [workload.upstream, workload.upstream.partition(".")[0]]
    return keys


def suggestions(text: str) -> list[str]:
    """Bundled names close to ``text`` (a mistyped name, or a path to the upstream file)."""
    candidates = {text, Path(text).name, Path(text).name.partition(".")[0]}
    found: list[str] = []
    for workload in BUNDLED_WORKLOADS.values():
        keys = _keys(workload)
        if any(difflib.get_close_matches(c, keys, n=1, cutoff=0.75) for c in candidates if c):
            found.append(workload.name)
    return found


def not_found(text: str) -> WorkloadNotFoundError:
    """The error for a workload that is neither a file nor a bundled name."""
    message = f"no such trace file or bundled workload: {text}"
    close = suggestions(text)
    if close:
        message += f" (did you mean {' or '.join(close)}?)"
    else:
        message += f" (bundled: {', '.join(BUNDLED_WORKLOADS)}; see `kvframe workloads`)"
    return WorkloadNotFoundError(message, text)
