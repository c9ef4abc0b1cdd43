#!/usr/bin/env bash
# A request's fixed cost, stage by stage: starts a private kvstashd
# with stage tracing, runs bench/probes' kvstash_call_latency against it
# (ping, 64-key lookup, 1- and 64-chunk retrieves of a small layout, and a raw
# ZeroMQ round trip of the same frame sizes), then prints where each call's
# time went (bench/probes/trace_stages.py). Three configurations: spinning
# off (--busy-poll-us 0 on both sides), the shared-memory
# channel off (ClientOptions::shm_channel = false: ZeroMQ only, spinning on),
# and the defaults (no option set: the channel on). Last, one table of
# p50/p99 per call and configuration, the raw ZeroMQ round trip, and the
# ratio lookup64 / raw. Then the defaults once more with calls 2 ms apart
# (--pause-us 2000, a quarter of the samples): an engine's sporadic
# requests, which find kvstashd asleep (the doorbell's case), with the p50
# from each call to daemon_received; and so again without the doorbell
# (a file at its path: kvstashd wakes over ZeroMQ, as before it).
#
#   scripts/fixed_cost.sh [--bin-dir build/bin] [--samples N] [--out DIR]
#
# The host backend on any machine, one with GPUs included: the probe's
# engine memory is POSIX shared memory and it measures the request path (the
# same threads and hand-offs as with CUDA), not PCIe; `kvstash bench
# --backend cuda` measures the GPU copies. Writes
# DIR/{off,zmq,default,sporadic,sporadic_nobell}.{json,stages.txt}.
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

run() {  # name, then extra kvstashd arguments; KVSTASH_CLIENT_SPIN, KVSTASH_PROBE_ARGS for the probe
  local name=$1; shift
  local socket="$out/$name.sock" prefix="$out/$name.trace"
  rm -f "$prefix".* "$socket" "$socket.doorbell"
  # A file where the doorbell goes: kvstashd runs without one (it warns) and
  # clients wake it over ZeroMQ, as before the doorbell.
  [[ -n ${KVSTASH_NO_DOORBELL:-} ]] && : >"$socket.doorbell"
  KVSTASH_TRACE_FILE=$prefix "$bin/kvstashd" --backend host --l1-gb 0.5 \
    --socket "$socket" "$@" >"$out/$name.kvstashd.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [[ -S $socket ]] && break; sleep 0.05; done
  local spin=()
  [[ -n ${KVSTASH_CLIENT_SPIN:-} ]] && spin=(--spin-us "$KVSTASH_CLIENT_SPIN")
  # shellcheck disable=SC2206
  local extra=(${KVSTASH_PROBE_ARGS:-})
  KVSTASH_TRACE_FILE=$prefix "$bin/kvstash_call_latency" "$socket" "$samples" "${spin[@]}" \
    "${extra[@]}" | tee "$out/$name.json"
  kill -TERM "$daemon"; wait "$daemon" || true
  daemon=
  rm -f "$socket.doorbell"
  python3 "$here/bench/probes/trace_stages.py" "$prefix" | tee "$out/$name.stages.txt"
}

echo "== spinning off (--busy-poll-us 0, ClientOptions::busy_poll_us 0)"
KVSTASH_CLIENT_SPIN=0 run off --busy-poll-us 0
echo "== shared-memory channel off (ClientOptions::shm_channel false), spinning on"
KVSTASH_PROBE_ARGS=--no-shm-channel run zmq
echo "== defaults (no option set: the shared-memory channel on)"
run default
echo "== defaults, sporadic: calls 2 ms apart (kvstashd asleep at each)"
KVSTASH_PROBE_ARGS="--pause-us 2000" samples=$(( (samples + 3) / 4 )) run sporadic
echo "== the same without the doorbell (a sleeping kvstashd woken over ZeroMQ)"
KVSTASH_NO_DOORBELL=1 KVSTASH_PROBE_ARGS="--pause-us 2000" samples=$(( (samples + 3) / 4 )) \
  run sporadic_nobell
echo "== summary: p50 / p99 in us"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rows = [("off", "spinning off"), ("zmq", "channel off"), ("default", "defaults"),
        ("sporadic", "2 ms apart"), ("sporadic_nobell", "no doorbell")]
calls = ["ping", "lookup64", "retrieve1", "retrieve64", "raw_zmq_lookup_frame"]
print(f"{'configuration':<14}{'channel':>8}" + "".join(f"{c:>22}" for c in calls) +
      f"{'lookup64/raw':>14}")
for name, label in rows:
    r = json.load(open(f"{out}/{name}.json"))
    cells = "".join(f"{r[c + '_p50_us']:>12.1f} /{r[c + '_p99_us']:>7.1f}" for c in calls)
    print(f"{label:<14}{str(r.get('shm_channel', False)).lower():>8}{cells}"
          f"{r['lookup64_over_raw']:>14.2f}")
PY
echo "== calls 2 ms apart: call -> daemon_received, p50 / p99 in us"
for name in sporadic sporadic_nobell; do
  echo "-- $name"
  python3 "$here/bench/probes/trace_stages.py" "$out/$name.trace" --json | python3 -c '
import json, sys
for call, row in json.load(sys.stdin).items():
    p50 = row.get("call_to_daemon_received_p50_us", -1)
    p99 = row.get("call_to_daemon_received_p99_us", -1)
    print(f"{call:<12}{p50:>10.1f} /{p99:>8.1f}")
'
done
echo "results in $out"
