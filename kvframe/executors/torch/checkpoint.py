"""Loading (and, for tests, writing) a Llama checkpoint directory: config.json + *.safetensors.

The safetensors format is small enough to read directly -- an 8-byte
little-endian header length, a JSON header mapping each tensor name to its
dtype, shape and byte range, then the raw bytes -- so the torch executor needs
no extra dependency. Everything is validated before any tensor is built: a
missing, unexpected or mis-shaped tensor is an error naming the tensor and
the file.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

from kvframe.executors.torch.model import LlamaConfig, expected_weight_shapes

__all__ = ["CheckpointError", "load_checkpoint", "save_checkpoint"]

_ST_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
}
_ST_NAMES = {dtype: name for name, dtype in _ST_DTYPES.items()}


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded as the model it claims to be."""


def _read_header(path: Path) -> tuple[dict[str, dict], int]:
    with path.open("rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise CheckpointError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        (length,) = struct.unpack("<Q", raw)
        if length > 100 * 1024 * 1024:
            raise CheckpointError(f"{path}: not a safetensors file (header of {length} bytes)")
        try:
            header = json.loads(f.read(length))
        except ValueError as err:
            raise CheckpointError(f"{path}: unreadable safetensors header: {err}") from err
    header.pop("__metadata__", None)
    return header, 8 + length


def load_checkpoint(directory: str | Path) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
    """Read ``config.json`` and every ``*.safetensors`` file of ``directory``.

    :raises CheckpointError: no config / no weights, a tensor missing, unexpected,
        duplicated, of the wrong shape or an unsupported dtype.
    """
    root = Path(directory)
    config = _read_config(root)
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{root}: no *.safetensors files")
    expected = expected_weight_shapes(config)
    where = _index_tensors(files)
    _check_tensor_set(root, expected, where)
    weights: dict[str, torch.Tensor] = {}
    blobs: dict[Path, bytes] = {}
    for name in expected:
        path, info, data_start = where[name]
        blob = blobs.get(path)
        if blob is None:
            blob = blobs[path] = path.read_bytes()
        begin, end = info["data_offsets"]
        dtype = _ST_DTYPES[info["dtype"]]
        count = 1
        for dim in expected[name]:
            count *= dim
        if end - begin != count * torch.empty((), dtype=dtype).element_size():
            raise CheckpointError(f"{path}: tensor {name}'s byte range does not match its shape")
        weights[name] = (
            torch.frombuffer(bytearray(blob[data_start + begin : data_start + end]), dtype=dtype)
            .reshape(expected[name])
            .clone()
        )
    return config, weights


def _read_config(root: Path) -> LlamaConfig:
    """The architecture from ``config.json``; a missing directory or file names itself."""
    if not root.is_dir():
        raise CheckpointError(f"checkpoint directory {root} does not exist")
    config_path = root / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{root}: no config.json")
    try:
        return LlamaConfig.from_hf(json.loads(config_path.read_text()))
    except ValueError as err:
        raise CheckpointError(f"{config_path}: {err}") from err


def _index_tensors(files: list[Path]) -> dict[str, tuple[Path, dict, int]]:
    """Each tensor's file, header entry and data offset, read from the headers alone
    (no tensor bytes), so a bad checkpoint fails before anything large is read."""
    where: dict[str, tuple[Path, dict, int]] = {}
    for path in files:
        header, data_start = _read_header(path)
        for name, info in header.items():
            if name in where:
                raise CheckpointError(f"tensor {name} is in both {where[name][0]} and {path}")
            where[name] = (path, info, data_start)
    return where


def _check_tensor_set(
    root: Path, expected: dict[str, tuple[int, ...]], where: dict[str, tuple[Path, dict, int]]
) -> None:
    """Every expected tensor present with its shape and a supported dtype; nothing else."""
    missing = [name for name in expected if name not in where]
    if missing:
        shown = ", ".join(missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        raise CheckpointError(f"{root}: missing tensors {shown}")
    # Tied checkpoints may still ship lm_head; everything else must be expected.
    unexpected = [n for n in where if n not in expected and n != "lm_head.weight"]
    unexpected = [n for n in unexpected if not n.endswith("rotary_emb.inv_freq")]
    if unexpected:
        raise CheckpointError(f"{root}: unexpected tensors {', '.join(sorted(unexpected)[:5])}")
    for name, shape in expected.items():
        path, info, _ = where[name]
        if tuple(info.get("shape", ())) != shape:
            raise CheckpointError(
                f"{path}: tensor {name} has shape {tuple(info.get('shape', ()))}, "
                f"config.json implies {shape}"
            )
        if info.get("dtype") not in _ST_DTYPES:
            raise CheckpointError(
                f"{path}: tensor {name} has unsupported dtype {info.get('dtype')!r}"
            )


def save_checkpoint(
    directory: str | Path, config_json: dict, weights: dict[str, torch.Tensor]
) -> None:
    """Write ``config.json`` and one ``model.safetensors`` (what tests and examples need)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config_json, indent=2))
    header: dict[str, dict] = {}
    chunks: list[bytes] = []
    offset = 0
    for name, tensor in weights.items():
        data = bytes(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).tolist())
        header[name] = {
            "dtype": _ST_NAMES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with (root / "model.safetensors").open("wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for data in chunks:
            f.write(data)
