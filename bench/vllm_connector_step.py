#!/usr/bin/env python3
"""KvstashConnector's CPU time per step through the chunked prefill of a long
prompt (any vLLM from 0.26 to 0.33, CPU only, kvstashd on the host backend):
does a step cost what is new in it, or what came before?

vLLM's real v1 Scheduler runs with the connector loaded by module path and
the worker side is called in the model runner's order on host tensors, as
the connector tests do (tests/python/vllm_connector/vllm_harness.py); the
forward pass writes nothing (the connector's own time is measured). One
prompt of --tokens tokens is prefilled --step-tokens at a time; every whole
chunk is stored. Two ways, timed in turn on the same machine:

- `from 0`: every StoreSpec carries the prompt from token 0 and the workers
  key it from token 0 (the connector's fallback when the workers may not
  hold the key chain, and what every step did before key chains were
  continued);
- `deltas`: the connector's normal way, only the step's new chunks.

Per step it times the connector's hooks: scheduler side
(get_num_new_matched_tokens, update_state_after_alloc, build_connector_meta,
update_connector_output, request_finished, get_kv_connector_stats), worker
side (handle_preemptions, bind_connector_metadata, start_load_kv,
wait_for_layer_load, save_kv_layer, wait_for_save, get_finished /
get_transfer_results, get_block_ids_with_load_errors,
get_kv_connector_stats, clear_connector_metadata), and the pickled size of
the step's connector metadata (what vLLM sends every worker). The floor: the
SHA-256 key chain of the step's new tokens alone, timed in the same run.
Each figure is the median over --repeat prompts, then over the steps of a
window (the first step, and early, middle and late steps). Every run checks that all
the prompt's chunks are found under the keys from token 0 and that nothing
failed, and exits non-zero otherwise.

    KVSTASH_BIN_DIR=build/bin PYTHONPATH=python /opt/kvstash-ci/venv-vllm-0.33.0/bin/python \\
        bench/vllm_connector_step.py [--tokens 32768] [--step-tokens 512 2048]
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python" / "vllm_connector"))
sys.path.insert(0, str(ROOT / "tests" / "python"))

import torch  # noqa: E402

from vllm_harness import (BLOCK_SIZE, Engine, make_kv_cache_config, make_request,  # noqa: E402
                          make_vllm_config, write_tiny_llama)
from vllm_support import start_daemon  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec  # noqa: E402

from kvstash.integrations.vllm.stats import KvstashConnectorStats  # noqa: E402

SCHEDULER_HOOKS = ("get_num_new_matched_tokens", "update_state_after_alloc",
                   "build_connector_meta", "update_connector_output", "request_finished",
                   "request_finished_all_groups", "get_kv_connector_stats")
WORKER_HOOKS = ("handle_preemptions", "bind_connector_metadata", "start_load_kv",
                "wait_for_layer_load", "save_kv_layer", "wait_for_save", "get_finished",
                "get_transfer_results", "get_block_ids_with_load_errors",
                "get_kv_connector_stats", "clear_connector_metadata")


class HookClock:
    """Nanoseconds spent in an object's hooks: each hook is replaced on the
    instance by a timed call of the original (vLLM calls them through it)."""

    def __init__(self, obj, hooks) -> None:
        self.ns = 0
        for name in hooks:
            setattr(obj, name, self._timed(getattr(obj, name)))

    def _timed(self, fn):
        def timed(*args, **kwargs):
            began = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self.ns += time.perf_counter_ns() - began
        return timed

    def take(self) -> int:
        ns, self.ns = self.ns, 0
        return ns


def prefill(model_dir: Path, socket: str, tokens: List[int], step_tokens: int, layers: int,
            deltas: bool) -> Dict[str, list]:
    """One prompt's chunked prefill; per step: µs in the scheduler's and the
    worker's hooks, metadata bytes, µs of the new tokens' key chain alone."""
    config = make_vllm_config(model_dir, socket, max_num_batched_tokens=step_tokens,
                              max_model_len=len(tokens) + 64)
    spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=1, head_size=16,
                             dtype=torch.float16)
    names = [f"model.layers.{i}.self_attn.attn" for i in range(layers)]
    kv_config = make_kv_cache_config(config, {n: spec for n in names},
                                     len(tokens) // BLOCK_SIZE + 16)
    e = Engine(config, kv_config, write_kv=False)
    side = e.connector.scheduler_side
    if not deltas:
        side._deltas = False  # every StoreSpec from token 0: the fallback
    worker = e.workers[0].connector
    scheduler_clock = HookClock(e.connector, SCHEDULER_HOOKS)
    worker_clock = HookClock(worker, WORKER_HOOKS)
    reg = worker.worker_side.registrations[0]
    c = reg.chunk_tokens
    out: Dict[str, list] = {"scheduler_us": [], "worker_us": [], "meta_bytes": [],
                            "keys_us": [], "computed": []}
    e.scheduler.add_request(make_request("long", tokens, max_tokens=1))
    computed, keyed, last_key = 0, 0, None
    while e.busy():
        so = e.step()
        scheduler_ns, worker_ns = scheduler_clock.take(), worker_clock.take()
        if "long" not in so.num_scheduled_tokens:
            continue  # waiting for stores to be reusable, after the request finished
        computed += so.num_scheduled_tokens["long"]
        whole = min(computed, len(tokens)) // c
        # The floor: the key chain of this step's new whole chunks alone.
        began = time.perf_counter_ns()
        keys = reg.chunk_keys(tokens[keyed * c:whole * c], after=last_key)
        keys_ns = time.perf_counter_ns() - began
        keyed, last_key = whole, keys[-1] if keys else last_key
        out["scheduler_us"].append(scheduler_ns / 1e3)
        out["worker_us"].append(worker_ns / 1e3)
        out["meta_bytes"].append(len(pickle.dumps(so.kv_connector_metadata)))
        out["keys_us"].append(keys_ns / 1e3)
        out["computed"].append(whole * c)
    e.settle_stores()
    e.step()  # the last store replies into the stats
    totals = worker.worker_side.stats
    expected = len(tokens) // c
    failed = {k: v for k, v in totals.items()
              if v and k in ("store_failed_chunks", "stores_skipped", "chain_gaps")}
    if failed or totals["store_chunks"] != expected:
        raise SystemExit(f"error: stored {totals['store_chunks']} of {expected} chunks, {failed}")
    hit = reg.lookup(reg.chunk_keys(tokens[:expected * c]))
    if hit.lease_id:
        reg.release(hit.lease_id)
    if hit.hit_chunks != expected:
        raise SystemExit(f"error: {hit.hit_chunks} of {expected} chunks found under their keys")
    stats = KvstashConnectorStats()
    for payload in e.connector_stats:
        stats.aggregate(KvstashConnectorStats(data=payload))
    out["reduced"] = stats.reduce()
    worker.shutdown()
    e.connector.shutdown()
    return out


def median_steps(runs: List[Dict[str, list]], key: str) -> List[float]:
    return [statistics.median(r[key][i] for r in runs) for i in range(len(runs[0][key]))]


def windows(n: int) -> List[range]:
    """Step 1 (it also looks the prompt up), then early, middle and late
    windows of equal size (0-based step indices)."""
    w = max(1, min(8, (n - 1) // 3))
    mid = (n - w) // 2 + 1
    return [range(0, 1), range(1, 1 + w), range(mid, mid + w), range(n - w, n)]


def window_median(m: Dict[str, List[float]], key: str, steps: range) -> float:
    return statistics.median(m[key][i] for i in steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--step-tokens", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--chunk-tokens", type=int, default=256)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kvstash-vllm-step-") as directory:
        model_dir = write_tiny_llama(Path(directory) / "model",
                                     max_position_embeddings=args.tokens + 64)
        print(f"prompt {args.tokens} tokens, chunks of {args.chunk_tokens}, {args.layers} layers; "
              f"per step, the median over {args.repeat} prompts, then over the steps of each "
              "window")
        print("| step tokens | way | steps | tokens done | scheduler µs | worker µs "
              "| metadata bytes | new tokens' keys µs |")
        print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |")
        summary = []
        for step_tokens in args.step_tokens:
            results = {}
            for way, deltas in (("from 0", False), ("deltas", True)):
                runs = []
                for r in range(args.repeat):
                    # A daemon and a prompt of their own: every chunk a new store.
                    daemon = start_daemon(chunk_tokens=args.chunk_tokens, l1_gb=0.5)
                    try:
                        salt = r * 7919 + step_tokens + (1 if deltas else 0)
                        tokens = [1 + (t * 31 + salt) % 997 for t in range(args.tokens)]
                        runs.append(prefill(model_dir, daemon.socket, tokens, step_tokens,
                                            args.layers, deltas))
                    finally:
                        daemon.close()
                m = {k: median_steps(runs, k) for k in
                     ("scheduler_us", "worker_us", "meta_bytes", "keys_us", "computed")}
                m["reduced"] = runs[-1]["reduced"]
                results[way] = m
                n = len(m["computed"])
                for steps in windows(n):
                    label = (f"{steps.start + 1}" if len(steps) == 1
                             else f"{steps.start + 1}-{steps.stop}")
                    print(f"| {step_tokens} | {way} | {label} of {n} "
                          f"| {m['computed'][steps.stop - 1]:,.0f} "
                          f"| {window_median(m, 'scheduler_us', steps):,.0f} "
                          f"| {window_median(m, 'worker_us', steps):,.0f} "
                          f"| {window_median(m, 'meta_bytes', steps):,.0f} "
                          f"| {window_median(m, 'keys_us', steps):,.0f} |", flush=True)
            summary.append((step_tokens, results))

        print("\nlate window / early window (1.0: flat), and deltas / from 0 in the late window:")
        for step_tokens, results in summary:
            old, new = results["from 0"], results["deltas"]
            _, early, _, late = windows(len(new["computed"]))

            def growth(m, key):
                return window_median(m, key, late) / window_median(m, key, early)

            def versus(key):
                return window_median(new, key, late) / window_median(old, key, late)

            floor = (window_median(new, "worker_us", late)
                     / max(window_median(new, "keys_us", late), 1e-3))
            print(f"  step {step_tokens}: from 0: scheduler x{growth(old, 'scheduler_us'):.2f}, "
                  f"worker x{growth(old, 'worker_us'):.2f}, metadata x{growth(old, 'meta_bytes'):.2f}"
                  f"; deltas: scheduler x{growth(new, 'scheduler_us'):.2f}, "
                  f"worker x{growth(new, 'worker_us'):.2f}, metadata x{growth(new, 'meta_bytes'):.2f}"
                  f"; deltas / from 0: scheduler {versus('scheduler_us'):.2f}, worker "
                  f"{versus('worker_us'):.2f}, metadata {versus('meta_bytes'):.2f}; deltas' worker "
                  f"time / the keys of its new tokens {floor:.1f}")
            print(f"  the connector's own stats (deltas, one prompt): {new['reduced']}")


if __name__ == "__main__":
    main()
