"""Named model + hardware pairs whose cost model is *derived*, not typed in.

Each preset states three kinds of numbers, kept apart so that each can be
checked on its own:

1. **Model shape** — from the model card's ``config.json`` (public).
2. **Hardware peaks** — from NVIDIA's H100 datasheet.
3. **Efficiency factors** — assumptions, in :class:`Efficiency`, stated once.

:func:`derive_cost_model` turns them into :class:`CostModel` coefficients with a
roofline argument (written out in ``docs/cost-model.md``):

* a token through the linear layers costs ``2 x params`` FLOPs, at
  ``peak x mfu``: compute-bound, so it is the per-prefill-token cost and the
  compute part of a decode sequence;
* a decode step must stream all weights from HBM once, whatever the batch:
  ``weight_bytes / (hbm_bandwidth x hbm_efficiency)`` per step;
* decode attention streams each cached token's K and V once per step:
  ``kv_bytes_per_token / (hbm_bandwidth x hbm_efficiency)`` per context token;
* with tensor parallelism, compute, weight and KV reads split ``tp`` ways, and
  each layer adds two all-reduces of the hidden state (Megatron-style TP);
* offload transfers go over each GPU's own PCIe link, ``tp`` links in parallel.

Derived numbers are estimates for *relative* comparisons of policies. For
absolute latencies, fit the coefficients to your own server's step timings.
"""

from __future__ import annotations

from typing import Any

import attrs

from kvframe.domain.costs import CostModel, ModelShape, num_gpu_blocks_for

__all__ = [
    "H100_SXM",
    "LLAMA_3_1_8B",
    "LLAMA_3_1_70B",
    "PRESETS",
    "Efficiency",
    "GpuSpec",
    "Preset",
    "derive_cost_model",
    "kv_memory_for",
    "llama_num_params",
]

GiB = 1024**3


def llama_num_params(
    *,
    vocab_size: int,
    hidden_size: int,
    intermediate_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    tie_word_embeddings: bool = False,
) -> int:
    """Parameter count of a Llama-architecture decoder, from its config.json fields.

    Embedding + untied LM head, per layer q/k/v/o projections, gated MLP
    (gate, up, down) and two RMSNorm weights, plus the final norm.
    """
    head_dim = hidden_size // num_heads
    attention = 2 * hidden_size * hidden_size + 2 * hidden_size * num_kv_heads * head_dim
    mlp = 3 * hidden_size * intermediate_size
    per_layer = attention + mlp + 2 * hidden_size
    embeddings = vocab_size * hidden_size * (1 if tie_word_embeddings else 2)
    return embeddings + num_layers * per_layer + hidden_size


# -- 1. Model shapes: Hugging Face config.json of the model cards -------------

LLAMA_3_1_8B = ModelShape(
    # meta-llama/Llama-3.1-8B config.json: num_hidden_layers 32, num_attention_heads 32,
    # num_key_value_heads 8, hidden_size 4096 (head_dim 128), intermediate_size 14336,
    # vocab_size 128256, torch_dtype bfloat16. 8,030,261,248 params (the card's "8B").
    name="Llama-3.1-8B",
    num_layers=32,
    num_kv_heads=8,
    head_dim=128,
    dtype_bytes=2,
    num_params=llama_num_params(
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
    ),
    weight_dtype_bytes=2,
    hidden_size=4096,
)
"""KV: 32 x 8 x 128 x 2 x 2 B = 128 KiB per token."""

LLAMA_3_1_70B = ModelShape(
    # meta-llama/Llama-3.1-70B config.json: num_hidden_layers 80, num_attention_heads 64,
    # num_key_value_heads 8, hidden_size 8192 (head_dim 128), intermediate_size 28672,
    # vocab_size 128256, torch_dtype bfloat16. 70,553,706,496 params (the card's "70B").
    name="Llama-3.1-70B",
    num_layers=80,
    num_kv_heads=8,
    head_dim=128,
    dtype_bytes=2,
    num_params=llama_num_params(
        vocab_size=128256,
        hidden_size=8192,
        intermediate_size=28672,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
    ),
    weight_dtype_bytes=2,
    hidden_size=8192,
)
"""KV: 80 x 8 x 128 x 2 x 2 B = 320 KiB per token."""


# -- 2. Hardware peaks: NVIDIA H100 Tensor Core GPU datasheet ------------------


@attrs.frozen(slots=True, kw_only=True)
class GpuSpec:
    """Peak numbers of one GPU (per GPU, per direction for links)."""

    name: str
    peak_flops: float
    """Dense 16-bit tensor-core FLOP/s (datasheets often quote 2:4 sparse, twice this)."""
    hbm_bytes_per_s: float
    memory_bytes: float
    """Device memory as the CUDA runtime reports it (what vLLM's utilisation multiplies)."""
    interconnect_bytes_per_s: float
    """GPU-to-GPU (NVLink) bandwidth per direction."""
    host_link_bytes_per_s: float
    """GPU-to-host (PCIe) bandwidth per direction."""


H100_SXM = GpuSpec(
    name="H100-SXM5-80GB",
    # Datasheet: BF16 Tensor Core 1,979 TFLOPS "with sparsity"; dense is half.
    peak_flops=989.4e12,
    # Datasheet: GPU memory bandwidth 3.35 TB/s (HBM3).
    hbm_bytes_per_s=3.35e12,
    # "80GB"; PyTorch reports a total capacity of 79.11 GiB on an H100 80GB HBM3
    # (e.g. the OOM message quoted in vllm-project/vllm#27508; nvidia-smi: 81559 MiB).
    memory_bytes=79.11 * GiB,
    # Datasheet: NVLink 900 GB/s, the sum of both directions.
    interconnect_bytes_per_s=450e9,
    # Datasheet: PCIe Gen5 128 GB/s, the sum of both directions of an x16 link.
    host_link_bytes_per_s=64e9,
)


# -- 3. Efficiency factors: assumptions, stated once --------------------------


@attrs.frozen(slots=True, kw_only=True)
class Efficiency:
    """Fractions of peak that real kernels reach, and fixed overheads. All assumed.

    The defaults are round mid-range values for bf16 dense models served by vLLM
    on Hopper; change them in one place and the whole preset follows.
    """

    mfu: float = 0.5
    """Model FLOPs utilisation of prefill GEMMs: cuBLAS/FlashAttention prefill of
    8B-70B models typically reaches 40-60% of dense peak."""
    hbm_efficiency: float = 0.8
    """Achieved / peak HBM bandwidth for weight and KV streaming (STREAM-like
    copies reach ~80-90% of the 3.35 TB/s)."""
    interconnect_efficiency: float = 0.7
    """Achieved / peak NVLink bandwidth of a ring all-reduce (NCCL bus bandwidth)."""
    host_link_efficiency: float = 0.8
    """Achieved / peak PCIe bandwidth of pinned-memory cudaMemcpyAsync (~50 of 64 GB/s)."""
    step_overhead_s: float = 1.0e-3
    """Per-step CPU and launch overhead (scheduling, input preparation, sampling
    launch) with CUDA graphs."""
    per_seq_overhead_s: float = 10e-6
    """Per decoding sequence: sampling and output processing."""
    allreduce_latency_s: float = 8e-6
    """Latency of one small all-reduce across an NVLink TP group (custom all-reduce)."""
    gpu_memory_utilization: float = 0.9
    """vLLM's default ``--gpu-memory-utilization``."""
    reserved_bytes_per_gpu: float = 2 * GiB
    """Per GPU, left out of the KV budget besides weights: activation peak of the
    profiling run, CUDA graphs, non-torch allocations."""


def derive_cost_model(
    shape: ModelShape,
    gpu: GpuSpec,
    *,
    tensor_parallel_size: int = 1,
    efficiency: Efficiency = Efficiency(),
) -> CostModel:
    """The roofline coefficients for ``shape`` on ``tensor_parallel_size`` x ``gpu``.

    See the module docstring for the reasoning behind each term.
    """
    tp = tensor_parallel_size
    if tp < 1:
        raise ValueError(f"tensor_parallel_size must be >= 1, got {tp}")
    eff = efficiency
    hbm = gpu.hbm_bytes_per_s * eff.hbm_efficiency
    compute_per_token = 2 * shape.num_params / (tp * gpu.peak_flops * eff.mfu)
    comm_per_token = 0.0
    allreduce_latency = 0.0
    if tp > 1:
        if shape.hidden_size is None:
            raise ValueError(f"{shape.name}: hidden_size is needed to cost TP all-reduces")
        # Two all-reduces per layer of one bf16 hidden vector per token; a ring
        # all-reduce moves 2 (tp - 1) / tp of the data over each GPU's link.
        bytes_per_token = 2 * shape.num_layers * shape.hidden_size * 2 * 2 * (tp - 1) / tp
        comm_per_token = bytes_per_token / (
            gpu.interconnect_bytes_per_s * eff.interconnect_efficiency
        )
        allreduce_latency = 2 * shape.num_layers * eff.allreduce_latency_s
    return CostModel(
        per_step_s=shape.weight_bytes / tp / hbm + eff.step_overhead_s + allreduce_latency,
        per_prefill_token_s=compute_per_token + comm_per_token,
        per_decode_seq_s=compute_per_token + comm_per_token + eff.per_seq_overhead_s,
        per_context_token_s=shape.kv_bytes_per_token / (tp * hbm),
        transfer_bytes_per_s=tp * gpu.host_link_bytes_per_s * eff.host_link_efficiency,
    )


def kv_memory_for(
    shape: ModelShape,
    gpu: GpuSpec,
    *,
    tensor_parallel_size: int = 1,
    efficiency: Efficiency = Efficiency(),
) -> float:
    """Bytes left for KV cache over all GPUs, as vLLM budgets them.

    Per GPU: ``utilisation x capacity - weights / tp - reserved``. Override it
    with the "Available KV cache memory" line of your vLLM log when you have one.
    """
    tp = tensor_parallel_size
    per_gpu = (
        efficiency.gpu_memory_utilization * gpu.memory_bytes
        - shape.weight_bytes / tp
        - efficiency.reserved_bytes_per_gpu
    )
    if per_gpu <= 0:
        raise ValueError(f"{shape.name} does not fit on {tp} x {gpu.name}")
    return tp * per_gpu


@attrs.frozen(slots=True, kw_only=True)
class Preset:
    """A named model + hardware pair with its derived cost model and KV budget."""

    name: str
    description: str
    shape: ModelShape
    gpu: GpuSpec
    tensor_parallel_size: int = 1
    efficiency: Efficiency = Efficiency()
    cost_model: CostModel
    kv_memory_bytes: float
    sources: tuple[str, ...] = ()

    @classmethod
    def derive(
        cls,
        name: str,
        description: str,
        shape: ModelShape,
        gpu: GpuSpec,
        *,
        tensor_parallel_size: int = 1,
        efficiency: Efficiency = Efficiency(),
        sources: tuple[str, ...] = (),
    ) -> Preset:
        return cls(
            name=name,
            description=description,
            shape=shape,
            gpu=gpu,
            tensor_parallel_size=tensor_parallel_size,
            efficiency=efficiency,
            cost_model=derive_cost_model(
                shape, gpu, tensor_parallel_size=tensor_parallel_size, efficiency=efficiency
            ),
            kv_memory_bytes=kv_memory_for(
                shape, gpu, tensor_parallel_size=tensor_parallel_size, efficiency=efficiency
            ),
            sources=sources,
        )

    def num_gpu_blocks(self, block_size: int = 16) -> int:
        """KV blocks (null block included) for ``block_size``-token blocks."""
        return num_gpu_blocks_for(self.kv_memory_bytes, block_size, self.shape)

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary, for ``metrics.json`` and ``kvframe presets``."""
        return {
            "name": self.name,
            "description": self.description,
            "model": self.shape.name,
            "gpu": self.gpu.name,
            "tensor_parallel_size": self.tensor_parallel_size,
            "kv_bytes_per_token": self.shape.kv_bytes_per_token,
            "kv_memory_bytes": self.kv_memory_bytes,
            "cost_model": attrs.asdict(self.cost_model),
            "efficiency": attrs.asdict(self.efficiency),
            "sources": list(self.sources),
        }


_SOURCES_COMMON = (
    "NVIDIA H100 Tensor Core GPU datasheet: BF16 989 TFLOPS dense (1,979 sparse), "
    "HBM3 3.35 TB/s, NVLink 900 GB/s, PCIe Gen5 128 GB/s (H100 SXM)",
    "H100 80GB HBM3 capacity as PyTorch reports it: 79.11 GiB (vllm-project/vllm#27508)",
    "efficiency factors: assumptions, see kvframe.executors.presets.Efficiency",
)

PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset.derive(
            "llama3.1-8b-h100",
            "Llama-3.1-8B, bf16, on one H100 SXM 80GB",
            LLAMA_3_1_8B,
            H100_SXM,
            sources=("huggingface.co/meta-llama/Llama-3.1-8B config.json", *_SOURCES_COMMON),
        ),
        Preset.derive(
            "llama3.1-70b-4xh100",
            "Llama-3.1-70B, bf16, on four H100 SXM 80GB with tensor parallelism 4",
            LLAMA_3_1_70B,
            H100_SXM,
            tensor_parallel_size=4,
            sources=("huggingface.co/meta-llama/Llama-3.1-70B config.json", *_SOURCES_COMMON),
        ),
    )
}
"""Built-in presets by name."""
