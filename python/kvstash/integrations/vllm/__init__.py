"""kvstash's vLLM connector (vLLM 0.26.0 to 0.33.0, v1 KV-connector API).

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "KvstashConnector",
        "kv_connector_module_path": "kvstash.integrations.vllm", "kv_role": "kv_both"}'
"""

try:
    import vllm  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "kvstash.integrations.vllm needs vLLM 0.26.0 to 0.33.0: pip install 'vllm>=0.26,<0.34'"
    ) from error

from .connector import KvstashConnector
from .metadata import KvstashConnectorMetadata, LoadSpec, StoreSpec
from .settings import Settings, SettingsError
from .stats import KvstashConnectorStats

SUPPORTED_VLLM_VERSIONS = ("0.26.0", "0.33.0")
"""The oldest and the newest vLLM the connector is tested against."""

__all__ = [
    "KvstashConnector",
    "KvstashConnectorMetadata",
    "KvstashConnectorStats",
    "LoadSpec",
    "StoreSpec",
    "Settings",
    "SettingsError",
    "SUPPORTED_VLLM_VERSIONS",
]
