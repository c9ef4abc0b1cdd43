#!/usr/bin/env python3
"""A minimal Python engine loop on kvstashd's host backend (no GPU).

The "engine" keeps a paged KV cache in vLLM's flash-attn layout,
[2, num_blocks, block_size, num_kv_heads, head_size] per layer, in named
shared memory (kvstash.host_tensor), so that kvstashd's host backend can
read and write it. For each request it:
  1. looks the prompt up (how many leading chunks kvstashd already holds),
  2. retrieves those chunks into freshly allocated blocks,
  3. "computes" the rest of the prompt's KV (here: deterministic bytes),
  4. stores the new full chunks in the background (a Future) and moves on.
The second request shares a prefix with the first and checks that the
retrieved KV is byte for byte what the first request wrote.

Run kvstashd first:
    kvstashd --backend host --socket /tmp/kvstash.sock
    python3 examples/python_host_engine.py --socket /tmp/kvstash.sock
Prints PASS and exits 0 when every byte matched.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import kvstash

NUM_LAYERS, NUM_BLOCKS, BLOCK_SIZE, HEADS, HEAD_SIZE = 4, 64, 16, 4, 32


def compute_kv(kv_layers, token_ids, block_table, start_token: int) -> None:
    """Stands in for the forward pass: KV of token t depends on the token
    ids up to t (as attention KV does), written into its block."""
    for t in range(start_token, len(token_ids)):
        block, offset = block_table[t // BLOCK_SIZE], t % BLOCK_SIZE
        seed = hash(tuple(token_ids[: t + 1])) & 0xFFFFFFFF
        values = np.random.default_rng(seed).standard_normal((NUM_LAYERS, 2, HEADS, HEAD_SIZE))
        for layer, kv in enumerate(kv_layers):
            kv[:, block, offset] = values[layer].astype(np.float16)


class Engine:
    def __init__(self, client: kvstash.Client) -> None:
        self.kv = [kvstash.host_tensor((2, NUM_BLOCKS, BLOCK_SIZE, HEADS, HEAD_SIZE), np.float16)
                   for _ in range(NUM_LAYERS)]
        self.reg = client.register(self.kv, model="example-host-engine")
        self.free_blocks = list(range(NUM_BLOCKS))
        self.pending_stores = []

    def run(self, token_ids) -> dict:
        tokens = np.asarray(token_ids, dtype=np.int32)
        n_blocks = -(-len(tokens) // BLOCK_SIZE)
        table = np.array([self.free_blocks.pop(0) for _ in range(n_blocks)], dtype=np.int32)

        hit = self.reg.lookup(self.reg.chunk_keys(tokens), lease_ms=5000)
        # Never load the whole prompt: the engine must compute at least the last token.
        load_chunks = min(hit.hit_chunks, (len(tokens) - 1) // self.reg.chunk_tokens)
        loaded = 0
        if load_chunks:
            chunks = self.reg.chunks(tokens, table, num_chunks=load_chunks)
            # The lease kept the chunks since the lookup; the retrieve ends it.
            outcomes = self.reg.retrieve(chunks, lease_id=hit.lease_id)
            for o in outcomes:  # a missing chunk ends the usable prefix
                if not o.ok:
                    break
                loaded += o.num_tokens
        elif hit.lease_id:
            self.reg.release(hit.lease_id)

        compute_kv(self.kv, list(tokens), table, loaded)

        # Store the full chunks past what was loaded; do not wait for it.
        full = len(tokens) // self.reg.chunk_tokens
        first_new = loaded // self.reg.chunk_tokens
        if full > first_new:
            chunks = self.reg.chunks(tokens, table, start_chunk=first_new,
                                     num_chunks=full - first_new)
            self.pending_stores.append(self.reg.store_async(chunks))
        return {"table": table, "loaded_tokens": loaded}

    def drain(self) -> None:
        for f in self.pending_stores:
            assert all(o.ok for o in f.result(10)), f.result()
        self.pending_stores.clear()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--socket", default=None, help="kvstashd socket (default $KVSTASH_SOCKET)")
    args = parser.parse_args()

    with kvstash.Client(socket=args.socket, name="example-host-engine") as client:
        info = client.server_info
        if info.backend != "host":
            print(f"FAIL: kvstashd runs the {info.backend} backend; start it with --backend host")
            return 1
        engine = Engine(client)
        chunk = engine.reg.chunk_tokens
        rng = np.random.default_rng(1)
        shared = rng.integers(0, 32000, size=3 * chunk).tolist()
        first = engine.run(shared + rng.integers(0, 32000, size=chunk // 2).tolist())
        engine.drain()
        second_tokens = shared + rng.integers(0, 32000, size=chunk).tolist()
        second = engine.run(second_tokens)
        engine.drain()

        print(f"request 1: computed everything; request 2: loaded {second['loaded_tokens']} "
              f"of {len(second_tokens)} tokens from kvstashd (chunks of {chunk})")
        ok = second["loaded_tokens"] == 3 * chunk
        # Every block of the shared prefix holds the same bytes in both requests.
        for b1, b2 in zip(first["table"][: 3 * chunk // BLOCK_SIZE],
                          second["table"][: 3 * chunk // BLOCK_SIZE]):
            for kv in engine.kv:
                ok &= np.array_equal(kv[:, b1].view(np.uint16), kv[:, b2].view(np.uint16))
        # And the recomputed reference agrees with what was loaded.
        reference = [np.zeros_like(kv) for kv in engine.kv]
        compute_kv(reference, second_tokens, second["table"], 0)
        for kv, ref in zip(engine.kv, reference):
            for b in second["table"]:
                ok &= np.array_equal(kv[:, b].view(np.uint16), ref[:, b].view(np.uint16))
        print("PASS" if ok else "FAIL: KV bytes differ")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
