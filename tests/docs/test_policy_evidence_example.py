"""examples/policy_evidence/summarise.py: means, intervals, paired differences to the baseline."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "policy_evidence" / "summarise.py"


def _module():
    spec = importlib.util.spec_from_file_location("policy_evidence_summarise", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(policy: str, seed: int, hit_rate: float, recomputed: int = 0) -> dict:
    return {
        "config": {"workload": "gen:skewed", "gpu_eviction": policy, "seed": seed},
        "error": None,
        "metrics": {
            "prefix_cache_hit_rate": hit_rate,
            "time_to_first_token_seconds.p50": 0.1,
            "time_to_first_token_seconds.p99": 0.5,
            "num_recomputed_tokens": recomputed,
            "prompt_tokens_total": 1000,
            "wall_clock_seconds": 2.0,
            "num_steps": 1000,
        },
    }


def test_each_policy_is_compared_with_the_baseline_paired_by_seed() -> None:
    runs = [
        *(_run("lru", s, h) for s, h in enumerate((0.20, 0.30, 0.25))),
        *(_run("lfu", s, h) for s, h in enumerate((0.25, 0.35, 0.30))),
        {"config": {"workload": "gen:skewed", "gpu_eviction": "sieve"}, "error": "boom"},
    ]
    text = _module().summarise(runs)
    lines = text.splitlines()
    assert lines[0] == "## gpu_eviction on gen:skewed (3 seeds)"
    lru = next(line for line in lines if line.startswith("| `lru`"))
    lfu = next(line for line in lines if line.startswith("| `lfu`"))
    # lru: mean 25%, t(2) = 4.303, sd 5 points / sqrt(3) -> half-width 12.42 points.
    assert lru.split(" | ")[1] == "25.00 ± 12.42"
    assert lru.endswith("| -- | -- | -- | -- |")
    # lfu is 5 points better on every seed: a zero-width interval that excludes 0.
    assert lfu.split(" | ")[6] == "5.00 ± 0.00*"
    assert "| 2.0000 ± 0.0000 |" in lfu  # 2 ms of host time per step
    assert "sieve" not in text  # a failed run is left out
