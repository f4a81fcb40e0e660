"""The conformance suite for eviction policies (:class:`kvframe.EvictionPolicy`).

The policy is driven the way a tier drives it, by random call sequences that
hypothesis generates and shrinks, and every answer is compared with a reference
model (a plain dict of what the tier has inserted and not yet removed):

* ``evict(n, protected)`` returns exactly ``n`` distinct ``(key, block)`` pairs
  the policy holds, none protected, none with ``ref_cnt != 0`` — or ``None``,
  and then behaves afterwards exactly as if it had not been called (at every
  refusal of every checked run, the policy is compared with a twin that never
  saw the call, over the same continuations: :mod:`kvframe.testing.eviction_twin`); ``None``
  only with fewer than ``n`` idle, unprotected blocks held, unless the policy
  declares :attr:`kvframe.EvictionPolicy.may_refuse` (the refusal rule);
* ``get`` answers what was inserted and not removed or evicted since, with the
  very block object inserted; ``touch`` of keys the policy does not hold is
  harmless (no error, nothing appears);
* inserts happen the way an offload tier does them: only while fewer than
  ``capacity`` blocks are held, else after evicting with the new key protected;
* the same calls on a fresh policy give the same victims (determinism);
* memory stays bounded by the capacity however many keys pass through, by
  eviction or by ``remove``;
* (optional, :meth:`kvframe.EvictionPolicy.track_idle`) a policy that accepts
  idle tracking, told of every block that becomes idle, evicts exactly what it
  evicts untold;
* (optional, :meth:`kvframe.EvictionPolicy.max_evictable`) a policy that
  overrides it is asked before every ``evict`` of the checked runs, and an
  ``evict`` of more blocks than it answered must return ``None`` (the
  determinism and refusal checks replay those calls without the question, so
  asking must change nothing);
* every short call sequence, exhaustively, with the calls that must not change
  the eviction order checked by draining the policy
  (:mod:`kvframe.testing.eviction_sequences`);
* (capability :attr:`EvictionPolicySuite.gpu_prefix_cache`) the real GPU tier
  runs with the policy (:mod:`kvframe.testing.gpu_tier`), or rejects it if it
  declares ``may_refuse``; a prefix hit's ``on_hit`` takes a key out until it
  is inserted again, and what a policy keeps at ``on_hit`` stays bounded
  (:mod:`kvframe.testing.gpu_hits`);
* (optional, :attr:`kvframe.EvictionPolicy.request_scoped_form`) the policy's
  vLLM 0.33.0 form, run by the host's request-scoped manager, keeps
  :class:`kvframe.RequestScopedPolicy`'s contract and is deterministic
  (:mod:`kvframe.testing.request_scoped`); skipped, saying so, for a policy
  with none.

Keys are small ints so that a failure reads like
``after insert(0), insert(1), touch([0]), evict(1, protected={1}) ...``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

import pytest

from kvframe.testing.common import (
    CHURN_LONG,
    CHURN_SHORT,
    ContractViolation,
    PluginSuite,
    PluginTarget,
    fmt,
    footprints_over_churn,
    grows_with_keys,
    suite_settings,
)
from kvframe.testing.eviction_run import (
    Op,
    PolicyRun,
    SimpleBlock,
    describe_op,
    replay_ops,
)
from kvframe.testing.eviction_twin import check_refusal_against_twin
from kvframe.testing.gpu_hits import GPUHitChecks
from kvframe.testing.request_scoped import RequestScopedChecks

__all__ = ["EvictionPolicySuite", "SimpleBlock"]


def _checked_run(target: PluginTarget, capacity: int, **options: Any) -> PolicyRun:
    """A run checked at every call, each refused ``evict`` also against a twin."""
    return PolicyRun(target, capacity, on_refusal=check_refusal_against_twin, **options)


def _overrides_max_evictable(policy: object) -> bool:
    from kvframe.contract.support import claimed_max_evictable

    return claimed_max_evictable(policy) is not None


def _pick(run: PolicyRun, value: int) -> Hashable:
    """A key for ``touch`` / ``protected``: held, formerly held, or never seen, by ``value % 3``."""
    present = run.present()
    absent = run.absent_known()
    choice, index = value % 3, value // 3
    if choice == 0 and present:
        return present[index % len(present)]
    if choice == 1 and absent:
        return absent[index % len(absent)]
    return 100 + index


def _drive_tier(run: PolicyRun, abstract: Sequence[tuple[Any, ...]]) -> None:
    """Turn generated abstract steps into a tier's calls and make them.

    The tier's pattern: it inserts only while it holds fewer than ``capacity``
    blocks, else first evicts with the incoming key protected (and gives up on
    the insert when that evict returns None).
    """
    capacity = run.capacity
    for step in abstract:
        kind = step[0]
        if kind == "insert" or kind == "fill":
            inserts = [step[1:]] if kind == "insert" else [(7, 0)] * step[1]
            for pick, ref in inserts:
                absent = run.absent_known()
                key = absent[pick % len(absent)] if pick < 3 and absent else run.fresh_key()
                if len(run.model) >= capacity:
                    n = len(run.model) - capacity + 1
                    if run.do(("evict", n, frozenset({key}))) is None:
                        continue
                run.do(("insert", key, ref))
        elif kind == "remove":
            present = run.present()
            if present:
                run.do(("remove", present[step[1] % len(present)]))
        elif kind == "touch":
            run.do(("touch", tuple(dict.fromkeys(_pick(run, v) for v in step[1]))))
        elif kind == "evict":
            _, n, picks = step
            run.do(("evict", n, frozenset(_pick(run, v) for v in picks)))
        else:
            present = run.present()
            if present:
                run.do(("ref", present[step[1] % len(present)], step[2]))


def _tier_steps() -> Any:
    """Abstract tier steps, shaped to reach the states real defects need.

    Fills (several inserts in a row) get a tier to many blocks quickly; the
    tier changes ``ref_cnt`` behind the policy's back often; evictions come
    with up to six protected keys, so refusals happen with many blocks held.
    """
    from hypothesis import strategies as st

    insert = st.tuples(st.just("insert"), st.integers(0, 7), st.sampled_from((0, 0, 0, 1, -1)))
    ref = st.tuples(st.just("ref"), st.integers(0, 15), st.sampled_from((-1, 0, 0, 1, 2)))
    return st.lists(
        st.one_of(
            insert,
            insert,
            st.tuples(st.just("fill"), st.integers(2, 8)),
            st.tuples(st.just("remove"), st.integers(0, 15)),
            st.tuples(st.just("touch"), st.lists(st.integers(0, 23), min_size=1, max_size=5)),
            st.tuples(
                st.just("evict"), st.integers(0, 4), st.lists(st.integers(0, 23), max_size=6)
            ),
            ref,
            ref,
        ),
        max_size=40,
    )


def _refusal_steps() -> Any:
    """Steps for the refused-eviction test: fills, blocks taken by the tier, and
    evictions asking for more than is idle, so refusals happen with many blocks held."""
    from hypothesis import strategies as st

    insert = st.tuples(st.just("insert"), st.integers(0, 7), st.sampled_from((0, 0, 0, 1, -1)))
    return st.lists(
        st.one_of(
            insert,
            st.tuples(st.just("fill"), st.integers(2, 6)),
            st.tuples(st.just("remove"), st.integers(0, 15)),
            st.tuples(st.just("touch"), st.lists(st.integers(0, 23), min_size=1, max_size=4)),
            st.tuples(
                st.just("evict"), st.integers(1, 6), st.lists(st.integers(0, 23), max_size=4)
            ),
            st.tuples(
                st.just("evict"), st.integers(0, 3), st.lists(st.integers(0, 23), max_size=3)
            ),
            st.tuples(st.just("ref"), st.integers(0, 15), st.sampled_from((-1, 0, 0, 1, 2))),
        ),
        max_size=40,
    )


def _idle_steps() -> Any:
    """Abstract steps for the idle-tracking test, in an offload tier's pattern (see
    :func:`_drive_idle`): blocks stored busy and made idle later, pins, touches, evictions."""
    from hypothesis import strategies as st

    picks = st.lists(st.integers(0, 23), min_size=1, max_size=4)
    return st.lists(
        st.one_of(
            st.tuples(st.just("store"), st.integers(1, 4)),
            st.tuples(st.just("ready"), picks),
            st.tuples(st.just("ready"), picks),
            st.tuples(st.just("pin"), st.integers(0, 23), st.sampled_from((1, 1, -1))),
            st.tuples(st.just("touch"), picks),
            st.tuples(
                st.just("evict"), st.integers(1, 3), st.lists(st.integers(0, 23), max_size=2)
            ),
            st.tuples(st.just("remove"), st.integers(0, 23)),
        ),
        min_size=12,  # a defect shows only after an evict, a block made idle, an evict
        max_size=40,
    )


def _drive_idle(run: PolicyRun, abstract: Sequence[tuple[Any, ...]]) -> None:
    """An offload tier's use of a policy: stores insert blocks being written (``ref_cnt
    -1``), evicting first when full with the batch protected; they become idle later
    (``ready``: what ``on_idle`` reports), are pinned by loads and released."""
    capacity = run.capacity
    for step in abstract:
        kind = step[0]
        present = run.present()
        if kind == "store":
            batch = [run.fresh_key() for _ in range(min(step[1], capacity))]
            excess = len(run.model) + len(batch) - capacity
            if excess > 0 and run.do(("evict", excess, frozenset(batch))) is None:
                continue
            for key in batch:
                run.do(("insert", key, -1))
        elif kind == "ready" and present:
            for pick in step[1]:
                key = present[pick % len(present)]
                if run.model[key].ref_cnt != 0:
                    run.do(("ref", key, 0))
        elif kind == "pin" and present:
            key = present[step[1] % len(present)]
            run.do(("ref", key, step[2] if run.model[key].ref_cnt != 0 else 1))
        elif kind == "touch":
            run.do(("touch", tuple(dict.fromkeys(_pick(run, v) for v in step[1]))))
        elif kind == "evict":
            _, n, keys = step
            run.do(("evict", n, frozenset(_pick(run, v) for v in keys)))
        elif kind == "remove" and present:
            run.do(("remove", present[step[1] % len(present)]))


def _capacities() -> Any:
    from hypothesis import strategies as st

    return st.sampled_from((1, 2, 3, 4, 5, 6, 8, 12))


class EvictionPolicySuite(RequestScopedChecks, GPUHitChecks, PluginSuite):
    """Conformance checks for an :class:`kvframe.EvictionPolicy`.

    Subclass it and set :attr:`plugin`, or run ``pytest --kvframe-plugin eviction:NAME``.
    """

    kind: ClassVar[str] = "eviction"

    max_examples: ClassVar[int] = 100
    """Generated call sequences per property (hypothesis, derandomized)."""

    gpu_prefix_cache: ClassVar[bool] = True
    """Capability: the policy can order the GPU prefix cache (``--gpu-eviction NAME``).

    The GPU block pool asks ``evict(n, set())`` only when at least ``n`` of the
    blocks it gave the policy are idle, and cannot cope with ``None``. A policy
    that may decline an eviction although enough blocks are idle (an admission
    policy, say) declares ``may_refuse = True`` on its class: the suite then
    accepts its refusals and checks that the GPU tier rejects it. Set this to
    ``False`` to skip the two GPU-tier checks altogether.
    """

    # -- the reference model --------------------------------------------------

    def test_random_calls_agree_with_a_reference_model(self, kvframe_target: PluginTarget) -> None:
        """Exactly n victims or None; never protected; never ref_cnt != 0; get/len consistent."""
        from hypothesis import given

        @suite_settings(self.examples())
        @given(capacity=_capacities(), steps=_tier_steps())
        def run(capacity: int, steps: list[tuple[Any, ...]]) -> None:
            __tracebackhide__ = True
            _drive_tier(_checked_run(kvframe_target, capacity), steps)

        run()

    def test_a_refused_eviction_changes_nothing(self, kvframe_target: PluginTarget) -> None:
        """After ``evict`` returns None, the policy behaves as if the call never happened."""
        from hypothesis import given
        from hypothesis import strategies as st  # small tiers refuse more often

        @suite_settings(self.examples(0.5))
        @given(capacity=st.integers(2, 8), steps=_refusal_steps())
        def run(capacity: int, steps: list[tuple[Any, ...]]) -> None:
            __tracebackhide__ = True
            checked = _checked_run(kvframe_target, capacity)
            _drive_tier(checked, steps)
            refused = [
                i for i, op in enumerate(checked.ops) if op[0] == "evict" and _refused(checked, i)
            ]
            for index in refused:
                without = checked.ops[:index] + checked.ops[index + 1 :]
                replay, error = replay_ops(kvframe_target, capacity, without)
                expected = _outcomes_without(checked, index)
                call = describe_op(checked.ops[index])
                history = ", ".join(describe_op(op) for op in checked.ops)
                if error is not None:
                    raise ContractViolation(
                        f"{call} returned None, so it must have changed nothing; but without "
                        f"that call the same other calls raise {type(error).__name__}: {error}\n"
                        f"calls: {history}"
                    )
                diff = _first_difference(expected, replay.outcomes)
                if diff is not None:
                    position, with_call, without_call = diff
                    later = describe_op(_nth_evict(without, position))
                    raise ContractViolation(
                        f"{call} returned None, so it must have changed nothing; but it did: "
                        f"with it, the later {later} returned {_shown(with_call)}; without it, "
                        f"{_shown(without_call)}\ncalls: {history}"
                    )

        run()

    def test_the_same_calls_give_the_same_victims(self, kvframe_target: PluginTarget) -> None:
        """Deterministic: the same calls on a fresh policy evict the same keys in the same order."""
        from hypothesis import given

        @suite_settings(self.examples(0.5))
        @given(capacity=_capacities(), steps=_tier_steps())
        def run(capacity: int, steps: list[tuple[Any, ...]]) -> None:
            __tracebackhide__ = True
            first = _checked_run(kvframe_target, capacity)
            _drive_tier(first, steps)
            second, error = replay_ops(kvframe_target, capacity, first.ops)
            history = ", ".join(describe_op(op) for op in first.ops)
            if error is not None:
                raise ContractViolation(
                    f"the same calls on a fresh policy raised {type(error).__name__}: {error}\n"
                    f"calls: {history}"
                )
            diff = _first_difference(first.outcomes, second.outcomes)
            if diff is not None:
                position, a, b = diff
                call = describe_op(_nth_evict(first.ops, position))
                raise ContractViolation(
                    f"not deterministic: given the same calls, {call} returned {_shown(a)} the "
                    f"first time and {_shown(b)} on a fresh policy\ncalls: {history}"
                )

        run()

    # -- optional: idle tracking ------------------------------------------------

    def test_idle_tracking_changes_no_victim(self, kvframe_target: PluginTarget) -> None:
        """A policy that accepts ``track_idle`` and is told of every block becoming idle
        evicts exactly what the same policy evicts untold (whenever it accepts)."""
        from hypothesis import given
        from hypothesis import strategies as st

        track_idle = getattr(kvframe_target.create(4), "track_idle", None)
        if track_idle is None or not track_idle():
            pytest.skip("the policy declines idle tracking (track_idle returns False)")

        @suite_settings(self.examples())
        @given(capacity=_capacities(), steps=_idle_steps(), start=st.integers(0, 6))
        def run(capacity: int, steps: list[tuple[Any, ...]], start: int) -> None:
            __tracebackhide__ = True
            told = _checked_run(kvframe_target, capacity, track_idle_at=start)
            _drive_idle(told, steps)
            untold, error = replay_ops(kvframe_target, capacity, told.ops)
            history = told.log.text()
            if error is not None:
                raise ContractViolation(
                    f"without idle tracking, the same calls raise {type(error).__name__}: "
                    f"{error}\ncalls: {history}"
                )
            diff = _first_difference(told.outcomes, untold.outcomes)
            if diff is not None:
                position, a, b = diff
                call = describe_op(_nth_evict(told.ops, position))
                raise ContractViolation(
                    f"rule: idle tracking changes no victim (kvframe.EvictionPolicy.track_idle)"
                    f"\nwith idle tracking (on_idle after every block made idle), {call} "
                    f"returned {_shown(a)}; the same calls without it: {_shown(b)}"
                    f"\ncalls: {history}"
                )

        run()

    # -- optional: a bound on evict ----------------------------------------------

    def test_max_evictable_bounds_evict(self, kvframe_target: PluginTarget) -> None:
        """Where ``max_evictable`` answered ``m``, the same calls on a fresh policy and
        then ``evict(m + 1, set())`` return None (skipped when the policy inherits it)."""
        from hypothesis import given

        if not _overrides_max_evictable(kvframe_target.create(4)):
            pytest.skip("the policy inherits max_evictable (it claims nothing)")

        @suite_settings(self.examples(0.5))
        @given(capacity=_capacities(), steps=_tier_steps())
        def run(capacity: int, steps: list[tuple[Any, ...]]) -> None:
            __tracebackhide__ = True
            checked = _checked_run(kvframe_target, capacity)
            _drive_tier(checked, steps)
            # Up to a dozen answers, spread over the run: each is one replay. (Four
            # were too few: whether a run happened to pick a tight answer decided
            # whether a bound that forgets T2 was caught.)
            picked = checked.bounds[:: max(1, len(checked.bounds) // 12)][:12]
            for position, bound in picked:
                replay, error = replay_ops(kvframe_target, capacity, checked.ops[:position])
                if error is not None:
                    continue  # the determinism check reports it
                got = replay.policy.evict(bound + 1, set())
                if got is not None:
                    history = ", ".join(describe_op(op) for op in checked.ops[:position])
                    raise ContractViolation(
                        f"rule: max_evictable bounds evict (kvframe.EvictionPolicy.max_evictable)"
                        f"\nafter {history}\nmax_evictable() answered {bound}, but "
                        f"evict({bound + 1}, protected=set()) returned "
                        f"{fmt([key for key, _ in got])}"
                    )

        run()

    # -- every short sequence ---------------------------------------------------

    def test_every_short_call_sequence_keeps_the_contract(
        self, kvframe_target: PluginTarget
    ) -> None:
        """Exhaustive over short sequences: the model, the refusal rule, and the calls that
        change no order (``get``, ``evict(0)`` -> ``[]``, a refused ``evict``, ``touch`` of an
        iterator acting as of a list). See :mod:`kvframe.testing.eviction_sequences`."""
        from kvframe.testing.eviction_sequences import check_all_short_sequences

        assert check_all_short_sequences(kvframe_target) > 0

    # -- unknown keys -----------------------------------------------------------

    def test_touching_unknown_keys_is_harmless(self, kvframe_target: PluginTarget) -> None:
        """A tier touches hashes it no longer (or never) held: no error, nothing appears.

        (Whether such a touch may change later choices is the policy's business:
        an adaptive policy learns from touches of keys it evicted.)
        """
        run = _checked_run(kvframe_target, 4)
        run.do(("touch", (1000,)))
        for key in range(4):
            run.do(("insert", key, 0))
        run.do(("touch", (1000, 1001)))
        run.do(("evict", 2, frozenset()))
        gone = [k for k in range(4) if k not in run.model]
        run.do(("touch", (*gone, 1002, *run.present())))
        run.do(("touch", ()))
        run.do(("insert", 4, 0))
        run.do(("touch", (4, 4000, *gone)))
        run.do(("evict", 1, frozenset({4})))
        run.do(("evict", len(run.model), frozenset()))

    # -- memory ---------------------------------------------------------------

    def test_memory_stays_bounded_by_capacity(self, kvframe_target: PluginTarget) -> None:
        """Thousands of keys pass through a small tier; the policy's memory must stop growing.

        Ghost lists, frequency counters and lazily-deleted heap entries must be
        trimmed to a multiple of the capacity, or a long run leaks memory.
        """
        capacity = 16
        policy = kvframe_target.create(capacity)
        model: dict[bytes, SimpleBlock] = {}
        evicted: list[bytes] = []

        def step(i: int) -> None:
            key = b"key-%d" % i
            if len(model) >= capacity:
                victims = policy.evict(len(model) - capacity + 1, {key})
                if victims is None:
                    return  # a policy that refuses still gets measured
                for victim, _ in victims:
                    model.pop(victim, None)
                    evicted.append(victim)
            block = SimpleBlock(key)
            policy.insert(key, block)
            model[key] = block
            if i % 3 == 0:
                # Recent keys, a ghost (recently evicted) and a never-seen key.
                recent = list(model)[-2:]
                ghosts = evicted[-3:-2]
                policy.touch([*recent, *ghosts, b"unknown-%d" % i])
            if len(evicted) > 4 * capacity:
                del evicted[: 2 * capacity]

        early, late = footprints_over_churn(policy, capacity, step)
        if grows_with_keys(early, late, capacity):
            raise ContractViolation(
                f"{kvframe_target.label} with capacity {capacity} held {early[0]} objects "
                f"({early[1]} bytes) after {CHURN_SHORT * capacity} keys passed through it and "
                f"{late[0]} ({late[1]} bytes) after {CHURN_LONG * capacity}: its memory grows "
                "with the number of keys ever seen (ghost lists or counters that are never "
                "trimmed?)"
            )

    def test_memory_stays_bounded_under_insert_remove_churn(
        self, kvframe_target: PluginTarget
    ) -> None:
        """Blocks leave by ``remove`` too (a tier dropping a failed store, a GPU block reused):
        whatever the policy remembers about a removed key must not pile up."""
        capacity = 16
        policy = kvframe_target.create(capacity)
        held: list[bytes] = []

        def step(i: int) -> None:
            key = b"key-%d" % i
            if len(held) >= capacity:
                victim = held.pop(i % len(held))
                policy.remove(victim)
            policy.insert(key, SimpleBlock(key))
            held.append(key)
            if i % 2 == 0:
                policy.touch(iter([key, held[0], b"gone-%d" % (i - capacity)]))
            if i % 7 == 0:
                policy.evict(0, set())

        early, late = footprints_over_churn(policy, capacity, step)
        if grows_with_keys(early, late, capacity):
            raise ContractViolation(
                f"rule: memory stays bounded by a multiple of the capacity, also when blocks "
                f"leave by remove\n{kvframe_target.label} with capacity {capacity}, driven by "
                f"insert(new key), remove(a held key) and touch([new key, oldest key, a removed "
                f"key]) in turn (never more than {capacity} held), held {early[0]} objects "
                f"({early[1]} bytes) after {CHURN_SHORT * capacity} keys passed through it and "
                f"{late[0]} ({late[1]} bytes) after {CHURN_LONG * capacity}: something kept per "
                "removed key is never trimmed"
            )

    # -- capability: the GPU prefix cache -------------------------------------

    def test_orders_the_real_gpu_tier(self, kvframe_target: PluginTarget) -> None:
        """The real GPU tier (``--gpu-eviction``) with this policy runs requests with shared
        prefixes without an allocation failing or its block accounting breaking; a policy
        that declares ``may_refuse`` is rejected by the tier when selected."""
        from hypothesis import given

        from kvframe.testing.gpu_tier import GPUTierRun, gpu_tier_steps

        if getattr(kvframe_target.create(4), "may_refuse", False):
            from kvframe.core.kv_cache_manager import KVCacheManager

            try:
                KVCacheManager(5, 2, 64, eviction_policy=kvframe_target.create(5))
            except ValueError as err:
                pytest.skip(f"the policy declares may_refuse; the GPU tier rejects it: {err}")
            raise ContractViolation(
                "the policy declares may_refuse = True, but the GPU tier accepted it"
            )
        if not self.gpu_prefix_cache:
            pytest.skip("capability gpu_prefix_cache is off for this policy")

        @suite_settings(self.examples(0.3))
        @given(steps=gpu_tier_steps())
        def run(steps: list[tuple[Any, ...]]) -> None:
            __tracebackhide__ = True
            GPUTierRun(kvframe_target).run(steps)

        run()

    def test_evicts_whenever_enough_blocks_are_idle(self, kvframe_target: PluginTarget) -> None:
        """As ``--gpu-eviction`` uses it: evict(n, set()) succeeds when n held blocks are idle."""
        if not self.gpu_prefix_cache:
            pytest.skip("capability gpu_prefix_cache is off for this policy")
        if getattr(kvframe_target.create(4), "may_refuse", False):
            pytest.skip("the policy declares may_refuse: the GPU tier does not accept it")
        from hypothesis import given
        from hypothesis import strategies as st

        steps = st.lists(
            st.one_of(
                st.tuples(st.just("insert"), st.integers(0, 7), st.sampled_from((0, 0, 1))),
                st.tuples(st.just("insert"), st.integers(0, 7), st.sampled_from((0, 0, 1))),
                st.tuples(st.just("touch"), st.lists(st.integers(0, 15), min_size=1, max_size=3)),
                st.tuples(st.just("ref"), st.integers(0, 15), st.sampled_from((0, 0, 1, 2))),
                st.tuples(st.just("remove"), st.integers(0, 15)),
                st.tuples(st.just("evict"), st.integers(0, 7)),
            ),
            max_size=40,
        )

        @suite_settings(self.examples(0.5))
        @given(steps=steps)
        def run(steps: list[tuple[Any, ...]]) -> None:
            __tracebackhide__ = True
            capacity = 12
            run = _checked_run(kvframe_target, capacity)
            for step in steps:
                kind = step[0]
                present = run.present()
                if kind == "insert":
                    if len(run.model) >= capacity:
                        continue
                    absent = run.absent_known()
                    pick = step[1]
                    key = absent[pick % len(absent)] if pick < 3 and absent else run.fresh_key()
                    run.do(("insert", key, step[2]))
                elif kind == "touch" and present:
                    keys = dict.fromkeys(present[v % len(present)] for v in step[1])
                    run.do(("touch", tuple(keys)))
                elif kind == "ref" and present:
                    run.do(("ref", present[step[1] % len(present)], step[2]))
                elif kind == "remove" and present:
                    run.do(("remove", present[step[1] % len(present)]))
                elif kind == "evict":
                    idle = sum(1 for block in run.model.values() if block.ref_cnt == 0)
                    if idle == 0:
                        continue
                    n = 1 + step[1] % idle
                    if run.do(("evict", n, frozenset())) is None:
                        raise run.log.violation(
                            f"(the last evict was refused although {idle} held blocks are idle "
                            "and none is protected)",
                            "The GPU prefix cache (--gpu-eviction) asks only for what is idle "
                            "and cannot handle None. If the policy may refuse on purpose, "
                            "declare may_refuse = True on its class (the GPU tier then rejects "
                            "it when selected).",
                        )

        run()


def _refused(run: PolicyRun, op_index: int) -> bool:
    """Whether the evict at ``op_index`` in ``run.ops`` returned None."""
    position = sum(1 for op in run.ops[:op_index] if op[0] == "evict")
    return run.outcomes[position] is None


def _outcomes_without(run: PolicyRun, op_index: int) -> list[tuple[Hashable, ...] | None]:
    position = sum(1 for op in run.ops[:op_index] if op[0] == "evict")
    return run.outcomes[:position] + run.outcomes[position + 1 :]


def _nth_evict(ops: Sequence[Op], position: int) -> Op:
    return [op for op in ops if op[0] == "evict"][position]


def _first_difference(
    a: Sequence[tuple[Hashable, ...] | None], b: Sequence[tuple[Hashable, ...] | None]
) -> tuple[int, tuple[Hashable, ...] | None, tuple[Hashable, ...] | None] | None:
    for position, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return position, x, y
    return None


def _shown(outcome: tuple[Hashable, ...] | None) -> str:
    return "None" if outcome is None else fmt(list(outcome))
