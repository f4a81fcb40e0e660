"""``analyze(trace)``: the ceiling, hit-rate curves per policy and the optimal bound.

The hit rate everywhere is vLLM's prefix-cache hit rate in tokens: summed
over admissions, prompt tokens served from the cache divided by prompt
tokens. Block granularity (a partial block never hits) and the last-token rule
(at most ``(num_tokens - 1) // block_size`` blocks hit) apply, as in
``KVCacheManager.get_computed_blocks``; see :mod:`kvframe.analyze.trace` for
the "cache only" view and :mod:`kvframe.analyze.replay` for the protocol.

How each curve is computed:

* ``lru``: from one pass of stack distances (:mod:`kvframe.analyze.stack`);
  the tests check it against replays of the ``lru`` plugin and a plain
  reference model.
* every other policy: the plugin replayed at each size, on the whole trace or
  on a spatial sample (:mod:`kvframe.analyze.sampling`) with the cache scaled
  by the same rate.
* ``optimal``: Belady's MIN on chain tails (:mod:`kvframe.analyze.optimal`),
  exact.

Why every policy curve is sampled when one is (issue 50): an exact LRU curve
beside sampled ones compares a number with its sampling bias against one
without it. On the conversation trace the sample reads 0.059 at 256 blocks
for every policy, LRU included, against exact LRU's 0.043: four sampled
policies looked 38% "better" than LRU when they tied. So when the replayed
policies are sampled, ``lru`` is computed on the same sample at the same
scaled sizes, and its exact curve (one cheap pass) is kept beside it as a
reference: the difference is the sample's *measured* error, and the same
error is the *estimate* given for the other sampled curves. ``lru_exact=True``
keeps the old mix, and the output warns about it.
"""

from __future__ import annotations

import time
import typing
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from kvframe.analyze.optimal import next_uses, optimal_hit_tokens
from kvframe.analyze.replay import PolicyContractError, build_policy, replay_policy
from kvframe.analyze.reuse import ReuseProfile, reuse_profile
from kvframe.analyze.sampling import sample_depth, sample_trace, scaled_capacity
from kvframe.analyze.stack import StackProfile, stack_profile
from kvframe.analyze.trace import BlockTrace

if TYPE_CHECKING:
    from kvframe.host.registry import PluginRegistry

__all__ = [
    "Analysis",
    "Curve",
    "analyze_trace",
    "auto_sample_rate",
    "default_policy_specs",
    "size_grid",
]

OPTIMAL = "optimal"
"""The name of the optimal bound's curve."""


@attrs.frozen(slots=True)
class Curve:
    """One policy's hit rate at each size of :attr:`Analysis.sizes`."""

    policy: str
    hit_rates: tuple[float, ...]
    method: str
    """How it was computed: ``"exact (stack distances)"``, ``"exact (replay)"``,
    ``"sampled at 22%"`` or ``"exact (MIN on chain tails)"``."""
    seconds: float
    refused_stores: int = 0
    """Stores the policy refused (``evict`` answered ``None``), summed over sizes."""
    sample_rate: float = 1.0
    """The share of requests it was computed on: 1 for an exact curve."""
    error: float | None = None
    """Its sampling error (hit-rate units, the largest over the sizes); ``None`` when exact."""
    error_kind: str = ""
    """``"measured"`` (sampled ``lru`` against exact ``lru``) or ``"estimated"`` (another
    policy: ``lru``'s measured error on the same sample); empty when exact."""

    @property
    def sampled(self) -> bool:
        return self.sample_rate < 1

    def label(self) -> str:
        """``"exact"`` or ``"sampled 22%, ±1.2 pts measured"``: what the table and figure say."""
        if not self.sampled:
            return "exact"
        error = "" if self.error is None else f", ±{self.error * 100:.1f} pts {self.error_kind}"
        return f"sampled {self.sample_rate:.0%}{error}"


@attrs.frozen(slots=True)
class Analysis:
    """Everything ``kvframe analyze`` prints; :meth:`to_dict` is its JSON."""

    trace: str
    block_size: int
    num_requests: int
    prompt_tokens: int
    lookups: int
    """Block lookups (prompt blocks of every request)."""
    footprint: int
    """Distinct blocks: the size at which nothing is ever evicted."""
    ceiling: float
    """The unlimited cache's hit rate."""
    sizes: tuple[int, ...]
    curves: tuple[Curve, ...]
    reuse: ReuseProfile
    sample_rate: float
    sample_depth: int | None
    seconds: dict[str, float]
    metric: str = "tokens"
    """``"tokens"`` (vLLM's hit rate) or ``"blocks"``: see :func:`build_block_trace`."""
    partial_blocks: bool = False
    """Whether partial prompt blocks took cache slots: see :func:`build_block_trace`."""
    errors: tuple[str, ...] = ()
    """Policies left out because they broke the eviction contract, one message each."""
    lru_exact: tuple[float, ...] = ()
    """Exact LRU at every size, kept as the reference the sampling error is measured
    against when the ``lru`` curve itself is sampled; empty otherwise."""

    def curve(self, policy: str) -> Curve:
        for curve in self.curves:
            if curve.policy == policy:
                return curve
        raise KeyError(policy)

    def to_dict(self) -> dict[str, Any]:
        out = attrs.asdict(self, recurse=True)
        out["curves"] = [attrs.asdict(c) for c in self.curves]
        return out

    def rows(self) -> list[dict[str, Any]]:
        """Long-form rows (size, policy, hit rate to 6 decimals): the CSV."""
        rows = []
        for curve in self.curves:
            for size, rate in zip(self.sizes, curve.hit_rates, strict=True):
                rows.append(
                    {
                        "trace": self.trace,
                        "block_size": self.block_size,
                        "size_blocks": size,
                        "policy": curve.policy,
                        "hit_rate": round(rate, 6),
                        "method": curve.method,
                        "sample_rate": curve.sample_rate,
                        "error": None if curve.error is None else round(curve.error, 6),
                        "error_kind": curve.error_kind,
                    }
                )
        return rows


def size_grid(footprint: int, count: int = 14, smallest: int = 256) -> tuple[int, ...]:
    """``count`` sizes spaced evenly in log scale from ``smallest`` to the footprint.

    The last size is the footprint itself (an unlimited cache). A footprint
    below ``smallest * 4`` starts the grid at a sixty-fourth of it.
    """
    if footprint < 1:
        return (1,)
    low = min(smallest, max(1, footprint // 64))
    if count < 2 or low >= footprint:
        return (footprint,)
    ratio = (footprint / low) ** (1 / (count - 1))
    sizes = sorted({max(1, round(low * ratio**i)) for i in range(count - 1)} | {footprint})
    return tuple(sizes)


def default_policy_specs(registry: PluginRegistry) -> list[str]:
    """Every installed eviction policy, and each other choice of its ``Literal`` options.

    So ``arc`` gives ``arc`` and ``arc:variant=paper``: a policy's variants
    are what a user compares.
    """
    from kvframe.config.options import plugin_options

    specs: list[str] = []
    for name in registry.names("eviction"):
        specs.append(name)
        cls = registry.get("eviction", name)
        for option in plugin_options(cls):
            if typing.get_origin(option.annotation) is typing.Literal:
                for choice in typing.get_args(option.annotation):
                    if choice != option.default:
                        specs.append(f"{name}:{option.name}={choice}")
    return specs


AUTO_SAMPLE_LOOKUPS = 60_000
"""``sample_rate="auto"`` replays at most about this many block lookups per policy and size."""


def auto_sample_rate(trace: BlockTrace) -> float:
    """The whole trace up to :data:`AUTO_SAMPLE_LOOKUPS` lookups, else a sample of that many.

    Chosen from ``benchmarks/analyze_speed.py``: on the bundled traces it keeps
    the sampled curves within the error stated in ``docs/analyze.md`` and a
    whole analysis of the conversation trace under 30 s on two cores.
    """
    lookups = trace.total_accesses
    return 1.0 if lookups <= AUTO_SAMPLE_LOOKUPS else round(AUTO_SAMPLE_LOOKUPS / lookups, 3)


def analyze_trace(
    trace: BlockTrace,
    *,
    policies: Sequence[str] = ("lru",),
    registry: PluginRegistry | None = None,
    sizes: Sequence[int] | None = None,
    sample_rate: float | str = 1.0,
    optimal: bool = True,
    metric: str = "tokens",
    progress: Callable[[str], None] | None = None,
    lru_exact: bool = False,
) -> Analysis:
    """Compute the ceiling and the curves of ``policies`` (config strings) at ``sizes``.

    Policies other than ``lru`` are replayed through the plugin registry's
    classes, on a sample when ``sample_rate < 1`` (``"auto"``:
    :func:`auto_sample_rate`); ``lru`` comes from stack distances, on the same
    sample when the others are sampled (comparable curves, with its measured
    error), exactly when they are not or ``lru_exact`` is set. Sizes at or
    above the footprint are the ceiling for every policy (nothing is evicted)
    and are not replayed.
    """
    if sample_rate == "auto":
        sample_rate = auto_sample_rate(trace)
    sample_rate = float(sample_rate)
    note = progress or (lambda _: None)
    start = time.perf_counter()
    stack = stack_profile(trace)
    seconds = {"stack distances": time.perf_counter() - start}
    grid = tuple(sorted(set(sizes))) if sizes else size_grid(trace.num_distinct)
    if any(s < 1 for s in grid):
        raise ValueError(f"cache sizes must be >= 1 block, got {list(grid)}")
    sampled, depth = _sample(trace, sample_rate, policies)
    basis = _Basis(stack, trace, sampled, sample_rate, lru_exact)
    curves, errors = _policy_curves(policies, registry, grid, basis, note)
    if optimal:
        note("optimal bound")
        curves.append(_optimal_curve(trace, stack, grid))
    start = time.perf_counter()
    profile = reuse_profile(trace, stack)
    seconds["reuse profile"] = time.perf_counter() - start
    return Analysis(
        trace=trace.name,
        block_size=trace.block_size,
        num_requests=len(trace),
        prompt_tokens=trace.total_tokens,
        lookups=trace.total_accesses,
        footprint=trace.num_distinct,
        ceiling=stack.hit_rate(None),
        sizes=grid,
        curves=tuple(curves),
        reuse=profile,
        sample_rate=sample_rate if sampled is not trace else 1.0,
        sample_depth=depth if sampled is not trace else None,
        seconds=seconds,
        metric=metric,
        partial_blocks=trace.partial_blocks,
        errors=tuple(errors),
        lru_exact=basis.reference(grid) if basis.is_sampled else (),
    )


@attrs.define(slots=True)
class _Basis:
    """What the curves are computed from: the exact stack profile, the trace, the
    sample the replays run on, and (once asked) the sampled LRU and its error."""

    stack: StackProfile
    trace: BlockTrace
    sampled: BlockTrace
    rate: float
    lru_exact: bool
    _error: float | None = None

    @property
    def is_sampled(self) -> bool:
        return self.sampled is not self.trace

    def reference(self, grid: Sequence[int]) -> tuple[float, ...]:
        """Exact LRU at every size (one pass already made)."""
        return tuple(self.stack.hit_rate(size) for size in grid)

    def sampled_lru(self, grid: Sequence[int]) -> tuple[float, ...]:
        """LRU on the sample at the scaled sizes (the ceiling from the footprint up, as
        for the replayed policies); sets the measured error."""
        profile = stack_profile(self.sampled)
        footprint = self.trace.num_distinct
        rates = tuple(
            self.stack.hit_rate(None)
            if size >= footprint
            else profile.hit_rate(scaled_capacity(size, self.rate))
            for size in grid
        )
        exact = self.reference(grid)
        self._error = max((abs(a - b) for a, b in zip(rates, exact, strict=True)), default=0.0)
        return rates

    def error(self, grid: Sequence[int]) -> float:
        """The sample's measured error: sampled LRU against exact LRU, the largest gap."""
        if self._error is None:
            self.sampled_lru(grid)
        assert self._error is not None
        return self._error


def _policy_curves(
    policies: Sequence[str],
    registry: PluginRegistry | None,
    grid: tuple[int, ...],
    basis: _Basis,
    note: Callable[[str], None],
) -> tuple[list[Curve], list[str]]:
    """Each policy's curve, in order, and the contract errors of those that broke theirs."""
    curves: list[Curve] = []
    errors: list[str] = []
    for spec in policies:
        note(f"policy {spec}")
        if spec != "lru" and registry is None:
            from kvframe.host.registry import get_registry

            registry = get_registry()
        try:
            curves.append(_policy_curve(spec, registry, grid, basis))
        except PolicyContractError as err:
            # The other curves are still worth having: report this one and go on.
            errors.append(str(err))
    return curves, errors


def _sample(
    trace: BlockTrace, sample_rate: float, policies: Sequence[str]
) -> tuple[BlockTrace, int | None]:
    """The trace the sampled curves run on, and the chain depth it was sampled at
    (the whole trace and ``None`` when nothing is sampled: a trace of LRU alone is
    always exact, its one pass costs no more than reading the sample)."""
    if sample_rate < 1 and any(p != "lru" for p in policies):
        depth = sample_depth(trace)
        return sample_trace(trace, sample_rate, depth=depth), depth
    return trace, None


def _policy_curve(
    spec: str, registry: PluginRegistry | None, grid: Sequence[int], basis: _Basis
) -> Curve:
    """One policy's curve: LRU from stack distances (on the sample when the others are
    sampled), any other policy replayed (on the whole trace or the sample)."""
    start = time.perf_counter()
    if spec == "lru" and (not basis.is_sampled or basis.lru_exact):
        rates = basis.reference(grid)
        return Curve(spec, rates, "exact (stack distances)", time.perf_counter() - start)
    rate = basis.rate
    if spec == "lru":
        rates = basis.sampled_lru(grid)
        return Curve(
            spec, rates, f"sampled at {rate:.0%} (stack distances)",
            time.perf_counter() - start, sample_rate=rate,
            error=basis.error(grid), error_kind="measured",
        )  # fmt: skip
    assert registry is not None
    rates_list, refused = _replay_curve(
        spec, registry, grid, basis.trace.num_distinct, basis.stack, basis.sampled, rate
    )
    seconds = time.perf_counter() - start
    if not basis.is_sampled:
        return Curve(spec, tuple(rates_list), "exact (replay)", seconds, refused)
    return Curve(
        spec, tuple(rates_list), f"sampled at {rate:.0%}", seconds, refused,
        sample_rate=rate, error=basis.error(grid), error_kind="estimated",
    )  # fmt: skip


def _optimal_curve(trace: BlockTrace, stack: Any, grid: Sequence[int]) -> Curve:
    """The optimal bound at every size: MIN on chain tails, the ceiling from where it
    reaches it (the optimum never falls as the cache grows)."""
    start = time.perf_counter()
    nxt = next_uses(trace)
    ceiling_tokens = stack.hit_tokens(None)
    total = trace.total_tokens
    bound: list[int] = []
    for size in grid:
        hits = ceiling_tokens if bound and bound[-1] == ceiling_tokens else None
        if hits is None:
            hits = (
                ceiling_tokens
                if size >= trace.num_distinct
                else optimal_hit_tokens(trace, size, nxt)
            )
        bound.append(hits)
    rates = tuple(hits / total if total else 0.0 for hits in bound)
    return Curve(OPTIMAL, rates, "exact (MIN on chain tails)", time.perf_counter() - start)


def _replay_curve(
    spec: str,
    registry: PluginRegistry,
    grid: tuple[int, ...],
    footprint: int,
    stack: StackProfile,
    sampled: BlockTrace,
    sample_rate: float,
) -> tuple[list[float], int]:
    """One policy's hit rates at every size, and its refused stores (summed)."""
    rates: list[float] = []
    refused = 0
    for size in grid:
        if size >= footprint:
            # Nothing is ever evicted: every policy serves the ceiling.
            rates.append(stack.hit_rate(None))
            continue
        capacity = scaled_capacity(size, sample_rate) if sample_rate < 1 else size
        policy = build_policy(registry, spec, capacity)
        hit_tokens, refusals = replay_policy(sampled, policy, capacity, spec=spec)
        refused += refusals
        rates.append(hit_tokens / sampled.total_tokens if sampled.total_tokens else 0.0)
    return rates, refused
