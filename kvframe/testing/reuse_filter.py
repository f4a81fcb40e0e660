"""The conformance suite for reuse filters (:class:`kvframe.ReuseFilter`).

A reuse filter sees every lookup and filters every store. Whatever its rule,

* ``filter_store`` returns a subsequence of what it was given (same order,
  nothing invented, nothing repeated) and leaves its argument alone;
* the same calls give the same answers (determinism);

and, for a filter that follows kvframe's convention of a ``store_threshold``
option (sightings needed) and a ``max_tracker_size`` option (hashes it
remembers), with values the suite varies unless the user fixed them:

* a hash is never admitted before it has been looked up ``store_threshold``
  times (thresholds below 2 admit everything);
* a hash looked up that many times is admitted while the filter has seen no
  more distinct hashes than it remembers;
* memory stays bounded by ``max_tracker_size`` however many hashes pass;
* (optional, :attr:`kvframe.ReuseFilter.in_manager_form`) the filter's vLLM
  0.33.0 form is a :class:`kvframe.InManagerReuseFilter` the host's
  request-scoped manager accepts, with the threshold and tracker size the
  filter's own options set; skipped, saying so, for a filter with none.

The option names are class attributes, so a filter with other names can
subclass the suite and set them (or ``None`` to skip those checks).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar

import pytest

from kvframe.testing.common import (
    ContractViolation,
    OpLog,
    PluginSuite,
    PluginTarget,
    call_plugin,
    fmt,
    footprint,
    suite_settings,
)

__all__ = ["ReuseFilterSuite"]

HASHES: tuple[bytes, ...] = tuple(b"h%02d" % i for i in range(10))


class _Checked:
    """A filter driven by lookups and stores, with a sightings counter beside it."""

    def __init__(
        self,
        target: PluginTarget,
        overrides: dict[str, int],
        threshold: int | None,
        tracker: int | None,
        exact: bool,
    ) -> None:
        self.log = OpLog()
        options = ", ".join(f"{k}={v}" for k, v in overrides.items())
        self.log.add(f"{target.cls.__qualname__}({options})")
        self.filter = call_plugin(self.log, "construction", target.create, **overrides)
        self.threshold = threshold
        self.tracker = tracker
        self.exact = exact
        self.sightings: Counter[bytes] = Counter()
        self.answers: list[list[bytes]] = []

    def lookup(self, hashes: list[bytes]) -> None:
        __tracebackhide__ = True
        call = f"on_lookup({fmt(hashes)})"
        call_plugin(self.log, call, self.filter.on_lookup, list(hashes))
        self.sightings.update(hashes)
        self.log.add(call)

    def store(self, hashes: list[bytes]) -> None:
        __tracebackhide__ = True
        call = f"filter_store({fmt(hashes)})"
        given = list(hashes)
        got = call_plugin(self.log, call, self.filter.filter_store, given)
        log = self.log
        if given != hashes:
            raise log.violation(f"then {call} modified the list it was given", "")
        if not isinstance(got, list | tuple):
            raise log.violation(f"then {call} returned {got!r}", "It must return a list of hashes.")
        got = list(got)
        self.answers.append(got)
        position = 0
        for h in got:
            try:
                position = hashes.index(h, position) + 1
            except ValueError:
                raise log.violation(
                    f"then {call} returned {fmt(got)}",
                    "filter_store returns a subsequence of its argument, in order, without "
                    "repeats or hashes it was not given.",
                ) from None
        if self.threshold is None or self.threshold < 2:
            log.add(f"{call} -> {fmt(got)}")
            return
        for h in got:
            if self.sightings[h] < self.threshold:
                raise log.violation(
                    f"then {call} admitted {fmt(h)}, which was looked up {self.sightings[h]} "
                    f"time(s)",
                    f"store_threshold={self.threshold}: nothing is admitted before that many "
                    "sightings.",
                )
        if self.exact and (self.tracker is None or len(self.sightings) <= self.tracker):
            for h in hashes:
                if self.sightings[h] >= self.threshold and h not in got:
                    raise log.violation(
                        f"then {call} rejected {fmt(h)}, which was looked up "
                        f"{self.sightings[h]} time(s) ({len(self.sightings)} distinct hashes "
                        "seen, so none was forgotten)",
                        f"store_threshold={self.threshold}: a hash seen that often is admitted.",
                    )
        log.add(f"{call} -> {fmt(got)}")


class ReuseFilterSuite(PluginSuite):
    """Conformance checks for a :class:`kvframe.ReuseFilter`.

    Subclass it and set :attr:`plugin`, or run ``pytest --kvframe-plugin reuse_filter:NAME``.
    """

    kind: ClassVar[str] = "reuse_filter"

    max_examples: ClassVar[int] = 100

    threshold_option: ClassVar[str | None] = "store_threshold"
    """The option naming the sightings a hash needs before it is admitted (None: no such rule)."""

    tracker_size_option: ClassVar[str | None] = "max_tracker_size"
    """The option bounding how many hashes the filter remembers (None: not checked)."""

    threshold_is_exact: ClassVar[bool] = True
    """Capability: a hash seen ``threshold`` times is admitted (unless forgotten). Set
    ``False`` for a filter that may reject more than its threshold says."""

    def _options(self, target: PluginTarget) -> tuple[str | None, str | None]:
        names = target.option_names()
        threshold = self.threshold_option if self.threshold_option in names else None
        tracker = self.tracker_size_option if self.tracker_size_option in names else None
        return threshold, tracker

    def test_random_calls_respect_the_threshold(self, kvframe_target: PluginTarget) -> None:
        """Subsequence, determinism, never below the threshold, admitted at the threshold."""
        from hypothesis import given
        from hypothesis import strategies as st

        threshold_name, tracker_name = self._options(kvframe_target)
        fixed = kvframe_target.options
        picks = st.lists(st.integers(0, 9), min_size=0, max_size=5)
        steps = st.lists(
            st.tuples(st.sampled_from(("lookup", "lookup", "store")), picks), max_size=30
        )

        @suite_settings(self.examples())
        @given(
            steps=steps,
            threshold=st.integers(0, 4),
            tracker=st.integers(1, 12),
        )
        def run(steps: list[tuple[str, list[int]]], threshold: int, tracker: int) -> None:
            __tracebackhide__ = True
            overrides: dict[str, int] = {}
            if threshold_name is not None and threshold_name not in fixed:
                overrides[threshold_name] = threshold
            if tracker_name is not None and tracker_name not in fixed:
                overrides[tracker_name] = tracker
            limit = (
                None
                if threshold_name is None
                else overrides.get(threshold_name, fixed.get(threshold_name))
            )
            size = (
                None
                if tracker_name is None
                else overrides.get(tracker_name, fixed.get(tracker_name))
            )
            if threshold_name is not None and limit is None:
                limit = _default(kvframe_target, threshold_name)
            if tracker_name is not None and size is None:
                size = _default(kvframe_target, tracker_name)
            runs = [
                _Checked(kvframe_target, overrides, limit, size, self.threshold_is_exact)
                for _ in range(2)
            ]
            for kind, values in steps:
                hashes = list(dict.fromkeys(HASHES[v] for v in values))
                for checked in runs:
                    if kind == "lookup":
                        checked.lookup(hashes)
                    else:
                        checked.store(hashes)
            first, second = runs
            if first.answers != second.answers:
                for a, b in zip(first.answers, second.answers, strict=True):
                    if a != b:
                        raise ContractViolation(
                            f"not deterministic: the same calls gave {fmt(a)} and then {fmt(b)}"
                            f"\ncalls: {first.log.text()}"
                        )

        run()

    def test_empty_calls_are_harmless(self, kvframe_target: PluginTarget) -> None:
        checked = _Checked(kvframe_target, {}, None, None, False)
        checked.lookup([])
        checked.store([])
        if checked.answers != [[]]:
            raise ContractViolation(f"filter_store([]) returned {fmt(checked.answers[0])}")

    def test_memory_stays_bounded_by_the_tracker_size(self, kvframe_target: PluginTarget) -> None:
        """Tens of thousands of distinct hashes pass; what the filter keeps must stop growing."""
        _, tracker_name = self._options(kvframe_target)
        if tracker_name is None:
            pytest.skip(
                f"{kvframe_target.label} has no {self.tracker_size_option!r} option; set "
                "tracker_size_option on a subclass to name the option that bounds its memory"
            )
        size = kvframe_target.options.get(tracker_name, 64)
        filt = kvframe_target.create(**{tracker_name: size})
        short, long = 10 * size, 100 * size
        samples = {}
        for i in range(long):
            h = b"hash-%d" % i
            filt.on_lookup([h, h])
            filt.filter_store([h])
            if i + 1 in (short, long):
                samples[i + 1] = footprint(filt)
        (objects_short, _), (objects_long, bytes_long) = samples[short], samples[long]
        if objects_long > objects_short + 2 * size + 64:
            raise ContractViolation(
                f"{kvframe_target.label} with {tracker_name}={size} held {objects_short} objects "
                f"after {short} distinct hashes and {objects_long} ({bytes_long} bytes) after "
                f"{long}: its memory is not bounded by {tracker_name}"
            )

    def test_in_manager_form_applies_the_same_threshold(self, kvframe_target: PluginTarget) -> None:
        """vLLM 0.33.0's form: ``(store_threshold, max_tracker_size)`` the manager accepts,
        equal to the filter's own options where it has them."""
        from kvframe.contract.bases import ReuseFilter
        from kvframe.offload.jobs.manager import RequestScopedOffloadManager

        cls = kvframe_target.cls
        form = cls.in_manager_form if issubclass(cls, ReuseFilter) else None
        if form is None:
            pytest.skip(
                f"{kvframe_target.label} offers no vLLM 0.33.0 form (in_manager_form is None): "
                "it runs under --vllm 0.19.1, and an offload tier under --vllm 0.33 refuses it. "
                'To run there, see docs/plugin-authors.md, "vLLM 0.33: the request-scoped seams"'
            )
        call = f"in_manager_form(**{dict(kvframe_target.options)!r})"
        try:
            answer = form(**dict(kvframe_target.options))
        except ValueError as err:
            pytest.skip(f"{kvframe_target.label}: in_manager_form rejects these options ({err})")
        if not (
            isinstance(answer, tuple)
            and len(answer) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in answer)
        ):
            raise ContractViolation(
                f"{call} returned {answer!r}: it must return an InManagerReuseFilter "
                "(store_threshold, max_tracker_size) of two ints"
            )
        store_threshold, max_tracker_size = answer
        try:
            RequestScopedOffloadManager(
                _NoPolicy(), 1, store_threshold=store_threshold, max_tracker_size=max_tracker_size
            )
        except ValueError as err:
            raise ContractViolation(
                f"{call} returned {answer!r}, which the manager refuses: {err}"
            ) from err
        for option, got in zip(self._options(kvframe_target), answer, strict=True):
            if option is None:
                continue
            wanted = kvframe_target.options.get(option, _default(kvframe_target, option))
            if wanted is not None and got != wanted:
                raise ContractViolation(
                    f"{call} returned {answer!r}: its {option} is {got}, but the filter's "
                    f"option is {wanted}; vLLM 0.33.0's manager would apply another rule"
                )


class _NoPolicy:
    """Stands in for a policy where the manager is only built, never called."""


def _default(target: PluginTarget, option: str) -> Any:
    from kvframe.config import plugin_options

    for info in plugin_options(target.cls):
        if info.name == option and not info.required:
            return info.default
    return None
