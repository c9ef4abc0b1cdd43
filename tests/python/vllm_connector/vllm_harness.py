"""Drives vLLM's real v1 Scheduler (any vLLM from 0.26 to 0.33) with
KvstashConnector loaded by module path, and the connector's worker side by
direct calls on host tensors laid out as that vLLM's GPU worker lays them out
(the model's forward pass, which needs a GPU engine, is replaced by writing a
known byte pattern into the scheduled tokens' KV slots).

What differs between vLLM versions is in the compat section below, detected
by feature rather than by version number.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch

import kvstash
import vllm
from vllm import SamplingParams
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.utils.hashing import sha256
from vllm.v1 import kv_cache_interface
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import KVCacheConfig, MLAAttentionSpec, UniformTypeKVCacheSpecs
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from kvstash.integrations.vllm import KvstashConnector

BLOCK_SIZE = 16

TRANSFER_RESULTS = hasattr(
    __import__("vllm.distributed.kv_transfer.kv_connector.v1.base",
               fromlist=["KVConnectorBase_V1"]).KVConnectorBase_V1, "get_transfer_results")
"""vLLM 0.30 on: failed receives are reported as whole requests (failed_recving)."""
EOS = 2

init_none_hash(sha256)


# ---- compat: what differs between the vLLM versions ----

try:  # 0.33 moved KV cache grouping and placement out of kv_cache_utils
    from vllm.v1.core.kv_cache_planning import get_kv_cache_config_from_groups, get_kv_cache_groups
except ImportError:
    from vllm.v1.core.kv_cache_utils import get_kv_cache_config_from_groups, get_kv_cache_groups

ONE_BACKING_BUFFER = hasattr(kv_cache_interface, "create_kv_cache_views")
"""From 0.29 the worker allocates one buffer for every layer and hands the
connector a strided [B, H, N, C] view of it per layer, laid out by a resolved
KVCacheLayout. Before, it allocates each layer's KV on its own and reshapes it
with the attention backend's get_kv_cache_shape and get_kv_cache_stride_order
(FlashAttention: [B, H, N, 2*D]; MLA: [B, N, D]) under the process-wide NHD
or HND layout."""

_PER_LAYER_LAYOUTS = {"LBNHC": "NHD", "LBHNC": "HND"}
"""The 0.29+ layouts that the per-layer allocation of older versions builds."""

VLLM_VERSION = vllm.__version__


def layout_unsupported(layout: str, kernel_block_size: Optional[int] = None) -> Optional[str]:
    """Why this vLLM's GPU worker never lays the KV cache out as `layout`
    (with kernel blocks of `kernel_block_size` tokens), or None if it may."""
    if ONE_BACKING_BUFFER:
        from vllm.v1.kv_cache_layout import KVCacheLayout
        if layout not in KVCacheLayout.__members__:
            return f"vLLM {VLLM_VERSION} has no KV cache layout {layout}"
        return None
    if layout not in _PER_LAYER_LAYOUTS:
        return (f"vLLM {VLLM_VERSION} allocates each layer's KV on its own (NHD or HND layout); "
                f"it builds no {layout} buffer for a connector that does not prefer cross-layer "
                "blocks")
    if kernel_block_size is not None and kernel_block_size % 16:
        return (f"vLLM {VLLM_VERSION}'s attention backends take kernel blocks of a multiple of 16 "
                f"tokens, not {kernel_block_size}")
    return None


def _set_layout(vllm_config: VllmConfig, layout: str) -> None:
    reason = layout_unsupported(layout)
    if reason is not None:
        raise ValueError(reason)
    if hasattr(vllm_config.cache_config, "kv_cache_layout"):
        # 0.29+: the engine core resolves it before it creates connectors.
        vllm_config.cache_config.kv_cache_layout = layout
    else:
        # Before 0.29: one layout for the whole process (VLLM_KV_CACHE_LAYOUT,
        # or what the attention backend requires), read while reshaping.
        from vllm.v1.attention.backends.utils import set_kv_cache_layout
        set_kv_cache_layout(_PER_LAYER_LAYOUTS[layout])


def _backing_kv_caches(kv_cache_config: KVCacheConfig, layout: str,
                       kernel_block_size: Optional[int]) -> Dict[str, torch.Tensor]:
    """0.29+: vllm/v1/worker/utils.py's KV cache allocation, one buffer
    viewed per layer by create_kv_cache_views, the buffer in kvstash shared
    memory instead of on a GPU."""
    from vllm.v1.kv_cache_layout import KVCacheLayout

    sizes = {tensor.size for tensor in kv_cache_config.kv_cache_tensors}
    assert len(sizes) == 1, "KV cache tensors must share one backing allocation"
    raw = kvstash.host_tensor((sizes.pop(),), torch.int8)
    views: Dict[str, torch.Tensor] = {}
    for tensor in kv_cache_config.kv_cache_tensors:
        group = next(g for g in kv_cache_config.kv_cache_groups if tensor.layers[0] in g.layer_names)
        spec = group.kv_cache_spec
        if isinstance(spec, UniformTypeKVCacheSpecs):
            spec = spec.kv_cache_specs[tensor.layers[0]]
        num_blocks = (kv_cache_config.num_blocks_of(tensor)
                      if hasattr(kv_cache_config, "num_blocks_of") else kv_cache_config.num_blocks)
        views.update(zip(tensor.layers, kv_cache_interface.create_kv_cache_views(
            raw, spec, num_blocks, KVCacheLayout[layout], tensor,
            kernel_block_size=kernel_block_size)))
    return views


def _attention_backend(spec) -> type:
    """The backend an H100 worker picks: FlashAttention, or FlashMLA (whose
    module, unlike FlashAttention MLA's, imports without vLLM's CUDA kernels)."""
    if isinstance(spec, MLAAttentionSpec):
        from vllm.v1.attention.backends.mla.flashmla import FlashMLABackend
        return FlashMLABackend
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    return FlashAttentionBackend


def _per_layer_kv_caches(kv_cache_config: KVCacheConfig,
                         kernel_block_size: Optional[int]) -> Dict[str, torch.Tensor]:
    """Before 0.29: gpu_model_runner.py's _allocate_kv_cache_tensors and
    _reshape_kv_cache_tensors, each allocation in kvstash shared memory
    instead of on a GPU."""
    from vllm.v1.worker.gpu.attn_utils import _reshape_attention_kv_cache

    raw: Dict[str, torch.Tensor] = {}
    packing: Dict[str, tuple] = {}
    packed_backing = None
    for tensor in kv_cache_config.kv_cache_tensors:
        if tensor.block_stride > 0:
            # Packed layers alias one backing allocation.
            if packed_backing is None:
                packed_backing = kvstash.host_tensor((tensor.size,), torch.int8)
            buffer = packed_backing
            packing.update((name, (tensor.offset, tensor.block_stride)) for name in tensor.shared_by)
        else:
            buffer = kvstash.host_tensor((tensor.size,), torch.int8)
        raw.update((name, buffer) for name in tensor.shared_by)

    kv_caches: Dict[str, torch.Tensor] = {}
    for group in kv_cache_config.kv_cache_groups:
        for name in group.layer_names:
            spec = group.kv_cache_spec
            if isinstance(spec, UniformTypeKVCacheSpecs):
                spec = spec.kv_cache_specs[name]
            backend = _attention_backend(spec)
            buffer = raw[name]
            if name in packing:
                num_blocks = buffer.numel() // packing[name][1]
            else:
                num_blocks = buffer.numel() // spec.page_size_bytes
            kernel = kernel_block_size or spec.block_size
            kernel_num_blocks = num_blocks * (spec.block_size // kernel)
            storage_block_size = getattr(spec, "storage_block_size", spec.block_size)
            shape_block_size = storage_block_size if storage_block_size != spec.block_size else kernel
            shape = backend.get_kv_cache_shape(kernel_num_blocks, shape_block_size,
                                               spec.num_kv_heads, spec.head_size,
                                               cache_dtype_str="auto")
            try:
                stride_order = backend.get_kv_cache_stride_order()
                assert len(stride_order) == len(shape)
            except (AttributeError, NotImplementedError):
                stride_order = tuple(range(len(shape)))
            kv_caches[name] = _reshape_attention_kv_cache(buffer, spec, shape, stride_order,
                                                          kernel_num_blocks, packing.get(name))
    return kv_caches


def worker_kv_caches(kv_cache_config: KVCacheConfig, layout: str = "LBNHC",
                     kernel_block_size: Optional[int] = None) -> Dict[str, torch.Tensor]:
    """The per-layer KV tensors this vLLM's GPU worker hands
    register_kv_caches, over kvstash shared memory, zero-filled."""
    if ONE_BACKING_BUFFER:
        return _backing_kv_caches(kv_cache_config, layout, kernel_block_size)
    return _per_layer_kv_caches(kv_cache_config, kernel_block_size)


# ---- configuration ----


def write_tiny_llama(directory: Path, max_position_embeddings: int = 4096) -> Path:
    """A Llama config.json (no weights, no tokenizer): enough for vLLM's ModelConfig."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": 1000,
        "max_position_embeddings": max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float16",
        "bos_token_id": 1,
        "eos_token_id": EOS,
    }))
    return directory


def make_vllm_config(model_dir: Path, socket: str, extra: Optional[dict] = None,
                     tp_size: int = 1, max_num_batched_tokens: int = 64,
                     failure_policy: str = "recompute", layout: str = "LBNHC",
                     block_size: int = BLOCK_SIZE, max_model_len: int = 2048) -> VllmConfig:
    model_config = ModelConfig(model=str(model_dir), dtype="float16", seed=0,
                               skip_tokenizer_init=True, max_model_len=max_model_len)
    scheduler_config = SchedulerConfig(
        max_num_seqs=8, max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        enable_chunked_prefill=True, is_encoder_decoder=False)
    cache_config = CacheConfig(block_size=block_size, gpu_memory_utilization=0.9,
                               enable_prefix_caching=True)
    # Loads in the step unless a test asks for async_loads (the connector's
    # default): most tests check the bytes in the step that loads them.
    settings = {"socket": socket, "model": "tiny-llama", "async_loads": False}
    settings.update(extra or {})
    kv_transfer_config = KVTransferConfig(
        kv_connector="KvstashConnector",
        kv_connector_module_path="kvstash.integrations.vllm",
        kv_role="kv_both",
        kv_connector_extra_config=settings,
        kv_load_failure_policy=failure_policy,
    )
    config = VllmConfig(
        model_config=model_config,
        scheduler_config=scheduler_config,
        cache_config=cache_config,
        kv_transfer_config=kv_transfer_config,
        parallel_config=ParallelConfig(tensor_parallel_size=tp_size),
        device_config=DeviceConfig("cpu"),
    )
    _set_layout(config, layout)
    return config


def make_kv_cache_config(vllm_config: VllmConfig, layer_specs: Dict[str, object],
                         num_blocks: int, groups=None) -> KVCacheConfig:
    """vLLM's own grouping (unless `groups` are given) and placement of the
    layers' KV for `num_blocks` blocks, as the engine core does."""
    if groups is None:
        groups = get_kv_cache_groups(vllm_config, dict(layer_specs))
    # vLLM's --num-gpu-blocks-override: exactly num_blocks, whatever the memory.
    vllm_config.cache_config.num_gpu_blocks_override = num_blocks
    config = get_kv_cache_config_from_groups(vllm_config, groups, 1 << 40)
    vllm_config.cache_config.num_gpu_blocks = config.num_blocks
    return config


def make_request(request_id: str, prompt: Sequence[int], max_tokens: int = 4,
                 block_size: int = BLOCK_SIZE) -> Request:
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    params.update_from_generation_config({}, EOS)
    return Request(request_id=request_id, prompt_token_ids=list(prompt), sampling_params=params,
                   pooling_params=None, block_hasher=get_request_block_hasher(block_size, sha256))


def pattern(rank: int, layer: int, token: int, position: int, shape) -> torch.Tensor:
    """The bytes the 'model' writes for one token of one layer on one rank."""
    seed = (rank * 1_000_003 + layer * 7919 + token * 31 + position * 17) % 251
    n = 1
    for s in shape:
        n *= s
    return ((torch.arange(n, dtype=torch.int32) * 7 + seed) % 251).to(torch.uint8).reshape(shape)


class WorkerRank:
    """One tensor-parallel rank: the connector's worker side on host tensors."""

    def __init__(self, vllm_config: VllmConfig, kv_cache_config: KVCacheConfig, rank: int,
                 layout: str = "LBNHC", kernel_block_size: Optional[int] = None) -> None:
        config = copy.deepcopy(vllm_config)
        config.parallel_config.rank = rank
        self.rank = rank
        self.block_size = vllm_config.cache_config.block_size
        self.kv_cache_config = kv_cache_config
        self.connector = KvstashConnector(config, KVConnectorRole.WORKER, kv_cache_config)
        self.kv_caches = worker_kv_caches(kv_cache_config, layout, kernel_block_size)
        self.connector.register_kv_caches(self.kv_caches)
        self.layer_index = {name: i for i, name in enumerate(self.kv_caches)}

    def _slot(self, name: str, block: int, slot: int) -> torch.Tensor:
        """The bytes of one token of one layer: [H, C] of a [B, H, N, C]
        view, or [C] of an MLA [B, N, C] view (vLLM before 0.29)."""
        view = self.kv_caches[name]
        # vLLM may split its blocks into smaller kernel blocks (dim 0 grows).
        ratio = view.shape[0] // self.kv_cache_config.num_blocks
        kernel_tokens = self.block_size // ratio
        kernel_block, token = block * ratio + slot // kernel_tokens, slot % kernel_tokens
        if view.dim() == 3:
            return view[kernel_block, token, :].view(torch.uint8)
        return view[kernel_block, :, token, :].view(torch.uint8)

    def group_of(self, name: str) -> int:
        return next(i for i, g in enumerate(self.kv_cache_config.kv_cache_groups) if name in g.layer_names)

    def write(self, block_ids, tokens: Sequence[int], begin: int, end: int,
              layers: Optional[Sequence[str]] = None) -> None:
        """What the forward pass does: KV of tokens [begin, end) into their slots
        (with asynchronous scheduling a step's input token may not be known
        to the scheduler yet: those are left out)."""
        for name in layers or self.kv_caches:
            ids = block_ids[self.group_of(name)]
            for p in range(begin, min(end, len(tokens))):
                slot = self._slot(name, ids[p // self.block_size], p % self.block_size)
                slot.copy_(pattern(self.rank, self.layer_index[name], tokens[p], p, slot.shape))

    def matches(self, block_ids, tokens: Sequence[int], begin: int, end: int,
                layers: Optional[Sequence[str]] = None) -> bool:
        for name in layers or self.kv_caches:
            ids = block_ids[self.group_of(name)]
            for p in range(begin, end):
                slot = self._slot(name, ids[p // self.block_size], p % self.block_size)
                if not torch.equal(slot, pattern(self.rank, self.layer_index[name], tokens[p], p, slot.shape)):
                    return False
        return True

    def wipe(self, value: int = 0) -> None:
        for view in self.kv_caches.values():
            view.view(torch.uint8).fill_(value)

    def block_is(self, block: int, value: int) -> bool:
        return all(bool((self._slot(name, block, slot) == value).all())
                   for name in self.kv_caches for slot in range(self.block_size))

    def execute(self, scheduler_output, scheduler: Scheduler, computed: Dict[str, int],
                before_load=None, after_layer_wait=None, after_start=None,
                after_save=None, skip_waits=(), write_kv: bool = True) -> KVConnectorOutput:
        """The worker's connector calls of one step, in vLLM's model-runner
        order: each attention layer waits for its load, writes its KV and
        saves it (vLLM's maybe_transfer_kv_layer), then wait_for_save, and
        the step's transfer results and stats (kv_connector_model_runner_mixin).
        write_kv=False leaves the KV as it is (benchmarks of the connector's
        own cost)."""
        c = self.connector
        meta = scheduler_output.kv_connector_metadata
        c.handle_preemptions(meta)
        c.bind_connector_metadata(meta)
        if before_load is not None:
            before_load()
        c.start_load_kv(None)
        if after_start is not None:
            after_start(self)
        for name in self.kv_caches:
            if name not in skip_waits:
                c.wait_for_layer_load(name)
            if after_layer_wait is not None:
                after_layer_wait(self, name)
            for req_id, n in (scheduler_output.num_scheduled_tokens.items() if write_kv else ()):
                request = scheduler.requests.get(req_id)
                if request is None or request.is_finished():
                    continue  # aborted during the step: its KV is never read
                block_ids = scheduler.kv_cache_manager.get_block_ids(req_id)
                self.write(block_ids, request.all_token_ids, computed[req_id],
                           computed[req_id] + n, layers=[name])
            c.save_kv_layer(name, self.kv_caches[name], None)
            if after_save is not None:
                after_save(self, name)
        c.wait_for_save()
        if TRANSFER_RESULTS:
            # vLLM 0.30 on: the model runner asks for the transfer results.
            results = c.get_transfer_results(scheduler_output.finished_req_ids)
            out = KVConnectorOutput(finished_sending=results.finished_sending or None,
                                    finished_recving=results.finished_recving or None,
                                    failed_recving=results.failed_recving,
                                    invalid_block_ids=c.get_block_ids_with_load_errors())
        else:
            sending, recving = c.get_finished(scheduler_output.finished_req_ids)
            out = KVConnectorOutput(finished_sending=sending, finished_recving=recving,
                                    invalid_block_ids=c.get_block_ids_with_load_errors())
        out.kv_connector_stats = c.get_kv_connector_stats()
        c.clear_connector_metadata()
        return out


class Engine:
    """vLLM's scheduler and N worker ranks, stepped together."""

    def __init__(self, vllm_config: VllmConfig, kv_cache_config: KVCacheConfig,
                 layout: str = "LBNHC", kernel_block_size: Optional[int] = None,
                 write_kv: bool = True, scheduler_cls: type = Scheduler) -> None:
        tp = vllm_config.parallel_config.tensor_parallel_size
        self.write_kv = write_kv
        self.block_size = vllm_config.cache_config.block_size
        self.scheduler = scheduler_cls(
            vllm_config=vllm_config, kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vllm_config),
            block_size=self.block_size, log_stats=True)
        self.workers = [WorkerRank(vllm_config, kv_cache_config, r, layout, kernel_block_size)
                        for r in range(tp)]
        self.aggregator = KVOutputAggregator(expected_finished_count=tp)
        self.last_outputs: List[KVConnectorOutput] = []
        self.connector_stats: List[dict] = []
        """What each step's SchedulerStats carried as kv_connector_stats (the
        dict vLLM hands its front end), when there was any."""

    @property
    def connector(self) -> KvstashConnector:
        return self.scheduler.connector

    def step(self, before_load=None, **hooks):
        so = self.scheduler.schedule()
        self.finish_step(so, before_load, **hooks)
        return so

    def finish_step(self, so, before_load=None, **hooks) -> None:
        """Runs a scheduled step on the workers and hands vLLM its output.
        Apart from step(): with asynchronous scheduling vLLM schedules the
        next step before it processes this one's output."""
        # num_computed_tokens before this step (the scheduler advances it in schedule()).
        computed = {}
        for new in so.scheduled_new_reqs:
            computed[new.req_id] = new.num_computed_tokens
        cached = so.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            computed[req_id] = cached.num_computed_tokens[i]
        outputs = []
        for w in self.workers:
            outputs.append(w.execute(so, self.scheduler, computed, before_load=before_load,
                                     write_kv=self.write_kv, **hooks))
            before_load = None
        self.last_outputs = outputs
        req_ids = list(so.num_scheduled_tokens)
        sampled = []
        for r in req_ids:
            request = self.scheduler.requests.get(r)  # None: aborted during the step
            done_prefill = (request is not None and computed[r] + so.num_scheduled_tokens[r]
                            >= request.num_prompt_tokens)
            sampled.append([7] if done_prefill else [])
        runner_outputs = [
            ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                              sampled_token_ids=sampled, kv_connector_output=out)
            for out in outputs
        ]
        merged = self.aggregator.aggregate(runner_outputs)
        engine_outputs = self.scheduler.update_from_output(so, merged)
        for eco in engine_outputs.values():
            stats = eco.scheduler_stats
            if stats is not None and stats.kv_connector_stats is not None:
                self.connector_stats.append(stats.kv_connector_stats)

    def busy(self) -> bool:
        return self.scheduler.has_requests() or self.connector.has_pending_push_work()

    def run_until_idle(self, timeout_s: float = 30.0) -> int:
        """Steps like vLLM's engine loop while requests run or blocks wait for
        their stores (the connector's has_pending_push_work)."""
        deadline = time.monotonic() + timeout_s
        steps = 0
        while self.busy():
            assert time.monotonic() < deadline, "the engine did not go idle"
            if not self.scheduler.has_requests():
                time.sleep(0.001)  # only stores in flight: an idle engine loop
            self.step()
            steps += 1
        return steps

    def settle_stores(self) -> None:
        for w in self.workers:
            w.connector.worker_side.wait_for_stores()
