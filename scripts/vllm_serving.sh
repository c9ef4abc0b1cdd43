#!/usr/bin/env bash
# Serving with many requests in flight in a real vLLM on a host with GPUs
# (bench/vllm_serving.py): the same Poisson arrivals of requests sharing
# long prefixes, a working set larger than vLLM's (capped) GPU KV cache,
# served by recompute (prefix caching, no offload), vLLM's native CPU
# offloading and kvstash (loads between steps, in the step, and with
# multi-path retrieves over GPUs 0,1 when the host has two), one engine
# after the other on GPU 0, then all side by side. Exits non-zero on any
# error. The arguments are checked (and the workload built) on the CPU
# before any engine starts.
#
#   KVSTASH_BIN_DIR=build/bin scripts/vllm_serving.sh [OUT_DIR] [bench/vllm_serving.py options]
#   e.g. a smoke run: scripts/vllm_serving.sh /tmp/serving --duration 20
#   MODES="kvstash native" scripts/vllm_serving.sh ...   # some modes only
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/kvstash-vllm-serving}; shift || true
export KVSTASH_BIN_DIR=${KVSTASH_BIN_DIR:-$PWD/build/bin}
export KVSTASH_LIB=${KVSTASH_LIB:-$PWD/build/client/libkvstash.so}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0}
python=${PYTHON:-python3}
mkdir -p "$out"
for f in "$KVSTASH_BIN_DIR/kvstashd" "$KVSTASH_LIB"; do
  [ -e "$f" ] || { echo "missing $f: build kvstash first (scripts/build.sh)" >&2; exit 1; }
done
"$python" bench/vllm_serving.py --mode kvstash --dry-run "$@" >"$out/workload.json" \
  || { echo "bad arguments (see above)" >&2; exit 2; }
cat "$out/workload.json"
gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())') || exit 1
modes=(${MODES:-recompute native kvstash kvstash-layerwise kvstash-multipath})
status=0
for mode in "${modes[@]}"; do
  if [ "$mode" = kvstash-multipath ] && [ "$gpus" -lt 2 ]; then
    echo "kvstash-multipath skipped: $gpus GPU(s) visible, it needs 2"
    continue
  fi
  echo "== $mode ($(date -u +%H:%M:%S))"
  CUDA_VISIBLE_DEVICES=0 "$python" bench/vllm_serving.py --mode "$mode" --out "$out" "$@" \
    >"$out/serving-$mode.log" 2>&1 || status=1
  tail -1 "$out/serving-$mode.log"
  grep -A20 Traceback "$out/serving-$mode.log" | head -30
done
"$python" bench/vllm_serving.py --table "$out" | tee "$out/table.md" || status=1
exit $status
