"""The kvframe JSONL workload format: reader (record parser) and writer.

One JSON object per line, optionally preceded by one header line. The full
field reference is in ``docs/workloads.md``; in short::

    {"kvframe_workload": 1, "name": "chat", "generator": "chat", "params": {...}}
    {"request_id": "chat-000000", "arrival": 0.0, "prompt_length": 1400,
     "shared_prefix_id": "sys-3", "shared_prefix_length": 1024, "max_tokens": 128}
    {"request_id": "r2", "prompt_token_ids": [1, 2, 3, 4], "max_tokens": 8,
     "priority": -1, "cache_salt": "tenant-a"}
    {"request_id": "j7-t0", "arrival": 3.5, "prompt_length": 900, "max_tokens": 64,
     "job_id": "j7", "turn": 0, "tool": "search", "tool_duration": 2.25}

Design choices, and why:

* Unknown fields are errors, with a "did you mean" suggestion: a misspelt
  optional field (``arival``) would otherwise silently fall back to its default
  and skew an experiment.
* A prompt is either explicit ``prompt_token_ids`` or a ``prompt_length`` with
  an optional shared prefix; the synthetic form keeps files small and makes
  prefix sharing explicit, which is what a cache experiment varies.
* ``last_turn`` may be left out: for each job whose lines never set it, the
  turn with the highest number is marked last. A job cut short by ``limit`` is
  then correctly ended at its last loaded turn.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import attrs

from kvframe.workloads.errors import RecordChecker, WorkloadError, describe_value
from kvframe.workloads.spec import (
    RequestSpec,
    SyntheticPrompt,
    TokenPrompt,
    Workload,
)

__all__ = [
    "FORMAT_VERSION",
    "HEADER_FIELDS",
    "HEADER_KEY",
    "RECORD_FIELDS",
    "KvframeJsonlParser",
    "spec_to_record",
    "write_jsonl",
]

FORMAT_VERSION = 1
HEADER_KEY = "kvframe_workload"
"""A line holding this key is the header; its value is the format version."""

HEADER_FIELDS = (HEADER_KEY, "name", "description", "generator", "params")
RECORD_FIELDS = (
    "request_id",
    "prompt_token_ids",
    "prompt_length",
    "shared_prefix_id",
    "shared_prefix_length",
    "prompt_key",
    "arrival",
    "max_tokens",
    "priority",
    "cache_salt",
    "job_id",
    "turn",
    "last_turn",
    "tool",
    "tool_duration",
)
_RECORD_FIELD_SET = frozenset(RECORD_FIELDS)
_AGENTIC_FIELDS = ("turn", "last_turn", "tool", "tool_duration")
_MAX_TOKEN_ID = 2**31 - 1


def _unknown_field_error(check: RecordChecker, field: str, known: Iterable[str]) -> WorkloadError:
    known = tuple(known)
    close = difflib.get_close_matches(field, known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else "known fields: " + ", ".join(known)
    return check.error(field, f"unknown field; {hint}")


class KvframeJsonlParser:
    """Turns decoded kvframe JSONL lines into :class:`RequestSpec` objects.

    Holds the cross-line state the format needs: seen request ids (they must be
    unique), seen ``(job_id, turn)`` pairs, and which jobs set ``last_turn``
    explicitly. :func:`kvframe.workloads.load_workload` drives it.
    """

    format = "kvframe"

    def __init__(self, *, path: str | None = None) -> None:
        self.path = path
        self.metadata: dict[str, Any] = {}
        self._seen_ids: set[str] = set()
        self._seen_turns: set[tuple[str, int]] = set()
        self._explicit_last_turn: set[str] = set()
        self._any_record = False

    # -- one line -----------------------------------------------------------

    def parse(self, obj: dict[str, Any], line: int) -> RequestSpec | None:
        """Parse one line; ``None`` for the header line."""
        check = RecordChecker(obj, path=self.path, line=line)
        if HEADER_KEY in obj:
            self._parse_header(check)
            return None
        for field in obj:
            if field not in _RECORD_FIELD_SET:
                raise _unknown_field_error(check, field, RECORD_FIELDS)

        request_id = check.string("request_id", allow_int=True) or f"line-{line}"
        if request_id in self._seen_ids:
            raise check.error("request_id", f"duplicate request id {request_id!r}")

        prompt = self._parse_prompt(check, request_id)
        max_tokens = check.integer("max_tokens", minimum=1)
        arrival = check.number("arrival", default=0.0)
        priority = check.integer("priority", minimum=None, default=0)
        cache_salt = check.string("cache_salt")

        job_id = check.string("job_id", allow_int=True)
        if job_id is None:
            for field in _AGENTIC_FIELDS:
                if check.has(field):
                    raise check.error(field, "only meaningful with 'job_id' (a multi-turn job)")
        turn = check.integer("turn", default=0)
        last_turn = check.boolean("last_turn")
        tool = check.string("tool")
        tool_duration = check.number("tool_duration", default=None)
        if job_id is not None:
            if (job_id, turn) in self._seen_turns:
                raise check.error("turn", f"job {job_id!r} already has a turn {turn}")
            self._seen_turns.add((job_id, turn))
            if last_turn is not None:
                self._explicit_last_turn.add(job_id)

        self._seen_ids.add(request_id)
        self._any_record = True
        return RequestSpec(
            request_id=request_id,
            prompt=prompt,
            max_tokens=max_tokens,
            arrival_time=arrival,
            priority=priority,
            cache_salt=cache_salt,
            job_id=job_id,
            turn=turn,
            # Provisional for jobs without explicit flags; finish() decides.
            is_last_turn=last_turn if last_turn is not None else job_id is None,
            tool_name=tool,
            tool_duration=tool_duration,
        )

    def _parse_header(self, check: RecordChecker) -> None:
        if self._any_record or self.metadata:
            raise check.error(HEADER_KEY, "the header must be the first line of the file")
        for field in check.obj:
            if field not in HEADER_FIELDS:
                raise _unknown_field_error(check, field, HEADER_FIELDS)
        version = check.integer(HEADER_KEY, minimum=1)
        if version != FORMAT_VERSION:
            raise check.error(
                HEADER_KEY,
                f"format version {version} is not supported (this kvframe reads "
                f"version {FORMAT_VERSION})",
            )
        params = check.obj.get("params")
        if params is not None and type(params) is not dict:
            raise check.error("params", f"expected an object, got {describe_value(params)}")
        self.metadata = {
            key: value
            for key, value in (
                ("format_version", version),
                ("name", check.string("name")),
                ("description", check.string("description")),
                ("generator", check.string("generator")),
                ("params", params),
            )
            if value is not None
        }

    def _parse_prompt(self, check: RecordChecker, request_id: str) -> TokenPrompt | SyntheticPrompt:
        prompt_key = check.string("prompt_key")
        if check.has("prompt_token_ids"):
            for field in (
                "prompt_length",
                "shared_prefix_id",
                "shared_prefix_length",
                "prompt_key",
            ):
                if check.has(field):
                    raise check.error(
                        field,
                        "not allowed with 'prompt_token_ids' (explicit tokens already "
                        "say what is shared)",
                    )
            tokens = check.integer_list("prompt_token_ids")
            if not tokens:
                raise check.error("prompt_token_ids", "a prompt needs at least one token")
            if max(tokens) > _MAX_TOKEN_ID:
                raise check.error(
                    "prompt_token_ids", f"token ids must be < 2**31, got {max(tokens)}"
                )
            return TokenPrompt.of(tokens)
        if not check.has("prompt_length"):
            raise check.error(
                "prompt_length",
                "required field is missing (give 'prompt_length' or 'prompt_token_ids')",
            )
        length = check.integer("prompt_length", minimum=1)
        prefix_id = check.string("shared_prefix_id", allow_int=True)
        if prefix_id is None:
            if check.has("shared_prefix_length"):
                raise check.error("shared_prefix_length", "needs 'shared_prefix_id'")
            return SyntheticPrompt(length, key=prompt_key or request_id)
        prefix_length = check.integer("shared_prefix_length", minimum=1, default=None)
        if prefix_length is None:
            raise check.error("shared_prefix_length", "required with 'shared_prefix_id'")
        if prefix_length > length:
            raise check.error(
                "shared_prefix_length",
                f"{prefix_length} is longer than prompt_length {length}",
            )
        return SyntheticPrompt(length, prefix_id, prefix_length, key=prompt_key or request_id)

    # -- whole file ---------------------------------------------------------

    def finish(self, specs: list[RequestSpec]) -> list[RequestSpec]:
        """Mark each job's highest turn as its last, for jobs that did not say."""
        last: dict[str, int] = {}
        for index, spec in enumerate(specs):
            job = spec.job_id
            if job is None or job in self._explicit_last_turn:
                continue
            if job not in last or spec.turn > specs[last[job]].turn:
                last[job] = index
        for index in last.values():
            specs[index] = attrs.evolve(specs[index], is_last_turn=True)
        return specs


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------


def spec_to_record(spec: RequestSpec) -> dict[str, Any]:
    """The kvframe JSONL object for a spec, leaving out fields at their defaults.

    Mooncake prompts have no compact form in this format and are written as
    explicit ``prompt_token_ids`` (which materialises them).
    """
    record: dict[str, Any] = {"request_id": spec.request_id, "arrival": spec.arrival_time}
    prompt = spec.prompt
    if isinstance(prompt, SyntheticPrompt):
        record["prompt_length"] = prompt.length
        if prompt.shared_prefix_id is not None:
            record["shared_prefix_id"] = prompt.shared_prefix_id
            record["shared_prefix_length"] = prompt.shared_prefix_length
        if prompt.key != spec.request_id:
            record["prompt_key"] = prompt.key
    else:  # TokenPrompt, MooncakePrompt or a user-defined Prompt
        record["prompt_token_ids"] = prompt.token_ids()
    record["max_tokens"] = spec.max_tokens
    if spec.priority:
        record["priority"] = spec.priority
    if spec.cache_salt is not None:
        record["cache_salt"] = spec.cache_salt
    if spec.job_id is not None:
        record["job_id"] = spec.job_id
        record["turn"] = spec.turn
        record["last_turn"] = spec.is_last_turn
        if spec.tool_name is not None:
            record["tool"] = spec.tool_name
        if spec.tool_duration is not None:
            record["tool_duration"] = spec.tool_duration
    return record


def write_jsonl(
    specs: Iterable[RequestSpec],
    path: str | os.PathLike[str] | IO[str],
    *,
    name: str | None = None,
    generator: str | None = None,
    params: Mapping[str, Any] | None = None,
    description: str | None = None,
) -> int:
    """Write specs as kvframe JSONL with a header line; returns the number written.

    ``params`` (JSON-serialisable) records how the workload was made, so a
    results directory can say exactly which workload it ran.
    """
    header: dict[str, Any] = {HEADER_KEY: FORMAT_VERSION}
    if isinstance(specs, Workload):
        name = name if name is not None else specs.name
    for key, value in (
        ("name", name),
        ("description", description),
        ("generator", generator),
        ("params", dict(params) if params else None),
    ):
        if value is not None:
            header[key] = value

    def emit(out: IO[str]) -> int:
        out.write(json.dumps(header, separators=(", ", ": ")) + "\n")
        count = 0
        for spec in specs:
            out.write(json.dumps(spec_to_record(spec), separators=(", ", ": ")) + "\n")
            count += 1
        return count

    if hasattr(path, "write"):
        return emit(path)  # type: ignore[arg-type]
    target = Path(path)  # type: ignore[arg-type]
    with target.open("w", encoding="utf-8") as out:
        return emit(out)
