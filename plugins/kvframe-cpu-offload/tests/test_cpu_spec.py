"""The ``cpu`` offload spec: sizing, eviction policy by config string, the reuse filter."""

from __future__ import annotations

import pytest
from kvframe_cpu_offload import CPUOffloadSpec

import kvframe
from kvframe.contract.offload import OffloadContext
from kvframe.contract.records import BlockRemoved
from kvframe.offload.slots.manager import FilteredOffloadManager, SlotOffloadManager

# 16 tokens x 2 KiB per token = 32 KiB per GPU block.
CONTEXT = OffloadContext(gpu_block_size=16, kv_bytes_per_token=2048, num_gpu_blocks=100)


def test_capacity_is_divided_by_the_bytes_of_an_offloaded_block():
    spec = CPUOffloadSpec(capacity=10 * 32 * 1024 + 5)
    assert spec.num_blocks(CONTEXT) == 10
    wide = CPUOffloadSpec(capacity=10 * 32 * 1024, block_size_factor=4)
    assert wide.offloaded_block_bytes(CONTEXT) == 4 * 32 * 1024
    assert wide.num_blocks(CONTEXT) == 2
    manager = wide.create_manager(CONTEXT)
    assert isinstance(manager, SlotOffloadManager)
    assert manager.num_blocks == 2 and manager.block_size == 64 and manager.medium == "CPU"


def test_a_tier_smaller_than_one_block_is_an_error_naming_the_smallest_capacity():
    # A tier with zero slots would store nothing: a run would silently measure no tier.
    with pytest.raises(ValueError, match=r"capacity=1000 bytes holds no block.*capacity=32768"):
        CPUOffloadSpec(capacity=1000).create_manager(CONTEXT)
    assert CPUOffloadSpec(capacity=32768).create_manager(CONTEXT).num_blocks == 1


def test_selected_from_a_config_string_with_a_size_and_a_nested_policy():
    pytest.importorskip("kvframe_arc")
    spec = kvframe.get_registry().create(
        "offload", "cpu:capacity=1MiB,eviction='arc:variant=paper',block_size_factor=2"
    )
    assert spec.capacity == 1024 * 1024
    manager = spec.create_manager(CONTEXT)
    assert manager.num_blocks == 16
    assert type(manager.policy).__name__ == "ARCPolicy"
    assert manager.policy.variant == "paper" and manager.policy.capacity == 16


def test_the_default_eviction_policy_is_lru():
    manager = CPUOffloadSpec(capacity=3 * 32 * 1024).create_manager(CONTEXT)
    assert type(manager.policy).__name__ == "LRUPolicy"
    for h in (b"a", b"b", b"c"):
        manager.prepare_store([h])
        manager.complete_store([h])
    manager.touch([b"a"])
    assert manager.prepare_store([b"d"]).evicted_block_hashes == (b"b",)
    assert manager.take_events()[-1] == BlockRemoved((b"b",), medium="CPU")


def test_an_unknown_policy_is_reported_when_the_spec_is_built():
    with pytest.raises(kvframe.ConfigError) as err:
        CPUOffloadSpec(capacity=1 << 20, eviction="lur")
    assert "lur" in str(err.value) and "lru" in str(err.value)


def test_the_reuse_filter_is_attached_only_through_its_extension_point():
    # One way to attach a filter: --reuse-filter. The spec has no store_threshold.
    with pytest.raises(kvframe.ConfigError) as err:
        kvframe.get_registry().resolve("offload", "cpu:capacity=8GiB,store_threshold=2")
    assert "store_threshold" in str(err.value)
    manager = CPUOffloadSpec(capacity=1 << 20).create_manager(CONTEXT)
    assert not isinstance(manager, FilteredOffloadManager)


def test_events_follow_the_context():
    context = OffloadContext(16, 2048, 100, enable_events=False)
    manager = CPUOffloadSpec(capacity=1 << 20).create_manager(context)
    manager.prepare_store([b"a"])
    manager.complete_store([b"a"])
    assert list(manager.take_events()) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"capacity": 0}, "capacity must be a positive number of bytes, not 0"),
        ({"capacity": 1, "block_size_factor": 0}, "block_size_factor must be >= 1, not 0"),
    ],
)
def test_rejects_impossible_options(options, message):
    with pytest.raises(ValueError) as err:
        CPUOffloadSpec(**options)
    assert str(err.value) == message


def test_capacity_is_required():
    with pytest.raises(kvframe.ConfigError, match="capacity"):
        kvframe.get_registry().create("offload", "cpu")
