"""The generic offload ledger (vLLM's CPUOffloadingManager) and the reuse-filter wrapper.

Host tests: the eviction policy is a small test-only LRU, so they do not depend
on installed plugins. The stateful tests at the end also run the installed
``lru`` and ``arc`` plugins when they are there.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence, Set

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from kvframe import EvictionPolicy, ReuseFilter
from kvframe.contract.offload import PrepareStoreResult
from kvframe.contract.records import BlockRemoved, BlockStored
from kvframe.contract.views import EvictableBlock
from kvframe.offload.slots.manager import (
    FilteredOffloadManager,
    OffloadStateError,
    SlotOffloadManager,
)


class TestLRU(EvictionPolicy):
    """The simplest LRU that keeps the contract; front = least recent."""

    __test__ = False
    name = "test-lru"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.entries: OrderedDict[Hashable, EvictableBlock] = OrderedDict()

    def get(self, key: Hashable) -> EvictableBlock | None:
        return self.entries.get(key)

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        self.entries[key] = block

    def remove(self, key: Hashable) -> None:
        del self.entries[key]

    def touch(self, keys: Iterable[Hashable]) -> None:
        for key in reversed(list(keys)):
            if key in self.entries:
                self.entries.move_to_end(key)

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        victims = [(k, b) for k, b in self.entries.items() if b.ref_cnt == 0 and k not in protected]
        if len(victims) < n:
            return None
        for key, _ in victims[:n]:
            del self.entries[key]
        return victims[:n]


def h(*ids: int) -> list[bytes]:
    return [bytes([i]) for i in ids]


def manager(num_blocks: int = 4, **kwargs) -> SlotOffloadManager:
    return SlotOffloadManager(TestLRU(num_blocks), num_blocks, block_size=32, **kwargs)


def stored(m: SlotOffloadManager, *ids: int) -> PrepareStoreResult:
    result = m.prepare_store(h(*ids))
    assert result is not None
    m.complete_store(result.block_hashes_to_store)
    return result


# -- lookup ---------------------------------------------------------------------


def test_lookup_counts_the_leading_run_of_ready_blocks():
    m = manager()
    stored(m, 1, 2, 4)
    assert m.lookup(h(1, 2, 3, 4)) == 2
    assert m.lookup(h(4, 1)) == 2
    assert m.lookup(h(3, 1)) == 0
    m.prepare_store(h(3))  # being written: not findable yet
    assert m.lookup(h(1, 2, 3, 4)) == 2
    assert m.lookup(iter(h(1, 2))) == 2


# -- prepare_store / complete_store ----------------------------------------------


def test_prepare_store_skips_stored_hashes_and_hands_out_fresh_slots_in_order():
    m = manager()
    first = m.prepare_store(h(1, 2))
    assert first == PrepareStoreResult(tuple(h(1, 2)), (0, 1), ())
    # 2 is being written, 1 will be ready: neither is stored again.
    m.complete_store(h(1))
    assert m.prepare_store(h(1, 2, 3)) == PrepareStoreResult(tuple(h(3)), (2,), ())
    assert m.prepare_store(h(1, 2, 3)) == PrepareStoreResult((), (), ())
    assert m.num_free_blocks == 1


def test_prepare_store_evicts_through_the_policy_and_reuses_freed_slots_last_in_first_out():
    m = manager(4)
    stored(m, 1, 2, 3, 4)
    m.take_events()
    result = m.prepare_store(h(5, 6))
    # LRU victims 1 (slot 0) then 2 (slot 1); the free list is popped from its end.
    assert result == PrepareStoreResult(tuple(h(5, 6)), (1, 0), tuple(h(1, 2)))
    assert m.take_events() == [BlockRemoved(tuple(h(1, 2)), medium="CPU")]


def test_the_batch_s_own_stored_hashes_are_protected_from_its_eviction():
    m = manager(2)
    stored(m, 1, 2)
    result = m.prepare_store(h(1, 3))  # 1 is the LRU block, but it is in the batch
    assert result is not None and result.evicted_block_hashes == tuple(h(2))
    assert m.lookup(h(1)) == 1


def test_prepare_store_fails_atomically_when_too_little_is_evictable():
    m = manager(3)
    stored(m, 1, 2)
    m.prepare_store(h(3))  # being written: not evictable
    m.prepare_load(h(1))  # being read: not evictable
    m.take_events()
    assert m.prepare_store(h(4, 5)) is None
    assert m.take_events() == []
    assert m.lookup(h(1, 2)) == 2 and m.num_free_blocks == 0
    assert m.prepare_store(h(4)) == PrepareStoreResult(tuple(h(4)), (1,), tuple(h(2)))


def test_a_store_with_more_new_blocks_than_free_or_idle_slots_is_refused_unasked():
    """The policy would have to refuse (it may evict idle blocks only), so it is not asked."""
    m = manager(3)
    stored(m, 1, 2)
    m.prepare_store(h(3))
    m.prepare_load(h(1))
    asked: list[int] = []
    evict = m.policy.evict
    m.policy.evict = lambda n, protected: asked.append(n) or evict(n, protected)
    assert m.prepare_store(h(4, 5)) is None  # 2 new, 0 free + 1 idle
    assert asked == [] and m.refused_new_blocks == 2
    assert m.prepare_store(h(4)) is not None  # 1 new, 1 idle: the policy chooses
    assert asked == [1] and m.refused_new_blocks == 0


def test_a_batch_larger_than_the_tier_cannot_be_stored():
    m = manager(2)
    assert m.prepare_store(h(1, 2, 3)) is None
    assert m.num_free_blocks == 2


def test_complete_store_makes_blocks_ready_and_reports_them_once():
    m = manager()
    m.prepare_store(h(1, 2))
    m.complete_store(h(1, 2, 9))  # unknown hashes are ignored
    m.complete_store(h(1))  # already ready: ignored, no second event
    assert m.take_events() == [BlockStored(tuple(h(1, 2)), None, 32, medium="CPU")]
    assert m.take_events() == []


def test_a_failed_store_frees_its_slots_without_an_event():
    m = manager(2)
    stored(m, 1)
    m.take_events()
    m.prepare_store(h(2))
    m.complete_store(h(1, 2), success=False)  # 1 is ready: untouched
    assert m.take_events() == []
    assert m.lookup(h(1)) == 1 and m.lookup(h(2)) == 0
    assert m.num_free_blocks == 1
    assert m.prepare_store(h(3)).slot_ids == (1,)


def test_a_repeated_hash_in_one_batch_is_stored_once():
    m = manager()
    assert m.prepare_store(h(1, 1, 2)) == PrepareStoreResult(tuple(h(1, 2)), (0, 1), ())
    assert m.num_free_blocks == 2


def test_events_can_be_disabled():
    m = manager(1, enable_events=False)
    stored(m, 1)
    stored(m, 2)
    assert m.take_events() == []


def test_medium_and_block_size_are_reported():
    m = SlotOffloadManager(TestLRU(1), 1, block_size=64, medium="DISK")
    stored(m, 1)
    assert m.medium == "DISK" and m.block_size == 64
    assert m.take_events() == [BlockStored(tuple(h(1)), None, 64, medium="DISK")]


# -- loads ----------------------------------------------------------------------


def test_prepare_load_pins_blocks_until_complete_load():
    m = manager(2)
    stored(m, 1, 2)
    assert m.prepare_load(h(2, 1)) == (1, 0)
    assert m.prepare_load(h(1)) == (0,)
    assert m.prepare_store(h(3)) is None  # everything pinned
    m.complete_load(h(1))
    assert m.prepare_store(h(3)) is None  # 1 still has one pin, 2 has its own
    m.complete_load(h(1))
    assert m.prepare_store(h(3)).evicted_block_hashes == tuple(h(1))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("load absent", "cannot load block b'\\x07': not in the tier"),
        ("load storing", "cannot load block b'\\x02': still being stored"),
        ("unpin idle", "cannot complete load of b'\\x01': it is not being loaded"),
        ("unpin absent", "cannot complete load of b'\\x07': not in the tier"),
    ],
)
def test_lifecycle_violations_raise_before_changing_anything(call, message):
    m = manager()
    stored(m, 1)
    m.prepare_store(h(2))
    with pytest.raises(OffloadStateError) as err:
        if call == "load absent":
            m.prepare_load(h(1, 7))
        elif call == "load storing":
            m.prepare_load(h(1, 2))
        elif call == "unpin idle":
            m.complete_load(h(1))
        else:
            m.prepare_load(h(1))
            m.complete_load(h(1, 7))
    assert str(err.value) == message
    # Nothing was pinned or unpinned on the way.
    expected = 1 if call == "unpin absent" else 0
    assert m.policy.get(h(1)[0]).ref_cnt == expected


# -- FilteredOffloadManager -----------------------------------------------------


class EvenOnly(ReuseFilter):
    """Test filter: remembers lookups, stores only even hashes."""

    name = "even"

    def __init__(self) -> None:
        self.seen: list[list[bytes]] = []

    def on_lookup(self, block_hashes: Sequence[bytes]) -> None:
        self.seen.append(list(block_hashes))

    def filter_store(self, block_hashes: Sequence[bytes]) -> list[bytes]:
        return [x for x in block_hashes if x[0] % 2 == 0]


def test_the_filter_sees_every_looked_up_hash_and_gates_stores():
    backing = manager(2)
    f = EvenOnly()
    m = FilteredOffloadManager(backing, f)
    assert m.lookup(iter(h(1, 2, 3))) == 0
    assert f.seen == [h(1, 2, 3)]  # all of them, not only the leading run
    assert m.prepare_store(h(1, 2)) == PrepareStoreResult(tuple(h(2)), (0,), ())
    m.complete_store(h(2))
    assert m.lookup(h(2)) == 1 and m.medium == "CPU" and m.block_size == 32
    assert m.prepare_load(h(2)) == (0,)
    m.complete_load(h(2))
    m.touch(h(2))
    assert m.take_events() == [BlockStored(tuple(h(2)), None, 32, medium="CPU")]


def test_only_hashes_that_pass_the_filter_are_protected():
    # As in vLLM: the backing manager sees the filtered batch only, so a stored
    # block of the same batch that the filter rejects can be evicted by it.
    backing = manager(2)
    stored(backing, 1, 2)
    m = FilteredOffloadManager(backing, EvenOnly())
    result = m.prepare_store(h(1, 4))
    assert result is not None and result.evicted_block_hashes == tuple(h(1))


# -- stateful: the ledger against a plain reference model ------------------------

KEYS = st.integers(0, 9)


class LedgerModel(RuleBasedStateMachine):
    """A plain model of the ledger: per hash its state, pins and slot, plus LRU order.

    With ``exact`` the model predicts the LRU victims and slots exactly; without,
    it checks only the contract (victims ready, idle, outside the batch) and
    adopts the policy's choice, so any policy can be plugged in.
    """

    policy_factory = TestLRU
    exact = True

    @initialize(num_blocks=st.integers(1, 5))
    def start(self, num_blocks):
        self.n = num_blocks
        self.m = SlotOffloadManager(self.policy_factory(num_blocks), num_blocks, block_size=16)
        self.state: dict[bytes, list] = {}  # hash -> [ready, pins, slot]
        self.order: list[bytes] = []  # LRU order, front = least recent
        self.fresh = 0
        self.free: list[int] = []
        self.events: list = []  # pending: not taken yet
        self.taken: list = []

    def ready(self, x: bytes) -> bool:
        return x in self.state and self.state[x][0]

    @rule(ids=st.lists(KEYS, max_size=6))
    def lookup(self, ids):
        hashes = h(*ids)
        expected = 0
        for x in hashes:
            if not self.ready(x):
                break
            expected += 1
        assert self.m.lookup(hashes) == expected

    @rule(ids=st.lists(KEYS, max_size=6))
    def touch(self, ids):
        self.m.touch(h(*ids))
        for x in reversed(h(*ids)):
            if x in self.order:
                self.order.remove(x)
                self.order.append(x)

    @rule(ids=st.lists(KEYS, min_size=1, max_size=3, unique=True))
    def prepare_store(self, ids):
        batch = h(*ids)
        new = [x for x in batch if x not in self.state]
        need = len(new) - (len(self.free) + self.n - self.fresh)
        candidates = [
            x for x in self.order if self.ready(x) and self.state[x][1] == 0 and x not in batch
        ]
        result = self.m.prepare_store(batch)
        if not new:
            assert result == PrepareStoreResult((), (), ())
            return
        if result is None:
            event("prepare_store refused")
            if self.exact:
                assert need > len(candidates)
            else:
                assert need > 0  # a policy may refuse only when it must evict
            return
        assert result.block_hashes_to_store == tuple(new)
        evicted = list(result.evicted_block_hashes)
        assert len(evicted) == max(need, 0)
        if self.exact:
            assert evicted == candidates[: max(need, 0)]
        assert set(evicted) <= set(candidates)  # ready, idle, outside the batch
        if evicted:
            event("prepare_store evicted")
        for x in evicted:
            self.free.append(self.state.pop(x)[2])
            self.order.remove(x)
        if evicted:
            self.events.append(BlockRemoved(tuple(evicted), medium="CPU"))
        num_fresh = min(len(new), self.n - self.fresh)
        slots = list(range(self.fresh, self.fresh + num_fresh))
        self.fresh += num_fresh
        slots += [self.free.pop() for _ in range(len(new) - num_fresh)]
        assert result.slot_ids == tuple(slots)
        for x, slot in zip(new, slots, strict=True):
            self.state[x] = [False, 0, slot]
            self.order.append(x)

    @rule(data=st.data(), success=st.booleans())
    @precondition(lambda self: self.state)
    def complete_store(self, data, success):
        hashes = data.draw(st.lists(st.sampled_from(sorted(self.state)), max_size=4, unique=True))
        hashes += data.draw(st.lists(st.sampled_from(h(10, 11)), max_size=1))  # unknown
        self.complete_store_of(hashes, success)

    def complete_store_of(self, hashes, success):
        self.m.complete_store(hashes, success)
        writing = [x for x in hashes if x in self.state and not self.state[x][0]]
        if success:
            for x in writing:
                self.state[x][0] = True
            if writing:
                self.events.append(BlockStored(tuple(writing), None, 16, medium="CPU"))
        else:
            for x in writing:
                self.free.append(self.state.pop(x)[2])
                self.order.remove(x)

    @rule(data=st.data())
    @precondition(lambda self: any(s[0] for s in self.state.values()))
    def prepare_load(self, data):
        ready = sorted(x for x in self.state if self.ready(x))
        hashes = data.draw(st.lists(st.sampled_from(ready), min_size=1, max_size=3, unique=True))
        assert self.m.prepare_load(hashes) == tuple(self.state[x][2] for x in hashes)
        for x in hashes:
            self.state[x][1] += 1

    @rule(data=st.data())
    @precondition(lambda self: any(s[1] for s in self.state.values()))
    def complete_load(self, data):
        pinned = sorted(x for x in self.state if self.state[x][1] > 0)
        hashes = data.draw(st.lists(st.sampled_from(pinned), min_size=1, unique=True))
        self.m.complete_load(hashes)
        for x in hashes:
            self.state[x][1] -= 1

    @rule()
    @precondition(lambda self: any(not s[0] for s in self.state.values()))
    def complete_every_store(self):
        self.complete_store_of(sorted(x for x in self.state if not self.state[x][0]), True)

    @rule()
    def take_events(self):
        taken = self.m.take_events()
        assert taken == self.events
        self.taken += taken
        self.events = []

    @invariant()
    def ledger_matches_the_model(self):
        m = self.m
        assert m.num_free_blocks == len(self.free) + self.n - self.fresh
        slots = [s[2] for s in self.state.values()]
        assert len(set(slots)) == len(slots) and len(slots) + m.num_free_blocks == self.n
        assert not set(slots) & set(self.free)
        for i in range(12):
            x = bytes([i])
            block = m.policy.get(x)
            if x not in self.state:
                assert block is None
                continue
            ready, pins, slot = self.state[x]
            assert block.slot_id == slot
            assert block.ref_cnt == (pins if ready else -1)
        # The events, taken and pending, replay to exactly the set of ready blocks.
        visible: set[bytes] = set()
        for record in [*self.taken, *self.events]:
            if isinstance(record, BlockStored):
                assert not visible & set(record.block_hashes)
                visible |= set(record.block_hashes)
            else:
                assert set(record.block_hashes) <= visible
                visible -= set(record.block_hashes)
        assert visible == {x for x in self.state if self.ready(x)}


SETTINGS = settings(max_examples=100, stateful_step_count=30, deadline=None, derandomize=True)
PLUGIN_SETTINGS = settings(SETTINGS, max_examples=40)

TestLedgerAgainstModel = LedgerModel.TestCase
TestLedgerAgainstModel.settings = SETTINGS


def _plugin_machine(module: str, attr: str, **options) -> type[RuleBasedStateMachine]:
    mod = pytest.importorskip(module)
    cls = getattr(mod, attr)

    class PluginModel(LedgerModel):
        policy_factory = staticmethod(lambda capacity: cls(capacity, **options))
        exact = module == "kvframe_lru"

    return PluginModel


@pytest.mark.parametrize(
    ("module", "attr", "options"),
    [
        ("kvframe_lru", "LRUPolicy", {}),
        ("kvframe_arc", "ARCPolicy", {}),
        ("kvframe_arc", "ARCPolicy", {"variant": "paper"}),
    ],
    ids=["lru", "arc", "arc-paper"],
)
def test_ledger_with_installed_policies_keeps_the_model(module, attr, options):
    from hypothesis.stateful import run_state_machine_as_test

    machine = _plugin_machine(module, attr, **options)
    run_state_machine_as_test(machine, settings=PLUGIN_SETTINGS)
