"""``allocate_slots``' one-token short path decides and changes exactly what the general path does.

Two managers receive the same random sequence of admissions, prefill chunks,
decode steps and frees, on twin requests; one takes the short path
(``one_token_path``, the default), the other is forced through the general
path. After every operation both must agree on the result, every block table,
the cached counts, the decode limits, the free queue's order, the hash index
and the KV events.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kvframe.core.block_pool import KVCacheBlock
from kvframe.core.hashing import make_block_hasher
from kvframe.core.kv_cache_manager import KVCacheManager
from kvframe.domain.request import Request

# Three documents; prompts are prefixes of them, so prefixes are shared and hit.
DOCUMENTS = [[d * 1000 + i for i in range(64)] for d in range(3)]

operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("admit"),
            st.integers(0, 2),  # document
            st.integers(1, 40),  # prompt length
            st.integers(1, 12),  # first chunk
        ),
        st.tuples(st.just("step"), st.integers(0, 7), st.integers(1, 3)),  # request, tokens
        st.tuples(st.just("decode"), st.integers(0, 7), st.integers(0, 7)),  # request, token
        st.tuples(st.just("free"), st.integers(0, 7)),
    ),
    max_size=80,
)


def _ids(blocks: list[KVCacheBlock] | None) -> list[int] | None:
    return None if blocks is None else [b.block_id for b in blocks]


def _state(m: KVCacheManager) -> dict[str, Any]:
    pool = m.block_pool
    index = pool.cached_block_hash_to_block
    return {
        "tables": {rid: _ids(blocks) for rid, blocks in m.req_to_blocks.items()},
        "num_cached_block": dict(m.num_cached_block),
        "decode_limits": dict(m.decode_limits),
        "free_queue": _ids(pool.free_block_queue.get_all_free_blocks()),
        "index": {h: _ids(index.get_all_blocks(h)) for h in index.hashes()},
        "block_hashes": [b.block_hash for b in pool.blocks],
        "ref_cnts": [b.ref_cnt for b in pool.blocks],
        "num_cached_blocks": pool.num_cached_blocks,
        "events": m.take_events(),
    }


class _Twin:
    """One manager and its requests."""

    def __init__(self, short_path: bool, **config: Any) -> None:
        self.m = KVCacheManager(**config)
        self.max_model_len = config["max_model_len"]
        self.m.one_token_path = short_path
        self.hasher = make_block_hasher(config["block_size"])
        self.running: dict[int, Request] = {}
        self.count = 0

    def apply(self, op: tuple[Any, ...], lookahead: int) -> object:
        kind = op[0]
        m = self.m
        if kind == "admit":
            _, doc, length, chunk = op
            # Prompts shorter than max_model_len, as a front end enforces.
            prompt = DOCUMENTS[doc][: min(length, self.max_model_len - 1)]
            request = Request(f"r{self.count}", prompt, 100, block_hasher=self.hasher)
            self.count += 1
            hits, num_hit = m.get_computed_blocks(request)
            num_new = min(chunk, request.num_tokens - num_hit)
            new = m.allocate_slots(request, num_new, num_hit, hits)
            if new is not None:
                request.num_computed_tokens = num_hit + num_new
                self.running[len(self.running)] = request
            return _ids(new)
        if not self.running:
            return "idle"
        request = list(self.running.values())[op[1] % len(self.running)]
        if kind == "free":
            m.free(request)
            self.running = dict(enumerate(r for r in self.running.values() if r is not request))
            return "freed"
        if request.num_tokens >= self.max_model_len:
            return "capped"  # the scheduler finishes such a request
        if kind == "step":  # a prefill chunk, or one more decode token
            left = request.num_tokens - request.num_computed_tokens
            num_new = min(op[2], left) if left > 0 else 1
        else:
            num_new = 1
        new = m.allocate_slots(request, num_new, num_lookahead_tokens=lookahead)
        if new is not None:
            request.num_computed_tokens += num_new
            if request.num_computed_tokens >= request.num_tokens:
                request.append_output_token_ids(op[2] if kind == "decode" else 5)
        return _ids(new)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    ops=operations,
    block_size=st.sampled_from([1, 2, 4]),
    num_gpu_blocks=st.integers(4, 40),
    max_model_len=st.integers(6, 40),
    lookahead=st.sampled_from([0, 0, 1, 3]),
    enable_caching=st.booleans(),
    enable_kv_cache_events=st.booleans(),
)
def test_one_token_path_matches_general_path(
    ops: list[tuple[Any, ...]],
    block_size: int,
    num_gpu_blocks: int,
    max_model_len: int,
    lookahead: int,
    enable_caching: bool,
    enable_kv_cache_events: bool,
) -> None:
    config = {
        "num_gpu_blocks": num_gpu_blocks,
        "block_size": block_size,
        "max_model_len": max_model_len,
        "enable_caching": enable_caching,
        "enable_kv_cache_events": enable_kv_cache_events,
        "decode_lookahead": lookahead,
    }
    short, general = _Twin(True, **config), _Twin(False, **config)
    for op in ops:
        assert short.apply(op, lookahead) == general.apply(op, lookahead), op
        assert _state(short.m) == _state(general.m), op
