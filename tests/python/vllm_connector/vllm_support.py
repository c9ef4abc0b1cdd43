"""Support of the vLLM connector tests (importable without vllm): the real
vllm package, and kvstashd on the host backend as the connector's tests and
bench/vllm_connector_overhead.py start it (tests/python/kvstashd_process.py).

Without vllm installed these tests skip with the reason shown; under CI
(CI=true, or KVSTASH_REQUIRE_VLLM=1 as scripts/test_python.sh sets it) a
missing vllm is an error, so CI can never pass them by skipping.
"""

from __future__ import annotations

import os

import pytest

CHUNK_TOKENS = 32


def vllm_or_skip():
    """Imports vllm, or skips the calling module with the reason; under CI
    a missing vllm fails instead, so CI never passes these tests by skipping."""
    try:
        import vllm  # noqa: F401
    except Exception as error:  # ImportError, or a broken install
        reason = (f"vllm is not importable ({type(error).__name__}: {error}); install a vLLM "
                  "from 0.26.0 to 0.33.0 (scripts/test_python.sh makes a venv per tested one)")
        if os.environ.get("CI", "").lower() == "true" or os.environ.get("KVSTASH_REQUIRE_VLLM") == "1":
            raise RuntimeError(
                "CI=true or KVSTASH_REQUIRE_VLLM=1: the vLLM connector tests must run, but "
                + reason) from error
        pytest.skip(reason, allow_module_level=True)


def start_daemon(chunk_tokens: int = CHUNK_TOKENS, l1_gb: float = 0.0625):
    """kvstashd on the host backend for the connector: chunks of
    CHUNK_TOKENS, a 64 MiB pool, one pinning and two copy threads (the
    tests' defaults; benchmarks ask for more)."""
    from kvstashd_process import Daemon

    return Daemon("--pin-threads", "1", "--copy-threads", "2", chunk_tokens=chunk_tokens,
                  l1_gb=l1_gb)
