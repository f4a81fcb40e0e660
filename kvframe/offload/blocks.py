"""The ledger's record of one block in a tier, shared by both releases' managers.

vLLM 0.19.1's slot manager (:mod:`kvframe.offload.slots.manager`) and 0.33.0's
request-scoped one (:mod:`kvframe.offload.jobs.manager`) hand the same record
to their eviction policies.
"""

from __future__ import annotations

import attrs

__all__ = ["OffloadBlock"]


@attrs.define(slots=True, eq=False)
class OffloadBlock:
    """The ledger's record of one block in the tier.

    ``ref_cnt`` is ``-1`` while the block is being written (not findable),
    ``0`` when ready and idle (the only state an eviction policy may take), and
    the number of in-flight loads otherwise. Identity, not value, is what
    matters (``eq=False``): policies hold these objects and see ``ref_cnt``
    change in place.
    """

    slot_id: int
    ref_cnt: int = -1

    @property
    def is_ready(self) -> bool:
        return self.ref_cnt >= 0
