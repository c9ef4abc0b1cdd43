"""Client calls against a real kvstashd (host backend): connection, daemon
queries, errors carried as exceptions with their status codes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import kvstash



def test_ping_returns_the_daemon_uptime(client):
    first = client.ping()
    assert isinstance(first, int) and first >= 0
    assert client.ping() >= first


def test_server_info_names_the_host_backend(client):
    info = client.server_info
    assert info.backend == "host"
    assert info.chunk_tokens == 16
    assert len(info.boot_id) == 16 and any(info.boot_id)
    assert info.protocol_version >= 2
    assert info.max_chunks_per_request > 0
    assert info.restarts == 0


def test_describe_and_stats_are_json_objects(client):
    described = client.describe()
    stats = client.stats()
    assert isinstance(described, dict) and described
    assert isinstance(stats, dict) and stats


def test_pool_ready_reports_capacity(client):
    ready, capacity = client.pool_ready()
    assert capacity > 0
    assert 0 <= ready <= capacity


def test_socket_from_environment(daemon, monkeypatch):
    monkeypatch.setenv("KVSTASH_SOCKET", daemon.socket)
    with kvstash.Client() as c:
        assert c.ping() >= 0


def test_plain_path_means_an_ipc_socket(daemon):
    with kvstash.Client(socket=daemon.socket_path) as c:
        assert c.ping() >= 0


def test_no_daemon_is_unavailable(tmp_path):
    with pytest.raises(kvstash.Unavailable) as raised:
        kvstash.Client(socket=f"ipc://{tmp_path}/nobody.sock", timeout_ms=300)
    assert raised.value.code == 8
    assert str(raised.value)


def test_bad_options_are_invalid_arguments():
    with pytest.raises(kvstash.InvalidArgument, match="timeout_ms"):
        kvstash.Client(timeout_ms=-1)
    with pytest.raises(kvstash.InvalidArgument, match="socket"):
        kvstash.Client(socket=5)


def test_calls_after_close_raise_cancelled(daemon):
    c = kvstash.Client(socket=daemon.socket)
    c.close()
    c.close()  # idempotent
    with pytest.raises(kvstash.Cancelled):
        c.ping()
    assert c.closed


def test_exceptions_carry_codes_and_builtin_bases():
    assert issubclass(kvstash.InvalidArgument, ValueError)
    assert issubclass(kvstash.Unavailable, ConnectionError)
    assert issubclass(kvstash.TimedOut, TimeoutError)
    assert issubclass(kvstash.NotFound, kvstash.Error)
    e = kvstash.errors.error_for(10, "late")
    assert isinstance(e, kvstash.TimedOut) and e.code == 10 and str(e) == "late"
    codes = {cls(0, "").__class__: n for n, cls in kvstash.errors._BY_CODE.items()}
    assert len(codes) == 12


def test_import_needs_neither_torch_nor_numpy():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['numpy'] = None\n"
        "import kvstash\n"
        "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "print(kvstash.Client.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Client"


def test_clear_drops_stored_chunks(client):
    reg = _small_registration(client, model="clear-me")
    tokens = list(range(32))
    reg.store(reg.chunks(tokens, [0, 1, 2, 3]))
    hit = reg.lookup(reg.chunk_keys(tokens))
    assert hit.hit_chunks == 2
    assert client.clear(model="clear-me") == 0  # the lookup's lease keeps them
    assert reg.release(hit.lease_id) == 2
    assert client.clear(model="clear-me") == 2
    assert reg.lookup(reg.chunk_keys(tokens)).hit_chunks == 0
    assert client.clear(model="clear-me") == 0


def test_a_chain_continued_from_a_chunk_key_gives_the_keys_from_token_zero(client):
    reg = _small_registration(client, model="chain")
    c = reg.chunk_tokens
    tokens = [(t * 37) % 1000 for t in range(4 * c + 5)]
    whole = reg.chunk_keys(tokens)
    assert len(whole) == 5
    for k in range(1, 5):
        assert reg.chunk_keys(tokens[k * c:], after=whole[k - 1]) == whole[k:]
    assert reg.chunk_keys(tokens, after=None) == whole
    # Chunks continued from chunk 2: their own block table, the same keys
    # and blocks as the whole prompt's chunks 2 and 3.
    per_block = c // reg.block_tokens
    table = list(range(8))
    full = reg.chunks(tokens[:4 * c], table[:4 * per_block])
    rest = reg.chunks(tokens[2 * c:4 * c], table[2 * per_block:4 * per_block], after=whole[1])
    assert rest.keys == full.keys[2:4]
    assert rest.key(-1) == whole[3]
    assert [rest.block_ids(i) for i in range(2)] == [full.block_ids(i) for i in range(2, 4)]
    # Stored through the continued chain, found by the keys from token 0.
    reg.store(full[:2])
    reg.store(rest)
    hit = reg.lookup(whole[:4])
    assert hit.hit_chunks == 4
    reg.release(hit.lease_id)
    for bad in (b"short", whole[0] + b"x", "a" * 32):
        with pytest.raises(kvstash.InvalidArgument, match="after must be a 32-byte key"):
            reg.chunk_keys(tokens, after=bad)
        with pytest.raises(kvstash.InvalidArgument, match="after must be a 32-byte key"):
            reg.chunks(tokens[:c], table, after=bad)


def _small_registration(client, model):
    import numpy as np

    kv = kvstash.host_tensor((2, 8, 8, 2, 8), np.float16)
    kv[...] = 1
    return client.register([kv], model=model)


def test_a_completion_board_is_registered_and_readable_from_the_cpu(client):
    import numpy as np

    board = kvstash.CompletionBoard(client, slots=8)
    kv = kvstash.host_tensor((2, 8, 8, 2, 8), np.float16)
    reg = client.register([kv], model="board-model", board=board)
    assert reg is not None
    # Nothing signalled yet: slot 0 holds 0, below any sequence.
    signal = kvstash.BoardSignal(slot=0, count=1, sequence=1)
    assert not board.released(signal)
    assert board.status(0) == 0
    with pytest.raises(kvstash.InvalidArgument):
        board.wait(0, signal)  # a CPU-only board has no streams
    with pytest.raises(kvstash.InvalidArgument, match="BoardSignal"):
        board.released((0, 1, 1))  # three ints are not a signal
    with pytest.raises(kvstash.InvalidArgument):
        kvstash.CompletionBoard(client, slots=5000)
    reg.unregister()
    board.close()


def test_every_function_of_the_c_api_is_bound():
    """_lib's prototypes cover kvstash.h, and the loaded library exports them."""
    import re
    from pathlib import Path

    from kvstash import _lib

    header = Path(__file__).resolve().parents[2] / "client/include/kvstash/kvstash.h"
    declared = set(re.findall(r"KVSTASH_API\s[^;{]*?\b(kvstash_\w+)\s*\(", header.read_text()))
    assert "kvstash_retrieve_on_stream" in declared
    assert declared - set(_lib._PROTOTYPES) == set()
    assert _lib.lib().missing == []
