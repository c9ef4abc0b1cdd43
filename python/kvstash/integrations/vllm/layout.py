"""vLLM's KV cache groups and tensors as kvstash registrations.

Every vLLM from 0.26 to 0.33 hands a connector one view per layer, logical
shape ``[B, H, N, C]`` (blocks, head slots, tokens of a kernel block,
content), except MLA layers before 0.29, which are ``[B, N, C]`` (one head
slot, left out). For standard attention C holds a token's K then its V
(``head_size + head_size_v`` elements); for MLA it holds the latent. What
changed across releases is where the views live: before 0.29 each layer (or
each set of layers sharing KV) has its own allocation; from 0.29 one backing
buffer holds every layer and the views' strides follow the resolved KV cache
layout (LBNHC, LBHNC, BLHNC, ...). kvstash describes every layout by byte
strides, so its `vllm` layout (`vllm_mla` for MLA) reads the geometry
straight from the view's strides, whatever the physical order: no copies,
and the client library shares each allocation once, however many layers it
holds.

One kvstash registration shares one block table, while each vLLM KV cache
group has its own, so each group becomes its own registration.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Sequence, Tuple

import torch

import kvstash

_DTYPES = {
    torch.uint8: kvstash.DType.U8,
    torch.int8: kvstash.DType.I8,
    torch.float16: kvstash.DType.F16,
    torch.bfloat16: kvstash.DType.BF16,
    torch.float32: kvstash.DType.F32,
}
for _name, _code in (("float8_e4m3fn", kvstash.DType.F8E4M3), ("float8_e5m2", kvstash.DType.F8E5M2)):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _code


class LayoutError(ValueError):
    """A KV cache group or tensor kvstash cannot describe; says what was expected."""


@dataclass(frozen=True)
class GroupLayout:
    """One vLLM KV cache group, all its layers of one geometry: one kvstash
    registration."""

    group_id: int
    """The vLLM KV cache group: whose block table these layers use."""
    layer_names: Tuple[str, ...]
    block_size: int
    """vLLM's (manager) block size in tokens: the scheduler's block ids."""
    kv_count: int
    """2: K and V; 1: an MLA latent."""
    num_heads: int
    head_bytes: int
    dtype: torch.dtype
    is_mla: bool = False
    """vLLM's MLAAttentionSpec: the same on every rank, registered as
    replicated across ranks (stored once per model)."""

    @property
    def content_bytes(self) -> int:
        """Bytes of one (head, token) cell: C of the [B, H, N, C] view."""
        return self.kv_count * self.head_bytes

    def lookup_geometry(self) -> kvstash.Geometry:
        """A one-block geometry with this group's chunk format, for the
        scheduler's lookup-only registration: kvstash's layout fingerprint (and
        so the key namespace) depends on kv_count, heads, head bytes, dtype and
        the layer list, never on block counts or strides."""
        return kvstash.Geometry(
            num_blocks=1,
            kv_count=self.kv_count,
            block_tokens=1,
            num_heads=self.num_heads,
            head_bytes=self.head_bytes,
            block_stride=self.num_heads * self.content_bytes,
            kv_stride=self.head_bytes,
            token_stride=self.num_heads * self.content_bytes,
            head_stride=self.content_bytes,
            dtype=kvstash_dtype(self.dtype),
        )


def kvstash_dtype(dtype: torch.dtype) -> kvstash.DType:
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise LayoutError(
            f"KV cache dtype {dtype} has no kvstash equivalent; expected one of "
            f"{sorted(str(d) for d in _DTYPES)}"
        ) from None


def _spec_layout(group_id: int, layer_names: Sequence[str], spec: Any) -> GroupLayout:
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec

    where = f"KV cache group {group_id} ({type(spec).__name__})"
    if not isinstance(spec, FullAttentionSpec):
        raise LayoutError(
            f"{where}: kvstash stores full-attention and MLA groups only; sliding-window, "
            "chunked-local and Mamba groups are not supported yet"
        )
    if spec.sliding_window is not None or spec.attention_chunk_size is not None:
        raise LayoutError(f"{where}: sliding-window / chunked-local attention is not supported yet")
    # Packed or compressed pages: fields that exist from some release on
    # (a release without the field has no such pages).
    packing = {"tokens_per_state": getattr(spec, "tokens_per_state", 1),
               "compress_ratio": getattr(spec, "compress_ratio", 1),
               "num_head_slots": getattr(spec, "num_head_slots", None),
               "state_content_bytes": getattr(spec, "state_content_bytes", None)}
    if (packing["tokens_per_state"] != 1 or packing["compress_ratio"] != 1
            or packing["num_head_slots"] is not None or packing["state_content_bytes"] is not None):
        raise LayoutError(
            f"{where}: packed or compressed pages ({packing}) are not supported; expected one "
            "state per token and dense K/V content"
        )

    element = torch.empty((), dtype=spec.dtype).element_size()
    if isinstance(spec, MLAAttentionSpec):
        kv_count, num_heads, head_bytes = 1, 1, spec.head_size * element
    else:
        if spec.head_size != spec.head_size_v:
            raise LayoutError(
                f"{where}: K head size {spec.head_size} differs from V head size "
                f"{spec.head_size_v}; kvstash expects equal K and V head sizes"
            )
        kv_count, num_heads, head_bytes = 2, spec.num_kv_heads, spec.head_size * element
    return GroupLayout(
        group_id=group_id,
        layer_names=tuple(layer_names),
        block_size=spec.block_size,
        kv_count=kv_count,
        num_heads=num_heads,
        head_bytes=head_bytes,
        dtype=spec.dtype,
        is_mla=isinstance(spec, MLAAttentionSpec),
    )


def group_layouts(kv_cache_config: Any) -> List[GroupLayout]:
    """What kvstash registers for vLLM's KVCacheConfig: one GroupLayout per KV
    cache group. Raises a LayoutError naming the first group kvstash cannot
    store.

    A group whose layers differ in shape (UniformTypeKVCacheSpecs with several
    specs) is refused: vLLM gives the scheduler one arbitrary spec of such a
    group, so the scheduler could not look up the chunks the workers store."""
    from vllm.v1.kv_cache_interface import UniformTypeKVCacheSpecs

    layouts = []
    for group_id, group in enumerate(kv_cache_config.kv_cache_groups):
        spec = group.kv_cache_spec
        if isinstance(spec, UniformTypeKVCacheSpecs):
            specs = list(spec.kv_cache_specs.values())
            if any(s != specs[0] for s in specs[1:]):
                raise LayoutError(
                    f"KV cache group {group_id} holds layers of different shapes "
                    f"({len(set(specs))} specs); kvstash supports one layer shape per KV "
                    "cache group (vLLM's scheduler sees only one of them)"
                )
            spec = specs[0]
        layouts.append(_spec_layout(group_id, group.layer_names, spec))
    if not layouts:
        raise LayoutError("vLLM's KV cache config has no KV cache groups")
    return layouts


@dataclass(frozen=True)
class GroupTensors:
    """A group's layer tensors and the one geometry they share."""

    tensors: Dict[str, torch.Tensor]
    geometry: kvstash.Geometry
    blocks_per_block: int
    """Kernel blocks per vLLM block (vLLM may split a block for its kernels)."""


def group_tensors(layout: GroupLayout, kv_caches: Dict[str, torch.Tensor]) -> GroupTensors:
    """The geometry of a group's [B, H, N, C] layer views, from their strides."""
    missing = [name for name in layout.layer_names if name not in kv_caches]
    if missing:
        raise LayoutError(
            f"KV cache group {layout.group_id}: register_kv_caches got no tensor for "
            f"layer(s) {missing[:4]}"
        )
    tensors = {}
    geometry = None
    blocks_per_block = 1
    for name in layout.layer_names:
        t = kv_caches[name]
        where = f"layer {name!r} (group {layout.group_id})"
        if t.dim() == 3 and layout.is_mla:
            t = t.unsqueeze(1)  # [B, N, C]: MLA's one head slot left out (vLLM < 0.29)
        tensors[name] = t
        if t.dim() != 4:
            raise LayoutError(
                f"{where}: expected a 4-D [blocks, heads, tokens, content] view (3-D "
                f"[blocks, tokens, content] for MLA), got shape {tuple(t.shape)}"
            )
        _, heads, tokens, content = t.shape
        element = t.element_size()
        if t.stride(3) != 1 or content * element != layout.content_bytes:
            raise LayoutError(
                f"{where}: expected a contiguous last dimension of {layout.content_bytes} bytes "
                f"(K then V of one head and token), got shape {tuple(t.shape)} strides "
                f"{tuple(t.stride())} of {t.dtype}"
            )
        if heads != layout.num_heads or layout.block_size % tokens != 0:
            raise LayoutError(
                f"{where}: expected {layout.num_heads} heads and a kernel block dividing "
                f"{layout.block_size} tokens, got shape {tuple(t.shape)}"
            )
        # kvstash's `vllm` layout reads this view by its strides (K and V the
        # halves of C; a dimension of size 1 is never stepped, so its stride
        # is 0), `vllm_mla` the same with C one latent. The dtype stays the
        # group's, as in the scheduler's lookup geometry: one key namespace.
        dtype = kvstash_dtype(layout.dtype)
        spec, = kvstash.layer_specs({name: t}, "vllm_mla" if layout.is_mla else "vllm")
        g = replace(spec.geometry, dtype=dtype)
        if geometry is not None and g != geometry:
            raise LayoutError(
                f"{where}: its strides {tuple(t.stride())} differ from the group's other "
                "layers; kvstash registers one geometry per group"
            )
        geometry = g
        blocks_per_block = layout.block_size // tokens
    assert geometry is not None
    return GroupTensors(tensors=tensors, geometry=geometry, blocks_per_block=blocks_per_block)


def kernel_block_table(block_ids: Sequence[int], blocks_per_block: int) -> List[int]:
    """vLLM block ids as the kernel block ids the layer views index."""
    if blocks_per_block == 1:
        return list(block_ids)
    return [b * blocks_per_block + j for b in block_ids for j in range(blocks_per_block)]
