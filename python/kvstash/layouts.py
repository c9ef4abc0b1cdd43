"""Layer geometry from tensors: the engine layouts kvstash knows by shape,
read with the tensor's own strides (so NHD, HND, block-outer and padded
layouts need no copy and no special case).

Every layout maps the tensor's dimensions to the geometry's roles (block,
kv, token, head, element); strides in bytes come from the tensor. See
Geometry for the address formula (docs/protocol.md "Geometry").

| name               | one layer's shape                                  | inferred for  |
| ------------------ | -------------------------------------------------- | ------------- |
| vllm               | [num_blocks, heads, block_size, 2*head] (K|V last) | rank 4        |
| vllm_mla           | [num_blocks, 1, block_size, latent]                | (name it)     |
| vllm_flash (_nhd)  | [2, num_blocks, block_size, heads, head]           | rank 5, 2 first |
| vllm_flash_hnd     | [2, num_blocks, heads, block_size, head]           | (name it)     |
| flashinfer (_nhd)  | [num_blocks, 2, block_size, heads, head]           | rank 5, 2 second |
| flashinfer_hnd     | [num_blocks, 2, heads, block_size, head]           | (name it)     |
| mla                | [num_blocks, block_size, latent]                   | rank 3        |
| sglang             | [pool_size, heads, head] (K and V apart)           | (K, V) pairs  |

A registration whose layers are all named `mla` or `vllm_mla` is stored once
per model, shared by every tensor-parallel rank (the latent is the same on
each); every other one, including a rank-3 tensor inferred as `mla` and an
SGLang pool whose K and V look alike, is stored per rank.

`vllm` is vLLM's per-layer view since its KV-cache layouts (LBNHC, LBHNC,
BLNHC, ...): logical [B, H, N, C] whatever the physical order, K and V the
two halves of C. An MLA layer in that view must be named `vllm_mla`: from
the tensor alone it looks like one KV head, and registered as `vllm` it
would still round-trip exactly but be stored once per tensor-parallel rank
instead of once per model. Older vLLM HND caches keep the NHD logical shape
with permuted strides, so `vllm_flash`/`flashinfer` cover them too; the
`*_hnd` names are for tensors whose dimensions are in HND order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ._arrays import SUPPORTED_DTYPES, ArrayView, is_array, shape_text, view
from .errors import invalid
from .types import Geometry

# Roles of a layout's dimensions, outermost first as the tensor lists them.
_B, _K, _T, _H, _E = "block", "kv", "token", "head", "elem"

_LAYOUTS: Dict[str, Tuple[str, ...]] = {
    "vllm": (_B, _H, _T, _E),  # K|V halves of the last dimension (_KV_IN_CONTENT)
    "vllm_mla": (_B, _H, _T, _E),
    "vllm_flash": (_K, _B, _T, _H, _E),
    "vllm_flash_nhd": (_K, _B, _T, _H, _E),
    "vllm_flash_hnd": (_K, _B, _H, _T, _E),
    "flashinfer": (_B, _K, _T, _H, _E),
    "flashinfer_nhd": (_B, _K, _T, _H, _E),
    "flashinfer_hnd": (_B, _K, _H, _T, _E),
    "mla": (_B, _T, _E),
    "sglang": (_T, _H, _E),  # a token pool: each token its own block
}
LAYOUT_NAMES = tuple(_LAYOUTS)
# Layouts whose last dimension holds K then V (each half head_bytes).
_KV_IN_CONTENT = frozenset({"vllm"})
# MLA latents: the same on every tensor-parallel rank, stored once per model
# when named (a registration of such layers only is replicated across ranks).
_LATENT = frozenset({"mla", "vllm_mla"})

_EXPECTED = (
    "a vLLM layer view [num_blocks, num_kv_heads, block_size, 2 * head_size], "
    "a vLLM flash-attn layer [2, num_blocks, block_size, num_kv_heads, head_size], "
    "a FlashInfer layer [num_blocks, 2, block_size, num_kv_heads, head_size], "
    "an MLA layer [num_blocks, block_size, latent], "
    "an SGLang (K, V) pair of [pool_size, num_kv_heads, head_dim], "
    "or one tensor holding all layers with the layer index first"
)


@dataclass(frozen=True)
class LayerSpec:
    """One layer as kvstashd sees it: where block 0 lives and its geometry."""

    array: ArrayView  # the tensor; array.ptr is the layer base
    geometry: Geometry
    source: str  # "layers[3]", "layers['model.layers.0.attn'][K]": for errors
    layer: int = 0  # the engine layer (an SGLang pair gives two specs of one layer)
    # Named an MLA latent ('mla', 'vllm_mla'): the same on every tensor-parallel
    # rank. Only a name says so: kv_count 1 alone is also an SGLang K or V.
    latent: bool = False

    @property
    def extent(self) -> int:
        return self.geometry.extent_bytes()


def _geometry(v: ArrayView, roles: Sequence[str], source: str, layout: str) -> Geometry:
    if len(v.shape) != len(roles):
        raise invalid(
            f"{source}: layout {layout!r} expects a rank-{len(roles)} tensor, "
            f"got shape {shape_text(v.shape)}"
        )
    if v.dtype is None:
        raise invalid(
            f"{source}: dtype {v.dtype_name} is not a KV element type kvstash knows "
            f"(expected one of {SUPPORTED_DTYPES})"
        )
    if any(n == 0 for n in v.shape):
        raise invalid(f"{source}: shape {shape_text(v.shape)} is empty")
    for n, s in zip(v.shape, v.strides):
        if n > 1 and s < 0:
            raise invalid(
                f"{source}: negative strides {list(v.strides)} are not supported "
                "(pass the tensor in its memory order)"
            )
    dims = dict(zip(roles, zip(v.shape, v.strides)))
    elems, elem_stride = dims[_E]
    if elems > 1 and elem_stride != v.itemsize:
        raise invalid(
            f"{source}: the last dimension (head elements) must be contiguous: its stride is "
            f"{elem_stride // v.itemsize} elements, expected 1 (shape {shape_text(v.shape)}, "
            f"strides {[s // v.itemsize for s in v.strides]} elements)"
        )
    count = {r: dims[r][0] if r in dims else 1 for r in (_B, _K, _T, _H)}
    stride = {r: dims[r][1] if r in dims and dims[r][0] > 1 else 0 for r in (_B, _K, _T, _H)}
    if layout in _KV_IN_CONTENT:
        # K then V in the last dimension: two entries of half its size.
        if elems % 2:
            raise invalid(
                f"{source}: layout {layout!r} holds K and V as the two halves of the last "
                f"dimension, but it has {elems} elements (shape {shape_text(v.shape)}); name "
                "layout='vllm_mla' for an MLA latent, or give a kvstash.Geometry"
            )
        elems //= 2
        count[_K], stride[_K] = 2, elems * v.itemsize
    if count[_K] > 2:
        raise invalid(
            f"{source}: layout {layout!r} puts K/V in a dimension of size {count[_K]}, expected 2 "
            f"(shape {shape_text(v.shape)})"
        )
    if layout == "sglang":
        # A token pool: the first dimension is the pool's tokens, one per block.
        count[_B], count[_T] = count[_T], 1
        stride[_B], stride[_T] = stride[_T], 0
    return Geometry(
        num_blocks=count[_B],
        kv_count=count[_K],
        block_tokens=count[_T],
        num_heads=count[_H],
        head_bytes=elems * v.itemsize,
        block_stride=stride[_B],
        kv_stride=stride[_K],
        token_stride=stride[_T],
        head_stride=stride[_H],
        dtype=v.dtype,
    )


def _infer_name(v: ArrayView, source: str) -> str:
    """The layout of one layer tensor, from its rank and where the 2 is."""
    shape = v.shape
    if len(shape) == 5:
        if shape[0] == 2 and shape[1] != 2:
            return "vllm_flash"
        if shape[1] == 2 and shape[0] != 2:
            return "flashinfer"
        if shape[0] == 2 and shape[1] == 2:
            raise invalid(
                f"{source}: shape {shape_text(shape)} is both a vLLM flash-attn layer with 2 "
                "blocks and a FlashInfer one; pass layout='vllm_flash' or 'flashinfer'"
            )
        raise invalid(
            f"{source}: a rank-5 KV layer needs K/V (size 2) in dimension 0 (vLLM flash-attn "
            f"[2, num_blocks, block_size, heads, head]) or 1 (FlashInfer [num_blocks, 2, "
            f"block_size, heads, head]), got shape {shape_text(shape)}"
        )
    if len(shape) == 4:
        return "vllm"
    if len(shape) == 3:
        return "mla"
    raise invalid(f"{source}: cannot infer the layout of shape {shape_text(shape)}: expected {_EXPECTED}")


_PER_LAYER_RANK = {name: len(roles) for name, roles in _LAYOUTS.items()}


def _layer(tensor: Any, layout: Union[None, str, Geometry], source: str) -> List[LayerSpec]:
    """LayerSpecs of one engine layer: a tensor, or an SGLang (K, V) pair."""
    if isinstance(tensor, (tuple, list)):
        if len(tensor) != 2 or not all(is_array(t) for t in tensor):
            raise invalid(f"{source}: a layer given as a sequence must be a (K, V) pair of tensors")
        name = layout if isinstance(layout, (str, Geometry)) else "sglang"
        out: List[LayerSpec] = []
        for part, t in zip("KV", tensor):
            out += _layer(t, name, f"{source}[{part}]")
        return out
    v = view(tensor, source)
    if isinstance(layout, Geometry):
        g = layout
        if g.extent_bytes() > v.nbytes_span:
            raise invalid(
                f"{source}: the geometry spans {g.extent_bytes()} bytes but the tensor "
                f"(shape {shape_text(v.shape)}) only {v.nbytes_span}"
            )
        return [LayerSpec(v, g, source)]
    name = layout if layout is not None else _infer_name(v, source)
    if name not in _LAYOUTS:
        raise invalid(f"layout {name!r} is not one of {', '.join(LAYOUT_NAMES)} (or a kvstash.Geometry)")
    latent = layout in _LATENT  # inferred from the shape alone, it stays per rank
    return [LayerSpec(v, _geometry(v, _LAYOUTS[name], source, name), source, latent=latent)]


def _split_all_layers(tensor: Any, layout: Union[None, str, Geometry]) -> Optional[List[Any]]:
    """The per-layer views of one tensor holding all layers (layer index
    first), or None if the tensor is one layer."""
    rank = len(tensor.shape)
    if isinstance(layout, Geometry):
        return None
    if layout is None:
        # [L, 2, nb, ...] / [L, nb, 2, ...] (6-D), or [L, B, H, N, C]: a 5-D
        # tensor with no K/V dimension of 2 where a 5-D layer has one.
        all_layers = rank == 6 or (rank == 5 and 2 not in tuple(tensor.shape[:2]))
    else:
        if layout not in _PER_LAYER_RANK:
            raise invalid(
                f"layout {layout!r} is not one of {', '.join(LAYOUT_NAMES)} (or a kvstash.Geometry)"
            )
        all_layers = rank == _PER_LAYER_RANK[layout] + 1
    if not all_layers:
        return None
    return [tensor[i] for i in range(int(tensor.shape[0]))]


Layout = Union[None, str, Geometry]


def _check_layout(layout: Any, what: str) -> None:
    if layout is not None and not isinstance(layout, (str, Geometry)):
        raise invalid(
            f"{what} must be None, a layout name or a kvstash.Geometry, got {type(layout).__name__}"
        )
    if isinstance(layout, str) and layout not in _LAYOUTS:
        raise invalid(f"{what} {layout!r} is not one of {', '.join(LAYOUT_NAMES)} (or a kvstash.Geometry)")


def layer_specs(layers: Any, layout: Union[Layout, Dict[str, Layout]] = None) -> List[LayerSpec]:
    """The LayerSpecs of an engine's KV: a list of layer tensors (or SGLang
    (K, V) pairs), vLLM's dict of layer name to tensor, or one tensor
    holding all layers. `layout` applies to every layer; with a dict of
    layers it may also be a dict of layer name to layout (hybrid models),
    layers it does not name being inferred."""
    per_layer: Optional[Dict[str, Layout]] = None
    if isinstance(layout, dict):
        if not isinstance(layers, dict):
            raise invalid("a dict of layouts needs layers as a dict of layer name to tensor")
        unknown = set(layout) - set(layers)
        if unknown:
            raise invalid(f"layout names layers that are not in layers: {sorted(unknown)}")
        for name, one in layout.items():
            _check_layout(one, f"layout[{name!r}]")
        per_layer, layout = layout, None
    _check_layout(layout, "layout")
    if is_array(layers):
        split = _split_all_layers(layers, layout)
        items = [(f"layers[{i}]", t, layout) for i, t in enumerate(split)] if split \
            else [("layers", layers, layout)]
    elif isinstance(layers, dict):
        items = [(f"layers[{k!r}]", t, per_layer.get(k) if per_layer else layout)
                 for k, t in layers.items()]
    elif isinstance(layers, (list, tuple)):
        items = [(f"layers[{i}]", t, layout) for i, t in enumerate(layers)]
    else:
        raise invalid(
            f"layers: expected a list of tensors, a dict of layer name to tensor or one tensor, "
            f"got {type(layers).__name__}"
        )
    if not items:
        raise invalid("layers is empty: register at least one KV layer")
    specs: List[LayerSpec] = []
    for index, (source, t, one_layout) in enumerate(items):
        specs += [replace(s, layer=index) for s in _layer(t, one_layout, source)]
    return specs
