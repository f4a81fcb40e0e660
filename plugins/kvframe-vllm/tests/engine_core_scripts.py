"""Seeded random scripts and the first-token scenarios for ``engine_core_harness.py``.

The hand-written scenarios there each aim at one thing; a random script mixes
everything a client and an operator can do to a running engine -- plain
requests with shared prefixes, priorities and ``max_tokens`` from 1 up,
streaming-input sessions (opened, fed chunks while running or waiting,
closed), aborts in whatever phase a request happens to be in (also while the
model runs), pauses in every mode with and without clearing the cache,
resets with and without running requests -- and steps the engine between
them. Every choice comes from ``random.Random(seed)`` and the script's own
bookkeeping, never from the engine's state, so both sides (vLLM's scheduler
and the bridge) get exactly the same calls and any difference in the records
is the schedulers'.

Request sizes keep each request under the pool (``MAX_MODEL_LEN``) so that no
request is cut by the model length, and a session is closed before its
tokens could reach it.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from typing import Any

__all__ = ["BLOCK_SIZE", "SEEDS", "first_token", "random_script", "stale_session_block", "token"]

BLOCK_SIZE = 16
"""The engine's block size (the harness builds its cache with it)."""
SEEDS = range(20)
"""The seeds the tests run (``--seeds=A:B`` picks others)."""
SESSION_BUDGET = 240
"""A session is closed before its prompt chunks and outputs could pass this many
tokens (the pool holds 304: no session is cut by ``max_model_len``)."""


def token(request_id: str, position: int) -> int:
    """The fake model's sample for output ``position`` of ``request_id``."""
    return 100 + (zlib.crc32(request_id.encode()) + 31 * position) % 1000


def _prompt(seed: int, length: int, shared: int = 0) -> list[int]:
    """``shared`` leading tokens common to every prompt, then ones unique to ``seed``."""
    return [7 + (i % 50) for i in range(shared)] + [
        1000 + (seed * 97 + i * 13) % 40000 for i in range(length - shared)
    ]


class _Script:
    """One random script's bookkeeping: ids handed out, open sessions, the clock."""

    def __init__(self, h: Any, seed: int) -> None:
        self.h = h
        self.rng = random.Random(seed)
        self.seed = seed
        self.ids: list[str] = []
        self.sessions: dict[str, int] = {}
        """Open session id -> the tokens it may hold so far (an upper bound)."""
        self.clock = 0.0
        self.paused = False
        self.count = 0

    def _next(self) -> float:
        self.clock += 1.0
        self.count += 1
        return self.clock

    def add(self) -> None:
        rng = self.rng
        arrival = self._next()
        rid = f"r{self.count}"
        length = rng.randint(1, 150)
        shared = min(length, rng.choice([0, 0, 16, 32, 48, 40]))
        max_tokens = rng.choice([1, 1, 1, 2, 3, 5, 8, 20, 40])
        self.h.add(
            rid,
            _prompt(self.seed * 1000 + self.count, length, shared),
            max_tokens,
            arrival=arrival,
            priority=rng.randint(0, 3),
        )
        self.ids.append(rid)

    def session(self) -> None:
        rng = self.rng
        arrival = self._next()
        if not self.sessions or rng.random() < 0.35:
            rid = f"s{self.count}"
            length, max_tokens = rng.randint(1, 60), rng.choice([1, 1, 2, 4])
            prompt = _prompt(self.seed * 1000 + self.count, length, min(length, 16))
            self.h.add(rid, prompt, max_tokens, arrival=arrival, resumable=True, tag="chunk")
            self.ids.append(rid)
            self.sessions[rid] = length + max_tokens
            return
        rid = rng.choice(sorted(self.sessions))
        length, max_tokens = rng.randint(1, 30), rng.choice([1, 1, 2, 3])
        held = self.sessions[rid] + length + max_tokens
        if held > SESSION_BUDGET or rng.random() < 0.2:
            self.close(rid)
            return
        self.sessions[rid] = held
        prompt = _prompt(self.seed * 1000 + self.count, length)
        self.h.add(rid, prompt, max_tokens, arrival=arrival, resumable=True, tag="chunk")

    def close(self, rid: str) -> None:
        """vLLM's closing chunk: a request with the session's id, not resumable."""
        del self.sessions[rid]
        self.h.add(rid, [0], 1, arrival=self._next(), tag="close")

    def abort(self, during_step: bool) -> None:
        if not self.ids:
            return
        rid = self.rng.choice(self.ids)
        self.sessions.pop(rid, None)  # an aborted session is gone: its id is free again
        if during_step:
            self.h.abort_during_step(rid)
        else:
            self.h.abort(rid)

    def pause_or_resume(self) -> None:
        if self.paused:
            self.h.resume()
            self.paused = False
            return
        mode = self.rng.choice(["abort", "keep", "wait"])
        clear = self.rng.random() < 0.5
        self.h.pause(mode, clear)
        if mode == "abort":
            self.sessions.clear()  # every request finished, sessions included
        self.paused = True

    def finish(self) -> None:
        """Resume, close every open session, and run the engine dry."""
        if self.paused:
            self.h.resume()
        for rid in sorted(self.sessions):
            self.close(rid)
        self.h.run(limit=400)
        self.h.log.append(["end", self.h.counts()])


def random_script(seed: int) -> Callable[[Any], None]:
    """A scenario: ``seed``'s random script, 30 to 45 actions with steps between."""

    def scenario(h: Any) -> None:
        script = _Script(h, seed)
        rng = script.rng
        for _ in range(rng.randint(30, 45)):
            roll = rng.random()
            if roll < 0.28:
                script.add()
            elif roll < 0.40:
                script.session()
            elif roll < 0.68:
                h.step(rng.randint(1, 4))
            elif roll < 0.75:
                script.abort(during_step=False)
            elif roll < 0.79:
                script.abort(during_step=True)
            elif roll < 0.86:
                script.pause_or_resume()
            elif roll < 0.92:
                h.reset(rng.random() < 0.5)
            else:
                h.step(rng.randint(5, 15))
        script.finish()

    scenario.__doc__ = f"random script, seed {seed}"
    return scenario


def first_token(h: Any) -> None:
    """Requests that finish with their first output token (``max_tokens=1``).

    vLLM 0.33 finalizes such a request's ``PrefillStats`` before it frees its
    blocks, so the prompt's full blocks it cached count as cache-creation
    tokens (48 for a 50-token prompt); the same prompt again hits those 48 and
    creates none. Beside them: one chunked over three steps, one aborted
    mid-prefill, one with a prefix hit on a running request's blocks, and a
    decode running alongside (vLLM 0.19.1 reports ``num_cached_tokens``)."""
    h.add("one", _prompt(81, 50), 1, arrival=0.0)
    h.step(2)
    h.add("again", _prompt(81, 50), 1, arrival=1.0)
    h.add("dec", _prompt(82, 40, shared=32), 6, arrival=2.0)
    h.step()
    h.add("long", _prompt(83, 150, shared=32), 1, arrival=3.0)
    h.add("cut", _prompt(84, 130), 1, arrival=4.0)
    h.step()
    h.abort("cut")
    h.add("hit", _prompt(85, 33, shared=32), 1, arrival=5.0)
    h.run()
    h.add("exact", _prompt(81, 48), 1, arrival=6.0)  # a prompt of whole cached blocks
    h.run()


def stale_session_block(h: Any) -> None:
    """A streaming-input session whose discarded sampled token had filled a block.

    Session ``s`` has a 47-token prompt and ``max_tokens=1``: its one sampled
    token ``t`` is the 48th token and fills block 2, which vLLM's request
    hashes at once (``append_output_token_ids``). The next chunk resumes it
    from its 47 computed tokens: ``t`` is dropped and the chunk's first token
    takes position 47. vLLM 0.33 drops the hashes past the kept tokens with it
    and hashes block 2 again; vLLM 0.19.1 does not
    (``Scheduler._update_request_as_session`` truncates ``_all_token_ids``,
    not ``block_hashes``), so it caches block 2 -- which now holds the
    chunk's token -- under the hash of ``t``. ``probe`` then asks for the
    prompt with ``t`` at position 47: under 0.19.1 it hits 48 tokens, the
    last of which is the chunk's KV, not ``t``'s."""
    prompt = _prompt(91, 47, shared=16)
    h.add("s", prompt, 1, arrival=0.0, resumable=True, tag="chunk")
    h.run()  # s samples t and waits for input
    h.add("s", _prompt(92, 8), 1, arrival=1.0, resumable=True, tag="chunk")
    h.run()  # resumed: block 2 computed with the chunk's first token
    h.add("probe", [*prompt, token("s", 0), *_prompt(93, 10)], 1, arrival=2.0)
    h.run()
    h.add("s", [0], 1, arrival=3.0, tag="close")
    h.run()
