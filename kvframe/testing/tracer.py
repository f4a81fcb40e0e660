"""The conformance suite for tracers (:class:`kvframe.Tracer`).

A tracer is registered for the broadcast tracing hooks and sees every record
the engine produces. The suite checks that it

* accepts every record kind (step snapshots, prefix-cache events, step
  decisions, every KV event type, request completions) through the same
  pluggy broadcast the engine uses, without raising;
* leaves what it is given as it was: records are frozen attrs classes, but a
  step decision carries a dict and KV events come in a list, and other tracers
  receive the very same objects;
* runs as the only tracer of a real engine run and, afterwards, holds no
  reference to the engine, the scheduler, the KV cache or a request (a tracer
  must not call back into the engine, and must not keep it alive);
* can be closed without having seen anything, and closed twice.

Each check runs in a scratch directory, so a tracer that writes a file by
default (``jsonl`` writes ``trace.jsonl``) writes it there.
"""

from __future__ import annotations

import copy
import gc
from typing import Any, ClassVar

from kvframe.contract.records import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    PrefixCacheEvent,
    RequestFinished,
    StepDecision,
    StepSnapshot,
)
from kvframe.testing.common import ContractViolation, PluginSuite, PluginTarget

__all__ = ["TracerSuite", "sample_records"]


def sample_records() -> list[tuple[str, dict[str, Any]]]:
    """One call of every tracing hook, in the order the engine makes them: ``(hook, kwargs)``."""
    h = [bytes([i]) * 8 for i in range(1, 6)]
    return [
        (
            "kvframe_step_snapshot",
            {
                "snapshot": StepSnapshot(
                    step=1,
                    now=0.0,
                    num_waiting=2,
                    num_skipped_waiting=0,
                    num_running=1,
                    num_retained=1,
                    num_free_blocks=10,
                    num_cached_blocks=3,
                    kv_usage=0.25,
                )
            },
        ),
        (
            "kvframe_prefix_cache_event",
            {
                "event": PrefixCacheEvent(
                    step=1,
                    now=0.0,
                    request_id="r0",
                    num_prompt_tokens=32,
                    local_hit_tokens=16,
                    external_hit_tokens=8,
                )
            },
        ),
        (
            "kvframe_step_decision",
            {
                "decision": StepDecision(
                    step=1,
                    now=0.0,
                    num_scheduled_tokens={"r0": 16, "r1": 1},
                    new_request_ids=("r0",),
                    resumed_request_ids=("r3",),
                    preempted_request_ids=("r2",),
                    finished_request_ids=("r4",),
                )
            },
        ),
        (
            "kvframe_kv_events",
            {
                "step": 1,
                "now": 0.0,
                "events": [
                    BlockStored((h[0], h[1]), None, 16),
                    BlockRemoved((h[2],)),
                    BlockRemoved((h[3],)),
                    BlockStored((h[4],), h[1], 16, medium="CPU"),
                    AllBlocksCleared(),
                    AllBlocksCleared(medium="CPU"),
                ],
            },
        ),
        (
            "kvframe_request_finished",
            {
                "record": RequestFinished(
                    step=2,
                    now=0.1,
                    request_id="r0",
                    status="length",
                    num_prompt_tokens=32,
                    num_output_tokens=4,
                    num_cached_tokens=16,
                    num_preemptions=1,
                    arrival_time=0.0,
                    first_token_time=0.05,
                    finish_time=0.1,
                )
            },
        ),
        (
            "kvframe_request_finished",
            {
                "record": RequestFinished(
                    step=2,
                    now=0.1,
                    request_id="r5",
                    status="ignored",
                    num_prompt_tokens=4096,
                    num_output_tokens=0,
                    num_cached_tokens=0,
                    num_preemptions=0,
                    arrival_time=0.1,
                    first_token_time=None,
                    finish_time=0.1,
                )
            },
        ),
    ]


_METHOD = {
    "kvframe_step_snapshot": "on_step_snapshot",
    "kvframe_prefix_cache_event": "on_prefix_cache",
    "kvframe_step_decision": "on_step_decision",
    "kvframe_kv_events": "on_kv_events",
    "kvframe_request_finished": "on_request_finished",
}


def _show(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def _deliver(tracer: Any, check_unchanged: bool) -> None:
    """Send every sample record through a broadcast manager holding only ``tracer``."""
    __tracebackhide__ = True
    from kvframe.host.registry import Tracing, tracing_manager

    tracing = Tracing(tracing_manager([tracer]), (tracer,))
    for hook_name, kwargs in sample_records():
        before = copy.deepcopy(kwargs)
        items = {k: (list(v) if isinstance(v, list) else v) for k, v in kwargs.items()}
        method = _METHOD[hook_name]
        try:
            getattr(tracing.hook, hook_name)(**kwargs)
        except Exception as err:
            raise ContractViolation(
                f"{method}({_show(kwargs)}) raised {type(err).__name__}: {err}\n"
                "A tracer receives every record kind and must not raise (a raising tracer "
                "stops the run)."
            ) from err
        if not check_unchanged:
            continue
        for key, value in kwargs.items():
            if value != before[key]:
                raise ContractViolation(
                    f"{method} modified what it was given: {key} was {before[key]!r}, now "
                    f"{value!r}\nRecords are shared with every other tracer (and may be kept): "
                    "copy before changing anything."
                )
            if isinstance(value, list) and any(
                a is not b for a, b in zip(value, items[key], strict=False)
            ):
                raise ContractViolation(f"{method} replaced items of the {key} list it was given")
    _close(tracer, "after receiving every record kind")


def _close(tracer: Any, when: str) -> None:
    __tracebackhide__ = True
    try:
        tracer.close()
    except Exception as err:
        raise ContractViolation(
            f"close() {when} raised {type(err).__name__}: {err}\n"
            "The engine closes every tracer when a run ends, also after an interruption."
        ) from err


def _engine_types() -> tuple[type, ...]:
    from kvframe.core.block_pool import BlockPool
    from kvframe.core.kv_cache_manager import KVCacheManager
    from kvframe.core.scheduler import Scheduler
    from kvframe.domain.request import Request
    from kvframe.engine import Engine, RunProgress

    return (Engine, RunProgress, Scheduler, KVCacheManager, BlockPool, Request)


def _find_held(root: object, types_: tuple[type, ...]) -> str | None:
    """A path from ``root`` to an instance of ``types_``, if one is reachable."""
    import types as pytypes

    skip = (
        type,
        pytypes.ModuleType,
        pytypes.FunctionType,
        pytypes.BuiltinFunctionType,
        pytypes.CodeType,
    )
    parent: dict[int, tuple[int, object]] = {}
    seen = {id(root)}
    queue = [root]
    objects = {id(root): root}
    while queue and len(seen) < 200_000:
        obj = queue.pop(0)
        if obj is not root and isinstance(obj, types_):
            path = [type(obj).__name__]
            key = id(obj)
            while key in parent:
                key, _ = parent[key]
                path.append(type(objects[key]).__name__)
            return " -> ".join(reversed(path))
        for ref in gc.get_referents(obj):
            if id(ref) in seen or isinstance(ref, skip):
                continue
            seen.add(id(ref))
            parent[id(ref)] = (id(obj), obj)
            objects[id(ref)] = ref
            queue.append(ref)
    return None


class TracerSuite(PluginSuite):
    """Conformance checks for a :class:`kvframe.Tracer`.

    Subclass it and set :attr:`plugin`, or run ``pytest --kvframe-plugin tracer:NAME``
    (``tracer:jsonl:path=out.jsonl`` passes options as usual).
    """

    kind: ClassVar[str] = "tracer"

    close_is_idempotent: ClassVar[bool] = True
    """Capability: ``close()`` may be called twice. Set ``False`` to skip that check."""

    def test_receives_every_record_kind_without_raising(self, kvframe_target: PluginTarget) -> None:
        _deliver(kvframe_target.create(), check_unchanged=False)

    def test_does_not_modify_the_records_it_is_given(self, kvframe_target: PluginTarget) -> None:
        _deliver(kvframe_target.create(), check_unchanged=True)

    def test_runs_alone_in_an_engine_and_holds_no_part_of_it(
        self, kvframe_target: PluginTarget
    ) -> None:
        """The only tracer of a real run (preemption, evictions, an ignored request)."""
        from kvframe.core.scheduler import Scheduler
        from kvframe.engine import Engine, EngineConfig
        from kvframe.executors.sim import SimExecutor
        from kvframe.host.registry import Tracing, tracing_manager
        from kvframe.testing.scheduling import ReferenceFIFOPolicy
        from kvframe.workloads.spec import RequestSpec

        tracer = kvframe_target.create()
        config = EngineConfig(
            num_gpu_blocks=12,
            block_size=4,
            max_num_batched_tokens=24,
            max_num_seqs=4,
            max_model_len=128,
        )
        preset = config.preset_object
        scheduler = Scheduler(
            config.scheduler_config(enable_kv_cache_events=True), ReferenceFIFOPolicy()
        )
        engine = Engine(
            config,
            scheduler,
            SimExecutor(preset.cost_model),
            tracing=Tracing(tracing_manager([tracer]), (tracer,)),
            preset=preset,
        )
        shared = list(range(500, 512))
        specs = [
            RequestSpec(
                f"r{i}",
                shared + [1000 * (i + 1) + k for k in range(4 + 2 * i)],
                5,
                arrival_time=0.001 * i,
            )
            for i in range(6)
        ]
        specs.append(RequestSpec("too-long", list(range(2000, 2100)), 4, arrival_time=0.01))
        try:
            engine.run(specs)
        except Exception as err:
            raise ContractViolation(
                f"a real engine run with this tracer raised {type(err).__name__}: {err}"
            ) from err
        del engine, scheduler
        gc.collect()
        held = _find_held(tracer, _engine_types())
        if held is not None:
            raise ContractViolation(
                f"after the run the tracer still references engine state: {held}\n"
                "A tracer must not call back into the engine or keep it (or its requests) "
                "alive: keep the immutable records, or values copied out of them."
            )
        self._second_close(tracer)

    def test_can_be_closed_without_records(self, kvframe_target: PluginTarget) -> None:
        """A run can end (or be interrupted) before its first step."""
        tracer = kvframe_target.create()
        _close(tracer, "before any record")
        self._second_close(tracer)

    def _second_close(self, tracer: Any) -> None:
        __tracebackhide__ = True
        if self.close_is_idempotent:
            _close(tracer, "called a second time")
