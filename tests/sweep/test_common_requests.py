"""compare on equal requests: a pool that ignores the longest prompts is not credited for it.

The wrong result this pins down (issue 34): a pool-size sweep where the small
pool ignored the longest prompts (they share nothing with the rest, so their
hit rate is zero) showed the hit rate *falling* as the pool grew, because the
small pool's figure covered only the short, well-shared requests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvframe.cli import main

SWEEP = """
[sweep]
db = "pool.sqlite"
[base]
workload = "pool.jsonl"
[grid]
num_gpu_blocks = [160, 1024]
gpu_eviction = ["lru", "arc:variant=paper"]
"""


@pytest.fixture
def pool_sweep(tmp_path: Path) -> Path:
    """36 Mooncake requests: 30 of 1,024 tokens sharing a first block, and 6 unique ones
    of 4,096 tokens that a 160-block pool (2,560 tokens) must ignore."""
    lines = []
    fresh = 100
    for i in range(36):
        if i % 6 == 5:
            ids = list(range(fresh, fresh + 8))
            fresh += 8
            lines.append({"timestamp": 200 * i, "input_length": 4096, "output_length": 4,
                          "hash_ids": ids})  # fmt: skip
        else:
            lines.append({"timestamp": 200 * i, "input_length": 1024, "output_length": 4,
                          "hash_ids": [i % 2, 10 + i]})  # fmt: skip
    (tmp_path / "pool.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    sweep = tmp_path / "pool.toml"
    sweep.write_text(SWEEP, encoding="utf-8")
    assert main(["sweep", str(sweep), "--jobs", "1", "--no-progress"]) == 0
    return tmp_path / "pool.sqlite"


def _by_pool(db: Path, capsys, *flags: str) -> dict[tuple[int, str | None], dict]:
    assert main(["compare", str(db), "--json", *flags]) == 0
    records = json.loads(capsys.readouterr().out)
    return {(r["config"]["num_gpu_blocks"], r["config"].get("gpu_eviction")): r for r in records}


def test_the_pool_size_sweep_compares_both_pools_on_the_requests_both_served(
    pool_sweep: Path, capsys
) -> None:
    # As it was: each run over the requests it served -- the hit rate falls as the pool grows.
    raw = _by_pool(pool_sweep, capsys, "--all-requests")
    for policy in ("lru", "arc:variant=paper"):
        small, large = raw[160, policy]["metrics"], raw[1024, policy]["metrics"]
        assert small["num_requests_ignored"] == 6 and large["num_requests_ignored"] == 0
        assert small["total_hit_rate"] > large["total_hit_rate"]

    # Now: both pools over the 30 requests both served; the larger pool is no worse.
    fair = _by_pool(pool_sweep, capsys)
    for policy in ("lru", "arc:variant=paper"):
        small, large = fair[160, policy], fair[1024, policy]
        assert small["requests_compared"] == large["requests_compared"] == 30
        assert small["requests_total"] == 36
        assert large["metrics"]["total_hit_rate"] >= small["metrics"]["total_hit_rate"]
        assert small["metrics"]["time_to_first_token_seconds.count"] == 30
        assert large["metrics"]["time_to_first_token_seconds.count"] == 30
    # The small pool's narrowed figure is its own figure: it served exactly these 30.
    assert fair[160, "lru"]["metrics"]["total_hit_rate"] == pytest.approx(
        raw[160, "lru"]["metrics"]["total_hit_rate"]
    )


def test_the_table_and_every_caption_say_how_many_requests_the_figures_cover(
    pool_sweep: Path, tmp_path: Path, capsys
) -> None:
    assert main(["compare", str(pool_sweep)]) == 0
    out = capsys.readouterr().out
    assert "30 of 36" in out
    assert "Compared on equal requests" in out
    pytest.importorskip("matplotlib")
    assert main(["compare", str(pool_sweep), "--plots", str(tmp_path / "plots")]) == 0
    report = (tmp_path / "plots" / "report.html").read_text(encoding="utf-8")
    assert report.count("30 of 36") >= 2  # the table's column, and the captions
    assert "hit_ratio_vs_pool_size" in capsys.readouterr().err


def test_the_total_hit_rate_counts_what_a_tier_supplied_under_its_current_name() -> None:
    from kvframe.compare.load import derived_metrics

    current = {
        "prefix_cache_queries": 100,
        "prefix_cache_hits": 10,
        "external_prefix_cache_hits": 30,
    }
    old = {**current, "connector_prefix_cache_hits": 30}
    del old["external_prefix_cache_hits"]
    assert derived_metrics({"counters": current})["total_hit_rate"] == pytest.approx(0.4)
    assert derived_metrics({"counters": old})["total_hit_rate"] == pytest.approx(0.4)
