#!/usr/bin/env bash
# kvstash inside a real vLLM on a host with a GPU (vLLM importable, torch with
# CUDA): correctness with dense and MLA models, layer-wise loads with
# piecewise CUDA graphs and whole-request loads with full graphs, kvstashd
# killed / restarted / chunks evicted under a live engine, and with two GPUs
# tensor parallelism and two engines sharing one kvstashd
# (tests/vllm_gpu/check.py). Exits non-zero on any failed check.
#
#   KVSTASH_BIN_DIR=build/bin scripts/vllm_gpu_check.sh [OUT_DIR] [CASE...]
#
# Needs kvstashd (CUDA backend) in KVSTASH_BIN_DIR and libkvstash.so in
# KVSTASH_LIB (default: build/client). Default cases: every case this
# machine's GPU count allows. Cases run side by side where there are GPUs
# for them (each with its own kvstashd, each seeing only its own GPUs).
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
  cases=(dense dense-layerwise dense-full mla)
  [ "$gpus" -ge 2 ] && cases+=(dense-tp2 mla-tp2 share)
fi

# run_case CASE GPUS: one case on the GPUs named (CUDA_VISIBLE_DEVICES).
run_case() {
  local case=$1 devices=$2
  if [ "$case" = share ]; then
    # One kvstashd for both engines, each engine on one of the two GPUs.
    local sock_dir socket daemon a rc=0
    sock_dir=$(mktemp -d); socket=ipc://$sock_dir/kvstash.sock
    CUDA_VISIBLE_DEVICES=$devices "$KVSTASH_BIN_DIR/kvstashd" --backend cuda --socket "$socket" \
      --l1-gb 16 --chunk-tokens 256 --log-level warn >"$out/kvstashd-share.log" 2>&1 &
    daemon=$!
    for _ in $(seq 600); do [ -S "$sock_dir/kvstash.sock" ] && break; sleep 0.1; done
    rm -f "$out/share-marker" "$out/b-done"
    CUDA_VISIBLE_DEVICES=${devices%%,*} "$python" tests/vllm_gpu/check.py --case share --role a \
      --socket "$socket" --marker "$out/share-marker" --out "$out" >"$out/share-a.log" 2>&1 &
    a=$!
    CUDA_VISIBLE_DEVICES=${devices##*,} "$python" tests/vllm_gpu/check.py --case share --role b \
      --socket "$socket" --marker "$out/share-marker" --out "$out" >"$out/share-b.log" 2>&1 || rc=1
    wait "$a" || rc=1
    kill "$daemon"; wait "$daemon"
    cat "$out/share-a.log" "$out/share-b.log" >"$out/share.log"
    return $rc
  fi
  CUDA_VISIBLE_DEVICES=$devices "$python" tests/vllm_gpu/check.py --case "$case" --out "$out" \
    >"$out/$case.log" 2>&1
}

needs() { case $1 in *tp2|share) echo 2;; *) echo 1;; esac; }

status=0
pending=("${cases[@]}")
while [ ${#pending[@]} -gt 0 ]; do
  # One wave: as many pending cases as the GPUs hold, each on its own GPUs.
  next=0; wave=(); pids=(); left=()
  for case in "${pending[@]}"; do
    n=$(needs "$case")
    if [ "$n" -gt "$gpus" ]; then echo "== $case: needs $n GPUs, this machine has $gpus"; status=1; continue; fi
    if [ $((next + n)) -le "$gpus" ]; then
      devices=$(seq -s, "$next" $((next + n - 1)))
      echo "== $case on GPU $devices"
      run_case "$case" "$devices" & pids+=($!); wave+=("$case"); next=$((next + n))
    else
      left+=("$case")
    fi
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || status=1
    case=${wave[$i]}
    echo "-- $case"
    grep -E '^(PASS|FAIL)|passed, ' "$out/$case.log"
    grep -A30 Traceback "$out/$case.log" | head -60
  done
  pending=("${left[@]}")
done
echo "vllm_gpu_check: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
