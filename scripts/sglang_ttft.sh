#!/usr/bin/env bash
# SGLang 0.5.17 TTFT and page rates with kvstash as HiCache's L3 (bench/sglang_ttft.py),
# on a host with a GPU and SGLang 0.5.17 importable by python3 (or $SGLANG_ENV, a
# shell file sourced first that makes it so):
#   1. kvstash: recompute, L2 (host pool) and L3 (kvstashd) hits by prompt length
#   2. instance B: a second engine's first sight of the same prompts (same kvstashd)
#   3. SGLang's `file` backend as L3 (no kvstashd)
#   4. batch_get_v1 / batch_set_v1 against a raw memcpy of the same bytes
#
#   bash scripts/sglang_ttft.sh [OUT_DIR] [--lengths 1024,4096,16384,32768] [--repeat 3]
#
# kvstashd from $KVSTASH_BIN_DIR (default build/bin), libkvstash from $KVSTASH_LIB
# (default build/client/libkvstash.so). Each engine start costs ~60 s, so the
# four parts take about 10-15 minutes with the default lengths; fewer lengths or
# repeats shorten it. Tables land in OUT_DIR/*.md, logs beside them.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-/tmp/kvstash-sglang-ttft}}; shift || true
bin=${KVSTASH_BIN_DIR:-$PWD/build/bin}
export KVSTASH_LIB=${KVSTASH_LIB:-$PWD/build/client/libkvstash.so}
export EXTRA_PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
if [ -n "${SGLANG_ENV:-}" ]; then
  . "$SGLANG_ENV" || { echo "sglang_ttft: cannot source SGLANG_ENV=$SGLANG_ENV" >&2; exit 2; }
fi
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$out"
run_dir=$(mktemp -d /tmp/kvstash-sgl-ttft.XXXXXX)
socket=ipc://$run_dir/kvstash.sock
"$bin/kvstashd" --backend host --chunk-tokens 64 --l1-gb 48 --socket "$socket" >"$out/kvstashd.log" 2>&1 &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$run_dir"' EXIT
for _ in $(seq 1 100); do [ -S "$run_dir/kvstash.sock" ] && break; sleep 0.1; done
status=0
table() { sed -n '/^TTFT\|^[0-9]* pages of/,$p' "$1"; }
python3 bench/sglang_ttft.py ttft --backend kvstash --socket "$socket" --prompts "$run_dir/prompts.json" "$@" \
  >"$out/kvstash.log" 2>&1 || status=1
table "$out/kvstash.log" | tee "$out/kvstash.md"
python3 bench/sglang_ttft.py ttft --backend kvstash --socket "$socket" --prompts "$run_dir/prompts.json" \
  --first-sight "$@" >"$out/instance_b.log" 2>&1 || status=1
table "$out/instance_b.log" | tee "$out/instance_b.md"
python3 bench/sglang_ttft.py ttft --backend file "$@" >"$out/file.log" 2>&1 || status=1
table "$out/file.log" | tee "$out/file.md"
python3 bench/sglang_ttft.py pages --socket "$socket" >"$out/pages.log" 2>&1 || status=1
table "$out/pages.log" | tee "$out/pages.md"
exit $status
