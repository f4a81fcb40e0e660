"""The ``--executor`` config string, parsed and checked without importing torch.

``sim`` or ``torch[:key=value,...]``. Validation here catches what can be
caught without torch (unknown keys, bad numbers, unknown dtype or clock names)
so that a typo fails at once, before a model is built or a workload read.
"""

from __future__ import annotations

import difflib
from typing import Any

import attrs

__all__ = [
    "CLOCKS",
    "DTYPE_NAMES",
    "EXECUTOR_NAMES",
    "NO_EOS",
    "TorchOptions",
    "check_cpu_clock",
    "parse_executor",
]

EXECUTOR_NAMES = ("sim", "torch")
NO_EOS = -1
"""``eos=none``: no stop token at all, not even the model's."""
DTYPE_NAMES = ("bfloat16", "float16", "float32", "float64")
MODEL_PRESET_NAMES = ("tiny", "small")
CLOCKS = ("virtual", "wall", "cpu")
"""What advances the engine's clock: the cost model, measured wall time, or
measured CPU time of the forward pass (see :mod:`kvframe.executors.torch.executor`)."""


def check_cpu_clock(device_type: str, threads: int) -> None:
    """Refuse ``clock=cpu`` where CPU time is not the step's duration.

    The CPU clock reads this thread's CPU time. That is the forward pass's
    duration only when this thread does all the work: on a CPU device with one
    intra-op thread. With more threads the others' time is missing; on CUDA
    the work runs on the GPU.

    :raises ValueError: saying which condition fails and what to use instead.
    """
    if device_type != "cpu":
        raise ValueError(
            f"torch executor: clock=cpu measures host CPU time; on {device_type} use clock=wall"
        )
    if threads != 1:
        raise ValueError(
            f"torch executor: clock=cpu counts one thread's CPU time; it needs threads=1 "
            f"(got {threads}); use clock=wall with more threads"
        )


_SIZES = {
    "": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gib": 1 << 30,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
}


def _size(text: str) -> int:
    raw = text.strip().lower()
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(number) :]
    if unit not in _SIZES or not number:
        raise ValueError(f"expected a size such as 64MiB, got {text!r}")
    return int(float(number) * _SIZES[unit])


_ARCH_KEYS = {
    "layers": "num_layers",
    "hidden": "hidden_size",
    "heads": "num_heads",
    "kv_heads": "num_kv_heads",
    "intermediate": "intermediate_size",
    "vocab": "vocab_size",
    "head_dim": "head_dim",
}


@attrs.frozen(slots=True, kw_only=True)
class TorchOptions:
    """What ``torch:...`` may say. Architecture keys override the preset's fields."""

    preset: str = "tiny"
    model: str | None = None
    """A named model (``smollm2``), a Llama ``.gguf`` file, or a checkpoint directory;
    replaces preset/arch keys (see :mod:`kvframe.executors.torch.models`)."""
    checkpoint: str | None = None
    """A Llama checkpoint directory (config.json + *.safetensors); replaces preset/arch keys."""
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    clock: str = "virtual"
    """``virtual``, ``wall`` or ``cpu``: see :data:`CLOCKS`."""
    kv_memory: int = 64 << 20
    """KV bytes when the engine config gives neither num_gpu_blocks nor kv_memory."""
    threads: int = 1
    """torch intra-op threads on CPU (0: torch's default). One by default: tiny
    matmuls gain nothing from threads, and on a shared machine oversubscribed
    threads made steps ~50x slower in our measurements."""
    eos: int | None = None
    """A stop token for every request (default: the model file's eos_token_id; none
    for random weights, whose outputs would otherwise end at random). ``eos=none``
    (stored as :data:`NO_EOS`) turns the model's own off: every request then
    generates exactly ``max_tokens`` (benchmarks, the reference test)."""
    arch: tuple[tuple[str, int], ...] = ()

    def architecture_overrides(self) -> dict[str, int]:
        return {_ARCH_KEYS[k]: v for k, v in self.arch}


def parse_executor(text: str) -> tuple[str, TorchOptions | None]:
    """``("sim", None)`` or ``("torch", options)``.

    :raises ValueError: naming the offending part of ``text``.
    """
    name, _, rest = text.strip().partition(":")
    name = name.strip()
    if name not in EXECUTOR_NAMES:
        close = difflib.get_close_matches(name, EXECUTOR_NAMES, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown executor {name!r} in {text!r}{hint} (choose sim or torch)")
    if name == "sim":
        if rest.strip():
            raise ValueError(f"the sim executor takes no options (got {rest!r}); use --preset")
        return "sim", None
    values, arch = _parse_items(text, rest)
    _check_values(values)
    return "torch", TorchOptions(**values, arch=tuple(arch))


def _parse_items(text: str, rest: str) -> tuple[dict[str, Any], list[tuple[str, int]]]:
    """The ``key=value`` items after ``torch:`` as TorchOptions fields and architecture
    overrides, each converted to its type; a bad item raises naming itself and ``text``."""
    values: dict[str, Any] = {}
    arch: list[tuple[str, int]] = []
    known = [f.name for f in attrs.fields(TorchOptions) if f.name != "arch"] + list(_ARCH_KEYS)
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not value:
            raise ValueError(f"executor option {item!r} in {text!r} is not key=value")
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"unknown torch executor option {key!r}{hint}; options: {', '.join(known)}"
            )
        try:
            if key == "eos" and value.lower() == "none":
                values[key] = NO_EOS
                continue
            if key in _ARCH_KEYS or key in ("seed", "eos", "threads"):
                number = int(value)
                if key in _ARCH_KEYS:
                    if number < 1:
                        raise ValueError("must be >= 1")
                    arch.append((key, number))
                    continue
                values[key] = number
            elif key == "kv_memory":
                values[key] = _size(value)
            else:
                values[key] = value
        except ValueError as err:
            raise ValueError(f"torch executor option {key}={value!r}: {err}") from None
    return values, arch


def _check_values(values: dict[str, Any]) -> None:
    """The checks that need more than one item (clock=cpu and the device) or a fixed
    list of choices, made once every item is read so each names the whole choice."""
    dtype = values.get("dtype", "float32")
    if dtype not in DTYPE_NAMES:
        raise ValueError(
            f"torch executor: unknown dtype {dtype!r}; choose one of {', '.join(DTYPE_NAMES)}"
        )
    clock = values.get("clock", "virtual")
    if clock not in CLOCKS:
        raise ValueError(f"torch executor: clock must be one of {', '.join(CLOCKS)}, not {clock!r}")
    device = values.get("device", "cpu")
    if device != "cpu" and not (device == "cuda" or device.startswith("cuda:")):
        raise ValueError(f"torch executor: unknown device {device!r}; use cpu, cuda or cuda:N")
    if clock == "cpu":
        check_cpu_clock(device.partition(":")[0], values.get("threads", 1))
    preset = values.get("preset", "tiny")
    if preset not in MODEL_PRESET_NAMES:
        raise ValueError(
            f"torch executor: unknown model preset {preset!r}; "
            f"choose one of {', '.join(MODEL_PRESET_NAMES)}"
        )
    if "model" in values and "checkpoint" in values:
        raise ValueError(
            "torch executor: give model= or checkpoint=, not both (model= also takes a "
            "checkpoint directory)"
        )
