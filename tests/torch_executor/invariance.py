"""Helpers of the output-invariance tests: small workloads and one run of each configuration.

The reference configuration turns off everything that changes *how* the KV
cache is filled -- no prefix caching, no chunked prefill, a pool so large that
nothing is ever preempted -- so every request computes its whole context itself
in one pass. Every other configuration must generate the same tokens.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import attrs

from kvframe.engine import Engine
from kvframe.engine.config import EngineConfig
from kvframe.executors.torch.outputs import first_difference
from kvframe.workloads.spec import RequestSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXECUTOR = "torch:preset=tiny,dtype=float64,seed=1"
DEVICE = os.environ.get("KVFRAME_TEST_DEVICE", "")
"""Run every invariance test on this torch device (e.g. ``cuda``) instead of the
executor's default, CPU. Set on a machine with a GPU:
``KVFRAME_TEST_DEVICE=cuda pytest tests/torch_executor``."""
LOGIT_TOLERANCE = 1e-9
"""float64: the winning logits agree to this absolute tolerance. Not bit-identical:
the same token's hidden state comes out of matmuls of different batch shapes
(a chunk of 7 rows vs a prompt of 60), and BLAS may sum in a different order."""

REFERENCE: dict[str, Any] = dict(
    enable_prefix_caching=False,
    enable_chunked_prefill=False,
    max_model_len=512,
    max_num_batched_tokens=4096,
    num_gpu_blocks=600,
)


def shared_prefix_workload(
    num_requests: int = 16,
    *,
    seed: int = 0,
    priorities: bool = False,
    gap: float = 0.002,
    max_tokens: tuple[int, int] = (3, 18),
) -> list[RequestSpec]:
    """Requests over four shared prefixes (2-3 blocks each) with their own suffixes."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1, 512) for _ in range(rng.randrange(32, 50))] for _ in range(4)]
    specs = []
    for i in range(num_requests):
        prompt = prefixes[rng.randrange(4)] + [
            rng.randrange(1, 512) for _ in range(rng.randrange(1, 28))
        ]
        specs.append(
            RequestSpec(
                f"req-{i:02d}",
                prompt,
                max_tokens=rng.randrange(*max_tokens),
                arrival_time=i * gap,
                priority=rng.randrange(4) if priorities else 0,
            )
        )
    return specs


def preempted_chunk_workload(seed: int, pairs: int = 3) -> list[RequestSpec]:
    """Pairs of a long low-priority prompt and a short urgent request arriving just after.

    Under ``priority`` with a chunk cap that is not a multiple of the block size
    and a pool of a dozen blocks, the urgent request's growth preempts the long
    one in a step that had already given it a chunk completing a block: the path
    of vLLM 0.19.1's eager prefix-cache registration (:mod:`kvframe.core.uncomputed`).
    Pairs are spaced so the preempted request often resumes before its blocks
    are reused, and then hits them.
    """
    rng = random.Random(seed)
    specs = []
    start = 0.0
    for i in range(pairs):
        specs.append(
            RequestSpec(
                f"low-{i}",
                [rng.randrange(1, 512) for _ in range(rng.randrange(100, 150))],
                max_tokens=rng.randrange(2, 6),
                arrival_time=start,
                priority=rng.randrange(3, 6),
            )
        )
        specs.append(
            RequestSpec(
                f"high-{i}",
                [rng.randrange(1, 512) for _ in range(rng.randrange(16, 48))],
                max_tokens=rng.randrange(4, 12),
                arrival_time=start + rng.uniform(0.001, 0.03),
                priority=rng.randrange(0, 2),
            )
        )
        start += rng.uniform(0.05, 0.4)
    return specs


PREEMPTED_CHUNK_SETTINGS: dict[str, Any] = dict(
    scheduling="priority",
    num_gpu_blocks=12,
    max_num_batched_tokens=32,
    long_prefill_token_threshold=24,
    reserve_full_sequence=False,
    max_model_len=512,
)
"""The issue-32 configuration: chunks of 24 tokens (one block completed, one begun)."""


@attrs.define
class Run:
    outputs: dict[str, list[int]]
    logits: dict[str, list[float]]
    counters: dict[str, Any]
    engine: Engine


def on_test_device(executor: str) -> str:
    """``executor`` on ``KVFRAME_TEST_DEVICE`` when that is set and it names no device."""
    if DEVICE and "device=" not in executor:
        return f"{executor},device={DEVICE}"
    return executor


def run(specs: list[RequestSpec], executor: str = EXECUTOR, **settings: Any) -> Run:
    config = EngineConfig(executor=on_test_device(executor), **settings)
    engine = Engine.from_config(config)
    result = engine.run(specs)
    assert not result.partial
    return Run(
        dict(engine.executor.outputs),
        dict(engine.executor.logits),
        result.counters,
        engine,
    )


def assert_same_outputs(reference: Run, other: Run, *, tolerance: float = LOGIT_TOLERANCE) -> None:
    """Every request generated the same tokens; names the first that did not."""
    assert reference.outputs, "the reference run generated nothing"
    difference = first_difference(reference.outputs, other.outputs)
    assert difference is None, f"outputs differ from the reference run: {difference}"
    worst = 0.0
    for request_id, values in reference.logits.items():
        for a, b in zip(values, other.logits[request_id], strict=True):
            worst = max(worst, abs(a - b))
    assert worst <= tolerance, f"winning logits differ by up to {worst:.3g} (> {tolerance})"


def differing_requests(
    reference: Run, other: Run, *, tolerance: float = LOGIT_TOLERANCE
) -> set[str]:
    """The requests whose tokens or winning logits differ from the reference run's."""
    differ = set()
    for request_id, tokens in reference.outputs.items():
        if other.outputs.get(request_id) != tokens:
            differ.add(request_id)
            continue
        values = zip(reference.logits[request_id], other.logits[request_id], strict=True)
        if any(abs(a - b) > tolerance for a, b in values):
            differ.add(request_id)
    return differ
