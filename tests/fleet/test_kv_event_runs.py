"""A router reading KV events no longer turns the replicas' decode runs off.

Each step of a run of plain decode steps marks how many KV events it queued
(``FinishTap.mark_kv_events``), so the fleet stamps every event with its own
step's end, as when every step is taken the long way (``step_by_step``). The
router must receive the same events at the same arrivals, with the same
publication times, and ``dynamo-kv`` must choose the same replicas; the view's
batches (``take_kv_event_batches``) must hold what ``take_kv_events`` does.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from kvframe_routers import DynamoKVRouter

from kvframe.engine import EngineConfig
from kvframe.fleet import Fleet, FleetSettings
from kvframe.workloads import load_workload

HEAD = Path(__file__).resolve().parents[1] / "core" / "data" / "mooncake_conversation_head300.jsonl"
TRACE = list(load_workload(HEAD, limit=160).requests)


class Recording(DynamoKVRouter):
    """dynamo-kv that logs every delivered event (replica, publication time, event)."""

    name = "test-recording-dynamo"

    def __init__(self, batches: bool) -> None:
        super().__init__()
        self.batches = batches
        self.log: list[tuple[float, list[tuple[int, float, str]]]] = []

    def costs(self, request: Any, view: Any) -> list[float]:
        if self.batches:
            taken = [(r, t, e) for r, t, evs in view.take_kv_event_batches() for e in evs]
        else:
            taken = [(p.replica, p.time, p.event) for p in view.take_kv_events()]
        self.log.append((view.now, [(r, t, repr(e)) for r, t, e in taken]))
        for replica, _, event in taken:
            self._index.apply(replica, event)
        return super().costs(request, _Taken(view))


class _Taken:
    """The view with its events already taken."""

    def __init__(self, view: Any) -> None:
        self.now = view.now

    def take_kv_events(self) -> tuple[()]:
        return ()

    def take_kv_event_batches(self) -> tuple[()]:
        return ()


def _run(router: Any, delay: float, **config: Any) -> tuple[str, int]:
    fleet = Fleet.from_config(
        EngineConfig(**config), router, replicas=3, settings=FleetSettings(kv_event_delay=delay)
    )
    result = fleet.run(TRACE)
    out = io.StringIO()
    result.summary.write_csv(out)
    runs = sum(engine.num_decode_run_steps for engine in fleet.engines)
    return out.getvalue(), runs


@pytest.mark.parametrize(("delay", "config"), [(0.0, {}), (0.05, {"num_gpu_blocks": 600})])
def test_events_choices_and_results_equal_the_step_by_step_fleets(
    delay: float, config: dict[str, Any]
) -> None:
    long_way = Recording(batches=False)
    csv_long, runs_long = _run(long_way, delay, step_by_step=True, **config)
    runs_router = Recording(batches=True)
    csv_runs, runs = _run(runs_router, delay, **config)
    assert runs_router.log == long_way.log
    assert sum(len(events) for _, events in long_way.log) > 0
    assert csv_runs == csv_long
    assert runs_long == 0 and runs > 0  # the decode runs really ran
