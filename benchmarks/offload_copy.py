"""Copy throughput of the ``cpu`` tier's torch transfer handler, against the bandwidth limit.

    .venv/bin/python benchmarks/offload_copy.py [--quick] [--layers 8] [--block-kib 64]

The handler (``kvframe_cpu_offload.torch_handler.TorchTransferHandler``) is
given ``--layers`` KV tensors of ``--gpu-blocks`` blocks of ``--block-kib`` KiB
each (64 KiB is one layer of a 16-token block of an 8-KV-head, 128-dim bf16
model: 16 x 8 x 128 x 2 (K, V) x 2 bytes). For batches of 1 / 16 / 64 / 256
blocks it times a store (device -> host) and a load (host -> device), one
``start_transfers`` + ``finished_transfers`` each, with two id patterns:

* ``consecutive``: GPU blocks ``b..b+n-1`` to host blocks ``h..h+n-1`` (what a
  request whose blocks were allocated together looks like): one run;
* ``scattered``: random distinct GPU blocks to random distinct host blocks
  (the worst case: every block is its own run).

and both batching strategies (``runs``: a slice copy per coalesced run per
tensor; ``gather``: one ``index_select`` + one ``index_copy_`` per tensor).

The reference is one contiguous ``copy_`` of the same number of bytes between
two preallocated tensors on the same devices, timed in the same run and
interleaved with the handler: the memory-bandwidth limit for that transfer
size. ``ratio`` = reference time / handler time (1.0 = at the limit). Each
figure is the best of ``--repeat`` interleaved rounds; a round repeats a
small batch until it has moved at least 32 MiB.

On a CUDA machine the device tensors are on the GPU and the host buffer is
pinned; the reference is then one pinned <-> device copy, and the handler's
time includes waiting for its side stream's event.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugins" / "kvframe-cpu-offload"))

from kvframe_cpu_offload.torch_handler import TorchTransferHandler  # noqa: E402

BATCHES = (1, 16, 64, 256)
MIN_BYTES_PER_SAMPLE = 32 << 20


def best_time(fn: Callable[[], None], iterations: int) -> float:
    """Seconds per call of ``fn`` over ``iterations`` calls (one sample)."""
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    return (time.perf_counter() - start) / iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--block-kib", type=int, default=64, help="bytes of a block per layer")
    parser.add_argument("--gpu-blocks", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 repeats, 512 GPU blocks")
    args = parser.parse_args()
    if args.quick:
        args.repeat, args.gpu_blocks = 3, 512
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    block_bytes = args.block_kib * 1024
    num_blocks = args.gpu_blocks
    caches = [
        torch.randint(0, 256, (num_blocks, block_bytes), dtype=torch.uint8, device=device)
        for _ in range(args.layers)
    ]
    handlers = {}
    for strategy in ("runs", "gather"):
        handler = TorchTransferHandler(num_blocks, strategy=strategy)
        handler.register_kv_caches(caches)
        handlers[strategy] = handler
    biggest = max(BATCHES) * args.layers * block_bytes
    ref_device = torch.empty(biggest, dtype=torch.uint8, device=device)
    ref_host = torch.empty(biggest, dtype=torch.uint8, pin_memory=cuda)
    rng = random.Random(0)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    print(
        f"device {device} ({torch.get_num_threads()} CPU threads), {args.layers} layers x "
        f"{args.block_kib} KiB per block, torch {torch.__version__}"
    )
    header = f"{'blocks':>6} {'ids':<11} {'dir':<5} {'MiB':>6} {'ref GB/s':>9}"
    header += "".join(f" {s + ' GB/s':>12} {'ratio':>6}" for s in handlers)
    print(header)
    for n in BATCHES:
        nbytes = n * args.layers * block_bytes
        iterations = max(1, MIN_BYTES_PER_SAMPLE // nbytes)
        patterns = {
            "consecutive": list(zip(range(7, 7 + n), range(3, 3 + n), strict=True)),
            "scattered": list(
                zip(rng.sample(range(num_blocks), n), rng.sample(range(num_blocks), n), strict=True)
            ),
        }
        for pattern, pairs in patterns.items():
            for direction in ("store", "load"):
                src, dst = (
                    (ref_device, ref_host) if direction == "store" else (ref_host, ref_device)
                )
                src_view, dst_view = src[:nbytes], dst[:nbytes]

                def reference(s: torch.Tensor = src_view, d: torch.Tensor = dst_view) -> None:
                    d.copy_(s, non_blocking=cuda)
                    sync()

                def transfer(
                    handler: TorchTransferHandler,
                    pairs: list[tuple[int, int]] = pairs,
                    direction: str = direction,
                ) -> None:
                    if direction == "store":
                        job = handler.start_transfers((), pairs)
                    else:
                        job = handler.start_transfers(pairs, ())
                    handler.wait([job])
                    handler.finished_transfers()

                best = {"ref": float("inf"), **{s: float("inf") for s in handlers}}
                for _ in range(args.repeat):
                    best["ref"] = min(best["ref"], best_time(reference, iterations))
                    for strategy, handler in handlers.items():
                        t = best_time(lambda h=handler: transfer(h), iterations)
                        best[strategy] = min(best[strategy], t)
                row = f"{n:>6} {pattern:<11} {direction:<5} {nbytes / 2**20:>6.1f}"
                row += f" {nbytes / best['ref'] / 1e9:>9.2f}"
                for strategy in handlers:
                    row += f" {nbytes / best[strategy] / 1e9:>12.2f}"
                    row += f" {best['ref'] / best[strategy]:>6.2f}"
                print(row, flush=True)


if __name__ == "__main__":
    main()
