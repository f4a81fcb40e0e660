"""How long a KV transfer between two replicas takes: links, bandwidth, latency, contention.

A disaggregated fleet (:mod:`kvframe.fleet.disagg`) moves a request's KV blocks
from the prefill replica that computed them to the decode replica that loads
them. :class:`TransferModel` times those moves on the fleet's virtual clock:

* **bytes** -- a transfer moves ``num_blocks x bytes_per_block`` bytes; the
  bytes of a block come from the model shape
  (:meth:`ModelShape.kv_bytes_per_block <kvframe.domain.costs.ModelShape.kv_bytes_per_block>`:
  K and V of every layer). Only the blocks the decode side's own prefix cache
  missed move.
* **links** -- every transfer runs on one *link*, the sending replica's
  network interface (NIXL's pull model: the decode side reads from the
  prefill side, so one prefill replica serving several decode replicas is
  where transfers meet). A link has a bandwidth (bytes per second) and a
  latency (seconds).
* **contention** -- the transfers on one link share its bandwidth fairly
  over time (processor sharing): with ``k`` transfers in flight each moves
  at ``bandwidth / k``; when one finishes the others speed up. A transfer
  is done ``latency`` seconds after its last byte left.
* **per-layer pipelining** (optional) -- the prefill side sends each layer's
  KV as soon as the layer is computed, so by the time the prefill finishes
  all but the last layer's bytes are assumed to have moved already (the link
  kept up with the forward pass); only ``1 / num_layers`` of the bytes remain
  exposed after the prefill. All bytes still count in the totals.

Invariants (``tests/fleet/test_transfer.py`` checks them with Hypothesis):
every byte started is delivered once; no transfer is done before
``start + exposed_bytes / bandwidth + latency``; a link never carries more
than its bandwidth; adding a transfer never makes another finish earlier.

Times are monotonic per link: a transfer that a replica starts at a time the
link has already passed (another replica's step, processed first on the
fleet's clock, looked further ahead) starts at the link's clock. The fleet
steps replicas in start-time order, so this is at most one step late.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

import attrs

from kvframe.domain.disagg import LINKS, LinkSpec

__all__ = ["LINKS", "LinkSpec", "TransferModel", "TransferStats"]

_EPS = 1e-9
"""Bytes below which a transfer counts as sent (float residue of the fair shares)."""


@attrs.define(slots=True)
class TransferStats:
    """What moved over the run: bytes, transfers and each link's busy time."""

    num_transfers: int = 0
    num_blocks: int = 0
    bytes: int = 0
    """Every byte of every transfer started (pipelined bytes included)."""
    exposed_bytes: float = 0.0
    """The bytes that moved after their prefill finished (all, without pipelining)."""
    busy_seconds: dict[Hashable, float] = attrs.field(factory=dict)
    """Per link: seconds during which at least one transfer was in flight on it."""


class _Link:
    """One link's transfers in flight under processor sharing, advanced in time order."""

    __slots__ = ("active", "clock")

    def __init__(self, clock: float) -> None:
        self.clock = clock
        self.active: dict[Hashable, float] = {}
        """Transfer id -> bytes still to send."""

    def advance(self, to: float, bandwidth: float) -> tuple[list[tuple[Hashable, float]], float]:
        """Move the clock to ``to``: the transfers whose last byte left by then (with the
        time it left), and the seconds the link was busy."""
        done: list[tuple[Hashable, float]] = []
        busy = 0.0
        active = self.active
        while active and self.clock < to:
            share = bandwidth / len(active)
            smallest = min(active.values())
            finish = self.clock + smallest / share
            if finish <= to:
                # The smallest transfers finish: subtract exactly their bytes, so each
                # pass removes at least one (no float stall).
                busy += finish - self.clock
                self.clock = finish
                for tid, left in list(active.items()):
                    left -= smallest
                    if left <= _EPS:
                        del active[tid]
                        done.append((tid, finish))
                    else:
                        active[tid] = left
                continue
            sent = (to - self.clock) * share
            busy += to - self.clock
            self.clock = to
            for tid, left in list(active.items()):
                active[tid] = max(left - sent, _EPS * 2)
        if self.clock < to:
            self.clock = to
        return done, busy

    def predicted(self, bandwidth: float) -> dict[Hashable, float]:
        """When each transfer in flight sends its last byte if no other joins."""
        out: dict[Hashable, float] = {}
        left = sorted(self.active.items(), key=lambda item: item[1])
        clock = self.clock
        sent = 0.0
        k = len(left)
        for i, (tid, remaining) in enumerate(left):
            clock += (remaining - sent) * (k - i) / bandwidth
            sent = remaining
            out[tid] = clock
        return out


class TransferModel:
    """Transfers between replicas on shared links (module docstring).

    :param link: bandwidth and latency of every replica's link.
    :param bytes_per_block: bytes one KV block moves (from the model shape).
    :param pipeline_layers: ``None``, or the model's layer count for per-layer
        pipelining (only ``1 / pipeline_layers`` of the bytes are exposed).
    """

    def __init__(
        self, link: LinkSpec, bytes_per_block: int, *, pipeline_layers: int | None = None
    ) -> None:
        if bytes_per_block < 1:
            raise ValueError(f"bytes_per_block must be >= 1, got {bytes_per_block}")
        if pipeline_layers is not None and pipeline_layers < 1:
            raise ValueError(f"pipeline_layers must be >= 1, got {pipeline_layers}")
        self.link = link
        self.bytes_per_block = bytes_per_block
        self.pipeline_layers = pipeline_layers
        self.stats = TransferStats()
        self._links: dict[Hashable, _Link] = {}
        self._link_of: dict[Hashable, Hashable] = {}
        self._done: dict[Hashable, float] = {}
        """Transfer id -> when it is done (last byte plus latency)."""

    def start(self, tid: Hashable, link: Hashable, num_blocks: int, now: float) -> float:
        """Start transfer ``tid`` of ``num_blocks`` blocks on ``link`` at ``now``; returns
        the time it actually starts (the link's clock, if that is later)."""
        if tid in self._link_of or tid in self._done:
            raise ValueError(f"transfer {tid!r} started twice")
        state = self._links.get(link)
        if state is None:
            state = self._links[link] = _Link(now)
        self._advance(link, state, now)
        start = max(now, state.clock)
        total = num_blocks * self.bytes_per_block
        exposed = total if self.pipeline_layers is None else total / self.pipeline_layers
        stats = self.stats
        stats.num_transfers += 1
        stats.num_blocks += num_blocks
        stats.bytes += total
        stats.exposed_bytes += exposed
        if exposed <= _EPS:
            self._done[tid] = start + self.link.latency
        else:
            state.active[tid] = exposed
            self._link_of[tid] = link
        return start

    def _advance(self, link: Hashable, state: _Link, to: float) -> None:
        done, busy = state.advance(to, self.link.bandwidth)
        if busy:
            stats = self.stats.busy_seconds
            stats[link] = stats.get(link, 0.0) + busy
        latency = self.link.latency
        for tid, at in done:
            del self._link_of[tid]
            self._done[tid] = at + latency

    def done_by(self, tid: Hashable, now: float) -> bool:
        """Whether transfer ``tid`` is done at ``now`` (its link advanced to ``now``)."""
        link = self._link_of.get(tid)
        if link is not None:
            state = self._links[link]
            if state.clock < now:
                self._advance(link, state, now)
        at = self._done.get(tid)
        return at is not None and at <= now

    def done_at(self, tid: Hashable) -> float | None:
        """When ``tid`` was done, once known (``None``: still in flight or unknown)."""
        return self._done.get(tid)

    def expected(self, tid: Hashable) -> float:
        """When ``tid`` is done if no other transfer joins its link (``inf``: unknown).
        Joining transfers only delay it, so a replica may sleep until then."""
        at = self._done.get(tid)
        if at is not None:
            return at
        link = self._link_of.get(tid)
        if link is None:
            return math.inf
        return self._links[link].predicted(self.link.bandwidth)[tid] + self.link.latency

    def forget(self, tid: Hashable) -> None:
        """Drop a done transfer's record (both sides have seen it)."""
        self._done.pop(tid, None)

    def utilisation(self, duration: float) -> dict[Hashable, float]:
        """Per link: busy seconds over ``duration`` (0..1)."""
        if duration <= 0:
            return {link: 0.0 for link in self.stats.busy_seconds}
        return {link: busy / duration for link, busy in self.stats.busy_seconds.items()}
