"""A hypothesis state machine drives the block pool against a plain reference model.

The model keeps the same state with Python lists and dicts only (free blocks
in order, reference counts, hash -> block ids), so every operation's expected
outcome -- including *which* block ids an allocation returns -- is obvious. The
machine runs once for the default (vLLM LRU) pool and once for the
policy-ordered pool with a test LRU policy, whose model differs only in that
uncached free blocks are handed out before any cached one is evicted (and the
policy must track exactly the cached blocks released at least once).

After every step the real pool must satisfy the core invariants:

* every block is the null block, in >= 1 request table, or free;
* ``ref_cnt`` equals the number of tables holding the block;
* the free count equals the number of ``ref_cnt == 0`` non-null blocks;
* the hash index and the blocks' ``block_hash`` agree, no block is indexed
  under two hashes, and ``num_cached_blocks`` counts the indexed blocks.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kvframe.contract.records import AllBlocksCleared, BlockRemoved, BlockStored
from kvframe.core.block_pool import BlockPool, PolicyOrderedBlockPool
from kvframe.core.hashing import make_block_hasher
from kvframe.domain.request import Request

BS = 2
NUM_BLOCKS = 10
HASHER = make_block_hasher(BS)
# Three "documents"; requests take prefixes of them, so hashes are shared.
DOCUMENTS = [[d * 100 + i for i in range(8 * BS)] for d in range(3)]
MACHINE_SETTINGS = settings(
    max_examples=60, stateful_step_count=40, deadline=None, derandomize=True
)


class BlockPoolMachine(RuleBasedStateMachine):
    def __init__(self, policy_cls: type | None = None, uncached_first: bool = False) -> None:
        super().__init__()
        policy = policy_cls(NUM_BLOCKS) if policy_cls is not None else None
        self.policy_mode = policy is not None
        # vLLM 0.33's free rule (Fidelity switch D): unhashed freed blocks go first.
        self.uncached_first = uncached_first
        self.pool = BlockPool(
            NUM_BLOCKS,
            enable_kv_cache_events=True,
            eviction_policy=policy,
            uncached_freed_first=uncached_first,
        )
        self.requests: dict[str, Request] = {}
        self.tables: dict[str, list[int]] = {}
        self.num_cached: dict[str, int] = {}
        self.next_id = 0
        # Reference model.
        self.ref = [0] * NUM_BLOCKS
        self.hash_of: list[bytes | None] = [None] * NUM_BLOCKS
        self.index: dict[bytes, list[int]] = {}
        self.free_order = list(range(1, NUM_BLOCKS))  # policy mode: uncached free only
        self.cached_lru: list[int] = []  # policy mode: free cached, evict-first first
        self.num_stored = self.num_removed = 0

    # ------------------------------------------------------------ model ops

    def model_num_free(self) -> int:
        return len(self.free_order) + len(self.cached_lru)

    def model_drop_hash(self, block_id: int) -> None:
        block_hash = self.hash_of[block_id]
        assert block_hash is not None
        self.index[block_hash].remove(block_id)
        if not self.index[block_hash]:
            del self.index[block_hash]
        self.hash_of[block_id] = None
        self.num_removed += 1

    def model_allocate(self, n: int) -> list[int]:
        taken = self.free_order[:n]
        del self.free_order[:n]
        if len(taken) < n:  # policy mode only: evict cached blocks, LRU first
            rest = n - len(taken)
            taken += self.cached_lru[:rest]
            del self.cached_lru[:rest]
        for block_id in taken:
            if self.hash_of[block_id] is not None:
                self.model_drop_hash(block_id)
            self.ref[block_id] = 1
        return taken

    def model_release(self, block_id: int) -> None:
        if self.policy_mode and self.hash_of[block_id] is not None:
            self.cached_lru.append(block_id)
        else:
            self.free_order.append(block_id)

    def model_unfree(self, block_id: int) -> None:
        if block_id in self.free_order:
            self.free_order.remove(block_id)
        else:
            self.cached_lru.remove(block_id)

    def pick(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(sorted(self.tables)), label="request")

    # ----------------------------------------------------------------- rules

    @rule(
        document=st.integers(0, len(DOCUMENTS) - 1),
        length=st.integers(1, 8 * BS),
        diverge=st.booleans(),
    )
    def start_request(self, document: int, length: int, diverge: bool) -> None:
        """A new request looks up its prefix and takes the hits (touch)."""
        tokens = list(DOCUMENTS[document][:length])
        if diverge:
            tokens[-1] = 9999 + self.next_id
        rid = f"r{self.next_id}"
        self.next_id += 1
        request = Request(rid, tokens, 1, block_hasher=HASHER)
        self.pool.record_lookup(request.block_hashes)  # misses: an LRU ignores them
        hits = []
        for block_hash in request.block_hashes:
            block = self.pool.get_cached_block(block_hash)
            expected = self.index.get(block_hash)
            assert (block.block_id if block else None) == (expected[0] if expected else None)
            if block is None:
                break
            hits.append(block)
        assert self.pool.get_cached_prefix(request.block_hashes, len(tokens)) == hits
        self.pool.touch(hits)
        for block in hits:
            if self.ref[block.block_id] == 0:
                self.model_unfree(block.block_id)
            self.ref[block.block_id] += 1
        self.requests[rid] = request
        self.tables[rid] = [block.block_id for block in hits]
        self.num_cached[rid] = len(hits)

    @precondition(lambda self: self.tables)
    @rule(data=st.data(), n=st.integers(0, 4))
    def allocate(self, data: st.DataObject, n: int) -> None:
        rid = self.pick(data)
        if n > self.model_num_free():
            try:
                self.pool.get_new_blocks(n)
            except ValueError:
                return
            raise AssertionError("allocation beyond the free blocks succeeded")
        blocks = self.pool.get_new_blocks(n)
        assert [block.block_id for block in blocks] == self.model_allocate(n)
        self.tables[rid].extend(block.block_id for block in blocks)

    @precondition(lambda self: self.tables)
    @rule(data=st.data())
    def cache(self, data: st.DataObject) -> None:
        rid = self.pick(data)
        request = self.requests[rid]
        table = self.tables[rid]
        start = self.num_cached[rid]
        limit = min(len(table), len(request.block_hashes))
        if start >= limit:
            return
        end = data.draw(st.integers(start, limit), label="num_full_blocks")
        blocks = [self.pool.blocks[i] for i in table]
        self.pool.cache_full_blocks(request, blocks, start, end, BS)
        for i in range(start, end):
            block_hash = request.block_hashes[i]
            self.hash_of[table[i]] = block_hash
            self.index.setdefault(block_hash, []).append(table[i])
        self.num_stored += end - start
        self.num_cached[rid] = end

    @precondition(lambda self: self.tables)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        rid = self.pick(data)
        table = self.tables.pop(rid)
        del self.requests[rid], self.num_cached[rid]
        self.pool.free_blocks(reversed([self.pool.blocks[i] for i in table]))
        front: list[int] = []
        for block_id in reversed(table):
            self.ref[block_id] -= 1
            if self.ref[block_id] == 0:
                if self.uncached_first and self.hash_of[block_id] is None:
                    front.append(block_id)
                else:
                    self.model_release(block_id)
        self.free_order[:0] = front

    @rule()
    def reset(self) -> None:
        expected = all(self.ref[i] == 0 for i in range(1, NUM_BLOCKS))
        assert self.pool.reset_prefix_cache() is expected
        if expected:
            self.index.clear()
            self.hash_of = [None] * NUM_BLOCKS
            self.free_order += self.cached_lru
            self.cached_lru = []

    @rule(block_ids=st.lists(st.integers(1, NUM_BLOCKS - 1), max_size=3, unique=True))
    def evict_blocks(self, block_ids: list[int]) -> None:
        self.pool.evict_blocks(block_ids)
        for block_id in block_ids:
            if self.hash_of[block_id] is None:
                continue
            self.model_drop_hash(block_id)
            if self.policy_mode and self.ref[block_id] == 0:
                self.cached_lru.remove(block_id)
                self.free_order.append(block_id)

    # ------------------------------------------------------------ invariants

    @invariant()
    def every_block_is_accounted_for(self) -> None:
        pool = self.pool
        held = Counter(block_id for table in self.tables.values() for block_id in table)
        queue = pool.free_block_queue
        queued = [block.block_id for block in queue.get_all_free_blocks()]
        assert len(queued) == len(set(queued)) == queue.num_free_blocks
        backward = []
        link = queue.tail.prev_free_block
        while link is not queue.head:
            assert link is not None and link.next_free_block is not None
            assert link.next_free_block.prev_free_block is link
            backward.append(link.block_id)
            link = link.prev_free_block
        assert backward[::-1] == queued  # the links agree in both directions
        for block in pool.blocks:
            if block.block_id not in queued:
                assert block.prev_free_block is None and block.next_free_block is None
        assert 0 not in queued and 0 not in held
        null = pool.null_block
        assert null.is_null and null.block_hash is None
        assert null.prev_free_block is None and null.next_free_block is None
        evictable_cached = []
        for block in pool.blocks[1:]:
            assert block.ref_cnt == held[block.block_id]  # ref counts = table membership
            if block.ref_cnt == 0 and not (self.policy_mode and block.block_hash is not None):
                assert block.block_id in queued
            elif block.ref_cnt == 0:
                evictable_cached.append(block.block_id)
                assert block.block_id not in queued
            else:
                assert block.block_id not in queued
        num_zero = sum(1 for block in pool.blocks[1:] if block.ref_cnt == 0)
        assert pool.get_num_free_blocks() == num_zero == self.model_num_free()
        if isinstance(pool, PolicyOrderedBlockPool):
            assert pool.num_evictable_cached_blocks == len(evictable_cached)
        else:
            assert len(queued) == num_zero

    @invariant()
    def hash_index_agrees_with_blocks(self) -> None:
        pool = self.pool
        index = pool.cached_block_hash_to_block
        seen = []
        for block_hash in index.hashes():
            blocks = index.get_all_blocks(block_hash)
            assert blocks, "empty index entry"
            for block in blocks:
                assert block.block_hash == block_hash
                seen.append(block.block_id)
        assert len(seen) == len(set(seen)), "a block is indexed under two hashes"
        shared = sum(1 for h in index.hashes() if len(index.get_all_blocks(h)) > 1)
        assert index._num_shared == shared
        hashed = [block.block_id for block in pool.blocks if block.block_hash is not None]
        assert sorted(seen) == sorted(hashed)
        assert pool.num_cached_blocks == len(hashed)

    @invariant()
    def pool_matches_reference_model(self) -> None:
        pool = self.pool
        assert [block.ref_cnt for block in pool.blocks[1:]] == self.ref[1:]
        assert [block.block_hash for block in pool.blocks] == self.hash_of
        queued = [block.block_id for block in pool.free_block_queue.get_all_free_blocks()]
        assert queued == self.free_order
        assert {
            h: [b.block_id for b in pool.cached_block_hash_to_block.get_all_blocks(h)]
            for h in pool.cached_block_hash_to_block.hashes()
        } == self.index
        if isinstance(pool, PolicyOrderedBlockPool):
            policy = pool.eviction_policy
            # The policy holds exactly the idle cached content, keyed by hash,
            # in release order (an LRU's order).
            # A duplicate of a held content is keyed by (hash, block id).
            keys = list(policy.entries)  # type: ignore[attr-defined]
            assert [b.block_id for b in pool.evictable.values()] == self.cached_lru
            assert list(pool.evictable) == keys
            for key, block in pool.evictable.items():
                assert key in (block.block_hash, (block.block_hash, block.block_id))
            assert len({block.block_hash for block in pool.evictable.values()}) == sum(
                1 for key in keys if not isinstance(key, tuple)
            )
            assert all(block.ref_cnt == 0 for block in policy.entries.values())  # type: ignore[attr-defined]

    @invariant()
    def events_match_model(self) -> None:
        for event in self.pool.take_events():
            if isinstance(event, BlockStored):
                self.num_stored -= len(event.block_hashes)
            elif isinstance(event, BlockRemoved):
                self.num_removed -= len(event.block_hashes)
            else:
                assert isinstance(event, AllBlocksCleared)
        assert self.num_stored == self.num_removed == 0


def test_default_pool_state_machine() -> None:
    run_state_machine_as_test(BlockPoolMachine, settings=MACHINE_SETTINGS)


def test_policy_ordered_pool_state_machine(lru_policy_cls: type) -> None:
    run_state_machine_as_test(lambda: BlockPoolMachine(lru_policy_cls), settings=MACHINE_SETTINGS)


def test_default_pool_state_machine_uncached_freed_first() -> None:
    run_state_machine_as_test(
        lambda: BlockPoolMachine(uncached_first=True), settings=MACHINE_SETTINGS
    )


def test_policy_ordered_pool_state_machine_uncached_freed_first(lru_policy_cls: type) -> None:
    run_state_machine_as_test(
        lambda: BlockPoolMachine(lru_policy_cls, uncached_first=True), settings=MACHINE_SETTINGS
    )
