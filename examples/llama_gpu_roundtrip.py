#!/usr/bin/env python3
"""A real model's KV through kvstash: a Hugging Face transformers Llama with
random weights (small config, nothing downloaded).

1. Prefill a prompt; copy its KV into a paged buffer laid out like vLLM's
   flash-attn cache, [2, num_blocks, block_size, num_kv_heads, head_dim] per
   layer, at the blocks of a shuffled block table.
2. Register the paged buffer with kvstashd and store the prompt's full chunks.
3. Wipe the buffer.
4. Look the prompt up and retrieve its chunks into other blocks.
5. Rebuild the model's cache from the restored blocks, run the prompt's
   remaining tokens, and compare the next-token logits with the same
   continuation run on the KV the model computed itself (must be identical,
   bit for bit), and with a full recomputation (same argmax, tiny difference
   from kernel shapes only).

GPU (default): kvstashd --backend cuda, KV shared over CUDA IPC.
    PYTHONPATH=python KVSTASH_BIN_DIR=build/bin python3 examples/llama_gpu_roundtrip.py
CPU (--device cpu): kvstashd --backend host, the paged buffer in
kvstash.host_tensor memory. Without --socket the example starts its own
kvstashd from $KVSTASH_BIN_DIR (default build/bin). Prints PASS or FAIL.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import kvstash

BLOCK_SIZE = 16


def start_daemon(backend: str, chunk_tokens: int):
    bin_dir = Path(os.environ.get("KVSTASH_BIN_DIR", Path(__file__).resolve().parents[1] / "build" / "bin"))
    binary = bin_dir / "kvstashd"
    if not binary.is_file():
        sys.exit(f"FAIL: {binary} not found (set KVSTASH_BIN_DIR or pass --socket)")
    folder = tempfile.mkdtemp(prefix="kvstash-llama-")
    socket = f"ipc://{folder}/kvstash.sock"
    proc = subprocess.Popen([str(binary), "--socket", socket, "--backend", backend,
                             "--chunk-tokens", str(chunk_tokens), "--l1-gb", "0.5",
                             "--l1-slice-mb", "8", "--log-level", "warn"])
    deadline = time.monotonic() + 20
    while not os.path.exists(f"{folder}/kvstash.sock"):
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"FAIL: kvstashd did not start ({proc.poll()})")
        time.sleep(0.02)
    return proc, folder, socket


def layer_kv(cache, i):
    """(K, V) of layer i, [batch, kv_heads, tokens, head_dim], across
    transformers' cache APIs."""
    if hasattr(cache, "layers"):
        return cache.layers[i].keys, cache.layers[i].values
    if hasattr(cache, "key_cache"):
        return cache.key_cache[i], cache.value_cache[i]
    return cache[i]


def make_cache(kvs):
    from transformers import DynamicCache

    cache = DynamicCache()
    for i, (k, v) in enumerate(kvs):
        cache.update(k, v, i)
    return cache


def main() -> int:
    parser = argparse.ArgumentParser(description="Llama KV round trip through kvstash")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--socket", default=None, help="a running kvstashd (default: start one)")
    parser.add_argument("--prompt-tokens", type=int, default=300)
    parser.add_argument("--chunk-tokens", type=int, default=64,
                        help="for the kvstashd this example starts")
    args = parser.parse_args()

    from transformers import LlamaConfig, LlamaForCausalLM

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("FAIL: no CUDA GPU visible to torch (use --device cpu for the host backend)")
        return 1
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=512,
                         num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                         max_position_embeddings=1024)
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    num_layers = config.num_hidden_layers
    kv_heads = config.num_key_value_heads
    head_dim = config.hidden_size // config.num_attention_heads

    daemon = None
    socket = args.socket
    if socket is None:
        daemon = start_daemon("cuda" if device.type == "cuda" else "host", args.chunk_tokens)
        socket = daemon[2]
    try:
        with kvstash.Client(socket=socket, name="llama-example") as client:
            return run(client, model, device, dtype, num_layers, kv_heads, head_dim, args)
    finally:
        if daemon is not None:
            daemon[0].terminate()
            daemon[0].wait()
            shutil.rmtree(daemon[1], ignore_errors=True)


def run(client, model, device, dtype, num_layers, kv_heads, head_dim, args) -> int:
    n = args.prompt_tokens
    prompt = torch.randint(0, 1000, (1, n), device=device)

    with torch.no_grad():
        full = model(prompt, use_cache=True)
    reference_logits = full.logits[0, -1].float()
    kv_model = [layer_kv(full.past_key_values, i) for i in range(num_layers)]

    # The paged buffer, vLLM flash-attn NHD, one tensor per layer.
    num_blocks = 2 * (-(-n // BLOCK_SIZE)) + 4
    shape = (2, num_blocks, BLOCK_SIZE, kv_heads, head_dim)
    if device.type == "cuda":
        paged = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
    else:
        paged = [kvstash.host_tensor(shape, dtype) for _ in range(num_layers)]
    reg = client.register(paged, model="llama-random-example")
    chunk = reg.chunk_tokens
    stored_tokens = (n - 1) // chunk * chunk  # full chunks; the last token is always computed
    if stored_tokens == 0:
        print(f"FAIL: the prompt ({n} tokens) needs more than one chunk of {chunk}")
        return 1
    print(f"model: {num_layers} layers, {kv_heads} KV heads x {head_dim}, {dtype}; prompt {n} tokens; "
          f"kvstash: chunks of {chunk}; storing {stored_tokens}")

    blocks = torch.randperm(num_blocks)
    table_a = blocks[: num_blocks // 2].to(torch.int32)
    table_b = blocks[num_blocks // 2:].to(torch.int32)

    def scatter(table, kvs, tokens):
        for layer, (k, v) in enumerate(kvs):
            for t0 in range(0, tokens, BLOCK_SIZE):
                t1 = min(t0 + BLOCK_SIZE, tokens)
                b = int(table[t0 // BLOCK_SIZE])
                # [1, heads, tokens, dim] -> [tokens, heads, dim]
                paged[layer][0, b, : t1 - t0] = k[0, :, t0:t1].transpose(0, 1)
                paged[layer][1, b, : t1 - t0] = v[0, :, t0:t1].transpose(0, 1)

    def gather(table, tokens):
        kvs = []
        for layer in range(num_layers):
            parts_k, parts_v = [], []
            for t0 in range(0, tokens, BLOCK_SIZE):
                t1 = min(t0 + BLOCK_SIZE, tokens)
                b = int(table[t0 // BLOCK_SIZE])
                parts_k.append(paged[layer][0, b, : t1 - t0])
                parts_v.append(paged[layer][1, b, : t1 - t0])
            k = torch.cat(parts_k).transpose(0, 1).unsqueeze(0).contiguous()
            v = torch.cat(parts_v).transpose(0, 1).unsqueeze(0).contiguous()
            kvs.append((k, v))
        return kvs

    tokens_np = prompt[0, :stored_tokens].to(torch.int32).cpu()
    scatter(table_a, kv_model, stored_tokens)
    if device.type == "cuda":
        torch.cuda.synchronize()
    stored = reg.store(reg.chunks(tokens_np, table_a))
    if not all(o.ok for o in stored):
        print(f"FAIL: store outcomes {stored}")
        return 1
    for t in paged:
        t.zero_()

    hit = reg.lookup(reg.chunk_keys(tokens_np), lease_ms=10_000)
    if hit.hit_tokens != stored_tokens:
        print(f"FAIL: lookup found {hit.hit_tokens} of {stored_tokens} tokens")
        return 1
    got = reg.retrieve(reg.chunks(tokens_np, table_b), lease_id=hit.lease_id)  # ends the lease
    if not all(o.ok for o in got):
        print(f"FAIL: retrieve outcomes {got}")
        return 1

    # The restored KV equals the model's own, byte for byte.
    restored = gather(table_b, stored_tokens)
    same_bytes = all(
        torch.equal(r.view(torch.int16 if r.element_size() == 2 else torch.int32),
                    m[:, :, :stored_tokens].contiguous().view(
                        torch.int16 if r.element_size() == 2 else torch.int32))
        for (rk, rv), (mk, mv) in zip(restored, kv_model) for r, m in ((rk, mk), (rv, mv))
    )
    untouched = all(torch.equal(p[:, table_a.long()], torch.zeros_like(p[:, table_a.long()]))
                    for p in paged)

    with torch.no_grad():
        rest = prompt[:, stored_tokens:]
        from_kvstash = model(rest, past_key_values=make_cache(restored), use_cache=True).logits[0, -1].float()
        own = [(k[:, :, :stored_tokens].contiguous(), v[:, :, :stored_tokens].contiguous())
               for k, v in kv_model]
        from_model = model(rest, past_key_values=make_cache(own), use_cache=True).logits[0, -1].float()

    identical = torch.equal(from_kvstash, from_model)
    diff_full = (from_kvstash - reference_logits).abs().max().item()
    same_argmax = int(from_kvstash.argmax()) == int(reference_logits.argmax())
    print(f"restored KV bytes identical to the model's: {same_bytes}; blocks not named untouched: {untouched}")
    print(f"next-token logits from restored KV vs the model's own KV: "
          f"{'identical' if identical else 'DIFFERENT'}")
    print(f"vs full recomputation: max |diff| {diff_full:.3g}, same argmax token: {same_argmax} "
          f"({int(from_kvstash.argmax())})")
    ok = same_bytes and untouched and identical and same_argmax
    reg.unregister()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
