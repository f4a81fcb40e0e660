"""Tokens as kvframe stores, hashes and shares them: the one token encoding.

A prompt may be a plain list of ids or a lazy *token source* (a Mooncake trace
prompt builds its tokens from hash ids; a generated prompt from a seed): the
block hasher reads ``token_bytes(start, end)`` from such a source instead of
materialising a list of Python ints, and ``chunk_ids`` lets it reuse the hashes
of a chunk it has hashed before. Every token is encoded the same way, as a
uint32 little-endian, by :func:`encode_tokens` here and nowhere else.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "BlockHash",
    "ChunkIds",
    "TokenSource",
    "TokenView",
    "block_hash_bytes",
    "block_hash_hex",
    "decode_tokens",
    "encode_tokens",
]

BlockHash = int
"""A chained block hash as produced by :mod:`kvframe.core.hashing`: its 16-byte BLAKE2b
digest read as an unsigned big-endian int (``0 <= h < 2**128``; the collision bound
is in that module). The vLLM bridge keys blocks by vLLM's own hashes (``bytes``)
instead; the core only compares and indexes them, so either works there."""


def block_hash_bytes(block_hash: Any) -> bytes:
    """A block hash's digest bytes: the 16 bytes of kvframe's int (big-endian), or a
    ``bytes`` hash (vLLM's own, through the bridge) as it is.

    For code that feeds a hash into another digest (a router's hash ring): the
    bytes are the ones kvframe's hashes were before they became ints.
    """
    if block_hash.__class__ is int:
        return block_hash.to_bytes(16)  # type: ignore[no-any-return]
    return bytes(block_hash)


def block_hash_hex(block_hash: Any) -> str:
    """A block hash as text for traces and logs: the hex of :func:`block_hash_bytes`.

    The same string as ``digest.hex()`` when hashes were ``bytes``, so trace
    files did not change with the int representation.
    """
    if block_hash.__class__ is int:
        return f"{block_hash:032x}"
    if isinstance(block_hash, bytes | bytearray):
        return bytes(block_hash).hex()
    return str(block_hash)


ChunkIds = tuple[Hashable, int, Sequence[int], Callable[[int], bytes]]
"""``(namespace, chunk_tokens, chunk ids, chunk_bytes)``: a prompt's identified chunks
(see :meth:`kvframe.workloads.spec.MooncakePrompt.chunk_ids`)."""

# array typecode for 4-byte unsigned ints, and whether its bytes must be swapped to
# little-endian; decided once, so hashes agree across platforms.
_U32 = "I" if array("I").itemsize == 4 else "L"
assert array(_U32).itemsize == 4, "no 4-byte unsigned array typecode on this platform"
_SWAP = sys.byteorder != "little"


def encode_tokens(tokens: Sequence[int]) -> bytes:
    """Token ids as uint32 little-endian bytes: what the block hasher hashes."""
    packed = array(_U32, tokens)
    if _SWAP:
        packed.byteswap()
    return packed.tobytes()


def decode_tokens(data: bytes) -> list[int]:
    """The inverse of :func:`encode_tokens`."""
    values = array(_U32)
    values.frombytes(data)
    if _SWAP:
        values.byteswap()
    return values.tolist()


@runtime_checkable
class TokenSource(Protocol):
    """A lazy sequence of token ids that can write a range of them encoded.

    ``token_bytes(start, end)`` equals ``encode_tokens(list(source)[start:end])``;
    ``chunk_ids(start, end)`` names the whole chunks from ``start`` when the source
    is made of identified chunks (a Mooncake prompt's hash ids), else ``None``. A
    :class:`~kvframe.domain.request.Request` given a token source keeps it as is
    (a :class:`TokenView` over it and the outputs), never as a list of ints.
    """

    def __len__(self) -> int: ...

    def token_bytes(self, start: int, end: int) -> bytes:
        """Tokens ``start .. end - 1`` encoded as :func:`encode_tokens` does."""
        ...

    def chunk_ids(self, start: int, end: int) -> ChunkIds | None:
        """The identified chunks from ``start`` to ``end``, or ``None``."""
        ...


class TokenView(Sequence[int]):
    """Prompt followed by outputs, read-only, without copying the prompt.

    Why: the Mooncake trace's waiting queue holds thousands of 13k-token
    prompts at once; as lists of ints they cost 4 GB. The view reads the
    (lazy) prompt and the request's own output list; slices and iteration
    materialise only what is asked for. ``token_bytes`` is what the block
    hasher reads (uint32 little-endian).
    """

    __slots__ = ("_num_prompt", "_outputs", "_prompt")

    def __init__(self, prompt: Sequence[int], outputs: list[int]) -> None:
        self._prompt = prompt
        self._outputs = outputs
        # Kept: a lazy prompt's len() is a chain of Python calls, and the block
        # hasher asks for it with every generated block.
        self._num_prompt = len(prompt)

    def __len__(self) -> int:
        return self._num_prompt + len(self._outputs)

    def __getitem__(self, index: Any) -> Any:
        num_prompt = self._num_prompt
        if isinstance(index, slice):
            start, stop, stride = index.indices(len(self))
            if stride != 1:
                return self.tolist()[index]
            if stop <= num_prompt:
                return list(self._prompt[start:stop])
            if start >= num_prompt:
                return self._outputs[start - num_prompt : stop - num_prompt]
            return list(self._prompt[start:num_prompt]) + self._outputs[: stop - num_prompt]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("token index out of range")
        return self._prompt[index] if index < num_prompt else self._outputs[index - num_prompt]

    def __iter__(self) -> Iterator[int]:
        yield from self._prompt
        yield from self._outputs

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and self.tolist() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable contents, like a list

    def tolist(self) -> list[int]:
        return [*self._prompt, *self._outputs]

    def token_bytes(self, start: int, end: int) -> bytes:
        """Tokens ``start .. end - 1`` as uint32 little-endian bytes (for hashing)."""
        num_prompt = self._num_prompt
        if end <= num_prompt:
            return self._prompt.token_bytes(start, end)  # type: ignore[attr-defined]
        out = encode_tokens(self._outputs[max(start, num_prompt) - num_prompt : end - num_prompt])
        if start < num_prompt:
            return self._prompt.token_bytes(start, num_prompt) + out  # type: ignore[attr-defined]
        return out

    def chunk_ids(self, start: int, end: int) -> ChunkIds | None:
        """The prompt's identified chunks from ``start`` to ``end`` (for the block hasher).

        ``(namespace, chunk_tokens, ids, chunk_bytes)`` from a prompt that knows them (a
        Mooncake trace prompt: see ``MooncakePrompt.chunk_ids``), else ``None``.
        Outputs are never part of a chunk.
        """
        num_prompt = self._num_prompt
        if start >= num_prompt:
            return None
        return self._prompt.chunk_ids(start, min(end, num_prompt))  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"TokenView(<{self._num_prompt} prompt + {len(self._outputs)} output tokens>)"
