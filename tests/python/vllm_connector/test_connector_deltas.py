"""KvstashConnector's per-step cost follows the new tokens: StoreSpecs carry
only the chunks they store once the workers hold the key chain, the workers
continue the chain, and the keys are the ones the whole prompt gets from
token 0. Against the real vLLM v1 Scheduler and a real kvstashd."""

from __future__ import annotations

import time

from vllm_support import CHUNK_TOKENS, vllm_or_skip

vllm_or_skip()

from test_connector import (  # noqa: E402
    clear_chunks,
    engine,
    llama_specs,
    prefix_hit,
    prompt,
    run_and_store,
)
from vllm_harness import (  # noqa: E402
    BLOCK_SIZE,
    Engine,
    make_kv_cache_config,
    make_request,
    make_vllm_config,
)

C = CHUNK_TOKENS


def run_collecting(e: Engine, steps: list, limit: int = 400) -> None:
    """Steps until idle, collecting each step's scheduler output."""
    deadline = time.monotonic() + 60
    for _ in range(limit):
        if not e.busy():
            return
        assert time.monotonic() < deadline
        so = e.step()
        steps.append(so)
    raise AssertionError("the engine did not go idle")


def whole_keys(e: Engine, tokens, rank: int = 0, registration: int = 0):
    """A worker registration's keys of every whole chunk of `tokens`, from token 0."""
    reg = e.workers[rank].connector.worker_side.registrations[registration]
    return reg, reg.chunk_keys(tokens[: len(tokens) // C * C])


def lookup_hits(reg, keys) -> int:
    hit = reg.lookup(keys)
    if hit.lease_id:
        reg.release(hit.lease_id)
    return hit.hit_chunks


def test_after_the_first_store_each_step_sends_only_its_new_chunks(model_dir, daemon):
    e = engine(model_dir, daemon)
    a = prompt(300)  # 9 whole chunks, 64 tokens computed per step
    e.scheduler.add_request(make_request("a", a, max_tokens=2))
    steps = []
    run_collecting(e, steps)
    e.settle_stores()
    specs = [s for so in steps for s in so.kv_connector_metadata.stores]
    assert [(s.start_chunk, s.num_chunks) for s in specs] == [(0, 2), (2, 2), (4, 2), (6, 2), (8, 1)]
    assert specs[0].from_chunk == 0
    for s in specs[1:]:
        # Only the stored chunks' tokens and blocks.
        assert s.from_chunk == s.start_chunk
        assert s.token_ids == a[s.start_chunk * C:(s.start_chunk + s.num_chunks) * C]
        assert len(s.block_ids[0]) == s.num_chunks * C // BLOCK_SIZE
    worker = e.workers[0].connector.worker_side
    assert worker.stats["store_chunks"] == 9
    assert worker.stats["chain_gaps"] == 0
    # Stored under the keys of the whole prompt from token 0...
    reg, keys = whole_keys(e, a)
    assert lookup_hits(reg, keys) == 9
    # ...and loaded back byte for byte.
    b = a[:288] + [7, 7]
    prefix_hit(e, "b", b)
    so = e.step()
    assert so.scheduled_new_reqs[0].num_computed_tokens == 288
    assert e.workers[0].matches(e.scheduler.kv_cache_manager.get_block_ids("b"), b, 0, 288)
    e.run_until_idle()
    # A finished request's chains are forgotten.
    assert worker._chains == {}


def test_two_kv_cache_groups_each_continue_their_own_chain(model_dir, daemon):
    from test_connector import two_geometries
    from vllm.v1.kv_cache_interface import KVCacheGroupSpec

    specs = two_geometries()
    groups = [KVCacheGroupSpec([name], spec) for name, spec in specs.items()]
    e = engine(model_dir, daemon, specs=specs, groups=groups)
    a = prompt(200)
    e.scheduler.add_request(make_request("a", a, max_tokens=2))
    steps = []
    run_collecting(e, steps)
    e.settle_stores()
    deltas = [s for so in steps for s in so.kv_connector_metadata.stores if s.from_chunk]
    assert deltas
    for s in deltas:  # each group's block ids of the new chunks only
        assert [len(ids) for ids in s.block_ids] == [s.num_chunks * C // BLOCK_SIZE] * 2
    for registration in range(2):
        reg, keys = whole_keys(e, a, registration=registration)
        assert lookup_hits(reg, keys) == 6
    assert e.workers[0].connector.worker_side.stats["chain_gaps"] == 0


def test_a_load_seeds_the_chain_that_the_next_stores_continue(model_dir, daemon):
    e = engine(model_dir, daemon, tp_size=2)
    a = prompt(100)
    run_and_store(e, "a", a)  # chunks 0..2
    b = a[:96] + prompt(150, salt=4)  # 7 whole chunks, 3 of them a's
    prefix_hit(e, "b", b)
    steps = []
    run_collecting(e, steps)
    e.settle_stores()
    (load,) = [load for so in steps for load in so.kv_connector_metadata.loads]
    assert (load.start_token, load.end_token) == (0, 96)
    specs = [s for so in steps for s in so.kv_connector_metadata.stores if s.req_id == "b"]
    # The first store after the load continues the chain the load ended.
    assert specs[0].start_chunk == 3 and specs[0].from_chunk == 3
    assert sum(s.num_chunks for s in specs) == 4
    for rank in range(2):  # each rank keyed its own namespace
        reg, keys = whole_keys(e, b, rank=rank)
        assert lookup_hits(reg, keys) == 7
        assert e.workers[rank].connector.worker_side.stats["chain_gaps"] == 0


def test_a_worker_without_the_chain_skips_the_store_and_never_guesses_keys(model_dir, daemon):
    e = engine(model_dir, daemon)
    a = prompt(200)  # 6 whole chunks: 2 per step
    e.scheduler.add_request(make_request("a", a, max_tokens=2))
    worker = e.workers[0].connector.worker_side
    e.step()  # chunks 0, 1 from token 0
    # The worker loses its chains (as a worker process that restarted would).
    worker._chains.clear()
    e.run_until_idle()
    e.settle_stores()
    # Chunks 2..5 came as deltas continuing a chain the worker did not hold.
    assert worker.stats["chain_gaps"] == 2
    assert worker.stats["stores_skipped"] == 2
    assert worker.stats["store_chunks"] == 2
    reg, keys = whole_keys(e, a)
    assert lookup_hits(reg, keys) == 2
    # Nothing else is in kvstashd: no chunk went in under a wrong key.
    clear_chunks(daemon, 2)


def test_after_a_preemption_the_next_store_sends_the_prefix_from_token_zero(model_dir, daemon):
    # 11 usable blocks of 16 tokens: b (112 tokens) is admitted beside a,
    # and preempted mid-prefill as a's decode grows.
    config = make_vllm_config(model_dir, daemon.socket, max_num_batched_tokens=17)
    e = Engine(config, make_kv_cache_config(config, llama_specs(), 12))
    a, b = prompt(60, 1), prompt(112, 2)
    e.scheduler.add_request(make_request("a", a, max_tokens=60))
    e.scheduler.add_request(make_request("b", b, max_tokens=2))
    steps = []
    deadline = time.monotonic() + 60
    while not any("b" in (so.preempted_req_ids or ()) for so in steps):
        assert e.busy() and time.monotonic() < deadline, "the test needs vLLM to preempt b"
        steps.append(e.step())
    stored_before = sum(s.num_chunks for so in steps for s in so.kv_connector_metadata.stores
                        if s.req_id == "b")
    assert stored_before >= 1
    # kvstash forgets b's chunks: b resumes without a load, from vLLM's own
    # blocks (or from scratch), and its chain must start again from token 0.
    e.settle_stores()
    clear_chunks(daemon, stored_before + 1)  # and a's first chunk
    after = []
    run_collecting(e, after)
    e.settle_stores()
    assert not [load for so in after for load in so.kv_connector_metadata.loads
                if load.req_id == "b"]
    specs = [s for so in after for s in so.kv_connector_metadata.stores if s.req_id == "b"]
    assert specs, "b stored nothing after it resumed"
    assert specs[0].from_chunk == 0 and specs[0].start_chunk == stored_before
    assert specs[0].token_ids == b[: (specs[0].start_chunk + specs[0].num_chunks) * C]
    worker = e.workers[0].connector.worker_side
    assert worker.stats["chain_gaps"] == 0
    # The chunks stored after the preemption carry the keys from token 0.
    reg, keys = whole_keys(e, b)
    assert lookup_hits(reg, keys[stored_before:]) == len(keys) - stored_before


def test_a_waiting_requests_lookup_keys_are_computed_once(model_dir, daemon):
    e = engine(model_dir, daemon)
    a = prompt(300)
    run_and_store(e, "a", a)
    assert e.scheduler.reset_prefix_cache()
    side = e.connector.scheduler_side
    reg = side._regs[0]
    hashed = []
    original = reg.chunk_keys

    def counting(tokens, **kwargs):
        hashed.append(len(tokens))
        return original(tokens, **kwargs)

    reg.chunk_keys = counting
    request = make_request("b", a[:290])
    e.scheduler.add_request(request)
    # vLLM asks again while the request waits (no blocks, no budget).
    for _ in range(3):
        matched, _ = e.connector.get_num_new_matched_tokens(request, 0)
        assert matched == 288
    assert hashed == [288]
    # Asked from further on (vLLM's own prefix hit grew): no rehash either.
    assert e.connector.get_num_new_matched_tokens(request, 64)[0] == 224
    assert hashed == [288]
    e.step()  # scheduled: the keys are dropped
    assert "b" not in side._lookup_keys
    e.run_until_idle()
    assert side._lookup_keys == {}
