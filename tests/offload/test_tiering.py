"""The tier chain below DRAM: promotion, cascade, failures that lose nothing, the link.

The call-for-call comparison with vLLM 0.33.0 is ``test_tiering_differential_v033.py``;
these tests pin the behaviour it rests on without vLLM's environment.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvframe.contract.request_scoped import RequestAccess
from kvframe.offload.jobs.manager import LookupResult, RequestScopedOffloadManager
from kvframe.offload.tiering import LedgerTier, Link, TieringOffloadManager

from . import manager_differential_v033 as dram_differential

pytest.importorskip("kvframe_lru")
from kvframe_lru.rank import RankLRUPolicy


def _ledger(n: int) -> RequestScopedOffloadManager:
    return RequestScopedOffloadManager(RankLRUPolicy(n), n)


def _chain(dram: int = 2, disk: int = 8, **tier: Any) -> tuple[TieringOffloadManager, LedgerTier]:
    disk_tier = LedgerTier("disk", _ledger(disk), chunk_bytes=100, **tier)
    return TieringOffloadManager(_ledger(dram), [disk_tier], chunk_bytes=100), disk_tier


def _store(chain: TieringOffloadManager, access: RequestAccess, keys: list[str]) -> None:
    result = chain.prepare_store(keys, access)
    assert result is not None
    chain.complete_store(result.keys_to_store, access)


def _land_all(tier: LedgerTier, success: bool = True) -> None:
    for job_id in tier.pending_job_ids():
        tier.finish(job_id, success)


class _ChainSide(dram_differential.KvframeSide):
    """The DRAM differential's kvframe side, its manager wrapped in a chain of no tiers."""

    def __init__(self, scenario: dict[str, Any]) -> None:
        super().__init__(scenario)
        self.manager = TieringOffloadManager(self.manager)  # type: ignore[assignment]


@pytest.mark.parametrize("scenario", dram_differential.SCENARIOS[::3], ids=str)
def test_a_chain_of_dram_alone_decides_as_the_dram_ledger(scenario: dict[str, Any]) -> None:
    pytest.importorskip("kvframe_arc")
    alone = dram_differential.run(dram_differential.KvframeSide(scenario), scenario)
    chained = dram_differential.run(_ChainSide(scenario), scenario)
    assert chained == alone
    assert any(entry[0] == "store" for entry in alone)


def test_a_stored_chunk_cascades_and_comes_back_by_promotion() -> None:
    chain, disk = _chain(dram=2)
    writer = RequestAccess("w")
    chain.on_new_request(writer)
    _store(chain, writer, ["a"])
    assert [j.keys for j in (f.job for f in disk._flights.values())] == [("a",)]
    _land_all(disk)
    chain.on_request_finished(writer)
    chain.on_schedule_end()
    other = RequestAccess("o")
    chain.on_new_request(other)
    _store(chain, other, ["b", "c"])  # DRAM holds two: "a" is evicted from DRAM
    assert chain.primary.lookup("a", other) is LookupResult.MISS
    reader = RequestAccess("r")
    chain.on_new_request(reader)
    _land_all(disk)  # b, c cascaded; their DRAM slots are unpinned at the next poll
    chain.on_schedule_end()
    assert chain.lookup("a", reader) is LookupResult.HIT_PENDING  # promotion started
    chain.on_schedule_end()  # ... and submitted, batched, at the step's end
    assert chain.stats[0].promotions == 1
    _land_all(disk)
    assert chain.lookup("a", reader) is LookupResult.HIT
    assert chain.load_sources["r"] == {"a": "disk"}


def test_a_failed_promotion_loses_nothing_the_chunk_recomputes() -> None:
    chain, disk = _chain(dram=1)
    writer = RequestAccess("w")
    chain.on_new_request(writer)
    _store(chain, writer, ["a"])
    _land_all(disk)
    _store(chain, writer, ["b"])  # "a" leaves DRAM, stays on disk
    _land_all(disk)
    chain.on_request_finished(writer)
    chain.on_schedule_end()
    reader = RequestAccess("r")
    chain.on_new_request(reader)
    chain.on_schedule_end()
    free_before = chain.primary.num_free_chunks
    assert chain.lookup("a", reader) is LookupResult.HIT_PENDING
    chain.on_schedule_end()
    _land_all(disk, success=False)
    chain.on_schedule_end()
    # The DRAM slot taken for the promotion is free again and the chunk is a miss
    # (the request recomputes it); the disk dropped its unreadable copy, so the
    # next lookup does not promote it again (no promote-fail livelock), and the
    # failure is counted.
    assert chain.primary.lookup("a", reader) is LookupResult.MISS
    assert chain.primary.num_free_chunks == free_before + 1
    assert chain.lookup("a", reader) is LookupResult.MISS
    assert disk.take_events()[-1] == ("removed", ("a",))
    assert chain.stats[0].promotion_failures == 1
    assert "a" not in chain.load_sources.get("r", {})
    assert not chain.has_pending_work()


def test_a_failed_cascade_unpins_dram_and_leaves_the_tier_without_the_chunk() -> None:
    chain, disk = _chain(dram=2)
    access = RequestAccess("w")
    chain.on_new_request(access)
    _store(chain, access, ["a"])
    _land_all(disk, success=False)
    chain.on_schedule_end()  # this step's offer already polled the tiers (once a step)
    chain.on_schedule_end()
    assert chain.stats[0].cascade_failures == 1
    assert disk.lookup("a", access) is LookupResult.MISS
    assert chain.primary.lookup("a", access) is LookupResult.HIT
    assert chain.primary._num_evictable == 1  # no pin outlives the failed job
    assert not chain.has_pending_work()


def test_a_load_of_a_chunk_the_tier_evicted_since_keeps_the_prefix() -> None:
    tier = LedgerTier("disk", _ledger(4))
    access = RequestAccess("r")
    tier.on_new_request(access)
    from kvframe.offload.tiering import TierJob

    tier.submit_store(TierJob(0, ("a", "b"), (0, 1), False, access))
    tier.finish(0)
    list(tier.finished_jobs())
    tier.submit_load(TierJob(1, ("a", "gone", "b"), (0, 1, 2), True, access))
    tier.finish(1)
    (result,) = tier.finished_jobs()
    assert (result.success, result.successful_keys) == (False, ("a",))


def test_tiers_on_one_link_share_its_bandwidth() -> None:
    link = Link(bandwidth=1000.0, latency_s=0.5)
    assert link.reserve(0.0, 1000) == pytest.approx(1.5)
    assert link.reserve(0.0, 1000) == pytest.approx(2.5)  # waited one second for the first
    assert link.queued_s == pytest.approx(1.0)
    assert link.reserve(10.0, 500) == pytest.approx(11.0)  # an idle link starts at once


def test_a_timed_tier_lands_its_jobs_when_the_clock_passes_them() -> None:
    now = [0.0]
    chain, disk = _chain(link=Link(bandwidth=100.0, latency_s=1.0), clock=lambda: now[0])
    access = RequestAccess("w")
    chain.on_new_request(access)
    _store(chain, access, ["a"])
    assert list(disk.finished_jobs()) == []
    now[0] = 2.0  # 100 bytes at 100 B/s, plus a second of latency
    chain.on_schedule_end()
    chain.on_schedule_end()
    assert chain.stats[0].write_bytes == 100
    assert chain.stats[0].write_s == pytest.approx(2.0)
    assert not chain.has_pending_work()


def test_bad_links_and_tiers_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        Link(bandwidth=0.0)
    with pytest.raises(ValueError, match="latency must be >= 0"):
        Link(bandwidth=1.0, latency_s=-1.0)
    with pytest.raises(ValueError, match="both a link and a clock"):
        LedgerTier("disk", _ledger(1), link=Link(bandwidth=1.0))
