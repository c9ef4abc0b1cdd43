"""The examples in examples/ run and pass against a real kvstashd."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kvstashd_process import REPO

pytest.importorskip("numpy")


def test_python_host_engine_example_passes(daemon):
    out = subprocess.run(
        [sys.executable, str(REPO / "examples" / "python_host_engine.py"), "--socket", daemon.socket],
        capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASS" in out.stdout
    assert "loaded 48 of" in out.stdout


def test_llama_example_round_trips_on_the_host_backend():
    """The GPU Llama example's logic, run on the CPU (host backend): the
    restored KV gives the same next-token logits as the model's own."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = subprocess.run(
        [sys.executable, str(REPO / "examples" / "llama_gpu_roundtrip.py"), "--device", "cpu",
         "--prompt-tokens", "150", "--chunk-tokens", "32"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "identical" in out.stdout and "PASS" in out.stdout
