"""A disaggregated replica's connector: NIXL's scheduler rules, its worker on the fleet's links.

Each prefill and decode replica of a disaggregated fleet runs with a
:class:`PDTier` -- a connector the scheduler asks (the seam of
:mod:`kvframe.core.connector`), a worker the sim executor runs around every
step, and a handler whose clock the executor moves -- exactly where an offload
tier would sit. The scheduler is vLLM's, unchanged: it makes the decisions the
disaggregation harness checks against vLLM 0.19.1 and 0.33.0
(``tools/differential/disagg.py``).

The connector follows ``NixlConnectorScheduler`` (the harness's
``disagg_script.NixlRules``):

* **decode side** (``do_remote_prefill``): at admission every prompt token past
  the local prefix hit is matched, loaded asynchronously; after allocation the
  blocks the local cache missed (the unhashed ones) are loaded, and
  ``do_remote_prefill`` is cleared (a retry after a failed load computes
  locally). A full local hit loads nothing: the prefill side is told at once.
* **prefill side** (``do_remote_decode``): a request that finished by length
  keeps its blocks until the send is reported done (``request_finished``
  returns ``True``); an abort frees at once.

:class:`Coordinator` is the fleet's half: which request is which role
(``kv_transfer_params`` by request id, set when the request is routed), the
sends held on each prefill replica, the loads in flight to each decode
replica, all timed by one :class:`~kvframe.fleet.transfer.TransferModel`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from kvframe.core.scheduler_output import KVConnectorOutput
from kvframe.domain.request import RequestStatus

if TYPE_CHECKING:
    from kvframe.core.block_pool import KVCacheBlock
    from kvframe.core.scheduler_output import SchedulerOutput
    from kvframe.domain.request import Request
    from kvframe.fleet.transfer import TransferModel

__all__ = ["Coordinator", "PDConnector", "PDTier", "PDWorker"]


@attrs.define(slots=True)
class _Send:
    """A prefill leg holding its blocks for the decode side."""

    source: int
    num_blocks: int
    released_at: float | None = None
    """When the prefill side may free without a transfer (nothing to load, or the
    decode leg went away before its load started)."""
    started: bool = False


@attrs.define(slots=True)
class _Load:
    """A decode leg's load in flight."""

    source: int
    blocks: list[int]
    started_at: float
    fail_from: int | None = None
    """Index of the first block the load fails to fill (``None``: it succeeds)."""


class Coordinator:
    """The fleet's view of every disaggregated transfer (module docstring).

    :param fail_load: a test's hook: the index of the first block a request's load
        fails to fill, or ``None`` (a real fleet has none).
    :param abort_in_flight: a test's hook: whether the client aborts a decode leg
        as its load starts.
    """

    def __init__(
        self,
        transfers: TransferModel,
        *,
        fail_load: Callable[[str], int | None] | None = None,
        abort_in_flight: Callable[[str], bool] | None = None,
    ) -> None:
        self.transfers = transfers
        self.params: dict[str, dict[str, Any]] = {}
        """``kv_transfer_params`` of every routed leg, by request id."""
        self.sends: dict[str, _Send] = {}
        self.held: dict[int, dict[str, None]] = {}
        """Per prefill replica: the sends it holds, in order."""
        self.loads: dict[int, dict[str, _Load]] = {}
        """Per decode replica: its loads in flight."""
        self.woken: list[tuple[int, float]] = []
        """``(prefill replica, time)`` to wake: a send it holds started or was released."""
        self.to_abort: list[tuple[int, str]] = []
        self.load_times: dict[str, tuple[float, float]] = {}
        """Per request: when its load started and when it was done."""
        self.num_failed_loads = 0
        self.num_released_without_transfer = 0
        self._fail_load = fail_load
        self._abort_in_flight = abort_in_flight

    # -- the prefill side --------------------------------------------------------

    def hold(self, request_id: str, source: int, num_blocks: int) -> None:
        """A prefill leg finished holding ``num_blocks`` blocks for its decode leg."""
        self.sends[request_id] = _Send(source, num_blocks)
        self.held.setdefault(source, {})[request_id] = None

    def release(self, request_id: str, now: float) -> None:
        """The decode leg needs no transfer (or went away before its load started): the
        prefill side frees its blocks at ``now``."""
        send = self.sends.get(request_id)
        if send is None or send.started or send.released_at is not None:
            return
        send.released_at = now
        self.num_released_without_transfer += 1
        self.woken.append((send.source, now))

    def sends_done(self, replica: int, now: float) -> set[str]:
        """The sends of ``replica`` done by ``now`` (reported once, then forgotten)."""
        held = self.held.get(replica)
        if not held:
            return set()
        done = set()
        transfers = self.transfers
        for request_id in held:
            send = self.sends[request_id]
            if send.released_at is not None:
                if send.released_at <= now:
                    done.add(request_id)
            elif send.started and transfers.done_by(request_id, now):
                done.add(request_id)
        for request_id in done:
            del held[request_id]
            del self.sends[request_id]
        return done

    # -- the decode side ---------------------------------------------------------

    def start_load(self, request_id: str, replica: int, blocks: list[int], now: float) -> None:
        """A decode leg's load into ``blocks`` starts at ``now`` (its step's start)."""
        send = self.sends.get(request_id)
        if send is None or not blocks:
            # Nothing to load (a full local hit): NIXL tells only the prefill side.
            self.release(request_id, now)
            return
        send.started = True
        started = self.transfers.start(request_id, send.source, len(blocks), now)
        fail = None if self._fail_load is None else self._fail_load(request_id)
        self.loads.setdefault(replica, {})[request_id] = _Load(send.source, blocks, started, fail)
        self.woken.append((send.source, self.transfers.expected(request_id)))
        if self._abort_in_flight is not None and self._abort_in_flight(request_id):
            self.to_abort.append((replica, request_id))

    def loads_done(self, replica: int, now: float) -> tuple[set[str], set[int]]:
        """The loads of ``replica`` done by ``now``, and the blocks the failed ones left
        unfilled (vLLM's ``finished_recving`` and ``invalid_block_ids``)."""
        loads = self.loads.get(replica)
        if not loads:
            return set(), set()
        transfers = self.transfers
        done = [rid for rid in loads if transfers.done_by(rid, now)]
        invalid: set[int] = set()
        for request_id in done:
            load = loads.pop(request_id)
            at = transfers.done_at(request_id)
            assert at is not None
            self.load_times[request_id] = (load.started_at, at)
            if load.fail_from is not None and load.fail_from < len(load.blocks):
                invalid.update(load.blocks[load.fail_from :])
                self.num_failed_loads += 1
        return set(done), invalid

    # -- the loops' questions ------------------------------------------------------

    def busy(self, replica: int) -> bool:
        """``replica`` holds sends or waits for loads."""
        return bool(self.held.get(replica)) or bool(self.loads.get(replica))

    def next_completion(self, replica: int) -> float:
        """The earliest time one of ``replica``'s transfers may be done (``inf``: none
        started). Later transfers on a link only delay it."""
        transfers = self.transfers
        best = math.inf
        for request_id in self.loads.get(replica, ()):
            best = min(best, transfers.expected(request_id))
        for request_id in self.held.get(replica, ()):
            send = self.sends[request_id]
            if send.released_at is not None:
                best = min(best, send.released_at)
            elif send.started:
                best = min(best, transfers.expected(request_id))
        return best


class PDConnector:
    """The scheduler side of one disaggregated replica (module docstring)."""

    __slots__ = ("_coordinator", "_loads", "replica")

    def __init__(self, replica: int, coordinator: Coordinator) -> None:
        self.replica = replica
        self._coordinator = coordinator
        self._loads: dict[str, list[int]] = {}

    def _params(self, request: Request) -> dict[str, Any] | None:
        params = request.kv_transfer_params
        if params is None:
            params = self._coordinator.params.get(request.request_id)
            if params is not None:
                request.kv_transfer_params = params
        return params

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        params = self._params(request)
        if params is not None and params.get("do_remote_prefill"):
            count = request.num_prompt_tokens - num_computed_tokens
            if count > 0:
                return count, True
        return 0, False

    def update_state_after_alloc(
        self, request: Request, blocks: Sequence[KVCacheBlock], num_external_tokens: int
    ) -> None:
        params = self._params(request)
        if not params or not params.get("do_remote_prefill"):
            return
        unhashed = [b.block_id for b in blocks if b.block_hash is None]
        self._loads[request.request_id] = unhashed if num_external_tokens > 0 else []
        params["do_remote_prefill"] = False

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> object:
        loads, self._loads = self._loads, {}
        return loads

    def update_connector_output(self, output: KVConnectorOutput) -> None:
        """Nothing to learn: the coordinator keeps the transfers."""

    def request_finished(self, request: Request, block_ids: Sequence[int]) -> bool:
        params = self._params(request)
        if not params:
            return False
        if params.get("do_remote_prefill"):
            # A decode leg that never reached its load (the fleet tells the prefill
            # side when it sees the leg finish).
            params["do_remote_prefill"] = False
            return False
        if not params.get("do_remote_decode") or not block_ids:
            return False
        if request.status != RequestStatus.FINISHED_LENGTH_CAPPED:
            return False
        self._coordinator.hold(request.request_id, self.replica, len(block_ids))
        return True

    def take_events(self) -> Iterable[Any]:
        return ()


class _Handler:
    """The clock the executor's offload bracket moves (no stalls: transfers are async)."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0


class PDWorker:
    """The worker side of one disaggregated replica: starts its loads at a step's start,
    reports the transfers done by the step's end."""

    __slots__ = ("_coordinator", "handler", "replica")

    def __init__(self, replica: int, coordinator: Coordinator, handler: _Handler) -> None:
        self.replica = replica
        self._coordinator = coordinator
        self.handler = handler

    def start_step(self, metadata: dict[str, list[int]] | None) -> None:
        if metadata:
            now = self.handler.now
            start = self._coordinator.start_load
            for request_id, blocks in metadata.items():
                start(request_id, self.replica, blocks, now)

    def end_step(
        self, metadata: object, finished_req_ids: Iterable[str]
    ) -> KVConnectorOutput | None:
        coordinator = self._coordinator
        now = self.handler.now
        sending = coordinator.sends_done(self.replica, now)
        recving, invalid = coordinator.loads_done(self.replica, now)
        if not (sending or recving):
            return None
        return KVConnectorOutput(
            finished_sending=sending, finished_recving=recving, invalid_block_ids=invalid
        )


@attrs.frozen(slots=True)
class PDTier:
    """A disaggregated replica's :class:`~kvframe.contract.offload.Tier`."""

    connector: PDConnector
    worker: PDWorker
    handler: _Handler
    coordinator: Coordinator

    moves_blocks = True

    @classmethod
    def for_replica(cls, replica: int, coordinator: Coordinator) -> PDTier:
        handler = _Handler()
        return cls(
            PDConnector(replica, coordinator),
            PDWorker(replica, coordinator, handler),
            handler,
            coordinator,
        )

    @property
    def busy(self) -> bool:
        return self.coordinator.busy(self.replica)

    @property
    def replica(self) -> int:
        return self.connector.replica

    @property
    def has_deferred_stores(self) -> bool:
        return False

    def next_completion(self) -> float:
        return self.coordinator.next_completion(self.replica)

    def counters(self, hit_tokens: int, preempted_hit_tokens: int = 0) -> dict[str, int | float]:
        """The loaded prompt tokens (the fleet's summary has the transfer counters)."""
        return {"disagg_loaded_tokens": hit_tokens + preempted_hit_tokens}
