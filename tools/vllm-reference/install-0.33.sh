#!/usr/bin/env bash
# Installs vLLM 0.33.0 into its own virtualenv on a CPU-only machine, for the
# differential tests of kvframe's 0.33 fidelity target (`--vllm 0.33`) against
# vLLM's real scheduler. Nothing here is needed by kvframe itself or by CI.
#   bash tools/vllm-reference/install-0.33.sh [VENV_DIR] [--with-kvframe]   (about 4 minutes)
# The 0.19.1 environment is ../shared/tools/vllm-reference/install.sh; this is
# its counterpart, built the same way: torch from the local CPU wheel (2.13.0;
# vLLM 0.33.0 pins 2.14.0, but nothing its scheduler, block pool or offload
# modules use differs), vLLM without its dependency list, then exactly the
# pure-Python packages that importing its Scheduler, KVCacheManager, BlockPool,
# OffloadingConnector and kv_offload CPU manager asks for. Pins are the versions
# found to work on 2026-11-26; vLLM 0.33.0 needs more than 0.19.1 did:
#   transformers 5.x -> huggingface-hub 2.x -> httpx2 / httpcore2 / truststore,
#   the openai 3.x client (oss-harmony for openai_harmony), xgrammar 0.2.8
#   (-> apache-tvm-ffi), llguidance 1.7, fastapi / starlette 1.x, partial-json-parser.
# Build vLLM objects with DeviceConfig(device="cpu") and a ModelConfig pointing
# at ../shared/tools/vllm-reference/model/ (a config.json only); its Scheduler
# takes hash_block_size and its block hasher a third (lookahead) argument
# (tools/differential/vllm_driver.py does both).
#
# --with-kvframe also makes the environment run the kvframe-vllm bridge
# (`compare.py --bridge --vllm-version 0.33.0`, tests/differential/test_vllm_decisions.py):
# kvframe's own dependencies, pinned as in the 0.19.1 environment and installed
# without theirs (importlib-metadata 10 imports lazy-importer; rich brings
# markdown-it-py, mdurl and pygments), then kvframe, the bridge and the bundled
# plugins the differential runs need, editable from this checkout and also
# without dependencies, so that torch and vLLM's pins stay exactly as above.
# The harness puts the checkout it runs from first on PYTHONPATH, so another
# worktree's code wins over the editable install; the entry points (which
# plugin names exist) come from the install.
set -euo pipefail
VENV=.vllm033-reference-venv
WITH_KVFRAME=0
for arg in "$@"; do
  case "$arg" in
    --with-kvframe) WITH_KVFRAME=1 ;;
    -*) echo "unknown option $arg (only --with-kvframe)" >&2; exit 2 ;;
    *) VENV=$arg ;;
  esac
done
REPO=$(cd "$(dirname "$0")/../.." && pwd)
python3 -m venv "$VENV"
. "$VENV/bin/activate"
pip install -q torch==2.13.0
pip install -q --no-deps vllm==0.33.0
pip install -q --no-deps \
  numpy packaging pydantic pydantic-core typing-inspection annotated-types regex cbor2 \
  pyyaml safetensors tqdm requests urllib3 certifi idna charset-normalizer h11 \
  aiohttp aiohappyeyeballs aiosignal frozenlist multidict yarl propcache attrs \
  psutil pyzmq msgspec pillow pybase64 cachetools cloudpickle uvloop py-cpuinfo \
  prometheus-client distro jiter anyio sniffio diskcache einops xxhash filelock fsspec \
  transformers==5.20.2 huggingface-hub==2.4.0 tokenizers==0.23.3 click \
  httpx2==2.16.2 httpcore2==2.16.2 truststore \
  openai==3.57.0 oss-harmony==0.0.11 \
  xgrammar==0.2.8 apache-tvm-ffi==0.1.11 llguidance==1.7.6 \
  fastapi==0.136.3 starlette==1.10.0 annotated-doc partial-json-parser
python - <<PY
import os
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
import vllm
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.block_pool import BlockPool
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector
assert vllm.__version__.startswith("0.33.0"), vllm.__version__
print("vLLM", vllm.__version__, "reference environment ready:", "$VENV")
PY
if [ "$WITH_KVFRAME" = 1 ]; then
  pip install -q --no-deps \
    pluggy==1.7.0 structlog==26.1.0 rich==15.0.0 importlib-metadata==10.2.0 zipp==4.1.2 \
    lazy-importer==0.1.0 markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0
  pip install -q --no-deps -e "$REPO" \
    -e "$REPO/plugins/kvframe-vllm" -e "$REPO/plugins/kvframe-fcfs" \
    -e "$REPO/plugins/kvframe-priority" -e "$REPO/plugins/kvframe-continuum" \
    -e "$REPO/plugins/kvframe-lru" -e "$REPO/plugins/kvframe-arc" \
    -e "$REPO/plugins/kvframe-cpu-offload"
  python - <<PY
import importlib_metadata, torch, vllm
import kvframe, kvframe_vllm.scheduler, kvframe_vllm.cache_policy
names = sorted(ep.name for ep in importlib_metadata.entry_points(group="kvframe"))
assert {"fcfs", "priority", "continuum", "lru", "arc"} <= set(names), names
assert torch.__version__.startswith("2.13.0"), torch.__version__
print("kvframe", kvframe.__version__, "and the bridge importable; plugins:", ", ".join(names))
PY
fi
