"""The bundled routers' rules, each pinned on a hand-made view."""

from __future__ import annotations

import pytest
from kvframe_routers import (
    CacheAwareRouter,
    DynamoKVRouter,
    LeastLoadedRouter,
    PrefixAffinityRouter,
    RandomRouter,
    RoundRobinRouter,
)

import kvframe
from kvframe import BlockStored, FleetInfo, PublishedEvent, ReplicaLoad, RoutingRequest
from kvframe.testing.routing import SyntheticView

H = [bytes([i]) * 8 for i in range(1, 30)]


def request(rid: str, hashes, tokens: int | None = None, job: str | None = None):
    hashes = tuple(hashes)
    return RoutingRequest(
        rid,
        arrival_time=0.0,
        num_prompt_tokens=tokens if tokens is not None else 16 * len(hashes),
        max_tokens=8,
        job_id=job,
        hash_prompt=lambda: hashes,
    )


def attached(router, n: int, seed: int = 0):
    router.attach(FleetInfo(num_replicas=n, block_size=16, seed=seed))
    return router, SyntheticView(n, kv_events=bool(router.uses_kv_events))


def test_every_router_is_selectable_by_its_name():
    registry = kvframe.get_registry()
    for cls in (
        RoundRobinRouter,
        RandomRouter,
        LeastLoadedRouter,
        DynamoKVRouter,
        CacheAwareRouter,
        PrefixAffinityRouter,
    ):
        assert registry.resolve("routing", cls.name).cls is cls


def test_round_robin_starts_at_replica_zero_and_cycles():
    router, view = attached(RoundRobinRouter(), 3)
    assert [router.route(request(f"r{i}", []), view) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_random_replays_under_its_seed_and_differs_across_seeds():
    def draws(seed):
        router, view = attached(RandomRouter(), 8, seed)
        return [router.route(request(f"r{i}", []), view) for i in range(40)]

    assert draws(1) == draws(1) != draws(2)
    assert set(draws(1)) <= set(range(8))


def test_least_loaded_adds_the_requests_sent_since_the_report():
    router, view = attached(LeastLoadedRouter(), 3)
    view._loads = (
        ReplicaLoad(0, 1.0, 2, 0, 0.5, 0),
        ReplicaLoad(1, 1.0, 1, 0, 0.9, 0),
        ReplicaLoad(2, 1.0, 1, 0, 0.1, 0),
    )
    view._now = 2.0
    assert router.route(request("a", []), view) == 2  # 1 request, lowest KV usage
    assert router.route(request("b", []), view) == 1  # 2 now counts 1 + 1 sent since
    view._loads = tuple(ReplicaLoad(r, 3.0, 0, 0, 0.0, 0) for r in range(3))
    view._now = 4.0
    assert router.route(request("c", []), view) == 0  # a fresh report counts everything


def kv_view(router, n, stored):
    router, view = attached(router, n)
    for replica, hashes in stored:
        view._events.append(PublishedEvent(replica, 0.0, BlockStored(tuple(hashes), None, 16)))
    return router, view


def test_dynamo_cost_is_weighted_prefill_blocks_plus_active_blocks():
    router, view = kv_view(DynamoKVRouter(overlap_score_weight=2.0), 2, [(1, H[:6])])
    req = request("a", H[:8], tokens=8 * 16 + 5)
    # worker 0: prefill (133 tokens)/16 = 8.3125 blocks, 8 new blocks; worker 1: 2 blocks
    # of prefill ((133 - 96)/16 = 2.3125) and the same 8 new blocks.
    assert router.costs(req, view) == [2.0 * 133 / 16 + 8, 2.0 * 37 / 16 + 8]
    assert router.route(req, view) == 1
    # "a" is prefilling on worker 1: its 37 tokens add to the prefill of "b" (32 tokens
    # there), and its 8 blocks are active, which "b" shares: no new blocks.
    b = request("b", H[:8])
    assert router.costs(b, view)[1] == 2.0 * (32 + 37) / 16 + 8
    router.on_first_token("a", 1, 0.5)
    assert router.costs(b, view)[1] == 2.0 * 32 / 16 + 8
    router.on_finished("a", 1, 1.0)  # its blocks leave the active set: b's 8 are new
    assert router.costs(b, view)[1] == 2.0 * 32 / 16 + 8
    assert router.costs(request("c", H[:4] + H[20:22]), view)[1] == 2.0 * 2 + 6


def test_dynamo_breaks_ties_by_the_smaller_tree_else_by_a_seeded_draw():
    router, view = kv_view(DynamoKVRouter(), 3, [(0, H[20:25]), (2, H[25:26])])
    assert router.route(request("a", H[:2]), view) == 1  # tree sizes 5, 0, 1

    def first_choices(seed):
        out = []
        for i in range(12):
            router, view = attached(DynamoKVRouter(), 4, seed + i)
            out.append(router.route(request("a", H[:2]), view))  # all tied, all empty
        return out

    assert first_choices(0) == first_choices(0) and len(set(first_choices(0))) > 1


def test_dynamo_load_outweighs_a_short_overlap():
    router, view = kv_view(DynamoKVRouter(track_prefill_tokens=False), 2, [(0, H[:1])])
    for i in range(3):  # three long requests already on worker 0
        router._active[0].add(f"old{i}", tuple(H[10 + 5 * i : 15 + 5 * i]))
    assert router.route(request("a", H[:4]), view) == 1


def test_dynamo_approximate_mode_predicts_from_its_decisions_and_forgets_after_ttl():
    router, view = attached(DynamoKVRouter(use_kv_events=False, ttl=10.0), 2)
    assert router.uses_kv_events is False and DynamoKVRouter.uses_kv_events is True
    view._now = 0.0
    first = router.route(request("a", H[:6]), view)
    router.on_finished("a", first, 0.5)
    view._now = 1.0
    assert router.route(request("b", H[:6]), view) == first
    router.on_finished("b", first, 1.5)
    view._now = 20.0
    assert router.costs(request("c", H[:6]), view) == [12.0, 12.0]


def test_dynamo_temperature_draws_are_seeded():
    def draws(seed):
        router, view = attached(DynamoKVRouter(temperature=1.0), 4, seed)
        return [router.route(request(f"r{i}", H[i : i + 3]), view) for i in range(30)]

    assert draws(3) == draws(3) and len(set(draws(3))) > 1


@pytest.mark.parametrize(
    "bad", [{"temperature": -1.0}, {"overlap_score_weight": -1.0}, {"ttl": 0.0}]
)
def test_dynamo_refuses_bad_options(bad):
    with pytest.raises(ValueError, match="dynamo-kv"):
        DynamoKVRouter(**bad)


def test_cache_aware_follows_the_match_above_the_threshold_else_the_smallest_tree():
    router, view = attached(CacheAwareRouter(cache_threshold=0.5), 3)
    assert router.route(request("a", H[:4]), view) == 0  # all trees empty: the first
    assert router.route(request("b", H[10:12]), view) == 1  # no match: smallest tree
    assert router.route(request("c", H[:3] + H[20:22]), view) == 0  # 3/5 > 0.5
    assert router.route(request("d", H[:2] + H[22:26]), view) == 2  # 2/6 <= 0.5


def test_cache_aware_balances_when_both_thresholds_are_exceeded():
    router, view = attached(CacheAwareRouter(balance_abs_threshold=2, balance_rel_threshold=1.5), 2)
    router.route(request("a", H[:4]), view)
    view._outstanding = [3, 0]
    assert router.route(request("b", H[:4]), view) == 1  # 3 - 0 > 2 and 3 > 0 * 1.5
    view._outstanding = [2, 0]
    assert router.route(request("c", H[:4]), view) == 0  # 2 - 0 is not > 2: cache wins


def test_cache_aware_evicts_the_least_recent_blocks_at_its_interval():
    router, view = attached(CacheAwareRouter(max_tree_size=3, eviction_interval=10.0), 1)
    router.route(request("a", H[:3]), view)
    view._now = 5.0
    router.route(request("b", H[10:12]), view)
    view._now = 10.0
    router.route(request("c", []), view)
    assert sorted(router._trees[0]) == sorted([H[0], H[10], H[11]])


def test_prefix_affinity_keys_on_the_first_blocks_and_sticks_to_jobs():
    router, view = attached(PrefixAffinityRouter(prefix_blocks=2), 8)
    same = {router.route(request(f"r{i}", H[:2] + H[5 + i : 7 + i]), view) for i in range(10)}
    assert len(same) == 1
    spread = {router.route(request(f"s{i}", H[i : i + 2]), view) for i in range(20)}
    assert len(spread) > 2
    jobs = {router.route(request(f"t{i}", H[i : i + 3], job="j1"), view) for i in range(10)}
    assert len(jobs) == 1


def test_prefix_affinity_ring_is_the_same_in_every_instance():
    a, view = attached(PrefixAffinityRouter(), 5)
    b, _ = attached(PrefixAffinityRouter(), 5)
    reqs = [request(f"r{i}", H[i : i + 4]) for i in range(20)]
    assert [a.route(r, view) for r in reqs] == [b.route(r, view) for r in reqs]


def test_new_blocks_by_bisection_equals_a_count_of_each_block():
    import random

    from kvframe_routers.dynamo import _ActiveSequences

    rng = random.Random(3)
    chains = [[bytes([d, i]) for i in range(40)] for d in range(5)]
    active = _ActiveSequences()
    for step in range(300):
        doc = chains[rng.randrange(5)]
        if rng.random() < 0.5:
            active.add(f"r{step}", tuple(doc[: rng.randrange(41)]))
        elif active.requests:
            active.remove(rng.choice(sorted(active.requests)))
        query = doc[: rng.randrange(41)]
        assert active.new_blocks(query) == sum(1 for h in query if h not in active.blocks)
