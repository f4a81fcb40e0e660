"""Mutants: the bundled ``lru``, ``arc``, ``fcfs`` and ``priority`` (and the test-only
``lfu-aging`` of ``lfu_aging.py``) with one defect each.

The conformance suite's power is measured on these (``test_mutants.py`` checks
each is caught by the check named in :data:`MUTANTS`, at default settings;
``benchmarks/conformance_power.py`` runs the whole suite on each and reports
how many it catches and how long that takes). Each defect is one a real
author makes, and each breaks one sentence of the contract in
``kvframe/bases.py`` / ``kvframe/request.py``; the docstring says which.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Iterable, Iterator, Set

from kvframe_arc import ARCPolicy
from kvframe_fcfs import FCFSPolicy, FCFSQueue
from kvframe_lru import LRUPolicy
from kvframe_priority import PriorityPolicy, PriorityQueue
from lfu_aging import LFUAgingPolicy

from kvframe.contract.views import EvictableBlock, SchedulerContext
from kvframe.domain.queues import RequestQueue
from kvframe.domain.request import Request

# ==========================================================================
# lru
# ==========================================================================


class LRUGetReorders(LRUPolicy):
    """``get`` counts as a use and moves the key to the most recent end.

    Breaks: ``get`` changes no order (the tier calls ``get`` to look, not to use).
    """

    name = "mutant-lru-get-reorders"

    def get(self, key: Hashable) -> EvictableBlock | None:
        block = self.blocks.get(key)
        if block is not None:
            self.blocks.move_to_end(key)
        return block


class LRUEvictZeroRefuses(LRUPolicy):
    """No special case for ``n == 0``: the scan never reaches 0 victims and refuses.

    Breaks: ``evict(0, ...)`` returns ``[]``.
    """

    name = "mutant-lru-evict-zero"

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        victims = []
        for key, block in self.blocks.items():
            if block.ref_cnt == 0 and key not in protected:
                victims.append((key, block))
                if len(victims) == n:
                    break
        else:
            return None
        for key, _ in victims:
            del self.blocks[key]
        return victims


class LRUTouchNeedsSequence(LRUPolicy):
    """``touch`` reverses its argument in place: fine for a list, a TypeError for an iterator.

    Breaks: ``touch`` accepts any iterable (kvframe's connector passes an iterator).
    """

    name = "mutant-lru-touch-list"

    def touch(self, keys: Iterable[Hashable]) -> None:
        for key in reversed(keys):  # type: ignore[call-overload]
            if key in self.blocks:
                self.blocks.move_to_end(key)


class LRURefusalRotates(LRUPolicy):
    """Skipped blocks (in use or protected) are moved to the recent end during the scan,
    so the next scan does not meet them again — also when the eviction then fails.

    Breaks: a refused ``evict`` changes nothing, eviction order included.
    """

    name = "mutant-lru-refusal-rotates"

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        if n == 0:
            return []
        victims, skipped = [], []
        for key, block in self.blocks.items():
            if block.ref_cnt == 0 and key not in protected:
                victims.append((key, block))
                if len(victims) == n:
                    break
            else:
                skipped.append(key)
        for key in skipped:
            self.blocks.move_to_end(key)
        if len(victims) < n:
            return None
        for key, _ in victims:
            del self.blocks[key]
        return victims


class LRURefusesBehindProtected(LRUPolicy):
    """Gives up when its least recent block is protected or in use, instead of looking on.

    Breaks: the refusal rule (``evict`` succeeds when ``n`` idle, unprotected blocks are
    held, unless the class declares ``may_refuse``) — and stalls the GPU tier.
    """

    name = "mutant-lru-refuses-early"

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        if n and self.blocks:
            key, block = next(iter(self.blocks.items()))
            if key in protected or block.ref_cnt != 0:
                return None
        return super().evict(n, protected)


class LRUCachesIdleness(LRUPolicy):
    """Remembers whether a block was idle when it was inserted, and trusts that later.

    Breaks: ``evict`` never returns a block whose ``ref_cnt != 0`` — the tier changes
    ``ref_cnt`` in place, behind the policy's back.
    """

    name = "mutant-lru-caches-idleness"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.idle: dict[Hashable, bool] = {}

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        super().insert(key, block)
        self.idle[key] = block.ref_cnt == 0

    def remove(self, key: Hashable) -> None:
        super().remove(key)
        self.idle.pop(key, None)

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        if n == 0:
            return []
        victims = []
        for key, block in self.blocks.items():
            if self.idle.get(key, True) and key not in protected:
                victims.append((key, block))
                if len(victims) == n:
                    break
        else:
            return None
        for key, _ in victims:
            del self.blocks[key]
            self.idle.pop(key, None)
        return victims


class LRURemoveLeaks(LRUPolicy):
    """Counts each key's uses in a side table that eviction trims but ``remove`` forgets.

    Breaks: memory stays bounded under insert/remove churn, not only under insert/evict.
    """

    name = "mutant-lru-remove-leaks"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.uses: dict[Hashable, int] = {}

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        super().insert(key, block)
        self.uses[key] = 1

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        victims = super().evict(n, protected)
        for key, _ in victims or ():
            self.uses.pop(key, None)
        return victims


class LRUEvictsWriting(LRUPolicy):
    """Treats every ``ref_cnt <= 0`` as evictable, so a block still being written goes too.

    Breaks: ``evict`` never returns a block whose ``ref_cnt != 0`` (-1 is "being written").
    """

    name = "mutant-lru-evicts-writing"

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        if n == 0:
            return []
        victims = []
        for key, block in self.blocks.items():
            if block.ref_cnt <= 0 and key not in protected:
                victims.append((key, block))
                if len(victims) == n:
                    break
        else:
            return None
        for key, _ in victims:
            del self.blocks[key]
        return victims


class LRUIdleTrackingIgnoresOnIdle(LRUPolicy):
    """Accepts idle tracking but never reindexes a block the tier reports idle.

    Breaks: idle tracking changes no victim (``track_idle`` / ``on_idle``): a
    block that became idle after it was inserted is never evicted.
    """

    name = "mutant-lru-idle-tracking-ignores-on-idle"

    def on_idle(self, keys: Iterable[Hashable]) -> None:
        pass


class LRUHitKeepsKey(LRUPolicy):
    """Overrides ``on_hit`` as "a hit is a use": moves the key to the recent end and keeps it.

    Breaks: after ``on_hit(key)`` the policy does not hold ``key`` until it is inserted
    again (the GPU tier has the block in use; ``get`` must answer ``None``).
    """

    name = "mutant-lru-hit-keeps-key"

    def on_hit(self, key: Hashable) -> None:
        self.touch([key])


class LRUHitHistoryLeaks(LRUPolicy):
    """Remembers every key a hit took, to restore its place at the next insert, and forgets
    one only when it comes back.

    Breaks: what a policy keeps at ``on_hit`` stays bounded by a multiple of the capacity
    (a hit key's content may leave the cache in use and never come back).
    """

    name = "mutant-lru-hit-history-leaks"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.taken: dict[Hashable, int] = {}

    def on_hit(self, key: Hashable) -> None:
        self.remove(key)
        self.taken[key] = len(self.taken)

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        self.taken.pop(key, None)
        super().insert(key, block)


# ==========================================================================
# arc
# ==========================================================================


class ARCGetPromotes(ARCPolicy):
    """``get`` of a T1 block counts as its second use and promotes it to T2.

    Breaks: ``get`` changes no order.
    """

    name = "mutant-arc-get-promotes"

    def get(self, key: Hashable) -> EvictableBlock | None:
        block = self.t1.pop(key, None)
        if block is not None:
            self.t2[key] = block
            return block
        return self.t2.get(key)


class ARCBoundForgetsT2(ARCPolicy):
    """``max_evictable`` counts what ``evict`` may take from T1 and forgets T2's idle blocks.

    Breaks: ``max_evictable`` bounds ``evict`` (a tier would refuse stores the
    policy accepts).
    """

    name = "mutant-arc-bound-forgets-t2"

    def max_evictable(self) -> int | None:
        if self._paper:
            return None
        idle_t1 = sum(1 for block in self.t1.values() if block.ref_cnt == 0)
        return max(0, min(len(self.t1) - int(self.target_t1_size) + 1, idle_t1))


class ARCRemoveLeavesGhost(ARCPolicy):
    """A removed block becomes a ghost, like an evicted one; ghosts are trimmed only on evict.

    Breaks: memory stays bounded under insert/remove churn.
    """

    name = "mutant-arc-remove-ghost"

    def remove(self, key: Hashable) -> None:
        if self.t1.pop(key, None) is not None:
            self.b1[key] = False
        elif self.t2.pop(key, None) is not None:
            self.b2[key] = False


class ARCTouchNeedsSequence(ARCPolicy):
    """``touch`` slices its argument (``keys[::-1]``): a TypeError for an iterator.

    Breaks: ``touch`` accepts any iterable.
    """

    name = "mutant-arc-touch-slice"

    def touch(self, keys: Iterable[Hashable]) -> None:
        super().touch(keys[::-1][::-1])  # type: ignore[index]


class ARCUndeclaredRefusal(ARCPolicy):
    """vLLM's ARC without its ``may_refuse`` declaration.

    With T1 under its target and nothing evictable in T2 it refuses, although T1 has
    idle blocks. Breaks: the refusal rule (undeclared refusal; the GPU tier would stall).
    """

    name = "mutant-arc-undeclared-refusal"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.may_refuse = False


class ARCT2IgnoresRefCnt(ARCPolicy):
    """The T2 scan forgets the ``ref_cnt`` test (T1's has it).

    Breaks: ``evict`` never returns a block whose ``ref_cnt != 0``; only blocks touched
    into T2 and then taken by the tier show it.
    """

    name = "mutant-arc-t2-ref-cnt"

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        if n == 0:
            return []
        t1, t2 = self.t1, self.t2
        from_t1 = []
        room = min(n, len(t1) - int(self.target_t1_size) + 1)
        if room > 0:
            for key, block in t1.items():
                if block.ref_cnt == 0 and key not in protected:
                    from_t1.append((key, block))
                    if len(from_t1) == room:
                        break
        from_t2 = []
        rest = n - len(from_t1)
        if rest:
            for key, block in t2.items():
                if key not in protected:  # the defect: no ref_cnt test
                    from_t2.append((key, block))
                    if len(from_t2) == rest:
                        break
            else:
                return None
        for key, _ in from_t1:
            del t1[key]
            self.b1[key] = False
        for key, _ in from_t2:
            del t2[key]
            self.b2[key] = False
        for ghosts in (self.b1, self.b2):
            while len(ghosts) > self.capacity:
                ghosts.popitem(last=False)
        return from_t1 + from_t2


class ARCPaperForgetsUndo(ARCPolicy):
    """Paper variant: a refused eviction keeps the target adaptation it made first.

    Breaks: a refused ``evict`` changes nothing.
    """

    name = "mutant-arc-paper-no-undo"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, variant="paper")

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        unseen = [k for k in protected if self.b1.get(k) is False or self.b2.get(k) is False]
        victims = super().evict(n, protected)
        if victims is None:
            for key in unseen:  # what the base class undid, done again: no undo
                self._see_ghost(key)
        return victims


class ARCPaperNoFallback(ARCPolicy):
    """Paper variant: when REPLACE's list has nothing evictable, refuse instead of taking
    the other list's LRU — without declaring ``may_refuse``.

    Breaks: the refusal rule.
    """

    name = "mutant-arc-paper-no-fallback"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, variant="paper")

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        if n == 0:
            return []
        p = self.target_t1_size
        from_t1 = len(self.t1) >= 1 and len(self.t1) > p
        first = self.t1 if from_t1 else self.t2
        idle = [k for k, b in first.items() if b.ref_cnt == 0 and k not in protected]
        if len(idle) < n:
            return None
        return super().evict(n, protected)


# ==========================================================================
# lfu-aging (tests/testing/lfu_aging.py): state that shows only in later inserts
# ==========================================================================


class LFUAgingFloorOnRefusal(LFUAgingPolicy):
    """Raises the aging floor to the highest count it looked at, also when it then refuses.

    Breaks: a refused ``evict`` changes nothing (new blocks start higher after it:
    insert A, insert B, touch B, ``evict(3)`` -> None, insert Z, ``evict(2)`` gives
    ``[A, B]`` where the contract says ``[A, Z]``). Issue 32's false pass.
    """

    name = "mutant-lfu-floor-on-refusal"

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        victims = super().evict(n, protected)
        seen = self.candidates(protected)
        if victims is None and seen:
            self.floor = max(self.floor, max(seen)[0])
        return victims


class LFUAgingFloorWhenTooFew(LFUAgingPolicy):
    """Ages (raises the floor) when asked for more blocks than it holds at all.

    Breaks: a refused ``evict`` changes nothing — only refusals for lack of blocks.
    """

    name = "mutant-lfu-floor-too-few"

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        victims = super().evict(n, protected)
        if victims is None and n > len(self.blocks) and self.counts:
            self.floor = max(self.floor, min(self.counts.values()))
        return victims


class LFUAgingFloorWhenBusy(LFUAgingPolicy):
    """Ages past the blocks in use when a refusal is caused by them (they "would have gone").

    Breaks: a refused ``evict`` changes nothing — only refusals with blocks in use.
    """

    name = "mutant-lfu-floor-busy"

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        victims = super().evict(n, protected)
        if victims is None:
            busy = [self.counts[k] for k, b in self.blocks.items() if b.ref_cnt != 0]
            if busy:
                self.floor = max(self.floor, min(busy))
        return victims


class LFUAgingDecaysOnRefusal(LFUAgingPolicy):
    """Halves every count when an eviction fails ("the tier is under pressure: age all").

    Breaks: a refused ``evict`` changes nothing (the relative worth of old and new
    touches changes).
    """

    name = "mutant-lfu-decay-on-refusal"

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        victims = super().evict(n, protected)
        if victims is None:
            for key in self.counts:
                self.counts[key] = (self.counts[key] + 1) // 2
        return victims


class LFUAgingCountsProtected(LFUAgingPolicy):
    """Counts a protected key as a use on every ``evict`` (the tier wants it), refused or not.

    Breaks: a refused ``evict`` changes nothing.
    """

    name = "mutant-lfu-counts-protected"

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        if n:
            self.touch(protected)
        return super().evict(n, protected)


class LRUReleasePinsHeads(LRUPolicy):
    """Keeps every chain's first block for good: ``on_release`` pins the keys at token 0
    and ``evict`` never takes them (a T-LRU author protecting heads "forever").

    Breaks: on the GPU tier, ``evict(n, frozenset())`` succeeds whenever the policy
    holds ``n`` idle blocks, ``on_release`` or not.
    """

    name = "mutant-lru-release-pins-heads"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.pinned: set[Hashable] = set()

    def on_release(self, chain, num_tokens: int) -> None:
        self.pinned.update(key for key, first_token in chain if first_token == 0)

    def remove(self, key: Hashable) -> None:
        super().remove(key)
        self.pinned.discard(key)

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        return super().evict(n, frozenset(protected) | self.pinned)


class LRURollbackAppends(LRUPolicy):
    """Removes victims as it finds them and, on failure, puts them back — at the recent end.

    Breaks: a refused ``evict`` changes nothing, eviction order included.
    """

    name = "mutant-lru-rollback-appends"

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        if n == 0:
            return []
        victims = []
        for key, block in list(self.blocks.items()):
            if block.ref_cnt == 0 and key not in protected:
                victims.append((key, self.blocks.pop(key)))
                if len(victims) == n:
                    return victims
        for key, block in victims:
            self.blocks[key] = block
        return None


# ==========================================================================
# fcfs
# ==========================================================================


class _ReversingFCFSQueue(FCFSQueue):
    __slots__ = ()

    def prepend_requests(self, requests: RequestQueue) -> None:
        for request in reversed(requests):  # type: ignore[call-overload]
            self._deque.appendleft(request)


class FCFSPrependNeedsSequence(FCFSPolicy):
    """``prepend_requests`` calls ``reversed()`` on its argument: a list works, the
    scheduler's queue (no ``__reversed__``) does not.

    Breaks: ``prepend_requests`` accepts a queue — a path only a connector reaches.
    """

    name = "mutant-fcfs-prepend-list"

    def create_queue(self) -> FCFSQueue:
        return _ReversingFCFSQueue()


class _ConsumingFCFSQueue(FCFSQueue):
    __slots__ = ()

    def remove_requests(self, requests: Iterable[Request]) -> None:
        kept = [r for r in self._deque if r not in requests]  # consumes an iterator
        self._deque.clear()
        self._deque.extend(kept)


class FCFSRemoveConsumesIterator(FCFSPolicy):
    """``remove_requests`` tests membership in its argument directly: an iterator is
    used up by the first test, so later requests are not removed.

    Breaks: ``remove_requests`` takes any iterable.
    """

    name = "mutant-fcfs-remove-iterator"

    def create_queue(self) -> FCFSQueue:
        return _ConsumingFCFSQueue()


class FCFSRetainsForever(FCFSPolicy):
    """Keeps an agentic turn's KV "until the next turn comes", as an infinite deadline.

    Breaks: a retention deadline is a finite time.
    """

    name = "mutant-fcfs-infinite-deadline"

    def on_finish(self, request: Request) -> float | None:
        return math.inf if request.job_id is not None and not request.is_last_turn else None


class FCFSAdmitFallsThrough(FCFSPolicy):
    """``may_admit`` returns ``False`` for long prompts and falls off its end otherwise.

    Breaks: ``may_admit`` returns ``True`` or ``False`` (a bare fall-through is ``None``).
    """

    name = "mutant-fcfs-admit-none"

    def may_admit(self, request: Request) -> bool:
        if request.num_prompt_tokens > 1_000:
            return False


class FCFSAdmitStarvesLongPrompts(FCFSPolicy):
    """A length cap with no way out: prompts over 16 tokens are never admitted.

    Breaks: no starvation (a request ``may_admit`` refuses forever never finishes).
    """

    name = "mutant-fcfs-admit-starves"

    def may_admit(self, request: Request) -> bool:
        return request.num_prompt_tokens <= 16


class _TailFCFSQueue(FCFSQueue):
    __slots__ = ()

    def __iter__(self) -> Iterator[Request]:
        return iter(sorted(self._deque, key=lambda r: r.request_id))


class FCFSIteratesById(FCFSPolicy):
    """The queue iterates sorted by request id ("a stable order for stats"), not in the
    order it admits.

    Breaks: a ``RequestQueue`` iterates in the order it will admit.
    """

    name = "mutant-fcfs-iterates-by-id"

    def create_queue(self) -> FCFSQueue:
        return _TailFCFSQueue()


# ==========================================================================
# priority
# ==========================================================================


class _HeapOrderQueue(PriorityQueue):
    __slots__ = ()

    def __iter__(self) -> Iterator[Request]:
        return iter([entry[-1] for entry in self._heap])


class PriorityIteratesHeap(PriorityPolicy):
    """The queue iterates its heap list as stored (heap order is not rank order).

    Breaks: a ``RequestQueue`` iterates in the order it will admit.
    """

    name = "mutant-priority-heap-iter"

    def create_queue(self) -> PriorityQueue:
        return _HeapOrderQueue()


class _UnheapedPrependQueue(PriorityQueue):
    __slots__ = ()

    def prepend_requests(self, requests: RequestQueue) -> None:
        # forgets heapify
        self._heap.extend((self.key(r), next(self._counter), r) for r in requests)


class PriorityPrependBreaksHeap(PriorityPolicy):
    """``prepend_requests`` appends to the heap list without restoring the heap.

    Breaks: pops admit in rank order (iteration, which sorts, disagrees with pops).
    """

    name = "mutant-priority-prepend-heap"

    def create_queue(self) -> PriorityQueue:
        return _UnheapedPrependQueue()


class _UnheapedRemoveQueue(PriorityQueue):
    __slots__ = ()

    def remove_request(self, request: Request) -> None:
        # forgets heapify
        self._heap.remove(next(e for e in self._heap if e[-1] is request))


class PriorityRemoveBreaksHeap(PriorityPolicy):
    """``remove_request`` removes from the heap list without restoring the heap.

    Breaks: a ``RequestQueue`` iterates in the order it will admit (pops disagree).
    """

    name = "mutant-priority-remove-heap"

    def create_queue(self) -> PriorityQueue:
        return _UnheapedRemoveQueue()


class _NonePeekQueue(PriorityQueue):
    __slots__ = ()

    def peek_request(self) -> Request:
        return self._heap[0][-1] if self._heap else None  # type: ignore[return-value]

    def pop_request(self) -> Request:
        return heapq.heappop(self._heap)[-1] if self._heap else None  # type: ignore[return-value]


class PriorityEmptyReturnsNone(PriorityPolicy):
    """An empty queue's ``peek_request`` / ``pop_request`` return None.

    Breaks: they raise ``IndexError`` when empty.
    """

    name = "mutant-priority-empty-none"

    def create_queue(self) -> PriorityQueue:
        return _NonePeekQueue()


class PriorityRetainsForever(PriorityPolicy):
    """Retains every finished request with an infinite deadline.

    Breaks: a retention deadline is a finite time.
    """

    name = "mutant-priority-infinite-deadline"

    def on_finish(self, request: Request) -> float | None:
        return math.inf


class PriorityReadsRunningCounters(PriorityPolicy):
    """Ranks an arrival by the tokens running requests have computed, yet allows decode runs.

    Breaks: a policy that allows decode runs does not read running requests'
    token counters in on_arrival (they lag during a run).
    """

    name = "mutant-priority-reads-running"
    allows_decode_runs = True

    def attach(self, context: SchedulerContext) -> None:
        self._context = context

    def on_arrival(self, request: Request) -> None:
        request.priority = sum(r.num_computed_tokens for r in self._context.running) % 3


# ==========================================================================
# The set: class, kind, the check that must catch it, words its message must have
# ==========================================================================

REFUSED_WORDS = ("rule: a refused evict (it returned None) changes nothing", "after ")

MUTANTS: tuple[tuple[type, str, str, tuple[str, ...]], ...] = (
    (LRUGetReorders, "eviction", "every_short", ("rule: get changes no order", "after insert(")),
    (LRUEvictZeroRefuses, "eviction", "every_short", ("evict(0", "after ")),
    (LRUTouchNeedsSequence, "eviction", "every_short", ("touch accepts any iterable",)),
    (
        LRURefusalRotates,
        "eviction",
        "every_short",
        ("rule: a refused evict (it returned None) changes nothing", "after insert("),
    ),
    (LRURefusesBehindProtected, "eviction", "every_short", ("The refusal rule", "returned None")),
    (LRUCachesIdleness, "eviction", "every_short", ("whose block has ref_cnt", "after ")),
    (LRURemoveLeaks, "eviction", "remove_churn", ("rule: memory stays bounded",)),
    (LRUHitKeepsKey, "eviction", "hit_block_is_not_held", ("right after on_hit(", "after ")),
    (LRUHitHistoryLeaks, "eviction", "kept_at_hits", ("rule: what a policy remembers at on_hit",)),
    (LRUEvictsWriting, "eviction", "every_short", ("being written", "after ")),
    (LRUReleasePinsHeads, "eviction", "real_gpu_tier", ("The refusal rule", "on_release([")),
    (
        LRUIdleTrackingIgnoresOnIdle,
        "eviction",
        "idle_tracking",
        ("track_idle() -> True", "on_idle(["),
    ),
    (ARCGetPromotes, "eviction", "every_short", ("rule: get changes no order",)),
    (
        ARCBoundForgetsT2,
        "eviction",
        "max_evictable_bounds",
        ("rule: max_evictable bounds evict", "max_evictable() -> "),
    ),
    (ARCRemoveLeavesGhost, "eviction", "remove_churn", ("rule: memory stays bounded",)),
    (ARCTouchNeedsSequence, "eviction", "every_short", ("touch accepts any iterable",)),
    (ARCUndeclaredRefusal, "eviction", "every_short", ("The refusal rule", "returned None")),
    (ARCT2IgnoresRefCnt, "eviction", "every_short", ("whose block has ref_cnt", "after ")),
    (ARCPaperForgetsUndo, "eviction", "every_short", ("a refused evict", "changes nothing")),
    (ARCPaperNoFallback, "eviction", "every_short", ("The refusal rule", "returned None")),
    (LFUAgingFloorOnRefusal, "eviction", "every_short", REFUSED_WORDS),
    (LFUAgingFloorWhenTooFew, "eviction", "every_short", REFUSED_WORDS),
    (LFUAgingFloorWhenBusy, "eviction", "every_short", REFUSED_WORDS),
    (LFUAgingDecaysOnRefusal, "eviction", "every_short", REFUSED_WORDS),
    (LFUAgingCountsProtected, "eviction", "every_short", REFUSED_WORDS),
    (LRURollbackAppends, "eviction", "every_short", REFUSED_WORDS),
    (FCFSPrependNeedsSequence, "scheduling", "queues_iterate", ("prepend_requests(<a queue",)),
    (FCFSRemoveConsumesIterator, "scheduling", "queues_iterate", ("remove_requests(<iterator",)),
    (FCFSRetainsForever, "scheduling", "generated", ("a retention deadline is a finite time",)),
    (FCFSAdmitFallsThrough, "scheduling", "generated", ("may_admit(", "must return True or False")),
    (
        FCFSAdmitStarvesLongPrompts,
        "scheduling",
        "crowded",
        ("starvation", "may_admit refused", "times"),
    ),
    (FCFSIteratesById, "scheduling", "queues_iterate", ("iterates in the order it will admit",)),
    (PriorityIteratesHeap, "scheduling", "queues_iterate", ("iterates in the order",)),
    (PriorityPrependBreaksHeap, "scheduling", "queues_iterate", ("iterates in the order",)),
    (PriorityRemoveBreaksHeap, "scheduling", "queues_iterate", ("iterates in the order",)),
    (PriorityEmptyReturnsNone, "scheduling", "queues_iterate", ("raise IndexError",)),
    (PriorityRetainsForever, "scheduling", "generated", ("a retention deadline is a finite time",)),
    (PriorityReadsRunningCounters, "scheduling", "decode_runs", ("declare allows_decode_runs",)),
)
"""(class, kind, the test (a ``-k`` expression) that catches it, words of its message)."""
