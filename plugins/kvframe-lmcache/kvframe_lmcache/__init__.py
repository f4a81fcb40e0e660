"""An LMCache-style CPU KV tier for kvframe (``--offload lmcache:capacity=...``).

Importing this package does not import torch: the worker-side handler imports it
when it is built.
"""

from __future__ import annotations

from kvframe_lmcache.spec import LMCACHE_0_3_7, LMCacheOffloadSpec, LMCachePricing

__all__ = ["LMCACHE_0_3_7", "LMCacheOffloadSpec", "LMCachePricing"]
