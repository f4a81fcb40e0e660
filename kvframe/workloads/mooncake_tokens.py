"""Deterministic token ids for Mooncake trace requests.

A Mooncake trace line gives a prompt only as ``hash_ids``: one id per
512-token block, equal ids meaning equal content. To replay it through a real
tokenizer-free engine, each id is expanded into ``block_tokens`` concrete token
ids such that

* equal ids give equal tokens (so shared prefixes hit the prefix cache), and
* unequal ids give unequal tokens at *every* position (so any sub-block of any
  size -- e.g. the 16-token blocks the engine hashes -- differs too, and no
  false prefix hit can happen).

The expansion is ``token = hash_id * block_tokens + position``: injective over
``(hash_id, position)``, hence both properties hold exactly, not just with high
probability. Ids of the public traces (up to ~183k) give tokens below 10**8,
well inside the 32-bit range the block hasher accepts. An engine with a small
real vocabulary must map these ids into it itself (and accepts rare false
matches when it does).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["expand_hash_ids"]


def expand_hash_ids(
    hash_ids: Sequence[int], input_length: int, block_tokens: int = 512
) -> list[int]:
    """The prompt token ids of a trace request.

    Args:
        hash_ids: the request's block ids, in prompt order.
        input_length: prompt length in tokens; the expansion is truncated to
            it (the last id usually covers a partial block).
        block_tokens: tokens covered by one id (512 in the Mooncake traces).

    Raises ``ValueError`` if ``input_length`` exceeds what the ids cover or
    an id is negative.
    """
    if block_tokens <= 0:
        raise ValueError(f"block_tokens must be positive, got {block_tokens}")
    if input_length < 0 or input_length > len(hash_ids) * block_tokens:
        raise ValueError(
            f"input_length {input_length} is not covered by {len(hash_ids)} hash ids "
            f"of {block_tokens} tokens"
        )
    num_ids = -(-input_length // block_tokens)
    tokens: list[int] = []
    extend = tokens.extend
    for hash_id in hash_ids[:num_ids]:
        if hash_id < 0:
            raise ValueError(f"hash ids must be non-negative, got {hash_id}")
        base = hash_id * block_tokens
        extend(range(base, base + block_tokens))
    del tokens[input_length:]
    return tokens
