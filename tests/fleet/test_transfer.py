"""The transfer model of a disaggregated fleet (kvframe.fleet.transfer): fair share over time.

Properties, for any seeded set of transfers started in time order on a few
links: every byte is delivered exactly once (each link's busy time times its
bandwidth is the bytes it carried); no transfer is done before its bytes at
full bandwidth plus the latency; a link never carries more than its
bandwidth; a transfer joining a link only delays the others' expected ends;
and a lone transfer takes exactly bytes / bandwidth + latency.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvframe.domain.disagg import LINKS, LinkSpec
from kvframe.fleet.transfer import TransferModel

BYTES_PER_BLOCK = 1 << 20
LINK = LinkSpec("test", 1e9, 1e-4)

transfers = st.lists(
    st.tuples(
        st.floats(0.0, 0.05, allow_nan=False),  # gap since the previous start
        st.integers(0, 2),  # link
        st.integers(0, 40),  # blocks
    ),
    min_size=1,
    max_size=25,
)


def run_all(plan: list[tuple[float, int, int]], pipeline: int | None = None) -> tuple:
    model = TransferModel(LINK, BYTES_PER_BLOCK, pipeline_layers=pipeline)
    now = 0.0
    starts = {}
    for i, (gap, link, blocks) in enumerate(plan):
        now += gap
        starts[i] = (model.start(i, link, blocks, now), link, blocks)
    end = now + sum(b for _, _, b in plan) * BYTES_PER_BLOCK / LINK.bandwidth + 1.0
    for i in starts:
        assert model.done_by(i, end)
    return model, starts, end


@settings(max_examples=150, deadline=None)
@given(transfers)
def test_every_byte_is_delivered_once_and_no_link_exceeds_its_bandwidth(plan) -> None:
    model, _, _ = run_all(plan)
    stats = model.stats
    assert stats.num_transfers == len(plan)
    assert stats.bytes == sum(b for _, _, b in plan) * BYTES_PER_BLOCK
    for link in {link for _, link, _ in plan}:
        carried = sum(b for _, on, b in plan if on == link) * BYTES_PER_BLOCK
        busy = stats.busy_seconds.get(link, 0.0)
        # Busy time x bandwidth is what the link carried: never more (bandwidth
        # respected), never less (bytes conserved).
        assert busy * LINK.bandwidth == pytest.approx(carried, rel=1e-6, abs=1.0)


@settings(max_examples=150, deadline=None)
@given(transfers)
def test_no_transfer_is_done_before_its_bytes_at_full_bandwidth_plus_latency(plan) -> None:
    model, starts, _ = run_all(plan)
    for i, (start, _, blocks) in starts.items():
        floor = start + blocks * BYTES_PER_BLOCK / LINK.bandwidth + LINK.latency
        done = model.done_at(i)
        assert done is not None
        assert done >= floor - 1e-9


@settings(max_examples=100, deadline=None)
@given(transfers, st.integers(0, 40))
def test_a_joining_transfer_only_delays_the_others(plan, extra) -> None:
    model = TransferModel(LINK, BYTES_PER_BLOCK)
    now = 0.0
    for i, (gap, link, blocks) in enumerate(plan):
        now += gap
        model.start(i, link, blocks, now)
    before = {i: model.expected(i) for i in range(len(plan))}
    model.start("late", 0, extra, now)
    for i, expected in before.items():
        assert model.expected(i) >= expected - 1e-9
    # ... and the expectation is what happens when nothing else joins.
    end = now + 10.0
    for i in range(len(plan)):
        assert model.done_by(i, end)
        assert model.done_at(i) == pytest.approx(model.expected(i), abs=1e-9)


def test_a_lone_transfer_takes_bytes_over_bandwidth_plus_latency() -> None:
    model = TransferModel(LINK, BYTES_PER_BLOCK)
    model.start("a", 0, 10, 1.0)
    expected = 1.0 + 10 * BYTES_PER_BLOCK / LINK.bandwidth + LINK.latency
    assert model.expected("a") == pytest.approx(expected)
    assert not model.done_by("a", expected - 1e-6)
    assert model.done_by("a", expected)


def test_two_equal_transfers_on_one_link_share_it_and_end_together() -> None:
    model = TransferModel(LINK, BYTES_PER_BLOCK)
    model.start("a", 0, 10, 0.0)
    model.start("b", 0, 10, 0.0)
    model.start("c", 1, 10, 0.0)  # another link: not slowed
    alone = 10 * BYTES_PER_BLOCK / LINK.bandwidth
    assert model.expected("a") == pytest.approx(2 * alone + LINK.latency)
    assert model.expected("c") == pytest.approx(alone + LINK.latency)


def test_pipelining_exposes_one_layer_of_the_bytes_and_counts_them_all() -> None:
    model = TransferModel(LINK, BYTES_PER_BLOCK, pipeline_layers=32)
    model.start("a", 0, 32, 0.0)
    assert model.expected("a") == pytest.approx(BYTES_PER_BLOCK / LINK.bandwidth + LINK.latency)
    assert model.stats.bytes == 32 * BYTES_PER_BLOCK
    assert model.stats.exposed_bytes == pytest.approx(BYTES_PER_BLOCK)


def test_a_start_in_the_links_past_starts_at_its_clock() -> None:
    model = TransferModel(LINK, BYTES_PER_BLOCK)
    model.start("a", 0, 1, 1.0)
    assert model.done_by("a", 2.0)
    assert model.start("b", 0, 1, 1.5) == 2.0


def test_links_and_models_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        LinkSpec("x", 0.0, 0.0)
    with pytest.raises(ValueError, match="latency must be >= 0"):
        LinkSpec("x", 1.0, -1.0)
    with pytest.raises(ValueError, match="bytes_per_block"):
        TransferModel(LINKS["rdma"], 0)
    model = TransferModel(LINKS["rdma"], 1)
    model.start("a", 0, 1, 0.0)
    with pytest.raises(ValueError, match="started twice"):
        model.start("a", 0, 1, 0.0)
    assert math.isinf(model.expected("unknown"))
