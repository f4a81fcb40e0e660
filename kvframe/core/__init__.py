"""The host's scheduling and KV-cache core (vLLM V1 semantics).

* :mod:`kvframe.core.hashing` -- chained block hashes;
* :mod:`kvframe.core.block_pool` -- block metadata, free queue, prefix-cache index;
* :mod:`kvframe.core.kv_cache_manager` -- block tables, prefix lookups, slot allocation.

See ``docs/core.md`` for how the pieces fit and where kvframe differs from vLLM.
"""

from __future__ import annotations

from kvframe.core.block_pool import (
    BlockPool,
    FreeKVCacheBlockQueue,
    KVCacheBlock,
    PolicyOrderedBlockPool,
)
from kvframe.core.hashing import hash_block_tokens, make_block_hasher, root_hash
from kvframe.core.kv_cache_manager import KVCacheManager, PrefixCacheStats

__all__ = [
    "BlockPool",
    "FreeKVCacheBlockQueue",
    "KVCacheBlock",
    "KVCacheManager",
    "PolicyOrderedBlockPool",
    "PrefixCacheStats",
    "hash_block_tokens",
    "make_block_hasher",
    "root_hash",
]
