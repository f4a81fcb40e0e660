"""RequestSpec, prompt recipes and Workload: validation and laziness."""

from __future__ import annotations

import pickle
from array import array

import pytest

from kvframe.workloads import (
    MooncakePrompt,
    RequestSpec,
    SyntheticPrompt,
    TokenPrompt,
    Workload,
    WorkloadError,
)


def test_a_plain_token_list_becomes_a_packed_prompt() -> None:
    spec = RequestSpec("r", [3, 1, 2], max_tokens=5)
    assert isinstance(spec.prompt, TokenPrompt)
    assert len(spec.prompt.packed) == 12  # 4 bytes per token
    assert spec.prompt_token_ids == [3, 1, 2]
    assert spec.prompt_token_ids is not spec.prompt_token_ids  # fresh list per read
    assert RequestSpec("r", (3, 1, 2), max_tokens=5) == spec
    assert RequestSpec("r", array("i", [3, 1, 2]), max_tokens=5) == spec
    assert hash(spec) == hash(RequestSpec("r", [3, 1, 2], max_tokens=5))


def test_length_is_known_without_materialising() -> None:
    prompt = MooncakePrompt((1, 2, 3), 1500)
    assert len(prompt) == 1500
    assert RequestSpec("m", prompt, max_tokens=1).num_prompt_tokens == 1500


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tokens": 0}, "max_tokens must be >= 1"),
        ({"max_tokens": 1, "arrival_time": -1.0}, "arrival_time must be >= 0"),
        ({"max_tokens": 1, "arrival_time": float("nan")}, "arrival_time must be >= 0"),
        ({"max_tokens": 1, "tool_duration": -2.0}, "tool_duration must be >= 0"),
    ],
)
def test_spec_validation(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RequestSpec("r", [1], **kwargs)  # type: ignore[arg-type]


def test_prompt_validation() -> None:
    with pytest.raises(ValueError, match="at least one token"):
        RequestSpec("r", [], max_tokens=1)
    with pytest.raises(ValueError, match="non-negative"):
        TokenPrompt.of([1, -1])
    with pytest.raises(ValueError, match=r"\[0, 2\*\*31\)"):
        TokenPrompt.of([2**31])
    with pytest.raises(ValueError, match="shared_prefix_length must be in"):
        SyntheticPrompt(10, "p", 11)
    with pytest.raises(ValueError, match="go together"):
        SyntheticPrompt(10, "p", 0)


def test_workload_is_a_sequence_with_totals() -> None:
    specs = [
        RequestSpec("a", [1, 2], 3, arrival_time=1.0),
        RequestSpec("b", SyntheticPrompt(10), 4, arrival_time=2.5),
    ]
    workload = Workload(specs, name="w")
    assert len(workload) == 2 and list(workload) == specs and workload[1] is specs[1]
    assert workload.total_prompt_tokens == 12
    assert workload.total_max_tokens == 7
    assert workload.duration == 1.5


def test_workload_errors_pickle() -> None:
    error = WorkloadError("bad", path="t.jsonl", line=3, field="x")
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) == "t.jsonl:3: field 'x': bad"
    assert (copy.path, copy.line, copy.field) == ("t.jsonl", 3, "x")
