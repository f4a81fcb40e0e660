"""KV-cache groups: the coordinator, the per-group managers and the hybrid manager.

The step-by-step proof against vLLM is ``tests/differential/test_hybrid_groups.py``;
these pin the rules without vLLM: per-group cache keys, the sliding window's
right-to-left hit and its null blocks, the fixed-point search across groups,
``remove_skipped_blocks``, the admission cap of vLLM 0.33.0 (switch G1), the
refusals, and (Hypothesis) the pool's accounting under random admissions,
decodes and frees.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvframe.contract.records import BlockRemoved, BlockStored
from kvframe.core.hashing import (
    block_hash_with_group_id,
    group_id_of,
    make_block_hasher,
    plain_block_hash,
)
from kvframe.core.kv_cache_coordinator import HybridKVCacheManager
from kvframe.domain.kv_cache_spec import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from kvframe.domain.request import Request

BS = 4
HASHER = make_block_hasher(BS, core="python")
HEADS = {"block_size": BS, "num_kv_heads": 1, "head_size": 1}


def sliding(window: int) -> SlidingWindowSpec:
    return SlidingWindowSpec(**HEADS, sliding_window=window)


def config(num_blocks: int, *specs: object) -> KVCacheConfig:
    groups = [KVCacheGroupSpec(layer_names=(f"l{i}",), spec=s) for i, s in enumerate(specs)]
    return KVCacheConfig(num_blocks=num_blocks, groups=groups)  # type: ignore[arg-type]


def manager(num_blocks: int, *specs: object, **kwargs: object) -> HybridKVCacheManager:
    return HybridKVCacheManager(config(num_blocks, *specs), BS, 1024, **kwargs)  # type: ignore[arg-type]


def req(rid: str, tokens: list[int], max_tokens: int = 16) -> Request:
    return Request(rid, tokens, max_tokens, block_hasher=HASHER)


def admit(m: HybridKVCacheManager, r: Request) -> bool:
    """Look up, allocate the whole prompt, advance: what an admission does."""
    hits, num_hit = m.get_computed_blocks(r)
    if m.allocate_slots(r, r.num_tokens - num_hit, num_hit, hits) is None:
        return False
    r.num_computed_tokens = r.num_tokens
    return True


def decode(m: HybridKVCacheManager, r: Request) -> bool:
    """One decode token: allocate, then append it as the executor would."""
    if m.allocate_slots(r, 1) is None:
        return False
    r.num_computed_tokens += 1
    r.append_output_token_ids([7])
    return True


# ------------------------------------------------------------------ keys


def test_each_group_has_its_own_cache_key_and_it_reads_back() -> None:
    h = req("a", list(range(8))).block_hashes[0]
    keys = {block_hash_with_group_id(h, g) for g in range(3)}
    assert len(keys) == 3
    for g in range(3):
        key = block_hash_with_group_id(h, g)
        assert plain_block_hash(key) == h and group_id_of(key) == g


# -------------------------------------------------------- sliding window


def test_sliding_window_frees_blocks_behind_the_window_as_null_blocks() -> None:
    m = manager(64, sliding(8), FullAttentionSpec(**HEADS))
    r = req("a", list(range(20)))
    assert admit(m, r)
    ids_sw, ids_full = m.get_block_ids("a")
    assert len(ids_sw) == len(ids_full) == 5
    free_before = m.num_free_blocks
    assert decode(m, r)  # computed 20: window 8 skips 13 tokens, 3 whole blocks
    ids_sw, ids_full = m.get_block_ids("a")
    assert ids_sw[:3] == [0, 0, 0] and 0 not in ids_sw[3:]
    assert 0 not in ids_full
    assert m.num_free_blocks == free_before + 3 - 2  # 3 freed, a new block per group


def test_sliding_window_hit_needs_only_the_last_window_blocks() -> None:
    """The sliding group finds ``cdiv(window - 1, bs)`` blocks before the hit's end,
    null before them; the full group needs the whole prefix."""
    m = manager(64, sliding(8), FullAttentionSpec(**HEADS))
    prompt = list(range(24))
    a = req("a", prompt)
    assert admit(m, a)
    first_ids = m.get_block_ids("a")[0]
    for _ in range(8):  # slide a's window far past the prompt's start
        assert decode(m, a)
    b = req("b", [*prompt, 99])
    (sw_hits, full_hits), num_hit = m.get_computed_blocks(b)
    # a's first sliding blocks are free but still cached: both groups hit all 6 blocks.
    assert num_hit == 24
    assert len(full_hits) == len(sw_hits) == 6
    assert all(blk.is_null for blk in sw_hits[:4])
    # The hit's sliding blocks are a's own, freed by its window but still cached.
    assert [blk.block_id for blk in sw_hits[4:]] == first_ids[4:6]
    assert m.get_block_ids("a")[0][4:6] == [0, 0]


def test_fixed_point_lowers_the_hit_to_what_every_group_can_serve() -> None:
    """Evicting the sliding group's cached copies of the prompt's tail blocks leaves
    the full group's prefix useless beyond the sliding group's last run of hits."""
    m = manager(64, sliding(8), FullAttentionSpec(**HEADS))
    prompt = list(range(24))
    a = req("a", prompt)
    assert admit(m, a)
    sw_ids = m.get_block_ids("a")[0]
    m.evict_blocks([sw_ids[5], sw_ids[2]])  # sliding blocks 3..5 of 6: 5 and 2 gone
    b = req("b", [*prompt, 99])
    (sw_hits, full_hits), num_hit = m.get_computed_blocks(b)
    # Sliding: right to left, blocks 4,3 are a run of 2 (= cdiv(7, 4)): hit of 5 blocks.
    assert num_hit == 20
    assert len(full_hits) == len(sw_hits) == 5
    assert [blk.block_id for blk in full_hits] == m.get_block_ids("a")[1][:5]


def test_no_hit_with_prefix_caching_off() -> None:
    m = manager(64, sliding(8), FullAttentionSpec(**HEADS), enable_caching=False)
    a = req("a", list(range(16)))
    assert admit(m, a)
    assert m.get_computed_blocks(req("b", list(range(17)))) == ((), 0)
    assert m.num_cached_blocks == 0


# ------------------------------------------------------ chunked and Mamba


def test_chunked_local_attention_frees_whole_chunks() -> None:
    spec = ChunkedLocalAttentionSpec(**HEADS, attention_chunk_size=8)
    m = manager(64, spec, FullAttentionSpec(**HEADS))
    r = req("a", list(range(17)))
    assert admit(m, r)
    assert decode(m, r)  # computed 17: chunks 0-1 (16 tokens) are behind
    assert m.get_block_ids("a")[0][:4] == [0, 0, 0, 0]


def test_mamba_state_is_one_block_per_request() -> None:
    mamba = MambaSpec(block_size=1024, state_bytes=64)
    m = manager(64, mamba, FullAttentionSpec(**HEADS), enable_caching=False)
    r = req("a", list(range(30)))
    assert admit(m, r)
    for _ in range(10):
        assert decode(m, r)
    state, full = m.get_block_ids("a")
    assert len(state) == 1 and len(full) == 10


# ---------------------------------------------------------------- switches


def test_admission_cap_counts_a_window_not_the_sequence() -> None:
    """0.19.1 asks the whole sequence of every group at admission; 0.33.0 (G1) caps
    the sliding group at its window plus the tokens in flight."""
    specs = (sliding(8), FullAttentionSpec(**HEADS))
    long = req("a", list(range(40)))  # 10 blocks per group
    old = manager(16, *specs)  # 15 usable < 20
    assert not old.can_fit_full_sequence(long)
    new = manager(16, *specs, admission_cap_in_flight=4)  # cap cdiv(7 + 4, 4) + 1 = 4
    assert new.can_fit_full_sequence(long)


# ------------------------------------------------------------------ events


def test_events_name_the_group_and_the_plain_hash() -> None:
    m = manager(9, sliding(8), FullAttentionSpec(**HEADS), enable_kv_cache_events=True)
    a = req("a", list(range(8)))
    assert admit(m, a)
    stored = [e for e in m.take_events() if isinstance(e, BlockStored)]
    assert [(e.group_idx, e.kv_cache_spec_kind) for e in stored] == [
        (0, "sliding_window"),
        (1, "full_attention"),
    ]
    assert stored[0].block_hashes == tuple(a.block_hashes[:2])
    m.free(a)
    b = req("b", list(range(100, 116)))
    assert admit(m, b)  # evicts a's cached blocks
    removed = [e for e in m.take_events() if isinstance(e, BlockRemoved)]
    assert removed and all(e.group_idx in (0, 1) for e in removed)
    assert {h for e in removed for h in e.block_hashes} <= set(a.block_hashes)


# ---------------------------------------------------------------- refusals


def test_refusals_name_what_is_not_modelled() -> None:
    with pytest.raises(ValueError, match="different block sizes"):
        manager(
            16,
            SlidingWindowSpec(block_size=8, num_kv_heads=1, head_size=1, sliding_window=8),
            FullAttentionSpec(**HEADS),
        )
    with pytest.raises(ValueError, match="mamba_cache_mode 'align'"):
        manager(
            16,
            MambaSpec(block_size=1024, state_bytes=1, mamba_cache_mode="align"),
            FullAttentionSpec(**HEADS),
        )


# ------------------------------------------------------------------ property


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    window=st.sampled_from([4, 8, 13]),
    ops=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(1, 30)), max_size=60),
)
def test_pool_accounting_holds_under_random_admissions_decodes_and_frees(
    window: int, ops: list[tuple[int, int, int]]
) -> None:
    """Free blocks + distinct blocks held = usable blocks; a table's non-null blocks are
    in use; the sliding group never holds a block wholly behind its window."""
    m = manager(40, sliding(window), FullAttentionSpec(**HEADS))
    live: dict[int, Request] = {}
    at_alloc: dict[int, int] = {}  # computed tokens when the last allocation ran
    serial = 0
    for op, slot, n in ops:
        if op == 0 and slot not in live:
            serial += 1
            r = req(f"r{serial}", [slot * 1000 + i for i in range(n)])  # shared per slot
            _, num_hit = m.get_computed_blocks(r)
            if admit(m, r):
                live[slot], at_alloc[slot] = r, num_hit
        elif op == 1 and slot in live:
            before = live[slot].num_computed_tokens
            if decode(m, live[slot]):
                at_alloc[slot] = before
        elif slot in live:
            m.free(live.pop(slot))
        held = {
            b.block_id for r in live.values() for b in m.get_blocks(r.request_id) if not b.is_null
        }
        assert m.num_free_blocks + len(held) == 39
        for slot_id, r in live.items():
            sw_blocks = m.managers[0].req_to_blocks.get(r.request_id, [])
            skipped = max(0, at_alloc[slot_id] - window + 1) // BS
            assert all(b.is_null for b in sw_blocks[:skipped])
            assert all(b.ref_cnt > 0 for b in m.get_blocks(r.request_id) if not b.is_null)


# --------------------------------------------------------------- scheduler


def _scheduler(kv: KVCacheConfig | None, **overrides: object):  # type: ignore[no-untyped-def]
    from kvframe_fcfs import FCFSPolicy

    from kvframe.core.factory import make_scheduler
    from kvframe.core.scheduler_config import SchedulerConfig

    settings = dict(block_size=BS, num_gpu_blocks=48, max_num_batched_tokens=32, max_model_len=256)
    settings.update(overrides)
    return make_scheduler(SchedulerConfig(**settings, kv_cache_config=kv), FCFSPolicy())


def test_one_full_attention_group_keeps_the_one_group_manager() -> None:
    from kvframe.core.kv_cache_manager import KVCacheManager

    s = _scheduler(config(48, FullAttentionSpec(**HEADS)))
    assert type(s.kv_cache_manager) is KVCacheManager


def test_a_hybrid_scheduler_runs_its_requests_to_the_end_and_frees_every_block() -> None:
    from kvframe.core.scheduler_output import ModelRunnerOutput

    s = _scheduler(config(48, sliding(8), FullAttentionSpec(**HEADS)))
    assert isinstance(s.kv_cache_manager, HybridKVCacheManager)
    for i in range(6):
        s.add_request(
            Request(f"r{i}", [i * 100 + t for t in range(20)], 12, block_hasher=s.block_hasher)
        )
    steps = 0
    while s.has_unfinished_requests():
        out = s.schedule()
        done = {
            rid
            for rid in out.num_scheduled_tokens
            if s.requests[rid].num_computed_tokens >= s.requests[rid].num_tokens
        }
        s.update_from_output(out, ModelRunnerOutput({rid: [7] for rid in done}))
        steps += 1
        assert steps < 500
    assert s.kv_cache_manager.num_free_blocks == 47
    assert s.stats.num_preemptions > 0  # 6 x (5 + 8) blocks at peak do not fit 47


def test_bad_group_configs_are_refused_by_name(lru_policy_cls: type) -> None:
    from kvframe_fcfs import FCFSPolicy

    from kvframe.core.factory import make_scheduler
    from kvframe.core.scheduler_config import SchedulerConfig

    hybrid = config(48, sliding(8), FullAttentionSpec(**HEADS))
    with pytest.raises(ValueError, match="must equal num_gpu_blocks"):
        SchedulerConfig(block_size=BS, num_gpu_blocks=40, kv_cache_config=hybrid)
    with pytest.raises(ValueError, match="single group must be full attention"):
        SchedulerConfig(block_size=BS, num_gpu_blocks=48, kv_cache_config=config(48, sliding(8)))
    good = SchedulerConfig(block_size=BS, num_gpu_blocks=48, kv_cache_config=hybrid)

    class ReleaseAware(lru_policy_cls):  # type: ignore[misc,valid-type]
        def on_release(self, chain: object, num_tokens: int) -> None:
            pass

    with pytest.raises(ValueError, match="overrides on_release"):
        make_scheduler(good, FCFSPolicy(), eviction_policy=ReleaseAware(48))


# ------------------------------------------------- eviction under groups


def test_a_policy_sees_every_groups_blocks_and_window_leftovers(lru_policy_cls: type) -> None:
    """One set of candidates for all groups, keyed per group; a sliding window's
    leftovers are inserted while their request still runs."""
    policy = lru_policy_cls(24)
    m = manager(24, sliding(8), FullAttentionSpec(**HEADS), eviction_policy=policy)
    a = req("a", list(range(16)))
    assert admit(m, a)
    assert not policy.entries
    assert decode(m, a)  # computed 16: the window leaves blocks 0-1 behind
    assert {group_id_of(k) for k in policy.entries} == {0}
    assert len(policy.entries) == 2
    m.free(a)
    assert {group_id_of(k) for k in policy.entries} == {0, 1}
    # Fill the pool: the policy's LRU order decides which cached blocks go.
    held = len(policy.entries)
    b = req("b", list(range(100, 140)))  # 10 + 10 blocks of 23: some cached ones go
    assert admit(m, b)
    assert 0 < len(policy.entries) < held


def test_a_policy_evicting_a_block_a_window_still_needs_is_caught(lru_policy_cls: type) -> None:
    """A deliberately broken policy that hands back a block a running request's window
    holds (one it saw before a prefix hit took it) is refused by the tier, by name."""

    class EvictsFromWindow(lru_policy_cls):  # type: ignore[misc,valid-type]
        def __init__(self, capacity: int) -> None:
            super().__init__(capacity)
            self.seen: dict[object, object] = {}

        def insert(self, key: object, block: object) -> None:
            super().insert(key, block)
            self.seen[key] = block

        def evict(self, n: int, protected: object) -> object:
            in_use = [(k, b) for k, b in self.seen.items() if b.ref_cnt > 0]  # type: ignore[attr-defined]
            return in_use[:n] if len(in_use) >= n else super().evict(n, protected)

    m = manager(24, sliding(8), FullAttentionSpec(**HEADS), eviction_policy=EvictsFromWindow(24))
    a = req("a", list(range(12)))
    assert admit(m, a)
    m.free(a)  # its 6 blocks are cached and idle: the policy's
    b = req("b", [*range(12), 50, 51, 52, 53, 54])
    assert admit(m, b)  # hits a's blocks: its window holds them again
    # 13 uncached free blocks and a's one idle block: c's 7 + 7 blocks need an eviction.
    assert m.num_free_blocks == 14
    c = req("c", list(range(200, 228)))
    with pytest.raises(RuntimeError, match="not a key it holds with its block"):
        admit(m, c)


# -------------------------------------------------- each switch on its own


def _hybrid_run(name: str, fidelity: object, scheduling: str) -> list[dict[str, object]]:
    """A hybrid workload's step records (block ids of every group) under ``fidelity``."""
    import kvframe_driver
    import stepping
    from hybrid_workloads import generate_hybrid

    workload = generate_hybrid(name, "fcfs", num_requests=16)
    config = dict(workload["config"], vllm=fidelity, async_scheduling=scheduling == "async")
    adapter = kvframe_driver.KvframeAdapter(config, record_blocks=True)
    loop = stepping.run_async if scheduling == "async" else stepping.run
    return list(loop({**workload, "config": config}, adapter))


@pytest.mark.parametrize(
    ("switch", "name", "scheduling"),
    [
        ("groups_admission_cap", "hybrid-gemma3-chunked", "sync"),
        ("groups_skip_processed_only", "hybrid-gptoss-pressure", "async"),
    ],
)
def test_each_group_switch_alone_is_the_whole_difference(
    switch: str, name: str, scheduling: str
) -> None:
    """0.33.0 with both group switches off differs from 0.33.0; the one switch alone
    turned back on gives 0.33.0's run again (block ids of every group included)."""
    import attrs

    from kvframe.domain.fidelity import fidelity_for

    new = _hybrid_run(name, fidelity_for("0.33.0"), scheduling)
    off = {"groups_admission_cap": False, "groups_skip_processed_only": False}
    base = attrs.evolve(fidelity_for("0.33.0"), **off)
    assert _hybrid_run(name, base, scheduling) != new
    assert _hybrid_run(name, attrs.evolve(base, **{switch: True}), scheduling) == new
