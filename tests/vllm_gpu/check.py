"""kvstash inside a real vLLM engine on a GPU: correctness, failures, tensor
parallelism and one cache shared by two engines. Exits non-zero on any
failed check; prints one PASS/FAIL line per check.

    python tests/vllm_gpu/check.py --case dense-layerwise --out DIR

Correctness: after a kvstash load, the greedy tokens equal those after a GPU
prefix-cache hit that splits the prompt at the same token (the prefix's
first k chunks come from the cache, the rest is computed), and kvstashd's
counters show the chunks were really loaded. Failure checks accept the
split-reference tokens or those of a full recompute (a failed load makes
vLLM recompute from the first block it could not trust), nothing else.
Cases (one engine each): dense (the default: loads between scheduler steps,
CUDA graphs as vLLM chooses, plus the failure checks), dense-layerwise
(loads in the step, layer-wise, piecewise CUDA graphs), dense-full (loads in
the step, whole-request, full CUDA graphs), mla, dense-tp2, mla-tp2, share
(two engines, one per GPU, one kvstashd), and plain-tp2: vLLM alone at
tensor parallel 2, no connector, to tell vLLM's own start-up on a host from
the connector's. KVSTASH_VLLM_ARGS (JSON) adds engine arguments to a run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine  # noqa: E402

CHUNK = 256
NEW_TOKENS = 16


class Checks:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.failed: List[str] = []
        self.results: List[Dict[str, Any]] = []

    def record(self, name: str, ok: bool, **detail: Any) -> None:
        print(f"{'PASS' if ok else 'FAIL'} {name} {json.dumps(detail, default=str)}", flush=True)
        self.results.append({"check": name, "ok": ok, **detail})
        if not ok:
            self.failed.append(name)

    def save(self, case: str) -> None:
        (self.out / f"check-{case}.json").write_text(json.dumps(self.results, indent=1, default=str))


def split_prefix(prompt: Sequence[int]) -> int:
    """Tokens a kvstash hit covers: whole chunks, leaving one token to compute."""
    return (len(prompt) - 1) // CHUNK * CHUNK


def stored(daemon: engine.Kvstashd) -> int:
    return daemon.counter("store_chunks_stored") + daemon.counter("store_chunks_already_present")


def store_prefixes(llm: Any, daemon: engine.Kvstashd, batch: Sequence[Sequence[int]],
                   copies: int = 1) -> None:
    """Each prompt's chunked prefix computed once into vLLM's prefix cache and
    kvstash (from a clean kvstash, so that nothing loads instead), then waited
    for in kvstashd (`copies`: ranks storing their own)."""
    daemon.clear()
    before = stored(daemon)
    engine.generate(llm, [p[:split_prefix(p) + 1] for p in batch], 1)
    want = before + copies * sum(split_prefix(p) // CHUNK for p in batch)
    deadline = time.monotonic() + 20
    while stored(daemon) < want and time.monotonic() < deadline:
        time.sleep(0.02)


def split_reference(llm: Any, daemon: engine.Kvstashd, batch: Sequence[Sequence[int]],
                    copies: int = 1) -> List[List[int]]:
    """Greedy tokens after a GPU prefix-cache hit of exactly the chunked prefix."""
    engine.reset_gpu_prefix_cache(llm)
    store_prefixes(llm, daemon, batch, copies)
    return engine.generate(llm, batch, NEW_TOKENS)


def full_reference(llm: Any, daemon: engine.Kvstashd, batch: Sequence[Sequence[int]]) -> List[List[int]]:
    """Greedy tokens computed from scratch: no GPU hit, no kvstash hit."""
    engine.reset_gpu_prefix_cache(llm)
    daemon.clear()
    before = daemon.counter("retrieve_chunks")
    tokens = engine.generate(llm, batch, NEW_TOKENS)
    if daemon.counter("retrieve_chunks") != before:
        raise RuntimeError("the full reference loaded chunks: kvstashd's Clear kept them")
    return tokens


def kvstash_pass(llm: Any, daemon: engine.Kvstashd, batch: Sequence[Sequence[int]]) -> Dict[str, Any]:
    """The batch again after vLLM's GPU prefix cache was emptied: its
    prefixes must come from kvstash."""
    engine.reset_gpu_prefix_cache(llm)
    before = daemon.counter("retrieve_chunks")
    tokens = engine.generate(llm, batch, NEW_TOKENS)
    return {"tokens": tokens, "loaded_chunks": daemon.counter("retrieve_chunks") - before}


def check_split(checks: Checks, name: str, llm: Any, daemon: engine.Kvstashd,
                batch: Sequence[Sequence[int]], copies: int = 1) -> List[List[int]]:
    ref = split_reference(llm, daemon, batch, copies)
    got = kvstash_pass(llm, daemon, batch)
    want_chunks = copies * sum(split_prefix(p) // CHUNK for p in batch)
    same = got["tokens"] == ref
    checks.record(name, same and got["loaded_chunks"] >= want_chunks,
                  prompts=len(batch), lengths=sorted({len(p) for p in batch}),
                  loaded_chunks=got["loaded_chunks"], expected_chunks=want_chunks,
                  identical_tokens=same,
                  first_diff=None if same else next(
                      (i for i, (a, b) in enumerate(zip(got["tokens"], ref)) if a != b), None))
    return ref


def correctness(checks: Checks, tag: str, llm: Any, daemon: engine.Kvstashd, copies: int = 1,
                vocab: int = 100000) -> None:
    # One prompt alone, then a batch of several lengths loaded together.
    check_split(checks, f"{tag}/one-prompt", llm, daemon,
                engine.prompts(1, 4096 + 77, seed=1, vocab=vocab), copies)
    batch = (engine.prompts(2, 1024 + 3, seed=2, vocab=vocab)
             + engine.prompts(2, 8192 + 200, seed=3, vocab=vocab)
             + engine.prompts(2, 300, seed=4, vocab=vocab))
    check_split(checks, f"{tag}/batch", llm, daemon, batch, copies)


def allowed(tokens: List[List[int]], *refs: List[List[int]]) -> List[int]:
    """Prompts whose tokens match none of the references."""
    return [i for i, t in enumerate(tokens) if all(t != r[i] for r in refs)]


def failures(checks: Checks, llm: Any, daemon: engine.Kvstashd) -> None:
    from kvstash.integrations.vllm import scheduler as sched

    batch = engine.prompts(8, 8192 + 40, seed=10)
    full = full_reference(llm, daemon, batch)
    split = split_reference(llm, daemon, batch)
    checks.record("failure/references", True, split_equals_full=split == full)

    # kvstashd killed while the batch loads: vLLM recomputes, no wrong token.
    engine.reset_gpu_prefix_cache(llm)
    killer = threading.Timer(0.03, daemon.kill)
    start = time.perf_counter()
    killer.start()
    tokens = engine.generate(llm, batch, NEW_TOKENS)
    killer.join()
    wrong = allowed(tokens, split, full)
    checks.record("failure/kvstashd-killed-mid-load", not wrong,
                  wrong_prompts=wrong, seconds=round(time.perf_counter() - start, 3))

    # vLLM keeps serving while kvstashd is gone.
    fresh = engine.prompts(4, 2048 + 9, seed=11)
    start = time.perf_counter()
    engine.generate(llm, fresh, NEW_TOKENS)
    checks.record("failure/serves-without-kvstashd", True,
                  seconds=round(time.perf_counter() - start, 3))

    # kvstashd restarted: hits come back, vLLM untouched.
    daemon.start()
    deadline = time.monotonic() + 60
    again = engine.prompts(4, 4096 + 13, seed=12)
    while True:
        ref = split_reference(llm, daemon, again)
        got = kvstash_pass(llm, daemon, again)
        if got["loaded_chunks"] > 0 or time.monotonic() > deadline:
            break
        time.sleep(1)  # the connector reconnects on its own schedule
    checks.record("failure/kvstashd-restarted-hits-return",
                  got["loaded_chunks"] >= sum(split_prefix(p) // CHUNK for p in again)
                  and got["tokens"] == ref, loaded_chunks=got["loaded_chunks"],
                  identical_tokens=got["tokens"] == ref)

    # A chunk evicted between lookup and load: the lookup's lease is dropped
    # and kvstashd cleared right after the lookup answered.
    victims = engine.prompts(3, 4096 + 21, seed=13)
    full_v = full_reference(llm, daemon, victims)
    split_v = split_reference(llm, daemon, victims)
    engine.reset_gpu_prefix_cache(llm)
    original: Callable[..., Any] = sched.SchedulerSide.get_num_new_matched_tokens

    evicted = {"hits": 0, "cleared": 0}

    def evicting(self: Any, request: Any, num_computed: int) -> Any:
        result = original(self, request, num_computed)
        hit = self._hits.get(request.request_id)
        if hit is not None:
            self._release(hit.lease_ids)
            self._hits[request.request_id] = sched._Hit(hit.num_local, hit.hit_end,
                                                        tuple(0 for _ in hit.lease_ids))
            evicted["hits"] += 1
            evicted["cleared"] += daemon.clear()
        return result

    missing = daemon.counter("retrieve_chunks_missing")
    sched.SchedulerSide.get_num_new_matched_tokens = evicting
    try:
        tokens = engine.generate(llm, victims, NEW_TOKENS)
    finally:
        sched.SchedulerSide.get_num_new_matched_tokens = original
    wrong = allowed(tokens, split_v, full_v)
    missed = daemon.counter("retrieve_chunks_missing") - missing
    checks.record("failure/evicted-between-lookup-and-load", not wrong and missed > 0,
                  wrong_prompts=wrong, missing_chunks=missed, **evicted)


def share(checks: Checks, args: argparse.Namespace, model: Path) -> None:
    """Two engines, one kvstashd: the role `a` engine computes and stores,
    `b` (another process, another GPU) finds the prefixes as hits."""
    marker = Path(args.marker)
    llm = engine.make_llm(model, kvstash_socket=args.socket, max_model_len=20000,
                          gpu_memory_utilization=0.75)
    daemon = engine.Kvstashd.__new__(engine.Kvstashd)
    daemon.socket = args.socket
    batch = engine.prompts(6, 8192 + 5, seed=20)
    engine.generate(llm, [[1000, 1001, 1002]], 1)  # warm-up
    if args.role == "a":
        own = []
        for p in batch:
            engine.generate(llm, [p], 1)  # cold: computed and stored
        time.sleep(1)
        engine.reset_gpu_prefix_cache(llm)
        for p in batch:
            own.append(engine.ttft_ms(llm, p))  # A's own kvstash hits
        refs = engine.generate(llm, batch, NEW_TOKENS)
        marker.write_text(json.dumps({"hit_ttft_ms": own, "tokens": refs}))
        while not (marker.parent / "b-done").exists():
            time.sleep(0.5)
        checks.record("share/engine-a", True, hit_ttft_ms=engine.median(own))
        return
    while not marker.exists():
        time.sleep(0.5)
    a = json.loads(marker.read_text())
    before = daemon.counter("retrieve_chunks")
    times = [engine.ttft_ms(llm, p) for p in batch]
    loaded = daemon.counter("retrieve_chunks") - before
    engine.reset_gpu_prefix_cache(llm)
    tokens = engine.generate(llm, batch, NEW_TOKENS)
    (marker.parent / "b-done").write_text("done")
    a_ms, b_ms = engine.median(a["hit_ttft_ms"]), engine.median(times)
    want = sum(split_prefix(p) // CHUNK for p in batch)
    checks.record("share/engine-b-hits-engine-a-prefixes",
                  loaded >= want and tokens == a["tokens"], loaded_chunks=loaded,
                  expected_chunks=want, identical_tokens=tokens == a["tokens"],
                  a_hit_ttft_ms=round(a_ms, 2), b_first_ttft_ms=round(b_ms, 2),
                  ratio=round(b_ms / a_ms, 3))


def plain_tp2(checks: Checks, model: Path) -> int:
    """vLLM alone at tensor parallel 2: starts and generates, or says why not."""
    try:
        start = time.perf_counter()
        llm = engine.make_llm(model, tp=2, max_model_len=20000)
        tokens = engine.generate(llm, engine.prompts(3, 1000, seed=5), NEW_TOKENS)
        checks.record("plain-tp2/ran", all(len(t) == NEW_TOKENS for t in tokens),
                      seconds=round(time.perf_counter() - start, 1))
    except Exception as error:
        import traceback
        traceback.print_exc()
        checks.record("plain-tp2/ran", False, error=repr(error))
    checks.save("plain-tp2")
    return 1 if checks.failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", required=True, choices=[
        "dense", "dense-layerwise", "dense-full", "mla", "dense-tp2", "mla-tp2", "share",
        "plain-tp2"])
    parser.add_argument("--out", default="/tmp/kvstash-vllm-check")
    parser.add_argument("--socket", help="share: the kvstashd both engines use")
    parser.add_argument("--role", choices=["a", "b"])
    parser.add_argument("--marker")
    parser.add_argument("--skip-failures", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the scheduler in this process
    checks = Checks(out)
    models = out / "models"
    if args.case == "share":
        share(checks, args, engine.write_model("llama3-8b", models))
        checks.save(f"share-{args.role}")
        return 1 if checks.failed else 0

    if args.case == "plain-tp2":
        return plain_tp2(checks, engine.write_model("llama3-8b", models))

    mla = args.case.startswith("mla")
    tp = 2 if args.case.endswith("tp2") else 1
    model = engine.write_model("deepseek-v2-lite" if mla else "llama3-8b", models)
    daemon = engine.Kvstashd(out, name=f"kvstashd-{args.case}", l1_gb=24)
    try:
        start = time.perf_counter()
        in_step = args.case in ("dense-layerwise", "dense-full")
        llm = engine.make_llm(model, kvstash_socket=daemon.socket, async_loads=not in_step,
                              layerwise=args.case != "dense-full",
                              full_cuda_graphs=args.case == "dense-full", tp=tp,
                              max_model_len=20000)
        checks.record(f"{args.case}/engine-start", True,
                      seconds=round(time.perf_counter() - start, 1))
        # MLA is the same on every rank: stored once. Dense: every rank its own heads.
        copies = 1 if mla else tp
        correctness(checks, args.case, llm, daemon, copies,
                    vocab=engine.MODELS["deepseek-v2-lite" if mla else "llama3-8b"]["vocab_size"])
        if args.case == "dense" and not args.skip_failures:
            failures(checks, llm, daemon)
    except Exception as error:  # any crash is a failed check, with its cause
        import traceback
        traceback.print_exc()
        checks.record(f"{args.case}/ran", False, error=repr(error))
    finally:
        checks.save(args.case)
        daemon.stop()
    print(f"{args.case}: {len(checks.results) - len(checks.failed)} passed, "
          f"{len(checks.failed)} failed", flush=True)
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
