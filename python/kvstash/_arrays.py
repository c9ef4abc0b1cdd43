"""One view of torch tensors and numpy arrays: address, shape, byte strides,
element type and device, read without copying and without importing torch
or numpy unless the caller already did."""

from __future__ import annotations

import array
import ctypes
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

from .errors import invalid
from .types import DType

# torch dtype name (str(dtype) without "torch.") and numpy dtype str -> kvstash DType.
_TORCH_DTYPES = {
    "uint8": DType.U8,
    "int8": DType.I8,
    "float8_e4m3fn": DType.F8E4M3,
    "float8_e5m2": DType.F8E5M2,
    "float16": DType.F16,
    "bfloat16": DType.BF16,
    "float32": DType.F32,
}
_NUMPY_DTYPES = {"|u1": DType.U8, "|i1": DType.I8, "<f2": DType.F16, "<f4": DType.F32}
SUPPORTED_DTYPES = "uint8, int8, float8_e4m3fn, float8_e5m2, float16, bfloat16, float32"


@dataclass(frozen=True)
class ArrayView:
    """What registration needs to know about one tensor."""

    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]  # bytes
    itemsize: int
    dtype: Optional[DType]  # None: an element type kvstash has no name for
    dtype_name: str
    device: str  # "cpu" or "cuda"
    device_index: int
    owner: Any  # the tensor itself, kept alive by whoever holds the view

    @property
    def nbytes_span(self) -> int:
        """Bytes from ptr to one past the last element (strides >= 0)."""
        if any(s == 0 for s in self.shape):
            return 0
        return sum((n - 1) * s for n, s in zip(self.shape, self.strides)) + self.itemsize


def is_torch_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def is_numpy_array(obj: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, np.ndarray)


def is_array(obj: Any) -> bool:
    return is_torch_tensor(obj) or is_numpy_array(obj)


def view(obj: Any, what: str) -> ArrayView:
    """An ArrayView of a torch tensor or numpy array; InvalidArgument
    naming `what` for anything else."""
    if is_torch_tensor(obj):
        torch = sys.modules["torch"]
        if obj.layout != torch.strided:
            raise invalid(f"{what}: expected a strided (dense) tensor, got layout {obj.layout}")
        itemsize = obj.element_size()
        name = str(obj.dtype).replace("torch.", "")
        dev = obj.device
        return ArrayView(
            ptr=int(obj.data_ptr()),
            shape=tuple(int(n) for n in obj.shape),
            strides=tuple(int(s) * itemsize for s in obj.stride()),
            itemsize=itemsize,
            dtype=_TORCH_DTYPES.get(name),
            dtype_name=name,
            device="cuda" if dev.type == "cuda" else dev.type,
            device_index=dev.index if dev.index is not None else 0,
            owner=obj,
        )
    if is_numpy_array(obj):
        iface = obj.__array_interface__
        return ArrayView(
            ptr=int(iface["data"][0]),
            shape=tuple(int(n) for n in obj.shape),
            strides=tuple(int(s) for s in obj.strides),
            itemsize=int(obj.itemsize),
            dtype=_NUMPY_DTYPES.get(obj.dtype.str),
            dtype_name=str(obj.dtype),
            device="cpu",
            device_index=0,
            owner=obj,
        )
    raise invalid(f"{what}: expected a torch.Tensor or numpy.ndarray, got {type(obj).__name__}")


def int32_buffer(values: Any, what: str) -> Tuple[int, int, Any]:
    """(address, length, keep-alive) of a contiguous 32-bit integer vector:
    an int32 (or uint32) 1-D CPU torch tensor or numpy array is used in place;
    a list, tuple or range is packed once into an array('i')."""
    if is_torch_tensor(values) or is_numpy_array(values):
        v = view(values, what)
        if v.device != "cpu":
            raise invalid(f"{what} must be in CPU memory, got a {v.device} tensor")
        if v.dtype_name not in ("int32", "uint32") or v.itemsize != 4:
            raise invalid(f"{what} must hold int32 values, got dtype {v.dtype_name}")
        if len(v.shape) != 1:
            raise invalid(f"{what} must be one-dimensional, got shape {list(v.shape)}")
        if v.shape[0] > 1 and v.strides[0] != 4:
            raise invalid(f"{what} must be contiguous, got a stride of {v.strides[0]} bytes")
        return v.ptr, v.shape[0], values
    if isinstance(values, array.array) and values.typecode in ("i", "I") and values.itemsize == 4:
        if len(values) == 0:
            return 0, 0, values
        return values.buffer_info()[0], len(values), values
    if isinstance(values, (list, tuple, range)):
        try:
            packed = array.array("i", values)
        except (TypeError, OverflowError) as e:
            raise invalid(f"{what} must hold int32 values: {e}") from None
        if len(packed) == 0:
            return 0, 0, packed
        return packed.buffer_info()[0], len(packed), packed
    raise invalid(
        f"{what}: expected an int32 torch tensor or numpy array, array('i'), or a list of ints; "
        f"got {type(values).__name__}"
    )


def shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def void_p(address: int) -> ctypes.c_void_p:
    return ctypes.c_void_p(address)
