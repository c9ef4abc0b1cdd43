#!/usr/bin/env bash
# SGLang 0.5.17 + the kvstash HiCache backend on a host with GPUs (about 5
# minutes on one H200; engine starts ~60 s each, the first prefill ~75 s with
# its JIT compiles unless a JIT cache is given):
#
#   bash scripts/sglang_gpu_check.sh            # one GPU: l3_full, l3_partial, kill, instance_b
#   bash scripts/sglang_gpu_check.sh --tp 2     # two GPUs: the same with TP=2 (+ ranks), no instance B
#   bash scripts/sglang_gpu_check.sh --tp 2 --model deepseek-v2-lite
#                                               # MLA (DeepSeek-V2-Lite's shapes): + mla_once
#
# Needs: SGLang 0.5.17 importable by python3 (or $SGLANG_ENV, a shell file
# sourced first that makes it so), optionally $SGJIT, a .tar.xz of a JIT
# cache to unpack into /tmp (skips most compiles), and kvstashd + libkvstash.so of
# this checkout: $KVSTASH_BIN_DIR/kvstashd (default build/bin) and $KVSTASH_LIB
# (default build/client/libkvstash.so); a host-only or CUDA build both do.
# Prints `CHECK <name> PASS|FAIL ...` lines and a summary; logs go to
# $OUT (or /tmp/sglang-gpu-check). Exit status 0 when every check passed.
set -uo pipefail
cd "$(dirname "$0")/.."
tp=1
instance_b=1
tokens=4096
model_name=llama3-8b
while [ $# -gt 0 ]; do
  case $1 in
    --tp) tp=$2; shift 2 ;;
    --skip-b) instance_b=0; shift ;;
    --tokens) tokens=$2; shift 2 ;;
    --model) model_name=$2; shift 2 ;;
    *) echo "sglang_gpu_check: unknown argument $1 (--tp N, --skip-b, --tokens N, --model NAME)" >&2; exit 2 ;;
  esac
done
[ "$tp" -gt 1 ] && instance_b=0
build=${KVSTASH_BUILD_DIR:-$PWD/build}
bin=${KVSTASH_BIN_DIR:-$build/bin}
kvstashd=$bin/kvstashd
export KVSTASH_LIB=${KVSTASH_LIB:-$build/client/libkvstash.so}
for f in "$kvstashd" "$KVSTASH_LIB" ${SGLANG_ENV:+"$SGLANG_ENV"}; do
  [ -e "$f" ] || { echo "sglang_gpu_check: $f is missing (build kvstash; SGLANG_ENV names a file)" >&2; exit 2; }
done
logs=${OUT:-/tmp/sglang-gpu-check}
mkdir -p "$logs"
rm -f "$logs"/instance_*.log
if [ -n "${SGJIT:-}" ] && [ -f "$SGJIT" ]; then
  tar xJf "$SGJIT" -C /tmp && echo "sglang_gpu_check: JIT cache from $SGJIT"
fi
export EXTRA_PYTHONPATH=$PWD/python
if [ -n "${SGLANG_ENV:-}" ]; then . "$SGLANG_ENV"; fi
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}

run_dir=$(mktemp -d /tmp/kvstash-sgl.XXXXXX)
socket=ipc://$run_dir/kvstash.sock
start_daemon() {
  "$kvstashd" --backend host --chunk-tokens 64 --l1-gb 24 --socket "$socket" --log-level info \
    >>"$logs/kvstashd.log" 2>&1 &
  echo $! > "$run_dir/pid"
  for _ in $(seq 1 100); do [ -S "$run_dir/kvstash.sock" ] && return 0; sleep 0.1; done
  echo "sglang_gpu_check: kvstashd did not start (see $logs/kvstashd.log)" >&2
  return 1
}
stop_daemon() {
  local pid
  pid=$(cat "$run_dir/pid" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -f "$run_dir/kvstash.sock"
}
trap 'stop_daemon; rm -rf "$run_dir"' EXIT
start_daemon || exit 1
# The restart command the driver runs after it killed kvstashd.
cat > "$run_dir/restart.sh" <<RESTART
rm -f "$run_dir/kvstash.sock"
"$kvstashd" --backend host --chunk-tokens 64 --l1-gb 24 --socket "$socket" --log-level info >>"$logs/kvstashd.log" 2>&1 &
echo \$! > "$run_dir/pid"
for _ in \$(seq 1 100); do [ -S "$run_dir/kvstash.sock" ] && exit 0; sleep 0.1; done
exit 1
RESTART

model=$(mktemp -d "/tmp/$model_name.XXXXXX")
python3 -c "import json,sys; sys.path.insert(0,'tests/sglang_gpu'); import check; json.dump(check.MODELS['$model_name'], open('$model/config.json','w'))" \
  || { echo "sglang_gpu_check: unknown model $model_name (llama3-8b, deepseek-v2-lite)" >&2; exit 2; }
common=(--socket "$socket" --model-dir "$model" --model "$model_name" --tokens "$tokens" --expect "$run_dir/expect.json")
start=$(date +%s)
python3 tests/sglang_gpu/check.py "${common[@]}" --tp "$tp" --daemon-pid "$(cat "$run_dir/pid")" \
  --restart-cmd "bash $run_dir/restart.sh" 2>&1 | tee "$logs/instance_a.log" | grep -E '^(CHECK|RUN|NOTE)'
if [ "$instance_b" = 1 ]; then
  python3 tests/sglang_gpu/check.py "${common[@]}" --instance-b 2>&1 | tee "$logs/instance_b.log" \
    | grep -E '^(CHECK|RUN|NOTE)'
fi
"$bin/kvstash" stats --socket "$socket" > "$logs/kvstash_stats.txt" 2>&1 || true
echo "sglang_gpu_check: $(( $(date +%s) - start )) s; logs in $logs"
checks=$(grep -h '^CHECK' "$logs"/instance_*.log)
echo "$checks"
[ -n "$checks" ] && ! grep -q ' FAIL ' <<<"$checks"
