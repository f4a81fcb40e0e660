"""Tests of the S3-FIFO plugin: kvframe's conformance suite, then S3-FIFO's own behaviour."""

from __future__ import annotations

from kvframe_s3fifo import S3FIFOPolicy

from kvframe.testing import EvictionPolicySuite
from kvframe.testing.eviction import SimpleBlock


class TestS3FIFOConformance(EvictionPolicySuite):
    """The whole contract, as `pytest --kvframe-plugin eviction:s3fifo` checks it.

    Subclassing instead lets this file add its own checks below and choose the
    options the suite builds the policy with.
    """

    plugin = S3FIFOPolicy


class TestS3FIFOWithEagerPromotion(EvictionPolicySuite):
    """The same contract with non-default options."""

    plugin = S3FIFOPolicy
    options = {"small_fraction": 0.5, "max_freq": 1}
    max_examples = 30


def filled(capacity: int, keys: range) -> S3FIFOPolicy:
    policy = S3FIFOPolicy(capacity)
    for key in keys:
        policy.insert(key, SimpleBlock(key))
    return policy


def victims(policy: S3FIFOPolicy, n: int, protected: frozenset[int] = frozenset()) -> list[int]:
    result = policy.evict(n, protected)
    assert result is not None
    return [key for key, _ in result]


def test_blocks_used_once_leave_first_and_used_blocks_are_promoted() -> None:
    policy = filled(10, range(10))
    policy.touch([0, 2])
    assert victims(policy, 2) == [1, 3]
    assert list(policy.main) == [0, 2]


def test_a_ghost_that_returns_goes_straight_to_main() -> None:
    policy = filled(10, range(10))
    assert victims(policy, 1) == [0]
    assert 0 in policy.ghost
    policy.insert(0, SimpleBlock(0))
    assert 0 in policy.main and 0 not in policy.ghost


def test_main_gives_a_used_block_another_round() -> None:
    policy = filled(10, range(3))
    policy.touch([0, 1, 2])  # all three earn promotion to main
    assert victims(policy, 1) == [0]  # promoted together; the oldest, unused since, goes
    policy.touch([1])
    assert victims(policy, 1) == [2]  # 1 was used again: it goes round once more
    assert list(policy.main) == [1]


def test_an_impossible_eviction_changes_nothing() -> None:
    policy = filled(4, range(4))
    policy.touch([0])
    before = (list(policy.small), list(policy.main), [e.freq for e in policy.small.values()])
    assert policy.evict(2, {1, 2, 3}) is None
    assert (
        list(policy.small),
        list(policy.main),
        [e.freq for e in policy.small.values()],
    ) == before


def test_ghosts_are_used_on_the_gpu_tier() -> None:
    """As ``--gpu-eviction s3fifo``: content evicted from ``small`` comes back into ``main``.

    The GPU prefix cache keys its policy by block hash, so a document whose
    blocks were evicted is the same key when it is computed again.
    """
    import random

    from kvframe import Request
    from kvframe.core.hashing import make_block_hasher
    from kvframe.core.kv_cache_manager import KVCacheManager

    class Counting(S3FIFOPolicy):
        ghost_inserts = inserts = 0

        def insert(self, key, block):
            self.ghost_inserts += key in self.ghost
            self.inserts += 1
            super().insert(key, block)

    block_size = 4
    hasher = make_block_hasher(block_size)
    policy = Counting(64)
    manager = KVCacheManager(64, block_size, 4096, eviction_policy=policy)
    rng = random.Random(0)
    documents = [[d * 1000 + i for i in range(8 * block_size)] for d in range(30)]
    live: list[tuple[Request, int]] = []
    for i in range(400):
        doc = rng.choice(documents)
        tokens = doc[: rng.randint(2, 8) * block_size] + [90_000 + i] * rng.randint(1, 8)
        request = Request(f"r{i}", tokens, 1, block_hasher=hasher)
        hits, num_hit = manager.get_computed_blocks(request)
        if manager.allocate_slots(request, request.num_tokens - num_hit, num_hit, hits):
            live.append((request, rng.randint(1, 3)))
        for other, remaining in list(live):  # a few requests alive at a time
            live.remove((other, remaining))
            if remaining <= 1:
                manager.free(other)
            else:
                live.append((other, remaining - 1))
    # Recomputed documents come back through the ghost queue: a real share of
    # the inserts (keyed by block id, as the GPU tier once did, almost none).
    assert policy.ghost_inserts * 20 > policy.inserts
    assert policy.main


def test_runs_in_vllm_0_33s_cpu_tier() -> None:
    """As ``kvframe run --vllm 0.33 --offload cpu:... --eviction s3fifo``: the tier is
    vLLM 0.33.0's, ordered by S3-FIFO's request-scoped form, and serves loads."""
    import random

    from kvframe_s3fifo.request_scoped import RequestScopedS3FIFO

    from kvframe.engine.config import EngineConfig
    from kvframe.engine.engine import Engine
    from kvframe.workloads.spec import RequestSpec

    # By class path, so the test runs with the package on sys.path too (not installed).
    config = EngineConfig(
        num_gpu_blocks=64,
        vllm="0.33",
        offload="cpu:capacity=256MiB",
        eviction="kvframe_s3fifo:S3FIFOPolicy",
    )
    engine = Engine.from_config(config)
    assert isinstance(engine.scheduler.connector.manager.policy, RequestScopedS3FIFO)
    rng = random.Random(0)
    documents = [[d * 1000 + i for i in range(128)] for d in range(30)]
    specs = [
        RequestSpec(f"r{i}", rng.choice(documents) + [90_000 + i] * 8, 4, arrival_time=0.05 * i)
        for i in range(80)
    ]
    result = engine.run(specs)
    assert result.counters["offload_stored_blocks"] > 0
    assert result.counters["offload_loaded_blocks"] > 0
