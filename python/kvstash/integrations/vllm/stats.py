"""The connector's figures as vLLM's KV connector stats: counters and
latency samples, declared once here, recorded by the scheduler and worker
sides, merged by vLLM (across ranks and with the scheduler's) and logged as
"KV Transfer metrics: ..." (docs/vllm.md, "Stats").

vLLM moves the stats between processes (worker to engine core by pickle,
engine core to the front end by msgpack), so `data` holds only str keys,
ints and lists of floats.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, TypeVar

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

COUNTERS: Dict[str, str] = {
    # scheduler side
    "lookups": "Lookup requests sent to kvstashd (one per KV cache group)",
    "lookup_failures": "lookups that failed (daemon down, timeout): served as misses",
    "lookups_truncated": ("lookups whose hit kvstashd cut short at its leased-bytes budget "
                          "(--max-leased-share): the stored rest is recomputed"),
    "hit_requests": "requests given a load from kvstash",
    "hit_tokens": "tokens those loads bring (past vLLM's own prefix hit)",
    "hit_chunks": "chunks those loads bring, summed over KV cache groups",
    # worker side, summed over tensor-parallel ranks
    "load_chunks": "chunks loaded (every rank loads its own)",
    "load_bytes": "bytes written into vLLM's blocks by loads",
    "load_failed_chunks": "chunks not loaded (missing, failed, timed out): their blocks recomputed",
    "load_fallbacks": "in-step loads that waited on the CPU (completion board full)",
    "layer_waits": "per-layer stream waits enqueued for in-step loads",
    "unwaited_ranges": "layer ranges whose wait was never called: recomputed",
    "store_chunks": "chunks stored, or found already stored",
    "store_bytes": "bytes copied out of vLLM's blocks by stores",
    "store_failed_chunks": "chunks not stored (no room, failed, refused)",
    "stores_skipped": "stores not sent: a failed load in the step, a full board, a key chain gap",
    "chain_gaps": "stores of new chunks whose key chain this worker did not hold: skipped",
}
"""Counters: summed over steps, ranks and the scheduler."""

SAMPLES: Dict[str, str] = {
    "lookup_ms": "one request's lookup, every KV cache group (scheduler)",
    "load_ms": ("a load from its issue until its bytes are known in place (its board slot, "
                "or its reply), per request and group"),
    "store_ms": "a store from its issue to its reply (per request and group)",
    "scheduler_step_ms": "the scheduler's time in the connector's hooks, per step with kvstash work",
    "worker_step_ms": "a worker's time in the connector's hooks, per step with kvstash work",
}
"""Samples in milliseconds: reduced to their mean and 90th percentile."""

MAX_SAMPLES = 4096
"""Samples kept per figure and interval: past it every other one is dropped,
so a stats object never grows without bound if vLLM stops collecting it."""


@dataclass
class KvstashConnectorStats(KVConnectorStats):
    """KvstashConnector's figures of one interval. Not thread-safe: each
    side records on the engine thread that calls the connector's hooks."""

    def __post_init__(self) -> None:
        data = dict(self.data or {})
        for name in COUNTERS:
            data[name] = int(data.get(name, 0))
        for name in SAMPLES:
            data[name] = [float(x) for x in data.get(name, ())]
        self.data = data

    def reset(self) -> None:
        self.data = {}
        self.__post_init__()

    def count(self, name: str, n: int = 1) -> None:
        self.data[name] += n

    def observe(self, name: str, ms: float) -> None:
        samples = self.data[name]
        samples.append(ms)
        if len(samples) > MAX_SAMPLES:
            del samples[::2]

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        # Another kvstash version's figures may lack (or add) names: merge
        # what both know.
        for name in COUNTERS:
            self.data[name] += int(other.data.get(name, 0))
        for name in SAMPLES:
            for ms in other.data.get(name, ()):
                self.observe(name, float(ms))
        return self

    def reduce(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for name in COUNTERS:
            value = self.data[name]
            if not value:
                continue
            if name.endswith("_bytes"):
                out[name[:-len("_bytes")] + "_MiB"] = round(value / (1 << 20), 3)
            else:
                out[name] = value
        for name in SAMPLES:
            samples = sorted(self.data[name])
            if samples:
                out[name + "_avg"] = round(sum(samples) / len(samples), 3)
                out[name + "_p90"] = round(samples[min(len(samples) - 1,
                                                       int(0.9 * len(samples)))], 3)
        return out

    def is_empty(self) -> bool:
        return (not any(self.data[name] for name in COUNTERS)
                and not any(self.data[name] for name in SAMPLES))

    def take(self) -> Optional["KvstashConnectorStats"]:
        """This interval's figures (None if there are none), and a new interval."""
        if self.is_empty():
            return None
        taken = KvstashConnectorStats(data=self.data)
        self.reset()
        return taken


class Recorder:
    """One side's figures: the interval vLLM collects (get_kv_connector_stats)
    and running totals (`totals`, for tests and benchmarks), and the time the
    engine thread spends in the connector's hooks per step."""

    def __init__(self, step_sample: str) -> None:
        self.interval = KvstashConnectorStats()
        self.totals: Dict[str, int] = {name: 0 for name in COUNTERS}
        self._step_sample = step_sample
        self._step_ns = 0
        self.step_has_work = False
        """Set by a hook that had loads, stores or lookups to do: only such
        steps give a step-time sample (idle steps cost microseconds)."""

    def count(self, name: str, n: int = 1) -> None:
        self.totals[name] += n
        self.interval.count(name, n)

    def observe(self, name: str, ms: float) -> None:
        self.interval.observe(name, ms)

    def add_hook_time(self, since_ns: int) -> None:
        """A hook that began at time.perf_counter_ns() == since_ns returns."""
        self._step_ns += time.perf_counter_ns() - since_ns

    def take(self) -> Optional[KvstashConnectorStats]:
        """get_kv_connector_stats: ends the step and the interval."""
        if self.step_has_work:
            self.observe(self._step_sample, self._step_ns / 1e6)
        self._step_ns = 0
        self.step_has_work = False
        return self.interval.take()


_Hook = TypeVar("_Hook", bound=Callable[..., Any])


def timed_hook(method: _Hook) -> _Hook:
    """Counts the time spent in a connector hook toward its side's time per
    step (the object's `recorder`, a Recorder)."""

    @functools.wraps(method)
    def hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter_ns()
        try:
            return method(self, *args, **kwargs)
        finally:
            self.recorder.add_hook_time(began)

    return hook  # type: ignore[return-value]
