"""Conformance checks for :meth:`kvframe.EvictionPolicy.on_hit`, the GPU tier's prefix hit.

On the GPU prefix cache a hit takes an idle cached block out of the policy
while its content stays cached, and the block comes back with ``insert`` when
idle again. The checks drive the policy with that pattern directly (the real
tier runs in :mod:`kvframe.testing.gpu_tier`), with the tier's guarantees:
everything held is idle, nothing is protected.

* After ``on_hit(key)`` the policy does not hold ``key``: ``get`` answers
  ``None`` and ``evict`` never returns it (the block is in use); ``insert(key,
  block)`` is then accepted as for a key never seen, and ``get`` answers that
  block. ``evict(n, frozenset())`` succeeds whenever ``n`` blocks are held.
  The same calls give the same victims.
* What a policy remembers at ``on_hit`` stays bounded by a multiple of the
  capacity, also when the key never comes back (the content left the cache
  while in use, or came back under a ``(hash, block_id)`` key).

A policy that keeps the default ``on_hit`` (a ``remove``) passes both by
construction; the checks matter for those that keep history across hits.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, ClassVar

import pytest

from kvframe.testing.common import (
    CHURN_LONG,
    CHURN_SHORT,
    ContractViolation,
    OpLog,
    PluginTarget,
    call_plugin,
    fmt,
    footprints_over_churn,
    grows_with_keys,
    suite_settings,
)

__all__ = ["GPUHitChecks"]


class _Block:
    """A GPU block as the policy sees it: ``ref_cnt``, which the tier changes in place."""

    __slots__ = ("name", "ref_cnt")

    def __init__(self, name: object) -> None:
        self.name = name
        self.ref_cnt = 0

    def __repr__(self) -> str:
        return f"<block {fmt(self.name)} ref_cnt={self.ref_cnt}>"


class _HitRun:
    """One policy driven by the GPU tier's calls, checked against a model of what it holds."""

    def __init__(self, target: PluginTarget, capacity: int) -> None:
        self.log = OpLog()
        self.policy = call_plugin(
            self.log, f"{target.cls.__qualname__}({capacity})", target.create, capacity
        )
        self.capacity = capacity
        self.held: dict[Hashable, _Block] = {}
        """Idle cached blocks the policy must hold."""
        self.in_use: dict[Hashable, _Block] = {}
        """Blocks a hit took: cached, in use, not held."""
        self.victims: list[tuple[Hashable, ...]] = []

    def fail(self, what: str, rule: str) -> ContractViolation:
        return self.log.violation(what, rule)

    def call(self, text: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Log the call, then make it (an exception becomes a violation naming the calls)."""
        __tracebackhide__ = True
        self.log.add(text)
        return call_plugin(self.log, text, fn, *args)

    def step(self, step: tuple[Any, ...]) -> None:
        __tracebackhide__ = True
        kind, value = step
        policy = self.policy
        if kind == "insert":
            # New content, or a block a hit took coming back idle.
            if self.in_use and value % 2:
                key = list(self.in_use)[value % len(self.in_use)]
                block = self.in_use.pop(key)
                block.ref_cnt = 0
            else:
                if len(self.held) + len(self.in_use) >= self.capacity:
                    return
                key = value + 100 * len(self.victims)
                if key in self.held or key in self.in_use:
                    return
                block = _Block(key)
            self.call(f"insert({fmt(key)})", policy.insert, key, block)
            self.held[key] = block
            if value % 3 == 0:  # it was hit since last idle: the tier touches it
                self.call(f"touch([{fmt(key)}])", policy.touch, [key])
        elif kind == "hit" and self.held:
            key = list(self.held)[value % len(self.held)]
            block = self.held.pop(key)
            self.call(f"on_hit({fmt(key)})", policy.on_hit, key)
            block.ref_cnt = 1
            self.in_use[key] = block
            got = self.call(f"get({fmt(key)})", policy.get, key)
            if got is not None:
                raise self.fail(
                    f"get({fmt(key)}) returned {got!r} right after on_hit({fmt(key)})",
                    "After on_hit(key) the policy does not hold key until it is inserted "
                    "again: get answers None and evict never returns it (the block is in use).",
                )
        elif kind == "drop" and self.in_use:
            # The content leaves the cache while in use: the tier says nothing.
            self.in_use.pop(list(self.in_use)[value % len(self.in_use)])
        elif kind == "evict" and self.held:
            n = 1 + value % len(self.held)
            victims = self.call(f"evict({n}, frozenset())", policy.evict, n, frozenset())
            self._check_victims(n, victims)

    def _check_victims(self, n: int, victims: Any) -> None:
        __tracebackhide__ = True
        if victims is None or len(victims) != n:
            got = "None" if victims is None else f"{len(victims)} victims"
            raise self.fail(
                f"evict({n}, frozenset()) returned {got} while {len(self.held)} idle blocks "
                "were held",
                "On the GPU tier evict(n, frozenset()) must return exactly n blocks whenever "
                "n are held (all of them are idle there), also after on_hit / insert cycles.",
            )
        keys = []
        for key, block in victims:
            if key not in self.held or self.held[key] is not block:
                where = "taken by a hit (on_hit)" if key in self.in_use else "not held"
                raise self.fail(
                    f"evict({n}, frozenset()) returned ({fmt(key)}, {block!r}), which is {where}",
                    "After on_hit(key) the policy does not hold key until it is inserted "
                    "again: get answers None and evict never returns it (the block is in use).",
                )
            keys.append(key)
        if len(set(keys)) != n:
            raise self.fail(
                f"evict({n}) returned a key twice: {fmt(keys)}", "Victims are distinct."
            )
        for key in keys:
            del self.held[key]
        self.victims.append(tuple(keys))

    def drain(self) -> None:
        __tracebackhide__ = True
        if self.held:
            self.step(("evict", len(self.held) - 1))


def _steps() -> Any:
    from hypothesis import strategies as st

    return st.lists(
        st.tuples(st.sampled_from(("insert", "insert", "hit", "drop", "evict")), st.integers(0, 9)),
        max_size=40,
    )


class GPUHitChecks:
    """The checks of :meth:`kvframe.EvictionPolicy.on_hit`; part of
    :class:`kvframe.testing.EvictionPolicySuite`."""

    gpu_prefix_cache: ClassVar[bool]
    examples: Callable[..., int]
    """(Both from :class:`~kvframe.testing.common.PluginSuite` and the eviction suite.)"""

    def _skip_unless_gpu(self, target: PluginTarget) -> None:
        if not self.gpu_prefix_cache:
            pytest.skip("capability gpu_prefix_cache is off for this policy")
        if getattr(target.create(4), "may_refuse", False):
            pytest.skip("the policy declares may_refuse: the GPU tier does not accept it")

    def test_a_hit_block_is_not_held_until_it_comes_back(
        self, kvframe_target: PluginTarget
    ) -> None:
        """on_hit takes a key out (get None, never a victim) until insert brings it back;
        evict(n, frozenset()) keeps succeeding; the same calls give the same victims."""
        from hypothesis import given

        self._skip_unless_gpu(kvframe_target)

        @suite_settings(self.examples(0.5))
        @given(steps=_steps())
        def run(steps: list[tuple[str, int]]) -> None:
            __tracebackhide__ = True
            first = _HitRun(kvframe_target, 8)
            for step in steps:
                first.step(step)
            first.drain()
            second = _HitRun(kvframe_target, 8)
            for step in steps:
                second.step(step)
            second.drain()
            if first.victims != second.victims:
                raise first.fail(
                    f"the same calls on a fresh policy gave the victims {fmt(second.victims)}, "
                    f"not {fmt(first.victims)}",
                    "Deterministic: the same calls (on_hit included) give the same victims.",
                )

        run()

    def test_history_kept_at_hits_stays_bounded(self, kvframe_target: PluginTarget) -> None:
        """Keys taken by hits that never come back (content dropped in use, or back under
        another key): what the policy remembers about them must not pile up."""
        self._skip_unless_gpu(kvframe_target)
        capacity = 16
        policy = kvframe_target.create(capacity)
        held: list[bytes] = []

        def step(i: int) -> None:
            key = b"key-%d" % i
            if len(held) >= capacity:
                victim = held.pop(i % len(held))
                policy.on_hit(victim)  # taken by a hit, and never inserted again
            policy.insert(key, _Block(key))
            held.append(key)
            if i % 2 == 0:
                policy.touch([key])
            if i % 5 == 0:
                # A hit and a return under the same key: history the policy may keep.
                back = held.pop(0)
                policy.on_hit(back)
                policy.insert(back, _Block(back))
                policy.touch([back])
                held.append(back)

        early, late = footprints_over_churn(policy, capacity, step)
        if grows_with_keys(early, late, capacity):
            raise ContractViolation(
                "rule: what a policy remembers at on_hit stays bounded by a multiple of the "
                f"capacity, also for keys that never come back\n{kvframe_target.label} with "
                f"capacity {capacity}, driven by insert(new key), on_hit(a held key, never "
                f"inserted again), and on_hit + insert of the oldest key (never more than "
                f"{capacity} held), held {early[0]} objects ({early[1]} bytes) after "
                f"{CHURN_SHORT * capacity} keys passed through it and {late[0]} ({late[1]} "
                f"bytes) after {CHURN_LONG * capacity}: something kept per key at on_hit is "
                "never trimmed"
            )
