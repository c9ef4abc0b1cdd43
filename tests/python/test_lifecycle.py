"""The daemon going away and coming back: calls fail with Unavailable while
it is gone, and after a restart the library registers again by itself."""

from __future__ import annotations

import time

import pytest

import kvstash

from conftest import needs_full_c_api
from layout_cases import fill_random, vllm_flash_nhd

np = pytest.importorskip("numpy")




def _wait_for(predicate, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except kvstash.Error:
            pass
        time.sleep(0.05)
    return False


@needs_full_c_api
def test_daemon_gone_is_unavailable(private_daemon):
    with kvstash.Client(socket=private_daemon.socket, timeout_ms=1000) as client:
        case = vllm_flash_nhd("numpy", "cpu")
        reg = client.register(case.layers, model="gone")
        keys = reg.chunk_keys(list(range(32)))
        private_daemon.stop()
        with pytest.raises(kvstash.Unavailable):
            client.ping()
        with pytest.raises(kvstash.Unavailable):
            reg.lookup(keys)
        with pytest.raises(kvstash.Unavailable):
            reg.lookup_async(keys).result(10)


@needs_full_c_api
def test_daemon_restart_registers_again_under_the_same_id(private_daemon):
    with kvstash.Client(socket=private_daemon.socket, timeout_ms=2000) as client:
        case = vllm_flash_nhd("numpy", "cpu")
        fill_random(case.bases, 11)
        reg = client.register(case.layers, model="restart")
        tokens = np.arange(32, dtype=np.int32)
        table = np.array([0, 1, 2, 3], dtype=np.int32)
        assert all(o.ok for o in reg.store(reg.chunks(tokens, table)))
        boot = client.server_info.boot_id

        private_daemon.restart()
        assert _wait_for(lambda: client.server_info.restarts == 1), "no restart seen"
        assert client.server_info.boot_id != boot

        # Same registration id, new daemon: the old chunks are gone, new ones work.
        assert _wait_for(lambda: reg.lookup(reg.chunk_keys(tokens)).hit_chunks == 0)
        stored = reg.store(reg.chunks(tokens, table))
        assert [o.result for o in stored] == [kvstash.ChunkResult.STORED] * 2
        got = reg.retrieve(reg.chunks(tokens, np.array([4, 5, 6, 7], dtype=np.int32)))
        assert all(o.ok for o in got)
        kv = case.bases[0].view(np.uint16)
        assert np.array_equal(kv[:, 4:8], kv[:, 0:4])


def test_a_frozen_daemon_times_out_and_the_wait_releases_the_gil(private_daemon):
    """While a blocking call waits (here for a daemon stopped with SIGSTOP),
    other Python threads run; the call ends with TimedOut at its deadline."""
    import signal
    import threading

    with kvstash.Client(socket=private_daemon.socket, timeout_ms=800) as client:
        client.ping()
        private_daemon.proc.send_signal(signal.SIGSTOP)
        try:
            outcome = {}

            entering = threading.Event()

            def blocked():
                start = time.monotonic()
                entering.set()
                try:
                    client.ping()
                except kvstash.Error as e:
                    outcome["error"] = e
                outcome["seconds"] = time.monotonic() - start

            t = threading.Thread(target=blocked)
            t.start()
            entering.wait()
            spins = 0
            while t.is_alive():
                spins += 1
            t.join()
        finally:
            private_daemon.proc.send_signal(signal.SIGCONT)
        assert isinstance(outcome.get("error"), kvstash.TimedOut), outcome
        assert 0.5 < outcome["seconds"] < 5
        assert spins > 50_000  # this thread kept running during the wait (a few hundred if not)
