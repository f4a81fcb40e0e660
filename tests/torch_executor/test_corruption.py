"""The invariance tests catch real bugs: deliberately corrupted variants must differ.

Each variant breaks one link between the scheduler's block ids and the bytes
attention reads, the way a real bug would; the comparison with the reference
run must then report the first differing request and token.
"""

from __future__ import annotations

import pytest
from kvframe_cpu_offload import CPUOffloadSpec
from kvframe_cpu_offload.torch_handler import TorchTransferHandler

from kvframe.executors.torch.executor import TorchExecutor
from kvframe.executors.torch.outputs import first_difference

from .invariance import REFERENCE, run, shared_prefix_workload
from .test_invariance import CPU_TIER, TIER_SETTINGS


@pytest.fixture(scope="module")
def workload():
    return shared_prefix_workload()


@pytest.fixture(scope="module")
def reference(workload):
    return run(workload, **REFERENCE)


def assert_caught(reference, corrupted) -> None:
    difference = first_difference(reference.outputs, corrupted.outputs)
    assert difference is not None, "the corrupted run generated the reference's tokens"
    text = str(difference)
    assert difference.request_id in text and difference.request_id in reference.outputs
    assert "generated token" in text or "length" in text or "missing" in text


class SwappingHandler(TorchTransferHandler):
    """After each store, swaps the bytes of its first block with the previous store's first.

    Why blocks of two different transfers: swapping two blocks of *one*
    request's context is invisible to attention -- keys carry their rotary
    position, and attention sums over keys in any order -- so a swap inside one
    request is not a corruption a model (or this suite) can see. Across two
    requests it puts one request's K/V into the other's prefix.
    """

    previous_slot: int | None = None

    def start_transfers(self, loads, stores):
        job = super().start_transfers(loads, stores)
        if stores:
            slot = stores[0][1]
            if self.previous_slot is not None and self.previous_slot != slot:
                for host in self.host_caches:
                    a, b = host[slot].clone(), host[self.previous_slot].clone()
                    host[slot], host[self.previous_slot] = b, a
            self.previous_slot = slot
        return job


def test_transfer_handler_that_swaps_two_blocks_is_caught(workload, reference, monkeypatch):
    monkeypatch.setattr(
        CPUOffloadSpec,
        "create_transfer_handler",
        lambda self, context: SwappingHandler(self.num_blocks(context) * self.block_size_factor),
    )
    corrupted = run(workload, offload=CPU_TIER, eviction="lru", **TIER_SETTINGS)
    assert corrupted.counters["offload_loaded_blocks"] > 0
    assert_caught(reference, corrupted)


def test_block_table_off_by_one_is_caught(workload, reference, monkeypatch):
    # The worker reads and writes block b + 1 where the scheduler meant b: a
    # relabelling the GPU cache alone cannot notice, but the tier copies the
    # blocks the scheduler named.
    original = TorchExecutor.block_table

    def off_by_one(self, request_id):
        top = self.model.num_blocks - 1
        return [block % top + 1 for block in original(self, request_id)]

    monkeypatch.setattr(TorchExecutor, "block_table", off_by_one)
    corrupted = run(workload, offload=CPU_TIER, eviction="lru", **TIER_SETTINGS)
    assert_caught(reference, corrupted)
