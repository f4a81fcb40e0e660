"""Seeded workloads for the differential fidelity harness (kvframe vs vLLM V1).

This module is imported by *both* sides of the harness — the vLLM driver runs
under the vLLM reference virtualenv, the kvframe driver under kvframe's own —
so it uses the standard library only and imports neither project.

A workload is a JSON object::

    {"name": "prefix-fcfs",
     "config": {"block_size": 16, "num_gpu_blocks": 480, "max_num_batched_tokens": 1024,
                "max_num_seqs": 32, "max_model_len": 2048,
                "long_prefill_token_threshold": 0, "enable_prefix_caching": true,
                "enable_chunked_prefill": true, "reserve_full_sequence": true,
                "policy": "fcfs"},
     "requests": [{"request_id": "r0000", "prompt_token_ids": [...], "max_tokens": 12,
                   "arrival_step": 0, "arrival_time": 0.25, "priority": 3}, ...]}

``num_gpu_blocks`` counts the null block (vLLM's ``num_blocks``), so
``num_gpu_blocks - 1`` blocks are usable.

A workload of the *tier* set (:data:`TIER_WORKLOADS`, :func:`generate_tier`)
also has ``config["tier"]``: a CPU offload tier behind the connector::

    {"num_cpu_blocks": 160, "eviction": "lru", "block_size_factor": 1,
     "store_threshold": 0, "completion": {"kind": "seeded", "max_delay": 3, "seed": 0}}

``num_cpu_blocks`` counts offloaded blocks (``block_size_factor`` GPU blocks
each); ``completion`` is the transfer-completion rule both drivers play
(``stepping.ScriptedWorker``). ``reserve_full_sequence`` is vLLM's
``scheduler_reserve_full_isl`` (on by default in vLLM 0.19.1).

Every generator is deterministic for a given ``(name, policy, num_requests,
seed)``: the request stream does not depend on the policy, so the fcfs and
priority runs of one workload see exactly the same requests.

Arrival times are distinct across the whole workload, and *within* one arrival
step they are deliberately not in workload (insertion) order: vLLM's FCFS queue
orders by insertion while its priority queue breaks priority ties on
``arrival_time`` (then request id), and a faithful re-creation must do both.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

MOONCAKE = Path(__file__).resolve().parents[2] / "kvframe" / "data" / "mooncake"
"""The Mooncake traces bundled with kvframe (read here without importing kvframe)."""

POLICIES: tuple[str, ...] = ("fcfs", "priority")
"""Every workload is run under each of these scheduling policies."""
BRIDGE_POLICIES: tuple[str, ...] = ("continuum",)
"""Policies vLLM has no counterpart for: compared between kvframe and the
kvframe-vllm bridge (kvframe's core behind vLLM's scheduler interface)."""

DEFAULT_NUM_REQUESTS = 240
SAMPLED_TOKEN_ID = 7
"""The one token every sampling request produces. vLLM requests carry no EOS
(``ignore_eos``, no stop tokens), so only max_tokens / max_model_len stop them."""

_VOCAB = (10, 50_000)

Workload = dict[str, Any]
RequestSpec = dict[str, Any]


# --------------------------------------------------------------------------
# Helpers shared by the generators
# --------------------------------------------------------------------------


def _tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randint(*_VOCAB) for _ in range(n)]


def _arrivals(rng: random.Random, n: int, per_step: float) -> list[tuple[int, float]]:
    """``n`` (arrival_step, arrival_time) pairs, steps non-decreasing.

    Inter-arrival gaps are exponential with mean ``1 / per_step`` steps. Within a
    step the arrival times are a random permutation of evenly spaced fractions,
    so they are distinct but not in insertion order (see the module docstring).
    """
    steps: list[int] = []
    t = 0.0
    for _ in range(n):
        steps.append(int(t))
        t += rng.expovariate(per_step)
    out: list[tuple[int, float]] = []
    i = 0
    while i < n:
        j = i
        while j < n and steps[j] == steps[i]:
            j += 1
        k = j - i
        ranks = list(range(1, k + 1))
        rng.shuffle(ranks)
        out.extend((steps[i], steps[i] + r / (k + 1)) for r in ranks)
        i = j
    return out


def _config(
    policy: str,
    *,
    num_gpu_blocks: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    long_prefill_token_threshold: int = 0,
    enable_prefix_caching: bool = True,
    enable_chunked_prefill: bool = True,
    reserve_full_sequence: bool = True,
    block_size: int = 16,
) -> dict[str, Any]:
    if policy not in POLICIES + BRIDGE_POLICIES:
        known = POLICIES + BRIDGE_POLICIES
        raise ValueError(f"unknown policy {policy!r}; expected one of {known}")
    return {
        "block_size": block_size,
        "num_gpu_blocks": num_gpu_blocks,
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_num_seqs": max_num_seqs,
        "max_model_len": max_model_len,
        "long_prefill_token_threshold": long_prefill_token_threshold,
        "enable_prefix_caching": enable_prefix_caching,
        "enable_chunked_prefill": enable_chunked_prefill,
        "reserve_full_sequence": reserve_full_sequence,
        "policy": policy,
    }


def _requests(
    rng: random.Random,
    prompts: list[list[int]],
    max_tokens: list[int],
    priorities: list[int],
    per_step: float,
) -> list[RequestSpec]:
    arrivals = _arrivals(rng, len(prompts), per_step)
    return [
        {
            "request_id": f"r{i:04d}",
            "prompt_token_ids": prompt,
            "max_tokens": mt,
            "arrival_step": step,
            "arrival_time": at,
            "priority": prio,
        }
        for i, (prompt, mt, prio, (step, at)) in enumerate(
            zip(prompts, max_tokens, priorities, arrivals, strict=True)
        )
    ]


# --------------------------------------------------------------------------
# The workloads
# --------------------------------------------------------------------------


def _prefix_requests(rng: random.Random, n: int) -> list[RequestSpec]:
    """Several system prompts x many suffixes, with duplicates and all-hit prompts.

    Stresses the chained hash, the longest-hit search, the ``num_tokens - 1``
    cap (a prompt that is an exact multiple of the block size and fully cached
    must recompute its whole last block), touching cached blocks and evicting
    cached blocks when the pool runs low.
    """
    # Lengths mix exact block multiples (48, 64, 128, 256, 512) and ragged ones.
    systems = [_tokens(rng, n_) for n_ in (48, 64, 100, 128, 200, 256, 333, 512)]
    fewshots = [_tokens(rng, n_) for n_ in (32, 80, 96, 150)]
    prompts: list[list[int]] = []
    for _ in range(n):
        kind = rng.random()
        sys_prompt = rng.choice(systems)
        if kind < 0.05 and prompts:
            # the previous prompt again, usually in the same arrival step: the
            # twin must hit blocks cached at allocation, before they are computed
            prompt = list(prompts[-1])
        elif kind < 0.15 and prompts:
            prompt = list(rng.choice(prompts))  # exact duplicate of an earlier prompt
        elif kind < 0.27:
            prompt = list(sys_prompt)  # the system prompt alone: all-hit when repeated
        elif kind < 0.40:
            # suffix chosen so the whole prompt is an exact multiple of the block size
            extra = 16 * rng.randint(1, 6) - len(sys_prompt) % 16
            prompt = sys_prompt + _tokens(rng, extra)
        elif kind < 0.55:
            prompt = sys_prompt + rng.choice(fewshots) + _tokens(rng, rng.randint(1, 90))
        elif kind < 0.62:
            prompt = _tokens(rng, rng.randint(5, 300))  # no sharing at all
        else:
            prompt = sys_prompt + _tokens(rng, rng.randint(1, 150))
        prompts.append(prompt)
    max_tokens = [1 if rng.random() < 0.1 else rng.randint(2, 48) for _ in range(n)]
    priorities = [rng.randint(0, 3) for _ in range(n)]
    return _requests(rng, prompts, max_tokens, priorities, per_step=2.0)


def _pressure_requests(rng: random.Random, n: int) -> list[RequestSpec]:
    """Short prompts, long outputs, few blocks: decode growth forces preemptions.

    A third of the prompts share one of three short prefixes, so a resumed
    request may find its own (freed but still cached) blocks again.
    """
    shared = [_tokens(rng, n_) for n_ in (32, 40, 64)]
    prompts = []
    for _ in range(n):
        if rng.random() < 0.33:
            prompts.append(rng.choice(shared) + _tokens(rng, rng.randint(1, 96)))
        else:
            prompts.append(_tokens(rng, rng.randint(8, 160)))
    max_tokens = [rng.randint(32, 320) for _ in range(n)]
    priorities = [rng.randint(0, 3) for _ in range(n)]
    return _requests(rng, prompts, max_tokens, priorities, per_step=1.5)


def _chunked_requests(rng: random.Random, n: int) -> list[RequestSpec]:
    """Long prompts with a small token budget and a per-request chunk cap.

    Most prompts are longer than the step budget (192) and the
    long-prefill threshold (80), so they are prefilled over many steps. Some
    share a 512-token prefix (chunking starts after the hit), some are short
    and slip in beside the chunks, and a few have prompt + max_tokens above
    max_model_len so max_model_len (not max_tokens) stops them.
    """
    shared = _tokens(rng, 512)
    prompts: list[list[int]] = []
    max_tokens: list[int] = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.2:
            prompts.append(_tokens(rng, rng.randint(8, 64)))
            max_tokens.append(rng.randint(1, 24))
        elif kind < 0.45:
            prompts.append(shared + _tokens(rng, rng.randint(1, 1200)))
            max_tokens.append(rng.randint(1, 24))
        elif kind < 0.5:
            prompts.append(_tokens(rng, rng.randint(2980, 3060)))
            max_tokens.append(rng.randint(40, 120))  # crosses max_model_len (3072)
        else:
            prompts.append(_tokens(rng, rng.randint(200, 2500)))
            max_tokens.append(rng.randint(1, 24))
    priorities = [rng.randint(0, 3) for _ in range(n)]
    return _requests(rng, prompts, max_tokens, priorities, per_step=0.35)


def _priority_requests(rng: random.Random, n: int) -> list[RequestSpec]:
    """Ten priority levels under memory pressure, urgent work arriving late.

    The first half is mostly low priority (large values), the second half is
    mostly urgent, so under the priority policy running low-priority requests
    are the preemption victims when the urgent ones grow.
    """
    shared = [_tokens(rng, 48), _tokens(rng, 96)]
    prompts = []
    priorities = []
    for i in range(n):
        if rng.random() < 0.25:
            prompts.append(rng.choice(shared) + _tokens(rng, rng.randint(1, 120)))
        else:
            prompts.append(_tokens(rng, rng.randint(16, 256)))
        late = i >= n // 2
        priorities.append(rng.randint(0, 4) if late else rng.randint(4, 9))
    max_tokens = [rng.randint(16, 200) for _ in range(n)]
    return _requests(rng, prompts, max_tokens, priorities, per_step=2.0)


def _edge_requests(rng: random.Random, n: int) -> list[RequestSpec]:
    """Tiny everything: 8-token blocks, a 32-token budget, max_model_len 96.

    One-token prompts (nothing can hit), prompts of exactly one or two blocks,
    duplicates, prompts near max_model_len and outputs that run into it, four
    sequences at most: the off-by-one corners of the token and block arithmetic.
    """
    shared = _tokens(rng, 16)
    prompts: list[list[int]] = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.1:
            prompts.append(_tokens(rng, 1))
        elif kind < 0.25 and prompts:
            prompts.append(list(rng.choice(prompts)))
        elif kind < 0.4:
            prompts.append(shared[: rng.choice((8, 16))])
        elif kind < 0.6:
            prompts.append(shared + _tokens(rng, rng.randint(1, 20)))
        elif kind < 0.7:
            prompts.append(_tokens(rng, rng.randint(80, 95)))
        else:
            prompts.append(_tokens(rng, rng.randint(2, 40)))
    max_tokens = [rng.choice((1, 2, rng.randint(3, 40), rng.randint(40, 90))) for _ in range(n)]
    priorities = [rng.randint(0, 2) for _ in range(n)]
    return _requests(rng, prompts, max_tokens, priorities, per_step=0.8)


def _reuse_requests(rng: random.Random, n: int) -> list[RequestSpec]:
    """Documents that come back after their blocks have left the GPU pool.

    36 documents of 100-400 tokens, eight of them hot; each request is a
    document plus a short question, and one in ten is a one-off. The GPU pool
    holds about three documents, so a returning document usually finds its
    blocks only in the tier: the case an offload tier exists for.
    """
    docs = [_tokens(rng, rng.randint(100, 400)) for _ in range(36)]
    prompts: list[list[int]] = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.5:
            doc = rng.choice(docs[:8])
        elif kind < 0.9:
            doc = rng.choice(docs)
        else:
            doc = _tokens(rng, rng.randint(50, 300))
        prompts.append(doc + _tokens(rng, rng.randint(1, 40)))
    max_tokens = [rng.randint(1, 32) for _ in range(n)]
    priorities = [rng.randint(0, 3) for _ in range(n)]
    return _requests(rng, prompts, max_tokens, priorities, per_step=1.0)


def _agentic_requests(rng: random.Random, n: int) -> list[RequestSpec]:
    """Agent jobs: each turn's prompt is the last turn's prompt, its output and a tool result.

    Jobs of 2-6 turns share one of three system prompts; turn ``k + 1`` arrives
    (open loop) 10-120 steps after turn ``k``, so a job's context comes back
    while other jobs fill the pool. Requests carry ``job_id``, ``turn``,
    ``last_turn`` and ``tool``: Continuum pins a job's KV between turns; vLLM's
    own policies ignore them.
    """
    systems = [_tokens(rng, n_) for n_ in (64, 96, 160)]
    tools = ("search", "shell", "edit")
    requests: list[RequestSpec] = []
    job = 0
    start = 0.0
    while len(requests) < n:
        turns = min(rng.randint(2, 6), n - len(requests))
        prompt = rng.choice(systems) + _tokens(rng, rng.randint(16, 120))
        at = start
        for turn in range(turns):
            max_tokens = rng.randint(4, 48)
            requests.append(
                {
                    "request_id": f"r{len(requests):04d}",
                    "prompt_token_ids": list(prompt),
                    "max_tokens": max_tokens,
                    "arrival_step": int(at),
                    "arrival_time": at + len(requests) * 1e-6,
                    "priority": 0,
                    "job_id": f"j{job:03d}",
                    "turn": turn,
                    "last_turn": turn == turns - 1,
                    "tool": rng.choice(tools),
                }
            )
            prompt += [SAMPLED_TOKEN_ID] * max_tokens + _tokens(rng, rng.randint(8, 80))
            at += rng.uniform(10, 120)
        job += 1
        start += rng.expovariate(1 / 6)
    requests.sort(key=lambda r: (r["arrival_step"], r["request_id"]))
    return requests


def _mooncake_requests(rng: random.Random, n: int) -> list[RequestSpec]:
    """The first ``n`` requests of the bundled Mooncake conversation trace, scaled down.

    Each of a request's ``hash_ids`` becomes one 16-token block whose tokens
    are a function of the id, so requests that share hash ids share blocks
    exactly as in the trace (at most 60 blocks a prompt); outputs are the
    trace's output lengths / 20, capped at 32 tokens. The trace's real reuse
    pattern then drives the GPU prefix cache and the tier.
    """
    prompts: list[list[int]] = []
    max_tokens: list[int] = []
    with gzip.open(MOONCAKE / "conversation.jsonl.gz", "rt", encoding="utf-8") as f:
        for line, _ in zip(f, range(n), strict=False):
            record = json.loads(line)
            prompt: list[int] = []
            for block_id in record["hash_ids"][:60]:
                prompt += [_VOCAB[0] + (block_id * 7919 + j * 104_729) % 49_990 for j in range(16)]
            prompts.append(prompt)
            max_tokens.append(max(1, min(32, record["output_length"] // 20)))
    if len(prompts) < n:
        raise ValueError(f"the Mooncake conversation trace has only {len(prompts)} requests")
    priorities = [rng.randint(0, 3) for _ in range(n)]
    return _requests(rng, prompts, max_tokens, priorities, per_step=0.8)


_Generator = Callable[[random.Random, int], list[RequestSpec]]

# name -> (request generator, config overrides, one-line description)
WORKLOADS: dict[str, tuple[_Generator, dict[str, Any], str]] = {
    "prefix": (
        _prefix_requests,
        dict(num_gpu_blocks=320, max_num_batched_tokens=1024, max_num_seqs=32, max_model_len=2048),
        "shared system prompts x suffixes, duplicates, block-multiple (all-hit) prompts",
    ),
    "prefix-nocache": (
        _prefix_requests,
        dict(
            num_gpu_blocks=320,
            max_num_batched_tokens=1024,
            max_num_seqs=32,
            max_model_len=2048,
            enable_prefix_caching=False,
        ),
        "the prefix workload with prefix caching off",
    ),
    "prefix-nochunk": (
        _prefix_requests,
        dict(
            num_gpu_blocks=320,
            max_num_batched_tokens=2048,
            max_num_seqs=32,
            max_model_len=2048,
            enable_chunked_prefill=False,
        ),
        "the prefix workload with chunked prefill off (the no-chunking admission rule)",
    ),
    "pressure": (
        _pressure_requests,
        dict(num_gpu_blocks=96, max_num_batched_tokens=256, max_num_seqs=24, max_model_len=1024),
        "95 usable blocks, long outputs: many recompute preemptions",
    ),
    "pressure-nocache": (
        _pressure_requests,
        dict(
            num_gpu_blocks=96,
            max_num_batched_tokens=256,
            max_num_seqs=24,
            max_model_len=1024,
            enable_prefix_caching=False,
        ),
        "the pressure workload with prefix caching off",
    ),
    "pressure-noreserve": (
        _pressure_requests,
        dict(
            num_gpu_blocks=96,
            max_num_batched_tokens=256,
            max_num_seqs=24,
            max_model_len=1024,
            reserve_full_sequence=False,
        ),
        "the pressure workload without the full-sequence admission check",
    ),
    "chunked": (
        _chunked_requests,
        dict(
            num_gpu_blocks=640,
            max_num_batched_tokens=192,
            max_num_seqs=16,
            max_model_len=3072,
            long_prefill_token_threshold=80,
        ),
        "prompts up to 3060 tokens, budget 192, long_prefill_token_threshold 80",
    ),
    "chunked-nocache": (
        _chunked_requests,
        dict(
            num_gpu_blocks=640,
            max_num_batched_tokens=192,
            max_num_seqs=16,
            max_model_len=3072,
            long_prefill_token_threshold=80,
            enable_prefix_caching=False,
        ),
        "the chunked workload with prefix caching off",
    ),
    "chunked-nochunk": (
        _chunked_requests,
        dict(
            num_gpu_blocks=640,
            max_num_batched_tokens=3072,
            max_num_seqs=16,
            max_model_len=3072,
            enable_chunked_prefill=False,
        ),
        "long prompts with chunked prefill off: admission stops at the first that won't fit",
    ),
    "edge": (
        _edge_requests,
        dict(
            block_size=8,
            num_gpu_blocks=24,
            max_num_batched_tokens=32,
            max_num_seqs=4,
            max_model_len=96,
            long_prefill_token_threshold=12,
        ),
        "8-token blocks, budget 32, max_model_len 96, 1-token prompts, outputs hitting the cap",
    ),
    "edge-nocache": (
        _edge_requests,
        dict(
            block_size=8,
            num_gpu_blocks=24,
            max_num_batched_tokens=32,
            max_num_seqs=4,
            max_model_len=96,
            long_prefill_token_threshold=12,
            enable_prefix_caching=False,
        ),
        "the edge workload with prefix caching off",
    ),
    "priorities": (
        _priority_requests,
        dict(num_gpu_blocks=128, max_num_batched_tokens=384, max_num_seqs=32, max_model_len=1024),
        "ten priority levels, urgent requests arriving late, 127 usable blocks",
    ),
    "agentic": (
        _agentic_requests,
        dict(num_gpu_blocks=200, max_num_batched_tokens=512, max_num_seqs=16, max_model_len=2048),
        "agent jobs of 2-6 turns whose prompts grow by output + tool result, 199 usable blocks",
    ),
    "priorities-nocache": (
        _priority_requests,
        dict(
            num_gpu_blocks=128,
            max_num_batched_tokens=384,
            max_num_seqs=32,
            max_model_len=1024,
            enable_prefix_caching=False,
        ),
        "the priorities workload with prefix caching off",
    ),
}


# name -> (request generator, config overrides, tier slots at block_size_factor 1,
# one-line description). Every one forces tier evictions at 240 requests.
TIER_WORKLOADS: dict[str, tuple[_Generator, dict[str, Any], int, str]] = {
    "tier-reuse": (
        _reuse_requests,
        dict(num_gpu_blocks=96, max_num_batched_tokens=512, max_num_seqs=16, max_model_len=1024),
        160,
        "documents returning after their blocks left a 95-block GPU pool",
    ),
    "tier-reuse-nocache": (
        _reuse_requests,
        dict(
            num_gpu_blocks=96,
            max_num_batched_tokens=512,
            max_num_seqs=16,
            max_model_len=1024,
            enable_prefix_caching=False,
        ),
        160,
        "the tier-reuse workload with the GPU prefix cache off (every hit from the tier)",
    ),
    "tier-pressure": (
        _pressure_requests,
        dict(num_gpu_blocks=96, max_num_batched_tokens=256, max_num_seqs=24, max_model_len=1024),
        128,
        "the pressure workload (many preemptions) with a tier",
    ),
    "tier-pressure-tight": (
        _pressure_requests,
        dict(num_gpu_blocks=56, max_num_batched_tokens=256, max_num_seqs=24, max_model_len=1024),
        96,
        "the pressure workload on a 55-block GPU pool: finished requests' stores still in "
        "flight while nothing runs and a landed load waits behind more urgent requests",
    ),
    "tier-prefix": (
        _prefix_requests,
        dict(num_gpu_blocks=160, max_num_batched_tokens=1024, max_num_seqs=32, max_model_len=2048),
        200,
        "the prefix workload on half its GPU pool, with a tier",
    ),
    "tier-mooncake": (
        _mooncake_requests,
        dict(num_gpu_blocks=200, max_num_batched_tokens=1024, max_num_seqs=16, max_model_len=2048),
        4000,
        "the Mooncake conversation trace's hash-id reuse, one 16-token block per id",
    ),
    "tier-chunked": (
        _chunked_requests,
        dict(
            num_gpu_blocks=640,
            max_num_batched_tokens=192,
            max_num_seqs=16,
            max_model_len=3072,
            long_prefill_token_threshold=80,
        ),
        400,
        "the chunked workload (long prompts, budget 192) with a tier",
    ),
}

TIER_EVICTIONS: tuple[str, ...] = ("lru", "arc")
TIER_FACTORS: tuple[int, ...] = (1, 2)
TIER_THRESHOLDS: tuple[int, ...] = (0, 2)
COMPLETION_RULES: dict[str, dict[str, Any]] = {
    "next-step": {"kind": "next-step"},
    "seeded": {"kind": "seeded", "max_delay": 3},
}
"""Transfer-completion rules: (a) land at the end of the next step; (b) seeded 0-3 steps."""


def generate_tier(
    name: str,
    policy: str,
    *,
    eviction: str,
    block_size_factor: int,
    store_threshold: int,
    rule: str,
    num_requests: int = DEFAULT_NUM_REQUESTS,
    seed: int = 0,
    bridge: bool = False,
) -> Workload:
    """Tier workload ``name`` with one tier variant; same requests for every variant.

    ``bridge`` runs vLLM's tier with kvframe's eviction plugin and reuse filter
    through the ``kvframe-vllm`` spec instead of vLLM's own policy (vLLM driver
    only; ``eviction`` is then any installed kvframe eviction config string).
    """
    try:
        gen, overrides, num_cpu_blocks, _ = TIER_WORKLOADS[name]
    except KeyError:
        known = ", ".join(TIER_WORKLOADS)
        raise ValueError(f"unknown tier workload {name!r}; known: {known}") from None
    if rule not in COMPLETION_RULES:
        raise ValueError(f"unknown completion rule {rule!r}; known: {', '.join(COMPLETION_RULES)}")
    base = name.removesuffix("-nocache")
    rng = random.Random(f"kvframe-differential:{base}:{num_requests}:{seed}")
    config = _config(policy, **overrides)
    config["tier"] = {
        # The same bytes at every factor: fewer, larger offloaded blocks.
        "num_cpu_blocks": num_cpu_blocks // block_size_factor,
        "eviction": eviction,
        "block_size_factor": block_size_factor,
        "store_threshold": store_threshold,
        "completion": {**COMPLETION_RULES[rule], "seed": seed},
        "bridge": bridge,
    }
    variant = f"{eviction}.f{block_size_factor}.t{store_threshold}.{rule}"
    if bridge:
        variant += ".bridge"
    workload = {
        "name": f"{name}.{variant}-{policy}",
        "config": config,
        "requests": gen(rng, num_requests),
    }
    validate(workload)
    return workload


def tier_workloads(
    names: Iterable[str] | None = None,
    policies: Iterable[str] = ("fcfs",),
    *,
    evictions: Iterable[str] = TIER_EVICTIONS,
    factors: Iterable[int] = TIER_FACTORS,
    thresholds: Iterable[int] = TIER_THRESHOLDS,
    rules: Iterable[str] = tuple(COMPLETION_RULES),
    num_requests: int = DEFAULT_NUM_REQUESTS,
    seed: int = 0,
) -> list[Workload]:
    """The tier matrix: workloads x policies x evictions x factors x thresholds x rules."""
    return [
        generate_tier(
            name,
            policy,
            eviction=eviction,
            block_size_factor=factor,
            store_threshold=threshold,
            rule=rule,
            num_requests=num_requests,
            seed=seed,
        )
        for name in (names if names is not None else TIER_WORKLOADS)
        for policy in policies
        for eviction in evictions
        for factor in factors
        for threshold in thresholds
        for rule in rules
    ]


def generate(
    name: str,
    policy: str,
    num_requests: int = DEFAULT_NUM_REQUESTS,
    seed: int = 0,
) -> Workload:
    """Build workload ``name`` for ``policy``; same requests for every policy."""
    try:
        gen, overrides, _ = WORKLOADS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}") from None
    # The base name (before any "-variant") seeds the stream, so a variant sees
    # exactly the requests of its base workload and only the config differs.
    base = name.split("-", 1)[0]
    rng = random.Random(f"kvframe-differential:{base}:{num_requests}:{seed}")
    config = _config(policy, **overrides)
    workload = {"name": f"{name}-{policy}", "config": config, "requests": gen(rng, num_requests)}
    validate(workload)
    return workload


def validate(workload: Workload) -> None:
    """Reject workloads that either scheduler would treat as an input error.

    A request that could never fit the pool on its own would make both
    schedulers preempt it forever, and vLLM's input processor rejects a prompt
    of max_model_len tokens or more before the scheduler sees it.
    """
    cfg = workload["config"]
    capacity = (cfg["num_gpu_blocks"] - 1) * cfg["block_size"]
    if cfg["max_num_batched_tokens"] < cfg["max_num_seqs"]:
        raise ValueError("max_num_batched_tokens must be >= max_num_seqs (vLLM rejects it)")
    if not cfg["enable_chunked_prefill"] and cfg["max_num_batched_tokens"] < cfg["max_model_len"]:
        raise ValueError("without chunked prefill, max_num_batched_tokens must be >= max_model_len")
    seen: set[str] = set()
    for req in workload["requests"]:
        rid = req["request_id"]
        if rid in seen:
            raise ValueError(f"duplicate request id {rid}")
        seen.add(rid)
        n_prompt = len(req["prompt_token_ids"])
        if not 0 < n_prompt < cfg["max_model_len"]:
            raise ValueError(f"{rid}: prompt of {n_prompt} tokens vs max_model_len")
        longest = min(n_prompt + req["max_tokens"], cfg["max_model_len"])
        if longest > capacity:
            raise ValueError(f"{rid}: {longest} tokens can never fit {capacity} token slots")
        if req["max_tokens"] < 1:
            raise ValueError(f"{rid}: max_tokens must be >= 1")
    times = [r["arrival_time"] for r in workload["requests"]]
    if len(set(times)) != len(times):
        raise ValueError("arrival times must be distinct (priority ties break on them)")


def all_workloads(
    names: Iterable[str] | None = None,
    policies: Iterable[str] = POLICIES,
    num_requests: int = DEFAULT_NUM_REQUESTS,
    seed: int = 0,
) -> list[Workload]:
    """Every requested workload under every requested policy, in a stable order."""
    return [
        generate(name, policy, num_requests, seed)
        for name in (names if names is not None else WORKLOADS)
        for policy in policies
    ]


def write_workload(workload: Workload, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(workload, separators=(",", ":")))
    return path


def load_workload(path: Path) -> Workload:
    workload: Workload = json.loads(Path(path).read_text())
    validate(workload)
    return workload


def main(argv: list[str] | None = None) -> int:
    """``python workloads.py OUT_DIR [NAME ...]``: write workload files for inspection."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("names", nargs="*", default=list(WORKLOADS))
    parser.add_argument("--num-requests", type=int, default=DEFAULT_NUM_REQUESTS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for wl in all_workloads(args.names, num_requests=args.num_requests, seed=args.seed):
        print(write_workload(wl, args.out_dir / f"{wl['name']}.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
