"""``kvframe.run`` / ``kvframe.sweep`` / ``kvframe.compare``: the notebook API (kvframe.api).

Each result is checked against what the CLI writes for the same selection, so the API
cannot drift from ``kvframe run`` / ``kvframe compare --csv``.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import structlog

import kvframe
from kvframe.cli import main
from kvframe.config import ConfigError
from kvframe.engine.metrics import CSV_COLUMNS
from kvframe.engine.steplog import STEP_COLUMNS

pd = pytest.importorskip("pandas")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.chdir(tmp_path)  # no stray kvframe.toml; files land here
    yield
    structlog.reset_defaults()


@pytest.fixture
def chat(chat_trace: Path) -> str:
    """The shared 40-request chat trace (tests/conftest.py), as the string a notebook passes."""
    return str(chat_trace)


def _decisions(counters: dict) -> dict:
    return {k: v for k, v in counters.items() if "wall" not in k}


def test_run_gives_the_cli_runs_counters_and_requests(chat: str, capsys) -> None:
    args = ("--scheduler", "priority", "--num-gpu-blocks", "48")
    assert main(["-q", "run", chat, *args, "--out", "cli"]) == 0
    capsys.readouterr()
    result = kvframe.run(chat, scheduler="priority", num_gpu_blocks=48)
    cli = json.loads(Path("cli/metrics.json").read_text())
    assert _decisions(result.counters) == _decisions(cli["counters"])
    assert result.metadata["engine"] == cli["metadata"]["engine"]
    with open("cli/requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    frame = result.requests
    assert list(frame.columns) == list(CSV_COLUMNS)
    assert frame["request_id"].tolist() == [r["request_id"] for r in rows]
    assert frame["num_cached_tokens"].tolist() == [int(r["num_cached_tokens"]) for r in rows]
    # The table the CLI prints, and what ran.
    text = result.table()
    assert "kvframe run summary" in text and "vLLM target: 0.19.1, synchronous" in text
    assert "scheduler priority" in text and "core: " in text


def test_the_steps_table_adds_up_to_the_summary(chat: str) -> None:
    result = kvframe.run(chat, num_gpu_blocks=48)
    steps, c = result.steps, result.counters
    assert list(steps.columns) == list(STEP_COLUMNS)
    assert len(steps) == c["num_steps"] and steps["step"].tolist() == list(range(1, len(steps) + 1))
    assert steps["num_generated_tokens"].sum() == c["generation_tokens_total"]
    assert steps["num_computed_tokens"].sum() == c["computed_tokens_total"]
    assert (steps["end_seconds"] >= steps["start_seconds"]).all()
    assert steps["start_seconds"].is_monotonic_increasing
    # Not recorded: an empty table of the same columns, and the same decisions.
    lean = kvframe.run(chat, num_gpu_blocks=48, record_steps=False)
    assert lean.steps.empty and list(lean.steps.columns) == list(STEP_COLUMNS)
    assert _decisions(lean.counters) == _decisions(c)


def test_settings_merge_over_kvframe_toml_as_the_cli_flags_do(chat: str) -> None:
    Path("kvframe.toml").write_text('scheduler = "priority"\nnum_gpu_blocks = 48\n')
    from_file = kvframe.run(chat)
    assert from_file.metadata["engine"]["scheduling"] == "priority"
    assert from_file.metadata["config_file"] == str(Path("kvframe.toml").resolve())
    overridden = kvframe.run(chat, scheduler="fcfs")
    assert overridden.metadata["engine"]["scheduling"] == "fcfs"
    assert overridden.metadata["engine"]["num_gpu_blocks"] == 48
    ignored = kvframe.run(chat, config=False)
    assert ignored.metadata["config_file"] is None
    assert ignored.metadata["engine"]["scheduling"] == "fcfs"
    mapping = kvframe.run(chat, config={"scheduler": "priority", "num_gpu_blocks": 96})
    assert mapping.metadata["engine"]["num_gpu_blocks"] == 96


def test_a_misspelt_setting_is_the_clis_error_with_a_did_you_mean(chat: str) -> None:
    with pytest.raises(ConfigError, match=r"kvframe.run\(\), key 'num_gpu_blcks'.*did you mean"):
        kvframe.run(chat, num_gpu_blcks=48)
    with pytest.raises(ConfigError, match="unknown scheduling policy 'fcsf'"):
        kvframe.run(chat, scheduler="fcsf")
    with pytest.raises(ConfigError, match="limit must be >= 1"):
        kvframe.run(chat, limit=0)


def test_a_saved_run_reads_back_without_kvframe_and_compares(chat: str) -> None:
    result = kvframe.run(chat, num_gpu_blocks=48, out="saved")
    names = {p.name for p in Path("saved").iterdir()}
    assert {"metrics.json", "requests.csv", "engine_steps.csv"} <= names
    # Parquet beside the CSVs: the same tables, read with pandas alone.
    pytest.importorskip("pyarrow")
    assert {"requests.parquet", "engine_steps.parquet"} <= names
    pd.testing.assert_frame_equal(pd.read_parquet("saved/requests.parquet"), result.requests)
    pd.testing.assert_frame_equal(pd.read_parquet("saved/engine_steps.parquet"), result.steps)
    assert len(pd.read_csv("saved/engine_steps.csv")) == len(result.steps)
    with pytest.raises(ConfigError, match="already holds a run"):
        result.save("saved")
    with pytest.raises(ConfigError, match="already holds a run"):  # before any replay
        kvframe.run(chat, num_gpu_blocks=48, out="saved", progress=pytest.fail)
    result.save("saved", force=True)
    # kvframe compare reads the directory like a kvframe run --out one.
    (row,) = kvframe.compare("saved").to_dict("records")
    assert row["status"] == "done" and row["num_steps"] == result.counters["num_steps"]


SWEEP = """
[sweep]
db = "results.sqlite"
[base]
workload = "chat.jsonl"
[grid]
num_gpu_blocks = [48, 96]
[[cells]]
scheduler = "fcfs"
[[cells]]
scheduler = "priority"
[[cells]]
scheduler = "no-such-policy"
"""


def test_a_sweep_is_one_call_and_one_dataframe(chat: str, capsys) -> None:
    Path("sweep.toml").write_text(SWEEP)
    frame = kvframe.sweep("sweep.toml", jobs=2)
    assert frame["cell"].tolist() == [1, 2, 3, 4, 5, 6]
    assert frame["status"].tolist() == ["done"] * 4 + ["failed"] * 2
    assert frame.loc[4, "error"].startswith("ConfigError")
    # The rows are kvframe compare --csv's, from the same database.
    assert main(["compare", "results.sqlite", "--csv"]) == 0
    cli = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    by_name = {r["name"]: r for r in cli}
    for row in frame.to_dict("records"):
        if row["status"] == "done":
            mean = by_name[row["name"]]["time_to_first_token_seconds.mean"]
            assert row["time_to_first_token_seconds.mean"] == pytest.approx(float(mean))
    # Called again it resumes: nothing new runs, the same rows come back.
    again = kvframe.sweep("sweep.toml")
    pd.testing.assert_frame_equal(
        again.drop(columns="wall_seconds"), frame.drop(columns="wall_seconds")
    )
    # Every request of every run, stacked, with the settings as columns.
    requests = kvframe.api.requests("results.sqlite")
    assert set(requests["run"]) == set(frame.loc[frame["status"] == "done", "name"])
    assert len(requests) == 4 * 40 and "num_gpu_blocks" in requests.columns


def test_kvframe_compare_and_sweep_are_callable_however_they_were_imported(tmp_path: Path):
    script = textwrap.dedent(
        """
        import kvframe
        assert callable(kvframe.compare) and callable(kvframe.sweep)  # not imported yet
        assert kvframe.api.requests is not None  # the module, on first access
        import kvframe.compare.table
        from kvframe.sweep.spec import load_sweep
        assert callable(kvframe.compare) and callable(kvframe.sweep)
        assert kvframe.compare.table.flat_metrics and kvframe.sweep.spec.load_sweep is load_sweep
        import sys
        assert "pandas" not in sys.modules
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def test_without_pandas_the_error_names_the_extra(
    chat: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = kvframe.run(chat, num_gpu_blocks=48)  # the run itself needs no pandas
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"pip install 'kvframe\[frames\]'"):
        result.requests  # noqa: B018 - the access is the test
    with pytest.raises(ImportError, match=r"kvframe.compare\(...\) returns pandas DataFrames"):
        kvframe.compare("nowhere")
    assert result.counters["num_requests"] == 40


def test_a_stall_returns_the_partial_result_and_warns(
    conversation_trace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    Path("stall_policy.py").write_text(
        textwrap.dedent(
            """
            import kvframe
            from kvframe_fcfs import FCFSPolicy

            class NeverAdmitsLong(FCFSPolicy):
                name = "never-admits-long"

                def on_arrival(self, request):
                    if request.num_prompt_tokens > 4000:
                        request.status = kvframe.RequestStatus.WAITING_FOR_REMOTE_KVS
            """
        )
    )
    monkeypatch.syspath_prepend(".")
    with pytest.warns(RuntimeWarning, match="engine stalled at t=.*the result is partial"):
        result = kvframe.run(conversation_trace, limit=30, scheduler="stall_policy:NeverAdmitsLong")
    assert result.partial and result.stalled.startswith("engine stalled")
    finished = result.requests["finish_status"].notna()
    assert 0 < finished.sum() == result.counters["num_requests_finished"] < 30
    assert "PARTIAL: the engine stalled" in result.table()


@pytest.fixture
def conversation_trace() -> str:
    return "mooncake:conversation"
