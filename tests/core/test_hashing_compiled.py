"""The compiled block hasher gives exactly the pure-Python hasher's hashes.

``kvframe/core/_hashing_compiled.pyx`` is optional (``setup.py build_ext``);
without it these tests skip and :mod:`kvframe.core.hashing` runs in Python.
Python is the reference: every compiled piece is compared with it (and the
hand-written BLAKE2b with ``hashlib``) on random inputs.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvframe.core import hashing
from kvframe.core.hashing import ChunkMemo, make_block_hasher, root_hash
from kvframe.domain.request import Request
from kvframe.domain.tokens import encode_tokens
from kvframe.workloads.spec import MooncakePrompt, PromptTokens

compiled = pytest.importorskip("kvframe.core._hashing_compiled")

TOKENS = st.lists(st.integers(0, 2**32 - 1), max_size=200)
PARENTS = st.integers(0, 2**128 - 1)  # a block hash: the 16-byte digest as an int


@settings(max_examples=300, deadline=None)
@given(message=st.binary(max_size=700))
def test_blake2b_matches_hashlib(message: bytes) -> None:
    # Lengths around 0, 128, 256, ... cross the block boundaries of the padding.
    assert compiled.blake2b16(message) == hashlib.blake2b(message, digest_size=16).digest()


@settings(max_examples=200, deadline=None)
@given(block_size=st.sampled_from([1, 2, 5, 16, 31, 32, 64]), parent=PARENTS, tokens=TOKENS)
def test_block_chain_matches_python(block_size: int, parent: int, tokens: list[int]) -> None:
    tokens = tokens[: len(tokens) // block_size * block_size]
    data = encode_tokens(tokens)
    expected: list[int] = []
    last = hashing._block_chain(block_size)(parent, data, expected.append)
    chain = compiled.BlockChain(block_size, hashing._COUNT.pack(block_size))
    into_list: list[int] = []
    assert chain(parent, data, into_list.append) == last
    called: list[int] = []
    assert chain(parent, data, lambda h: called.append(h)) == last  # any callable
    assert into_list == called == expected


@settings(max_examples=100, deadline=None)
@given(
    block_size=st.sampled_from([1, 4, 16]),
    chunk_blocks=st.integers(1, 4),
    capacity=st.sampled_from([1, 2, 5, 65_536]),
    turns=st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=6), min_size=1, max_size=6),
    parent=PARENTS,
)
def test_hash_chunks_matches_python(block_size, chunk_blocks, capacity, turns, parent) -> None:
    """Same hashes, same returned parent, same memo contents and hit counts."""
    chunk_tokens = block_size * chunk_blocks

    def chunk_bytes(chunk_id: int) -> bytes:
        return encode_tokens([chunk_id * 1000 + i for i in range(chunk_tokens)])

    py_memo, c_memo = ChunkMemo(capacity), ChunkMemo(capacity)
    py_chain = hashing._block_chain(block_size)
    c_chain = compiled.BlockChain(block_size, hashing._COUNT.pack(block_size))
    for ids in turns:
        chunks = ("ns", chunk_tokens, ids, chunk_bytes)
        expected: list[int] = []
        got: list[int] = []
        last = hashing._hash_chunks(py_memo, chunks, parent, py_chain, expected)
        assert compiled.hash_chunks(c_memo, chunks, parent, c_chain, got) == last
        assert got == expected
    assert (c_memo.hits, c_memo.misses) == (py_memo.hits, py_memo.misses)
    assert c_memo.current == py_memo.current and c_memo.previous == py_memo.previous


EXTRA_KEYS = st.one_of(
    st.none(),
    st.tuples(st.text(max_size=5)),
    st.tuples(st.integers(-(2**70), 2**70), st.booleans(), st.none()),
)


@settings(max_examples=80, deadline=None)
@given(
    block_size=st.sampled_from([1, 3, 16]),
    seed=st.integers(-3, 3),
    prompts=st.lists(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=80), max_size=4),
    outputs=st.lists(st.integers(0, 9), max_size=40),
    salt=st.one_of(st.none(), st.text(min_size=1, max_size=4)),
    keyed=st.booleans(),
    extra=EXTRA_KEYS,
)
def test_block_hasher_cores_agree_on_token_lists(
    block_size, seed, prompts, outputs, salt, keyed, extra
) -> None:
    """``make_block_hasher(core=...)``: list prompts, salts, custom extra keys, outputs."""

    def extra_keys(request: Request, start: int, end: int):
        return extra if (start // block_size) % 2 == 0 else None

    kwargs = {"seed": seed}
    if keyed:
        kwargs["extra_keys_fn"] = extra_keys
    hashers = {core: make_block_hasher(block_size, core=core, **kwargs) for core in CORES}
    for index, prompt in enumerate(prompts):
        requests = {
            core: Request(f"r{index}", list(prompt), 50, block_hasher=hasher, cache_salt=salt)
            for core, hasher in hashers.items()
        }
        for token in outputs:
            for request in requests.values():
                request.append_output_token_ids(token)
        py, c = requests["python"], requests["compiled"]
        assert c.block_hashes == py.block_hashes
        if py.block_hashes and not (keyed or salt):
            assert py.block_hashes[0] == hashing.hash_block_tokens(
                root_hash(seed), (prompt + outputs)[:block_size]
            )


CORES = ("python", "compiled")


@settings(max_examples=60, deadline=None)
@given(
    block_size=st.sampled_from([1, 4, 16]),
    chunk_tokens=st.sampled_from([16, 32, 48]),
    capacity=st.sampled_from([0, 1, 3, 65_536]),
    turns=st.lists(
        st.tuples(st.lists(st.integers(0, 5), min_size=1, max_size=6), st.integers(0, 40)),
        min_size=1,
        max_size=6,
    ),
)
def test_block_hasher_cores_agree_on_mooncake_prompts(
    block_size, chunk_tokens, capacity, turns
) -> None:
    """Lazy Mooncake prompts through the chunk memo (generations rotating), both cores."""
    hashers = {
        core: make_block_hasher(block_size, chunk_memo_capacity=capacity, core=core)
        for core in CORES
    }
    for index, (hash_ids, cut) in enumerate(turns):
        length = max(1, len(hash_ids) * chunk_tokens - cut)
        prompt = MooncakePrompt(tuple(hash_ids), length, chunk_tokens)
        hashes = {
            core: Request(f"t{index}", PromptTokens(prompt), 10, block_hasher=hasher).block_hashes
            for core, hasher in hashers.items()
        }
        assert hashes["compiled"] == hashes["python"]
    memos = {core: hasher.chunk_memos for core, hasher in hashers.items()}
    assert {k: (m.hits, m.misses) for k, m in memos["compiled"].items()} == {
        k: (m.hits, m.misses) for k, m in memos["python"].items()
    }


def test_core_setting_reports_and_validates() -> None:
    assert make_block_hasher(16, core="python").core == "python"
    assert make_block_hasher(16, core="compiled").core == "compiled"
    assert make_block_hasher(16).core == "compiled"  # auto: built, so compiled
    with pytest.raises(ValueError, match="core must be one of"):
        make_block_hasher(16, core="rust")
