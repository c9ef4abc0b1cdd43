#!/usr/bin/env python3
"""Checks the docs against the programs: every kvstashd flag and KVSTASH_*
variable the docs name exists, and every default they state in the form
"`NAME`, default VALUE" is the one `kvstashd --help` (or the script that owns
the variable) uses.

usage: check_docs.py --kvstashd BIN --kvstash BIN --repo ROOT
"""
import argparse
import pathlib
import re
import subprocess
import sys

# Flags of other programs the docs show (docker, compose, ctest, cmake,
# vLLM, the container entrypoint's own).
FOREIGN_FLAGS = {
    "--build", "--build-arg", "--enable-sleep-mode", "--gpus", "--group-add", "--init",
    "--ipc", "--name", "--no-healthcheck", "--output-on-failure", "--pid", "--profile",
    "--rm", "--shm-size", "--test-dir", "--ulimit", "--dry-run", "--prefix", "--install",
    "--target", "--label-regex", "--runtime", "--isolation", "--volume", "--user",
    "--cflags", "--libs", "--now",
    "--kv-transfer-config", "--block-size", "--no-async-scheduling",  # vllm serve
    "--compilation-config",  # vllm serve
    "--port", "--bind", "--protected-mode", "--maxmemory", "--maxmemory-policy", "--save",
    "--appendonly", "--proto-max-bulk-len",  # redis-server
    "--check",  # scripts/format.sh
    "--model-path", "--page-size", "--enable-hierarchical-cache", "--hicache-size",
    "--hicache-mem-layout", "--hicache-storage-backend", "--hicache-storage-backend-extra-config",
    "--hicache-storage-prefetch-policy", "--enable-storage-metrics",  # sglang.launch_server
}
# The benchmarks' and checks' own flags (argparse in Python, case labels in
# shell) are read from their sources, not listed here.
SCRIPT_SOURCES = ["bench/*.py", "tests/*/*.py", "scripts/*.sh"]
SCRIPT_FLAG = re.compile(r"""add_argument\(\s*["'](--[a-z][a-z0-9-]*)|^\s*(--[a-z][a-z0-9-]*)\)""",
                         re.M)
DOCS = ["README.md", "docs/*.md"]
# Files other than docs where a KVSTASH_* variable may be defined: the
# container's scripts, the build, the CLI, the benchmarks' machinery and
# libkvstash, the tests' helpers.
OWNERS = ["docker/*", "scripts/*", "CMakeLists.txt", "*/CMakeLists.txt", "client/src/**/*",
          "cli/src/**/*", "bench/src/**/*", "bench/include/**/*", "vocab/**/*", "runtime/**/*",
          "server/src/*", "backends/src/*", "tests/**/*.sh", "tests/**/*.py", "packaging/**/*",
          "python/**/*.py"]


def run_help(binary, *args):
    done = subprocess.run([binary, *args, "--help"], capture_output=True, text=True, check=True)
    return done.stdout


def help_options(text):
    """{flag: (default or None, env or None)} from CLI11's help text."""
    options = {}
    for match in re.finditer(r"^\s+(?:-\w,)?(--[a-z0-9-]+)(?:,!?--[a-z0-9-]+)?"
                             r"(?: [^\s=]+)?(?:=(\S+))?(?: \[(\S+)\])?(?: \(Env:(\w+)\))?", text, re.M):
        flag, default, bracket_default, env = match.groups()
        options[flag] = (default or bracket_default, env)
    return options


def doc_files(repo):
    for pattern in DOCS:
        yield from sorted(repo.glob(pattern))


def owner_text(repo):
    text = []
    for pattern in OWNERS:
        for path in repo.glob(pattern):
            if path.is_file() and path.suffix != ".md" and "/build" not in str(path):
                text.append(path.read_text(errors="replace"))
    return "\n".join(text)


def script_defaults(text):
    """KVSTASH_X=${KVSTASH_X:-V} in shell scripts: {name: V}."""
    return dict(re.findall(r"\b(KVSTASH_\w+)=\$\{\1:-([^}]*)\}", text))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvstashd", required=True)
    parser.add_argument("--kvstash", required=True)
    parser.add_argument("--repo", required=True, type=pathlib.Path)
    args = parser.parse_args()

    daemon = help_options(run_help(args.kvstashd))
    cli_flags = set(help_options(run_help(args.kvstash)))
    for command in ("ping", "describe", "stats", "clear", "bench"):
        cli_flags |= set(help_options(run_help(args.kvstash, command)))
    cli_flags |= set(help_options(run_help(args.kvstash, "bench", "tiers")))
    for pattern in SCRIPT_SOURCES:
        for source in args.repo.glob(pattern):
            for match in SCRIPT_FLAG.finditer(source.read_text()):
                cli_flags.add(match.group(1) or match.group(2))
    env_defaults = {env: default for default, env in daemon.values() if env}
    owners = owner_text(args.repo)
    env_defaults_scripts = script_defaults(owners)

    errors = []
    for path in doc_files(args.repo):
        text = path.read_text()
        where = path.relative_to(args.repo)
        for flag in sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))):
            if flag not in daemon and flag not in cli_flags and flag not in FOREIGN_FLAGS:
                errors.append(f"{where}: {flag} is no option of kvstashd or kvstash "
                              f"(nor a known flag of another tool)")
        for name in sorted(set(re.findall(r"\bKVSTASH_[A-Z0-9_]*[A-Z0-9]\b", text))):
            if name not in env_defaults and not re.search(rf"\b{name}\b", owners):
                errors.append(f"{where}: {name} is read by nothing in the repository "
                              f"(not in kvstashd --help, the scripts or the build)")
        # "`NAME`, default VALUE" or "`NAME` (default VALUE": the stated default.
        for name, value in re.findall(
                r"`(--[a-z0-9-]+|KVSTASH_\w+)`,? \(?default `?([\w.:/]+)", text):
            actual = (daemon.get(name, (None, None))[0] if name.startswith("--")
                      else env_defaults.get(name, env_defaults_scripts.get(name)))
            if actual is not None and actual.strip('"') != value:
                errors.append(f"{where}: says {name} defaults to {value}; it is {actual}")
    for error in errors:
        print(error)
    if errors:
        sys.exit(1)
    print(f"docs agree with kvstashd --help: {len(daemon)} daemon options, "
          f"{len(cli_flags)} CLI options checked")


if __name__ == "__main__":
    main()
