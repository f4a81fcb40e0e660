"""The scheduler half of offloading against a scripted manager: vLLM's rules, call by call.

The last tests pin down the read-only tier view a scheduling policy gets
(``SchedulerContext.offload``): it answers from the tier's state without
changing it -- no touch, no sighting for a reuse filter, no pin.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvframe.contract.offload import PrepareStoreResult
from kvframe.core.scheduler import Scheduler, SchedulerConfig
from kvframe.core.scheduler_output import (
    CachedRequestData,
    KVConnectorOutput,
    NewRequestData,
    SchedulerOutput,
)
from kvframe.executors.catalog import get_preset
from kvframe.offload.slots.connector import OffloadingConnector
from kvframe.offload.slots.manager import FilteredOffloadManager
from kvframe.offload.slots.worker import OffloadWorker


class ScriptedManager:
    """Records calls; ``ready`` hashes are found by lookup; stores get fresh slots."""

    medium = "CPU"

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.ready: dict[bytes, int] = {}
        self.calls: list[tuple[str, list]] = []
        self.refuse_stores = False
        self._next_slot = 100

    def lookup(self, hashes):
        hashes = list(hashes)
        self.calls.append(("lookup", hashes))
        n = 0
        for h in hashes:
            if h not in self.ready:
                break
            n += 1
        return n

    def touch(self, hashes):
        self.calls.append(("touch", list(hashes)))

    def prepare_load(self, hashes):
        hashes = list(hashes)
        self.calls.append(("prepare_load", hashes))
        return [self.ready[h] for h in hashes]

    def prepare_store(self, hashes):
        hashes = list(hashes)
        self.calls.append(("prepare_store", hashes))
        if self.refuse_stores:
            return None
        new = [h for h in hashes if h not in self.ready]
        slots = tuple(range(self._next_slot, self._next_slot + len(new)))
        self._next_slot += len(new)
        return PrepareStoreResult(tuple(new), slots, ())

    def complete_load(self, hashes):
        self.calls.append(("complete_load", sorted(hashes)))

    def complete_store(self, hashes, success=True):
        self.calls.append(("complete_store", sorted(hashes)))

    def take_events(self):
        return []

    def named(self, name):
        return [args for call, args in self.calls if call == name]


def _request(rid: str, num_tokens: int, block_size: int = 4, computed: int = 0):
    hashes = [b"%s-%d" % (rid.encode(), i) for i in range(num_tokens // block_size)]
    return SimpleNamespace(
        request_id=rid, num_tokens=num_tokens, block_hashes=hashes, num_computed_tokens=computed
    )


def _block(block_id: int, cached: bool):
    return SimpleNamespace(block_id=block_id, block_hash=b"x" if cached else None)


def _output(new=(), cached=None, scheduled=None, preempted=()):
    return SchedulerOutput(
        scheduled_new_reqs=list(new),
        scheduled_cached_reqs=cached or CachedRequestData(),
        num_scheduled_tokens=dict(scheduled or {}),
        total_num_scheduled_tokens=sum((scheduled or {}).values()),
        scheduled_spec_decode_tokens={},
        preempted_req_ids=set(preempted),
        finished_req_ids=set(),
    )


def test_lookup_in_offloaded_blocks_touches_everything_and_loads_async():
    manager = ScriptedManager(block_size=8)
    connector = OffloadingConnector(manager, gpu_block_size=4, block_size_factor=2)
    request = _request("a", 34)  # 8 GPU blocks -> 4 offloaded blocks, named by blocks 1,3,5,7
    hashes = request.block_hashes
    manager.ready = {hashes[1]: 0, hashes[3]: 1, hashes[5]: 2}
    # GPU hit of one GPU block (4 tokens): lookup starts at offloaded block 0.
    assert connector.get_num_new_matched_tokens(request, 4) == (8 * 3 - 4, True)
    assert manager.named("touch")[0] == [hashes[1], hashes[3], hashes[5], hashes[7]]
    assert manager.named("lookup")[0] == [hashes[1], hashes[3], hashes[5], hashes[7]]
    # Less than one offloaded block left beyond the GPU hit: no lookup, but a touch.
    assert connector.get_num_new_matched_tokens(request, 28) == (0, False)
    assert len(manager.named("lookup")) == 1 and len(manager.named("touch")) == 2


def test_load_records_blocks_and_a_second_load_of_the_same_blocks_waits():
    manager = ScriptedManager(block_size=8)
    connector = OffloadingConnector(manager, gpu_block_size=4, block_size_factor=2)
    a = _request("a", 20)
    b = SimpleNamespace(**{**vars(_request("b", 20)), "block_hashes": a.block_hashes})
    manager.ready = {a.block_hashes[1]: 5, a.block_hashes[3]: 7}
    assert connector.get_num_new_matched_tokens(a, 4) == (12, True)
    blocks = [_block(10, True), _block(11, False), _block(12, False), _block(13, False)]
    connector.update_state_after_alloc(a, blocks, 12)
    # Slot 5 holds host blocks 10, 11; the GPU hit covers the first: skip it.
    meta = connector.build_connector_meta(_output())
    spec = meta.reqs_to_load["a"]
    assert spec.gpu_block_ids == [11, 12, 13] and spec.host_block_ids == [11, 14, 15]
    # The same blocks for another request: ask again later.
    assert connector.get_num_new_matched_tokens(b, 0) == (None, False)
    connector.update_connector_output(KVConnectorOutput(finished_recving={"a"}))
    assert manager.named("complete_load") == [sorted([a.block_hashes[1], a.block_hashes[3]])]
    assert connector.get_num_new_matched_tokens(b, 0) == (16, True)


def test_store_cursor_offers_each_full_block_once_and_a_refusal_retries():
    manager = ScriptedManager(block_size=4)
    connector = OffloadingConnector(manager, gpu_block_size=4)
    request = _request("r", 40)
    connector.update_state_after_alloc(request, [], 0)
    new = NewRequestData("r", [], [1, 2, 3], 0)
    meta = connector.build_connector_meta(_output(new=[new], scheduled={"r": 10}))
    assert manager.named("prepare_store") == [request.block_hashes[:2]]
    assert meta.reqs_to_store["r"].gpu_block_ids == [1, 2]
    assert meta.reqs_to_store["r"].host_block_ids == [100, 101]
    request.num_computed_tokens = 10
    manager.refuse_stores = True
    cached = CachedRequestData(["r"], set(), [[4, 5]], [10], [0])
    meta = connector.build_connector_meta(_output(cached=cached, scheduled={"r": 10}))
    assert meta.reqs_to_store == {}
    manager.refuse_stores = False
    request.num_computed_tokens = 20
    cached = CachedRequestData(["r"], set(), [[6]], [20], [0])
    meta = connector.build_connector_meta(_output(cached=cached, scheduled={"r": 4}))
    # The refused blocks are offered again, together with the new full one.
    assert manager.named("prepare_store")[-1] == request.block_hashes[2:6]
    assert meta.reqs_to_store["r"].gpu_block_ids == [3, 4, 5, 6]


def test_stores_are_deferred_and_a_finished_request_waits_for_them():
    manager = ScriptedManager(block_size=4)
    connector = OffloadingConnector(manager, gpu_block_size=4)
    started: list[tuple] = []
    done: list[int] = []

    class Handler:
        def start_transfers(self, loads, stores):
            started.append((tuple(loads), tuple(stores)))
            return len(started) - 1

        def finished_transfers(self):
            out, done[:] = list(done), []
            return out

        def wait(self, ids):
            done.extend(ids)

    worker = OffloadWorker(Handler())
    request = _request("r", 8)
    connector.update_state_after_alloc(request, [], 0)
    meta = connector.build_connector_meta(
        _output(new=[NewRequestData("r", [], [1, 2], 0)], scheduled={"r": 8})
    )
    worker.start_step(meta)
    assert started == []  # the step that computes the blocks has not run yet
    assert worker.end_step(meta, ()) == KVConnectorOutput()
    worker.start_step(None)
    assert started == [((), ((1, 100), (2, 101)))]
    # The request finishes while its store is in flight: it keeps its blocks.
    assert connector.request_finished(request, [1, 2]) is True
    out = worker.end_step(None, {"r"})
    assert out.finished_sending == set()
    done.append(0)
    out = worker.end_step(None, ())
    assert out.finished_sending == {"r"}
    connector.update_connector_output(out)
    assert manager.named("complete_store") == [sorted(request.block_hashes)]
    assert not connector.busy and not worker.busy


def test_a_request_without_stores_frees_at_once():
    manager = ScriptedManager(block_size=4)
    connector = OffloadingConnector(manager, gpu_block_size=4)
    request = _request("r", 3)
    connector.update_state_after_alloc(request, [], 0)
    connector.build_connector_meta(
        _output(new=[NewRequestData("r", [], [1], 0)], scheduled={"r": 3})
    )
    assert connector.request_finished(request, [1]) is False


# ---------------------------------------------------------------- tier view


def _view(manager, **kwargs):
    connector = OffloadingConnector(
        manager, gpu_block_size=4, load_time=lambda n: 0.001 * n, **kwargs
    )
    view = connector.tier_view()
    assert view is not None
    return connector, view


def test_no_view_without_a_load_time_model():
    assert OffloadingConnector(ScriptedManager(4), gpu_block_size=4).tier_view() is None


def test_cached_tokens_are_the_leading_ready_blocks_and_nothing_is_touched():
    manager = ScriptedManager(block_size=4)
    _, view = _view(manager)
    request = _request("a", 22)  # 5 full blocks
    hashes = request.block_hashes
    manager.ready = {hashes[0]: 0, hashes[1]: 1, hashes[3]: 3}
    assert view.num_cached_tokens(request) == 8  # blocks 0-1; block 2 missing stops it
    assert view.medium == "CPU" and view.block_size == 4
    assert {name for name, _ in manager.calls} == {"lookup"}  # no touch, no pin


def test_blocks_whose_store_is_in_flight_count_as_held():
    manager = ScriptedManager(block_size=4)
    connector, view = _view(manager)
    request = _request("r", 12)
    connector.update_state_after_alloc(request, [], 0)
    connector.build_connector_meta(
        _output(new=[NewRequestData("r", [], [1, 2, 3], 0)], scheduled={"r": 12})
    )
    # The three blocks were accepted for storing; none is ready yet.
    assert view.num_cached_tokens(request) == 12
    manager.ready[request.block_hashes[0]] = 0  # mixed: ready, then pending
    assert view.num_cached_tokens(request) == 12
    assert view.num_cached_tokens(_request("other", 12)) == 0


def test_a_peek_is_not_a_sighting_for_the_reuse_filter():
    class CountingFilter:
        def __init__(self):
            self.sightings = 0

        def on_lookup(self, hashes):
            self.sightings += len(hashes)

        def filter_store(self, hashes):
            return hashes

    backing = ScriptedManager(block_size=4)
    reuse_filter = CountingFilter()
    _, view = _view(FilteredOffloadManager(backing, reuse_filter))
    request = _request("a", 8)
    backing.ready = {h: i for i, h in enumerate(request.block_hashes)}
    assert view.num_cached_tokens(request) == 8
    assert reuse_filter.sightings == 0


def test_load_time_is_the_connectors_estimate():
    _, view = _view(ScriptedManager(block_size=4))
    assert view.load_time(0) == 0.0
    assert view.load_time(1000) == pytest.approx(1.0)


class _Policy:
    """Just enough of a scheduling policy to see what ``attach`` receives."""

    def attach(self, context):
        self.context = context

    def create_queue(self):
        from kvframe.domain.queues import FIFORequestQueue

        return FIFORequestQueue()


def test_the_scheduler_context_offers_the_view_or_none():
    config = SchedulerConfig(num_gpu_blocks=16, block_size=4, max_model_len=64)
    policy = _Policy()
    Scheduler(config, policy)  # type: ignore[arg-type]
    assert policy.context.offload is None
    transfer_time = get_preset("llama3.1-8b-h100").cost_model.transfer_time
    connector = OffloadingConnector(
        ScriptedManager(block_size=4), gpu_block_size=4, load_time=transfer_time
    )
    Scheduler(config, policy, connector=connector)  # type: ignore[arg-type]
    assert policy.context.offload is not None
    assert policy.context.offload.load_time(4) == transfer_time(4)
