#!/usr/bin/env python3
"""Runs docker/entrypoint.sh outside Docker, against stand-in binaries.

kvstashd is fake_kvstashd (the real config parsing, so --print-config and its
errors are the daemon's own); kvstash is a shell stub. Paths come from the
entrypoint's variables (KVSTASH_BIN_DIR, KVSTASH_DEFAULT_CONFIG, the socket
in KVSTASH_SOCKET), all under a temporary directory.

    entrypoint_test.py --entrypoint docker/entrypoint.sh --fake-kvstashd PATH
"""

import argparse
import os
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

ARGS = None


class Run:
    def __init__(self, pid, rc, out, err):
        self.pid, self.rc, self.out, self.err = pid, rc, out, err

    def __repr__(self):
        return f"rc={self.rc}\nstdout:\n{self.out}\nstderr:\n{self.err}"


class Entrypoint(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvstash_entrypoint_")
        self.addCleanup(shutil.rmtree, self.tmp)
        self.bin = os.path.join(self.tmp, "bin")
        os.mkdir(self.bin)
        shutil.copy(ARGS.fake_kvstashd, os.path.join(self.bin, "kvstashd"))
        cli = os.path.join(self.bin, "kvstash")
        with open(cli, "w", encoding="utf-8") as f:
            f.write('#!/bin/sh\necho "fake kvstash pid=$$ $*"\n')
        os.chmod(cli, 0o755)
        self.socket_dir = os.path.join(self.tmp, "run", "kvstash")

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def run_entrypoint(self, *args, env=None, memlock_kib=None, dry_run=True):
        environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "KVSTASH_BIN_DIR": self.bin,
            "KVSTASH_DEFAULT_CONFIG": self.path("etc", "kvstash.conf"),
            "KVSTASH_SOCKET": f"ipc://{self.socket_dir}/kvstash.sock",
        }
        for name, value in (env or {}).items():
            if value is None:
                environment.pop(name, None)
            else:
                environment[name] = value

        def limit_memlock():
            if memlock_kib is None:
                return
            _, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
            soft = resource.RLIM_INFINITY if memlock_kib == "unlimited" else memlock_kib * 1024
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, hard))

        argv = ["sh", ARGS.entrypoint] + (["--dry-run"] if dry_run else []) + list(args)
        process = subprocess.Popen(argv, env=environment, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, preexec_fn=limit_memlock)
        out, err = process.communicate(timeout=60)
        return Run(process.pid, process.returncode, out, err)

    def assertRuns(self, run, *expected_words):
        self.assertEqual(run.rc, 0, run)
        self.assertEqual(run.out, " ".join(("exec",) + expected_words) + "\n", run)

    @staticmethod
    def hard_memlock_at_least(kib):
        _, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        return hard == resource.RLIM_INFINITY or hard >= kib * 1024

    # --- choosing the command -------------------------------------------

    def test_daemon_is_the_default_command(self):
        self.assertRuns(self.run_entrypoint(), f"{self.bin}/kvstashd")

    def test_flags_alone_go_to_the_daemon(self):
        self.assertRuns(self.run_entrypoint("--l1-gb", "1", "--backend", "host"),
                        f"{self.bin}/kvstashd", "--l1-gb", "1", "--backend", "host")

    def test_named_daemon_runs_from_the_bin_dir(self):
        self.assertRuns(self.run_entrypoint("kvstashd", "--l1-gb", "2"),
                        f"{self.bin}/kvstashd", "--l1-gb", "2")

    def test_dry_run_from_the_environment(self):
        run = self.run_entrypoint("--backend", "host", env={"KVSTASH_DRY_RUN": "1"},
                                  dry_run=False)
        self.assertRuns(run, f"{self.bin}/kvstashd", "--backend", "host")

    def test_dry_run_quotes_words_for_the_shell(self):
        socket = f"ipc://{self.tmp}/with space/k.sock"
        run = self.run_entrypoint("--socket", socket)
        self.assertRuns(run, f"{self.bin}/kvstashd", "--socket", f"'{socket}'")

    def test_kvstash_cli_passes_through(self):
        run = self.run_entrypoint("kvstash", "ping", "--socket", "ipc:///x/k.sock", memlock_kib=64)
        self.assertRuns(run, f"{self.bin}/kvstash", "ping", "--socket", "ipc:///x/k.sock")
        self.assertEqual(run.err, "")  # no daemon preparation, no memlock warning
        self.assertFalse(os.path.exists(self.socket_dir))

    def test_other_commands_pass_through_via_path(self):
        self.assertRuns(self.run_entrypoint("sh", "-c", "echo hi"), "sh", "-c", "'echo hi'")
        run = self.run_entrypoint("sh", "-c", "echo hi", dry_run=False)
        self.assertEqual((run.rc, run.out), (0, "hi\n"), run)

    def test_help_goes_straight_to_the_daemon(self):
        self.assertRuns(self.run_entrypoint("--help"), f"{self.bin}/kvstashd", "--help")
        self.assertFalse(os.path.exists(self.socket_dir))
        run = self.run_entrypoint("--help", dry_run=False)
        self.assertEqual(run.rc, 0, run)
        self.assertIn("Env:KVSTASH_L1_GB", run.out)

    # --- exec: signals reach the daemon -----------------------------------

    def test_daemon_replaces_the_entrypoint_process(self):
        run = self.run_entrypoint("--backend", "host", "--l1-gb", "1", dry_run=False)
        self.assertEqual(run.rc, 0, run)
        self.assertEqual(run.out, f"fake kvstashd pid={run.pid} --backend host --l1-gb 1\n")

    def test_cli_replaces_the_entrypoint_process(self):
        run = self.run_entrypoint("kvstash", "ping", dry_run=False)
        self.assertEqual(run.out, f"fake kvstash pid={run.pid} ping\n", run)

    def test_missing_daemon_binary_is_an_error(self):
        os.remove(os.path.join(self.bin, "kvstashd"))
        run = self.run_entrypoint()
        self.assertEqual(run.rc, 1, run)
        self.assertIn("kvstashd not found", run.err)

    # --- configuration ----------------------------------------------------

    def test_bad_configuration_stops_with_the_daemons_message(self):
        run = self.run_entrypoint("--l1-gb", "0")
        self.assertEqual(run.rc, 2, run)
        self.assertIn("--l1-gb 0 out of range [0.001, 65536]", run.err)
        self.assertEqual(run.out, "")
        self.assertFalse(os.path.exists(self.socket_dir))

    def test_default_config_file_is_used_when_present(self):
        os.mkdir(self.path("etc"))
        with open(self.path("etc", "kvstash.conf"), "w", encoding="utf-8") as f:
            f.write(f'socket = "ipc://{self.tmp}/from-file/k.sock"\n')
        run = self.run_entrypoint(env={"KVSTASH_SOCKET": None})
        self.assertRuns(run, f"{self.bin}/kvstashd")
        self.assertIn("using config file", run.err)
        self.assertTrue(os.path.isdir(self.path("from-file")))

    def test_config_variable_overrides_the_default_file(self):
        os.mkdir(self.path("etc"))
        with open(self.path("etc", "kvstash.conf"), "w", encoding="utf-8") as f:
            f.write("bogus-key = 1\n")
        other = self.path("other.conf")
        with open(other, "w", encoding="utf-8") as f:
            f.write(f'socket = "ipc://{self.tmp}/from-other/k.sock"\n')
        run = self.run_entrypoint(env={"KVSTASH_SOCKET": None, "KVSTASH_CONFIG": other})
        self.assertRuns(run, f"{self.bin}/kvstashd")
        self.assertTrue(os.path.isdir(self.path("from-other")))

    # --- the socket directory ---------------------------------------------

    def test_creates_the_socket_directory_with_group_access(self):
        run = self.run_entrypoint()
        self.assertRuns(run, f"{self.bin}/kvstashd")
        self.assertEqual(stat.S_IMODE(os.stat(self.socket_dir).st_mode), 0o2750)
        self.assertIn(f"created socket directory {self.socket_dir}", run.err)

    def test_socket_directory_mode_from_the_environment(self):
        self.run_entrypoint(env={"KVSTASH_SOCKET_DIR_MODE": "0770"})
        self.assertEqual(stat.S_IMODE(os.stat(self.socket_dir).st_mode), 0o770)

    def test_socket_flag_outranks_the_environment(self):
        run = self.run_entrypoint("--socket", f"ipc://{self.tmp}/from-flag/k.sock")
        self.assertEqual(run.rc, 0, run)
        self.assertTrue(os.path.isdir(self.path("from-flag")))
        self.assertFalse(os.path.exists(self.socket_dir))

    def test_existing_directory_is_kept_and_checked_for_group_access(self):
        os.makedirs(self.socket_dir)
        os.chmod(self.socket_dir, 0o700)
        run = self.run_entrypoint()
        self.assertEqual(run.rc, 0, run)
        self.assertEqual(stat.S_IMODE(os.stat(self.socket_dir).st_mode), 0o700)
        self.assertIn("g+x", run.err)
        os.chmod(self.socket_dir, 0o750)
        self.assertNotIn("g+x", self.run_entrypoint().err)

    def test_something_else_at_the_socket_path_is_an_error(self):
        os.makedirs(self.socket_dir)
        with open(os.path.join(self.socket_dir, "kvstash.sock"), "w", encoding="utf-8"):
            pass
        run = self.run_entrypoint()
        self.assertEqual(run.rc, 1, run)
        self.assertIn("is not a socket", run.err)
        self.assertEqual(run.out, "")

    def test_overlong_socket_path_is_an_error(self):
        run = self.run_entrypoint("--socket", "ipc://" + self.path("d" * 120, "k.sock"))
        self.assertEqual(run.rc, 1, run)
        self.assertIn("at most 107", run.err)

    def test_tcp_socket_needs_no_directory(self):
        run = self.run_entrypoint("--socket", "tcp://127.0.0.1:5555")
        self.assertRuns(run, f"{self.bin}/kvstashd", "--socket", "tcp://127.0.0.1:5555")
        self.assertFalse(os.path.exists(self.path("run")))

    # --- the memlock limit ------------------------------------------------

    def test_memlock_below_the_pool_warns_and_still_starts(self):
        run = self.run_entrypoint("--backend", "cuda", "--l1-gb", "1", memlock_kib=64)
        self.assertRuns(run, f"{self.bin}/kvstashd", "--backend", "cuda", "--l1-gb", "1")
        self.assertIn("WARNING: memlock limit (ulimit -l) is 64 KiB", run.err)
        self.assertIn("1 GiB (1048576 KiB)", run.err)
        self.assertIn("--ulimit memlock=-1", run.err)

    def test_auto_backend_is_checked_too(self):
        self.assertIn("WARNING: memlock", self.run_entrypoint(memlock_kib=64).err)

    def test_host_backend_pins_nothing_and_is_not_checked(self):
        run = self.run_entrypoint("--backend", "host", memlock_kib=64)
        self.assertEqual(run.rc, 0, run)
        self.assertNotIn("WARNING", run.err)

    def test_memlock_covering_the_pool_is_quiet(self):
        if not self.hard_memlock_at_least(2048):
            self.skipTest("hard memlock limit below 2 MiB")
        run = self.run_entrypoint("--l1-gb", "0.001", memlock_kib=2048)
        self.assertEqual(run.rc, 0, run)
        self.assertNotIn("WARNING", run.err)

    def test_unlimited_memlock_is_quiet(self):
        _, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        if hard != resource.RLIM_INFINITY:
            self.skipTest("hard memlock limit is not unlimited here")
        run = self.run_entrypoint("--l1-gb", "1024", memlock_kib="unlimited")
        self.assertNotIn("WARNING", run.err)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--entrypoint", required=True)
    parser.add_argument("--fake-kvstashd", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
