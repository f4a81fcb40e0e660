"""Drive an eviction policy the way the GPU prefix cache does: through the real tier.

The suite does not re-create the GPU tier's call pattern (which keys it
inserts, when it touches, what it asks to evict): it builds kvframe's own
:class:`~kvframe.core.kv_cache_manager.KVCacheManager` with the policy under
test ordering its cached blocks (``--gpu-eviction``), and runs requests with
shared prefixes through it. Whatever the tier's pattern is in this version of
kvframe is what the policy is checked against.

What can go wrong shows up as the tier failing: an allocation the tier
could make (enough blocks free) that raises because ``evict`` refused or
returned blocks in use, or free-block accounting that no longer adds up
because a victim was returned twice or was not idle.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence, Set
from typing import Any

from kvframe.testing.common import ContractViolation, PluginTarget, fmt

__all__ = ["GPU_BLOCK_SIZE", "GPU_NUM_BLOCKS", "GPUTierRun", "gpu_tier_steps"]

GPU_BLOCK_SIZE = 2
"""Tokens per block: small, so short prompts span several blocks."""

GPU_NUM_BLOCKS = 13
"""Blocks in the tier (block 0 is the null block): 12 usable, so a few requests fill it."""

_PREFIXES = tuple(tuple(10_000 * (g + 1) + i for i in range(16)) for g in range(3))


def _short(key: object) -> str:
    """A policy key of the GPU tier, readable: ``block 5`` (its content hash elided)."""
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], int):
        return f"block {key[1]}"
    text = fmt(key)
    return text if len(text) <= 12 else text[:10] + ".."


class _Recorder:
    """Passes the tier's calls to the policy and keeps the last few, for messages.

    Every method of the policy is reached through ``__getattr__`` except the
    five operations, ``on_hit`` and ``on_release``, which are recorded (so the
    tier calls ``on_release`` for every policy here; the default does nothing).
    """

    def __init__(self, policy: Any, calls: list[str]) -> None:
        self._policy = policy
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)

    def get(self, key: Hashable) -> Any:
        return self._policy.get(key)

    def insert(self, key: Hashable, block: Any) -> None:
        self._calls.append(f"insert({_short(key)})")
        self._policy.insert(key, block)

    def remove(self, key: Hashable) -> None:
        self._calls.append(f"remove({_short(key)})")
        self._policy.remove(key)

    def on_hit(self, key: Hashable) -> None:
        self._calls.append(f"on_hit({_short(key)})")
        self._policy.on_hit(key)

    def on_release(self, chain: Sequence[tuple[Hashable, int]], num_tokens: int) -> None:
        shown = ", ".join(f"{_short(k)}@{t}" for k, t in chain)
        self._calls.append(f"on_release([{shown}], {num_tokens})")
        self._policy.on_release(chain, num_tokens)

    def touch(self, keys: Iterable[Hashable]) -> None:
        keys = list(keys)
        self._calls.append(f"touch([{', '.join(_short(k) for k in keys)}])")
        self._policy.touch(keys)

    def evict(self, n: int, protected: Set[Hashable]) -> Any:
        victims = self._policy.evict(n, protected)
        shown = (
            "None"
            if victims is None
            else "[" + ", ".join(_short(v[0]) for v in victims if isinstance(v, tuple)) + "]"
        )
        self._calls.append(f"evict({n}) -> {shown}")
        return victims


def gpu_tier_steps() -> Any:
    """Hypothesis strategy: request starts (prefix group, shared length, own length), finishes."""
    from hypothesis import strategies as st

    start = st.tuples(st.just("start"), st.integers(0, 2), st.integers(0, 12), st.integers(0, 7))
    return st.lists(
        st.one_of(start, start, st.tuples(st.just("finish"), st.integers(0, 7))),
        max_size=30,
    )


class GPUTierRun:
    """One policy ordering a real GPU tier, driven by request starts and finishes."""

    def __init__(self, target: PluginTarget) -> None:
        from kvframe.core.hashing import make_block_hasher
        from kvframe.core.kv_cache_manager import KVCacheManager

        self.target = target
        self.calls: list[str] = []
        self.history: list[str] = []
        self.policy = target.create(GPU_NUM_BLOCKS)
        self.manager = KVCacheManager(
            GPU_NUM_BLOCKS,
            GPU_BLOCK_SIZE,
            4096,
            eviction_policy=_Recorder(self.policy, self.calls),  # type: ignore[arg-type]
        )
        self.hasher = make_block_hasher(GPU_BLOCK_SIZE)
        self.live: list[Any] = []
        self.count = 0

    def fail(self, what: str, rule: str) -> ContractViolation:
        calls = self.calls[-12:]
        more = f"... {len(self.calls) - len(calls)} earlier, " if len(self.calls) > 12 else ""
        return ContractViolation(
            f"on the GPU tier ({GPU_NUM_BLOCKS - 1} usable blocks of {GPU_BLOCK_SIZE} tokens, "
            f"--gpu-eviction {self.target.spec or self.target.cls.name}), after "
            f"{', '.join(self.history) or '(nothing)'}\n{what}\n{rule}\n"
            f"the tier's last calls on the policy: {more}{', '.join(calls) or '(none)'}"
        )

    def run(self, steps: Sequence[tuple[Any, ...]]) -> None:
        __tracebackhide__ = True
        for step in steps:
            if step[0] == "start":
                self._start(*step[1:])
            elif self.live:
                self._finish(self.live.pop(step[1] % len(self.live)))
        while self.live:
            self._finish(self.live.pop())
        self._check(reset=True)

    def _start(self, group: int, shared: int, own: int) -> None:
        from kvframe.domain.request import Request

        self.count += 1
        request_id = f"r{self.count}"
        prompt = [*_PREFIXES[group][:shared], *(100_000 * self.count + i for i in range(own))]
        if not prompt:
            prompt = [100_000 * self.count]
        request = Request(request_id, prompt, 1, block_hasher=self.hasher)
        manager = self.manager
        text = f"start {request_id} ({len(prompt)} tokens, {shared} shared with group {group})"
        try:
            hits, num_hit_tokens = manager.get_computed_blocks(request)
            new = len(prompt) - num_hit_tokens
            if new == 0:  # a full hit still computes its last token
                hits, num_hit_tokens, new = hits[:-1], num_hit_tokens - GPU_BLOCK_SIZE, 2
            free_before = manager.num_free_blocks
            blocks = manager.allocate_slots(
                request, new, num_new_computed_tokens=num_hit_tokens, new_computed_blocks=hits
            )
        except ContractViolation:
            raise
        except Exception as err:
            self.history.append(text)
            raise self._explain(err) from err
        if blocks is None:
            self.history.append(text + " (no room)")
        else:
            self.history.append(text)
            self.live.append(request)
            if manager.num_free_blocks > free_before:
                raise self.fail(
                    "the free-block count grew during an allocation",
                    "Victims must be distinct blocks the policy holds.",
                )
        self._check()

    def _finish(self, request: Any) -> None:
        self.history.append(f"finish {request.request_id}")
        try:
            self.manager.free(request)
        except Exception as err:
            raise self._explain(err) from err
        self._check()

    def _explain(self, err: Exception) -> ContractViolation:
        text = str(err)
        if isinstance(err, RuntimeError) and (
            "could not evict" in text or "although it holds" in text
        ):
            return self.fail(
                f"the tier raised {type(err).__name__}: {err}",
                "The refusal rule: evict(n, protected) returns n blocks whenever the policy "
                "holds n idle, unprotected blocks, unless the class declares may_refuse = True "
                "(which the GPU tier rejects at selection time); what on_release told it "
                "changes nothing about that.",
            )
        if isinstance(err, AssertionError):
            return self.fail(
                f"the tier's own check failed: {err!r} (a victim was in use, or not a block "
                "the tier gave the policy)",
                "evict never returns a block whose ref_cnt != 0.",
            )
        return self.fail(
            f"the tier raised {type(err).__name__}: {err}",
            "The five operations must accept the calls the tier makes (keys are hashable "
            "tuples, touch gets any iterable).",
        )

    def _check(self, reset: bool = False) -> None:
        __tracebackhide__ = True
        manager = self.manager
        pool = manager.block_pool
        idle = sum(1 for b in pool.blocks if not b.is_null and b.ref_cnt == 0)
        held = {b.block_id for blocks in manager.req_to_blocks.values() for b in blocks}
        if manager.num_free_blocks != idle or idle + len(held) != GPU_NUM_BLOCKS - 1:
            raise self.fail(
                f"block accounting broke: {manager.num_free_blocks} free blocks reported, {idle} "
                f"with ref_cnt 0, {len(held)} held",
                "Victims must be distinct, idle blocks the policy holds.",
            )
        if reset:
            self.history.append("reset_prefix_cache()")
            try:
                manager.reset_prefix_cache()
            except Exception as err:
                raise self._explain(err) from err
