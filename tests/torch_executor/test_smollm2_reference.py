"""kvframe's torch executor against Hugging Face transformers on SmolLM2-135M-Instruct.

An independent implementation of the same model: transformers reads the same
GGUF file itself (its own dequantization and its own reversal of llama.cpp's
Q/K row order) into ``LlamaForCausalLM``. Several prompts run through
kvframe's engine together (continuous batching over the paged cache, float32)
for 64 tokens each with no stop token; every step's *full* logits vector is
recorded. Then, per prompt:

* transformers' logits over ``prompt + kvframe's tokens`` (one forward) must
  agree with kvframe's at the prefill and at every decode step within 1e-4;
* transformers' own greedy ``generate`` (its incremental KV cache) must produce
  exactly kvframe's 64 tokens.

Test-only: transformers (and accelerate, which it needs to load GGUF) are not
kvframe dependencies. Without them, or without the model extra, it skips; run it
as docs/torch-executor.md says. It takes about a minute (loading the model twice).
"""

from __future__ import annotations

import pytest

from kvframe.engine import Engine
from kvframe.engine.config import EngineConfig
from kvframe.workloads.spec import RequestSpec

from .smollm2 import smollm2_path

pytestmark = pytest.mark.slow

TOLERANCE = 1e-4
NEW_TOKENS = 64
PROMPTS = [
    "What is the capital of France?",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a hash table works, step by step.",
    "List five prime numbers and say why each is prime.",
]


def chat(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def hf_model():
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate", reason="transformers needs accelerate to load GGUF")
    import torch

    path = smollm2_path()
    model = transformers.LlamaForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    model.eval()
    return model


@pytest.fixture(scope="module")
def kvframe_run():
    """Every step's full logits per request, from the engine's torch executor."""
    from kvframe.executors.torch.tokenizer import tokenizer_from_gguf

    path = smollm2_path()
    tokenizer = tokenizer_from_gguf(path)
    prompts = [tokenizer.encode(chat(text)) for text in PROMPTS]
    engine = Engine.from_config(
        EngineConfig(executor="torch:model=smollm2,dtype=float32,eos=none", max_model_len=512)
    )
    executor = engine.executor
    model = executor.model
    forward = model.forward
    recorded: dict[str, list] = {}

    def recording_forward(chunks):
        logits = forward(chunks)
        sampled = [c for c in chunks if c.sample]
        ids = {id(c): rid for rid, c in zip(current, chunks, strict=True)}
        for chunk, row in zip(sampled, logits, strict=True):
            recorded.setdefault(ids[id(chunk)], []).append(row.clone())
        return logits

    current: list[str] = []
    execute = executor.execute

    def tracking_execute(scheduler_output, requests, now=0.0):
        current[:] = list(scheduler_output.num_scheduled_tokens)
        return execute(scheduler_output, requests, now)

    executor.execute = tracking_execute
    model.forward = recording_forward
    specs = [
        RequestSpec(f"p{i}", ids, max_tokens=NEW_TOKENS, arrival_time=0.001 * i)
        for i, ids in enumerate(prompts)
    ]
    engine.run(specs)
    return prompts, dict(executor.outputs), recorded


def test_logits_agree_at_prefill_and_every_decode_step(hf_model, kvframe_run):
    import torch

    prompts, outputs, recorded = kvframe_run
    worst = 0.0
    compared = 0
    for i, prompt in enumerate(prompts):
        tokens = outputs[f"p{i}"]
        assert len(tokens) == NEW_TOKENS
        ours = torch.stack(recorded[f"p{i}"])  # [NEW_TOKENS, vocab]
        with torch.no_grad():
            full = hf_model(torch.tensor([prompt + tokens[:-1]])).logits[0]
        theirs = full[len(prompt) - 1 :]
        assert ours.shape == theirs.shape
        delta = (ours - theirs).abs().max().item()
        worst = max(worst, delta)
        compared += ours.shape[0]
        assert delta <= TOLERANCE, f"prompt {i}: logits differ by up to {delta:.3g}"
    print(f"max |delta logit| {worst:.3g} over {compared} steps x {ours.shape[1]} logits")


def test_greedy_continuations_are_identical(hf_model, kvframe_run):
    import torch
    from transformers import GenerationConfig

    prompts, outputs, _ = kvframe_run
    # No stop token on either side (kvframe ran with eos=none), greedy. generate()
    # fills unset fields from the model's generation config, EOS included: clear it.
    hf_model.generation_config.eos_token_id = None
    config = GenerationConfig(
        max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    for i, prompt in enumerate(prompts):
        with torch.no_grad():
            generated = hf_model.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                generation_config=config,
            )[0, len(prompt) :].tolist()
        assert len(generated) == NEW_TOKENS
        assert generated == outputs[f"p{i}"], f"prompt {i} continues differently"
    print(f"{len(prompts)} prompts x {NEW_TOKENS} greedy tokens identical")
