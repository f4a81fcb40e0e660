"""A tracer that writes the engine's trace records as JSON Lines.

One JSON object per line, each with an ``"event"`` field naming the record
type first, then the record's fields:

==================  ===========================================================
``step_snapshot``   queues and KV pool at the start of a step (before scheduling)
``prefix_cache``    one request's prefix-cache hits at its first admission
``step_decision``   what the scheduler decided: tokens per request id, new /
                    resumed / preempted / finished ids
``block_stored``    KV events with ``step`` and ``now``: one line per event, except
``block_removed``   that consecutive removals in a step are merged into one line
``all_blocks_cleared``
``request_finished`` a request left the engine, with its counters
==================  ===========================================================

Block hashes are written as the hex of their 16 digest bytes
(:func:`kvframe.block_hash_hex`: the same text whether the hash is
kvframe's int or vLLM's bytes, and unchanged since kvframe's hashes were
bytes); mappings as objects; tuples as lists. The file is flushed at every
step decision, so a run that dies (or is interrupted) leaves a trace that is
complete up to its last decided step and parseable line by line.

Select it with ``--tracer jsonl:path=trace.jsonl``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import attrs

import kvframe
from kvframe import BlockRemoved, block_hash_hex

if TYPE_CHECKING:
    from kvframe import KVEvent, PrefixCacheEvent, RequestFinished, StepDecision, StepSnapshot

__all__ = ["JsonlTracer", "record_to_dict"]

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")
_EVENT_NAMES: dict[type, str] = {}


def _event_name(cls: type) -> str:
    """``BlockStored`` -> ``block_stored`` (cached per class)."""
    name = _EVENT_NAMES.get(cls)
    if name is None:
        name = _EVENT_NAMES[cls] = _CAMEL.sub("_", cls.__name__).lower()
    return name


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, tuple | list | frozenset | set):
        return [_jsonable(v) for v in value]
    if hasattr(value, "items"):  # other mappings (MappingProxyType, ...)
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def record_to_dict(record: Any, event: str | None = None, **extra: Any) -> dict[str, Any]:
    """An attrs record as a JSON-ready dict: ``{"event": ..., **extra, **fields}``.

    Bytes become hex strings, mappings objects, tuples and sets lists.
    """
    out: dict[str, Any] = {"event": event or _event_name(type(record))}
    out.update(extra)
    for field in attrs.fields(type(record)):
        value = getattr(record, field.name)
        if field.name in _HASH_FIELDS:  # hashes are ints: not to be read as numbers
            out[field.name] = _hash_text(value)
        else:
            out[field.name] = _jsonable(value)
    return out


_HASH_FIELDS = frozenset({"block_hashes", "parent_block_hash", "block_hash"})
"""Record fields that hold block hashes (KV events), written as hex text."""


def _hash_text(value: Any) -> Any:
    """A hash field's value with every hash as :func:`block_hash_hex` text."""
    if value is None:
        return None
    if isinstance(value, tuple | list):
        return [block_hash_hex(h) for h in value]
    return block_hash_hex(value)


LARGE_TRACE_BYTES = 100 << 20
"""A trace file this big or bigger is reported with a warning when the tracer closes."""



def _log() -> Any:
    """structlog's logger for this module, imported when the tracer closes: structlog
    costs more than the rest of ``kvframe run``'s start-up (``benchmarks/startup.py``),
    and the registry imports this module for every run."""
    import structlog

    return structlog.get_logger(__name__)


class JsonlTracer(kvframe.Tracer):
    """Writes every trace record as one JSON object per line, flushed each step."""

    name = "jsonl"
    description = "Write trace records as JSON Lines (one object per line, flushed each step)."

    def __init__(
        self, *, path: Path = Path("trace.jsonl"), kv_events: bool = True, append: bool = False
    ) -> None:
        """
        :param path: the file to write (parent directories are created).
        :param kv_events: also write KV events (one line per stored / removed
            batch of blocks; the largest part of a trace).
        :param append: append to an existing file instead of replacing it.
        """
        self.path = Path(path)
        self.kv_events = kv_events
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._out: IO[str] | None = open(  # noqa: SIM115 - closed in close()
                self.path, "a" if append else "w", encoding="utf-8"
            )
        except OSError as err:
            # mkdir says "File exists" when a parent is a file; name that file instead.
            blocker = next((p for p in self.path.parents if p.exists() and not p.is_dir()), None)
            why = f"{os.fspath(blocker)} is a file, not a directory" if blocker else err.strerror
            raise ValueError(f"cannot open {os.fspath(path)!r} for writing: {why}") from None
        self._dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
        self.num_records = 0

    def _write(self, data: dict[str, Any]) -> None:
        out = self._out
        if out is None:
            raise RuntimeError(f"jsonl tracer {os.fspath(self.path)!r} is closed")
        out.write(self._dumps(data))
        out.write("\n")
        self.num_records += 1

    def on_step_snapshot(self, snapshot: StepSnapshot) -> None:
        self._write(record_to_dict(snapshot, "step_snapshot"))

    def on_prefix_cache(self, event: PrefixCacheEvent) -> None:
        self._write(record_to_dict(event, "prefix_cache"))

    def on_step_decision(self, decision: StepDecision) -> None:
        data = record_to_dict(decision, "step_decision")
        data["total_num_scheduled_tokens"] = decision.total_num_scheduled_tokens
        self._write(data)
        assert self._out is not None
        self._out.flush()

    def on_kv_events(self, step: int, now: float, events: Sequence[KVEvent]) -> None:
        """One line per event, except that a run of consecutive removals is one line.

        The block pool reports each evicted block as its own removal; a step
        that evicts thousands of blocks would otherwise write thousands of
        lines of one hash each. Stores keep their own lines (each has its
        parent hash).
        """
        if not self.kv_events:
            return
        pending: dict[str, Any] | None = None
        for event in events:
            if type(event) is BlockRemoved:
                if pending is not None and pending["medium"] == event.medium:
                    pending["block_hashes"].extend(map(block_hash_hex, event.block_hashes))
                    continue
                if pending is not None:
                    self._write(pending)
                pending = {
                    "event": "block_removed",
                    "step": step,
                    "now": now,
                    "block_hashes": list(map(block_hash_hex, event.block_hashes)),
                    "medium": event.medium,
                }
                continue
            if pending is not None:
                self._write(pending)
                pending = None
            self._write(record_to_dict(event, None, step=step, now=now))
        if pending is not None:
            self._write(pending)

    def on_request_finished(self, record: RequestFinished) -> None:
        self._write(record_to_dict(record, "request_finished"))

    def close(self) -> None:
        """Flush and close the file (idempotent), and say how big it came out: a whole
        Mooncake trace writes about 800 MB, most of it KV events."""
        if self._out is None:
            return
        self._out.close()
        self._out = None
        size = self.path.stat().st_size if self.path.exists() else 0
        fields = {"path": os.fspath(self.path), "records": self.num_records, "mb": size >> 20}
        if size >= LARGE_TRACE_BYTES:
            hint = "kv_events=false leaves the KV events out" if self.kv_events else ""
            _log().warning("trace_file_large", **fields, hint=hint)
        else:
            _log().info("trace_written", **fields)
