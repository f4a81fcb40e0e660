"""Generated token ids of a run (``outputs.jsonl``) and comparing two runs token for token.

Torch-free: ``kvframe outputs-diff RUN_A RUN_B`` and the invariance tests use it.
One JSON object per line, ``{"request_id": ..., "output_token_ids": [...]}``,
in the order requests finished; a model with a tokenizer (a GGUF file) adds
``"text"``, the decoded output without special tokens, and ``kvframe run`` adds
``"run_id"``, the run id of the ``metrics.json`` beside it (:func:`check_run_id`:
a file left from an earlier run is never read as this run's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

__all__ = [
    "OUTPUTS_FILE",
    "Difference",
    "check_run_id",
    "first_difference",
    "read_outputs",
    "write_outputs",
]

OUTPUTS_FILE = "outputs.jsonl"


def write_outputs(
    path: str | Path,
    outputs: Mapping[str, Sequence[int]],
    texts: Mapping[str, str] | None = None,
    *,
    run_id: str | None = None,
) -> None:
    """One record per request; with ``texts`` (a model with a tokenizer) a ``"text"`` field,
    with ``run_id`` a ``"run_id"`` field."""
    with Path(path).open("w") as f:
        for request_id, tokens in outputs.items():
            record: dict[str, object] = {"request_id": request_id, "output_token_ids": list(tokens)}
            if texts is not None and request_id in texts:
                record["text"] = texts[request_id]
            if run_id is not None:
                record["run_id"] = run_id
            f.write(json.dumps(record, ensure_ascii=False))
            f.write("\n")


def check_run_id(path: Path) -> None:
    """Refuse an ``outputs.jsonl`` that does not belong to the ``metrics.json`` beside it.

    Why: a run directory re-used by a run that writes no outputs (a simulated
    run) once kept the old torch run's ``outputs.jsonl``, and comparing it
    reported "identical" about a run that generated nothing. Files written
    before run ids existed (neither file has one) are let through.

    :raises ValueError: naming both files and both run ids.
    """
    metrics_file = path.parent / "metrics.json"
    if not metrics_file.is_file():
        return
    try:
        expected = (json.loads(metrics_file.read_text()).get("metadata") or {}).get("run_id")
    except (OSError, ValueError, AttributeError):
        return
    found: set[str | None] = set()
    with path.open() as f:
        for line in f:
            if line.strip():
                try:
                    found.add(json.loads(line).get("run_id"))
                except (ValueError, AttributeError):
                    continue
    if expected is None and found <= {None}:
        return
    if found != {expected}:
        shown = ", ".join(sorted(str(r) for r in found)) or "none"
        raise ValueError(
            f"{path} does not belong to the run in {metrics_file} (its run id is "
            f"{expected}, the outputs carry {shown}): it is left from another run; "
            "run again into an empty --out"
        )


def read_outputs(path: str | Path) -> dict[str, list[int]]:
    """Read ``outputs.jsonl`` (or the one inside a run directory).

    :raises ValueError: a line that is not an outputs record, naming file and line;
        outputs of another run than the ``metrics.json`` beside them (:func:`check_run_id`).
    """
    path = Path(path)
    if path.is_dir():
        path = path / OUTPUTS_FILE
    if not path.is_file():
        raise ValueError(
            f"{path}: no such file (outputs.jsonl is written by runs with --executor torch)"
        )
    check_run_id(path)
    outputs: dict[str, list[int]] = {}
    with path.open() as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                outputs[str(record["request_id"])] = [int(t) for t in record["output_token_ids"]]
            except (ValueError, KeyError, TypeError) as err:
                raise ValueError(f"{path}, line {number}: not an outputs record ({err})") from None
    return outputs


@attrs.frozen(slots=True)
class Difference:
    """The first place two runs disagree."""

    request_id: str
    token_index: int | None
    """Index of the first differing generated token; ``None``: the request is missing."""
    expected: int | None
    actual: int | None
    num_differing_requests: int

    def __str__(self) -> str:
        if self.token_index is None:
            where = "is missing from one run"
        else:
            where = (
                f"differs at generated token {self.token_index}: "
                f"{self.expected} in the reference, {self.actual} in the other run"
                if self.actual is not None and self.expected is not None
                else f"has a different length (first {self.token_index} tokens agree)"
            )
        return (
            f"request {self.request_id!r} {where} "
            f"({self.num_differing_requests} requests differ in all)"
        )


def first_difference(
    reference: Mapping[str, Sequence[int]], other: Mapping[str, Sequence[int]]
) -> Difference | None:
    """The first differing request (in ``reference``'s order, then ``other``'s), or ``None``."""
    first: Difference | None = None
    count = 0
    ids = list(reference) + [r for r in other if r not in reference]
    for request_id in ids:
        a, b = reference.get(request_id), other.get(request_id)
        if a is not None and b is not None and list(a) == list(b):
            continue
        count += 1
        if first is not None:
            continue
        if a is None or b is None:
            first = Difference(request_id, None, None, None, 0)
            continue
        index = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if index is None:
            index = min(len(a), len(b))
            first = Difference(request_id, index, None, None, 0)
        else:
            first = Difference(request_id, index, a[index], b[index], 0)
    if first is None:
        return None
    return attrs.evolve(first, num_differing_requests=count)
