"""Tiers below DRAM for an engine: ``--offload-tier`` config strings built into a chain.

Under the vLLM 0.33 target the DRAM tier's ledger may have tiers below it
(:class:`~kvframe.offload.tiering.TieringOffloadManager`, vLLM 0.33.0's tiering
manager). Each ``--offload-tier`` (``offload_tiers`` in ``kvframe.toml``, in
lookup order) names one::

    --offload-tier "disk:capacity=512GiB,bandwidth=4GB,latency=0.0001"
    --offload-tier "store:capacity=4TiB,bandwidth=3GB,latency=0.0005,shared=true"
    --offload-tier "store:capacity=4TiB,bandwidth=3GB,shared=true,mode=publish-only"

The name before the colon is the tier's name in metrics and events; the options
are :class:`TierOptions`'. A ``shared`` tier is one store for every replica of a
fleet (:mod:`kvframe.offload.tiering.shared`): one capacity, one eviction order,
one link whose bandwidth their loads and stores share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from kvframe.config import Bytes, ConfigError
from kvframe.config.grammar import parse_spec
from kvframe.config.options import bind_options
from kvframe.contract.bases import EvictionPolicy

if TYPE_CHECKING:
    from kvframe.contract.offload import OffloadContext
    from kvframe.host.registry import PluginRegistry
    from kvframe.offload.jobs.manager import RequestScopedOffloadManager
    from kvframe.offload.tiering import LedgerTier, SharedBacking, TieringOffloadManager

__all__ = ["TierOptions", "build_chain"]


class TierOptions:
    """The options of one tier below DRAM."""

    def __init__(
        self,
        *,
        capacity: Bytes,
        bandwidth: Bytes,
        latency: float = 0.0,
        eviction: str = "lru",
        store_threshold: int = 0,
        request_level: bool = False,
        shared: bool = False,
        mode: Literal["write-through", "publish-only"] = "write-through",
    ) -> None:
        """
        :param capacity: bytes the tier holds (whole chunks).
        :param bandwidth: bytes per second of the tier's link (shared by the
            replicas of a fleet for a ``shared`` tier).
        :param latency: seconds added to every copy (seek, network round trip).
        :param eviction: the tier's eviction policy, an eviction plugin with a
            request-scoped form (``lru``, ``arc``).
        :param store_threshold: the reuse filter of the tier: a chunk is written
            only once offered this many times (0 or 1: every chunk).
        :param request_level: the tier wants every chunk of a request, prefix
            hits included (vLLM's ``OffloadPolicy.REQUEST_LEVEL``).
        :param shared: one store for every replica of a fleet.
        :param mode: ``write-through`` (write every chunk DRAM takes, load from
            it) or ``publish-only`` (write, never load: a replica that feeds others).
        """
        if capacity <= 0:
            raise ValueError(f"capacity must be > 0 bytes, not {capacity}")
        if bandwidth <= 0:
            raise ValueError(f"bandwidth must be > 0 bytes per second, not {bandwidth}")
        if not latency >= 0:
            raise ValueError(f"latency must be >= 0 seconds, not {latency}")
        if store_threshold < 0:
            raise ValueError(f"store_threshold must be >= 0, not {store_threshold}")
        self.capacity = capacity
        self.bandwidth = bandwidth
        self.latency = float(latency)
        self.eviction = eviction
        self.store_threshold = store_threshold
        self.request_level = request_level
        self.shared = shared
        self.mode = mode


def build_chain(
    texts: Sequence[str],
    primary: RequestScopedOffloadManager,
    *,
    registry: PluginRegistry,
    context: OffloadContext,
    chunk_bytes: int,
    clock: Callable[[], float],
) -> TieringOffloadManager:
    """DRAM ``primary`` with a tier for each config string of ``texts`` below it, in order.

    :raises ConfigError: for a bad string, an unknown option or value, a tier
        holding no chunk, an eviction policy with no request-scoped form, or a
        shared tier whose options differ between replicas -- naming the string.
    """
    from kvframe.offload.tiering import TieringOffloadManager

    tiers = [_tier(text, registry, context, chunk_bytes, clock) for text in texts]
    names = [tier.name for tier in tiers]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise ConfigError(f"--offload-tier: two tiers are named {duplicate!r}; name each once")
    return TieringOffloadManager(primary, tiers, chunk_bytes=chunk_bytes)


def _tier(
    text: str,
    registry: PluginRegistry,
    context: OffloadContext,
    chunk_bytes: int,
    clock: Callable[[], float],
) -> LedgerTier:
    from kvframe.offload.tiering import LedgerTier

    spec = parse_spec(text, "offload", origin="--offload-tier")
    name = spec.name or str(spec.path)
    what = f"tier below DRAM {name!r}"
    try:
        options = TierOptions(**bind_options(TierOptions, spec, what=what))
    except ValueError as err:
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"{what}: {err}", origin="--offload-tier") from None
    num_chunks = options.capacity // chunk_bytes if chunk_bytes > 0 else 0
    if num_chunks < 1:
        raise ConfigError(
            f"{what}: capacity={options.capacity} bytes holds no chunk of {chunk_bytes} bytes",
            origin="--offload-tier",
        )
    signature = (
        num_chunks,
        options.bandwidth,
        options.latency,
        options.eviction,
        options.store_threshold,
    )
    try:
        if options.shared:
            from kvframe.offload.tiering.shared import backing_for

            backing = backing_for(
                name, signature, lambda: _backing(options, num_chunks, registry, signature)
            )
        else:
            backing = _backing(options, num_chunks, registry, signature)
    except ConfigError:
        raise
    except ValueError as err:
        raise ConfigError(f"{what}: {err}", origin="--offload-tier") from None
    return LedgerTier(
        name,
        backing.ledger,
        link=backing.link,
        clock=clock,
        chunk_bytes=chunk_bytes,
        request_level=options.request_level,
        loads=options.mode == "write-through",
    )


def _backing(
    options: TierOptions, num_chunks: int, registry: PluginRegistry, signature: tuple[object, ...]
) -> SharedBacking:
    """The tier's ledger (its eviction plugin's request-scoped form, its reuse filter) and link."""
    from kvframe.offload.jobs.manager import RequestScopedOffloadManager
    from kvframe.offload.tiering import Link, SharedBacking

    eviction = registry.resolve("eviction", options.eviction)
    cls = eviction.cls
    form = cls.request_scoped_form if issubclass(cls, EvictionPolicy) else None
    if form is None:
        raise ValueError(
            f"eviction policy {eviction.name!r} has no request-scoped form (lru and arc have one)"
        )
    ledger = RequestScopedOffloadManager(
        form(num_chunks, **dict(eviction.options)),
        num_chunks,
        store_threshold=options.store_threshold,
        max_tracker_size=64_000,
    )
    link = Link(bandwidth=float(options.bandwidth), latency_s=options.latency)
    return SharedBacking(ledger, link, signature)
