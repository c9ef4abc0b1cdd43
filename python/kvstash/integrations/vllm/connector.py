"""KvstashConnector: kvstash as a KV connector of vLLM's v1 engine, every
release from 0.26 to 0.33.

The hooks differ between those releases; the connector implements the union
and lets each vLLM call what it knows. Hooks an older vLLM lacks are simply
never called (0.33's unregister_kv_caches / restore_kv_caches), and none of
them is needed for correctness there. Where a release changed what a hook
hands over (the KV tensors' shapes, the scheduler's block ids), layout.py
and scheduler.py read what is there rather than a version number.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any, Dict, Optional, Set, Tuple

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    SupportsHMA,
)

from .layout import group_layouts
from .metadata import KvstashConnectorMetadata
from .scheduler import SchedulerSide
from .settings import parse_settings, waits_per_layer
from .stats import KvstashConnectorStats
from .timeline import Timeline
from .worker import WorkerSide

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request


def _tp(vllm_config: "VllmConfig") -> Tuple[int, int]:
    """(tp_rank, tp_size) of this process. vLLM numbers workers with the
    tensor-parallel rank innermost (rank = pp_rank * tp_size + tp_rank)."""
    parallel = vllm_config.parallel_config
    tp_size = parallel.tensor_parallel_size
    if parallel.pipeline_parallel_size > 1:
        raise ValueError(
            f"KvstashConnector does not support pipeline parallelism yet "
            f"(pipeline_parallel_size={parallel.pipeline_parallel_size}); use 1"
        )
    if getattr(parallel, "decode_context_parallel_size", 1) > 1:
        raise ValueError("KvstashConnector does not support decode context parallelism yet")
    return parallel.rank % tp_size, tp_size


def _check_library() -> None:
    """The connector continues key chains (kvstash_chunk_keys_after): a
    libkvstash older than the package would fail every store."""
    from kvstash import _lib

    library = _lib.lib()
    missing = [name for name in ("kvstash_chunk_keys_after", "kvstash_prompt_chunks_after")
               if name in library.missing]
    if missing:
        raise RuntimeError(
            f"KvstashConnector needs {', '.join(missing)}, which {library.path} does not export: "
            "install the libkvstash built with this kvstash package (pip install .) or point "
            "KVSTASH_LIB at it")


class KvstashConnector(KVConnectorBase_V1, SupportsHMA):
    """Offloads vLLM's prefix KV to kvstashd and loads prefix hits back.

    Load it with::

        --kv-transfer-config '{"kv_connector": "KvstashConnector",
          "kv_connector_module_path": "kvstash.integrations.vllm", "kv_role": "kv_both",
          "kv_load_failure_policy": "recompute"}'

    Settings (``kv_connector_extra_config``): ``socket``, ``model``,
    ``tenant``, ``timeout_ms``, ``lease_ms``, ``async_loads``, ``layerwise_loads``,
    ``board_slots``, ``board_completion``, ``early_reports``, ``finish_wait_us``,
    ``timeline_file`` (docs/vllm.md).
    """

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: "KVCacheConfig") -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self.settings = parse_settings(self._kv_transfer_config.kv_connector_extra_config,
                                       vllm_config)
        groups = group_layouts(kv_cache_config)
        tp_rank, tp_size = _tp(vllm_config)
        _check_library()
        self.scheduler_side: Optional[SchedulerSide] = None
        self.worker_side: Optional[WorkerSide] = None
        # The scheduler's stamps (timeline.py) are taken here, around its hooks.
        self._timeline = Timeline(None, "scheduler")
        if role == KVConnectorRole.SCHEDULER:
            self._timeline = Timeline(self.settings.timeline_file, "scheduler")
            if getattr(self._kv_transfer_config, "kv_load_failure_policy", "fail") == "fail":
                logger.warning(
                    "KvstashConnector: kv_load_failure_policy is 'fail', so a request whose "
                    "chunks vanished between lookup and load fails; set "
                    "\"kv_load_failure_policy\": \"recompute\" to recompute them instead")
            self.scheduler_side = SchedulerSide(self.settings, groups,
                                                vllm_config.cache_config.block_size, tp_size)
        else:
            self.worker_side = WorkerSide(self.settings, groups, tp_rank, tp_size)
            # Several KV cache groups: vLLM refuses block-level load errors,
            # and from 0.30 takes a failed asynchronous load as a whole.
            # Before 0.30 it has no such channel: such a failure stops the
            # engine, loudly, never with wrong KV.
            self.worker_side.report_failed_requests = (
                len(groups) > 1 and hasattr(KVConnectorBase_V1, "get_transfer_results"))

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: Dict[str, Any]) -> bool:
        # Layer-wise loads wait in wait_for_layer_load, which a full CUDA
        # graph's replay skips: vLLM then switches to piecewise graphs.
        return waits_per_layer(extra_config)

    @property
    def requires_kv_delivery(self) -> bool:
        # A cache: a store lost to preemption is a later miss, not an error.
        return False

    @classmethod
    def supports_sleep_mode(cls, kv_transfer_config: Any) -> bool:
        # unregister_kv_caches drops kvstashd's mappings before the memory
        # is released; restore_kv_caches registers the same tensors again.
        return True

    def apply_settings(self, **changes: Any) -> None:
        """Changes settings of this side for what comes next, as
        kv_connector_extra_config would have set them (checked the same
        way). For benchmarks that compare variants in one engine; settings
        fixed at registration (board_slots, and layerwise_loads's ranges
        and CUDA graph mode) keep their first values."""
        extra = {k: v for k, v in dataclasses.asdict(self.settings).items() if v is not None}
        extra.update(changes)
        settings = parse_settings(extra, None)
        if settings.timeline_file != self.settings.timeline_file and self.scheduler_side:
            self._timeline.close()
            self._timeline = Timeline(settings.timeline_file, "scheduler")
        self.settings = settings
        if self.worker_side is not None:
            self.worker_side.use_settings(settings)
        if self.scheduler_side is not None:
            self.scheduler_side._settings = settings

    @property
    def _worker(self) -> WorkerSide:
        assert self.worker_side is not None, "a worker-side call on the scheduler's connector"
        return self.worker_side

    @property
    def _scheduler(self) -> SchedulerSide:
        assert self.scheduler_side is not None, "a scheduler-side call on a worker's connector"
        return self.scheduler_side

    # ---- worker side ----

    def register_kv_caches(self, kv_caches: Dict[str, torch.Tensor]) -> None:
        self._worker.register_kv_caches(kv_caches)

    def unregister_kv_caches(self) -> None:
        # Sleep mode (vLLM 0.33): the KV memory is about to be released.
        self._worker.unregister_kv_caches()

    def restore_kv_caches(self) -> None:
        self._worker.restore_kv_caches()

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        assert isinstance(kv_connector_metadata, KvstashConnectorMetadata)
        self._worker.handle_preemptions(kv_connector_metadata)

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        super().bind_connector_metadata(connector_metadata)
        if self.worker_side is not None:
            assert isinstance(connector_metadata, KvstashConnectorMetadata)
            self.worker_side.begin_step(connector_metadata)

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        # Loads are ordered on the forward pass's stream: this never waits
        # (layerwise_loads=false on CPU tensors: it waits on the CPU).
        meta = self._get_connector_metadata()
        assert isinstance(meta, KvstashConnectorMetadata)
        self._worker.start_load_kv(meta)

    def wait_for_layer_load(self, layer_name: str) -> None:
        self._worker.wait_for_layer_load(layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor,
                      attn_metadata: "AttentionMetadata", **kwargs: Any) -> None:
        # A chunk spans every layer: a registration's stores are gated on the
        # stream once all its layers went through here.
        meta = self._get_connector_metadata()
        assert isinstance(meta, KvstashConnectorMetadata)
        self._worker.save_kv_layer(layer_name, meta)

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, KvstashConnectorMetadata)
        self._worker.submit_stores(meta)

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        return self._worker.get_finished(finished_req_ids)

    def get_transfer_results(self, finished_req_ids: Set[str]) -> Any:
        # vLLM 0.30 on; older releases call get_finished.
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorTransferResults

        sending, received, failed = self._worker.transfer_results(finished_req_ids)
        return KVConnectorTransferResults(finished_sending=sending, finished_recving=received,
                                          failed_recving=failed)

    def get_block_ids_with_load_errors(self) -> Set[int]:
        return self._worker.take_load_errors()

    # ---- stats (both sides; docs/vllm.md, "Stats") ----

    def get_kv_connector_stats(self) -> Optional[KvstashConnectorStats]:
        # Every step: a worker's after get_finished, the scheduler's after
        # update_connector_output; vLLM merges the ranks' and the scheduler's.
        side = self.worker_side if self.worker_side is not None else self.scheduler_side
        return side.get_kv_connector_stats() if side is not None else None

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[Dict[str, Any]] = None
                                 ) -> Optional[KvstashConnectorStats]:
        # The front end rebuilds the stats from the dict that crossed processes.
        return KvstashConnectorStats(data=dict(data) if data else {})

    def shutdown(self) -> None:
        if self.worker_side is not None:
            self.worker_side.shutdown()
        if self.scheduler_side is not None:
            self.scheduler_side.shutdown()
        self._timeline.close()

    # ---- scheduler side ----

    def on_new_request(self, request: "Request") -> None:
        self._scheduler.on_new_request(request)

    def get_num_new_matched_tokens(self, request: "Request",
                                   num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        began = time.monotonic_ns()
        matched = self._scheduler.get_num_new_matched_tokens(request, num_computed_tokens)
        self._timeline.stamp(request.request_id, "lookup", began)
        return matched

    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks",
                                 num_external_tokens: int) -> None:
        self._scheduler.update_state_after_alloc(request, blocks, num_external_tokens)
        if num_external_tokens > 0:
            self._timeline.stamp(request.request_id, "alloc")

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        meta = self._scheduler.build_connector_meta(scheduler_output)
        meta.forward_tokens = int(getattr(scheduler_output, "total_num_scheduled_tokens", -1))
        if self._timeline.on:
            for new in scheduler_output.scheduled_new_reqs:
                self._timeline.stamp(new.req_id, "scheduled")
        return meta

    def update_connector_output(self, connector_output: "KVConnectorOutput") -> None:
        self._scheduler.update_connector_output(connector_output)
        if self._timeline.on:
            for req_id in connector_output.finished_recving or ():
                self._timeline.stamp(req_id, "recv_reported")

    def request_finished(self, request: "Request",
                         block_ids: Any) -> Tuple[bool, Optional[Dict[str, Any]]]:
        return self._scheduler.request_finished(request)

    def request_finished_all_groups(self, request: "Request",
                                    block_ids: Tuple[Any, ...]) -> Tuple[bool, Optional[Dict[str, Any]]]:
        return self._scheduler.request_finished(request)

    def has_pending_push_work(self) -> bool:
        return self._scheduler.has_pending_push_work()

    def reset_cache(self) -> bool:
        # llm.reset_prefix_cache(reset_connector=True): kvstashd drops this
        # engine's namespace (model and tenant); chunks being read stay.
        return self._scheduler.reset_cache()

    def has_pending_block_frees(self) -> bool:
        # Finished requests' blocks come free once their stores read them.
        return self._scheduler.has_pending_push_work()
