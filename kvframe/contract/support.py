"""Helpers an eviction policy may use to be fast; none changes what a policy decides.

:class:`TouchWalkCache` serves policies whose ``touch`` first drops the keys
they do not hold (``lru``, ``arc``). An offload tier's connector touches every
full block of a waiting request on each lookup, every step it waits, and most
of those keys are not in the tier: filtering them again each step was the
largest cost of a touch. :func:`claimed_max_evictable` tells a caller whether a
policy answers the optional ``max_evictable`` bound.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from kvframe.contract.bases import EvictionPolicy

__all__ = ["TouchWalkCache", "claimed_max_evictable"]


class TouchWalkCache:
    """The held keys of recently touched key lists, kept valid as keys come and go.

    ``walk(keys, holds)`` returns ``list(filter(holds, reversed(keys)))``:
    the keys of the touch a policy holds, in the order a touch walks them
    (duplicates kept). For a list it saw before (equal, element for element),
    it filters the short answer it gave then instead of the whole list. That
    is exact while the only way a key can start being held is an insert the
    policy reports with :meth:`inserted`: a key held now and not then was
    inserted since, so if no key inserted since is in the list, the keys held
    now are those held then that are still held.

    Costs: a hit compares the lists (in C, the elements are usually the same
    objects) and checks the keys inserted since against a set of the list's
    keys, built once per list; a miss is the plain filter. A list is cached
    the second time it is walked. Memory stays
    bounded by a multiple of ``capacity`` (the eviction contract): at most
    ``8 * capacity + 256`` cached keys, ``2 * capacity + 64`` logged inserts
    and ``capacity + 64`` signatures of lists seen once; past a bound, it
    forgets what that bound limits and starts again.
    """

    __slots__ = (
        "_entries",
        "_num_cached",
        "_seen",
        "log",
        "max_cached",
        "max_log",
        "max_seen",
        "min_length",
    )

    def __init__(self, capacity: int, *, min_length: int = 32) -> None:
        self.min_length = min_length
        """Shorter lists are filtered directly (a cache lookup would cost more)."""
        self.max_cached = 8 * capacity + 256
        self.max_log = 2 * capacity + 64
        self._num_cached = 0
        self.max_seen = capacity + 64
        self._seen: set[tuple[int, Hashable, Hashable]] = set()
        """Signatures of lists walked once (a list is cached when it comes again)."""
        self.log: list[Hashable] = []
        """Keys inserted since the cache last forgot everything (:meth:`inserted` adds)."""
        self._entries: dict[
            tuple[int, Hashable, Hashable], tuple[list[Hashable], list[Hashable], int, set | None]
        ] = {}
        """(length, first, last) -> (the list, its held keys, ``len(log)`` then, its key set)."""

    def inserted(self, key: Hashable) -> None:
        """The policy started holding ``key``: every insert must be reported."""
        log = self.log
        log.append(key)
        if len(log) > self.max_log:
            self.clear()

    def clear(self) -> None:
        self._entries.clear()
        self._num_cached = 0
        self._seen.clear()
        self.log.clear()

    def walk(self, keys: list[Hashable], holds: Callable[[Hashable], bool]) -> list[Hashable]:
        """``list(filter(holds, reversed(keys)))``.

        Neither ``keys`` nor the list returned may be changed afterwards: both
        are kept.
        """
        if len(keys) < self.min_length:
            return list(filter(holds, reversed(keys)))
        log = self.log
        entries = self._entries
        signature = (len(keys), keys[0], keys[-1])
        entry = entries.get(signature)
        if entry is not None and entry[0] == keys:
            cached, held, seen, key_set = entry
            if len(log) > seen:
                if key_set is None:
                    key_set = set(cached)
                if any(map(key_set.__contains__, log[seen:])):
                    entry = None
            if entry is not None:
                held = list(filter(holds, held))
                entries[signature] = (cached, held, len(log), key_set)
                return held
        held = list(filter(holds, reversed(keys)))
        if entry is None and signature not in self._seen:
            # Cached from the second sighting on: the touch after each store
            # names a list one block longer every time, and would push out
            # the lists that do repeat (a waiting request's).
            if len(self._seen) >= self.max_seen:
                self._seen.clear()
            self._seen.add(signature)
            return held
        replaced = entries.get(signature)
        self._num_cached += len(keys) - (len(replaced[0]) if replaced is not None else 0)
        if self._num_cached > self.max_cached:
            entries.clear()
            self._num_cached = len(keys)
        entries[signature] = (keys, held, len(log), None)
        return held


def claimed_max_evictable(policy: object) -> Callable[[], int | None] | None:
    """``policy.max_evictable`` if the policy's class overrides the base's, else ``None``.

    The base's answer claims nothing, so callers that would ask it per store
    (the offload ledger) or per ``evict`` (the conformance suite) skip the
    question for a policy that inherits it.
    """
    own = getattr(type(policy), "max_evictable", None)
    if own is None or own is EvictionPolicy.max_evictable:
        return None
    return policy.max_evictable  # type: ignore[attr-defined, no-any-return]
