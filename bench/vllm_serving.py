"""Serving with many requests in flight in a real vLLM engine on a GPU:
recompute, vLLM's native CPU offloading and kvstash, one engine per run,
requests arriving by a Poisson process and sharing long prefixes.

    python bench/vllm_serving.py --mode recompute|native|kvstash|kvstash-layerwise
                                        |kvstash-multipath [options]
    python bench/vllm_serving.py --mode kvstash --dry-run   # the workload, no GPU
    python bench/vllm_serving.py --table OUT_DIR            # the runs side by side

Workload: a pool of --prefixes shared prefixes (--prefix-min to --prefix-max
tokens, whole 256-token chunks), each request one of them (uniformly) and
--suffix unique tokens, --output-tokens greedy tokens, arriving at --rate
per second for --duration seconds with at most --max-concurrency in flight
(an arrival past it waits: its lag is reported). Before the measured part
every prefix is served once (warm-up), so a request's prefix was seen
before: its KV is in vLLM's GPU prefix cache or the offload tier, or gone.
vLLM's GPU KV cache is capped at --gpu-kv-gb (num_gpu_blocks_override),
below the working set, so the offload tier must hold it; native offloading
and kvstash get the same host memory, --offload-gb (kv_offloading_size,
kvstashd --l1-gb). kvstash-multipath runs kvstashd with --multipath on over
--kvstashd-gpus (physical ids; the engine runs on the first visible GPU).

Reported per run (JSON in --out, one line per run): TTFT p50/p90/p99 (from
the request's hand-over to the engine), ITL p50/p99 (per token), requests/s
and output tokens/s over the measured part, the share of prompt tokens
vLLM did not compute (GPU prefix cache or offload: RequestOutput's
num_cached_tokens) and, with kvstash, the tokens kvstashd loaded and its
lease counters. Exits non-zero on any error: a failed or short request, an
engine error, a lease still held once the engine is idle or one that
expired instead of being released.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "vllm_gpu"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine  # noqa: E402
from vllm_ttft import kv_bytes_per_token  # noqa: E402

MODES = ("recompute", "native", "kvstash", "kvstash-layerwise", "kvstash-multipath")
CHUNK_TOKENS = 256   # kvstashd's chunk (engine.Kvstashd's default)
BLOCK_TOKENS = 16    # vLLM's default block size
VOCAB_LOW, VOCAB_HIGH = 1000, 100000


# ---- the workload (no GPU, no vLLM) ----


@dataclass
class Request:
    arrival_s: float      # from the start of the measured part
    prefix: int           # index into the prefix pool
    tokens: List[int] = field(repr=False)
    prefix_tokens: int = 0


@dataclass
class Workload:
    prefixes: List[List[int]]
    warmup: List[Request]
    requests: List[Request]

    def working_set_tokens(self) -> int:
        return sum(len(p) for p in self.prefixes)


def build_workload(args: argparse.Namespace) -> Workload:
    """Prefixes, the warm-up (each prefix once) and the Poisson arrivals;
    the same for every mode with the same arguments."""
    rng = random.Random(args.seed)
    steps = (args.prefix_max - args.prefix_min) // CHUNK_TOKENS
    prefixes = []
    for _ in range(args.prefixes):
        length = args.prefix_min + CHUNK_TOKENS * rng.randint(0, steps)
        prefixes.append([rng.randrange(VOCAB_LOW, VOCAB_HIGH) for _ in range(length)])

    def request(arrival: float, index: int) -> Request:
        suffix = [rng.randrange(VOCAB_LOW, VOCAB_HIGH) for _ in range(args.suffix)]
        return Request(arrival, index, prefixes[index] + suffix, len(prefixes[index]))

    warmup = [request(0.0, i) for i in range(args.prefixes)]
    requests = []
    t = rng.expovariate(args.rate)
    while t < args.duration:
        requests.append(request(t, rng.randrange(args.prefixes)))
        t += rng.expovariate(args.rate)
    return Workload(prefixes, warmup, requests)


def check_args(args: argparse.Namespace) -> List[str]:
    """What is wrong with the arguments, each naming the value and the limit."""
    errors = []
    for name, low in (("rate", 1e-3), ("duration", 1), ("prefixes", 1), ("suffix", 1),
                      ("output_tokens", 2), ("max_concurrency", 1), ("gpu_kv_gb", 0.5),
                      ("offload_gb", 1), ("prefix_min", CHUNK_TOKENS)):
        value = getattr(args, name)
        if value < low:
            errors.append(f"--{name.replace('_', '-')} is {value}, at least {low}")
    for name in ("prefix_min", "prefix_max"):
        if getattr(args, name) % CHUNK_TOKENS:
            errors.append(f"--{name.replace('_', '-')} is {getattr(args, name)}, not a multiple "
                          f"of kvstashd's chunk ({CHUNK_TOKENS} tokens)")
    if args.prefix_max < args.prefix_min:
        errors.append(f"--prefix-max {args.prefix_max} is below --prefix-min {args.prefix_min}")
    if args.model not in engine.MODELS:
        errors.append(f"--model {args.model} is none of {sorted(engine.MODELS)}")
        return errors
    if errors:
        return errors
    per_token = kv_bytes_per_token(args.model)
    working_set = build_workload(args).working_set_tokens() * per_token / 2**30
    longest = (args.prefix_max + args.suffix + args.output_tokens) * per_token / 2**30
    if working_set <= args.gpu_kv_gb:
        errors.append(f"the prefixes' KV, {working_set:.1f} GiB, fits in --gpu-kv-gb "
                      f"{args.gpu_kv_gb}: the offload tier would not be needed (more --prefixes "
                      "or a smaller --gpu-kv-gb)")
    if working_set > 0.9 * args.offload_gb:
        errors.append(f"the prefixes' KV, {working_set:.1f} GiB, is over 90% of "
                      f"--offload-gb {args.offload_gb}: the offload tier could not hold it")
    if longest * 2 > args.gpu_kv_gb:
        errors.append(f"--gpu-kv-gb {args.gpu_kv_gb} holds fewer than two of the longest "
                      f"requests ({longest:.2f} GiB each)")
    return errors


def gpu_blocks(args: argparse.Namespace) -> int:
    """vLLM's num_gpu_blocks_override for --gpu-kv-gb."""
    return int(args.gpu_kv_gb * 2**30 // (kv_bytes_per_token(args.model) * BLOCK_TOKENS))


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank), NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


# ---- one request's timeline, and the run's figures ----


@dataclass
class Outcome:
    prompt_tokens: int
    prefix_tokens: int
    lag_s: float                 # sent this late after its arrival (concurrency cap)
    sent: float = 0.0
    first: Optional[float] = None
    done: Optional[float] = None
    output_tokens: int = 0
    itl_ms: List[float] = field(default_factory=list)   # one per token after the first
    cached_tokens: Optional[int] = None
    error: Optional[str] = None
    dropped: bool = False        # still waiting for a slot when the arrivals ended


def summarize(outcomes: List[Outcome], output_tokens: int) -> Dict[str, Any]:
    """The figures of the measured part; `errors` lists what went wrong."""
    dropped = sum(o.dropped for o in outcomes)
    outcomes = [o for o in outcomes if not o.dropped]
    errors = [o.error for o in outcomes if o.error]
    short = [o for o in outcomes if not o.error and o.output_tokens != output_tokens]
    if short:
        errors.append(f"{len(short)} requests returned other than {output_tokens} tokens "
                      f"(e.g. {short[0].output_tokens})")
    ok = [o for o in outcomes if not o.error and o.first is not None and o.done is not None]
    out: Dict[str, Any] = {"requests": len(outcomes) + dropped, "completed": len(ok),
                           "dropped": dropped, "errors": errors}
    if not ok:
        return out
    ttft = [(o.first - o.sent) * 1000 for o in ok]
    itl = [x for o in ok for x in o.itl_ms]
    begin = min(o.sent for o in ok)
    wall = max(o.done for o in ok) - begin
    out.update(
        ttft_p50_ms=percentile(ttft, 50), ttft_p90_ms=percentile(ttft, 90),
        ttft_p99_ms=percentile(ttft, 99), itl_p50_ms=percentile(itl, 50),
        itl_p99_ms=percentile(itl, 99), wall_s=wall,
        requests_per_s=len(ok) / wall, output_tokens_per_s=sum(o.output_tokens for o in ok) / wall,
        lag_p90_ms=percentile([o.lag_s * 1000 for o in ok], 90),
        prompt_tokens=sum(o.prompt_tokens for o in ok),
        prefix_tokens=sum(o.prefix_tokens for o in ok))
    # The mean number in flight: the requests' summed time in the engine
    # over the wall time (Little's law).
    out["mean_in_flight"] = sum(o.done - o.sent for o in ok) / wall
    cached = [o.cached_tokens for o in ok if o.cached_tokens is not None]
    if len(cached) == len(ok):
        out["cached_tokens"] = sum(cached)
        out["cached_share_of_prompt"] = sum(cached) / out["prompt_tokens"]
        # Of what could come from a cache at all: the shared prefixes.
        out["prefix_hit_rate"] = sum(min(o.cached_tokens, o.prefix_tokens) for o in ok) / max(
            1, out["prefix_tokens"])
    return out


# ---- the engine (GPU) ----


def async_engine_args(kwargs: Dict[str, Any]) -> Any:
    """AsyncEngineArgs of the keywords engine.engine_kwargs gives LLM
    (which turns the config dicts into vLLM's config objects itself)."""
    from vllm.config import CompilationConfig, KVTransferConfig
    from vllm.engine.arg_utils import AsyncEngineArgs

    kwargs = dict(kwargs)
    if isinstance(kwargs.get("kv_transfer_config"), dict):
        kwargs["kv_transfer_config"] = KVTransferConfig(**kwargs["kv_transfer_config"])
    if isinstance(kwargs.get("compilation_config"), dict):
        kwargs["compilation_config"] = CompilationConfig(**kwargs["compilation_config"])
    return AsyncEngineArgs(**kwargs)


async def serve_one(llm: Any, request: Request, request_id: str, args: argparse.Namespace,
                    start: float, slots: asyncio.Semaphore, timed: bool) -> Outcome:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    params = SamplingParams(max_tokens=args.output_tokens, temperature=0.0, ignore_eos=True,
                            detokenize=False, output_kind=RequestOutputKind.DELTA)
    async with slots:
        sent = time.perf_counter()
        outcome = Outcome(len(request.tokens), request.prefix_tokens,
                          lag_s=max(0.0, sent - start - request.arrival_s), sent=sent)
        if timed and sent - start > args.duration:
            # An overloaded engine: the backlog is not served (the lag of
            # those sent says how far behind it was).
            outcome.dropped = True
            return outcome
        last = sent
        try:
            async for out in llm.generate(TokensPrompt(prompt_token_ids=request.tokens), params,
                                          request_id):
                now = time.perf_counter()
                new = len(out.outputs[0].token_ids) if out.outputs else 0
                if new:
                    if outcome.first is None:
                        outcome.first = now
                        new_after_first = new - 1
                    else:
                        new_after_first = new
                    if new_after_first:
                        outcome.itl_ms.extend([(now - last) * 1000 / new] * new_after_first)
                    outcome.output_tokens += new
                    last = now
                if getattr(out, "num_cached_tokens", None) is not None:
                    outcome.cached_tokens = out.num_cached_tokens
                if out.finished:
                    outcome.done = now
        except Exception as error:  # the run fails, the others go on
            outcome.error = f"{request_id}: {type(error).__name__}: {error}"
        if outcome.done is None and outcome.error is None:
            outcome.error = f"{request_id}: the stream ended unfinished"
        return outcome


async def run_requests(llm: Any, requests: List[Request], args: argparse.Namespace,
                       tag: str, timed: bool) -> List[Outcome]:
    """Sends each request at its arrival time (at once when not `timed`),
    at most --max-concurrency in flight (one still waiting for a slot when
    the arrivals end is dropped); waits for all, --drain-s at most after the
    last arrival."""
    slots = asyncio.Semaphore(args.max_concurrency)
    start = time.perf_counter()
    tasks = []
    for i, request in enumerate(requests):
        if timed:
            delay = start + request.arrival_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(serve_one(llm, request, f"{tag}-{i}", args,
                                                   start, slots, timed)))
        if getattr(llm, "errored", False):
            break
    done, pending = await asyncio.wait(tasks, timeout=args.drain_s)
    outcomes = [t.result() for t in done]
    for t in pending:
        t.cancel()
    if pending:
        outcomes.append(Outcome(0, 0, 0.0, error=f"{len(pending)} requests not done "
                                f"{args.drain_s} s after the last arrival"))
    return outcomes


def lease_figures(daemon: Any, idle_s: float = 15.0) -> Dict[str, Any]:
    """kvstashd's lease counters once the engine is idle: every lease
    released (waits up to idle_s for the last ones)."""
    import kvstash

    deadline = time.monotonic() + idle_s
    while True:
        with kvstash.Client(socket=daemon.socket, timeout_ms=5000, name="vllm-serving") as c:
            held = int(c.describe()["tiers"][0]["pool"]["leases"])
            counters = c.stats()["counters"]
        if held == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    out = {name: int(counters.get(name, 0)) for name in
           ("leases_granted", "leases_released", "leases_expired", "leases_truncated",
            "retrieve_chunks", "store_chunks_stored")}
    out["leases_held_when_idle"] = held
    return out


def lease_errors(leases: Dict[str, Any]) -> List[str]:
    errors = []
    if leases["leases_held_when_idle"]:
        errors.append(f"{leases['leases_held_when_idle']} kvstash leases still held with the "
                      "engine idle")
    if leases["leases_expired"]:
        errors.append(f"{leases['leases_expired']} kvstash leases expired instead of being "
                      "released")
    if leases["leases_released"] + leases["leases_expired"] != leases["leases_granted"]:
        errors.append(f"kvstash leases: {leases['leases_granted']} granted, "
                      f"{leases['leases_released']} released, {leases['leases_expired']} expired")
    return errors


async def run_engine(args: argparse.Namespace, workload: Workload, daemon: Any,
                     result: Dict[str, Any]) -> None:
    from vllm.v1.engine.async_llm import AsyncLLM

    model = engine.write_model(args.model, Path(args.out) / "models")
    kwargs = engine.engine_kwargs(
        model, kvstash_socket=daemon.socket if daemon else None,
        async_loads=args.mode != "kvstash-layerwise",
        native_offload_gb=args.offload_gb if args.mode == "native" else 0,
        max_model_len=args.prefix_max + args.suffix + args.output_tokens + 64,
        overrides={"num_gpu_blocks_override": gpu_blocks(args),
                   "max_num_seqs": args.max_concurrency,
                   "max_num_batched_tokens": args.max_batched_tokens})
    result["engine_args"] = {k: v for k, v in kwargs.items() if k != "model"}
    begun = time.perf_counter()
    llm = AsyncLLM.from_engine_args(async_engine_args(kwargs))
    try:
        result["engine_start_s"] = time.perf_counter() - begun
        began = time.perf_counter()
        warm = await run_requests(llm, workload.warmup, args, "warmup", timed=False)
        result["warmup_s"] = time.perf_counter() - began
        warm_errors = [o.error for o in warm if o.error]
        if warm_errors:
            raise RuntimeError(f"warm-up: {warm_errors[:3]}")
        await asyncio.sleep(1.0)  # the last stores land
        if daemon is not None:
            before = lease_figures(daemon)
        outcomes = await run_requests(llm, workload.requests, args, "req", timed=True)
        result.update(summarize(outcomes, args.output_tokens))
        if getattr(llm, "errored", False):
            result["errors"].append("the engine reported an error")
        if daemon is not None:
            after = lease_figures(daemon)
            result["kvstash"] = after
            # The measured part alone.
            result["kvstash_loaded_tokens"] = (after["retrieve_chunks"]
                                               - before["retrieve_chunks"]) * CHUNK_TOKENS
            result["errors"].extend(lease_errors(after))
    finally:
        llm.shutdown()


def run(args: argparse.Namespace) -> int:
    workload = build_workload(args)
    result: Dict[str, Any] = {"mode": args.mode, "args": vars(args).copy(),
                              "workload": describe_workload(args, workload)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = args.name or args.mode
    daemon = None
    try:
        import torch
        import vllm
        result.update(gpu=engine.gpu_name(), vllm=vllm.__version__, torch=torch.__version__)
        if args.mode.startswith("kvstash"):
            extra = args.kvstashd_args.split()
            gpus = None
            if args.mode == "kvstash-multipath":
                extra += ["--multipath", "on"]
                gpus = args.kvstashd_gpus
            daemon = engine.Kvstashd(out, name=f"kvstashd-serving-{name}", l1_gb=args.offload_gb,
                                     chunk_tokens=CHUNK_TOKENS, extra=extra, gpus=gpus)
        asyncio.run(run_engine(args, workload, daemon, result))
    except Exception as error:
        import traceback
        traceback.print_exc()
        result.setdefault("errors", []).append(f"{type(error).__name__}: {error}")
    finally:
        if daemon is not None:
            daemon.stop()
        (out / f"serving-{name}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("args", "engine_args")}),
          flush=True)
    return 1 if result.get("errors") else 0


def describe_workload(args: argparse.Namespace, workload: Workload) -> Dict[str, Any]:
    per_token = kv_bytes_per_token(args.model)
    n = len(workload.requests)
    return {
        "prefixes": len(workload.prefixes),
        "working_set_gib": workload.working_set_tokens() * per_token / 2**30,
        "gpu_kv_gib": gpu_blocks(args) * BLOCK_TOKENS * per_token / 2**30,
        "gpu_blocks": gpu_blocks(args),
        "offload_gib": args.offload_gb,
        "requests": n,
        "offered_rate_per_s": n / args.duration,
        "mean_prompt_tokens": sum(len(r.tokens) for r in workload.requests) / max(1, n),
        "shared_share_of_prompt": (sum(r.prefix_tokens for r in workload.requests)
                                   / max(1, sum(len(r.tokens) for r in workload.requests))),
    }


# ---- the table ----


def _cell(value: Any, fmt: str = "{:.1f}") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt.format(value)


def table(directory: Path) -> int:
    """The runs in `directory` side by side (markdown), ratios against
    native; non-zero if a run failed or none is there."""
    runs = {p.stem[len("serving-"):]: json.loads(p.read_text())
            for p in sorted(directory.glob("serving-*.json"))}
    if not runs:
        print(f"no serving-*.json in {directory}")
        return 1
    order = sorted(runs, key=lambda k: (MODES.index(runs[k]["mode"])
                                        if runs[k].get("mode") in MODES else len(MODES), k))
    for name in order:
        run = runs[name]
        w = run.get("workload", {})
        print(f"{name}: {run.get('gpu')} vLLM {run.get('vllm')}, engine start "
              f"{_cell(run.get('engine_start_s'), '{:.0f}')} s, {w.get('requests')} requests "
              f"offered at {_cell(w.get('offered_rate_per_s'), '{:.1f}')}/s, working set "
              f"{_cell(w.get('working_set_gib'))} GiB over {_cell(w.get('gpu_kv_gib'))} GiB of "
              f"GPU KV{'; ERRORS: ' + '; '.join(run['errors']) if run.get('errors') else ''}")
    native = runs.get("native", {})

    def ratio(run: Dict[str, Any], key: str) -> str:
        if run is native or key not in run or key not in native or not native[key]:
            return "-"
        return f"{run[key] / native[key]:.2f}"

    print()
    print("| mode | TTFT p50 | TTFT p90 | TTFT p99 | ITL p50 | requests/s | output tok/s "
          "| mean in flight | arrival lag p90 | dropped | cached share of prompt "
          "| prefix hit rate | TTFT p50 / native | TTFT p90 / native | tok/s / native "
          "| kvstash leases granted / released / expired / truncated |")
    print("| --- |" + " ---: |" * 16)
    for name in order:
        r = runs[name]
        k = r.get("kvstash")
        leases = (f"{k['leases_granted']} / {k['leases_released']} / {k['leases_expired']} / "
                  f"{k['leases_truncated']}" if k else "-")
        print(f"| {name} | {_cell(r.get('ttft_p50_ms'))} | {_cell(r.get('ttft_p90_ms'))} | "
              f"{_cell(r.get('ttft_p99_ms'))} | {_cell(r.get('itl_p50_ms'), '{:.2f}')} | "
              f"{_cell(r.get('requests_per_s'), '{:.2f}')} | "
              f"{_cell(r.get('output_tokens_per_s'), '{:.0f}')} | "
              f"{_cell(r.get('mean_in_flight'))} | {_cell(r.get('lag_p90_ms'), '{:.0f}')} | "
              f"{_cell(r.get('dropped'), '{}')} | "
              f"{_cell(r.get('cached_share_of_prompt'), '{:.1%}')} | "
              f"{_cell(r.get('prefix_hit_rate'), '{:.1%}')} | {ratio(r, 'ttft_p50_ms')} | "
              f"{ratio(r, 'ttft_p90_ms')} | {ratio(r, 'output_tokens_per_s')} | {leases} |")
    print()
    print("TTFT, ITL and arrival lag in ms. Arrival lag: how long an arrival waited for one of "
          "--max-concurrency slots (an engine that keeps up: 0); dropped: arrivals still waiting "
          "when the arrivals ended. Cached share: prompt tokens vLLM did not compute (its GPU "
          "prefix cache or the offload tier); prefix hit rate: the same, of the shared "
          "prefixes' tokens.")
    return 1 if any(r.get("errors") for r in runs.values()) else 0


# ---- the command line ----


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=MODES)
    p.add_argument("--name", help="the run's name in --out (default: the mode)")
    p.add_argument("--model", default="llama3-8b")
    p.add_argument("--rate", type=float, default=12.0, help="arrivals per second (Poisson)")
    p.add_argument("--duration", type=float, default=120.0, help="seconds of arrivals")
    p.add_argument("--prefixes", type=int, default=64, help="shared prefixes in the pool")
    p.add_argument("--prefix-min", type=int, default=1024)
    p.add_argument("--prefix-max", type=int, default=8192)
    p.add_argument("--suffix", type=int, default=128, help="unique tokens after the prefix")
    p.add_argument("--output-tokens", type=int, default=192)
    p.add_argument("--max-concurrency", type=int, default=64,
                   help="requests in flight at most (and vLLM's max_num_seqs)")
    p.add_argument("--max-batched-tokens", type=int, default=16384)
    p.add_argument("--gpu-kv-gb", type=float, default=20.0,
                   help="vLLM's GPU KV cache (num_gpu_blocks_override)")
    p.add_argument("--offload-gb", type=float, default=48.0,
                   help="host memory of the offload tier: kv_offloading_size, kvstashd --l1-gb")
    p.add_argument("--kvstashd-gpus", default="0,1",
                   help="CUDA_VISIBLE_DEVICES of kvstashd with kvstash-multipath")
    p.add_argument("--kvstashd-args", default="", help="extra kvstashd options")
    p.add_argument("--drain-s", type=float, default=120.0,
                   help="how long after the last arrival requests may still run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="/tmp/kvstash-vllm-serving")
    p.add_argument("--dry-run", action="store_true",
                   help="check the arguments and print the workload; no GPU, no vLLM")
    p.add_argument("--table", metavar="OUT_DIR", help="print the runs in OUT_DIR side by side")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.table:
        return table(Path(args.table))
    if args.mode is None:
        p.error("--mode is required (or --table OUT_DIR)")
    errors = check_args(args)
    if errors:
        p.error("; ".join(errors))
    if args.dry_run:
        print(json.dumps(describe_workload(args, build_workload(args)), indent=1))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
