#!/usr/bin/env bash
# On a host with two or more GPUs joined by NVLink, from prebuilt binaries:
# the multi-path GPU tests, then `kvstash bench --backend cuda` against a
# kvstashd with multi-path retrieves off and on, in both transfer modes, for
# 1 to 64 chunks; then every GPU retrieving at once (one bench process per
# GPU, started together), off and on, to compare their aggregate.
#
#   KVSTASH_BIN_DIR=build/bin scripts/gpu_multipath.sh [OUTPUT_DIR]
set -uo pipefail
bin=${KVSTASH_BIN_DIR:?set KVSTASH_BIN_DIR to the folder holding kvstashd and the tests}
out=${1:-/tmp/kvstash-gpu-multipath}
mkdir -p "$out"
status=0

nvidia-smi topo -m
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)

for step in "cuda_lane_gpu_test:*Multipath*:300" "gpu_test:*multipath*:400" \
            "gpu_test:*SeveralPaths*:120"; do
  IFS=: read -r test filter limit <<<"$step"
  echo "== $test $filter"
  timeout "$limit" "$bin/$test" --gtest_brief=1 --gtest_filter="$filter" \
    >"$out/$test-${filter//\*/}.log" 2>&1 || { rc=$?; status=1; echo "exit $rc"; }
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|multipath:|Skipped' \
    "$out/$test-${filter//\*/}.log" | sort | uniq -c | sort -rn | head -20
  grep -B2 -A12 'Failure' "$out/$test-${filter//\*/}.log" | head -80
done

# start_daemon NAME MODE MULTIPATH: kvstashd in the background.
start_daemon() {
  socket=ipc:///tmp/kvstash-multipath-$1.sock
  "$bin/kvstashd" --backend cuda --transfer-mode "$2" --multipath "$3" --socket "$socket" \
    --l1-gb 16 --log-level info >"$out/kvstashd-$1.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do "$bin/kvstash" ping --socket "$socket" >/dev/null 2>&1 && break; sleep 0.1; done
}
stop_daemon() {
  kill "$daemon"
  wait "$daemon" || { echo "kvstashd exited with $?"; tail -20 "$out/kvstashd-$1.log"; }
}

for mode in dma direct; do
  for multipath in off on; do
    name=$mode-$multipath
    start_daemon "$name" "$mode" "$multipath"
    echo "== kvstash bench --backend cuda ($mode mode, multipath $multipath)"
    "$bin/kvstash" --json describe --socket "$socket" >"$out/describe-$name.json"
    timeout 300 "$bin/kvstash" bench --backend cuda --socket "$socket" --timeout-ms 60000 \
      --layouts llama-3-8b,qwen2.5-0.5b --chunk-counts 1,2,4,8,16,32,64 \
      >"$out/bench-$name.txt" 2>&1
    grep -E 'retrieve|multi-path|x one link|^llama|^qwen|PASS|FAIL' "$out/bench-$name.txt" | head -60
    "$bin/kvstash" --json describe --socket "$socket" >"$out/describe-after-$name.json"
    stop_daemon "$name"
  done
done

# Every GPU retrieving at once: one bench per GPU, started together, each
# reporting its own retrieve GB/s; the aggregate with multipath on should be
# at least 0.95 of the aggregate with it off.
for multipath in off on; do
  name=all-gpus-$multipath
  start_daemon "$name" dma "$multipath"
  echo "== every GPU at once, multipath $multipath"
  pids=()
  for g in $(seq 0 $((gpus - 1))); do
    CUDA_VISIBLE_DEVICES=$g timeout 300 "$bin/kvstash" bench --backend cuda --socket "$socket" \
      --timeout-ms 60000 --layouts llama-3-8b --chunk-counts 16 --latency-samples 10 \
      >"$out/bench-$name-gpu$g.txt" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  grep -H -E '^llama-3-8b .* retrieve  ' "$out"/bench-"$name"-gpu*.txt
  "$bin/kvstash" --json describe --socket "$socket" >"$out/describe-after-$name.json"
  stop_daemon "$name"
done
exit $status
