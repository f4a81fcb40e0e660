#!/usr/bin/env bash
# Generate the workloads of paper_sweep.toml: both presets x three seeds, each
# at its preset's base rate (the sweep scales arrivals with rate_scale).
#   swe-bench: 60 jobs at 0.25 jobs/s  (x1, x2, x4, x8 -> 0.25, 0.5, 1, 2 jobs/s)
#   bfcl:     300 jobs at 4 jobs/s     (x1, x4, x16 -> 4, 16, 64 jobs/s)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="$root/runs/agentic-paper"
mkdir -p "$out"
kvframe="$root/.venv/bin/kvframe"
for seed in 0 1 2; do
  "$kvframe" gen agentic --preset swe-bench --jobs 60 --rate 0.25 --seed "$seed" \
    --out "$out/swe-bench-s$seed.jsonl"
  "$kvframe" gen agentic --preset bfcl --jobs 300 --rate 4 --seed "$seed" \
    --out "$out/bfcl-s$seed.jsonl"
done
