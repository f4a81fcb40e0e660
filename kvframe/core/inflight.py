"""In-flight prefills and the blocks they still need: vLLM 0.33.0's load reservation.

vLLM 0.33.0 admits a request whose prefix is loaded *asynchronously* only if
its blocks fit in the free blocks less what the prefills already in flight
still need for their whole sequence (``Scheduler._inflight_prefill_reserved_blocks``,
``allocate_slots(reserved_blocks=...)``): an async load holds its blocks for
the whole transfer without forward progress and cannot be preempted there, so
admitting it into blocks a running prefill will need soon ends in a
predictable preemption or a deadlock. vLLM 0.19.1 had no such reservation.

A request is *in flight* from the admission that leaves it still prefilling
(its first chunk does not reach its last token, or its load starts) until a
step's tokens reach its last token, or it is preempted or finishes -- the same
points at which vLLM 0.33.0 adds it to and discards it from
``Scheduler._inflight_prefills``. Its reservation is the blocks its whole
sequence needs beyond those it holds (``_request_remaining_blocks`` for one
full-attention group).

The scheduler holds one reservation rule, chosen once when it is built
(:func:`load_reservation`): :class:`InflightPrefills` under the 0.33.0 fidelity
switch ``reserve_for_inflight_prefills`` (:mod:`kvframe.domain.fidelity`),
else :class:`NoReservation`, whose methods do nothing and reserve no block --
so the per-step code calls the rule and never asks whether the switch is on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from kvframe.core.kv_cache_manager import KVCacheManager
    from kvframe.core.scheduler_config import SchedulerConfig
    from kvframe.domain.request import Request

__all__ = ["InflightPrefills", "NoReservation", "load_reservation"]


class NoReservation:
    """vLLM 0.19.1: an async load may take any free block; nothing is tracked."""

    __slots__ = ()

    def __len__(self) -> int:
        return 0

    def __contains__(self, request_id: object) -> bool:
        return False

    def add(self, request: Request) -> None:
        """Nothing to track."""

    def discard(self, request_id: str) -> None:
        """Nothing to forget."""

    def after_schedule(self, num_scheduled_tokens: Mapping[str, int]) -> None:
        """Nothing to drop."""

    def reserved_blocks(self) -> int:
        """No block is held back."""
        return 0


def load_reservation(
    kv_cache_manager: KVCacheManager, config: SchedulerConfig
) -> InflightPrefills | NoReservation:
    """The reservation rule ``config``'s fidelity target asks for (switch T16)."""
    if not config.fidelity.reserve_for_inflight_prefills:
        return NoReservation()
    return InflightPrefills(
        kv_cache_manager,
        max_model_len=config.max_model_len,
        num_spec_tokens=config.num_speculative_tokens,
        num_lookahead_tokens=config.num_lookahead_tokens,
    )


class InflightPrefills:
    """The requests mid-prefill or waiting for their load, and their block reservation.

    :param kv_cache_manager: whose block tables say what each request holds.
    :param max_model_len: a sequence never needs slots past it.
    :param num_spec_tokens: draft tokens per step; with speculative decoding
        each in-flight prefill also reserves room for one speculative step
        (``1 + num_spec_tokens + num_lookahead_tokens`` slots), and an async
        load leaves room for its own (vLLM 0.33.0's ``_spec_decode_step_blocks``).
    :param num_lookahead_tokens: draft slots reserved past the scheduled tokens
        (EAGLE or a draft model; :attr:`SchedulerConfig.num_lookahead_tokens`).
    """

    __slots__ = ("_block_size", "_kv", "_max_model_len", "_requests", "_spec_tokens", "step_blocks")

    def __init__(
        self,
        kv_cache_manager: KVCacheManager,
        *,
        max_model_len: int,
        num_spec_tokens: int = 0,
        num_lookahead_tokens: int = 0,
    ) -> None:
        self._kv = kv_cache_manager
        self._block_size = kv_cache_manager.block_size
        self._max_model_len = max_model_len
        self._spec_tokens = 1 + num_spec_tokens + num_lookahead_tokens if num_spec_tokens else 0
        self.step_blocks = -(-self._spec_tokens // self._block_size)
        """Blocks one speculative step takes (0 without speculative decoding)."""
        # A dict, not a set: insertion-ordered, so nothing here depends on the
        # hash seed (the reservation is a sum, but a listing should be stable).
        self._requests: dict[str, Request] = {}

    def __len__(self) -> int:
        return len(self._requests)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._requests

    def add(self, request: Request) -> None:
        """``request`` was admitted and is still prefilling, or waits for its load."""
        self._requests[request.request_id] = request

    def discard(self, request_id: str) -> None:
        """``request_id`` was preempted or finished (no-op when not in flight)."""
        self._requests.pop(request_id, None)

    def after_schedule(self, num_scheduled_tokens: Mapping[str, int]) -> None:
        """Drop the scheduled requests whose computed tokens now reach their last token.

        Called once a step's tokens are counted as computed (vLLM 0.33.0's
        ``_update_after_schedule``: ``is_prefill_chunk`` false).
        """
        requests = self._requests
        if not requests:
            return
        for request_id in num_scheduled_tokens:
            request = requests.get(request_id)
            if request is not None and request.num_computed_tokens >= request.num_tokens:
                del requests[request_id]

    def remaining_blocks(self, request: Request) -> int:
        """Blocks ``request`` still needs to hold its whole sequence (and one draft step)."""
        num_tokens = min(request.num_tokens, self._max_model_len) + self._spec_tokens
        held = len(self._kv.get_blocks(request.request_id))
        return max(-(-num_tokens // self._block_size) - held, 0)

    def reserved_blocks(self) -> int:
        """Blocks an async load must leave free: the in-flight prefills' remaining
        blocks plus one speculative step of its own."""
        remaining = self.remaining_blocks
        return sum(remaining(r) for r in self._requests.values()) + self.step_blocks
