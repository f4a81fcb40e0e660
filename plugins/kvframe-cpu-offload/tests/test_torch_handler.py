"""The ``cpu`` tier's torch transfer handler: bytes out equal bytes back, ids reported once."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from kvframe_cpu_offload import CPUOffloadSpec  # noqa: E402
from kvframe_cpu_offload.torch_handler import TorchTransferHandler, coalesce_runs  # noqa: E402

from kvframe.contract.offload import OffloadContext  # noqa: E402
from kvframe.testing import OffloadSpecSuite  # noqa: E402

NUM_GPU_BLOCKS = 32
LAYERS = 3
# [num_gpu_blocks, 2 (K, V), block_size, kv_heads, head_dim] in bfloat16: 2*4*2*8*2 = 256 B.
BLOCK_SHAPE = (2, 4, 2, 8)


def make_caches(seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn((NUM_GPU_BLOCKS, *BLOCK_SHAPE), generator=gen).to(torch.bfloat16)
        for _ in range(LAYERS)
    ]


def block_bytes(caches: list[torch.Tensor], gpu_block: int) -> list[bytes]:
    """One GPU block's bytes in every layer (bit-exact: NaN patterns included)."""
    return [bytes(c[gpu_block].contiguous().view(torch.uint8).flatten().tolist()) for c in caches]


def drain(handler: TorchTransferHandler) -> list[int]:
    return list(handler.finished_transfers())


@pytest.mark.parametrize("strategy", ["runs", "gather"])
@pytest.mark.parametrize("factor", [1, 2])
def test_bytes_come_back_unchanged(factor: int, strategy: str) -> None:
    """Random blocks -> slots -> device overwritten -> loaded into other blocks -> equal."""
    num_slots = 6
    handler = TorchTransferHandler(num_slots * factor, strategy=strategy)
    caches = make_caches()
    handler.register_kv_caches(caches)
    # Non-contiguous GPU blocks, slots out of order, a run in the middle (gpu 9,10 -> host).
    slots = [4, 1, 2]
    gpu_blocks = [17, 3, 9, 10, 25, 0][: len(slots) * factor]
    host_blocks = [s * factor + j for s in slots for j in range(factor)]
    expected = {g: block_bytes(caches, g) for g in gpu_blocks}
    store = handler.start_transfers([], list(zip(gpu_blocks, host_blocks, strict=True)))
    for cache in caches:
        cache.zero_()
    load_into = [30, 28, 5, 6, 7, 12][: len(gpu_blocks)]
    load = handler.start_transfers(list(zip(load_into, host_blocks, strict=True)), [])
    assert drain(handler) == [store, load]
    for src, dst in zip(gpu_blocks, load_into, strict=True):
        assert block_bytes(caches, dst) == expected[src]
    untouched = set(range(NUM_GPU_BLOCKS)) - set(load_into)
    assert all(not c[sorted(untouched)].any() for c in caches)
    assert handler.bytes_stored == handler.bytes_loaded == len(gpu_blocks) * LAYERS * 256


def test_each_transfer_id_is_reported_once_and_wait_leaves_it_for_the_poll() -> None:
    handler = TorchTransferHandler(8)
    handler.register_kv_caches(make_caches())
    first = handler.start_transfers([], [(0, 0), (1, 1)])
    second = handler.start_transfers([(2, 0)], [(3, 5)])
    empty = handler.start_transfers([], [])
    assert len({first, second, empty}) == 3
    handler.wait([second, first, 999])  # unknown ids are ignored
    assert drain(handler) == [first, second, empty]
    assert drain(handler) == []
    handler.wait([first])  # already reported: nothing to wait for
    third = handler.start_transfers([(4, 1)], [])
    assert drain(handler) == [third]


def test_a_load_and_a_store_in_one_call_issue_the_store_first() -> None:
    """Same GPU block read by the store and written by the load: the store sees the old bytes."""
    handler = TorchTransferHandler(4)
    caches = make_caches()
    handler.register_kv_caches(caches)
    handler.start_transfers([], [(1, 0)])
    old = block_bytes(caches, 2)
    handler.start_transfers([(2, 0)], [(2, 3)])
    handler.start_transfers([(7, 3)], [])
    assert block_bytes(caches, 7) == old
    assert block_bytes(caches, 2) == block_bytes(caches, 1)


def test_bad_ids_and_layouts_are_refused_before_anything_moves() -> None:
    handler = TorchTransferHandler(4)
    with pytest.raises(RuntimeError, match="register_kv_caches"):
        handler.start_transfers([], [(0, 0)])
    caches = make_caches()
    handler.register_kv_caches(caches)
    with pytest.raises(IndexError, match="host block index"):
        handler.start_transfers([], [(0, 3), (1, 4)])
    with pytest.raises(IndexError, match="GPU block id"):
        handler.start_transfers([(NUM_GPU_BLOCKS, 0)], [])
    assert drain(handler) == []
    with pytest.raises(ValueError, match="not contiguous"):
        TorchTransferHandler(4).register_kv_caches([torch.zeros(2, NUM_GPU_BLOCKS, 8)[:, :, :4]])
    with pytest.raises(ValueError, match="number of GPU blocks"):
        TorchTransferHandler(4).register_kv_caches([torch.zeros(4, 8), torch.zeros(5, 8)])


def test_the_host_buffer_has_a_row_per_gpu_block_of_every_slot() -> None:
    context = OffloadContext(gpu_block_size=4, kv_bytes_per_token=16, num_gpu_blocks=8)
    handler = CPUOffloadSpec(capacity=1000, block_size_factor=2).create_transfer_handler(context)
    assert isinstance(handler, TorchTransferHandler)
    assert handler.num_host_blocks == 7 * 2  # 1000 // 128 slots of 2 GPU blocks
    assert not handler.pin_memory or torch.cuda.is_available()
    handler.register_kv_caches([torch.zeros(8, 2, 4, 2, dtype=torch.float16)] * 2)
    assert [tuple(h.shape) for h in handler.host_caches] == [(14, 32), (14, 32)]
    assert handler.gpu_block_bytes == 64 == context.gpu_block_bytes


def test_runs_coalesce_only_where_both_ids_step_by_one() -> None:
    assert coalesce_runs([]) == []
    assert coalesce_runs([(5, 0), (6, 1), (7, 2), (9, 3), (10, 4), (11, 9), (3, 10)]) == [
        (5, 0, 3),
        (9, 3, 2),
        (11, 9, 1),
        (3, 10, 1),
    ]


def test_importing_the_plugin_does_not_import_torch() -> None:
    code = "import sys, kvframe_cpu_offload; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class _CacheAccess:
    """The suite's view of the device KV cache: two layers, each half of a GPU block's bytes."""

    def __init__(self, context: OffloadContext) -> None:
        half = context.gpu_block_bytes // 2
        self.caches = [
            torch.zeros((context.num_gpu_blocks, 2, half // 4), dtype=torch.float16)
            for _ in range(2)
        ]
        self.flat = [c.view(context.num_gpu_blocks, -1).view(torch.uint8) for c in self.caches]
        self.block_bytes = context.gpu_block_bytes

    def write(self, gpu_block_id: int, data: bytes) -> None:
        half = self.block_bytes // 2
        for i, flat in enumerate(self.flat):
            chunk = data[i * half : (i + 1) * half]
            flat[gpu_block_id] = torch.frombuffer(bytearray(chunk), dtype=torch.uint8)

    def read(self, gpu_block_id: int) -> bytes:
        return b"".join(bytes(flat[gpu_block_id].tolist()) for flat in self.flat)


class TestCPUTierConformance(OffloadSpecSuite):
    """The conformance suite on the ``cpu`` tier, with the byte-exact round trip turned on."""

    plugin = CPUOffloadSpec
    options = {"capacity": 512}

    def kv_cache_access(
        self, handler: TorchTransferHandler, context: OffloadContext
    ) -> _CacheAccess:
        access = _CacheAccess(context)
        handler.register_kv_caches(access.caches)
        return access
