"""Prefix indexes a router keeps: which replica holds how much of a request's prefix.

Two indexes, both answering the same question -- for each replica, how many of
the request's leading blocks it holds -- from different signals:

* :class:`KVPrefixIndex` is built from the KV events the replicas publish
  (``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared``): what NVIDIA
  Dynamo's KV router keeps in its ``RadixTree`` indexer.
* :class:`ApproxPrefixIndex` is built from the router's own decisions: a
  request sent to a replica is assumed cached there for ``ttl`` seconds of
  virtual time (Dynamo's ``ApproxKvIndexer``, its ``--no-kv-events`` mode).

Why a dict of hashes and not a tree: kvframe's block hashes are *chained*
(each one hashes its parent's hash with its tokens, as vLLM's do), so a hash
names its whole prefix. A replica holds the first ``k`` blocks of a request
exactly when it holds each of their hashes, and the walk Dynamo's radix tree
makes from the root (keep the workers that hold every block so far; a worker's
score is the depth where it dropped out) is a walk over the request's hashes in
a flat map. Owners are an ``int`` bit mask per hash, so each step of the walk is
one dict lookup and one ``&`` whatever the fleet's size. Semantics pinned to
Dynamo's ``RadixTree``: a hash stored twice on one replica and removed once is
gone (no reference count), ``AllBlocksCleared`` empties the replica, and only
the GPU medium counts (offload tiers publish their own medium; a router that
wants them passes ``media``).

Both run on the fleet's arrival path, once per request: ``overlaps`` costs one
lookup per matched block plus one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from kvframe.contract.records import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

__all__ = ["ApproxPrefixIndex", "KVPrefixIndex"]


def _walk(owners: dict[bytes, int], hashes: Sequence[bytes], num_replicas: int) -> list[int]:
    """Per replica, the number of leading ``hashes`` whose owner masks include it."""
    scores = [0] * num_replicas
    active = (1 << num_replicas) - 1
    depth = 0
    get = owners.get
    for block_hash in hashes:
        held = get(block_hash, 0) & active
        dropped = active & ~held
        while dropped:
            low = dropped & -dropped
            scores[low.bit_length() - 1] = depth
            dropped ^= low
        active = held
        if not active:
            return scores
        depth += 1
    while active:
        low = active & -active
        scores[low.bit_length() - 1] = depth
        active ^= low
    return scores


class KVPrefixIndex:
    """Which replica holds which block, from the replicas' KV events (Dynamo's indexer).

    :param num_replicas: replicas are numbered ``0 .. num_replicas - 1``.
    :param media: the media whose events count (``"GPU"``: the replicas' prefix
        caches, as Dynamo's router indexes them).
    """

    __slots__ = ("_held", "_media", "_owners", "num_replicas")

    def __init__(self, num_replicas: int, *, media: Iterable[str] = ("GPU",)) -> None:
        if num_replicas < 1:
            raise ValueError(f"KVPrefixIndex: num_replicas must be >= 1, not {num_replicas}")
        self.num_replicas = num_replicas
        self._media = frozenset(media)
        self._owners: dict[bytes, int] = {}
        """Block hash -> bit mask of the replicas that hold it."""
        self._held: list[set[bytes]] = [set() for _ in range(num_replicas)]
        """Per replica, the hashes it holds: which of an event's blocks change anything
        is a set operation (in C), and its size is Dynamo's tree size."""

    def apply(self, replica: int, event: KVEvent) -> None:
        """Apply one event ``replica`` published."""
        if event.medium not in self._media:
            return
        if not 0 <= replica < self.num_replicas:
            raise ValueError(
                f"KVPrefixIndex.apply: replica {replica} outside 0..{self.num_replicas - 1}"
            )
        if type(event) is BlockStored:
            self._store(replica, event.block_hashes)
        elif type(event) is BlockRemoved:
            self._remove(replica, event.block_hashes)
        elif type(event) is AllBlocksCleared:
            self.clear(replica)
        else:
            raise TypeError(f"KVPrefixIndex.apply: not a KV event: {event!r}")

    def apply_all(self, replica: int, events: Sequence[KVEvent]) -> None:
        """Apply ``events`` of ``replica`` in order: the same index as :meth:`apply` on
        each, with each run of consecutive stores (removals) applied as one.

        Why: replicas publish one ``BlockRemoved`` per evicted block, and per-event
        calls were most of a ``dynamo-kv`` fleet's index time (``benchmarks/fleet_scale.py``).
        Storing (removing) ``A`` then ``B`` is storing (removing) ``A | B``: a store
        only adds what is not held, a removal only drops what is.
        """
        media = self._media
        run_type: type | None = None
        run: list[bytes] = []
        for event in events:
            kind = type(event)
            if kind is BlockStored or kind is BlockRemoved:
                if event.medium not in media:
                    continue
                if kind is not run_type:
                    self._flush(replica, run_type, run)
                    run_type, run = kind, []
                run.extend(event.block_hashes)
            else:
                self._flush(replica, run_type, run)
                run_type, run = None, []
                self.apply(replica, event)
        self._flush(replica, run_type, run)

    def _flush(self, replica: int, kind: type | None, hashes: list[bytes]) -> None:
        """Store or remove ``hashes`` on ``replica`` (a run of :meth:`apply_all`)."""
        if kind is None or not hashes:
            return
        if not 0 <= replica < self.num_replicas:
            raise ValueError(
                f"KVPrefixIndex.apply: replica {replica} outside 0..{self.num_replicas - 1}"
            )
        if kind is BlockStored:
            self._store(replica, hashes)
        else:
            self._remove(replica, hashes)

    def _store(self, replica: int, hashes: Iterable[bytes]) -> None:
        bit = 1 << replica
        owners, held = self._owners, self._held[replica]
        new = set(hashes)
        new -= held
        held |= new
        get = owners.get
        for block_hash in new:
            owners[block_hash] = get(block_hash, 0) | bit

    def _remove(self, replica: int, hashes: Iterable[bytes]) -> None:
        bit = 1 << replica
        owners, held = self._owners, self._held[replica]
        gone = held.intersection(hashes)
        held -= gone
        for block_hash in gone:
            mask = owners[block_hash] ^ bit
            if mask:
                owners[block_hash] = mask
            else:
                del owners[block_hash]

    def clear(self, replica: int) -> None:
        """Forget every block of ``replica`` (it reset its prefix cache)."""
        keep = ~(1 << replica)
        owners = self._owners
        for block_hash in self._held[replica]:
            mask = owners[block_hash] & keep
            if mask:
                owners[block_hash] = mask
            else:
                del owners[block_hash]
        self._held[replica] = set()

    def overlaps(self, hashes: Sequence[bytes]) -> list[int]:
        """Per replica, how many of ``hashes``' leading blocks it holds."""
        return _walk(self._owners, hashes, self.num_replicas)

    def size(self, replica: int) -> int:
        """Blocks ``replica`` holds, as far as its events say."""
        return len(self._held[replica])

    def holds(self, replica: int, block_hash: bytes) -> bool:
        return block_hash in self._held[replica]


class ApproxPrefixIndex:
    """Which replica probably holds which block, from the router's own decisions.

    Dynamo's ``ApproxKvIndexer``: routing a request to a replica records its
    blocks there; a record expires ``ttl`` seconds (virtual time) after the
    last request that carried it. No KV event is read, so evictions the
    replica made earlier are unknown to it.

    :param ttl: seconds a routed block is assumed to stay cached (Dynamo: 120).
    """

    __slots__ = ("_expiry", "_owners", "_queue", "num_replicas", "ttl")

    def __init__(self, num_replicas: int, *, ttl: float = 120.0) -> None:
        if num_replicas < 1:
            raise ValueError(f"ApproxPrefixIndex: num_replicas must be >= 1, not {num_replicas}")
        if not ttl > 0:
            raise ValueError(f"ApproxPrefixIndex: ttl must be > 0 seconds, not {ttl}")
        self.num_replicas = num_replicas
        self.ttl = ttl
        self._owners: dict[bytes, int] = {}
        self._expiry: list[dict[bytes, float]] = [{} for _ in range(num_replicas)]
        """Per replica: hash -> when its record expires (the latest routing wins)."""
        self._queue: deque[tuple[float, int, Sequence[bytes]]] = deque()
        """One entry per routing, in order (expiry times are non-decreasing): a record
        whose expiry moved on since is skipped when its entry comes up."""

    def expire(self, now: float) -> None:
        """Drop the records whose time is up (called by :meth:`overlaps` and :meth:`record`)."""
        queue, owners = self._queue, self._owners
        while queue and queue[0][0] <= now:
            when, replica, hashes = queue.popleft()
            expiry, keep = self._expiry[replica], ~(1 << replica)
            for block_hash in hashes:
                if expiry.get(block_hash) == when:
                    del expiry[block_hash]
                    mask = owners[block_hash] & keep
                    if mask:
                        owners[block_hash] = mask
                    else:
                        del owners[block_hash]

    def record(self, replica: int, hashes: Sequence[bytes], now: float) -> None:
        """``replica`` was sent a request with these blocks at ``now``."""
        self.expire(now)
        when = now + self.ttl
        expiry, owners, bit = self._expiry[replica], self._owners, 1 << replica
        get = owners.get
        for block_hash in hashes:
            if block_hash not in expiry:
                owners[block_hash] = get(block_hash, 0) | bit
            expiry[block_hash] = when
        self._queue.append((when, replica, hashes))

    def overlaps(self, hashes: Sequence[bytes], now: float) -> list[int]:
        """Per replica, how many of ``hashes``' leading blocks it probably holds at ``now``."""
        self.expire(now)
        return _walk(self._owners, hashes, self.num_replicas)

    def size(self, replica: int) -> int:
        return len(self._expiry[replica])
