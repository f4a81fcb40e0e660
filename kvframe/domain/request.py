"""Requests as the scheduler and the KV cache manager see them.

A :class:`Request` carries a prompt, the tokens generated so far and the
bookkeeping the core needs (status, computed tokens, block hashes). It is the
hottest object in the engine: thousands live at once and the scheduler reads a
handful of attributes per request per step, so it is a plain class with
``__slots__`` rather than an attrs class, and the counters are plain attributes.

The waiting-queue order is a policy decision: the queue protocol and the
host's queues are in :mod:`kvframe.domain.queues`, token sources and the token
encoding in :mod:`kvframe.domain.tokens`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kvframe.domain.tokens import TokenSource, TokenView

if TYPE_CHECKING:
    from kvframe.domain.tokens import BlockHash

__all__ = ["Request", "RequestStatus"]


class RequestStatus(enum.IntEnum):
    """Where a request is in its life.

    The values are ordered: every status after :attr:`PREEMPTED` is a finished
    one, so "is finished" is one integer comparison.
    """

    WAITING = enum.auto()
    WAITING_FOR_REMOTE_KVS = enum.auto()
    WAITING_FOR_STREAMING_REQ = enum.auto()
    """A streaming-input session that stopped and waits for its next input chunk
    (vLLM's name): it keeps its blocks, is skipped by admission, and is not
    counted as unfinished work (see :mod:`kvframe.core.sessions`)."""
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    # Everything below this line is finished.
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH_CAPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()
    FINISHED_IGNORED = enum.auto()
    FINISHED_ERROR = enum.auto()
    """A request the engine gave up on: its connector failed to load KV blocks
    under ``kv_load_failure_policy="fail"`` (vLLM's ``FINISHED_ERROR``)."""

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def is_finished(status: RequestStatus) -> bool:
        """True for the ``FINISHED_*`` statuses."""
        return status > RequestStatus.PREEMPTED

    @staticmethod
    def get_finished_reason(status: RequestStatus) -> str | None:
        """The OpenAI-style finish reason (``"stop"``, ``"length"``, ``"abort"``).

        ``None`` while the request is not finished. An *ignored* request (its
        prompt did not fit the model) reports ``"length"``, as vLLM does.
        """
        return _FINISHED_REASONS.get(status)


_FINISHED_REASONS: dict[RequestStatus, str] = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH_CAPPED: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
    RequestStatus.FINISHED_IGNORED: "length",
    RequestStatus.FINISHED_ERROR: "error",
}


_NEVER = 1 << 62
"""``Request.next_hash_at`` while nothing is to be hashed on append."""


class Request:
    """One generation request.

    Token lists:

    * ``prompt_token_ids`` is the prompt as given (not copied, never mutated).
    * ``output_token_ids`` are the tokens generated so far.
    * ``all_token_ids`` is prompt followed by outputs: a list, or -- when the
      prompt is lazy (has ``token_bytes(start, end)``, like the engine's
      :class:`kvframe.workloads.spec.PromptTokens`) -- a read-only
      :class:`TokenView` that indexes, slices (to lists), iterates and
      compares like one without copying the prompt. ``list(...)`` of either
      gives the token ids.
    * ``spec_token_ids`` are draft tokens proposed for the next step; they are
      not part of ``all_token_ids`` and are never hashed or cached.

    The output lists are owned by the request: extend them only through
    :meth:`append_output_token_ids`, which keeps ``all_token_ids`` and
    ``block_hashes`` in step.

    Block hashes: with a ``block_hasher`` (see
    :func:`kvframe.core.hashing.make_block_hasher`), ``block_hashes[i]`` is the
    chained hash of the ``i``-th *full* block of ``all_token_ids``. The prompt's
    blocks are hashed when ``block_hashes`` is first read -- for a queued
    request, when it reaches the head of the queue and is looked up -- so a
    deep queue holds prompts' recipes, not their hashes (the hashes are the
    same whenever they are computed). After that, a block completed by generated
    tokens is hashed when the token that fills it is appended. Partial blocks
    are never hashed. Invariant, as read: ``len(block_hashes) == num_tokens //
    block_size`` whenever a hasher is set.

    Counters set by the scheduler: ``num_computed_tokens`` (tokens whose KV is
    in the cache, including prefix hits), ``num_cached_tokens`` (prefix-hit
    tokens recorded once, at first admission; ``-1`` before),
    ``num_external_computed_tokens`` (tokens a connector supplied),
    ``num_output_placeholders`` (outputs scheduled but not yet returned, for
    asynchronous stepping) and ``num_preemptions``.
    """

    __slots__ = (
        "_block_hashes",
        "_hashes_pending",
        "all_token_ids",
        "arrival_time",
        "block_hasher",
        "cache_salt",
        "finish_time",
        "first_token_time",
        "is_last_turn",
        "job_id",
        "kv_transfer_params",
        "max_tokens",
        "next_hash_at",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_external_computed_tokens",
        "num_output_placeholders",
        "num_output_tokens",
        "num_preemptions",
        "num_prompt_tokens",
        "num_tokens",
        "output_token_ids",
        "priority",
        "prompt_token_ids",
        "request_id",
        "resumable",
        "skip_reading_prefix_cache",
        "spec_token_ids",
        "status",
        "stop_reason",
        "stop_token_ids",
        "tool_name",
        "turn",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: Sequence[int],
        max_tokens: int,
        *,
        arrival_time: float = 0.0,
        priority: int = 0,
        cache_salt: str | None = None,
        stop_token_ids: Iterable[int] = (),
        skip_reading_prefix_cache: bool = False,
        job_id: str | None = None,
        turn: int | None = None,
        is_last_turn: bool = True,
        tool_name: str | None = None,
        block_hasher: Callable[[Request], list[BlockHash]] | None = None,
        resumable: bool = False,
    ) -> None:
        self.request_id = request_id
        self.resumable = resumable
        """A streaming-input session (vLLM's ``resumable``): when it stops it waits
        for its next input chunk instead of finishing (:mod:`kvframe.core.sessions`)."""
        self.prompt_token_ids = prompt_token_ids
        self.num_prompt_tokens = len(prompt_token_ids)
        self.num_tokens = self.num_prompt_tokens
        """Prompt plus output tokens (draft tokens excluded); kept by
        :meth:`append_output_token_ids`, read by the scheduler for every request
        every step, hence a plain attribute rather than a property."""
        self.num_output_tokens = 0
        """``len(output_token_ids)``, kept the same way."""
        self.max_tokens = max_tokens
        self.arrival_time = arrival_time
        self.priority = priority
        self.cache_salt = cache_salt
        self.stop_token_ids: frozenset[int] = frozenset(stop_token_ids)
        self.skip_reading_prefix_cache = skip_reading_prefix_cache

        # Agentic workloads: which job and turn this request belongs to.
        self.job_id = job_id
        self.turn = turn
        self.is_last_turn = is_last_turn
        self.tool_name = tool_name

        self._init_progress(prompt_token_ids, block_hasher)

    def _init_progress(
        self,
        prompt_token_ids: Sequence[int],
        block_hasher: Callable[[Request], list[BlockHash]] | None,
    ) -> None:
        """The state the engine advances as the request runs: status, tokens so far,
        the scheduler's counters and the block-hash chain. Called once, from ``__init__``;
        apart from what the caller asked for, so each reads as one job."""
        self.status = RequestStatus.WAITING
        self.stop_reason: int | str | None = None
        self.first_token_time: float | None = None
        self.finish_time: float | None = None

        self.output_token_ids: list[int] = []
        # A lazy prompt (one with ``token_bytes``, e.g. the engine's
        # PromptTokens over a trace recipe) is never copied: all_token_ids is
        # then a read-only view of prompt + outputs, so a waiting request costs
        # bytes, not a Python int per token.
        self.all_token_ids: list[int] | TokenView = (
            TokenView(prompt_token_ids, self.output_token_ids)
            if isinstance(prompt_token_ids, TokenSource)
            else list(prompt_token_ids)
        )
        self.spec_token_ids: list[int] = []

        self.num_computed_tokens = 0
        self.num_output_placeholders = 0
        self.num_cached_tokens = -1
        self.num_external_computed_tokens = 0
        self.num_preemptions = 0
        self.kv_transfer_params: dict[str, Any] | None = None

        self._block_hashes: list[BlockHash] = []
        # The hasher is a plain function of the request, stored unbound, so no
        # request -> bound method -> request cycle keeps requests alive.
        self.block_hasher = block_hasher
        self._hashes_pending = block_hasher is not None
        self.next_hash_at = _NEVER
        """``num_tokens`` at which the next block fills and must be hashed (see
        :meth:`append_output_token_ids`); never while the prompt is not hashed yet."""

    def set_block_hasher(self, block_hasher: Callable[[Request], list[BlockHash]]) -> None:
        """Attach a hasher after construction (the scheduler's, at arrival).

        Hashes every full block not hashed yet. Replacing a hasher after
        blocks were hashed would mix two hash schemes in one chain, so that
        raises ``ValueError``.
        """
        if self._block_hashes and self.block_hasher is not block_hasher:
            raise ValueError(
                f"request {self.request_id!r} already has block hashes from another hasher"
            )
        self.block_hasher = block_hasher
        self._hashes_pending = True
        self.next_hash_at = _NEVER

    @property
    def block_hashes(self) -> list[BlockHash]:
        """The chained hashes of the full blocks (see the class docstring); do not mutate."""
        if self._hashes_pending:
            self._hash_new_blocks()
        return self._block_hashes

    def _hash_new_blocks(self) -> None:
        """Hash every full block not hashed yet and note when the next one fills.

        A hasher built by :func:`~kvframe.core.hashing.make_block_hasher` carries
        its ``block_size``; with it, appending a token that fills no block skips
        the hasher entirely (15 of 16 decode tokens at block size 16). A hasher
        without one is asked after every append.
        """
        hasher = self.block_hasher
        assert hasher is not None
        self._hashes_pending = False  # before the call: the hasher reads block_hashes
        hashes = self._block_hashes
        hashes.extend(hasher(self))
        block_size = getattr(hasher, "block_size", 1)
        self.next_hash_at = (len(hashes) + 1) * block_size

    # ----------------------------------------------------------------- tokens

    def append_output_token_ids(self, token_ids: int | list[int]) -> None:
        """Append generated tokens and hash any block they complete."""
        all_token_ids = self.all_token_ids
        if token_ids.__class__ is int:
            self.output_token_ids.append(token_ids)  # type: ignore[arg-type]
            if all_token_ids.__class__ is list:
                all_token_ids.append(token_ids)  # type: ignore[union-attr, arg-type]
            self.num_tokens += 1
            self.num_output_tokens += 1
        else:
            if isinstance(token_ids, int):  # an int subclass (numpy, bool)
                token_ids = [token_ids]
            self.output_token_ids.extend(token_ids)
            if all_token_ids.__class__ is list:
                all_token_ids.extend(token_ids)  # type: ignore[union-attr]
            self.num_output_tokens = len(self.output_token_ids)
            self.num_tokens = self.num_prompt_tokens + self.num_output_tokens
        if self.num_tokens >= self.next_hash_at:
            self._hash_new_blocks()

    def restart_with_prompt(self, num_kept_tokens: int, new_token_ids: Sequence[int]) -> None:
        """Make the first ``num_kept_tokens`` tokens plus ``new_token_ids`` the prompt,
        with no outputs: a streaming-input session taking its next chunk.

        The hashes of the blocks wholly inside the kept tokens stay (their tokens
        did not change); later ones are dropped and hashed again, from the new
        tokens, when ``block_hashes`` is next read. Counters the scheduler owns
        (``num_computed_tokens`` and the rest) are the caller's to set.
        """
        if not 0 <= num_kept_tokens <= self.num_tokens:
            raise ValueError(
                f"request {self.request_id!r}: cannot keep {num_kept_tokens} of its "
                f"{self.num_tokens} tokens"
            )
        prompt = list(self.all_token_ids[:num_kept_tokens])
        prompt.extend(new_token_ids)
        self.prompt_token_ids = prompt
        self.num_prompt_tokens = self.num_tokens = len(prompt)
        self.output_token_ids = []
        self.num_output_tokens = 0
        self.all_token_ids = list(prompt)
        self.spec_token_ids = []
        hasher = self.block_hasher
        if hasher is not None:
            block_size = getattr(hasher, "block_size", None)
            if block_size:
                del self._block_hashes[num_kept_tokens // block_size :]
            else:
                self._block_hashes.clear()
            self._hashes_pending = True
            self.next_hash_at = _NEVER

    @property
    def num_tokens_with_spec(self) -> int:
        """Tokens including the draft tokens proposed for the next step."""
        return self.num_tokens + len(self.spec_token_ids)

    # ----------------------------------------------------------------- status

    def is_finished(self) -> bool:
        return self.status > RequestStatus.PREEMPTED

    def get_finished_reason(self) -> str | None:
        """``"stop"``, ``"length"`` or ``"abort"`` once finished, else ``None``."""
        return _FINISHED_REASONS.get(self.status)

    def __lt__(self, other: Request) -> bool:
        """Priority order: lower ``priority`` first, then earlier arrival, then id.

        The final tie-break on object identity makes the order total, so a heap
        never has to compare anything else.
        """
        if self.priority != other.priority:
            return self.priority < other.priority
        if self.arrival_time != other.arrival_time:
            return self.arrival_time < other.arrival_time
        if self.request_id != other.request_id:
            return self.request_id < other.request_id
        return id(self) < id(other)

    def __hash__(self) -> int:
        """Identity, as ``object``'s: requests go in sets by identity. Spelled out for
        mypyc (kvframe.hot_modules), which gives a class defining ``__lt__`` no hash of
        its own; the interpreted class drops it again below (object's C slot, no call)."""
        return object.__hash__(self)

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, status={self.status.name}, "
            f"num_tokens={self.num_tokens}, num_computed_tokens={self.num_computed_tokens})"
        )


if __file__.endswith(".py"):  # interpreted (not the mypyc build): object's own identity hash
    delattr(Request, "__hash__")
