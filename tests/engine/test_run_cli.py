"""``kvframe run`` and ``kvframe gen`` end to end, through ``kvframe.cli.main``."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from kvframe.cli import main
from kvframe.cli.progress import ProgressLine


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Run in a temporary directory (no stray kvframe.toml, runs/ written there)."""
    monkeypatch.chdir(tmp_path)
    yield
    structlog.reset_defaults()  # main() configures logging for the process


def run_cli(*argv: str) -> int:
    return main(["-q", *argv])


def test_run_prints_a_summary_and_writes_metrics_and_requests(
    conversation_trace: str, capsys: pytest.CaptureFixture[str]
):
    code = run_cli(
        "run", str(conversation_trace), "--limit", "12", "--num-gpu-blocks", "8000", "--out", "o"
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "kvframe run summary" in out and "time_to_first_token_seconds" in out
    assert "wrote o/metrics.json and o/requests.csv" in out
    metrics = json.loads(Path("o/metrics.json").read_text())
    assert metrics["partial"] is False
    assert metrics["counters"]["num_requests_finished"] == 12
    assert metrics["metadata"]["engine"]["num_gpu_blocks"] == 8000
    assert metrics["metadata"]["workload"]["format"] == "mooncake"
    with open("o/requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["request_id"] for r in rows] == [f"line-{i}" for i in range(1, 13)]
    assert all(float(r["time_to_first_token_seconds"]) > 0 for r in rows)


def test_default_output_directory_is_named_after_the_trace(
    conversation_trace: str, capsys: pytest.CaptureFixture[str]
):
    assert run_cli("run", str(conversation_trace), "--limit", "3", "--json") == 0
    out, err = capsys.readouterr()
    data = json.loads(out)  # stdout is pure JSON
    assert data["counters"]["num_requests"] == 3
    (run_dir,) = Path("runs").iterdir()
    assert run_dir.name.startswith("mooncake-conversation-")
    assert (run_dir / "metrics.json").is_file() and str(run_dir) in err


def test_no_prefix_caching_flag_turns_hits_off(
    conversation_trace: str, capsys: pytest.CaptureFixture[str]
):
    argv = ["run", str(conversation_trace), "--limit", "10", "--json", "--out", "o"]
    assert run_cli(*argv) == 0
    with_cache = json.loads(capsys.readouterr().out)["counters"]
    assert run_cli(*argv, "--no-prefix-caching", "--force") == 0
    without = json.loads(capsys.readouterr().out)["counters"]
    assert with_cache["prefix_cache_hits"] > 0 and without["prefix_cache_hits"] == 0


def test_malformed_trace_exits_2_with_file_line_and_field(capsys: pytest.CaptureFixture[str]):
    trace = Path("bad.jsonl")
    trace.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
        '{"timestamp": 5, "input_length": "ten", "output_length": 2, "hash_ids": [1]}\n'
    )
    assert run_cli("run", str(trace)) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2: field 'input_length'" in err
    assert "Traceback" not in err
    # --skip-bad-lines runs what is left and says what it skipped.
    assert run_cli("run", str(trace), "--skip-bad-lines", "--out", "o") == 0
    assert "1 malformed trace lines skipped" in capsys.readouterr().out


def test_missing_trace_exits_2(capsys: pytest.CaptureFixture[str]):
    assert run_cli("run", "nope.jsonl") == 2
    assert "no such trace file or bundled workload: nope.jsonl" in capsys.readouterr().err


def test_unknown_scheduler_exits_2_with_a_suggestion(
    conversation_trace: str, capsys: pytest.CaptureFixture[str]
):
    assert run_cli("run", str(conversation_trace), "--limit", "1", "--scheduler", "priorty") == 2
    err = capsys.readouterr().err
    assert "--scheduler: unknown scheduling policy 'priorty'; did you mean 'priority'?" in err
    assert "installed scheduling policies:" in err


def test_eviction_without_an_offload_tier_points_at_gpu_eviction(
    conversation_trace: str, capsys: pytest.CaptureFixture[str]
):
    assert run_cli("run", str(conversation_trace), "--limit", "1", "--eviction", "lru") == 2
    err = capsys.readouterr().err
    assert "no offload tier is selected" in err and "--gpu-eviction lru" in err


def test_gpu_eviction_selects_the_prefix_cache_order(
    conversation_trace: str, capsys: pytest.CaptureFixture[str]
):
    argv = ["run", str(conversation_trace), "--limit", "8", "--num-gpu-blocks", "3000"]
    assert run_cli(*argv, "--json", "--out", "a") == 0
    default = json.loads(capsys.readouterr().out)
    assert run_cli(*argv, "--json", "--out", "b", "--gpu-eviction", "lru") == 0
    lru = json.loads(capsys.readouterr().out)
    assert default["metadata"]["engine"]["gpu_eviction"] is None
    assert lru["metadata"]["engine"]["gpu_eviction"] == "lru"
    assert lru["counters"]["num_requests_finished"] == 8
    assert lru["counters"]["prefix_cache_hits"] > 0


def test_engine_settings_come_from_kvframe_toml_and_flags_override(
    conversation_trace: str, capsys: pytest.CaptureFixture[str]
):
    Path("kvframe.toml").write_text(
        'scheduler = "priority"\nblock_size = 32\nnum_gpu_blocks = 5000\nmax_num_seqs = 4\n'
        "reserve_full_sequence = false\n"
    )
    argv = ["run", str(conversation_trace), "--limit", "4", "--json", "--out", "o"]
    assert run_cli(*argv, "--num-gpu-blocks", "6000") == 0
    engine = json.loads(capsys.readouterr().out)["metadata"]["engine"]
    assert engine["scheduling"] == "priority"
    assert (engine["block_size"], engine["num_gpu_blocks"], engine["max_num_seqs"]) == (
        32,
        6000,
        4,
    )
    assert engine["reserve_full_sequence"] is False
    assert run_cli(*argv, "--reserve-full-sequence", "--scheduler", "fcfs", "--force") == 0
    engine = json.loads(capsys.readouterr().out)["metadata"]["engine"]
    assert engine["reserve_full_sequence"] is True and engine["scheduling"] == "fcfs"


def test_bad_engine_setting_in_kvframe_toml_names_the_key(
    conversation_trace: str, capsys: pytest.CaptureFixture[str]
):
    Path("kvframe.toml").write_text("max_num_seq = 4\n")
    assert run_cli("run", str(conversation_trace), "--limit", "1") == 2
    err = capsys.readouterr().err
    assert "kvframe.toml, key 'max_num_seq': unknown engine setting" in err
    assert "did you mean 'max_num_seqs'" in err


def test_bad_flag_value_names_the_flag(conversation_trace: str, capsys):
    assert run_cli("run", str(conversation_trace), "--kv-memory", "lots") == 2
    assert "--kv-memory: bad value for kv_memory" in capsys.readouterr().err
    assert run_cli("run", str(conversation_trace), "--num-gpu-blocks", "1", "--kv-memory", "1GiB")
    assert "not allowed with argument" in capsys.readouterr().err


def test_ctrl_c_writes_partial_results_and_exits_130(
    conversation_trace: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    calls = 0

    def interrupt(self: ProgressLine, progress) -> None:
        nonlocal calls
        calls += 1
        if calls == 30:
            raise KeyboardInterrupt

    monkeypatch.setattr(ProgressLine, "__call__", interrupt)
    code = run_cli("run", str(conversation_trace), "--limit", "20", "--progress", "--out", "o")
    out, _ = capsys.readouterr()
    assert code == 130
    assert "PARTIAL" in out and "interrupted (SIGINT):" in out
    metrics = json.loads(Path("o/metrics.json").read_text())
    assert metrics["partial"] is True and metrics["counters"]["num_steps"] == 30
    assert Path("o/requests.csv").read_text().count("\n") == 1 + metrics["counters"]["num_requests"]


def test_tracer_flag_writes_a_jsonl_trace(conversation_trace: str):
    code = run_cli(
        "run", str(conversation_trace), "--limit", "5", "--out", "o",
        "--tracer", "jsonl:path=t.jsonl,kv_events=false",
    )  # fmt: skip
    assert code == 0
    events = {json.loads(line)["event"] for line in Path("t.jsonl").read_text().splitlines()}
    assert events == {"step_snapshot", "prefix_cache", "step_decision", "request_finished"}


def test_progress_line_draws_only_on_a_terminal():
    class Tty:
        def __init__(self, tty: bool) -> None:
            self.text, self.tty = "", tty

        def isatty(self) -> bool:
            return self.tty

        def write(self, text: str) -> None:
            self.text += text

        def flush(self) -> None:
            pass

    class Progress:
        num_requests_total, num_requests_finished, now = 10, 4, 12.5
        num_steps, num_running, num_waiting, kv_usage = 100, 3, 2, 0.5

    quiet, loud = Tty(False), Tty(True)
    for stream in (quiet, loud):
        line = ProgressLine(stream, min_interval=0.0)  # type: ignore[arg-type]
        for _ in range(ProgressLine.check_every):
            line(Progress())  # type: ignore[arg-type]
        line.close()
    assert quiet.text == ""  # off a terminal: plain lines, and the first only after 10 s
    assert "4/10 requests" in loud.text and "sim 12.5 s" in loud.text
    assert "\u2501" in loud.text  # rich's bar
    assert loud.text.endswith("\x1b[2K")  # closing erased the line: what follows starts clean


def test_gen_chat_writes_a_workload_that_runs(capsys: pytest.CaptureFixture[str]):
    code = run_cli(
        "gen", "chat", "--out", "w/chat.jsonl", "--requests", "30", "--seed", "7",
        "--rate", "20", "--output-length", "uniform:low=4,high=16",
    )  # fmt: skip
    assert code == 0
    lines = Path("w/chat.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    assert header["generator"] == "chat" and header["params"]["seed"] == 7
    assert len(lines) == 31
    # Same seed, same file.
    assert run_cli("gen", "chat", "--out", "again.jsonl", "--requests", "30", "--seed", "7",
                   "--rate", "20", "--output-length", "uniform:low=4,high=16") == 0  # fmt: skip
    assert Path("again.jsonl").read_text() == Path("w/chat.jsonl").read_text()
    capsys.readouterr()
    assert run_cli("run", "w/chat.jsonl", "--json", "--out", "o") == 0
    counters = json.loads(capsys.readouterr().out)["counters"]
    assert counters["num_requests_finished"] == 30 and counters["prefix_cache_hits"] > 0


def test_gen_chat_rejects_bad_parameters(capsys: pytest.CaptureFixture[str]):
    assert run_cli("gen", "chat", "--out", "x.jsonl", "--shared-fraction", "1.5") == 2
    assert "shared_fraction must be in [0, 1]" in capsys.readouterr().err
    assert run_cli("gen", "chat", "--out", "x.jsonl", "--output-length", "gaussian:mu=3") == 2
    assert "unknown length distribution 'gaussian'" in capsys.readouterr().err


# ==========================================================================
# Output directory, failed runs, what the summary says
# ==========================================================================


def test_an_out_dir_that_cannot_be_created_fails_before_the_run(
    conversation_trace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    from kvframe.engine import Engine

    def never(*args, **kwargs):
        raise AssertionError("the replay must not start")

    monkeypatch.setattr(Engine, "run", never)
    Path("afile").write_text("")
    assert run_cli("run", str(conversation_trace), "--limit", "2", "--out", "afile/o") == 2
    err = capsys.readouterr().err
    assert err.startswith("kvframe run: error: --out: cannot write results to afile/o: afile is a")
    assert "Traceback" not in err


def test_an_earlier_run_is_never_overwritten_without_force(
    conversation_trace: Path, capsys: pytest.CaptureFixture[str]
):
    argv = ["run", str(conversation_trace), "--limit", "2", "--out", "o"]
    assert run_cli(*argv) == 0
    before = Path("o/metrics.json").read_text()
    assert run_cli(*argv, "--max-num-seqs", "1") == 2
    assert "o already holds a run (metrics.json, requests.csv)" in capsys.readouterr().err
    assert Path("o/metrics.json").read_text() == before
    assert run_cli(*argv, "--max-num-seqs", "1", "--force") == 0
    assert json.loads(Path("o/metrics.json").read_text())["metadata"]["engine"]["max_num_seqs"] == 1


def test_a_write_that_fails_after_the_run_prints_the_summary_and_one_error_line(
    conversation_trace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    from kvframe.engine.metrics import MetricsSummary

    def full_disk(self, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(MetricsSummary, "write_json", full_disk)
    assert run_cli("run", str(conversation_trace), "--limit", "3", "--out", "o") == 1
    out, err = capsys.readouterr()
    assert "kvframe run summary" in out and "wrote" not in out
    assert err == "kvframe run: error: could not write the results to o: No space left on device\n"


def test_a_run_where_nothing_could_run_exits_1_saying_why(
    conversation_trace: Path, capsys: pytest.CaptureFixture[str]
):
    code = run_cli("run", str(conversation_trace), "--limit", "3", "--max-model-len", "10")
    out, err = capsys.readouterr()
    assert code == 1
    assert "requests ignored (never ran)" in out
    assert "no request could run: all 3 were ignored" in err


def test_ignored_requests_stay_out_of_latencies_and_token_totals(
    conversation_trace: Path, capsys: pytest.CaptureFixture[str]
):
    argv = ["run", str(conversation_trace), "--limit", "20", "--json"]
    assert run_cli(*argv, "--out", "all", "--max-model-len", "200000") == 0
    everything = json.loads(capsys.readouterr().out)
    assert run_cli(*argv, "--out", "some", "--max-model-len", "20000") == 0
    some = json.loads(capsys.readouterr().out)
    ignored = some["counters"]["num_requests_ignored"]
    assert everything["counters"]["num_requests_ignored"] == 0 and 0 < ignored < 20
    assert some["counters"]["num_requests_finished"] == 20 - ignored
    e2e = some["distributions"]["e2e_request_latency_seconds"]
    assert e2e["count"] == 20 - ignored
    with open("some/requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    ran = [r for r in rows if r["finish_status"] != "ignored"]
    assert len(rows) == 20 and len(ran) == 20 - ignored  # still listed, apart
    # As it was, an ignored request had an end-to-end latency (its refusal time).
    assert all(r["e2e_request_latency_seconds"] == "" for r in rows if r not in ran)
    assert some["counters"]["prompt_tokens_total"] == sum(int(r["num_prompt_tokens"]) for r in ran)


def test_the_summary_names_the_configuration_and_the_config_file(
    conversation_trace: Path, capsys: pytest.CaptureFixture[str]
):
    Path("kvframe.toml").write_text('scheduler = "priority"\n')
    assert run_cli("run", str(conversation_trace), "--limit", "2", "--out", "o") == 0
    out = capsys.readouterr().out
    assert "configuration: preset " in out and "scheduler priority" in out
    assert "offload tier none" in out
    assert "config file: kvframe.toml" in out
    # The times' basis is stated: the cost model's clock, from which preset.
    assert "clock: virtual -- every time above is the cost model's (preset llama3.1-8b-h100)" in out
    metrics = json.loads(Path("o/metrics.json").read_text())
    assert metrics["metadata"]["clock"] == "virtual"
    assert metrics["metadata"]["config_file"] == str(Path("kvframe.toml").resolve())
    assert run_cli("run", str(conversation_trace), "--limit", "2", "--out", "p", "--no-config") == 0
    assert "config file: none" in capsys.readouterr().out
    assert json.loads(Path("p/metrics.json").read_text())["metadata"]["config_file"] is None


def test_progress_off_a_terminal_is_a_plain_line_with_an_eta():
    class Log:
        text = ""

        def isatty(self) -> bool:
            return False

        def write(self, text: str) -> None:
            self.text += text

        def flush(self) -> None:
            pass

    class Progress:
        num_requests_total, num_requests_finished, now = 10, 4, 12.5
        num_steps, num_running, num_waiting, kv_usage = 100, 3, 2, 0.5

    log = Log()
    line = ProgressLine(log, log_interval=0.0)  # type: ignore[arg-type]
    assert line.enabled and not line.live
    for _ in range(ProgressLine.check_every):
        line(Progress())  # type: ignore[arg-type]
    line.close()
    assert log.text.endswith("\n") and "\r" not in log.text
    assert "4/10 requests" in log.text and "ETA " in log.text


def test_eta_is_the_rate_so_far_applied_to_what_is_left():
    from kvframe.cli.progress import eta_text

    assert eta_text(0, 10, 5.0) == "?"
    assert eta_text(4, 10, 20.0) == "0:00:30"


def _old_torch_run(directory: str, run_id: str = "0ld") -> None:
    """What a torch-executor run leaves: its metrics, its outputs and steps, one run id."""
    from kvframe.executors.torch.outputs import write_outputs

    out = Path(directory)
    out.mkdir()
    (out / "metrics.json").write_text(json.dumps({"metadata": {"run_id": run_id}}))
    (out / "requests.csv").write_text("request_id\n")
    write_outputs(out / "outputs.jsonl", {"line-1": [5, 6, 7]}, run_id=run_id)
    (out / "steps.csv").write_text(f"step,run_id\n1,{run_id}\n")


def test_force_replaces_the_whole_earlier_run_and_no_stale_outputs_remain(
    conversation_trace: Path, capsys: pytest.CaptureFixture[str]
):
    _old_torch_run("o")
    assert run_cli("run", str(conversation_trace), "--limit", "3", "--out", "o", "--force") == 0
    assert sorted(p.name for p in Path("o").iterdir()) == ["metrics.json", "requests.csv"]
    run_id = json.loads(Path("o/metrics.json").read_text())["metadata"]["run_id"]
    assert len(run_id) == 32
    # As it was, --force left the torch run's outputs.jsonl beside the new metrics.json and
    # outputs-diff called it "identical". A stale file beside a run is now refused.
    from kvframe.executors.torch.outputs import write_outputs

    write_outputs("o/outputs.jsonl", {"line-1": [5, 6, 7]}, run_id="0ld")
    capsys.readouterr()
    assert run_cli("outputs-diff", "o", "o") == 2
    err = capsys.readouterr().err
    assert "o/outputs.jsonl does not belong to the run in o/metrics.json" in err
    assert run_id in err and "identical" not in err


def test_outputs_of_the_run_beside_them_compare(capsys: pytest.CaptureFixture[str]):
    _old_torch_run("a", "run-a")
    _old_torch_run("b", "run-b")
    assert run_cli("outputs-diff", "a", "b") == 0
    assert "identical: 1 request, 3 generated tokens" in capsys.readouterr().out


def test_force_refuses_a_directory_holding_files_run_did_not_write(
    conversation_trace: Path, capsys: pytest.CaptureFixture[str]
):
    _old_torch_run("o")
    Path("o/notes.txt").write_text("mine")
    assert run_cli("run", str(conversation_trace), "--limit", "3", "--out", "o", "--force") == 2
    err = capsys.readouterr().err
    assert "holds an earlier run and files kvframe run did not write (notes.txt)" in err
    assert sorted(p.name for p in Path("o").iterdir()) == [
        "metrics.json", "notes.txt", "outputs.jsonl", "requests.csv", "steps.csv",
    ]  # fmt: skip


def test_sigterm_writes_partial_results_marked_as_such_and_exits_143(
    conversation_trace: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    """As it was: SIGTERM (timeout, Slurm) killed the run: exit 143, nothing written."""
    import os
    import signal

    calls = 0

    def terminate(self: ProgressLine, progress) -> None:
        nonlocal calls
        calls += 1
        if calls == 30:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(ProgressLine, "__call__", terminate)
    before = signal.getsignal(signal.SIGTERM)
    code = run_cli("run", str(conversation_trace), "--limit", "20", "--progress", "--out", "o")
    out, _ = capsys.readouterr()
    assert code == 143
    assert "PARTIAL" in out and "interrupted (SIGTERM):" in out
    metrics = json.loads(Path("o/metrics.json").read_text())
    assert metrics["partial"] is True and metrics["metadata"]["interrupted_by"] == "SIGTERM"
    assert 30 <= metrics["counters"]["num_steps"] <= 31
    assert Path("o/requests.csv").read_text().count("\n") == 1 + metrics["counters"]["num_requests"]
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is the run's only


def test_gen_rate_inf_writes_a_standard_json_header(capsys: pytest.CaptureFixture[str]):
    """As it was, --rate inf wrote ``"rate": Infinity``, which strict JSON readers refuse."""

    def strict(constant: str) -> None:
        raise ValueError(f"non-standard JSON constant {constant}")

    assert run_cli("gen", "chat", "--out", "-", "--requests", "3", "--rate", "inf") == 0
    header, *records = capsys.readouterr().out.splitlines()
    assert json.loads(header, parse_constant=strict)["params"]["rate"] is None
    assert [json.loads(r)["arrival"] for r in records] == [0.0, 0.0, 0.0]


def test_run_says_which_core_ran_and_both_cores_agree(
    conversation_trace: str, capsys: pytest.CaptureFixture[str]
):
    from kvframe.core.compiled import compiled_core_available

    base = ["run", str(conversation_trace), "--limit", "40", "--num-gpu-blocks", "3000"]
    assert run_cli(*base, "--core", "python", "--out", "py") == 0
    assert "core: python block pool (setting python)" in capsys.readouterr().out
    python = json.loads(Path("py/metrics.json").read_text())
    assert (python["metadata"]["core"], python["metadata"]["engine"]["core"]) == (
        "python",
        "python",
    )
    if not compiled_core_available():
        pytest.skip("the compiled core is not built (scripts/build-core)")
    assert run_cli(*base, "--core", "compiled", "--out", "c") == 0
    assert "core: compiled block pool (setting compiled)" in capsys.readouterr().out
    built = json.loads(Path("c/metrics.json").read_text())
    assert built["metadata"]["core"] == "compiled"

    def decisions(metrics: dict) -> dict:
        return {k: v for k, v in metrics["counters"].items() if "wall" not in k}

    assert decisions(built) == decisions(python)
    assert Path("c/requests.csv").read_text() == Path("py/requests.csv").read_text()


def test_a_bad_core_setting_names_the_key(
    conversation_trace: str, capsys: pytest.CaptureFixture[str]
):
    Path("kvframe.toml").write_text('core = "fast"\n')
    assert run_cli("run", str(conversation_trace), "--limit", "1") == 2
    assert "key 'core': bad value for core: unknown core 'fast'" in capsys.readouterr().err


def test_both_cores_write_the_same_trace_event_for_event(
    conversation_trace: str, capsys: pytest.CaptureFixture[str]
):
    """The jsonl tracer sees every step, snapshot and KV event (stored, removed): the
    compiled core must produce the Python core's file byte for byte."""
    from kvframe.core.compiled import compiled_core_available

    if not compiled_core_available():
        pytest.skip("the compiled core is not built (scripts/build-core)")
    base = ["run", str(conversation_trace), "--limit", "60", "--num-gpu-blocks", "1500"]
    for core in ("python", "compiled"):
        argv = [*base, "--core", core, "--tracer", f"jsonl:path={core}.jsonl", "--out", core]
        assert run_cli(*argv) == 0, capsys.readouterr().err
    python = Path("python.jsonl").read_bytes()
    assert b'"event":"block_removed"' in python and b'"event":"block_stored"' in python
    assert Path("compiled.jsonl").read_bytes() == python


_NEVER_ADMITS_LONG_PROMPTS = '''
import kvframe
from kvframe_fcfs import FCFSPolicy


class NeverAdmitsLong(FCFSPolicy):
    """Marks every prompt over 4,000 tokens as waiting for a KV load that never lands."""

    name = "never-admits-long"

    def on_arrival(self, request):
        if request.num_prompt_tokens > 4000:
            request.status = kvframe.RequestStatus.WAITING_FOR_REMOTE_KVS
'''


def test_a_stalled_run_writes_what_finished_marked_partial_and_exits_1(
    conversation_trace: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    Path("stall_policy.py").write_text(_NEVER_ADMITS_LONG_PROMPTS)
    monkeypatch.syspath_prepend(".")
    code = run_cli(
        "run", conversation_trace, "--limit", "30", "--out", "o",
        "--scheduler", "stall_policy:NeverAdmitsLong",
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1, err
    assert "PARTIAL: the engine stalled" in out and "note: stalled:" in out
    assert "engine stalled at t=" in err and "marked partial (metadata.stalled)" in err
    metrics = json.loads(Path("o/metrics.json").read_text())
    assert metrics["partial"] is True and "interrupted_by" not in metrics["metadata"]
    assert metrics["metadata"]["stalled"].startswith("engine stalled at t=")
    with open("o/requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    finished = [r for r in rows if r["finish_status"] not in ("", "ignored")]
    long_ones = [r for r in rows if int(r["num_prompt_tokens"]) > 4000]
    # The short prompts finished and are kept; the long ones never ran.
    assert finished and long_ones
    assert metrics["counters"]["num_requests_finished"] == len(finished) == 30 - len(long_ones)
    assert all(r["finish_status"] == "" for r in long_ones)


def test_the_summary_names_the_vllm_target_the_scheduling_mode_and_the_core(
    conversation_trace: str, capsys: pytest.CaptureFixture[str]
):
    base = ["run", conversation_trace, "--limit", "3", "--core", "python"]
    assert run_cli(*base, "--out", "a") == 0
    out = capsys.readouterr().out
    assert "vLLM target: 0.19.1, synchronous scheduling" in out
    assert "core: python block pool (setting python)" in out
    assert run_cli(*base, "--out", "b", "--vllm", "0.33", "--async-scheduling") == 0
    assert "vLLM target: 0.33.0, asynchronous scheduling" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # A separate negative value reaches the same check as the joined spelling.
        (["--kv-memory", "-3GiB"], "--kv-memory: bad value for kv_memory: expected a size"),
        (["--kv-memory=-3GiB"], "--kv-memory: bad value for kv_memory: expected a size"),
        (["--offload-bandwidth", "-1GB"], "--offload-bandwidth: bad value for offload_bandwidth"),
        (["--num-gpu-blocks", "-3"], "num_gpu_blocks must be a positive integer, got -3"),
        (["--max-model-len", "-2k"], "--max-model-len: expected an integer, got '-2k'"),
        # A bad number is one line naming the flag, not a usage dump.
        (["--num-gpu-blocks", "abc"], "--num-gpu-blocks: expected an integer, got 'abc'"),
        (["--max-num-seqs", "1.5"], "--max-num-seqs: expected an integer, got '1.5'"),
        (["--limit", "-5"], "--limit must be >= 1, got -5"),
    ],
)
def test_bad_numbers_and_sizes_get_one_clear_line_however_they_are_spelt(
    conversation_trace: str, capsys: pytest.CaptureFixture[str], flags: list[str], expected: str
):
    assert run_cli("run", conversation_trace, *flags, "--out", "o") == 2
    err = capsys.readouterr().err
    assert expected in err
    assert "usage:" not in err and len(err.strip().splitlines()) == 1, err


def test_a_negative_value_is_joined_only_after_an_option_that_takes_one():
    from kvframe.cli.main import join_negative_values

    options = {"--kv-memory", "--limit"}
    assert join_negative_values(["run", "t", "--kv-memory", "-3GiB"], options) == [
        "run",
        "t",
        "--kv-memory=-3GiB",
    ]
    # Not after a switch, not a real option, not past "--".
    assert join_negative_values(["--force", "-3"], options) == ["--force", "-3"]
    assert join_negative_values(["--limit", "-v"], options) == ["--limit", "-v"]
    assert join_negative_values(["--", "--limit", "-3"], options) == ["--", "--limit", "-3"]


def test_a_stalled_fleet_writes_what_finished_marked_partial_and_exits_1(
    conversation_trace: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """A fleet keeps a stall's finished requests as a single engine does (issue 50)."""
    Path("stall_policy.py").write_text(_NEVER_ADMITS_LONG_PROMPTS)
    monkeypatch.syspath_prepend(".")
    code = run_cli(
        "run", conversation_trace, "--limit", "30", "--out", "o",
        "--scheduler", "stall_policy:NeverAdmitsLong", "--replicas", "2", "--router", "round-robin",
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert "PARTIAL" in out
    assert code == 1, err
    assert "fleet stalled" in err and "marked partial (metadata.stalled)" in err
    metrics = json.loads(Path("o/metrics.json").read_text())
    assert metrics["partial"] is True and metrics["metadata"]["stalled"].startswith("fleet stalled")
    with open("o/requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    finished = [r for r in rows if r["finish_status"] not in ("", "ignored")]
    long_ones = [r for r in rows if int(r["num_prompt_tokens"]) > 4000]
    assert finished and long_ones
    assert metrics["counters"]["num_requests_finished"] == len(finished) == 30 - len(long_ones)
