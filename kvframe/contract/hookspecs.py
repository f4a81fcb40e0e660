"""The kvframe plugin contract: every pluggy hook specification, on one page.

pluggy project name and entry-point group: ``kvframe``.

There are two families of hooks.

**Registration hooks** (one per extension point) let a plugin *offer* classes.
The host calls each of them once, when it builds its plugin registry, collects
the returned ``{name: class}`` mappings from every plugin, and later picks one
class per kind by the name the user selected. After that the host calls the
chosen object's methods directly: registration hooks are never on a hot path.

Most plugins never implement these hooks by hand. A class that subclasses a
kvframe base (:class:`kvframe.EvictionPolicy`, ...) and is named by an entry
point in group ``kvframe`` is adapted into the matching registration hook by the
host ("one-class plugins"). Implement the hooks yourself, in a module named by
an entry point, when one distribution offers several classes::

    import kvframe

    @kvframe.hookimpl
    def kvframe_eviction_policies():
        return {"lfu": LFUPolicy, "s3fifo": S3FIFOPolicy}

**Tracing hooks** are broadcast hooks: every active tracer receives every call,
and return values are ignored. The host registers for them only the tracers the
user selected (``--tracer jsonl:path=t.jsonl``), adapted from
:class:`kvframe.Tracer` subclasses, so installing a tracer plugin costs nothing
until it is selected. With no tracer selected the engine skips each trace point
with a single branch.

Vocabulary is pluggy's: a *spec* declares a hook, an *impl* implements it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from kvframe.contract.bases import (
        EvictionPolicy,
        OffloadSpec,
        ReuseFilter,
        SchedulingPolicy,
        Tracer,
    )
    from kvframe.contract.records import (
        KVEvent,
        PrefixCacheEvent,
        RequestFinished,
        StepDecision,
        StepSnapshot,
    )
    from kvframe.contract.routing import Router

PROJECT_NAME = "kvframe"
"""pluggy project name; also the entry-point group plugins are found in."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# --------------------------------------------------------------------------
# Registration hooks
# --------------------------------------------------------------------------


@hookspec
def kvframe_scheduling_policies() -> Mapping[str, type[SchedulingPolicy]]:
    """Offer scheduling policies: which waiting request runs, who is preempted.

    Called once per plugin when the host builds its registry (on the first
    ``kvframe plugins`` listing or engine construction), never during a run.

    :return: a mapping from the name users select (``--scheduler NAME``) to a
        subclass of :class:`kvframe.SchedulingPolicy`. The host instantiates the
        selected class with the user's options, then calls ``attach`` with the
        scheduler's view.

    .. note::
        Do not build policy objects here and do not do expensive work (loading
        models, reading files): the hook runs for listings too. Do work in the
        class's ``__init__``, which runs only when the policy is selected.
    """


@hookspec
def kvframe_eviction_policies() -> Mapping[str, type[EvictionPolicy]]:
    """Offer eviction policies for a KV tier (``--eviction NAME`` or ``eviction=NAME``).

    Called once per plugin when the registry is built.

    :return: a mapping from name to a subclass of :class:`kvframe.EvictionPolicy`.
        The host constructs it as ``cls(capacity, **options)`` where ``capacity``
        is the tier's size in blocks.

    .. note::
        The policy's ``evict`` must be all-or-nothing and must never return a
        protected key or a block with ``ref_cnt != 0``; ``pytest
        --kvframe-plugin eviction:NAME`` checks this.
    """


@hookspec
def kvframe_offload_specs() -> Mapping[str, type[OffloadSpec]]:
    """Offer KV tiers behind the connector seam (``--offload NAME:...``).

    Called once per plugin when the registry is built.

    :return: a mapping from name to a subclass of :class:`kvframe.OffloadSpec`,
        constructed with the user's options. The host then asks it for the
        scheduler-side manager and the worker-side transfer handler.

    .. note::
        Import heavy dependencies (torch) inside ``create_transfer_handler``,
        not at module import time: listings must stay fast.
    """


@hookspec
def kvframe_reuse_filters() -> Mapping[str, type[ReuseFilter]]:
    """Offer reuse filters that decide which blocks are worth storing in a tier.

    Called once per plugin when the registry is built.

    :return: a mapping from name to a subclass of :class:`kvframe.ReuseFilter`,
        constructed with the user's options (``--reuse-filter NAME:...``).
    """


@hookspec
def kvframe_tracers() -> Mapping[str, type[Tracer]]:
    """Offer tracers (``--tracer NAME:...``; several may be selected).

    Called once per plugin when the registry is built.

    :return: a mapping from name to a subclass of :class:`kvframe.Tracer`. A
        selected tracer is constructed with its options and registered for the
        tracing hooks below.
    """


@hookspec
def kvframe_routers() -> Mapping[str, type[Router]]:
    """Offer routers for a fleet of replicas (``--router NAME:...``).

    Called once per plugin when the registry is built.

    :return: a mapping from name to a subclass of :class:`kvframe.Router`,
        constructed with the user's options; ``attach`` follows with the fleet's
        shape and seed.
    """


# --------------------------------------------------------------------------
# Tracing hooks (broadcast; return values are ignored)
# --------------------------------------------------------------------------


@hookspec
def kvframe_step_snapshot(snapshot: StepSnapshot) -> None:
    """Called at the start of every engine step, before the scheduler runs.

    :param snapshot: queue sizes, free and cached blocks, retained requests and
        KV usage at that instant.

    .. note::
        Records are immutable and may be kept. Do not call back into the
        engine or the scheduler from a tracing hook.
    """


@hookspec
def kvframe_prefix_cache_event(event: PrefixCacheEvent) -> None:
    """Called once per request, at the step of its first admission.

    :param event: local (GPU prefix cache) and external (offload tier) hit tokens.
        Requests that wait for memory and are retried are reported only once.
    """


@hookspec
def kvframe_step_decision(decision: StepDecision) -> None:
    """Called after the scheduler built its output for a step.

    :param decision: tokens scheduled per request id, and the new, resumed,
        preempted and finished request ids of the step.
    """


@hookspec
def kvframe_kv_events(step: int, now: float, events: Sequence[KVEvent]) -> None:
    """Called once per step in which a tier stored or removed blocks.

    :param step: the engine step.
    :param now: its virtual time.
    :param events: :class:`kvframe.contract.records.BlockStored` /
        :class:`~kvframe.contract.records.BlockRemoved` /
        :class:`~kvframe.contract.records.AllBlocksCleared`, in the order they happened.
    """


@hookspec
def kvframe_request_finished(record: RequestFinished) -> None:
    """Called when a request leaves the engine (finished, capped or aborted).

    :param record: the request's counters and timestamps.
    """
