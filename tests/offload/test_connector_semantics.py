"""Connector semantics other than vLLM's native ones, against a scripted manager.

A tier may ask for synchronous loads, blocking stores and prompt-only stores
(:class:`kvframe.ConnectorSemantics`, LMCache's vLLM connector). These pin what
the host's connector and worker do for each, with no plugin installed.
"""

from __future__ import annotations

from types import SimpleNamespace

from kvframe.contract.offload import ConnectorSemantics
from kvframe.core.scheduler_output import KVConnectorOutput, NewRequestData
from kvframe.offload.slots.connector import OffloadingConnector
from kvframe.offload.slots.worker import OffloadWorker

from .test_connector import ScriptedManager, _block, _output, _request

SYNC = ConnectorSemantics(async_load=False, blocking_store=True, store_outputs=False)


class ClockHandler:
    """Each transfer takes one second per pair, on one engine per direction."""

    def __init__(self) -> None:
        self.now = 0.0
        self.free = [0.0, 0.0]
        self.finish: dict[int, float] = {}

    def start_transfers(self, loads, stores):
        end = self.now
        for direction, pairs in ((0, loads), (1, stores)):
            if pairs:
                self.free[direction] = max(self.now, self.free[direction]) + len(pairs)
                end = max(end, self.free[direction])
        job = len(self.finish)
        self.finish[job] = end
        return job

    def finished_transfers(self):
        done = [j for j, t in self.finish.items() if t <= self.now]
        for job in done:
            del self.finish[job]
        return done

    def wait(self, ids):
        self.now = max([self.now, *(self.finish[j] for j in ids if j in self.finish)])


def test_a_synchronous_hit_runs_now_and_leaves_a_block_to_compute():
    manager = ScriptedManager(block_size=8)
    connector = OffloadingConnector(manager, gpu_block_size=4, block_size_factor=2, semantics=SYNC)
    request = _request("a", 24)  # 3 offloaded blocks, all ready in the tier
    hashes = request.block_hashes
    manager.ready = {hashes[1]: 0, hashes[3]: 1, hashes[5]: 2}
    # The whole prompt is in the tier: the last offloaded block is given back.
    assert connector.get_num_new_matched_tokens(request, 0) == (16, False)
    longer = _request("b", 26)
    longer.block_hashes = hashes
    assert connector.get_num_new_matched_tokens(longer, 0) == (24, False)


def test_a_synchronous_load_is_complete_when_the_metadata_is_built():
    manager = ScriptedManager(block_size=8)
    connector = OffloadingConnector(manager, gpu_block_size=4, block_size_factor=2, semantics=SYNC)
    request = _request("a", 30)
    hashes = request.block_hashes
    manager.ready = {hashes[1]: 5, hashes[3]: 7}
    assert connector.get_num_new_matched_tokens(request, 4) == (12, False)
    # Allocation caches this step's blocks at once (hashes on all seven): the
    # load still starts after the 4-token GPU hit and covers three GPU blocks.
    blocks = [_block(10 + i, True) for i in range(7)] + [_block(17, False)]
    connector.update_state_after_alloc(request, blocks, 12)
    meta = connector.build_connector_meta(_output())
    spec = meta.reqs_to_load["a"]
    assert spec.gpu_block_ids == [11, 12, 13] and spec.host_block_ids == [11, 14, 15]
    assert manager.named("complete_load") == [sorted([hashes[1], hashes[3]])]
    assert not connector.busy


def test_prompt_only_stores_skip_output_blocks_and_complete_at_once():
    manager = ScriptedManager(block_size=4)
    connector = OffloadingConnector(manager, gpu_block_size=4, semantics=SYNC)
    request = _request("r", 40)
    request.num_prompt_tokens = 10  # 30 output tokens already known (a resumed request)
    connector.update_state_after_alloc(request, [], 0)
    new = NewRequestData("r", [], list(range(1, 11)), 0)
    meta = connector.build_connector_meta(_output(new=[new], scheduled={"r": 40}))
    # Only the two blocks wholly inside the 10-token prompt.
    assert manager.named("prepare_store") == [request.block_hashes[:2]]
    assert meta.reqs_to_store["r"].gpu_block_ids == [1, 2]
    assert manager.named("complete_store") == [sorted(request.block_hashes[:2])]
    # Nothing to wait for when it finishes.
    assert connector.request_finished(request, [1, 2]) is False


def test_the_worker_waits_for_loads_before_and_stores_after_the_forward_pass():
    manager = ScriptedManager(block_size=4)
    connector = OffloadingConnector(manager, gpu_block_size=4, semantics=SYNC)
    handler = ClockHandler()
    worker = OffloadWorker(handler, SYNC)
    loaded = _request("a", 12)
    manager.ready = {loaded.block_hashes[0]: 3, loaded.block_hashes[1]: 4}
    assert connector.get_num_new_matched_tokens(loaded, 0) == (8, False)
    connector.update_state_after_alloc(loaded, [_block(1, True), _block(2, True)], 8)
    stored = _request("s", 8)
    stored.num_prompt_tokens = 8
    connector.update_state_after_alloc(stored, [], 0)
    new = NewRequestData("s", [], [5, 6], 0)
    meta = connector.build_connector_meta(_output(new=[new], scheduled={"s": 8}))
    worker.start_step(meta)
    assert handler.now == 2.0  # two blocks loaded before the forward pass
    handler.now = 2.5  # the forward pass took half a second
    out = worker.end_step(meta, ())
    assert handler.now == 4.5  # two blocks stored before the step ends
    # Synchronous transfers are never reported: the connector completed them.
    assert out == KVConnectorOutput()
    assert not worker.busy


def test_the_native_semantics_are_the_default():
    manager = ScriptedManager(block_size=4)
    connector = OffloadingConnector(manager, gpu_block_size=4)
    assert connector.semantics == ConnectorSemantics()
    worker = OffloadWorker(SimpleNamespace())
    assert not worker.sync_loads and not worker.blocking_stores
