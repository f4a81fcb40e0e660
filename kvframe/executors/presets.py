"""Named model + hardware pairs whose cost model is *derived*, not typed in.

Each preset states three kinds of numbers, kept apart so that each can be
checked on its own:

1. **Model shape** — from the model card's ``config.json`` (public).
2. **Hardware peaks** — from NVIDIA's H100 and H200 datasheets.
3. **Efficiency factors** — assumptions, in :class:`Efficiency`, stated once.

:func:`derive_cost_model` turns them into :class:`CostModel` coefficients with a
roofline argument (written out in ``docs/cost-model.md``):

* a token through the linear layers costs ``2 x params`` FLOPs, at
  ``peak x mfu``; overlapped with it, a step streams all weights from HBM
  once, whatever the batch: ``weight_bytes / (hbm_bandwidth x hbm_efficiency)``;
* a prefill query-key pair costs ``4 x hidden x layers`` FLOPs (``QK^T`` and
  ``PV``), at ``peak x attention_efficiency``; overlapped with it, attention
  streams each cached token's K and V once per step:
  ``kv_bytes_per_token / (hbm_bandwidth x hbm_efficiency)`` per context token;
* fixed costs: per step (a CUDA-graphed decode step's launches and host
  work), per step with a prefill chunk (it runs outside the full graph), per
  decoding sequence (sampling);
* with tensor parallelism, compute, weight and KV reads split ``tp`` ways, and
  each layer adds two all-reduces of the hidden state (Megatron-style TP);
* offload transfers go over each GPU's own PCIe link, ``tp`` links in
  parallel, one copy per cross-layer block at a fixed cost per copy.

``form="additive"`` with :data:`EFFICIENCY_ADDITIVE` gives the coefficients
of every result before the H200 measurement, bit for bit (the ``-additive``
presets).

Derived numbers are estimates for *relative* comparisons of policies. For
absolute latencies, fit the coefficients to your own server's step timings.
"""

from __future__ import annotations

from typing import Any

import attrs

from kvframe.domain.costs import CostModel, ModelShape, num_gpu_blocks_for

__all__ = [
    "EFFICIENCY_ADDITIVE",
    "H100_SXM",
    "H200_SXM",
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


# -- 2. Hardware peaks: NVIDIA H100 and H200 Tensor Core GPU datasheets -------


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

H200_SXM = GpuSpec(
    name="H200-SXM-141GB",
    # Datasheet: BF16 Tensor Core 1,979 TFLOPS "with sparsity" (the H100's compute); dense is half.
    peak_flops=989.4e12,
    # Datasheet: GPU memory bandwidth 4.8 TB/s (HBM3e).
    hbm_bytes_per_s=4.8e12,
    # "141GB"; PyTorch reports 139.80 GiB on the H200 this project measured
    # (kvframe/data/gpu/h200-llama3.1-8b/device.json).
    memory_bytes=139.80 * GiB,
    # Datasheet: NVLink 900 GB/s, the sum of both directions.
    interconnect_bytes_per_s=450e9,
    # Datasheet: PCIe Gen5 128 GB/s, the sum of both directions of an x16 link.
    host_link_bytes_per_s=64e9,
)


# -- 3. Efficiency factors: assumptions, stated once --------------------------


@attrs.frozen(slots=True, kw_only=True)
class Efficiency:
    """Fractions of peak that real kernels reach, and fixed overheads. All assumed.

    The defaults are round values for bf16 dense models on Hopper, revised
    after this project measured a Llama-3.1-8B-shaped model on an H200
    (``docs/cost-model.md``, "Accuracy"): they were chosen with that
    measurement in view, each near what its own part of the measurement
    shows, so the derived presets' errors there are a consistency check, not
    an independent validation. Change them in one place and every preset
    follows. :data:`EFFICIENCY_ADDITIVE` holds the values of the form before.
    """

    mfu: float = 0.7
    """Achieved / peak FLOP/s of the linear layers' GEMMs: a bf16 8192^3 GEMM
    reached 0.79 of the dense datasheet peak on the H200, large prefill
    chunks 0.72-0.77; smaller GEMMs less."""
    attention_efficiency: float = 0.3
    """Achieved / peak FLOP/s of prefill attention: FlashAttention-2's forward
    pass reaches 30-40% of Hopper's dense peak (FlashAttention-3 paper, Shah
    et al. 2024); the measured step times imply 0.27 after a cached context."""
    hbm_efficiency: float = 0.85
    """Achieved / peak HBM bandwidth for weight and KV streaming (the H200's
    device-to-device copy: 4.22 of 4.8 TB/s, 0.88)."""
    interconnect_efficiency: float = 0.7
    """Achieved / peak NVLink bandwidth of a ring all-reduce (NCCL bus bandwidth)."""
    host_link_efficiency: float = 0.85
    """Achieved / peak PCIe bandwidth of one large pinned ``cudaMemcpyAsync``
    (55.4 of 64 GB/s on the H200, 0.87)."""
    copy_overhead_s: float = 3e-6
    """Fixed cost of one ``cudaMemcpyAsync`` between device and pinned host
    memory (2.98 us fitted to the H200's per-chunk copies)."""
    step_overhead_s: float = 2.5e-3
    """Per-step launch and host overhead of a CUDA-graphed decode step (batch 1
    at 512 tokens: 6.5 ms measured on the H200, 3.9 ms of it weight streaming)."""
    prefill_overhead_s: float = 6e-3
    """Per step with any prefill chunk: it runs outside the full CUDA graph
    (vLLM: piecewise graphs, attention eager), ~32 layers x ~20 kernels x ~8 us
    of launches more than a graphed decode step."""
    per_seq_overhead_s: float = 10e-6
    """Per decoding sequence: sampling and output processing."""
    allreduce_latency_s: float = 8e-6
    """Latency of one small all-reduce across an NVLink TP group (custom all-reduce)."""
    gpu_memory_utilization: float = 0.9
    """vLLM's default ``--gpu-memory-utilization``."""
    reserved_bytes_per_gpu: float = 2 * GiB
    """Per GPU, left out of the KV budget besides weights: activation peak of the
    profiling run, CUDA graphs, non-torch allocations."""


EFFICIENCY_ADDITIVE = Efficiency(
    mfu=0.5,
    attention_efficiency=0.3,
    hbm_efficiency=0.8,
    host_link_efficiency=0.8,
    copy_overhead_s=0.0,
    step_overhead_s=1.0e-3,
    prefill_overhead_s=0.0,
)
"""The factors of the ``additive`` derived presets (every result before the
H200 measurement): MFU 0.5, HBM 0.8, PCIe 0.8, 1 ms per step. Attention and
the per-chunk copy and per-prefill costs are not used by that form."""


def _all_reduce_costs(
    shape: ModelShape, gpu: GpuSpec, tp: int, eff: Efficiency
) -> tuple[float, float]:
    """Tensor parallelism's all-reduces: seconds per token, and latency per step (0, 0 at TP 1)."""
    if tp == 1:
        return 0.0, 0.0
    if shape.hidden_size is None:
        raise ValueError(f"{shape.name}: hidden_size is needed to cost TP all-reduces")
    # Two all-reduces per layer of one bf16 hidden vector per token; a ring
    # all-reduce moves 2 (tp - 1) / tp of the data over each GPU's link.
    bytes_per_token = 2 * shape.num_layers * shape.hidden_size * 2 * 2 * (tp - 1) / tp
    comm_per_token = bytes_per_token / (gpu.interconnect_bytes_per_s * eff.interconnect_efficiency)
    return comm_per_token, 2 * shape.num_layers * eff.allreduce_latency_s


def derive_cost_model(
    shape: ModelShape,
    gpu: GpuSpec,
    *,
    tensor_parallel_size: int = 1,
    efficiency: Efficiency = Efficiency(),
    form: str = "overlap",
) -> CostModel:
    """The roofline coefficients for ``shape`` on ``tensor_parallel_size`` x ``gpu``.

    See the module docstring for the reasoning behind each term. ``form``
    ``"additive"`` gives the form of the presets before the H200 measurement
    (with :data:`EFFICIENCY_ADDITIVE`, their exact coefficients).
    """
    tp = tensor_parallel_size
    if tp < 1:
        raise ValueError(f"tensor_parallel_size must be >= 1, got {tp}")
    eff = efficiency
    hbm = gpu.hbm_bytes_per_s * eff.hbm_efficiency
    # Compute: the active parameters (a mixture of experts); weights: all of them.
    compute_per_token = 2 * shape.compute_params / (tp * gpu.peak_flops * eff.mfu)
    comm_per_token, allreduce_latency = _all_reduce_costs(shape, gpu, tp, eff)
    weights = shape.weight_bytes / tp / hbm
    transfer_bytes_per_s = tp * gpu.host_link_bytes_per_s * eff.host_link_efficiency
    pair_flops_s = tp * gpu.peak_flops * eff.attention_efficiency
    hybrid = _hybrid_terms(shape, tp * hbm, pair_flops_s if form == "overlap" else 0.0)
    if form == "additive":
        return CostModel(
            per_step_s=weights + eff.step_overhead_s + allreduce_latency,
            per_prefill_token_s=compute_per_token + comm_per_token,
            per_decode_seq_s=compute_per_token + comm_per_token + eff.per_seq_overhead_s,
            per_context_token_s=hybrid.get("context_s", shape.kv_bytes_per_token / (tp * hbm)),
            transfer_bytes_per_s=transfer_bytes_per_s,
            windowed=hybrid.get("windowed", ()),
            per_state_seq_s=hybrid.get("state_s", 0.0),
        )
    if form != "overlap":
        raise ValueError(f"form must be 'additive' or 'overlap', got {form!r}")
    if shape.hidden_size is None:
        raise ValueError(f"{shape.name}: hidden_size is needed to cost prefill attention")
    # QK^T and PV: 2 x 2 x head_dim FLOPs per query head per pair, in every layer;
    # query heads x head_dim is the hidden size for Llama-architecture models.
    flops_per_pair = 4 * shape.hidden_size * shape.num_layers
    return CostModel(
        windowed=hybrid.get("windowed", ()),
        per_state_seq_s=hybrid.get("state_s", 0.0),
        form="overlap",
        per_step_s=eff.step_overhead_s + allreduce_latency,
        # The all-reduces run between the GEMMs, not under them: priced with the
        # compute side, which is the side that wins whenever they matter (prefill).
        per_prefill_token_s=compute_per_token + comm_per_token,
        weight_read_s=weights,
        per_decode_seq_s=eff.per_seq_overhead_s,
        per_prefill_step_s=eff.prefill_overhead_s,
        per_prefill_pair_s=hybrid.get("pair_s", flops_per_pair / pair_flops_s),
        per_context_token_s=hybrid.get("context_s", shape.kv_bytes_per_token / (tp * hbm)),
        transfer_bytes_per_s=transfer_bytes_per_s,
        transfer_per_chunk_s=eff.copy_overhead_s,
        transfer_layout="cross-layer",
    )


def _hybrid_terms(shape: ModelShape, hbm: float, pair_flops_s: float) -> dict[str, Any]:
    """A model with per-kind :attr:`~kvframe.domain.costs.ModelShape.layers`: the full
    layers' read and pair coefficients, the windowed layers' (``windowed``), and the
    Mamba state's per request and step (read and written: twice its bytes). Empty
    for a shape without them (every Llama preset), whose coefficients stay as they were.

    ``hbm`` is the achieved bandwidth over the TP group, ``pair_flops_s`` the achieved
    attention FLOP/s over it (0: the additive form, which prices no pairs).
    """
    if not shape.layers:
        return {}
    full = [g for g in shape.layers if g.kind == "full"]
    terms: dict[str, Any] = {
        "context_s": sum(g.kv_bytes_per_token for g in full) / hbm,
        "pair_s": _pair_seconds(full, pair_flops_s),
        "state_s": 2 * sum(g.state_bytes for g in shape.layers) / hbm,
    }
    terms["windowed"] = tuple(
        (g.kind, g.span, g.kv_bytes_per_token / hbm, _pair_seconds([g], pair_flops_s))
        for g in shape.layers
        if g.kind in ("sliding_window", "chunked_local")
    )
    return terms


def _pair_seconds(layers: list[Any], pair_flops_s: float) -> float:
    """Seconds per query-key pair over ``layers``: ``4 x query_width`` FLOPs per layer."""
    if not pair_flops_s:
        return 0.0
    return sum(4 * g.query_width * g.num_layers for g in layers) / pair_flops_s


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
        form: str = "overlap",
    ) -> Preset:
        return cls(
            name=name,
            description=description,
            shape=shape,
            gpu=gpu,
            tensor_parallel_size=tensor_parallel_size,
            efficiency=efficiency,
            cost_model=derive_cost_model(
                shape,
                gpu,
                tensor_parallel_size=tensor_parallel_size,
                efficiency=efficiency,
                form=form,
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


_SOURCES_H100 = (
    "NVIDIA H100 Tensor Core GPU datasheet: BF16 989 TFLOPS dense (1,979 sparse), "
    "HBM3 3.35 TB/s, NVLink 900 GB/s, PCIe Gen5 128 GB/s (H100 SXM)",
    "H100 80GB HBM3 capacity as PyTorch reports it: 79.11 GiB (vllm-project/vllm#27508)",
)
_SOURCES_H200 = (
    "NVIDIA H200 Tensor Core GPU datasheet: BF16 989 TFLOPS dense (1,979 sparse), "
    "HBM3e 4.8 TB/s, NVLink 900 GB/s, PCIe Gen5 128 GB/s (H200 SXM)",
    "H200 capacity as PyTorch reports it: 139.80 GiB (kvframe/data/gpu/h200-llama3.1-8b)",
)
_EFFICIENCY = "efficiency factors: assumptions, see kvframe.executors.presets.Efficiency"
_EFFICIENCY_ADDITIVE = (
    "efficiency factors: kvframe.executors.presets.EFFICIENCY_ADDITIVE (additive form, "
    "the presets before the H200 measurement)"
)
_LLAMA_8B = "huggingface.co/meta-llama/Llama-3.1-8B config.json"
_LLAMA_70B = "huggingface.co/meta-llama/Llama-3.1-70B config.json"

PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset.derive(
            "llama3.1-8b-h100",
            "Llama-3.1-8B, bf16, on one H100 SXM 80GB",
            LLAMA_3_1_8B,
            H100_SXM,
            sources=(_LLAMA_8B, *_SOURCES_H100, _EFFICIENCY),
        ),
        Preset.derive(
            "llama3.1-8b-h200",
            "Llama-3.1-8B, bf16, on one H200 SXM 141GB",
            LLAMA_3_1_8B,
            H200_SXM,
            sources=(_LLAMA_8B, *_SOURCES_H200, _EFFICIENCY),
        ),
        Preset.derive(
            "llama3.1-70b-4xh100",
            "Llama-3.1-70B, bf16, on four H100 SXM 80GB with tensor parallelism 4",
            LLAMA_3_1_70B,
            H100_SXM,
            tensor_parallel_size=4,
            sources=(_LLAMA_70B, *_SOURCES_H100, _EFFICIENCY),
        ),
        Preset.derive(
            "llama3.1-8b-h100-additive",
            "Llama-3.1-8B, bf16, on one H100 SXM 80GB: the additive form of kvframe's "
            "results before the H200 measurement",
            LLAMA_3_1_8B,
            H100_SXM,
            efficiency=EFFICIENCY_ADDITIVE,
            form="additive",
            sources=(_LLAMA_8B, *_SOURCES_H100, _EFFICIENCY_ADDITIVE),
        ),
        Preset.derive(
            "llama3.1-70b-4xh100-additive",
            "Llama-3.1-70B, bf16, on four H100 SXM 80GB with tensor parallelism 4: the "
            "additive form of kvframe's results before the H200 measurement",
            LLAMA_3_1_70B,
            H100_SXM,
            tensor_parallel_size=4,
            efficiency=EFFICIENCY_ADDITIVE,
            form="additive",
            sources=(_LLAMA_70B, *_SOURCES_H100, _EFFICIENCY_ADDITIVE),
        ),
    )
}
"""Built-in presets by name."""
