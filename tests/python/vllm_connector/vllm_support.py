"""Support of the vLLM connector tests (importable without vllm): the real vllm package and a real
kvstashd on the host backend, on a private socket.

Without vllm installed these tests skip with the reason shown; under CI
(CI=true, or KVSTASH_REQUIRE_VLLM=1 as scripts/test_python.sh sets it) a
missing vllm is an error, so CI can never pass them by skipping.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

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


def _bin_dir() -> Path:
    root = Path(__file__).resolve().parents[3]
    return Path(os.environ.get("KVSTASH_BIN_DIR", root / "build" / "bin"))


class Daemon:
    """kvstashd on the host backend, chunk_tokens 32, a 64 MiB pool."""

    def __init__(self, directory: Path) -> None:
        binary = _bin_dir() / "kvstashd"
        if not binary.exists():
            raise RuntimeError(f"{binary} does not exist: build kvstashd or set KVSTASH_BIN_DIR")
        self.socket = f"ipc://{directory}/kvstash.sock"
        self.log = open(directory / "kvstashd.log", "w")
        self.process = subprocess.Popen(
            [str(binary), "--backend", "host", "--socket", self.socket,
             "--chunk-tokens", str(CHUNK_TOKENS), "--l1-gb", "0.0625", "--l1-slice-mb", "4",
             "--pin-threads", "1", "--copy-threads", "2", "--log-level", "warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        import kvstash
        deadline = time.monotonic() + 10
        while True:
            try:
                with kvstash.Client(socket=self.socket, timeout_ms=500) as client:
                    # The pool is pinned in the background: a store before
                    # it is ready may be skipped for lack of room.
                    pool = client.describe()["tiers"][0]["pool"]
                    if pool["capacity_bytes"] and pool["ready_bytes"] >= pool["capacity_bytes"]:
                        break
            except kvstash.Error:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kvstashd did not come up; see {directory}/kvstashd.log")
            time.sleep(0.05)

    def client(self):
        import kvstash
        return kvstash.Client(socket=self.socket, timeout_ms=5000, name="test")

    def pause(self) -> None:
        """SIGSTOP: requests queue up unanswered (a load or store 'in flight')."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.resume()  # a stopped process would not act on SIGTERM
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
