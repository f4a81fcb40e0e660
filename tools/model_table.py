"""``.venv/bin/python tools/model_table.py``: the bundled models' table of docs/models.md.

Prints, per model, its layers by kind, KV bytes per token, parameters, and on its
own preset's hardware the KV memory and the groups and pool size each vLLM release
computes (block size 16) -- the figures docs/models.md shows, from the code.
"""

from __future__ import annotations

from kvframe.models.catalog import model_names


def _groups(config: object) -> str:
    counts: dict[str, int] = {}
    for group in config.groups:  # type: ignore[attr-defined]
        name = type(group.spec).__name__.removesuffix("Spec")
        counts[name] = counts.get(name, 0) + 1
    return " + ".join(f"{n} {name}" for name, n in counts.items())


def main() -> None:
    """Print the markdown table (imports the executors, so not at the package's import)."""
    from kvframe.executors.model_presets import model_preset
    from kvframe.models import kv_cache_config_for, load_model

    print(
        "| model | layers | KV / token | params (active) | weights | preset | KV memory "
        "| 0.19.1 groups, blocks | 0.33.0 groups, blocks |"
    )
    print("| --- | --- | ---: | ---: | ---: | --- | ---: | --- | --- |")
    for name in model_names():
        arch = load_model(name)
        preset = model_preset(name)
        layers = ", ".join(f"{n} {kind}" for kind, n in arch.kind_counts.items())
        cells = []
        for release in ("0.19.1", "0.33.0"):
            config = kv_cache_config_for(
                arch,
                int(preset.kv_memory_bytes),
                16,
                release,
                _options(preset.tensor_parallel_size),
            )
            cells.append(f"{_groups(config)}, {config.num_blocks:,}")
        print(
            f"| {name} | {layers} | {arch.kv_bytes_per_token / 1024:g} KiB "
            f"| {arch.total_params / 1e9:.1f}B ({arch.active_params / 1e9:.1f}B) "
            f"| {arch.weight_bytes / 2**30:.1f} GiB | `{preset.name}` "
            f"| {preset.kv_memory_bytes / 2**30:.1f} GiB | {cells[0]} | {cells[1]} |"
        )


def _options(tp: int) -> object:
    from kvframe.models import KVGroupOptions

    return KVGroupOptions(tensor_parallel_size=tp)


if __name__ == "__main__":
    main()
