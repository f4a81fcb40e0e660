"""Issue 50, answer 5: the CPU tier's hit tokens account for what it loaded.

As it was, ``offload_hit_tokens`` counted tokens supplied to new requests only:
a run whose tier served only preempted requests (prompts that share nothing,
a GPU pool that preempts) printed "0 hit tokens ... 918 MiB loaded", and
``compare`` showed 0. Now the hits of re-admitted preempted requests count too,
apart and in the total, and the summary prints the loaded bytes as tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvframe.cli import main
from kvframe.compare.load import load_entries
from kvframe.compare.table import table_rows
from kvframe.workloads.chat import write_chat_jsonl

pytest.importorskip("kvframe_cpu_offload")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> tuple[Path, str]:
    """60 requests with nothing in common, long outputs, a pool that preempts."""
    tmp = tmp_path_factory.mktemp("tier")
    trace = tmp / "unique.jsonl"
    write_chat_jsonl(
        trace, num_requests=60, rate=200.0, seed=5, num_system_prompts=60,
        system_prompt_length="fixed:value=256", user_prompt_length="fixed:value=64",
        output_length="fixed:value=200", shared_fraction=0.0,
    )  # fmt: skip
    out = tmp / "run"
    args = ["run", str(trace), "--no-config", "--num-gpu-blocks", "120", "--no-progress"]
    return out, _capture(main, [*args, "--offload", "cpu:capacity=1GiB", "--out", str(out)])


def _capture(fn, argv) -> str:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert fn(argv) == 0
    return buffer.getvalue()


def test_hits_of_preempted_requests_count_and_add_up_to_the_loaded_bytes(run_dir) -> None:
    out, _ = run_dir
    metrics = json.loads((out / "metrics.json").read_text())
    c = metrics["counters"]
    # The case: nothing shared, so no new request hits the tier...
    assert c["external_prefix_cache_hits"] == c["offload_hit_tokens_new"] == 0
    # ...and everything it loaded went to preempted requests coming back.
    assert c["offload_bytes_loaded"] > 0
    assert c["offload_hit_tokens_preempted"] == c["preempted_external_prefix_cache_hits"] > 0
    assert (
        c["offload_hit_tokens"] == c["offload_hit_tokens_new"] + c["offload_hit_tokens_preempted"]
    )
    per_token = metrics["metadata"]["preset"]["kv_bytes_per_token"]
    assert c["offload_hit_tokens"] * per_token == c["offload_bytes_loaded"]


def test_the_summary_and_compare_show_the_same_tier_counters(run_dir) -> None:
    out, printed = run_dir
    c = json.loads((out / "metrics.json").read_text())["counters"]
    hit = c["offload_hit_tokens"]
    assert (
        f"offload tier: {hit:,} hit tokens (0 for new requests + {hit:,} for preempted ones)"
        in printed
    )
    assert f"({hit:,} tokens of KV)" in printed
    headings, (row,) = table_rows(load_entries([out]))
    assert row[headings.index("CPU-tier hit tokens")] == f"{hit:,}"
    assert row[headings.index("of them preempted")] == f"{hit:,}"
