"""An :class:`~kvframe.analyze.Analysis` as a table (text), JSON, CSV or a figure.

matplotlib is imported only by :func:`plot_curves` (``pip install 'kvframe[plot]'``).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from kvframe.analyze.analysis import OPTIMAL, Analysis
from kvframe.analyze.reuse import QUANTILES

__all__ = [
    "DEFINITION",
    "above_bound_warnings",
    "curve_figure",
    "curve_table",
    "mixing_warnings",
    "plot_curves",
    "summary_lines",
    "to_csv",
    "to_json",
]

DEFINITION = (
    "hit rate = prompt tokens served from the prefix cache / prompt tokens, summed over "
    "admissions; whole blocks only, the longest cached prefix, at most (prompt length - 1) "
    "// block size blocks (vLLM's last-token rule); every request served at its arrival "
    "(cache only: no scheduler, no generated tokens)"
)

BLOCK_DEFINITION = (
    "hit rate = full prompt blocks served from the prefix cache / full prompt blocks looked "
    "up (--metric blocks: no last-token rule, partial blocks not counted); every request "
    "served at its arrival (cache only)"
)


def _size_label(blocks: int, block_size: int) -> str:
    tokens = blocks * block_size
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if tokens >= scale:
            return f"{tokens / scale:.3g}{unit}"
    return str(tokens)


def _quantile_text(values: tuple[Any, ...], fmt: str) -> str:
    if not values:
        return "(none)"
    return ", ".join(f"{q:.0%} {fmt.format(v)}" for q, v in zip(QUANTILES, values, strict=True))


def summary_lines(result: Analysis) -> list[str]:
    """The header: the trace, the ceiling, the reuse profile and how each curve was made."""
    reuse = result.reuse
    lines = [
        f"trace {result.trace}: {result.num_requests:,} requests, "
        f"{result.prompt_tokens:,} prompt tokens, block size {result.block_size} tokens",
        f"footprint {result.footprint:,} distinct blocks; {result.lookups:,} block lookups"
        + (
            " (partial prompt blocks take slots, as in vLLM's default GPU pool)"
            if result.partial_blocks
            else " (full blocks only)"
        ),
        f"ceiling (unlimited cache): {result.ceiling:.4f}",
        f"definition: {DEFINITION if result.metric == 'tokens' else BLOCK_DEFINITION}",
        "reuse: "
        + ", ".join(
            f"<{edge:g}s {count:,}" if edge is not None else f">=1h {count:,}"
            for edge, count in reuse.gap_histogram
        )
        + f" eligible lookups by seconds since the block's last use; {reuse.cold_lookups:,} "
        "first uses",
        "reused lookups' stack distance (blocks; the LRU size that serves them) at "
        + _quantile_text(reuse.distance_quantiles, "{:,}"),
        "reused lookups' seconds since the block's last use at "
        + _quantile_text(reuse.gap_quantiles, "{:.0f}"),
        "requests by own hit rate (0-10% ... 90-100%): "
        + " ".join(f"{n:,}" for n in reuse.request_hit_shares)
        + f"; {reuse.requests_without_hit:,} without any hit",
    ]
    if reuse.jobs:
        quartiles = " / ".join(f"{q:.3f}" for q in reuse.job_hit_rate_quartiles)
        lines.append(f"jobs: {reuse.jobs:,}; per-job hit rate min/25%/median/75%/max {quartiles}")
    for curve in result.curves:
        extra = f", {curve.refused_stores:,} stores refused" if curve.refused_stores else ""
        lines.append(
            f"{curve.policy}: {curve.method}{_error_text(curve)}, {curve.seconds:.1f} s{extra}"
        )
    lines.extend(_sampling_lines(result))
    lines.extend(mixing_warnings(result))
    lines.extend(above_bound_warnings(result))
    return lines


def _error_text(curve: Any) -> str:
    if curve.error is None:
        return ""
    basis = (
        "sampled lru against exact lru"
        if curve.error_kind == "measured"
        else "lru's measured error on the same sample"
    )
    return f" (±{curve.error * 100:.2f} points, {curve.error_kind}: {basis})"


def _sampling_lines(result: Analysis) -> list[str]:
    """How the sample was drawn and, when lru was sampled too, its exact reference."""
    if result.sample_rate >= 1:
        return []
    lines = [
        f"sampling: requests kept by the hash of their chain's block {result.sample_depth}, "
        f"cache scaled by the same rate ({result.sample_rate:g}); every policy curve is "
        "sampled so that they compare; --sample-rate 1 replays the whole trace"
    ]
    if result.lru_exact:
        lines.append(
            "lru exact (reference, not in the table): "
            + ", ".join(f"{rate:.4f}" for rate in result.lru_exact)
        )
    return lines


def mixing_warnings(result: Analysis) -> list[str]:
    """A warning when the policy curves were not all made the same way.

    An exact curve beside sampled ones (``lru_exact=True``), or curves sampled
    at different rates, differ by the sampling bias as well as by policy: the
    issue-50 case, where four sampled policies read 38% above exact LRU and
    tied it once LRU was sampled too. The optimal bound is always exact and is
    not counted: it is a bound, and :func:`above_bound_warnings` covers it.
    """
    kinds = {curve.label().split(",")[0] for curve in result.curves if curve.policy != OPTIMAL}
    if len(kinds) < 2:
        return []
    return [
        "warning: the curves mix "
        + " and ".join(sorted(kinds))
        + " results; their differences include the sampling error, so compare only "
        "curves of the same kind (the default samples every policy alike)"
    ]


def above_bound_warnings(result: Analysis) -> list[str]:
    """A line for each sampled curve that lies above the optimal bound somewhere.

    An exact curve never does (the tests check it); a sampled one can, by its
    sampling error, and a reader must not take that for a policy beating MIN.
    """
    try:
        bound = result.curve(OPTIMAL).hit_rates
    except KeyError:
        return []
    lines = []
    for curve in result.curves:
        over = [
            (size, rate - limit)
            for size, rate, limit in zip(result.sizes, curve.hit_rates, bound, strict=True)
            if rate > limit
        ]
        if over:
            size, excess = max(over, key=lambda item: item[1])
            lines.append(
                f"warning: {curve.policy} ({curve.method}) lies above the optimal bound at "
                f"{len(over)} size(s), by up to {excess * 100:.2f} points at {size:,} blocks: "
                + (
                    "sampling error; --sample-rate 1 replays the whole trace"
                    if curve.method.startswith("sampled")
                    else "impossible for an exact replay, please report it with the command"
                )
            )
    return lines


def curve_table(result: Analysis) -> Any:
    """Rows = cache sizes (blocks, tokens), columns = policies then the optimal bound."""
    from kvframe.console import new_table

    names = [f"{c.policy}\n{_short_label(c)}" for c in result.curves]
    table = new_table(
        "blocks", "tokens", *names, numeric_from=0, title=f"hit rate by cache size ({result.trace})"
    )
    for i, size in enumerate(result.sizes):
        label = f"{size:,}" + (" (all)" if size >= result.footprint else "")
        cells = [f"{c.hit_rates[i]:.4f}" for c in result.curves]
        table.add_row(label, _size_label(size, result.block_size), *cells)
    return table


def _short_label(curve: Any) -> str:
    """The heading's second line: ``exact`` or ``s 22% ±1.2`` (points)."""
    if not curve.sampled:
        return "exact"
    error = "" if curve.error is None else f" ±{curve.error * 100:.1f}"
    return f"s {curve.sample_rate:.0%}{error}"


def to_json(result: Analysis) -> str:
    return json.dumps(result.to_dict(), indent=2)


def to_csv(result: Analysis) -> str:
    out = io.StringIO()
    rows = result.rows()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]) if rows else ["size_blocks"])
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def plot_curves(result: Analysis, path: str | Path) -> Path:
    """Draw :func:`curve_figure` into ``path``.

    :raises ImportError: without matplotlib.
    """
    path = Path(path)
    curve_figure(result).savefig(path, dpi=120)
    return path


def curve_figure(result: Analysis) -> Any:
    """Hit rate against cache size (log scale): one line per policy, each labelled exact or
    sampled (rate, error) with its error as a band, the bound and the ceiling.

    :raises ImportError: without matplotlib.
    """
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8.5, 4.5), layout="constrained")
    axes = figure.add_subplot()
    for curve in result.curves:
        style = {"color": "black", "linestyle": "--"} if curve.policy == OPTIMAL else {}
        label = f"{curve.policy} ({curve.label()})"
        (line,) = axes.plot(result.sizes, curve.hit_rates, marker=".", label=label, **style)
        if curve.error:
            # The sampling error as a band: a gap inside it is no difference.
            low = [max(0.0, r - curve.error) for r in curve.hit_rates]
            high = [r + curve.error for r in curve.hit_rates]
            axes.fill_between(result.sizes, low, high, color=line.get_color(), alpha=0.12)
    axes.axhline(result.ceiling, color="grey", linestyle=":", label=f"ceiling {result.ceiling:.3f}")
    axes.set_xscale("log")
    axes.set_xlabel(f"cache size (blocks of {result.block_size} tokens)")
    axes.set_ylabel("prefix-cache hit rate (tokens)")
    axes.set_ylim(0, min(1.0, result.ceiling * 1.15 + 0.02))
    sampled = (
        "" if result.sample_rate >= 1 else f"; sampled {result.sample_rate:.0%}, bands = error"
    )
    figure.suptitle(
        f"{result.trace}: {result.num_requests:,} requests, cache only{sampled}", fontsize="medium"
    )
    axes.grid(True, which="both", alpha=0.3)
    # Outside the axes: a legend over the curves hides the small sizes it is about.
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return figure
