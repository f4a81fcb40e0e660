"""The compiled core against the Python core: the same operations, the same everything.

A hypothesis state machine drives two :class:`KVCacheManager` s -- one on the
pure-Python block pool (the reference), one on the compiled pool
(:mod:`kvframe.core._block_pool_c`) -- with the same request life cycles:
admissions with prefix hits and chunked prefill, one-token decodes, frees
(tail first), evictions of given blocks, prefix-cache resets and delayed
caching. Requests take prefixes of a few shared "documents", so hits,
duplicates (a fully cached prompt recomputes its last block) and evictions of
cached blocks all happen. After every step it compares every result (block ids
returned, hits, ``None`` for a refused allocation, errors) and the whole state:
each block's ``ref_cnt`` and hash, the free queue in order (and walked
backwards on the compiled side), the hash index, the counters, the prefix-cache
statistics and every KV event. It runs for vLLM 0.19.1's free order and for
0.33.0's (``uncached_freed_first``), with prefix caching on and off.

Skipped when the compiled core is not built (``scripts/build-core``).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kvframe.core.compiled import compiled_core_available, compiled_core_problem
from kvframe.core.hashing import make_block_hasher
from kvframe.core.kv_cache_manager import KVCacheManager
from kvframe.domain.request import Request

pytestmark = pytest.mark.skipif(
    not compiled_core_available(),
    reason=f"{compiled_core_problem()}: scripts/build-core builds it",
)

BS = 2
NUM_BLOCKS = 14
MAX_MODEL_LEN = 64
HASHER = make_block_hasher(BS)
DOCUMENTS = [[d * 100 + i for i in range(10 * BS)] for d in range(3)]
MACHINE_SETTINGS = settings(
    max_examples=80, stateful_step_count=50, deadline=None, derandomize=True
)


def _ids(blocks: Any) -> list[int] | None:
    return None if blocks is None else [b.block_id for b in blocks]


def _outcome(call: Any) -> tuple[str, Any]:
    """A call's result, or its exception's type and message: both cores must agree."""
    try:
        return ("ok", call())
    except (ValueError, RuntimeError, AssertionError) as error:
        return (type(error).__name__, str(error))


class CoresMachine(RuleBasedStateMachine):
    def __init__(self, *, caching: bool = True, uncached_first: bool = False) -> None:
        super().__init__()
        self.managers = [
            KVCacheManager(
                NUM_BLOCKS,
                BS,
                MAX_MODEL_LEN,
                enable_caching=caching,
                enable_kv_cache_events=True,
                uncached_freed_first=uncached_first,
                core=core,
            )
            for core in ("python", "compiled")
        ]
        assert [m.core for m in self.managers] == ["python", "compiled"]
        # request id -> (python-side request, compiled-side request)
        self.requests: dict[str, tuple[Request, Request]] = {}
        self.next_id = 0

    def both(self, call: Any) -> Any:
        """Run ``call(manager, request_index)`` on both cores; their outcomes must match."""
        outcomes = [_outcome(lambda i=i: call(self.managers[i], i)) for i in (0, 1)]
        assert outcomes[0] == outcomes[1]
        return outcomes[0]

    def pick(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(sorted(self.requests)))

    @rule(
        document=st.integers(0, len(DOCUMENTS) - 1),
        length=st.integers(1, 10 * BS),
        diverge=st.booleans(),
        chunk=st.integers(1, 12),
    )
    def admit(self, document: int, length: int, diverge: bool, chunk: int) -> None:
        tokens = list(DOCUMENTS[document][:length])
        if diverge:
            tokens[-1] = 9_999  # same prefix, different last block
        rid = f"r{self.next_id}"
        self.next_id += 1
        pair = tuple(Request(rid, list(tokens), 8, block_hasher=HASHER) for _ in (0, 1))

        def call(manager: KVCacheManager, i: int) -> tuple[list[int] | None, int]:
            request = pair[i]
            hits, num_hit = manager.get_computed_blocks(request)
            num_new = min(chunk, request.num_tokens - num_hit)
            new = manager.allocate_slots(request, num_new, num_hit, hits)
            if new is not None:
                request.num_computed_tokens = num_hit + num_new
            return (_ids(hits), num_hit), _ids(new)

        status, result = self.both(call)
        if status == "ok" and result[1] is not None:
            self.requests[rid] = pair  # type: ignore[assignment]

    @precondition(lambda self: self.requests)
    @rule(data=st.data(), chunk=st.integers(1, 6))
    def step(self, data: st.DataObject, chunk: int) -> None:
        """One step of a running request: the next prefill chunk or one decode token."""
        rid = self.pick(data)
        pair = self.requests[rid]

        def call(manager: KVCacheManager, i: int) -> list[int] | None:
            request = pair[i]
            remaining = request.num_tokens - request.num_computed_tokens
            if remaining <= 0:  # decoding: the last step sampled a token
                if request.num_tokens + 1 >= MAX_MODEL_LEN:
                    return None
                request.append_output_token_ids([7 + request.num_tokens % 5])
                remaining = 1
            num_new = min(chunk, remaining)
            new = manager.allocate_slots(request, num_new)
            if new is not None:
                request.num_computed_tokens += num_new
            return _ids(new)

        self.both(call)

    @precondition(lambda self: self.requests)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        rid = self.pick(data)
        pair = self.requests.pop(rid)
        self.both(lambda manager, i: manager.free(pair[i]))

    @precondition(lambda self: self.requests)
    @rule(data=st.data())
    def cache_blocks(self, data: st.DataObject) -> None:
        rid = self.pick(data)
        pair = self.requests[rid]
        self.both(lambda manager, i: manager.cache_blocks(pair[i], pair[i].num_computed_tokens))

    @rule(block_ids=st.lists(st.integers(1, NUM_BLOCKS - 1), max_size=3, unique=True))
    def evict_blocks(self, block_ids: list[int]) -> None:
        self.both(lambda manager, i: manager.evict_blocks(block_ids))

    @rule()
    def reset(self) -> None:
        self.both(lambda manager, i: manager.reset_prefix_cache())

    @rule(data=st.data())
    def touch_and_release_a_cached_block(self, data: st.DataObject) -> None:
        """Take and drop a prefix hit directly on the pool (a hit revives a free cached block)."""
        hashes = sorted(self.managers[0].block_pool.cached_block_hash_to_block.hashes())
        if not hashes:
            return
        block_hash = data.draw(st.sampled_from(hashes))

        def call(manager: KVCacheManager, i: int) -> int:
            pool = manager.block_pool
            block = pool.get_cached_block(block_hash)
            pool.touch([block])
            pool.free_blocks([block])
            return block.block_id

        self.both(call)

    @invariant()
    def same_state(self) -> None:
        python, compiled = (self._state(m) for m in self.managers)
        assert python == compiled

    @invariant()
    def compiled_links_agree_both_ways(self) -> None:
        queue = self.managers[1].block_pool.free_block_queue
        forwards = [b.block_id for b in queue.get_all_free_blocks()]
        assert queue.get_all_free_block_ids_backwards() == forwards[::-1]
        assert len(queue) == len(forwards)

    @invariant()
    def same_events(self) -> None:
        python, compiled = (m.take_events() for m in self.managers)
        assert python == compiled

    def _state(self, manager: KVCacheManager) -> dict[str, Any]:
        pool = manager.block_pool
        index = pool.cached_block_hash_to_block
        return {
            "tables": {rid: manager.get_block_ids(rid) for rid in self.requests},
            "num_cached_block": dict(manager.num_cached_block),
            "decode_limits": dict(manager.decode_limits),
            "blocks": [(b.block_id, b.ref_cnt, b.block_hash, b.is_null) for b in pool.blocks],
            "free": [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
            "num_free": (pool.get_num_free_blocks(), manager.num_free_blocks, manager.usage),
            "index": {
                h: [b.block_id for b in index.get_all_blocks(h)] for h in sorted(index.hashes())
            },
            "num_cached": (pool.num_cached_blocks, len(index)),
            "stats": manager.prefix_cache_stats,
            "null": pool.null_block.block_id,
        }


@pytest.mark.parametrize("caching", [True, False], ids=["caching", "no-caching"])
@pytest.mark.parametrize("uncached_first", [False, True], ids=["vllm-0.19.1", "vllm-0.33.0"])
def test_compiled_core_matches_python_core(caching: bool, uncached_first: bool) -> None:
    run_state_machine_as_test(
        lambda: CoresMachine(caching=caching, uncached_first=uncached_first),
        settings=MACHINE_SETTINGS,
    )


def test_compiled_pool_refuses_an_eviction_policy() -> None:
    """The compiled pool is vLLM's free queue only: a policy is the Python pool's job."""
    from kvframe.core import _block_pool_c  # type: ignore[attr-defined]

    with pytest.raises(ValueError, match="PolicyOrderedBlockPool"):
        _block_pool_c.CompiledBlockPool(8, True, False, object())
