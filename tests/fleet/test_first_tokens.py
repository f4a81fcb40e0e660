"""The fleet tells the router each request's first token, once, before its finish.

Dynamo's KV router drops a request's prompt tokens from its worker's prefill
load at the first token (``mark_prefill_completed``); ``dynamo-kv`` does the
same at :meth:`kvframe.Router.on_first_token`, so the fleet must call it at the
time the client sees the token.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from kvframe.contract.routing import FleetInfo, Router
from kvframe.engine import EngineConfig
from kvframe.fleet import Fleet
from kvframe.workloads import load_workload

HEAD = Path(__file__).resolve().parents[1] / "core" / "data" / "mooncake_conversation_head300.jsonl"


class Recording(Router):
    """Each replica in turn; records what the fleet told it."""

    name = "test-recording"
    description = "round-robin that records its signals"
    uses_loads = False

    def attach(self, fleet: FleetInfo) -> None:
        self.n, self.next, self.calls = fleet.num_replicas, 0, []

    def route(self, request: Any, view: Any) -> int:
        choice, self.next = self.next, (self.next + 1) % self.n
        self.calls.append(("route", request.request_id, choice, view.now))
        return choice

    def on_first_token(self, request_id: str, replica: int, now: float) -> None:
        self.calls.append(("first", request_id, replica, now))

    def on_finished(self, request_id: str, replica: int, now: float) -> None:
        self.calls.append(("finished", request_id, replica, now))


def test_every_request_gets_one_first_token_signal_at_its_first_token_time_before_finishing():
    router = Recording()
    # Small: some prompts never fit (ignored, no token), others are preempted and
    # produce their first token again on resuming (not news to the router).
    config = EngineConfig(num_gpu_blocks=200)
    result = Fleet.from_config(config, router, replicas=2).run(load_workload(HEAD, limit=80))
    out = io.StringIO()
    result.summary.write_csv(out)
    import csv

    rows = {r["request_id"]: r for r in csv.DictReader(io.StringIO(out.getvalue()))}
    seen: dict[str, list[str]] = {}
    for kind, request_id, replica, now in router.calls:
        seen.setdefault(request_id, []).append(kind)
        row = rows[request_id]
        assert int(row["replica"]) == replica
        if kind == "first":
            assert now == float(row["first_token_time"])
    assert result.summary.counters["num_preemptions"] > 0
    assert len(seen) == 80
    for request_id, kinds in seen.items():
        # A request the pool cannot hold finishes (ignored) without a token: no signal.
        had_token = rows[request_id]["first_token_time"] != ""
        assert kinds == (["route", "first", "finished"] if had_token else ["route", "finished"])
    assert {len(kinds) for kinds in seen.values()} == {2, 3}
