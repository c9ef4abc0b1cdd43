"""ctypes mirror of the C API in client/include/kvstash/kvstash.h.

One module owns the shared library: its structs, its function prototypes and
where it is loaded from. Everything else in the package calls `lib()`.

ctypes releases the GIL around every foreign call (CDLL, not PyDLL), so a
thread blocked in kvstash_store lets the others run.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import (
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_int,
    c_int32,
    c_size_t,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

ALLOCATION_SHM = 0
ALLOCATION_CUDA_IPC = 1
ALLOCATION_PEER_FD = 2

# KVSTASH_ABI_VERSION: the libkvstash (libkvstash.so.1) whose structs these are.
ABI_VERSION = 1


class _Versioned(Structure):
    """A struct of kvstash.h that leads with struct_size (kvstash.h, "The
    ABI"): set to this struct's size on creation, so the library reads and
    writes only what this binding declares."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.struct_size = ctypes.sizeof(self)


class Options(_Versioned):
    _fields_ = [
        ("struct_size", c_size_t),
        ("socket", c_char_p),
        ("timeout_ms", c_uint32),
        ("client_name", c_char_p),
        ("busy_poll_us", c_uint32),
    ]


class CGeometry(Structure):
    _fields_ = [
        ("num_blocks", c_uint32),
        ("kv_count", c_uint32),
        ("block_tokens", c_uint32),
        ("num_heads", c_uint32),
        ("head_bytes", c_uint32),
        ("block_stride", c_uint64),
        ("kv_stride", c_uint64),
        ("token_stride", c_uint64),
        ("head_stride", c_uint64),
        ("dtype", c_uint8),
    ]


class CAllocation(Structure):
    _fields_ = [
        ("kind", c_uint32),
        ("fd", c_int32),
        ("shm_name", c_char_p),
        ("size_bytes", c_uint64),
        ("ipc_handle", c_uint8 * 64),
        ("gpu_uuid", c_uint8 * 16),
    ]


class CLayer(Structure):
    _fields_ = [
        ("allocation", c_uint32),
        ("offset_bytes", c_uint64),
        ("geometry", CGeometry),
    ]


class CCudaLayer(Structure):
    _fields_ = [("data", c_void_p), ("geometry", CGeometry)]


class RegisterOptions(_Versioned):
    _fields_ = [
        ("struct_size", c_size_t),
        ("model", c_char_p),
        ("tenant_salt", c_char_p),
        ("tp_rank", c_uint32),
        ("tp_size", c_uint32),
        ("allocations", POINTER(CAllocation)),
        ("num_allocations", c_size_t),
        ("layers", POINTER(CLayer)),
        ("num_layers", c_size_t),
        ("cuda_layers", POINTER(CCudaLayer)),
        ("num_cuda_layers", c_size_t),
        ("board", c_void_p),  # kvstash_board*, GPU-side completion
        ("replicated_across_ranks", c_uint32),
    ]


class CBoardSignal(Structure):
    _fields_ = [("slot", c_uint32), ("count", c_uint32), ("sequence", c_uint32)]


class CRegistration(_Versioned):
    _fields_ = [
        ("struct_size", c_size_t),
        ("id", c_uint64),
        ("chunk_tokens", c_uint32),
        ("block_tokens", c_uint32),
        ("chunk_bytes", c_uint64),
        ("num_groups", c_uint32),
        ("layout_fingerprint", c_uint8 * 32),
        ("namespace_id", c_uint8 * 32),
    ]


class CKey(Structure):
    _fields_ = [("bytes", c_uint8 * 32)]


class CChunk(Structure):
    _fields_ = [
        ("key", CKey),
        ("num_tokens", c_uint32),
        ("block_ids", POINTER(c_uint32)),
        ("num_block_ids", c_uint32),
    ]


class COutcome(Structure):
    _fields_ = [("result", c_uint8), ("num_tokens", c_uint32), ("error", c_int)]


class CLookupResult(_Versioned):
    _fields_ = [
        ("struct_size", c_size_t),
        ("hit_chunks", c_uint32),
        ("hit_tokens", c_uint64),
        ("lease_id", c_uint64),
        ("lease_expires_ms", c_uint32),
        ("l1_chunks", c_uint32),
        ("l2_chunks", c_uint32),
        ("l3_chunks", c_uint32),
        ("prefetch_pending", c_uint32),
        ("lease_truncated", c_uint32),
    ]


LOOKUP_PREFETCH = 1  # KVSTASH_LOOKUP_PREFETCH


def lookup_result(c: CLookupResult) -> Any:
    """The Python LookupResult of a kvstash_lookup_result."""
    from .types import LookupResult
    return LookupResult(c.hit_chunks, c.hit_tokens, c.lease_id, c.lease_expires_ms,
                        c.l1_chunks, c.l2_chunks, c.l3_chunks, c.prefetch_pending,
                        bool(c.lease_truncated))


class CServerInfo(_Versioned):
    _fields_ = [
        ("struct_size", c_size_t),
        ("protocol_version", c_uint32),
        ("server_version", c_char * 32),
        ("boot_id", c_uint8 * 16),
        ("chunk_tokens", c_uint32),
        ("max_chunks_per_request", c_uint32),
        ("max_message_bytes", c_uint64),
        ("backend", c_char * 16),
        ("peer_timeout_ms", c_uint32),
        ("restarts", c_uint32),
    ]


_client_p = c_void_p
_call_p = c_void_p
_status = c_int

# name -> (restype, argtypes). Every function of kvstash.h.
_PROTOTYPES = {
    "kvstash_abi_version": (c_uint32, []),
    "kvstash_connect": (_status, [POINTER(Options), POINTER(_client_p)]),
    "kvstash_close": (None, [_client_p]),
    "kvstash_last_error": (c_char_p, [_client_p]),
    "kvstash_status_name": (c_char_p, [_status]),
    "kvstash_ping": (_status, [_client_p, POINTER(c_uint64)]),
    "kvstash_get_server_info": (_status, [_client_p, POINTER(CServerInfo)]),
    "kvstash_describe": (_status, [_client_p, POINTER(c_void_p)]),
    "kvstash_stats": (_status, [_client_p, POINTER(c_void_p)]),
    "kvstash_free": (None, [c_void_p]),
    "kvstash_clear": (_status, [_client_p, c_char_p, c_char_p, POINTER(c_uint64)]),
    "kvstash_pool_ready": (_status, [_client_p, POINTER(c_uint64), POINTER(c_uint64)]),
    "kvstash_register": (
        _status,
        [_client_p, POINTER(RegisterOptions), POINTER(CRegistration)],
    ),
    "kvstash_unregister": (_status, [_client_p, c_uint64]),
    "kvstash_num_chunks": (c_size_t, [POINTER(CRegistration), c_size_t]),
    "kvstash_chunk_keys": (
        _status,
        [POINTER(CRegistration), c_void_p, c_size_t, c_void_p],
    ),
    "kvstash_prompt_chunks": (
        _status,
        [POINTER(CRegistration), c_void_p, c_size_t, c_void_p, c_size_t, c_void_p],
    ),
    "kvstash_chunk_keys_after": (
        _status,
        [POINTER(CRegistration), c_void_p, c_void_p, c_size_t, c_void_p],
    ),
    "kvstash_prompt_chunks_after": (
        _status,
        [POINTER(CRegistration), c_void_p, c_void_p, c_size_t, c_void_p, c_size_t, c_void_p],
    ),
    "kvstash_store": (_status, [_client_p, c_uint64, c_void_p, c_size_t, c_void_p]),
    "kvstash_retrieve": (
        _status,
        [_client_p, c_uint64, c_void_p, c_size_t, c_uint32, c_uint64, c_void_p],
    ),
    "kvstash_lookup_ex": (
        _status,
        [_client_p, c_uint64, c_void_p, c_size_t, c_uint32, c_uint32, POINTER(CLookupResult)],
    ),
    "kvstash_release": (_status, [_client_p, c_uint64]),
    "kvstash_store_submit": (
        _status,
        [_client_p, c_uint64, c_void_p, c_size_t, c_uint64, POINTER(_call_p)],
    ),
    "kvstash_retrieve_submit": (
        _status,
        [_client_p, c_uint64, c_void_p, c_size_t, c_uint32, c_uint64, c_uint64,
         POINTER(_call_p)],
    ),
    "kvstash_lookup_ex_submit": (
        _status,
        [_client_p, c_uint64, c_void_p, c_size_t, c_uint32, c_uint32, c_uint64,
         POINTER(_call_p)],
    ),
    "kvstash_release_submit": (_status, [_client_p, c_uint64, c_uint64, POINTER(_call_p)]),
    "kvstash_retrieve_on_stream": (
        _status,
        [_client_p, c_uint64, c_void_p, c_size_t, c_uint32, c_uint64, c_void_p, c_void_p,
         c_uint32, c_uint64, POINTER(CBoardSignal), POINTER(_call_p)],
    ),
    "kvstash_store_on_stream": (
        _status,
        [_client_p, c_uint64, c_void_p, c_size_t, c_void_p, c_void_p, c_uint64,
         POINTER(CBoardSignal), POINTER(_call_p)],
    ),
    "kvstash_call_done": (c_int, [_call_p]),
    "kvstash_call_wait": (c_int, [_call_p, c_uint32]),
    "kvstash_call_user_data": (c_uint64, [_call_p]),
    "kvstash_call_status": (_status, [_call_p]),
    "kvstash_call_error": (c_char_p, [_call_p]),
    "kvstash_call_outcomes": (c_size_t, [_call_p, c_void_p, c_size_t]),
    "kvstash_call_lookup_result": (_status, [_call_p, POINTER(CLookupResult)]),
    "kvstash_call_free": (None, [_call_p]),
    "kvstash_completion_fd": (c_int, [_client_p]),
    "kvstash_take_completed": (c_size_t, [_client_p, POINTER(_call_p), c_size_t]),
    "kvstash_board_create": (_status, [_client_p, c_uint32, c_int, POINTER(c_void_p)]),
    "kvstash_board_destroy": (None, [c_void_p]),
    "kvstash_board_wait": (
        _status, [_client_p, c_void_p, c_void_p, POINTER(CBoardSignal), c_uint32],
    ),
    "kvstash_board_released": (c_int, [c_void_p, POINTER(CBoardSignal), c_uint32]),
    "kvstash_board_status": (c_uint32, [c_void_p, c_uint32]),
    "kvstash_board_release": (None, [c_void_p, c_uint32, c_uint32, c_uint32]),
    "kvstash_max_board_slots": (c_uint32, []),
    "kvstash_max_layer_ranges": (c_uint32, []),
    "kvstash_layer_range_begin": (c_uint32, [c_uint32, c_uint32, c_uint32]),
}


class _Missing:
    """Stands in for a function this libkvstash does not export."""

    def __init__(self, name: str, path: str) -> None:
        self._name = name
        self._path = path

    def __call__(self, *args, **kwargs):
        from .errors import Unavailable

        raise Unavailable(
            8, f"{self._name} is not exported by {self._path}: this libkvstash is older "
            "than the kvstash Python package",
        )


class Library:
    """The loaded libkvstash with every prototype set."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._dll = ctypes.CDLL(path)
        self.missing: list[str] = []
        for name, (restype, argtypes) in _PROTOTYPES.items():
            try:
                fn = getattr(self._dll, name)
            except AttributeError:
                self.missing.append(name)
                setattr(self, name, _Missing(name, path))
                continue
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)
        # Structs laid out for another ABI would be misread: refuse the
        # library at once rather than call it.
        abi = None if "kvstash_abi_version" in self.missing else int(self.kvstash_abi_version())
        if abi != ABI_VERSION:
            from .errors import Unavailable

            raise Unavailable(
                8, f"{path} has C ABI {abi if abi is not None else 0} (libkvstash.so."
                f"{abi if abi is not None else 0}); this kvstash Python package needs ABI "
                f"{ABI_VERSION}: install the libkvstash built with it (pip install .) or "
                "set KVSTASH_LIB",
            )

    if TYPE_CHECKING:  # the prototypes are set in __init__; tell type checkers so

        def __getattr__(self, name: str) -> Any: ...


def _candidates() -> list[Path]:
    env = os.environ.get("KVSTASH_LIB")
    if env:
        return [Path(env)]
    here = Path(__file__).resolve().parent
    found = [here / "libkvstash.so"]
    # A source checkout run with PYTHONPATH=python: the CMake build's library.
    for build in ("build", "build/python"):
        found.append(here.parent.parent / build / "client" / "libkvstash.so")
    return found


_lock = threading.Lock()
_library: Optional[Library] = None


def lib() -> Library:
    """The process's libkvstash, loaded on first use.

    $KVSTASH_LIB names the file; otherwise the copy inside the package, then
    build/client/libkvstash.so of a source checkout.
    """
    global _library
    if _library is not None:
        return _library
    with _lock:
        if _library is None:
            tried = _candidates()
            for path in tried:
                if path.is_file():
                    _library = Library(str(path))
                    break
            else:
                from .errors import Unavailable

                raise Unavailable(
                    8,
                    "libkvstash.so not found (tried "
                    + ", ".join(str(p) for p in tried)
                    + "): install the package with `pip install .` or set KVSTASH_LIB",
                )
    return _library


def status_name(code: int) -> str:
    name = lib().kvstash_status_name(code)
    return name.decode() if name else f"status {code}"


__all__ = [
    "CAllocation",
    "CChunk",
    "CCudaLayer",
    "CGeometry",
    "CKey",
    "CLayer",
    "CLookupResult",
    "LOOKUP_PREFETCH",
    "COutcome",
    "CRegistration",
    "CServerInfo",
    "Options",
    "RegisterOptions",
    "lookup_result",
    "Library",
    "lib",
]
