"""Host-backend KV memory: tensors in named POSIX shared memory.

kvstashd's host backend maps an engine's KV by shm name, so host KV must live
in a named shm object. `host_tensor` creates one per call; registering any
tensor that views it (the whole tensor, a slice, a per-layer view) finds the
object by address. The name is unlinked once the last array using the memory
is gone (or at exit)."""

from __future__ import annotations

import ctypes
import itertools
import mmap
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from .errors import Unavailable, invalid

_SHM_DIR = "/dev/shm"
_counter = itertools.count()


@dataclass(frozen=True)
class ShmRegion:
    """One shm object: its name ("/kvstash-py-..."), base address, size."""

    name: str
    base: int
    size: int


class _Registry:
    """Live host_tensor regions by base address, for finding the region
    that holds a tensor. Entries leave when their mapping is collected."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._regions: Dict[int, ShmRegion] = {}

    def add(self, region: ShmRegion) -> None:
        with self._lock:
            self._regions[region.base] = region

    def remove(self, base: int) -> None:
        with self._lock:
            self._regions.pop(base, None)

    def find(self, address: int, size: int) -> Optional[ShmRegion]:
        with self._lock:
            for region in self._regions.values():
                if region.base <= address and address + size <= region.base + region.size:
                    return region
        return None


_registry = _Registry()


def find_region(address: int, size: int) -> Optional[ShmRegion]:
    """The host_tensor region holding [address, address+size), if any."""
    return _registry.find(address, size)


def _release(path: str, base: int) -> None:
    _registry.remove(base)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _normalise_name(name: Optional[str]) -> str:
    if name is None:
        return f"/kvstash-py-{os.getpid()}-{next(_counter)}"
    if not name.startswith("/"):
        name = "/" + name
    if "/" in name[1:] or len(name) < 2 or len(name) > 250:
        raise invalid(f"shm name {name!r} must be '/' followed by 1-249 characters without '/'")
    return name


def _map(name: str, size: int) -> Tuple[mmap.mmap, ShmRegion]:
    path = _SHM_DIR + name
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o660)
    except FileExistsError:
        raise invalid(f"shm object {name} already exists") from None
    except OSError as e:
        raise Unavailable(8, f"creating shm object {path} failed: {e}") from None
    try:
        # The umask may have cleared group bits: a daemon running as another
        # user of our group must still map it.
        os.fchmod(fd, 0o660)
        os.ftruncate(fd, size)
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError as e:
        os.close(fd)
        os.unlink(path)
        raise Unavailable(8, f"mapping shm object {path} ({size} bytes) failed: {e}") from None
    os.close(fd)
    anchor = ctypes.c_char.from_buffer(mm)
    base = ctypes.addressof(anchor)
    del anchor  # an export would keep the mapping from ever closing
    region = ShmRegion(name, base, size)
    _registry.add(region)
    weakref.finalize(mm, _release, path, base)
    return mm, region


_TORCH_NAMES = {
    "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
    "float8_e4m3fn", "float8_e5m2", "half", "float",
}


def _torch(load: bool) -> Any:
    """torch if imported already (or importable, when `load`), else None."""
    import sys

    if "torch" in sys.modules or load:
        try:
            import torch

            return torch
        except ImportError:
            return None
    return None


def host_tensor(shape: Union[int, Sequence[int]], dtype: Any, name: Optional[str] = None) -> Any:
    """A zero-filled tensor in a new named POSIX shared memory object.

    `dtype` is a torch dtype (returns a torch.Tensor), a numpy dtype or type
    (returns a numpy.ndarray), or a string: with torch installed a torch
    dtype name ("bfloat16", "float8_e4m3fn"), otherwise a numpy one.
    `name` is the shm name ("/my-kv"; default "/kvstash-py-<pid>-<n>").
    Register the tensor, or any view of it, with `Client.register`: kvstashd
    must run the host backend.
    """
    dims = (int(shape),) if isinstance(shape, int) else tuple(int(n) for n in shape)
    if any(n < 0 for n in dims):
        raise invalid(f"host_tensor shape {list(dims)} has a negative size")
    count = 1
    for n in dims:
        count *= n

    torch: Any = _torch(load=isinstance(dtype, str))
    want_torch = False
    if isinstance(dtype, str):
        want_torch = torch is not None and dtype in _TORCH_NAMES
        if want_torch:
            dtype = getattr(torch, dtype)
    elif torch is not None and isinstance(dtype, torch.dtype):
        want_torch = True

    if want_torch:
        itemsize = torch.empty((), dtype=dtype).element_size()
    else:
        try:
            import numpy as np
        except ImportError:
            raise invalid(
                f"host_tensor dtype {dtype!r}: needs torch (for a torch dtype) or numpy"
            ) from None
        try:
            np_dtype = np.dtype(dtype)
        except TypeError:
            raise invalid(f"host_tensor dtype {dtype!r} is neither a torch nor a numpy dtype") from None
        itemsize = np_dtype.itemsize

    size = max(count * itemsize, 1)
    mm, _ = _map(_normalise_name(name), size)
    if want_torch:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # frombuffer's note about non-writable buffers
            flat = torch.frombuffer(mm, dtype=torch.uint8)[: count * itemsize]
        return flat.view(dtype).reshape(dims)
    return np.frombuffer(mm, dtype=np_dtype, count=count).reshape(dims)


def shm_name_of(tensor: Any) -> str:
    """The shm object name of a host_tensor (or a view of one)."""
    from ._arrays import view

    v = view(tensor, "tensor")
    region = find_region(v.ptr, max(v.nbytes_span, 1))
    if region is None:
        raise invalid("tensor is not in kvstash shared memory (allocate it with kvstash.host_tensor)")
    return region.name
