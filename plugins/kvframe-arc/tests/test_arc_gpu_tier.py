"""ARC on the GPU prefix cache (``--gpu-eviction arc``): its target adapts.

The GPU tier keys its policy by content and touches the missed hashes of each
admitted request (the offload connector's touch-before-lookup), so a document
that returns after its blocks were evicted hits ARC's ghost lists -- which is
where ARC moves ``target_t1_size``.

The vLLM variant learns from the same touches, but it may refuse an eviction
while idle blocks are held (its target list has no victim and it does not fall
back to the other list), which the GPU tier cannot accept; so only
``arc:variant=paper`` orders the GPU prefix cache (the refusal rule).
"""

from __future__ import annotations

import itertools
import random

from kvframe_arc import ARCPolicy

from kvframe.core.hashing import make_block_hasher
from kvframe.core.kv_cache_manager import KVCacheManager
from kvframe.domain.request import Request

BS = 4
HASHER = make_block_hasher(BS)


def replay(policy: ARCPolicy, seed: int, num_requests: int = 600) -> list[float]:
    """Skewed document reuse with a few requests alive at a time; the target after each."""
    rng = random.Random(seed)
    documents = [[d * 1000 + i for i in range(8 * BS)] for d in range(40)]
    weights = [1 / (rank + 1) for rank in range(len(documents))]  # Zipf-like
    manager = KVCacheManager(65, BS, 4096, eviction_policy=policy)
    live: list[tuple[Request, int]] = []
    targets = []
    for i in range(num_requests):
        doc = rng.choices(documents, weights)[0]
        tokens = doc[: rng.randint(2, 8) * BS] + [90_000 + i] * rng.randint(1, 2 * BS)
        request = Request(f"r{i}", tokens, 1, block_hasher=HASHER)
        hits, num_hit = manager.get_computed_blocks(request)
        if manager.allocate_slots(request, request.num_tokens - num_hit, num_hit, hits) is not None:
            live.append((request, rng.randint(1, 3)))
        still = []
        for other, remaining in live:
            if remaining <= 1:
                manager.free(other)
            else:
                still.append((other, remaining - 1))
        live = still
        targets.append(policy.target_t1_size)
    return targets


def test_target_moves_on_the_gpu_tier() -> None:
    policy = ARCPolicy(65, variant="paper")
    targets = replay(policy, seed=0)
    # Ghost hits happened and moved the target, in both directions.
    assert max(targets) > 0.0
    moves = [b - a for a, b in itertools.pairwise(targets) if b != a]
    assert any(m > 0 for m in moves) and any(m < 0 for m in moves), moves[:20]
    # Reused content reached the frequency list.
    assert policy.t2 or policy.b2
    # Everything the policy holds is idle: in-use blocks are never in it.
    assert all(block.ref_cnt == 0 for block in [*policy.t1.values(), *policy.t2.values()])
