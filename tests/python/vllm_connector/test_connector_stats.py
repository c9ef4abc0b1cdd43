"""KvstashConnector's figures as vLLM's KV connector stats, through the real
vLLM v1 Scheduler (which merges the workers' stats with the scheduler's into
SchedulerStats), vLLM's serialisation and vLLM's own stats logging."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from vllm_support import vllm_or_skip

vllm_or_skip()

from test_connector import clear_chunks, engine, prefix_hit, prompt, run_and_store  # noqa: E402
from vllm_harness import Engine  # noqa: E402

from kvstash.integrations.vllm import KvstashConnector  # noqa: E402
from kvstash.integrations.vllm.stats import COUNTERS, SAMPLES, KvstashConnectorStats  # noqa: E402

DOCS = Path(__file__).resolve().parents[3] / "docs" / "vllm.md"


def interval(e: Engine) -> KvstashConnectorStats:
    """Every step's payload so far, rebuilt and merged as vLLM's front end does."""
    total = KvstashConnector.build_kv_connector_stats()
    for payload in e.connector_stats:
        total = total.aggregate(KvstashConnector.build_kv_connector_stats(payload))
    return total


def hit_after_store(e: Engine):
    a = prompt(100)
    run_and_store(e, "a", a)  # 3 chunks stored
    prefix_hit(e, "b", a[:96] + prompt(20, salt=5))
    e.run_until_idle()


@pytest.mark.parametrize("async_loads", [True, False])
def test_loaded_chunks_equal_the_hits_and_every_figure_is_sane(model_dir, daemon, async_loads):
    e = engine(model_dir, daemon, extra={"async_loads": async_loads})
    hit_after_store(e)
    stats = interval(e).data
    chunk_bytes = e.workers[0].connector.worker_side.registrations[0].chunk_bytes
    assert stats["hit_requests"] == 1
    assert stats["hit_tokens"] == 96
    assert stats["hit_chunks"] == stats["load_chunks"] == 3
    assert stats["load_bytes"] == 3 * chunk_bytes
    assert stats["store_chunks"] == 3 and stats["store_bytes"] == 3 * chunk_bytes
    assert stats["lookups"] == 2  # a (a miss) and b
    for name in ("lookup_failures", "load_failed_chunks", "store_failed_chunks",
                 "stores_skipped", "chain_gaps", "unwaited_ranges"):
        assert stats[name] == 0, name
    assert len(stats["lookup_ms"]) == 2
    assert len(stats["load_ms"]) == 1 and len(stats["store_ms"]) == 2  # a stored in two steps
    for name in SAMPLES:
        assert stats[name] and all(0 < ms < 10_000 for ms in stats[name]), name
    # The totals the connector keeps agree with what vLLM collected.
    worker = e.workers[0].connector.worker_side
    assert worker.stats["load_chunks"] == 3 and worker.stats["store_chunks"] == 3


def test_each_tensor_parallel_rank_counts_its_own_loads(model_dir, daemon):
    e = engine(model_dir, daemon, tp_size=2)
    hit_after_store(e)
    stats = interval(e).data
    assert stats["hit_chunks"] == 3
    assert stats["load_chunks"] == 6 and stats["store_chunks"] == 6
    assert len(stats["load_ms"]) == 2  # one load per rank


def test_chunks_gone_before_the_load_are_counted_as_failed(model_dir, daemon):
    e = engine(model_dir, daemon, extra={"lease_ms": 1})
    a = prompt(100)
    run_and_store(e, "a", a)
    prefix_hit(e, "b", a[:96] + [5, 6, 7])
    e.step(before_load=lambda: clear_chunks(daemon, 3))
    e.run_until_idle()
    stats = interval(e).data
    assert stats["hit_chunks"] == 3
    assert stats["load_chunks"] == 0 and stats["load_failed_chunks"] == 3


def test_the_stats_cross_processes_as_vllm_sends_them(model_dir, daemon):
    from vllm.v1.engine import EngineCoreOutputs
    from vllm.v1.metrics.stats import SchedulerStats
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    e = engine(model_dir, daemon)
    hit_after_store(e)
    assert e.connector_stats
    for payload in e.connector_stats:
        # Engine core to front end: msgpack, inside EngineCoreOutputs.
        outputs = EngineCoreOutputs(scheduler_stats=SchedulerStats(kv_connector_stats=payload))
        decoded = MsgpackDecoder(EngineCoreOutputs).decode(MsgpackEncoder().encode(outputs))
        assert decoded.scheduler_stats.kv_connector_stats == payload
    # Worker to engine core: the stats object itself, pickled.
    worker = e.workers[0].connector
    worker.worker_side.recorder.count("load_chunks", 2)
    stats = worker.get_kv_connector_stats()
    assert pickle.loads(pickle.dumps(stats)).data == stats.data
    # Nothing happened since: no stats to send.
    assert worker.get_kv_connector_stats() is None


def test_vllms_stats_logging_prints_the_reduced_figures(model_dir, daemon):
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorLogging

    e = engine(model_dir, daemon)
    hit_after_store(e)
    logging = KVConnectorLogging(e.scheduler.vllm_config.kv_transfer_config)
    for payload in e.connector_stats:
        logging.observe(payload)
    lines = []
    logging.log(lambda fmt, *args: lines.append(fmt % args))
    (line,) = lines
    assert "load_chunks=3" in line and "hit_tokens=96" in line and "store_chunks=3" in line
    assert "lookup_ms_avg=" in line and "worker_step_ms_p90=" in line
    assert "load_failed_chunks" not in line  # zero counters are left out


def test_aggregation_keeps_samples_bounded_and_tolerates_unknown_names():
    from kvstash.integrations.vllm.stats import MAX_SAMPLES

    stats = KvstashConnectorStats()
    assert stats.is_empty()
    for i in range(3 * MAX_SAMPLES):
        stats.observe("load_ms", float(i))
    assert MAX_SAMPLES // 2 <= len(stats.data["load_ms"]) <= MAX_SAMPLES
    other = KvstashConnectorStats(data={"load_chunks": 4, "some_future_counter": 1})
    stats.aggregate(other)
    assert stats.data["load_chunks"] == 4 and "some_future_counter" not in stats.data
    stats.reset()
    assert stats.is_empty()


def test_every_figure_is_documented():
    text = DOCS.read_text()
    for name in list(COUNTERS) + list(SAMPLES):
        assert f"`{name}`" in text, f"docs/vllm.md does not document {name}"
