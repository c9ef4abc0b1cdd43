"""kvstash's vLLM connector (vLLM 0.32.0, v1 KV-connector API).

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "KvstashConnector",
        "kv_connector_module_path": "kvstash.integrations.vllm", "kv_role": "kv_both"}'
"""

try:
    import vllm  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "kvstash.integrations.vllm needs vLLM (tested with vllm==0.32.0): pip install vllm==0.32.0"
    ) from error

from .connector import KvstashConnector
from .metadata import KvstashConnectorMetadata, LoadSpec, StoreSpec
from .settings import Settings, SettingsError

TESTED_VLLM_VERSION = "0.32.0"

__all__ = [
    "KvstashConnector",
    "KvstashConnectorMetadata",
    "LoadSpec",
    "StoreSpec",
    "Settings",
    "SettingsError",
    "TESTED_VLLM_VERSION",
]
