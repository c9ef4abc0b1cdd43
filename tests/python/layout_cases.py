"""Engine KV layouts built in kvstash.host_tensor memory (or on a GPU), each
with the geometry kvstash must infer and the tensor axis that indexes
blocks, so that tests can check a round trip through the tensors' own
indexing rather than through kvstash's arithmetic."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Tuple, Union

import kvstash

NB = 12  # blocks per layer: two prompts' worth and some untouched


@dataclass
class Case:
    name: str
    layers: Any  # what Client.register gets
    views: List[Tuple[Any, int]]  # (logical tensor, block axis) per K/V part
    bases: List[Any]  # the allocations, to fill
    expected: kvstash.Geometry  # geometry of the first registered layer
    block_tokens: int
    layout: Union[None, str, kvstash.Geometry] = None
    num_layers: int = 2


def _alloc(lib: str, shape, dtype: str, device: str):
    if device == "cpu":
        return kvstash.host_tensor(shape, dtype if lib == "torch" else _np_dtype(dtype))
    import torch

    return torch.empty(shape, dtype=getattr(torch, dtype), device=device)


def _np_dtype(name: str):
    import numpy as np

    return {"float16": np.float16, "uint8": np.uint8, "int8": np.int8, "float32": np.float32}[name]


def _permute(t, order):
    return t.permute(*order) if hasattr(t, "permute") else t.transpose(order)


def _dt(dtype: str) -> kvstash.DType:
    return {"float16": kvstash.DType.F16, "bfloat16": kvstash.DType.BF16, "uint8": kvstash.DType.U8,
            "int8": kvstash.DType.I8, "float32": kvstash.DType.F32,
            "float8_e4m3fn": kvstash.DType.F8E4M3}[dtype]


def _size(dtype: str) -> int:
    return 4 if dtype == "float32" else 2 if dtype in ("float16", "bfloat16") else 1


def vllm_flash_nhd(lib, device, dtype="float16", bs=8, h=2, d=8):
    base = [_alloc(lib, (2, NB, bs, h, d), dtype, device) for _ in range(2)]
    e = _size(dtype)
    g = kvstash.Geometry.vllm_flash_nhd(NB, bs, h, d * e, _dt(dtype))
    return Case("vllm_flash_nhd", base, [(t, 1) for t in base], base, g, bs)


def vllm_flash_hnd(lib, device, dtype="float16", bs=8, h=2, d=8):
    # vLLM allocates [2, nb, h, bs, d] and hands out the NHD-ordered view.
    base = [_alloc(lib, (2, NB, h, bs, d), dtype, device) for _ in range(2)]
    layers = [_permute(t, (0, 1, 3, 2, 4)) for t in base]
    e = _size(dtype)
    g = kvstash.Geometry(NB, 2, bs, h, d * e, block_stride=h * bs * d * e,
                         kv_stride=NB * h * bs * d * e, token_stride=d * e,
                         head_stride=bs * d * e, dtype=_dt(dtype))
    return Case("vllm_flash_hnd", layers, [(t, 1) for t in layers], base, g, bs)


def vllm_flash_hnd_named(lib, device, dtype="float16", bs=8, h=2, d=8):
    c = vllm_flash_hnd(lib, device, dtype, bs, h, d)
    c.name, c.layers, c.layout = "vllm_flash_hnd_named", c.bases, "vllm_flash_hnd"
    c.views = [(t, 1) for t in c.bases]
    return c


def flashinfer_nhd(lib, device, dtype="float16", bs=8, h=2, d=8):
    base = [_alloc(lib, (NB, 2, bs, h, d), dtype, device) for _ in range(2)]
    e = _size(dtype)
    g = kvstash.Geometry(NB, 2, bs, h, d * e, block_stride=2 * bs * h * d * e,
                         kv_stride=bs * h * d * e, token_stride=h * d * e, head_stride=d * e,
                         dtype=_dt(dtype))
    return Case("flashinfer_nhd", base, [(t, 0) for t in base], base, g, bs)


def flashinfer_hnd(lib, device, dtype="float16", bs=8, h=2, d=8):
    base = [_alloc(lib, (NB, 2, h, bs, d), dtype, device) for _ in range(2)]
    layers = [_permute(t, (0, 1, 3, 2, 4)) for t in base]
    e = _size(dtype)
    g = kvstash.Geometry(NB, 2, bs, h, d * e, block_stride=2 * h * bs * d * e,
                         kv_stride=h * bs * d * e, token_stride=d * e, head_stride=bs * d * e,
                         dtype=_dt(dtype))
    return Case("flashinfer_hnd", layers, [(t, 0) for t in layers], base, g, bs)


def mla(lib, device, dtype="float16", bs=8, latent=576):
    base = [_alloc(lib, (NB, bs, latent), dtype, device) for _ in range(2)]
    e = _size(dtype)
    g = kvstash.Geometry(NB, 1, bs, 1, latent * e, block_stride=bs * latent * e, kv_stride=0,
                         token_stride=latent * e, head_stride=0, dtype=_dt(dtype))
    return Case("mla", base, [(t, 0) for t in base], base, g, bs)


def mla_fp8_656(lib, device):
    # DeepSeek FP8 MLA entries: 512 fp8 + 4 fp32 scales + 64 bf16 rope = 656 bytes, block 16.
    c = mla(lib, device, "uint8", bs=16, latent=656)
    c.name = "mla_fp8_656"
    return c


def sglang_token_pool(lib, device, dtype="float16", h=2, d=8):
    pool = NB * 8
    k = [_alloc(lib, (pool, h, d), dtype, device) for _ in range(2)]
    v = [_alloc(lib, (pool, h, d), dtype, device) for _ in range(2)]
    e = _size(dtype)
    g = kvstash.Geometry(pool, 1, 1, h, d * e, block_stride=h * d * e, kv_stride=0,
                         token_stride=0, head_stride=d * e, dtype=_dt(dtype))
    layers = list(zip(k, v))
    views = [(t, 0) for pair in layers for t in pair]
    return Case("sglang_token_pool", layers, views, k + v, g, 1)


def all_layers_one_tensor(lib, device, dtype="float16", bs=8, h=2, d=8, n_layers=3):
    base = _alloc(lib, (n_layers, 2, NB, bs, h, d), dtype, device)
    e = _size(dtype)
    g = kvstash.Geometry.vllm_flash_nhd(NB, bs, h, d * e, _dt(dtype))
    views = [(base[i], 1) for i in range(n_layers)]
    return Case("all_layers_one_tensor", base, views, [base], g, bs, num_layers=n_layers)


def all_layers_mla(lib, device, dtype="float16", bs=8, latent=64, n_layers=3):
    base = _alloc(lib, (n_layers, NB, bs, latent), dtype, device)
    e = _size(dtype)
    g = kvstash.Geometry(NB, 1, bs, 1, latent * e, block_stride=bs * latent * e, kv_stride=0,
                         token_stride=latent * e, head_stride=0, dtype=_dt(dtype))
    views = [(base[i], 0) for i in range(n_layers)]
    return Case("all_layers_mla", base, views, [base], g, bs, layout="mla", num_layers=n_layers)


def padded_blocks(lib, device, dtype="float16", bs=8, h=2, d=8):
    # Blocks padded past their packed size: one spare token row per block.
    base = [_alloc(lib, (2, NB, bs + 1, h, d), dtype, device) for _ in range(2)]
    layers = [t[:, :, :bs] for t in base]
    e = _size(dtype)
    g = kvstash.Geometry(NB, 2, bs, h, d * e, block_stride=(bs + 1) * h * d * e,
                         kv_stride=NB * (bs + 1) * h * d * e, token_stride=h * d * e,
                         head_stride=d * e, dtype=_dt(dtype))
    return Case("padded_blocks", layers, [(t, 1) for t in layers], base, g, bs)


def _vllm_geometry(dtype, bs, h, d, *, token_stride, head_stride, block_stride):
    e = _size(dtype)
    return kvstash.Geometry(NB, 2, bs, h, d * e, block_stride=block_stride, kv_stride=d * e,
                            token_stride=token_stride, head_stride=head_stride, dtype=_dt(dtype))


def vllm_lbnhc(lib, device, dtype="float16", bs=8, h=2, d=8):
    # vLLM's per-layer view since its KV-cache layouts: logical [B, H, N, C],
    # C = K|V; LBNHC (its NHD) stores each layer as [B, N, H, C].
    base = [_alloc(lib, (NB, bs, h, 2 * d), dtype, device) for _ in range(2)]
    layers = [_permute(t, (0, 2, 1, 3)) for t in base]
    e = _size(dtype)
    g = _vllm_geometry(dtype, bs, h, d, token_stride=h * 2 * d * e, head_stride=2 * d * e,
                       block_stride=bs * h * 2 * d * e)
    return Case("vllm_lbnhc", layers, [(t, 0) for t in layers], base, g, bs)


def vllm_lbhnc(lib, device, dtype="float16", bs=8, h=2, d=8):
    base = [_alloc(lib, (NB, h, bs, 2 * d), dtype, device) for _ in range(2)]
    e = _size(dtype)
    g = _vllm_geometry(dtype, bs, h, d, token_stride=2 * d * e, head_stride=bs * 2 * d * e,
                       block_stride=h * bs * 2 * d * e)
    return Case("vllm_lbhnc", base, [(t, 0) for t in base], base, g, bs)


def vllm_blnhc(lib, device, dtype="float16", bs=8, h=2, d=8, n_layers=3):
    # Block-outer: one buffer [B, L, N, H, C], each layer a strided view.
    base = _alloc(lib, (NB, n_layers, bs, h, 2 * d), dtype, device)
    layers = {f"model.layers.{i}.attn": _permute(base[:, i], (0, 2, 1, 3)) for i in range(n_layers)}
    e = _size(dtype)
    g = _vllm_geometry(dtype, bs, h, d, token_stride=h * 2 * d * e, head_stride=2 * d * e,
                       block_stride=n_layers * bs * h * 2 * d * e)
    views = [(t, 0) for t in layers.values()]
    return Case("vllm_blnhc", layers, views, [base], g, bs, num_layers=n_layers)


def vllm_all_layers(lib, device, dtype="float16", bs=8, h=2, d=8, n_layers=3):
    # One tensor [L, B, H, N, C] (LBNHC memory order) holding every layer.
    base = _alloc(lib, (n_layers, NB, bs, h, 2 * d), dtype, device)
    whole = _permute(base, (0, 1, 3, 2, 4))
    e = _size(dtype)
    g = _vllm_geometry(dtype, bs, h, d, token_stride=h * 2 * d * e, head_stride=2 * d * e,
                       block_stride=bs * h * 2 * d * e)
    views = [(whole[i], 0) for i in range(n_layers)]
    return Case("vllm_all_layers", whole, views, [base], g, bs, num_layers=n_layers)


def vllm_mla_view(lib, device, dtype="float16", bs=8, latent=576):
    base = [_alloc(lib, (NB, 1, bs, latent), dtype, device) for _ in range(2)]
    e = _size(dtype)
    g = kvstash.Geometry(NB, 1, bs, 1, latent * e, block_stride=bs * latent * e, kv_stride=0,
                         token_stride=latent * e, head_stride=0, dtype=_dt(dtype))
    return Case("vllm_mla_view", base, [(t, 0) for t in base], base, g, bs, layout="vllm_mla")


def hybrid_dict_layouts(lib, device, dtype="float16", bs=8, h=2, d=8):
    # A hybrid model: attention layers inferred, MLA-like layers named per layer.
    attn = vllm_lbnhc(lib, device, dtype, bs, h, d)
    mla_case = vllm_mla_view(lib, device, dtype, bs, latent=64)
    layers = {"attn.0": attn.layers[0], "mla.0": mla_case.layers[0], "attn.1": attn.layers[1]}
    views = [(attn.layers[0], 0), (mla_case.layers[0], 0), (attn.layers[1], 0)]
    return Case("hybrid_dict_layouts", layers, views, attn.bases + mla_case.bases[:1], attn.expected,
                bs, layout={"mla.0": "vllm_mla"}, num_layers=3)


def dict_of_layers(lib, device, dtype="float16"):
    c = vllm_flash_nhd(lib, device, dtype)
    c.name = "dict_of_layers"
    c.layers = {f"model.layers.{i}.self_attn.attn": t for i, t in enumerate(c.bases)}
    return c


def explicit_geometry(lib, device, dtype="float16", bs=8, h=2, d=8):
    c = vllm_flash_nhd(lib, device, dtype, bs, h, d)
    c.name, c.layout = "explicit_geometry", c.expected
    return c


NUMPY_CASES: List[Callable[..., Case]] = [
    vllm_lbnhc, vllm_lbhnc, vllm_blnhc, vllm_all_layers, vllm_mla_view, hybrid_dict_layouts,
    vllm_flash_nhd, vllm_flash_hnd, vllm_flash_hnd_named, flashinfer_nhd, flashinfer_hnd, mla,
    mla_fp8_656, sglang_token_pool, all_layers_one_tensor, all_layers_mla, padded_blocks,
    dict_of_layers, explicit_geometry,
]


def torch_cases() -> List[Tuple[str, Callable[..., Case]]]:
    """Cases in torch dtypes numpy lacks (bf16, fp8), plus every numpy case."""
    out = [(f.__name__, f) for f in NUMPY_CASES]
    out += [
        ("vllm_lbnhc_bf16", lambda lib, dev: vllm_lbnhc(lib, dev, "bfloat16", d=64)),
        ("vllm_lbhnc_fp8", lambda lib, dev: vllm_lbhnc(lib, dev, "float8_e4m3fn", d=64)),
        ("vllm_mla_view_bf16", lambda lib, dev: vllm_mla_view(lib, dev, "bfloat16")),
        ("vllm_flash_nhd_bf16", lambda lib, dev: vllm_flash_nhd(lib, dev, "bfloat16", d=64)),
        ("vllm_flash_hnd_bf16", lambda lib, dev: vllm_flash_hnd(lib, dev, "bfloat16", d=64)),
        ("flashinfer_bf16", lambda lib, dev: flashinfer_nhd(lib, dev, "bfloat16", d=64)),
        ("mla_bf16", lambda lib, dev: mla(lib, dev, "bfloat16")),
        ("vllm_flash_fp8", lambda lib, dev: vllm_flash_nhd(lib, dev, "float8_e4m3fn", d=16)),
        ("sglang_bf16", lambda lib, dev: sglang_token_pool(lib, dev, "bfloat16", d=64)),
    ]
    return out


# ---- byte access through the tensors' own indexing ----

def as_numpy_bytes(t) -> Any:
    """A numpy view of t's elements as unsigned ints of the same width."""
    import numpy as np

    if hasattr(t, "numpy") and hasattr(t, "element_size"):  # torch
        import torch

        width = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()]
        return t.detach().cpu().view(width).numpy()
    width = {1: np.uint8, 2: np.uint16, 4: np.uint32}[t.itemsize]
    return t.view(width)


def fill_random(bases, seed: int) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    for b in bases:
        if hasattr(b, "element_size") and b.device.type != "cpu":
            import torch

            host = torch.from_numpy(rng.integers(1, 255, size=b.numel() * b.element_size(),
                                                 dtype=np.uint8))
            b.view(-1).view(torch.uint8).copy_(host.to(b.device))
            torch.cuda.synchronize()  # a store must only read blocks already written
            continue
        flat = as_numpy_bytes(b).reshape(-1).view(np.uint8)
        flat[...] = rng.integers(1, 255, size=flat.size, dtype=np.uint8)


def block(view_and_axis, b: int):
    import numpy as np

    t, axis = view_and_axis
    return np.take(as_numpy_bytes(t), b, axis=axis).copy()
