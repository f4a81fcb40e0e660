"""A workload as the prefix cache sees it: each request's chain of block ids.

Why a separate, compact form: every curve of :mod:`kvframe.analyze` replays
the same sequence of prefix lookups many times (once per policy and cache
size). Hashing is the expensive part (vLLM's chained block hashes, computed
by :func:`kvframe.core.hashing.make_block_hasher` exactly as the engine does,
the Mooncake chunk memo included), so it is done once here and each distinct
hash is replaced by a small int (interning). Two requests share a block id
exactly when the engine's GPU prefix cache would share the block.

Only prompt blocks are kept: in the "cache only" view (every request served
at its arrival, the view of the Mooncake paper's table) a trace's prompts are
given, so blocks of generated tokens are never looked up again. They would
occupy space in a real cache; ``kvframe sweep`` / ``kvframe run`` model that.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from kvframe.core.hashing import make_block_hasher
from kvframe.domain.request import Request
from kvframe.workloads.spec import MOONCAKE_BLOCK_TOKENS, MooncakePrompt, PromptTokens, RequestSpec

__all__ = ["DEFAULT_BLOCK_SIZE", "METRICS", "BlockTrace", "auto_block_size", "build_block_trace"]

METRICS = ("tokens", "blocks")
"""What a hit rate counts: see :func:`build_block_trace`."""

DEFAULT_BLOCK_SIZE = 16
"""vLLM's default block size, used for traces without blocks of their own."""


@attrs.frozen(slots=True)
class BlockTrace:
    """Requests in arrival order, each as its prompt's block ids.

    ``blocks[r]`` lists request ``r``'s full prompt blocks in prefix order
    (block 0 first). ``eligible[r]`` is how many of its leading blocks may
    hit: ``(num_tokens - 1) // block_size``, vLLM's last-token rule (the last
    prompt token is always computed, so a fully cached prompt whose length is
    a multiple of the block size recomputes its last block).
    """

    block_size: int
    blocks: tuple[array, ...]
    num_tokens: array
    """Each request's prompt tokens: the hit rate's denominator (with
    ``metric="blocks"``, its full blocks times the block size instead)."""
    eligible: array
    arrival: array
    """Arrival times in seconds."""
    groups: tuple[str | None, ...]
    """Each request's job (conversation) id, where the trace has one."""
    num_distinct: int
    name: str = "workload"
    partial_blocks: bool = False
    """Whether each chain ends with its prompt's partial block (see :func:`build_block_trace`)."""

    def __len__(self) -> int:
        return len(self.blocks)

    @property
    def total_tokens(self) -> int:
        return sum(self.num_tokens)

    @property
    def total_accesses(self) -> int:
        return sum(map(len, self.blocks))

    def subset(self, keep: Sequence[int]) -> BlockTrace:
        """The requests with the given indices (in order): a sampled trace."""
        return BlockTrace(
            block_size=self.block_size,
            blocks=tuple(self.blocks[i] for i in keep),
            num_tokens=array("q", (self.num_tokens[i] for i in keep)),
            eligible=array("q", (self.eligible[i] for i in keep)),
            arrival=array("d", (self.arrival[i] for i in keep)),
            groups=tuple(self.groups[i] for i in keep),
            num_distinct=len({b for i in keep for b in self.blocks[i]}),
            name=self.name,
            partial_blocks=self.partial_blocks,
        )


def auto_block_size(specs: Iterable[RequestSpec]) -> int:
    """The trace's own block size: a Mooncake trace's hash-id block (512 tokens), else 16.

    Why not always vLLM's 16: a Mooncake trace says nothing finer than its
    512-token chunks, its paper counts cache sizes in those chunks, and at 16
    tokens the conversation trace has 9 M block lookups instead of 276 k
    (hashing alone takes 17 s and 1.1 GB).
    """
    for spec in specs:
        prompt = spec.prompt
        if isinstance(prompt, MooncakePrompt):
            return prompt.block_tokens
        return DEFAULT_BLOCK_SIZE
    return MOONCAKE_BLOCK_TOKENS


def _check_trace_options(block_size: int, metric: str) -> None:
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")


def _interned_chain(spec: RequestSpec, hasher: Any, ids: dict[bytes, int]) -> array:
    """The prompt's block hashes as the engine computes them, each interned in ``ids``
    (a new hash gets the next id)."""
    request = Request(
        spec.request_id,
        PromptTokens(spec.prompt),
        1,
        cache_salt=spec.cache_salt,
        block_hasher=hasher,
    )
    setdefault = ids.setdefault
    return array("q", [setdefault(h, len(ids)) for h in request.block_hashes])


def build_block_trace(
    specs: Sequence[RequestSpec],
    block_size: int,
    *,
    name: str = "workload",
    metric: str = "tokens",
    partial_blocks: bool = False,
) -> BlockTrace:
    """Hash every prompt as the engine does and intern the hashes (ids in first-seen order).

    ``metric="tokens"`` (the default) is vLLM's hit rate: prompt tokens, the
    last-token rule. ``metric="blocks"`` counts full blocks instead, every
    block eligible (hit blocks / looked-up blocks): the definition other
    replays of the Mooncake traces use, kept so their numbers can be compared.

    ``partial_blocks=True`` appends to each chain whose prompt ends inside a
    block an id of its own (negative, never seen again): the partial block
    takes a slot until it is evicted, as in vLLM's default GPU pool, whose
    free queue orders it like any other block. By default only full blocks
    occupy the cache, as in kvframe's policy-ordered GPU pool (it reuses
    uncached free blocks first) and in offload tiers. The tests pin both
    against the engine's KV cache manager.
    """
    _check_trace_options(block_size, metric)
    by_blocks = metric == "blocks"
    hasher = make_block_hasher(block_size)
    ids: dict[bytes, int] = {}
    blocks: list[array] = []
    num_tokens, eligible, arrival = array("q"), array("q"), array("d")
    groups: list[str | None] = []
    partial_id = -1
    for spec in specs:
        chain = _interned_chain(spec, hasher, ids)
        if by_blocks:
            num_tokens.append(len(chain) * block_size)
            eligible.append(len(chain))
        else:
            n = len(spec.prompt)
            num_tokens.append(n)
            eligible.append(min(len(chain), (n - 1) // block_size))
        if partial_blocks and len(spec.prompt) % block_size:
            chain.append(partial_id)
            partial_id -= 1
        blocks.append(chain)
        arrival.append(spec.arrival_time)
        groups.append(spec.job_id)
    return BlockTrace(
        block_size=block_size,
        blocks=tuple(blocks),
        num_tokens=num_tokens,
        eligible=eligible,
        arrival=arrival,
        groups=tuple(groups),
        num_distinct=len(ids) - 1 - partial_id,
        name=name,
        partial_blocks=partial_blocks,
    )
