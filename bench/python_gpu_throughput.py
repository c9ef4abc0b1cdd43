#!/usr/bin/env python3
"""GB/s of store and retrieve from the Python package on the GPU (kvstashd
--backend cuda), for requests of 1, 4 and 16 chunks, in the layout of
`kvstash bench --backend cuda` (Llama-3-8B under vLLM: 32 layers, 8 KV heads
x 128 bf16, blocks of 16), so that the two can be put side by side:

    PYTHONPATH=python python3 bench/python_gpu_throughput.py      # starts kvstashd --backend cuda
    build/bin/kvstash bench --backend cuda --chunk-counts 1,4,16 --socket <same daemon>

Bytes counted: chunk_bytes x chunks per request (the KV moved). kvstashd and
its options come from $KVSTASH_BIN_DIR (default build/bin).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import kvstash

BIN = Path(os.environ.get("KVSTASH_BIN_DIR", Path(__file__).resolve().parents[1] / "build" / "bin"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--socket", default=None)
    parser.add_argument("--chunk-counts", default="1,4,16")
    parser.add_argument("--requests", type=int, default=200, help="per figure")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--block-tokens", type=int, default=16)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU visible to torch")
        return 1

    daemon, folder, socket = None, None, args.socket
    if socket is None:
        folder = tempfile.mkdtemp(prefix="kvstash-gpu-bench-")
        socket = f"ipc://{folder}/kvstash.sock"
        daemon = subprocess.Popen([str(BIN / "kvstashd"), "--socket", socket, "--backend", "cuda",
                                   "--l1-gb", "16", "--log-level", "warn"])
        while not os.path.exists(f"{folder}/kvstash.sock"):
            time.sleep(0.05)
    try:
        with kvstash.Client(socket=socket, timeout_ms=60000, name="python-gpu-bench") as client:
            ready, capacity = client.pool_ready()
            while ready < capacity:  # the pool pins in the background
                time.sleep(0.1)
                ready, capacity = client.pool_ready()
            run(client, args)
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait()
            shutil.rmtree(folder, ignore_errors=True)
    return 0


def run(client: kvstash.Client, args) -> None:
    chunk = client.server_info.chunk_tokens
    counts = [int(c) for c in args.chunk_counts.split(",")]
    blocks_per_chunk = chunk // args.block_tokens
    num_blocks = 2 * max(counts) * blocks_per_chunk
    kv = [torch.randn((2, num_blocks, args.block_tokens, args.kv_heads, args.head_dim),
                      dtype=torch.bfloat16, device="cuda") for _ in range(args.layers)]
    reg = client.register(kv, model="python-gpu-bench")
    torch.cuda.synchronize()
    print(f"{args.layers} layers x {args.kv_heads} heads x {args.head_dim} bf16, blocks of "
          f"{args.block_tokens}, chunks of {chunk} tokens = {reg.chunk_bytes / 2**20:.1f} MiB; "
          f"{torch.cuda.get_device_name()}")
    print("| chunks | store GB/s | retrieve GB/s | store p50 ms | retrieve p50 ms |")
    print("| --- | --- | --- | --- | --- |")
    seq = 0
    for n in counts:
        store_s, retrieve_s = [], []
        table = torch.arange(n * blocks_per_chunk, dtype=torch.int32)
        other = table + n * blocks_per_chunk
        for _ in range(args.requests):
            seq += 1
            tokens = torch.arange(seq * 1_000_000, seq * 1_000_000 + n * chunk, dtype=torch.int32)
            chunks = reg.chunks(tokens, table)
            t0 = time.perf_counter()
            stored = reg.store(chunks)
            t1 = time.perf_counter()
            got = reg.retrieve(reg.chunks(tokens, other))
            t2 = time.perf_counter()
            assert all(o.ok for o in stored) and all(o.ok for o in got), (stored, got)
            store_s.append(t1 - t0)
            retrieve_s.append(t2 - t1)
            client.clear(model="python-gpu-bench")  # room for the next request, untimed
        moved = n * reg.chunk_bytes
        print(f"| {n} | {moved / statistics.median(store_s) / 1e9:.2f} | "
              f"{moved / statistics.median(retrieve_s) / 1e9:.2f} | "
              f"{statistics.median(store_s) * 1e3:.3f} | {statistics.median(retrieve_s) * 1e3:.3f} |")
    assert torch.equal(kv[0][:, other.long()], kv[0][:, table.long()])


if __name__ == "__main__":
    sys.exit(main())
