"""What the backend did: cumulative counters for people (`snapshot()`), and
the per-call figures SGLang's --enable-storage-metrics logs (`drain()`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List


def _percentile(values: List[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class _Window:
    """The latest latencies (seconds) of one call, for percentiles."""

    values: List[float] = field(default_factory=list)
    limit: int = 1024

    def add(self, seconds: float) -> None:
        self.values.append(seconds)
        if len(self.values) > self.limit:
            del self.values[: len(self.values) - self.limit]


class BackendStats:
    """Thread-safe: SGLang calls the backend from its prefetch, prefetch-I/O
    and backup threads."""

    def __init__(self, page_bytes: int = 0) -> None:
        self._lock = threading.Lock()
        self.page_bytes = page_bytes
        self.counters: Dict[str, int] = {
            "exists_calls": 0, "exists_pages_asked": 0, "exists_pages_hit": 0,
            "get_calls": 0, "get_pages_asked": 0, "get_pages_hit": 0, "get_bytes": 0,
            "set_calls": 0, "set_pages_asked": 0, "set_pages_stored": 0, "set_bytes": 0,
            "errors": 0, "unavailable": 0, "reconnects": 0,
        }
        self._latency = {"exists": _Window(), "get": _Window(), "set": _Window()}
        # Drained by SGLang's storage metrics: pages and GB/s per call.
        self._prefetch_pgs: List[int] = []
        self._prefetch_bw: List[float] = []
        self._backup_pgs: List[int] = []
        self._backup_bw: List[float] = []

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counters[name] += n

    def exists(self, asked: int, hit: int, seconds: float) -> None:
        with self._lock:
            self.counters["exists_calls"] += 1
            self.counters["exists_pages_asked"] += asked
            self.counters["exists_pages_hit"] += hit
            self._latency["exists"].add(seconds)

    def get(self, asked: int, hit: int, seconds: float) -> None:
        with self._lock:
            self.counters["get_calls"] += 1
            self.counters["get_pages_asked"] += asked
            self.counters["get_pages_hit"] += hit
            self.counters["get_bytes"] += hit * self.page_bytes
            self._latency["get"].add(seconds)
            if hit:
                self._prefetch_pgs.append(hit)
                self._prefetch_bw.append(hit * self.page_bytes / max(seconds, 1e-9) / 1e9)

    def set(self, asked: int, stored: int, seconds: float) -> None:
        with self._lock:
            self.counters["set_calls"] += 1
            self.counters["set_pages_asked"] += asked
            self.counters["set_pages_stored"] += stored
            self.counters["set_bytes"] += stored * self.page_bytes
            self._latency["set"].add(seconds)
            if stored:
                self._backup_pgs.append(stored)
                self._backup_bw.append(stored * self.page_bytes / max(seconds, 1e-9) / 1e9)

    def snapshot(self) -> Dict[str, Any]:
        """Counters since start and p50/p90/p99 latency (ms) of the latest calls."""
        with self._lock:
            out: Dict[str, Any] = dict(self.counters)
            for name, window in self._latency.items():
                for q in (0.5, 0.9, 0.99):
                    out[f"{name}_p{int(q * 100)}_ms"] = round(_percentile(window.values, q) * 1e3, 3)
            return out

    def drain(self) -> Any:
        """SGLang's StorageMetrics of the calls since the last drain, or None
        where this SGLang has no such class."""
        try:
            from sglang.srt.observability.metrics_collector import StorageMetrics
        except ImportError:
            return None
        metrics = StorageMetrics()
        with self._lock:
            metrics.prefetch_pgs.extend(self._prefetch_pgs)
            metrics.prefetch_bandwidth.extend(self._prefetch_bw)
            metrics.backup_pgs.extend(self._backup_pgs)
            metrics.backup_bandwidth.extend(self._backup_bw)
            self._prefetch_pgs, self._prefetch_bw = [], []
            self._backup_pgs, self._backup_bw = [], []
        return metrics
