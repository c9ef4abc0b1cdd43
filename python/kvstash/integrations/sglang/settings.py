"""The backend's settings, from SGLang's --hicache-storage-backend-extra-config
(docs/sglang.md lists them)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional

class SettingsError(ValueError):
    """An extra-config value this backend cannot use, naming it."""


@dataclass(frozen=True)
class Settings:
    socket: Optional[str] = None  # kvstashd endpoint; None: $KVSTASH_SOCKET, then the default
    timeout_ms: int = 2000  # every request to kvstashd: a miss or a failed write after it
    reconnect_interval_s: float = 1.0  # while kvstashd is unreachable: how often to try again
    model: Optional[str] = None  # the key namespace's model name; None: SGLang's model path
    tenant: Optional[str] = None  # tenant salt: engines with another salt never share pages
    lease_ms: int = 10000  # how long batch_exists pins its hits for batch_get_v1 at most

    @staticmethod
    def from_extra_config(extra: Optional[Mapping[str, Any]]) -> "Settings":
        extra = dict(extra or {})
        known = {"kvstash_socket", "kvstash_timeout_ms", "kvstash_reconnect_interval_s",
                 "kvstash_model", "kvstash_tenant", "kvstash_lease_ms"}
        unknown = sorted(k for k in extra if k.startswith("kvstash_") and k not in known)
        if unknown:
            raise SettingsError(
                f"unknown kvstash setting(s) {unknown} in the extra config (known: {sorted(known)})"
            )
        socket = extra.get("kvstash_socket", os.environ.get("KVSTASH_SOCKET"))
        timeout_ms = extra.get("kvstash_timeout_ms", 2000)
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 1 <= timeout_ms <= 600_000:
            raise SettingsError(
                f"kvstash_timeout_ms {timeout_ms!r} must be an int from 1 to 600000 (milliseconds)"
            )
        lease_ms = extra.get("kvstash_lease_ms", 10000)
        if isinstance(lease_ms, bool) or not isinstance(lease_ms, int) or not 1 <= lease_ms <= 600_000:
            raise SettingsError(
                f"kvstash_lease_ms {lease_ms!r} must be an int from 1 to 600000 (milliseconds)"
            )
        interval = extra.get("kvstash_reconnect_interval_s", 1.0)
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0.0 <= interval <= 3600.0:
            raise SettingsError(
                f"kvstash_reconnect_interval_s {interval!r} must be a number from 0 to 3600 (seconds)"
            )
        for key in ("kvstash_socket", "kvstash_model", "kvstash_tenant"):
            value = extra.get(key)
            if value is not None and (not isinstance(value, str) or not value or len(value) > 255):
                raise SettingsError(f"{key} {value!r} must be a non-empty string of at most 255 bytes")
        return Settings(socket=socket, timeout_ms=timeout_ms, reconnect_interval_s=float(interval),
                        model=extra.get("kvstash_model"), tenant=extra.get("kvstash_tenant"),
                        lease_ms=lease_ms)
