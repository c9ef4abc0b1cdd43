"""The lookup's tier accessors and prefetch from Python, against a real
kvstashd with L2 in a private directory."""

from __future__ import annotations

import shutil
import tempfile
import time

import pytest

import kvstash

from kvstashd_process import Daemon


@pytest.fixture
def l2_daemon():
    l2 = tempfile.mkdtemp(prefix="kvstash-py-l2-")
    d = Daemon("--l2-path", l2, "--l2-gb", "0.01")
    yield d
    d.close()
    shutil.rmtree(l2, ignore_errors=True)


def _registration(client):
    import numpy as np

    kv = kvstash.host_tensor((2, 8, 8, 2, 8), np.float16)
    kv[...] = 3
    return kv, client.register([kv], model="tiers-py")


def test_lookup_names_each_hits_tier_and_prefetch_completes(l2_daemon):
    tokens = list(range(48))  # three chunks of 16
    with kvstash.Client(socket=l2_daemon.socket, timeout_ms=5000) as client:
        kv, reg = _registration(client)
        reg.store(reg.chunks(tokens, [0, 1, 2, 3, 4, 5]))
        # Written behind (write-through): wait until L2 took all three.
        for _ in range(500):
            tiers = client.stats()["tiers"]
            if tiers["L2"]["counters"]["put_chunks"] >= 3:
                break
            time.sleep(0.01)
    l2_daemon.restart()  # L1 is empty; L2 is rebuilt from disk
    with kvstash.Client(socket=l2_daemon.socket, timeout_ms=5000) as client:
        kv, reg = _registration(client)
        hit = reg.lookup(reg.chunk_keys(tokens), prefetch=True)
        assert hit.hit_chunks == 3
        assert hit.hit_tiers == ["L2", "L2", "L2"]
        assert (hit.l1_chunks, hit.l2_chunks, hit.l3_chunks) == (0, 3, 0)
        reg.release(hit.lease_id)
        for _ in range(500):
            again = reg.lookup(reg.chunk_keys(tokens))
            reg.release(again.lease_id)
            if again.prefetch_done and again.hit_tiers == ["L1"] * 3:
                break
            time.sleep(0.01)
        assert again.prefetch_done
        assert again.hit_tiers == ["L1", "L1", "L1"]
