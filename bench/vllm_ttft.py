"""Time to first token in a real vLLM engine on a GPU: recompute, vLLM's GPU
prefix cache, vLLM's native CPU offloading and kvstash, one engine kind per
run (each owns the GPU while it runs).

    python bench/vllm_ttft.py --engine plain|native|kvstash|kvstash-layerwise|kvstash-multipath
                                       |kvstash-multipath-layerwise
        [--name NAME] [--kvstashd-gpus 0,1] [--lengths ...]
    python bench/vllm_ttft.py --table OUT_DIR     # the runs side by side

Every figure is one request alone, one output token, the median of
--prompts prompts per length, in ms:
- cold: a prompt never seen (recompute; with native or kvstash, what storing
  it adds);
- gpu_hit (plain): the same prompt again, from vLLM's GPU prefix cache;
- offload_hit (native, kvstash*): the same prompt again after vLLM's GPU
  prefix cache was emptied, so the KV comes back from the offload tier.
kvstash-multipath is kvstash with `kvstashd --multipath on` serving the GPUs
of --kvstashd-gpus (physical ids; the engine runs on the first), so a load
also comes through the other GPUs' PCIe links and NVLink;
kvstash-multipath-layerwise loads that way in the step, layer by layer.
It also measures the raw pinned host-to-device copy rate of this GPU, in the
same process, and prints each hit's load time against it. The loaded case
sends --loaded-prompts prompts at --rate per second, each sharing its prefix
with a prompt seen before, and reports TTFT and throughput. Results go to
--out as JSON; exits non-zero on any error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "vllm_gpu"))
import engine  # noqa: E402


def raw_h2d_gbps(nbytes: int = 1 << 30) -> float:
    """Pinned host -> this GPU, one large copy, best of 5."""
    import torch

    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    best = 0.0
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        best = max(best, nbytes / (time.perf_counter() - start) / 1e9)
    del host, dev
    return best


def kv_bytes_per_token(model: str) -> int:
    cfg = engine.MODELS[model]
    if "kv_lora_rank" in cfg:
        return cfg["num_hidden_layers"] * (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) * 2
    head = cfg["hidden_size"] // cfg["num_attention_heads"]
    return cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * head * 2


def wait_stored(daemon: Any, chunks: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (daemon.counter("store_chunks_stored")
                + daemon.counter("store_chunks_already_present")) >= chunks:
            return
        time.sleep(0.02)
    raise RuntimeError(f"kvstashd did not store {chunks} chunks in {timeout} s")


class LoadTimes:
    """The connector's own load latencies (its `load_ms` figure: a load's
    issue to its reply) in this process: with one in-process worker (tensor
    parallel 1, VLLM_ENABLE_V1_MULTIPROCESSING=0) the bench reads them to
    split a hit's TTFT into the load and what the engine adds around it."""

    def __init__(self) -> None:
        self.samples: List[float] = []
        try:
            from vllm.distributed.kv_transfer import get_kv_transfer_group
            recorder = get_kv_transfer_group().worker_side.recorder
        except Exception:  # no in-process worker connector: no split
            self.available = False
            return
        self.available = True
        observe = recorder.observe

        def record(name: str, ms: float) -> None:
            if name == "load_ms":
                self.samples.append(ms)
            observe(name, ms)

        recorder.observe = record

    def take(self) -> float:
        """The summed load time of the loads since the last take (every KV
        cache group's, one here), in ms."""
        total, self.samples = sum(self.samples), []
        return total


def per_length(llm: Any, kind: str, length: int, count: int, seed: int,
               daemon: Any, loads: Optional[LoadTimes] = None) -> Dict[str, Any]:
    """Each prompt cold, then again as a hit, before the next prompt: the
    working set is one prompt, whatever the offload tier's size."""
    batch = engine.prompts(count, length, seed)
    row: Dict[str, Any] = {"tokens": length}
    chunks = (length - 1) // 256
    cold, hits, load_ms = [], [], []
    loaded = 0
    for p in batch:
        if daemon is not None:
            stored_before = (daemon.counter("store_chunks_stored")
                             + daemon.counter("store_chunks_already_present"))
        cold.append(engine.ttft_ms(llm, p))
        if kind == "plain":
            hits.append(engine.ttft_ms(llm, p))
            continue
        if daemon is not None:
            wait_stored(daemon, stored_before + chunks)
            before = daemon.counter("retrieve_chunks")
        else:
            time.sleep(0.5)  # native offloading stores asynchronously
        engine.reset_gpu_prefix_cache(llm)
        if loads is not None:
            loads.take()
        hits.append(engine.ttft_ms(llm, p))
        if loads is not None:
            load_ms.append(loads.take())
        if daemon is not None:
            loaded += daemon.counter("retrieve_chunks") - before
    row["cold_ms"] = engine.median(cold)
    row["gpu_hit_ms" if kind == "plain" else "offload_hit_ms"] = engine.median(hits)
    if daemon is not None:
        row["loaded_chunks"] = loaded
        row["expected_chunks"] = count * chunks
    if load_ms:
        row["load_ms"] = engine.median(load_ms)
    return row


def loaded_case(llm: Any, kind: str, count: int, rate: float, length: int) -> Dict[str, Any]:
    """`count` requests arriving at `rate` per second; each shares a prefix
    (all but its last 256 tokens) with a prompt served before."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    bases = engine.prompts(count, length, seed=900)
    tails = engine.prompts(count, 256, seed=901)
    for p in bases:
        engine.generate(llm, [p], 1)
    time.sleep(1.0)
    if kind != "plain":
        engine.reset_gpu_prefix_cache(llm)
    prompts = [b[: length - 256] + t for b, t in zip(bases, tails)]
    params = SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True, detokenize=False)
    core = llm.llm_engine
    sent: Dict[str, float] = {}
    first: Dict[str, float] = {}
    done: Dict[str, float] = {}
    start = time.perf_counter()
    i = 0
    while len(done) < count:
        now = time.perf_counter()
        while i < count and now - start >= i / rate:
            rid = f"loaded-{i}"
            core.add_request(rid, TokensPrompt(prompt_token_ids=prompts[i]), params)
            sent[rid] = time.perf_counter()
            i += 1
        if not core.has_unfinished_requests():
            time.sleep(0.0005)
            continue
        for out in core.step():
            t = time.perf_counter()
            if out.outputs and out.outputs[0].token_ids and out.request_id not in first:
                first[out.request_id] = t
            if out.finished:
                done[out.request_id] = t
    wall = time.perf_counter() - start
    ttfts = sorted((first[r] - sent[r]) * 1000 for r in sent)
    return {"requests": count, "rate_per_s": rate, "prompt_tokens": length,
            "ttft_median_ms": engine.median(ttfts), "ttft_p90_ms": ttfts[int(0.9 * (count - 1))],
            "wall_s": wall, "throughput_req_per_s": count / wall,
            "throughput_tokens_per_s": count * (length + 32) / wall}


def describe_paths(daemon: Any) -> Any:
    """What kvstashd says of its GPUs and multi-path retrieves (describe)."""
    import kvstash
    with kvstash.Client(socket=daemon.socket, timeout_ms=5000, name="vllm-ttft-describe") as c:
        info = c.describe()
    backend = info.get("backend", {})
    return {"devices": info.get("server", {}).get("devices"),
            "transfer_mode": backend.get("transfer_mode"), "multipath": backend.get("multipath")}


def table(directory: Path) -> int:
    """The runs in `directory` side by side (markdown); non-zero if any failed."""
    runs = {}
    for path in sorted(directory.glob("ttft-*.json")):
        runs[path.stem[len("ttft-"):]] = json.loads(path.read_text())
    multipath = sorted(k for k in runs if k.startswith("kvstash-multipath"))
    failed = [k for k, r in runs.items() if "error" in r]
    for kind, run in runs.items():
        print(f"{kind}: {run.get('gpu')} vLLM {run.get('vllm')} torch {run.get('torch')}, raw "
              f"pinned H2D {run.get('raw_h2d_gbps', 0):.1f} GB/s, engine start "
              f"{run.get('engine_start_s', 0):.0f} s{', ERROR ' + run['error'] if 'error' in run else ''}")
    if failed or "plain" not in runs:
        return 1

    def multipath_cells(row: Dict[str, Any], native: Dict[str, Any]) -> str:
        if "offload_hit_ms" not in row:
            return " - | - |"
        ratio = f"{row['offload_hit_ms'] / native['offload_hit_ms']:.2f}" if native else "-"
        return f" {row['offload_hit_ms']:.1f} | {ratio} |"

    def row_of(kind: str, tokens: int) -> Dict[str, Any]:
        return next((r for r in runs.get(kind, {}).get("rows", []) if r["tokens"] == tokens), {})

    print()
    print("| prompt tokens | KV loaded | recompute | GPU prefix hit | native offload hit "
          "| kvstash hit | kvstash hit, layer-wise in the step | kvstash target | kvstash / native "
          "| cold pass: native | cold pass: kvstash |"
          + "".join(f" {k} hit | {k} / native |" for k in multipath)
          + (" multi-path target |" if multipath else ""))
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
          + " ---: | ---: |" * len(multipath) + (" ---: |" if multipath else ""))
    for plain in runs["plain"]["rows"]:
        t = plain["tokens"]
        native, kv = row_of("native", t), row_of("kvstash", t)
        layerwise = row_of("kvstash-layerwise", t)
        target = plain["gpu_hit_ms"] + 1.1 * (kv or plain)["raw_load_ms"]

        def ms(r: Dict[str, Any], key: str) -> str:
            return f"{r[key]:.1f}" if key in r else "-"

        ratio = (f"{kv['offload_hit_ms'] / native['offload_hit_ms']:.2f}"
                 if kv and native else "-")
        cold_n = f"{native['cold_ms'] / plain['cold_ms'] - 1:+.1%}" if native else "-"
        cold_k = f"{kv['cold_ms'] / plain['cold_ms'] - 1:+.1%}" if kv else "-"
        print(f"| {t:,} | {plain['kv_mib']:.0f} MiB | {plain['cold_ms']:.1f} | "
              f"{plain['gpu_hit_ms']:.1f} | {ms(native, 'offload_hit_ms')} | "
              f"{ms(kv, 'offload_hit_ms')} | {ms(layerwise, 'offload_hit_ms')} | {target:.1f} | "
              f"{ratio} | {cold_n} | {cold_k} |"
              + "".join(multipath_cells(row_of(k, t), native) for k in multipath)
              # Multi-path: GPU prefix hit + 0.6 x one link's raw load.
              + (f" {plain['gpu_hit_ms'] + 0.6 * plain['raw_load_ms']:.1f} |" if multipath else ""))
    split = [k for k in runs if any("load_ms" in r for r in runs[k].get("rows", []))]
    if split:
        print()
        print("Where a kvstash hit's time goes (ms): the connector's load, issue to reply, "
              "and the rest over vLLM's GPU prefix hit")
        print()
        print("| engine | prompt tokens | hit | GPU prefix hit | load | raw load | load / raw "
              "| hit - GPU hit - load |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for kind in split:
            for r in runs[kind]["rows"]:
                if "load_ms" not in r:
                    continue
                gpu = row_of("plain", r["tokens"]).get("gpu_hit_ms", float("nan"))
                print(f"| {kind} | {r['tokens']:,} | {r['offload_hit_ms']:.1f} | {gpu:.1f} | "
                      f"{r['load_ms']:.1f} | {r['raw_load_ms']:.1f} | "
                      f"{r['load_ms'] / r['raw_load_ms']:.2f} | "
                      f"{r['offload_hit_ms'] - gpu - r['load_ms']:.1f} |")
    print()
    print("| loaded case | requests | rate /s | TTFT median | TTFT p90 | throughput (req/s) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for kind, run in runs.items():
        ld = run.get("loaded")
        if ld:
            print(f"| {kind} | {ld['requests']} | {ld['rate_per_s']:g} | {ld['ttft_median_ms']:.1f} | "
                  f"{ld['ttft_p90_ms']:.1f} | {ld['throughput_req_per_s']:.2f} |")
    return 0


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        return table(Path(sys.argv[2]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", required=True,
                        choices=["plain", "native", "kvstash", "kvstash-layerwise",
                                 "kvstash-multipath", "kvstash-multipath-layerwise"])
    parser.add_argument("--name", help="the run's name in --out (default: the engine)")
    parser.add_argument("--kvstashd-gpus",
                        help="CUDA_VISIBLE_DEVICES of kvstashd (default: the engine's)")
    parser.add_argument("--model", default="llama3-8b", choices=sorted(engine.MODELS))
    parser.add_argument("--lengths", default="1025,4097,8193,16385,32769")
    parser.add_argument("--prompts", type=int, default=5)
    parser.add_argument("--loaded-prompts", type=int, default=8)
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--loaded-length", type=int, default=8192)
    parser.add_argument("--kvstashd-args", default="", help="extra kvstashd options")
    parser.add_argument("--out", default="/tmp/kvstash-vllm-ttft")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lengths = [int(x) for x in args.lengths.split(",") if x]
    model = engine.write_model(args.model, out / "models")
    daemon = None
    name = args.name or args.engine
    result: Dict[str, Any] = {"engine": args.engine, "model": args.model,
                              "kvstashd_gpus": args.kvstashd_gpus}
    try:
        import torch
        import vllm
        result.update(gpu=engine.gpu_name(), vllm=vllm.__version__, torch=torch.__version__)
        result["raw_h2d_gbps"] = raw_h2d_gbps()
        kvstash_engine = args.engine.startswith("kvstash")
        if kvstash_engine:
            extra = args.kvstashd_args.split()
            if args.engine.startswith("kvstash-multipath"):
                extra += ["--multipath", "on"]
            daemon = engine.Kvstashd(out, name=f"kvstashd-{name}", l1_gb=60, extra=extra,
                                     gpus=args.kvstashd_gpus)
        start = time.perf_counter()
        llm = engine.make_llm(
            model, kvstash_socket=daemon.socket if daemon else None,
            # kvstash: loads between steps (the default), or in the step, layer-wise.
            async_loads=not args.engine.endswith("layerwise"),
            native_offload_gb=64 if args.engine == "native" else 0,
            max_model_len=max(lengths) + 64)
        result["engine_start_s"] = time.perf_counter() - start
        if daemon is not None:
            result["l1_capacity_bytes"] = int(daemon.stats()["gauges"]["l1_capacity_bytes"])
        engine.generate(llm, engine.prompts(2, 600, seed=99), 4)  # warm-up
        rows: List[Dict[str, Any]] = []
        loads = LoadTimes() if kvstash_engine else None
        per_token = kv_bytes_per_token(args.model)
        for n, length in enumerate(lengths):
            row = per_length(llm, args.engine, length, args.prompts, seed=100 + n, daemon=daemon,
                             loads=loads)
            kv = ((length - 1) // 256 * 256) * per_token
            row["kv_mib"] = kv / 2**20
            row["raw_load_ms"] = kv / (result["raw_h2d_gbps"] * 1e9) * 1000
            rows.append(row)
            print(json.dumps(row), flush=True)
        result["rows"] = rows
        result["loaded"] = loaded_case(llm, args.engine, args.loaded_prompts, args.rate,
                                       args.loaded_length)
        print(json.dumps(result["loaded"]), flush=True)
        if daemon is not None:
            for row in rows:
                if row["loaded_chunks"] < row["expected_chunks"]:
                    raise RuntimeError(f"{row['tokens']} tokens: kvstash loaded "
                                       f"{row['loaded_chunks']} of {row['expected_chunks']} chunks")
    except Exception as error:
        import traceback
        traceback.print_exc()
        result["error"] = repr(error)
    finally:
        if daemon is not None:
            try:
                result["kvstashd_describe_paths"] = describe_paths(daemon)
            except Exception as error:  # the run's figures stand without it
                result["kvstashd_describe_paths"] = repr(error)
            daemon.stop()
        (out / f"ttft-{name}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}), flush=True)
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
