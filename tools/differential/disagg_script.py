"""A scripted NIXL-like connector for prefill/decode disaggregation, one script for both sides.

The disaggregation harness (``disagg.py``) drives vLLM's own ``Scheduler`` and
kvframe's with the same seeded script and the same connector rules, and
compares them step for step. This module imports neither kvframe nor vLLM:
both drivers import it and wrap :class:`NixlRules` in their own connector
interface (vLLM's ``KVConnectorBase_V1``, kvframe's ``SchedulerConnector``).

The scheduler-side rules are ``NixlConnectorScheduler``'s (vLLM 0.19.1 and
0.33.0, ``nixl_connector.py``):

* a request with ``do_remote_prefill`` (the decode side, a *consumer*) asks for
  every prompt token past its local prefix hit, loaded asynchronously; after
  allocation only the blocks its own prefix cache missed are loaded (the
  unhashed ones), and ``do_remote_prefill`` is cleared so a retry computes
  locally;
* a request with ``do_remote_decode`` (the prefill side, a *producer*) that
  finishes by length (its one token) keeps its blocks until the transfer to
  the decode side is done (``request_finished`` returns ``True``; the worker
  reports it in ``finished_sending``); one aborted, or finished otherwise,
  frees them at once.

The worker side is scripted (:class:`ScriptedWorker`): a load started in step
``s`` lands ``delay`` steps later (reported in ``finished_recving``), or fails
from one of its blocks on (``invalid_block_ids``, then ``finished_recving``); a
send lands ``delay`` steps after the producer finished.
"""

from __future__ import annotations

import random
from typing import Any

CONFIG: dict[str, Any] = {
    "block_size": 4,
    "num_gpu_blocks": 48,
    "max_num_seqs": 4,
    "max_num_batched_tokens": 32,
    "max_model_len": 256,
    "long_prefill_token_threshold": 0,
    "enable_chunked_prefill": True,
    "enable_prefix_caching": True,
}
ROLES = ("producer", "consumer")


def make_script(seed: int, role: str, num_requests: int = 10) -> dict[str, Any]:
    """A seeded script for one instance: its requests, transfer delays, aborts, failures.

    ``role`` is ``producer`` (every request ``do_remote_decode``, ``max_tokens`` 1,
    some plain requests mixed in) or ``consumer`` (``do_remote_prefill`` requests
    whose prompts share prefixes, so the decode side's own cache hits, and some
    plain ones that warm it).
    """
    if role not in ROLES:
        raise ValueError(f"role {role!r}: one of {', '.join(ROLES)}")
    rng = random.Random(seed * 2 + ROLES.index(role))
    prefixes = [[rng.randrange(1000) for _ in range(rng.choice((8, 12, 16)))] for _ in range(3)]
    requests = []
    step = 0
    for index in range(num_requests):
        step += rng.choice((0, 0, 1, 2))
        prompt = list(rng.choice(prefixes)) + [
            rng.randrange(1000) for _ in range(rng.randrange(1, 14))
        ]
        plain = rng.random() < 0.25
        spec: dict[str, Any] = {
            "request_id": f"{role[0]}{index}",
            "arrival_step": step,
            "prompt_token_ids": prompt,
            "max_tokens": rng.randrange(2, 6),
            "params": None,
            "delay": rng.randrange(1, 5),
            "abort_after": rng.randrange(0, 5) if rng.random() < 0.3 else None,
            "fail_block": None,
        }
        if not plain and role == "producer":
            spec["params"] = {"do_remote_decode": True}
            spec["max_tokens"] = 1
        elif not plain:
            spec["params"] = {"do_remote_prefill": True, "remote_block_ids": [1]}
            if rng.random() < 0.25:
                spec["fail_block"] = rng.randrange(0, 3)
        requests.append(spec)
    return {"seed": seed, "role": role, "config": dict(CONFIG), "requests": requests}


class NixlRules:
    """``NixlConnectorScheduler``'s decisions over plain values (see the module)."""

    def __init__(self) -> None:
        self.loads_to_start: dict[str, list[int]] = {}
        """Loads decided since the last metadata, by request: the GPU blocks to fill."""
        self.sends_started: list[tuple[str, list[int]]] = []
        """Producers that finished holding blocks for the decode side, in order."""
        self.started: dict[str, list[int]] = {}
        """The loads of the last metadata, until the harness takes them."""

    def matched(
        self, params: dict[str, Any] | None, num_prompt_tokens: int, num_computed: int
    ) -> tuple[int, bool]:
        """``get_num_new_matched_tokens``: the remote prompt past the local hit, async."""
        if params is not None and params.get("do_remote_prefill"):
            count = num_prompt_tokens - num_computed
            if count > 0:
                return count, True
        return 0, False

    def after_alloc(
        self,
        request_id: str,
        params: dict[str, Any] | None,
        unhashed_block_ids: list[int],
        num_external_tokens: int,
    ) -> None:
        """``update_state_after_alloc``: load into the blocks the local cache missed."""
        if not params or not params.get("do_remote_prefill"):
            return
        if params.get("remote_block_ids"):
            self.loads_to_start[request_id] = unhashed_block_ids if num_external_tokens > 0 else []
        params["do_remote_prefill"] = False

    def finished(
        self,
        request_id: str,
        params: dict[str, Any] | None,
        length_capped: bool,
        block_ids: list[int],
    ) -> bool:
        """``request_finished``: whether the blocks wait for the send to the decode side."""
        if not params:
            return False
        if params.get("do_remote_prefill"):
            params["do_remote_prefill"] = False
            return False
        if not params.get("do_remote_decode") or not length_capped:
            return False
        if block_ids:
            self.sends_started.append((request_id, list(block_ids)))
            return True
        return False

    def take_meta(self) -> dict[str, list[int]]:
        """The loads to start this step (``build_connector_meta``), emptied."""
        loads, self.loads_to_start = self.loads_to_start, {}
        self.started = loads
        return loads

    def take_started(self) -> dict[str, list[int]]:
        """The loads the last metadata started (for the worker and the record), emptied."""
        started, self.started = self.started, {}
        return started


class ScriptedWorker:
    """The worker side: when each transfer lands or fails, by the script."""

    def __init__(self, script: dict[str, Any]) -> None:
        self._specs = {s["request_id"]: s for s in script["requests"]}
        self._due: list[tuple[int, str, str, list[int]]] = []
        """``(step, kind, request id, blocks)`` of the transfers in flight."""

    def started(
        self, step: int, loads: dict[str, list[int]], sends: list[tuple[str, list[int]]]
    ) -> None:
        """Transfers that start in ``step``: reported done ``delay - 1`` steps later."""
        for request_id, blocks in sorted(loads.items()):
            # No blocks to load: NIXL's worker only tells the prefill side, and
            # reports nothing to this scheduler.
            if blocks:
                due = step + self._specs[request_id]["delay"] - 1
                self._due.append((due, "recv", request_id, blocks))
        for request_id, blocks in sends:
            self._due.append((step + self._specs[request_id]["delay"], "send", request_id, blocks))

    def landed(self, step: int) -> tuple[list[str], list[str], list[int]]:
        """``(finished_sending, finished_recving, invalid_block_ids)`` reported by ``step``."""
        sending: list[str] = []
        recving: list[str] = []
        invalid: list[int] = []
        keep = []
        for due in self._due:
            at, kind, request_id, blocks = due
            if at > step:
                keep.append(due)
                continue
            if kind == "send":
                sending.append(request_id)
                continue
            recving.append(request_id)
            fail = self._specs[request_id]["fail_block"]
            if fail is not None and fail < len(blocks):
                invalid.extend(blocks[fail:])
        self._due = keep
        return sorted(sending), sorted(recving), sorted(invalid)

    def busy(self) -> bool:
        """Transfers still in flight."""
        return bool(self._due)
