"""Fixtures for the engine tests: small, fast slices of the bundled Mooncake trace."""

from __future__ import annotations

from collections import defaultdict

import attrs
import pytest

from kvframe.workloads import RequestSpec, load_workload

CONVERSATION_TRACE = "mooncake:conversation"


@pytest.fixture(scope="session")
def conversation_trace() -> str:
    """The bundled conversation trace's name (works wherever ``load_workload`` takes a path)."""
    return CONVERSATION_TRACE


@pytest.fixture(scope="session")
def conversation_chains(conversation_trace: str) -> list[RequestSpec]:
    """120 requests of the conversation trace that continue earlier conversations.

    The trace's conversations come back minutes apart, so a window of its first
    hundred lines shares little beyond the system prompt. This slice keeps, from
    the first 1,500 lines, only the requests whose first two hash ids (system
    prompt + first turn) recur at least three times, i.e. conversations with
    follow-ups, in trace order. Outputs are capped at 32 tokens and arrivals
    compressed 0.3x so that a run takes well under a second yet the KV pool is
    under pressure.
    """
    workload = load_workload(conversation_trace, limit=1500)
    groups: dict[tuple[int, ...], list[RequestSpec]] = defaultdict(list)
    for spec in workload:
        groups[spec.prompt.hash_ids[:2]].append(spec)  # type: ignore[attr-defined]
    keep = {id(spec) for specs in groups.values() if len(specs) >= 3 for spec in specs}
    chosen = [spec for spec in workload if id(spec) in keep][:120]
    return [
        attrs.evolve(
            spec, max_tokens=min(spec.max_tokens, 32), arrival_time=spec.arrival_time * 0.3
        )
        for spec in chosen
    ]
