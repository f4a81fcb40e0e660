"""vLLM 0.19.1's block hashes inside kvframe's core, and its KV-cache events out of it.

KV-aware routers read vLLM's ``KVEventBatch`` stream (``--kv-events-config``):
``BlockStored`` with vLLM's block hashes, the parent hash, the blocks' token
ids and extra keys; ``BlockRemoved``; ``AllBlocksCleared``. kvframe's block
pool emits the same three events at the same points (it reproduces vLLM's
caching and eviction order), so two things are left to the bridge:

* **the hashes**: :class:`VllmBlockHashes` is the block hasher of every
  kvframe request the bridge creates, and it answers with the hashes vLLM
  already computed for the same request (``Request.block_hashes``, vLLM's
  hash function, cache salt included). kvframe's prefix cache then keys on
  vLLM's hashes -- equal hashes still mean equal prefixes -- and its events
  carry them;
* **what kvframe's events leave out**: the token ids and extra keys of each
  stored block (and under vLLM 0.33 the storing request's ``session_id``),
  which :class:`KvEventLedger` notes when a block is hashed and adds when it
  translates kvframe's events into vLLM's, with the fields the release adds to
  every event (0.33: the KV-cache group and its spec kind,
  :func:`kvframe_vllm.compat.event_fields`). An entry lives while a live
  request holds the hash or a cached block carries it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash

from kvframe.contract.records import AllBlocksCleared as KvAllBlocksCleared
from kvframe.contract.records import BlockStored as KvBlockStored
from kvframe_vllm.compat import event_session_id

if TYPE_CHECKING:
    from vllm.v1.request import Request

    from kvframe.domain.request import Request as KvRequest

__all__ = ["KvEventLedger", "VllmBlockHashes"]


class VllmBlockHashes:
    """kvframe's block-hasher contract, answered with vLLM's hashes of the same request.

    vLLM hashes a request's full blocks as its tokens are appended; the bridge
    appends each step's token to vLLM's request before kvframe's, so the hash
    kvframe asks for is always there.
    """

    __slots__ = ("block_size", "ledger", "request")

    def __init__(self, block_size: int, request: Request, ledger: KvEventLedger | None) -> None:
        self.block_size = block_size
        """Read by kvframe's request: it asks again only when a block fills."""
        self.request = request
        self.ledger = ledger

    def __call__(self, kv_request: KvRequest) -> list[Any]:
        start = len(kv_request.block_hashes)
        end = kv_request.num_tokens // self.block_size
        hashes = self.request.block_hashes[start:end]
        if len(hashes) != end - start:
            raise RuntimeError(
                f"request {kv_request.request_id!r}: vLLM has hashed "
                f"{len(self.request.block_hashes)} blocks, kvframe needs {end}"
            )
        if self.ledger is not None:
            self.ledger.hashed(self.request, start, hashes)
        return list(hashes)


class KvEventLedger:
    """The token ids and extra keys of hashed blocks, for vLLM's ``BlockStored``."""

    __slots__ = ("_block_pool", "_info", "_removed", "_sessions", "_stored", "block_size")

    def __init__(
        self,
        block_size: int,
        block_pool: Any,
        fields: tuple[dict[str, Any], dict[str, Any]] = ({}, {}),
    ) -> None:
        """``fields``: the keywords the release adds to every ``BlockStored`` and
        ``BlockRemoved`` (:func:`kvframe_vllm.compat.event_fields`)."""
        self.block_size = block_size
        self._block_pool = block_pool
        self._info: dict[Any, list[Any]] = {}
        """hash -> [token ids, extra keys, live requests holding it, session id]."""
        self._stored, self._removed = fields
        self._sessions = "session_id" in self._stored
        """The release's ``BlockStored`` names the storing request's session (0.33)."""

    def __len__(self) -> int:
        return len(self._info)

    def hashed(self, request: Request, start: int, hashes: Sequence[Any]) -> None:
        """``request``'s blocks ``start..`` got ``hashes`` (a live request now holds each)."""
        info = self._info
        size = self.block_size
        tokens = request.all_token_ids
        salt = request.cache_salt
        for index, block_hash in enumerate(hashes, start):
            entry = info.get(block_hash)
            if entry is None:
                # vLLM's generate_block_hash_extra_keys for a text request: the
                # cache salt on the first block (LoRA, multimodal and prompt
                # embeddings are refused by the bridge).
                extra = (salt,) if index == 0 and salt else None
                info[block_hash] = [
                    tokens[index * size : (index + 1) * size],
                    extra,
                    1,
                    event_session_id(request),
                ]
            else:
                entry[2] += 1

    def released(self, kv_request: KvRequest) -> None:
        """A request finished: it no longer holds its hashes."""
        info = self._info
        for block_hash in kv_request.block_hashes:
            entry = info.get(block_hash)
            if entry is not None:
                entry[2] -= 1
                self._forget_if_unused(block_hash, entry)

    def _forget_if_unused(self, block_hash: Any, entry: list[Any]) -> None:
        if entry[2] <= 0 and self._block_pool.get_cached_block(block_hash) is None:
            del self._info[block_hash]

    def translate(self, events: Iterable[Any]) -> list[Any]:
        """kvframe's KV events as vLLM's, in order."""
        info = self._info
        out: list[Any] = []
        dropped: list[Any] = []
        stored, removed = self._stored, self._removed
        for event in events:
            if isinstance(event, KvBlockStored):
                entries = [info[h] for h in event.block_hashes]
                parent = event.parent_block_hash
                if self._sessions:
                    stored = {**self._stored, "session_id": entries[0][3]}
                out.append(
                    BlockStored(
                        block_hashes=[maybe_convert_block_hash(h) for h in event.block_hashes],
                        parent_block_hash=None
                        if parent is None
                        else maybe_convert_block_hash(parent),
                        token_ids=[t for entry in entries for t in entry[0]],
                        block_size=event.block_size,
                        lora_id=None,
                        medium=event.medium,
                        lora_name=None,
                        extra_keys=[entry[1] for entry in entries],
                        **stored,
                    )
                )
            elif isinstance(event, KvAllBlocksCleared):
                out.append(AllBlocksCleared())
                dropped.extend(info)
            else:  # BlockRemoved
                out.append(
                    BlockRemoved(
                        block_hashes=[maybe_convert_block_hash(h) for h in event.block_hashes],
                        medium=event.medium,
                        **removed,
                    )
                )
                dropped.extend(event.block_hashes)
        # Forget only after the whole batch: a hash removed early in a step can
        # be stored again later in it.
        for block_hash in dropped:
            entry = info.get(block_hash)
            if entry is not None:
                self._forget_if_unused(block_hash, entry)
        return out
