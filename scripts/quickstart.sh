#!/usr/bin/env bash
# The main job, from a fresh clone: installs the OS packages if missing,
# builds only kvstashd and the kvstash CLI (host backend: no CUDA kernels, no
# tests; into build-quickstart/, apart from the full build of
# scripts/test.sh), starts kvstashd on a private socket and drives the
# synthetic engine workload against it: register KV memory, store prompts,
# look them up, retrieve them into other blocks, verify every byte, print hit
# rate and GB/s. The bench's verdict is the last thing printed; the build
# output, the daemon's logs and its stats go to the log file named up front.
# Extra arguments go to `kvstash bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${KVSTASH_QUICKSTART_BUILD_DIR:-build-quickstart}
mkdir -p "$build_dir"
log="$PWD/$build_dir/quickstart.log"
: >"$log"

cat <<INTRO
kvstash quick start: builds kvstashd and the kvstash CLI (host backend, no
tests or CUDA kernels: about 4 CPU-minutes, so about 2.5 minutes on 2 idle
cores the first time, seconds after), starts kvstashd on a private socket and
runs the synthetic engine workload against it. Build output, daemon logs and stats: $log
(./scripts/test.sh builds everything and runs every test.)
INTRO

step() { printf '%s\n' "-- $*"; }
fail() {
  echo "quickstart: $1 failed; the end of $log:" >&2
  tail -n 30 "$log" >&2
  exit 1
}

step "OS packages"
bash scripts/setup.sh >>"$log" 2>&1 || fail "installing packages (scripts/setup.sh)"
step "configuring"
# -O1: a third less compile time than -O3 (most of it is optimizing the
# header-only libraries' inline code again in every file); the host
# backend's copies are libc's memcpy either way. scripts/test.sh, the
# packages and the image build -O3.
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DKVSTASH_WITH_CUDA=OFF \
  -DKVSTASH_BUILD_TESTS=OFF -DKVSTASH_BUILD_BENCH=OFF >>"$log" 2>&1 || fail "configuring"
step "building kvstashd and kvstash with $(nproc) jobs"
start=$SECONDS
cmake --build "$build_dir" -j "$(nproc)" --target kvstashd kvstash >>"$log" 2>&1 || fail "building"
step "built in $((SECONDS - start)) s"

bin="$PWD/$build_dir/bin"
run_dir=$(mktemp -d /tmp/kvstash-quickstart-XXXXXX)
socket="ipc://$run_dir/kvstash.sock"
"$bin/kvstashd" --socket "$socket" --backend host --l1-gb "${KVSTASH_L1_GB:-2}" >>"$log" 2>&1 &
daemon=$!
cleanup() {
  kill "$daemon" 2>/dev/null || true
  wait "$daemon" 2>/dev/null || true
  rm -rf "$run_dir"
}
trap cleanup EXIT
for _ in $(seq 100); do
  "$bin/kvstash" --socket "$socket" ping >>"$log" 2>&1 && break
  kill -0 "$daemon" 2>/dev/null || fail "starting kvstashd"
  sleep 0.1
done
step "kvstashd is up on $socket; running kvstash bench"
echo
status=0
"$bin/kvstash" --socket "$socket" bench --backend host "$@" || status=$?
{
  echo "== kvstash stats after the bench"
  "$bin/kvstash" --socket "$socket" stats || true
} >>"$log" 2>&1
exit "$status"
