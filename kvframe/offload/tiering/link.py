"""A transfer path with a bandwidth its users share and a fixed latency.

A tier's copies queue on its :class:`Link`: a transfer starts when the link is
free, holds it for ``bytes / bandwidth``, and lands ``latency_s`` later. Tiers
that share one link -- every replica's view of a shared remote store -- share its
bandwidth, so loads and stores from several replicas at once wait for each other.
"""

from __future__ import annotations

import attrs

__all__ = ["Link"]


@attrs.define(slots=True)
class Link:
    """One FIFO transfer path.

    :param bandwidth: bytes per second (> 0).
    :param latency_s: seconds added to every transfer (network round trip, seek).
    """

    bandwidth: float
    latency_s: float = 0.0
    busy_until: float = 0.0
    bytes_moved: int = 0
    queued_s: float = 0.0
    """Seconds transfers waited for the link (the contention)."""

    def __attrs_post_init__(self) -> None:
        if not self.bandwidth > 0:
            raise ValueError(f"a link's bandwidth must be > 0 bytes/s, not {self.bandwidth}")
        if self.latency_s < 0:
            raise ValueError(f"a link's latency must be >= 0 s, not {self.latency_s}")

    def reserve(self, now: float, num_bytes: int) -> float:
        """Queue ``num_bytes`` at time ``now``; the time they land."""
        start = max(now, self.busy_until)
        self.queued_s += start - now
        self.busy_until = start + num_bytes / self.bandwidth
        self.bytes_moved += num_bytes
        return self.busy_until + self.latency_s
