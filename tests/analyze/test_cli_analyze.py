"""``kvframe analyze``: the table, JSON, CSV and figure, and its errors."""

from __future__ import annotations

import csv
import io
import json

import pytest

from kvframe.cli.cmd_analyze import parse_sizes
from kvframe.cli.main import main
from kvframe.config import ConfigError
from kvframe.host.registry import get_registry


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["analyze", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_the_ceiling_every_installed_policy_and_a_bound_above_them(capsys):
    code, out, _ = _run(capsys, "mooncake:synthetic", "--limit", "300", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["block_size"] == 512
    assert result["num_requests"] == 300
    assert len(result["sizes"]) >= 12
    names = [c["policy"] for c in result["curves"]]
    installed = get_registry().names("eviction")
    assert set(installed) <= set(names)
    if "arc" in installed:
        assert "arc:variant=paper" in names
    assert names[-1] == "optimal"
    bound = result["curves"][-1]["hit_rates"]
    for curve in result["curves"]:
        assert all(b >= r for b, r in zip(bound, curve["hit_rates"], strict=True))
    assert bound[-1] == result["ceiling"]


def test_csv_is_one_row_per_size_and_policy(capsys):
    code, out, _ = _run(
        capsys,
        "mooncake:synthetic",
        "--limit",
        "200",
        "--csv",
        "--policy",
        "lru",
        "--sizes",
        "1k,2k",
    )
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["policy"], r["size_blocks"]) for r in rows] == [
        ("lru", "1000"),
        ("lru", "2000"),
        ("optimal", "1000"),
        ("optimal", "2000"),
    ]


def test_table_names_the_definition_and_the_ceiling(capsys):
    code, out, _ = _run(capsys, "mooncake:synthetic", "--limit", "100", "--policy", "lru")
    assert code == 0
    assert "ceiling (unlimited cache): " in out
    assert "(prompt length - 1) // block size" in out
    assert "hit rate by cache size (mooncake:synthetic)" in out


def test_plot_writes_the_figure(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    target = tmp_path / "curves.png"
    code, _, err = _run(
        capsys, "mooncake:synthetic", "--limit", "100", "--policy", "lru", "--plot", str(target)
    )
    assert code == 0
    assert target.read_bytes().startswith(b"\x89PNG")
    assert f"wrote {target}" in err


def test_unknown_policy_fails_before_reading_the_trace_and_lists_the_installed(capsys):
    code, out, err = _run(capsys, "no-such-file.jsonl", "--policy", "lruu")
    assert code == 2
    assert out == ""
    assert "lruu" in err
    assert "installed eviction policies: " in err


def test_missing_trace_is_a_usage_error(capsys):
    code, _, err = _run(capsys, "no-such-file.jsonl", "--policy", "lru")
    assert code == 2
    assert err.startswith("kvframe analyze: error: ")


def test_sizes_accept_suffixes_and_reject_words():
    assert parse_sizes("1k, 10k,1.5M,300") == [1000, 10000, 1500000, 300]
    with pytest.raises(ConfigError, match="'ten' is not a number of blocks"):
        parse_sizes("1k,ten")
    with pytest.raises(ConfigError, match="'0' must be at least one block"):
        parse_sizes("0")


def test_bad_sample_rate_and_plot_suffix_are_usage_errors(capsys):
    code, _, err = _run(capsys, "mooncake:synthetic", "--sample-rate", "2")
    assert (code, err) == (
        2,
        "kvframe analyze: error: --sample-rate must be 'auto' or in (0, 1], got '2'\n",
    )
    code, _, err = _run(capsys, "mooncake:synthetic", "--plot", "x.txt")
    assert code == 2
    assert "the file must end in .png, .svg or .pdf" in err


def test_a_policy_breaking_the_contract_is_left_out_and_the_rest_printed(capsys, write_module):
    """The broken policy is given by class path, as any user's class can be."""
    module = write_module(
        "broken_evict",
        """
        import kvframe

        class EvictsOne(kvframe.EvictionPolicy):
            name = "evicts-one"

            def __init__(self, capacity):
                super().__init__(capacity)
                self.keys = {}

            def get(self, key):
                return self.keys.get(key)

            def insert(self, key, block):
                self.keys[key] = block

            def remove(self, key):
                del self.keys[key]

            def touch(self, keys):
                pass

            def evict(self, n, protected):
                for key in self.keys:
                    if key not in protected:
                        return [(key, self.keys.pop(key))]
                return None
        """,
    )
    code, out, err = _run(
        capsys,
        "mooncake:synthetic",
        "--limit",
        "200",
        "--csv",
        "--sizes",
        "300",
        "--policy",
        "lru",
        "--policy",
        f"{module}:EvictsOne",
    )
    assert code == 1
    assert [line.split(",")[3] for line in out.splitlines()[1:]] == ["lru", "optimal"]
    errors = [line for line in err.splitlines() if line.startswith("kvframe analyze: error:")]
    assert errors == [
        "kvframe analyze: error: eviction policy 'broken_evict:EvictsOne': evict(76, ...) at "
        "request 6 returned 1 victims, not 76; its curve is left out"
    ]
