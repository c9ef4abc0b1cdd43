"""Fixtures of the SGLang HiCache backend tests: SGLang 0.5.17's own classes
(HiCacheStorage, the dynamic backend loader, the host pools on a memfd, the
page hash) with real kvstashd processes on the host backend."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# kvstashd_process (tests/python) and sglang_harness (this folder).
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

try:
    import sglang  # noqa: F401
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage  # noqa: F401
    HAVE_SGLANG = True
except ImportError:
    HAVE_SGLANG = False

if not HAVE_SGLANG:
    if os.environ.get("KVSTASH_REQUIRE_SGLANG") == "1":
        raise RuntimeError("KVSTASH_REQUIRE_SGLANG=1 but sglang does not import")
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture
def daemon():
    from sglang_harness import PAGE, start_daemon

    d = start_daemon(PAGE)
    yield d
    d.close()
