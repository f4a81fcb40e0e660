"""Reader for the Mooncake (FAST'25) trace format.

One JSON object per line::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52,
     "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354]}

* ``timestamp``: arrival in **milliseconds** from the start of the trace
  (becomes ``arrival_time`` in seconds);
* ``input_length``: prompt tokens;
* ``output_length``: generated tokens (becomes ``max_tokens``: the trace says how
  many tokens the request produced, so the simulation generates exactly that
  many — there is no stop token in a trace);
* ``hash_ids``: one id per 512-token block of the prompt, the last one usually
  covering a partial block. Equal ids at equal positions mean a shared prefix.

The tokens are not in the trace. A :class:`~kvframe.workloads.spec.MooncakePrompt`
keeps the hash ids and expands them into deterministic token ids only when the
engine asks (see :mod:`kvframe.workloads.mooncake_tokens`).

Request ids are ``line-<N>`` (the 1-based line number), so they stay stable
under ``limit`` and ``skip_bad_lines`` and point back into the file. Fields
beyond the four above are ignored: the format is someone else's and later
releases may add fields.
"""

from __future__ import annotations

from typing import Any

from kvframe.workloads.errors import RecordChecker
from kvframe.workloads.spec import MOONCAKE_BLOCK_TOKENS, MooncakePrompt, RequestSpec

__all__ = ["MOONCAKE_FIELDS", "MooncakeParser", "looks_like_mooncake"]

MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def looks_like_mooncake(obj: dict[str, Any]) -> bool:
    """Whether a JSON object is (meant to be) a Mooncake record, for format detection."""
    return "hash_ids" in obj or "input_length" in obj or "timestamp" in obj


class MooncakeParser:
    """Turns one decoded Mooncake line into a :class:`RequestSpec`.

    Stateless apart from its settings; :func:`kvframe.workloads.load_workload`
    drives it line by line.

    :param path: the file name used in error messages.
    :param block_tokens: tokens per hash id (512 in the published traces).
    """

    format = "mooncake"

    def __init__(self, *, path: str | None = None, block_tokens: int = MOONCAKE_BLOCK_TOKENS):
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
        self.path = path
        self.block_tokens = block_tokens
        self.metadata: dict[str, Any] = {}

    def parse(self, obj: dict[str, Any], line: int) -> RequestSpec | None:
        check = RecordChecker(obj, path=self.path, line=line)
        timestamp_ms = check.number("timestamp")
        input_length = check.integer("input_length", minimum=1)
        output_length = check.integer("output_length", minimum=1)
        hash_ids = check.integer_list("hash_ids")
        covered = len(hash_ids) * self.block_tokens
        if covered < input_length:
            raise check.error(
                "hash_ids",
                f"{len(hash_ids)} hash ids cover at most {covered} tokens, fewer than "
                f"input_length {input_length} (one id per {self.block_tokens} tokens)",
            )
        # Expanded tokens are ``hash_id * block_tokens + position`` and must stay
        # 32-bit for the block hasher.
        limit = 2**31 // self.block_tokens
        if hash_ids and max(hash_ids) >= limit:
            raise check.error(
                "hash_ids", f"hash id {max(hash_ids)} is too large (ids must be < {limit})"
            )
        # Ids past the end of the prompt carry no tokens; drop them so that the
        # spec (and its equality) only holds what matters.
        needed = -(-input_length // self.block_tokens)
        return RequestSpec(
            request_id=f"line-{line}",
            prompt=MooncakePrompt(tuple(hash_ids[:needed]), input_length, self.block_tokens),
            max_tokens=output_length,
            arrival_time=timestamp_ms / 1000.0,
        )

    def finish(self, specs: list[RequestSpec]) -> list[RequestSpec]:
        """Nothing to reconcile across lines in this format."""
        return specs
