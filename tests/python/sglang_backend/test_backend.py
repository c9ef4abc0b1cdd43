"""The kvstash HiCache backend under SGLang 0.5.17's own classes (dynamic
loader, host pools on a memfd, page hash) against real kvstashd processes."""

from __future__ import annotations

import time

import pytest
import torch

from kvstash.integrations.sglang import KvstashHiCacheStorage, SettingsError
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage

from sglang_harness import (PAGE, backend, canonical, extra_config, fill, host_pool, keys,
                            page_indices, read, same, start_daemon, storage_config)

MHA_LAYOUTS = ["page_first", "page_first_direct", "page_head", "layer_first"]
MLA_LAYOUTS = ["page_first", "page_first_direct", "layer_first"]
TOKENS = list(range(1000, 1000 + 6 * PAGE))


def make(daemon_socket, kind="mha", layout="page_first", extra=None, **config_args):
    pool = host_pool(kind, layout)
    storage = backend(pool, storage_config(extra_config(daemon_socket, **(extra or {})), kind=kind,
                                           layout=layout, **config_args))
    return pool, storage


@pytest.mark.parametrize("kind,layout", [("mha", l) for l in MHA_LAYOUTS] +
                         [("mla", l) for l in MLA_LAYOUTS])
def test_pages_stored_from_one_host_page_come_back_into_another_byte_for_byte(daemon, kind, layout):
    pool, storage = make(daemon.socket, kind, layout)
    assert isinstance(storage, KvstashHiCacheStorage) and isinstance(storage, HiCacheStorage)
    k = keys(TOKENS)[:3]
    written = fill(pool, [3, 5, 7], seed=1)
    assert storage.batch_set_v1(k, page_indices([3, 5, 7])) == [True, True, True]
    assert storage.batch_exists(k) == 3
    fill(pool, [10, 11, 12], seed=2)  # something else there first
    assert storage.batch_get_v1(k, page_indices([12, 10, 11])) == [True, True, True]
    got = read(pool, [12, 10, 11])
    assert all(same(a, b) for a, b in zip(written, got))


def test_every_layout_of_a_model_shares_one_chunk_format(daemon):
    first, a = make(daemon.socket, "mha", "page_first")
    second, b = make(daemon.socket, "mha", "page_head")
    k = keys(TOKENS)[:2]
    fill(first, [1, 2], seed=3)
    assert a.batch_set_v1(k, page_indices([1, 2])) == [True, True]
    assert b.batch_get_v1(k, page_indices([4, 6])) == [True, True]
    for src, dst in ((1, 4), (2, 6)):
        assert same(canonical(first, src), canonical(second, dst))


def test_batch_exists_counts_the_leading_pages_present(daemon):
    pool, storage = make(daemon.socket)
    k = keys(TOKENS)
    fill(pool, [0, 1, 2, 4], seed=4)
    assert storage.batch_set_v1(k[:3], page_indices([0, 1, 2])) == [True] * 3
    assert storage.batch_set_v1([k[4]], page_indices([4])) == [True]
    assert storage.batch_exists(k) == 3
    assert storage.batch_exists(k[3:]) == 0
    assert storage.exists(k[4]) and not storage.exists(k[3])


def test_pages_found_by_exists_stay_for_the_get_that_follows(daemon):
    pool, storage = make(daemon.socket)
    k = keys(TOKENS)[:2]
    written = fill(pool, [0, 1], seed=22)
    assert storage.batch_set_v1(k, page_indices([0, 1])) == [True, True]
    assert storage.batch_exists(k) == 2
    with daemon.client() as c:
        assert c.clear(model=storage.model) == 0  # leased until loaded
    assert storage.batch_get_v1(k, page_indices([8, 9])) == [True, True]
    assert all(same(a, b) for a, b in zip(written, read(pool, [8, 9])))
    # The load let them go: its release is sent without waiting for the
    # reply, so it may reach kvstashd just after this clear.
    cleared, deadline = 0, time.monotonic() + 5
    with daemon.client() as c:
        while cleared == 0 and time.monotonic() < deadline:
            cleared = c.clear(model=storage.model)
            time.sleep(0.01)
    assert cleared == 2


def test_a_page_dropped_between_exists_and_get_reads_false_and_leaves_the_host_page(daemon):
    pool, storage = make(daemon.socket, extra={"kvstash_lease_ms": 1})
    k = keys(TOKENS)[:2]
    fill(pool, [0, 1], seed=5)
    assert storage.batch_set_v1(k, page_indices([0, 1])) == [True, True]
    assert storage.batch_exists(k) == 2
    time.sleep(0.1)  # the lease ran out
    with daemon.client() as c:
        assert c.clear(model=storage.model) == 2
    before = fill(pool, [8, 9], seed=6)
    assert storage.batch_get_v1(k, page_indices([8, 9])) == [False, False]
    assert all(same(a, b) for a, b in zip(before, read(pool, [8, 9])))


def test_mha_ranks_keep_their_own_pages(daemon):
    pool0, rank0 = make(daemon.socket, tp_rank=0, tp_size=2)
    pool1, rank1 = make(daemon.socket, tp_rank=1, tp_size=2)
    k = keys(TOKENS)[:2]
    w0 = fill(pool0, [0, 1], seed=7)
    assert rank0.batch_set_v1(k, page_indices([0, 1])) == [True, True]
    assert rank1.batch_exists(k) == 0
    assert rank1.batch_get_v1(k, page_indices([2, 3])) == [False, False]
    w1 = fill(pool1, [0, 1], seed=8)
    assert rank1.batch_set_v1(k, page_indices([0, 1])) == [True, True]
    assert rank0.batch_get_v1(k, page_indices([5, 6])) == [True, True]
    assert rank1.batch_get_v1(k, page_indices([5, 6])) == [True, True]
    assert all(same(a, b) for a, b in zip(w0, read(pool0, [5, 6])))
    assert all(same(a, b) for a, b in zip(w1, read(pool1, [5, 6])))


def test_mla_pages_written_by_rank_0_are_read_by_every_rank(daemon):
    pool0, rank0 = make(daemon.socket, "mla", tp_rank=0, tp_size=4)
    pool3, rank3 = make(daemon.socket, "mla", tp_rank=3, tp_size=4)
    k = keys(TOKENS)[:3]
    written = fill(pool0, [0, 1, 2], seed=9)
    assert rank0.batch_set_v1(k, page_indices([0, 1, 2])) == [True] * 3
    assert rank3.batch_exists(k) == 3
    assert rank3.batch_get_v1(k, page_indices([7, 8, 9])) == [True] * 3
    assert all(same(a, b) for a, b in zip(written, read(pool3, [7, 8, 9])))


@pytest.mark.parametrize("other", [
    dict(model="test/another-model"),
    dict(pp_rank=1, pp_size=2),
])
def test_other_models_and_pipeline_stages_never_see_the_pages(daemon, other):
    pool, storage = make(daemon.socket)
    k = keys(TOKENS)[:2]
    fill(pool, [0, 1], seed=10)
    assert storage.batch_set_v1(k, page_indices([0, 1])) == [True, True]
    _, stranger = make(daemon.socket, **other)
    assert stranger.batch_exists(k) == 0


def test_another_dtype_never_sees_the_pages(daemon):
    pool, storage = make(daemon.socket)
    k = keys(TOKENS)[:1]
    fill(pool, [0], seed=11)
    assert storage.batch_set_v1(k, page_indices([0])) == [True]
    half = host_pool("mha", dtype=torch.float16)
    stranger = backend(half, storage_config(extra_config(daemon.socket)))
    assert stranger.batch_exists(k) == 0


def test_host_indices_that_are_not_whole_pages_are_refused_without_raising(daemon):
    pool, storage = make(daemon.socket)
    k = keys(TOKENS)[:2]
    shifted = page_indices([0, 1]) + 3
    assert storage.batch_set_v1(k, shifted) == [False, False]
    assert storage.batch_get_v1(k, page_indices([0])) == [False, False]  # too few
    beyond = page_indices([pool.page_num, pool.page_num + 1])
    assert storage.batch_set_v1(k, beyond) == [False, False]
    swapped = page_indices([0, 1])
    swapped[[5, 6]] = swapped[[6, 5]]  # page-aligned start, tokens out of order
    assert storage.batch_set_v1(k, swapped) == [False, False]
    assert storage.batch_set_v1(k, [0] * 2 * PAGE) == [False, False]  # not a tensor
    assert storage.kvstash_stats()["errors"] >= 5


def test_more_pages_than_one_request_carries_are_split(daemon):
    pool, storage = make(daemon.socket)
    tokens = list(range(20 * PAGE))
    k = keys(tokens)
    pages = list(range(20))
    written = fill(pool, pages, seed=12)
    storage._max_chunks = 7  # as if kvstashd took 7 chunks a request
    assert storage.batch_set_v1(k, page_indices(pages)) == [True] * 20
    assert storage.batch_exists(k) == 20
    fill(pool, pages, seed=13)
    assert storage.batch_get_v1(k, page_indices(pages)) == [True] * 20
    assert all(same(a, b) for a, b in zip(written, read(pool, pages)))


def test_stats_reach_sglang_metrics_and_kvstash_stats(daemon):
    from sglang.srt.observability.metrics_collector import StorageMetrics

    pool, storage = make(daemon.socket)
    k = keys(TOKENS)[:2]
    fill(pool, [0, 1], seed=14)
    storage.batch_set_v1(k, page_indices([0, 1]))
    storage.batch_exists(k)
    storage.batch_get_v1(k, page_indices([2, 3]))
    metrics = storage.get_stats()
    assert isinstance(metrics, StorageMetrics)
    assert metrics.backup_pgs == [2] and metrics.prefetch_pgs == [2]
    assert metrics.prefetch_bandwidth[0] > 0
    assert storage.get_stats().prefetch_pgs == []  # drained
    ours = storage.kvstash_stats()
    assert ours["set_pages_stored"] == 2 and ours["get_pages_hit"] == 2
    assert ours["get_bytes"] == 2 * storage.layout.page_bytes
    with daemon.client() as c:
        per = c.stats()["per_registration"]
    assert any(r.get("model") == storage.model for r in per), per


def test_settings_sglang_must_give_are_checked_with_the_value(daemon):
    extra = extra_config(daemon.socket)
    for drop, needle in (("interface_v1", "interface_v1"), ("allocator", "allocator")):
        bad = dict(extra)
        del bad[drop]
        with pytest.raises(SettingsError, match=needle):
            KvstashHiCacheStorage(storage_config(bad), {})
    with pytest.raises(SettingsError, match="kvstash_timeout_ms 0"):
        KvstashHiCacheStorage(storage_config(dict(extra, kvstash_timeout_ms=0)), {})
    with pytest.raises(SettingsError, match="kvstash_sockets"):
        KvstashHiCacheStorage(storage_config(dict(extra, kvstash_sockets="x")), {})


def test_a_daemon_with_other_chunk_tokens_is_a_miss_with_the_reason(caplog):
    d = start_daemon(2 * PAGE)
    try:
        pool, storage = make(d.socket)
        fill(pool, [0], seed=15)
        assert storage.batch_set_v1(keys(TOKENS)[:1], page_indices([0])) == [False]
        assert storage.batch_exists(keys(TOKENS)[:1]) == 0
        assert f"--chunk-tokens {PAGE}" in caplog.text
    finally:
        d.close()


def test_no_daemon_at_start_misses_then_serves_once_it_answers():
    d = start_daemon(PAGE)
    d.stop()
    try:
        pool, storage = make(d.socket)
        k = keys(TOKENS)[:2]
        written = fill(pool, [0, 1], seed=16)
        assert storage.batch_exists(k) == 0
        assert storage.batch_set_v1(k, page_indices([0, 1])) == [False, False]
        assert not storage.kvstash_stats()["connected"]
        d.start()
        deadline = time.monotonic() + 10
        while storage.batch_set_v1(k, page_indices([0, 1])) != [True, True]:
            assert time.monotonic() < deadline, "never registered with the late daemon"
            time.sleep(0.05)
        assert storage.batch_get_v1(k, page_indices([4, 5])) == [True, True]
        assert all(same(a, b) for a, b in zip(written, read(pool, [4, 5])))
    finally:
        d.close()


def test_a_killed_and_restarted_daemon_costs_misses_then_serves_again():
    d = start_daemon(PAGE)
    try:
        pool, storage = make(d.socket)
        k = keys(TOKENS)[:2]
        written = fill(pool, [0, 1], seed=17)
        assert storage.batch_set_v1(k, page_indices([0, 1])) == [True, True]
        d.kill()
        before = fill(pool, [4, 5], seed=18)
        assert storage.batch_exists(k) == 0
        assert storage.batch_get_v1(k, page_indices([4, 5])) == [False, False]
        assert storage.batch_set_v1(k, page_indices([0, 1])) == [False, False]
        assert all(same(a, b) for a, b in zip(before, read(pool, [4, 5])))
        d.stop()
        d.start()
        deadline = time.monotonic() + 15
        while storage.batch_set_v1(k, page_indices([0, 1])) != [True, True]:
            assert time.monotonic() < deadline, "never served again after the restart"
            time.sleep(0.05)
        assert storage.batch_get_v1(k, page_indices([6, 7])) == [True, True]
        assert all(same(a, b) for a, b in zip(written, read(pool, [6, 7])))
    finally:
        d.close()


def test_a_stopped_daemon_is_a_miss_within_the_timeout_not_a_hang():
    d = start_daemon(PAGE)
    try:
        pool, storage = make(d.socket)
        k = keys(TOKENS)[:2]
        fill(pool, [0, 1], seed=19)
        assert storage.batch_set_v1(k, page_indices([0, 1])) == [True, True]
        d.pause()
        try:
            before = fill(pool, [4, 5], seed=20)
            assert storage.batch_get_v1(k, page_indices([4, 5])) == [False, False]
            assert storage.batch_exists(k) == 0
        finally:
            d.resume()
        assert all(same(a, b) for a, b in zip(before, read(pool, [4, 5])))
    finally:
        d.close()


def test_pages_survive_a_restart_on_the_l2_disk_tier(tmp_path):
    d = start_daemon(PAGE, "--l2-path", str(tmp_path / "l2"), "--l2-gb", "0.0625")
    try:
        pool, storage = make(d.socket)
        k = keys(TOKENS)[:3]
        written = fill(pool, [0, 1, 2], seed=21)
        assert storage.batch_set_v1(k, page_indices([0, 1, 2])) == [True] * 3
        deadline = time.monotonic() + 10
        while True:  # write-through to L2 is asynchronous
            with d.client() as c:
                l2 = c.stats()["tiers"].get("L2", {})
            if l2.get("chunks", 0) >= 3:
                break
            assert time.monotonic() < deadline, f"L2 never held the pages: {l2}"
            time.sleep(0.05)
        d.restart()  # L1 is gone; L2's index is rebuilt from its files
        deadline = time.monotonic() + 15
        while storage.batch_exists(k) != 3:
            assert time.monotonic() < deadline, "the restarted daemon never found its L2 pages"
            time.sleep(0.05)
        assert storage.batch_get_v1(k, page_indices([9, 10, 11])) == [True] * 3
        assert all(same(a, b) for a, b in zip(written, read(pool, [9, 10, 11])))
    finally:
        d.close()


@pytest.fixture
def redis_url(tmp_path):
    import shutil
    import socket
    import subprocess

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
    yield f"127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


def test_pages_one_node_stored_come_to_another_node_through_l3_redis(redis_url):
    first = start_daemon(PAGE, "--l3-redis", redis_url)
    second = start_daemon(PAGE, "--l3-redis", redis_url)
    try:
        pool_a, a = make(first.socket)
        pool_b, b = make(second.socket)
        k = keys(TOKENS)[:3]
        written = fill(pool_a, [0, 1, 2], seed=23)
        assert a.batch_set_v1(k, page_indices([0, 1, 2])) == [True] * 3
        deadline = time.monotonic() + 15
        while b.batch_exists(k) != 3:  # write-through to Redis is asynchronous
            assert time.monotonic() < deadline, "the other node never saw the pages in L3"
            time.sleep(0.05)
        assert b.batch_get_v1(k, page_indices([20, 21, 22])) == [True] * 3
        assert all(same(x, y) for x, y in zip(written, read(pool_b, [20, 21, 22])))
    finally:
        first.close()
        second.close()
