"""ARC as vLLM 0.33.0 runs it: frequency learned from a request's reuses, at its finish.

vLLM 0.33.0's ``ARCCachePolicy`` (``vllm/v1/kv_offload/cpu/policies/arc.py``,
request-scoped since PR #51787, 0.31) keeps 0.19.1's lists -- T1 (seen once),
T2 (seen again), ghosts B1 / B2, an adaptive ``target_t1_size`` -- but learns
at other moments:

* a chunk moves T1 -> T2 only when a request *reused* it (loaded it, or found
  it ready in its store offer), once, when that request finishes; the chunks
  it only inserted are moved to the recent end of the list they are in; the
  walk goes tail to head (head most recent);
* a ghost hit (a key in B1 or B2) adapts ``target_t1_size`` when the key is a
  *store miss* of a request (once per request and key), before its insert
  removes the ghost; a plain ``touch`` still does everything 0.19.1's did;
* ``evict`` takes from T1 while T1 is at or over the target, else from T2,
  and falls back to T1 when T2 has nothing evictable (0.19.1 refused there),
  so it refuses only when fewer than ``n`` chunks are evictable at all;
  the ghosts are then trimmed to the capacity.

For ``RequestScopedOffloadManager``; ``ARCPolicy`` stays 0.19.1's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Hashable, Iterable, Iterator, Sequence
from typing import Any

__all__ = ["RequestARCPolicy"]


class RequestARCPolicy:
    """vLLM 0.33.0's ARC cache policy."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.target_t1_size = 0.0
        self.t1: OrderedDict[Hashable, Any] = OrderedDict()
        self.t2: OrderedDict[Hashable, Any] = OrderedDict()
        self.b1: OrderedDict[Hashable, None] = OrderedDict()
        self.b2: OrderedDict[Hashable, None] = OrderedDict()

    def get(self, key: Hashable) -> Any:
        block = self.t1.get(key)
        return block if block is not None else self.t2.get(key)

    def insert(self, key: Hashable, block: Any, access: Any) -> None:
        self.t1[key] = block
        self.b1.pop(key, None)
        self.b2.pop(key, None)

    def remove(self, key: Hashable) -> None:
        if self.t1.pop(key, None) is None:
            self.t2.pop(key, None)

    def _adapt_to_ghost_hit(self, key: Hashable) -> None:
        if key in self.b1:
            delta = max(1, len(self.b2) / len(self.b1))
            self.target_t1_size = min(self.target_t1_size + delta, self.capacity)
            self.b1.move_to_end(key)
        elif key in self.b2:
            delta = max(1, len(self.b1) / len(self.b2))
            self.target_t1_size = max(self.target_t1_size - delta, 0)
            self.b2.move_to_end(key)

    def on_store_miss(self, keys: Sequence[Hashable], access: Any) -> None:
        for key in reversed(list(keys)):
            self._adapt_to_ghost_hit(key)

    def on_request_access(self, keys: Sequence[Hashable], access: Any) -> None:
        return

    def touch(self, keys: Iterable[Hashable], access: Any = None) -> None:
        for key in reversed(list(keys)):
            if key in self.t1:
                block = self.t1.pop(key)
                if block.ref_cnt < 0:
                    self.t1[key] = block  # being written: not a second use
                else:
                    self.t2[key] = block
            elif key in self.t2:
                self.t2.move_to_end(key)
            else:
                self._adapt_to_ghost_hit(key)

    def on_request_finished(
        self,
        keys: Sequence[Hashable],
        insertion_only: Collection[Hashable],
        reused: Collection[Hashable],
        access: Any,
    ) -> None:
        t1, t2 = self.t1, self.t2
        for key in reversed(list(keys)):
            if key in insertion_only:
                if key in t1:
                    t1.move_to_end(key)
                elif key in t2:
                    t2.move_to_end(key)
                continue
            if key in reused:
                if key in t1:
                    t2[key] = t1.pop(key)
                elif key in t2:
                    t2.move_to_end(key)

    def evict(self, n: int, protected: Collection[Hashable]) -> list[tuple[Hashable, Any]] | None:
        if n == 0:
            return []

        def next_candidate(entries: Iterator[tuple[Hashable, Any]]) -> tuple[Hashable, Any] | None:
            for key, block in entries:
                if block.ref_cnt == 0 and key not in protected:
                    return key, block
            return None

        candidates: list[tuple[Hashable, Any, bool]] = []
        virtual_t1 = len(self.t1)
        t1_iter = iter(self.t1.items())
        t2_iter = iter(self.t2.items())
        for _ in range(n):
            candidate: tuple[Hashable, Any, bool] | None = None
            if virtual_t1 >= int(self.target_t1_size):
                entry = next_candidate(t1_iter)
                if entry is not None:
                    candidate = (*entry, True)
                    virtual_t1 -= 1
            if candidate is None:
                entry = next_candidate(t2_iter)
                if entry is not None:
                    candidate = (*entry, False)
            if candidate is None:
                entry = next_candidate(t1_iter)
                if entry is None:
                    return None
                candidate = (*entry, True)
                virtual_t1 -= 1
            candidates.append(candidate)
        victims = []
        for key, block, from_t1 in candidates:
            if from_t1:
                del self.t1[key]
                self.b1[key] = None
            else:
                del self.t2[key]
                self.b2[key] = None
            victims.append((key, block))
        for ghost in (self.b1, self.b2):
            for _ in range(len(ghost) - self.capacity):
                ghost.popitem(last=False)
        return victims

    def mark_evictable(self, key: Hashable) -> None:
        return

    def mark_non_evictable(self, key: Hashable) -> None:
        return

    def clear(self) -> None:
        self.t1.clear()
        self.t2.clear()
        self.b1.clear()
        self.b2.clear()
        self.target_t1_size = 0.0
