"""The connector's settings, read from vLLM's ``kv_connector_extra_config``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from ...board import max_board_slots

# Keys the connector understands; any other key is refused so that a typo
# ("timout_ms") does not silently fall back to a default.
KNOWN_KEYS = ("socket", "model", "tenant", "timeout_ms", "lease_ms", "async_loads",
              "layerwise_loads", "board_slots", "board_completion", "early_reports",
              "finish_wait_us", "timeline_file")

_MAX_TIMEOUT_MS = 3_600_000
# kvstashd refuses leases longer than ten minutes.
_MAX_LEASE_MS = 600_000
# A lease ends with its load (leases.py); it needs to outlast only the time
# from the lookup to the load's retrieve reaching kvstashd, a step or two,
# and bounds how long hits stay pinned when the scheduler dies
# (docs/vllm.md, "Leases").
DEFAULT_LEASE_MS = 10_000
# A wait in get_finished holds the engine's step: never longer than this.
_MAX_FINISH_WAIT_US = 100_000


class SettingsError(ValueError):
    """A bad value in ``kv_connector_extra_config``; names the key and the limit."""


@dataclass(frozen=True)
class Settings:
    socket: Optional[str]
    """kvstashd's endpoint; None: $KVSTASH_SOCKET, then the default socket."""
    model: str
    """Model name in the key namespace (default: vLLM's served model name)."""
    tenant: Optional[str]
    """Tenant salt: engines with different salts never share chunks."""
    timeout_ms: int
    """Per-request timeout of every kvstash call."""
    lease_ms: int
    """The longest a lookup pins its hits in kvstashd: the scheduler releases
    them once their load ended, so this only bounds a lease whose release
    never comes (the scheduler died)."""
    async_loads: bool = True
    """Loads run between scheduler steps (vLLM's asynchronous loads): a hit
    request waits for its KV before it is first scheduled, and a failed
    load is recomputed before the request ever runs. False: loads run in the
    step that computes the request, on its stream (layerwise_loads), which
    saves a scheduler step but leaves a failed load to vLLM's recovery of
    running requests (see docs/vllm.md, "Failures")."""
    layerwise_loads: bool = True
    """With async_loads false: one completion slot per attention layer (or group of layers): layer
    i's attention waits for layer i only. False: one slot per load, waited
    for before the first layer (and vLLM may keep full CUDA graphs)."""
    board_slots: int = field(default_factory=max_board_slots)
    """Slots of each registration's completion board (by default the most a
    board holds, kvstash.max_board_slots()): a load takes one per layer range
    (at most this many ranges), a store two, until its reply."""
    board_completion: bool = True
    """A load is known done from its board slot (released with status 0:
    every chunk in place), read by the engine thread, instead of from the
    CPU reply, which reaches the engine thread only through the client's
    dispatcher thread (and the GIL). Loads between steps then take one
    board slot each. The reply still comes and is counted."""
    early_reports: bool = True
    """A load between steps whose every chunk is in place is reported in
    the very get_finished that finds it done. False: one step later, after
    get_block_ids_with_load_errors (the way a failed load always goes)."""
    finish_wait_us: int = 20_000
    """get_finished of a step with no forward pass (vLLM steps only to move
    KV) waits up to this long for loads in flight, so that a load that
    lands meanwhile is reported in this step instead of the next. It
    waits only for loads expected to land within the bound (at the load
    rate seen so far). 0: never waits."""
    timeline_file: Optional[str] = None
    """A file both sides append per-request stamps to (timeline.py)."""


def _string(extra: Mapping[str, Any], key: str) -> Optional[str]:
    value = extra.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise SettingsError(
            f"kv_connector_extra_config[{key!r}] must be a non-empty string, got {value!r}"
        )
    return value


def _integer(extra: Mapping[str, Any], key: str, default: int, limit: int,
             unit: str = "milliseconds", low: int = 1) -> int:
    value = extra.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        else:
            raise SettingsError(
                f"kv_connector_extra_config[{key!r}] must be an integer number of "
                f"{unit}, got {value!r}"
            )
    if not low <= value <= limit:
        raise SettingsError(
            f"kv_connector_extra_config[{key!r}] = {value} is outside {low}..{limit}"
        )
    return value


def _boolean(extra: Mapping[str, Any], key: str, default: bool) -> bool:
    value = extra.get(key, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise SettingsError(
        f"kv_connector_extra_config[{key!r}] must be true or false, got {value!r}"
    )


def default_model_name(vllm_config: Any) -> str:
    """vLLM's served model name (its first one when several), else the model path."""
    model_config = getattr(vllm_config, "model_config", None)
    served = getattr(model_config, "served_model_name", None)
    if isinstance(served, (list, tuple)):
        served = served[0] if served else None
    if isinstance(served, str) and served:
        return served
    model = getattr(model_config, "model", None)
    if isinstance(model, str) and model:
        return model
    raise SettingsError(
        "kvstash needs a model name: set kv_connector_extra_config['model'] "
        "(vLLM's config has no served model name)"
    )


def parse_settings(extra: Optional[Mapping[str, Any]], vllm_config: Any) -> Settings:
    """Reads and checks the connector's settings; raises SettingsError."""
    extra = dict(extra or {})
    unknown = sorted(set(extra) - set(KNOWN_KEYS))
    if unknown:
        raise SettingsError(
            f"kv_connector_extra_config has unknown key(s) {unknown}; "
            f"KvstashConnector knows {list(KNOWN_KEYS)}"
        )
    model = _string(extra, "model") or default_model_name(vllm_config)
    return Settings(
        socket=_string(extra, "socket"),
        model=model,
        tenant=_string(extra, "tenant"),
        timeout_ms=_integer(extra, "timeout_ms", 5000, _MAX_TIMEOUT_MS),
        lease_ms=_integer(extra, "lease_ms", DEFAULT_LEASE_MS, _MAX_LEASE_MS),
        async_loads=_boolean(extra, "async_loads", True),
        layerwise_loads=_boolean(extra, "layerwise_loads", True),
        # A store takes 2 slots.
        board_slots=_integer(extra, "board_slots", max_board_slots(), max_board_slots(), "slots",
                             low=2),
        board_completion=_boolean(extra, "board_completion", True),
        early_reports=_boolean(extra, "early_reports", True),
        finish_wait_us=_integer(extra, "finish_wait_us", 20_000, _MAX_FINISH_WAIT_US,
                                "microseconds", low=0),
        timeline_file=_string(extra, "timeline_file"),
    )


def waits_per_layer(extra: Optional[Mapping[str, Any]]) -> bool:
    """Whether the forward pass waits per layer for loads (vLLM asks the
    connector's class before any instance exists, to choose its CUDA graph
    mode): only loads in the step (async_loads false) with layerwise_loads."""
    extra = dict(extra or {})
    return (not _boolean(extra, "async_loads", True)
            and _boolean(extra, "layerwise_loads", True))
