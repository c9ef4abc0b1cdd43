"""The SGLang HiCache host pool as kvstash layers: one (offset, Geometry) per
model layer, in the memfd that holds the pool, with one SGLang page per
kvstash block and per chunk.

SGLang 0.5.17's host pools and layouts (pool_host/mha.py, mla.py), with
L layers, H heads of D elements, S tokens in P pages of T tokens:

    MHA layer_first        [2, L, S, H, D]
    MHA page_first         [2, S, L, H, D]
    MHA page_first_direct  [2, P, L, T, H, D]
    MHA page_head          [2, P, H, T, L, D]
    MLA layer_first        [L, S, 1, D]
    MLA page_first         [S, L, 1, D]
    MLA page_first_direct  [P, L, T, 1, D]

Every one of them is a strided view kvstashd's geometry describes, so the
daemon gathers a page into its flat chunk format (the same for every layout)
and scatters it back; no layout needs a copy through Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Tuple

from kvstash.types import DType, Geometry

MHA_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")

_DTYPES = {
    "torch.bfloat16": DType.BF16,
    "torch.float16": DType.F16,
    "torch.float32": DType.F32,
    "torch.float8_e4m3fn": DType.F8E4M3,
    "torch.float8_e5m2": DType.F8E5M2,
    "torch.uint8": DType.U8,
    "torch.int8": DType.I8,
}


class LayoutError(ValueError):
    """A host pool this backend cannot register, with the reason."""


@dataclass(frozen=True)
class PoolLayout:
    """Where a host pool's pages live in its memfd."""

    kind: str  # "mha" or "mla"
    layout: str
    page_size: int
    num_pages: int
    page_bytes: int  # bytes of one page, every layer, K and V
    layers: List[Tuple[int, Geometry]]  # (offset in the memfd, geometry) per layer
    # Per page: the memfd offsets of its K and (MHA) V runs as SGLang's
    # get_page_buffer_meta reports them for page_first layouts: a check
    # that this description and SGLang's agree.
    k_page_offset: int  # offset of page 0's K (or latent) run
    k_page_stride: int  # bytes from one page's run to the next
    v_offset: int  # MHA: offset of the V half; 0 for MLA


def _dtype(pool: Any) -> DType:
    name = str(pool.dtype)
    if name not in _DTYPES:
        raise LayoutError(
            f"host pool dtype {name} is not one kvstash stores (expected one of {sorted(_DTYPES)})"
        )
    return _DTYPES[name]


def _check_counts(pool: Any) -> None:
    if pool.size != pool.page_num * pool.page_size:
        raise LayoutError(
            f"host pool holds {pool.size} tokens, not {pool.page_num} pages of {pool.page_size}"
        )


def describe_pool(pool: Any) -> PoolLayout:
    """The layers of SGLang's MHATokenToKVPoolHost or MLATokenToKVPoolHost
    as kvstash geometries. Raises LayoutError for any other pool or layout."""
    cls = type(pool).__name__
    if cls == "MHATokenToKVPoolHost":
        return _mha(pool)
    if cls == "MLATokenToKVPoolHost":
        return _mla(pool)
    raise LayoutError(
        f"host pool {cls} is not supported: kvstash stores SGLang's MHATokenToKVPoolHost "
        "and MLATokenToKVPoolHost (hybrid pools, which need the v2 interface, are not)"
    )


def _mha(pool: Any) -> PoolLayout:
    _check_counts(pool)
    layout = pool.layout
    if layout not in MHA_LAYOUTS:
        raise LayoutError(f"MHA host layout {layout!r} is not supported (expected one of {MHA_LAYOUTS})")
    dtype = _dtype(pool)
    isz = pool.dtype.itemsize
    L, S, P, T, H = pool.layer_num, pool.size, pool.page_num, pool.page_size, pool.head_num
    Dh = pool.head_dim * isz  # bytes per head
    half = L * S * H * Dh  # K half; V follows
    if layout == "layer_first":  # [2, L, S, H, D]
        off, block, token, head = S * H * Dh, T * H * Dh, H * Dh, Dh
    elif layout == "page_first":  # [2, S, L, H, D]
        off, block, token, head = H * Dh, T * L * H * Dh, L * H * Dh, Dh
    elif layout == "page_first_direct":  # [2, P, L, T, H, D]
        off, block, token, head = T * H * Dh, L * T * H * Dh, H * Dh, Dh
    else:  # page_head [2, P, H, T, L, D]
        off, block, token, head = Dh, H * T * L * Dh, L * Dh, T * L * Dh
    layers = [
        (l * off, Geometry(num_blocks=P, kv_count=2, block_tokens=T, num_heads=H, head_bytes=Dh,
                           block_stride=block, kv_stride=half, token_stride=token,
                           head_stride=head, dtype=dtype))
        for l in range(L)
    ]
    page_k = T * L * H * Dh
    return PoolLayout("mha", layout, T, P, 2 * page_k, layers, 0, page_k, half)


def _mla(pool: Any) -> PoolLayout:
    _check_counts(pool)
    layout = pool.layout
    if layout not in MLA_LAYOUTS:
        raise LayoutError(f"MLA host layout {layout!r} is not supported (expected one of {MLA_LAYOUTS})")
    dtype = _dtype(pool)
    isz = pool.dtype.itemsize
    L, S, T = pool.layer_num, pool.size, pool.page_size
    E = pool.kv_cache_dim * isz  # bytes per token and layer
    if layout == "layer_first":  # [L, S, 1, D]
        off, block, token = S * E, T * E, E
    elif layout == "page_first":  # [S, L, 1, D]
        off, block, token = E, T * L * E, L * E
    else:  # page_first_direct [P, L, T, 1, D]
        off, block, token = T * E, L * T * E, E
    layers = [
        (l * off, Geometry(num_blocks=pool.page_num, kv_count=1, block_tokens=T, num_heads=1,
                           head_bytes=E, block_stride=block, kv_stride=0, token_stride=token,
                           head_stride=E, dtype=dtype))
        for l in range(L)
    ]
    return PoolLayout("mla", layout, T, pool.page_num, T * L * E, layers, 0, T * L * E, 0)


def pool_buffer(pool: Any) -> Any:
    """The tensor holding the whole pool (MHA kv_buffer, MLA kv_buffer)."""
    buffer = getattr(pool, "kv_buffer", None)
    if buffer is None:
        raise LayoutError(f"host pool {type(pool).__name__} has no kv_buffer")
    return buffer


def check_against_sglang(pool: Any, layout: PoolLayout, base: int) -> None:
    """Compares this description with SGLang's own get_page_buffer_meta for
    the first and last page (page_first layouts, where SGLang reports one
    run per page and K/V): an SGLang whose pool moved would otherwise have
    kvstash copy the wrong bytes."""
    if layout.layout == "layer_first":
        return
    try:
        import torch
    except ImportError:  # pragma: no cover - SGLang always has torch
        return
    T = layout.page_size
    for page in (0, layout.num_pages - 1):
        indices = torch.arange(page * T, (page + 1) * T, dtype=torch.int64)
        ptrs, sizes = pool.get_page_buffer_meta(indices)
        k_expect = base + layout.k_page_offset + page * layout.k_page_stride
        expect = [k_expect] + ([k_expect + layout.v_offset] if layout.kind == "mha" else [])
        run = layout.k_page_stride
        if list(ptrs) != expect or any(int(s) != run for s in sizes):
            raise LayoutError(
                f"SGLang places page {page} of its {layout.kind.upper()} {layout.layout} host pool "
                f"at {[hex(int(p) - base) for p in ptrs]} ({list(sizes)} bytes), kvstash expected "
                f"{[hex(e - base) for e in expect]} ({run} bytes): this SGLang lays out its pool "
                "differently from 0.5.17"
            )
