"""Conformance checks for an eviction policy's vLLM 0.33.0 form (``request_scoped_form``).

Under ``--vllm 0.33`` an offload tier is vLLM 0.33.0's CPU tier, whose manager
drives the policy per request (:class:`kvframe.RequestScopedPolicy`, reached
through :attr:`kvframe.EvictionPolicy.request_scoped_form`). These checks build
the form as the host does, ``request_scoped_form(capacity, **options)``, and run
it under the host's own manager
(:class:`~kvframe.offload.jobs.manager.RequestScopedOffloadManager`), driven by
generated request lifecycles the way vLLM 0.33.0's connector drives it --
stores offered and landed (or failed), loads of the ready chunks a lookup
finds, requests finishing, the tier reset -- while every answer of the form
is compared with a model of what the manager inserted:

* ``get`` answers the very block inserted under a key and not removed,
  evicted or cleared since (``None`` otherwise);
* ``evict(n, protected)`` returns exactly ``n`` distinct chunks it held, each
  marked evictable (``ref_cnt == 0``), none protected, and holds them no more;
  ``None`` only when fewer than ``n`` such chunks are held;
* after ``clear`` it holds nothing;
* the same calls on a fresh form give the same victims (determinism);
* the same contract holds when the form orders a *tier below DRAM*
  (:class:`~kvframe.offload.tiering.LedgerTier` under the host's tier chain,
  :class:`~kvframe.offload.tiering.TieringOffloadManager`): chunks cascade
  into it, are promoted out of it (pinned while copied), its jobs land or
  fail, and the chain ends with nothing in flight.

A policy whose ``request_scoped_form`` is ``None`` is skipped with a message
saying what that means: it runs under ``--vllm 0.19.1`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Sequence
from typing import Any

import pytest

from kvframe.contract.bases import EvictionPolicy
from kvframe.contract.request_scoped import RequestAccess
from kvframe.testing.common import (
    ContractViolation,
    OpLog,
    PluginTarget,
    call_plugin,
    fmt,
    suite_settings,
)

__all__ = ["RequestScopedChecks", "drive_request_scoped", "drive_tier_chain"]

_REQUESTS = 6
_FAMILIES = 4
"""Requests ``r`` and ``r + 4`` share their chunks: reuses, pending hits and shared stores."""
_CHAIN = 6
"""Chunks per request."""


def _no_form_message(target: PluginTarget) -> str:
    return (
        f"{target.label} offers no vLLM 0.33.0 form (request_scoped_form is None): it runs "
        "under --vllm 0.19.1, and an offload tier under --vllm 0.33 refuses it. To run there, "
        'see docs/plugin-authors.md, "vLLM 0.33: the request-scoped seams"'
    )


def build_form(target: PluginTarget, capacity: int) -> Any:
    """The policy's request-scoped form for ``capacity`` chunks, as the host builds it;
    skips the check for a policy with none or options the form rejects."""
    cls = target.cls
    form = cls.request_scoped_form if issubclass(cls, EvictionPolicy) else None
    if form is None:
        pytest.skip(_no_form_message(target))
    try:
        return form(capacity, **dict(target.options))
    except ValueError as err:
        pytest.skip(f"{target.label}: request_scoped_form rejects these options ({err})")


class _CheckedForm:
    """A form as the manager sees it, every answer checked against the model."""

    def __init__(self, form: Any, log: OpLog) -> None:
        self.form = form
        self.log = log
        self.held: dict[Hashable, Any] = {}
        self.evictable: set[Hashable] = set()
        self.victims: list[tuple[Hashable, ...]] = []

    def _call(self, call: str, method: str, *args: Any) -> Any:
        __tracebackhide__ = True
        self.log.add(call)
        return call_plugin(self.log, call, getattr(self.form, method), *args)

    def _gone(self, keys: Collection[Hashable], why: str) -> None:
        for key in keys:
            if self.form.get(key) is not None:
                raise self.log.violation(
                    f"get({fmt(key)}) still answers a block after {why}",
                    "the form must hold a key no more once it is evicted, removed or cleared",
                )

    def get(self, key: Hashable) -> Any:
        block = call_plugin(self.log, f"get({fmt(key)})", self.form.get, key)
        expected = self.held.get(key)
        if block is not expected:
            raise self.log.violation(
                f"get({fmt(key)}) returned {block!r}",
                f"expected {expected!r}: the block inserted under it and not removed, "
                "evicted or cleared since",
            )
        return block

    def insert(self, key: Hashable, block: Any, access: RequestAccess) -> None:
        self._call(f"insert({fmt(key)})", "insert", key, block, access)
        self.held[key] = block

    def remove(self, key: Hashable) -> None:
        self._call(f"remove({fmt(key)})", "remove", key)
        self.held.pop(key, None)
        self.evictable.discard(key)
        self._gone((key,), f"remove({fmt(key)})")

    def evict(self, n: int, protected: Collection[Hashable]) -> list[tuple[Hashable, Any]] | None:
        call = f"evict({n}, protected={fmt(set(protected))})"
        result = self._call(call, "evict", n, protected)
        candidates = sorted(map(fmt, self.evictable.difference(protected)))
        if result is None:
            if len(candidates) >= n:
                raise self.log.violation(
                    f"{call} returned None",
                    f"it holds {len(candidates)} evictable, unprotected chunks "
                    f"({', '.join(candidates)}): it must evict",
                )
            return None
        self._check_victims(call, n, protected, result)
        return result

    def _check_victims(
        self, call: str, n: int, protected: Collection[Hashable], result: Any
    ) -> None:
        keys = [key for key, _ in result]
        if len(result) != n or len(set(keys)) != n:
            raise self.log.violation(
                f"{call} returned {fmt(keys)}", f"it must return exactly {n} distinct chunks"
            )
        for key, block in result:
            if key not in self.held or block is not self.held[key]:
                raise self.log.violation(
                    f"{call} returned {fmt(key)} with {block!r}",
                    "not a chunk it holds (the block inserted under that key)",
                )
            if key in protected or key not in self.evictable or block.ref_cnt != 0:
                raise self.log.violation(
                    f"{call} returned {fmt(key)} (ref_cnt={block.ref_cnt})",
                    "a victim must be marked evictable (ref_cnt == 0) and not protected",
                )
        for key in keys:
            del self.held[key]
            self.evictable.discard(key)
        self.victims.append(tuple(keys))
        self._gone(keys, call)

    def on_store_miss(self, keys: Sequence[Hashable], access: RequestAccess) -> None:
        self._call(f"on_store_miss({fmt(list(keys))})", "on_store_miss", keys, access)

    def on_request_access(self, keys: Sequence[Hashable], access: RequestAccess) -> None:
        self._call(f"on_request_access({fmt(list(keys))})", "on_request_access", keys, access)

    def on_request_finished(
        self,
        keys: Sequence[Hashable],
        insertion_only: Collection[Hashable],
        reused: Collection[Hashable],
        access: RequestAccess,
    ) -> None:
        call = f"on_request_finished({fmt(list(keys))})"
        self._call(call, "on_request_finished", keys, insertion_only, reused, access)

    def mark_evictable(self, key: Hashable) -> None:
        self._call(f"mark_evictable({fmt(key)})", "mark_evictable", key)
        self.evictable.add(key)

    def mark_non_evictable(self, key: Hashable) -> None:
        self._call(f"mark_non_evictable({fmt(key)})", "mark_non_evictable", key)
        self.evictable.discard(key)

    def clear(self) -> None:
        gone = list(self.held)
        self._call("clear()", "clear")
        self.held.clear()
        self.evictable.clear()
        self._gone(gone, "clear()")


class _Requests:
    """The requests of one run: each one's context and its transfers in flight."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.generation = [0] * _REQUESTS
        self.access = [self._new(r) for r in range(_REQUESTS)]
        self.stores: list[list[Hashable]] = [[] for _ in self.access]
        self.loads: list[list[Hashable]] = [[] for _ in self.access]

    def _new(self, r: int) -> RequestAccess:
        chain = [(r % _FAMILIES, i) for i in range(_CHAIN)]
        access = RequestAccess(
            f"r{r}.{self.generation[r]}", {k: 16 * (i + 1) for i, k in enumerate(chain)}
        )
        self.manager.on_new_request(access)
        return access

    def chain(self, r: int) -> list[Hashable]:
        return list(self.access[r].positions)

    def land(self, r: int, success: bool, *, loads: bool = True) -> None:
        if self.stores[r]:
            self.manager.complete_store(self.stores[r], self.access[r], success)
            self.stores[r] = []
        if loads and self.loads[r]:
            self.manager.complete_load(self.loads[r], self.access[r])
            self.loads[r] = []

    def finish(self, r: int) -> None:
        self.land(r, True)
        self.manager.on_request_finished(self.access[r])
        self.generation[r] += 1
        self.access[r] = self._new(r)


def drive_request_scoped(
    form: Any, capacity: int, steps: Sequence[tuple[Any, ...]]
) -> _CheckedForm:
    """Run ``form`` under the host's 0.33.0 manager through generated request steps."""
    from kvframe.offload.jobs.manager import LookupResult, RequestScopedOffloadManager

    checked = _CheckedForm(form, OpLog())
    manager = RequestScopedOffloadManager(checked, capacity)
    requests = _Requests(manager)
    for step in steps:
        kind, r = step[0], step[1] if len(step) > 1 else 0
        chain = requests.chain(r)
        if kind == "store" and not requests.stores[r]:
            # The connector offers a request's chunks in order, up to what it computed.
            result = manager.prepare_store(chain[: step[2]], requests.access[r])
            if result is not None:
                requests.stores[r] = list(result.keys_to_store)
                if step[3] != "later":  # the store lands (or fails) before the next step
                    requests.land(r, step[3] == "lands", loads=False)
        elif kind == "load" and not requests.loads[r]:
            ready = []
            for key in chain:
                if manager.lookup(key, requests.access[r]) is not LookupResult.HIT:
                    break
                ready.append(key)
            if ready:
                manager.prepare_load(ready, requests.access[r])
                requests.loads[r] = ready
        elif kind == "land":
            requests.land(r, step[2])
        elif kind == "finish":
            requests.finish(r)
        elif kind == "reset" and not any(requests.stores) and not any(requests.loads):
            manager.reset()
    for r in range(len(requests.access)):
        requests.finish(r)
    return checked


def drive_tier_chain(
    form: Any, dram_form: Any, capacity: int, steps: Sequence[tuple[Any, ...]]
) -> _CheckedForm:
    """Run ``form`` as the ledger policy of a tier below a DRAM tier of 2 chunks
    (ordered by ``dram_form``), through generated request steps."""
    from kvframe.offload.jobs.manager import LookupResult, RequestScopedOffloadManager
    from kvframe.offload.tiering import LedgerTier, TieringOffloadManager

    checked = _CheckedForm(form, OpLog())
    tier = LedgerTier("tier", RequestScopedOffloadManager(checked, capacity))
    chain = TieringOffloadManager(RequestScopedOffloadManager(dram_form, 2), [tier])
    requests = _Requests(chain)
    for step in steps:
        kind, r = step[0], step[1] if len(step) > 1 else 0
        if kind == "store" and not requests.stores[r]:
            result = chain.prepare_store(requests.chain(r)[: step[2]], requests.access[r])
            if result is not None and result.keys_to_store:
                requests.stores[r] = list(result.keys_to_store)
                if step[3] != "later":
                    requests.land(r, step[3] == "lands", loads=False)
        elif kind == "load" and not requests.loads[r]:
            _load_ready(chain, requests, r, LookupResult.HIT)
        elif kind == "land":
            for job_id in tier.pending_job_ids():
                tier.finish(job_id, step[2])
            chain.on_schedule_end()
        elif kind == "finish":
            requests.finish(r)
        elif kind == "reset":
            chain.on_schedule_end()
    for r in range(len(requests.access)):
        requests.finish(r)
    for _ in range(2):  # land what is in flight, then the promotions the last step submitted
        chain.on_schedule_end()
        for job_id in tier.pending_job_ids():
            tier.finish(job_id)
    chain.on_schedule_end()
    chain.on_schedule_end()
    if chain.has_pending_work():
        raise ContractViolation(
            f"a tier chain over this form kept work in flight after every job landed\n"
            f"calls: {checked.log.text()}"
        )
    return checked


def _load_ready(chain: Any, requests: _Requests, r: int, hit: Any) -> None:
    """Look the request's chunks up (a tier hit starts a promotion) and load the DRAM hits
    still ready after the walk (a promotion may have evicted one)."""
    access = requests.access[r]
    ready = []
    for key in requests.chain(r):
        if chain.lookup(key, access) is not hit:
            break
        ready.append(key)
    still = []
    for key in ready:
        if chain.primary.lookup(key, access) is not hit:
            break
        still.append(key)
    if still:
        chain.prepare_load(still, access)
        requests.loads[r] = still


def _steps() -> Any:
    from hypothesis import strategies as st

    request = st.integers(0, _REQUESTS - 1)
    store = st.tuples(
        st.just("store"),
        request,
        st.integers(1, _CHAIN),
        st.sampled_from(("lands", "lands", "lands", "later", "fails")),
    )
    return st.lists(
        st.one_of(
            store,
            store,
            st.tuples(st.just("land"), request, st.booleans()),
            st.tuples(st.just("load"), request),
            st.tuples(st.just("finish"), request),
            st.tuples(st.just("reset")),
        ),
        min_size=20,
        max_size=60,
    )


class RequestScopedChecks:
    """The checks of a policy's ``request_scoped_form``, mixed into the eviction suite."""

    examples: Callable[..., int]
    """:meth:`kvframe.testing.PluginSuite.examples`, from the suite this is mixed into."""

    def test_request_scoped_form_keeps_the_contract(self, kvframe_target: PluginTarget) -> None:
        """vLLM 0.33.0's form, run by the host's manager: exact victims, never protected or
        in use, ``None`` only without enough evictable chunks, ``get`` and ``clear`` exact."""
        from hypothesis import given
        from hypothesis import strategies as st

        build_form(kvframe_target, 1)  # skips here, not inside hypothesis

        @suite_settings(self.examples())
        @given(capacity=st.integers(1, 4), steps=_steps())
        def run(capacity: int, steps: list[tuple[Any, ...]]) -> None:
            __tracebackhide__ = True
            drive_request_scoped(build_form(kvframe_target, capacity), capacity, steps)

        run()

    def test_request_scoped_form_orders_a_tier_below_dram(
        self, kvframe_target: PluginTarget
    ) -> None:
        """The form as a tier below DRAM in the host's tier chain (vLLM 0.33.0's tiering
        manager): the same contract under cascades, promotions and failed jobs, and the
        chain ends with nothing in flight."""
        from hypothesis import given
        from hypothesis import strategies as st

        build_form(kvframe_target, 1)

        @suite_settings(self.examples(0.5))
        @given(capacity=st.integers(1, 6), steps=_steps())
        def run(capacity: int, steps: list[tuple[Any, ...]]) -> None:
            __tracebackhide__ = True
            drive_tier_chain(
                build_form(kvframe_target, capacity), build_form(kvframe_target, 2), capacity, steps
            )

        run()

    def test_request_scoped_form_is_deterministic(self, kvframe_target: PluginTarget) -> None:
        """The same request lifecycles on a fresh form evict the same chunks in the same order."""
        from hypothesis import given
        from hypothesis import strategies as st

        build_form(kvframe_target, 1)

        @suite_settings(self.examples(0.5))
        @given(capacity=st.integers(1, 4), steps=_steps())
        def run(capacity: int, steps: list[tuple[Any, ...]]) -> None:
            __tracebackhide__ = True
            first = drive_request_scoped(build_form(kvframe_target, capacity), capacity, steps)
            second = drive_request_scoped(build_form(kvframe_target, capacity), capacity, steps)
            if first.victims != second.victims:
                a, b = first.victims, second.victims
                at = next(
                    (i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b))
                )
                raise ContractViolation(
                    "not deterministic: the same calls on a fresh request-scoped form gave "
                    f"different victims at eviction {at + 1}: {fmt(list(a[at : at + 1]))} "
                    f"the first time, {fmt(list(b[at : at + 1]))} the second\n"
                    f"calls: {first.log.text()}"
                )

        run()
