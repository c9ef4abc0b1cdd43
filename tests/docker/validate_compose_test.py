#!/usr/bin/env python3
"""Tests for validate_compose.py: the shipped compose file passes, and each
rule catches the mistake it exists for (a checker that always passes would
prove nothing).

    validate_compose_test.py --compose FILE --example-config FILE
"""

import argparse
import copy
import os
import sys
import unittest

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import validate_compose  # noqa: E402

ARGS = None


class ValidateCompose(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(ARGS.compose, encoding="utf-8") as f:
            cls.text = f.read()
        cls.compose = yaml.safe_load(cls.text)
        cls.flags, cls.env = validate_compose.load_known_options(ARGS.example_config)

    def problems(self, mutate=None, text=None):
        compose = copy.deepcopy(self.compose)
        if mutate:
            mutate(compose["services"], compose)
        return validate_compose.validate(compose, text or self.text, self.flags, self.env)

    def assertProblem(self, needle, mutate=None, text=None):
        problems = self.problems(mutate, text)
        self.assertTrue(any(needle in p for p in problems),
                        f"no problem mentions {needle!r}; got {problems}")

    def test_shipped_file_is_sound(self):
        self.assertEqual(self.problems(), [])

    def test_known_options_come_from_the_example_config(self):
        self.assertIn("--l1-gb", self.flags)
        self.assertIn("KVSTASH_L1_GB", self.env)
        self.assertIn("KVSTASH_CONFIG", self.env)

    def test_shared_ipc_namespace_must_be_joinable_and_sized(self):
        self.assertProblem("ipc: shareable", lambda s, c: s["kvstash-ns"].pop("ipc"))
        self.assertProblem("shm_size", lambda s, c: s["kvstash-ns"].pop("shm_size"))

    def test_daemon_may_own_the_namespaces_itself(self):
        def daemon_owns(services, _):
            services["kvstash"].update(ipc="shareable", shm_size="1gb")
            services["kvstash"].pop("pid")
            services["kvstash-ns"]["profiles"] = ["cpu"]
            services["kvstash"].pop("depends_on")
            for engine in ("engine-0", "engine-1"):
                services[engine].update(ipc="service:kvstash", pid="service:kvstash")
        self.assertEqual(self.problems(daemon_owns), [])

    def test_daemon_needs_unlimited_memlock(self):
        self.assertProblem("memlock", lambda s, c: s["kvstash"].pop("ulimits"))
        self.assertProblem("memlock", lambda s, c: s["kvstash"].update(
            ulimits={"memlock": {"soft": -1, "hard": 65536}}))

    def test_daemon_needs_a_ping_healthcheck(self):
        self.assertProblem("healthcheck", lambda s, c: s["kvstash"].pop("healthcheck"))
        self.assertProblem("healthcheck", lambda s, c: s["kvstash"]["healthcheck"].update(
            disable=True))

    def test_daemon_needs_the_socket_volume(self):
        self.assertProblem("socket directory", lambda s, c: s["kvstash"].update(volumes=[]))

    def test_engine_must_join_the_daemons_namespaces(self):
        self.assertProblem("IPC namespace", lambda s, c: s["engine-1"].update(ipc="host"))
        self.assertProblem("IPC namespace", lambda s, c: s["bench"].pop("ipc"))
        self.assertProblem("PID namespace", lambda s, c: s["engine-0"].pop("pid"))
        self.assertProblem("unknown service", lambda s, c: s["kvstash"].update(
            ipc="service:nowhere"))

    def test_engine_must_mount_the_same_socket_volume(self):
        self.assertProblem("socket volume", lambda s, c: s["engine-0"].update(
            volumes=["other:/run/kvstash"]))
        self.assertProblem("socket volume", lambda s, c: s["bench"].update(volumes=[]))

    def test_engine_must_use_the_daemons_socket(self):
        self.assertProblem("uses socket", lambda s, c: s["engine-0"]["environment"].update(
            KVSTASH_SOCKET="ipc:///tmp/other.sock"))

    def test_engine_waits_for_a_healthy_daemon(self):
        self.assertProblem("service_healthy", lambda s, c: s["engine-0"].pop("depends_on"))

    def test_engine_gpus_must_be_visible_to_the_daemon(self):
        def move(services, _):
            devices = services["engine-1"]["deploy"]["resources"]["reservations"]["devices"]
            devices[0]["device_ids"] = ["7"]
        self.assertProblem("does not see", move)

    def test_engine_must_not_use_expandable_segments(self):
        self.assertProblem("expandable segments", lambda s, c: s["engine-0"]["environment"].update(
            PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"))

    def test_every_service_has_a_known_profile(self):
        self.assertProblem("needs profiles", lambda s, c: s["bench"].pop("profiles"))
        self.assertProblem("needs profiles", lambda s, c: s["bench"].update(profiles=["dev"]))

    def test_cpu_profile_runs_the_host_backend_and_a_bench(self):
        self.assertProblem("host backend", lambda s, c: s["kvstash-cpu"]["environment"].update(
            KVSTASH_BACKEND="cuda"))
        self.assertProblem("kvstash bench --backend host", lambda s, c: s["bench"].update(
            command=["kvstash", "ping"]))
        self.assertProblem("must not reserve GPUs", lambda s, c: s["kvstash-cpu"].update(
            deploy=copy.deepcopy(s["kvstash"]["deploy"])))

    def test_gpu_profile_reserves_gpus_and_not_the_host_backend(self):
        self.assertProblem("needs GPUs", lambda s, c: s["kvstash"].pop("deploy"))
        self.assertProblem("host backend", lambda s, c: s["kvstash"]["environment"].update(
            KVSTASH_BACKEND="host"))

    def test_unknown_variables_and_flags_are_reported(self):
        self.assertProblem("unknown variable KVSTASH_L1_GIB",
                           lambda s, c: s["kvstash"]["environment"].update(KVSTASH_L1_GIB="4"))
        self.assertProblem("unknown kvstashd flag --l1-gib",
                           lambda s, c: s["kvstash"].update(command=["--l1-gib", "4"]))

    def test_dependencies_must_start_in_the_same_profile(self):
        self.assertProblem("which profile gpu does not start",
                           lambda s, c: s["kvstash-ns"].update(profiles=["cpu"]))

    def test_undeclared_volume_is_reported(self):
        self.assertProblem("not declared", lambda s, c: c["volumes"].pop("kvstash-run-cpu"))

    def test_metrics_placeholder_is_required(self):
        self.assertProblem("metrics port", text=self.text.replace("9464", "9999"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--compose", required=True)
    parser.add_argument("--example-config", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
