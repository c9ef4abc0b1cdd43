#!/usr/bin/env python3
"""kvstashd's Prometheus endpoint, end to end.

A real kvstashd (host backend) on a private ipc:// socket and a loopback
metrics port; workloads whose effect on every counter is known in advance
(`kvstash bench`, then the integration-test engine); scrapes before, during
and after, parsed with prometheus_client. Binaries come from KVSTASH_BIN_DIR.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    sys.exit(f"{sys.executable} lacks prometheus_client: install python3-prometheus-client "
             "(scripts/setup.sh) or configure with -DPython3_EXECUTABLE=/usr/bin/python3")

BIN_DIR = os.environ.get("KVSTASH_BIN_DIR", "")
DASHBOARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docker",
                         "grafana-dashboard.json")
CHUNK_TOKENS = 64
TIMEOUT_S = 30
REQUEST_KINDS = ("hello", "register_kv", "unregister_kv", "store", "retrieve", "lookup",
                 "release", "clear", "describe", "stats", "ping")


def binary(name):
    return os.path.join(BIN_DIR, name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(name, *args, expect_rc=0):
    """Runs one of our binaries; returns its stdout."""
    proc = subprocess.run([binary(name), *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    if proc.returncode != expect_rc:
        raise AssertionError(f"{name} {' '.join(map(str, args))}: exit {proc.returncode}, "
                             f"expected {expect_rc}\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def has_bench():
    try:
        return subprocess.run([binary("kvstash"), "bench", "--help"], capture_output=True,
                              timeout=TIMEOUT_S).returncode == 0
    except OSError:
        return False


def listening_tcp(pid):
    """(address, port) of every TCP socket the process listens on."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        match = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
        if match:
            inodes.add(match.group(1))
    found = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    address, port = fields[1].split(":")
                    if table == "tcp":
                        address = socket.inet_ntoa(bytes.fromhex(address)[::-1])
                    found.append((address, int(port, 16)))
    return found


class Scrape:
    """One GET /metrics, parsed; checks the format on the way."""

    def __init__(self, port):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            assert reply.status == 200, reply.status
            content_type = reply.headers["Content-Type"]
            assert content_type.startswith("text/plain; version=0.0.4"), content_type
            text = reply.read().decode()
        self.types = {}    # family name -> type
        self.values = {}   # (sample name, sorted labels) -> value
        for family in text_string_to_metric_families(text):
            assert family.name not in self.types, f"family {family.name} twice"
            assert family.documentation, f"no HELP for {family.name}"
            self.types[family.name] = family.type
            for sample in family.samples:
                self.values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        self.check_histograms()

    def get(self, name, **labels):
        return self.values[(name, tuple(sorted((k, str(v)) for k, v in labels.items())))]

    def names(self):
        """Every sample name the families declare, with or without samples."""
        suffixes = {"counter": ("_total",), "gauge": ("",),
                    "histogram": ("_bucket", "_sum", "_count")}
        return {family + suffix for family, kind in self.types.items()
                for suffix in suffixes[kind]}

    def series(self, name):
        """{labels: value} of every series of a sample name."""
        return {labels: v for (n, labels), v in self.values.items() if n == name}

    def check_histograms(self):
        name = "kvstash_request_duration_seconds"
        assert self.types[name] == "histogram"
        for kind in REQUEST_KINDS:
            buckets = sorted((float(dict(labels)["le"]), v)
                             for labels, v in self.series(name + "_bucket").items()
                             if dict(labels)["request"] == kind)
            assert buckets[-1][0] == float("inf"), kind
            assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), kind
            assert self.get(name + "_count", request=kind) == buckets[-1][1], kind

    def counters(self):
        """Values of every counter, histogram bucket, count and sum: all only go up."""
        return {key: v for key, v in self.values.items()
                if key[0].endswith(("_total", "_bucket", "_count", "_sum"))}

    def delta(self, before, name, **labels):
        return self.get(name, **labels) - before.get(name, **labels)


class Daemon:
    """kvstashd on a private socket; killed on exit whatever happens."""

    def __init__(self, metrics=True, metrics_port=None):
        self.dir = tempfile.mkdtemp(prefix="kvstash-metrics-")
        self.socket = f"ipc://{self.dir}/s.sock"
        self.port = metrics_port or (free_port() if metrics else None)
        self.args = [binary("kvstashd"), "--backend", "host", "--l1-gb", "0.25",
                     "--socket", self.socket, "--chunk-tokens", str(CHUNK_TOKENS)]
        if self.port:
            self.args += ["--metrics-port", str(self.port)]
        self.proc = None

    def __enter__(self):
        self.stderr = open(os.path.join(self.dir, "stderr"), "w+")
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=self.stderr)
        try:
            self.wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def wait_ready(self):
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"kvstashd exited with {self.proc.returncode}: {self.log()}")
            if os.path.exists(os.path.join(self.dir, "s.sock")) and (
                    not self.port or self.healthz() == (200, "ok\n") and self.pinned()):
                return
            time.sleep(0.05)
        raise AssertionError(f"kvstashd not ready after {TIMEOUT_S} s: {self.log()}")

    def pinned(self):
        """Whether the pool has finished pinning: stores before then find no room."""
        scrape = self.scrape()
        return scrape.get("kvstash_l1_slabs") == (scrape.get("kvstash_l1_slabs_ready") +
                                                  scrape.get("kvstash_l1_slabs_failed"))

    def healthz(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5) as r:
                return r.status, r.read().decode()
        except OSError:
            return None

    def log(self):
        self.stderr.seek(0)
        return self.stderr.read()

    def scrape(self):
        return Scrape(self.port)

    def cli(self, *args):
        return json.loads(run("kvstash", *args, "--socket", self.socket, "--json"))

    def __exit__(self, *exc):
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            self.stderr.close()
            shutil.rmtree(self.dir, ignore_errors=True)


class MetricsTest(unittest.TestCase):

    def assertMonotonic(self, scrapes):
        for earlier, later in zip(scrapes, scrapes[1:]):
            now = later.counters()
            for key, value in earlier.counters().items():
                if key in now:  # a registration's series go with it
                    self.assertGreaterEqual(now[key], value, key)

    def assertGaugesSane(self, scrape):
        capacity = scrape.get("kvstash_l1_capacity_bytes")
        self.assertGreater(capacity, 0)
        self.assertLessEqual(scrape.get("kvstash_l1_used_bytes"), capacity)
        self.assertLessEqual(scrape.get("kvstash_l1_ready_bytes"), capacity)
        self.assertLessEqual(scrape.get("kvstash_l1_slabs_ready") +
                             scrape.get("kvstash_l1_slabs_failed"), scrape.get("kvstash_l1_slabs"))
        self.assertGreaterEqual(scrape.get("kvstash_requests_deferred"), 0)

    @unittest.skipUnless(has_bench(), "no `kvstash bench` in KVSTASH_BIN_DIR")
    def test_counters_follow_a_bench_run(self):
        prompts, prompt_tokens, rounds, layers = 4, 128, 5, 4
        chunks = prompts * prompt_tokens // CHUNK_TOKENS
        # 2 (K and V) x 8 heads x 128 dims x 2 bytes (bf16) per token and layer.
        chunk_bytes = layers * 2 * 8 * 128 * 2 * CHUNK_TOKENS
        with Daemon() as daemon:
            before = daemon.scrape()
            for (name, _), value in before.counters().items():
                self.assertEqual(value, 0, name)
            self.assertGaugesSane(before)
            self.assertEqual(before.get("kvstash_l1_used_bytes"), 0)

            bench = subprocess.Popen(
                [binary("kvstash"), "bench", "--socket", daemon.socket, "--json",
                 "--prompts", str(prompts), "--prompt-tokens", str(prompt_tokens),
                 "--shared-prefix-tokens", "0", "--rounds", str(rounds), "--layers", str(layers)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                during = [daemon.scrape()]
                while bench.poll() is None:
                    during.append(daemon.scrape())
                out, err = bench.communicate(timeout=TIMEOUT_S)
            finally:
                if bench.poll() is None:
                    bench.kill()
            self.assertEqual(bench.returncode, 0, err)
            report = json.loads(out)
            after = daemon.scrape()
            self.assertMonotonic([before, *during, after])
            for scrape in during:
                self.assertGaugesSane(scrape)
                for labels in scrape.series("kvstash_registration_store_chunks_total"):
                    self.assertEqual(dict(labels)["model"], "kvstash-bench")

            self.assertEqual(report["config"]["chunk_bytes"], chunk_bytes)
            lookups = prompts * rounds
            expected = {
                "kvstash_registrations_total": 1,
                "kvstash_unregistrations_total": 1,
                # hello, the shared-memory channel's attach, (un)register,
                # the bench's two Stats (evictions during the run), then
                # store, lookup and retrieve per prompt.
                "kvstash_requests_total": 6 + 3 * lookups,
                "kvstash_request_errors_total": 0,
                "kvstash_store_chunks_stored_total": chunks,
                "kvstash_store_chunks_already_present_total": chunks * (rounds - 1),
                "kvstash_store_tokens_total": prompts * prompt_tokens,
                "kvstash_store_bytes_total": chunks * chunk_bytes,
                "kvstash_lookup_requests_total": lookups,
                "kvstash_lookup_keys_total": chunks * rounds,
                "kvstash_lookup_hit_chunks_total": chunks * rounds,
                "kvstash_lookup_miss_chunks_total": 0,
                "kvstash_lookup_hit_tokens_total": prompts * prompt_tokens * rounds,
                "kvstash_retrieve_chunks_total": chunks * rounds,
                "kvstash_retrieve_tokens_total": prompts * prompt_tokens * rounds,
                "kvstash_retrieve_bytes_total": chunks * rounds * chunk_bytes,
                "kvstash_leases_granted_total": lookups,
                "kvstash_evicted_chunks_total": 0,
            }
            for name, value in expected.items():
                self.assertEqual(after.get(name), value, name)
            # The bench's own account agrees.
            self.assertEqual(after.get("kvstash_store_bytes_total"), report["store"]["bytes"])
            self.assertEqual(after.get("kvstash_lookup_hit_tokens_total"),
                             report["lookup"]["hit_tokens"])
            self.assertEqual(after.get("kvstash_retrieve_bytes_total"), report["retrieve"]["bytes"])

            histogram = "kvstash_request_duration_seconds_count"
            for kind, count in {"hello": 1, "register_kv": 1, "unregister_kv": 1,
                                "store": lookups, "lookup": lookups, "retrieve": lookups,
                                "release": 0, "ping": 0}.items():
                self.assertEqual(after.get(histogram, request=kind), count, kind)
            self.assertGreater(after.get("kvstash_request_duration_seconds_sum", request="store"), 0)

            self.assertGaugesSane(after)
            self.assertEqual(after.get("kvstash_l1_chunks"), chunks)
            self.assertGreaterEqual(after.get("kvstash_l1_used_bytes"), chunks * chunk_bytes)
            self.assertEqual(after.get("kvstash_registrations_active"), 0)
            self.assertEqual(after.get("kvstash_leases_active"), 0)
            self.assertEqual(after.get("kvstash_requests_deferred"), 0)
            # Unregistered: its series are gone.
            self.assertEqual(after.series("kvstash_registration_store_chunks_total"), {})

            # `kvstash stats` reads the same counters: equal once idle.
            stats = daemon.cli("stats")
            scrape = daemon.scrape()
            for name, value in stats["counters"].items():
                if name == "frontend_spin_us":
                    # The stats request itself is followed by a spin window.
                    self.assertGreaterEqual(scrape.get(f"kvstash_{name}_total"), value, name)
                    continue
                self.assertEqual(scrape.get(f"kvstash_{name}_total"), value, name)
            for name, value in stats["gauges"].items():
                self.assertEqual(scrape.get(f"kvstash_{name}"), value, name)

    def test_registration_series_follow_each_engine(self):
        prompts, prompt_tokens = 4, 128
        chunks = prompts * prompt_tokens // CHUNK_TOKENS
        # tests/support/engine_kv.h: 4 layers x 2 (K, V) x 2 heads x 128 bytes per token.
        chunk_bytes = 4 * 2 * 2 * 128 * CHUNK_TOKENS
        model = 'metrics "test"'  # a quote to escape
        with Daemon() as daemon:
            before = daemon.scrape()
            workload = ("--socket", daemon.socket, "--model", model, "--prompt-tokens", prompt_tokens)
            run("kvstash_test_engine", *workload, "--role", "store", "--prompts", prompts)
            run("kvstash_test_engine", *workload, "--role", "verify", "--prompts", prompts)
            # A prompt never stored: its Lookup misses both chunks, and the
            # engine exits 1 at once.
            run("kvstash_test_engine", *workload, "--role", "verify", "--first-prompt", 1000,
                "--prompts", 1, expect_rc=1)
            after = daemon.scrape()
            self.assertMonotonic([before, after])
            self.assertGaugesSane(after)

            series = after.series("kvstash_registration_store_chunks_total")
            labels = [dict(l) for l in series]
            self.assertEqual(len(labels), 3, labels)  # the engines never unregister
            for label in labels:
                self.assertEqual(label["model"], model)
                self.assertEqual(label["tp_rank"], "0")
            regs = [{"registration": l["registration"], "model": model, "tp_rank": "0"}
                    for l in labels]
            # Registration ids are random: tell the engines apart by what they did.
            def role(reg):
                if after.get("kvstash_registration_store_chunks_total", **reg):
                    return 0
                return 1 if after.get("kvstash_registration_retrieve_chunks_total", **reg) else 2
            stored, verified, missed = sorted(regs, key=role)
            expected = [
                (stored, {"store_chunks": chunks, "store_tokens": prompts * prompt_tokens,
                          "store_bytes": chunks * chunk_bytes, "retrieve_chunks": 0,
                          "lookup_hit_chunks": 0, "lookup_miss_chunks": 0}),
                (verified, {"store_chunks": 0, "lookup_hit_chunks": chunks,
                            "lookup_hit_tokens": prompts * prompt_tokens,
                            "lookup_miss_chunks": 0, "retrieve_chunks": chunks,
                            "retrieve_tokens": prompts * prompt_tokens,
                            "retrieve_bytes": chunks * chunk_bytes}),
                (missed, {"lookup_hit_chunks": 0, "lookup_hit_tokens": 0,
                          "lookup_miss_chunks": prompt_tokens // CHUNK_TOKENS,
                          "retrieve_chunks": 0}),
            ]
            for reg, counters in expected:
                for name, value in counters.items():
                    self.assertEqual(after.get(f"kvstash_registration_{name}_total", **reg), value,
                                     f"{name} of {reg}")
            self.assertEqual(after.get("kvstash_registrations_active"), 3)
            self.assertEqual(after.delta(before, "kvstash_lookup_miss_chunks_total"), 2)
            self.assertEqual(after.delta(before, "kvstash_store_bytes_total"), chunks * chunk_bytes)
            self.assertEqual(after.get("kvstash_l1_chunks"), chunks)

            if os.path.exists(binary("kvstash")):
                described = daemon.cli("describe")["registrations"]
                self.assertEqual([str(r["id"]) for r in described],
                                 [l["registration"] for l in labels])
                self.assertEqual({r["chunk_bytes"] for r in described}, {chunk_bytes})
                # `kvstash stats` shows the same per-registration counters.
                for reg in daemon.cli("stats")["per_registration"]:
                    labels = {"registration": reg["id"], "model": reg["model"],
                              "tp_rank": reg["tp_rank"]}
                    for name, value in reg["counters"].items():
                        self.assertEqual(after.get(f"kvstash_registration_{name}_total", **labels),
                                         value, name)

    def test_dashboard_uses_only_exported_names(self):
        with open(DASHBOARD) as f:
            panels = json.load(f)["panels"]
        queries = " ".join(t["expr"] for p in panels for t in p.get("targets", []))
        used = set(re.findall(r"\bkvstash_\w+", queries))
        with Daemon() as daemon:
            exported = daemon.scrape().names()
        self.assertIn("kvstash_registration_store_bytes_total", used)
        self.assertEqual(used - exported, set())

    def test_nothing_listens_without_metrics_port(self):
        with Daemon(metrics=False) as daemon:
            self.assertEqual(listening_tcp(daemon.proc.pid), [])
        with Daemon() as daemon:
            self.assertEqual(daemon.healthz(), (200, "ok\n"))
            self.assertEqual(listening_tcp(daemon.proc.pid), [("127.0.0.1", daemon.port)])

    def test_busy_port_fails_startup_naming_the_address(self):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            daemon = Daemon(metrics_port=port)
            try:
                proc = subprocess.run(daemon.args, capture_output=True, text=True,
                                      timeout=TIMEOUT_S)
            finally:
                shutil.rmtree(daemon.dir, ignore_errors=True)
        self.assertEqual(proc.returncode, 1)
        self.assertIn(f"127.0.0.1:{port}", proc.stderr)


if __name__ == "__main__":
    if not os.path.exists(binary("kvstashd")):
        sys.exit(f"no kvstashd in KVSTASH_BIN_DIR ({BIN_DIR!r})")
    unittest.main(verbosity=2)
