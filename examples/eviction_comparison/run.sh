#!/usr/bin/env bash
# The eviction-policy comparison end to end: set-up, sweep, table and report.
#   examples/eviction_comparison/run.sh
# Writes runs/eviction-comparison/results.sqlite and runs/eviction-comparison/report/
# (report.html, PNG + SVG figures). Running it again skips the cells already stored.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/bootstrap --all   # --all: matplotlib for compare --plots
.venv/bin/python -c "import kvframe_s3fifo" 2>/dev/null \
  || .venv/bin/python -m pip install -q --no-deps --no-build-isolation -e examples/third_party_policy
.venv/bin/kvframe sweep examples/eviction_comparison/sweep.toml
.venv/bin/kvframe compare runs/eviction-comparison/results.sqlite \
  --plots runs/eviction-comparison/report --title "Eviction policies on Mooncake (first 2,000 requests)"
