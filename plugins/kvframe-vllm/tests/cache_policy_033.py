"""Run under the vLLM 0.33 interpreter: kvframe eviction plugins in vLLM 0.33's CPU tier.

Used by ``test_bridge_033.py``; prints one JSON object. Every manager
here is vLLM 0.33.0's own ``CPUOffloadingManager``, its policy built by vLLM's
own ``CachePolicyFactory`` from ``eviction_policy`` + ``cache_policy_module_path``
(the ``kvframe_vllm.cache_policy_config`` keys), as ``CPUOffloadingSpec`` does.

``replay``: one seeded script of manager calls (stores that succeed or fail,
lookups, loads, touches, request finishes, a cache reset) played into two
managers, vLLM's built-in policy and the kvframe plugin of the same name, every
return value recorded (store plans with evicted keys and chunk ids, lookups,
load specs). The requests carry no token positions (``ReqContext`` without
``set_offload_key_position``): under that calling pattern vLLM 0.33's request-
ranked LRU reduces to plain recency, which kvframe's ``lru`` implements.
``positions`` replays the same script with token positions (what 0.33's
scheduler records) and reports how many calls then differ, a figure, not a claim.
"""

from __future__ import annotations

import json
import os
import random
from itertools import zip_longest
from typing import Any

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

# The harness (tools/differential) comes on PYTHONPATH: vllm_reference.run_script.


def manager(policy: str, capacity: int) -> Any:
    import kvframe_vllm
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    if policy.startswith("kvframe:"):
        extra = kvframe_vllm.cache_policy_config(cpu_bytes_to_use=0, eviction=policy[8:])
        return CPUOffloadingManager(
            num_chunks=capacity,
            cache_policy=extra["eviction_policy"],
            cache_policy_module_path=extra["cache_policy_module_path"],
        )
    return CPUOffloadingManager(num_chunks=capacity, cache_policy=policy)


def script(seed: int, num_calls: int) -> list[tuple[Any, ...]]:
    """Seeded manager calls over a small key space, with requests that come and go."""
    rng = random.Random(seed)
    calls: list[tuple[Any, ...]] = []
    live: list[int] = []
    next_req = 0
    for _ in range(num_calls):
        if not live or rng.random() < 0.15:
            live.append(next_req)
            next_req += 1
        req = rng.choice(live)
        start = rng.randrange(0, 24)
        keys = list(range(start, start + rng.randint(1, 6)))
        op = rng.random()
        if op < 0.45:
            calls.append(("store", req, keys, rng.random() < 0.9))
        elif op < 0.65:
            calls.append(("lookup", req, keys))
        elif op < 0.8:
            calls.append(("load", req, keys))
        elif op < 0.9:
            calls.append(("touch", req, keys))
        elif op < 0.995:
            calls.append(("finish", req))
            live.remove(req)
        else:
            calls.append(("reset",))
    return calls


def play(policy: str, calls: list[tuple[Any, ...]], capacity: int, positions: bool) -> list[Any]:
    from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key

    m = manager(policy, capacity)
    contexts: dict[int, Any] = {}

    def ctx(req: int) -> Any:
        if req not in contexts:
            contexts[req] = ReqContext(req_id=f"r{req}")
            m.on_new_request(contexts[req])
        return contexts[req]

    def key(k: int) -> Any:
        return make_offload_key(k.to_bytes(4, "big"), 0)

    def name(offload_key: Any) -> int:
        return int.from_bytes(bytes(offload_key)[:4], "big")

    log: list[Any] = []
    for call in calls:
        if call[0] == "reset":
            m.reset_cache()
            log.append(["reset"])
            continue
        req = call[1]
        context = ctx(req)
        if call[0] == "finish":
            m.on_request_finished(context)
            contexts.pop(req)
            log.append(["finish", req])
            continue
        keys = [key(k) for k in call[2]]
        if positions:
            for k, offload_key in zip(call[2], keys, strict=True):
                context.set_offload_key_position(offload_key, (k + 1) * 16)
        if call[0] == "store":
            out = m.prepare_store(keys, context)
            if out is None:
                log.append(["store", None])
                continue
            stored = list(out.keys_to_store)
            log.append(
                [
                    "store",
                    [name(k) for k in stored],
                    [name(k) for k in out.evicted_keys],
                    [int(b) for b in out.store_spec.block_ids],
                ]
            )
            m.complete_store(stored, context, success=call[3])
        elif call[0] == "lookup":
            log.append(["lookup", [m.lookup(k, context).name for k in keys]])
        elif call[0] == "load":
            ready = []
            for k in keys:
                if m.lookup(k, context) is not LookupResult.HIT:
                    break
                ready.append(k)
            if ready:
                spec = m.prepare_load(ready, context)
                m.complete_load(ready, context)
                log.append(["load", [name(k) for k in ready], [int(b) for b in spec.block_ids]])
        else:
            m.touch(keys, context)
    return log


def replay(policy: str, seed: int, num_calls: int, capacity: int, positions: bool) -> dict:
    calls = script(seed, num_calls)
    theirs = play(policy, calls, capacity, positions)
    ours = play("kvframe:" + policy, calls, capacity, positions)
    pairs = list(zip_longest(theirs, ours))
    differing = [i for i, (a, b) in enumerate(pairs) if a != b]
    evicted = sum(len(e[2]) for e in theirs if e[0] == "store" and e[1] is not None)
    loads = sum(1 for e in theirs if e[0] == "load")
    return {
        "calls": len(calls),
        "records": len(theirs),
        "differing": len(differing),
        "first": None if not differing else list(pairs[differing[0]]),
        "evicted": evicted,
        "loads": loads,
    }


def main() -> None:
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    from kvframe.config import ConfigError

    result: dict[str, Any] = {}
    m = manager("kvframe:arc:variant=paper", 8)
    result["built"] = [type(m._policy).__name__, type(m._policy.kvframe_policy).__module__]
    result["replay"] = {
        f"{p}-seed{s}": replay(p, s, 3000, 12, positions=False) for p in ("lru",) for s in range(5)
    }
    result["positions"] = {f"lru-seed{s}": replay("lru", s, 3000, 12, True) for s in range(5)}
    # kvframe's other plugins run in 0.33's tier unchanged: the same script, no crash.
    result["others"] = {
        spec: len(play("kvframe:" + spec, script(7, 2000), 12, positions=True))
        for spec in ("arc", "arc:variant=paper", "kvframe_s3fifo:S3FIFOPolicy")
    }
    try:
        CPUOffloadingManager(
            num_chunks=8,
            cache_policy="kvframe:lruu",
            cache_policy_module_path="kvframe_vllm.cache_policy",
        )
        result["typo"] = None
    except ConfigError as err:
        result["typo"] = {"type": type(err).__name__, "message": str(err)}
    try:
        CPUOffloadingManager(
            num_chunks=8, cache_policy="Nope", cache_policy_module_path="kvframe_vllm.cache_policy"
        )
        result["unprefixed"] = None
    except AttributeError as err:
        result["unprefixed"] = {"type": type(err).__name__, "message": str(err)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
