"""vLLM 0.33.0's tier ledger and policy forms, without vLLM (issue 39).

Each test pins one rule where 0.33.0's tier decides differently from 0.19.1's
(``docs/fidelity.md``, "The tier under vLLM 0.33.0") and runs the same calls
through kvframe's 0.19.1 tier (``SlotOffloadManager``, ``LRUPolicy``,
``ARCPolicy``, the ``threshold`` filter) to show the two part there. That the
0.33 forms are vLLM 0.33.0's exactly is ``test_vllm033_manager_differential.py``.
"""

from __future__ import annotations

import pytest

from kvframe.contract.request_scoped import RequestAccess
from kvframe.offload.jobs.manager import LookupResult, RequestScopedOffloadManager
from kvframe.offload.slots.manager import FilteredOffloadManager, SlotOffloadManager

kvframe_lru = pytest.importorskip("kvframe_lru")
kvframe_arc = pytest.importorskip("kvframe_arc")
from kvframe_arc.request_arc import RequestARCPolicy  # noqa: E402
from kvframe_lru.rank import RankLRUPolicy  # noqa: E402


def _access(request_id: str, keys: list[str]) -> RequestAccess:
    return RequestAccess(request_id, {k: 16 * (i + 1) for i, k in enumerate(keys)})


def _store(manager: RequestScopedOffloadManager, access: RequestAccess, keys: list[str]) -> None:
    result = manager.prepare_store(keys, access)
    assert result is not None and list(result.keys_to_store) == keys
    manager.complete_store(keys, access)


def test_rank_lru_evicts_the_running_request_that_began_first() -> None:
    """0.33.0: a request's chunks rank by when it began until it finishes; no lookup touches.

    0.19.1: A's second lookup touches its blocks, so B's are the least recent.
    """
    manager = RequestScopedOffloadManager(RankLRUPolicy(4), 4)
    a, b = _access("A", ["a1", "a2"]), _access("B", ["b1", "b2"])
    _store(manager, a, ["a1", "a2"])
    _store(manager, b, ["b1", "b2"])
    assert [manager.lookup(k, a) for k in ("a1", "a2")] == [LookupResult.HIT] * 2
    result = manager.prepare_store(["c1", "c2"], _access("C", ["c1", "c2"]))
    assert result is not None and list(result.evicted_keys) == ["a2", "a1"]  # tail first

    old = SlotOffloadManager(kvframe_lru.LRUPolicy(4), 4, block_size=16)
    for keys in (["a1", "a2"], ["b1", "b2"]):
        stored = old.prepare_store(keys)
        assert stored is not None
        old.touch(keys)  # 0.19.1's connector touches a request's blocks after a store
        old.complete_store(keys)
    old.touch(["a1", "a2"])  # ... and on every lookup
    assert old.lookup(["a1", "a2"]) == 2
    result_old = old.prepare_store(["c1", "c2"])
    assert result_old is not None and list(result_old.evicted_block_hashes) == ["b2", "b1"]


def test_rank_lru_commits_a_request_s_recency_at_its_finish() -> None:
    manager = RequestScopedOffloadManager(RankLRUPolicy(4), 4)
    a, b = _access("A", ["a1", "a2"]), _access("B", ["b1", "b2"])
    _store(manager, a, ["a1", "a2"])
    _store(manager, b, ["b1", "b2"])
    manager.on_request_finished(a)  # A's chunks get fresh ranks: now the most recent
    result = manager.prepare_store(["c1", "c2"], _access("C", ["c1", "c2"]))
    assert result is not None and list(result.evicted_keys) == ["b2", "b1"]


def test_request_arc_promotes_a_reused_chunk_at_the_request_s_finish_only() -> None:
    """0.33.0: a load moves a chunk to T2 when its request finishes; 0.19.1: at the lookup."""
    policy = RequestARCPolicy(4)
    manager = RequestScopedOffloadManager(policy, 4)
    writer, reader = _access("W", ["x"]), _access("R", ["x"])
    _store(manager, writer, ["x"])
    manager.on_request_finished(writer)  # inserted only: stays in T1
    assert "x" in policy.t1
    manager.prepare_load(["x"], reader)
    manager.complete_load(["x"], reader)
    assert "x" in policy.t1 and "x" not in policy.t2
    manager.on_request_finished(reader)
    assert "x" in policy.t2

    old_policy = kvframe_arc.ARCPolicy(4)
    old = SlotOffloadManager(old_policy, 4, block_size=16)
    assert old.prepare_store(["x"]) is not None
    old.complete_store(["x"])
    old.touch(["x"])  # 0.19.1's connector touches on every lookup
    assert "x" in old_policy.t2


def test_request_arc_falls_back_to_t1_where_0191_refuses() -> None:
    """T1 under target, T2's chunk pinned by a load: 0.33.0 evicts from T1, 0.19.1 refuses."""
    policy = RequestARCPolicy(2)
    manager = RequestScopedOffloadManager(policy, 2)
    _store(manager, _access("W", ["a", "b"]), ["a", "b"])
    reader = _access("R", ["b"])
    manager.prepare_load(["b"], reader)
    manager.complete_load(["b"], reader)
    manager.on_request_finished(reader)  # b reused: T2
    manager.prepare_load(["b"], _access("P", ["b"]))  # pinned by another load
    policy.target_t1_size = 2.0  # as after ghost hits in B1
    result = manager.prepare_store(["c"], _access("C", ["c"]))
    assert result is not None and list(result.evicted_keys) == ["a"]

    old_policy = kvframe_arc.ARCPolicy(2)
    old = SlotOffloadManager(old_policy, 2, block_size=16)
    for key in ("a", "b"):
        assert old.prepare_store([key]) is not None
        old.complete_store([key])
    old.touch(["b"])  # a lookup: b to T2
    old.prepare_load(["b"])
    old_policy.target_t1_size = 2.0
    assert old.prepare_store(["c"]) is None


def test_the_filter_counts_store_offers_not_lookups() -> None:
    """0.33.0 counts offers (``prepare_store``); 0.19.1's filter counted lookups."""
    manager = RequestScopedOffloadManager(RankLRUPolicy(4), 4, store_threshold=2)
    access = _access("A", ["k"])
    for _ in range(3):
        assert manager.lookup("k", access) is LookupResult.MISS
    first = manager.prepare_store(["k"], access)
    assert first is not None and first.keys_to_store == ()  # one offer: not yet
    second = manager.prepare_store(["k"], access)
    assert second is not None and second.keys_to_store == ("k",)

    threshold = pytest.importorskip("kvframe_cpu_offload").ThresholdReuseFilter
    old = FilteredOffloadManager(
        SlotOffloadManager(kvframe_lru.LRUPolicy(4), 4, block_size=16),
        threshold(store_threshold=2),
    )
    old.lookup(["k"])
    old.lookup(["k"])
    stored = old.prepare_store(["k"])
    assert stored is not None and stored.block_hashes_to_store == ("k",)


def test_a_chunk_being_written_answers_pending() -> None:
    manager = RequestScopedOffloadManager(RankLRUPolicy(2), 2)
    access = _access("A", ["k"])
    assert manager.prepare_store(["k"], access) is not None
    assert manager.lookup("k", access) is LookupResult.HIT_PENDING
    manager.complete_store(["k"], access)
    assert manager.lookup("k", access) is LookupResult.HIT


def test_a_refused_store_changes_nothing() -> None:
    manager = RequestScopedOffloadManager(RankLRUPolicy(1), 1)
    writer = _access("W", ["a"])
    assert manager.prepare_store(["a"], writer) is not None  # being written: not evictable
    assert manager.prepare_store(["b"], _access("B", ["b"])) is None
    manager.complete_store(["a"], writer)
    assert manager.lookup("a", writer) is LookupResult.HIT


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="num_chunks"):
        RequestScopedOffloadManager(RankLRUPolicy(1), -1)
    with pytest.raises(ValueError, match="max_tracker_size"):
        RequestScopedOffloadManager(RankLRUPolicy(1), 1, max_tracker_size=0)
