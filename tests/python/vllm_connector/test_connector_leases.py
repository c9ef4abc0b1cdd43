"""Every lease KvstashConnector's lookups take ends when its load ends,
released by the scheduler on the connection that holds it, in both load
modes and whatever happens to the request (preempted, aborted, a failed
load): kvstashd's lease counters after the run show as many released as
granted and none expired. Against the real vLLM v1 Scheduler and a real
kvstashd."""

from __future__ import annotations

import collections
import time

import pytest

from vllm_support import vllm_or_skip

vllm_or_skip()

from vllm.v1.request import RequestStatus  # noqa: E402

from test_connector import engine, forget_gpu_kv, prefix_hit, prompt, run_and_store  # noqa: E402
from vllm_harness import make_request  # noqa: E402

# Long enough that no lease of these tests can expire: only a release ends one.
NEVER_EXPIRES = {"lease_ms": 600_000}
MODES = {
    "in-step": {"async_loads": False},
    "in-step-not-layerwise": {"async_loads": False, "layerwise_loads": False},
    "async": {"async_loads": True},
}


def lease_counters(daemon, e) -> dict:
    """kvstashd's lease counters, and the leases it holds now, once engine
    `e`'s scheduler had its releases answered (it sends them without
    waiting)."""
    e.connector.scheduler_side.wait_for_releases()
    with daemon.client() as client:
        counters = dict(client.stats()["counters"])
        held = client.describe()["tiers"][0]["pool"]["leases"]
    out = {name: counters.get(name, 0) for name in
           ("leases_granted", "leases_released", "leases_expired", "leases_truncated")}
    out["held"] = held
    return out


def assert_every_lease_released(daemon, e, at_least: int) -> dict:
    c = lease_counters(daemon, e)
    assert c["leases_granted"] >= at_least, c
    assert c["leases_released"] == c["leases_granted"], c
    assert c["leases_expired"] == 0 and c["held"] == 0, c
    return c


def stored_prompts(e, count: int, length: int = 100):
    """`count` prompts of `length` tokens, each stored in kvstash."""
    prompts = [prompt(length, salt=10 + i) for i in range(count)]
    for i, tokens in enumerate(prompts):
        run_and_store(e, f"store-{i}", tokens)
    return prompts


@pytest.mark.parametrize("mode", list(MODES))
def test_hits_release_their_leases_once_loaded(model_dir, daemon, mode):
    e = engine(model_dir, daemon, extra={**MODES[mode], **NEVER_EXPIRES})
    prompts = stored_prompts(e, 3)
    forget_gpu_kv(e)
    for i, tokens in enumerate(prompts):
        e.scheduler.add_request(make_request(f"hit-{i}", tokens[:96] + prompt(5, salt=i),
                                             max_tokens=2))
    e.run_until_idle()
    assert e.connector.scheduler_side.recorder.totals["hit_requests"] == 3
    assert e.workers[0].connector.worker_side.stats["load_chunks"] == 9
    assert_every_lease_released(daemon, e, at_least=3)


@pytest.mark.parametrize("mode", ["in-step", "async"])
def test_a_lease_is_held_until_its_load_ended_then_released(model_dir, daemon, mode):
    e = engine(model_dir, daemon, extra={**MODES[mode], **NEVER_EXPIRES})
    (a,) = stored_prompts(e, 1)
    prefix_hit(e, "b", a[:96] + [5, 6, 7])
    held_during_load = []
    so = e.scheduler.schedule()
    (load,) = so.kv_connector_metadata.loads
    # The load is on its way to the workers: its lease still holds the chunks.
    held_during_load.append(lease_counters(daemon, e)["held"])
    e.finish_step(so)
    e.run_until_idle()
    assert held_during_load == [1]
    assert_every_lease_released(daemon, e, at_least=1)


def test_with_asynchronous_scheduling_an_in_step_lease_ends_with_its_step(model_dir, daemon):
    # vLLM's AsyncScheduler builds step N+1 before it processes step N's
    # output: step N's load may not have run yet when N+1 is built.
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from test_connector import llama_specs
    from vllm_harness import Engine, make_kv_cache_config, make_vllm_config

    config = make_vllm_config(model_dir, daemon.socket, extra={**MODES["in-step"],
                                                               **NEVER_EXPIRES})
    e = Engine(config, make_kv_cache_config(config, llama_specs(), 64),
               scheduler_cls=AsyncScheduler)
    prompts = stored_prompts(e, 2)
    forget_gpu_kv(e)
    e.scheduler.add_request(make_request("b", prompts[0][:96] + [5, 6, 7], max_tokens=4))
    first = e.scheduler.schedule()
    assert first.kv_connector_metadata.loads
    e.scheduler.add_request(make_request("c", prompts[1][:96] + [8, 9], max_tokens=4))
    second = e.scheduler.schedule()  # built before the first step ran
    assert lease_counters(daemon, e)["held"] == 2
    e.finish_step(first)
    # The first step's load ended; the second step's has not run yet.
    assert lease_counters(daemon, e)["held"] == (1 if second.kv_connector_metadata.loads else 0)
    e.finish_step(second)
    # vLLM's engine loop with a batch queue of two.
    in_flight = collections.deque()
    deadline = time.monotonic() + 30
    while e.busy() or in_flight:
        assert time.monotonic() < deadline, "the engine did not go idle"
        if e.busy():
            in_flight.append(e.scheduler.schedule())
        if len(in_flight) == 2 or (in_flight and not e.scheduler.has_requests()):
            e.finish_step(in_flight.popleft())
        if not e.scheduler.has_requests():
            time.sleep(0.001)  # only stores in flight
    assert e.connector.scheduler_side.recorder.totals["hit_requests"] == 2
    assert_every_lease_released(daemon, e, at_least=2)


@pytest.mark.parametrize("mode", ["in-step", "async"])
def test_preempted_requests_release_every_lease_they_took(model_dir, daemon, mode):
    # 14 blocks of 16 tokens: two 100-token prompts that keep decoding must
    # preempt one another; a resumed request looks its prefix up again.
    e = engine(model_dir, daemon, num_blocks=15, extra={**MODES[mode], **NEVER_EXPIRES})
    prompts = stored_prompts(e, 2)
    forget_gpu_kv(e)
    for i, tokens in enumerate(prompts):
        e.scheduler.add_request(make_request(f"p{i}", tokens[:96] + prompt(4, salt=i),
                                             max_tokens=90))
    preempted = set()
    deadline = time.monotonic() + 60
    while e.busy():
        assert time.monotonic() < deadline, "the engine did not go idle"
        so = e.step()
        preempted |= set(so.preempted_req_ids or ())
        if not so.num_scheduled_tokens:
            time.sleep(0.001)
    assert preempted, "no request was preempted: the test needs fewer blocks"
    assert e.connector.scheduler_side.recorder.totals["hit_requests"] >= 2
    assert_every_lease_released(daemon, e, at_least=2)


def test_a_request_aborted_while_its_load_runs_releases_the_lease_after_it(model_dir, daemon):
    e = engine(model_dir, daemon, extra={**MODES["async"], **NEVER_EXPIRES})
    (a,) = stored_prompts(e, 1)
    prefix_hit(e, "b", a[:96] + [5, 6, 7])
    try:
        so = e.step(before_load=daemon.pause)  # the load stays in flight
        assert so.kv_connector_metadata.loads
        e.scheduler.finish_requests("b", RequestStatus.FINISHED_ABORTED)
    finally:
        daemon.resume()
    deadline = time.monotonic() + 30
    while "b" in e.scheduler.requests:
        assert time.monotonic() < deadline, "the aborted request was never freed"
        e.step()
        time.sleep(0.001)
    assert_every_lease_released(daemon, e, at_least=1)


def test_a_request_aborted_during_the_step_of_its_in_step_load_releases_the_lease(
        model_dir, daemon):
    e = engine(model_dir, daemon, extra={**MODES["in-step"], **NEVER_EXPIRES})
    (a,) = stored_prompts(e, 1)
    prefix_hit(e, "b", a[:96] + [5, 6, 7])
    so = e.scheduler.schedule()
    assert so.kv_connector_metadata.loads
    # vLLM's front end may abort a request while its step runs.
    e.scheduler.finish_requests("b", RequestStatus.FINISHED_ABORTED)
    assert lease_counters(daemon, e)["held"] == 1  # the workers may be loading
    e.finish_step(so)
    e.run_until_idle()
    assert "b" not in e.scheduler.requests
    assert_every_lease_released(daemon, e, at_least=1)


def test_requests_aborted_with_a_hit_or_a_load_not_sent_release_their_leases(model_dir, daemon):
    e = engine(model_dir, daemon, extra={**MODES["async"], **NEVER_EXPIRES})
    prompts = stored_prompts(e, 2)
    assert e.scheduler.reset_prefix_cache()
    looked_up = make_request("looked-up", prompts[0][:96] + [5, 6, 7])
    e.scheduler.add_request(looked_up)
    matched, _ = e.connector.get_num_new_matched_tokens(looked_up, 0)
    assert matched == 96
    e.scheduler.finish_requests("looked-up", RequestStatus.FINISHED_ABORTED)
    e.run_until_idle()
    assert_every_lease_released(daemon, e, at_least=1)


@pytest.mark.parametrize("mode", ["in-step", "async"])
def test_a_failed_load_releases_its_lease(model_dir, daemon, mode):
    # kvstashd stalls past the connector's timeout: the load fails (its
    # blocks are recomputed) while the lease still holds the chunks.
    timeout_ms = 300
    e = engine(model_dir, daemon, extra={**MODES[mode], **NEVER_EXPIRES,
                                         "timeout_ms": timeout_ms})
    (a,) = stored_prompts(e, 1)
    prefix_hit(e, "b", a[:96] + [5, 6, 7])
    try:
        if mode == "async":
            so = e.step(before_load=daemon.pause)
            time.sleep(2 * timeout_ms / 1000)  # the load timed out meanwhile
        else:
            # The layer's wait ends at the load's timeout.
            so = e.step(before_load=daemon.pause,
                        after_layer_wait=lambda worker, name: daemon.resume())
        assert so.kv_connector_metadata.loads
    finally:
        daemon.resume()
    e.run_until_idle()
    assert e.workers[0].connector.worker_side.stats["load_failed_chunks"] >= 3
    assert_every_lease_released(daemon, e, at_least=1)


def test_a_hit_cut_short_by_the_leased_bytes_budget_is_counted_and_said(model_dir, caplog):
    from kvstashd_process import Daemon
    from test_connector import llama_specs
    from vllm_support import CHUNK_TOKENS

    # Chunks of 256 KiB (8 heads of 128, 2 layers, 32 tokens) and 1% of the
    # 64 MiB pool leasable: a lookup leases 2 chunks, the third is cut.
    d = Daemon("--pin-threads", "1", "--copy-threads", "2", "--max-leased-share", "0.01",
               chunk_tokens=CHUNK_TOKENS, l1_gb=0.0625)
    try:
        e = engine(model_dir, d, specs=llama_specs(heads=8, head_size=128),
                   extra={**MODES["async"], **NEVER_EXPIRES})
        (a,) = stored_prompts(e, 1)
        prefix_hit(e, "b", a[:96] + [5, 6, 7])
        with caplog.at_level("WARNING", logger="kvstash.integrations.vllm.scheduler"):
            e.run_until_idle()
        totals = e.connector.scheduler_side.recorder.totals
        assert totals["lookups_truncated"] == 1
        assert totals["hit_tokens"] == 64
        assert any("--max-leased-share" in r.getMessage() for r in caplog.records)
        c = lease_counters(d, e)
        assert c["leases_truncated"] >= 1
        assert c["leases_released"] == c["leases_granted"] and c["leases_expired"] == 0, c
    finally:
        d.close()


def test_the_scheduler_sends_a_release_without_waiting_for_kvstashd(model_dir, daemon):
    # The scheduler's step is vLLM's critical path: a release must not wait
    # for kvstashd's reply (here a paused kvstashd, which would hold a
    # waiting release for a second or more).
    e = engine(model_dir, daemon, extra={**MODES["async"], **NEVER_EXPIRES, "timeout_ms": 3000})
    (a,) = stored_prompts(e, 1)
    prefix_hit(e, "b", a[:96] + [5, 6, 7])
    so = e.scheduler.schedule()
    assert so.kv_connector_metadata.loads
    side = e.connector.scheduler_side
    assert side.leases.held() == 1
    daemon.pause()
    try:
        start = time.monotonic()
        side.leases.release_all()
        took = time.monotonic() - start
    finally:
        daemon.resume()
    assert took < 0.5, f"releasing a lease took {took:.2f} s with kvstashd paused"
    e.finish_step(so)
    e.run_until_idle()
    assert_every_lease_released(daemon, e, at_least=1)


def test_should_vllm_stop_reporting_step_ends_a_steps_leases_go_once_four_more_were_built():
    from kvstash.integrations.vllm.leases import MAX_STEPS_IN_FLIGHT, LoadLeases

    released = []
    book = LoadLeases(released.append)
    book.load_planned("a", (11, 0, 12))  # 0: a group whose lookup took no lease
    book.step_built([("a", False)])
    for _ in range(MAX_STEPS_IN_FLIGHT - 1):
        book.step_built([])
    assert released == [] and book.held() == 2
    book.step_built([])
    assert released == [11, 12]
