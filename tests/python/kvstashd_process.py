"""A real kvstashd for the Python tests and benchmarks: one process on a
socket in its own temporary folder, started at construction and ready once
its L1 pool is (a store before that may be skipped for lack of room).

kvstashd comes from $KVSTASH_BIN_DIR (default: build/bin of this checkout).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]


def bin_dir() -> Path:
    return Path(os.environ.get("KVSTASH_BIN_DIR", REPO / "build" / "bin"))


class Daemon:
    """One kvstashd process on a socket in its own temporary folder. Extra
    arguments go to kvstashd after the ones set here."""

    def __init__(self, *args: str, backend: str = "host", chunk_tokens: int = 16,
                 l1_gb: float = 0.25) -> None:
        binary = bin_dir() / "kvstashd"
        if not binary.is_file():
            raise RuntimeError(f"kvstashd not found at {binary}: build it or set KVSTASH_BIN_DIR")
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
        import kvstash

        self.log = open(os.path.join(self.dir, "kvstashd.log"), "ab")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvstashd exited with {self.proc.returncode}: {self.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"kvstashd was not ready in 10 s: {self.output()}")
            if os.path.exists(self.socket_path):
                try:
                    with kvstash.Client(socket=self.socket, timeout_ms=500) as client:
                        pool = client.describe()["tiers"][0]["pool"]
                        if pool["capacity_bytes"] and pool["ready_bytes"] >= pool["capacity_bytes"]:
                            return
                except kvstash.Error:
                    pass
            time.sleep(0.01)

    def client(self, name: str = "test"):
        import kvstash

        return kvstash.Client(socket=self.socket, timeout_ms=5000, name=name)

    def output(self) -> str:
        with open(os.path.join(self.dir, "kvstashd.log"), "rb") as f:
            return f.read().decode(errors="replace")

    def pause(self) -> None:
        """SIGSTOP: requests queue up unanswered (a load or store 'in flight')."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.resume()  # a stopped process would not act on SIGTERM
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
