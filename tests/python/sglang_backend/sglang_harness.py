"""SGLang 0.5.17's real HiCache pieces, built small on a CPU: a device pool
description, the host pool on a memfd ("allocator": "shm"), the storage
config, and the backend through SGLang's own dynamic loader."""

from __future__ import annotations

import json
from typing import Any, List, Optional

import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang.srt.mem_cache.utils import get_hash_str

from kvstashd_process import Daemon

PAGE = 16  # tokens per SGLang page (and kvstash chunk) in these tests
LAYERS = 3
HEADS = 2
HEAD_DIM = 32
KV_LORA = 48
ROPE = 16
HOST_PAGES = 24


def start_daemon(chunk_tokens: int = PAGE, *args: str) -> Daemon:
    return Daemon(*args, chunk_tokens=chunk_tokens, l1_gb=0.0625)


def extra_config(socket: str, **more: Any) -> dict:
    config = {"backend_name": "kvstash", "module_path": "kvstash.integrations.sglang",
              "class_name": "KvstashHiCacheStorage", "interface_v1": 1, "allocator": "shm",
              "kvstash_socket": socket, "kvstash_timeout_ms": 1000,
              "kvstash_reconnect_interval_s": 0.05}
    config.update(more)
    return config


def device_pool(kind: str, page: int = PAGE, dtype: torch.dtype = torch.bfloat16) -> Any:
    """SGLang's own device KV pool, allocated on the CPU (the host pool takes
    its geometry and dtype from it)."""
    size = 4 * page
    if kind == "mha":
        return MHATokenToKVPool(size=size, page_size=page, dtype=dtype, head_num=HEADS,
                                head_dim=HEAD_DIM, layer_num=LAYERS, device="cpu",
                                enable_memory_saver=False, enable_alt_stream=False)
    return MLATokenToKVPool(size=size, page_size=page, dtype=dtype, kv_lora_rank=KV_LORA,
                            qk_rope_head_dim=ROPE, layer_num=LAYERS, device="cpu",
                            enable_memory_saver=False)


def host_pool(kind: str = "mha", layout: str = "page_first", page: int = PAGE,
              pages: int = HOST_PAGES, dtype: torch.dtype = torch.bfloat16) -> Any:
    """SGLang's host pool on a memfd, `pages` pages (plus SGLang's one spare)."""
    dev = device_pool(kind, page, dtype)
    per_token = dev_bytes_per_token(kind, dtype)
    host_gb = (pages - 1) * page * per_token / 1e9  # SGLang adds one page
    cls = MHATokenToKVPoolHost if kind == "mha" else MLATokenToKVPoolHost
    pool = cls(dev, 2.0, host_gb, page, layout, pin_memory=False, device="cpu",
               allocator_type="shm")
    return pool


def dev_bytes_per_token(kind: str, dtype: torch.dtype) -> float:
    isz = torch.empty([], dtype=dtype).element_size()
    if kind == "mha":
        return 2 * LAYERS * HEADS * HEAD_DIM * isz
    return LAYERS * (KV_LORA + ROPE) * isz


def storage_config(extra: dict, kind: str = "mha", tp_rank: int = 0, tp_size: int = 1,
                   model: str = "test/tiny-llama", layout: str = "page_first",
                   pp_rank: int = 0, pp_size: int = 1) -> HiCacheStorageConfig:
    return HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank, pp_size=pp_size, attn_cp_rank=0,
        attn_cp_size=1, is_mla_model=(kind == "mla"), enable_storage_metrics=True,
        is_page_first_layout=layout.startswith("page_first"), model_name=model,
        extra_config=json.loads(json.dumps(extra)))


def backend(pool: Any, config: HiCacheStorageConfig) -> Any:
    """What SGLang's HiCacheController does: the factory's dynamic loader,
    then register_mem_pool_host at once."""
    storage = StorageBackendFactory.create_backend("dynamic", config, pool)
    storage.register_mem_pool_host(pool)
    return storage


def keys(tokens: List[int], page: int = PAGE, prior: Optional[str] = None) -> List[str]:
    """SGLang's page keys of a token list (its native SHA-256 chain)."""
    return get_hash_str(tokens, prior, page_size=page)


def page_indices(pages: List[int], page: int = PAGE) -> torch.Tensor:
    """Host token indices of whole pages, as SGLang passes them."""
    return torch.cat([torch.arange(p * page, (p + 1) * page, dtype=torch.int64) for p in pages])


def fill(pool: Any, pages: List[int], seed: int) -> List[torch.Tensor]:
    """Random bytes into whole pages, through SGLang's own page accessors;
    returns each page's flat bytes."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for p in pages:
        flat = pool.get_dummy_flat_data_page()
        data = torch.randint(-100, 100, flat.shape, generator=g).to(flat.dtype)
        pool.set_from_flat_data_page(p * pool.page_size, data)
        out.append(pool.get_data_page(p * pool.page_size, flat=True).clone())
    return out


def read(pool: Any, pages: List[int]) -> List[torch.Tensor]:
    return [pool.get_data_page(p * pool.page_size, flat=True).clone() for p in pages]


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.equal(a.view(torch.uint8), b.view(torch.uint8)))


def canonical(pool: Any, page: int) -> torch.Tensor:
    """One MHA page as [kv, layer, token, head, dim], whatever the pool's
    layout (its kv_buffer's dims, as SGLang's init_kv_buffer makes them)."""
    T, buf = pool.page_size, pool.kv_buffer
    span = slice(page * T, (page + 1) * T)
    if pool.layout == "page_first":  # [2, S, L, H, D]
        return buf[:, span].permute(0, 2, 1, 3, 4).contiguous()
    if pool.layout == "layer_first":  # [2, L, S, H, D]
        return buf[:, :, span].contiguous()
    if pool.layout == "page_first_direct":  # [2, P, L, T, H, D]
        return buf[:, page].contiguous()
    if pool.layout == "page_head":  # [2, P, H, T, L, D]
        return buf[:, page].permute(0, 3, 2, 1, 4).contiguous()
    raise ValueError(pool.layout)
