"""Asynchronous calls: concurrent.futures.Future resolved by one dispatcher
thread per client (never a thread per call), asyncio twins, many threads."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait

import pytest

import kvstash

from conftest import needs_full_c_api
from layout_cases import fill_random, vllm_flash_nhd

np = pytest.importorskip("numpy")

pytestmark = needs_full_c_api


@pytest.fixture
def reg(client):
    case = vllm_flash_nhd("numpy", "cpu")
    fill_random(case.bases, 3)
    r = client.register(case.layers, model="async")
    r.case = case
    yield r
    r.unregister()


def test_async_calls_return_futures_with_the_blocking_results(reg):
    tokens = np.arange(40, dtype=np.int32)
    stored = reg.store_async(reg.chunks(tokens, np.arange(5, dtype=np.int32)))
    assert isinstance(stored, Future)
    assert [o.result for o in stored.result(5)] == [kvstash.ChunkResult.STORED] * 3
    hit = reg.lookup_async(reg.chunk_keys(tokens), lease_ms=2000).result(5)
    assert (hit.hit_chunks, hit.hit_tokens) == (3, 40) and hit.lease_id
    got = reg.retrieve_async(reg.chunks(tokens, np.arange(5, 10, dtype=np.int32)),
                             lease_id=hit.lease_id).result(5)
    assert all(o.ok for o in got)
    kv = reg.case.bases[0].view(np.uint16)
    assert np.array_equal(kv[:, 5:10], kv[:, 0:5])
    # The retrieve ended that lease; a new one is released here.
    with pytest.raises(kvstash.NotFound):
        reg.release_async(hit.lease_id).result(5)
    lease = reg.lookup_async(reg.chunk_keys(tokens), lease_ms=2000).result(5).lease_id
    assert reg.release_async(lease).result(5) == 3


def test_blocking_release_returns_the_chunks_it_held(reg):
    tokens = list(range(32))
    reg.store(reg.chunks(tokens, [0, 1, 2, 3]))
    hit = reg.lookup(reg.chunk_keys(tokens), lease_ms=5000)
    assert reg.release(hit.lease_id) == 2


def test_errors_arrive_through_the_future(client, reg):
    bad = reg.chunks(list(range(16)), [999, 1000])  # block ids past num_blocks
    with pytest.raises(kvstash.Error) as raised:
        reg.store_async(bad).result(5)
    assert raised.value.code in (1, 5)  # InvalidArgument or OutOfRange, with its message
    assert "999" in str(raised.value) or "block" in str(raised.value)
    gone = client.register(reg.case.layers, model="gone")
    gone.unregister()
    with pytest.raises(kvstash.NotFound):
        gone.lookup_async([b"\0" * 32]).result(5)


def test_one_dispatcher_thread_serves_many_threads(client, reg):
    """16 threads x 100 calls: every future resolves with the right value and
    the client adds one thread, whatever the number of calls in flight."""
    tokens = [np.arange(t * 1000, t * 1000 + 32, dtype=np.int32) for t in range(16)]
    reg.lookup([b"\0" * 32])  # starts nothing: the blocking path has no thread
    before = threading.active_count()
    reg.lookup_async([b"\0" * 32]).result(5)  # starts the dispatcher
    assert threading.active_count() == before + 1

    def worker(t: int) -> int:
        futures = []
        keys = reg.chunk_keys(tokens[t])
        table = np.arange(4 * (t % 3), 4 * (t % 3) + 4, dtype=np.int32)  # 32 tokens, blocks of 8
        futures.append(reg.store_async(reg.chunks(tokens[t], table)))
        futures[0].result(30)  # stored before anything looks for it
        for i in range(1, 100):
            if i % 3 == 0:
                futures.append(reg.retrieve_async(reg.chunks(tokens[t], table)))
            else:
                futures.append(reg.lookup_async(keys))
        done, not_done = wait(futures, timeout=60)
        assert not not_done
        assert all(o.ok for o in futures[0].result())
        for f in futures[1:]:
            r = f.result()
            if isinstance(r, kvstash.LookupResult):
                assert r.hit_chunks == 2, r
            else:
                assert all(o.result == kvstash.ChunkResult.RETRIEVED for o in r)
        return len(futures)

    in_flight_threads = []
    with ThreadPoolExecutor(16) as pool:
        counts = list(pool.map(worker, range(16)))
        in_flight_threads.append(threading.active_count())
    assert counts == [100] * 16
    # The pool's 16 workers and the dispatcher, nothing per call.
    assert max(in_flight_threads) <= before + 1 + 16


def test_asyncio_twins(reg):
    async def main():
        tokens = np.arange(500, 532, dtype=np.int32)
        stored = await reg.store_aio(reg.chunks(tokens, np.array([6, 7, 8, 9], np.int32)))
        assert [o.result for o in stored] == [kvstash.ChunkResult.STORED] * 2
        keys = reg.chunk_keys(tokens)
        hits = await asyncio.gather(*(reg.lookup_aio(keys) for _ in range(200)))
        assert all(h.hit_chunks == 2 for h in hits)
        got = await reg.retrieve_aio(reg.chunks(tokens, np.array([10, 11, 0, 1], np.int32)))
        assert all(o.ok for o in got)
        lease = await reg.lookup_aio(keys, lease_ms=1000)
        assert await reg.release_aio(lease.lease_id) == 2
        # A plain Future awaits too.
        assert (await asyncio.wrap_future(reg.lookup_async(keys))).hit_chunks == 2

    asyncio.run(main())


def test_close_cancels_or_completes_every_pending_call(daemon):
    client = kvstash.Client(socket=daemon.socket)
    case = vllm_flash_nhd("numpy", "cpu")
    reg = client.register(case.layers, model="closing")
    keys = reg.chunk_keys(list(range(64)))
    futures = [reg.lookup_async(keys) for _ in range(500)]
    client.close()
    done, not_done = wait(futures, timeout=10)
    assert not not_done
    for f in futures:
        if f.exception() is not None:
            assert isinstance(f.exception(), kvstash.Cancelled)
    late = reg.lookup_async(keys)
    with pytest.raises(kvstash.Cancelled):
        late.result(1)
