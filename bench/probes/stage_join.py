#!/usr/bin/env python3
"""p50 / p90 of the time between stages of requests that reached a copy lane,
from the daemon's and the client's KVSTASH_TRACE_FILE files (no caller
file needed): client_submit, client_sent, daemon_received, daemon_handled,
lane_pickup, copy_done, reply_sent, client_received.

    python3 bench/probes/stage_join.py <prefix>
"""
import glob
import sys
from collections import defaultdict

ORDER = ["client_submit", "client_sent", "daemon_received", "daemon_handled", "lane_pickup",
         "copy_done", "reply_sent", "client_received"]


def main(prefix):
    by_id = defaultdict(dict)
    # The daemon's and the client's files; the bench's engine files hold
    # other columns.
    for path in glob.glob(prefix + ".daemon.*") + glob.glob(prefix + ".client.*"):
        for line in open(path):
            rid, stage, ns = line.split()
            by_id[int(rid)].setdefault(stage, int(ns))
    deltas = defaultdict(list)
    for stages in by_id.values():
        if "lane_pickup" not in stages or "client_submit" not in stages:
            continue
        for a, b in zip(ORDER, ORDER[1:]):
            if a in stages and b in stages:
                deltas[f"{a} -> {b}"].append((stages[b] - stages[a]) / 1000)
    for key in (f"{a} -> {b}" for a, b in zip(ORDER, ORDER[1:])):
        v = sorted(deltas.get(key, []))
        if v:
            print(f"{key:40} n={len(v):5} p50={v[len(v) // 2]:8.1f} us  p90={v[len(v) * 9 // 10]:8.1f} us")


if __name__ == "__main__":
    main(sys.argv[1])
