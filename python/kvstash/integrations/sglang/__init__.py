"""kvstash as SGLang's HiCache storage tier (SGLang 0.5.17, interface_v1).

    python -m sglang.launch_server ... --enable-hierarchical-cache --page-size 64 \\
        --hicache-storage-backend dynamic --hicache-storage-backend-extra-config \\
        '{"backend_name": "kvstash", "module_path": "kvstash.integrations.sglang",
          "class_name": "KvstashHiCacheStorage", "interface_v1": 1, "allocator": "shm"}'

with kvstashd --backend host --chunk-tokens 64 (docs/sglang.md).
"""

try:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("kvstash.integrations.sglang needs SGLang 0.5.17: pip install sglang==0.5.17") from error

from .layout import LayoutError, PoolLayout, describe_pool
from .settings import Settings, SettingsError
from .stats import BackendStats
from .storage import KvstashHiCacheStorage, key_bytes, scope_model

SUPPORTED_SGLANG_VERSIONS = ("0.5.17",)
"""The SGLang the backend is tested against."""

__all__ = [
    "BackendStats",
    "KvstashHiCacheStorage",
    "LayoutError",
    "PoolLayout",
    "Settings",
    "SettingsError",
    "SUPPORTED_SGLANG_VERSIONS",
    "describe_pool",
    "key_bytes",
    "scope_model",
]
