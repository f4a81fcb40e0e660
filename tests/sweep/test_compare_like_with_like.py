"""Issue 50, answers 3 and 4: ``compare`` groups by every setting, means are means, and
verdicts compare like with like under one stated rule.

As it was: run directories that differed only in ``vllm``, ``async_scheduling`` or
``long_prefill_token_threshold`` were one setting; the "per setting" mean of runs of
104.2, 104.2 and 114.6 s was 114.6 (the last run's); verdicts ranked ``lru@400``
against ``s3fifo@1200``; "tied" hid an 18% gap while a 2% gap was "worse"; four
schedulers identical on every seed were each "worse by 10.3 points".
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from kvframe.cli import main
from kvframe.compare.effects import TIE_TOLERANCE, settings_of, settings_rows, verdicts
from kvframe.compare.load import Entry, load_entries, varying_keys


def _entry(config: dict, hit: float, e2e: float = 1.0) -> Entry:
    metrics = {
        "counters": {"prefix_cache_queries": 10_000, "prefix_cache_hits": round(hit * 10_000)},
        "distributions": {"e2e_request_latency_seconds": {"mean": e2e}},
    }
    name = ",".join(f"{k}={v}" for k, v in config.items())
    return Entry(name, {"workload": "w", **config}, "done", metrics, None, 1.0, lambda _: [])


@pytest.mark.parametrize(
    ("flag", "key", "expected"),
    [
        (["--vllm", "0.33.0"], "vllm", ["0.19.1", "0.33.0"]),
        (["--async-scheduling"], "async_scheduling", ["False", "True"]),
        (["--long-prefill-token-threshold", "32"], "long_prefill_token_threshold", ["0", "32"]),
    ],
)
def test_runs_differing_only_in_a_setting_compare_did_not_know_stay_apart(
    chat_trace: Path, tmp_path: Path, capsys, flag: list[str], key: str, expected: list[str]
) -> None:
    dirs = []
    for name, extra in (("plain", []), ("changed", flag)):
        out = tmp_path / name
        args = ["run", str(chat_trace), "--no-config", "--num-gpu-blocks", "96", *extra]
        assert main([*args, "--out", str(out), "--no-progress", "--json"]) == 0
        dirs.append(out)
    capsys.readouterr()
    entries = load_entries(dirs)
    assert key in varying_keys(entries)
    assert [str(e.config[key]) for e in entries] == expected
    assert len(settings_of(entries)) == 2  # two settings, not one with two "repeats"
    assert main(["compare", *map(str, dirs)]) == 0
    assert key in capsys.readouterr().out  # shown as a column


def test_the_per_setting_value_is_the_mean_of_every_run(chat_trace: Path, tmp_path: Path) -> None:
    """Three runs of one setting (no seed told apart) of 104.2, 104.2 and 114.6 s."""
    source = tmp_path / "source"
    assert main(["run", str(chat_trace), "--no-config", "--out", str(source), "--json"]) == 0
    metrics = json.loads((source / "metrics.json").read_text())
    dirs = []
    for i, e2e in enumerate((104.2, 104.2, 114.6)):
        metrics["distributions"]["e2e_request_latency_seconds"]["mean"] = e2e
        run = tmp_path / f"run{i}"
        run.mkdir()
        (run / "metrics.json").write_text(json.dumps(metrics))
        dirs.append(run)
    (setting,) = settings_of(load_entries(dirs))
    assert setting.interval("e2e_request_latency_seconds.mean").mean == pytest.approx(
        (104.2 + 104.2 + 114.6) / 3
    )
    heads, (row,) = settings_rows([setting])
    assert row[heads.index("e2e mean (95% CI)")].startswith("107.7 s ±")


def test_verdicts_rank_policies_within_each_pool_size_only() -> None:
    entries = []
    for seed in range(4):
        for policy, blocks, hit in (
            ("lru", 400, 0.10), ("s3fifo", 400, 0.14), ("lru", 1200, 0.30), ("s3fifo", 1200, 0.31)
        ):  # fmt: skip
            noise = 0.001 * seed
            entries.append(
                _entry(
                    {"gpu_eviction": policy, "num_gpu_blocks": blocks, "seed": seed}, hit + noise
                )
            )
    hit = [v for v in verdicts(settings_of(entries)) if v.metric == "total_hit_rate"]
    assert [v.label for v in hit] == [
        "[num_gpu_blocks=400] hit rate", "[num_gpu_blocks=1200] hit rate"
    ]  # fmt: skip
    for verdict in hit:
        assert verdict.best == ("GPU: s3fifo",)
        assert [label for label, _ in verdict.worse] == ["GPU: lru"]  # no "@400 vs @1200"


def test_settings_identical_on_every_seed_are_one_identical_group() -> None:
    entries = []
    for seed in range(3):
        entries.append(_entry({"scheduler": "continuum", "seed": seed}, 0.40 + 0.01 * seed))
        for name in ("fcfs", "priority", "sjf", "lpm"):
            entries.append(_entry({"scheduler": name, "seed": seed}, 0.297 + 0.01 * seed))
    (hit, *_) = verdicts(settings_of(entries))
    assert hit.best == ("continuum",)
    ((label, gap),) = hit.worse  # one entry for the four, not four "worse by 10.3 points"
    assert label == "fcfs = priority = sjf = lpm"
    assert gap.mean == pytest.approx(-0.103)
    sentence = hit.sentence()
    assert sentence.count("fcfs") == 1 and "fcfs = priority = sjf = lpm by 10.3 points" in sentence
    (alone, *_) = verdicts(settings_of([e for e in entries if "continuum" not in e.name]))
    assert alone.identical
    assert alone.sentence() == "hit rate: identical on every seed for all 4 settings"


def test_one_rule_for_tied_an_18_percent_gap_is_undecided_not_tied() -> None:
    """Tied: the 95% CI of the difference lies within ±1% of the best's mean. An 18%
    gap with a wide interval is "undecided", a 2% gap with a tight one "worse", a gap
    whose interval is within 1% "tied"."""
    noisy = [0.3, -0.3, 0.25, -0.25]  # per-seed jitter of the wide setting (seconds)
    entries = []
    for seed in range(4):
        entries.append(_entry({"scheduler": "best", "seed": seed}, 0.3, e2e=10.0 + seed))
        entries.append(
            _entry({"scheduler": "wide", "seed": seed}, 0.3, 11.8 + seed + noisy[seed] * 10)
        )
        entries.append(_entry({"scheduler": "near", "seed": seed}, 0.3, 10.2 + seed + 0.001 * seed))
        entries.append(
            _entry({"scheduler": "same", "seed": seed}, 0.3, 10.0 + seed + 0.01 * (seed % 2))
        )
    e2e = next(v for v in verdicts(settings_of(entries)) if v.metric.startswith("e2e"))
    assert e2e.best == ("best",)
    assert [label for label, _ in e2e.undecided] == ["wide"]
    (gap,) = [d for _, d in e2e.undecided]
    assert gap.mean == pytest.approx(1.8) and gap.low < 0  # 18% of 10 s, CI spans zero
    assert [label for label, _ in e2e.worse] == ["near"]  # 2%, tight: really worse
    assert e2e.tied == ("same",)
    tolerance = TIE_TOLERANCE * e2e.reference
    assert attrs.asdict(e2e)["reference"] == pytest.approx(11.5)
    assert tolerance == pytest.approx(0.115)
    sentence = e2e.sentence()
    assert "tied with it (95% CI within ±1% of the best): same" in sentence
    assert (
        "undecided (95% CI spans 0 and more than ±1% of the best; more seeds needed): wide"
        in sentence
    )
