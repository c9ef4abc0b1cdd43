"""The examples in examples/ run and pass against a real kvstashd."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO, needs_full_c_api

pytest.importorskip("numpy")


@needs_full_c_api
def test_python_host_engine_example_passes(daemon):
    out = subprocess.run(
        [sys.executable, str(REPO / "examples" / "python_host_engine.py"), "--socket", daemon.socket],
        capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASS" in out.stdout
    assert "loaded 48 of" in out.stdout
