"""Issue 50, answer 2: the latency CDF figure shows every setting of a 54-cell sweep.

As it was, it drew the first twelve runs only (two whole policies of a 54-cell
sweep missing, seeds 2-3 of a 4-seed sweep), repeated colours and drew its
legend over the axis labels.
"""

from __future__ import annotations

import random

import pytest

from kvframe.compare.load import Entry, varying_keys

pytest.importorskip("matplotlib")

from kvframe.compare.plots import distinct_colors, latency_cdf_figure

POLICIES = ("lru", "arc", "s3fifo")
BLOCKS = (400, 800, 1200)
SCHEDULERS = ("fcfs", "sjf", "lpm", "priority", "continuum", "ltr")
SEEDS = (0, 1, 2, 3)


def _entry(policy: str, blocks: int, scheduler: str, seed: int) -> Entry:
    rng = random.Random(f"{policy}-{blocks}-{scheduler}-{seed}")
    values = [rng.expovariate(1.0) for _ in range(30)]
    config = {
        "gpu_eviction": policy,
        "num_gpu_blocks": blocks,
        "scheduler": scheduler,
        "seed": seed,
    }
    metrics = {"counters": {"prefix_cache_queries": 1, "prefix_cache_hits": 0}}
    return Entry(f"{policy}-{blocks}-{scheduler}-{seed}", config, "done", metrics, None, 1.0,
                 lambda _name, v=values: list(v))  # fmt: skip


@pytest.fixture(scope="module")
def sweep() -> list[Entry]:
    return [
        _entry(p, b, s, seed)
        for p in POLICIES
        for b in BLOCKS
        for s in SCHEDULERS
        for seed in SEEDS
    ]


def test_all_54_settings_are_drawn_in_every_panel_with_their_seeds_as_a_band(sweep) -> None:
    fig = latency_cdf_figure(sweep, varying_keys(sweep))
    settings = {e.label([k for k in varying_keys(sweep) if k != "seed"]) for e in sweep}
    assert len(settings) == 54
    for axes in fig.axes:
        labels = {line.get_label() for line in axes.get_lines()}
        assert labels == settings
        assert len(axes.collections) == 54  # one band over the 4 seeds per setting
    (legend,) = fig.legends
    assert {text.get_text() for text in legend.get_texts()} == settings


def test_every_setting_has_its_own_colour(sweep) -> None:
    fig = latency_cdf_figure(sweep, varying_keys(sweep))
    colours = [tuple(line.get_color()) for line in fig.axes[0].get_lines()]
    assert len(set(colours)) == len(colours) == 54
    for count in (3, 12, 20, 54, 200):
        assert len(set(distinct_colors(count))) == count


def test_the_legend_covers_no_axes(sweep) -> None:
    fig = latency_cdf_figure(sweep, varying_keys(sweep))
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)  # lay the figure out as savefig does
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    for axes in fig.axes:
        assert not box.overlaps(axes.get_tightbbox(renderer))  # the labels included
