"""The vocabulary of a disaggregated fleet: which replicas prefill and decode, and the links.

Kept on the lowest floor so that the engine's config can check ``--disagg`` and
``--disagg-link`` where it checks every other key; the fleet
(:mod:`kvframe.fleet.disagg`, :mod:`kvframe.fleet.transfer`) runs them.
"""

from __future__ import annotations

import math

import attrs

__all__ = ["LINKS", "DisaggLayout", "LinkSpec"]

PREFILL, DECODE, AGGREGATED = "prefill", "decode", "aggregated"


@attrs.frozen(slots=True)
class LinkSpec:
    """One kind of link: its bandwidth (bytes per second) and latency (seconds)."""

    name: str
    bandwidth: float
    latency: float

    def __attrs_post_init__(self) -> None:
        if not (math.isfinite(self.bandwidth) and self.bandwidth > 0):
            raise ValueError(
                f"link {self.name!r}: bandwidth must be > 0 bytes/s, got {self.bandwidth!r}"
            )
        if not (math.isfinite(self.latency) and self.latency >= 0):
            raise ValueError(f"link {self.name!r}: latency must be >= 0 s, got {self.latency!r}")


LINKS: dict[str, LinkSpec] = {
    # One 400 Gb/s RDMA NIC per replica (InfiniBand NDR / RoCE), a few microseconds.
    "rdma": LinkSpec("rdma", 400e9 / 8, 5e-6),
    # NVLink 4 within a node (H100/H200: 900 GB/s bidirectional, 450 GB/s each way).
    "nvlink": LinkSpec("nvlink", 450e9, 2e-6),
}
"""The named links of ``disagg_link``; ``disagg_bandwidth`` / ``disagg_latency`` override."""


@attrs.frozen(slots=True)
class DisaggLayout:
    """Which replica plays which role: replicas ``0..P-1`` prefill, ``P..P+D-1`` decode,
    the rest aggregated."""

    num_prefill: int
    num_decode: int
    num_replicas: int

    @classmethod
    def parse(cls, text: object, replicas: int) -> DisaggLayout:
        """``"P:D"`` for a fleet of ``replicas``.

        :raises ValueError: naming ``--disagg`` for a malformed ratio, a zero, or more
            prefill and decode replicas than the fleet has.
        """
        parts = text.split(":") if isinstance(text, str) else []
        try:
            p, d = (int(part) for part in parts)
        except ValueError:
            raise ValueError(
                f"--disagg expects P:D (prefill:decode replicas, e.g. 2:6), got {text!r}"
            ) from None
        if p < 1 or d < 1:
            raise ValueError(f"--disagg {text}: needs at least one prefill and one decode replica")
        if p + d > replicas:
            raise ValueError(
                f"--disagg {text} asks for {p + d} replicas but the fleet has {replicas} "
                f"(--replicas {replicas}); P + D must be at most --replicas, the rest run "
                "aggregated"
            )
        return cls(p, d, replicas)

    @property
    def num_aggregated(self) -> int:
        return self.num_replicas - self.num_prefill - self.num_decode

    @property
    def roles(self) -> tuple[str, ...]:
        """Each replica's role, by index."""
        return (
            (PREFILL,) * self.num_prefill
            + (DECODE,) * self.num_decode
            + (AGGREGATED,) * self.num_aggregated
        )
