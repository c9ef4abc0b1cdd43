"""KvstashConnector against the real vLLM v1 Scheduler (the vLLM installed,
0.26 to 0.33) and a real kvstashd."""

from __future__ import annotations

import time

import pytest

from vllm_support import CHUNK_TOKENS, vllm_or_skip

vllm_or_skip()

import torch  # noqa: E402

import kvstash  # noqa: E402
from vllm_harness import (  # noqa: E402
    BLOCK_SIZE,
    ONE_BACKING_BUFFER,
    VLLM_VERSION,
    Engine,
    layout_unsupported,
    make_kv_cache_config,
    make_request,
    make_vllm_config,
)
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheGroupSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)
from vllm.v1.request import RequestStatus  # noqa: E402

from kvstash.integrations.vllm import KvstashConnector, SettingsError  # noqa: E402
from kvstash.integrations.vllm.layout import LayoutError  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402

LAYERS = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]


def llama_specs(heads: int = 2, head_size: int = 16, block_size: int = BLOCK_SIZE):
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=heads, head_size=head_size,
                             dtype=torch.float16)
    return {name: spec for name in LAYERS}


def engine(model_dir, daemon, specs=None, tp_size=1, num_blocks=64, extra=None, layout="LBNHC",
           groups=None, failure_policy="recompute", kernel_block_size=None,
           block_size=BLOCK_SIZE):
    config = make_vllm_config(model_dir, daemon.socket, extra=extra, tp_size=tp_size,
                              failure_policy=failure_policy, layout=layout, block_size=block_size)
    kv_cache_config = make_kv_cache_config(config, specs or llama_specs(block_size=block_size),
                                           num_blocks, groups)
    return Engine(config, kv_cache_config, layout, kernel_block_size)


def prompt(n: int, salt: int = 0):
    return [100 + (i * 7 + salt) % 800 for i in range(n)]


def run_and_store(e: Engine, request_id: str, tokens) -> None:
    e.scheduler.add_request(make_request(request_id, tokens, max_tokens=2, block_size=e.block_size))
    e.run_until_idle()
    e.settle_stores()


def leases(client) -> int:
    return client.describe()["tiers"][0]["pool"]["leases"]


def forget_gpu_kv(e: Engine) -> None:
    """Empties vLLM's own prefix cache and zeroes the workers' KV: a hit
    after this is kvstash's, and its bytes are kvstash's."""
    assert e.scheduler.reset_prefix_cache()
    for w in e.workers:
        w.wipe()


def prefix_hit(e: Engine, request_id: str, tokens):
    """Schedules a request after vLLM's own prefix cache was emptied, so any hit is kvstash's."""
    forget_gpu_kv(e)
    e.scheduler.add_request(make_request(request_id, tokens, max_tokens=2, block_size=e.block_size))


def clear_chunks(daemon, expected):
    """Clears kvstashd until `expected` chunks went: leases held by a lookup
    expire on the daemon's periodic tick, so a first Clear may drop fewer."""
    deadline = time.monotonic() + 5
    cleared = 0
    with daemon.client() as client:
        while cleared < expected and time.monotonic() < deadline:
            cleared += client.clear()
            time.sleep(0.02)
    assert cleared == expected


def test_the_worker_hands_the_connector_kv_tensors_as_this_vllm_allocates_them(model_dir, daemon):
    e = engine(model_dir, daemon)
    views = list(e.workers[0].kv_caches.values())
    for view in views:  # [B, H, N, C]: K then V of a head and token in C
        assert tuple(view.shape) == (64, 2, BLOCK_SIZE, 2 * 16)
    storages = {view.untyped_storage().data_ptr() for view in views}
    # Before vLLM 0.29 one allocation per layer; from 0.29 one for all.
    assert len(storages) == (1 if ONE_BACKING_BUFFER else len(LAYERS))


def test_first_request_stores_and_a_shared_prefix_loads_its_bytes(model_dir, daemon):
    e = engine(model_dir, daemon)
    a = prompt(100)
    run_and_store(e, "a", a)  # 3 full chunks of 32 tokens
    worker = e.workers[0].connector.worker_side
    assert worker.stats["store_chunks"] == 3
    assert worker.stats["store_failed_chunks"] == 0

    b = a[:96] + prompt(20, salt=5)
    prefix_hit(e, "b", b)
    so = e.step()
    (new,) = so.scheduled_new_reqs
    # 96 tokens from kvstash: vLLM computes only the rest.
    assert new.num_computed_tokens == 96
    (load,) = so.kv_connector_metadata.loads
    assert (load.start_token, load.end_token) == (0, 96)
    block_ids = e.scheduler.kv_cache_manager.get_block_ids("b")
    assert load.block_ids[0][:6] == block_ids[0][:6]
    # The loaded blocks hold exactly the bytes request a's forward pass wrote.
    assert e.workers[0].matches(block_ids, b, 0, 96)
    assert e.last_outputs[0].invalid_block_ids == set()
    assert worker.stats["load_chunks"] == 3
    e.run_until_idle()


def test_a_local_prefix_hit_loads_only_the_tokens_past_it(model_dir, daemon):
    e = engine(model_dir, daemon)
    a = prompt(100)
    run_and_store(e, "a", a)  # kvstash: a's chunks 0..2 (tokens 0..95)
    assert e.scheduler.reset_prefix_cache()
    # c shares a's first 48 tokens: afterwards vLLM's own prefix cache holds
    # those 3 blocks (c loaded a's chunk 0 from kvstash and computed the rest).
    run_and_store(e, "c", a[:48] + prompt(20, salt=9))
    for w in e.workers:
        w.wipe(0xAB)
    b = a[:96] + [3, 3, 3]
    e.scheduler.add_request(make_request("b", b, max_tokens=2))
    so = e.step()
    assert so.scheduled_new_reqs[0].num_computed_tokens == 96
    (load,) = so.kv_connector_metadata.loads
    # 48 tokens from vLLM's cache, 48 from kvstash: chunk 1 from its 16th token, chunk 2.
    assert (load.start_token, load.end_token) == (48, 96)
    block_ids = e.scheduler.kv_cache_manager.get_block_ids("b")
    assert e.workers[0].matches(block_ids, b, 48, 96)
    # The load never wrote the tokens vLLM already had (block 2: tokens 32..47).
    assert e.workers[0].block_is(block_ids[0][2], 0xAB)
    e.run_until_idle()


@pytest.mark.parametrize("layout, kernel_block_size, block_size", [
    ("LBHNC", None, 16),   # HND
    ("BLNHC", None, 16),   # block-outermost: all layers of a block together
    ("LBNHC", 8, 16),      # vLLM's 16-token blocks split into 8-token kernel blocks
    ("LBNHC", 16, 32),     # 32-token blocks split into 16-token kernel blocks
])
def test_other_kv_cache_layouts_round_trip(model_dir, daemon, layout, kernel_block_size,
                                           block_size):
    reason = layout_unsupported(layout, kernel_block_size)
    if reason is not None:
        pytest.skip(reason)
    e = engine(model_dir, daemon, layout=layout, kernel_block_size=kernel_block_size,
               block_size=block_size)
    (registered,) = e.workers[0].connector.worker_side._registered
    assert registered.tensors.blocks_per_block == block_size // (kernel_block_size or block_size)
    assert registered.reg.block_tokens == (kernel_block_size or block_size)
    a = prompt(100)
    run_and_store(e, "a", a)
    b = a[:96] + [8, 8]
    prefix_hit(e, "b", b)
    so = e.step()
    assert so.scheduled_new_reqs[0].num_computed_tokens == 96
    assert e.workers[0].matches(e.scheduler.kv_cache_manager.get_block_ids("b"), b, 0, 96)
    e.run_until_idle()


def test_a_request_without_a_stored_prefix_loads_nothing(model_dir, daemon):
    e = engine(model_dir, daemon)
    run_and_store(e, "a", prompt(100))
    prefix_hit(e, "b", prompt(100, salt=3))
    so = e.step()
    assert so.scheduled_new_reqs[0].num_computed_tokens == 0
    assert so.kv_connector_metadata.loads == []
    e.run_until_idle()


def test_resetting_the_prefix_cache_with_the_connector_clears_the_models_chunks(model_dir, daemon):
    e = engine(model_dir, daemon)
    a = prompt(100)
    run_and_store(e, "a", a)
    # llm.reset_prefix_cache(reset_connector=True): vLLM's cache and kvstash's.
    assert e.scheduler.reset_prefix_cache(reset_connector=True)
    prefix_hit(e, "b", a[:96] + [1])
    so = e.step()
    assert so.scheduled_new_reqs[0].num_computed_tokens == 0
    assert so.kv_connector_metadata.loads == []
    e.run_until_idle()


def test_at_least_one_prompt_token_is_left_to_compute(model_dir, daemon):
    e = engine(model_dir, daemon)
    a = prompt(96)  # exactly 3 chunks
    run_and_store(e, "a", a)
    prefix_hit(e, "b", a)
    so = e.step()
    # Loading all 96 would leave nothing to compute logits from: 2 chunks load.
    assert so.scheduled_new_reqs[0].num_computed_tokens == 64
    e.run_until_idle()


@pytest.mark.parametrize("policy", ["recompute", "fail"])
def test_chunks_missing_at_load_time_are_reported_per_block(model_dir, daemon, policy):
    # lease_ms=1: the lookup's lease lapses at once, so a clear between the
    # lookup and the load can drop the chunks.
    e = engine(model_dir, daemon, extra={"lease_ms": 1}, failure_policy=policy)
    a = prompt(100)
    run_and_store(e, "a", a)
    prefix_hit(e, "b", a[:96] + [5, 6, 7])

    so = e.step(before_load=lambda: clear_chunks(daemon, 3))
    (load,) = so.kv_connector_metadata.loads
    assert load.end_token == 96
    # Every block the load should have filled is reported.
    assert e.last_outputs[0].invalid_block_ids == set(load.block_ids[0][:6])
    if policy == "recompute":
        # vLLM recomputes them instead of serving wrong KV...
        assert e.scheduler.requests["b"].num_computed_tokens < 96
        e.run_until_idle()
        assert "b" not in e.scheduler.requests
    else:
        # ...or, with vLLM's default policy, fails the request.
        assert "b" not in e.scheduler.requests or e.scheduler.requests["b"].is_finished()
        e.run_until_idle()


def test_blocks_of_a_finished_request_stay_alive_until_its_stores_finished(model_dir, daemon):
    e = engine(model_dir, daemon)
    pool = e.scheduler.kv_cache_manager.block_pool
    free_before = pool.get_num_free_blocks()
    e.scheduler.add_request(make_request("a", prompt(100), max_tokens=1))
    held = False
    deadline = time.monotonic() + 30
    while "a" in e.scheduler.requests and time.monotonic() < deadline:
        e.step()
        request = e.scheduler.requests.get("a")
        if request is not None and request.is_finished():
            # Finished, its stores maybe in flight: vLLM has not freed its blocks.
            held = True
            assert pool.get_num_free_blocks() < free_before
    assert held and "a" not in e.scheduler.requests
    assert pool.get_num_free_blocks() == free_before
    assert not e.connector.has_pending_push_work()


def test_an_aborted_request_keeps_its_blocks_until_stored_then_frees_them(model_dir, daemon):
    e = engine(model_dir, daemon)
    pool = e.scheduler.kv_cache_manager.block_pool
    free_before = pool.get_num_free_blocks()
    e.scheduler.add_request(make_request("a", prompt(100), max_tokens=50))
    e.step()  # 64 tokens computed: 2 chunks being stored
    e.scheduler.finish_requests("a", RequestStatus.FINISHED_ABORTED)
    assert e.connector.has_pending_push_work()
    e.run_until_idle()
    assert pool.get_num_free_blocks() == free_before
    # Blocks are freed once reusable; the replies are counted when they come.
    e.settle_stores()
    assert e.workers[0].connector.worker_side.stats["store_chunks"] == 2


def test_an_aborted_request_with_a_hit_releases_its_lease(model_dir, daemon):
    e = engine(model_dir, daemon, extra={"lease_ms": 600000})
    a = prompt(100)
    run_and_store(e, "a", a)
    assert e.scheduler.reset_prefix_cache()
    request = make_request("b", a)
    e.scheduler.add_request(request)
    matched, _ = e.connector.get_num_new_matched_tokens(request, 0)
    assert matched == 96
    with daemon.client() as client:
        assert leases(client) == 1
    e.scheduler.finish_requests("b", RequestStatus.FINISHED_ABORTED)
    with daemon.client() as client:
        assert leases(client) == 0
        # Released, the chunks can be cleared (a leased chunk cannot).
        assert client.clear() == 3


def test_a_preempted_request_waits_for_its_stores_before_its_blocks_are_reused(model_dir, daemon):
    # 12 blocks of 16 tokens: two 90-token prompts that keep decoding must preempt.
    e = engine(model_dir, daemon, num_blocks=13)
    e.scheduler.add_request(make_request("a", prompt(90, 1), max_tokens=60))
    e.scheduler.add_request(make_request("b", prompt(90, 2), max_tokens=60))
    preempted = set()
    deadline = time.monotonic() + 60
    while e.busy() and time.monotonic() < deadline:
        so = e.step()
        preempted |= set(so.preempted_req_ids or ())
        meta = so.kv_connector_metadata
        assert meta.preempted_req_ids == set(so.preempted_req_ids or ())
        for req_id in meta.preempted_req_ids:
            # handle_preemptions ran: nothing of it is in flight any more.
            assert req_id not in e.workers[0].connector.worker_side._stores
    assert preempted, "the test needs vLLM to preempt a request"
    assert not e.scheduler.has_requests()


def test_tensor_parallel_ranks_store_and_load_their_own_kv(model_dir, daemon):
    e = engine(model_dir, daemon, tp_size=2)
    a = prompt(100)
    run_and_store(e, "a", a)
    for w in e.workers:
        assert w.connector.worker_side.stats["store_chunks"] == 3
    with daemon.client() as client:
        regs = client.describe()["registrations"]
    assert sorted(r["tp_rank"] for r in regs if r.get("tp_size") == 2) == [0, 0, 1]
    b = a[:96] + [9, 9, 9]
    prefix_hit(e, "b", b)
    e.step()
    block_ids = e.scheduler.kv_cache_manager.get_block_ids("b")
    for w in e.workers:  # each rank got its own bytes back (patterns differ per rank)
        assert w.matches(block_ids, b, 0, 96)
        assert e.last_outputs[w.rank].invalid_block_ids == set()
    e.run_until_idle()


def test_sleep_mode_drops_kvstashds_mappings_and_wake_up_registers_again(model_dir, daemon):
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
    if not hasattr(KVConnectorBase_V1, "unregister_kv_caches"):
        pytest.skip(f"vLLM {VLLM_VERSION} has no sleep-mode hooks for connectors (0.33 added them)")
    e = engine(model_dir, daemon)
    a = prompt(100)
    run_and_store(e, "a", a)

    def registrations() -> int:
        with daemon.client() as client:
            return len(client.describe()["registrations"])

    awake = registrations()
    # vLLM's worker: sleep() (and discard) before the KV memory is released;
    # the hooks are idempotent.
    for w in e.workers:
        w.connector.unregister_kv_caches()
        w.connector.unregister_kv_caches()
    assert registrations() == awake - len(e.workers)
    # wake_up(): the same tensors are mapped again.
    for w in e.workers:
        w.connector.restore_kv_caches()
        w.connector.restore_kv_caches()
    assert registrations() == awake
    b = a[:96] + [3]
    prefix_hit(e, "b", b)
    so = e.step()
    assert so.scheduled_new_reqs[0].num_computed_tokens == 96
    assert e.workers[0].matches(e.scheduler.kv_cache_manager.get_block_ids("b"), b, 0, 96)
    assert e.last_outputs[0].invalid_block_ids == set()
    e.run_until_idle()


def test_mla_is_stored_once_and_loaded_on_every_rank(model_dir, daemon):
    spec = MLAAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=1, head_size=72,
                            dtype=torch.float16)
    e = engine(model_dir, daemon, specs={name: spec for name in LAYERS}, tp_size=2)
    # The latent per token: [B, N, C] before vLLM 0.29, [B, H=1, N, C] from it.
    for view in e.workers[0].kv_caches.values():
        assert view.dim() == (4 if ONE_BACKING_BUFFER else 3) and view.shape[-1] == 72
    # MLA is the same on every rank: make the 'model' write identical bytes.
    for w in e.workers:
        w.rank = 0
    a = prompt(100)
    run_and_store(e, "a", a)
    assert e.workers[0].connector.worker_side.stats["store_chunks"] == 3
    assert e.workers[1].connector.worker_side.stats["store_chunks"] == 0
    b = a[:96] + [1, 2, 3]
    prefix_hit(e, "b", b)
    e.step()
    block_ids = e.scheduler.kv_cache_manager.get_block_ids("b")
    for w in e.workers:
        assert w.matches(block_ids, b, 0, 96)
    e.run_until_idle()


def two_geometries():
    # Equal page sizes, different head counts and sizes.
    return {
        LAYERS[0]: FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=2, head_size=32,
                                     dtype=torch.float16),
        LAYERS[1]: FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=4, head_size=16,
                                     dtype=torch.float16),
    }


def store_and_hit(e: Engine, stores_per_request: int):
    a = prompt(100)
    run_and_store(e, "a", a)
    assert e.workers[0].connector.worker_side.stats["store_chunks"] == stores_per_request
    b = a[:96] + [4, 4]
    prefix_hit(e, "b", b)
    so = e.step()
    assert so.scheduled_new_reqs[0].num_computed_tokens == 96
    block_ids = e.scheduler.kv_cache_manager.get_block_ids("b")
    assert e.workers[0].matches(block_ids, b, 0, 96)
    assert e.last_outputs[0].invalid_block_ids == set()
    e.run_until_idle()


def test_a_hybrid_model_with_two_kv_cache_groups(model_dir, daemon):
    # Two KV cache groups, each with its own block table (vLLM's hybrid
    # allocator): each is its own kvstash registration.
    specs = two_geometries()
    groups = [KVCacheGroupSpec([name], spec) for name, spec in specs.items()]
    e = engine(model_dir, daemon, specs=specs, groups=groups)
    assert len(e.scheduler.kv_cache_config.kv_cache_groups) == 2
    store_and_hit(e, stores_per_request=6)  # 3 chunks per group
    assert len(e.workers[0].connector.worker_side.registrations) == 2


def test_one_group_with_layers_of_two_shapes_is_refused_clearly(model_dir, daemon):
    # vLLM groups full-attention layers of different shapes into one group
    # (UniformTypeKVCacheSpecs) and shows the scheduler only one of the
    # shapes, so the scheduler could never find what workers store: refused.
    config = make_vllm_config(model_dir, daemon.socket)
    kv_cache_config = make_kv_cache_config(config, two_geometries(), 64)
    assert len(kv_cache_config.kv_cache_groups) == 1
    with pytest.raises(LayoutError, match="layers of different shapes"):
        KvstashConnector(config, KVConnectorRole.WORKER, kv_cache_config)


def test_a_sliding_window_group_is_refused_at_startup_naming_the_group(model_dir, daemon):
    config = make_vllm_config(model_dir, daemon.socket)
    specs = llama_specs()
    specs[LAYERS[1]] = SlidingWindowSpec(block_size=BLOCK_SIZE, num_kv_heads=2, head_size=16,
                                         dtype=torch.float16, sliding_window=64)
    kv_cache_config = make_kv_cache_config(config, specs, 64)
    with pytest.raises(LayoutError, match=r"KV cache group \d .*sliding-window.*not supported"):
        KvstashConnector(config, KVConnectorRole.SCHEDULER, kv_cache_config)


@pytest.mark.parametrize("extra, message", [
    ({"timout_ms": 5}, "unknown key"),
    ({"timeout_ms": 0}, "outside 1..3600000"),
    ({"timeout_ms": "soon"}, "must be an integer"),
    ({"model": ""}, "non-empty string"),
    ({"lease_ms": 10 ** 7}, "outside 1..600000"),
])
def test_bad_settings_are_refused_with_the_key_and_the_limit(model_dir, daemon, extra, message):
    with pytest.raises(SettingsError, match=message):
        engine(model_dir, daemon, extra=extra)


def test_the_model_name_defaults_to_the_served_model_name(model_dir, daemon):
    config = make_vllm_config(model_dir, daemon.socket)
    config.kv_transfer_config.kv_connector_extra_config.pop("model")
    from kvstash.integrations.vllm.settings import parse_settings
    assert parse_settings(config.kv_transfer_config.kv_connector_extra_config, config).model == str(model_dir)


def test_an_unreachable_daemon_fails_at_startup_with_the_socket(model_dir, tmp_path):
    class Nowhere:
        socket = f"ipc://{tmp_path}/none.sock"
    with pytest.raises(kvstash.Unavailable, match="none.sock"):
        engine(model_dir, Nowhere, extra={"timeout_ms": 300})


def test_the_example_launch_line_loads_the_connector_through_vllms_factory(daemon):
    import json
    import re
    from pathlib import Path

    from vllm.config import KVTransferConfig
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    script = (Path(__file__).resolve().parents[3] / "examples" / "vllm_serve.sh").read_text()
    (quoted,) = re.findall(r'--kv-transfer-config "(.*)" \\$', script, re.M)
    config = json.loads(quoted.replace('\\"', '"').replace("$SOCKET", daemon.socket))
    transfer = KVTransferConfig(**config)
    assert transfer.kv_load_failure_policy == "recompute"
    cls = KVConnectorFactory.get_connector_class(transfer)
    assert cls is KvstashConnector
    assert KVConnectorFactory.supports_hma_config(transfer)
