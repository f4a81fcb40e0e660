"""Adaptive Replacement Cache (ARC) eviction, in two variants.

``arc`` (``variant="vllm"``, the default) behaves exactly as vLLM 0.19's
``ARCCachePolicy`` (``vllm/v1/kv_offload/cpu/policies/arc.py``);
``arc:variant=paper`` is the algorithm of Megiddo and Modha, "ARC: A
Self-Tuning, Low Overhead Replacement Cache" (FAST 2003), mapped onto the
five-operation interface. ``docs/offload.md`` lists every place where vLLM's
ARC departs from the paper and how the paper's cases map onto the interface.

Both keep the paper's four lists, each an ``OrderedDict`` whose front is the
least recently used entry:

* ``t1`` — resident blocks seen once since they (re-)entered the cache;
* ``t2`` — resident blocks seen at least twice;
* ``b1``/``b2`` — *ghosts*: keys (no blocks) recently evicted from ``t1``/``t2``;

and the adaptive target size of ``t1`` (the paper's ``p``),
``target_t1_size``. A ghost hit in ``b1`` means recency was given too little
room, so the target grows; a ghost hit in ``b2`` shrinks it.

Costs. ``get``/``insert``/``remove`` and a touch of one key are O(1).
``evict(n)`` walks each list at most once from its LRU end (not once per
victim), so it costs ``n`` plus the blocks it must skip (protected or in
use). The vLLM variant trims the ghost lists after each eviction (amortised
O(1) per evicted block); the paper variant trims at most one ghost per insert.

Idle tracking (:meth:`kvframe.EvictionPolicy.track_idle`): with a tier that
reports blocks becoming idle, ``t1`` and ``t2`` each get an index of their idle
blocks in the same order (every move in a list is made in its index too), and
``evict`` walks the indexes: it skips the blocks being written without
visiting them, and chooses the same victims.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable, Iterator, Sequence, Set
from itertools import compress, filterfalse, repeat
from operator import attrgetter, ge, not_
from typing import TYPE_CHECKING, Literal

import kvframe
from kvframe import EvictableBlock, TouchWalkCache

if TYPE_CHECKING:
    from kvframe import RequestScopedPolicy

__all__ = ["ARCPolicy"]

Victim = tuple[Hashable, EvictableBlock]
_ref_cnt = attrgetter("ref_cnt")


def _evictable(
    blocks: OrderedDict[Hashable, EvictableBlock], protected: Set[Hashable]
) -> Iterator[Victim]:
    """The blocks the paper variant's ``evict`` may take from one list, LRU first.

    A generator so that choosing several victims from the same list resumes
    where the previous one was found instead of rescanning from the front;
    nothing changes during the choice, so the result is the same.
    """
    for key, block in blocks.items():
        if block.ref_cnt == 0 and key not in protected:
            yield key, block


def _idle_of(
    blocks: OrderedDict[Hashable, EvictableBlock],
) -> OrderedDict[Hashable, EvictableBlock]:
    """The idle blocks of one list, in its order (built in C)."""
    return OrderedDict(compress(blocks.items(), map(not_, map(_ref_cnt, blocks.values()))))


def _reindex(
    blocks: OrderedDict[Hashable, EvictableBlock],
    index: OrderedDict[Hashable, EvictableBlock],
    unindexed: set[Hashable],
) -> OrderedDict[Hashable, EvictableBlock]:
    """The blocks of one list that are in its index or reported idle since, in its order.

    Every idle block is one or the other (the tier reports every block it
    makes idle), so this is an index again; testing keys against a set is
    2.4x faster for 4,096 blocks than reading every block's ``ref_cnt``.
    """
    members = set(index)
    members |= unindexed
    keys = list(filter(members.__contains__, blocks))
    return OrderedDict(zip(keys, map(blocks.__getitem__, keys), strict=True))


def _mirror_moves(index: OrderedDict[Hashable, EvictableBlock], keys: list[Hashable]) -> None:
    """Make in an idle index the ``move_to_end`` calls just made in its list."""
    deque(map(index.move_to_end, filter(index.__contains__, keys)), maxlen=0)


def _drop(index: OrderedDict[Hashable, EvictableBlock], victims: list[Victim]) -> None:
    """Take evicted blocks out of an idle index (they were chosen from it)."""
    for key, _ in victims:
        del index[key]


class ARCPolicy(kvframe.EvictionPolicy):
    """Adaptive replacement (recency T1 vs frequency T2, tuned by ghost hits)."""

    name = "arc"
    description = "Adaptive Replacement Cache: vLLM 0.19's ARCCachePolicy, or variant=paper."

    @classmethod
    def request_scoped_form(cls, capacity: int, *, variant: str = "vllm") -> RequestScopedPolicy:
        """vLLM 0.33.0's form of this policy (:class:`kvframe_arc.request_arc.RequestARCPolicy`),
        for a tier under the 0.33 fidelity target (vLLM's variant only)."""
        if variant != "vllm":
            raise ValueError(f"vLLM 0.33.0's arc has no variant {variant!r} (only 'vllm')")
        from kvframe_arc.request_arc import RequestARCPolicy

        return RequestARCPolicy(capacity)

    def __init__(self, capacity: int, *, variant: Literal["vllm", "paper"] = "vllm") -> None:
        if variant not in ("vllm", "paper"):
            raise ValueError(f"variant must be 'vllm' or 'paper', not {variant!r}")
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, not {capacity}")
        super().__init__(capacity)
        self.variant = variant
        self._paper = variant == "paper"
        self.may_refuse = not self._paper
        """vLLM's ARC may refuse although enough blocks are idle (T1 under its
        target and nothing evictable in T2): fine for an offload tier, turned away
        by the GPU prefix cache. The paper variant falls back to the other list."""
        self.target_t1_size: float = 0.0
        """The adaptive target for ``len(t1)`` (the paper's ``p``), in [0, capacity]."""
        self.t1: OrderedDict[Hashable, EvictableBlock] = OrderedDict()
        self.t2: OrderedDict[Hashable, EvictableBlock] = OrderedDict()
        self.b1: OrderedDict[Hashable, bool] = OrderedDict()
        """Ghosts of ``t1``. The value is only used by the paper variant: True once
        the ghost's hit has adapted the target (so a hit adapts it once)."""
        self.b2: OrderedDict[Hashable, bool] = OrderedDict()
        self.keys_held: set[Hashable] = set()
        """Every key of ``t1``, ``t2``, ``b1`` and ``b2`` (the lists are disjoint).

        Why: the connector touches every full block of a request on each
        lookup, and most of those keys are in none of the lists; ``touch``
        drops them with one C-level set test instead of four dict tests in a
        Python loop (that loop was most of a tier run's ARC time). Membership
        changes only on insert, remove and ghost trimming; moves between the
        lists leave it alone."""
        self._touched: Sequence[Hashable] | None = None
        """The keys of the last touch while touching them again would change
        nothing (see :meth:`touch`); ``None`` otherwise."""
        self._walks = TouchWalkCache(capacity)
        """The held keys (``keys_held``) of recently touched lists: a waiting
        request's blocks are touched on every step it waits, most of them in
        none of the lists. Every key added to ``keys_held`` is logged to it."""
        self._init_idle_tracking()

    def _init_idle_tracking(self) -> None:
        """The idle indexes of ``t1`` and ``t2``, off until :meth:`track_idle`."""
        self._tracking = False
        """Whether the tier reports blocks becoming idle (:meth:`track_idle`)."""
        self._idle_t1: OrderedDict[Hashable, EvictableBlock] = OrderedDict()
        """With tracking: a subsequence of ``t1`` (same order) and, unless
        ``_stale_t1``, one holding every idle block of ``t1``, perhaps with
        blocks a load pinned since (``evict`` checks ``ref_cnt`` anyway)."""
        self._idle_t2: OrderedDict[Hashable, EvictableBlock] = OrderedDict()
        """The same for ``t2``."""
        self._stale_t1 = False
        """A block of ``t1`` became idle that its index lacks: rebuild it before the next walk.

        Only a walk of its list finds where a block becoming idle belongs; one
        rebuild (in C) per batch of such blocks (a request's, when it
        finishes: all in T1, where blocks being written stay) replaces
        walking the list on every ``evict``."""
        self._stale_t2 = False
        """The same for ``t2`` (a block a load had pinned, or one promoted from
        ``t1`` while it was in ``_unindexed``)."""
        self._unindexed: set[Hashable] = set()
        """Blocks made idle that their list's index lacks (until the rebuild):
        a touch that promotes one from ``t1`` to ``t2`` makes ``t2``'s index
        stale too. The rebuild of a list keeps its index's blocks and these."""
        self._rebuild_all = False
        """The first rebuild reads every ``ref_cnt``: blocks held before
        tracking started were never reported."""

    def __len__(self) -> int:
        return len(self.t1) + len(self.t2)

    # -- idle tracking --------------------------------------------------------

    def track_idle(self) -> bool:
        self._tracking = True
        self._stale_t1 = self._stale_t2 = self._rebuild_all = True
        return True

    def on_idle(self, keys: Iterable[Hashable]) -> None:
        if self._rebuild_all:
            return
        t1, t2, idle_t1, idle_t2 = self.t1, self.t2, self._idle_t1, self._idle_t2
        for key in keys:
            if key in t1:
                if key not in idle_t1:
                    self._stale_t1 = True
                    self._unindexed.add(key)
            elif key in t2 and key not in idle_t2:
                self._stale_t2 = True
                self._unindexed.add(key)

    def _rebuild_idle(self) -> None:
        # Every unindexed block is in a stale list: in t1, or in t2 after a
        # promotion or a report marked t2 stale. So the rebuild indexes them all.
        if self._rebuild_all:
            self._idle_t1 = _idle_of(self.t1)
            self._idle_t2 = _idle_of(self.t2)
            self._stale_t1 = self._stale_t2 = self._rebuild_all = False
        if self._stale_t1:
            self._idle_t1 = _reindex(self.t1, self._idle_t1, self._unindexed)
            self._stale_t1 = False
        if self._stale_t2:
            self._idle_t2 = _reindex(self.t2, self._idle_t2, self._unindexed)
            self._stale_t2 = False
        self._unindexed.clear()

    def __repr__(self) -> str:
        return (
            f"ARCPolicy(capacity={self.capacity}, variant={self.variant!r}, "
            f"target_t1_size={self.target_t1_size}, t1={len(self.t1)}, t2={len(self.t2)}, "
            f"b1={len(self.b1)}, b2={len(self.b2)})"
        )

    # -- the two operations the variants share ------------------------------

    def get(self, key: Hashable) -> EvictableBlock | None:
        block = self.t1.get(key)
        return block if block is not None else self.t2.get(key)

    def remove(self, key: Hashable) -> None:
        # Tolerant of absent keys, as vLLM's ARC is; no ghost is left behind
        # (a removed block was never evicted, so its absence teaches nothing).
        if self.t1.pop(key, None) is not None or self.t2.pop(key, None) is not None:
            self.keys_held.discard(key)
            self._touched = None
            if self._tracking:
                self._idle_t1.pop(key, None)
                self._idle_t2.pop(key, None)
                self._unindexed.discard(key)

    # -- insert -------------------------------------------------------------

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        if self._paper:
            self._insert_paper(key, block)
            return
        # vLLM: a new block always starts in T1, even after a ghost hit, and
        # leaves the ghost lists.
        self.t1[key] = block
        if self._tracking and block.ref_cnt == 0:
            self._idle_t1[key] = block
        self.b1.pop(key, None)
        self.b2.pop(key, None)
        self.keys_held.add(key)
        self._walks.inserted(key)
        self._touched = None

    def _insert_paper(self, key: Hashable, block: EvictableBlock) -> None:
        self._touched = None
        if key in self.b1 or key in self.b2:
            # Cases II/III: a ghost hit comes back as a frequent block.
            self._see_ghost(key)
            self.b1.pop(key, None)
            self.b2.pop(key, None)
            self.t2[key] = block
            if self._tracking and block.ref_cnt == 0:
                self._idle_t2[key] = block
            return
        # Case IV: a brand-new key enters T1. The paper first drops the LRU
        # ghost of B1 when |T1|+|B1| == c (case A), else that of B2 when the
        # directory holds 2c keys (case B), then REPLACEs. Here REPLACE already
        # ran in ``evict``, which moves a key between lists without changing
        # either count, so checking the counts one insert later drops the same
        # ghost. (Case A with |T1| == c, where the paper discards T1's LRU
        # without a ghost, falls out too: that block entered the empty B1 in
        # ``evict`` and is the ghost dropped here.)
        self.t1[key] = block
        if self._tracking and block.ref_cnt == 0:
            self._idle_t1[key] = block
        keys_held = self.keys_held
        keys_held.add(key)
        self._walks.inserted(key)
        c = self.capacity
        if len(self.t1) + len(self.b1) > c:
            if self.b1:
                keys_held.discard(self.b1.popitem(last=False)[0])
        elif len(self.t1) + len(self.t2) + len(self.b1) + len(self.b2) > 2 * c and self.b2:
            keys_held.discard(self.b2.popitem(last=False)[0])

    # -- touch --------------------------------------------------------------

    def touch(self, keys: Iterable[Hashable]) -> None:
        # The same keys touched again with nothing changed in between change
        # nothing when the first touch left every key it found in T2 (a T2
        # key only moves to T2's MRU end, in the same order again) and, for
        # the vLLM variant, met no ghost (each ghost hit adapts the target).
        # A waiting request is looked up, and so touched, on every step it
        # waits. A key left in T1 (being written) is not remembered: the tier
        # may make it ready behind the policy's back, and then a touch
        # promotes it.
        if type(keys) is list:
            if keys == self._touched:
                return
            keys = keys.copy()  # the caller may change its list afterwards
        elif type(keys) is not tuple:
            keys = list(keys)
        if len(keys) == 1:
            # One key (the GPU prefix cache's touches): the walk itself.
            self._touched = keys if self._touch_one(keys[0]) else None
            return
        self._touch_many(keys)

    def _touch_many(self, keys: Sequence[Hashable]) -> None:
        """A touch of several keys: T1's, then T2's and the ghosts.

        The keys are processed in reverse (the first ends most recent, as in
        vLLM), one list at a time, each list's moves in C. That is the
        key-by-key walk regrouped: the lists are disjoint and a touch never
        moves a key between them except from T1 to T2, so each list ends
        with the touched keys it holds in the order of their last
        occurrence in the walk, and the target sees the ghost hits in walk
        order. ``plain_touch`` in the tests is the key-by-key walk.
        """
        walk = self._walks.walk(keys, self.keys_held.__contains__)  # type: ignore[arg-type]
        if not walk:
            self._touched = keys
            return
        t1 = self.t1
        walk_t1 = list(filter(t1.__contains__, walk)) if t1 else []
        if walk_t1 and max(map(_ref_cnt, map(t1.__getitem__, walk_t1))) < 0:
            self._touch_all_writing(walk, walk_t1, keys)
            return
        ready: list[Hashable] = []
        in_t1: list[Hashable] = []
        settled = True
        if walk_t1:
            ready, in_t1, settled = self._touch_t1(walk, walk_t1)
        if len(walk_t1) == len(walk):
            # Every touched key was in T1 (a request's blocks right after their
            # store, most of them still being written): T2 only gained the
            # promoted ones, appended in walk order when no key repeats, and
            # no ghost was touched.
            if ready and len(in_t1) < len(walk_t1):
                # A repeated key ends where its last occurrence puts it.
                t2 = self.t2
                in_t2 = list(filter(t2.__contains__, walk))
                deque(map(t2.move_to_end, in_t2), maxlen=0)
                if self._idle_t2:
                    _mirror_moves(self._idle_t2, in_t2)
            self._touched = keys if settled else None
            return
        self._touch_t2_and_ghosts(walk, None, keys, settled)

    def _touch_all_writing(
        self, walk: list[Hashable], walk_t1: list[Hashable], keys: Sequence[Hashable]
    ) -> None:
        """The usual store touch: every T1 key of the walk is being written.

        They are a request's own blocks, right after their store, so nothing
        is promoted and each is moved to T1's MRU end in walk order, as the
        key-by-key walk does, repeats included (a key's last move decides its
        place). One max over the ref counts (the caller's) replaces the
        per-key flags, the dedup and the list filters of :meth:`_touch_t1`,
        which only a promotion needs.
        """
        t1 = self.t1
        deque(map(t1.move_to_end, walk_t1), maxlen=0)
        if self._idle_t1:
            _mirror_moves(self._idle_t1, walk_t1)
        if len(walk_t1) == len(walk):
            self._touched = None  # a key left in T1 may become ready
            return
        others = list(filterfalse(t1.__contains__, walk))
        self._touch_t2_and_ghosts(others, others, keys, settled=False)

    def _touch_t1(
        self, walk: list[Hashable], walk_t1: list[Hashable]
    ) -> tuple[list[Hashable], list[Hashable], bool]:
        """T1's part of a touch: promote the ready keys to T2, move those being written.

        Returns the promoted keys, T1's touched keys without repeats, and
        whether the touch settled (no key was left in T1).
        """
        t1, t2 = self.t1, self.t2
        idle_t1, idle_t2 = self._idle_t1, self._idle_t2
        settled = True
        in_t1 = list(dict.fromkeys(walk_t1))
        # A ready block's second use promotes it to T2; a block being
        # written (inserted by this very store, not a second use) stays
        # in T1 as its most recent entry.
        ready_flags = list(map(ge, map(_ref_cnt, map(t1.__getitem__, in_t1)), repeat(0)))
        # Usually none is ready (the touch after a store names the request's
        # blocks, being written): then nothing is promoted.
        ready = list(compress(in_t1, ready_flags)) if any(ready_flags) else []
        if ready:
            t2.update(zip(ready, map(t1.pop, ready), strict=True))
        if idle_t1 and ready:
            # Promoted idle blocks enter T2's index in the order T2 got them.
            moved = list(filter(idle_t1.__contains__, ready))
            idle_t2.update(zip(moved, map(idle_t1.pop, moved), strict=True))
        if self._unindexed and not self._unindexed.isdisjoint(ready):
            self._stale_t2 = True  # an idle block T2's index lacks
        if len(ready) < len(in_t1):
            settled = False
            if len(in_t1) == len(walk_t1):
                # No key repeated: the blocks being written, in walk order.
                writing = list(compress(in_t1, map(not_, ready_flags))) if ready else in_t1
            else:
                writing = list(filter(t1.__contains__, walk))
            deque(map(t1.move_to_end, writing), maxlen=0)
            if idle_t1:
                _mirror_moves(idle_t1, writing)
        return ready, in_t1, settled

    def _touch_t2_and_ghosts(
        self,
        walk: list[Hashable],
        not_in_t1: list[Hashable] | None,
        keys: Sequence[Hashable],
        settled: bool,
    ) -> None:
        """The rest of a multi-key touch once T1's keys are done: T2's moves, then ghosts.

        ``walk``: the touch's held keys in walk order. ``not_in_t1``: those
        of them not in T1, if the caller has them, else ``None``. A caller
        whose touch promoted nothing from T1 to T2 may pass that list as
        ``walk`` too: T2's keys and the ghosts are then found in it, in the
        same order, without another pass over every held key.
        """
        t1, t2, b1, b2 = self.t1, self.t2, self.b1, self.b2
        if t2:
            in_t2 = list(filter(t2.__contains__, walk))
            deque(map(t2.move_to_end, in_t2), maxlen=0)
            if self._idle_t2:
                _mirror_moves(self._idle_t2, in_t2)
        if not (b1 or b2):
            self._touched = keys if settled else None
            return
        # What is held and not resident is a ghost.
        if not_in_t1 is None:
            not_in_t1 = list(filterfalse(t1.__contains__, walk))
        ghosts = list(filterfalse(t2.__contains__, not_in_t1)) if t2 else not_in_t1
        if ghosts and self._paper:
            for key in ghosts:
                self._see_ghost(key)
        elif ghosts:
            # vLLM adapts the target on every touch of a ghost; the list sizes
            # do not change during a touch, so neither do the deltas.
            settled = False
            for key in ghosts:
                if key in b1:
                    delta = max(1, len(b2) / len(b1))
                    self.target_t1_size = min(self.target_t1_size + delta, self.capacity)
                else:
                    delta = max(1, len(b1) / len(b2))
                    self.target_t1_size = max(self.target_t1_size - delta, 0)
            deque(map(b1.move_to_end, filter(b1.__contains__, ghosts)), maxlen=0)
            deque(map(b2.move_to_end, filter(b2.__contains__, ghosts)), maxlen=0)
        self._touched = keys if settled else None

    def _touch_one(self, key: Hashable) -> bool:
        """The touch of one key, as vLLM walks each key; True if repeating it changes nothing."""
        t1 = self.t1
        if key in t1:
            block = t1.pop(key)
            idle_t1 = self._idle_t1
            if block.ref_cnt < 0:
                t1[key] = block  # being written: not a second use
                if key in idle_t1:
                    idle_t1.move_to_end(key)
                return False
            self.t2[key] = block
            if key in idle_t1:
                self._idle_t2[key] = idle_t1.pop(key)
            elif key in self._unindexed:
                self._stale_t2 = True  # an idle block T2's index lacks
        elif key in self.t2:
            self.t2.move_to_end(key)
            if key in self._idle_t2:
                self._idle_t2.move_to_end(key)
        elif key not in self.keys_held:
            pass
        elif self._paper:
            self._see_ghost(key)
        else:
            b1, b2 = self.b1, self.b2
            if key in b1:
                delta = max(1, len(b2) / len(b1))
                self.target_t1_size = min(self.target_t1_size + delta, self.capacity)
                b1.move_to_end(key)
            else:
                delta = max(1, len(b1) / len(b2))
                self.target_t1_size = max(self.target_t1_size - delta, 0)
                b2.move_to_end(key)
            return False
        return True

    def _see_ghost(self, key: Hashable) -> None:
        """Paper variant: adapt ``p`` the first time a ghost's hit is seen."""
        b1, b2 = self.b1, self.b2
        if key in b1:
            if not b1[key]:
                b1[key] = True
                delta = max(1, len(b2) / len(b1))
                self.target_t1_size = min(self.target_t1_size + delta, self.capacity)
        elif key in b2 and not b2[key]:
            b2[key] = True
            delta = max(1, len(b1) / len(b2))
            self.target_t1_size = max(self.target_t1_size - delta, 0)

    # -- evict --------------------------------------------------------------

    def max_evictable(self) -> int | None:
        """At most the blocks ``evict`` may take from T1 (its room over the target, and
        no more than T1's idle blocks) plus T2's idle blocks; ``None`` for the paper variant.

        ``evict`` takes a run of idle T1 blocks no longer than
        ``len(t1) - int(target) + 1``, then only T2's idle blocks (see there),
        so asking for more refuses. Idle blocks are counted from the idle
        indexes, which with the blocks reported idle since hold every idle
        block (more, if a load pinned some since: the bound is only loose
        then); before tracking or its first rebuild, every block counts. The
        paper variant falls back to the other list and refuses only without
        ``n`` idle, unprotected blocks, which the tier's own count answers.
        """
        if self._paper:
            return None
        if self._tracking and not self._rebuild_all:
            unindexed = len(self._unindexed)
            idle_t1 = len(self._idle_t1) + unindexed
            idle_t2 = len(self._idle_t2) + unindexed
        else:
            idle_t1, idle_t2 = len(self.t1), len(self.t2)
        room = len(self.t1) - int(self.target_t1_size) + 1
        return max(0, min(room, idle_t1)) + idle_t2

    def evict(self, n: int, protected: Set[Hashable]) -> list[Victim] | None:
        if n == 0:
            return []
        if self._paper:
            return self._evict_paper(n, protected)
        # vLLM picks victim by victim: from T1 while the running |T1| (minus the
        # T1 victims so far) is >= int(target) and T1 has an evictable block,
        # else from T2. The running size only shrinks and the target is fixed
        # for the call, so once a victim comes from T2 all later ones do: the
        # victims are a run of T1 blocks, at most |T1| - int(target) + 1 of
        # them, then a run of T2 blocks. Choosing the two runs directly gives
        # the same victims in the same order without per-victim bookkeeping.
        t1, t2 = self.t1, self.t2
        # With idle tracking, the walks go over the idle indexes: every idle
        # block of a list is in its index, in the list's order, so the same
        # victims come first.
        walk_t1, walk_t2 = t1, t2
        if self._tracking:
            if self._stale_t1 or self._stale_t2:
                self._rebuild_idle()
            walk_t1, walk_t2 = self._idle_t1, self._idle_t2
        from_t1: list[Victim] = []
        room = min(n, len(t1) - int(self.target_t1_size) + 1)
        if room > 0:
            for key, block in walk_t1.items():
                if block.ref_cnt == 0 and key not in protected:
                    from_t1.append((key, block))
                    if len(from_t1) == room:
                        break
        from_t2: list[Victim] = []
        rest = n - len(from_t1)
        if rest:
            # No fallback from T2 to T1: with T1 below target and nothing
            # evictable in T2, vLLM's eviction fails.
            for key, block in walk_t2.items():
                if block.ref_cnt == 0 and key not in protected:
                    from_t2.append((key, block))
                    if len(from_t2) == rest:
                        break
            else:
                return None
        self._retire(from_t1, from_t2)
        if from_t2:
            from_t1 += from_t2
        return from_t1

    def _retire(self, from_t1: list[Victim], from_t2: list[Victim]) -> None:
        """The vLLM variant's victims leave their lists for the ghost lists, each
        ghost list then trimmed to the capacity on its own, as vLLM does (only here)."""
        t1, t2, b1, b2 = self.t1, self.t2, self.b1, self.b2
        self._touched = None
        for key, _ in from_t1:
            del t1[key]
            b1[key] = False
        for key, _ in from_t2:
            del t2[key]
            b2[key] = False
        if self._tracking:
            _drop(self._idle_t1, from_t1)
            _drop(self._idle_t2, from_t2)
        capacity = self.capacity
        discard = self.keys_held.discard
        for ghosts in (b1, b2):
            excess = len(ghosts) - capacity
            while excess > 0:
                discard(ghosts.popitem(last=False)[0])
                excess -= 1

    def _evict_paper(self, n: int, protected: Set[Hashable]) -> list[Victim] | None:
        b1, b2 = self.b1, self.b2
        saved_target = self.target_t1_size
        # The paper adapts p on a ghost hit *before* REPLACE. A caller that did
        # not touch the incoming key shows it here first, in ``protected``. A
        # batch's B1 hits all add the same delta (the list sizes do not change
        # while adapting), as its B2 hits all subtract the same one; B1 first
        # makes the clamped result independent of set order.
        unseen1: list[Hashable] = []
        unseen2: list[Hashable] = []
        if b1 or b2:
            for key in protected:
                if b1.get(key) is False:
                    unseen1.append(key)
                elif b2.get(key) is False:
                    unseen2.append(key)
        for key in unseen1:
            self._see_ghost(key)
        for key in unseen2:
            self._see_ghost(key)
        p = self.target_t1_size
        # REPLACE's tie rule: with |T1| == p, evict from T1 only if the
        # incoming key is a B2 ghost. The incoming keys are the protected ones.
        incoming_from_b2 = not b2.keys().isdisjoint(protected)
        chosen: list[tuple[Hashable, EvictableBlock, bool]] = []
        if self._tracking:
            if self._stale_t1 or self._stale_t2:
                self._rebuild_idle()
            t1_candidates = _evictable(self._idle_t1, protected)
            t2_candidates = _evictable(self._idle_t2, protected)
        else:
            t1_candidates = _evictable(self.t1, protected)
            t2_candidates = _evictable(self.t2, protected)
        virtual_t1_size = len(self.t1)
        for _ in range(n):
            from_t1 = virtual_t1_size >= 1 and (
                virtual_t1_size > p or (incoming_from_b2 and virtual_t1_size == p)
            )
            first, second = (
                (t1_candidates, t2_candidates) if from_t1 else (t2_candidates, t1_candidates)
            )
            pick = next(first, None)
            if pick is None:
                # The list REPLACE names has nothing evictable (in use,
                # protected, or empty): take the other list's LRU instead.
                pick = next(second, None)
                from_t1 = not from_t1
            if pick is None:
                # Atomic: undo the adaptation too.
                self.target_t1_size = saved_target
                for key in unseen1:
                    b1[key] = False
                for key in unseen2:
                    b2[key] = False
                return None
            if from_t1:
                virtual_t1_size -= 1
            chosen.append((*pick, from_t1))
        return self._apply_paper(chosen)

    def _apply_paper(self, chosen: list[tuple[Hashable, EvictableBlock, bool]]) -> list[Victim]:
        """Make the chosen victims ghosts. The paper variant trims ghosts on insert."""
        t1, t2, b1, b2 = self.t1, self.t2, self.b1, self.b2
        self._touched = None
        victims: list[Victim] = []
        for key, block, from_t1 in chosen:
            if from_t1:
                del t1[key]
                b1[key] = False
            else:
                del t2[key]
                b2[key] = False
            victims.append((key, block))
        if self._tracking:
            for key, _ in victims:
                self._idle_t1.pop(key, None)
                self._idle_t2.pop(key, None)
        return victims
