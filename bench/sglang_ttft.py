"""SGLang 0.5.17 with kvstash as its HiCache storage tier: time to first
token by prompt length, and the backend's page rates against a raw memcpy.

Two parts, each its own run:

  python3 bench/sglang_ttft.py pages --socket S [--pages 128] [--repeat 5]
      batch_set_v1 / batch_get_v1 of one SGLang call (128 Llama-3-8B pages
      of 64 tokens, 8 MiB each: 1 GiB) through kvstashd, against torch's
      copy and ctypes.memmove of the same bytes between two host buffers.
      CPU only: runs on any machine with SGLang's Python classes.

  python3 bench/sglang_ttft.py ttft --backend kvstash|file --socket S [--lengths 1024,...,32768]
      [--repeat 3] [--prompts FILE] [--first-sight]
      On a GPU (SGLang 0.5.17 on it): TTFT (a 1-token request's latency) median
      and p90 by prompt length for
        recompute  a prompt never seen
        l2         its pages on SGLang's host pool only (the device copy
                   evicted by filler prompts; --hicache-size keeps them)
        l3         device and host flushed: the pages come from the storage
                   backend (`file`: SGLang's files in $SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR;
                   `kvstash`: kvstashd)
      --prompts FILE writes the prompts used; with --first-sight a second
      engine (another process, same kvstashd) reads them and measures its
      first sight of each: what instance B of a fleet sees.

Prints one table per part (Markdown) and a JSON line per measurement.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List

LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
             "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 131072,
             "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
             "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu",
             "tie_word_embeddings": False}
PAGE = 64


def p90(values: List[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


# ---- pages: the backend's copies against memcpy ----

def pool_pages(kv_buffer: Any, layout: str, first: int, count: int) -> Any:
    """Pages [first, first + count) of an MHA host pool's K and V, by layout
    (kvstash/integrations/sglang/layout.py lists the shapes)."""
    if layout == "layer_first":  # [2, L, S, H, D]
        return kv_buffer[:, :, first * PAGE:(first + count) * PAGE]
    if layout == "page_first":  # [2, S, L, H, D]
        return kv_buffer[:, first * PAGE:(first + count) * PAGE]
    if layout in ("page_first_direct", "page_head"):  # [2, P, ...]
        return kv_buffer[:, first:first + count]
    raise ValueError(f"no page view for layout {layout}")


def bench_pages(args: argparse.Namespace) -> None:
    import torch
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    n = args.pages
    dev = MHATokenToKVPool(size=4 * PAGE, page_size=PAGE, dtype=torch.bfloat16, head_num=8,
                           head_dim=128, layer_num=32, device="cpu", enable_memory_saver=False,
                           enable_alt_stream=False)
    per_token = 2 * 32 * 8 * 128 * 2
    pool = MHATokenToKVPoolHost(dev, 2.0, (2 * n) * PAGE * per_token / 1e9, PAGE, args.layout,
                                pin_memory=False, device="cpu", allocator_type="shm")
    extra = {"backend_name": "kvstash", "module_path": "kvstash.integrations.sglang",
             "class_name": "KvstashHiCacheStorage", "interface_v1": 1, "allocator": "shm",
             "kvstash_socket": args.socket, "kvstash_timeout_ms": 60000}
    config = HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0,
                                  attn_cp_size=1, is_mla_model=False, enable_storage_metrics=False,
                                  is_page_first_layout=True, model_name="bench/llama-3-8b",
                                  extra_config=extra)
    storage = StorageBackendFactory.create_backend("dynamic", config, pool)
    storage.register_mem_pool_host(pool)
    page_bytes = storage.layout.page_bytes
    total = n * page_bytes
    pool.kv_buffer.view(torch.uint8).random_(0, 255)
    src = torch.arange(0, n * PAGE, dtype=torch.int64)
    dst = torch.arange(n * PAGE, 2 * n * PAGE, dtype=torch.int64)
    a = torch.empty(total, dtype=torch.uint8)
    b = torch.empty(total, dtype=torch.uint8)
    a.random_(0, 255)
    b.copy_(a)  # touch
    rows: Dict[str, List[float]] = {"batch_set_v1": [], "batch_get_v1": [], "torch copy_": [],
                                    "memmove (1 thread)": []}
    rng = random.Random(0)
    for r in range(args.repeat):
        keys = [("%064x" % rng.getrandbits(256)) for _ in range(n)]
        t = time.perf_counter()
        ok = storage.batch_set_v1(keys, src)
        rows["batch_set_v1"].append(time.perf_counter() - t)
        assert all(ok), f"store failed: {ok.count(False)} pages"
        t = time.perf_counter()
        ok = storage.batch_get_v1(keys, dst)
        rows["batch_get_v1"].append(time.perf_counter() - t)
        assert all(ok), f"load failed: {ok.count(False)} pages"
        t = time.perf_counter()
        b.copy_(a)
        rows["torch copy_"].append(time.perf_counter() - t)
        t = time.perf_counter()
        ctypes.memmove(b.data_ptr(), a.data_ptr(), total)
        rows["memmove (1 thread)"].append(time.perf_counter() - t)
        print(json.dumps({"part": "pages", "repeat": r, **{k: v[-1] for k, v in rows.items()}}),
              flush=True)
    # The last load must have brought the stored bytes (K and V) back.
    stored = pool_pages(pool.kv_buffer, args.layout, 0, n)
    loaded = pool_pages(pool.kv_buffer, args.layout, n, n)
    assert torch.equal(stored.view(torch.uint8), loaded.view(torch.uint8)), "pages differ"
    raw = statistics.median(rows["torch copy_"])
    print(f"\n{n} pages of {page_bytes >> 20} MiB ({total / 2**30:.2f} GiB) per call, "
          f"{args.layout}, median of {args.repeat}; torch threads {torch.get_num_threads()}\n")
    print("| copy | median s | GB/s | vs torch copy_ |")
    print("| --- | --- | --- | --- |")
    for name, values in rows.items():
        med = statistics.median(values)
        print(f"| {name} | {med:.4f} | {total / med / 1e9:.2f} | {raw / med:.2f} |")
    storage.close()


# ---- ttft: a real engine ----

def engine_kwargs(args: argparse.Namespace, model: str) -> Dict[str, Any]:
    longest = max(args.lengths)
    kw = dict(model_path=model, load_format="dummy", skip_tokenizer_init=True,
              attention_backend="triton", sampling_backend="pytorch",
              cuda_graph_backend_decode="disabled", cuda_graph_backend_prefill="disabled",
              page_size=PAGE, context_length=2 * longest + 1024,
              max_total_tokens=args.device_tokens, chunked_prefill_size=8192,
              mem_fraction_static=args.mem_fraction, random_seed=0,
              enable_hierarchical_cache=True, hicache_size=args.hicache_gb,
              hicache_write_policy="write_through",
              hicache_storage_prefetch_policy="wait_complete",
              hicache_storage_backend="dynamic" if args.backend == "kvstash" else "file",
              log_level="warning")
    if args.backend == "kvstash":
        kw["hicache_storage_backend_extra_config"] = json.dumps({
            "backend_name": "kvstash", "module_path": "kvstash.integrations.sglang",
            "class_name": "KvstashHiCacheStorage", "interface_v1": 1, "allocator": "shm",
            "kvstash_socket": args.socket})
    return kw


def bench_ttft(args: argparse.Namespace) -> None:
    import sglang as sgl

    if args.backend == "file":
        os.environ.setdefault("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR",
                              tempfile.mkdtemp(prefix="sgl-l3-"))
    # One folder for every run: the model path names the key namespace, so
    # instance B must use the one instance A used.
    model = args.model_dir
    os.makedirs(model, exist_ok=True)
    with open(os.path.join(model, "config.json"), "w") as f:
        json.dump(LLAMA3_8B, f)
    engine = sgl.Engine(**engine_kwargs(args, model))
    rng = random.Random(1 if args.first_sight else 0)

    def prompt(n: int) -> List[int]:
        return [rng.randrange(1000, 120000) for _ in range(n)]

    def ask(ids: List[int]) -> Dict[str, Any]:
        t = time.perf_counter()
        out = engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 1, "temperature": 0.0})
        mi = out["meta_info"]
        return {"s": time.perf_counter() - t, "details": mi.get("cached_tokens_details") or {}}

    def flush() -> None:
        for _ in range(60):
            if getattr(engine.flush_cache(), "success", True):
                return
            time.sleep(0.5)
        raise RuntimeError("flush_cache() did not succeed within 30 s")

    results: Dict[str, Dict[int, List[float]]] = {}
    misplaced: List[str] = []

    def record(case: str, n: int, r: Dict[str, Any], source: str = "") -> None:
        """A sample counts only if its pages came from where the case says
        (cached_tokens_details): a flush that left a device copy is no L3 hit."""
        print(json.dumps({"case": case, "tokens": n, **r}), flush=True)
        if source and not int(r["details"].get(source) or 0):
            misplaced.append(f"{case} at {n} tokens: no tokens from {source} ({r['details']})")
            return
        results.setdefault(case, {}).setdefault(n, []).append(r["s"])
    saved: Dict[str, List[List[int]]] = {}
    try:
        ask(prompt(1024))  # compiles
        if args.first_sight:
            with open(args.prompts) as f:
                saved = json.load(f)
            for n in args.lengths:
                for ids in saved[str(n)]:
                    record("instance B first sight", n, ask(ids), "storage")
        else:
            for n in args.lengths:
                for _ in range(args.repeat):
                    ids = prompt(n)
                    saved.setdefault(str(n), []).append(ids)
                    record("recompute", n, ask(ids))
                    time.sleep(args.settle_s)  # write-through reaches storage
                    filled = 0
                    while filled < args.device_tokens + n:  # evict the device copy
                        ask(prompt(min(8192, max(1024, n))))
                        filled += min(8192, max(1024, n))
                    record("l2 (host pool)", n, ask(ids), "host")
                    flush()
                    record(f"l3 ({args.backend})", n, ask(ids), "storage")
            if args.prompts:
                with open(args.prompts, "w") as f:
                    json.dump(saved, f)
    finally:
        engine.shutdown()
    print(f"\nTTFT (s), median / p90 of {args.repeat}, backend {args.backend}\n")
    print("| case | " + " | ".join(f"{n}" for n in args.lengths) + " |")
    print("| --- |" + " --- |" * len(args.lengths))
    for case, by_n in results.items():
        cells = [f"{statistics.median(by_n[n]):.3f} / {p90(by_n[n]):.3f}" if n in by_n else "-"
                 for n in args.lengths]
        print(f"| {case} | " + " | ".join(cells) + " |")
    if misplaced:
        raise RuntimeError("samples not from the tier their case measures (left out above): " +
                           "; ".join(misplaced))


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="part", required=True)
    pages = sub.add_parser("pages")
    pages.add_argument("--socket", required=True)
    pages.add_argument("--pages", type=int, default=128)
    pages.add_argument("--repeat", type=int, default=5)
    pages.add_argument("--layout", default="page_first")
    ttft = sub.add_parser("ttft")
    ttft.add_argument("--backend", choices=["kvstash", "file"], default="kvstash")
    ttft.add_argument("--socket", default=os.environ.get("KVSTASH_SOCKET", ""))
    ttft.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")],
                      default=[1024, 2048, 4096, 8192, 16384, 32768])
    ttft.add_argument("--repeat", type=int, default=3)
    ttft.add_argument("--device-tokens", type=int, default=65536)
    ttft.add_argument("--hicache-gb", type=int, default=40)
    ttft.add_argument("--mem-fraction", type=float, default=0.5)
    ttft.add_argument("--settle-s", type=float, default=2.0)
    ttft.add_argument("--prompts", default="")
    ttft.add_argument("--first-sight", action="store_true")
    ttft.add_argument("--model-dir", default="/tmp/kvstash-sglang-bench-llama3-8b",
                      help="where the Llama-3-8B config is written (the same for instance B)")
    args = ap.parse_args()
    if args.part == "pages":
        bench_pages(args)
    else:
        if args.backend == "kvstash" and not args.socket:
            ap.error("ttft --backend kvstash needs --socket (or $KVSTASH_SOCKET)")
        if args.first_sight and not args.prompts:
            ap.error("--first-sight needs --prompts FILE from an earlier run")
        bench_ttft(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
