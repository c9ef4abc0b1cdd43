"""Client.register_descriptor: KV memory the engine names by an open
descriptor (a memfd), mapped by kvstashd through /proc/<pid>/fd, and the
descriptors it refuses."""

from __future__ import annotations

import mmap
import os

import pytest

import kvstash
from kvstash import Geometry

TOKENS = 16  # the module daemon's chunk_tokens
HEAD = 64  # bytes per token
BLOCKS = 8


def geometry() -> Geometry:
    # One layer: BLOCKS blocks of TOKENS tokens, one head of HEAD bytes, K only.
    return Geometry(num_blocks=BLOCKS, kv_count=1, block_tokens=TOKENS, num_heads=1,
                    head_bytes=HEAD, block_stride=TOKENS * HEAD, kv_stride=0,
                    token_stride=HEAD, head_stride=HEAD)


SIZE = BLOCKS * TOKENS * HEAD


@pytest.fixture
def memfd():
    fd = os.memfd_create("kvstash-test")
    os.ftruncate(fd, SIZE)
    yield fd
    os.close(fd)


def test_a_memfd_round_trips_a_block_through_the_daemon(client, memfd):
    view = mmap.mmap(memfd, SIZE)
    block = TOKENS * HEAD
    view[:block] = bytes(range(256)) * (block // 256)
    reg = client.register_descriptor(memfd, SIZE, [(0, geometry())], model="descriptor-test")
    key = b"\x11" * 32
    chunks = reg.chunks_from_keys(key, TOKENS, [[0]])
    assert reg.store(chunks)[0].result == kvstash.ChunkResult.STORED
    out = reg.chunks_from_keys(key, TOKENS, [[5]])
    assert reg.retrieve(out)[0].result == kvstash.ChunkResult.RETRIEVED
    assert view[5 * block:6 * block] == view[:block]
    reg.unregister()
    view.close()


def test_a_file_on_disk_is_refused_as_not_shared_memory(client, tmp_path):
    path = tmp_path / "kv.bin"
    path.write_bytes(b"\0" * SIZE)
    fd = os.open(path, os.O_RDWR)
    try:
        with pytest.raises(kvstash.NotFound, match="not a memfd or a shared-memory file"):
            client.register_descriptor(fd, SIZE, [(0, geometry())], model="descriptor-test")
    finally:
        os.close(fd)


def test_a_pipe_is_refused_without_waiting_for_a_writer(client):
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(kvstash.InvalidArgument, match="is a FIFO"):
            client.register_descriptor(read_end, SIZE, [(0, geometry())], model="descriptor-test")
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_memfd_smaller_than_declared_is_refused_with_both_sizes(client, memfd):
    with pytest.raises(kvstash.OutOfRange, match=f"holds {SIZE} bytes, not the {2 * SIZE} bytes"):
        client.register_descriptor(memfd, 2 * SIZE, [(0, geometry())], model="descriptor-test")


def test_a_layer_past_the_declared_size_is_refused(client, memfd):
    with pytest.raises(kvstash.OutOfRange, match="spans bytes"):
        client.register_descriptor(memfd, SIZE, [(HEAD, geometry())], model="descriptor-test")


def test_a_closed_descriptor_is_refused(client):
    fd = 4000
    with pytest.raises(OSError):
        os.fstat(fd)  # not open in this process
    with pytest.raises(kvstash.NotFound, match=f"descriptor {fd} of process"):
        client.register_descriptor(fd, SIZE, [(0, geometry())], model="descriptor-test")


def test_a_negative_descriptor_is_refused_before_the_daemon(client):
    with pytest.raises(kvstash.InvalidArgument, match="-1"):
        client.register_descriptor(-1, SIZE, [(0, geometry())], model="descriptor-test")
