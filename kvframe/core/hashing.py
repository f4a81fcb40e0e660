"""Chained block hashes for prefix caching.

The hash of block ``i`` of a token sequence covers block ``i``'s tokens *and* the
hash of block ``i - 1``, so equal hashes mean equal prefixes, not just equal
blocks: a prefix-cache lookup can stop at the first miss. The first block's
parent is a *root* hash derived from a seed, so two deployments that must not
share cache entries can use different seeds.

Encoding. The hashed message of one block is::

    parent (its 16 digest bytes) | token count (uint32 LE) | tokens (uint32 LE each) | extra keys

The count makes the token section self-delimiting, and every extra key is
written with a type tag and a length (see :func:`encode_extra_keys`), so two
different ``(parent, tokens, extra_keys)`` triples never produce the same
message. No ``hash()`` (salted per process) and no pickle (version dependent)
are involved, so hashes are identical across processes, runs and Python
versions. Token ids must lie in ``[0, 2**32)`` (every real vocabulary does);
anything else raises ``OverflowError`` rather than hashing ambiguously.

Hash function: BLAKE2b with a 16-byte digest (``hashlib.blake2b``,
``digest_size=16``), and a block hash is that digest read as an unsigned
big-endian integer (:data:`~kvframe.domain.tokens.BlockHash` is ``int``, in
``[0, 2**128)``; ``f"{h:032x}"`` is the digest's hex): a table keyed by it is
a table of small ints, not of bytes objects, and the compiled core can hold it
as two machine words. The integer is
the digest, bit for bit, so equality is exactly as safe as with the bytes it
replaces. Collision bound (birthday): among ``n`` distinct blocks the
probability that any two share a hash is at most ``n**2 / 2**129`` -- below
2**-49 for 2**40 blocks, below 2**-81 for the ~2**24 blocks of a whole Mooncake
trace replay. (A 64-bit digest would give only ``n**2 / 2**65``, about 2**-17
for 2**24 blocks, so 128 bits it stays.) BLAKE2b is the fastest
collision-resistant function in the standard library here.
:func:`~kvframe.domain.tokens.block_hash_hex` writes a hash as the hex of its
16 digest bytes (what traces and KV-event logs carry, unchanged from when
hashes were ``bytes``). Measured on the development machine
(Python 3.11.7, 2 shared cores; best of 40 interleaved rounds), hashing a
32,768-token prompt in 16-token blocks -- 2,048 chained hashes, the prompt's
token encoding done once::

    variant                                  ms/prompt  us/block  relative
    blake2b, 16-byte digest (chosen)              1.52      0.74      1.00
    blake2b, 32-byte digest                       1.56      0.76      1.02
    blake2s, 16-byte digest                       1.75      0.86      1.15
    sha256                                        1.96      0.96      1.29
    sha1 (not collision resistant)                1.90      0.93      1.25
    md5 (not collision resistant)                 2.00      0.97      1.31
    hmac-sha256 keyed by the parent               9.85      4.81      6.48
    sha256 over pickle (vLLM's default)           2.98      1.46      1.96
    the loop without any hashing                  0.82      0.40      0.54
    builtin hash(tuple) (salted per process)      0.65      0.32      0.42

A 16-byte digest also keeps the hash-index keys small (a 128-bit int is 44 bytes).
About half of the per-block cost is the Python loop itself, so a faster digest
would buy little. ``benchmarks/core_ops.py`` re-measures the chosen path.

Compiled core. The block chain and the chunk-memo loop have an optional
Cython version, :mod:`kvframe.core._hashing_compiled` (built by ``setup.py``
when Cython and a C compiler are present): the same messages through a
BLAKE2b written in C, one C loop per run of blocks, each hash made an int in
C. This module stays the reference and the fallback; ``make_block_hasher(core=...)`` picks one
(``"auto"``: compiled when built) and the hasher's ``core`` attribute says
which it got. Results are identical (``tests/core/test_hashing_compiled.py``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable, Sequence
from hashlib import blake2b
from typing import TYPE_CHECKING, Any, Protocol

from kvframe.core.build_digest import stale_build
from kvframe.domain.tokens import encode_tokens

try:  # the optional compiled core; pure Python below is the reference
    from kvframe.core import _hashing_compiled as _compiled
except ImportError:  # not built (no compiler or no Cython): Python only
    _compiled = None
if _compiled is not None and stale_build("_hashing_compiled") is not None:
    _compiled = None  # built from an older source: it could hash differently

if TYPE_CHECKING:
    from kvframe.domain.request import Request
    from kvframe.domain.tokens import BlockHash, ChunkIds

__all__ = [
    "CORES",
    "DIGEST_SIZE",
    "BlockHasher",
    "ChunkMemo",
    "ExtraKeysFn",
    "block_hash_with_group_id",
    "cache_salt_extra_keys",
    "compiled_hashing_available",
    "encode_extra_keys",
    "group_id_of",
    "hash_block_tokens",
    "make_block_hasher",
    "plain_block_hash",
    "root_hash",
]

DIGEST_SIZE = 16
"""Bytes in a block hash."""

CORES = ("auto", "python", "compiled")
"""``make_block_hasher(core=...)`` values: ``auto`` is compiled when built, else Python."""

ExtraKeysFn = Callable[["Request", int, int], "tuple[Any, ...] | None"]
"""``f(request, start_token, end_token)`` -> extra keys of that block, or ``None``."""


class BlockHasher(Protocol):
    """What :func:`make_block_hasher` returns: the hash function and what it tells about itself."""

    block_size: int
    """Read by :class:`~kvframe.domain.request.Request`: a token that fills no block needs
    no call."""
    core: str
    """``python`` or ``compiled``: the core it runs on (a run's summary names it)."""

    def __call__(self, request: Request) -> list[BlockHash]: ...


_COUNT = struct.Struct("<I")

def root_hash(seed: int = 0) -> BlockHash:
    """The parent hash of every sequence's first block, for a given seed."""
    message = b"kvframe/root/v1" + seed.to_bytes(16, "little", signed=True)
    return _from_digest(blake2b(message, digest_size=DIGEST_SIZE).digest())


_from_digest = int.from_bytes
"""``_from_digest(digest)``: a 16-byte digest as the block hash (big-endian, the default)."""


def _hash_bytes(block_hash: BlockHash) -> bytes:
    """The 16 digest bytes of ``block_hash``: how a parent enters its child's message."""
    return block_hash.to_bytes(DIGEST_SIZE)


_DEFAULT_ROOT = root_hash(0)

GROUP_ID_SHIFT = 8 * DIGEST_SIZE
"""Bits of a block hash: a group id ``g >= 1`` is added above them (see
:func:`block_hash_with_group_id`)."""

_GROUP_ID_BYTES = 4
_HASH_MASK = (1 << GROUP_ID_SHIFT) - 1


def block_hash_with_group_id(block_hash: BlockHash, group_id: int) -> BlockHash:
    """The prefix-cache key of a block of KV-cache group ``group_id`` (vLLM's
    ``make_block_hash_with_group_id``): one key per (content, group).

    Why a key per group: with several groups (a hybrid model) the same tokens
    have one block in each group, and a lookup asks whether *that group's*
    block is cached. Build the key only here (and read it back only with
    :func:`plain_block_hash` / :func:`group_id_of`), so the hash representation
    is decided in one place.

    kvframe's hashes are ints below ``2**128``: the key is ``block_hash + g *
    2**128``, so group 0 keys by the hash itself (a one-group run pays nothing)
    and the groups' key ranges are disjoint (exact, no new collision). A
    ``bytes`` hash (vLLM's own, where the bridge carries them) gets the group id
    appended as 4 big-endian bytes, as vLLM does.

    :raises ValueError: for a negative ``group_id``.
    """
    if group_id < 0:
        raise ValueError(f"block_hash_with_group_id: group_id must be >= 0, got {group_id}")
    if block_hash.__class__ is int:
        return block_hash + (group_id << GROUP_ID_SHIFT) if group_id else block_hash
    return bytes(block_hash) + group_id.to_bytes(_GROUP_ID_BYTES, "big")  # type: ignore[return-value]


def plain_block_hash(key: BlockHash) -> BlockHash:
    """The block hash inside a :func:`block_hash_with_group_id` key (what KV events carry)."""
    if key.__class__ is int:
        return key & _HASH_MASK
    return key[:-_GROUP_ID_BYTES]  # type: ignore[index, no-any-return]


def group_id_of(key: BlockHash) -> int:
    """The group id inside a :func:`block_hash_with_group_id` key."""
    if key.__class__ is int:
        return key >> GROUP_ID_SHIFT
    return int.from_bytes(key[-_GROUP_ID_BYTES:], "big")  # type: ignore[index]


# ------------------------------------------------------------------ extra keys


def _encode_key(key: Any, out: list[bytes]) -> None:
    # One tag byte per type, then a length where the value is variable-sized.
    if isinstance(key, str):
        data = key.encode("utf-8")
        out.append(b"s" + _COUNT.pack(len(data)) + data)
    elif isinstance(key, bytes | bytearray | memoryview):
        data = bytes(key)
        out.append(b"b" + _COUNT.pack(len(data)) + data)
    elif isinstance(key, bool):  # before int: bool is an int subclass
        out.append(b"T" if key else b"F")
    elif isinstance(key, int):
        length = (key.bit_length() + 8) // 8  # room for the sign bit
        out.append(b"i" + _COUNT.pack(length) + key.to_bytes(length, "little", signed=True))
    elif isinstance(key, float):
        out.append(b"f" + struct.pack("<d", key))
    elif key is None:
        out.append(b"n")
    elif isinstance(key, tuple | list):
        out.append(b"t" + _COUNT.pack(len(key)))
        for item in key:
            _encode_key(item, out)
    else:
        raise TypeError(f"cannot hash extra key of type {type(key).__name__}: {key!r}")


def encode_extra_keys(extra_keys: tuple[Any, ...]) -> bytes:
    """Serialise extra keys unambiguously.

    Supported key types: ``str``, ``bytes``, ``int``, ``bool``, ``float``,
    ``None`` and tuples/lists of those (nested). Each key carries a type tag
    and, where needed, a length, so concatenations cannot collide.
    """
    out: list[bytes] = [_COUNT.pack(len(extra_keys))]
    for key in extra_keys:
        _encode_key(key, out)
    return b"".join(out)


def cache_salt_extra_keys(request: Request, start: int, end: int) -> tuple[Any, ...] | None:
    """The default extra keys: the request's ``cache_salt``, on its first block only.

    Salting the first block is enough: every later hash chains through it.
    """
    if start == 0 and request.cache_salt:
        return (request.cache_salt,)
    return None


# ------------------------------------------------------------------- hashing


def hash_block_tokens(
    parent: BlockHash | None,
    tokens: Sequence[int],
    extra_keys: tuple[Any, ...] | None = None,
) -> BlockHash:
    """Hash one block given its parent's hash.

    ``parent`` is ``None`` for a first block; it then chains to
    ``root_hash(0)``. (Block hashers built with another seed pass their root
    explicitly.) Empty ``extra_keys`` are the same as ``None``.
    """
    if parent is None:
        parent = _DEFAULT_ROOT
    message = _hash_bytes(parent) + _COUNT.pack(len(tokens)) + encode_tokens(tokens)
    if extra_keys:
        message += encode_extra_keys(extra_keys)
    return _from_digest(blake2b(message, digest_size=DIGEST_SIZE).digest())


class ChunkMemo:
    """Block hashes of recently hashed prompt chunks, by ``(parent hash, chunk id)``.

    Why: in a conversation trace every turn re-sends the turns before it, so
    the same chunk follows the same parent again and again (38% of the
    Mooncake conversation trace's 512-token chunks), and hashing prompt blocks
    is the largest single cost of a trace replay. A hit returns exactly the
    hashes the chain would compute: a chunk id names its tokens, and the
    parent names everything before them.

    A chunk's hashes are kept as one ``bytes``, their digests end to end
    (``DIGEST_SIZE`` bytes per block, ~700 bytes a 32-block chunk with its key)
    rather than as the 32 int objects (~1.9 KB): a full memo of the whole
    Mooncake conversation trace is ~100k chunks, 140 MB of peak RSS between the
    two. A hit makes the ints again (one C-level ``struct`` unpack, then
    ``int.from_bytes`` per block; in C in the compiled core).

    Bounded by generations rather than by an LRU order: entries go into the
    current generation; when it holds ``capacity`` chunks it becomes the old
    one (the older one is dropped), and a hit in the old generation moves the
    entry forward. At most ``2 * capacity`` chunks are held.
    """

    __slots__ = ("_unpackers", "capacity", "current", "hits", "misses", "previous")

    def __init__(self, capacity: int = 65_536) -> None:
        if capacity < 1:
            raise ValueError(f"ChunkMemo capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.current: dict[tuple[BlockHash, Hashable], bytes] = {}
        self.previous: dict[tuple[BlockHash, Hashable], bytes] = {}
        self.hits = 0
        self.misses = 0
        # One C-level unpack per hit cuts a chunk's digests apart (4x faster than slicing).
        self._unpackers: dict[int, Callable[[bytes], tuple[bytes, ...]]] = {}

    def get(self, parent: BlockHash, chunk_id: Hashable) -> tuple[BlockHash, ...] | None:
        """The chunk's block hashes after ``parent``, or ``None`` (a miss)."""
        key = (parent, chunk_id)
        packed = self.current.get(key)
        if packed is None:
            packed = self.previous.pop(key, None)
            if packed is None:
                self.misses += 1
                return None
            self._keep(key, packed)
        self.hits += 1
        unpack = self._unpackers.get(len(packed))
        if unpack is None:
            count = len(packed) // DIGEST_SIZE
            unpack = self._unpackers[len(packed)] = struct.Struct(f"{DIGEST_SIZE}s" * count).unpack
        return tuple(map(_from_digest, unpack(packed)))

    def put(self, parent: BlockHash, chunk_id: Hashable, hashes: Sequence[BlockHash]) -> None:
        """Remember a chunk's hashes, just computed after a miss."""
        self._keep((parent, chunk_id), b"".join(map(_hash_bytes, hashes)))

    def put_digests(self, parent: BlockHash, chunk_id: Hashable, packed: bytes) -> None:
        """:meth:`put` given the hashes' digests already end to end (the chain has them)."""
        self._keep((parent, chunk_id), packed)

    def _keep(self, key: tuple[BlockHash, Hashable], packed: bytes) -> None:
        current = self.current
        current[key] = packed
        if len(current) >= self.capacity:
            self.previous = current
            self.current = {}


def make_block_hasher(
    block_size: int,
    seed: int = 0,
    extra_keys_fn: ExtraKeysFn | None = cache_salt_extra_keys,
    chunk_memo_capacity: int = 65_536,
    core: str = "auto",
) -> BlockHasher:
    """Build the function a :class:`~kvframe.domain.request.Request` uses to hash its blocks.

    The returned ``hasher(request)`` hashes the request's full blocks that are
    not hashed yet (from ``len(request.block_hashes)`` on) and returns only
    those new hashes; the request appends them. Its results are identical to
    calling :func:`hash_block_tokens` block by block with ``root_hash(seed)`` as
    the first parent.

    ``extra_keys_fn`` decides each block's extra keys (default: the cache salt
    on the first block). Pass another function to key blocks on more request
    state (an adapter name, multimodal inputs, ...), or ``None`` for none.
    With the default, requests without a salt take a fast path that never
    calls it.

    The hasher carries ``block_size`` as an attribute: a request asks it again
    only when an appended token fills a block, not after every token.

    Prompts made of identified chunks (a Mooncake trace's hash ids: they offer
    ``chunk_ids``, see :class:`kvframe.workloads.spec.MooncakePrompt`) have
    each whole chunk's hashes remembered by ``(parent, chunk id)`` in a
    :class:`ChunkMemo` of ``chunk_memo_capacity`` chunks per generation (``0``:
    no memo). Only the work changes: the hashes are the ones the chain computes.
    The default holds at most ~95 MB (131,072 chunks); the whole Mooncake
    conversation trace hits 38% of its chunks with it.

    ``core``: ``"python"``, ``"compiled"`` (:mod:`kvframe.core._hashing_compiled`;
    an error when it is not built) or ``"auto"`` (compiled when built). Only
    the speed differs; the hasher's ``core`` attribute names the one used.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    if chunk_memo_capacity < 0:
        raise ValueError(f"chunk_memo_capacity must be >= 0, got {chunk_memo_capacity}")
    compiled = _compiled_core(core)
    if compiled is None:
        chain = _block_chain(block_size)
        hash_chunks = _hash_chunks
    else:
        chain = compiled.BlockChain(block_size, _COUNT.pack(block_size))
        hash_chunks = compiled.hash_chunks
    memos: dict[Hashable, ChunkMemo] = {}
    hasher = _hasher(
        block_size, root_hash(seed), extra_keys_fn, chain, hash_chunks, memos, chunk_memo_capacity
    )
    # For diagnostics and tests: each chunk namespace's memo (hits, misses).
    hasher.chunk_memos = memos  # type: ignore[attr-defined]
    # Read by Request: a token that fills no block needs no call at all.
    hasher.block_size = block_size  # type: ignore[attr-defined]
    hasher.core = "python" if compiled is None else "compiled"  # type: ignore[attr-defined]
    return hasher  # type: ignore[return-value]  # a function given the attributes above


def _hasher(
    block_size: int,
    root: BlockHash,
    extra_keys_fn: ExtraKeysFn | None,
    chain: Any,
    hash_chunks: Any,
    memos: dict[Hashable, ChunkMemo],
    chunk_memo_capacity: int,
) -> Callable[[Request], list[BlockHash]]:
    """The hasher :func:`make_block_hasher` returns, over the chain and chunk hashing of
    the core it chose (a closure: its state is read as locals on every call)."""
    header = _COUNT.pack(block_size)
    salt_only = extra_keys_fn is cache_salt_extra_keys

    def hasher(request: Request) -> list[BlockHash]:
        hashes = request.block_hashes
        tokens = request.all_token_ids
        start = len(hashes) * block_size
        end = (len(tokens) // block_size) * block_size
        if start >= end:
            return []
        parent = hashes[-1] if hashes else root
        new_hashes: list[BlockHash] = []
        append = new_hashes.append
        if extra_keys_fn is None or (salt_only and not (start == 0 and request.cache_salt)):
            # Fast path: no block of this range has extra keys.
            if tokens.__class__ is list:
                chain(parent, encode_tokens(tokens[start:end]), append)
                return new_hashes
            chunks = tokens.chunk_ids(start, end)  # a TokenView: see Request.all_token_ids
            if chunks is not None and chunk_memo_capacity and chunks[1] % block_size == 0:
                # A trace prompt made of identified chunks (Mooncake's hash
                # ids): a chunk after the same parent has the same hashes, and
                # a conversation re-sends its earlier turns.
                memo = memos.get(chunks[0])
                if memo is None:
                    memo = memos[chunks[0]] = ChunkMemo(chunk_memo_capacity)
                parent = hash_chunks(memo, chunks, parent, chain, new_hashes)
                start += chunks[1] * len(chunks[2])
                if start >= end:
                    return new_hashes
            # A lazy prompt (kvframe.domain.tokens.TokenView): its bytes without
            # materialising the token ids.
            chain(parent, tokens.token_bytes(start, end), append)
            return new_hashes
        data = encode_tokens(tokens[start:end]) if tokens.__class__ is list else None
        if data is None:
            data = tokens.token_bytes(start, end)
        _hash_keyed(request, extra_keys_fn, parent, header, block_size, start, data, append)
        return new_hashes

    return hasher


def compiled_hashing_available() -> bool:
    """Whether the compiled block hasher is built and importable."""
    return _compiled is not None


def _compiled_core(core: str) -> Any:
    """The compiled module for ``core``, or ``None`` for pure Python."""
    if core not in CORES:
        raise ValueError(f"make_block_hasher: core must be one of {', '.join(CORES)}, got {core!r}")
    if core == "python":
        return None
    if core == "compiled" and _compiled is None:
        raise ValueError(
            "make_block_hasher: core='compiled' but kvframe.core._hashing_compiled is not "
            "built (pip install cython, then `python setup.py build_ext --inplace`)"
        )
    return _compiled


def _block_chain(
    block_size: int,
) -> Callable[[BlockHash, bytes, Callable[[BlockHash], None]], BlockHash]:
    """``chain(parent, data, append)``: hash each ``block_size``-token block of the
    encoded ``data`` after ``parent``, appending each hash; returns the last."""
    header = _COUNT.pack(block_size)
    step = 4 * block_size
    new_hasher = blake2b(digest_size=DIGEST_SIZE).copy
    from_digest = _from_digest

    def chain(
        parent: BlockHash,
        data: bytes,
        append: Callable[[BlockHash], None],
        digests: list[bytes] | None = None,
    ) -> BlockHash:
        # Copying an empty hasher skips blake2b()'s keyword parsing: ~25% per
        # block, and prompt blocks are hashed by the million in a trace replay.
        # The digest bytes chain on; only the hash handed out is made an int.
        # ``digests`` (the chunk memo's miss path) also collects the digests.
        last = parent.to_bytes(DIGEST_SIZE)
        for byte_offset in range(0, len(data), step):
            digest = new_hasher()
            digest.update(last + header + data[byte_offset : byte_offset + step])
            last = digest.digest()
            parent = from_digest(last)
            append(parent)
            if digests is not None:
                digests.append(last)
        return parent

    return chain


def _hash_chunks(
    memo: ChunkMemo,
    chunks: ChunkIds,
    parent: BlockHash,
    chain: Any,
    new_hashes: list[BlockHash],
) -> BlockHash:
    """Append the hashes of every whole chunk in ``chunks`` after ``parent`` to
    ``new_hashes``, from ``memo`` where it has them (hashing and remembering the
    others); returns the last hash, the next block's parent."""
    chunk_bytes = chunks[3]
    extend = new_hashes.extend
    for chunk_id in chunks[2]:
        found = memo.get(parent, chunk_id)
        if found is None:
            computed: list[BlockHash] = []
            digests: list[bytes] = []
            chain(parent, chunk_bytes(chunk_id), computed.append, digests)
            memo.put_digests(parent, chunk_id, b"".join(digests))
            found = computed
        extend(found)
        parent = found[-1]
    return parent


def _hash_keyed(
    request: Request,
    extra_keys_fn: ExtraKeysFn,
    parent: BlockHash,
    header: bytes,
    block_size: int,
    start: int,
    data: bytes,
    append: Callable[[BlockHash], None],
) -> None:
    """Hash the blocks of ``data`` (tokens from ``start`` on) with each block's extra
    keys: the path of a salted first block or a custom ``extra_keys_fn``."""
    step = 4 * block_size
    for offset in range(0, len(data) // 4, block_size):
        byte_offset = offset * 4
        message = _hash_bytes(parent) + header + data[byte_offset : byte_offset + step]
        extra = extra_keys_fn(request, start + offset, start + offset + block_size)
        if extra:
            message += encode_extra_keys(extra)
        parent = _from_digest(blake2b(message, digest_size=DIGEST_SIZE).digest())
        append(parent)
