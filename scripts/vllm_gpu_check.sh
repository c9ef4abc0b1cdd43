#!/usr/bin/env bash
# kvstash inside a real vLLM on a GPU machine (vLLM importable, torch with
# CUDA): correctness with dense and MLA models, layer-wise loads with
# piecewise CUDA graphs and whole-request loads with full graphs, kvstashd
# killed / restarted / chunks evicted under a live engine, and with two GPUs
# tensor parallelism and two engines sharing one kvstashd
# (tests/vllm_gpu/check.py). Exits non-zero on any failed check.
#
#   KVSTASH_BIN_DIR=build/bin scripts/vllm_gpu_check.sh [OUT_DIR] [CASE...]
#
# Needs kvstashd (CUDA backend) in KVSTASH_BIN_DIR and libkvstash.so in
# KVSTASH_LIB (default: beside it in build/client). Default cases: every
# case this machine's GPU count allows.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/kvstash-vllm-check}; shift || true
export KVSTASH_BIN_DIR=${KVSTASH_BIN_DIR:-$PWD/build/bin}
export KVSTASH_LIB=${KVSTASH_LIB:-$PWD/build/client/libkvstash.so}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
mkdir -p "$out"
python=${PYTHON:-python3}
gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())') || { echo "torch sees no GPU" >&2; exit 1; }
"$python" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__, torch.cuda.get_device_name())'
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
  cases=(dense-layerwise dense-full mla)
  [ "$gpus" -ge 2 ] && cases+=(dense-tp2 mla-tp2 share)
fi
status=0
for case in "${cases[@]}"; do
  echo "== $case"
  if [ "$case" = share ]; then
    [ "$gpus" -ge 2 ] || { echo "share: needs 2 GPUs, this machine has $gpus"; status=1; continue; }
    # One kvstashd for both engines, each engine on its own GPU.
    sock_dir=$(mktemp -d); socket=ipc://$sock_dir/kvstash.sock
    "$KVSTASH_BIN_DIR/kvstashd" --backend cuda --socket "$socket" --l1-gb 16 --chunk-tokens 256 \
      --log-level warn >"$out/kvstashd-share.log" 2>&1 &
    daemon=$!
    for _ in $(seq 600); do [ -S "$sock_dir/kvstash.sock" ] && break; sleep 0.1; done
    rm -f "$out/share-marker" "$out/b-done"
    CUDA_VISIBLE_DEVICES=0 "$python" tests/vllm_gpu/check.py --case share --role a --socket "$socket" \
      --marker "$out/share-marker" --out "$out" >"$out/share-a.log" 2>&1 &
    a=$!
    CUDA_VISIBLE_DEVICES=1 "$python" tests/vllm_gpu/check.py --case share --role b --socket "$socket" \
      --marker "$out/share-marker" --out "$out" >"$out/share-b.log" 2>&1 || status=1
    wait "$a" || status=1
    kill "$daemon"; wait "$daemon"
    grep -hE '^(PASS|FAIL)' "$out/share-a.log" "$out/share-b.log"
    grep -h -A3 Traceback "$out/share-a.log" "$out/share-b.log" | head -40
    continue
  fi
  "$python" tests/vllm_gpu/check.py --case "$case" --out "$out" >"$out/$case.log" 2>&1 || status=1
  grep -E '^(PASS|FAIL)|passed, ' "$out/$case.log"
  grep -A30 Traceback "$out/$case.log" | head -60
done
echo "vllm_gpu_check: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
