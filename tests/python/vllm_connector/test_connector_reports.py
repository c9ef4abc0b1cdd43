"""When KvstashConnector reports a load between steps finished (the step
that sees it in place, one step later, or after a bounded wait in a step
without a forward pass), and the per-request timeline both sides stamp,
against the real vLLM v1 Scheduler and a real kvstashd."""

from __future__ import annotations

import json
import threading
import time

import pytest

from vllm_support import vllm_or_skip

vllm_or_skip()

from test_connector import engine, prefix_hit, prompt, run_and_store  # noqa: E402
from test_connector_async import step_until_scheduled  # noqa: E402

from kvstash.integrations.vllm import SettingsError  # noqa: E402
from kvstash.integrations.vllm.timeline import read  # noqa: E402


def hit_engine(model_dir, daemon, **settings):
    """An engine with loads between steps that stored prompt a; returns
    (engine, b: a prompt whose first 96 tokens hit)."""
    e = engine(model_dir, daemon, extra={"async_loads": True, **settings})
    a = prompt(100)
    run_and_store(e, "a", a)
    b = a[:96] + prompt(20, salt=5)
    prefix_hit(e, "b", b)
    return e, b


def wait_landed(worker):
    """After start_load_kv: polls until every load of the worker landed."""
    side = worker.connector.worker_side
    deadline = time.monotonic() + 10
    while not all(side._async_done(p) for p in side._async_loads.values()):
        assert time.monotonic() < deadline, "the load never landed"
        time.sleep(0.001)


def received(e):
    return set().union(*(out.finished_recving or set() for out in e.last_outputs))


@pytest.mark.parametrize("board_completion", [True, False])
def test_a_load_in_place_is_reported_in_the_step_that_sees_it(model_dir, daemon,
                                                              board_completion):
    e, b = hit_engine(model_dir, daemon, board_completion=board_completion)
    e.step(after_start=wait_landed)
    assert received(e) == {"b"}
    new = step_until_scheduled(e, "b", limit=1)
    assert new.num_computed_tokens == 96
    assert e.workers[0].matches(e.scheduler.kv_cache_manager.get_block_ids("b"), b, 0, 96)
    assert e.workers[0].connector.worker_side.stats["load_chunks"] == 3
    e.run_until_idle()


def test_without_early_reports_a_load_is_reported_one_step_after_it_is_seen(model_dir, daemon):
    e, b = hit_engine(model_dir, daemon, early_reports=False)
    e.step(after_start=wait_landed)
    assert received(e) == set()
    e.step()
    assert received(e) == {"b"}
    assert step_until_scheduled(e, "b", limit=1).num_computed_tokens == 96
    e.run_until_idle()


def test_a_step_without_a_forward_pass_waits_for_a_load_landing_within_the_bound(model_dir,
                                                                                  daemon):
    e, b = hit_engine(model_dir, daemon, finish_wait_us=100_000)
    timer = threading.Timer(0.03, daemon.resume)
    so = e.step(before_load=daemon.pause, after_start=lambda w: timer.start())
    timer.join()
    assert so.total_num_scheduled_tokens == 0
    assert so.kv_connector_metadata.forward_tokens == 0
    assert received(e) == {"b"}
    assert step_until_scheduled(e, "b", limit=1).num_computed_tokens == 96
    e.run_until_idle()


def test_the_wait_ends_at_its_bound_and_the_load_is_reported_later(model_dir, daemon):
    e, b = hit_engine(model_dir, daemon, finish_wait_us=20_000)
    began = time.monotonic()
    e.step(before_load=daemon.pause)
    took = time.monotonic() - began
    daemon.resume()
    assert received(e) == set()
    assert took < 5, "the step waited far past finish_wait_us"
    assert step_until_scheduled(e, "b").num_computed_tokens == 96
    assert e.workers[0].matches(e.scheduler.kv_cache_manager.get_block_ids("b"), b, 0, 96)
    e.run_until_idle()


def test_a_timeline_stamps_a_hit_in_order_on_one_clock(model_dir, daemon, tmp_path):
    path = tmp_path / "timeline.jsonl"
    began = time.monotonic_ns()
    e, b = hit_engine(model_dir, daemon, timeline_file=str(path))
    step_until_scheduled(e, "b")
    e.run_until_idle()
    stamps = {}
    for event in read(str(path)):
        if event["req"] == "b":
            stamps.setdefault(event["event"], event)
    order = ["lookup", "alloc", "load_issued", "load_done", "load_reported", "recv_reported",
             "scheduled"]
    assert list(stamps) == order
    times = [stamps[name]["ns"] for name in order]
    assert times == sorted(times) and began <= times[0] <= time.monotonic_ns()
    assert {stamps[n]["side"] for n in ("lookup", "alloc", "recv_reported", "scheduled")} \
        == {"scheduler"}
    assert {stamps[n]["side"] for n in ("load_issued", "load_done", "load_reported")} \
        == {"worker"}
    # The first request stored its chunks: its stores were stamped too.
    assert any(json.loads(line)["event"] == "store_issued" for line in path.read_text().splitlines())


def test_settings_can_change_between_requests_and_bad_ones_are_refused(model_dir, daemon):
    e, b = hit_engine(model_dir, daemon)
    worker = e.workers[0].connector
    worker.apply_settings(early_reports=False)
    assert worker.worker_side._settings.early_reports is False
    with pytest.raises(SettingsError, match="finish_wait_us"):
        worker.apply_settings(finish_wait_us=10**9)
    e.connector.apply_settings(async_loads=False)
    so = e.step()
    (load,) = so.kv_connector_metadata.loads
    assert not load.async_load
    assert e.workers[0].matches(e.scheduler.kv_cache_manager.get_block_ids("b"), b, 0, 96)
    e.run_until_idle()
