"""KvstashConnector's loads and stores on the forward pass's stream (here,
on host tensors: the same slots, waited for by the CPU) against the real
vLLM Scheduler and a real kvstashd. kvstashd is paused (SIGSTOP) to
hold a load or store in flight, and killed to lose one."""

from __future__ import annotations

import threading
import time

import pytest

from vllm_support import vllm_or_skip

vllm_or_skip()

import torch  # noqa: E402

from test_connector import clear_chunks, engine, prefix_hit, prompt, run_and_store  # noqa: E402
from vllm_harness import BLOCK_SIZE, make_request  # noqa: E402

import kvstash  # noqa: E402
from kvstash.integrations.vllm import KvstashConnector, SettingsError  # noqa: E402
from kvstash.integrations.vllm.worker import layer_ranges  # noqa: E402


def later(seconds, fn):
    timer = threading.Timer(seconds, fn)
    timer.start()
    return timer


def stream_requests(worker):
    """The StreamRequests of this step's loads on one worker."""
    return [load.request for load in worker.connector.worker_side._step.loads]


def test_each_layer_is_in_place_when_its_own_wait_returns(model_dir, daemon):
    e = engine(model_dir, daemon)
    a = prompt(100)
    run_and_store(e, "a", a)
    b = a[:96] + [5, 5, 5]
    prefix_hit(e, "b", b)
    worker = e.workers[0]
    side = worker.connector.worker_side
    names = list(worker.kv_caches)
    seen = {}

    def after_start(w):
        # start_load_kv returned although kvstashd answers nothing.
        seen["start_s"] = time.monotonic() - seen["t0"]
        (request,) = stream_requests(w)
        # One slot per attention layer.
        assert request.signal.count == len(names) == 2
        assert not request.released(0)
        seen["timer"] = later(0.3, daemon.resume)

    def after_layer_wait(w, name):
        block_ids = e.scheduler.kv_cache_manager.get_block_ids("b")
        # This layer's bytes are there the moment its wait returns...
        assert w.matches(block_ids, b, 0, 96, layers=[name]), name
        seen.setdefault("order", []).append(name)
        # ...and a second wait for it in the step adds nothing.
        waits = side.stats["layer_waits"]
        w.connector.wait_for_layer_load(name)
        assert side.stats["layer_waits"] == waits

    def pause():
        daemon.pause()
        seen["t0"] = time.monotonic()

    so = e.step(before_load=pause, after_start=after_start, after_layer_wait=after_layer_wait)
    seen["timer"].join()
    assert seen["start_s"] < 1.0, "start_load_kv waited for kvstashd (timeout_ms is 5 s)"
    assert seen["order"] == names
    assert side.stats["layer_waits"] == 2  # once per layer and step
    assert so.scheduled_new_reqs[0].num_computed_tokens == 96
    assert e.last_outputs[0].invalid_block_ids == set()
    assert side.stats["load_chunks"] == 3
    e.run_until_idle()


def test_layerwise_loads_off_uses_one_slot_waited_before_the_first_layer(model_dir, daemon):
    e = engine(model_dir, daemon, extra={"layerwise_loads": False})
    a = prompt(100)
    run_and_store(e, "a", a)
    b = a[:96] + [6]
    prefix_hit(e, "b", b)

    def after_start(w):
        (request,) = stream_requests(w)
        assert request.signal.count == 1
        # CPU tensors: start_load_kv itself waited, every layer is in place.
        assert request.released(0)
        assert w.matches(e.scheduler.kv_cache_manager.get_block_ids("b"), b, 0, 96)

    e.step(after_start=after_start, skip_waits=set(e.workers[0].kv_caches))
    assert e.last_outputs[0].invalid_block_ids == set()
    assert not KvstashConnector.requires_piecewise_for_cudagraph(
        {"async_loads": False, "layerwise_loads": False})
    assert KvstashConnector.requires_piecewise_for_cudagraph({"async_loads": False})
    # Loads between steps (the default) wait for nothing in the forward pass.
    assert not KvstashConnector.requires_piecewise_for_cudagraph({})
    e.run_until_idle()


def test_a_layer_whose_wait_was_skipped_is_reported_not_trusted(model_dir, daemon):
    # An engine that skips the per-layer hooks (a full CUDA graph) with
    # layerwise_loads on: the layer's attention may have read unloaded KV.
    e = engine(model_dir, daemon)
    a = prompt(100)
    run_and_store(e, "a", a)
    prefix_hit(e, "b", a[:96] + [7])
    skipped = list(e.workers[0].kv_caches)[1]
    so = e.step(skip_waits={skipped})
    (load,) = so.kv_connector_metadata.loads
    assert e.last_outputs[0].invalid_block_ids == set(load.block_ids[0][:6])
    assert e.workers[0].connector.worker_side.stats["unwaited_ranges"] == 1
    assert e.scheduler.requests["b"].num_computed_tokens < 96
    e.run_until_idle()


def test_a_load_cut_off_by_a_killed_daemon_is_reported_and_never_hangs(model_dir, daemon):
    e = engine(model_dir, daemon, extra={"timeout_ms": 1000})
    a = prompt(100)
    run_and_store(e, "a", a)
    prefix_hit(e, "b", a[:96] + [8])
    timers = []

    def after_start(w):
        # The load is queued; kvstashd dies before answering.
        timers.append(later(0.1, daemon.kill))

    start = time.monotonic()
    so = e.step(before_load=daemon.pause, after_start=after_start)
    elapsed = time.monotonic() - start
    timers[0].join()
    (load,) = so.kv_connector_metadata.loads
    # Every block the load should have filled is reported: vLLM recomputes.
    assert e.last_outputs[0].invalid_block_ids == set(load.block_ids[0][:6])
    assert e.scheduler.requests["b"].num_computed_tokens < 96
    # The waits ended with libkvstash's timeout (1 s), not never.
    assert elapsed < 5, elapsed
    e.run_until_idle(timeout_s=60)
    assert "b" not in e.scheduler.requests


def test_a_failed_load_publishes_nothing_computed_from_it(model_dir, daemon):
    # lease_ms=1 lets a clear between lookup and load drop the chunks; b
    # also computes its chunk 3 in the same step, on top of the unloaded KV.
    e = engine(model_dir, daemon, extra={"lease_ms": 1})
    a = prompt(100)
    run_and_store(e, "a", a)
    b = a[:96] + prompt(40, salt=11)
    prefix_hit(e, "b", b)

    so = e.step(before_load=lambda: clear_chunks(daemon, 3))
    (store,) = so.kv_connector_metadata.stores
    assert (store.start_chunk, store.num_chunks) == (3, 1)
    assert e.last_outputs[0].invalid_block_ids
    side = e.workers[0].connector.worker_side
    assert side.stats["stores_skipped"] == 1
    e.run_until_idle()
    e.settle_stores()
    reg = side.registrations[0]
    chunk3 = reg.chunk_keys(b[:128])[3]
    assert reg.lookup([chunk3]).hit_chunks == 0, "KV computed from a failed load was stored"


def test_a_finished_request_keeps_its_blocks_while_its_store_is_in_flight(model_dir, daemon):
    e = engine(model_dir, daemon, extra={"timeout_ms": 5000})
    pool = e.scheduler.kv_cache_manager.block_pool
    free_before = pool.get_num_free_blocks()
    e.scheduler.add_request(make_request("a", prompt(100), max_tokens=1))
    # kvstashd stops answering once the first step is scheduled: every
    # store of this request stays in flight.
    e.step(before_load=daemon.pause)
    for _ in range(6):
        e.step()
        if "a" in e.scheduler.requests and e.scheduler.requests["a"].is_finished():
            break
    request = e.scheduler.requests.get("a")
    assert request is not None and request.is_finished()
    for _ in range(3):
        e.step()
        assert "a" in e.scheduler.requests, "freed while its store was in flight"
        assert pool.get_num_free_blocks() < free_before
        assert e.connector.has_pending_push_work()
    for out in e.last_outputs:
        assert not out.finished_sending
    daemon.resume()
    e.run_until_idle()
    assert pool.get_num_free_blocks() == free_before
    e.settle_stores()
    assert e.workers[0].connector.worker_side.stats["store_chunks"] == 3


def test_stores_are_submitted_once_every_layer_was_saved(model_dir, daemon):
    e = engine(model_dir, daemon)
    side = e.workers[0].connector.worker_side
    e.scheduler.add_request(make_request("a", prompt(100), max_tokens=1))
    names = list(e.workers[0].kv_caches)
    submitted = []

    def after_save(w, name):
        submitted.append(sum(len(v) for v in side._stores.values()) + len(side._replies))

    e.step(after_save=after_save)
    # After layer 0's save: nothing; the store went out with the last
    # layer's save_kv_layer, before wait_for_save.
    assert len(names) == 2
    assert submitted == [0, 1]
    e.run_until_idle()
    e.settle_stores()
    assert side.stats["store_chunks"] == 3


@pytest.mark.parametrize("layers, wanted, ranges", [(2, 2, 2), (80, 80, 80), (300, 300, 256),
                                                     (61, 1, 1), (1000, 1000, 256)])
def test_layers_map_to_kvstashs_ranges_at_most_256(layers, wanted, ranges):
    range_of = layer_ranges(layers, wanted)
    assert max(range_of) + 1 == ranges <= kvstash.max_layer_ranges() == 256
    for k in range(ranges):  # range k: layers [k*L//R, (k+1)*L//R), kvstashd's split
        assert [i for i, r in enumerate(range_of) if r == k] == list(
            range(k * layers // ranges, (k + 1) * layers // ranges))


def test_a_registration_of_300_layers_loads_with_256_ranges(model_dir, daemon):
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    names = [f"model.layers.{i}.self_attn.attn" for i in range(300)]
    spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=1, head_size=8,
                             dtype=torch.float16)
    e = engine(model_dir, daemon, specs={n: spec for n in names})
    a = prompt(100)
    run_and_store(e, "a", a)
    b = a[:64] + [1]
    prefix_hit(e, "b", b)
    side = e.workers[0].connector.worker_side
    counts = []

    def after_start(w):
        counts.extend(r.signal.count for r in stream_requests(w))

    e.step(after_start=after_start)
    assert counts == [256]
    assert side.stats["layer_waits"] == 256  # one per range: 44 ranges hold 2 layers
    assert e.workers[0].matches(e.scheduler.kv_cache_manager.get_block_ids("b"), b, 0, 64)
    assert e.last_outputs[0].invalid_block_ids == set()
    e.run_until_idle()


@pytest.mark.parametrize("extra, message", [
    ({"layerwise_loads": "yes"}, "must be true or false"),
    ({"board_slots": 1}, "outside 2..4096"),
    ({"board_slots": 5000}, "outside 2..4096"),
])
def test_bad_stream_settings_are_refused(model_dir, daemon, extra, message):
    with pytest.raises(SettingsError, match=message):
        engine(model_dir, daemon, extra=extra)


def test_a_full_board_falls_back_to_a_cpu_wait_and_still_loads(model_dir, daemon):
    # Stored by an engine with the default board: with two slots a store
    # still holding both when the next step stores would be skipped.
    a1, a2 = prompt(100, salt=1), prompt(100, salt=2)
    storer = engine(model_dir, daemon)
    run_and_store(storer, "a1", a1)
    run_and_store(storer, "a2", a2)
    # Two slots: the step's first load takes both, the second finds none.
    # A load gives its slots back with its reply: kvstashd is paused until
    # both loads were issued, so the first still holds them when the second
    # asks, however the threads of this process are scheduled.
    e = engine(model_dir, daemon, extra={"board_slots": 2})
    b1, b2 = a1[:96] + [2], a2[:96] + [3]
    prefix_hit(e, "b1", b1)
    e.scheduler.add_request(make_request("b2", b2, max_tokens=2))
    side = e.workers[0].connector.worker_side
    so = e.step(before_load=daemon.pause, after_start=lambda w: daemon.resume())
    assert len(so.kv_connector_metadata.loads) == 2
    assert side.stats["load_fallbacks"] == 1
    for req_id, tokens in (("b1", b1), ("b2", b2)):
        assert e.workers[0].matches(e.scheduler.kv_cache_manager.get_block_ids(req_id), tokens,
                                    0, 96)
    assert e.last_outputs[0].invalid_block_ids == set()
    e.run_until_idle()


def test_without_a_board_loads_and_stores_wait_on_the_cpu(model_dir, daemon, monkeypatch):
    # A GPU whose driver lacks stream memory operations gets Unavailable at
    # board creation: the connector still stores and loads, waiting on the CPU.
    import kvstash

    def no_board(*args, **kwargs):
        raise kvstash.Unavailable(8, "no stream memory operations on this driver")

    monkeypatch.setattr(kvstash, "CompletionBoard", no_board)
    e = engine(model_dir, daemon)
    side = e.workers[0].connector.worker_side
    assert [r.board for r in side._registered] == [None]
    a = prompt(100)
    run_and_store(e, "a", a)
    assert side.stats["store_chunks"] == 3
    b = a[:96] + [4]
    prefix_hit(e, "b", b)
    e.step()
    assert side.stats["load_fallbacks"] == 1
    assert e.workers[0].matches(e.scheduler.kv_cache_manager.get_block_ids("b"), b, 0, 96)
    assert e.last_outputs[0].invalid_block_ids == set()
    e.run_until_idle()


def test_a_preempted_requests_blocks_are_not_reused_before_its_store_read_them(model_dir, daemon):
    from kvstash.integrations.vllm import KvstashConnectorMetadata

    e = engine(model_dir, daemon)
    e.scheduler.add_request(make_request("a", prompt(100), max_tokens=50))
    e.step(before_load=daemon.pause)  # 2 chunks stored, kvstashd paused: in flight
    worker = e.workers[0]
    side = worker.connector.worker_side
    (store,) = side._stores["a"]
    assert not store.reusable()
    timer = later(0.3, daemon.resume)
    start = time.monotonic()
    # vLLM calls this before the step that may rewrite a preempted
    # request's blocks (on a GPU: a stream wait; on CPU tensors: here).
    worker.connector.handle_preemptions(KvstashConnectorMetadata(preempted_req_ids={"a"}))
    elapsed = time.monotonic() - start
    timer.join()
    assert elapsed >= 0.25, "returned while kvstashd could still read the blocks"
    assert store.reusable() and "a" not in side._stores
    e.run_until_idle()
