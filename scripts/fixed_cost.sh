#!/usr/bin/env bash
# A request's fixed cost, stage by stage (issue 10): starts a private kvstashd
# with stage tracing, runs bench/probes' kvstash_call_latency against it
# (ping, 64-key lookup, 1- and 64-chunk retrieves of a small layout, and a raw
# ZeroMQ round trip of the same frame sizes), then prints where each call's
# time went (bench/probes/trace_stages.py). Each configuration runs twice:
# spinning off (--busy-poll-us 0 on both sides: the old default) and the
# defaults (no option set).
#
#   scripts/fixed_cost.sh [--bin-dir build/bin] [--samples N] [--out DIR]
#
# The host backend on any machine, the GPU machine included: the probe's
# engine memory is POSIX shared memory and it measures the request path (the
# same threads and hand-offs as with CUDA), not PCIe; `kvstash bench
# --backend cuda` measures the GPU copies. Writes
# DIR/{off,default}.{json,stages.txt}.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin="$here/build/bin"
samples=2000
out=$(mktemp -d /tmp/kvstash-fixed-cost.XXXXXX)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin-dir) bin=$2; shift 2 ;;
    --samples) samples=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"

daemon=
trap '[[ -n $daemon ]] && kill -TERM "$daemon" 2>/dev/null; true' EXIT

run() {  # name, then extra kvstashd arguments; KVSTASH_CLIENT_SPIN for the probe
  local name=$1; shift
  local socket="$out/$name.sock" prefix="$out/$name.trace"
  rm -f "$prefix".* "$socket"
  KVSTASH_TRACE_FILE=$prefix "$bin/kvstashd" --backend host --l1-gb 0.5 \
    --socket "$socket" "$@" >"$out/$name.kvstashd.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [[ -S $socket ]] && break; sleep 0.05; done
  local spin=()
  [[ -n ${KVSTASH_CLIENT_SPIN:-} ]] && spin=(--spin-us "$KVSTASH_CLIENT_SPIN")
  KVSTASH_TRACE_FILE=$prefix "$bin/kvstash_call_latency" "$socket" "$samples" "${spin[@]}" \
    | tee "$out/$name.json"
  kill -TERM "$daemon"; wait "$daemon" || true
  daemon=
  python3 "$here/bench/probes/trace_stages.py" "$prefix" | tee "$out/$name.stages.txt"
}

echo "== spinning off (--busy-poll-us 0, ClientOptions::busy_poll_us 0)"
KVSTASH_CLIENT_SPIN=0 run off --busy-poll-us 0
echo "== defaults (no option set)"
run default
echo "results in $out"
