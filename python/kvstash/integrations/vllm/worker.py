"""The worker side of KvstashConnector: one kvstash registration (with its
own completion board) per KV cache group on this rank; loads between steps
or ordered on the forward pass's stream, stores gated on it.

Loads between steps (async_loads, the default): start_load_kv issues one
retrieve per registration and request, with one board slot (board_completion:
the engine thread sees the slot released with status 0 once every chunk is
in place, without the CPU reply and the thread hand-off it costs) or as
retrieve_async (its reply says so). get_finished reports a load whose every
chunk is in place in finished_recving as soon as it sees it (early_reports);
for a load with missing chunks, get_block_ids_with_load_errors first hands
out their blocks and the following get_finished reports it, so vLLM computes
a request only after its KV is there, and recomputes a failed load before
the request ever runs. In a step without a forward pass, get_finished may
wait a little for loads about to land (finish_wait_us).

Loads in the step (docs/vllm.md, "On the stream"): start_load_kv issues one
retrieve_on_stream per registration and request on the stream vLLM runs the
forward pass on, with one layer range per attention layer (at most
kvstash.max_layer_ranges(), split as kvstash.layer_range_begin says), and
returns: the CPU never waits. wait_for_layer_load(layer) makes the current
stream wait (cuStreamWaitValue32) for that layer's range, once per range and
step. The per-chunk outcomes (the CPU reply) are collected at the end of the
step, after the forward pass was queued: any chunk not retrieved turns the
blocks it should have filled into load errors
(get_block_ids_with_load_errors), so vLLM drops the step's output of that
request and recomputes those blocks.

Stores: once every layer of a registration went through save_kv_layer (or at
wait_for_save), one store_on_stream per registration and request, gated on
the stream: kvstashd reads the blocks only once the stream has passed the
forward's writes, with no host sync. The blocks may be reused once the
store's second slot is released: a finished request's blocks are freed only
once get_finished reports it (vLLM's delayed free), and a preempted
request's reuse waits for the slot on the stream (handle_preemptions).

With CPU tensors (the host backend) there is no stream: the same calls run
and the waits are CPU polls of the same slots.

Keys: per request and registration the worker keeps the last chunk key of
what it loaded or stored and the chunk that follows it, so a StoreSpec of
new chunks only (metadata.py) is keyed from there, in work proportional to
those chunks. It forgets them when vLLM reports the request finished
(get_finished) or preempted. Any chain it holds is right (a request's
prompt never changes), so keeping one longer costs memory, never keys.
"""

from __future__ import annotations

import concurrent.futures
import enum
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

import kvstash

from .layout import GroupLayout, GroupTensors, group_tensors, kernel_block_table
from .metadata import KvstashConnectorMetadata, LoadSpec, StoreSpec
from .settings import Settings
from .stats import KvstashConnectorStats, Recorder, timed_hook
from .timeline import Timeline

logger = logging.getLogger(__name__)

# A CPU wait spins this long before it sleeps between polls.
_SPIN_S = 0.0002
_POLL_S = 0.00005


def layer_ranges(num_layers: int, wanted: int) -> List[int]:
    """Range index of each of a registration's layers when a retrieve has
    min(wanted, num_layers, kvstash.max_layer_ranges()) ranges, as kvstashd
    splits them (kvstash.layer_range_begin)."""
    count = max(1, min(wanted, num_layers, kvstash.max_layer_ranges()))
    out = [0] * num_layers
    for k in range(count):
        begin = kvstash.layer_range_begin(num_layers, count, k)
        end = kvstash.layer_range_begin(num_layers, count, k + 1)
        out[begin:end] = [k] * (end - begin)
    return out


def _note_reply(load: "_Load", future: Any) -> None:
    """Stamps load.replied_ns (and load.replied_mono_ns, CLOCK_MONOTONIC)
    when its reply comes (the client's dispatcher thread writes two ints,
    read once the future is done)."""
    def replied(_: Any) -> None:
        load.replied_ns = time.perf_counter_ns()
        load.replied_mono_ns = time.monotonic_ns()
    future.add_done_callback(replied)


def _cpu_wait(request: Any, k: int, deadline: float) -> bool:
    """Polls slot k from the CPU until released or past `deadline`."""
    if request.released(k):
        return True
    spin_until = time.monotonic() + _SPIN_S
    while True:
        if request.released(k):
            return True
        now = time.monotonic()
        if now > deadline:
            return False
        if now > spin_until:
            time.sleep(_POLL_S)


class _Waits(enum.Enum):
    """How a registration's loads and stores are waited for, chosen once
    when it is registered (a request finding its board full still goes
    the REPLY way, and says so)."""

    STREAM = "stream"
    """A board mapped for the tensors' GPU: the forward pass's stream waits
    on its slots, and gates stores; the CPU never waits."""
    CPU_BOARD = "cpu board"
    """A board and CPU tensors (the host backend): the CPU polls its slots
    and opens stores' gates."""
    REPLY = "reply"
    """No board (a driver without stream memory operations): the CPU waits
    for the replies, and for the stream before a store."""


@dataclass
class _Registered:
    layout: GroupLayout
    tensors: GroupTensors
    reg: Any
    board: Any
    range_of: List[int]
    """Layer index in the registration -> its layer range."""
    num_ranges: int
    device: Any
    """The tensors' CUDA device, or None (host memory, no stream)."""
    waits: _Waits


@dataclass
class _Load:
    spec: LoadSpec
    registration: int
    first_chunk: int
    num_chunks: int
    request: Any = None
    """The StreamRequest; None when the load went the fallback way."""
    future: Optional["concurrent.futures.Future[Any]"] = None
    """Fallback (no board slot free, or no board): retrieve_async's Future,
    waited for on the CPU before the registration's first layer."""
    num_ranges: int = 1
    waited: Set[int] = field(default_factory=set)
    failed: bool = False
    """A CPU wait ran past its deadline: every block counts as not loaded."""
    issued_ns: int = 0
    replied_ns: int = 0
    """When the reply came (the future's done callback), for load_ms."""
    issued_mono_ns: int = 0
    replied_mono_ns: int = 0
    landed_mono_ns: int = 0
    """When the engine thread first saw the bytes in place (board slot
    released with status 0, or the reply), CLOCK_MONOTONIC."""
    nbytes: int = 0
    """Bytes the load writes at most (its chunks' size): for the load rate."""

    @property
    def outcomes(self) -> "concurrent.futures.Future[Any]":
        return self.request.outcomes if self.request is not None else self.future


@dataclass
class _AsyncLoad:
    """One request's load between steps: a retrieve per registration."""

    spec: LoadSpec
    loads: List[_Load] = field(default_factory=list)
    errors: Set[int] = field(default_factory=set)


class _Store:
    """One store in flight: a StreamRequest, or store_async's Future."""

    __slots__ = ("request", "future", "device", "chunk_bytes", "num_chunks", "issued_ns",
                 "replied_ns")

    def __init__(self, request: Any = None, future: Any = None, device: Any = None,
                 chunk_bytes: int = 0, num_chunks: int = 0, issued_ns: int = 0) -> None:
        self.request = request
        self.future = future
        self.device = device
        self.chunk_bytes = chunk_bytes
        self.num_chunks = num_chunks
        self.issued_ns = issued_ns
        self.replied_ns = 0
        self.outcomes.add_done_callback(self._replied)

    def _replied(self, _: Any) -> None:
        # The client's dispatcher thread: one int written, read once done.
        self.replied_ns = time.perf_counter_ns()

    @property
    def outcomes(self) -> "concurrent.futures.Future[Any]":
        return self.request.outcomes if self.request is not None else self.future

    def reusable(self) -> bool:
        """Whether its blocks may be reused (slot 1 released; fallback: reply)."""
        if self.request is not None:
            return self.request.released(1)
        return self.future.done()


@dataclass
class _Step:
    """What one step's loads and stores need from start_load_kv to
    get_block_ids_with_load_errors / wait_for_save."""

    loads: List[_Load] = field(default_factory=list)
    load_reqs: Set[str] = field(default_factory=set)
    failed_reqs: Set[str] = field(default_factory=set)
    resolved: bool = True
    saved_layers: Dict[int, Set[str]] = field(default_factory=dict)
    stored_regs: Set[int] = field(default_factory=set)
    """Registrations whose stores of this step were submitted (save_kv_layer)."""


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
        self._async_loads: Dict[str, _AsyncLoad] = {}
        self._recv_unreported: Set[str] = set()  # done, failed blocks not handed out yet
        self._recv_ready: Set[str] = set()       # done, may be reported finished_recving
        self._recv_failed: Set[str] = set()      # done, reported whole as failed_recving
        self.report_failed_requests = False
        """Set by the connector where vLLM takes failed_recving (0.30 on) and
        there are several KV cache groups: vLLM refuses block-level load
        errors then, so a failed asynchronous load is reported whole."""
        self._kv_caches: Optional[Dict[str, Any]] = None
        """What register_kv_caches got: registered again after sleep mode."""
        self._asleep = False
        self._layer: Dict[str, Tuple[int, int]] = {}  # layer name -> (registration, range)
        self._step = _Step()
        self._load_errors: Set[int] = set()
        self._stores: Dict[str, List[_Store]] = {}  # blocks not yet reusable
        self._replies: List[Tuple[str, Any]] = []      # reusable, reply not counted yet
        self._store_reqs: Set[str] = set()
        self._finishing: Set[str] = set()
        self._warned_board_full = False
        self._chains: Dict[str, Dict[int, Tuple[bytes, int]]] = {}
        """Per request, per registration: (the last chunk key it loaded or
        stored, the chunk after it)."""
        self._namespaces: List[bytes] = []
        """The registrations' key namespaces while asleep (sleep mode)."""
        self.recorder = Recorder("worker_step_ms")
        self.timeline = Timeline(settings.timeline_file, "worker")
        self._settling: List[_Load] = []
        """Loads known in place from their board slots whose replies are
        not counted yet (stats only: the slot's status already said OK)."""
        self._forward_tokens = -1  # this step's, from the metadata
        self._ns_per_byte = 0.0
        """Load time per byte seen so far (0: none yet): when a load in
        flight is expected to land (finish_wait_us)."""

    def use_settings(self, settings: Settings) -> None:
        """New settings for what comes next (benchmarks compare variants in
        one engine); the registrations and their boards stay as they are."""
        if settings.timeline_file != self._settings.timeline_file:
            self.timeline.close()
            self.timeline = Timeline(settings.timeline_file, "worker")
        self._settings = settings

    @property
    def stats(self) -> Dict[str, int]:
        """The connector's counters since it started (stats.COUNTERS)."""
        return self.recorder.totals

    def _count(self, name: str, n: int = 1) -> None:
        self.recorder.count(name, n)

    def get_kv_connector_stats(self) -> Optional[KvstashConnectorStats]:
        """This step's figures and the interval's, or None (vLLM calls it
        after get_finished and get_block_ids_with_load_errors every step)."""
        return self.recorder.take()

    # ---- key chains ----

    def _chain_after(self, req_id: str, index: int, from_chunk: int) -> Tuple[bool, Optional[bytes]]:
        """(held, key) to continue req_id's chain in registration `index` at
        chunk from_chunk: (True, None) from the namespace at chunk 0; (False,
        None) when this worker holds no chain ending there."""
        if from_chunk == 0:
            return True, None
        chain = self._chains.get(req_id, {}).get(index)
        if chain is None or chain[1] != from_chunk:
            return False, None
        return True, chain[0]

    def _extend_chain(self, req_id: str, index: int, key: Optional[bytes], next_chunk: int) -> None:
        if key is None:
            self._chains.get(req_id, {}).pop(index, None)
        else:
            self._chains.setdefault(req_id, {})[index] = (key, next_chunk)

    @property
    def registrations(self) -> List[Any]:
        return [r.reg for r in self._registered]

    def _cpu_deadline(self) -> float:
        # libkvstash releases every slot at its own timeout; this only
        # bounds a wait on a slot nobody will ever write.
        return time.monotonic() + self._settings.timeout_ms / 1000 + 5

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        if self._registered or self._kv_caches is not None:
            raise RuntimeError("KvstashConnector.register_kv_caches was called twice")
        self._kv_caches = dict(kv_caches)
        self._register_all(self._kv_caches)

    def unregister_kv_caches(self) -> None:
        """vLLM's sleep mode is about to release the KV memory: every load
        and store in flight ends, then kvstashd drops its mappings. Idempotent."""
        if self._asleep or self._kv_caches is None:
            return
        self._resolve_loads()
        self._poll_async_loads(wait=True)
        self._count_settled(wait=True)
        self._load_errors.clear()  # vLLM drops every request's KV on sleep anyway
        self.wait_for_stores()
        self._namespaces = [r.reg.namespace_id for r in self._registered]
        self._unregister_all()
        self._asleep = True

    def restore_kv_caches(self) -> None:
        """After wake-up: the same tensors, registered again. Idempotent."""
        if not self._asleep or self._kv_caches is None:
            return
        self._register_all(self._kv_caches)
        self._asleep = False
        if [r.reg.namespace_id for r in self._registered] != self._namespaces:
            # Keys of another namespace: continuing a chain would mislabel chunks.
            self._chains.clear()

    def _unregister_all(self) -> None:
        for registered in self._registered:
            try:
                registered.reg.unregister()
            except kvstash.Error as error:
                logger.warning("kvstash: unregistering group %d: %s",
                               registered.layout.group_id, error)
        for registered in self._registered:
            if registered.board is not None:
                registered.board.close()
        self._registered = []
        self._layer = {}

    def _register_all(self, kv_caches: Dict[str, Any]) -> None:
        for layout in self._groups:
            tensors = group_tensors(layout, kv_caches)
            first = next(iter(tensors.tensors.values()))
            device = first.device if first.is_cuda else None
            board = self._board(device)
            try:
                reg = self._register(layout, tensors, board)
            except kvstash.Unavailable as error:
                if board is None:
                    raise
                # The board could not be mapped for this GPU: CPU waits instead.
                logger.warning("kvstash: completion board refused at registration (%s); loads "
                               "and stores wait on the CPU", error)
                board.close()
                board = None
                reg = self._register(layout, tensors, None)
            wanted = reg.num_layers if self._settings.layerwise_loads else 1
            if board is not None:
                wanted = min(wanted, board.slots)
            range_of = layer_ranges(reg.num_layers, wanted)
            index = len(self._registered)
            for i, name in enumerate(tensors.tensors):
                self._layer[name] = (index, range_of[i])
            waits = (_Waits.REPLY if board is None
                     else _Waits.STREAM if device is not None else _Waits.CPU_BOARD)
            self._registered.append(_Registered(layout, tensors, reg, board, range_of,
                                                max(range_of) + 1, device, waits))

    def _register(self, layout: GroupLayout, tensors: GroupTensors, board: Any) -> Any:
        return self._client.register(
            list(tensors.tensors.values()), model=self._settings.model,
            tenant=self._settings.tenant, tp_rank=self._tp_rank, tp_size=self._tp_size,
            layout=tensors.geometry, board=board, replicated_across_ranks=layout.is_mla)

    def _board(self, device: Any) -> Any:
        gpu = -1 if device is None else (device.index or 0)
        try:
            return kvstash.CompletionBoard(self._client, slots=self._settings.board_slots, gpu=gpu)
        except kvstash.Unavailable as error:
            # A driver without stream memory operations: CPU waits instead.
            logger.warning("kvstash: no completion board on this GPU (%s); loads and stores "
                           "wait on the CPU", error)
            return None

    def _stream(self, registered: _Registered) -> Any:
        if registered.device is None:
            return None
        import torch
        return torch.cuda.current_stream(registered.device)

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

    @timed_hook
    def begin_step(self, meta: Optional[KvstashConnectorMetadata] = None) -> None:
        """vLLM bound a new step's metadata (before its forward pass)."""
        # A step's loads are resolved by its end (get_block_ids_with_load_errors).
        self._resolve_loads()
        self._step = _Step()
        self._forward_tokens = meta.forward_tokens if meta is not None else -1

    @timed_hook
    def start_load_kv(self, meta: KvstashConnectorMetadata) -> None:
        """Issues this step's loads; never waits (but see wait_for_layer_load)."""
        if not self._registered and meta.loads:
            raise RuntimeError("KvstashConnector: start_load_kv before register_kv_caches")
        if not meta.loads:
            return
        self.recorder.step_has_work = True
        step = self._step
        step.resolved = False
        c = self._chunk_tokens
        for spec in meta.loads:
            self.timeline.stamp(spec.req_id, "load_issued")
            first = spec.start_token // c
            last = spec.end_token // c  # only whole chunks are stored
            if spec.async_load:
                self._start_async_load(spec, first, last)
                continue
            step.load_reqs.add(spec.req_id)
            if spec.end_token % c:
                self._load_errors |= self._blocks_of(spec.block_ids, last * c, spec.end_token)
                step.failed_reqs.add(spec.req_id)
            if last <= first:
                self._seed_chains(spec, last)
                continue
            for index, registered in enumerate(self._registered):
                step.loads.append(self._load(index, registered, spec, first, last))
        if not self._settings.layerwise_loads:
            self._wait_all_on_cpu()

    def _seed_chains(self, spec: LoadSpec, last: int) -> None:
        """A load of no whole chunk still ends the request's key chain at
        chunk `last` (the scheduler's next StoreSpec may continue it)."""
        c = self._chunk_tokens
        for index, registered in enumerate(self._registered):
            key = registered.reg.chunk_keys(spec.token_ids[:last * c])[-1] if last else None
            self._extend_chain(spec.req_id, index, key, last)

    def _load(self, index: int, registered: _Registered, spec: LoadSpec, first: int,
              last: int, on_stream: bool = True) -> _Load:
        """One retrieve: on the forward pass's stream (on_stream), or between
        steps, where it takes a board slot (board_completion) so that the
        engine thread sees it land without waiting for the reply."""
        c = self._chunk_tokens
        # Layer-wise: one range per layer; else one, which libkvstash makes
        # the stream wait for before retrieve_on_stream returns.
        ranges = registered.num_ranges if on_stream and self._settings.layerwise_loads else 1
        load = _Load(spec, index, first, last - first, num_ranges=ranges,
                     issued_ns=time.perf_counter_ns(), issued_mono_ns=time.monotonic_ns(),
                     nbytes=registered.reg.chunk_bytes * (last - first))
        skip = spec.start_token - first * c
        # No lease_id on the retrieves: the lookup's lease belongs to the
        # scheduler's connection (kvstashd ignores anyone else naming it),
        # which releases it once this load ended.
        try:
            chunks = registered.reg.chunks(
                spec.token_ids[: last * c], self._table(registered, spec.block_ids),
                start_chunk=first, num_chunks=last - first)
        except kvstash.Error as error:
            self._extend_chain(spec.req_id, index, None, 0)
            load.future = concurrent.futures.Future()
            load.future.set_exception(error)
            return load
        # Keyed from token 0: the request's chain now ends at chunk `last`.
        self._extend_chain(spec.req_id, index, chunks.key(-1), last)
        if registered.waits is not _Waits.REPLY and (on_stream or
                                                     self._settings.board_completion):
            try:
                load.request = registered.reg.retrieve_on_stream(
                    chunks, stream=self._stream(registered) if on_stream else None,
                    layer_ranges=ranges, skip_tokens=skip)
                _note_reply(load, load.request.outcomes)
                return load
            except kvstash.ResourceExhausted as error:
                if not self._warned_board_full:
                    self._warned_board_full = True
                    logger.warning("kvstash: completion board full (%s); such loads wait on the "
                                   "CPU (raise board_slots)", error)
            except kvstash.Error as error:
                load.future = concurrent.futures.Future()
                load.future.set_exception(error)
                return load
        if on_stream:
            self._count("load_fallbacks")
        load.future = registered.reg.retrieve_async(chunks, skip_tokens=skip)
        _note_reply(load, load.future)
        return load

    def _wait_all_on_cpu(self) -> None:
        """layerwise_loads off, or CPU tensors: wait before the first layer."""
        for load in self._step.loads:
            registered = self._registered[load.registration]
            if load.request is not None and registered.waits is _Waits.STREAM:
                # One range on a stream: libkvstash enqueued the stream's
                # wait before retrieve_on_stream returned.
                load.waited.add(0)
                continue
            self._wait_range(load, registered, load.num_ranges - 1, None)

    def _wait_range(self, load: _Load, registered: _Registered, k: int, stream: Any) -> None:
        if k in load.waited or load.failed:
            return
        load.waited.add(k)
        if load.request is None:
            # Fallback: the reply says the bytes are in place.
            if load.future is not None:
                try:
                    load.future.result(self._cpu_deadline() - time.monotonic())
                except concurrent.futures.TimeoutError:
                    load.failed = True
                except Exception:  # reported by _resolve_loads
                    pass
            load.waited.update(range(load.num_ranges))
            return
        self._count("layer_waits")
        if registered.waits is _Waits.STREAM:
            load.request.wait(stream, k)
        elif not _cpu_wait(load.request, k, self._cpu_deadline()):
            load.failed = True

    @timed_hook
    def wait_for_layer_load(self, layer_name: str) -> None:
        """Orders `layer_name`'s attention after its layer range of every
        load of this step (on the stream; CPU tensors: a CPU wait)."""
        loads = self._step.loads
        if not loads:
            return
        where = self._layer.get(layer_name)
        if where is None:
            return  # not a layer kvstash holds (e.g. a KV-sharing layer)
        index, k = where
        registered = self._registered[index]
        stream = self._stream(registered)
        for load in loads:
            if load.registration == index:
                # A load of one range (layerwise_loads off) covers every layer.
                self._wait_range(load, registered, k if load.num_ranges > 1 else 0, stream)

    def _resolve_loads(self) -> None:
        """Collects this step's outcomes (the CPU reply; the forward pass is
        already queued): failed chunks become load errors."""
        step = self._step
        if step.resolved:
            return
        step.resolved = True
        c = self._chunk_tokens
        for load in step.loads:
            unwaited = [k for k in range(load.num_ranges) if k not in load.waited]
            if unwaited:
                # The attention of those layers may have run before the
                # bytes landed: never trust them.
                self._count("unwaited_ranges", len(unwaited))
                logger.warning(
                    "kvstash: request %s's layer ranges %s were never waited for "
                    "(wait_for_layer_load not called for their layers); recomputing them. "
                    "Set layerwise_loads=false if this engine skips the per-layer hooks",
                    load.spec.req_id, unwaited)
                load.failed = True
            if not load.failed and self._landed_on_board(load, wait=True):
                self._settling.append(load)  # every chunk in place; counted at the reply
                continue
            errors = self._failed_blocks(load, load.outcomes, self._cpu_deadline())
            if errors:
                self._load_errors |= errors
                step.failed_reqs.add(load.spec.req_id)
        if self.timeline.on:
            landed: Dict[str, int] = {}
            for load in step.loads:
                ns = load.landed_mono_ns or load.replied_mono_ns
                landed[load.spec.req_id] = max(landed.get(load.spec.req_id, 0), ns)
            for req_id, ns in landed.items():
                self.timeline.stamp(req_id, "load_done", ns or None)
        # Later waits of this step (none expected) have nothing to wait for.
        step.loads = []

    def _landed_on_board(self, load: _Load, wait: bool = False) -> bool:
        """Whether every chunk of `load` is in its blocks, from its board
        slot alone (board_completion; its last slot released with status 0,
        docs/protocol.md). `wait`: polls the slot from the CPU until it is
        released. False: not known that way (not released yet, no board,
        or a status other than 0: the reply says which chunks failed)."""
        request = load.request
        if request is None or not self._settings.board_completion:
            return False
        last = request.signal.count - 1
        if not request.released(last):
            if not wait or not _cpu_wait(request, last, self._cpu_deadline()):
                return False
        if request.status(last) != 0:
            return False
        if not load.landed_mono_ns:
            load.landed_mono_ns = time.monotonic_ns()
            self._learn_rate(load)
            self._count_landed(load)
        return True

    def _count_landed(self, load: _Load) -> None:
        """Counts a load known in place from its board slot: every chunk
        whole (a stored chunk is a whole one: only whole chunks are keyed)."""
        c = self._chunk_tokens
        start = load.spec.start_token
        tokens = (load.first_chunk + load.num_chunks) * c - max(load.first_chunk * c, start)
        self._count("load_chunks", load.num_chunks)
        self._count("load_bytes",
                    self._registered[load.registration].reg.chunk_bytes * tokens // c)
        self.recorder.observe("load_ms", (load.landed_mono_ns - load.issued_mono_ns) / 1e6)

    def _learn_rate(self, load: _Load) -> None:
        if load.nbytes <= 0:
            return
        landed = load.landed_mono_ns or load.replied_mono_ns
        if not landed:
            return
        seen = max(landed - load.issued_mono_ns, 1) / load.nbytes
        self._ns_per_byte = seen if not self._ns_per_byte else 0.5 * (self._ns_per_byte + seen)

    def _count_settled(self, wait: bool = False) -> None:
        """Takes the replies of loads already known in place (counted when
        they landed): a check that they agree."""
        left = []
        for load in self._settling:
            if not wait and not load.outcomes.done():
                left.append(load)
                continue
            try:
                outcomes = load.outcomes.result(max(0.0, self._cpu_deadline() - time.monotonic()))
            except Exception as error:
                outcomes, failed = [], repr(error)
            else:
                failed = [o for o in outcomes if o.result != kvstash.ChunkResult.RETRIEVED]
            if failed:
                # The protocol rules this out (status 0 means every chunk
                # was retrieved); say so loudly if it ever happens.
                logger.error("kvstash: request %s's load was released with status 0 but its "
                             "reply says %s", load.spec.req_id, failed)
        self._settling = left

    def _failed_blocks(self, load: _Load, future: Any, deadline: float) -> Set[int]:
        """The vLLM blocks `load` should have filled and did not, from its
        per-chunk outcomes (waited for until `deadline`)."""
        spec = load.spec
        c = self._chunk_tokens
        whole = (spec.start_token, spec.end_token - spec.end_token % c)
        try:
            outcomes = future.result(max(0.0, deadline - time.monotonic()))
        except Exception as error:  # kvstash.Error, TimeoutError, anything the call raised
            logger.warning("kvstash load for request %s failed: %s", spec.req_id, error)
            self._count("load_failed_chunks", load.num_chunks)
            return self._blocks_of(spec.block_ids, *whole)
        # The done callback may run just after result() returned: now, then.
        replied_ns = load.replied_ns or time.perf_counter_ns()
        self.recorder.observe("load_ms", (replied_ns - load.issued_ns) / 1e6)
        if load.failed:
            self._count("load_failed_chunks", len(outcomes))
            return self._blocks_of(spec.block_ids, *whole)
        errors: Set[int] = set()
        registered = self._registered[load.registration]
        group = registered.layout.group_id
        for i, outcome in enumerate(outcomes):
            begin = max((load.first_chunk + i) * c, spec.start_token)
            end = (load.first_chunk + i + 1) * c
            if outcome.result == kvstash.ChunkResult.RETRIEVED and outcome.num_tokens == end - begin:
                self._count("load_chunks")
                self._count("load_bytes", registered.reg.chunk_bytes * outcome.num_tokens // c)
                continue
            self._count("load_failed_chunks")
            logger.warning("kvstash chunk %d of request %s (group %d) not loaded: %s",
                           load.first_chunk + i, spec.req_id, group, outcome)
            errors |= self._blocks_of(spec.block_ids, begin, end)
        return errors

    # ---- asynchronous loads (between steps) ----

    def _start_async_load(self, spec: LoadSpec, first: int, last: int) -> None:
        """Retrieves whose replies (the bytes are in place) come back while
        vLLM keeps the request waiting; get_finished reports it once every
        registration's reply came and its failed blocks were handed out."""
        pending = _AsyncLoad(spec)
        c = self._chunk_tokens
        if spec.end_token % c:
            pending.errors |= self._blocks_of(spec.block_ids, last * c, spec.end_token)
        if last > first:
            for index, registered in enumerate(self._registered):
                pending.loads.append(self._load(index, registered, spec, first, last,
                                                on_stream=False))
        else:
            self._seed_chains(spec, last)
        self._async_loads[spec.req_id] = pending

    def _async_done(self, pending: _AsyncLoad) -> bool:
        """Whether every retrieve of a load between steps landed (board) or replied."""
        return all(self._landed_on_board(load) or load.outcomes.done() for load in pending.loads)

    def _poll_async_loads(self, wait: bool = False) -> None:
        for req_id, pending in list(self._async_loads.items()):
            if not wait and not self._async_done(pending):
                continue
            landed = 0
            for load in pending.loads:
                if self._landed_on_board(load):
                    self._settling.append(load)
                else:
                    pending.errors |= self._failed_blocks(load, load.outcomes,
                                                          self._cpu_deadline())
                    self._learn_rate(load)
                landed = max(landed, load.landed_mono_ns or load.replied_mono_ns)
            self.timeline.stamp(req_id, "load_done", landed or None)
            del self._async_loads[req_id]
            if pending.errors and self.report_failed_requests:
                self._recv_failed.add(req_id)
                self._recv_ready.add(req_id)
                continue
            self._load_errors |= pending.errors
            if not pending.errors and self._settings.early_reports:
                # Nothing to hand out first: reported in this get_finished.
                self._recv_ready.add(req_id)
            else:
                self._recv_unreported.add(req_id)

    def _await_landing(self) -> None:
        """finish_wait_us: in a step without a forward pass, waits (up to
        the bound) for the loads in flight expected to land meanwhile."""
        bound_ns = self._settings.finish_wait_us * 1000
        if not bound_ns or not self._async_loads or self._forward_tokens != 0:
            return
        now = time.monotonic_ns()
        deadline = now + bound_ns
        if self._ns_per_byte:
            # Half again the time loads took so far, and 0.2 ms for the rest.
            expected = max(load.issued_mono_ns + int(1.5 * load.nbytes * self._ns_per_byte)
                           for pending in self._async_loads.values() for load in pending.loads)
            if expected + 200_000 > deadline:
                return  # would not land in time: vLLM steps on meanwhile
        while not all(self._async_done(p) for p in self._async_loads.values()):
            if time.monotonic_ns() > deadline:
                return
            time.sleep(0)  # lets the client's dispatcher thread take the GIL

    @timed_hook
    def take_load_errors(self) -> Set[int]:
        self._resolve_loads()
        self._poll_async_loads()
        self._count_settled()
        errors, self._load_errors = self._load_errors, set()
        # Their failed blocks are out: the loads may be reported finished.
        self._recv_ready |= self._recv_unreported
        self._recv_unreported = set()
        return errors

    # ---- stores ----

    @timed_hook
    def save_kv_layer(self, layer_name: str, meta: KvstashConnectorMetadata) -> None:
        """Once every layer of a registration has been written this step, its
        stores are gated on the stream right there (not after the rest of the
        forward pass)."""
        if not meta.stores:
            return
        where = self._layer.get(layer_name)
        if where is None:
            return
        index = where[0]
        step = self._step
        if index in step.stored_regs:
            return
        saved = step.saved_layers.setdefault(index, set())
        saved.add(layer_name)
        registered = self._registered[index]
        if len(saved) == len(registered.tensors.tensors):
            step.stored_regs.add(index)
            self._submit_stores(meta, [index], load_reqs=False)

    @timed_hook
    def submit_stores(self, meta: KvstashConnectorMetadata) -> None:
        """wait_for_save: every store of the step not submitted yet."""
        step = self._step
        if meta.stores:
            self.recorder.step_has_work = True
        rest = [i for i in range(len(self._registered)) if i not in step.stored_regs]
        self._submit_stores(meta, rest, load_reqs=False)
        if any(spec.req_id in step.load_reqs for spec in meta.stores):
            # A request that loaded this step stores only KV computed from a
            # load known to be good: a failed load's blocks are recomputed.
            self._resolve_loads()
            self._submit_stores(meta, range(len(self._registered)), load_reqs=True)
        step.stored_regs.update(range(len(self._registered)))

    def _submit_stores(self, meta: KvstashConnectorMetadata, registrations: Any,
                       load_reqs: bool) -> None:
        step = self._step
        for spec in meta.stores:
            if (spec.req_id in step.load_reqs) != load_reqs:
                continue
            # Every rank reports the request's sends finished, stored or not:
            # the scheduler holds its blocks until all ranks did.
            self._store_reqs.add(spec.req_id)
            # KV computed on a failed load is not published, but the
            # chunks' keys still extend the chain for the next StoreSpec.
            publish = spec.req_id not in step.failed_reqs
            if not publish:
                self._count("stores_skipped")
            for index in registrations:
                registered = self._registered[index]
                if registered.layout.is_mla and self._tp_rank != 0:
                    continue  # MLA is the same on every rank: rank 0 stores it
                store = self._store(index, registered, spec, publish)
                if store is not None:
                    if spec.req_id not in self._stores:
                        self.timeline.stamp(spec.req_id, "store_issued")
                    self._stores.setdefault(spec.req_id, []).append(store)

    def _store(self, index: int, registered: _Registered, spec: StoreSpec,
               publish: bool) -> Optional[_Store]:
        held, after = self._chain_after(spec.req_id, index, spec.from_chunk)
        if not held:
            # Never guess keys: a store skipped is a later miss.
            logger.warning(
                "kvstash: request %s's store of chunks [%d, %d) continues a key chain this "
                "worker does not hold (registration %d); skipped", spec.req_id,
                spec.start_chunk, spec.start_chunk + spec.num_chunks, index)
            self._count("chain_gaps")
            self._count("stores_skipped")
            self._extend_chain(spec.req_id, index, None, 0)
            return None
        first = spec.start_chunk - spec.from_chunk
        try:
            chunks = registered.reg.chunks(
                spec.token_ids, self._table(registered, spec.block_ids),
                start_chunk=first, num_chunks=spec.num_chunks, after=after)
        except kvstash.Error as error:
            logger.warning("kvstash store for request %s refused: %s", spec.req_id, error)
            self._count("store_failed_chunks", spec.num_chunks)
            self._extend_chain(spec.req_id, index, None, 0)
            return None
        self._extend_chain(spec.req_id, index, chunks.key(-1), spec.start_chunk + spec.num_chunks)
        if not publish:
            return None
        stream = self._stream(registered)
        chunk_bytes = registered.reg.chunk_bytes
        issued_ns = time.perf_counter_ns()
        if registered.waits is _Waits.REPLY:
            # No board: the host waits for the stream, then submits.
            return _Store(future=registered.reg.store_async(chunks, stream=stream),
                          chunk_bytes=chunk_bytes, num_chunks=spec.num_chunks,
                          issued_ns=issued_ns)
        try:
            request = registered.reg.store_on_stream(chunks, stream=stream)
        except kvstash.ResourceExhausted as error:
            # A cache: a store skipped for lack of slots is a later miss.
            if not self._warned_board_full:
                self._warned_board_full = True
                logger.warning("kvstash: completion board full (%s); stores skipped (raise "
                               "board_slots)", error)
            self._count("stores_skipped")
            return None
        except kvstash.Error as error:
            logger.warning("kvstash store for request %s failed: %s", spec.req_id, error)
            self._count("store_failed_chunks", spec.num_chunks)
            return None
        if registered.waits is _Waits.CPU_BOARD:
            # CPU tensors: the forward's writes are done when this runs.
            request.open_gate()
        return _Store(request=request, device=registered.device, chunk_bytes=chunk_bytes,
                      num_chunks=spec.num_chunks, issued_ns=issued_ns)

    def _reap(self, req_id: str, wait: bool) -> bool:
        """Drops req_id's stores whose blocks may be reused (their replies
        are counted when they come); True when none is left."""
        pending = []
        for store in self._stores.get(req_id, []):
            if wait:
                self._wait_reusable(store)
            if store.reusable():
                self._replies.append((req_id, store))
            else:
                pending.append(store)
        if pending:
            self._stores[req_id] = pending
        else:
            self._stores.pop(req_id, None)
        self._count_replies(wait)
        return not pending

    def _count_replies(self, wait: bool) -> None:
        left = []
        for req_id, store in self._replies:
            if wait:
                try:
                    store.outcomes.result(max(0.0, self._cpu_deadline() - time.monotonic()))
                except Exception:
                    pass  # counted below
            if store.outcomes.done():
                self._count_store(req_id, store)
            else:
                left.append((req_id, store))
        self._replies = left

    def _wait_reusable(self, store: _Store) -> None:
        if store.request is not None:
            _cpu_wait(store.request, 1, self._cpu_deadline())
        try:
            store.outcomes.result(max(0.0, self._cpu_deadline() - time.monotonic()))
        except Exception:
            pass  # counted by _count_store

    def _count_store(self, req_id: str, store: _Store) -> None:
        outcomes = store.outcomes
        error = outcomes.exception() if outcomes.done() else TimeoutError("no reply")
        if error is not None:
            logger.warning("kvstash store for request %s failed: %s", req_id, error)
            self._count("store_failed_chunks", store.num_chunks)
            return
        replied_ns = store.replied_ns or time.perf_counter_ns()  # as for loads
        self.recorder.observe("store_ms", (replied_ns - store.issued_ns) / 1e6)
        c = self._chunk_tokens
        for outcome in outcomes.result():
            if not outcome.ok:
                self._count("store_failed_chunks")
                continue
            self._count("store_chunks")
            if outcome.result == kvstash.ChunkResult.STORED:
                self._count("store_bytes", store.chunk_bytes * outcome.num_tokens // c)

    @timed_hook
    def handle_preemptions(self, meta: KvstashConnectorMetadata) -> None:
        """A preempted request's blocks may be rewritten in this very step:
        the stream (CPU tensors: the CPU) waits until its stores read them."""
        if not meta.preempted_req_ids:
            return
        for req_id in meta.preempted_req_ids:
            # The scheduler sends its next StoreSpec from token 0.
            self._chains.pop(req_id, None)
            for store in self._stores.get(req_id, []):
                if store.request is None:
                    self._wait_reusable(store)
                    continue
                if store.device is not None:
                    import torch
                    store.request.wait(torch.cuda.current_stream(store.device), 1)
                else:
                    _cpu_wait(store.request, 1, self._cpu_deadline())
            self._reap(req_id, wait=False)

    @timed_hook
    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        """(finished_sending, finished_recving): requests whose blocks vLLM
        may free now (finished, every store of theirs past its reuse slot),
        and requests whose asynchronous loads are done (their failed blocks
        already handed out by get_block_ids_with_load_errors). vLLM frees a
        finished request's blocks on either report, so one in both is
        reported once, as received, when its loads and its stores are done."""
        if self._stores or self._async_loads or self._finishing or self._settling:
            self.recorder.step_has_work = True
        for req_id in finished_req_ids:
            self._chains.pop(req_id, None)
        self._await_landing()
        self._poll_async_loads()
        self._finishing |= finished_req_ids & self._store_reqs
        stored = set()
        for req_id in list(self._stores):
            if req_id not in self._finishing:
                self._reap(req_id, wait=False)
        for req_id in list(self._finishing):
            if self._reap(req_id, wait=False):
                stored.add(req_id)
                self._finishing.discard(req_id)
                self._store_reqs.discard(req_id)
        loading = set(self._async_loads) | self._recv_unreported | self._recv_ready
        sending = {r for r in stored if r not in loading}
        received = {r for r in self._recv_ready if r not in self._finishing}
        self._recv_ready -= received
        for req_id in received:
            self.timeline.stamp(req_id, "load_reported")
        return (sending or None), (received or None)

    def transfer_results(self, finished_req_ids: Set[str]) -> Tuple[Set[str], Set[str], Set[str]]:
        """get_finished's two sets, and the received requests whose load
        failed as a whole (failed_recving; they are in the received set too)."""
        sending, received = self.get_finished(finished_req_ids)
        received = received or set()
        failed = received & self._recv_failed
        self._recv_failed -= failed
        return sending or set(), received, failed

    def wait_for_stores(self) -> None:
        """Waits for every store in flight (tests, shutdown)."""
        for req_id in list(self._stores):
            self._reap(req_id, wait=True)
        self._count_replies(wait=True)

    def shutdown(self) -> None:
        self._resolve_loads()
        self._poll_async_loads(wait=True)
        self._count_settled(wait=True)
        self.wait_for_stores()
        self._unregister_all()
        self._client.close()
        self.timeline.close()
