#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: where a CUDA lane's time goes. The H2D
# pinning probe, then a kvstashd at --log-level debug under the bench (1 and
# 4 chunks, every layout), summarized per request shape from its per-copy
# debug lines, and the per-request stage trace.
#
#   KVSTASH_BIN_DIR=build/bin [PINNING=1] [CHUNKS=1,4] [SAMPLES=100] \
#     bench/probes/lane_profile.sh OUT_DIR [MODE]
set -uo pipefail
bin=${KVSTASH_BIN_DIR:?set KVSTASH_BIN_DIR}
out=${1:?output dir}; mode=${2:-dma}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
[ -n "${PINNING:-}" ] && [ -x "$bin/h2d_pinning" ] && timeout 120 "$bin/h2d_pinning" | tee "$out/pinning.txt"
socket=ipc:///tmp/kvstash-profile.sock
rm -f /tmp/kvstash-trace.*
KVSTASH_TRACE_FILE=/tmp/kvstash-trace "$bin/kvstashd" --backend cuda --l1-gb 32 --transfer-mode "$mode" \
  --socket "$socket" --log-level debug >"$out/kvstashd-$mode.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do "$bin/kvstash" ping --socket "$socket" >/dev/null 2>&1 && break; sleep 0.1; done
KVSTASH_TRACE_FILE=/tmp/kvstash-trace timeout 200 "$bin/kvstash" bench --backend cuda --socket "$socket" \
  --timeout-ms 60000 --chunk-counts ${CHUNKS:-1,4} --latency-samples ${SAMPLES:-100} \
  >"$out/bench-$mode.txt" 2>&1
kill "$daemon"; wait "$daemon"
python3 "$(dirname "$0")/lane_log_summary.py" "$out/kvstashd-$mode.log" | tee "$out/lane-$mode.txt"
python3 "$(dirname "$0")/stage_join.py" /tmp/kvstash-trace | tee "$out/stages-$mode.txt"
python3 "$(dirname "$0")/engine_join.py" /tmp/kvstash-trace "$out/kvstashd-$mode.log" | tee "$out/engine-$mode.txt"
grep -E "retrieve|store" "$out/bench-$mode.txt" | grep -E "engine-visible|baseline" | head -40
