"""Registration: an engine's registered KV cache, its keys and its data calls."""

from __future__ import annotations

import array
import asyncio
import ctypes
import sys
from concurrent.futures import Future
from ctypes import byref, c_void_p
from typing import Any, List, Optional, Sequence, Union

from . import _lib
from ._arrays import int32_buffer
from ._connection import Connection
from ._dispatch import KIND_LOOKUP, KIND_OUTCOMES, KIND_RELEASE, outcomes_from
from .board import CompletionBoard, StreamRequest, stream_handle
from .errors import invalid
from .layouts import LayerSpec
from .types import ChunkOutcome, Geometry, LookupResult

_KEY = 32
_CHUNK_SIZE = ctypes.sizeof(_lib.CChunk)
_UINT32_MAX = (1 << 32) - 1

Keys = Union[Sequence[bytes], bytes, bytearray, "Chunks"]


class Chunks:
    """Chunks of one request: keys, token counts and the blocks each
    chunk's tokens live in, laid out for the C API (no copy per call).
    Index or slice it like a list; `len()` is the number of chunks."""

    __slots__ = ("_array", "_start", "_count", "_keep")

    def __init__(self, chunk_array: Any, start: int, count: int, keep: Any) -> None:
        self._array = chunk_array  # (CChunk * n)
        self._start = start
        self._count = count
        self._keep = keep  # what the block_ids pointers point into

    @property
    def _address(self) -> int:
        return ctypes.addressof(self._array) + self._start * _CHUNK_SIZE

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: Union[int, slice]) -> "Chunks":
        if isinstance(index, slice):
            start, stop, step = index.indices(self._count)
            if step != 1:
                raise invalid("Chunks slices must be contiguous (step 1)")
            return Chunks(self._array, self._start + start, max(stop - start, 0), self._keep)
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(f"chunk {index} out of range for {self._count} chunks")
        return Chunks(self._array, self._start + index, 1, self._keep)

    def _chunk(self, i: int) -> _lib.CChunk:
        return self._array[self._start + i]

    @property
    def keys(self) -> List[bytes]:
        """The chunks' 32-byte keys."""
        return [bytes(self._chunk(i).key.bytes) for i in range(self._count)]

    def key(self, i: int) -> bytes:
        """Chunk i's 32-byte key (the last one, -1, continues a chain:
        Registration.chunks(after=))."""
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(f"chunk {i} out of range for {self._count} chunks")
        return bytes(self._chunk(i).key.bytes)

    @property
    def num_tokens(self) -> List[int]:
        return [self._chunk(i).num_tokens for i in range(self._count)]

    def block_ids(self, i: int) -> List[int]:
        """The block ids chunk i reads (store) or writes (retrieve)."""
        c = self._chunk(i)
        return [c.block_ids[j] for j in range(c.num_block_ids)]

    def key_blob(self) -> bytes:
        """The keys back to back (what lookup sends)."""
        return b"".join(bytes(self._chunk(i).key.bytes) for i in range(self._count))

    def __repr__(self) -> str:
        return f"<kvstash.Chunks {self._count} chunks, {sum(self.num_tokens)} tokens>"


def _key_blob(keys: Keys) -> bytes:
    if isinstance(keys, Chunks):
        return keys.key_blob()
    if isinstance(keys, (bytes, bytearray)):
        blob = bytes(keys)
    else:
        try:
            blob = b"".join(keys)
        except TypeError:
            raise invalid("keys must be 32-byte bytes objects (from chunk_keys), a bytes blob or Chunks") from None
        if len(blob) != _KEY * len(keys):
            for i, k in enumerate(keys):
                if len(k) != _KEY:
                    raise invalid(f"keys[{i}] is {len(k)} bytes, expected {_KEY}")
    if len(blob) % _KEY:
        raise invalid(f"keys blob is {len(blob)} bytes, not a multiple of {_KEY}")
    return blob


def _sync_stream(stream: Any) -> None:
    """Today's stream semantics: the host waits for the engine's stream (or
    event) before kvstashd reads its blocks."""
    if stream is None:
        return
    if hasattr(stream, "synchronize"):
        stream.synchronize()
        return
    if isinstance(stream, int):
        torch = sys.modules.get("torch")
        if torch is None:
            raise invalid("stream given as an int handle needs torch to synchronise it")
        torch.cuda.ExternalStream(stream).synchronize()
        return
    raise invalid(
        f"stream must be a torch.cuda.Stream, a torch.cuda.Event, an int cudaStream_t or None, "
        f"got {type(stream).__name__}"
    )


class Registration:
    """An engine's KV cache registered with kvstashd.

    Attributes: `id`, `chunk_tokens` (tokens per chunk, the daemon's),
    `block_tokens`, `chunk_bytes`, `num_layers` (engine layers registered),
    `num_groups`, `geometries` (one Geometry per registered layer).
    `board`: the CompletionBoard it was registered with, or None.
    Use as a context manager to unregister on exit. Keeps the tensors it
    was registered with alive.
    """

    def __init__(self, client: Any, connection: Connection, c: _lib.CRegistration,
                 specs: List[LayerSpec], layers: Any,
                 board: Optional[CompletionBoard] = None) -> None:
        self._client = client  # the kvstash.Client, kept alive while the registration is
        self._connection = connection  # the client's: what the data calls go through
        self._c = c
        self._specs = specs
        self._layers = layers  # keeps the engine's tensors alive
        self.board = board  # kept alive with the registration
        self.id: int = c.id
        self.chunk_tokens: int = c.chunk_tokens
        self.block_tokens: int = c.block_tokens
        self.chunk_bytes: int = c.chunk_bytes
        self.num_groups: int = c.num_groups
        self.layout_fingerprint: bytes = bytes(c.layout_fingerprint)
        self.namespace_id: bytes = bytes(c.namespace_id)
        self.geometries: List[Geometry] = [s.geometry for s in specs]
        self.num_layers: int = len({s.layer for s in specs})
        self._unregistered = False

    @classmethod
    def of_descriptor(cls, client: "Client", connection: Connection, c: _lib.CRegistration,
                      geometries: List[Geometry]) -> "Registration":
        """A registration of memory named by a descriptor (Client.register_descriptor):
        one engine layer per geometry, no tensors to keep alive."""
        registration = cls(client, connection, c, [], None)
        registration.geometries = list(geometries)
        registration.num_layers = len(geometries)
        return registration

    @property
    def client(self) -> Any:
        """The kvstash.Client that registered it."""
        return self._client

    def __repr__(self) -> str:
        return (
            f"<kvstash.Registration id={self.id} layers={self.num_layers} "
            f"chunk_tokens={self.chunk_tokens} block_tokens={self.block_tokens} "
            f"chunk_bytes={self.chunk_bytes}>"
        )

    # ---- keys (no I/O) ----

    def num_chunks(self, num_tokens: int) -> int:
        """Chunks covering num_tokens tokens (the last may be partial)."""
        return -(-num_tokens // self.chunk_tokens)

    def chunk_keys(self, token_ids: Any, *, after: Optional[bytes] = None) -> List[bytes]:
        """The chained 32-byte keys of a prompt's chunks (the last chunk may
        be partial). token_ids: an int32 array or tensor, or a list of ints.
        after: the key of the (full) chunk just before token_ids, which then
        start at a chunk boundary of the prompt: the chain continues from it,
        in work proportional to len(token_ids), and the keys are those the
        whole prompt would get. None: token_ids begin the prompt."""
        previous = _previous_key(after)
        address, n, keep = int32_buffer(token_ids, "token_ids")
        count = self.num_chunks(n)
        out = ctypes.create_string_buffer(max(count, 1) * _KEY)
        status = _lib.lib().kvstash_chunk_keys_after(byref(self._c), previous, c_void_p(address),
                                                     n, out)
        del keep
        if status != 0:
            raise invalid(f"kvstash_chunk_keys_after failed for {n} tokens")
        raw = out.raw
        return [raw[i * _KEY:(i + 1) * _KEY] for i in range(count)]

    def chunks(self, token_ids: Any, block_table: Any, *, start_chunk: int = 0,
               num_chunks: Optional[int] = None, after: Optional[bytes] = None) -> Chunks:
        """The chunks of a prompt whose token t lives in
        block_table[t // block_tokens] (block_table covers the prompt from
        token 0; an int32 numpy array or CPU tensor is used in place).
        start_chunk / num_chunks select a sub-range; keys chain from token 0
        either way. after: token_ids (and block_table) start at a chunk
        boundary of the prompt, just after the chunk keyed `after`, and the
        keys continue its chain (chunk_keys(after=)); start_chunk counts
        from token_ids[0]."""
        previous = _previous_key(after)
        tokens_addr, n, tokens_keep = int32_buffer(token_ids, "token_ids")
        table_addr, table_len, table_keep = int32_buffer(block_table, "block_table")
        needed = -(-n // self.block_tokens)
        if table_len < needed:
            raise invalid(
                f"block_table has {table_len} entries; {n} tokens in blocks of {self.block_tokens} "
                f"need {needed}"
            )
        total = self.num_chunks(n)
        if num_chunks is None:
            num_chunks = total - start_chunk
        if start_chunk < 0 or num_chunks < 0 or start_chunk + num_chunks > total:
            raise invalid(
                f"chunks [{start_chunk}, {start_chunk + num_chunks}) are outside the prompt's "
                f"{total} chunks ({n} tokens, {self.chunk_tokens} per chunk)"
            )
        arr = (_lib.CChunk * max(total, 1))()
        status = _lib.lib().kvstash_prompt_chunks_after(
            byref(self._c), previous, c_void_p(tokens_addr), n, c_void_p(table_addr), table_len,
            arr
        )
        del tokens_keep
        if status != 0:
            raise invalid(f"kvstash_prompt_chunks_after failed for {n} tokens, {table_len} blocks")
        return Chunks(arr, start_chunk, num_chunks, table_keep)

    def chunks_from_keys(self, keys: Keys, num_tokens_per_chunk: Union[int, Sequence[int]],
                         block_ids_per_chunk: Sequence[Any]) -> Chunks:
        """Chunks from keys the engine already has (e.g. its own block
        hashes turned into 32-byte keys): chunk i holds
        num_tokens_per_chunk[i] tokens (an int: the same for all) in blocks
        block_ids_per_chunk[i]."""
        blob = _key_blob(keys)
        count = len(blob) // _KEY
        if isinstance(num_tokens_per_chunk, int):
            tokens = [num_tokens_per_chunk] * count
        else:
            tokens = list(num_tokens_per_chunk)
        if len(tokens) != count or len(block_ids_per_chunk) != count:
            raise invalid(
                f"{count} keys need as many token counts and block lists, got {len(tokens)} and "
                f"{len(block_ids_per_chunk)}"
            )
        flat = array.array("I")
        starts = []
        for i, ids in enumerate(block_ids_per_chunk):
            starts.append(len(flat))
            try:
                flat.extend(ids.tolist() if hasattr(ids, "tolist") else ids)
            except (TypeError, OverflowError) as e:
                raise invalid(f"block_ids_per_chunk[{i}]: {e}") from None
        arr = (_lib.CChunk * max(count, 1))()
        base = flat.buffer_info()[0] if len(flat) else 0
        for i in range(count):
            c = arr[i]
            ctypes.memmove(c.key.bytes, blob[i * _KEY:(i + 1) * _KEY], _KEY)
            if not 0 <= tokens[i] <= _UINT32_MAX:
                raise invalid(f"num_tokens_per_chunk[{i}] {tokens[i]} is out of range")
            c.num_tokens = tokens[i]
            end = starts[i + 1] if i + 1 < count else len(flat)
            c.num_block_ids = end - starts[i]
            if c.num_block_ids:
                c.block_ids = ctypes.cast(base + 4 * starts[i], ctypes.POINTER(ctypes.c_uint32))
        return Chunks(arr, 0, count, flat)

    # ---- data: blocking ----

    def _chunks_arg(self, chunks: Chunks) -> Chunks:
        if not isinstance(chunks, Chunks):
            raise invalid(f"chunks must be kvstash.Chunks (from Registration.chunks), got {type(chunks).__name__}")
        return chunks

    def store(self, chunks: Chunks, *, stream: Any = None) -> List[ChunkOutcome]:
        """Stores the chunks' blocks; one outcome per chunk (STORED,
        ALREADY_PRESENT or SKIPPED_NO_ROOM, or FAILED with its error).
        The blocks must be fully written: with `stream`, the host waits for
        that CUDA stream (or event) first; without, the caller ensures it."""
        chunks = self._chunks_arg(chunks)
        _sync_stream(stream)
        n = len(chunks)
        outcomes = (_lib.COutcome * max(n, 1))()
        self._connection.call(_lib.lib().kvstash_store, self.id, c_void_p(chunks._address), n,
                              outcomes)
        return outcomes_from(outcomes, n)

    def retrieve(self, chunks: Chunks, *, skip_tokens: int = 0,
                 lease_id: int = 0) -> List[ChunkOutcome]:
        """Writes stored chunks into their blocks, leaving the request's first
        skip_tokens tokens untouched; one outcome per chunk (RETRIEVED,
        MISSING or FAILED). When it returns, the bytes are in place, so work
        queued afterwards on any stream reads them. To have a CUDA stream
        wait instead of the host, use retrieve_on_stream()."""
        chunks = self._chunks_arg(chunks)
        n = len(chunks)
        outcomes = (_lib.COutcome * max(n, 1))()
        self._connection.call(_lib.lib().kvstash_retrieve, self.id, c_void_p(chunks._address), n,
                              _u32(skip_tokens, "skip_tokens"), _u64(lease_id, "lease_id"),
                              outcomes)
        return outcomes_from(outcomes, n)

    def lookup(self, keys: Keys, *, lease_ms: int = 0, prefetch: bool = False) -> LookupResult:
        """The longest prefix of keys that is stored, in L1, L2 or L3
        (result.hit_tiers). When anything hits, the hit chunks are leased
        (kept from eviction and from clear) for lease_ms (0: the daemon's
        --lease-ms): end the lease by retrieving with lease_id=, or with
        release(). prefetch=True starts promoting the L2/L3 hits into L1;
        look the same keys up again to learn whether it completed
        (result.prefetch_done)."""
        blob = _key_blob(keys)
        result = _lib.CLookupResult()
        self._connection.call(_lib.lib().kvstash_lookup_ex, self.id, blob, len(blob) // _KEY,
                              _u32(lease_ms, "lease_ms"),
                              _lib.LOOKUP_PREFETCH if prefetch else 0, byref(result))
        return _lib.lookup_result(result)

    def release(self, lease_id: int) -> int:
        """Ends a lease early; returns the chunks it held."""
        return self.release_async(lease_id).result()

    # ---- data: asynchronous (one dispatcher thread per client) ----

    def store_async(self, chunks: Chunks, *, stream: Any = None) -> "Future[List[ChunkOutcome]]":
        """store() returning a concurrent.futures.Future at once (errors,
        including bad arguments, arrive through the Future). `stream` is
        synchronised before submitting, in the calling thread."""
        chunks = self._chunks_arg(chunks)
        _sync_stream(stream)
        return self._connection.submit(KIND_OUTCOMES, _lib.lib().kvstash_store_submit, self.id,
                                       c_void_p(chunks._address), len(chunks))

    def retrieve_async(self, chunks: Chunks, *, skip_tokens: int = 0,
                       lease_id: int = 0) -> "Future[List[ChunkOutcome]]":
        """retrieve() returning a concurrent.futures.Future at once."""
        chunks = self._chunks_arg(chunks)
        return self._connection.submit(KIND_OUTCOMES, _lib.lib().kvstash_retrieve_submit,
                                       self.id, c_void_p(chunks._address), len(chunks),
                                       _u32(skip_tokens, "skip_tokens"),
                                       _u64(lease_id, "lease_id"))

    def lookup_async(self, keys: Keys, *, lease_ms: int = 0,
                     prefetch: bool = False) -> "Future[LookupResult]":
        """lookup() returning a concurrent.futures.Future at once."""
        blob = _key_blob(keys)
        return self._connection.submit(KIND_LOOKUP, _lib.lib().kvstash_lookup_ex_submit, self.id,
                                       blob, len(blob) // _KEY, _u32(lease_ms, "lease_ms"),
                                       _lib.LOOKUP_PREFETCH if prefetch else 0)

    def release_async(self, lease_id: int) -> "Future[int]":
        """release() returning a concurrent.futures.Future at once."""
        return self._connection.submit(KIND_RELEASE, _lib.lib().kvstash_release_submit,
                                       _u64(lease_id, "lease_id"))

    # ---- GPU-side completion (docs/protocol.md) ----

    def _on_stream(self, fn: Any, chunks: Chunks, board: Optional[CompletionBoard],
                   before_board: tuple, after_board: tuple) -> StreamRequest:
        chunks = self._chunks_arg(chunks)
        board = self.board if board is None else board
        if board is None:
            raise invalid(
                f"registration {self.id} has no completion board: register(..., "
                "board=kvstash.CompletionBoard(client)) or pass board="
            )
        if not board._handle:
            raise invalid("the completion board is closed")
        signal = _lib.CBoardSignal()
        statuses: List[int] = []

        def submit(handle: c_void_p, tag: int, call: Any) -> int:
            status = fn(handle, self.id, c_void_p(chunks._address), len(chunks), *before_board,
                        board._handle, *after_board, tag, byref(signal), call)
            statuses.append(status)
            return status

        future = self._connection.submit(KIND_OUTCOMES, submit)
        if not statuses or statuses[0] != 0:
            # Refused before it was sent (or the client is closed): no slot
            # was taken, nothing to wait on. Raise here, not in the Future.
            raise future.exception()
        return StreamRequest(board, signal, future, chunks)

    def retrieve_on_stream(self, chunks: Chunks, *, stream: Any = None, layer_ranges: int = 1,
                           skip_tokens: int = 0, lease_id: int = 0,
                           board: Optional[CompletionBoard] = None) -> StreamRequest:
        """retrieve() with GPU-side completion: returns a StreamRequest once
        the request is queued. Its slots are released (one per layer range,
        in order) as the ranges' bytes land in the blocks; range k holds
        layers [k*L//R, (k+1)*L//R) of the registration's L layers
        (R = layer_ranges, 1 to min(256, L)). `stream`: the engine's CUDA
        stream (an int such as torch.cuda.current_stream().cuda_stream, or
        a torch.cuda.Stream); with layer_ranges=1 it already waits for the
        data when this returns; otherwise call request.wait(stream, k)
        before layer range k's attention. None: no stream (CPU checks with
        request.released(k); the host backend). `board`: the
        registration's board by default. The outcomes (request.outcomes)
        are authoritative: a missing or failed chunk's blocks are unwritten
        although its slots are released. Errors found before the request is
        sent raise here; later ones arrive through request.outcomes and the
        slots' status words."""
        return self._on_stream(_lib.lib().kvstash_retrieve_on_stream, chunks, board,
                               (_u32(skip_tokens, "skip_tokens"), _u64(lease_id, "lease_id")),
                               (c_void_p(stream_handle(stream)),
                                _u32(layer_ranges, "layer_ranges")))

    def store_on_stream(self, chunks: Chunks, *, stream: Any = None,
                        board: Optional[CompletionBoard] = None) -> StreamRequest:
        """store() gated on the engine's stream, without a host wait:
        libkvstash enqueues the gate (slot 0) on `stream` and kvstashd reads
        the blocks only once the stream got there. Slot 1 is released once
        the blocks may be reused (request.wait(stream, 1) before
        overwriting them). stream=None: the caller opens the gate from the
        CPU with request.open_gate() once the blocks are written; a gate
        never opened fails the store at the request's deadline (every
        chunk FAILED with the TimedOut code, or request.outcomes with
        kvstash.TimedOut) and stores nothing. Outcomes arrive in
        request.outcomes."""
        return self._on_stream(_lib.lib().kvstash_store_on_stream, chunks, board,
                               (), (c_void_p(stream_handle(stream)),))

    # ---- asyncio ----

    async def store_aio(self, chunks: Chunks, *, stream: Any = None) -> List[ChunkOutcome]:
        """`await reg.store_aio(chunks)`: store() for asyncio."""
        return await asyncio.wrap_future(self.store_async(chunks, stream=stream))

    async def retrieve_aio(self, chunks: Chunks, *, skip_tokens: int = 0,
                           lease_id: int = 0) -> List[ChunkOutcome]:
        """`await reg.retrieve_aio(chunks)`: retrieve() for asyncio."""
        return await asyncio.wrap_future(
            self.retrieve_async(chunks, skip_tokens=skip_tokens, lease_id=lease_id))

    async def lookup_aio(self, keys: Keys, *, lease_ms: int = 0,
                         prefetch: bool = False) -> LookupResult:
        """`await reg.lookup_aio(keys)`: lookup() for asyncio."""
        return await asyncio.wrap_future(
            self.lookup_async(keys, lease_ms=lease_ms, prefetch=prefetch))

    async def release_aio(self, lease_id: int) -> int:
        """`await reg.release_aio(lease_id)`: release() for asyncio."""
        return await asyncio.wrap_future(self.release_async(lease_id))

    # ---- lifetime ----

    def unregister(self) -> None:
        """Drops the registration (its stored chunks stay, for a later
        registration of the same model and layout). Idempotent; a no-op once
        the client is closed."""
        if self._unregistered or self._connection.closed:
            self._unregistered = True
            return
        self._connection.call(_lib.lib().kvstash_unregister, self.id)
        self._unregistered = True

    def __enter__(self) -> "Registration":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.unregister()


def _previous_key(after: Optional[bytes]) -> Optional[bytes]:
    """The C API's `previous` argument: NULL, or the 32 bytes of a key."""
    if after is None:
        return None
    if not isinstance(after, (bytes, bytearray)) or len(after) != _KEY:
        raise invalid(f"after must be a {_KEY}-byte key (from chunk_keys or Chunks.keys) or None, "
                      f"got {after!r:.80}")
    return bytes(after)


def _u32(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _UINT32_MAX:
        raise invalid(f"{what} must be an int in [0, {_UINT32_MAX}], got {value!r}")
    return value


def _u64(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
        raise invalid(f"{what} must be an int in [0, 2**64), got {value!r}")
    return value
