"""Shared helpers for the KV-cache core tests.

``OrderedLRUPolicy`` is a deliberately naive, test-only LRU
:class:`kvframe.EvictionPolicy` (the real ``lru`` plugin lives elsewhere): it
lets the tests run the policy-ordered block pool and compare it with the
default pool's built-in LRU.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Set

import pytest

from kvframe import EvictionPolicy
from kvframe.contract.views import EvictableBlock


class OrderedLRUPolicy(EvictionPolicy):
    """LRU over an OrderedDict: front = least recently used."""

    name = "test-lru"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.entries: OrderedDict[Hashable, EvictableBlock] = OrderedDict()

    def get(self, key: Hashable) -> EvictableBlock | None:
        return self.entries.get(key)

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        assert key not in self.entries, f"duplicate insert of {key!r}"
        assert len(self.entries) < self.capacity, "capacity exceeded"
        self.entries[key] = block

    def remove(self, key: Hashable) -> None:
        del self.entries[key]

    def touch(self, keys: Iterable[Hashable]) -> None:
        # The first key is the most important, so it must end up last.
        for key in reversed(list(keys)):
            if key in self.entries:
                self.entries.move_to_end(key)

    def evict(
        self, n: int, protected: Set[Hashable]
    ) -> list[tuple[Hashable, EvictableBlock]] | None:
        victims = []
        for key, block in self.entries.items():
            if len(victims) == n:
                break
            if block.ref_cnt == 0 and key not in protected:
                victims.append((key, block))
        if len(victims) < n:
            return None
        for key, _ in victims:
            del self.entries[key]
        return victims


@pytest.fixture
def lru_policy_cls() -> type[OrderedLRUPolicy]:
    return OrderedLRUPolicy
