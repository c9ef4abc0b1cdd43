"""kvstash as SGLang's HiCache storage tier (L3), zero-copy interface_v1.

kvstashd maps SGLang's host pool (a memfd: "allocator": "shm") once, as one
registration whose blocks are SGLang's pages; batch_set_v1 and batch_get_v1
then name host pages by index and the daemon copies between the pool and its
own L1 (behind it L2 disk and L3 Redis). No page passes through Python.

Never raises on the data path and never blocks past the request timeout: an
unreachable, slow or restarted kvstashd reads as misses (0, False) and
failed writes, a page evicted between batch_exists and batch_get_v1 as False.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from typing import Any, List, Optional, Sequence

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

import kvstash
from kvstash import errors
from kvstash.types import ChunkResult

from .layout import LayoutError, PoolLayout, check_against_sglang, describe_pool, pool_buffer
from .settings import Settings, SettingsError
from .stats import BackendStats

logger = logging.getLogger(__name__)

_KEY = 32
# Leases this backend holds at once (one per batch_exists batch that hit and
# was not loaded yet); the oldest is released past it. SGLang has at most a
# few prefetches in flight per rank; kvstashd allows 4096 per connection.
_MAX_LEASES = 64


def key_bytes(key: str) -> bytes:
    """SGLang's page key (64 hex digits of a SHA-256 chain) as kvstash's 32
    key bytes; any other string (a component key such as "<hash>.swa") is
    hashed to 32 bytes."""
    if len(key) == 2 * _KEY:
        try:
            return bytes.fromhex(key)
        except ValueError:
            pass
    return hashlib.sha256(key.encode()).digest()


def scope_model(config: HiCacheStorageConfig, settings: Settings) -> str:
    """The model name the registration's key namespace is made from. The
    daemon adds the tenant salt, the layout fingerprint (layers, heads,
    dtype, page size) and, for MHA, the TP rank and size; this adds what it
    cannot see: the pipeline stage and the attention context-parallel rank."""
    model = settings.model or config.model_name or "sglang"
    parts = [model, "sglang"]
    if config.pp_size > 1:
        parts.append(f"pp{config.pp_rank}of{config.pp_size}")
    if getattr(config, "attn_cp_size", 1) > 1:
        parts.append(f"cp{config.attn_cp_rank}of{config.attn_cp_size}")
    return "|".join(parts)[:256]


class KvstashHiCacheStorage(HiCacheStorage):
    """Load with --hicache-storage-backend dynamic and the extra config
    {"backend_name": "kvstash", "module_path": "kvstash.integrations.sglang",
    "class_name": "KvstashHiCacheStorage", "interface_v1": 1, "allocator": "shm"}
    (docs/sglang.md)."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Any = None) -> None:
        extra = storage_config.extra_config or {}
        if not bool(extra.get("interface_v1", 0)):
            raise SettingsError(
                'the kvstash HiCache backend needs "interface_v1": 1 in the extra config '
                "(its pages move between kvstashd and the host pool in place)"
            )
        if extra.get("allocator") != "shm":
            raise SettingsError(
                'the kvstash HiCache backend needs "allocator": "shm" in the extra config '
                f"(got {extra.get('allocator')!r}): kvstashd maps the host pool's memfd"
            )
        self.config = storage_config
        self.settings = Settings.from_extra_config(extra)
        self.model = scope_model(storage_config, self.settings)
        self.is_mla = bool(storage_config.is_mla_model)
        self.stats = BackendStats()
        self.layout: Optional[PoolLayout] = None
        self._fd = -1
        self._fd_bytes = 0
        self._lock = threading.Lock()  # connecting
        self._client: Optional[kvstash.Client] = None
        self._registration: Optional[Any] = None
        self._max_chunks = 128
        self._next_attempt = 0.0
        self._last_problem = ""
        # First key of a batch_exists batch -> the lease pinning its hits
        # until batch_get_v1 of the same batch (SGLang splits both alike).
        self._leases: "OrderedDict[str, int]" = OrderedDict()
        self._lease_lock = threading.Lock()

    # ---- setup ----

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Describes the host pool for kvstashd and registers it. A pool this
        backend cannot serve raises (SGLang's start fails with the reason); a
        kvstashd that is not there yet does not: the backend misses until it
        answers."""
        super().register_mem_pool_host(mem_pool_host)
        layout = describe_pool(mem_pool_host)
        fd = getattr(mem_pool_host, "fd", None)
        if not isinstance(fd, int) or fd < 0:
            raise LayoutError(
                "the host pool is not in a memfd: start SGLang with \"allocator\": \"shm\" in "
                "--hicache-storage-backend-extra-config (SGLang 0.5.17 or later)"
            )
        fd_bytes = os.fstat(fd).st_size
        base = pool_buffer(mem_pool_host).data_ptr()
        end = max(offset + g.extent_bytes() for offset, g in layout.layers)
        if end > fd_bytes:
            raise LayoutError(
                f"the host pool's layers reach byte {end} but its memfd holds {fd_bytes} bytes"
            )
        check_against_sglang(mem_pool_host, layout, base)
        self.layout, self._fd, self._fd_bytes = layout, fd, fd_bytes
        self.stats.page_bytes = layout.page_bytes
        self._connect(first=True)

    def _problem(self, text: str) -> None:
        if text != self._last_problem:
            logger.warning("kvstash HiCache backend: %s", text)
            self._last_problem = text

    def _connect(self, first: bool = False) -> Optional[Any]:
        """The registration, connecting and registering when there is none
        (at most once per reconnect interval); None while that fails."""
        registration = self._registration
        if registration is not None or self.layout is None:
            return registration
        now = time.monotonic()
        if not first and now < self._next_attempt:
            return None
        if not self._lock.acquire(blocking=False):
            return None  # another thread is connecting: miss now rather than wait
        try:
            if self._registration is not None:
                return self._registration
            self._next_attempt = now + self.settings.reconnect_interval_s
            return self._register()
        finally:
            self._lock.release()

    def _register(self) -> Optional[Any]:
        layout = self.layout
        client = None
        try:
            client = kvstash.Client(socket=self.settings.socket, timeout_ms=self.settings.timeout_ms,
                                    name=f"sglang-tp{self.config.tp_rank}")
            info = client.server_info
            if info.chunk_tokens != layout.page_size:
                self._problem(
                    f"kvstashd stores chunks of {info.chunk_tokens} tokens but SGLang's pages hold "
                    f"{layout.page_size}: start kvstashd with --chunk-tokens {layout.page_size} "
                    "(the backend misses until then)")
                client.close()
                return None
            if info.backend != "host":
                self._problem(
                    f"kvstashd runs the {info.backend} backend; SGLang's host pool is host memory: "
                    "serve it from a kvstashd with --backend host (the backend misses until then)")
                client.close()
                return None
            registration = client.register_descriptor(
                self._fd, self._fd_bytes, layout.layers, model=self.model,
                tenant=self.settings.tenant, tp_rank=self.config.tp_rank,
                tp_size=max(1, self.config.tp_size), replicated_across_ranks=self.is_mla)
        except Exception as error:  # noqa: BLE001 - never raise into SGLang's threads
            self.stats.count("unavailable")
            self._problem(f"kvstashd is not serving ({error}); misses until it is")
            if client is not None:
                client.close()
            return None
        self._max_chunks = max(1, min(128, info.max_chunks_per_request))
        self._client, self._registration = client, registration
        self.stats.count("reconnects")
        self._last_problem = ""
        logger.info("kvstash HiCache backend: registered the %s %s host pool (%d pages of %d "
                    "tokens, %d bytes each) as %s, registration %d", layout.kind.upper(),
                    layout.layout, layout.num_pages, layout.page_size, layout.page_bytes,
                    self.model, registration.id)
        return registration

    def _drop(self, error: BaseException) -> None:
        """After an error that a new registration may cure (the registration
        is gone: the daemon restarted with another layout, or dropped us)."""
        self.stats.count("errors")
        if isinstance(error, (errors.NotFound, errors.Unavailable)):
            with self._lock:
                client, self._client, self._registration = self._client, None, None
                self._next_attempt = time.monotonic() + self.settings.reconnect_interval_s
            with self._lease_lock:
                self._leases.clear()
            if client is not None:
                try:
                    client.close()
                except Exception:  # noqa: BLE001 - closing a broken client
                    pass
        self._problem(f"a request to kvstashd failed ({type(error).__name__}: {error})")

    def _pages(self, host_indices: Any, count: int) -> Optional[List[int]]:
        """Host page index of each of `count` pages, or None (logged) when the
        indices are not whole pages of this pool. In numpy: a handful of
        torch dispatches cost more than the check itself on every call."""
        layout = self.layout
        T = layout.page_size
        try:
            import numpy as np

            indices = np.asarray(host_indices.detach().cpu().reshape(-1).numpy(), dtype=np.int64)
            if indices.size != count * T:
                raise ValueError(f"{indices.size} host indices for {count} pages of {T} tokens")
            rows = indices.reshape(count, T)
            first = rows[:, 0]
            if count and (bool((first % T).any())
                          or bool((rows - first[:, None] != np.arange(T)).any())):
                raise ValueError("host indices are not whole, aligned pages")
            pages = (first // T).tolist()
            if pages and (min(pages) < 0 or max(pages) >= layout.num_pages):
                raise ValueError(f"host pages {min(pages)}..{max(pages)} outside 0..{layout.num_pages - 1}")
            return pages
        except (ValueError, RuntimeError, AttributeError, TypeError) as error:
            self.stats.count("errors")
            self._problem(f"refused a page list: {error}")
            return None

    # ---- leases: hits pinned from batch_exists to batch_get_v1 ----

    def _hold(self, registration: Any, first_key: str, lease_id: int) -> None:
        if not lease_id:
            return
        stale = []
        with self._lease_lock:
            previous = self._leases.pop(first_key, None)
            if previous:
                stale.append(previous)
            self._leases[first_key] = lease_id
            while len(self._leases) > _MAX_LEASES:
                stale.append(self._leases.popitem(last=False)[1])
        for lease in stale:
            self._release(registration, lease)

    def _let_go(self, registration: Any, first_key: str) -> None:
        with self._lease_lock:
            lease = self._leases.pop(first_key, None)
        if lease:
            self._release(registration, lease)

    @staticmethod
    def _release(registration: Any, lease_id: int) -> None:
        """Sent without waiting for kvstashd's reply: nothing waits on a
        release, and a round trip would lengthen every batch_get_v1. A
        failure (the lease expired, the connection closed) needs nothing."""
        try:
            registration.release_async(lease_id)
        except Exception:  # noqa: BLE001 - an expired lease is already gone
            pass

    # ---- the interface_v1 data path ----

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """How many of keys, from the first, kvstashd holds (any tier)."""
        if not keys:
            return 0
        start = time.perf_counter()
        hit = 0
        registration = self._connect()
        if registration is not None:
            try:
                for at in range(0, len(keys), self._max_chunks):
                    part = keys[at:at + self._max_chunks]
                    blob = b"".join(key_bytes(k) for k in part)
                    found = registration.lookup(blob, lease_ms=self.settings.lease_ms,
                                                prefetch=True)
                    self._hold(registration, part[0], int(found.lease_id))
                    # Hits below L1 are being promoted into it; SGLang loads
                    # them next, so wait for them here (the protocol's way:
                    # ask again until none is pending), within the timeout.
                    deadline = start + self.settings.timeout_ms / 1e3
                    while found.prefetch_pending and time.perf_counter() < deadline:
                        time.sleep(0.001)
                        found = registration.lookup(blob, lease_ms=self.settings.lease_ms,
                                                    prefetch=True)
                        self._hold(registration, part[0], int(found.lease_id))
                    got = min(len(part), int(found.hit_chunks))
                    hit += got
                    if got < len(part):
                        break
            except Exception as error:  # noqa: BLE001 - the data path never raises
                self._drop(error)
        self.stats.exists(len(keys), hit, time.perf_counter() - start)
        return hit

    def batch_get_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        """Copies each key's page from kvstashd into its host page; False for
        a page kvstashd does not hold (or on any failure)."""
        start = time.perf_counter()
        results = self._transfer(keys, host_indices, retrieve=True)
        self.stats.get(len(keys), sum(results), time.perf_counter() - start)
        return results

    def batch_set_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        """Copies each host page into kvstashd under its key; True for a page
        stored or already there."""
        start = time.perf_counter()
        results = self._transfer(keys, host_indices, retrieve=False)
        self.stats.set(len(keys), sum(results), time.perf_counter() - start)
        return results

    def _transfer(self, keys: Sequence[str], host_indices: Any, retrieve: bool) -> List[bool]:
        results = [False] * len(keys)
        if not keys:
            return results
        registration = self._connect()
        if registration is None:
            return results
        pages = self._pages(host_indices, len(keys))
        if pages is None:
            return results
        good = (ChunkResult.RETRIEVED,) if retrieve else (ChunkResult.STORED,
                                                          ChunkResult.ALREADY_PRESENT)
        T = self.layout.page_size
        try:
            for at in range(0, len(keys), self._max_chunks):
                part = range(at, min(len(keys), at + self._max_chunks))
                chunks = registration.chunks_from_keys(
                    b"".join(key_bytes(keys[i]) for i in part), T, [[pages[i]] for i in part])
                outcomes = registration.retrieve(chunks) if retrieve else registration.store(chunks)
                if retrieve:
                    self._let_go(registration, keys[at])
                for i, outcome in zip(part, outcomes):
                    results[i] = outcome.result in good
                if retrieve and not all(results[i] for i in part):
                    break  # SGLang uses the leading run only
        except Exception as error:  # noqa: BLE001 - the data path never raises
            self._drop(error)
            if retrieve:
                return [False] * len(keys)
        return results

    # ---- the rest of HiCacheStorage ----

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        logger.error("kvstash HiCache backend: get() without interface_v1 is not supported")
        return None

    def batch_get(self, keys: List[str], target_locations: Any = None,
                  target_sizes: Any = None) -> Any:
        logger.error("kvstash HiCache backend: batch_get() without interface_v1 is not supported")
        return [None] * len(keys)

    def set(self, key: str, value: Any = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        logger.error("kvstash HiCache backend: set() without interface_v1 is not supported")
        return False

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        logger.error("kvstash HiCache backend: batch_set() without interface_v1 is not supported")
        return False

    def clear(self) -> None:
        """Drops the pages of this registration's scope from kvstashd's L1
        (as `kvstash clear` for this model; L2 and L3 keep theirs)."""
        client = self._client
        if client is None:
            return
        try:
            client.clear(model=self.model, tenant=self.settings.tenant)
        except Exception as error:  # noqa: BLE001
            self._problem(f"clear failed: {error}")

    def get_stats(self) -> Any:
        """SGLang's StorageMetrics since the last call (--enable-storage-metrics)."""
        return self.stats.drain()

    def kvstash_stats(self) -> dict:
        """Cumulative counters and latencies of this backend."""
        out = self.stats.snapshot()
        out["connected"] = self._registration is not None
        out["model"] = self.model
        return out

    def close(self) -> None:
        with self._lock:
            client, self._client, self._registration = self._client, None, None
        if client is not None:
            client.close()
