"""pytest harness for the kvstash Python package: a real kvstashd (host
backend unless a test asks for cuda) on a private socket per test module.

kvstashd comes from $KVSTASH_BIN_DIR (default: build/bin of this checkout).
The package under test is whatever `import kvstash` finds: the installed
wheel in CI (scripts/test_python.sh), or python/ with PYTHONPATH=python.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]


def bin_dir() -> Path:
    return Path(os.environ.get("KVSTASH_BIN_DIR", REPO / "build" / "bin"))


class Daemon:
    """One kvstashd process on a socket in its own temporary folder."""

    def __init__(self, *args: str, backend: str = "host", chunk_tokens: int = 16,
                 l1_gb: float = 0.25) -> None:
        binary = bin_dir() / "kvstashd"
        if not binary.is_file():
            pytest.fail(f"kvstashd not found at {binary}: build it or set KVSTASH_BIN_DIR")
        self.dir = tempfile.mkdtemp(prefix="kvstash-py-")
        self.socket_path = os.path.join(self.dir, "kvstash.sock")
        self.socket = "ipc://" + self.socket_path
        self.argv = [
            str(binary), "--socket", self.socket, "--backend", backend, "--log-level", "warn",
            "--l1-gb", str(l1_gb), "--l1-slice-mb", "1", "--chunk-tokens", str(chunk_tokens), *args,
        ]
        self.proc: Optional[subprocess.Popen] = None
        self.start()

    def start(self) -> None:
        self.log = open(os.path.join(self.dir, "kvstashd.log"), "ab")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.socket_path):
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvstashd exited with {self.proc.returncode}: {self.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"kvstashd made no socket in 10 s: {self.output()}")
            time.sleep(0.01)

    def output(self) -> str:
        with open(os.path.join(self.dir, "kvstashd.log"), "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self.log.close()
        # A killed daemon leaves its socket file behind.
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    d.close()


@pytest.fixture
def private_daemon():
    """A daemon of the test's own, for tests that stop or restart it."""
    d = Daemon()
    yield d
    d.close()


@pytest.fixture
def client(daemon):
    import kvstash

    with kvstash.Client(socket=daemon.socket, timeout_ms=5000, name="pytest") as c:
        yield c


def has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def lib_exports(*names: str) -> bool:
    from kvstash import _lib

    return not set(names) & set(_lib.lib().missing)


# Calls of the complete C API (async submit, server info, describe/stats/clear,
# readiness, one socket rule); a libkvstash built before it skips these tests.
needs_full_c_api = pytest.mark.skipif(
    not lib_exports("kvstash_get_server_info", "kvstash_store_submit"),
    reason="this libkvstash predates the complete C API (no kvstash_get_server_info/_submit)",
)
