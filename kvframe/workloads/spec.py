"""What a workload is made of: request specs with lazily materialised prompts.

A :class:`RequestSpec` is the *description* of a request before it reaches the
engine; the engine turns it into a :class:`kvframe.domain.request.Request` when the
virtual clock passes ``arrival_time``.

Why prompts are lazy: the Mooncake conversation trace has 12,031 requests of
12,035 tokens on average (145 M tokens). As tuples of Python ints that is about
5 GB; as ``array('i')`` still 580 MB. Yet the engine only ever holds the token
ids of the requests that are currently in flight. So a spec stores a recipe
(hash ids + length, or prefix id + lengths) of a few dozen bytes and builds the
token list when :attr:`RequestSpec.prompt_token_ids` is read, normally once, at
arrival. Explicit token lists (rare, small) are kept as packed 32-bit ints.

Every prompt kind is deterministic: the same recipe gives the same token ids in
every process and on every platform, so block hashes — and therefore prefix
cache hits — are reproducible.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs

from kvframe.domain.tokens import ChunkIds, decode_tokens, encode_tokens
from kvframe.workloads.errors import WorkloadError

__all__ = [
    "MOONCAKE_BLOCK_TOKENS",
    "SYNTHETIC_VOCAB_SIZE",
    "MooncakePrompt",
    "Prompt",
    "PromptTokens",
    "RequestSpec",
    "SyntheticPrompt",
    "TokenPrompt",
    "Workload",
    "as_prompt",
    "synthetic_tokens",
]

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens covered by one Mooncake ``hash_ids`` entry (the trace's README)."""

SYNTHETIC_VOCAB_SIZE = 32768
"""Synthetic token ids lie in ``[0, SYNTHETIC_VOCAB_SIZE)``.

2**15 so that they are cheap to make (no modulo per token) and valid for any
real tokenizer; a torch executor with a smaller toy vocabulary folds them.
"""

_MAX_TOKEN_ID = 2**31 - 1  # explicit prompts are packed as signed 32-bit ints
# Clears the top bit of a byte: applied to the high byte of each little-endian
# uint16 it caps the value below 2**15.
_CLEAR_TOP_BIT = bytes(b & 0x7F for b in range(256))


def synthetic_tokens(key: str, n: int) -> list[int]:
    """The first ``n`` tokens of the deterministic stream named ``key``.

    A prefix of the stream for ``n`` is the stream for any smaller ``n``, which
    is what makes two prompts with the same shared-prefix id and different
    shared-prefix lengths share their common part. Different keys give
    independent streams (SHAKE-128), so accidental sharing between unrelated
    prompts has probability 2**-240 per 16-token block.
    """
    if n <= 0:
        return []
    raw = bytearray(hashlib.shake_128(key.encode("utf-8")).digest(2 * n))
    raw[1::2] = raw[1::2].translate(_CLEAR_TOP_BIT)
    values = array("H", bytes(raw))
    if sys.byteorder == "big":  # the stream is defined little-endian
        values.byteswap()
    return values.tolist()


@runtime_checkable
class Prompt(Protocol):
    """A recipe for a prompt's token ids. ``len()`` must not materialise them.

    Every prompt is also a :class:`~kvframe.domain.tokens.TokenSource` (the block
    hasher reads ``token_bytes`` and ``chunk_ids``), and can cut out a range of
    its tokens; each kind does it as cheaply as its representation allows.
    """

    def __len__(self) -> int: ...

    def token_ids(self) -> list[int]:
        """Build the token ids: a fresh list the caller may keep and mutate."""
        ...

    def token_slice(self, start: int, end: int) -> list[int]:
        """Tokens ``start .. end - 1`` (cut to the prompt)."""
        ...

    def token_bytes(self, start: int, end: int) -> bytes:
        """Tokens ``start .. end - 1``, encoded as the block hasher reads them."""
        ...

    def chunk_ids(self, start: int, end: int) -> ChunkIds | None:
        """The identified chunks from ``start`` (:meth:`MooncakePrompt.chunk_ids`), or ``None``."""
        ...


def _pack_tokens(value: Sequence[int] | bytes) -> bytes:
    if isinstance(value, bytes):
        if len(value) % 4:
            raise ValueError("packed token bytes must be a multiple of 4 long")
        return value
    try:
        checked = array("i", value)
    except (TypeError, OverflowError) as exc:
        raise ValueError(f"token ids must be integers in [0, 2**31): {exc}") from None
    if checked and min(checked) < 0:
        raise ValueError("token ids must be non-negative")
    return encode_tokens(checked)


@attrs.frozen(slots=True)
class TokenPrompt:
    """Explicit token ids, stored encoded as the hasher reads them, and hashable."""

    packed: bytes = attrs.field(converter=_pack_tokens, repr=False)

    @classmethod
    def of(cls, token_ids: Sequence[int]) -> TokenPrompt:
        return cls(token_ids)  # type: ignore[arg-type]  # the converter packs them

    def __len__(self) -> int:
        return len(self.packed) // 4

    def token_ids(self) -> list[int]:
        return decode_tokens(self.packed)

    def token_bytes(self, start: int, end: int) -> bytes:
        """Tokens ``start .. end - 1`` encoded as :func:`kvframe.domain.tokens.encode_tokens`
        does: a slice, since the prompt is stored in that encoding."""
        return self.packed[4 * start : 4 * end]

    def token_slice(self, start: int, end: int) -> list[int]:
        return decode_tokens(self.packed[4 * start : 4 * end])

    def chunk_ids(self, start: int, end: int) -> None:
        """Explicit tokens come in no identified chunks."""
        return None

    def __repr__(self) -> str:
        return f"TokenPrompt(<{len(self)} tokens>)"


def _check_synthetic(instance: SyntheticPrompt, attribute: attrs.Attribute, value: int) -> None:
    if instance.length < 1:
        raise ValueError(f"prompt length must be >= 1, got {instance.length}")
    if not 0 <= instance.shared_prefix_length <= instance.length:
        raise ValueError(
            f"shared_prefix_length must be in [0, {instance.length}], "
            f"got {instance.shared_prefix_length}"
        )
    if (instance.shared_prefix_id is None) != (instance.shared_prefix_length == 0):
        raise ValueError("shared_prefix_id and a positive shared_prefix_length go together")


@attrs.frozen(slots=True)
class SyntheticPrompt:
    """``length`` tokens: a shared prefix (by id) followed by tokens unique to ``key``.

    Prompts with the same ``shared_prefix_id`` agree on their first
    ``min(shared_prefix_length)`` tokens; the rest comes from the stream of
    ``key`` (the request id unless given), so unrelated requests share nothing.
    """

    length: int
    shared_prefix_id: str | None = None
    shared_prefix_length: int = attrs.field(default=0, validator=_check_synthetic)
    key: str = ""

    def __len__(self) -> int:
        return self.length

    def token_ids(self) -> list[int]:
        tokens: list[int] = []
        if self.shared_prefix_id is not None:
            tokens = synthetic_tokens(
                "kvframe/prefix/" + self.shared_prefix_id, self.shared_prefix_length
            )
        tokens += synthetic_tokens(
            "kvframe/unique/" + self.key, self.length - self.shared_prefix_length
        )
        return tokens

    def token_slice(self, start: int, end: int) -> list[int]:
        return self.token_ids()[start:end]

    def token_bytes(self, start: int, end: int) -> bytes:
        return encode_tokens(self.token_ids()[start:end])

    def chunk_ids(self, start: int, end: int) -> None:
        """A generated prompt comes in no identified chunks."""
        return None


@attrs.frozen(slots=True)
class MooncakePrompt:
    """A Mooncake trace prompt: ``hash_ids`` (one per ``block_tokens`` tokens) cut to ``length``.

    Tokens come from :func:`kvframe.workloads.mooncake_tokens.expand_hash_ids`,
    so equal hash ids at equal positions give equal tokens, as the trace means.
    """

    hash_ids: tuple[int, ...]
    length: int
    block_tokens: int = MOONCAKE_BLOCK_TOKENS

    def __len__(self) -> int:
        return self.length

    def token_ids(self) -> list[int]:
        # Imported here so that reading a trace (and ``import kvframe.workloads``)
        # never pays for, or depends on, the expansion module.
        from kvframe.workloads.mooncake_tokens import expand_hash_ids

        tokens = expand_hash_ids(self.hash_ids, self.length, self.block_tokens)
        if len(tokens) != self.length:
            tokens = list(tokens[: self.length])
        elif not isinstance(tokens, list):
            tokens = list(tokens)
        return tokens

    def token_bytes(self, start: int, end: int) -> bytes:
        """Tokens ``start .. end - 1`` as uint32 little-endian bytes, built from the ids.

        The same bytes as packing ``token_ids()[start:end]``, without a
        Python int per token (:func:`_chunk_writer`): this is how a trace
        prompt is hashed.
        """
        end = min(end, self.length)
        if start >= end:
            return b""
        size = self.block_tokens
        write = _chunk_writer(size)
        hash_ids = self.hash_ids
        parts: list[bytes] = []
        for index in range(start // size, (end - 1) // size + 1):
            first = index * size
            chunk = write(hash_ids[index])
            low = max(start, first) - first
            high = min(end, first + size) - first
            parts.append(chunk if low == 0 and high == size else chunk[4 * low : 4 * high])
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def chunk_ids(self, start: int, end: int) -> ChunkIds | None:
        """The hash ids of the whole chunks from ``start`` to ``end`` (cut to the prompt).

        Returns ``(namespace, block_tokens, ids, chunk_bytes)``, or ``None`` if
        ``start`` is not at a chunk boundary or no whole chunk fits;
        ``chunk_bytes(hash_id)`` is a chunk's tokens as :meth:`token_bytes`
        writes them. A chunk's tokens are a function of its id alone, which
        is what lets the block hasher remember a chunk's hashes after a given
        parent (:class:`kvframe.core.hashing.ChunkMemo`); ``namespace`` keeps
        ids of other chunk sizes or prompt kinds apart.
        """
        size = self.block_tokens
        if start % size:
            return None
        first, last = start // size, min(end, self.length) // size
        if first >= last:
            return None
        return ("mooncake", size), size, self.hash_ids[first:last], _chunk_writer(size)

    def token_slice(self, start: int, end: int) -> list[int]:
        """Tokens ``start .. end - 1`` without building the whole prompt."""
        end = min(end, self.length)
        size = self.block_tokens
        tokens: list[int] = []
        for index in range(start // size, (end - 1) // size + 1) if start < end else ():
            first = index * size
            base = self.hash_ids[index] * size - first
            tokens.extend(range(base + max(start, first), base + min(end, first + size)))
        return tokens

    def __repr__(self) -> str:
        return (
            f"MooncakePrompt(<{len(self.hash_ids)} hash ids>, length={self.length}, "
            f"block_tokens={self.block_tokens})"
        )


_U32_LIMIT = 1 << 32


@functools.cache
def _chunk_writer(size: int) -> Callable[[int], bytes]:
    """``write(hash_id)``: the tokens of a ``size``-token Mooncake chunk as uint32 LE bytes.

    The chunk's tokens are the consecutive ids ``v .. v + size - 1`` (``v =
    hash_id * size``), so its bytes are those of one big integer, ``v * ONES +
    RAMP`` (:func:`_chunk_constants`), written out little endian: no lane
    carries into the next while every id fits 32 bits. That is about six
    times faster than an ``array`` built from a range.
    """
    ones, ramp = _chunk_constants(size)
    num_bytes = 4 * size

    def write(hash_id: int) -> bytes:
        value = hash_id * size
        if value < 0 or value + size > _U32_LIMIT:
            raise OverflowError(
                f"hash id {hash_id} gives token ids beyond 32 bits (block_tokens={size})"
            )
        return (value * ones + ramp).to_bytes(num_bytes, "little")

    return write


@functools.cache
def _chunk_constants(size: int) -> tuple[int, int]:
    """``(ONES, RAMP)`` for ``size``-token chunks: the integers whose little-endian
    32-bit lanes are ``1, 1, ...`` and ``0, 1, 2, ...``."""
    ones = 0
    ramp = 0
    for lane in range(size):
        ones |= 1 << (32 * lane)
        ramp |= lane << (32 * lane)
    return ones, ramp


class PromptTokens(Sequence[int]):
    """A prompt recipe's token ids as a read-only, lazily built sequence.

    What the engine hands a :class:`kvframe.domain.request.Request` as
    ``prompt_token_ids``. Why: thousands of requests wait at once in a real
    trace; a list of ints per prompt is ~40 bytes per token, this is a few
    dozen bytes per request. ``len()`` is free; ``token_bytes`` (what the block
    hasher reads) never builds ints for Mooncake prompts; indexing, slicing
    (to a list), iteration, ``list()``/``tolist()`` and ``==`` against a list
    work like a list and build the ids on demand -- e.g. an executor that
    needs real token ids calls ``prompt_token_ids.tolist()`` or ``list(...)``.
    """

    __slots__ = ("prompt",)

    def __init__(self, prompt: Prompt) -> None:
        self.prompt = prompt

    def __len__(self) -> int:
        return len(self.prompt)

    def tolist(self) -> list[int]:
        return self.prompt.token_ids()

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            start, stop, stride = index.indices(len(self.prompt))
            if stride == 1:
                return self.prompt.token_slice(start, stop)
            return self.tolist()[index]
        if index < 0:
            index += len(self.prompt)
        if not 0 <= index < len(self.prompt):
            raise IndexError("prompt token index out of range")
        return self[index : index + 1][0]

    def __iter__(self) -> Iterator[int]:
        return iter(self.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and self.tolist() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def token_bytes(self, start: int, end: int) -> bytes:
        """Tokens ``start .. end - 1`` encoded for hashing (the prompt's own ``token_bytes``)."""
        return self.prompt.token_bytes(start, end)

    def chunk_ids(self, start: int, end: int) -> ChunkIds | None:
        """The prompt's identified chunks from ``start`` (``MooncakePrompt.chunk_ids``), if any."""
        return self.prompt.chunk_ids(start, end)

    def __repr__(self) -> str:
        return f"PromptTokens({self.prompt!r})"


def as_prompt(value: Prompt | Sequence[int]) -> Prompt:
    """Accept a prompt recipe as is, or a plain sequence of token ids."""
    if isinstance(value, (TokenPrompt, SyntheticPrompt, MooncakePrompt)):
        return value
    if isinstance(value, (list, tuple, array, range)):
        return TokenPrompt.of(value)
    if isinstance(value, Prompt):
        return value
    raise TypeError(f"expected a Prompt or a sequence of token ids, got {type(value).__name__}")


def _non_negative(instance: Any, attribute: attrs.Attribute, value: float | int | None) -> None:
    if value is not None and not value >= 0:  # "not >=" also rejects NaN
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


def _positive(instance: Any, attribute: attrs.Attribute, value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be >= 1, got {value!r}")


@attrs.frozen(slots=True)
class RequestSpec:
    """One request as a workload describes it, before it reaches the engine.

    Times are seconds of virtual time. ``priority`` follows vLLM: lower values
    are scheduled first. The agentic fields describe a job of several turns:
    ``tool_name`` is the tool the model calls after this turn, and
    ``tool_duration`` how long that call takes, i.e. the gap between this
    turn finishing and the job's next turn arriving (closed loop).
    """

    request_id: str
    prompt: Prompt = attrs.field(converter=as_prompt)
    max_tokens: int = attrs.field(validator=_positive)
    arrival_time: float = attrs.field(default=0.0, validator=_non_negative)
    priority: int = 0
    cache_salt: str | None = None
    job_id: str | None = None
    turn: int = attrs.field(default=0, validator=_non_negative)
    is_last_turn: bool = True
    tool_name: str | None = None
    tool_duration: float | None = attrs.field(default=None, validator=_non_negative)

    def __attrs_post_init__(self) -> None:
        if len(self.prompt) < 1:
            raise ValueError(f"request {self.request_id!r}: a prompt needs at least one token")

    @property
    def num_prompt_tokens(self) -> int:
        """Prompt length, known without materialising the tokens."""
        return len(self.prompt)

    @property
    def prompt_token_ids(self) -> list[int]:
        """The prompt's token ids, built now (a fresh list on every read)."""
        return self.prompt.token_ids()


@attrs.frozen(slots=True)
class Workload:
    """Request specs in arrival order, plus where they came from.

    Iterating yields the specs in non-decreasing ``arrival_time`` (ties in file
    order); readers guarantee it. ``num_skipped_lines`` counts input lines
    dropped by ``skip_bad_lines=True`` and ``errors`` keeps the first few of
    them so a run can report what was skipped.
    """

    requests: tuple[RequestSpec, ...] = attrs.field(converter=tuple)
    name: str = "workload"
    source: Path | str | None = None
    """The file read, or a bundled workload's name (``"mooncake:conversation"``)."""
    format: str = "memory"
    """``"mooncake"``, ``"kvframe"`` or ``"memory"`` (built in Python)."""
    num_skipped_lines: int = 0
    errors: tuple[WorkloadError, ...] = ()
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    """Header information (e.g. the generator and its parameters)."""

    def __iter__(self) -> Iterator[RequestSpec]:
        return iter(self.requests)

    def __len__(self) -> int:
        return len(self.requests)

    def __getitem__(self, index: int) -> RequestSpec:
        return self.requests[index]

    @property
    def total_prompt_tokens(self) -> int:
        return sum(len(spec.prompt) for spec in self.requests)

    @property
    def total_max_tokens(self) -> int:
        return sum(spec.max_tokens for spec in self.requests)

    @property
    def duration(self) -> float:
        """Seconds from the first arrival to the last (0 for fewer than two requests)."""
        if len(self.requests) < 2:
            return 0.0
        return self.requests[-1].arrival_time - self.requests[0].arrival_time
