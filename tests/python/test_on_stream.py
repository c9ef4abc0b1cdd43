"""GPU-side completion from Python (Registration.retrieve_on_stream and
store_on_stream) on the host backend: with no stream, kvstashd releases a
request's board slots by CPU writes in the order its GPU streams would, so
the slots, their status words and the bytes at the moment of release are
checked here without a GPU (tests/python/test_gpu.py does it on streams)."""

from __future__ import annotations

import time

import pytest

import kvstash

np = pytest.importorskip("numpy")

LAYERS = 4
BLOCKS = 32
BLOCK_TOKENS = 8  # the daemon's chunks are 16 tokens: 2 blocks per chunk


def _layers():
    return [kvstash.host_tensor((2, BLOCKS, BLOCK_TOKENS, 2, 8), np.float16)
            for _ in range(LAYERS)]


def _fill(layers, blocks, seed):
    rng = np.random.default_rng(seed)
    for kv in layers:
        raw = kv.view(np.uint16)
        raw[:, blocks] = rng.integers(1, 0xFFFF, size=raw[:, blocks].shape, dtype=np.uint16)


def _poison(layers, blocks, value=0xDEAD):
    for kv in layers:
        kv.view(np.uint16)[:, blocks] = value


def _same(layers, a, b, which=range(LAYERS)):
    return all(np.array_equal(layers[i].view(np.uint16)[:, a], layers[i].view(np.uint16)[:, b])
               for i in which)


def _wait_released(request, k, timeout=5.0):
    """Polls slot k from the CPU, as a waiting stream would."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if request.released(k):
            return True
        time.sleep(0.00005)
    return False


@pytest.fixture
def board(client):
    b = kvstash.CompletionBoard(client, slots=16)
    yield b
    b.close()


@pytest.fixture
def reg(client, board):
    layers = _layers()
    r = client.register(layers, model="on-stream", board=board)
    r.kv = layers
    yield r
    r.unregister()


def _store(reg, tokens, blocks):
    outcomes = reg.store(reg.chunks(tokens, blocks))
    assert all(o.ok for o in outcomes), outcomes


def test_retrieve_releases_its_slot_once_every_byte_is_in_place(reg, board):
    tokens = np.arange(1000, 1048, dtype=np.int32)  # 3 chunks, 6 blocks
    src, dst = np.arange(0, 6), np.arange(10, 16)
    _fill(reg.kv, src, 1)
    _store(reg, tokens, src.astype(np.int32))
    _poison(reg.kv, dst)
    request = reg.retrieve_on_stream(reg.chunks(tokens, dst.astype(np.int32)))
    assert isinstance(request, kvstash.StreamRequest)
    assert request.board is board
    slot, count, sequence = request.signal
    assert count == 1 and sequence != 0 and 0 <= slot < 16
    assert _wait_released(request, 0)
    # At the moment of release, before the reply is looked at.
    assert _same(reg.kv, src, dst)
    assert request.status(0) == 0 and request.done
    outcomes = request.result(5)
    assert [o.result for o in outcomes] == [kvstash.ChunkResult.RETRIEVED] * 3
    assert request.outcomes.done()


def test_layer_ranges_are_released_one_by_one_with_their_layers(reg):
    tokens = np.arange(2000, 2032, dtype=np.int32)
    src, dst = np.arange(0, 4), np.arange(20, 24)
    _fill(reg.kv, src, 2)
    _store(reg, tokens, src.astype(np.int32))
    _poison(reg.kv, dst)
    # 4 layers in 3 ranges: [0, 1), [1, 2), [2, 4).
    ranges = [range(0, 1), range(1, 2), range(2, 4)]
    request = reg.retrieve_on_stream(reg.chunks(tokens, dst.astype(np.int32)), layer_ranges=3)
    assert request.signal.count == 3
    for k in range(3):
        assert _wait_released(request, k), f"range {k}"
        assert _same(reg.kv, src, dst, ranges[k]), f"range {k}'s layers at its release"
        assert request.status(k) == 0
        # A range released means every earlier one is too (stream order).
        assert all(request.released(j) for j in range(k))
    assert all(o.result == kvstash.ChunkResult.RETRIEVED for o in request.result(5))
    with pytest.raises(kvstash.InvalidArgument, match="outside the request's 3 slots"):
        request.released(3)


def test_more_layer_ranges_than_layers_is_refused_and_every_slot_released(reg):
    tokens = np.arange(3000, 3016, dtype=np.int32)
    request = reg.retrieve_on_stream(reg.chunks(tokens, np.array([0, 1], np.int32)),
                                     layer_ranges=5)
    with pytest.raises(kvstash.InvalidArgument, match="1 to 4"):
        request.result(5)
    for k in range(5):
        assert request.released(k)
        assert request.status(k) == 1  # InvalidArgument


def test_missing_chunks_release_the_slot_with_not_found(reg):
    tokens = np.arange(4000, 4032, dtype=np.int32)  # never stored
    request = reg.retrieve_on_stream(reg.chunks(tokens, np.arange(4, dtype=np.int32)))
    assert _wait_released(request, 0)
    assert request.status(0) == 4  # NotFound
    assert [o.result for o in request.result(5)] == [kvstash.ChunkResult.MISSING] * 2


def test_partly_missing_retrieve_copies_what_it_has(reg):
    tokens = np.arange(5000, 5032, dtype=np.int32)
    src, dst = np.arange(0, 4), np.arange(24, 28)
    _fill(reg.kv, src, 5)
    _store(reg, tokens, src.astype(np.int32))  # 2 chunks
    longer = np.arange(5000, 5048, dtype=np.int32)  # a third chunk, never stored
    _poison(reg.kv, np.arange(24, 30))
    request = reg.retrieve_on_stream(reg.chunks(longer, np.arange(24, 30, dtype=np.int32)))
    assert _wait_released(request, 0)
    assert request.status(0) == 4
    assert _same(reg.kv, src, dst)
    got = [o.result for o in request.result(5)]
    assert got == [kvstash.ChunkResult.RETRIEVED] * 2 + [kvstash.ChunkResult.MISSING]


def test_store_reads_the_blocks_only_after_the_gate_opens(reg):
    tokens = np.arange(6000, 6032, dtype=np.int32)
    blocks = np.arange(0, 4)
    _poison(reg.kv, blocks, 0x1111)  # what the engine has before its writes land
    request = reg.store_on_stream(reg.chunks(tokens, blocks.astype(np.int32)))
    assert request.signal.count == 2
    time.sleep(0.1)
    assert not request.released(1), "the blocks were read before the gate"
    assert not request.outcomes.done()
    # The engine's writes land, then it opens the gate.
    _fill(reg.kv, blocks, 6)
    request.open_gate()
    assert request.released(0)
    assert _wait_released(request, 1)
    assert request.status(1) == 0
    assert [o.result for o in request.result(5)] == [kvstash.ChunkResult.STORED] * 2
    dst = np.arange(28, 32)
    _poison(reg.kv, dst)
    assert all(o.ok for o in reg.retrieve(reg.chunks(tokens, dst.astype(np.int32))))
    assert _same(reg.kv, blocks, dst)


def test_a_slot_past_the_registered_board_is_refused_and_released(client, reg):
    # A 64-slot board, registered with another registration: ten gated
    # stores hold its slots 0..19, so the next request gets slot 20, past
    # the 16 slots of the board `reg` registered.
    big = kvstash.CompletionBoard(client, slots=64)
    other = client.register(_layers(), model="on-stream-big", board=big)
    held = [other.store_on_stream(other.chunks(np.arange(i * 100, i * 100 + 16, dtype=np.int32),
                                               np.array([2 * i, 2 * i + 1], np.int32)))
            for i in range(10)]
    assert sorted(h.signal.slot for h in held) == list(range(0, 20, 2))
    request = reg.retrieve_on_stream(reg.chunks(np.arange(16, dtype=np.int32),
                                                np.array([0, 1], np.int32)), board=big)
    assert request.signal.slot == 20 and request.board is big
    with pytest.raises(kvstash.OutOfRange, match="holds 16"):
        request.result(5)
    # libkvstash released the slot itself: nothing waits on it.
    assert request.released(0)
    assert request.status(0) == 5  # OutOfRange
    for h in held:
        h.open_gate()
    for h in held:
        assert all(o.ok for o in h.result(5))
    other.unregister()
    big.close()


def test_a_registration_without_a_board_refuses_signals(client, board):
    plain = client.register(_layers(), model="on-stream-plain")
    chunks = plain.chunks(np.arange(16, dtype=np.int32), np.array([0, 1], np.int32))
    with pytest.raises(kvstash.InvalidArgument, match="no completion board"):
        plain.retrieve_on_stream(chunks)  # refused here: nothing to pass
    request = plain.retrieve_on_stream(chunks, board=board)  # the daemon refuses it
    with pytest.raises(kvstash.InvalidArgument, match="no completion board"):
        request.result(5)
    assert request.released(0)
    assert plain.board is None
    plain.unregister()


def test_bad_arguments_are_refused_before_anything_is_sent(reg, board):
    chunks = reg.chunks(np.arange(16, dtype=np.int32), np.array([0, 1], np.int32))
    with pytest.raises(kvstash.InvalidArgument, match="stream must be"):
        reg.retrieve_on_stream(chunks, stream="default")
    with pytest.raises(kvstash.InvalidArgument, match="layer_ranges"):
        reg.retrieve_on_stream(chunks, layer_ranges=-1)
    with pytest.raises(kvstash.InvalidArgument, match="kvstash.Chunks"):
        reg.store_on_stream([b"\0" * 32])
    with pytest.raises(kvstash.InvalidArgument, match="slot 16 is outside the board's 16"):
        board.release(16, 1)


def test_outcomes_work_with_asyncio(reg):
    import asyncio

    tokens = np.arange(7000, 7016, dtype=np.int32)
    _fill(reg.kv, np.array([0, 1]), 7)
    _store(reg, tokens, np.array([0, 1], np.int32))
    request = reg.retrieve_on_stream(reg.chunks(tokens, np.array([2, 3], np.int32)))

    async def main():
        return await asyncio.wrap_future(request.outcomes)

    assert [o.result for o in asyncio.run(main())] == [kvstash.ChunkResult.RETRIEVED]
    assert request.done


def test_a_gate_never_opened_fails_the_store_at_its_deadline(daemon, board):
    with kvstash.Client(socket=daemon.socket, timeout_ms=300, name="gate") as short:
        reg = short.register(_layers(), model="on-stream-gate", board=board)
        chunks = reg.chunks(np.arange(8000, 8016, dtype=np.int32), np.array([0, 1], np.int32))
        start = time.monotonic()
        request = reg.store_on_stream(chunks)
        try:
            outcomes = request.result(5)
        except kvstash.TimedOut:
            pass  # the client's timeout
        else:  # or the daemon's per-chunk TimedOut
            assert outcomes[0].result == kvstash.ChunkResult.FAILED
            assert outcomes[0].error == 10, outcomes
        assert _wait_released(request, 1, timeout=3)
        assert request.status(1) == 10  # TimedOut
        assert time.monotonic() - start < 3
        # Nothing was published (the lookup may time out while the lane
        # still holds the gated job: ask again).
        deadline = time.monotonic() + 3
        while True:
            try:
                hit = reg.lookup(chunks)
                break
            except kvstash.TimedOut:
                assert time.monotonic() < deadline
        assert hit.hit_chunks == 0


def test_streams_are_given_as_handles_and_the_default_stream_is_not_no_stream():
    from kvstash.board import stream_handle

    class TorchLikeStream:
        cuda_stream = 0x7F00_0000_1234

    assert stream_handle(None) is None
    assert stream_handle(0x55) == 0x55
    assert stream_handle(TorchLikeStream()) == 0x7F00_0000_1234
    # 0 (the legacy default stream, torch's default) must not read as
    # "no stream" (NULL) in the C API: it is passed as cudaStreamLegacy.
    assert stream_handle(0) == 1
    for bad in (-1, True, 1.5, 1 << 64):
        with pytest.raises(kvstash.InvalidArgument, match="stream must be"):
            stream_handle(bad)


def test_a_full_board_or_no_range_is_refused_at_once_with_no_slot_taken(reg, board):
    chunks = reg.chunks(np.arange(9000, 9016, dtype=np.int32), np.array([0, 1], np.int32))
    with pytest.raises(kvstash.InvalidArgument, match="1 to 16 slots of this board, not 0"):
        reg.retrieve_on_stream(chunks, layer_ranges=0)
    # Eight gated stores hold the board's 16 slots; the ninth finds none.
    # Each stores other chunks: a store of chunks another store is writing
    # is answered at once (nothing to copy), and its reply frees its slots.
    blocks = np.array([0, 1], np.int32)
    others = [
        reg.chunks(np.arange(9016 + 16 * i, 9032 + 16 * i, dtype=np.int32), blocks) for i in range(8)
    ]
    held = [reg.store_on_stream(c) for c in others]
    with pytest.raises(kvstash.ResourceExhausted, match="no 2 adjacent free slots"):
        reg.store_on_stream(chunks)
    for h in held:
        h.open_gate()
    for h in held:
        assert all(o.ok for o in h.result(5))
    # The slots came back with the replies.
    again = reg.retrieve_on_stream(others[0])
    assert all(o.ok for o in again.result(5))
