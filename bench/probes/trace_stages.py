#!/usr/bin/env python3
"""Where one request's time goes: joins the stage traces that kvstashd,
libkvstash and kvstash_call_latency write under KVSTASH_TRACE_FILE=<prefix>
and prints, per kind of call, the time between consecutive stages (p50 / p99
in microseconds) and the share of the whole call each takes.

    python3 bench/probes/trace_stages.py <prefix> [--json]

Stages, in order (kvstash/runtime/stage_trace.h): the caller's call, client_submit
(queued for the I/O thread), client_sent (handed to ZeroMQ), daemon_received,
daemon_handled (answered inline or copy queued), lane_pickup, copy_done,
reply_pushed (on the reply queue), reply_sent, client_received, client_done
(the I/O thread begins completing), caller_woke. One client, one kvstashd.
Also, per call, the time from the caller's call to daemon_received: what
reaching the daemon costs (a sleeping one included).
"""
import glob
import json
import sys
from collections import defaultdict

STAGES = ["caller_call", "client_submit", "client_sent", "daemon_received", "daemon_handled",
          "lane_pickup", "copy_done", "reply_pushed", "reply_sent", "client_received",
          "client_done", "caller_woke"]


def read_stages(paths):
    by_id = defaultdict(dict)
    submits = []  # request ids in submission order
    for path in paths:
        with open(path) as f:
            for line in f:
                rid, stage, ns = line.split()
                rid, ns = int(rid), int(ns)
                if stage in by_id[rid]:
                    continue  # a second request with this id: not one of ours
                by_id[rid][stage] = ns
                if stage == "client_submit":
                    submits.append((ns, rid))
    return by_id, [rid for _, rid in sorted(submits)]


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def main():
    prefix = sys.argv[1]
    as_json = "--json" in sys.argv
    one = lambda role: sorted(glob.glob(f"{prefix}.{role}.*"))
    callers = one("caller")
    if not callers or not one("client") or not one("daemon"):
        sys.exit(f"trace_stages: need {prefix}.caller.*, .client.* and .daemon.* files")
    by_id, submits = read_stages(one("client") + one("daemon"))
    with open(callers[-1]) as f:
        calls = [line.split() for line in f]
    # The probe's calls are the last submissions of its client, in order.
    ids = submits[len(submits) - len(calls):]
    if len(ids) != len(calls):
        sys.exit("trace_stages: fewer client submissions than caller lines")
    gaps = defaultdict(lambda: defaultdict(list))  # label -> "a -> b" -> us
    totals = defaultdict(list)
    to_daemon = defaultdict(list)
    for (label, start, woke), rid in zip(calls, ids):
        if label == "-":
            continue
        stages = dict(by_id[rid])
        stages["caller_call"], stages["caller_woke"] = int(start), int(woke)
        present = [s for s in STAGES if s in stages]
        for a, b in zip(present, present[1:]):
            gaps[label][f"{a} -> {b}"].append((stages[b] - stages[a]) / 1000)
        totals[label].append((stages["caller_woke"] - stages["caller_call"]) / 1000)
        if "daemon_received" in stages:
            to_daemon[label].append((stages["daemon_received"] - stages["caller_call"]) / 1000)
    out = {}
    for label, per_gap in gaps.items():
        total50 = percentile(totals[label], 0.5)
        rows = {gap: {"p50_us": round(percentile(v, 0.5), 2), "p99_us": round(percentile(v, 0.99), 2),
                      "share_of_p50": round(percentile(v, 0.5) / total50, 3)}
                for gap, v in per_gap.items()}
        out[label] = {"calls": len(totals[label]), "total_p50_us": round(total50, 2),
                      "total_p99_us": round(percentile(totals[label], 0.99), 2), "stages": rows}
        if to_daemon[label]:
            out[label]["call_to_daemon_received_p50_us"] = round(percentile(to_daemon[label], 0.5), 2)
            out[label]["call_to_daemon_received_p99_us"] = round(percentile(to_daemon[label], 0.99), 2)
    if as_json:
        print(json.dumps(out, indent=1))
        return
    for label, row in out.items():
        print(f"\n{label}: {row['calls']} calls, total p50 {row['total_p50_us']} us, "
              f"p99 {row['total_p99_us']} us; call -> daemon_received p50 "
              f"{row.get('call_to_daemon_received_p50_us', '-')} us, "
              f"p99 {row.get('call_to_daemon_received_p99_us', '-')} us")
        print(f"  {'stage':<36} {'p50 us':>9} {'p99 us':>9} {'of p50':>7}")
        for gap, v in row["stages"].items():
            print(f"  {gap:<36} {v['p50_us']:>9.2f} {v['p99_us']:>9.2f} {v['share_of_p50']:>7.0%}")


if __name__ == "__main__":
    main()
