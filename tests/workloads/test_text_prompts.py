"""Text prompts (``kvframe gen ... --text MODEL``) keep the generated workload's structure.

A character-level stand-in encoder is enough to pin the structure (lengths,
sharing, agent turns extending each other); the real tokenizer is used only
in the last test, which skips without the SmolLM2 package.
"""

from __future__ import annotations

import itertools
import json

import pytest

from kvframe.cli import main
from kvframe.workloads.agentic import generate_agentic
from kvframe.workloads.chat import generate_chat
from kvframe.workloads.text import SENTENCES, TextStreams, with_text_prompts


def encode(text: str) -> list[int]:
    return [ord(c) for c in text]


def decode(ids: list[int]) -> str:
    return "".join(map(chr, ids))


def test_chat_prompts_keep_lengths_and_exactly_the_same_sharing():
    plain = generate_chat(num_requests=40, system_prompt_length=60, user_prompt_length=30, seed=4)
    text = with_text_prompts(plain, encode)
    assert [len(s.prompt) for s in text] == [len(s.prompt) for s in plain]
    assert [s.arrival_time for s in text] == [s.arrival_time for s in plain]
    for a in range(len(plain)):
        for b in range(a):
            same_plain = plain[a].prompt_token_ids[:60] == plain[b].prompt_token_ids[:60]
            same_text = text[a].prompt_token_ids[:60] == text[b].prompt_token_ids[:60]
            assert same_plain == same_text, (a, b)


def test_agent_turns_still_extend_each_other():
    specs = with_text_prompts(generate_agentic(num_jobs=3, seed=1), encode)
    by_job: dict[str, list] = {}
    for spec in specs:
        by_job.setdefault(spec.job_id, []).append(spec)
    turns = 0
    for job in by_job.values():
        job.sort(key=lambda s: s.turn)
        for earlier, later in itertools.pairwise(job):
            assert later.prompt_token_ids[: len(earlier.prompt)] == earlier.prompt_token_ids
            turns += 1
    assert turns > 0


def test_streams_are_prefix_stable_sentences():
    streams = TextStreams(encode)
    long = decode(streams.tokens("a", 400))
    assert decode(TextStreams(encode).tokens("a", 150)) == long[:150]
    assert decode(streams.tokens("b", 400)) != long
    first = next(s for s in SENTENCES if long.startswith(s))
    assert long[len(first)] == " "


def test_gen_chat_text_writes_smollm2_tokens(tmp_path):
    pytest.importorskip("tokenizers", reason="the model extra is not installed")
    pytest.importorskip("gguf", reason="the model extra is not installed")
    from kvframe.executors.torch.models import ModelNotInstalledError, resolve_model
    from kvframe.executors.torch.tokenizer import tokenizer_from_gguf

    try:
        tokenizer = tokenizer_from_gguf(resolve_model("smollm2"))
    except ModelNotInstalledError as err:
        pytest.skip(str(err))
    out = tmp_path / "chat.jsonl"
    argv = ["gen", "chat", "--text", "smollm2", "--out", str(out), "--requests", "3"]
    assert main([*argv, "--system-prompt-length", "40", "--user-prompt-length", "20"]) == 0
    header, *records = [json.loads(line) for line in out.read_text().splitlines()]
    assert header["description"] == "prompts are English text tokenized for smollm2"
    for record in records:
        assert len(record["prompt_token_ids"]) == 60
        text = tokenizer.decode(record["prompt_token_ids"])
        assert any(text.startswith(s) for s in SENTENCES), text


def test_gen_text_with_a_missing_model_is_refused(tmp_path, capsys):
    code = main(["gen", "agentic", "--text", str(tmp_path / "x.gguf"), "--out", "-"])
    assert code != 0
    err = capsys.readouterr().err
    assert "--text" in err and "is neither a named model (smollm2) nor an existing GGUF" in err
