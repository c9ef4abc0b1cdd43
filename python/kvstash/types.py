"""Plain value types of the kvstash API."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import List, NamedTuple, Union


class DType(enum.IntEnum):
    """Element types (the wire's DType values)."""

    U8 = 0
    I8 = 1
    F8E4M3 = 2
    F8E5M2 = 3
    F16 = 4
    BF16 = 5
    F32 = 6


class ChunkResult(enum.IntEnum):
    """What happened to one chunk of a store or retrieve."""

    STORED = 0
    ALREADY_PRESENT = 1
    SKIPPED_NO_ROOM = 2
    RETRIEVED = 3
    MISSING = 4
    FAILED = 5


_OK_RESULTS = frozenset(
    (ChunkResult.STORED, ChunkResult.ALREADY_PRESENT, ChunkResult.RETRIEVED)
)


@dataclass(frozen=True)
class ChunkOutcome:
    """One chunk's result. `num_tokens`: tokens stored or written; `error`:
    the kvstash_status with FAILED (0 otherwise)."""

    __slots__ = ("result", "num_tokens", "error")
    result: ChunkResult
    num_tokens: int
    error: int

    @property
    def ok(self) -> bool:
        """Stored, already present, or retrieved: the chunk's bytes are where
        the caller wanted them."""
        return self.result in _OK_RESULTS


@dataclass(frozen=True)
class LookupResult:
    """The longest stored prefix of the keys looked up. The lease (when
    lease_ms > 0 and something hit) keeps those chunks until released or
    expired."""

    hit_chunks: int
    hit_tokens: int
    lease_id: int
    lease_expires_ms: int
    # Where the hits are: the first l1_chunks in the daemon's memory (L1),
    # then l2_chunks on its disk (L2), then l3_chunks in Redis (L3).
    l1_chunks: int = 0
    l2_chunks: int = 0
    l3_chunks: int = 0
    # Hit chunks a prefetch is still promoting into L1; 0 once it completed.
    prefetch_pending: int = 0
    # The prefix stopped at kvstashd's leased-bytes budget (--max-leased-share)
    # although more keys are stored: fewer hits than the daemon holds.
    lease_truncated: bool = False

    @property
    def hit_tiers(self) -> List[str]:
        """The tier of each hit chunk, in order: "L1", "L2" or "L3"."""
        return ["L1"] * self.l1_chunks + ["L2"] * self.l2_chunks + ["L3"] * self.l3_chunks

    @property
    def prefetch_done(self) -> bool:
        """True once no hit chunk is still being promoted into L1."""
        return self.prefetch_pending == 0


@dataclass(frozen=True)
class ServerInfo:
    """What kvstashd said in its latest Hello, and the restarts this client saw."""

    protocol_version: int
    server_version: str
    boot_id: bytes
    chunk_tokens: int
    max_chunks_per_request: int
    max_message_bytes: int
    backend: str
    peer_timeout_ms: int
    restarts: int


@dataclass(frozen=True)
class Geometry:
    """One layer's geometry in bytes (docs/protocol.md "Geometry"):

        address(b, k, t, h) = base + b*block_stride + k*kv_stride
                                   + t*token_stride + h*head_stride

    with `head_bytes` contiguous bytes there. `kv_count` is 2 for K and V,
    1 for an MLA latent; a stride whose count is 1 is never used (give 0 or
    anything). Pass one as `layout=` to `Client.register` to skip inference.
    """

    num_blocks: int
    kv_count: int
    block_tokens: int
    num_heads: int
    head_bytes: int
    block_stride: int
    kv_stride: int
    token_stride: int
    head_stride: int
    dtype: Union[DType, int] = DType.U8

    def extent_bytes(self) -> int:
        """Bytes from the layer base to one past its last payload byte."""
        return (
            (self.num_blocks - 1) * self.block_stride
            + (self.kv_count - 1) * self.kv_stride
            + (self.block_tokens - 1) * self.token_stride
            + (self.num_heads - 1) * self.head_stride
            + self.head_bytes
        )

    @staticmethod
    def vllm_flash_nhd(num_blocks: int, block_tokens: int, num_heads: int, head_bytes: int,
                       dtype: Union[DType, int] = DType.U8) -> "Geometry":
        """A packed vLLM flash-attn NHD layer [2, num_blocks, block_tokens,
        num_heads, head_bytes] (vocab's VllmFlashNhdGeometry)."""
        token = num_heads * head_bytes
        block = token * block_tokens
        return Geometry(num_blocks, 2, block_tokens, num_heads, head_bytes,
                        block_stride=block, kv_stride=block * num_blocks,
                        token_stride=token, head_stride=head_bytes, dtype=dtype)


__all__ = ["ChunkOutcome", "ChunkResult", "DType", "Geometry", "LookupResult", "ServerInfo"]


class BoardSignal(NamedTuple):
    """The completion-board slots of one on-stream request: slots
    [slot, slot + count) are released when their value reaches `sequence`.
    A retrieve has one slot per layer range; a store has 2 (0: the gate the
    engine opens, 1: released once the engine's blocks may be reused)."""

    slot: int
    count: int
    sequence: int
