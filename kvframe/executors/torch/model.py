"""A Llama-architecture decoder whose attention reads K/V through paged block tables.

The model is the Llama recipe -- RMSNorm, rotary position embeddings (the
``rotate_half`` convention of Hugging Face's ``LlamaForCausalLM``), grouped-query
attention and a SwiGLU MLP -- written as plain tensor code over a dict of
weights named as in a Llama ``*.safetensors`` checkpoint, so the same code runs
random weights and a real checkpoint.

**Paged KV.** Each layer owns one preallocated tensor
``[num_blocks, 2, block_size, num_kv_heads, head_dim]`` (K then V inside a
block, contiguous, so GPU block ``b`` is one run of bytes: the layout
:class:`~kvframe_cpu_offload.torch_handler.TorchTransferHandler` copies). Block
0 is the scheduler's null block and is never written. A step's new tokens write
their K/V to the slot ``block_table[pos // block_size]``, offset
``pos % block_size``; attention gathers each request's context back through
its block table. Nothing else remembers a request's past: a block table that
points at the wrong block, or a block whose bytes were copied wrongly, changes
the logits -- which is what the output-invariance tests rely on.

**Batching.** The position-wise work (embedding, projections, MLP, norms) runs
on all of a step's tokens at once. Attention of the one-token chunks (the
decodes) runs as one batch per layer: their block tables padded to the longest,
one gather of K and V, one masked ``scaled_dot_product_attention``. A prefill
chunk of several tokens attends on its own, with its causal mask. Prefill
chunks, decodes and mixed batches go through the same step.

This module imports torch; :mod:`kvframe.executors.torch` loads it lazily.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import attrs
import torch

__all__ = [
    "DTYPES",
    "MODEL_PRESETS",
    "LlamaConfig",
    "LlamaModel",
    "StepChunk",
    "expected_weight_shapes",
    "parse_dtype",
    "random_weights",
]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def parse_dtype(name: str) -> torch.dtype:
    """The torch dtype for ``name``; a clear error listing the choices otherwise."""
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(
            f"unknown dtype {name!r}; choose one of {', '.join(sorted(DTYPES))}"
        ) from None


@attrs.frozen(slots=True, kw_only=True)
class LlamaConfig:
    """The architecture fields of a Llama ``config.json`` (Hugging Face names in comments)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int  # num_hidden_layers
    num_heads: int  # num_attention_heads
    num_kv_heads: int  # num_key_value_heads
    head_dim: int = 0
    """0: ``hidden_size // num_heads`` (Llama's default)."""
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    eos_token_id: int | None = None

    def __attrs_post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
        ):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"model option {name} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads}) for grouped-query attention"
            )
        if not self.head_dim:
            if self.hidden_size % self.num_heads:
                raise ValueError(
                    f"hidden_size ({self.hidden_size}) is not divisible by num_heads "
                    f"({self.num_heads}); give head_dim"
                )
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")

    def kv_bytes_per_token(self, dtype: torch.dtype) -> int:
        """K and V of one token in every layer."""
        element = torch.empty((), dtype=dtype).element_size()
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim * element

    @classmethod
    def from_hf(cls, data: Mapping[str, object]) -> LlamaConfig:
        """From a parsed ``config.json``; missing required fields are named."""
        required = {
            "vocab_size": "vocab_size",
            "hidden_size": "hidden_size",
            "intermediate_size": "intermediate_size",
            "num_layers": "num_hidden_layers",
            "num_heads": "num_attention_heads",
        }
        missing = [hf for hf in required.values() if hf not in data]
        if missing:
            raise ValueError(f"config.json lacks {', '.join(missing)}")
        kwargs: dict[str, object] = {ours: data[hf] for ours, hf in required.items()}
        kwargs["num_kv_heads"] = data.get("num_key_value_heads", data["num_attention_heads"])
        if data.get("head_dim"):
            kwargs["head_dim"] = data["head_dim"]
        for key in ("rope_theta", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings"):
            if key in data:
                kwargs[key] = data[key]
        eos = data.get("eos_token_id")
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        kwargs["eos_token_id"] = eos
        return cls(**kwargs)  # type: ignore[arg-type]


MODEL_PRESETS: dict[str, LlamaConfig] = {
    # Tests: 2 layers, hidden 64 -- a step of a few hundred tokens costs milliseconds.
    "tiny": LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
    ),
    # Benchmarks and calibration: big enough that matmuls, not Python, dominate a step.
    "small": LlamaConfig(
        vocab_size=4096,
        hidden_size=256,
        intermediate_size=688,
        num_layers=4,
        num_heads=8,
        num_kv_heads=4,
    ),
}


def expected_weight_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a Llama checkpoint must hold, by its Hugging Face name."""
    h, kv = config.hidden_size, config.num_kv_heads * config.head_dim
    q = config.num_heads * config.head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (config.vocab_size, h),
        "model.norm.weight": (h,),
    }
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, h)
    for i in range(config.num_layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        shapes[p + "self_attn.q_proj.weight"] = (q, h)
        shapes[p + "self_attn.k_proj.weight"] = (kv, h)
        shapes[p + "self_attn.v_proj.weight"] = (kv, h)
        shapes[p + "self_attn.o_proj.weight"] = (h, q)
        shapes[p + "mlp.gate_proj.weight"] = (config.intermediate_size, h)
        shapes[p + "mlp.up_proj.weight"] = (config.intermediate_size, h)
        shapes[p + "mlp.down_proj.weight"] = (h, config.intermediate_size)
    return shapes


def random_weights(config: LlamaConfig, seed: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Seeded weights, drawn in float64 on the CPU so every dtype/device gets the same model.

    Projections are ``N(0, 1/fan_in)`` and the embedding ``N(0, 1)``: activations
    keep their scale through the layers, so greedy outputs vary with the
    context (with the usual ``0.02`` init a random model repeats one token,
    and a wrong block would go unnoticed).
    """
    generator = torch.Generator().manual_seed(seed)
    weights: dict[str, torch.Tensor] = {}
    for name, shape in expected_weight_shapes(config).items():
        if name.endswith("norm.weight"):
            tensor = torch.ones(shape, dtype=torch.float64)
        else:
            std = 1.0 if name == "model.embed_tokens.weight" else 1.0 / math.sqrt(shape[-1])
            tensor = torch.randn(shape, generator=generator, dtype=torch.float64) * std
        weights[name] = tensor.to(dtype)
    return weights


@attrs.define(slots=True)
class StepChunk:
    """One request's part of a step: tokens at positions ``start .. start+len-1``."""

    token_ids: Sequence[int]
    start: int
    block_ids: Sequence[int]
    sample: bool
    """Whether the model samples after the chunk's last token."""


@attrs.frozen(slots=True)
class _Singles:
    """A step's one-token chunks, laid out for one batched attention call per layer."""

    blocks: torch.Tensor
    """``[rows * width]``: each row's block table, padded with the null block 0."""
    mask: torch.Tensor
    """``[rows, 1, 1, width * block_size]``: True for the keys a row attends to."""
    rows: torch.Tensor | None
    """The chunks' rows among the step's tokens; ``None`` when they are all of them."""
    count: int


@attrs.define(slots=True)
class _StepLayout:
    """Where each token of a step goes, gathered once in plain lists so the step
    builds each index tensor with one host-to-device copy."""

    ids: list[int] = attrs.Factory(list)
    positions: list[int] = attrs.Factory(list)
    slot_blocks: list[int] = attrs.Factory(list)
    slot_offsets: list[int] = attrs.Factory(list)
    spans: list[tuple[int, int, int, torch.Tensor]] = attrs.Factory(list)
    """Multi-token chunks: (first row, tokens, start position, context blocks)."""
    single_rows: list[int] = attrs.Factory(list)
    single_tables: list[Sequence[int]] = attrs.Factory(list)
    single_contexts: list[int] = attrs.Factory(list)
    sample_rows: list[int] = attrs.Factory(list)


class LlamaModel:
    """Llama forward over paged KV caches owned by this object.

    :param config: architecture.
    :param weights: Hugging Face-named tensors (validated by the caller).
    :param num_blocks: KV blocks per layer, including the null block 0.
    :param block_size: tokens per block.
    """

    def __init__(
        self,
        config: LlamaConfig,
        weights: Mapping[str, torch.Tensor],
        *,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.config = config
        self.dtype = dtype
        self.device = device
        self.block_size = block_size
        self.num_blocks = num_blocks
        w = {name: t.to(device=device, dtype=dtype) for name, t in weights.items()}
        self.embed = w["model.embed_tokens.weight"]
        self.norm = w["model.norm.weight"]
        self.lm_head = w.get("lm_head.weight", self.embed)
        self.layers = []
        for i in range(config.num_layers):
            p = f"model.layers.{i}."
            # q, k and v in one matmul: one pass over the activations.
            qkv = torch.cat(
                [
                    w[p + "self_attn.q_proj.weight"],
                    w[p + "self_attn.k_proj.weight"],
                    w[p + "self_attn.v_proj.weight"],
                ]
            )
            gate_up = torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]])
            self.layers.append(
                (
                    w[p + "input_layernorm.weight"],
                    qkv.t().contiguous(),
                    w[p + "self_attn.o_proj.weight"].t().contiguous(),
                    w[p + "post_attention_layernorm.weight"],
                    gate_up.t().contiguous(),
                    w[p + "mlp.down_proj.weight"].t().contiguous(),
                )
            )
        hd = config.head_dim
        self.inv_freq = 1.0 / (
            config.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64, device=device) / hd)
        )
        self.kv_caches: list[torch.Tensor] = [
            torch.zeros(
                (num_blocks, 2, block_size, config.num_kv_heads, hd), dtype=dtype, device=device
            )
            for _ in range(config.num_layers)
        ]
        """One tensor per layer; dimension 0 is the scheduler's block id."""

    # -- pieces ---------------------------------------------------------------

    def _rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + self.config.rms_norm_eps) * weight

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = positions.to(torch.float64)[:, None] * self.inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().to(self.dtype)[:, None, :], angles.sin().to(self.dtype)[:, None, :]

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def _attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int
    ) -> torch.Tensor:
        """Causal attention of queries at ``start..`` over keys ``0..``; GQA by head groups.

        ``q``: [n, heads, hd]; ``k``, ``v``: [context, kv_heads, hd] with
        ``context == start + n``.
        """
        config = self.config
        n, context = q.shape[0], k.shape[0]
        group = config.num_heads // config.num_kv_heads
        # [kv_heads, group, n, hd] x [kv_heads, hd, context] -> [kv_heads, group, n, context]
        qg = q.view(n, config.num_kv_heads, group, config.head_dim).permute(1, 2, 0, 3)
        scores = torch.matmul(qg, k.permute(1, 2, 0).unsqueeze(1)) / math.sqrt(config.head_dim)
        if n > 1:
            query_pos = torch.arange(start, start + n, device=q.device)[:, None]
            key_pos = torch.arange(context, device=q.device)[None, :]
            scores = scores.masked_fill(key_pos > query_pos, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v.permute(1, 0, 2).unsqueeze(1))  # [kvh, group, n, hd]
        return out.permute(2, 0, 1, 3).reshape(n, config.num_heads * config.head_dim)

    def _singles(
        self,
        rows: list[int],
        tables: list[Sequence[int]],
        contexts: list[int],
        num_tokens: int,
    ) -> _Singles | None:
        """The step's one-token chunks (decodes) as padded tensors, built once for every layer.

        Each row's block table is padded with the null block 0 to the longest
        one, and a mask keeps every key past the row's own context out; the
        null block's zeros are then read but never weighed.
        """
        if not rows:
            return None
        device = self.device
        width = max(map(len, tables))
        padded = [list(t) + [0] * (width - len(t)) for t in tables]
        blocks = torch.tensor(padded, dtype=torch.long, device=device).view(-1)
        keys = torch.arange(width * self.block_size, device=device)
        context = torch.tensor(contexts, dtype=torch.long, device=device)
        mask = (keys[None, :] < context[:, None])[:, None, None, :]  # [rows, 1, 1, keys]
        every_row = len(rows) == num_tokens  # a decode-only step: rows are 0..n-1
        index = None if every_row else torch.tensor(rows, dtype=torch.long, device=device)
        return _Singles(blocks=blocks, mask=mask, rows=index, count=len(rows))

    def _attend_singles(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        singles: _Singles,
        attn: torch.Tensor,
    ) -> None:
        """Attention of every one-token chunk at once, written into its rows of ``attn``.

        One gather of K and one of V for all of them and one fused
        ``scaled_dot_product_attention`` call (grouped-query heads included),
        instead of a dozen small ops per request: at batch 32 the per-request
        loop cost SmolLM2-135M about a quarter of a decode step on CPU.
        """
        config = self.config
        nh, nkv, hd = config.num_heads, config.num_kv_heads, config.head_dim
        count = singles.count
        # [rows * width, bs, kv_heads, hd] -> [rows, kv_heads, keys, hd], a view.
        keys = k_cache.index_select(0, singles.blocks).view(count, -1, nkv, hd).transpose(1, 2)
        values = v_cache.index_select(0, singles.blocks).view(count, -1, nkv, hd).transpose(1, 2)
        query = q if singles.rows is None else q.index_select(0, singles.rows)
        out = torch.nn.functional.scaled_dot_product_attention(
            query.view(count, nh, 1, hd), keys, values, attn_mask=singles.mask, enable_gqa=True
        ).view(count, nh * hd)
        if singles.rows is None:
            attn.copy_(out)
        else:
            attn.index_copy_(0, singles.rows, out)

    # -- the step --------------------------------------------------------------

    @torch.inference_mode()
    def forward(self, chunks: Sequence[StepChunk]) -> torch.Tensor:
        """Run one step; return the logits ``[num sampling chunks, vocab]`` in chunk order.

        Writes every chunk's K/V into its blocks first, then attends over the
        gathered context, so a chunk reads its own new tokens through the
        cache exactly as it reads earlier ones.
        """
        config = self.config
        device = self.device
        step = self._lay_out(chunks)
        vocab = config.vocab_size
        token_tensor = torch.tensor(step.ids, dtype=torch.long, device=device) % vocab
        pos_tensor = torch.tensor(step.positions, dtype=torch.long, device=device)
        block_index = torch.tensor(step.slot_blocks, dtype=torch.long, device=device)
        offset_index = torch.tensor(step.slot_offsets, dtype=torch.long, device=device)
        cos, sin = self._rope(pos_tensor)
        singles = self._singles(
            step.single_rows, step.single_tables, step.single_contexts, len(step.ids)
        )
        x = self.embed[token_tensor]
        for layer, weights in enumerate(self.layers):
            x = self._layer(
                x,
                self.kv_caches[layer],
                weights,
                (cos, sin),
                (block_index, offset_index),
                singles,
                step.spans,
            )
        if not step.sample_rows:
            return torch.empty((0, vocab), dtype=self.dtype, device=device)
        last = self._rms_norm(x[torch.tensor(step.sample_rows, device=device)], self.norm)
        return last @ self.lm_head.t()

    def _lay_out(self, chunks: Sequence[StepChunk]) -> _StepLayout:
        """Each chunk's tokens, cache slots and attention group (one-token or span).

        :raises RuntimeError: a chunk's block table is too short for its tokens.
        """
        bs = self.block_size
        step = _StepLayout()
        for chunk in chunks:
            n = len(chunk.token_ids)
            offset = len(step.ids)
            step.ids.extend(chunk.token_ids)
            end = chunk.start + n
            table = chunk.block_ids
            needed = -(-end // bs)
            if len(table) < needed:
                raise RuntimeError(
                    f"block table of {len(table)} blocks cannot hold {end} tokens (block size {bs})"
                )
            for pos in range(chunk.start, end):
                step.positions.append(pos)
                step.slot_blocks.append(table[pos // bs])
                step.slot_offsets.append(pos % bs)
            if n == 1:
                step.single_rows.append(offset)
                step.single_tables.append(table[:needed])
                step.single_contexts.append(end)
            else:
                context_blocks = torch.tensor(table[:needed], dtype=torch.long, device=self.device)
                step.spans.append((offset, n, chunk.start, context_blocks))
            if chunk.sample:
                step.sample_rows.append(offset + n - 1)
        return step

    def _layer(
        self,
        x: torch.Tensor,
        cache: torch.Tensor,
        weights: tuple[torch.Tensor, ...],
        rope: tuple[torch.Tensor, torch.Tensor],
        slots: tuple[torch.Tensor, torch.Tensor],
        singles: _Singles | None,
        spans: list[tuple[int, int, int, torch.Tensor]],
    ) -> torch.Tensor:
        """One decoder layer: write this step's K/V into the cache, attend, then the MLP."""
        ln1, w_qkv, w_o, ln2, w_gate_up, w_down = weights
        cos, sin = rope
        block_index, offset_index = slots
        config = self.config
        nh, nkv, hd = config.num_heads, config.num_kv_heads, config.head_dim
        q_size, kv_size = nh * hd, nkv * hd
        h = self._rms_norm(x, ln1)
        qkv = h @ w_qkv
        q = self._rotate(qkv[:, :q_size].view(-1, nh, hd), cos, sin)
        k = self._rotate(qkv[:, q_size : q_size + kv_size].view(-1, nkv, hd), cos, sin)
        v = qkv[:, q_size + kv_size :].view(-1, nkv, hd)
        cache[block_index, 0, offset_index] = k
        cache[block_index, 1, offset_index] = v
        attn = torch.empty((x.shape[0], q_size), dtype=x.dtype, device=self.device)
        k_cache, v_cache = cache[:, 0], cache[:, 1]
        if singles is not None:
            self._attend_singles(q, k_cache, v_cache, singles, attn)
        for offset, n, start, blocks in spans:
            # One gather each for K and V; the result is contiguous, so the
            # flattening view below copies nothing more.
            context = start + n
            keys = k_cache.index_select(0, blocks).view(-1, nkv, hd)[:context]
            values = v_cache.index_select(0, blocks).view(-1, nkv, hd)[:context]
            attn[offset : offset + n] = self._attend(q[offset : offset + n], keys, values, start)
        x = x + attn @ w_o
        h = self._rms_norm(x, ln2)
        gate, up = (h @ w_gate_up).chunk(2, dim=-1)
        return x + (torch.nn.functional.silu(gate) * up) @ w_down
