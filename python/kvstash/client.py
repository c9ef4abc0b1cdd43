"""Client: one connection to kvstashd (one libkvstash handle)."""

from __future__ import annotations

import ctypes
import json
from ctypes import byref, c_uint64, c_void_p
from typing import Any, Dict, List, Optional, Tuple, Union

from . import _lib
from ._checks import uint_arg as _uint
from ._connection import Connection
from .board import CompletionBoard
from .errors import error_for, invalid
from .layouts import LayerSpec, layer_specs
from .registration import Registration
from .shm import find_region
from .types import Geometry, ServerInfo


def _text(value: Optional[str], what: str) -> Optional[bytes]:
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(f"{what} must be a str, got {type(value).__name__}")
    return value.encode()


class Client:
    """A connection to kvstashd.

    `socket`: None for $KVSTASH_SOCKET, then ipc:///run/kvstash/kvstash.sock;
    a plain path means that ipc socket. `timeout_ms` bounds every request.
    `busy_poll_us`: the I/O thread's spin window; 0 is the library's default
    (50 us), 0xFFFFFFFF never spins (docs/deployment.md, "Spinning").
    Thread-safe: share one Client between threads. Close it (or use `with`)
    when done; that cancels calls still pending.

        with kvstash.Client(name="my-engine") as client:
            reg = client.register(kv_caches, model="llama-3-8b")
    """

    def __init__(self, socket: Optional[str] = None, timeout_ms: int = 5000,
                 name: Optional[str] = None, busy_poll_us: int = 0) -> None:
        self._lib = _lib.lib()
        options = _lib.Options(
            socket=_text(socket, "socket"),
            timeout_ms=_uint(timeout_ms, "timeout_ms"),
            client_name=_text(name, "name"),
            busy_poll_us=_uint(busy_poll_us, "busy_poll_us"),
        )
        handle = c_void_p()
        status = self._lib.kvstash_connect(byref(options), byref(handle))
        if status != 0:
            message = self._lib.kvstash_last_error(handle) if handle.value else None
            text = message.decode(errors="replace") if message else "kvstash_connect failed"
            self._lib.kvstash_close(handle)
            raise error_for(status, text)
        # What this client's Registrations and CompletionBoards call through.
        self._connection = Connection(self._lib, handle, name or "python")

    # ---- lifetime ----

    def close(self) -> None:
        """Cancels pending asynchronous calls (their futures fail with
        Cancelled) and disconnects. The daemon drops this connection's
        registrations. Idempotent."""
        self._connection.close()

    @property
    def closed(self) -> bool:
        return self._connection.closed

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            connection = self.__dict__.get("_connection")  # absent when connecting failed
            if connection is not None and not connection.closed:
                connection.close()
        except Exception:
            pass

    # ---- daemon ----

    def ping(self) -> int:
        """The daemon's uptime in milliseconds."""
        uptime = c_uint64()
        self._connection.call(self._lib.kvstash_ping, byref(uptime))
        return uptime.value

    def _json(self, fn: Any) -> Dict[str, Any]:
        buffer = c_void_p()
        self._connection.call(fn, byref(buffer))
        try:
            if not buffer.value:
                raise error_for(11, "the library returned no JSON")
            return json.loads(ctypes.string_at(buffer.value).decode())
        finally:
            self._lib.kvstash_free(buffer)

    def describe(self) -> Dict[str, Any]:
        """The daemon's configuration and registrations (`kvstash describe --json`)."""
        return self._json(self._lib.kvstash_describe)

    def stats(self) -> Dict[str, Any]:
        """The daemon's counters (`kvstash stats --json`)."""
        return self._json(self._lib.kvstash_stats)

    def clear(self, model: Optional[str] = None, tenant: Optional[str] = None) -> int:
        """Drops stored chunks of one model (and tenant), or of every scope
        this client may clear when model is None. Returns how many."""
        cleared = c_uint64()
        self._connection.call(self._lib.kvstash_clear, _text(model, "model"),
                              _text(tenant, "tenant"), byref(cleared))
        return cleared.value

    def pool_ready(self) -> Tuple[int, int]:
        """(ready_bytes, capacity_bytes) of the daemon's L1 pool: it pins its
        pool in the background, and stores find room as it grows."""
        ready, capacity = c_uint64(), c_uint64()
        self._connection.call(self._lib.kvstash_pool_ready, byref(ready), byref(capacity))
        return ready.value, capacity.value

    @property
    def server_info(self) -> ServerInfo:
        """What the daemon said in its latest Hello (chunk_tokens, backend,
        boot id) and how many daemon restarts this client lived through."""
        info = _lib.CServerInfo()
        self._connection.call(self._lib.kvstash_get_server_info, byref(info))
        return ServerInfo(
            protocol_version=info.protocol_version,
            server_version=info.server_version.decode(errors="replace"),
            boot_id=bytes(info.boot_id),
            chunk_tokens=info.chunk_tokens,
            max_chunks_per_request=info.max_chunks_per_request,
            max_message_bytes=info.max_message_bytes,
            backend=info.backend.decode(errors="replace"),
            peer_timeout_ms=info.peer_timeout_ms,
            restarts=info.restarts,
        )

    # ---- registration ----

    def register(self, layers: Any, model: str, tenant: Optional[str] = None, tp_rank: int = 0,
                 tp_size: int = 1,
                 layout: Union[None, str, Geometry, Dict[str, Union[None, str, Geometry]]] = None,
                 board: Optional[CompletionBoard] = None,
                 replicated_across_ranks: Optional[bool] = None,
                 ) -> Registration:
        """Registers an engine's KV cache and returns its Registration.

        `layers`: a list of per-layer tensors, vLLM's dict of layer name to
        tensor (in layer order), one tensor holding all layers (layer index
        first), or for SGLang a list of (K, V) pairs. Tensors are CUDA tensors
        (kvstashd's cuda backend; the library shares their allocations over
        CUDA IPC) or kvstash.host_tensor memory (host backend), not a mix.
        `layout`: None to infer from shapes and strides, a name from
        kvstash.LAYOUT_NAMES, or a kvstash.Geometry for every layer; with a
        dict of layers, also a dict of layer name to layout (hybrid models;
        layers it leaves out are inferred). vLLM's per-layer views
        [num_blocks, heads, block_size, 2*head] are inferred as `vllm`;
        name MLA layers `vllm_mla` (see kvstash.layouts).
        `board`: a CompletionBoard for GPU-side completion of this
        registration's requests (docs/protocol.md); it must outlive it.
        `replicated_across_ranks`: every tensor-parallel rank holds the same
        KV (an MLA latent), so its chunks are stored once per model and
        shared by all ranks. None: True when every layer is named `mla` or
        `vllm_mla`, else False (per rank). Never True for per-rank heads: a
        rank would load another rank's KV without any error.
        The tensors must stay alive and in place while registered (the
        Registration keeps a reference).
        """
        if not isinstance(model, str) or not model:
            raise invalid("model must be a non-empty str (it names the key namespace)")
        specs = layer_specs(layers, layout)
        if replicated_across_ranks is None:
            replicated_across_ranks = all(s.latent for s in specs)
        options = _lib.RegisterOptions(
            model=model.encode(),
            tenant_salt=_text(tenant, "tenant"),
            tp_rank=_uint(tp_rank, "tp_rank"),
            tp_size=_uint(tp_size, "tp_size"),
            replicated_across_ranks=1 if replicated_across_ranks else 0,
        )
        devices = {s.array.device for s in specs}
        if len(devices) > 1:
            raise invalid(
                f"layers are on several devices ({', '.join(sorted(devices))}): register CUDA "
                "tensors and host tensors separately"
            )
        device = devices.pop()
        keep: List[Any] = []
        if device == "cuda":
            cuda_layers = (_lib.CCudaLayer * len(specs))()
            for i, spec in enumerate(specs):
                cuda_layers[i].data = spec.array.ptr
                cuda_layers[i].geometry = _c_geometry(spec.geometry)
            options.cuda_layers = cuda_layers
            options.num_cuda_layers = len(specs)
            keep.append(cuda_layers)
        elif device == "cpu":
            allocations, layers_c = _host_layers(specs)
            options.allocations = allocations
            options.num_allocations = len(allocations)
            options.layers = layers_c
            options.num_layers = len(specs)
            keep += [allocations, layers_c]
        else:
            raise invalid(f"layers are on device {device!r}: expected CUDA tensors or kvstash.host_tensor memory")
        if board is not None:
            options.board = board._handle
            keep.append(board)
        registration = _lib.CRegistration()
        self._connection.call(self._lib.kvstash_register, byref(options), byref(registration))
        return Registration(self, self._connection, registration, specs, layers, board)


    def register_descriptor(self, fd: int, size_bytes: int, layers: List[Tuple[int, Geometry]],
                            model: str, tenant: Optional[str] = None, tp_rank: int = 0,
                            tp_size: int = 1, replicated_across_ranks: bool = False,
                            ) -> "Registration":
        """Registers KV memory that this process holds open as descriptor
        `fd` (a memfd or an unlinked shared-memory file of at least
        `size_bytes`), e.g. SGLang's HiCache host pool: kvstashd (host
        backend, ipc socket, same pid namespace) maps it through
        /proc/<pid>/fd/<fd>. `layers`: (offset in the file, Geometry) per
        engine layer. The descriptor must stay open while registered: the
        library registers it again after a daemon restart.
        `replicated_across_ranks` as for register()."""
        from .registration import Registration

        if not isinstance(model, str) or not model:
            raise invalid("model must be a non-empty str (it names the key namespace)")
        if not isinstance(fd, int) or fd < 0:
            raise invalid(f"fd must be an open descriptor (an int >= 0), got {fd!r}")
        if not layers:
            raise invalid("layers is empty: register at least one KV layer")
        options = _lib.RegisterOptions(
            model=model.encode(),
            tenant_salt=_text(tenant, "tenant"),
            tp_rank=_uint(tp_rank, "tp_rank"),
            tp_size=_uint(tp_size, "tp_size"),
            replicated_across_ranks=1 if replicated_across_ranks else 0,
        )
        allocations = (_lib.CAllocation * 1)()
        allocations[0].kind = _lib.ALLOCATION_PEER_FD
        allocations[0].fd = fd
        allocations[0].size_bytes = _uint(size_bytes, "size_bytes", 64)
        layers_c = (_lib.CLayer * len(layers))()
        for i, (offset, geometry) in enumerate(layers):
            if not isinstance(geometry, Geometry):
                raise invalid(f"layers[{i}]: expected (offset, kvstash.Geometry), got {geometry!r}")
            layers_c[i].allocation = 0
            layers_c[i].offset_bytes = _uint(offset, f"layers[{i}] offset", 64)
            layers_c[i].geometry = _c_geometry(geometry)
        options.allocations = allocations
        options.num_allocations = 1
        options.layers = layers_c
        options.num_layers = len(layers)
        registration = _lib.CRegistration()
        self._connection.call(self._lib.kvstash_register, byref(options), byref(registration))
        return Registration.of_descriptor(self, self._connection, registration,
                                          [g for _, g in layers])


def _c_geometry(g: Geometry) -> _lib.CGeometry:
    return _lib.CGeometry(
        num_blocks=_uint(g.num_blocks, "num_blocks"),
        kv_count=_uint(g.kv_count, "kv_count"),
        block_tokens=_uint(g.block_tokens, "block_tokens"),
        num_heads=_uint(g.num_heads, "num_heads"),
        head_bytes=_uint(g.head_bytes, "head_bytes"),
        block_stride=_uint(g.block_stride, "block_stride", 64),
        kv_stride=_uint(g.kv_stride, "kv_stride", 64),
        token_stride=_uint(g.token_stride, "token_stride", 64),
        head_stride=_uint(g.head_stride, "head_stride", 64),
        dtype=_uint(int(g.dtype), "dtype", 8),
    )


def _host_layers(specs: List[LayerSpec]):
    """Allocations (one per host_tensor shm object) and layers at their offsets."""
    regions: List[Any] = []
    index: Dict[str, int] = {}
    layers_c = (_lib.CLayer * len(specs))()
    for i, spec in enumerate(specs):
        extent = spec.extent
        region = find_region(spec.array.ptr, extent)
        if region is None:
            raise invalid(
                f"{spec.source}: a CPU tensor at 0x{spec.array.ptr:x} ({extent} bytes) that is not in "
                "kvstash shared memory: allocate host KV with kvstash.host_tensor(shape, dtype) "
                "so that kvstashd's host backend can map it"
            )
        if region.name not in index:
            index[region.name] = len(regions)
            regions.append(region)
        layers_c[i].allocation = index[region.name]
        layers_c[i].offset_bytes = spec.array.ptr - region.base
        layers_c[i].geometry = _c_geometry(spec.geometry)
    allocations = (_lib.CAllocation * len(regions))()
    for i, region in enumerate(regions):
        allocations[i].kind = _lib.ALLOCATION_SHM
        allocations[i].shm_name = region.name.encode()
        allocations[i].size_bytes = region.size
    return allocations, layers_c
