"""Fixtures of the vLLM connector tests: a real kvstashd on the host backend
on a private socket per test, and a tiny Llama config for vLLM's ModelConfig."""

from __future__ import annotations

import pytest

from vllm_support import start_daemon


@pytest.fixture
def daemon():
    d = start_daemon()
    yield d
    d.close()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    from vllm_harness import write_tiny_llama
    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
