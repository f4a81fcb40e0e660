"""The base class of every kind of kvframe plugin.

A plugin is one class. It subclasses the base of its kind, sets ``name`` (the
string users select it by) and ``description`` (one line for ``kvframe plugins``),
and implements the abstract methods. Its options are the keyword-only parameters
of its ``__init__``, with type hints and defaults::

    class MyLFU(kvframe.EvictionPolicy):
        name = "lfu"
        description = "Least-frequently-used, ties broken by age."

        def __init__(self, capacity: int, *, decay: float = 0.0) -> None:
            super().__init__(capacity)
            self.decay = decay
        ...

so ``--eviction lfu:decay=0.5`` constructs ``MyLFU(capacity, decay=0.5)``. The
host validates option names and converts values to the annotated types (``int``,
``float``, ``bool``, ``str``; an ``int`` option also accepts sizes like ``8GiB``)
before the constructor runs. Positional parameters before the ``*`` are the
*context* the host supplies for that kind (documented on each base) and can never
be set from a config string.

The host calls these methods directly on the object it built. Nothing here goes
through pluggy once the engine is running: the hook specs in
:mod:`kvframe.contract.hookspecs` are only used to *find* the classes.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Hashable, Iterable, Sequence, Set
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from kvframe.contract.offload import (
        ConnectorSemantics,
        OffloadContext,
        OffloadManager,
        TransferHandler,
        TransferPricing,
    )
    from kvframe.contract.records import (
        KVEvent,
        PrefixCacheEvent,
        RequestFinished,
        StepDecision,
        StepSnapshot,
    )
    from kvframe.contract.request_scoped import (
        InManagerReuseFilter,
        RequestScopedPolicy,
        RequestScopedSlots,
    )
    from kvframe.contract.views import EvictableBlock, SchedulerContext
    from kvframe.domain.queues import RequestQueue
    from kvframe.domain.request import Request
    from kvframe.domain.tokens import BlockHash

__all__ = [
    "EvictionPolicy",
    "OffloadSpec",
    "PluginBase",
    "ReuseFilter",
    "SchedulingPolicy",
    "Tracer",
]


class PluginBase(abc.ABC):  # noqa: B024 - the kinds below add the abstract methods
    """What every plugin class has: a kind, a name and a one-line description."""

    kind: ClassVar[str] = ""
    """The extension point (``"scheduling"``, ``"eviction"``, ...); set by each base."""

    name: ClassVar[str] = ""
    """The name users select the plugin by. Lower case, no ``:`` or ``,``."""

    description: ClassVar[str] = ""
    """One line shown by ``kvframe plugins``."""


# ==========================================================================
# Scheduling policy
# ==========================================================================


class SchedulingPolicy(PluginBase):
    """Which waiting request runs next, who is preempted, and what is retained.

    The scheduler core keeps vLLM V1's mechanics (token budget, chunked prefill,
    allocation, recompute preemption); a policy decides only the choices below.
    Constructed with its options only; ``attach`` follows once the scheduler
    exists. All methods run on the scheduler's hot path: keep them cheap.

    Every method has a default, and the defaults are first-come-first-served
    exactly as vLLM schedules by default. A policy that only changes the order
    defines :meth:`sort_key` and nothing else::

        class ShortestPromptFirst(kvframe.SchedulingPolicy):
            name = "spf"
            description = "Shortest prompt first; preempts the longest."

            def sort_key(self, request):
                return (request.num_prompt_tokens, request.arrival_time)
    """

    kind: ClassVar[str] = "scheduling"

    allows_decode_runs: ClassVar[bool | None] = None
    """May the engine take runs of plain decode steps in one go with this policy?

    In such a run (:mod:`kvframe.core.decode_run`) every step still calls
    :meth:`on_step_start`, queues arrivals (:meth:`on_arrival`) and runs the
    waiting phase (:meth:`select_queue`), but the *running* requests' token
    counters (``num_computed_tokens``, ``num_tokens``, their outputs and block
    hashes) are brought up to date only when the run ends. Set ``True`` if
    those three methods never read running requests' counters, ``False`` to
    always go step by step. ``None`` (the default): allowed unless the class
    overrides one of the three or :meth:`may_admit`. Decisions never change
    either way; only speed.
    """

    def attach(self, context: SchedulerContext) -> None:
        """Called once, before the first step, with the scheduler's view."""

    def sort_key(self, request: Request) -> Any:
        """Override to order the waiting queues by this key, smallest first.

        When a subclass defines it, the default :meth:`create_queue` returns a
        :class:`~kvframe.domain.queues.SortedRequestQueue` on it (equal keys
        first-come-first-served), :meth:`select_queue` admits from the queue
        whose head has the smaller key, and :meth:`choose_victim` preempts the
        running request with the largest key. The key is computed when a
        request is queued. Not overridden, the queues are FIFO.
        """
        raise NotImplementedError("sort_key is optional: define it in a subclass to use it")

    @property
    def _sorted(self) -> bool:
        return type(self).sort_key is not SchedulingPolicy.sort_key

    def create_queue(self) -> RequestQueue:
        """Return a new, empty queue; used for both ``waiting`` and ``skipped_waiting``.

        The default is the host's :class:`~kvframe.domain.queues.FIFORequestQueue`,
        or a :class:`~kvframe.domain.queues.SortedRequestQueue` on
        :meth:`sort_key` when the policy defines one. Override only for an
        order neither can keep.
        """
        from kvframe.domain.queues import FIFORequestQueue, SortedRequestQueue

        if self._sorted:
            return SortedRequestQueue(self.sort_key)
        return FIFORequestQueue()

    def select_queue(self, waiting: RequestQueue, skipped_waiting: RequestQueue) -> RequestQueue:
        """Pick the queue whose head is admitted next. At least one is non-empty.

        Default: ``skipped_waiting`` first when it has requests (they were
        queued before anything still waiting, as in vLLM's FCFS); with a
        :meth:`sort_key`, the queue whose head has the smaller key (ties go to
        ``skipped_waiting``).
        """
        if not skipped_waiting:
            return waiting
        if waiting and self._sorted:
            key = self.sort_key
            if key(waiting.peek_request()) < key(skipped_waiting.peek_request()):
                return waiting
        return skipped_waiting

    def may_admit(self, request: Request) -> bool:
        """Override to decide whether ``request``, at the head of the queue
        :meth:`select_queue` picked, may be admitted now (vLLM RFC #51608's
        admission decision point). Return ``True`` or ``False``, nothing else.

        Asked for each waiting request the scheduler looks at that holds no KV
        blocks yet (new, or preempted by recompute), before its prefix lookup:
        a refusal costs no lookup and touches no tier. A request whose
        asynchronous KV load landed is not asked: it was admitted when the load
        began, and holds its blocks.

        A refused request is set aside for this step, exactly as one whose
        connector cannot answer yet: it leaves the queue, the scheduler goes on
        with the requests behind it (:meth:`select_queue` is asked again), and
        after the step the set-aside requests join ``skipped_waiting`` in the
        order they were looked at, ahead of what it held. So the refused
        request is asked again next step, first by the default
        :meth:`select_queue`. Refusing a request forever starves it; the
        conformance suite reports that.

        Not overridden, every request may be admitted and the scheduler never
        calls this (it checks once, when it is built). An override that reads
        running requests' token counters must mind decode runs
        (:attr:`allows_decode_runs`).
        """
        return True

    def choose_victim(self, running: Sequence[Request]) -> Request:
        """Pick the running request to preempt when an allocation fails.

        ``running`` is non-empty and in scheduling order. Return one of its
        elements; the core removes it from ``running`` and preempts it. If the
        victim is the request being allocated for, that request is not scheduled
        this step.

        Default: the last admitted (``running[-1]``, vLLM's FCFS victim); with
        a :meth:`sort_key`, the request with the largest key (the earliest in
        ``running`` among equal keys).
        """
        if self._sorted:
            return max(running, key=self.sort_key)
        return running[-1]

    def reclaim_retained(self, num_blocks_needed: int) -> bool:
        """An allocation failed: release retained requests instead of preempting?

        Called before :meth:`choose_victim` whenever something is retained.
        Return ``True`` if you released anything (the core retries the
        allocation), ``False`` to go on to preemption. The default releases
        nothing.
        """
        return False

    def on_step_start(self, now: float) -> None:
        """Called at the start of every step, after expired retentions are released."""

    def on_arrival(self, request: Request) -> None:
        """Called when a request is added, before it is queued."""

    def on_abort(self, request: Request) -> None:
        """Called after a request was aborted (``finish_requests`` with the abort status).

        The request has left the queues and ``running``. Its blocks are
        released now, unless a KV load or store for it is still in flight: then
        the core keeps them until the worker reports the transfer done. A
        retained request that is aborted only has its retention released (it
        had finished already: no second ``on_abort``).
        """

    def on_finish(self, request: Request) -> float | None:
        """Called when a request finishes (not when aborted): by a stop token or
        ``max_tokens``, or from outside by ``finish_requests`` with a finished
        status other than abort (e.g. a stop string found by the front end).

        Return a deadline (virtual time) to ask the core to keep the request's
        KV blocks until then, or ``None`` to free them now as vLLM does.
        """
        return None


# ==========================================================================
# Eviction policy
# ==========================================================================


class EvictionPolicy(PluginBase):
    """The five-operation cache policy of a KV tier (vLLM's ``CachePolicy``).

    Context: ``capacity``, the number of blocks the tier holds. Keys are opaque
    hashables (block hashes in an offload tier). The tier owns the blocks; the
    policy only orders them.

    Contract (every sentence is checked by :class:`kvframe.testing.EvictionPolicySuite`;
    ``docs/plugin-authors.md`` maps each to its test):

    * ``evict`` never returns a protected key or a block whose ``ref_cnt != 0``,
      and is all-or-nothing: it returns exactly ``n`` blocks, or ``None`` and
      changes nothing, eviction order included.
    * ``evict(0, ...)`` returns ``[]``.
    * The refusal rule: unless the policy declares :attr:`may_refuse`, ``evict``
      succeeds whenever the policy holds at least ``n`` idle (``ref_cnt == 0``),
      unprotected blocks.
    * ``get`` changes no order; ``touch`` accepts any iterable (a generator
      too) and ignores keys the policy does not hold.
    * ``get`` answers exactly what was inserted and not removed or evicted since,
      whatever the tier did to the blocks' ``ref_cnt`` in between (the tier
      changes it in place, behind the policy's back).
    * Deterministic: the same calls give the same victims.
    * Memory stays bounded by a multiple of ``capacity`` however many keys pass
      through, by eviction or by ``remove``.

    Optional, for history (:meth:`on_hit`): on the GPU prefix cache a block
    leaves the policy while its content stays cached (a prefix hit takes it),
    and comes back with ``insert`` when it is idle again. The default treats
    that as ``remove``; a policy that learns per key (frequency, segment)
    overrides it to keep what it learned. The tier's whole calling pattern is
    below, under "The GPU tier".

    Optional, for position (:meth:`on_release`): the GPU tier tells a policy
    that asks, when a request releases its blocks, the keys it just inserted
    in the request's prefix order with their token positions.

    Optional, for speed (:meth:`track_idle` / :meth:`on_idle`): a tier may
    promise to report every block that becomes idle, so that ``evict`` can
    walk an index of idle blocks instead of every block it orders. The
    victims must stay exactly those of the full walk; the suite checks it.

    Optional, for speed (:meth:`max_evictable`): a policy that may refuse can
    say how many blocks ``evict`` could give at most, so that a tier can refuse
    a store the policy would refuse before counting the store's new blocks.

    The GPU tier (``--gpu-eviction``, :class:`kvframe.core.block_pool.PolicyOrderedBlockPool`)
    holds in the policy exactly the cached blocks that are idle, keyed by
    content (the block hash; ``(hash, block_id)`` for a second idle block with
    the same content), and calls:

    * ``insert(key, block)`` when a cached block's last reference is dropped,
      then ``touch([key])`` if a prefix hit took the block since it was last
      idle (its content served more than one request);
    * :meth:`on_hit` ``(key)`` when a prefix hit takes an idle cached block:
      it leaves the idle set, its content stays cached, and it comes back
      with ``insert`` when idle again -- under the same key, unless another
      idle block holds the same content by then;
    * ``remove(key)`` when the content leaves the cache other than by
      ``evict`` (a failed load, a prefix-cache reset): not an eviction, so no
      ghost;
    * ``touch(missed)`` once per admission with the request's block hashes
      that missed, in prefix order (ghost keys tell an adaptive policy it
      evicted too early);
    * ``evict(n, frozenset())``, which must succeed: everything held is idle;
    * :meth:`on_release` ``(chain, num_tokens)`` after the inserts of a
      request's release, if the class overrides it.

    Offload tiers never call :meth:`on_hit`: a block being loaded stays held
    there, with ``ref_cnt > 0``.
    """

    kind: ClassVar[str] = "eviction"

    may_refuse: bool = False
    """Declares that ``evict(n, protected)`` may return ``None`` although the policy
    holds ``n`` or more idle, unprotected blocks.

    Why a declaration: the two kinds of tier need different things. An offload
    tier treats ``None`` as "do not store this batch" and carries on, so a
    policy may refuse on purpose (vLLM's ARC refuses when its target list has
    nothing evictable, even though the other list has). The GPU prefix cache
    (``--gpu-eviction``) asks only for blocks that are idle and has no way to
    go on without them: a refusal there would stall allocation. So a policy
    that may refuse sets ``may_refuse = True``; the GPU tier rejects it when
    it is selected, with an error naming the policy, and offload tiers accept it.
    A policy whose options decide it (``arc`` refuses, ``arc:variant=paper``
    does not) sets it on the instance in ``__init__``. The default, ``False``,
    is a promise the conformance suite checks.
    """

    request_scoped_form: ClassVar[Callable[..., RequestScopedPolicy] | None] = None
    """vLLM 0.33.0's form of this policy, for an offload tier under ``--vllm 0.33``; ``None``
    (the default): the policy has none.

    Set it to a class method (or any callable) taking ``(capacity, **options)``
    -- the capacity in chunks and this policy's own options, as the
    constructor takes them -- and returning a new, empty
    :class:`~kvframe.contract.request_scoped.RequestScopedPolicy`::

        @classmethod
        def request_scoped_form(cls, capacity: int, **options: object) -> RequestScopedPolicy:
            return MyRequestScopedLRU(capacity)

    Called once per tier, when the engine is built, and only under the 0.33
    target with an offload tier (``--vllm 0.33 --offload cpu:...``): vLLM
    0.33.0's CPU manager drives its policy per request (each request's accesses,
    committed when it finishes), which the five operations above cannot
    express. The host's :class:`~kvframe.offload.jobs.manager.RequestScopedOffloadManager`
    is then the form's only user; this class is not built. Raise
    ``ValueError`` for options the form cannot honour (the host reports it
    naming the policy).

    ``None`` means the policy runs under ``--vllm 0.19.1`` (and on the GPU
    prefix cache under either release) but an offload tier under ``--vllm 0.33``
    refuses it, naming the policy and this seam. The bundled ``lru`` and
    ``arc`` have one. The conformance suite runs a form through the host's
    manager and checks the protocol's contract; it skips that check, saying
    so, for a policy with none.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity

    @abc.abstractmethod
    def get(self, key: Hashable) -> EvictableBlock | None:
        """Return the block stored under ``key``, or ``None``. Changes no order."""

    @abc.abstractmethod
    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        """Start tracking a new block. ``key`` is not present."""

    @abc.abstractmethod
    def remove(self, key: Hashable) -> None:
        """Stop tracking ``key`` (present)."""

    @abc.abstractmethod
    def touch(self, keys: Iterable[Hashable]) -> None:
        """Mark keys as used, the first key as most important. Unknown keys are ignored."""

    @abc.abstractmethod
    def evict(
        self, n: int, protected: Set[Hashable]
    ) -> list[tuple[Hashable, EvictableBlock]] | None:
        """Remove and return exactly ``n`` evictable blocks, or change nothing and return None.

        ``None`` is allowed only when fewer than ``n`` idle, unprotected blocks are
        held, or when the policy declares :attr:`may_refuse`.
        """

    # -- optional: prefix hits on the GPU tier ---------------------------------

    def on_hit(self, key: Hashable) -> None:
        """A prefix hit takes the block held under ``key``: it is in use, its content stays
        cached. Called only by the GPU tier, before it takes its reference.

        From this call until ``key`` is inserted again the policy must not hold
        ``key``: ``get(key)`` answers ``None`` and ``evict`` never returns it,
        exactly as after ``remove``. What differs is the meaning: ``remove``
        says the content left the cache, ``on_hit`` that it was just used and
        will most likely be back (``insert(key, block)`` when the last request
        using it finishes). A policy that orders by what it learned about a
        key (a use count, a segment) keeps that here and restores it at the
        ``insert``.

        Default: ``self.remove(key)``, which is what the GPU tier called before
        this hook existed; a policy that does not override it behaves exactly
        as it always did (``lru`` then reproduces vLLM's order).

        .. note:: The content may also leave the cache while in use (a failed
           load drops its hash) or come back under another key (``(hash,
           block_id)``, when another idle block holds the same content): then
           no ``insert(key, ...)`` follows. Keep what you remember here bounded
           by a multiple of ``capacity``, as ghost entries are; the suite
           checks it (:mod:`kvframe.testing.gpu_hits`).
        """
        self.remove(key)

    # -- optional: a request's chain, on the GPU tier -------------------------

    def on_release(self, chain: Sequence[tuple[Hashable, int]], num_tokens: int) -> None:
        """A request released its blocks (finished, aborted or preempted). Called only by
        the GPU tier, right after the ``insert`` (and ``touch``) calls of that release.

        ``chain`` lists, in prefix order, ``(key, first_token)`` for each of the
        request's blocks this release made idle -- every key was just inserted
        -- where ``first_token`` is the position in the request of the block's
        first token (``block index * block_size``). Blocks still used by
        another request, and the request's last, partial block (uncached),
        are not in it. ``num_tokens`` is the request's length then (prompt
        and output: the conversation's history, ``L``).

        Why: a policy that ranks a block by where it sits in its conversation
        needs the chain, which keys alone do not give. Tail-Optimized LRU
        (``tlru``) evicts first the blocks so far down a chain that losing
        them keeps the next turn's prefill within a budget.

        Default: nothing. The tier checks once, when it is built, whether the
        class overrides it; a policy that does not costs it nothing.
        Offload tiers never call it.
        """

    # -- optional: idle tracking ----------------------------------------------

    def track_idle(self) -> bool:
        """Offer to be told when blocks become idle; ``True`` accepts (the default declines).

        Called by a tier, at most once, before it calls :meth:`on_idle`. A
        tier that gets ``True`` promises to call :meth:`on_idle` with every
        held block whose ``ref_cnt`` it sets to ``0`` from another value, right
        after setting it. A tier that never calls this (vLLM's own offloading
        manager driving a kvframe policy in the bridge, the GPU prefix cache)
        keeps the contract above unchanged: ``ref_cnt`` changes behind the
        policy's back.

        Why: in a busy offload tier most blocks are being written (``ref_cnt
        -1`` until their request finishes) or loaded, and an ``evict`` that
        walks its order from the least valuable end passes all of them on
        every call. Told when a block becomes idle, a policy can keep its idle
        blocks in an index in the same order and walk only that. Only the
        change *to* idle needs a report: a block that leaves the idle state
        (a load pins it) stays in the index until ``evict`` meets it and checks
        ``ref_cnt`` as always.

        .. note:: Accepting must not change a single victim: ``evict`` returns
           exactly what the full walk would return. A policy may accept while
           it already holds blocks (it must then index them itself).
        """
        return False

    def max_evictable(self) -> int | None:
        """An ``m`` such that ``evict(n, protected)`` would now return ``None`` for every
        ``n > m``, whatever ``protected``; ``None`` (the default) claims nothing.

        A query: it changes nothing. The bound may be loose (too large), never
        too small: ``evict`` of ``m`` blocks may still be refused, of more must be.

        Why: vLLM's ARC refuses while T1 is under its target and T2 has nothing
        evictable, however many blocks are idle in T1, and an offload tier
        retries such a store on every step. The tier must know how many of the
        store's blocks are new (``n``) before it can ask ``evict``: a set of
        the request's pending blocks, ~900 at 2,000 Mooncake requests. With a
        bound, it stops counting as soon as it has found more than ``m`` new
        blocks (kvframe's ``SlotOffloadManager`` does, when the store's blocks
        all fit in the free and idle slots, so the refusal it returns is
        exactly the one the policy would give). Only a policy that may refuse
        with enough idle blocks gains: for the others the tier's own count of
        idle blocks already answers.
        """
        return None

    def on_idle(self, keys: Iterable[Hashable]) -> None:
        """The tier has just set the ``ref_cnt`` of these held blocks to ``0``.

        Called only after :meth:`track_idle` returned ``True``; never called
        otherwise, so a policy that declines need not implement it.
        """


# ==========================================================================
# Offload spec
# ==========================================================================


class OffloadSpec(PluginBase):
    """A KV tier behind the connector seam: its ledger and its data mover.

    Constructed with its options only (e.g. ``cpu:capacity=8GiB,eviction=arc``).
    The host asks it for the scheduler-side manager and the worker-side handler
    once the engine knows the model shape.
    """

    kind: ClassVar[str] = "offload"

    @abc.abstractmethod
    def create_manager(self, context: OffloadContext) -> OffloadManager:
        """Build the scheduler-side ledger of blocks in this tier."""

    @abc.abstractmethod
    def create_transfer_handler(self, context: OffloadContext) -> TransferHandler:
        """Build the worker-side handler that moves block bytes to and from the tier."""

    def connector_semantics(self) -> ConnectorSemantics:
        """When loads and stores happen relative to the forward pass.

        The default is vLLM's native connector: asynchronous loads, stores
        deferred to the next step, every full block stored. A tier modelled on
        another connector (LMCache's) overrides it.
        """
        from kvframe.contract.offload import ConnectorSemantics

        return ConnectorSemantics()

    def transfer_pricing(self, context: OffloadContext) -> TransferPricing | None:
        """The tier's own price of a transfer; ``None`` (the default): the preset's link.

        Called once, when the engine is built. By default a transfer costs the
        cost model's ``transfer_time`` (the preset's bandwidth, latency and
        per-copy cost, ``--offload-bandwidth``): a tier that copies blocks the way
        vLLM's native connector does. A tier modelled on another data path
        (LMCache's pinned staging, its per-call work) returns a
        :class:`~kvframe.contract.offload.TransferPricing` that prices each
        transfer its own way; ``--offload-bandwidth`` is then refused (the
        tier's options set its rates).
        """
        return None

    def request_scoped_slots(self, context: OffloadContext) -> RequestScopedSlots | None:
        """What vLLM 0.33.0's model of this tier is built from; ``None`` (the default): none.

        Called once, when the engine is built under ``--vllm 0.33`` with this
        tier (:meth:`create_manager` is then not called: vLLM 0.33.0's tier
        has its own manager, connector and worker, in
        :mod:`kvframe.offload.jobs`). Return a
        :class:`~kvframe.contract.request_scoped.RequestScopedSlots`: the
        eviction policy plugin whose
        :attr:`~EvictionPolicy.request_scoped_form` orders the chunks, the
        number of chunks and the GPU blocks per chunk. kvframe models vLLM
        0.33.0's CPU tier only, so a tier that returns ``None`` (or keeps
        connector semantics other than vLLM's) is refused under ``--vllm 0.33``
        with the reason, never run as 0.19.1's under a 0.33 label. The bundled
        ``cpu`` spec has one.
        """
        return None


# ==========================================================================
# Reuse filter
# ==========================================================================


class ReuseFilter(PluginBase):
    """Decides which blocks are worth storing in a tier.

    It sees every lookup (to learn what recurs) and filters every store.
    """

    kind: ClassVar[str] = "reuse_filter"

    in_manager_form: ClassVar[Callable[..., InManagerReuseFilter] | None] = None
    """vLLM 0.33.0's form of this filter, for an offload tier under ``--vllm 0.33``; ``None``
    (the default): the filter has none.

    Set it to a class method (or any callable) taking this filter's options, as
    the constructor takes them, and returning an
    :class:`~kvframe.contract.request_scoped.InManagerReuseFilter`
    ``(store_threshold, max_tracker_size)``. Called once, when the engine is
    built, and only under the 0.33 target with an offload tier: vLLM 0.33.0's
    CPU manager keeps the reuse filter inside itself and counts store offers
    (not lookups), so a filter there is those two numbers; this class is not
    built. Raise ``ValueError`` for options it cannot honour.

    ``None`` means the filter runs under ``--vllm 0.19.1`` only: an offload
    tier under ``--vllm 0.33`` refuses it, naming the filter and this seam.
    The bundled ``threshold`` has one.
    """

    @abc.abstractmethod
    def on_lookup(self, block_hashes: Sequence[BlockHash]) -> None:
        """A request looked these hashes up in the tier (hit or miss)."""

    @abc.abstractmethod
    def filter_store(self, block_hashes: Sequence[BlockHash]) -> list[BlockHash]:
        """Return the subset of ``block_hashes`` to store, in their order."""


# ==========================================================================
# Tracer
# ==========================================================================


class Tracer(PluginBase):
    """Receives the engine's trace records. Every method is optional.

    A selected tracer is registered for the broadcast tracing hooks, so every
    active tracer sees every record. Records are immutable: keep them, never
    modify them. A tracer must not call back into the engine.
    """

    kind: ClassVar[str] = "tracer"

    def on_step_snapshot(self, snapshot: StepSnapshot) -> None:
        """State at the start of a step."""

    def on_prefix_cache(self, event: PrefixCacheEvent) -> None:
        """A request's prefix-cache hits at its first admission."""

    def on_step_decision(self, decision: StepDecision) -> None:
        """What the scheduler decided this step."""

    def on_kv_events(self, step: int, now: float, events: Sequence[KVEvent]) -> None:
        """Blocks stored in or removed from a tier during the step."""

    def on_request_finished(self, record: RequestFinished) -> None:
        """A request left the engine."""

    def close(self) -> None:
        """The run ended (also after an interruption): flush and release resources."""
