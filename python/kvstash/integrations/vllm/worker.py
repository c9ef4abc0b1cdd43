"""The worker side of KvstashConnector: one kvstash registration per KV cache
group on this rank, loads before the forward pass, stores after it.

Loads: start_load_kv submits one asynchronous Retrieve per registration and
request, all at once, then waits for them before the forward pass (kvstash
moves whole chunks across all layers, so there is nothing to wait for per
layer yet). Any chunk that did not
arrive (missing, failed, the call failed) turns the blocks it should have
filled into load errors, and vLLM recomputes them.

Stores: wait_for_save submits one asynchronous Store per group and request
and returns: the step does not wait. The blocks stay alive until the store
finished: a finished request's blocks are freed only once get_finished
reports it, and a preempted request's stores are waited for before its blocks
can be reused (handle_preemptions).
"""

from __future__ import annotations

import concurrent.futures
import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set, Tuple

import kvstash

from .layout import GroupLayout, GroupTensors, group_tensors, kernel_block_table
from .metadata import KvstashConnectorMetadata, LoadSpec, StoreSpec
from .settings import Settings

logger = logging.getLogger(__name__)


@dataclass
class _Load:
    spec: LoadSpec
    registration: int
    first_chunk: int
    future: "concurrent.futures.Future[Any]"


@dataclass
class _Registered:
    layout: GroupLayout
    tensors: GroupTensors
    reg: Any


class WorkerSide:
    def __init__(self, settings: Settings, groups: List[GroupLayout], tp_rank: int,
                 tp_size: int) -> None:
        self._settings = settings
        self._groups = groups
        self._tp_rank = tp_rank
        self._tp_size = tp_size
        self._client = kvstash.Client(socket=settings.socket, timeout_ms=settings.timeout_ms,
                                      name=f"vllm-worker-tp{tp_rank}")
        self._chunk_tokens = self._client.server_info.chunk_tokens
        self._registered: List[_Registered] = []
        self._loads: List[_Load] = []
        self._load_errors: Set[int] = set()
        self._stores: Dict[str, List["concurrent.futures.Future[Any]"]] = {}
        self._store_reqs: Set[str] = set()
        self._finishing: Set[str] = set()
        self.stats = {"load_chunks": 0, "load_failed_chunks": 0, "store_chunks": 0,
                      "store_failed_chunks": 0}

    @property
    def registrations(self) -> List[Any]:
        return [r.reg for r in self._registered]

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        if self._registered:
            raise RuntimeError("KvstashConnector.register_kv_caches was called twice")
        for layout in self._groups:
            tensors = group_tensors(layout, kv_caches)
            reg = self._client.register(
                list(tensors.tensors.values()), model=self._settings.model,
                tenant=self._settings.tenant, tp_rank=self._tp_rank, tp_size=self._tp_size,
                layout=tensors.geometry)
            self._registered.append(_Registered(layout, tensors, reg))

    def _stream(self, registered: _Registered) -> Any:
        first = next(iter(registered.tensors.tensors.values()))
        if first.is_cuda:
            import torch
            return torch.cuda.current_stream(first.device)
        return None

    def _table(self, registered: _Registered, block_ids: Tuple[List[int], ...]) -> List[int]:
        return kernel_block_table(block_ids[registered.layout.group_id],
                                  registered.tensors.blocks_per_block)

    # ---- loads ----

    def _blocks_of(self, spec_blocks: Tuple[List[int], ...], begin: int, end: int) -> Set[int]:
        """vLLM block ids (every group) holding tokens [begin, end)."""
        out: Set[int] = set()
        for layout in self._groups:  # (several layouts of one group add the same ids)
            ids = spec_blocks[layout.group_id]
            bs = layout.block_size
            out.update(ids[t // bs] for t in range(begin - begin % bs, end, bs) if t // bs < len(ids))
        return out

    def start_load_kv(self, meta: KvstashConnectorMetadata) -> None:
        if not self._registered and meta.loads:
            raise RuntimeError("KvstashConnector: start_load_kv before register_kv_caches")
        c = self._chunk_tokens
        for spec in meta.loads:
            first = spec.start_token // c
            last = spec.end_token // c  # only whole chunks are stored
            if spec.end_token % c:
                self._load_errors |= self._blocks_of(spec.block_ids, last * c, spec.end_token)
            if last <= first:
                continue
            for index, registered in enumerate(self._registered):
                try:
                    chunks = registered.reg.chunks(
                        spec.token_ids[: last * c], self._table(registered, spec.block_ids),
                        start_chunk=first, num_chunks=last - first)
                    # The lease is rank 0's scope's; other ranks' scopes hold no lease.
                    lease = spec.lease_ids[index] if (
                        self._tp_rank == 0 or registered.layout.is_mla) else 0
                    future = registered.reg.retrieve_async(
                        chunks, skip_tokens=spec.start_token - first * c, lease_id=lease,
                        stream=self._stream(registered))
                except kvstash.Error as error:
                    future = concurrent.futures.Future()
                    future.set_exception(error)
                self._loads.append(_Load(spec, index, first, future))

    def wait_for_loads(self) -> None:
        """Waits for every submitted load; failed chunks become load errors."""
        c = self._chunk_tokens
        loads, self._loads = self._loads, []
        for load in loads:
            spec = load.spec
            try:
                outcomes = load.future.result()
            except Exception as error:  # kvstash.Error, or anything the call raised
                logger.warning("kvstash load for request %s failed: %s", spec.req_id, error)
                self._load_errors |= self._blocks_of(spec.block_ids, spec.start_token,
                                                     spec.end_token - spec.end_token % c)
                self.stats["load_failed_chunks"] += 1
                continue
            for i, outcome in enumerate(outcomes):
                begin = max((load.first_chunk + i) * c, spec.start_token)
                end = (load.first_chunk + i + 1) * c
                if outcome.result == kvstash.ChunkResult.RETRIEVED and outcome.num_tokens == end - begin:
                    self.stats["load_chunks"] += 1
                    continue
                self.stats["load_failed_chunks"] += 1
                logger.warning("kvstash chunk %d of request %s not loaded: %s",
                               load.first_chunk + i, spec.req_id, outcome)
                self._load_errors |= self._blocks_of(spec.block_ids, begin, end)

    def take_load_errors(self) -> Set[int]:
        self.wait_for_loads()
        errors, self._load_errors = self._load_errors, set()
        return errors

    # ---- stores ----

    def submit_stores(self, meta: KvstashConnectorMetadata) -> None:
        for spec in meta.stores:
            self._store_reqs.add(spec.req_id)
            for registered in self._registered:
                if registered.layout.is_mla and self._tp_rank != 0:
                    continue  # MLA is the same on every rank: rank 0 stores it
                self._stores.setdefault(spec.req_id, []).append(self._store(registered, spec))

    def _store(self, registered: _Registered, spec: StoreSpec) -> "concurrent.futures.Future[Any]":
        try:
            chunks = registered.reg.chunks(
                spec.token_ids, self._table(registered, spec.block_ids),
                start_chunk=spec.start_chunk, num_chunks=spec.num_chunks)
            return registered.reg.store_async(chunks, stream=self._stream(registered))
        except kvstash.Error as error:
            future: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
            future.set_exception(error)
            return future

    def _reap(self, req_id: str, wait: bool) -> bool:
        """Collects req_id's finished stores; True when none is in flight."""
        futures = self._stores.get(req_id, [])
        if wait:
            concurrent.futures.wait(futures)
        pending = []
        for future in futures:
            if not future.done():
                pending.append(future)
                continue
            error = future.exception()
            if error is not None:
                logger.warning("kvstash store for request %s failed: %s", req_id, error)
                self.stats["store_failed_chunks"] += 1
                continue
            for outcome in future.result():
                key = "store_chunks" if outcome.ok else "store_failed_chunks"
                self.stats[key] += 1
        if pending:
            self._stores[req_id] = pending
        else:
            self._stores.pop(req_id, None)
        return not pending

    def handle_preemptions(self, meta: KvstashConnectorMetadata) -> None:
        # A preempted request's blocks are free for reuse in this very step.
        for req_id in meta.preempted_req_ids:
            self._reap(req_id, wait=True)

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        self._finishing |= finished_req_ids & self._store_reqs
        done = set()
        for req_id in list(self._stores):
            if req_id not in self._finishing:
                self._reap(req_id, wait=False)
        for req_id in list(self._finishing):
            if self._reap(req_id, wait=False):
                done.add(req_id)
                self._finishing.discard(req_id)
                self._store_reqs.discard(req_id)
        return (done or None), None

    def wait_for_stores(self) -> None:
        """Waits for every store in flight (tests, shutdown)."""
        for req_id in list(self._stores):
            self._reap(req_id, wait=True)

    def shutdown(self) -> None:
        self.wait_for_stores()
        for registered in self._registered:
            try:
                registered.reg.unregister()
            except kvstash.Error:
                pass
        self._client.close()
