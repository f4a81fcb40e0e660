"""vLLM's real ``EngineCore`` (0.19.1 or 0.33.0) with a fake executor, under either scheduler.

Run under the vLLM interpreter (``test_engine_core.py`` does)::

    python engine_core_harness.py vllm|bridge OUT.json [--v2|--v1] [--async-scheduling]
        [--only=SCENARIO ...] [--seeds=A:B [--random-only]] [--session-hash-fix]

and it writes one JSON object to ``OUT.json``: for every scenario, the record
of every engine call -- each step's ``SchedulerOutput`` as the executor
received it (scheduled tokens, new / cached / resumed / preempted / finished
ids, block ids, computed counts), the ``EngineCoreOutputs`` (new tokens,
finish and stop reasons, request event types, cached tokens, finished-request
sets), the ``SchedulerStats`` (counts, KV usage, prefix-cache counters) and
the KV-cache events published (KV events are on, vLLM's publisher replaced by
a recorder), plus what the engine's pause, reset, abort and counting calls
returned. ``vllm`` builds the
engine with vLLM's own ``Scheduler``; ``bridge`` with ``--scheduler-cls
kvframe_vllm.scheduler.KvframeScheduler``. Everything else -- ``EngineCore``
(its ``step``, ``add_request``, ``abort_requests``, ``pause_scheduler``,
``resume_scheduler``, ``_reset_caches``), the config, the executor -- is vLLM's
or the same on both sides.

The executor is a ``vllm.v1.executor.abstract.Executor`` with no model: it
reports one full-attention layer sized to ``NUM_BLOCKS`` blocks, and samples
a deterministic token (a function of the request id and output position)
whenever a request's scheduled tokens reach the end of its known tokens, as a
model runner does. Timestamps are the only thing not compared (event types
are).

With ``--async-scheduling`` (vLLM's default) the engine builds vLLM's
``AsyncScheduler`` (or the bridge in kvframe's async mode) and steps with its
batch queue (``step_with_batch_queue``, two batches): the fake executor then
samples in ``sample_tokens`` and its futures are not done until the engine
waits on them, as a GPU still running the step would be, so step N+1 is
scheduled before step N's tokens are applied.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from engine_core_scripts import BLOCK_SIZE, first_token, random_script, stale_session_block, token

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("PYTHONHASHSEED", "0")

REPO = Path(__file__).resolve().parents[3]
MODEL_DIR = Path(
    os.environ.get("KVFRAME_VLLM_MODEL_DIR")
    or REPO.parent / "shared" / "tools" / "vllm-reference" / "model"
)
BRIDGE_CLS = "kvframe_vllm.scheduler.KvframeScheduler"
NUM_BLOCKS = 20
"""Small enough that the long scenarios preempt."""
BUDGET = 64
"""Tokens per step: long prompts are chunked."""
MAX_MODEL_LEN = (NUM_BLOCKS - 1) * BLOCK_SIZE
"""What the pool holds (vLLM 0.33 checks one such request fits in the
``num_gpu_blocks_override`` pool less its null block); the longest scenario
request (150 + 60 tokens) stays below it, so no request is cut by it."""


def make_executor_class() -> type:
    import torch
    from vllm.v1.executor.abstract import Executor
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.outputs import ModelRunnerOutput

    class FakeExecutor(Executor):
        """No model: a token per request whose scheduled tokens reach its end."""

        def _init_executor(self) -> None:
            self.spec = FullAttentionSpec(
                block_size=self.cache_config.block_size,
                num_kv_heads=1,
                head_size=1,
                dtype=torch.float32,
            )
            self.known: dict[str, int] = {}  # tokens the "model runner" knows of
            self.outputs: dict[str, int] = {}  # tokens sampled so far
            self.seen: list[Any] = []
            self._sampled: Any = None  # execute_model -> sample_tokens (async)

        def get_kv_cache_specs(self) -> list[dict[str, Any]]:
            return [{"layer": self.spec}]

        def determine_available_memory(self) -> list[int]:
            # Enough for one max_model_len request (vLLM checks); the harness cuts
            # the pool to NUM_BLOCKS with num_gpu_blocks_override.
            blocks = self.model_config.max_model_len // self.spec.block_size + 1
            return [self.spec.page_size_bytes * blocks]

        def initialize_from_config(self, kv_cache_configs: list[Any]) -> None:
            return None

        def collective_rpc(self, method: Any, *args: Any, **kwargs: Any) -> Any:
            # vLLM 0.33's start-up calls a few worker RPCs 0.19.1 did not: the KV
            # layouts the attention backends support (one worker: one list), the
            # resolved layout, and the device sync a completed pause waits on.
            # Nothing else is expected.
            if method == "get_supported_kv_cache_layouts":
                return [["LBNHC"]]
            if method in ("set_kv_cache_layout", "synchronize_device"):
                return [None]
            if method == "get_kv_connector_handshake_metadata":
                # With a KV connector (the serve check's tier command): the
                # OffloadingConnector's worker has no handshake metadata.
                return [None]
            raise NotImplementedError(f"fake executor: collective_rpc({method!r})")

        def check_health(self) -> None:
            return None

        def compile_or_warm_up_model(self) -> None:
            return None  # no model (vLLM 0.33 calls it at start-up)

        def reset_mm_cache(self) -> None:
            return None

        def reset_encoder_cache(self) -> None:
            return None

        @property
        def max_concurrent_batches(self) -> int:
            # vLLM's UniProcExecutor: a batch queue of two with async scheduling.
            return 2 if self.scheduler_config.async_scheduling else 1

        def sample_tokens(self, grammar_output: Any, non_block: bool = False) -> Any:
            output, self._sampled = self._sampled, None
            return _InFlight(output) if non_block else output

        def execute_model(self, scheduler_output: Any, non_block: bool = False) -> Any:
            output = self._run(scheduler_output)
            if self.scheduler_config.async_scheduling and non_block:
                if not scheduler_output.total_num_scheduled_tokens:
                    return _InFlight(output)  # the engine waits on this one
                # The engine calls sample_tokens for the tokens (its async path).
                self._sampled = output
                return _InFlight(None)
            if not non_block:
                return output
            future: Future = Future()
            future.set_result(output)
            return future

        def _run(self, scheduler_output: Any) -> Any:
            self.seen.append(scheduler_output)
            for rid in scheduler_output.finished_req_ids:
                self.known.pop(rid, None)
            for data in scheduler_output.scheduled_new_reqs:
                tokens = data.prefill_token_ids or data.prompt_token_ids
                self.known[data.req_id] = len(tokens)
                self.outputs.setdefault(data.req_id, 0)
            cached = scheduler_output.scheduled_cached_reqs
            for rid, tokens in cached.all_token_ids.items():
                self.known[rid] = len(tokens)
            new = scheduler_output.scheduled_new_reqs
            computed = {d.req_id: d.num_computed_tokens for d in new}
            computed.update(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
            req_ids = list(scheduler_output.num_scheduled_tokens)
            sampled = []
            for rid in req_ids:
                n = scheduler_output.num_scheduled_tokens[rid]
                if computed[rid] + n >= self.known[rid]:
                    position = self.outputs[rid]
                    self.outputs[rid] = position + 1
                    self.known[rid] += 1
                    sampled.append([token(rid, position)])
                else:
                    sampled.append([])
            return ModelRunnerOutput(
                req_ids=req_ids,
                req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
                sampled_token_ids=sampled,
            )

    return FakeExecutor


class _InFlight(Future):
    """A step's output that is not done until the engine waits for it (a GPU still
    running the step), so vLLM's batch queue keeps a second batch in flight."""

    def __init__(self, output: Any) -> None:
        super().__init__()
        self._output = output

    def result(self, timeout: float | None = None) -> Any:
        if not self.done():
            self.set_result(self._output)
        return super().result(timeout)


class Harness:
    """One ``EngineCore``; every call recorded into ``self.log``."""

    def __init__(self, scheduler: str, *, policy: str = "fcfs", async_scheduling: bool = False):
        from vllm.config import (
            CacheConfig,
            DeviceConfig,
            KVEventsConfig,
            ModelConfig,
            SchedulerConfig,
            VllmConfig,
        )
        from vllm.v1.engine.core import EngineCore

        scheduler_config = SchedulerConfig(
            max_num_seqs=6,
            max_num_batched_tokens=BUDGET,
            max_model_len=MAX_MODEL_LEN,
            is_encoder_decoder=False,
            enable_chunked_prefill=True,
            policy=policy,
            async_scheduling=async_scheduling,
            scheduler_cls=BRIDGE_CLS if scheduler == "bridge" else None,
        )
        vllm_config = VllmConfig(
            scheduler_config=scheduler_config,
            model_config=ModelConfig(
                model=str(MODEL_DIR),
                max_model_len=MAX_MODEL_LEN,
                skip_tokenizer_init=True,
                dtype="float16",
                seed=0,
            ),
            cache_config=CacheConfig(
                block_size=BLOCK_SIZE,
                enable_prefix_caching=True,
                prefix_caching_hash_algo="sha256",
                num_gpu_blocks_override=NUM_BLOCKS,
            ),
            device_config=DeviceConfig(device="cpu"),
            # KV events on: each scheduler's batches are caught below.
            kv_events_config=KVEventsConfig(enable_kv_cache_events=True, publisher="null"),
        )
        self.engine = EngineCore(vllm_config, make_executor_class(), log_stats=True)
        self.published: list[Any] = []
        self.engine.scheduler.kv_event_publisher = _Recorder(self.published)
        self.log: list[Any] = []
        self.name = type(self.engine.scheduler).__name__

    # -- driving ---------------------------------------------------------------------

    def add(
        self,
        rid: str,
        prompt: list[int],
        max_tokens: int = 6,
        *,
        arrival: float = 0.0,
        priority: int = 0,
        cache_salt: str | None = None,
        tag: str = "add",
        **params: Any,
    ) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.engine import EngineCoreRequest

        resumable = bool(params.pop("resumable", False))
        request = EngineCoreRequest(
            request_id=rid,
            prompt_token_ids=list(prompt),
            mm_features=None,
            sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True, **params),
            pooling_params=None,
            arrival_time=arrival,
            lora_request=None,
            cache_salt=cache_salt,
            data_parallel_rank=None,
            priority=priority,
            resumable=resumable,
        )
        try:
            self.engine.add_request(*self.engine.preprocess_add_request(request))
            self.log.append([tag, rid])
        except Exception as exc:  # vLLM itself may refuse (recorded, compared)
            self.log.append([tag, rid, "raised", type(exc).__name__])

    def step(self, times: int = 1) -> None:
        for _ in range(times):
            seen = self.engine.model_executor.seen
            before = len(seen)
            outputs, executed = self.engine.step_fn()
            sched = _scheduler_output(seen[-1]) if len(seen) > before else None
            events = [_event(e) for batch in self.published for e in batch.events]
            self.published.clear()
            self.log.append(["step", sched, _outputs(outputs), executed, events])

    def run(self, limit: int = 200) -> None:
        """Step until the engine has no work (what EngineCoreProc's loop waits for)."""
        for _ in range(limit):
            if not self.engine.scheduler.has_requests() and not self.engine.batch_queue:
                return
            self.step()
        raise RuntimeError("scenario did not finish")

    def abort(self, *rids: str) -> None:
        self.engine.abort_requests(list(rids))
        self.log.append(["abort", list(rids), self.counts()])

    def abort_during_step(self, *rids: str) -> None:
        """Abort while the model runs: EngineCore processes its aborts queue then."""
        self.engine.aborts_queue.put(list(rids))
        self.step()

    def finish(self, rids: list[str] | None) -> None:
        from vllm.v1.request import RequestStatus

        done = self.engine.scheduler.finish_requests(rids, RequestStatus.FINISHED_ABORTED)
        self.log.append(["finish", rids, sorted(done)])

    def pause(self, mode: str, clear_cache: bool) -> None:
        from vllm.v1.core.sched.interface import PauseState

        try:
            if mode == "wait":
                # EngineCoreProc's "wait": PAUSED_NEW, step until idle, then clear.
                self.engine.scheduler.set_pause_state(PauseState.PAUSED_NEW)
                self.log.append(["pause", mode, self.counts()])
                self.run()
                if clear_cache:
                    self.engine._reset_caches()
            else:
                self.engine.pause_scheduler(mode=mode, clear_cache=clear_cache)
        except RuntimeError as exc:  # a clear refused (sessions hold blocks): compared
            self.log.append(["paused", mode, clear_cache, "raised", type(exc).__name__])
            return
        self.log.append(["paused", mode, clear_cache, self.counts()])

    def resume(self) -> None:
        self.engine.resume_scheduler()
        self.log.append(["resumed", self.counts()])

    def reset(self, running: bool) -> None:
        try:
            result: Any = self.engine.reset_prefix_cache(reset_running_requests=running)
        except Exception as exc:
            result = ["raised", type(exc).__name__]
        self.log.append(["reset", running, result, self.counts()])

    def counts(self) -> list[Any]:
        s = self.engine.scheduler
        return [
            str(s.pause_state.name),
            s.get_num_unfinished_requests(),
            s.has_finished_requests(),
            list(s.get_request_counts()),
            self.engine.is_scheduler_paused(),
        ]


class _Recorder:
    """A KV-event publisher that keeps every batch (vLLM's publisher interface)."""

    def __init__(self, into: list[Any]) -> None:
        self.into = into

    def publish(self, batch: Any) -> None:
        self.into.append(batch)

    def shutdown(self) -> None:
        return None


def _hash(value: Any) -> Any:
    return value.hex() if isinstance(value, bytes) else value


def _plain(value: Any) -> Any:
    """A KV event's field as JSON: hashes (bytes) as hex, tuples as lists."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _event(event: Any) -> list[Any]:
    """A KV event with every field its release declares, in declaration order
    (0.33 adds ``group_idx``, the cache-spec kind, locality, session and
    look-ahead fields that KV-aware routers read)."""
    fields = type(event).__struct_fields__
    return [type(event).__name__, *(_plain(getattr(event, name)) for name in fields)]


def _scheduler_output(out: Any) -> dict[str, Any]:
    cached = out.scheduled_cached_reqs
    return {
        "num_scheduled": dict(sorted(out.num_scheduled_tokens.items())),
        "new": [
            [
                d.req_id,
                [list(g) for g in d.block_ids],
                d.num_computed_tokens,
                None if d.prefill_token_ids is None else list(d.prefill_token_ids),
            ]
            for d in out.scheduled_new_reqs
        ],
        "cached": [
            [
                rid,
                None if ids is None else [list(g) for g in ids],
                computed,
                rid in cached.resumed_req_ids,
                len(cached.all_token_ids[rid]) if rid in cached.all_token_ids else None,
            ]
            for rid, ids, computed in zip(
                cached.req_ids, cached.new_block_ids, cached.num_computed_tokens, strict=True
            )
        ],
        "preempted": sorted(out.preempted_req_ids or ()),
        "finished": sorted(out.finished_req_ids),
        "total": out.total_num_scheduled_tokens,
        "common_prefix_blocks": list(out.num_common_prefix_blocks),
    }


def _outputs(outputs: dict[int, Any] | None) -> dict[str, Any]:
    result = {}
    for client, eco in sorted((outputs or {}).items()):
        stats = eco.scheduler_stats
        result[str(client)] = {
            "outputs": [
                [
                    o.request_id,
                    list(o.new_token_ids),
                    None if o.finish_reason is None else int(o.finish_reason),
                    o.stop_reason,
                    [int(e.type) for e in o.events or ()],
                    _prefix_hits(o),
                ]
                for o in eco.outputs
            ],
            "finished_requests": None
            if eco.finished_requests is None
            else sorted(eco.finished_requests),
            "stats": None if stats is None else _stats(stats),
        }
    return result


def _prefix_hits(output: Any) -> Any:
    """A request's prefix hits as its output carries them: vLLM 0.19.1's
    ``num_cached_tokens`` on every output, 0.33's ``PrefillStats`` (every field)
    on the first one only."""
    if not hasattr(output, "prefill_stats"):
        return output.num_cached_tokens
    p = output.prefill_stats
    if p is None:
        return None
    return [
        p.num_prompt_tokens,
        p.num_computed_tokens,
        p.num_cached_tokens,
        p.num_local_cached_tokens,
        p.num_external_cached_tokens,
        p.num_cache_creation_tokens,
    ]


def _stats(stats: Any) -> dict[str, Any]:
    p = stats.prefix_cache_stats
    record = {
        "running": stats.num_running_reqs,
        "waiting": stats.num_waiting_reqs,
        "kv_usage": round(stats.kv_cache_usage, 9),
        "prefix": [
            p.reset,
            p.requests,
            p.queries,
            p.hits,
            p.preempted_requests,
            p.preempted_queries,
            p.preempted_hits,
        ],
        "connector_prefix": stats.connector_prefix_cache_stats,
        "eviction_events": len(stats.kv_cache_eviction_events),
        "spec": stats.spec_decoding_stats,
        "step_counter": stats.step_counter,
        "wave": stats.current_wave,
    }
    if hasattr(stats, "encoder_cache_usage"):  # vLLM 0.19.1
        record["encoder_usage"] = stats.encoder_cache_usage
    if hasattr(stats, "num_skipped_waiting_reqs"):  # vLLM 0.33.0's added fields
        record["skipped_waiting"] = stats.num_skipped_waiting_reqs
        record["kv_fetch_by_stage"] = dict(sorted(stats.num_kv_fetch_reqs_by_stage.items()))
        record["prefix_hits_by_source"] = {str(k): v for k, v in p.hits_by_source.items()}
        record["lora"] = [
            dict(sorted(stats.waiting_lora_adapters.items())),
            dict(sorted(stats.running_lora_adapters.items())),
        ]
        record["kv_connector"] = stats.kv_connector_stats
        record["ec_connector"] = stats.ec_connector_stats
        details = stats.iteration_details  # elapsed_ms is a timing: not compared
        record["iteration"] = (
            None
            if details is None
            else [
                details.iteration_index,
                details.num_ctx_requests,
                details.num_ctx_tokens,
                details.num_generation_requests,
                details.num_generation_tokens,
            ]
        )
    return record


def _prompt(seed: int, length: int, shared: int = 0) -> list[int]:
    """``shared`` leading tokens common to every prompt (prefix-cache hits), then unique ones."""
    return [7 + (i % 50) for i in range(shared)] + [
        1000 + (seed * 97 + i * 13) % 40000 for i in range(length - shared)
    ]


# -- scenarios -------------------------------------------------------------------------


def aborts(h: Harness) -> None:
    """Aborts at every phase: waiting, mid-prefill, decoding, preempted, in the step, finished."""
    h.add("w", _prompt(1, 40), arrival=0.0)
    h.abort("w")  # still waiting, never scheduled
    h.add("long", _prompt(2, 150, shared=32), max_tokens=4, arrival=1.0)
    h.add("dec", _prompt(3, 20, shared=32), max_tokens=12, arrival=2.0)
    h.step()
    h.abort("long")  # mid-prefill (150 tokens over a 64-token budget)
    h.step(2)
    h.add("a", _prompt(4, 150, shared=32), max_tokens=60, arrival=3.0)
    h.add("b", _prompt(5, 140, shared=32), max_tokens=60, arrival=4.0)
    h.add("c", _prompt(6, 100, shared=32), max_tokens=60, arrival=5.0)
    h.step(3)
    h.abort("dec")  # decoding
    preempted: list[str] = []
    for _ in range(30):  # until blocks run out and a request is preempted
        h.step()
        preempted = sorted(
            rid for rid, r in h.engine.scheduler.requests.items() if r.status.name == "PREEMPTED"
        )
        if preempted:
            break
    h.log.append(["preempted_now", preempted])
    if preempted:
        h.abort(preempted[0])  # preempted, back in the waiting queue
    h.abort_during_step("a")  # aborted while the model ran
    h.step(2)
    h.add("d", _prompt(7, 30, shared=32), max_tokens=3, arrival=6.0)
    h.run()
    h.abort("d")  # already finished: nothing happens
    h.finish(["nope", "b"])
    h.finish(None)


def _pause(mode: str, clear: bool) -> Any:
    def scenario(h: Harness) -> None:
        h.add("p1", _prompt(11, 70, shared=32), max_tokens=8, arrival=0.0)
        h.add("p2", _prompt(12, 40, shared=32), max_tokens=8, arrival=1.0)
        h.step(2)
        h.add("p3", _prompt(13, 50, shared=32), max_tokens=5, arrival=2.0)
        h.pause(mode, clear)
        h.add("p4", _prompt(14, 30, shared=32), max_tokens=4, arrival=3.0)  # queued while paused
        h.step(3)
        h.reset(False)
        h.resume()
        h.run()
        h.add("p5", _prompt(15, 60, shared=32), max_tokens=4, arrival=4.0)
        h.step(2)
        h.reset(True)  # preempt running, then clear (what sleep does)
        h.run()
        h.reset(False)

    scenario.__doc__ = f"pause mode={mode} clear_cache={clear}, adds while paused, resume"
    return scenario


def reset_mid_prefill(h: Harness) -> None:
    """Resets with running requests while a prefill chunk and a decode are in flight.

    Under async scheduling vLLM 0.19.1 drops each preempted request's next
    token (``discard_latest_async_tokens``): the decoding request's token in
    flight, and for the request whose step in flight was a partial prefill
    chunk (no token) the first token it samples after resuming."""
    h.add("dec", _prompt(51, 30, shared=32), max_tokens=10, arrival=0.0)
    h.step(2)
    h.add("chunk", _prompt(52, 150), max_tokens=5, arrival=1.0)
    h.step()  # chunk's first 64-token slice (dec's decode beside it)
    h.reset(True)
    h.step(2)
    h.reset(True)  # again, right after resuming
    h.run()


def priority(h: Harness) -> None:
    """--scheduling-policy priority: the heap order and the priority victim."""
    h.add("lo", _prompt(21, 130), max_tokens=60, arrival=0.0, priority=5)
    h.add("mid", _prompt(22, 110), max_tokens=60, arrival=1.0, priority=3)
    h.step(2)
    h.add("hi", _prompt(23, 90), max_tokens=40, arrival=2.0, priority=0)
    h.add("hi2", _prompt(24, 60), max_tokens=10, arrival=3.0, priority=0, cache_salt="s1")
    h.run()


REFUSED = {
    "min": {"min_tokens": 2},
    "xarg": {"extra_args": {"kvframe_jobid": "j"}},
    "last": {"extra_args": {"kvframe_last_turn": "maybe"}},
}
"""Requests the bridge refuses (finished with FINISHED_ERROR); vLLM serves them."""


def refused(h: Harness, *, include_refused: bool) -> None:
    """A refused request in the middle of others: finished with an error, the rest served."""
    h.add("r1", _prompt(31, 50, shared=32), max_tokens=6, arrival=0.0)
    h.step()
    if include_refused:
        for rid, params in REFUSED.items():
            h.add(rid, _prompt(32, 40), max_tokens=4, arrival=1.0, tag="refused", **dict(params))
    h.step()
    h.add("r2", _prompt(34, 40, shared=32), max_tokens=6, arrival=2.0)
    h.run()


def duplicate(h: Harness) -> None:
    """A second request with a live id: vLLM 0.19.1 asserts (its engine dies); the
    bridge finishes both with an error and serves the next request."""
    h.add("d1", _prompt(41, 40), max_tokens=6, arrival=0.0)
    h.step()
    h.add("d1", _prompt(42, 20), max_tokens=4, arrival=1.0)
    h.add("d2", _prompt(43, 30), max_tokens=3, arrival=2.0)
    h.run()


def streaming(h: Harness) -> None:
    """Streaming input (``resumable``) beside other requests.

    Session ``q`` stops at its first token with a chunk already queued and
    resumes behind (0.19.1) or ahead of (0.33.0) a request waiting since.
    Session ``s`` gets a chunk while it runs (queued, taken when it stops), stops with
    nothing queued (waits for input, keeping its blocks, not counted as
    unfinished), resumes in its place when the next chunk comes, and is closed by
    the final chunk while it runs (finishes when it next stops). Session ``t``
    waits for input and is aborted; session ``u`` waits and is closed by the
    final chunk (finished as aborted).
    """

    def chunk(rid: str, seed: int, length: int, max_tokens: int, arrival: float) -> None:
        h.add(rid, _prompt(seed, length), max_tokens, arrival=arrival, tag="chunk", resumable=True)

    def close(rid: str) -> None:
        h.add(rid, [0], 1, arrival=99.0, tag="close")  # vLLM's closing request

    # q stops at its first sample with a chunk queued while w waits behind a long
    # prefill: 0.19.1 requeues q behind w, 0.33.0 ahead of it.
    h.add("q", _prompt(70, 20), max_tokens=1, arrival=0.0, resumable=True)
    chunk("q", 71, 10, 2, 0.5)
    h.add("big", _prompt(72, 150), max_tokens=2, arrival=0.6)
    h.add("w", _prompt(73, 20), max_tokens=2, arrival=0.7)
    h.step(4)
    close("q")
    h.run()
    h.add("s", _prompt(61, 40, shared=32), max_tokens=4, arrival=0.0, resumable=True)
    h.add("o1", _prompt(62, 90, shared=32), max_tokens=14, arrival=1.0)
    h.add("t", _prompt(63, 20), max_tokens=2, arrival=2.0, resumable=True)
    h.step(2)
    chunk("s", 64, 20, 3, 3.0)  # while s runs: queued
    h.add("o2", _prompt(65, 50, shared=32), max_tokens=8, arrival=4.0)
    h.step(6)
    h.log.append(["counts", h.counts()])
    h.run()  # until only sessions waiting for input are left
    h.log.append(["idle", h.counts()])
    h.reset(True)  # the waiting sessions' blocks stay held: vLLM raises RuntimeError
    h.add("o3", _prompt(66, 30, shared=32), max_tokens=5, arrival=5.0)
    chunk("s", 67, 24, 4, 6.0)  # s waits for input: resumes in its place
    h.abort("t")  # t waits for input: aborted
    h.step(3)
    close("s")  # s runs: the close is queued, s finishes when it stops
    h.add("u", _prompt(68, 18), max_tokens=2, arrival=7.0, resumable=True)
    h.run()
    h.log.append(["idle", h.counts()])
    close("u")  # u waits for input: finished at once
    h.log.append(["closed", h.counts()])
    h.run()
    h.add("o4", _prompt(69, 20), max_tokens=3, arrival=8.0)
    h.run()


SCENARIOS: dict[str, tuple[Any, str]] = {
    "aborts": (aborts, "fcfs"),
    "first-token": (first_token, "fcfs"),
    "priority": (priority, "priority"),
    "duplicate": (duplicate, "fcfs"),
    "reset-mid-prefill": (reset_mid_prefill, "fcfs"),
    "streaming": (streaming, "fcfs"),
    "stale-session-block": (stale_session_block, "fcfs"),
    **{
        f"pause-{mode}-{'clear' if clear else 'keepcache'}": (_pause(mode, clear), "fcfs")
        for mode in ("abort", "wait", "keep")
        for clear in (True, False)
    },
}


def _fix_session_hashes_019() -> None:
    """``--session-hash-fix``: vLLM 0.19.1's ``Scheduler`` with 0.33's fix of a
    streaming-input session's block hashes (0.33's ``_update_request_as_session``
    drops the hashes past the tokens it keeps; 0.19.1's keeps the hash of a block
    the discarded sampled token filled, and caches the block under it). The
    bridge makes that fix on 0.19.1 (``kvframe_vllm.compat.session_hashes_kept``),
    so with this flag vLLM's side is compared under the same rule; without it the
    scenario ``stale-session-block`` shows the difference. No-op on 0.33."""
    import vllm
    from vllm.v1.core.sched.scheduler import Scheduler

    if not vllm.__version__.startswith("0.19"):
        return
    original = Scheduler._update_request_as_session

    def update_request_as_session(self: Any, session: Any, update: Any) -> None:
        kept = session.num_computed_tokens
        original(self, session, update)
        del session.block_hashes[kept // BLOCK_SIZE :]
        session.update_block_hashes()

    Scheduler._update_request_as_session = update_request_as_session


def _random_scenarios(argv: list[str]) -> dict[str, tuple[Any, str]]:
    """``--seeds=A:B``: the random scripts of seeds A..B-1, even seeds under ``fcfs``,
    odd ones under ``priority``."""
    chosen = [a.split("=", 1)[1] for a in argv if a.startswith("--seeds=")]
    seeds: list[int] = []
    for spec in chosen:
        start, _, stop = spec.partition(":")
        seeds.extend(range(int(start), int(stop)) if stop else [int(start)])
    return {
        f"random-{seed}": (random_script(seed), "priority" if seed % 2 else "fcfs")
        for seed in seeds
    }


def _run_scenario(scheduler: str, scenario: Any, policy: str, async_scheduling: bool) -> Any:
    """One scenario on a fresh engine; an exception ends its log as a record (compared)."""
    h = Harness(scheduler, policy=policy, async_scheduling=async_scheduling)
    try:
        scenario(h)
    except Exception as exc:
        h.log.append(["crashed", type(exc).__name__, str(exc)[:200]])
    return {"scheduler": h.name, "log": h.log}


def main(argv: list[str]) -> None:
    scheduler = argv[0]
    if "--v2" in argv:
        # Model Runner V2 (resumed requests sent as new ones with their tokens);
        # read by vLLM's scheduler and the bridge when they are built. vLLM
        # 0.19.1's default is V1, 0.33.0's V2 (``--v1`` for the V1 runner there).
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    if "--v1" in argv:
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
    async_scheduling = "--async-scheduling" in argv
    if "--session-hash-fix" in argv and scheduler == "vllm":
        _fix_session_hashes_019()
    only = {a.split("=", 1)[1] for a in argv if a.startswith("--only=")}
    randoms = _random_scenarios(argv)
    scenarios = {**SCENARIOS, **randoms}
    results: dict[str, Any] = {}
    for name, (scenario, policy) in scenarios.items():
        if (only and name not in only) or ("--random-only" in argv and name not in randoms):
            continue
        results[name] = _run_scenario(scheduler, scenario, policy, async_scheduling)
    if only or "--random-only" in argv:
        Path(argv[1]).write_text(json.dumps(results))
        return
    # The refused-request scenario: the bridge gets the refused requests, vLLM not
    # (it would serve them); the test compares everything but their error outputs.
    h = Harness(scheduler, async_scheduling=async_scheduling)
    refused(h, include_refused=scheduler == "bridge")
    results["refused"] = {"scheduler": h.name, "log": h.log}
    Path(argv[1]).write_text(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
