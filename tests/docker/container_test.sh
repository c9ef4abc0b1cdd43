#!/usr/bin/env bash
# Builds the CPU variant of docker/Dockerfile for real and runs it: kvstashd
# in one container, the synthetic engine workload (`kvstash bench`) in a
# second one through the socket volume and a shared IPC namespace (the
# compose file's cpu profile, by hand), then the image's health check.
#
# No container registry is reachable from CI, so the base image is Debian 12
# bootstrapped from Debian's package mirror with debootstrap and imported
# into podman; it is cached in $KVSTASH_CI_CACHE (default /opt/kvstash-ci),
# outside the clone, so reruns skip it.
#
# Notes for this environment (not for users; docs/deployment.md is for them):
#  - podman's default runtime (crun) is not usable here: --runtime runc.
#  - the default ulimits podman asks for exceed the machine's hard limits:
#    lower nofile and nproc explicitly.
#  - builds need --isolation chroot (no nested user namespaces or cgroups).
#  - build steps fetch Debian packages: --network host.
#
# Opt-in (slow: a from-scratch build of kvstashd inside the image): runs only
# with KVSTASH_CONTAINER_TESTS=1, else it exits 77, which ctest reports as
# skipped with the reason printed. --setup installs podman, buildah,
# debootstrap and runc with apt.
#
# usage: container_test.sh SOURCE_DIR [--setup]
set -euo pipefail
source_dir=$(cd "$1" && pwd)
shift
setup=0
[ "${1:-}" = "--setup" ] && setup=1

if [ "${KVSTASH_CONTAINER_TESTS:-0}" != 1 ] && [ $setup = 0 ]; then
  echo "SKIPPED: container test is opt-in (about 10 minutes on 2 cores): set KVSTASH_CONTAINER_TESTS=1"
  exit 77
fi

tools=(podman buildah debootstrap runc)
missing=()
for tool in "${tools[@]}"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ $setup = 1 ] && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      podman buildah debootstrap runc uidmap fuse-overlayfs
  else
    echo "SKIPPED: needs ${missing[*]} (run $0 $source_dir --setup as root to install them)"
    exit 77
  fi
fi
[ $setup = 1 ] && [ "${KVSTASH_CONTAINER_TESTS:-0}" != 1 ] && { echo "setup done"; exit 0; }

cache=${KVSTASH_CI_CACHE:-/opt/kvstash-ci}
base_tar=$cache/debian12-rootfs.tar
base_image=localhost/kvstash-ci/debian12:latest
image=localhost/kvstash:cpu-test
mirror=${KVSTASH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
name=kvstash-ct-$$
volume=kvstash-ct-run-$$
# Podman asks for more than this machine's hard limits allow: ask for those.
cap() { local hard=$1 want=$2; [ "$hard" = unlimited ] || [ "$hard" -ge "$want" ] && echo "$want" || echo "$hard"; }
nofile=$(cap "$(ulimit -Hn)" 16384)
nproc=$(cap "$(ulimit -Hu)" 4096)
limits=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
run_opts=(--runtime runc "${limits[@]}")

cleanup() {
  podman rm -f "$name" >/dev/null 2>&1 || true
  podman volume rm -f "$volume" >/dev/null 2>&1 || true
}
trap cleanup EXIT
t0=$SECONDS
phase() { echo "== [$((SECONDS - t0)) s] $*"; }

if ! podman image exists "$base_image"; then
  if [ ! -f "$base_tar" ]; then
    phase "debootstrap Debian 12 into $base_tar"
    mkdir -p "$cache"
    rootfs=$(mktemp -d "$cache/rootfs-XXXXXX")
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
      { tail -20 "$cache/debootstrap.log"; exit 1; }
    # apt inside the image uses the same mirror.
    echo "deb $mirror bookworm main" >"$rootfs/etc/apt/sources.list"
    tar -C "$rootfs" -cf "$base_tar.tmp" . && mv "$base_tar.tmp" "$base_tar"
    rm -rf "$rootfs"
  fi
  phase "podman import $base_tar"
  podman import "$base_tar" "$base_image" >/dev/null
fi

if [ "${KVSTASH_CONTAINER_REUSE_IMAGE:-0}" = 1 ] && podman image exists "$image"; then
  phase "reusing $image (KVSTASH_CONTAINER_REUSE_IMAGE=1)"
else
phase "podman build (CPU variant, host backend) as $image"
# --format docker: the OCI format drops HEALTHCHECK.
podman build --isolation chroot --network host --format docker "${limits[@]}" \
  --ignorefile "$source_dir/docker/Dockerfile.dockerignore" \
  --build-arg BUILD_IMAGE="$base_image" --build-arg RUNTIME_IMAGE="$base_image" \
  --build-arg KVSTASH_CMAKE_ARGS="-DKVSTASH_WITH_CUDA=OFF" \
  -f "$source_dir/docker/Dockerfile" -t "$image" "$source_dir"
fi

phase "kvstashd in a container, socket volume $volume"
podman volume create "$volume" >/dev/null
# memlock as high as allowed (the host backend pins nothing; the entrypoint
# only warns when the limit is below the pool).
memlock=$(ulimit -Hl)
[ "$memlock" = unlimited ] && memlock=-1 || memlock=$((memlock * 1024))
podman run -d "${run_opts[@]}" --name "$name" --ulimit "memlock=$memlock:$memlock" --shm-size 1g \
  -v "$volume:/run/kvstash" -e KVSTASH_BACKEND=host -e KVSTASH_L1_GB=0.5 \
  -e KVSTASH_SOCKET=ipc:///run/kvstash/kvstash.sock "$image" >/dev/null
for _ in $(seq 100); do
  podman exec "$name" kvstash ping >/dev/null 2>&1 && break
  sleep 0.2
done
podman exec "$name" kvstash ping

phase "the synthetic engine in a second container (same socket volume, IPC namespace)"
report=$(podman run --rm "${run_opts[@]}" --ipc "container:$name" -v "$volume:/run/kvstash" \
  "$image" kvstash bench --backend host --socket /run/kvstash/kvstash.sock --prompts 4 \
  --prompt-tokens 512 --shared-prefix-tokens 256) || true
echo "$report"
[ "$(echo "$report" | tail -n 1)" = PASS ] || { echo "the bench in the container did not pass"; exit 1; }

phase "health check"
podman healthcheck run "$name"
echo "healthy"
phase "container test passed"
