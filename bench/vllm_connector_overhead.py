#!/usr/bin/env python3
"""Per-step Python cost of KvstashConnector's worker hooks (any vLLM from 0.26 to 0.33), on
kvstashd's host backend: what the connector adds to a step on the engine's
CPU thread, per request and per layer, in microseconds (median of rounds).

Needs vLLM 0.26 to 0.33 (one of the CI venvs) and kvstashd from $KVSTASH_BIN_DIR:

    KVSTASH_BIN_DIR=build/bin PYTHONPATH=python /opt/kvstash-ci/venv-vllm-0.33.0/bin/python \\
        bench/vllm_connector_overhead.py [--layers 32] [--rounds 30]

Each round binds a step with n loads (2 chunks of 32 tokens per request),
then times: start_load_kv (issues them); every layer's wait_for_layer_load
once the loads are in (the per-layer, per-request cost without the copy:
on CPU tensors a slot check, on a GPU one cuStreamWaitValue32 enqueue);
save_kv_layer of every layer; wait_for_save + get_block_ids_with_load_errors
(the outcomes, replies already in). A store round does the same with n
stores (2 chunks each), submitted by the last save_kv_layer. An empty step
gives the hooks' cost when there is nothing to do.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python" / "vllm_connector"))
sys.path.insert(0, str(ROOT / "tests" / "python"))

import torch  # noqa: E402

from vllm_harness import (BLOCK_SIZE, WorkerRank, make_kv_cache_config,  # noqa: E402
                          make_vllm_config, write_tiny_llama)
from vllm_support import start_daemon  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec  # noqa: E402

from kvstash.integrations.vllm.metadata import (KvstashConnectorMetadata, LoadSpec,  # noqa: E402
                                                StoreSpec)

TOKENS = 64  # two 32-token chunks per request


def us(ns: float) -> float:
    return ns / 1000.0


def run(layers: int, requests: int, rounds: int, directory: Path) -> dict:
    daemon = start_daemon()
    try:
        config = make_vllm_config(write_tiny_llama(directory / "model"), daemon.socket)
        names = [f"model.layers.{i}.self_attn.attn" for i in range(layers)]
        spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=2, head_size=16,
                                 dtype=torch.float16)
        blocks_per = TOKENS // BLOCK_SIZE
        kv_config = make_kv_cache_config(config, {n: spec for n in names},
                                         blocks_per * requests * 2 + 4)
        worker = WorkerRank(config, kv_config, 0)
        c = worker.connector
        side = c.worker_side

        def tokens(r, j):
            return [1 + (r * 7919 + j * 104729 + t) % 900 for t in range(TOKENS)]

        def blocks(j, second=False):
            base = (j + (requests if second else 0)) * blocks_per
            return ([base + b for b in range(blocks_per)],)

        out = {k: [] for k in ("issue", "wait", "save", "end", "store", "empty")}
        for r in range(rounds + 2):  # two warm-up rounds
            prompts = [tokens(r, j) for j in range(requests)]
            # Store the prompts (timed: the store round).
            meta = KvstashConnectorMetadata(stores=[
                StoreSpec(req_id=f"s{r}-{j}", token_ids=prompts[j], block_ids=blocks(j),
                          start_chunk=0, num_chunks=TOKENS // 32) for j in range(requests)])
            c.bind_connector_metadata(meta)
            c.start_load_kv(None)
            t0 = time.perf_counter_ns()
            for n in names:
                c.save_kv_layer(n, None, None)
            c.wait_for_save()
            t1 = time.perf_counter_ns()
            c.get_finished(set())
            c.get_block_ids_with_load_errors()
            c.clear_connector_metadata()
            side.wait_for_stores()
            c.get_finished({f"s{r}-{j}" for j in range(requests)})
            # Load them into other blocks.
            meta = KvstashConnectorMetadata(loads=[
                LoadSpec(req_id=f"l{r}-{j}", token_ids=prompts[j], block_ids=blocks(j, True),
                         start_token=0, end_token=TOKENS)
                for j in range(requests)])
            c.bind_connector_metadata(meta)
            t2 = time.perf_counter_ns()
            c.start_load_kv(None)
            t3 = time.perf_counter_ns()
            for load in side._step.loads:  # the copies land (not timed)
                load.request.outcomes.result(10)
            t4 = time.perf_counter_ns()
            for n in names:
                c.wait_for_layer_load(n)
            t5 = time.perf_counter_ns()
            for n in names:
                c.save_kv_layer(n, None, None)
            t6 = time.perf_counter_ns()
            c.wait_for_save()
            errors = c.get_block_ids_with_load_errors()
            t7 = time.perf_counter_ns()
            assert not errors, errors
            c.get_finished(set())
            c.clear_connector_metadata()
            # An empty step.
            c.bind_connector_metadata(KvstashConnectorMetadata())
            t8 = time.perf_counter_ns()
            c.start_load_kv(None)
            for n in names:
                c.wait_for_layer_load(n)
                c.save_kv_layer(n, None, None)
            c.wait_for_save()
            c.get_finished(set())
            c.get_block_ids_with_load_errors()
            t9 = time.perf_counter_ns()
            c.clear_connector_metadata()
            if r < 2:
                continue
            out["store"].append(t1 - t0)
            out["issue"].append(t3 - t2)
            out["wait"].append(t5 - t4)
            out["save"].append(t6 - t5)
            out["end"].append(t7 - t6)
            out["empty"].append(t9 - t8)
        assert side.stats["load_failed_chunks"] == 0 and side.stats["store_failed_chunks"] == 0
        med = {k: statistics.median(v) for k, v in out.items()}
        spread = {k: (min(v), max(v)) for k, v in out.items()}
        c.shutdown()
        return {"layers": layers, "requests": requests, "med": med, "spread": spread}
    finally:
        daemon.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, nargs="+", default=[32, 80])
    parser.add_argument("--requests", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    print("| layers | requests | start_load_kv us/request | wait_for_layer_load us/(layer x request) "
          "| save_kv_layer us/layer (no stores) | end of step us/request | stores us/request "
          "| empty step us/layer |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for layers in args.layers:
        for requests in args.requests:
            with tempfile.TemporaryDirectory(prefix="kvstash-vllm-bench-") as d:
                res = run(layers, requests, args.rounds, Path(d))
            m, s = res["med"], res["spread"]
            n, L = requests, layers

            def cell(key, div):
                return (f"{us(m[key]) / div:.1f} ({us(s[key][0]) / div:.1f}-"
                        f"{us(s[key][1]) / div:.1f})")
            print(f"| {L} | {n} | {cell('issue', n)} | {cell('wait', L * n)} | {cell('save', L)} "
                  f"| {cell('end', n)} | {cell('store', n)} | {cell('empty', L)} |", flush=True)


if __name__ == "__main__":
    main()
