"""Lazy prompts (PromptTokens / TokenView) decide exactly like materialised token lists.

The engine hands requests a PromptTokens over the workload's recipe instead of
a list of ints (issue 11: memory per waiting request). These tests run the
same workloads both ways and compare every summary counter and per-request
record, and check the lazy sequences against the lists they stand for.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvframe.engine.step as step_module
from kvframe.core.hashing import ChunkMemo, make_block_hasher
from kvframe.domain.request import Request
from kvframe.domain.tokens import encode_tokens as token_bytes
from kvframe.engine import Engine, EngineConfig
from kvframe.workloads import load_workload
from kvframe.workloads.spec import MooncakePrompt, PromptTokens, SyntheticPrompt, TokenPrompt

HEAD = Path(__file__).resolve().parents[1] / "core" / "data" / "mooncake_conversation_head300.jsonl"


def _run(monkeypatch: pytest.MonkeyPatch, eager: bool, limit: int, **config) -> tuple:
    if eager:
        monkeypatch.setattr(step_module, "PromptTokens", lambda prompt: prompt.token_ids())
    else:
        monkeypatch.undo()
    engine = Engine.from_config(EngineConfig(num_gpu_blocks=3000, **config))
    result = engine.run(load_workload(HEAD, limit=limit))
    counters = {k: v for k, v in result.counters.items() if "wall" not in k}
    return counters, result.summary


@pytest.mark.parametrize("offload", [None, "cpu:capacity=256MiB"])
def test_lazy_and_materialised_prompts_decide_the_same(monkeypatch, offload) -> None:
    eager, _ = _run(monkeypatch, True, 60, offload=offload)
    lazy, _ = _run(monkeypatch, False, 60, offload=offload)
    assert eager["num_steps"] > 0 and eager["prefix_cache_hits"] > 0
    assert lazy == eager


@settings(max_examples=60, deadline=None)
@given(
    block_tokens=st.sampled_from([1, 3, 16, 512]),
    hash_ids=st.lists(st.integers(0, 4000), min_size=1, max_size=12),
    data=st.data(),
)
def test_mooncake_token_bytes_match_the_expanded_tokens(block_tokens, hash_ids, data) -> None:
    length = data.draw(st.integers(1, len(hash_ids) * block_tokens))
    prompt = MooncakePrompt(tuple(hash_ids), length, block_tokens)
    tokens = prompt.token_ids()
    start = data.draw(st.integers(0, length))
    end = data.draw(st.integers(start, length + 2))
    lazy = PromptTokens(prompt)
    assert prompt.token_bytes(start, end) == token_bytes(tokens[start:end])
    assert lazy.token_bytes(start, end) == token_bytes(tokens[start:end])
    assert lazy[start:end] == tokens[start:end]
    assert lazy == tokens and list(lazy) == tokens and len(lazy) == length
    if start < length:
        assert lazy[start] == tokens[start] and lazy[-1] == tokens[-1]


@pytest.mark.parametrize(
    "prompt",
    [
        MooncakePrompt((7, 3, 7, 9), 1900),
        SyntheticPrompt(700, shared_prefix_id="p", shared_prefix_length=300, key="k"),
        TokenPrompt.of(list(range(5, 405))),
    ],
    ids=["mooncake", "synthetic", "tokens"],
)
def test_a_lazy_request_hashes_and_reads_like_a_list_request(prompt) -> None:
    hasher = make_block_hasher(16)
    lazy = Request("a", PromptTokens(prompt), 50, block_hasher=hasher)
    plain = Request("b", prompt.token_ids(), 50, block_hasher=hasher)
    assert lazy.block_hashes == plain.block_hashes and lazy.block_hashes
    for token in range(40):  # crosses block boundaries in the outputs
        lazy.append_output_token_ids(token)
        plain.append_output_token_ids([token])
        assert lazy.block_hashes == plain.block_hashes
    assert lazy.all_token_ids == plain.all_token_ids
    assert (
        lazy.all_token_ids[len(prompt) - 3 : len(prompt) + 3]
        == plain.all_token_ids[len(prompt) - 3 : len(prompt) + 3]
    )
    assert list(lazy.all_token_ids) == plain.all_token_ids
    assert lazy.num_tokens == plain.num_tokens == len(prompt) + 40
    assert lazy.prompt_token_ids == plain.prompt_token_ids


@settings(max_examples=80, deadline=None)
@given(
    block_size=st.sampled_from([1, 4, 16, 48]),
    chunk_tokens=st.sampled_from([16, 32]),
    capacity=st.sampled_from([1, 2, 5, 65_536]),
    turns=st.lists(
        st.tuples(st.lists(st.integers(0, 5), min_size=1, max_size=6), st.integers(0, 40)),
        min_size=1,
        max_size=8,
    ),
    data=st.data(),
)
def test_chunk_memo_gives_the_hashes_the_chain_computes(
    block_size, chunk_tokens, capacity, turns, data
) -> None:
    """Hashes through the chunk memo equal a plain hasher's over materialised ids.

    Prompts draw their chunk ids from a tiny alphabet (so chunks repeat, after
    the same parent and after others), lengths cut chunks short, outputs are
    appended, and capacities of 1-5 chunks rotate the memo's generations.
    """
    memo_hasher = make_block_hasher(block_size, chunk_memo_capacity=capacity)
    plain_hasher = make_block_hasher(block_size, chunk_memo_capacity=0)
    for index, (hash_ids, cut) in enumerate(turns):
        length = max(1, len(hash_ids) * chunk_tokens - cut)
        prompt = MooncakePrompt(tuple(hash_ids), length, chunk_tokens)
        lazy = Request(f"lazy{index}", PromptTokens(prompt), 50, block_hasher=memo_hasher)
        plain = Request(f"plain{index}", prompt.token_ids(), 50, block_hasher=plain_hasher)
        outputs = data.draw(st.lists(st.integers(0, 9), max_size=3 * block_size))
        for token in outputs:
            lazy.append_output_token_ids(token)
            plain.append_output_token_ids(token)
        assert lazy.block_hashes == plain.block_hashes


def test_chunk_memo_hits_repeated_turns_and_stays_bounded() -> None:
    """A conversation's second turn re-uses its first turn's chunk hashes."""
    memo = ChunkMemo(capacity=3)
    hasher = make_block_hasher(16)
    first = MooncakePrompt((1, 2, 3), 3 * 512)
    second = MooncakePrompt((1, 2, 3, 4), 4 * 512 - 100)
    plain = make_block_hasher(16, chunk_memo_capacity=0)
    for name, prompt in (("t1", first), ("t2", second)):
        lazy = Request(name, PromptTokens(prompt), 10, block_hasher=hasher)
        assert (
            lazy.block_hashes
            == Request(name, prompt.token_ids(), 10, block_hasher=plain).block_hashes
        )
    (memo_of_trace,) = hasher.chunk_memos.values()
    # t2 re-uses t1's three chunks; its cut fourth chunk is hashed without the memo.
    assert (memo_of_trace.hits, memo_of_trace.misses) == (3, 3)
    # The memo object itself: generations rotate at capacity, hits move forward.
    parent = 2**127 + 5  # block hashes are ints below 2**128
    for chunk_id in range(7):
        memo.put(parent, chunk_id, [chunk_id << 120] * 2)
    assert len(memo.current) + len(memo.previous) <= 2 * memo.capacity
    assert memo.get(parent, 0) is None  # rotated out
    assert memo.get(parent, 6) == (6 << 120,) * 2
    assert (memo.hits, memo.misses) == (1, 1)
    with pytest.raises(ValueError, match="chunk_memo_capacity"):
        make_block_hasher(16, chunk_memo_capacity=-1)
