"""kvstash: the Python client of kvstashd, the KV-cache offload daemon.

    import kvstash

    with kvstash.Client(name="my-engine") as client:
        reg = client.register(kv_caches, model="llama-3-8b")   # torch tensors
        chunks = reg.chunks(token_ids, block_table)
        reg.store(chunks)
        hit = reg.lookup(reg.chunk_keys(token_ids))
        reg.retrieve(chunks[: hit.hit_chunks])

The distribution is `kvstash-sidecar` (PyPI's `kvstash` is an unrelated
project); build it from the kvstash repository with `pip install .`.
torch and numpy are optional: the package imports without either.
"""

from .board import (CompletionBoard, StreamRequest, layer_range_begin, max_board_slots,
                    max_layer_ranges)
from .client import Client
from .errors import (
    Cancelled,
    DeviceError,
    Error,
    Internal,
    InvalidArgument,
    MalformedMessage,
    NotFound,
    OutOfRange,
    ResourceExhausted,
    TimedOut,
    TooLarge,
    Unavailable,
    UnsupportedVersion,
)
from .layouts import LAYOUT_NAMES, LayerSpec, layer_specs
from .registration import Chunks, Registration
from .shm import host_tensor, shm_name_of
from .types import BoardSignal, ChunkOutcome, ChunkResult, DType, Geometry, LookupResult, ServerInfo

DEFAULT_SOCKET = "ipc:///run/kvstash/kvstash.sock"
__version__ = "0.1.0"

__all__ = [
    "BoardSignal",
    "Cancelled",
    "ChunkOutcome",
    "ChunkResult",
    "Chunks",
    "Client",
    "CompletionBoard",
    "DEFAULT_SOCKET",
    "DType",
    "DeviceError",
    "Error",
    "Geometry",
    "Internal",
    "InvalidArgument",
    "LAYOUT_NAMES",
    "LayerSpec",
    "LookupResult",
    "layer_range_begin",
    "MalformedMessage",
    "max_board_slots",
    "max_layer_ranges",
    "NotFound",
    "OutOfRange",
    "Registration",
    "ResourceExhausted",
    "ServerInfo",
    "StreamRequest",
    "TimedOut",
    "TooLarge",
    "Unavailable",
    "UnsupportedVersion",
    "host_tensor",
    "layer_specs",
    "shm_name_of",
]
