"""A real vLLM engine on a GPU, with or without kvstash: what the GPU check
(check.py) and the time-to-first-token benchmark (bench/vllm_ttft.py) share.

Models are local config.json files with dummy weights (no download, no
tokenizer): prompts are token ids. kvstashd runs on the CUDA backend from
$KVSTASH_BIN_DIR; the kvstash package is imported from python/ of this tree.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]

# The architectures measured: Llama-3-8B (dense, GQA) and DeepSeek-V2-Lite
# (MLA), shapes as published, weights random.
MODELS: Dict[str, Dict[str, Any]] = {
    "llama3-8b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256,
        "max_position_embeddings": 131072, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
        "torch_dtype": "bfloat16", "bos_token_id": 128000, "eos_token_id": 128001,
        "tie_word_embeddings": False,
    },
    "deepseek-v2-lite": {
        "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
        "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
        "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 27,
        "first_k_dense_replace": 1, "n_routed_experts": 64, "n_shared_experts": 2,
        "num_experts_per_tok": 6, "n_group": 1, "topk_group": 1, "routed_scaling_factor": 1.0,
        "scoring_func": "softmax", "topk_method": "greedy", "norm_topk_prob": False,
        "moe_layer_freq": 1, "kv_lora_rank": 512, "q_lora_rank": None,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "vocab_size": 102400, "max_position_embeddings": 163840, "rope_theta": 10000.0,
        "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16", "bos_token_id": 100000,
        "eos_token_id": 100001, "tie_word_embeddings": False, "attention_bias": False,
        "hidden_act": "silu", "aux_loss_alpha": 0.001, "seq_aux": True,
    },
}


def write_model(kind: str, root: Path) -> Path:
    """A folder holding only `kind`'s config.json."""
    directory = root / kind
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(MODELS[kind], indent=1))
    return directory


def bin_dir() -> Path:
    return Path(os.environ.get("KVSTASH_BIN_DIR", REPO / "build" / "bin"))


class Kvstashd:
    """kvstashd on the CUDA backend, on a private socket; killable and restartable."""

    def __init__(self, log_dir: Path, name: str = "kvstashd", l1_gb: float = 40,
                 chunk_tokens: int = 256, extra: Sequence[str] = (),
                 gpus: Optional[str] = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="kvstash-vllm-"))
        self.socket_path = self.dir / "kvstash.sock"
        self.socket = f"ipc://{self.socket_path}"
        self.log_path = log_dir / f"{name}.log"
        self.argv = [str(bin_dir() / "kvstashd"), "--backend", "cuda", "--socket", self.socket,
                     "--l1-gb", str(l1_gb), "--chunk-tokens", str(chunk_tokens),
                     "--log-level", "warn", *extra]
        # The GPUs kvstashd serves (CUDA_VISIBLE_DEVICES, physical ids): by
        # default this process's own. Multi-path retrieves need the peers too.
        self.env = dict(os.environ)
        if gpus is not None:
            self.env["CUDA_VISIBLE_DEVICES"] = gpus
        self.proc: Optional[subprocess.Popen] = None
        self.start()

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=self.env)
        log.close()
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvstashd exited with {self.proc.returncode}; see {self.log_path}")
            if self.socket_path.exists() and self._pings():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"kvstashd did not answer in 120 s; see {self.log_path}")
            time.sleep(0.05)

    def _pings(self) -> bool:
        import kvstash
        try:
            with kvstash.Client(socket=self.socket, timeout_ms=1000, name="vllm-gpu-probe"):
                return True
        except kvstash.Error:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)
        self.proc = None
        if self.socket_path.exists():
            self.socket_path.unlink()

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def stats(self) -> Dict[str, Any]:
        import kvstash
        with kvstash.Client(socket=self.socket, timeout_ms=5000, name="vllm-gpu-stats") as c:
            return c.stats()

    def counter(self, name: str) -> int:
        """One of kvstashd's daemon-wide counters (docs/protocol.md, Stats)."""
        return int(self.stats()["counters"][name])

    def clear(self) -> int:
        import kvstash
        with kvstash.Client(socket=self.socket, timeout_ms=5000, name="vllm-gpu-admin") as c:
            return c.clear()


def connector_config(socket: str, async_loads: bool = True, layerwise: bool = True,
                     **extra: Any) -> Dict[str, Any]:
    settings = {"socket": socket, "async_loads": async_loads, "layerwise_loads": layerwise}
    settings.update(extra)
    return {
        "kv_connector": "KvstashConnector",
        "kv_connector_module_path": "kvstash.integrations.vllm",
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": settings,
    }


def make_llm(model_dir: Path, **options: Any) -> Any:
    """One vLLM engine (engine_kwargs)."""
    from vllm import LLM

    return LLM(**engine_kwargs(model_dir, **options))


def engine_kwargs(model_dir: Path, *, kvstash_socket: Optional[str] = None,
                  async_loads: bool = True, layerwise: bool = True,
                  native_offload_gb: float = 0, full_cuda_graphs: bool = False, tp: int = 1,
                  max_model_len: int = 40000, gpu_memory_utilization: float = 0.80,
                  connector_extra: Optional[Dict[str, Any]] = None,
                  overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """vLLM's engine arguments (LLM's keywords) of one engine: prefix caching
    on, bf16, dummy weights; with kvstash's connector, vLLM's native CPU
    offloading, or neither. `overrides` replace any of them."""
    kwargs: Dict[str, Any] = dict(
        model=str(model_dir), load_format="dummy", skip_tokenizer_init=True,
        enable_prefix_caching=True, gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len, tensor_parallel_size=tp, seed=0,
        max_num_batched_tokens=16384, max_num_seqs=16)
    if kvstash_socket is not None:
        kwargs["kv_transfer_config"] = connector_config(kvstash_socket, async_loads, layerwise,
                                                        **(connector_extra or {}))
    if native_offload_gb:
        kwargs.update(kv_offloading_size=native_offload_gb, kv_offloading_backend="native")
    if tp > 1:
        # vLLM 0.26's fused all-reduce + RMSNorm (FlashInfer) fails at start-up
        # on our H100 hosts, without any connector too (check.py plain-tp2:
        # CUBLAS_STATUS_EXECUTION_FAILED in the CUDA graph warm-up); NCCL's
        # unfused all-reduce works.
        kwargs["disable_custom_all_reduce"] = True
        kwargs["compilation_config"] = {"pass_config": {"fuse_allreduce_rms": False}}
    if full_cuda_graphs:
        kwargs.setdefault("compilation_config", {})["cudagraph_mode"] = "FULL_AND_PIECEWISE"
    kwargs.update(overrides or {})
    # Extra engine arguments for a whole run (JSON), e.g. to try a vLLM option.
    kwargs.update(json.loads(os.environ.get("KVSTASH_VLLM_ARGS", "{}")))
    return kwargs


def prompts(count: int, length: int, seed: int, vocab: int = 100000) -> List[List[int]]:
    """`count` prompts of `length` random token ids (none shared between seeds)."""
    rng = random.Random(seed * 1_000_003 + length)
    return [[rng.randrange(1000, vocab - 1000) for _ in range(length)] for _ in range(count)]


def generate(llm: Any, batch: Sequence[Sequence[int]], max_tokens: int = 1) -> List[List[int]]:
    """Greedy tokens of each prompt."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True,
                            detokenize=False)
    outs = llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in batch], params,
                        use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def ttft_ms(llm: Any, prompt: Sequence[int]) -> float:
    """One request alone, one output token: its time to first token."""
    start = time.perf_counter()
    generate(llm, [prompt], 1)
    return (time.perf_counter() - start) * 1000


def reset_gpu_prefix_cache(llm: Any) -> None:
    """Empties vLLM's GPU prefix cache (blocks a connector still reads are
    held a moment longer: retry)."""
    deadline = time.monotonic() + 30
    while not llm.reset_prefix_cache():
        if time.monotonic() > deadline:
            raise RuntimeError("vLLM's prefix cache could not be reset in 30 s")
        generate(llm, [[1000, 1001]], 1)  # steps the engine so held blocks come free
        time.sleep(0.05)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def gpu_name() -> str:
    import torch
    return torch.cuda.get_device_name()
