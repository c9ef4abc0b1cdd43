"""What the scheduler-side connector tells the workers each step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Set, Tuple

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata


@dataclass
class LoadSpec:
    """Load tokens [start_token, end_token) of a prompt from kvstash into its blocks."""

    req_id: str
    token_ids: List[int]
    """The prompt's tokens from 0 to the end of the last chunk to load."""
    block_ids: Tuple[List[int], ...]
    """vLLM block ids per KV cache group, covering the prompt from token 0."""
    start_token: int
    """Tokens before this are already in vLLM's blocks (its own prefix cache)."""
    end_token: int
    lease_ids: Tuple[int, ...]
    """The scheduler's lookup lease per registration (rank 0's scope, in
    group_layouts order); released by the load."""
    async_load: bool = False
    """Loaded between steps: the request is computed only once every worker
    reported it in finished_recving."""


@dataclass
class StoreSpec:
    """Store chunks [start_chunk, start_chunk + num_chunks) of a prompt from its blocks."""

    req_id: str
    token_ids: List[int]
    block_ids: Tuple[List[int], ...]
    start_chunk: int
    num_chunks: int


@dataclass
class KvstashConnectorMetadata(KVConnectorMetadata):
    loads: List[LoadSpec] = field(default_factory=list)
    stores: List[StoreSpec] = field(default_factory=list)
    preempted_req_ids: Set[str] = field(default_factory=set)
