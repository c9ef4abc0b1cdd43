"""SGLang 0.5.17 with the kvstash HiCache backend on a GPU: the checks that
matter most, in one run, each printed as `CHECK <name> PASS|FAIL <detail>`.

    python3 tests/sglang_gpu/check.py [--tp 2] [--tokens 4096] [--skip-second]
    python3 tests/sglang_gpu/check.py --instance-b --socket S --model-dir D --expect FILE

Run by scripts/sglang_gpu_check.sh, which starts kvstashd and sets the paths.
A Llama-3-8B config with dummy weights (no download, no tokenizer): greedy
outputs are a deterministic function of the prompt, so a wrong KV page shows
up as different tokens.

Models (--model): llama3-8b (MHA, the default) or deepseek-v2-lite (MLA:
DeepSeek-V2-Lite's shapes, 27 layers, 64 routed experts; dummy weights).

Checks (engine A, TP=--tp):
  l3_full     prompt P; device and host caches flushed; P again: its pages
              come from kvstash (cached_tokens_details.storage) and the greedy
              tokens equal the first run's (a recompute).
  l3_partial  kvstash cleared; Q = P's first half + another tail run (stores
              Q's pages); caches flushed; P: only its first half comes from
              kvstash, tokens still equal.
  ranks       (TP > 1) kvstashd holds one registration per TP rank.
  mla_once    (MLA, TP > 1) P's pages were stored once (by TP rank 0), and
              every rank read them back for l3_full.
  kill        kvstashd killed, caches flushed: P is served (recomputed), the
              tokens equal; kvstashd restarted: P is stored again and, after
              a flush, comes from kvstash again.
  instance_b  a second SGLang process (its own engine) on the same kvstashd
              sends P first: its pages come from kvstash, tokens equal A's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
             "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 131072,
             "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
             "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu",
             "tie_word_embeddings": False}

DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "hidden_size": 2048,
    "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_attention_heads": 16,
    "num_key_value_heads": 16, "num_hidden_layers": 27, "first_k_dense_replace": 1,
    "moe_layer_freq": 1, "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
    "n_group": 1, "topk_group": 1, "topk_method": "greedy", "norm_topk_prob": False,
    "scoring_func": "softmax", "routed_scaling_factor": 1.0, "kv_lora_rank": 512,
    "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "vocab_size": 102400, "max_position_embeddings": 163840, "rms_norm_eps": 1e-06,
    "rope_theta": 10000, "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32,
                                          "beta_slow": 1, "mscale": 0.707,
                                          "mscale_all_dim": 0.707,
                                          "original_max_position_embeddings": 4096},
    "attention_bias": False, "hidden_act": "silu", "torch_dtype": "bfloat16",
    "bos_token_id": 100000, "eos_token_id": 100001, "tie_word_embeddings": False}
MODELS = {"llama3-8b": LLAMA3_8B, "deepseek-v2-lite": DEEPSEEK_V2_LITE}
PAGE = 64
NEW_TOKENS = 8
RESULTS: List[str] = []


def report(name: str, ok: bool, detail: str) -> bool:
    line = f"CHECK {name} {'PASS' if ok else 'FAIL'} {detail}"
    RESULTS.append(line)
    print(line, flush=True)
    return ok


def model_dir(path: Optional[str], name: str) -> str:
    if path:
        return path
    d = tempfile.mkdtemp(prefix=f"{name}-")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(MODELS[name], f)
    return d


def stored_per_rank(socket: str) -> Dict[int, int]:
    """Chunks stored through each TP rank's registration."""
    with kvstash_client(socket) as c:
        regs = c.stats().get("per_registration", [])
    out: Dict[int, int] = {}
    for r in regs:
        rank = int(r.get("tp_rank", -1))
        out[rank] = out.get(rank, 0) + int(r["counters"].get("store_chunks", 0))
    return out


def extra_config(socket: str) -> str:
    return json.dumps({"backend_name": "kvstash", "module_path": "kvstash.integrations.sglang",
                       "class_name": "KvstashHiCacheStorage", "interface_v1": 1,
                       "allocator": "shm", "kvstash_socket": socket,
                       "kvstash_timeout_ms": 3000, "kvstash_reconnect_interval_s": 0.5})


def engine_kwargs(model: str, socket: str, tp: int, tokens: int, mem_fraction: float) -> Dict[str, Any]:
    return dict(model_path=model, load_format="dummy", skip_tokenizer_init=True,
                attention_backend="triton", sampling_backend="pytorch",
                cuda_graph_backend_decode="disabled", cuda_graph_backend_prefill="disabled",
                page_size=PAGE, context_length=max(8192, 2 * tokens),
                max_total_tokens=max(32768, 4 * tokens), tp_size=tp,
                mem_fraction_static=mem_fraction, random_seed=0,
                enable_hierarchical_cache=True, hicache_size=8,
                hicache_write_policy="write_through",
                hicache_storage_prefetch_policy="wait_complete",
                hicache_storage_backend="dynamic",
                hicache_storage_backend_extra_config=extra_config(socket), log_level="warning")


class Asker:
    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def run(self, tag: str, prompt: List[int]) -> Dict[str, Any]:
        t = time.time()
        out = self.engine.generate(input_ids=prompt,
                                   sampling_params={"max_new_tokens": NEW_TOKENS, "temperature": 0.0})
        mi = out["meta_info"]
        details = mi.get("cached_tokens_details") or {}
        result = {"tokens": list(out.get("output_ids") or []), "storage": int(details.get("storage") or 0),
                  "cached": int(mi.get("cached_tokens") or 0), "s": time.time() - t}
        print(f"RUN {tag} s={result['s']:.2f} cached={result['cached']} storage={result['storage']} "
              f"details={json.dumps(details)} tokens={result['tokens']}", flush=True)
        return result

    def flush(self) -> None:
        for _ in range(60):
            r = self.engine.flush_cache()
            if getattr(r, "success", True):
                return
            time.sleep(0.5)
        raise RuntimeError("flush_cache never succeeded")


def kvstash_client(socket: str):
    import kvstash
    return kvstash.Client(socket=socket, timeout_ms=3000, name="sglang-gpu-check")


def stored_total(socket: str) -> int:
    """Chunks stored through every registration (a registration's
    store_chunks counts each chunk a store carried, new or already there)."""
    try:
        return sum(stored_per_rank(socket).values())
    except Exception as error:  # noqa: BLE001 - the daemon may be restarting
        print(f"NOTE stats: {error}", flush=True)
        return 0


def settle(socket: str, baseline: int, pages: int, timeout_s: float = 30.0) -> int:
    """Waits until `pages` more chunks reached kvstashd than `baseline`
    (SGLang writes host pages to storage in the background), then a little."""
    deadline = time.time() + timeout_s
    now = stored_total(socket)
    while now < baseline + pages and time.time() < deadline:
        time.sleep(0.25)
        now = stored_total(socket)
    print(f"NOTE kvstashd stored {now - baseline} chunks (waited for {pages})", flush=True)
    time.sleep(0.5)
    return now


def main_a(args: argparse.Namespace) -> int:
    import sglang as sgl

    model = model_dir(args.model_dir, args.model)
    mla = "kv_lora_rank" in MODELS[args.model]
    vocab = MODELS[args.model]["vocab_size"]
    rng = random.Random(0)
    P = [rng.randrange(1000, vocab - 1000) for _ in range(args.tokens)]
    half = (args.tokens // 2 // PAGE) * PAGE
    Q = P[:half] + [rng.randrange(1000, vocab - 1000) for _ in range(args.tokens - half)]
    t0 = time.time()
    engine = sgl.Engine(**engine_kwargs(model, args.socket, args.tp, args.tokens, args.mem_fraction))
    print(f"NOTE engine A ({args.model}, tp={args.tp}) started in {time.time() - t0:.1f} s", flush=True)
    ask = Asker(engine)
    pages = args.tokens // PAGE
    try:
        # Every full page: per rank for MHA, once for MLA (TP rank 0 writes it).
        copies = 1 if mla else args.tp
        want = (pages - 1) * copies
        base = stored_total(args.socket)
        ref = ask.run("P_first", P)
        with open(args.expect, "w") as f:
            json.dump({"P": P, "tokens": ref["tokens"]}, f)
        settle(args.socket, base, want)
        ask.flush()
        again = ask.run("P_after_flush", P)
        report("l3_full", again["storage"] >= (pages - 1) * PAGE and again["tokens"] == ref["tokens"],
               f"storage_tokens={again['storage']} of {args.tokens}, tokens equal={again['tokens'] == ref['tokens']}")
        if mla and args.tp > 1:
            per_rank = stored_per_rank(args.socket)
            report("mla_once", per_rank.get(0, 0) >= pages - 1 and
                   all(n == 0 for rank, n in per_rank.items() if rank != 0) and
                   again["storage"] >= (pages - 1) * PAGE,
                   f"chunks stored per TP rank {per_rank} (rank 0 expected {pages - 1} or more, others 0); "
                   f"every rank read {again['storage']} tokens back")

        with kvstash_client(args.socket) as c:
            c.clear()
        ask.flush()
        base = stored_total(args.socket)
        ask.run("Q_first", Q)
        settle(args.socket, base, (half // PAGE) * copies)
        ask.flush()
        part = ask.run("P_partial", P)
        report("l3_partial", 0 < part["storage"] <= half and part["tokens"] == ref["tokens"],
               f"storage_tokens={part['storage']} (expected {half - PAGE}..{half}), "
               f"tokens equal={part['tokens'] == ref['tokens']}")

        if args.tp > 1:
            with kvstash_client(args.socket) as c:
                regs = c.stats().get("per_registration", [])
            ranks = sorted({int(r.get("tp_rank", -1)) for r in regs})
            report("ranks", ranks == list(range(args.tp)), f"registrations' tp ranks {ranks}")

        if args.daemon_pid:
            os.kill(args.daemon_pid, signal.SIGKILL)
            time.sleep(0.5)
            ask.flush()
            t = time.time()
            down = ask.run("P_daemon_killed", P)
            ok_down = down["tokens"] == ref["tokens"]
            print(f"NOTE served with kvstashd dead in {time.time() - t:.2f} s", flush=True)
            subprocess.run(["bash", "-c", args.restart_cmd], check=True)
            time.sleep(2.0)  # the backend registers again on its next call (libkvstash)
            ask.flush()
            base = stored_total(args.socket)
            ask.run("P_restarted_store", P)
            settle(args.socket, base, want)
            ask.flush()
            back = ask.run("P_restarted_hit", P)
            report("kill", ok_down and back["tokens"] == ref["tokens"] and back["storage"] > 0,
                   f"dead: tokens equal={ok_down}; restarted: storage_tokens={back['storage']}, "
                   f"tokens equal={back['tokens'] == ref['tokens']}")
            # Leave P in kvstash for instance B.
            ask.flush()
            base = stored_total(args.socket)
            ask.run("P_for_b", P)
            settle(args.socket, base, want)
        stats = None
        try:
            with kvstash_client(args.socket) as c:
                stats = c.stats()
            print("NOTE kvstash stats per registration: " +
                  json.dumps(stats.get("per_registration")), flush=True)
        except Exception as error:  # noqa: BLE001
            print(f"NOTE stats: {error}", flush=True)
    finally:
        engine.shutdown()
    return 0


def main_b(args: argparse.Namespace) -> int:
    import sglang as sgl

    with open(args.expect) as f:
        expect = json.load(f)
    t0 = time.time()
    engine = sgl.Engine(**engine_kwargs(model_dir(args.model_dir, args.model), args.socket, 1, args.tokens,
                                        args.mem_fraction))
    print(f"NOTE engine B started in {time.time() - t0:.1f} s", flush=True)
    try:
        got = Asker(engine).run("B_P_first_sight", expect["P"])
        report("instance_b", got["storage"] > 0 and got["tokens"] == expect["tokens"],
               f"storage_tokens={got['storage']} of {len(expect['P'])}, "
               f"tokens equal={got['tokens'] == expect['tokens']}")
    finally:
        engine.shutdown()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--model", default="llama3-8b", choices=sorted(MODELS))
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--mem-fraction", type=float, default=0.4)
    ap.add_argument("--expect", required=True, help="file: A writes P and its tokens, B reads them")
    ap.add_argument("--daemon-pid", type=int, default=0, help="kvstashd to kill (0: no kill check)")
    ap.add_argument("--restart-cmd", default="", help="shell command that starts kvstashd again")
    ap.add_argument("--instance-b", action="store_true")
    args = ap.parse_args()
    try:
        (main_b if args.instance_b else main_a)(args)
    except Exception as error:  # noqa: BLE001 - report, then fail
        report("driver", False, f"{type(error).__name__}: {error}")
    return 0 if RESULTS and all(" PASS " in r for r in RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
