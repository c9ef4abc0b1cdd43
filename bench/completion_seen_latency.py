#!/usr/bin/env python3
"""How late a busy Python thread learns that a retrieve landed: from its
completion-board slot, or from its reply future (CPU only, kvstashd on the
host backend).

An engine's thread runs Python between its checks (vLLM's empty steps while
a load is in flight). The reply future is resolved by the client's
dispatcher thread, which needs the GIL: while the engine thread runs Python,
it gets it only when that thread blocks or at the interpreter's switch
interval (sys.getswitchinterval(), 5 ms by default). A board slot is read by
the engine thread itself. Each round issues one retrieve_on_stream (no
stream) of --chunks chunks and spins, --work-us of Python between checks,
until the slot is released (board) or the future is done (reply); printed:
median, p90 and max of issue -> seen, in microseconds.

    KVSTASH_BIN_DIR=build/bin KVSTASH_LIB=build/client/libkvstash.so PYTHONPATH=python \\
        /opt/kvstash-ci/venv-vllm-0.33.0/bin/python bench/completion_seen_latency.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

import numpy as np  # noqa: E402

import kvstash  # noqa: E402
from kvstashd_process import Daemon  # noqa: E402


def python_work(us: float) -> None:
    """About `us` microseconds of pure Python (holds the GIL throughout)."""
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--work-us", type=float, default=10.0,
                        help="Python run between two checks")
    args = parser.parse_args()
    chunk_tokens = 256
    daemon = Daemon(chunk_tokens=chunk_tokens, l1_gb=0.0625)
    try:
        return measure(args, daemon, chunk_tokens)
    finally:
        daemon.close()


def measure(args: argparse.Namespace, daemon: Daemon, chunk_tokens: int) -> int:
    with kvstash.Client(socket=daemon.socket, name="completion-seen") as client:
        board = kvstash.CompletionBoard(client, slots=64)
        blocks = args.chunks * chunk_tokens // 16
        kv = kvstash.host_tensor((2, blocks, 16, 8, 128), np.float16)
        kv[...] = 1
        reg = client.register([kv], model="completion-seen", board=board)
        chunks = reg.chunks(list(range(1000, 1000 + args.chunks * chunk_tokens)),
                            list(range(blocks)))
        if any(not o.ok for o in reg.store(chunks)):
            print("store failed", file=sys.stderr)
            return 1
        print(f"switch interval {sys.getswitchinterval() * 1e3:.1f} ms, {args.chunks} chunks, "
              f"{args.work_us:g} us of Python between checks")
        print("| seen from | median us | p90 us | max us |")
        print("| --- | ---: | ---: | ---: |")
        for mode in ("board slot", "reply future"):
            lags = []
            for _ in range(args.rounds):
                request = reg.retrieve_on_stream(chunks, stream=None)
                began = time.monotonic_ns()
                while True:
                    python_work(args.work_us)
                    if request.released(0) if mode == "board slot" else request.outcomes.done():
                        break
                lags.append((time.monotonic_ns() - began) / 1e3)
                if any(not o.ok for o in request.result(10)):
                    print("retrieve failed", file=sys.stderr)
                    return 1
            lags.sort()
            print(f"| {mode} | {statistics.median(lags):.0f} | {lags[int(0.9 * len(lags))]:.0f} "
                  f"| {lags[-1]:.0f} |")
        reg.unregister()
    return 0


if __name__ == "__main__":
    sys.exit(main())
