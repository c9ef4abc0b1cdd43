#!/usr/bin/env python3
"""Where a CUDA lane's time goes, from kvstashd's --log-level debug lines:

    "retrieve of 1 chunks, 33554432 bytes: enqueued after 25 us, 640 us on
     the GPU, lane awake after 700 us; GPU steps (us): k 650-680 c 12-650"

Groups by (direction, chunks, bytes) and prints p50 of: enqueue (host, from
Copy's start), began (host, when the lane saw the GPU past its start
event: not before the enqueue ended), first copy start / last copy end / last kernel end (GPU, from
the lane's start event), GPU total and lane awake.

    python3 bench/probes/lane_log_summary.py kvstashd.log
"""
import re
import sys
from collections import defaultdict

LINE = re.compile(r"(store|retrieve) of (\d+) chunks, (\d+) bytes: enqueued after (\d+) us, "
                  r"GPU began by (\d+) us, (\d+) us on the GPU, lane awake after (\d+) us; GPU steps \(us\): (.*?)(?:; began at (\d+) ns)?$")
STEP = re.compile(r"k (-?\d+)-(-?\d+) c (-?\d+)-(-?\d+)")


def p50(v):
    v = sorted(v)
    return v[len(v) // 2] if v else float("nan")


def main(path):
    rows = defaultdict(lambda: defaultdict(list))
    for line in open(path, errors="replace"):
        m = LINE.search(line)
        if not m:
            continue
        op, chunks, nbytes, enq, began, gpu, awake, steps, _ = m.groups()
        key = (op, int(chunks), int(nbytes))
        r = rows[key]
        r["enqueue"].append(int(enq))
        r["began"].append(int(began))
        r["gpu"].append(int(gpu))
        r["awake"].append(int(awake))
        s = [tuple(map(int, x)) for x in STEP.findall(steps)]
        if s:
            r["steps"].append(len(s))
            r["copy0"].append(s[0][2])
            r["kern0"].append(s[0][0])
            r["copy_end"].append(max(x[3] for x in s))
            r["kern_end"].append(max(x[1] for x in s))
            r["kern_sum"].append(sum(x[1] - x[0] for x in s))
            r["copy_sum"].append(sum(x[3] - x[2] for x in s))
    print(f"{'op':8} {'chunks':>6} {'MiB':>6} {'n':>4} {'enq':>5} {'began':>5} {'copy0':>6} {'copyEnd':>7} "
          f"{'kernEnd':>7} {'kernSum':>7} {'copySum':>7} {'gpu':>6} {'awake':>6} {'steps':>5}")
    for (op, chunks, nbytes), r in sorted(rows.items()):
        print(f"{op:8} {chunks:6} {nbytes / 2**20:6.1f} {len(r['gpu']):4} {p50(r['enqueue']):5} "
              f"{p50(r['began']):5} "
              f"{p50(r['copy0']):6} {p50(r['copy_end']):7} {p50(r['kern_end']):7} "
              f"{p50(r['kern_sum']):7} {p50(r['copy_sum']):7} {p50(r['gpu']):6} "
              f"{p50(r['awake']):6} {p50(r['steps']):5}")


if __name__ == "__main__":
    main(sys.argv[1])
