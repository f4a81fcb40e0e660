"""Chained block hashing: determinism, chaining, extra keys, incremental hashing."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys

import pytest

from kvframe.core.hashing import (
    DIGEST_SIZE,
    block_hash_with_group_id,
    encode_extra_keys,
    group_id_of,
    hash_block_tokens,
    make_block_hasher,
    plain_block_hash,
    root_hash,
)
from kvframe.domain.request import Request
from kvframe.domain.tokens import block_hash_hex


def reference_hashes(tokens: list[int], block_size: int, seed: int = 0, salt: str | None = None):
    """Block-by-block hashes through the public one-block function."""
    parent = root_hash(seed)
    out = []
    for i in range(len(tokens) // block_size):
        extra = (salt,) if (i == 0 and salt) else None
        parent = hash_block_tokens(parent, tokens[i * block_size : (i + 1) * block_size], extra)
        out.append(parent)
    return out


def test_hash_is_the_16_byte_digest_as_an_int_and_deterministic() -> None:
    h = hash_block_tokens(None, [1, 2, 3])
    assert type(h) is int and 0 <= h < 2 ** (8 * DIGEST_SIZE)
    # Exactly the BLAKE2b-128 digest of the documented message, read little-endian.
    message = root_hash(0).to_bytes(16, "big") + struct.pack("<4I", 3, 1, 2, 3)
    assert h == int.from_bytes(hashlib.blake2b(message, digest_size=16).digest(), "big")
    assert h == hash_block_tokens(None, [1, 2, 3])
    assert h == hash_block_tokens(root_hash(0), (1, 2, 3))


def test_hash_is_stable_across_processes() -> None:
    code = (
        "from kvframe.core.hashing import hash_block_tokens, root_hash;"
        "print(hash_block_tokens(root_hash(7), [5, 6, 7, 8], ('salt', 3)))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert outputs == {str(hash_block_tokens(root_hash(7), [5, 6, 7, 8], ("salt", 3)))}


def test_hash_text_is_the_digest_hex_as_when_hashes_were_bytes() -> None:
    h = hash_block_tokens(None, [9, 8, 7])
    assert block_hash_hex(h) == h.to_bytes(16, "big").hex()
    assert block_hash_hex(0) == "00" * 16 and int(block_hash_hex(h), 16) == h
    assert block_hash_hex(b"\x01\xff") == "01ff"  # vLLM's own hashes (the bridge)


def test_group_keys_are_identity_for_group_0_and_disjoint_per_group() -> None:
    hashes = [hash_block_tokens(None, [i]) for i in range(50)] + [0, 2**128 - 1]
    keys = {(h, g): block_hash_with_group_id(h, g) for h in hashes for g in range(4)}
    assert all(keys[h, 0] is h for h in hashes)  # a one-group run pays nothing
    assert len(set(keys.values())) == len(keys)  # one key per (content, group)
    assert block_hash_with_group_id(b"ab", 2) == b"ab\x00\x00\x00\x02"  # vLLM's own form
    for key, (h, g) in ((keys[h, g], (h, g)) for h, g in keys):  # the exact inverses
        assert (plain_block_hash(key), group_id_of(key)) == (h, g)
    with pytest.raises(ValueError, match="group_id must be >= 0"):
        block_hash_with_group_id(hashes[0], -1)


def test_parent_tokens_and_extra_keys_all_matter() -> None:
    base = hash_block_tokens(None, [1, 2, 3, 4])
    assert hash_block_tokens(base, [1, 2, 3, 4]) != base
    assert hash_block_tokens(None, [1, 2, 3, 5]) != base
    assert hash_block_tokens(None, [1, 2, 3, 4], ("s",)) != base
    assert hash_block_tokens(None, [1, 2, 3, 4], ()) == base  # empty extras == None
    assert hash_block_tokens(None, [4, 3, 2, 1]) != base


def test_token_count_is_part_of_the_message() -> None:
    # [0] vs [] + extra keys that could otherwise serialise to the same bytes.
    assert hash_block_tokens(None, [0, 0]) != hash_block_tokens(None, [0])
    assert hash_block_tokens(None, [1], ("a",)) != hash_block_tokens(None, [1, 0], ("a",))


def test_root_depends_on_seed() -> None:
    assert root_hash(0) != root_hash(1)
    assert root_hash(-1) != root_hash(1)
    assert hash_block_tokens(root_hash(1), [1]) != hash_block_tokens(root_hash(2), [1])


def test_extra_key_encoding_is_unambiguous() -> None:
    encodings = [
        encode_extra_keys(keys)
        for keys in [
            ("ab",),
            ("a", "b"),
            (b"ab",),
            (1,),
            (True,),
            (1.0,),
            (None,),
            (("a",), "b"),
            ("a", ("b",)),
            (-1,),
            (255,),
            (256,),
        ]
    ]
    assert len(set(encodings)) == len(encodings)


def test_unsupported_extra_key_type_raises() -> None:
    with pytest.raises(TypeError):
        encode_extra_keys((object(),))


def test_token_ids_out_of_uint32_range_raise() -> None:
    with pytest.raises(OverflowError):
        hash_block_tokens(None, [-1])
    with pytest.raises(OverflowError):
        hash_block_tokens(None, [2**32])
    hash_block_tokens(None, [2**32 - 1])


def test_hasher_matches_block_by_block_reference() -> None:
    tokens = list(range(100, 170))
    hasher = make_block_hasher(16, seed=3)
    request = Request("r", tokens, 10, block_hasher=hasher)
    assert request.block_hashes == reference_hashes(tokens, 16, seed=3)
    assert len(request.block_hashes) == 70 // 16


def test_only_full_blocks_are_hashed() -> None:
    hasher = make_block_hasher(4)
    assert Request("r", [1, 2, 3], 1, block_hasher=hasher).block_hashes == []
    assert len(Request("r", [1, 2, 3, 4], 1, block_hasher=hasher).block_hashes) == 1
    assert Request("r", [], 1, block_hasher=hasher).block_hashes == []


def test_incremental_hashing_equals_hashing_all_at_once() -> None:
    hasher = make_block_hasher(4)
    request = Request("r", [1, 2, 3, 4, 5, 6], 20, block_hasher=hasher)
    assert len(request.block_hashes) == 1
    request.append_output_token_ids(7)
    assert len(request.block_hashes) == 1
    request.append_output_token_ids(8)  # completes block 1
    assert len(request.block_hashes) == 2
    request.append_output_token_ids([9, 10, 11, 12, 13, 14, 15])
    assert len(request.block_hashes) == 3
    assert request.block_hashes == reference_hashes(list(range(1, 16)), 4)
    full = Request("s", list(range(1, 16)), 1, block_hasher=hasher)
    assert full.block_hashes == request.block_hashes


def test_hasher_returns_only_new_hashes() -> None:
    hasher = make_block_hasher(2)
    request = Request("r", [1, 2, 3, 4], 5, block_hasher=hasher)
    assert hasher(request) == []  # nothing new since construction
    request.all_token_ids.extend([5, 6])  # bypass the request to call the hasher directly
    assert hasher(request) == reference_hashes([1, 2, 3, 4, 5, 6], 2)[2:]


def test_equal_prefixes_share_hashes_then_diverge() -> None:
    hasher = make_block_hasher(4)
    a = Request("a", [1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9], 1, block_hasher=hasher)
    b = Request("b", [1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0], 1, block_hasher=hasher)
    assert a.block_hashes[:2] == b.block_hashes[:2]
    assert a.block_hashes[2] != b.block_hashes[2]
    # Chaining: an equal block after a different prefix hashes differently.
    c = Request("c", [0, 0, 0, 0, 5, 6, 7, 8], 1, block_hasher=hasher)
    assert c.block_hashes[1] != a.block_hashes[1]


def test_cache_salt_applies_to_first_block_and_propagates() -> None:
    hasher = make_block_hasher(4)
    tokens = list(range(12))
    plain = Request("p", tokens, 1, block_hasher=hasher)
    salted = Request("s", tokens, 1, cache_salt="tenant-a", block_hasher=hasher)
    other = Request("o", tokens, 1, cache_salt="tenant-b", block_hasher=hasher)
    assert all(x != y for x, y in zip(plain.block_hashes, salted.block_hashes, strict=True))
    assert all(x != y for x, y in zip(other.block_hashes, salted.block_hashes, strict=True))
    assert salted.block_hashes == reference_hashes(tokens, 4, salt="tenant-a")
    # Appending to a salted request continues the chain without re-salting.
    salted.append_output_token_ids([12, 13, 14, 15])
    assert salted.block_hashes == reference_hashes(list(range(16)), 4, salt="tenant-a")


def test_custom_extra_keys_function() -> None:
    def adapter_keys(request: Request, start: int, end: int):
        return ("adapter-x", start)

    hasher = make_block_hasher(4, extra_keys_fn=adapter_keys)
    request = Request("r", list(range(8)), 1, block_hasher=hasher)
    expected_0 = hash_block_tokens(root_hash(0), [0, 1, 2, 3], ("adapter-x", 0))
    expected_1 = hash_block_tokens(expected_0, [4, 5, 6, 7], ("adapter-x", 4))
    assert request.block_hashes == [expected_0, expected_1]
    no_extras = make_block_hasher(4, extra_keys_fn=None)
    salted = Request("s", list(range(8)), 1, cache_salt="x", block_hasher=no_extras)
    assert salted.block_hashes == reference_hashes(list(range(8)), 4)


def test_invalid_block_size() -> None:
    with pytest.raises(ValueError):
        make_block_hasher(0)


def test_block_hasher_falls_back_to_python_without_the_compiled_core(monkeypatch) -> None:
    """No compiled module (a machine without a compiler): auto is Python, compiled an error."""
    from kvframe.core import hashing

    monkeypatch.setattr(hashing, "_compiled", None)
    assert not hashing.compiled_hashing_available()
    assert hashing.make_block_hasher(16).core == "python"
    assert hashing.make_block_hasher(16, core="python").core == "python"
    with pytest.raises(ValueError, match="not built"):
        hashing.make_block_hasher(16, core="compiled")
