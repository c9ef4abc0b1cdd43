#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, from prebuilt binaries: the thread wake-up probe, the
# `gpu` tests, then `kvstash bench --backend cuda` against a kvstashd in each
# transfer mode and completion wait (and with busy polling), then where the
# time of one request goes (the daemon's per-copy debug timings, with the
# GPU time of each sub-batch's kernel and copy).
#
#   KVSTASH_BIN_DIR=build/bin scripts/gpu_run.sh [OUTPUT_DIR]
#
# Binaries are looked up in KVSTASH_BIN_DIR (the tests start kvstashd and
# kvstash_gpu_test_engine from there too). Reports land in OUTPUT_DIR.
set -uo pipefail
bin=${KVSTASH_BIN_DIR:?set KVSTASH_BIN_DIR to the folder holding kvstashd and the tests}
out=${1:-/tmp/kvstash-gpu-run}
mkdir -p "$out"
status=0

nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
  --format=csv
echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
echo "== thread hand-off latency (kvstash_wake_probe)"
"$bin/kvstash_wake_probe" 2000

# Each step has a time limit, so that one hang cannot eat the whole run.
for step in chunk_copy_gpu_test:60 cuda_lane_gpu_test:120 gpu_test:220 backend_selection_test:40; do
  test=${step%:*}
  echo "== $test"
  timeout "${step#*:}" "$bin/$test" --gtest_brief=1 >"$out/$test.log" 2>&1 || { rc=$?; status=1; echo "exit $rc"; }
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|^(VMM error|dma:|direct:|\[ bandwidth)' "$out/$test.log" | head -60
  grep -B2 -A12 'Failure' "$out/$test.log" | head -80
done

# start_daemon NAME MODE WAIT LOG_LEVEL [BUSY_POLL_US]: starts kvstashd in the background.
start_daemon() {
  socket=ipc:///tmp/kvstash-bench-$1.sock
  "$bin/kvstashd" --backend cuda --transfer-mode "$2" --completion-wait "$3" --socket "$socket" \
    --l1-gb 8 --log-level "$4" ${5:+--busy-poll-us "$5"} >"/tmp/kvstashd-$1.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do "$bin/kvstash" ping --socket "$socket" >/dev/null 2>&1 && break; sleep 0.1; done
}
stop_daemon() {
  kill "$daemon"
  wait "$daemon" || { echo "kvstashd exited with $?"; tail -20 "/tmp/kvstashd-$1.log"; }
}

# MODE WAIT [BUSY_POLL_US]; the spin window applies to kvstashd and the bench's
# client (default: theirs, 50 us).
for config in "dma block" "direct block" "dma poll 200" "direct poll 200"; do
  set -- $config
  busy=${3:-}
  name=$1-$2-busy${busy:-default}
  start_daemon "$name" "$1" "$2" warn "$busy"
  echo "== kvstash bench --backend cuda ($1 mode, completion wait $2, spin window ${busy:-default} us)"
  timeout 150 "$bin/kvstash" bench --backend cuda --socket "$socket" --timeout-ms 60000 \
    ${busy:+--busy-poll-us "$busy"} >"$out/bench-$name.txt" 2>&1
  grep -v '^short of target' "$out/bench-$name.txt"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
  grep AnonHugePages /proc/meminfo
  stop_daemon "$name"
done

# One-chunk requests with the daemon's per-copy timings (debug log).
for wait in poll block; do
  start_daemon "debug-$wait" dma "$wait" debug
  timeout 60 "$bin/kvstash" bench --backend cuda --socket "$socket" --chunk-counts 1,4 \
    --latency-samples 100 >/dev/null 2>&1
  echo "== daemon timings, dma, completion wait $wait (last one-chunk Llama copies)"
  grep -E '(store|retrieve) of 1 chunks, 33554432 bytes' "/tmp/kvstashd-debug-$wait.log" | tail -4
  grep -E '(store|retrieve) of 4 chunks, 134217728 bytes' "/tmp/kvstashd-debug-$wait.log" | tail -4
  stop_daemon "debug-$wait"
done
exit $status
