"""Time to first token in a real vLLM engine on a GPU: recompute, vLLM's GPU
prefix cache, vLLM's native CPU offloading and kvstash, one engine kind per
run (each owns the GPU while it runs).

    python bench/vllm_ttft.py --engine plain|native|kvstash|kvstash-layerwise|kvstash-multipath
                                       |kvstash-multipath-layerwise
        [--name NAME] [--kvstashd-gpus 0,1] [--lengths ...]
    python bench/vllm_ttft.py --table OUT_DIR     # the runs side by side

Every figure is one request alone, one output token, the median of
--prompts prompts per length (--prompts-per-length overrides it for some
lengths: 8 at 32,769 tokens by default, whose p99 is shown too), in ms:
- cold: a prompt never seen (recompute; with native or kvstash, what storing
  it adds);
- gpu_hit (plain): the same prompt again, from vLLM's GPU prefix cache;
- offload_hit (native, kvstash*): the same prompt again after vLLM's GPU
  prefix cache was emptied, so the KV comes back from the offload tier.
With kvstash, each prompt's hit is measured once per variant (--variants:
name -> connector settings, kv_connector_extra_config keys), switched in
the one engine between requests (KvstashConnector.apply_settings; vLLM runs
in this process), and the connector's timeline (its `timeline_file`
setting) splits each hit: the median time from the request's arrival to
its lookup, allocation, load issued, bytes in place, load reported (worker,
then scheduler), the step that computes it, and the first token.
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
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

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
    issue until its bytes are known in place) in this process: with one
    in-process worker (tensor parallel 1, VLLM_ENABLE_V1_MULTIPROCESSING=0)
    the bench reads them to split a hit's TTFT into the load and what the
    engine adds around it."""

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


# What a kvstash engine compares by default, each hit of each prompt once
# per variant: the connector's defaults (a load known in place from its
# board slot, reported in the step that sees it, a step without a forward
# pass waiting up to 20 ms for loads about to land), the connector as it was
# (the CPU reply ends a load, reported a step after it is seen), the reply
# with early reports, the defaults without the wait, and loads in the step
# on the stream (one wait before the forward pass: CUDA graphs stay).
DEFAULT_VARIANTS: Dict[str, Dict[str, Any]] = {
    "default": {},
    "reply-late": {"board_completion": False, "early_reports": False, "finish_wait_us": 0},
    "reply-early": {"board_completion": False, "early_reports": True, "finish_wait_us": 0},
    "no-wait": {"finish_wait_us": 0},
    "in-step": {"async_loads": False},
}

# A hit's stamps (the connector's timeline.py), in the order a load between
# steps meets them, and the bench's own arrival and first token.
PHASES = ("lookup", "alloc", "load_issued", "load_done", "load_reported", "recv_reported",
          "scheduled", "store_issued", "first_token")


class Connectors:
    """The scheduler's and the worker's KvstashConnector of an engine in
    this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, tensor parallel 1)."""

    def __init__(self, llm: Any) -> None:
        from vllm.distributed.kv_transfer import get_kv_transfer_group
        self.worker = get_kv_transfer_group()
        core = getattr(llm.llm_engine.engine_core, "engine_core", None)
        self.scheduler = getattr(getattr(core, "scheduler", None), "connector", None)
        if self.scheduler is None or not hasattr(self.scheduler, "apply_settings"):
            raise RuntimeError("kvstash variants need the engine in this process: set "
                               "VLLM_ENABLE_V1_MULTIPROCESSING=0")
        self.base = dict(dataclasses.asdict(self.worker.settings))

    def use(self, changes: Dict[str, Any]) -> None:
        settings = {k: v for k, v in self.base.items() if k in VARIANT_KEYS}
        settings.update(changes)
        self.worker.apply_settings(**settings)
        self.scheduler.apply_settings(**settings)


VARIANT_KEYS = ("async_loads", "layerwise_loads", "board_completion", "early_reports",
                "finish_wait_us", "lease_ms", "timeout_ms")


class Timelines:
    """Reads the stamps the connector appends to its timeline file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def take(self) -> List[Dict[str, Any]]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        whole = data[:data.rfind(b"\n") + 1]  # a line being written waits
        self.offset += len(whole)
        return [json.loads(line) for line in whole.splitlines() if line]


def timed(llm: Any, prompt: List[int],
          timelines: Optional[Timelines]) -> Tuple[float, Dict[str, float]]:
    """TTFT of one request alone, and each of its stamps in ms after its arrival."""
    if timelines is not None:
        timelines.take()  # what came before
    sent = time.monotonic_ns()
    engine.generate(llm, [prompt], 1)
    first = time.monotonic_ns()
    offsets: Dict[str, float] = {"first_token": (first - sent) / 1e6}
    if timelines is not None:
        for event in timelines.take():
            if sent <= event["ns"] <= first and event["event"] not in offsets:
                offsets[event["event"]] = (event["ns"] - sent) / 1e6
    return offsets["first_token"], offsets


def p99(values: List[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def summary(times: List[float], stamps: List[Dict[str, float]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"median_ms": engine.median(times), "p99_ms": p99(times),
                           "samples": len(times)}
    phases = {}
    for name in PHASES:
        seen = [s[name] for s in stamps if name in s]
        if seen:
            phases[name] = round(engine.median(seen), 3)
    out["timeline_ms"] = phases
    return out


def per_length(llm: Any, kind: str, length: int, count: int, seed: int,
               daemon: Any, loads: Optional[LoadTimes] = None,
               variants: Optional[Dict[str, Dict[str, Any]]] = None,
               connectors: Optional[Connectors] = None,
               timelines: Optional[Timelines] = None) -> Dict[str, Any]:
    """Each prompt cold, then again as a hit (once per variant), before the
    next prompt: the working set is one prompt, whatever the offload tier's size."""
    batch = engine.prompts(count, length, seed)
    row: Dict[str, Any] = {"tokens": length, "prompts": count}
    chunks = (length - 1) // 256
    variants = variants or {"default": {}}
    cold, cold_stamps = [], []
    hits: Dict[str, List[float]] = {v: [] for v in variants}
    stamps: Dict[str, List[Dict[str, float]]] = {v: [] for v in variants}
    load_ms: Dict[str, List[float]] = {v: [] for v in variants}
    loaded = 0
    for p in batch:
        if daemon is not None:
            stored_before = (daemon.counter("store_chunks_stored")
                             + daemon.counter("store_chunks_already_present"))
        if connectors is not None:
            connectors.use(variants[next(iter(variants))])
        ms, st = timed(llm, p, timelines)
        cold.append(ms)
        cold_stamps.append(st)
        if kind == "plain":
            hits["default"].append(engine.ttft_ms(llm, p))
            continue
        if daemon is not None:
            wait_stored(daemon, stored_before + chunks)
        else:
            time.sleep(0.5)  # native offloading stores asynchronously
        for name, changes in variants.items():
            if connectors is not None:
                connectors.use(changes)
            if daemon is not None:
                before = daemon.counter("retrieve_chunks")
            engine.reset_gpu_prefix_cache(llm)
            if loads is not None:
                loads.take()
            ms, st = timed(llm, p, timelines)
            hits[name].append(ms)
            stamps[name].append(st)
            if loads is not None:
                load_ms[name].append(loads.take())
            if daemon is not None:
                loaded += daemon.counter("retrieve_chunks") - before
    if connectors is not None:
        connectors.use(variants[next(iter(variants))])
    row["cold_ms"] = engine.median(cold)
    row["cold"] = summary(cold, cold_stamps)
    first = next(iter(variants))
    row["gpu_hit_ms" if kind == "plain" else "offload_hit_ms"] = engine.median(hits[first])
    row["hit_p99_ms"] = p99(hits[first])
    if daemon is not None:
        row["variants"] = {}
        for name in variants:
            row["variants"][name] = summary(hits[name], stamps[name])
            if load_ms[name]:
                row["variants"][name]["load_ms"] = engine.median(load_ms[name])
    if daemon is not None:
        row["loaded_chunks"] = loaded
        row["expected_chunks"] = count * chunks * len(variants)
    if load_ms[first]:
        row["load_ms"] = engine.median(load_ms[first])
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


def variant_table(runs: Dict[str, Any], row_of: Any) -> None:
    """Each kvstash variant's hits, and where their time goes: the median
    time (ms) from the request's arrival to each stamp of its timeline."""
    phase_names = ("lookup", "alloc", "load_issued", "load_done", "load_reported",
                   "recv_reported", "scheduled", "first_token")

    def cells(summary: Dict[str, Any], names: Any) -> str:
        t = summary.get("timeline_ms", {})
        return "".join(f" {t[n]:.2f} |" if n in t else " - |" for n in names)

    kinds = [k for k, r in runs.items() if any("variants" in row for row in r.get("rows", []))]
    if kinds:
        print()
        print("kvstash variants, one engine each (ms): hit median and p99, the target (GPU "
              "prefix hit + 1.1 x raw load + 1 ms), and the median time from the request's "
              "arrival to each stamp of its timeline")
        print()
        print("| engine | prompt tokens | variant | hit | p99 | target | / native | "
              + " | ".join(phase_names) + " |")
        print("| --- | ---: | --- |" + " ---: |" * (4 + len(phase_names)))
        for kind in kinds:
            for r in runs[kind]["rows"]:
                plain, native = row_of("plain", r["tokens"]), row_of("native", r["tokens"])
                target = (f"{plain['gpu_hit_ms'] + 1.1 * r['raw_load_ms'] + 1:.1f}"
                          if plain else "-")
                for name, v in r.get("variants", {}).items():
                    ratio = (f"{v['median_ms'] / native['offload_hit_ms']:.2f}"
                             if native else "-")
                    print(f"| {kind} | {r['tokens']:,} | {name} | {v['median_ms']:.1f} | "
                          f"{v['p99_ms']:.1f} | {target} | {ratio} |"
                          + cells(v, phase_names))
    print()
    print("Cold pass (a prompt never seen), ms: median, p99, over recompute, and the median "
          "time from arrival to the step computing it, its first store and its first token")
    print()
    print("| engine | prompt tokens | cold | p99 | vs recompute | scheduled | store_issued "
          "| first_token |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind, run in runs.items():
        for r in run.get("rows", []):
            c = r.get("cold")
            if not c:
                continue
            plain = row_of("plain", r["tokens"])
            over = f"{c['median_ms'] / plain['cold_ms'] - 1:+.1%}" if plain else "-"
            print(f"| {kind} | {r['tokens']:,} | {c['median_ms']:.1f} | {c['p99_ms']:.1f} | "
                  f"{over} |" + cells(c, ("scheduled", "store_issued", "first_token")))


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
            # With 8 prompts or more (32k by default), the p99 beside the median.
            if key not in r:
                return "-"
            tail = (f" (p99 {r['hit_p99_ms']:.1f})"
                    if key.endswith("hit_ms") and r.get("prompts", 0) >= 8 and "hit_p99_ms" in r
                    else "")
            return f"{r[key]:.1f}{tail}"

        ratio = (f"{kv['offload_hit_ms'] / native['offload_hit_ms']:.2f}"
                 if kv and native else "-")
        cold_n = f"{native['cold_ms'] / plain['cold_ms'] - 1:+.1%}" if native else "-"
        cold_k = f"{kv['cold_ms'] / plain['cold_ms'] - 1:+.1%}" if kv else "-"
        print(f"| {t:,} | {plain['kv_mib']:.0f} MiB | {plain['cold_ms']:.1f} | "
              f"{ms(plain, 'gpu_hit_ms')} | {ms(native, 'offload_hit_ms')} | "
              f"{ms(kv, 'offload_hit_ms')} | {ms(layerwise, 'offload_hit_ms')} | {target:.1f} | "
              f"{ratio} | {cold_n} | {cold_k} |"
              + "".join(multipath_cells(row_of(k, t), native) for k in multipath)
              # Multi-path: GPU prefix hit + 0.6 x one link's raw load.
              + (f" {plain['gpu_hit_ms'] + 0.6 * plain['raw_load_ms']:.1f} |" if multipath else ""))
    split = [k for k in runs if any("load_ms" in r for r in runs[k].get("rows", []))]
    if split:
        print()
        print("Where a kvstash hit's time goes (ms): the connector's load (issue until in place), "
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
    variant_table(runs, row_of)
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
    parser.add_argument("--lengths", default="1025,4097,16385,32769",
                        help="prompt lengths, comma- or space-separated")
    parser.add_argument("--prompts", type=int, default=5, help="prompts per length")
    parser.add_argument("--prompts-per-length", default="32769:8",
                        help="LENGTH:COUNT,... overriding --prompts for those lengths")
    parser.add_argument("--variants", default=None,
                        help="kvstash engine: JSON {name: {setting: value}} of connector "
                             "settings compared in the one engine (default: DEFAULT_VARIANTS; "
                             "'{}' for the engine's settings alone)")
    parser.add_argument("--connector-extra", default="{}",
                        help="JSON of kv_connector_extra_config keys for kvstash engines")
    parser.add_argument("--loaded-prompts", type=int, default=8,
                        help="requests of the loaded case (0: no loaded case)")
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--loaded-length", type=int, default=8192)
    parser.add_argument("--kvstashd-args", default="", help="extra kvstashd options")
    parser.add_argument("--out", default="/tmp/kvstash-vllm-ttft")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lengths = [int(x) for x in args.lengths.replace(",", " ").split()]
    per_length_prompts = {int(k): int(v) for k, v in
                          (item.split(":") for item in args.prompts_per_length.split(",") if item)}
    connector_extra = json.loads(args.connector_extra)
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
        variants: Dict[str, Dict[str, Any]] = {"default": {}}
        timeline_path = out / f"timeline-{name}.jsonl"
        if kvstash_engine:
            if timeline_path.exists():
                timeline_path.unlink()
            connector_extra = {"timeline_file": str(timeline_path), **connector_extra}
            if not args.engine.endswith("layerwise"):
                # One range per load: loads in the step keep full CUDA graphs.
                connector_extra.setdefault("layerwise_loads", False)
                variants = json.loads(args.variants) if args.variants else DEFAULT_VARIANTS
                variants = variants or {"default": {}}
        result["variants"] = variants
        result["connector_extra"] = connector_extra if kvstash_engine else None
        start = time.perf_counter()
        llm = engine.make_llm(
            model, kvstash_socket=daemon.socket if daemon else None,
            # kvstash: loads between steps (the default), or in the step, layer-wise.
            async_loads=not args.engine.endswith("layerwise"),
            native_offload_gb=64 if args.engine == "native" else 0,
            max_model_len=max(lengths) + 64,
            connector_extra=connector_extra if kvstash_engine else None)
        result["engine_start_s"] = time.perf_counter() - start
        if daemon is not None:
            result["l1_capacity_bytes"] = int(daemon.stats()["gauges"]["l1_capacity_bytes"])
        engine.generate(llm, engine.prompts(2, 600, seed=99), 4)  # warm-up
        rows: List[Dict[str, Any]] = []
        loads = LoadTimes() if kvstash_engine else None
        connectors = Connectors(llm) if kvstash_engine and len(variants) > 1 else None
        timelines = Timelines(timeline_path) if kvstash_engine else None
        per_token = kv_bytes_per_token(args.model)
        for n, length in enumerate(lengths):
            row = per_length(llm, args.engine, length, per_length_prompts.get(length, args.prompts),
                             seed=100 + n, daemon=daemon, loads=loads, variants=variants,
                             connectors=connectors, timelines=timelines)
            kv = ((length - 1) // 256 * 256) * per_token
            row["kv_mib"] = kv / 2**20
            row["raw_load_ms"] = kv / (result["raw_h2d_gbps"] * 1e9) * 1000
            rows.append(row)
            print(json.dumps(row), flush=True)
        result["rows"] = rows
        if args.loaded_prompts > 0:
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
