"""One small hand-made workload per fidelity switch: where vLLM 0.19.1 and 0.33.0 part.

Standard library only (both drivers import it). Each workload is built so that
the two releases' rules give different step records early on, and nothing
else in it depends on a rule that changed; ``docs/fidelity.md`` lists them
with the switch (``kvframe.domain.fidelity.Fidelity``) each one shows.

* ``switch-threshold`` (switch A, ``threshold_needs_company``): one request
  alone, a 40-token prompt, budget 32, ``long_prefill_token_threshold`` 8.
  0.19.1 gives it 8 tokens a step; 0.33.0 gives the lone request 32, then 8.
* ``switch-self-preemption`` (switch B, ``self_preemption_continues``, run
  under ``priority``): an unimportant request runs, an urgent one joins it a
  step later, and at step 2 the unimportant one needs a block when none is
  free. It is the priority victim and preempts itself. 0.19.1 ends the running
  loop there, so nothing runs in step 2. 0.33.0 goes on, and the urgent request
  decodes in the blocks just freed.
* ``switch-free-order`` (switch D, ``uncached_freed_first``): a 6-token prompt
  finishes and frees one full (hashed) block and one partial (unhashed) block,
  and then a new request takes two blocks. In 0.19.1 the freed blocks go to
  the back of the free queue, so the new request gets two blocks never used
  before. In 0.33.0 the partial block goes to the front, so the new request
  gets it first. Compare with ``--blocks``.
* ``switch-free-order-nocache``: the same with prefix caching off, where
  0.33.0 puts every freed block at the front.
* ``switch-victim-cursor`` (switch E, ``victim_cursor_by_position``, run under
  ``priority`` with asynchronous scheduling, ``stepping.run_async``): three
  requests decode in a full pool, the least important (r0) first in the
  running list. At step 5 r0's last token is in flight, so the loop skips it;
  r1 then needs a block and r0, before the cursor and unscheduled, is the
  victim. 0.19.1 does not move the cursor back and skips r2 for the step;
  0.33.0 schedules r2 too.
"""

from __future__ import annotations

from typing import Any

Workload = dict[str, Any]

SWITCH_WORKLOADS: dict[str, str] = {
    "switch-threshold": "A: the chunk cap is lifted for a lone request",
    "switch-self-preemption": "B: the running loop goes on after a priority self-preemption",
    "switch-free-order": "D: a freed block without a hash is reused first",
    "switch-free-order-nocache": "D: with prefix caching off every freed block is reused first",
    "switch-victim-cursor": "E: an unscheduled victim before the cursor moves it back (async)",
}


def _config(**overrides: Any) -> dict[str, Any]:
    config = {
        "block_size": 4,
        "num_gpu_blocks": 16,
        "max_num_batched_tokens": 32,
        "max_num_seqs": 4,
        "max_model_len": 128,
        "long_prefill_token_threshold": 0,
        "enable_prefix_caching": True,
        "enable_chunked_prefill": True,
        "reserve_full_sequence": True,
        "policy": "fcfs",
    }
    config.update(overrides)
    return config


def _request(
    rid: str, first: int, n: int, max_tokens: int, step: int, priority: int = 0
) -> dict[str, Any]:
    return {
        "request_id": rid,
        "prompt_token_ids": list(range(first, first + n)),
        "max_tokens": max_tokens,
        "arrival_step": step,
        "arrival_time": step + 0.5 + int(rid[1:]) / 100,
        "priority": priority,
    }


def switch_workload(name: str, vllm: str = "0.19.1") -> Workload:
    """Workload ``name`` (a key of :data:`SWITCH_WORKLOADS`) for vLLM release ``vllm``."""
    if name == "switch-threshold":
        config = _config(long_prefill_token_threshold=8)
        requests = [_request("r0", 100, 40, 3, 0)]
    elif name == "switch-self-preemption":
        config = _config(num_gpu_blocks=5, policy="priority", max_num_seqs=4)
        requests = [
            _request("r0", 100, 7, 6, 0, priority=5),
            _request("r1", 200, 7, 6, 1, priority=0),
        ]
    elif name == "switch-victim-cursor":
        config = _config(num_gpu_blocks=6, policy="priority", async_scheduling=True)
        requests = [
            _request("r0", 100, 7, 5, 0, priority=3),
            _request("r1", 200, 1, 6, 1, priority=2),
            _request("r2", 300, 2, 5, 3, priority=0),
        ]
    elif name in ("switch-free-order", "switch-free-order-nocache"):
        config = _config(enable_prefix_caching=name == "switch-free-order")
        requests = [_request("r0", 100, 6, 1, 0), _request("r1", 200, 7, 1, 2)]
    else:
        raise ValueError(f"unknown switch workload {name!r}; known: {', '.join(SWITCH_WORKLOADS)}")
    config["vllm"] = vllm
    return {"name": f"{name}-{config['policy']}", "config": config, "requests": requests}
