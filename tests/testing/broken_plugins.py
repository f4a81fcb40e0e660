"""Plugins that break their contract on purpose, and good ones to compare with.

The conformance suite is run against each of these (see
``test_suite_catches_broken_plugins.py``) to prove that it catches what it
claims to catch, with a message that says what broke. Each broken class changes
one thing of a correct implementation, so the failure has one cause.

Not a test module (no ``test_`` prefix): the tests put this directory on
``sys.path`` and name the classes as ``broken_plugins:Class``.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections import Counter, OrderedDict, deque
from collections.abc import Collection, Hashable, Iterable, Iterator, Sequence, Set
from typing import Any

import kvframe
from kvframe.contract.views import EvictableBlock
from kvframe.domain.queues import RequestQueue
from kvframe.domain.request import Request
from kvframe.offload.slots.manager import SlotOffloadManager

Victim = tuple[Hashable, EvictableBlock]

# ==========================================================================
# Eviction policies
# ==========================================================================


class GoodLRU(kvframe.EvictionPolicy):
    """A plain LRU that honours the whole contract."""

    name = "good-lru"
    description = "Test-only LRU that passes the suite."

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.blocks: OrderedDict[Hashable, EvictableBlock] = OrderedDict()

    def __len__(self) -> int:
        return len(self.blocks)

    def get(self, key: Hashable) -> EvictableBlock | None:
        return self.blocks.get(key)

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        self.blocks[key] = block

    def remove(self, key: Hashable) -> None:
        del self.blocks[key]

    def touch(self, keys: Iterable[Hashable]) -> None:
        for key in reversed(list(keys)):
            if key in self.blocks:
                self.blocks.move_to_end(key)

    def candidates(self, protected: Set[Hashable]) -> Iterator[Victim]:
        for key, block in self.blocks.items():
            if block.ref_cnt == 0 and key not in protected:
                yield key, block

    def evict(self, n: int, protected: Set[Hashable]) -> list[Victim] | None:
        chosen = []
        for victim in self.candidates(protected):
            if len(chosen) == n:
                break
            chosen.append(victim)
        if len(chosen) < n:
            return None
        for key, _ in chosen:
            del self.blocks[key]
        return chosen


class EvictsProtected(GoodLRU):
    """Forgets to skip the protected keys."""

    name = "evicts-protected"

    def candidates(self, protected: Set[Hashable]) -> Iterator[Victim]:
        return super().candidates(frozenset())


class IgnoresRefCnt(GoodLRU):
    """Evicts blocks that are being written or loaded."""

    name = "ignores-ref-cnt"

    def candidates(self, protected: Set[Hashable]) -> Iterator[Victim]:
        for key, block in self.blocks.items():
            if key not in protected:
                yield key, block


class ReturnsOneShort(GoodLRU):
    """Returns n - 1 victims when asked for two or more (an off-by-one)."""

    name = "returns-one-short"

    def evict(self, n: int, protected: Set[Hashable]) -> list[Victim] | None:
        victims = super().evict(n, protected)
        if victims and n >= 2:
            key, block = victims.pop()
            self.blocks[key] = block
        return victims


class NotAtomic(GoodLRU):
    """Removes victims as it finds them; when there are too few it returns None anyway."""

    name = "not-atomic"

    def evict(self, n: int, protected: Set[Hashable]) -> list[Victim] | None:
        chosen = []
        for key, block in list(self.candidates(protected))[:n]:
            del self.blocks[key]
            chosen.append((key, block))
        return chosen if len(chosen) == n else None


_rotation = itertools.count()


class Nondeterministic(GoodLRU):
    """Starts its search for victims at a different place each time (a process-wide counter)."""

    name = "nondeterministic"

    def evict(self, n: int, protected: Set[Hashable]) -> list[Victim] | None:
        pool = list(self.candidates(protected))
        if len(pool) < n:
            return None
        if not pool:  # evict(0) of an empty policy: [] like any correct one
            return []
        start = next(_rotation) % len(pool)
        chosen = (pool[start:] + pool[:start])[:n]
        for key, _ in chosen:
            del self.blocks[key]
        return chosen


class LeakyLFU(GoodLRU):
    """Counts uses of every key it ever saw, and never forgets one."""

    name = "leaky-lfu"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.uses: Counter[Hashable] = Counter()

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        super().insert(key, block)
        self.uses[key] += 1


class TakesKwargs(GoodLRU):
    """Accepts any option, so a typo goes unnoticed."""

    name = "takes-kwargs"

    def __init__(self, capacity: int, **options: Any) -> None:
        super().__init__(capacity)
        self.extra = options


class UntypedOption(GoodLRU):
    """An option without a type hint: config text cannot be converted on purpose."""

    name = "untyped-option"

    def __init__(self, capacity: int, *, decay=0.5) -> None:  # type: ignore[no-untyped-def]
        super().__init__(capacity)
        self.decay = decay


# ==========================================================================
# Scheduling policies
# ==========================================================================


class FIFO(deque):  # type: ignore[type-arg]
    """A FIFO request queue on a deque."""

    def add_request(self, request: Request) -> None:
        self.append(request)

    def pop_request(self) -> Request:
        return self.popleft()

    def peek_request(self) -> Request:
        return self[0]

    def prepend_request(self, request: Request) -> None:
        self.appendleft(request)

    def prepend_requests(self, requests: RequestQueue) -> None:
        self.extendleft(requests)

    def remove_request(self, request: Request) -> None:
        self.remove(request)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        drop = set(requests)
        kept = [r for r in self if r not in drop]
        self.clear()
        self.extend(kept)


class GoodFIFO(kvframe.SchedulingPolicy):
    """First come, first served; preempts the newest running request."""

    name = "good-fifo"
    description = "Test-only FIFO that passes the suite."

    def attach(self, context: Any) -> None:
        self.context = context

    def create_queue(self) -> RequestQueue:
        return FIFO()

    def select_queue(self, waiting: RequestQueue, skipped_waiting: RequestQueue) -> RequestQueue:
        return skipped_waiting if skipped_waiting else waiting

    def choose_victim(self, running: Sequence[Request]) -> Request:
        return running[-1]


class GatedFIFO(FIFO):
    """Serves priority 0 and 1; holds priority-2 requests back "until the system is idle".

    It reports itself empty while only held-back requests wait, so the
    scheduler never sees them, and the idle moment never comes.
    """

    def _head(self) -> Request:
        for request in self:
            if request.priority < 2:
                return request
        raise IndexError("nothing to serve")

    def peek_request(self) -> Request:
        return self._head()

    def pop_request(self) -> Request:
        request = self._head()
        self.remove(request)
        return request

    def __bool__(self) -> bool:
        return any(r.priority < 2 for r in self)


class Starves(GoodFIFO):
    """Holds priority-2 requests back until "the system is idle", which it never notices."""

    name = "starves"

    def create_queue(self) -> RequestQueue:
        return GatedFIFO()


class StarvesLongPrompts(GoodFIFO):
    """Admits a prompt only up to ``max_prompt_tokens`` (2,048 by default): every prompt
    the generated workloads hold is shorter, so only a longer one shows the starvation."""

    name = "starves-long-prompts"

    def __init__(self, *, max_prompt_tokens: int = 2048) -> None:
        self.max_prompt_tokens = max_prompt_tokens

    def may_admit(self, request: Request) -> bool:
        return request.num_prompt_tokens <= self.max_prompt_tokens


class VictimNotRunning(GoodFIFO):
    """Names the head of the waiting queue as the victim when there is one."""

    name = "victim-not-running"

    def choose_victim(self, running: Sequence[Request]) -> Request:
        waiting = self.context.waiting
        return waiting.peek_request() if waiting else running[-1]


class RetainsForever(GoodFIFO):
    """Keeps every finished request's KV with no deadline."""

    name = "retains-forever"

    def on_finish(self, request: Request) -> float | None:
        return math.inf


# ==========================================================================
# Tracers
# ==========================================================================


class GoodTracer(kvframe.Tracer):
    """Counts records; keeps nothing but numbers."""

    name = "good-tracer"
    description = "Test-only tracer that passes the suite."

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def on_step_snapshot(self, snapshot: Any) -> None:
        self.counts["snapshot"] += 1

    def on_step_decision(self, decision: Any) -> None:
        self.counts["decision"] += 1

    def on_kv_events(self, step: int, now: float, events: Sequence[Any]) -> None:
        self.counts["kv"] += len(events)


class MutatesRecords(GoodTracer):
    """ "Cleans up" the records it sees: drops zero-token entries, consumes the event list."""

    name = "mutates-records"

    def on_step_decision(self, decision: Any) -> None:
        decision.num_scheduled_tokens.pop(next(iter(decision.num_scheduled_tokens)), None)

    def on_kv_events(self, step: int, now: float, events: Sequence[Any]) -> None:
        events.clear()  # type: ignore[attr-defined]


class RaisesOnClearedCache(GoodTracer):
    """Handles only the KV events it knew about when it was written."""

    name = "raises-on-cleared-cache"

    def on_kv_events(self, step: int, now: float, events: Sequence[Any]) -> None:
        for event in events:
            if not hasattr(event, "block_hashes"):
                raise ValueError(f"unexpected KV event {event!r}")


class KeepsTheScheduler(GoodTracer):
    """Reaches up the stack for the scheduler, "to read the queues directly"."""

    name = "keeps-the-scheduler"

    def on_step_snapshot(self, snapshot: Any) -> None:
        frame = inspect.currentframe()
        while frame is not None and "scheduler" not in frame.f_locals:
            frame = frame.f_back
        if frame is not None:
            self.scheduler = frame.f_locals["scheduler"]


# ==========================================================================
# Eviction policies' vLLM 0.33.0 form (request_scoped_form)
# ==========================================================================


class ScopedLRU:
    """A request-scoped LRU that honours :class:`kvframe.RequestScopedPolicy`'s contract:
    a request's accesses move its chunks to the recent end, committed tail first at its
    finish (so its head is the most recent); the oldest evictable chunk goes first."""

    def __init__(self, capacity: int) -> None:
        self.blocks: OrderedDict[Hashable, Any] = OrderedDict()
        self.evictable: set[Hashable] = set()

    def get(self, key: Hashable) -> Any:
        return self.blocks.get(key)

    def insert(self, key: Hashable, block: Any, access: Any) -> None:
        self.blocks[key] = block

    def remove(self, key: Hashable) -> None:
        del self.blocks[key]
        self.evictable.discard(key)

    def candidates(self, protected: Collection[Hashable]) -> list[Hashable]:
        return [k for k in self.blocks if k in self.evictable and k not in protected]

    def evict(self, n: int, protected: Collection[Hashable]) -> list[tuple[Hashable, Any]] | None:
        keys = self.candidates(protected)[:n]
        if len(keys) < n:
            return None
        self.evictable.difference_update(keys)
        return [(key, self.blocks.pop(key)) for key in keys]

    def on_store_miss(self, keys: Sequence[Hashable], access: Any) -> None:
        pass

    def on_request_access(self, keys: Sequence[Hashable], access: Any) -> None:
        pass

    def on_request_finished(
        self, keys: Sequence[Hashable], insertion_only: Any, reused: Any, access: Any
    ) -> None:
        for key in reversed(keys):
            if key in self.blocks:
                self.blocks.move_to_end(key)

    def mark_evictable(self, key: Hashable) -> None:
        self.evictable.add(key)

    def mark_non_evictable(self, key: Hashable) -> None:
        self.evictable.discard(key)

    def clear(self) -> None:
        self.blocks.clear()
        self.evictable.clear()


class GoodScopedLRU(GoodLRU):
    """GoodLRU with a correct vLLM 0.33.0 form."""

    name = "good-scoped-lru"
    form: type[ScopedLRU] = ScopedLRU

    @classmethod
    def request_scoped_form(cls, capacity: int) -> ScopedLRU:
        return cls.form(capacity)


class _EvictsPinnedForm(ScopedLRU):
    def candidates(self, protected: Collection[Hashable]) -> list[Hashable]:
        return [k for k in self.blocks if k not in protected]


class ScopedEvictsPinned(GoodScopedLRU):
    """Its form evicts chunks being written or loaded (not marked evictable)."""

    name = "scoped-evicts-pinned"
    form = _EvictsPinnedForm


class _EvictsProtectedForm(ScopedLRU):
    def candidates(self, protected: Collection[Hashable]) -> list[Hashable]:
        return [k for k in self.blocks if k in self.evictable]


class ScopedEvictsProtected(GoodScopedLRU):
    """Its form evicts the keys the store being made protects."""

    name = "scoped-evicts-protected"
    form = _EvictsProtectedForm


class _RefusesForm(ScopedLRU):
    def evict(self, n: int, protected: Collection[Hashable]) -> list[tuple[Hashable, Any]] | None:
        return [] if n == 0 else None


class ScopedRefuses(GoodScopedLRU):
    """Its form never evicts, however many chunks are idle."""

    name = "scoped-refuses"
    form = _RefusesForm


class _KeepsAtClearForm(ScopedLRU):
    def clear(self) -> None:
        self.evictable.clear()


class ScopedKeepsAtClear(GoodScopedLRU):
    """Its form's ``clear`` forgets which chunks are idle but keeps the chunks."""

    name = "scoped-keeps-at-clear"
    form = _KeepsAtClearForm


class _RandomForm(ScopedLRU):
    _draws = itertools.count()

    def candidates(self, protected: Collection[Hashable]) -> list[Hashable]:
        keys = super().candidates(protected)
        shift = next(self._draws) % max(1, len(keys))
        return keys[shift:] + keys[:shift]


class ScopedNondeterministic(GoodScopedLRU):
    """Its form's victims depend on how many evictions any form made before."""

    name = "scoped-nondeterministic"
    form = _RandomForm


class ScopedNoVariant(GoodScopedLRU):
    """Its form rejects every option value but the default: skipped, not failed."""

    name = "scoped-no-variant"

    def __init__(self, capacity: int, *, variant: str = "a") -> None:
        super().__init__(capacity)

    @classmethod
    def request_scoped_form(cls, capacity: int, *, variant: str = "a") -> ScopedLRU:
        if variant != "a":
            raise ValueError(f"no variant {variant!r} in vLLM 0.33.0")
        return ScopedLRU(capacity)


# ==========================================================================
# Reuse filters
# ==========================================================================


class GoodThreshold(kvframe.ReuseFilter):
    """Store after ``store_threshold`` sightings, remembering ``max_tracker_size`` hashes."""

    name = "good-threshold"
    description = "Test-only threshold filter that passes the suite."

    def __init__(self, *, store_threshold: int = 2, max_tracker_size: int = 1000) -> None:
        self.store_threshold = store_threshold
        self.max_tracker_size = max_tracker_size
        self.counts: OrderedDict[bytes, int] = OrderedDict()

    def on_lookup(self, block_hashes: Sequence[bytes]) -> None:
        for h in block_hashes:
            if h in self.counts:
                self.counts.move_to_end(h)
            elif len(self.counts) >= self.max_tracker_size:
                self.counts.popitem(last=False)
            self.counts[h] = self.counts.get(h, 0) + 1

    def filter_store(self, block_hashes: Sequence[bytes]) -> list[bytes]:
        if self.store_threshold < 2:
            return list(block_hashes)
        return [h for h in block_hashes if self.counts.get(h, 0) >= self.store_threshold]


class AdmitsEarly(GoodThreshold):
    """Compares with ``>`` one too low: admits after ``store_threshold - 1`` sightings."""

    name = "admits-early"

    def filter_store(self, block_hashes: Sequence[bytes]) -> list[bytes]:
        if self.store_threshold < 2:
            return list(block_hashes)
        return [h for h in block_hashes if self.counts.get(h, 0) > self.store_threshold - 2]


class InManagerThreshold(GoodThreshold):
    """GoodThreshold with its vLLM 0.33.0 form (the same two numbers)."""

    name = "in-manager-threshold"

    @classmethod
    def in_manager_form(
        cls, *, store_threshold: int = 2, max_tracker_size: int = 1000
    ) -> kvframe.InManagerReuseFilter:
        return kvframe.InManagerReuseFilter(store_threshold, max_tracker_size)


class InManagerOffByOne(GoodThreshold):
    """Its vLLM 0.33.0 form asks for one offer more than the filter's threshold."""

    name = "in-manager-off-by-one"

    @classmethod
    def in_manager_form(
        cls, *, store_threshold: int = 2, max_tracker_size: int = 1000
    ) -> kvframe.InManagerReuseFilter:
        return kvframe.InManagerReuseFilter(store_threshold + 1, max_tracker_size)


class NeverForgets(GoodThreshold):
    """Ignores ``max_tracker_size``: the counter grows with every hash ever seen."""

    name = "never-forgets"

    def on_lookup(self, block_hashes: Sequence[bytes]) -> None:
        for h in block_hashes:
            self.counts[h] = self.counts.get(h, 0) + 1


# ==========================================================================
# Offload specs
# ==========================================================================


class GoodSlotSpec(kvframe.OffloadSpec):
    """A tier of ``slots`` slots on the host's SlotOffloadManager, ordered by GoodLRU."""

    name = "good-slots"
    description = "Test-only tier that passes the suite."
    policy: type[kvframe.EvictionPolicy] = GoodLRU

    def __init__(self, *, slots: int = 8) -> None:
        self.slots = slots

    def create_manager(self, context: Any) -> Any:
        return SlotOffloadManager(
            self.policy(self.slots), self.slots, block_size=context.gpu_block_size
        )

    def create_transfer_handler(self, context: Any) -> Any:
        raise NotImplementedError("this test tier moves no bytes")


class EvictsPinnedSpec(GoodSlotSpec):
    """Orders its slots with a policy that ignores ref_cnt: it evicts blocks being loaded."""

    name = "evicts-pinned"
    policy = IgnoresRefCnt


class _MemoryKV:
    """A stand-in device KV cache: bytes per GPU block, as the round trip reads them."""

    def __init__(self, block_bytes: int) -> None:
        self.block_bytes = block_bytes
        self.blocks: dict[int, bytes] = {}

    def write(self, gpu_block_id: int, data: bytes) -> None:
        self.blocks[gpu_block_id] = bytes(data)

    def read(self, gpu_block_id: int) -> bytes:
        return self.blocks.get(gpu_block_id, bytes(self.block_bytes))


class _MemoryHandler:
    """Copies blocks between a _MemoryKV and a dict of slots, finishing each transfer at once."""

    corrupt = False

    def __init__(self, block_bytes: int) -> None:
        self.device = _MemoryKV(block_bytes)
        self.slots: dict[int, bytes] = {}
        self.done: list[int] = []
        self.next_id = 0

    def start_transfers(
        self, loads: Sequence[tuple[int, int]], stores: Sequence[tuple[int, int]]
    ) -> int:
        for gpu_block, slot in stores:
            self.slots[slot] = self.device.read(gpu_block)
        for gpu_block, slot in loads:
            data = self.slots[slot]
            if self.corrupt:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            self.device.write(gpu_block, data)
        self.next_id += 1
        self.done.append(self.next_id)
        return self.next_id

    def finished_transfers(self) -> Sequence[int]:
        done, self.done = self.done, []
        return done


class _CorruptingHandler(_MemoryHandler):
    corrupt = True


class MemoryTierSpec(GoodSlotSpec):
    """A slot tier whose handler moves bytes in memory (so the round trip can run)."""

    name = "memory-tier"
    handler: type[_MemoryHandler] = _MemoryHandler

    def create_transfer_handler(self, context: Any) -> Any:
        return self.handler(context.gpu_block_bytes)


class CorruptingTierSpec(MemoryTierSpec):
    """Flips the first byte of every block it loads back."""

    name = "corrupting-tier"
    handler = _CorruptingHandler


class _TensorHandler:
    """Copies whole GPU blocks of the registered KV tensors (every layer) to host copies."""

    layers_loaded: int | None = None  # None: every layer

    def __init__(self) -> None:
        self.kv_caches: list[Any] = []
        self.slots: dict[int, list[Any]] = {}
        self.done: list[int] = []
        self.next_id = 0

    def register_kv_caches(self, kv_caches: Sequence[Any]) -> None:
        self.kv_caches = list(kv_caches)

    def start_transfers(
        self, loads: Sequence[tuple[int, int]], stores: Sequence[tuple[int, int]]
    ) -> int:
        for gpu_block, slot in stores:
            self.slots[slot] = [cache[gpu_block].clone() for cache in self.kv_caches]
        for gpu_block, slot in loads:
            for cache, data in list(zip(self.kv_caches, self.slots[slot], strict=True))[
                : self.layers_loaded
            ]:
                cache[gpu_block].copy_(data)
        self.next_id += 1
        self.done.append(self.next_id)
        return self.next_id

    def finished_transfers(self) -> Sequence[int]:
        done, self.done = self.done, []
        return done

    def wait(self, transfer_ids: Any) -> None:
        return None


class _FirstLayerHandler(_TensorHandler):
    layers_loaded = 1


class TensorTierSpec(GoodSlotSpec):
    """A slot tier whose handler copies the KV tensors it is given (``register_kv_caches``)."""

    name = "tensor-tier"
    handler: type[_TensorHandler] = _TensorHandler

    def create_transfer_handler(self, context: Any) -> Any:
        return self.handler()


class FirstLayerTierSpec(TensorTierSpec):
    """Loads back only the first layer's bytes (a loop over layers that stops early)."""

    name = "first-layer-tier"
    handler = _FirstLayerHandler
