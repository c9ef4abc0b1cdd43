#!/usr/bin/env python3
"""Checks the structure of docker/docker-compose.yml without a Docker engine.

A sidecar deployment breaks in ways `docker compose config` does not catch:
an engine outside the daemon's IPC namespace (host-backend shared memory and
CUDA IPC events fail) or PID namespace (CUDA IPC may see equal PIDs), a
socket volume not shared, a memlock limit that keeps the pool from being
pinned, engines on GPUs the daemon cannot see, a service that starts in every
profile. This script checks those rules and prints every violation.

    validate_compose.py COMPOSE_FILE --example-config config/kvstash.conf.example

The option names and KVSTASH_* variables that the file may use are read
from the example config (every option is listed there, which a config test
enforces), so a renamed option cannot linger here.
"""

import argparse
import os
import posixpath
import re
import shlex
import sys

import yaml

PROFILES = ("gpu", "cpu")
DEFAULT_SOCKET = "ipc:///run/kvstash/kvstash.sock"
METRICS_PORT = "9464"
# Variables the image and the client read besides the option table's.
EXTRA_ENV = {"KVSTASH_CONFIG"}


def load_known_options(example_path):
    """Returns (flags, env names) declared in the example config file."""
    with open(example_path, encoding="utf-8") as f:
        text = f.read()
    flags = {"--" + key for key in re.findall(r"^([a-z0-9-]+)\s*=", text, re.M)}
    flags |= {"--config"}
    env = set(re.findall(r"#\s*Env:\s*(KVSTASH_[A-Z0-9_]+)", text)) | EXTRA_ENV
    return flags, env


def interpolate(value):
    """Resolves ${VAR:-default} and ${VAR-default} to the default, ${VAR} to ''."""
    if isinstance(value, str):
        return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}",
                      lambda m: m.group(1) or "", value)
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


def environment(service):
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def command(service):
    cmd = service.get("command")
    if cmd is None:
        return []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]


def flag_value(args, flag):
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:]
    return None


def mounts(service):
    """(source, target) of every volume entry."""
    result = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, str):
            parts = entry.split(":")
            result.append((parts[0], parts[1]) if len(parts) > 1 else (None, parts[0]))
        else:
            result.append((entry.get("source"), entry.get("target")))
    return result


def gpu_devices(service):
    """The reserved GPU device ids, 'all' for count: all, or None."""
    devices = (((service.get("deploy") or {}).get("resources") or {})
               .get("reservations") or {}).get("devices")
    if not devices:
        return None
    ids = set()
    for device in devices:
        if device.get("driver") != "nvidia" or "gpu" not in (device.get("capabilities") or []):
            return None
        if device.get("count") == "all":
            return "all"
        ids |= {str(i) for i in device.get("device_ids") or []}
    return ids


def references(service):
    """The services this one needs running: depends_on and service: namespaces."""
    needed = set(service.get("depends_on") or [])
    for kind in ("ipc", "pid"):
        value = str(service.get(kind) or "")
        if value.startswith("service:"):
            needed.add(value[len("service:"):])
    return needed


def is_daemon(service):
    """The kvstash image running its default command (kvstashd)."""
    if "kvstash" not in str(service.get("image", "")):
        return False
    args = command(service)
    return not args or args[0] in ("kvstashd", "/usr/local/bin/kvstashd") or args[0].startswith("-")


def socket_of(service):
    return (flag_value(command(service), "--socket")
            or environment(service).get("KVSTASH_SOCKET") or DEFAULT_SOCKET)


def namespace(services, name, kind, seen=()):
    """Who owns `name`'s IPC or PID namespace (kind "ipc" or "pid"):
    "host", "container:X", or the name of the service that owns it."""
    value = services[name].get(kind)
    if isinstance(value, str) and value.startswith("service:"):
        target = value[len("service:"):]
        if target not in services or target in seen:
            return f"missing:{target}"
        return namespace(services, target, kind, seen + (name,))
    if value == "host" or (isinstance(value, str) and value.startswith("container:")):
        return value
    return name


def check_namespace_owner(services, daemon_name, problems):
    """The daemon's IPC namespace must be joinable and have a sized /dev/shm."""
    owner = namespace(services, daemon_name, "ipc")
    if owner.startswith("missing:"):
        problems.append(f"service {daemon_name}: joins the IPC namespace of an unknown service"
                        f" {owner[len('missing:'):]}")
    elif owner in services:
        if services[owner].get("ipc") != "shareable":
            problems.append(f"service {owner}: owns the daemon's IPC namespace and needs"
                            " `ipc: shareable` so that engines can join it")
        if not services[owner].get("shm_size"):
            problems.append(f"service {owner}: owns the shared IPC namespace and needs shm_size:"
                            " its /dev/shm is every member's (Docker's default is 64 MiB)")


def check_daemon(name, service, profile, volumes, problems):
    where = f"service {name} (daemon, profile {profile})"
    memlock = (service.get("ulimits") or {}).get("memlock")
    if not (memlock == -1 or (isinstance(memlock, dict)
                              and memlock.get("soft") == -1 and memlock.get("hard") == -1)):
        problems.append(f"{where}: needs `ulimits: memlock: -1` to pin the L1 pool")
    health = service.get("healthcheck") or {}
    test = health.get("test") or []
    test_words = shlex.split(test) if isinstance(test, str) else [str(w) for w in test]
    if health.get("disable") or "kvstash" not in test_words or "ping" not in test_words:
        problems.append(f"{where}: needs a healthcheck running `kvstash ping`")
    socket = socket_of(service)
    if socket.startswith("ipc://"):
        socket_dir = posixpath.dirname(socket[len("ipc://"):])
        if not any(src in volumes and dst == socket_dir for src, dst in mounts(service)):
            problems.append(f"{where}: needs a named volume at {socket_dir}, the socket directory")
    env = environment(service)
    backend = flag_value(command(service), "--backend") or env.get("KVSTASH_BACKEND", "auto")
    devices = gpu_devices(service)
    if profile == "gpu":
        if backend == "host":
            problems.append(f"{where}: the gpu profile must not use the host backend")
        if devices is None:
            problems.append(f"{where}: needs GPUs in deploy.resources.reservations.devices"
                            " (driver nvidia, capabilities [gpu])")
    else:
        if backend != "host":
            problems.append(f"{where}: the cpu profile needs the host backend, not {backend!r}")
        if devices is not None:
            problems.append(f"{where}: the cpu profile must not reserve GPUs")


def check_engine(services, name, profile, daemon_name, problems):
    service, daemon = services[name], services[daemon_name]
    where = f"service {name} (engine, profile {profile})"
    if namespace(services, name, "ipc") != namespace(services, daemon_name, "ipc"):
        problems.append(f"{where}: must share the daemon's IPC namespace and /dev/shm"
                        f" (ipc: {daemon.get('ipc') or 'service:' + daemon_name})")
    if namespace(services, name, "pid") != namespace(services, daemon_name, "pid"):
        problems.append(f"{where}: must share the daemon's PID namespace, or CUDA IPC may see"
                        f" equal PIDs (pid: {daemon.get('pid') or 'service:' + daemon_name})")
    depends = service.get("depends_on") or {}
    condition = (depends.get(daemon_name) or {}).get("condition") if isinstance(depends, dict) else None
    if condition != "service_healthy":
        problems.append(f"{where}: needs depends_on {daemon_name} with condition: service_healthy")
    socket = socket_of(daemon)
    engine_socket = (flag_value(command(service), "--socket")
                     or environment(service).get("KVSTASH_SOCKET") or DEFAULT_SOCKET)
    if engine_socket != socket:
        problems.append(f"{where}: uses socket {engine_socket}, the daemon binds {socket}")
    if socket.startswith("ipc://"):
        socket_dir = posixpath.dirname(socket[len("ipc://"):])
        shared = {src for src, dst in mounts(daemon) if dst == socket_dir}
        if not any(src in shared and dst == socket_dir for src, dst in mounts(service)):
            problems.append(f"{where}: must mount the daemon's socket volume at {socket_dir}")
    if profile == "gpu":
        devices = gpu_devices(service)
        daemon_devices = gpu_devices(daemon)
        if devices is None:
            problems.append(f"{where}: needs GPUs in deploy.resources.reservations.devices")
        elif daemon_devices is not None and daemon_devices != "all" and (
                devices == "all" or not devices <= daemon_devices):
            problems.append(f"{where}: uses GPUs {sorted(devices) if devices != 'all' else 'all'}"
                            f" that the daemon does not see ({sorted(daemon_devices)})")
        alloc = environment(service).get("PYTORCH_CUDA_ALLOC_CONF", "")
        if "expandable_segments:True" in alloc.replace(" ", ""):
            problems.append(f"{where}: PyTorch expandable segments cannot be shared by CUDA IPC")


def validate(compose, text, known_flags, known_env):
    """Every rule the file breaks, as messages; empty when it is sound."""
    problems = []
    compose = interpolate(compose)
    services = compose.get("services") or {}
    volumes = compose.get("volumes") or {}
    if not services:
        return ["no services"]
    if not volumes:
        problems.append("no named volumes: the socket directory must be one")

    by_profile = {p: [] for p in PROFILES}
    for name, service in services.items():
        profiles = service.get("profiles") or []
        if not profiles or any(p not in PROFILES for p in profiles):
            problems.append(f"service {name}: needs profiles from {list(PROFILES)}, has"
                            f" {profiles} (services without a profile start in every profile)")
            continue
        for profile in profiles:
            by_profile[profile].append(name)
        for var in environment(service):
            if var.startswith("KVSTASH_") and var not in known_env:
                problems.append(f"service {name}: unknown variable {var}")
        for src, _ in mounts(service):
            if src and not src.startswith((".", "/", "~")) and src not in volumes:
                problems.append(f"service {name}: volume {src} is not declared under volumes")

    for profile, names in by_profile.items():
        for name in names:
            for target in sorted(references(services[name]) - set(names)):
                problems.append(f"service {name}: needs {target}, which profile {profile}"
                                " does not start")
        daemons = [n for n in names if is_daemon(services[n])]
        if len(daemons) != 1:
            problems.append(f"profile {profile}: needs exactly one kvstashd service, has {daemons}")
            continue
        daemon_name = daemons[0]
        daemon = services[daemon_name]
        for arg in command(daemon):
            if arg.startswith("--") and arg.split("=", 1)[0] not in known_flags:
                problems.append(f"service {daemon_name}: unknown kvstashd flag {arg}")
        check_daemon(daemon_name, daemon, profile, volumes, problems)
        check_namespace_owner(services, daemon_name, problems)
        holders = {namespace(services, daemon_name, kind) for kind in ("ipc", "pid")}
        engines = [n for n in names if n != daemon_name and n not in holders]
        if not engines:
            problems.append(f"profile {profile}: no engine beside the daemon")
        for name in engines:
            check_engine(services, name, profile, daemon_name, problems)
        if profile == "cpu":
            benches = [n for n in engines if command(services[n])[:2] == ["kvstash", "bench"]
                       and flag_value(command(services[n]), "--backend") == "host"]
            if not benches:
                problems.append("profile cpu: needs a `kvstash bench --backend host` engine")

    if METRICS_PORT not in text:
        problems.append(f"no metrics port {METRICS_PORT} placeholder")
    return problems


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("compose")
    parser.add_argument("--example-config", required=True)
    args = parser.parse_args(argv)
    with open(args.compose, encoding="utf-8") as f:
        text = f.read()
    flags, env = load_known_options(args.example_config)
    problems = validate(yaml.safe_load(text), text, flags, env)
    for problem in problems:
        print(f"{os.path.basename(args.compose)}: {problem}", file=sys.stderr)
    if not problems:
        print(f"{args.compose}: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
