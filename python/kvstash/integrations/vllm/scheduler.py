"""The scheduler side of KvstashConnector: prefix hits from kvstash's Lookup,
what to load into which blocks, what to store, and which blocks to keep alive.

The scheduler process has no KV memory of its own, but kvstash's Lookup is
scoped by a registration (model, tenant, layout fingerprint, rank). So the
scheduler registers, per KV cache group, one block of memory with the group's
chunk format: the same fingerprint as the workers' registrations, hence the
same key namespace. Hits are looked up in tensor-parallel rank 0's scope; a
rank whose own chunk went missing reports the blocks as load errors and vLLM
recomputes them.

Each step costs in proportion to what is new, not to the prompt: a
request's lookup keys are computed once (extended, never recomputed, while
it waits), and a StoreSpec carries only the tokens and block ids of the
chunks it stores whenever the workers hold the key chain up to its first
chunk (they keep the last key of what they loaded or stored; see
metadata.py). The scheduler knows what it sent: a LoadSpec carries the
prompt from token 0 to the load's end, StoreSpecs follow one another, and
preemption forgets it (the next StoreSpec starts again from token 0).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set, Tuple

import torch

import kvstash

from .layout import GroupLayout
from .leases import LoadLeases, Throttled
from .metadata import KvstashConnectorMetadata, LoadSpec, StoreSpec
from .settings import Settings
from .stats import Recorder, timed_hook

logger = logging.getLogger(__name__)


@dataclass
class _Hit:
    num_local: int
    hit_end: int
    lease_ids: Tuple[int, ...]


def _lookup_memory(backend: str, nbytes: int, count: int) -> List[Any]:
    """`count` buffers of `nbytes` that kvstashd's backend can map."""
    if backend == "cuda":
        buf = torch.zeros(nbytes * count, dtype=torch.uint8, device="cuda")
    else:
        buf = kvstash.host_tensor((nbytes * count,), torch.uint8)
    return [buf[i * nbytes:(i + 1) * nbytes] for i in range(count)]


class SchedulerSide:
    def __init__(self, settings: Settings, groups: List[GroupLayout], block_size: int,
                 tp_size: int) -> None:
        self._settings = settings
        self._groups = groups
        self._block_size = block_size
        self._client = kvstash.Client(socket=settings.socket, timeout_ms=settings.timeout_ms,
                                      name="vllm-scheduler")
        info = self._client.server_info
        self._chunk_tokens = info.chunk_tokens
        self._max_keys = info.max_chunks_per_request
        if self._chunk_tokens % block_size != 0:
            raise ValueError(
                f"kvstashd's chunk_tokens {self._chunk_tokens} is not a multiple of vLLM's "
                f"block size {block_size}: start kvstashd with --chunk-tokens N*{block_size}"
            )
        self._regs = []
        for group in groups:
            memory = _lookup_memory(info.backend, group.lookup_geometry().extent_bytes(),
                                    len(group.layer_names))
            self._regs.append(self._client.register(
                memory, model=settings.model, tenant=settings.tenant, tp_rank=0,
                tp_size=tp_size, layout=group.lookup_geometry(),
                replicated_across_ranks=group.is_mla))
        # A StoreSpec starts at a chunk boundary, which must be a block
        # boundary of every group for its block ids to start there too.
        self._block_sizes = {g.group_id: g.block_size for g in groups}
        self._deltas = all(self._chunk_tokens % bs == 0 for bs in self._block_sizes.values())
        self.recorder = Recorder("scheduler_step_ms")
        self._requests: Dict[str, Any] = {}
        self._hits: Dict[str, _Hit] = {}
        self._lookup_keys: Dict[str, List[List[bytes]]] = {}  # per request, per registration
        self._loads: Dict[str, LoadSpec] = {}
        self._stored_chunks: Dict[str, int] = {}   # chunks stored or loaded, from 0
        self._chain_chunks: Dict[str, int] = {}    # the workers hold the keys of chunks [0, n)
        self._store_issued: Set[str] = set()       # a worker may be storing its blocks
        self._sending: Set[str] = set()            # finished, blocks held until stored
        self._receiving: Set[str] = set()          # asynchronous loads in flight
        self._block_ids: Dict[str, Tuple[List[int], ...]] = {}  # per request, per group
        self._releasing: List[Any] = []  # release futures not answered yet
        self.leases = LoadLeases(self._client_release)
        self._truncated_warning = Throttled(logger)
        self._lookup_warning = Throttled(logger)

    @property
    def chunk_tokens(self) -> int:
        return self._chunk_tokens

    def on_new_request(self, request: Any) -> None:
        self._requests[request.request_id] = request

    # ---- hits ----

    def _release(self, lease_ids: Tuple[int, ...]) -> None:
        self.leases.release(lease_ids)

    def _client_release(self, lease: int) -> None:
        """Sends the release without waiting for its reply: the scheduler's
        step is vLLM's critical path, and nothing waits on a release (the
        load it protected has ended). Every registration is on this
        connection, which owns the lease."""
        self._releasing = [f for f in self._releasing if not f.done()]
        try:
            future = self._regs[0].release_async(lease)
        except kvstash.Error as error:  # the connection is closed
            logger.debug("kvstash release of lease %d: %s", lease, error)
            return
        future.add_done_callback(lambda f, lease=lease: _log_release(lease, f))
        self._releasing.append(future)

    def wait_for_releases(self) -> None:
        """Until kvstashd answered every release sent (at most timeout_ms
        each): shutdown, and whoever reads kvstashd's lease counters."""
        for future in self._releasing:
            try:
                future.result(self._settings.timeout_ms / 1000)
            except Exception:  # noqa: BLE001 - logged by _log_release
                pass
        self._releasing = []

    def _keys(self, request: Any, reg_index: int, last: int) -> List[bytes]:
        """The keys of the prompt's chunks [0, last) in a lookup
        registration's namespace: computed once per request, extended from
        the last key known when more are needed."""
        per_reg = self._lookup_keys.setdefault(request.request_id, [[] for _ in self._regs])
        keys = per_reg[reg_index]
        if len(keys) < last:
            c = self._chunk_tokens
            tokens = request.prompt_token_ids[len(keys) * c:last * c]
            keys.extend(self._regs[reg_index].chunk_keys(tokens,
                                                         after=keys[-1] if keys else None))
        return keys

    @timed_hook
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[int, bool]:
        previous = self._hits.pop(request.request_id, None)
        if previous is not None:
            self._release(previous.lease_ids)
        num_prompt = len(request.prompt_token_ids or ())
        c = self._chunk_tokens
        # Leave at least one prompt token for vLLM to compute (it needs logits).
        loadable = (num_prompt - 1) // c if num_prompt else 0
        first = num_computed_tokens // c
        if loadable <= first:
            return 0, False
        last = min(loadable, first + self._max_keys)
        hit_chunks = last - first
        lease_ids: List[int] = []
        self.recorder.step_has_work = True
        began = time.perf_counter_ns()
        try:
            for index, reg in enumerate(self._regs):
                keys = self._keys(request, index, last)[first:last]
                self.recorder.count("lookups")
                result = reg.lookup(keys, lease_ms=self._settings.lease_ms)
                lease_ids.append(result.lease_id)
                if result.lease_truncated:
                    self._note_truncated(request, first, result.hit_chunks, len(keys))
                hit_chunks = min(hit_chunks, result.hit_chunks)
                if hit_chunks == 0:
                    break
        except kvstash.Error as error:
            # kvstash down or slow: serve the request without it, never stall vLLM.
            self._lookup_warning.warning("kvstash lookup for request %s failed, served as a "
                                         "miss: %s", request.request_id, error)
            self.recorder.count("lookup_failures")
            self._release(tuple(lease_ids))
            return 0, False
        finally:
            self.recorder.observe("lookup_ms", (time.perf_counter_ns() - began) / 1e6)
        hit_end = (first + hit_chunks) * c
        if hit_end <= num_computed_tokens:
            self._release(tuple(lease_ids))
            return 0, False
        self._hits[request.request_id] = _Hit(num_computed_tokens, hit_end, tuple(lease_ids))
        return hit_end - num_computed_tokens, self._settings.async_loads

    def _note_truncated(self, request: Any, first: int, hits: int, looked_up: int) -> None:
        self.recorder.count("lookups_truncated")
        self._truncated_warning.warning(
            "kvstash: the hit of request %s stops at chunk %d of the %d looked up although more "
            "are stored: kvstashd's leased bytes reached --max-leased-share (%d leases held for "
            "this engine's loads); the rest is recomputed. Leases end with their loads: many "
            "loads at once, or leases not ended, hold that budget",
            request.request_id, first + hits, first + looked_up, self.leases.held())

    @timed_hook
    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        # Scheduled (or waiting for its load): no more lookups for it.
        self._lookup_keys.pop(request.request_id, None)
        hit = self._hits.pop(request.request_id, None)
        if hit is None:
            return
        if num_external_tokens <= 0:
            self._release(hit.lease_ids)
            return
        end = min(hit.hit_end, hit.num_local + num_external_tokens)
        c = self._chunk_tokens
        self.recorder.count("hit_requests")
        self.recorder.count("hit_tokens", end - hit.num_local)
        self.recorder.count("hit_chunks", (end // c - hit.num_local // c) * len(self._regs))
        self._loads[request.request_id] = LoadSpec(
            req_id=request.request_id,
            token_ids=list(request.prompt_token_ids[: hit.hit_end]),
            block_ids=tuple(list(ids) for ids in blocks.get_block_ids()),
            start_token=hit.num_local,
            end_token=end,
            async_load=self._settings.async_loads,
        )
        self.leases.load_planned(request.request_id, hit.lease_ids)
        if self._settings.async_loads:
            self._receiving.add(request.request_id)
        # Chunks that came from kvstash need no store.
        done = end // c
        self._stored_chunks[request.request_id] = max(
            self._stored_chunks.get(request.request_id, 0), done)
        # The load's keys end the workers' chain there (whatever they held).
        self._chain_chunks[request.request_id] = done

    # ---- each step ----

    def _track_block_ids(self, scheduler_output: Any) -> None:
        """Each request's block ids, from what the scheduler sends its workers
        (every vLLM from 0.26 carries them there): a new or resumed request's
        whole list, then the blocks each step appends."""
        for new in scheduler_output.scheduled_new_reqs:
            self._block_ids[new.req_id] = tuple(list(ids) for ids in new.block_ids)
        cached = scheduler_output.scheduled_cached_reqs
        resumed = getattr(cached, "resumed_req_ids", None) or set()
        for i, req_id in enumerate(cached.req_ids):
            new_ids = cached.new_block_ids[i]
            if new_ids is None:
                continue
            known = self._block_ids.get(req_id)
            if req_id in resumed or known is None:
                self._block_ids[req_id] = tuple(list(ids) for ids in new_ids)
            else:
                for group, ids in zip(known, new_ids):
                    group.extend(ids)

    def _scheduled(self, scheduler_output: Any) -> List[Tuple[str, int]]:
        """(request id, tokens computed once this step ran) of every scheduled request."""
        out = []
        for new in scheduler_output.scheduled_new_reqs:
            out.append((new.req_id, new.num_computed_tokens
                        + scheduler_output.num_scheduled_tokens.get(new.req_id, 0)))
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            out.append((req_id, cached.num_computed_tokens[i]
                        + scheduler_output.num_scheduled_tokens.get(req_id, 0)))
        return out

    def _blocks_from(self, group: int, ids: List[int], begin: int, full: int) -> List[int]:
        """Group `group`'s block ids of chunks [begin, full)."""
        if not self._deltas:
            return list(ids)  # begin is 0
        bs = self._block_sizes[group]
        c = self._chunk_tokens
        return ids[begin * c // bs:full * c // bs]

    @timed_hook
    def build_connector_meta(self, scheduler_output: Any) -> KvstashConnectorMetadata:
        meta = KvstashConnectorMetadata()
        meta.loads = list(self._loads.values())
        self._loads.clear()
        self.leases.step_built((load.req_id, load.async_load) for load in meta.loads)
        meta.preempted_req_ids = set(getattr(scheduler_output, "preempted_req_ids", None) or ())
        for req_id in meta.preempted_req_ids:
            # Its workers forget its chain (handle_preemptions): its next
            # store goes from token 0, unless a load on resumption ends a
            # new chain (update_state_after_alloc; vLLM resumes a request
            # in a later step than the one that preempted it).
            self._chain_chunks.pop(req_id, None)
        self._track_block_ids(scheduler_output)
        c = self._chunk_tokens
        for req_id, computed in self._scheduled(scheduler_output):
            request = self._requests.get(req_id)
            if request is None:
                continue
            prompt = request.prompt_token_ids or []
            full = min(computed, len(prompt)) // c
            start = self._stored_chunks.get(req_id, 0)
            if full <= start:
                continue
            block_ids = self._block_ids.get(req_id)
            if not block_ids:
                continue
            # Only the new chunks when the workers hold the chain up to them.
            begin = start if self._deltas and self._chain_chunks.get(req_id, 0) == start else 0
            meta.stores.append(StoreSpec(
                req_id=req_id, token_ids=list(prompt[begin * c:full * c]),
                block_ids=tuple(self._blocks_from(g, ids, begin, full)
                                for g, ids in enumerate(block_ids)),
                start_chunk=start, num_chunks=full - start, from_chunk=begin))
            self._stored_chunks[req_id] = full
            self._chain_chunks[req_id] = full
            self._store_issued.add(req_id)
        if meta.loads or meta.stores:
            self.recorder.step_has_work = True
        return meta

    # ---- the end of a request ----

    @timed_hook
    def request_finished(self, request: Any) -> Tuple[bool, Optional[Dict[str, Any]]]:
        req_id = request.request_id
        hit = self._hits.pop(req_id, None)
        if hit is not None:
            self._release(hit.lease_ids)
        if self._loads.pop(req_id, None) is not None:
            # Never sent to the workers: nothing writes its blocks.
            self._receiving.discard(req_id)
        self.leases.request_finished(req_id)
        self._requests.pop(req_id, None)
        self._lookup_keys.pop(req_id, None)
        self._stored_chunks.pop(req_id, None)
        self._chain_chunks.pop(req_id, None)
        self._block_ids.pop(req_id, None)
        if req_id in self._receiving:
            # A worker may still write its blocks: vLLM frees them once
            # every worker reported the load done (finished_recving).
            self._store_issued.discard(req_id)
            return True, None
        if req_id in self._store_issued:
            # A worker may still be reading its blocks: free them once every
            # worker reported the stores done (get_finished).
            self._store_issued.discard(req_id)
            self._sending.add(req_id)
            return True, None
        return False, None

    @timed_hook
    def update_connector_output(self, connector_output: Any) -> None:
        for req_id in connector_output.finished_sending or ():
            self._sending.discard(req_id)
        for req_id in connector_output.finished_recving or ():
            self._receiving.discard(req_id)
        # vLLM 0.30 on: a failed load of several KV cache groups, whole.
        failed = getattr(connector_output, "failed_recving", None) or ()
        self.leases.loads_ended(list(connector_output.finished_recving or ()) + list(failed))

    def get_kv_connector_stats(self) -> Any:
        """This step's figures and the interval's (vLLM calls it once per
        step, at the end of processing the step's output, after
        update_connector_output), or None. The end of a step: its in-step
        loads are done."""
        self.leases.step_ended()
        return self.recorder.take()

    def has_pending_push_work(self) -> bool:
        # Keeps the engine stepping until held blocks are freed.
        return bool(self._sending)

    def reset_cache(self) -> bool:
        try:
            self._client.clear(model=self._settings.model, tenant=self._settings.tenant)
            return True
        except kvstash.Error as error:
            logger.warning("kvstash: clearing %s failed: %s", self._settings.model, error)
            return False

    def shutdown(self) -> None:
        for hit in self._hits.values():
            self._release(hit.lease_ids)
        self._hits.clear()
        self.leases.release_all()
        self.wait_for_releases()  # answered before the connection closes
        for reg in self._regs:
            try:
                reg.unregister()
            except kvstash.Error:
                pass
        self._client.close()


def _log_release(lease: int, future: Any) -> None:
    error = None if future.cancelled() else future.exception()
    if error is not None:  # expired (a load waited past lease_ms): no problem
        logger.debug("kvstash release of lease %d: %s", lease, error)
