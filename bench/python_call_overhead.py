#!/usr/bin/env python3
"""Per-call overhead of the kvstash Python package over the C++ client, on
kvstashd's host backend: ping and a 64-key lookup (every key hits), p50 and
p99 in microseconds, the C++ probe (kvstash_call_latency) and Python taking
turns against one daemon.

    PYTHONPATH=python python3 bench/python_call_overhead.py          # starts kvstashd
    python3 bench/python_call_overhead.py --socket /tmp/kvstash.sock

kvstashd and kvstash_call_latency come from $KVSTASH_BIN_DIR (default
build/bin); $KVSTASH_PROBE names another kvstash_call_latency.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kvstash

BIN = Path(os.environ.get("KVSTASH_BIN_DIR", Path(__file__).resolve().parents[1] / "build" / "bin"))


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def timed(samples, call, after=None):
    """Times call(); after(result) runs outside the timing (a lookup's lease
    release: leases per client are bounded)."""
    for _ in range(samples // 10 + 10):
        result = call()
        if after:
            after(result)
    out = []
    clock = time.perf_counter
    for _ in range(samples):
        start = clock()
        result = call()
        out.append((clock() - start) * 1e6)
        if after:
            after(result)
    return out


def python_run(socket: str, samples: int) -> dict:
    import numpy as np

    with kvstash.Client(socket=socket, name="call-overhead") as client:
        chunk = client.server_info.chunk_tokens
        blocks = 64 * max(1, chunk // 16)
        kv = kvstash.host_tensor((2, blocks, 16, 1, 64), np.uint8)
        reg = client.register([kv], model="call-latency-python")
        tokens = np.arange(7, 7 + 64 * chunk, dtype=np.int32)
        reg.store(reg.chunks(tokens, np.arange(blocks, dtype=np.int32)))
        keys = reg.chunk_keys(tokens)
        blob = b"".join(keys)
        assert reg.lookup(keys).hit_chunks == 64

        out = {}
        # The floor under the package: the C API through bare ctypes.
        lib, handle = client._lib, client._connection.handle
        uptime = ctypes.c_uint64()
        result = kvstash._lib.CLookupResult()
        out["raw_ping"] = timed(samples, lambda: lib.kvstash_ping(handle, ctypes.byref(uptime)))
        out["raw_lookup64"] = timed(samples, lambda: lib.kvstash_lookup_ex(
            handle, reg.id, blob, 64, 0, 0, ctypes.byref(result)),
            lambda _: lib.kvstash_release(handle, result.lease_id))
        release = lambda found: reg.release(found.lease_id)  # noqa: E731
        out["ping"] = timed(samples, client.ping)
        out["lookup64"] = timed(samples, lambda: reg.lookup(keys), release)
        out["lookup64_blob"] = timed(samples, lambda: reg.lookup(blob), release)
        out["lookup64_future"] = timed(samples, lambda: reg.lookup_async(blob).result(), release)

        async def aio():
            loop_clock = time.perf_counter
            res = []
            for i in range(samples + samples // 10 + 10):
                start = loop_clock()
                found = await reg.lookup_aio(blob)
                if i >= samples // 10 + 10:
                    res.append((loop_clock() - start) * 1e6)
                reg.release(found.lease_id)
            return res

        out["lookup64_asyncio"] = asyncio.run(aio())
        reg.unregister()
    return out


def cpp_run(socket: str, samples: int) -> dict:
    probe = Path(os.environ.get("KVSTASH_PROBE", BIN / "kvstash_call_latency"))
    done = subprocess.run([str(probe), socket, str(samples)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--socket", default=None)
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3, help="C++ and Python take turns this often")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    daemon, folder, socket = None, None, args.socket
    if socket is None:
        folder = tempfile.mkdtemp(prefix="kvstash-overhead-")
        socket = f"ipc://{folder}/kvstash.sock"
        daemon = subprocess.Popen([str(BIN / "kvstashd"), "--socket", socket, "--backend", "host",
                                   "--l1-gb", "0.25", "--l1-slice-mb", "4", "--log-level", "warn"])
        while not os.path.exists(f"{folder}/kvstash.sock"):
            time.sleep(0.02)
    try:
        cpp, py = [], []
        for _ in range(args.rounds):
            cpp.append(cpp_run(socket, args.samples))
            py.append(python_run(socket, args.samples))
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait()
            shutil.rmtree(folder, ignore_errors=True)

    def med(key_cpp=None, key_py=None, p=0.5):
        if key_cpp:
            return statistics.median(r[key_cpp] for r in cpp)
        return statistics.median(percentile(r[key_py], p) for r in py)

    rows = [
        ("ping: C API via bare ctypes", med("ping_p50_us"), med(key_py="raw_ping"), med("ping_p99_us"),
         med(key_py="raw_ping", p=0.99)),
        ("ping: Client.ping()", med("ping_p50_us"), med(key_py="ping"), med("ping_p99_us"),
         med(key_py="ping", p=0.99)),
        ("64-key lookup: C API via bare ctypes", med("lookup64_p50_us"), med(key_py="raw_lookup64"),
         med("lookup64_p99_us"), med(key_py="raw_lookup64", p=0.99)),
        ("64-key lookup (list of keys)", med("lookup64_p50_us"), med(key_py="lookup64"),
         med("lookup64_p99_us"), med(key_py="lookup64", p=0.99)),
        ("64-key lookup (bytes blob)", med("lookup64_p50_us"), med(key_py="lookup64_blob"),
         med("lookup64_p99_us"), med(key_py="lookup64_blob", p=0.99)),
        ("64-key lookup_async().result()", med("lookup64_p50_us"), med(key_py="lookup64_future"),
         med("lookup64_p99_us"), med(key_py="lookup64_future", p=0.99)),
        ("64-key await lookup_aio()", med("lookup64_p50_us"), med(key_py="lookup64_asyncio"),
         med("lookup64_p99_us"), med(key_py="lookup64_asyncio", p=0.99)),
    ]
    if args.json:
        print(json.dumps([dict(call=r[0], cpp_p50_us=r[1], python_p50_us=r[2], cpp_p99_us=r[3],
                               python_p99_us=r[4]) for r in rows], indent=1))
        return 0
    print(f"{args.rounds} rounds x {args.samples} calls, medians of the rounds' percentiles "
          f"(Python {sys.version.split()[0]})")
    print(f"| call | C++ p50 us | Python p50 us | Python - C++ p50 us | C++ p99 | Python p99 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, c50, p50, c99, p99 in rows:
        print(f"| {name} | {c50:.1f} | {p50:.1f} | {p50 - c50:+.1f} | {c99:.1f} | {p99:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
