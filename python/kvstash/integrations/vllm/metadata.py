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
    """The prompt's tokens from 0 to the end of the last chunk to load (a
    load happens once per request: the workers key it from token 0, and it
    ends their key chain at end_token // chunk_tokens)."""
    block_ids: Tuple[List[int], ...]
    """vLLM block ids per KV cache group, covering the prompt from token 0."""
    start_token: int
    """Tokens before this are already in vLLM's blocks (its own prefix cache)."""
    end_token: int
    async_load: bool = False
    """Loaded between steps: the request is computed only once every worker
    reported it in finished_recving."""


@dataclass
class StoreSpec:
    """Store chunks [start_chunk, start_chunk + num_chunks) of a prompt from its blocks."""

    req_id: str
    token_ids: List[int]
    """The prompt's tokens from chunk from_chunk to the end of the last chunk to store."""
    block_ids: Tuple[List[int], ...]
    """vLLM block ids per KV cache group, from the block holding token
    from_chunk * chunk_tokens (a block boundary of every group) on."""
    start_chunk: int
    num_chunks: int
    from_chunk: int = 0
    """0: token_ids begin the prompt and the keys chain from its namespace.
    Otherwise from_chunk == start_chunk, and the worker continues the key
    chain it holds for the request, which must end at chunk from_chunk (the
    last LoadSpec or StoreSpec it saw of the request ended there); a worker
    that holds no such chain skips the store (`chain_gaps`), never guessing
    keys. The scheduler sends a whole prefix again (from_chunk 0) whenever
    the workers may not hold it: a request's first store, and after a
    preemption."""


@dataclass
class KvstashConnectorMetadata(KVConnectorMetadata):
    loads: List[LoadSpec] = field(default_factory=list)
    stores: List[StoreSpec] = field(default_factory=list)
    preempted_req_ids: Set[str] = field(default_factory=set)
    forward_tokens: int = -1
    """Tokens the step computes (the scheduler output's
    total_num_scheduled_tokens): 0 when vLLM steps only to move KV, so a
    worker may wait for loads in flight without holding anyone's forward
    pass (finish_wait_us). -1: unknown."""
