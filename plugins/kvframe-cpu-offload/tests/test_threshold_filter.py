"""The ``threshold`` reuse filter: vLLM 0.19's FilterReusedOffloadingManager counting rule."""

from __future__ import annotations

import pytest
from kvframe_cpu_offload import ThresholdReuseFilter

import kvframe


def test_a_hash_may_be_stored_once_lookups_saw_it_store_threshold_times():
    f = ThresholdReuseFilter()  # store_threshold=2
    f.on_lookup([b"a", b"b"])
    assert f.filter_store([b"a", b"b", b"c"]) == []
    f.on_lookup([b"b", b"c"])
    assert f.filter_store([b"a", b"b", b"c"]) == [b"b"]
    f.on_lookup([b"a"])
    assert f.filter_store([b"c", b"b", b"a"]) == [b"b", b"a"]  # request order kept


def test_every_occurrence_in_a_lookup_counts():
    f = ThresholdReuseFilter(store_threshold=3)
    f.on_lookup([b"a", b"a", b"a"])
    assert f.counts == {b"a": 3}
    assert f.filter_store([b"a"]) == [b"a"]


def test_the_counter_forgets_the_least_recently_sighted_hash_when_full():
    f = ThresholdReuseFilter(store_threshold=2, max_tracker_size=2)
    f.on_lookup([b"a", b"b"])
    f.on_lookup([b"a"])  # a is now the most recent
    f.on_lookup([b"c"])  # pushes out b, not a
    assert list(f.counts.items()) == [(b"a", 2), (b"c", 1)]
    assert f.filter_store([b"a", b"b", b"c"]) == [b"a"]
    f.on_lookup([b"b"])  # b starts from one again, and pushes out a
    assert list(f.counts.items()) == [(b"c", 1), (b"b", 1)]
    assert f.filter_store([b"a", b"b", b"c"]) == []


def test_filtering_does_not_refresh_a_hash_in_the_counter():
    f = ThresholdReuseFilter(store_threshold=2, max_tracker_size=2)
    f.on_lookup([b"a", b"a", b"b"])
    f.filter_store([b"a"])
    f.on_lookup([b"c"])
    assert list(f.counts) == [b"b", b"c"]


@pytest.mark.parametrize("threshold", [0, 1])
def test_thresholds_below_two_disable_the_filter(threshold):
    f = ThresholdReuseFilter(store_threshold=threshold)
    f.on_lookup([b"a"])
    assert not f.enabled and f.counts == {}
    assert f.filter_store((b"x", b"y")) == [b"x", b"y"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"store_threshold": -1}, "store_threshold must be >= 0, not -1"),
        ({"max_tracker_size": 0}, "max_tracker_size must be >= 1, not 0"),
    ],
)
def test_rejects_impossible_options(options, message):
    with pytest.raises(ValueError) as err:
        ThresholdReuseFilter(**options)
    assert str(err.value) == message


def test_selected_as_threshold_with_options():
    registry = kvframe.PluginRegistry(entry_points=())
    registry.register_class(ThresholdReuseFilter)
    f = registry.create("reuse_filter", "threshold:store_threshold=3,max_tracker_size=10")
    assert (f.store_threshold, f.max_tracker_size) == (3, 10)
    assert registry.create("reuse_filter", "threshold").store_threshold == 2


def test_in_manager_form_is_the_options_vllm_033s_manager_takes() -> None:
    """Under the 0.33 target the filter lives inside the tier's manager: its form is
    the two numbers that manager takes, defaults filled in, checked as here."""
    assert ThresholdReuseFilter.in_manager_form() == (2, 64_000)
    assert ThresholdReuseFilter.in_manager_form(store_threshold=3, max_tracker_size=8) == (3, 8)
    with pytest.raises(ValueError, match="store_threshold must be >= 0"):
        ThresholdReuseFilter.in_manager_form(store_threshold=-1)
