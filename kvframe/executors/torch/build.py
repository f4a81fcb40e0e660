"""Build a :class:`~kvframe.executors.torch.executor.TorchExecutor` from its options.

Everything that can be wrong with the options is checked here, before the
engine allocates the KV cache or reads a request: the dtype and device, the
checkpoint's tensors, and whether the KV cache fits the device's memory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import torch

from kvframe.executors.torch.model import (
    MODEL_PRESETS,
    LlamaConfig,
    LlamaModel,
    parse_dtype,
    random_weights,
)
from kvframe.executors.torch.options import TorchOptions

if TYPE_CHECKING:
    from kvframe.executors.torch.tokenizer import TextTokenizer

__all__ = ["ModelPlan", "available_memory", "plan_model"]


@attrs.define(slots=True)
class ModelPlan:
    """A validated model, weights loaded, KV cache not yet allocated."""

    config: LlamaConfig
    weights: dict[str, torch.Tensor]
    dtype: torch.dtype
    device: torch.device
    options: TorchOptions
    source: Path | None = None
    """The GGUF file or checkpoint directory the weights came from (``None``: random)."""

    def tokenizer(self) -> TextTokenizer | None:
        """The model's own tokenizer (GGUF files carry one); ``None`` when it has none."""
        if self.source is None or self.source.is_dir():
            return None
        from kvframe.executors.torch.tokenizer import tokenizer_from_gguf

        return tokenizer_from_gguf(self.source)

    def kv_bytes_per_token(self) -> int:
        return self.config.kv_bytes_per_token(self.dtype)

    def kv_bytes_per_block(self, block_size: int) -> int:
        return block_size * self.kv_bytes_per_token()

    def describe(self) -> dict[str, object]:
        c = self.config
        return {
            "executor": "torch",
            "model": self.options.model,
            "model_path": None if self.source is None else str(self.source),
            "checkpoint": self.options.checkpoint,
            "preset": (
                None if self.options.checkpoint or self.options.model else self.options.preset
            ),
            "dtype": str(self.dtype).removeprefix("torch."),
            "device": str(self.device),
            "seed": self.options.seed,
            "clock": self.options.clock,
            "num_layers": c.num_layers,
            "hidden_size": c.hidden_size,
            "num_heads": c.num_heads,
            "num_kv_heads": c.num_kv_heads,
            "head_dim": c.head_dim,
            "intermediate_size": c.intermediate_size,
            "vocab_size": c.vocab_size,
        }

    def build(self, num_blocks: int, block_size: int) -> LlamaModel:
        """Allocate the KV cache, after checking it fits."""
        need = num_blocks * self.kv_bytes_per_block(block_size)
        have = available_memory(self.device)
        weight_bytes = sum(t.numel() for t in self.weights.values()) * _element(self.dtype)
        if have is not None and need + weight_bytes > have:
            raise ValueError(
                f"torch executor: the KV cache of {num_blocks} blocks x "
                f"{self.kv_bytes_per_block(block_size)} bytes ({need / 2**30:.2f} GiB) plus "
                f"{weight_bytes / 2**30:.2f} GiB of weights does not fit the "
                f"{have / 2**30:.2f} GiB available on {self.device}; "
                "lower num_gpu_blocks / kv_memory or choose a smaller model"
            )
        return LlamaModel(
            self.config,
            self.weights,
            num_blocks=num_blocks,
            block_size=block_size,
            dtype=self.dtype,
            device=self.device,
        )


def _element(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def available_memory(device: torch.device) -> int | None:
    """Bytes free for the KV cache on ``device`` (``None`` when it cannot be told)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _device(name: str) -> torch.device:
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"torch executor: unknown device {name!r}: {err}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"torch executor: device {name!r} asked for, but CUDA is not available "
                "(this torch build or machine has no GPU); use device=cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"torch executor: device {name!r} does not exist "
                f"({torch.cuda.device_count()} CUDA devices)"
            )
    elif device.type != "cpu":
        raise ValueError(f"torch executor: unsupported device {name!r}; use cpu or cuda")
    return device


def plan_model(options: TorchOptions) -> ModelPlan:
    """Validate the options and load (or draw) the weights.

    :raises ValueError: unknown dtype/device, bad architecture, or a broken
        checkpoint (:class:`~kvframe.executors.torch.checkpoint.CheckpointError`).
    """
    dtype = parse_dtype(options.dtype)
    device = _device(options.device)
    if options.threads < 0:
        raise ValueError(f"torch executor: threads must be >= 0, got {options.threads}")
    if options.threads and device.type == "cpu":
        torch.set_num_threads(options.threads)
    source: Path | None = None
    if options.checkpoint is not None or options.model is not None:
        from kvframe.executors.torch.checkpoint import load_checkpoint

        if options.arch:
            raise ValueError(
                "torch executor: architecture options come from the model file; "
                "drop " + ", ".join(k for k, _ in options.arch)
            )
        if options.model is not None:
            from kvframe.executors.torch.models import resolve_model

            source = resolve_model(options.model)
        else:
            source = Path(options.checkpoint)  # type: ignore[arg-type]
        if source.is_dir():
            config, weights = load_checkpoint(source)
        else:
            from kvframe.executors.torch.gguf_file import load_gguf

            config, weights = load_gguf(source, dtype)
    else:
        overrides = options.architecture_overrides()
        if "head_dim" not in overrides and ({"hidden_size", "num_heads"} & set(overrides)):
            overrides["head_dim"] = 0  # derive it again from the new hidden size / heads
        config = attrs.evolve(MODEL_PRESETS[options.preset], **overrides)
        weights = random_weights(config, options.seed, dtype)
    return ModelPlan(config, weights, dtype, device, options, source)
