"""``kvframe run --replicas N --router SPEC``, the fleet keys of kvframe.toml, and a sweep axis."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog

from kvframe.cli import main
from kvframe.config import ConfigError
from kvframe.sweep.cell import run_cell
from kvframe.sweep.spec import parse_sweep

ROUTER = """
import kvframe

class RR(kvframe.Router):
    name = "rr"
    description = "each replica in turn"
    uses_loads = False

    def attach(self, fleet):
        self.n, self.i = fleet.num_replicas, -1

    def route(self, request, view):
        self.i = (self.i + 1) % self.n
        return self.i

class Seven(RR):
    def route(self, request, view):
        return 7 if request.request_id == "line-20" else super().route(request, view)
"""


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)
    yield
    structlog.reset_defaults()


@pytest.fixture
def router(write_module: Callable[..., str]) -> str:
    return write_module("fleet_test_routers", ROUTER)


def _run(*argv: str) -> int:
    return main(["-q", "run", "mooncake:conversation", "--limit", "24", *argv])


def test_a_fleet_run_writes_fleet_metrics_and_a_replica_column(
    router: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run("--replicas", "3", "--router", f"{router}:RR", "--out", "out") == 0
    printed = capsys.readouterr().out
    assert "fleet: 3 replicas" in printed
    metrics = json.loads(Path("out/metrics.json").read_text())
    assert metrics["counters"]["fleet_replicas"] == 3
    assert metrics["metadata"]["engine"]["replicas"] == 3
    assert len(metrics["metadata"]["fleet"]["per_replica"]) == 3
    with open("out/requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row["replica"] for row in rows[:6]] == ["0", "1", "2", "0", "1", "2"]


def test_a_router_returning_a_missing_replica_fails_with_partial_results(
    router: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run("--replicas", "4", "--router", f"{router}:Seven", "--out", "out") == 1
    err = capsys.readouterr().err
    assert "returned 7 for request 'line-20'" in err and "range(4)" in err
    metrics = json.loads(Path("out/metrics.json").read_text())
    assert metrics["partial"] is True
    assert 0 < metrics["counters"]["num_requests"] < 24
    assert "interrupted_by" not in metrics["metadata"]


def test_fleet_settings_need_each_other(router: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("--replicas", "2", "--out", "a") == 2
    assert "needs a router" in capsys.readouterr().err
    assert _run("--router", f"{router}:RR", "--out", "b") == 2
    assert "--replicas N is not given" in capsys.readouterr().err
    assert _run("--kv-event-delay", "0.5", "--out", "c") == 2
    assert "fleet's" in capsys.readouterr().err


def test_kvframe_toml_selects_a_fleet(router: str) -> None:
    Path("kvframe.toml").write_text(
        f'router = "{router}:RR"\nreplicas = 2\nload_report_interval = 0.5\n'
    )
    assert _run("--out", "out") == 0
    metrics = json.loads(Path("out/metrics.json").read_text())
    assert metrics["metadata"]["fleet"]["replicas"] == 2
    assert metrics["metadata"]["fleet"]["load_report_interval"] == 0.5


def test_a_sweep_crosses_replicas_and_routers(router: str, tmp_path: Path) -> None:
    spec = parse_sweep(
        {
            "base": {"workload": "mooncake:conversation", "limit": 12, "router": f"{router}:RR"},
            "grid": {"replicas": [1, 2]},
        },
        path=tmp_path / "s.toml",
    )
    assert [cell.settings["replicas"] for cell in spec.cells] == [1, 2]
    outcomes = [run_cell(cell.key, cell.settings) for cell in spec.cells]
    assert [o.status for o in outcomes] == ["done", "done"], outcomes[0].error
    assert [o.metrics["counters"]["fleet_replicas"] for o in outcomes] == [1, 2]


def test_bad_fleet_values_name_their_key() -> None:
    from kvframe.engine import EngineConfig

    with pytest.raises(ConfigError, match="load_report_interval"):
        EngineConfig.from_settings({"load_report_interval": -1})
