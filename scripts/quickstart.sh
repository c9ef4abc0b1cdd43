#!/usr/bin/env bash
# The main job: sets up and builds kvstash, starts kvstashd (host backend
# where there is no GPU) on a private socket, and drives the synthetic engine
# workload against it: register KV memory, store prompts, look them up,
# retrieve them into other blocks, verify every byte, print hit rate and GB/s.
# Extra arguments go to `kvstash bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
bin="$PWD/${KVSTASH_BUILD_DIR:-build}/bin"
run_dir=$(mktemp -d /tmp/kvstash-quickstart-XXXXXX)
socket="ipc://$run_dir/kvstash.sock"
"$bin/kvstashd" --socket "$socket" --backend host --l1-gb "${KVSTASH_L1_GB:-2}" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$run_dir"' EXIT
for _ in $(seq 100); do
  "$bin/kvstash" ping --socket "$socket" >/dev/null 2>&1 && break
  sleep 0.1
done
"$bin/kvstash" bench --backend host --socket "$socket" "$@"
echo
"$bin/kvstash" stats --socket "$socket"
