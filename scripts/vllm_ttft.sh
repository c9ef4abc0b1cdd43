#!/usr/bin/env bash
# Time to first token in a real vLLM on a host with GPUs: the same model and
# prompts with no offloading (recompute, vLLM's GPU prefix cache), with
# vLLM's native CPU offloading and with kvstash, then all side by side
# (bench/vllm_ttft.py). The kvstash engine compares its connector variants
# (bench/vllm_ttft.py DEFAULT_VARIANTS, or --variants JSON) in the one
# engine, each prompt's hit once per variant, and splits each hit by the
# connector's timeline. $KVSTASH_TTFT_KINDS picks the engines (default
# "plain native kvstash"; add kvstash-layerwise for loads in the step layer
# by layer, which needs its own engine: piecewise CUDA graphs). With four
# GPUs the engines run at once, one per GPU (each loads over its own PCIe
# link); otherwise one after the other. Then, with two GPUs or more, kvstash
# with multi-path retrieves (kvstashd --multipath on) alone on the host, its
# engine on GPU 0, kvstashd serving GPUs 0-1 and, with four, 0-3. Exits
# non-zero on any error.
#
#   KVSTASH_BIN_DIR=build/bin scripts/vllm_ttft.sh [OUT_DIR] [bench/vllm_ttft.py options]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/kvstash-vllm-ttft}; shift || true
export KVSTASH_BIN_DIR=${KVSTASH_BIN_DIR:-$PWD/build/bin}
export KVSTASH_LIB=${KVSTASH_LIB:-$PWD/build/client/libkvstash.so}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 VLLM_ENABLE_V1_MULTIPROCESSING=${VLLM_ENABLE_V1_MULTIPROCESSING:-0}
python=${PYTHON:-python3}
mkdir -p "$out"
gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())') || exit 1
status=0
i=0
pids=()
read -r -a kinds <<<"${KVSTASH_TTFT_KINDS:-plain native kvstash}"
for kind in "${kinds[@]}"; do
  if [ "$gpus" -ge 4 ]; then
    CUDA_VISIBLE_DEVICES=$i "$python" bench/vllm_ttft.py --engine "$kind" --out "$out" "$@" \
      >"$out/ttft-$kind.log" 2>&1 &
    pids+=($!)
  else
    CUDA_VISIBLE_DEVICES=0 "$python" bench/vllm_ttft.py --engine "$kind" --out "$out" "$@" \
      >"$out/ttft-$kind.log" 2>&1 || status=1
  fi
  i=$((i + 1))
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
# Multi-path loads use the other GPUs' links: nothing else runs meanwhile.
multipath=()
[ "$gpus" -ge 2 ] && multipath+=(0,1)
[ "$gpus" -ge 4 ] && multipath+=(0,1,2,3)
for devices in "${multipath[@]}"; do
  n=$(( $(tr -cd , <<<"$devices" | wc -c) + 1 ))
  name=kvstash-multipath-${n}gpu
  kinds+=("$name")
  CUDA_VISIBLE_DEVICES=0 "$python" bench/vllm_ttft.py --engine kvstash-multipath --name "$name" \
    --kvstashd-gpus "$devices" --out "$out" "$@" >"$out/ttft-$name.log" 2>&1 || status=1
done
for kind in "${kinds[@]}"; do grep -A20 Traceback "$out/ttft-$kind.log" | head -30; done
"$python" bench/vllm_ttft.py --table "$out" | tee "$out/table.md" || status=1
exit $status
