"""S3-FIFO in vLLM 0.33.0's CPU tier (``kvframe run --vllm 0.33 --offload cpu:...``).

vLLM 0.33.0's tier drives its cache policy per request
(:class:`kvframe.RequestScopedPolicy`) instead of through the five operations,
so :class:`~kvframe_s3fifo.S3FIFOPolicy` offers this form through
``request_scoped_form``, written as docs/plugin-authors.md ("vLLM 0.33: the
request-scoped seams") shows: it keeps an :class:`S3FIFOPolicy` and forwards
the tier's calls to it. What differs is *when* a use is counted: vLLM 0.33.0's
policies learn when a request finishes, so a request's reuses (the chunks it
loaded, or found ready when it offered them for storing) each count one use
then -- S3-FIFO's ``touch`` -- in the request's order, head first. A chunk a
request only stored is no use of it. The plain policy's ``evict`` reads
``ref_cnt``, which the tier keeps exactly as in 0.19.1's ledger, so the idle
reports need nothing, and S3-FIFO never refuses with enough idle blocks.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvframe import EvictableBlock, RequestAccess
    from kvframe_s3fifo import S3FIFOPolicy

__all__ = ["RequestScopedS3FIFO"]


class RequestScopedS3FIFO:
    """S3-FIFO as a :class:`kvframe.RequestScopedPolicy`: reuses count at the request's finish."""

    def __init__(self, capacity: int, **options: Any) -> None:
        self.capacity = capacity
        self.options = options
        self.plain = self._new_plain()

    def _new_plain(self) -> S3FIFOPolicy:
        from kvframe_s3fifo import S3FIFOPolicy

        return S3FIFOPolicy(self.capacity, **self.options)

    def get(self, key: Hashable) -> EvictableBlock | None:
        return self.plain.get(key)

    def insert(self, key: Hashable, block: EvictableBlock, access: RequestAccess) -> None:
        self.plain.insert(key, block)

    def remove(self, key: Hashable) -> None:
        self.plain.remove(key)

    def evict(
        self, n: int, protected: Collection[Hashable]
    ) -> list[tuple[Hashable, EvictableBlock]] | None:
        return self.plain.evict(n, frozenset(protected))

    def on_store_miss(self, keys: Sequence[Hashable], access: RequestAccess) -> None:
        """Nothing: a ghost comes back to ``main`` at its ``insert`` already."""

    def on_request_access(self, keys: Sequence[Hashable], access: RequestAccess) -> None:
        """Nothing: uses are counted when the request finishes."""

    def on_request_finished(
        self,
        keys: Sequence[Hashable],
        insertion_only: Collection[Hashable],
        reused: Collection[Hashable],
        access: RequestAccess,
    ) -> None:
        self.plain.touch(key for key in keys if key in reused)

    def mark_evictable(self, key: Hashable) -> None:
        """Nothing: ``evict`` reads ``ref_cnt``."""

    def mark_non_evictable(self, key: Hashable) -> None:
        """Nothing: ``evict`` reads ``ref_cnt``."""

    def clear(self) -> None:
        self.plain = self._new_plain()
