"""A refused ``evict`` changes nothing: the policy against a twin that never saw the call.

The rule (:class:`kvframe.EvictionPolicy`): ``evict`` returns ``n`` blocks, or
``None`` *and changes nothing*. Draining the policy right after the refusal
shows a changed eviction order, but not every change: a policy may keep state
that only shows in how it treats blocks inserted or touched later (the aging
floor of an LFU with aging, a frequency decay, counts given to protected keys).
An LFU-with-aging mutant that raised its floor on a refused call passed the
whole suite that way (issue 32).

So every checked run of the suite, at *every* refusal, whatever calls led
there, builds two policies from the same calls: one with the refused ``evict``
and a twin without it (both by replay on fresh policies; determinism is a rule
of its own, and blamed instead when it is the cause). Both then get the same
continuations, each made the way a tier makes calls, and every victim must be
the same:

* ``drain``: evict one block at a time until none is left, then make every
  block idle and go on (the order of all held blocks);
* ``release, drain``: every held block made idle first (the tier's transfers
  complete), then drain (where the blocks in use stand among the idle ones);
* ``store, drain``: a fresh key stored as a tier stores it (evicting first when
  full, the key protected), then drain (where new blocks go);
* ``touch held, store, drain``: every held key touched once, oldest first, then
  a fresh key stored and the policy drained (what a touch is worth against a
  new block now).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING

from kvframe.testing.common import ContractViolation, PluginTarget, fmt

if TYPE_CHECKING:
    from kvframe.testing.eviction_run import Op, PolicyRun

__all__ = ["check_refusal_against_twin"]

RULE = (
    "rule: a refused evict (it returned None) changes nothing, also what the policy does "
    "with later calls (kvframe.EvictionPolicy: evict is all-or-nothing)"
)

Outcome = tuple[Hashable, ...] | None
Step = Callable[["PolicyRun", "PolicyRun"], "tuple[str, Outcome, Outcome] | None"]


def _same(a: PolicyRun, b: PolicyRun, op: Op) -> tuple[str, Outcome, Outcome] | None:
    """Make ``op`` on both; the call's text and both victims if they differ."""
    from kvframe.testing.eviction_run import describe_op

    x = a.do(op)
    y = b.do(op)
    if x != y:
        return describe_op(op), x, y
    return None


def _store(a: PolicyRun, b: PolicyRun) -> tuple[str, Outcome, Outcome] | None:
    key = a.fresh_key()
    if len(a.model) >= a.capacity:
        op = ("evict", len(a.model) - a.capacity + 1, frozenset({key}))
        diff = _same(a, b, op)
        if diff is not None or a.outcomes[-1] is None:
            return diff
    return _same(a, b, ("insert", key, 0))


def _touch_held(a: PolicyRun, b: PolicyRun) -> tuple[str, Outcome, Outcome] | None:
    for key in a.present():
        diff = _same(a, b, ("touch", (key,)))
        if diff is not None:
            return diff
    return None


def _release(a: PolicyRun, b: PolicyRun) -> tuple[str, Outcome, Outcome] | None:
    """The tier's loads and stores complete: every held block becomes idle."""
    for key, block in list(a.model.items()):
        if block.ref_cnt != 0:
            _same(a, b, ("ref", key, 0))
    return None


def _drain(a: PolicyRun, b: PolicyRun) -> tuple[str, Outcome, Outcome] | None:
    for phase in range(2):
        for _ in range(4 * a.capacity + 8):
            if not a.model:
                break
            diff = _same(a, b, ("evict", 1, frozenset()))
            if diff is not None:
                return diff
            if a.outcomes[-1] is None:
                break
        if phase == 0:
            _release(a, b)
    return None


CONTINUATIONS: tuple[tuple[str, tuple[Step, ...]], ...] = (
    ("drain", (_drain,)),
    ("every held block made idle, drain", (_release, _drain)),
    ("store a fresh key, drain", (_store, _drain)),
    ("touch each held key, store a fresh key, drain", (_touch_held, _store, _drain)),
)
"""(what it does, its steps): the continuations both policies get after the refusal."""


def _continue(
    target: PluginTarget, run: PolicyRun, with_ops: Sequence[Op], without_ops: Sequence[Op]
) -> tuple[str, str, Outcome, Outcome, list[Op]] | None:
    """Replay both histories, run every continuation; the first difference, if any."""
    from kvframe.testing.eviction_run import replay_ops

    for name, steps in CONTINUATIONS:
        a, error = replay_ops(target, run.capacity, without_ops, track_idle_at=run.track_idle_at)
        b, error_b = replay_ops(target, run.capacity, with_ops, track_idle_at=run.track_idle_at)
        error = error or error_b
        if error is not None:
            raise ContractViolation(
                f"{RULE}\nreplaying the calls on a fresh policy (with and without the refused "
                f"evict) raised {type(error).__name__}: {error}\ncalls: {run.log.text()}"
            ) from error
        start = len(a.ops)
        for step in steps:
            diff = step(a, b)
            if diff is not None:
                call, x, y = diff
                return name, call, x, y, a.ops[start:]
    return None


def check_refusal_against_twin(run: PolicyRun) -> None:
    """The evict just made on ``run`` returned None: compare the policy with its twin."""
    __tracebackhide__ = True
    from kvframe.testing.eviction_run import describe_op, replay_ops

    target = run.target
    with_ops = list(run.ops)
    without_ops = with_ops[:-1]
    found = _continue(target, run, with_ops, without_ops)
    if found is None:
        return
    name, call, without_result, with_result, made = found
    refused = describe_op(with_ops[-1])
    history = ", ".join(describe_op(op) for op in without_ops) or "(no calls)"
    continuation = ", ".join(describe_op(op) for op in made)
    # A policy that differs from *itself* given the same calls breaks determinism instead.
    again, _ = replay_ops(target, run.capacity, with_ops, track_idle_at=run.track_idle_at)
    twin, _ = replay_ops(target, run.capacity, with_ops, track_idle_at=run.track_idle_at)
    for op in made:
        if again.do(op) != twin.do(op):
            raise ContractViolation(
                "rule: the same calls give the same victims (determinism)\n"
                f"after {history}, {refused}, then {continuation}: two fresh policies "
                "given the same calls evicted differently"
            )
    raise ContractViolation(
        f"{RULE}\nafter {history}\n{refused} returned None; then ({name}) {call} returned "
        f"{_shown(with_result)}, but {_shown(without_result)} on a twin policy given the same "
        f"calls without the refused evict\ncontinuation: {continuation}"
    )


def _shown(outcome: Outcome) -> str:
    return "None" if outcome is None else fmt(list(outcome))
