"""An eviction policy driven by concrete calls and checked against a reference model.

:class:`PolicyRun` is what every eviction check of the conformance suite drives:
the suite's property tests (:mod:`kvframe.testing.eviction`), the exhaustive
short sequences (:mod:`kvframe.testing.eviction_sequences`) and the twin
comparison of refused evictions (:mod:`kvframe.testing.eviction_twin`). It is
apart from them so that none of them imports another to get it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from kvframe.contract.support import claimed_max_evictable
from kvframe.testing.common import (
    OpLog,
    PluginTarget,
    call_plugin,
    describe_call,
    fmt,
)

__all__ = ["Op", "PolicyRun", "SimpleBlock", "describe_op", "replay_ops"]


class SimpleBlock:
    """A block as a tier owns it: only ``ref_cnt``, which the tier changes in place."""

    __slots__ = ("name", "ref_cnt")

    def __init__(self, name: object, ref_cnt: int = 0) -> None:
        self.name = name
        self.ref_cnt = ref_cnt

    def __repr__(self) -> str:
        return f"<block {fmt(self.name)} ref_cnt={self.ref_cnt}>"


Op = tuple[Any, ...]
"""A concrete call: ``("insert", key, ref_cnt)``, ``("remove", key)``, ``("touch", keys)``,
``("evict", n, protected)`` or ``("ref", key, ref_cnt)`` (the tier changing a block's count)."""


def describe_op(op: Op) -> str:
    """The call as the suite prints it in a failure's history."""
    kind = op[0]
    if kind == "insert":
        _, key, ref = op
        return f"insert({fmt(key)})" if ref == 0 else f"insert({fmt(key)}, ref_cnt={ref})"
    if kind == "remove":
        return f"remove({fmt(op[1])})"
    if kind == "touch":
        return f"touch({fmt(list(op[1]))})"
    if kind == "evict":
        return describe_call("evict", op[1], protected=set(op[2]))
    return f"(tier sets ref_cnt of {fmt(op[1])} to {op[2]})"


class PolicyRun:
    """One policy driven by concrete calls, checked against the reference model.

    ``check=False`` replays calls without checking (for the determinism and
    atomicity comparisons); ``outcomes`` records every evict's victim keys.
    """

    def __init__(
        self,
        target: PluginTarget,
        capacity: int,
        *,
        check: bool = True,
        track_idle_at: int | None = None,
        on_refusal: Callable[[PolicyRun], None] | None = None,
    ) -> None:
        self.target = target
        self.on_refusal = on_refusal
        """Called at every refused ``evict`` of a checked run (the suite passes the
        twin comparison, :mod:`kvframe.testing.eviction_twin`)."""
        self.capacity = capacity
        self.check = check
        self.log = OpLog()
        self.policy = call_plugin(
            self.log, f"{target.cls.__qualname__}({capacity})", target.create, capacity
        )
        self.model: dict[Hashable, SimpleBlock] = {}
        """What the policy must hold: key -> the block inserted under it."""
        self.blocks: dict[Hashable, SimpleBlock] = {}
        """The latest block made for each key (the tier keeps changing its ref_cnt)."""
        self.known: dict[Hashable, str] = {}
        """Every key any call named, with why the policy must *not* hold it when absent."""
        self.inserted: list[Hashable] = []
        self.next_key = 0
        self.ops: list[Op] = []
        self.outcomes: list[tuple[Hashable, ...] | None] = []
        self.has_len = hasattr(type(self.policy), "__len__")
        self.may_refuse = bool(getattr(self.policy, "may_refuse", False))
        self.bounded = claimed_max_evictable(self.policy) is not None
        """The policy answers ``max_evictable``: checked runs ask it before every evict."""
        self.bounds: list[tuple[int, int]] = []
        """(index in ``ops`` of the evict asked before, the int answer) for each answer."""
        self.track_idle_at = track_idle_at
        """Before which call (by index) to call ``track_idle``; ``None``: never."""
        self.tracking = False
        """``track_idle`` returned True: every block made idle is reported with ``on_idle``."""

    def _start_tracking(self) -> None:
        __tracebackhide__ = True
        accepted = call_plugin(self.log, "track_idle()", self.policy.track_idle)
        self.log.add(f"track_idle() -> {accepted!r}")
        self.tracking = bool(accepted)

    # -- keys ---------------------------------------------------------------

    def fresh_key(self) -> int:
        key = self.next_key
        self.next_key += 1
        return key

    def present(self) -> list[Hashable]:
        return list(self.model)

    def absent_known(self) -> list[Hashable]:
        return [k for k in self.inserted if k not in self.model]

    # -- calls --------------------------------------------------------------

    def do(self, op: Op) -> tuple[Hashable, ...] | None:
        """Make one call on the policy, check it, and record it."""
        __tracebackhide__ = True
        if self.track_idle_at == len(self.ops):
            self._start_tracking()
        self.ops.append(op)
        kind = op[0]
        text = describe_op(op)
        result: tuple[Hashable, ...] | None = None
        if kind == "insert":
            self._insert(op, text)
        elif kind == "remove":
            self._remove(op, text)
        elif kind == "touch":
            keys = list(op[1])
            call_plugin(self.log, text, self.policy.touch, keys)
            for key in keys:
                self.known.setdefault(key, "was only ever touched, never inserted")
        elif kind == "evict":
            result, text = self._evict(op, text)
        else:  # the tier changes a block's ref_cnt in place
            text = self._set_ref_cnt(op, text)
        for key in self.model:
            self.known[key] = ""
        self.log.add(text)
        if self.check:
            self._check_state()
        return result

    def _insert(self, op: Op, text: str) -> None:
        _, key, ref = op
        block = SimpleBlock(key, ref)
        call_plugin(self.log, text, self.policy.insert, key, block)
        self.model[key] = self.blocks[key] = block
        if isinstance(key, int) and key >= self.next_key:
            self.next_key = key + 1
        if key not in self.inserted:
            self.inserted.append(key)

    def _remove(self, op: Op, text: str) -> None:
        key = op[1]
        call_plugin(self.log, text, self.policy.remove, key)
        del self.model[key]
        self.known[key] = f"was removed by {text}"

    def _evict(self, op: Op, text: str) -> tuple[tuple[Hashable, ...] | None, str]:
        """``evict`` checked against the model and the ``max_evictable`` it answered just
        before; a refusal is also handed to ``on_refusal``. Returns the victims' keys
        (``None``: refused) and the call's text with its answer."""
        __tracebackhide__ = True
        _, n, protected = op
        for key in protected:
            self.known.setdefault(key, "was only ever named in `protected`, never inserted")
        bound = self._ask_bound() if self.check and self.bounded else None
        victims = call_plugin(self.log, text, self.policy.evict, n, set(protected))
        result = self._take_victims(text, n, protected, victims)
        if bound is not None and result is not None and n > bound:
            raise self.log.violation(
                f"then {text} returned {n} blocks {fmt(list(result))}, although "
                f"max_evictable() had just answered {bound}",
                "rule: max_evictable bounds evict: an evict of more blocks returns None "
                "(kvframe.EvictionPolicy.max_evictable).",
            )
        self.outcomes.append(result)
        text += f" -> {fmt(list(result)) if result is not None else 'None'}"
        if result is None and self.on_refusal is not None and self.track_idle_at is None:
            # (Idle-tracking runs are compared with untold runs instead: a policy
            # ignoring on_idle would show there as a refusal's doing here.)
            self.log.add(text)
            self.on_refusal(self)
            self.log.calls.pop()
        return result, text

    def _ask_bound(self) -> int | None:
        """``max_evictable()``, checked to be ``None`` or an int >= 0 and recorded."""
        __tracebackhide__ = True
        bound = call_plugin(self.log, "max_evictable()", self.policy.max_evictable)
        self.log.add(f"max_evictable() -> {bound!r}")
        if bound is not None and (type(bound) is not int or bound < 0):
            raise self.log.violation(
                f"then max_evictable() returned {bound!r}",
                "max_evictable returns None or an int >= 0 (kvframe.EvictionPolicy.max_evictable).",
            )
        if bound is not None:
            self.bounds.append((len(self.ops) - 1, bound))
        return bound  # type: ignore[no-any-return]

    def _set_ref_cnt(self, op: Op, text: str) -> str:
        """The tier changes a block's ``ref_cnt`` in place (and reports it if tracking)."""
        _, key, ref = op
        block = self.blocks[key]
        was, block.ref_cnt = block.ref_cnt, ref
        if self.tracking and ref == 0 and was != 0 and self.model.get(key) is block:
            # A tier that accepted idle tracking reports it, right after.
            call_plugin(self.log, f"on_idle([{fmt(key)}])", self.policy.on_idle, [key])
            text += f", on_idle([{fmt(key)}])"
        return text

    def _take_victims(
        self, call: str, n: int, protected: frozenset[Hashable], victims: object
    ) -> tuple[Hashable, ...] | None:
        """``evict``'s answer checked against the model; the victims leave the model."""
        __tracebackhide__ = True
        if victims is None:
            if self.check and not self.may_refuse:
                self._check_refusal_allowed(call, n, protected)
            return None
        contract = (
            f"The contract: evict returns exactly {n} (key, block) pairs the policy holds, "
            "none protected, none with ref_cnt != 0 - or None, changing nothing."
        )
        if not isinstance(victims, list | tuple):
            raise self.log.violation(f"then {call} returned {victims!r}", contract)
        keys: list[Hashable] = []
        for item in victims:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise self.log.violation(
                    f"then {call} returned {fmt(list(victims))}, whose item {item!r} is not a "
                    "(key, block) pair",
                    contract,
                )
            keys.append(item[0])
        if self.check:
            if len(victims) != n:
                raise self.log.violation(
                    f"then {call} returned {len(victims)} victim(s) {fmt(keys)}, not {n}",
                    contract,
                )
            self._check_victims(call, protected, victims, fmt(keys), contract)
        for key in keys:
            if key in self.model:
                del self.model[key]
                self.known[key] = f"was evicted by {call}"
        return tuple(keys)

    def _check_refusal_allowed(self, call: str, n: int, protected: frozenset[Hashable]) -> None:
        """The refusal rule: ``None`` only with fewer than ``n`` idle, unprotected blocks."""
        __tracebackhide__ = True
        idle = [
            key for key, block in self.model.items() if block.ref_cnt == 0 and key not in protected
        ]
        if len(idle) >= n:
            raise self.log.violation(
                f"then {call} returned None, although the policy holds {len(idle)} "
                f"idle, unprotected block(s) {fmt(idle)}",
                "The refusal rule (kvframe.EvictionPolicy.may_refuse): evict returns n "
                "blocks whenever n idle, unprotected blocks are held. A policy that "
                "refuses on purpose declares may_refuse = True (offload tiers accept "
                "it; the GPU tier rejects it when it is selected).",
            )

    def _check_victims(
        self,
        call: str,
        protected: frozenset[Hashable],
        victims: Any,
        shown: str,
        contract: str,
    ) -> None:
        """Each victim: unprotected, named once, held, the very block inserted, idle."""
        __tracebackhide__ = True
        log = self.log
        seen: set[Hashable] = set()
        for key, block in victims:
            if key in protected:
                raise log.violation(
                    f"then {call} returned {shown}, which includes {fmt(key)}, which is protected",
                    contract,
                )
            if key in seen:
                raise log.violation(f"then {call} returned {fmt(key)} twice: {shown}", contract)
            seen.add(key)
            if key not in self.model:
                why = self.known.get(key) or "was never inserted"
                raise log.violation(
                    f"then {call} returned {shown}, which includes {fmt(key)}, which the "
                    f"policy does not hold (it {why})",
                    contract,
                )
            if block is not self.model[key]:
                raise log.violation(
                    f"then {call} returned for key {fmt(key)} the object {block!r}, not "
                    f"the block inserted under it ({self.model[key]!r})",
                    contract,
                )
            if block.ref_cnt != 0:
                state = "being written" if block.ref_cnt < 0 else "in use"
                raise log.violation(
                    f"then {call} returned {shown}, which includes {fmt(key)}, whose block "
                    f"has ref_cnt {block.ref_cnt} ({state})",
                    contract,
                )

    def _check_state(self) -> None:
        """``get`` of every key ever named agrees with the model (and ``len``, if defined)."""
        __tracebackhide__ = True
        policy = self.policy
        log = self.log
        for key, why in self.known.items():
            expected = self.model.get(key)
            got = call_plugin(log, f"get({fmt(key)})", policy.get, key)
            if got is expected:
                continue
            if expected is None:
                raise log.violation(
                    f"then get({fmt(key)}) returned {got!r}, but {fmt(key)} {why}",
                    "A policy holds exactly what was inserted and not removed or evicted since.",
                )
            if got is None:
                raise log.violation(
                    f"then get({fmt(key)}) returned None, but {fmt(key)} was inserted and "
                    "neither removed nor evicted since",
                    "A policy holds exactly what was inserted and not removed or evicted since.",
                )
            raise log.violation(
                f"then get({fmt(key)}) returned {got!r}, not the block inserted under "
                f"{fmt(key)} ({expected!r})",
                "get must return the very object the tier inserted.",
            )
        if self.has_len:
            size = call_plugin(log, "len(policy)", len, policy)
            if size != len(self.model):
                raise log.violation(
                    f"then len(policy) is {size}, but it holds {len(self.model)} block(s)",
                    "__len__ must count the blocks the policy holds.",
                )


def replay_ops(
    target: PluginTarget, capacity: int, ops: Sequence[Op], *, track_idle_at: int | None = None
) -> tuple[PolicyRun, Exception | None]:
    """Make ``ops`` on a fresh policy without checking; return the run and any error it raised."""
    run = PolicyRun(target, capacity, check=False, track_idle_at=track_idle_at)
    try:
        for op in ops:
            run.do(op)
    except Exception as err:
        return run, err
    return run, None
