"""Drive a KV cache manager through a scheduler-like workload and record its decisions.

Runs unchanged against kvframe's ``KVCacheManager`` and against vLLM 0.19.1's
real one (in the vLLM reference environment), so the two traces can be
compared decision by decision: prefix-hit lengths, new block ids, failed
allocations, free-block counts, can-fit answers and KV event counts.

The workload mimics what the scheduler does with the manager: chunked
prefill, decode with speculative tokens and lookahead slots, preemption on
allocation failure (free + readmission through the prefix cache), external
tokens loaded synchronously or asynchronously (delayed caching), aborts,
cache salts and prefix-cache resets.

Usage as a script (prints the traces of all ``SCENARIOS`` as JSON, last line)::

    python kvcore_vllm_driver.py vllm|kvframe
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

BLOCK_SIZE = 4
NUM_BLOCKS = 48
MAX_MODEL_LEN = 96


class KvframeSide:
    def __init__(self, enable_caching: bool, use_eagle: bool) -> None:
        from kvframe.core.hashing import make_block_hasher
        from kvframe.core.kv_cache_manager import KVCacheManager

        self.manager = KVCacheManager(
            NUM_BLOCKS,
            BLOCK_SIZE,
            MAX_MODEL_LEN,
            enable_caching=enable_caching,
            enable_kv_cache_events=True,
            use_eagle=use_eagle,
        )
        self.hasher = make_block_hasher(BLOCK_SIZE)

    def request(self, rid: str, tokens: list[int], max_tokens: int, salt: str | None) -> Any:
        from kvframe.domain.request import Request

        return Request(rid, tokens, max_tokens, cache_salt=salt, block_hasher=self.hasher)

    def empty(self) -> Any:
        return ()

    def block_ids(self, rid: str) -> list[int]:
        return self.manager.get_block_ids(rid)

    def ids_of(self, blocks: Any) -> list[int]:
        return [b.block_id for b in blocks]

    def events(self) -> list[tuple[str, int]]:
        return [
            (type(e).__name__, len(getattr(e, "block_hashes", ())))
            for e in self.manager.take_events()
        ]

    def stats(self) -> list[int]:
        s = self.manager.make_prefix_cache_stats()
        return [
            s.requests,
            s.queries,
            s.hits,
            s.preempted_requests,
            s.preempted_queries,
            s.preempted_hits,
        ]


class VllmSide:
    def __init__(self, enable_caching: bool, use_eagle: bool) -> None:
        import torch
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_manager import KVCacheManager
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

        init_none_hash(sha256)
        spec = FullAttentionSpec(
            block_size=BLOCK_SIZE, num_kv_heads=1, head_size=8, dtype=torch.float16
        )
        config = KVCacheConfig(
            num_blocks=NUM_BLOCKS,
            kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)],
        )
        self.manager = KVCacheManager(
            config,
            max_model_len=MAX_MODEL_LEN,
            hash_block_size=BLOCK_SIZE,
            enable_caching=enable_caching,
            use_eagle=use_eagle,
            log_stats=True,
            enable_kv_cache_events=True,
        )
        self.hasher = get_request_block_hasher(BLOCK_SIZE, sha256)

    def request(self, rid: str, tokens: list[int], max_tokens: int, salt: str | None) -> Any:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        return Request(
            request_id=rid,
            prompt_token_ids=tokens,
            sampling_params=SamplingParams(max_tokens=max_tokens),
            pooling_params=None,
            arrival_time=0.0,
            cache_salt=salt,
            block_hasher=self.hasher,
        )

    def empty(self) -> Any:
        return None

    def block_ids(self, rid: str) -> list[int]:
        return list(self.manager.get_block_ids(rid)[0])

    def ids_of(self, blocks: Any) -> list[int]:
        return [b.block_id for b in blocks.blocks[0]]

    def events(self) -> list[tuple[str, int]]:
        return [
            (type(e).__name__, len(getattr(e, "block_hashes", ())))
            for e in self.manager.take_events()
        ]

    def stats(self) -> list[int]:
        s = self.manager.make_prefix_cache_stats()
        return [
            s.requests,
            s.queries,
            s.hits,
            s.preempted_requests,
            s.preempted_queries,
            s.preempted_hits,
        ]


def run(side: Any, seed: int, num_steps: int) -> list[Any]:
    """Replay the seeded workload; return the trace of decisions."""
    rng = random.Random(seed)
    manager = side.manager
    documents = [[d * 1000 + i for i in range(MAX_MODEL_LEN)] for d in range(3)]
    waiting: list[Any] = []
    running: list[Any] = []
    loading: dict[str, list[Any]] = {}  # rid -> [request, steps left, computed after load]
    trace: list[Any] = []
    next_id = 0

    def preempt(request: Any) -> None:
        manager.free(request)
        request.num_computed_tokens = 0
        request.spec_token_ids = []
        request.num_preemptions += 1
        waiting.insert(0, request)

    for step in range(num_steps):
        # Arrivals.
        for _ in range(rng.choice([0, 0, 1, 1, 2])):
            doc = rng.choice(documents)
            length = rng.randint(1, 48)
            tokens = list(doc[:length])
            if rng.random() < 0.4:
                tokens += [50_000 + next_id * 64 + j for j in range(rng.randint(1, 12))]
            salt = "s" if rng.random() < 0.15 else None
            rid = f"r{next_id}"
            next_id += 1
            waiting.append(side.request(rid, tokens, rng.randint(1, 24), salt))

        # Asynchronous loads landing.
        for rid in list(loading):
            entry = loading[rid]
            entry[1] -= 1
            if entry[1] > 0:
                continue
            request, _, computed = loading.pop(rid)
            request.num_computed_tokens = computed
            manager.cache_blocks(request, computed)
            if request.num_computed_tokens == request.num_tokens:
                request.num_computed_tokens -= 1
            running.append(request)
            trace.append(("loaded", rid, side.block_ids(rid)))

        # Running requests first.
        for request in list(running):
            if request not in running:
                continue  # preempted earlier in this step
            remaining = request.num_tokens - request.num_computed_tokens
            if remaining > 1:  # still prefilling
                num_new, lookahead, drafts = min(remaining, rng.choice([3, 8, 16])), 0, []
            else:
                drafts = [7] * rng.choice([0, 0, 1, 2])
                lookahead = rng.choice([0, 2])
                num_new = 1 + len(drafts)
            request.spec_token_ids = drafts
            while True:
                new = manager.allocate_slots(request, num_new, num_lookahead_tokens=lookahead)
                if new is not None:
                    break
                victim = running.pop()
                preempt(victim)
                trace.append(("preempt", victim.request_id))
                if victim is request:
                    break
            if new is None:
                continue
            trace.append(("alloc", request.request_id, side.ids_of(new)))
            request.num_computed_tokens += num_new
            if request.num_computed_tokens >= request.num_tokens:
                accepted = rng.randint(0, len(drafts))
                request.num_computed_tokens -= len(drafts) - accepted
                request.spec_token_ids = []
                request.append_output_token_ids([rng.choice([1, 2, 3])] * (accepted + 1))
                if (
                    request.num_tokens - len(request.prompt_token_ids) >= request.max_tokens
                    or request.num_tokens >= MAX_MODEL_LEN
                ):
                    running.remove(request)
                    manager.free(request)
                    trace.append(("finish", request.request_id))

        # Admission.
        while waiting and len(running) < 6 and rng.random() < 0.8:
            request = waiting[0]
            hits, num_hit = manager.get_computed_blocks(request)
            if rng.random() < 0.5:
                trace.append(
                    ("hit", request.request_id, num_hit, side.ids_of(hits) if num_hit else [])
                )
            else:
                trace.append(("hit", request.request_id, num_hit))
            external = 0
            load_async = False
            room = request.num_tokens - num_hit - 1
            if room > 0 and rng.random() < 0.25:
                external = rng.randint(1, room)
                load_async = rng.random() < 0.5
            num_new = (
                0
                if load_async
                else min(request.num_tokens - num_hit - external, rng.choice([5, 16, 64]))
            )
            hit_arg = hits if num_hit else side.empty()
            fits = manager.can_fit_full_sequence(
                request,
                num_new_computed_tokens=num_hit,
                new_computed_blocks=hit_arg,
                num_external_computed_tokens=external,
            )
            trace.append(("fits", request.request_id, fits))
            new = manager.allocate_slots(
                request,
                num_new,
                num_new_computed_tokens=num_hit,
                new_computed_blocks=hit_arg,
                num_external_computed_tokens=external,
                delay_cache_blocks=load_async,
            )
            if new is None:
                trace.append(("refused", request.request_id))
                break
            waiting.pop(0)
            trace.append(("admit", request.request_id, side.block_ids(request.request_id)))
            if load_async:
                loading[request.request_id] = [request, rng.randint(1, 3), num_hit + external]
            else:
                request.num_computed_tokens = num_hit + external + num_new
                running.append(request)

        # Occasional aborts and resets.
        if running and rng.random() < 0.05:
            victim = running.pop(rng.randrange(len(running)))
            manager.free(victim)
            trace.append(("abort", victim.request_id))
        if rng.random() < 0.02:
            trace.append(("reset", manager.reset_prefix_cache()))
        if not running and not loading and rng.random() < 0.5:
            trace.append(("idle-reset", manager.reset_prefix_cache()))

        trace.append(("step", step, manager.block_pool.get_num_free_blocks(), side.events()))
    trace.append(("stats", side.stats()))
    return trace


SCENARIOS: list[tuple[int, int, bool, bool]] = [
    # (seed, steps, enable_caching, use_eagle)
    (1, 300, True, False),
    (2, 300, True, False),
    (3, 300, True, False),
    (4, 200, False, False),
    (5, 200, True, True),
]


def run_all(which: str) -> list[list[Any]]:
    side_cls = VllmSide if which == "vllm" else KvframeSide
    return [run(side_cls(caching, eagle), seed, steps) for seed, steps, caching, eagle in SCENARIOS]


def main() -> None:
    # vLLM logs to stdout; the trace is the last line.
    print(json.dumps(run_all(sys.argv[1])))


if __name__ == "__main__":
    main()
