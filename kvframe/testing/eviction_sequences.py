"""Every short call sequence, checked exhaustively (the eviction suite's deterministic half).

Hypothesis finds long counterexamples but draws short ones by chance; most
contract breaks have a counterexample of three or four calls. So the suite
also walks *every* sequence of up to :data:`DEPTH` calls from a few starting
states (empty; a full tier; a tier with history: touches, evictions, a
touched ghost), with a small alphabet of calls chosen relative to the state
(insert a new key, re-insert the key that left last, remove / touch / change
the ``ref_cnt`` of the i-th held key, touch a ghost, evict 1 or 2 with or
without the oldest held key or the last key gone protected).

Each sequence is checked against the reference model (as the random tests
are: victims, ``get``, ``len``, the refusal rule), and the calls that must not
change the policy's order are checked by *draining* it: evicting one block at
a time until nothing is left (idle blocks first, then every block made idle)
(then three fresh keys are inserted, the first touched, and drained too, which
shows what the policy still remembers: ghosts, an adapted target) gives the
order the policy is in, and these must leave that order unchanged:

* ``get`` of every key it was ever given (held, gone, never seen);
* ``evict(0, ...)``, which must also return ``[]``;
* an ``evict`` that returned ``None``;
* a ``touch`` given an iterator instead of a list must act as the list does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from typing import Any

from kvframe.testing.common import ContractViolation, PluginTarget, fmt
from kvframe.testing.eviction_run import Op, PolicyRun, describe_op
from kvframe.testing.eviction_twin import check_refusal_against_twin

__all__ = ["DEPTH", "check_all_short_sequences"]

DEPTH = 3
"""Calls explored after the empty start (every combination); the other starts, which
already hold blocks, explore ``DEPTH - 1``."""

CAPACITY = 4

Abstract = tuple[Any, ...]

ALPHABET: tuple[Abstract, ...] = (
    ("insert",),
    ("reinsert",),
    ("remove", 0),
    ("remove", -1),
    ("touch", 0),
    ("touch", -1),
    ("touch-all",),
    ("touch-ghost",),
    ("ref", 0),
    ("ref", -1),
    ("evict", 1, False),
    ("evict", 1, True),
    ("evict", 2, False),
    ("evict", 2, True),
    ("evict", 1, "ghost"),
)
"""The calls tried at every state; indices pick among the held keys (oldest first)."""

STARTS: tuple[tuple[Abstract, ...], ...] = (
    (),
    (("insert",),) * 4,
    (
        *(("insert",),) * 4,
        ("touch", 1),
        ("evict", 2, False),
        ("touch-ghost",),
        ("insert",),
        ("ref", 0),
    ),
)
"""Starting states, as abstract calls: empty, a full tier, a tier with history."""


def _concrete(run: PolicyRun, step: Abstract) -> Op | None:
    """The call ``step`` means in ``run``'s current state, or None if it does not apply."""
    kind = step[0]
    present = run.present()
    gone = run.absent_known()
    if kind == "insert":
        return ("insert", run.fresh_key(), 0) if len(present) < CAPACITY else None
    if kind == "reinsert":
        return ("insert", gone[-1], 0) if gone and len(present) < CAPACITY else None
    if kind == "touch-all":
        return ("touch", tuple(reversed(present))) if len(present) > 1 else None
    if kind == "touch-ghost":
        return ("touch", (gone[-1],)) if gone else None
    if kind == "evict":
        _, n, protect = step
        if protect == "ghost":
            # The key coming back is protected, as a tier's store protects it.
            return ("evict", n, frozenset({gone[-1]})) if gone else None
        if protect and not present:
            return None
        # Protect the oldest key: the likeliest victim, so the policy must look on.
        return ("evict", n, frozenset({present[0]}) if protect else frozenset())
    if not present or (step[1] == -1 and len(present) < 2):
        return None
    key = present[step[1]]
    if kind == "remove":
        return ("remove", key)
    if kind == "touch":
        return ("touch", (key,))
    # kind == "ref": the tier takes the block (the newest: starts writing it) or lets go
    return ("ref", key, 0 if run.blocks[key].ref_cnt else (1 if step[1] == 0 else -1))


def replay_ops(target: PluginTarget, ops: Sequence[Op]) -> PolicyRun:
    run = PolicyRun(target, CAPACITY, check=False)
    for op in ops:
        run.do(op)
    return run


def _drain(run: PolicyRun, what: str) -> tuple[Hashable, ...]:
    """Evict one block at a time until none is left: the order the policy is in.

    Idle blocks first; then every held block is made idle and draining goes on
    (``"|"`` separates the two), so blocks in use are ordered too.
    """
    policy = run.policy
    order: list[Hashable] = []
    for phase in range(2):
        for _ in range(4 * CAPACITY + 4):
            try:
                victims = policy.evict(1, frozenset())
            except Exception as err:
                raise run.log.violation(
                    f"then, {what}, evict(1, protected={{}}) raised {type(err).__name__}: {err}",
                    "",
                ) from err
            if not victims:
                break
            order.append(victims[0][0])
        if phase == 0:
            order.append("|")
            for block in run.blocks.values():
                block.ref_cnt = 0
    # What the drained policy still remembers (ghosts, an adapted target) shows in how
    # it orders new blocks: three fresh ones, the first touched, drained again.
    probe = [-1, -2, -3]
    try:
        for key in probe:
            policy.insert(key, _ProbeBlock())
        policy.touch([probe[0]])
        for _ in range(3):
            victims = policy.evict(1, frozenset())
            order.append(victims[0][0] if victims else None)
    except Exception as err:
        raise run.log.violation(
            f"then, {what}, inserting fresh keys -1, -2, -3, touch([-1]) and evicting "
            f"raised {type(err).__name__}: {err}",
            "",
        ) from err
    return tuple(order)


class _ProbeBlock:
    __slots__ = ("ref_cnt",)

    def __init__(self) -> None:
        self.ref_cnt = 0


def _shown(order: tuple[Hashable, ...]) -> str:
    return "[" + ", ".join(fmt(k) for k in order) + "]"


def _differs(
    target: PluginTarget,
    ops: Sequence[Op],
    expected: tuple[Hashable, ...],
    got: tuple[Hashable, ...],
    rule: str,
    change: str,
) -> ContractViolation:
    """The violation for a changed order (or for non-determinism, if that is the cause)."""
    history = ", ".join(describe_op(op) for op in ops)
    again = _drain(replay_ops(target, ops), "draining")
    if again != expected:
        return ContractViolation(
            f"rule: the same calls give the same victims (determinism)\n"
            f"after {history}\ndraining the policy with evict(1, protected={{}}) gave "
            f"{_shown(expected)} once and {_shown(again)} on a fresh policy given the same calls"
        )
    return ContractViolation(
        f"rule: {rule}\nafter {history}\n{change}, draining the policy with "
        f"evict(1, protected={{}}) one block at a time evicts {_shown(got)}; without it, "
        f"{_shown(expected)} ('|': the blocks in use, made idle, follow; then the probe "
        "keys -1, -2, -3)"
    )


def _evict_zero(probe: PolicyRun) -> None:
    protected = frozenset(probe.present()[:1])
    try:
        result = probe.policy.evict(0, protected)
    except Exception as err:
        raise probe.log.violation(
            f"then evict(0, protected={fmt(set(protected))}) raised {type(err).__name__}: {err}",
            "rule: evict(0, ...) returns [] (nothing to evict is not a refusal)",
        ) from err
    if result is None or list(result) != []:
        raise probe.log.violation(
            f"then evict(0, protected={fmt(set(protected))}) returned {result!r}",
            "rule: evict(0, ...) returns [] (nothing to evict is not a refusal)",
        )


def _check_node(
    target: PluginTarget, ops: list[Op], parent_order: tuple[Hashable, ...] | None
) -> tuple[PolicyRun, tuple[Hashable, ...]]:
    """Check the sequence ``ops`` (its prefix is checked already); return its state and order."""
    __tracebackhide__ = True
    run = replay_ops(target, ops[:-1]) if ops else replay_ops(target, ())
    run.check = True
    run.on_refusal = check_refusal_against_twin
    if ops:
        run.do(ops[-1])
    state = replay_ops(target, ops)
    order = _drain(state, "draining")
    last = ops[-1] if ops else None
    if last is not None and last[0] == "evict" and run.outcomes[-1] is None:
        _check_refused_evict(target, ops, parent_order, order)
    if last is not None and last[0] == "touch" and last[1]:
        _check_touch_takes_an_iterator(target, ops, order)
    _check_reads_change_nothing(target, ops, order)
    return run, order


def _check_refused_evict(
    target: PluginTarget,
    ops: list[Op],
    parent_order: tuple[Hashable, ...] | None,
    order: tuple[Hashable, ...],
) -> None:
    """A refused evict (the last op, returned None) leaves the parent's order as it was."""
    __tracebackhide__ = True
    last = ops[-1]
    assert parent_order is not None
    if order != parent_order:
        raise _differs(
            target,
            ops[:-1],
            parent_order,
            order,
            "a refused evict (it returned None) changes nothing, eviction order included",
            f"with the refused {describe_op(last)} added",
        )


def _check_touch_takes_an_iterator(
    target: PluginTarget, ops: list[Op], order: tuple[Hashable, ...]
) -> None:
    """The last op, a touch, given a generator acts as given a list: kvframe's connector
    passes an iterator, so a policy that only handles lists breaks there."""
    __tracebackhide__ = True
    last = ops[-1]
    probe = replay_ops(target, ops[:-1])
    keys = last[1]
    try:
        probe.policy.touch(key for key in keys)
    except Exception as err:
        raise probe.log.violation(
            f"then touch(<generator of {fmt(list(keys))}>) raised {type(err).__name__}: {err}",
            "rule: touch accepts any iterable of keys, not only a list (kvframe's own "
            "connector passes an iterator)",
        ) from err
    got = _drain(probe, "draining")
    if got != order:
        raise _differs(
            target,
            ops,
            order,
            got,
            "touch accepts any iterable of keys and acts on an iterator as on a list",
            f"with the last touch given a generator of {fmt(list(keys))} instead of a list",
        )


def _check_reads_change_nothing(
    target: PluginTarget, ops: list[Op], order: tuple[Hashable, ...]
) -> None:
    """``get`` of every key (and one unknown) and ``evict(0)`` change no order."""
    __tracebackhide__ = True
    # get and evict(0) in one probe; only a failure pays to tell which one it was.
    probe = replay_ops(target, ops)
    _evict_zero(probe)
    keys = [*probe.known, 1000]
    for key in keys:
        probe.policy.get(key)
    got = _drain(probe, "draining")
    if got != order:
        probe = replay_ops(target, ops)
        _evict_zero(probe)
        alone = _drain(probe, "draining")
        if alone != order:
            raise _differs(
                target, ops, order, alone, "evict(0, ...) changes nothing", "with evict(0) added"
            )
        raise _differs(
            target,
            ops,
            order,
            got,
            "get changes no order",
            f"with get({'), get('.join(fmt(k) for k in keys)}) added",
        )


def check_all_short_sequences(target: PluginTarget) -> int:
    """Walk every sequence of up to :data:`DEPTH` alphabet calls from each start; return
    how many sequences were checked."""
    __tracebackhide__ = True
    checked = 0
    for index, start in enumerate(STARTS):
        depth_limit = DEPTH if index == 0 else DEPTH - 1
        run = PolicyRun(target, CAPACITY, check=False)
        for step in start:
            op = _concrete(run, step)
            if op is not None:
                run.do(op)
        prefix = list(run.ops)
        _, order = _check_node(target, prefix, None)
        # Breadth first: the first failure found is one of the shortest.
        stack: deque[tuple[list[Op], tuple[Hashable, ...], int]] = deque([(prefix, order, 0)])
        while stack:
            ops, order, depth = stack.popleft()
            if depth == depth_limit:
                continue
            state = replay_ops(target, ops)
            for step in ALPHABET:
                op = _concrete(state, step)
                if op is None:
                    continue
                child = [*ops, op]
                _, child_order = _check_node(target, child, order)
                checked += 1
                stack.append((child, child_order, depth + 1))
    return checked
