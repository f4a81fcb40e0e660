"""The torch executor on CUDA generates what it generates on CPU.

These tests need a GPU and skip without one (CI has none). On a machine with
one, run them with the rest of the suite on the GPU:
``KVFRAME_TEST_DEVICE=cuda pytest tests/torch_executor`` (see
``docs/torch-executor.md``). What only a GPU exercises: the KV tensors in
device memory, the CPU tier's pinned host buffers, and its copies on side
streams ordered against the forward pass by events -- a missing wait there
reads half-copied blocks, which only a comparison of outputs can see.
"""

from __future__ import annotations

import pytest
import torch

from .invariance import REFERENCE, assert_same_outputs, run, shared_prefix_workload
from .test_invariance import CPU_TIER, TIER_SETTINGS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CPU = "torch:preset=tiny,dtype=float64,seed=1,device=cpu"
CUDA = "torch:preset=tiny,dtype=float64,seed=1,device=cuda"
CROSS_DEVICE_TOLERANCE = 1e-9
"""float64 on two devices: the same tokens, winning logits within this (cuBLAS
and the CPU's BLAS sum in different orders)."""


@pytest.fixture(scope="module")
def workload():
    return shared_prefix_workload(24, max_tokens=(8, 24))


@pytest.fixture(scope="module")
def cpu_reference(workload):
    return run(workload, CPU, **REFERENCE)


def test_kv_cache_lives_on_the_gpu(workload):
    result = run(workload[:2], CUDA, **REFERENCE)
    assert all(cache.is_cuda for cache in result.engine.executor.model.kv_caches)


def test_cuda_reference_matches_cpu(workload, cpu_reference):
    assert_same_outputs(
        cpu_reference, run(workload, CUDA, **REFERENCE), tolerance=CROSS_DEVICE_TOLERANCE
    )


def test_cuda_with_caching_chunking_and_preemption_matches_cpu(workload, cpu_reference):
    pressed = run(
        workload,
        CUDA,
        enable_prefix_caching=True,
        max_num_batched_tokens=48,
        long_prefill_token_threshold=16,
        num_gpu_blocks=20,
        max_model_len=512,
    )
    assert pressed.counters["num_preemptions"] > 0, "nothing was preempted"
    assert_same_outputs(cpu_reference, pressed, tolerance=CROSS_DEVICE_TOLERANCE)


@pytest.mark.parametrize("eviction", ["lru", "arc"])
def test_cuda_cpu_tier_copies_on_side_streams(workload, cpu_reference, eviction):
    tiered = run(workload, CUDA, offload=CPU_TIER, eviction=eviction, **TIER_SETTINGS)
    mover = tiered.engine.executor.transfer_handler.mover
    assert all(host.is_pinned() for host in mover.host_caches)
    assert all(device.is_cuda for device in mover.device_caches)
    assert tiered.counters["offload_loaded_blocks"] > 0, "nothing was reloaded from the tier"
    assert_same_outputs(cpu_reference, tiered, tolerance=CROSS_DEVICE_TOLERANCE)
