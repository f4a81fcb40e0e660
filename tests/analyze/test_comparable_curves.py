"""Issue 50, answer 1: ``analyze`` never puts an exact curve beside sampled ones unmarked.

The issue's case at small scale: the first 3,000 requests of the conversation
trace at a 20% sample. Exact LRU (stack distances) reads below every sampled
policy at small sizes -- the sample's bias, not a better policy. The default now
samples ``lru`` with the others (so the curves compare), gives each sampled curve
its rate and error (measured for ``lru`` against its exact curve, estimated for
the others), and warns when curves of different kinds are mixed anyway.
"""

from __future__ import annotations

import csv
import io

import pytest

from kvframe.analyze import analyze_trace, auto_block_size, build_block_trace
from kvframe.analyze.report import curve_table, mixing_warnings, summary_lines
from kvframe.cli.main import main
from kvframe.console import render_text
from kvframe.workloads import load_workload

SIZES = (64, 256, 1000)
RATE = 0.2


@pytest.fixture(scope="module")
def trace():
    workload = load_workload("mooncake:conversation", limit=3000)
    return build_block_trace(workload.requests, auto_block_size(workload), name="conv3000")


def test_old_mix_reads_sampled_policies_better_than_exact_lru_and_is_now_warned(trace):
    mixed = analyze_trace(
        trace, policies=["lru", "arc"], sizes=SIZES, sample_rate=RATE, lru_exact=True
    )
    lru, arc = mixed.curve("lru"), mixed.curve("arc")
    # The misleading answer: a sampled policy "beats" exact LRU at every small size...
    assert all(a > e for a, e in zip(arc.hit_rates, lru.hit_rates, strict=True))
    # ...and the output now says the two are not alike.
    assert not lru.sampled and arc.sampled
    (warning,) = mixing_warnings(mixed)
    assert "exact and sampled 20%" in warning
    assert warning in summary_lines(mixed)


def test_default_samples_lru_too_so_the_gap_is_policy_not_sampling(trace):
    result = analyze_trace(trace, policies=["lru", "arc"], sizes=SIZES, sample_rate=RATE)
    lru, arc = result.curve("lru"), result.curve("arc")
    assert lru.sample_rate == arc.sample_rate == RATE
    assert mixing_warnings(result) == []
    exact = analyze_trace(trace, policies=["lru"], sizes=SIZES, optimal=False).curve("lru")
    assert result.lru_exact == exact.hit_rates
    measured = max(abs(s - e) for s, e in zip(lru.hit_rates, exact.hit_rates, strict=True))
    assert lru.error == pytest.approx(measured) and lru.error_kind == "measured"
    assert arc.error == lru.error and arc.error_kind == "estimated"
    # The sampled "win" over exact LRU is the sampling bias: against LRU on the same
    # sample, ARC's gap is smaller than the bias, at every size.
    for s_arc, s_lru, e_lru in zip(arc.hit_rates, lru.hit_rates, exact.hit_rates, strict=True):
        assert abs(s_arc - s_lru) < abs(s_arc - e_lru)


def test_table_and_figure_name_each_curves_kind_rate_and_error(trace):
    result = analyze_trace(trace, policies=["lru", "arc"], sizes=SIZES, sample_rate=RATE)
    text = render_text(curve_table(result))
    points = f"±{result.curve('lru').error * 100:.1f}"
    assert text.count(f"s 20% {points}") == 2 and "exact" in text  # optimal stays exact
    assert any(line.startswith("lru exact (reference") for line in summary_lines(result))
    pytest.importorskip("matplotlib")
    from kvframe.analyze.report import curve_figure

    figure = curve_figure(result)
    (axes,) = figure.axes
    labels = [text.get_text() for text in axes.get_legend().get_texts()]
    assert f"lru (sampled 20%, {points} pts measured)" in labels
    assert f"arc (sampled 20%, {points} pts estimated)" in labels
    assert "optimal (exact)" in labels
    assert len(axes.collections) == 2  # one error band per sampled curve


def test_csv_rows_carry_rate_and_error(capsys):
    code = main(
        ["analyze", "mooncake:conversation", "--limit", "3000", "--policy", "arc",
         "--policy", "lru", "--sizes", "64,256", "--sample-rate", "0.2", "--csv"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0 and "mix" not in err
    rows = list(csv.DictReader(io.StringIO(out)))
    for row in rows:
        if row["policy"] == "optimal":
            assert row["sample_rate"] == "1.0" and row["error"] == ""
        else:
            assert row["sample_rate"] == "0.2" and float(row["error"]) > 0
            assert row["error_kind"] in {"measured", "estimated"}
